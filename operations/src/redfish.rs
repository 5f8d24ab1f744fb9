//! A Redfish client that survives real BMCs: preemptive Basic auth, a
//! per-request timeout, retries with exponential backoff for the failures
//! BMCs really produce, and one time budget over everything.
//!
//! Which failures are retried depends on whether the request may already
//! have taken effect: a GET or a full-list PATCH is safe to repeat, a POST
//! that creates a job or resets a controller is repeated only when it
//! certainly was not processed (connection refused, 503 busy).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;

/// Everything that makes a run fail, mapped to the exit code.
#[derive(Debug, thiserror::Error)]
pub enum BmcError {
    #[error("{0}")]
    Config(String),
    #[error("BMC unreachable: {0}")]
    Unreachable(String),
    #[error("time budget of {0:?} exhausted: {1}")]
    Budget(Duration, String),
    #[error("BMC refused the credentials (HTTP {0}) on {1}")]
    Auth(u16, String),
    #[error(
        "TLS verification of the BMC failed: {0}; give the BMC's CA with --ca-file, or set spec.bmc.disableCertificateVerification on the host"
    )]
    Tls(String),
    #[error("BMC answered {method} {path} with HTTP {status}: {message}")]
    Refused {
        method: String,
        path: String,
        status: u16,
        message: String,
    },
    #[error("unexpected answer from the BMC: {0}")]
    Protocol(String),
}

impl BmcError {
    /// Process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            BmcError::Config(_) => 2,
            BmcError::Unreachable(_) | BmcError::Budget(..) => 3,
            BmcError::Refused { .. } | BmcError::Protocol(_) => 4,
            BmcError::Auth(..) => 5,
            BmcError::Tls(_) => 6,
        }
    }
}

/// Retry behaviour; the defaults are the original configuration's (12
/// tries, 5 s doubling to 30 s, 60 s per request).
#[derive(Clone, Debug)]
pub struct Policy {
    pub attempts: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub request_timeout: Duration,
    pub budget: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            attempts: 12,
            backoff_initial: Duration::from_secs(5),
            backoff_max: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            budget: Duration::from_secs(900),
        }
    }
}

impl Policy {
    /// The wait before attempt `n` (1-based retries).
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        self.backoff_initial
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

/// Whether a request may be repeated after an ambiguous failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idempotency {
    /// Repeating it cannot double an effect (GET, full-list PATCH, DELETE).
    Safe,
    /// Repeat only when it was certainly not processed.
    Once,
}

/// A BMC answer the caller interprets.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Option<Value>,
    pub location: Option<String>,
}

impl Reply {
    pub fn ok(&self) -> bool {
        self.status.is_success()
    }

    /// All MessageIds of a Redfish error body.
    pub fn message_ids(&self) -> Vec<String> {
        let Some(b) = &self.body else {
            return Vec::new();
        };
        let mut ids = Vec::new();
        for ptr in ["/error/@Message.ExtendedInfo", "/@Message.ExtendedInfo"] {
            if let Some(list) = b.pointer(ptr).and_then(Value::as_array) {
                for m in list {
                    if let Some(id) = m.get("MessageId").and_then(Value::as_str) {
                        ids.push(id.to_string());
                    }
                }
            }
        }
        ids
    }

    pub fn has_message(&self, code: &str) -> bool {
        self.message_ids().iter().any(|id| id.contains(code))
            || self
                .body
                .as_ref()
                .is_some_and(|b| b.to_string().contains(code))
    }

    /// A short, credential-free description of an error body.
    pub fn message(&self) -> String {
        let b = match &self.body {
            Some(b) => b,
            None => return "(no body)".into(),
        };
        let ext = b
            .pointer("/error/@Message.ExtendedInfo/0/Message")
            .or_else(|| b.pointer("/error/message"))
            .and_then(Value::as_str);
        let id = self.message_ids().into_iter().next();
        match (id, ext) {
            (Some(id), Some(m)) => format!("{id}: {m}"),
            (None, Some(m)) => m.to_string(),
            _ => b.to_string().chars().take(200).collect(),
        }
    }
}

/// Connection settings of one BMC.
#[derive(Clone)]
pub struct Target {
    pub base_url: String,
    pub username: String,
    pub password: String,
    pub insecure: bool,
    pub ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for Target {
    // Never print the credentials, not even in a debug dump.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("base_url", &self.base_url)
            .field("insecure", &self.insecure)
            .finish_non_exhaustive()
    }
}

pub struct Client {
    http: reqwest::Client,
    target: Target,
    pub policy: Policy,
    deadline: Instant,
    requests: AtomicU32,
}

/// A URL fit for logs: any user or password in it is dropped.
pub fn redact(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string().trim_end_matches('/').to_string()
        }
        Err(_) if raw.contains('@') => "(unparsable URL)".into(),
        Err(_) => raw.to_string(),
    }
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn is_tls_failure(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("certificate")
        || t.contains("unknownissuer")
        || t.contains("invalid peer")
        || t.contains("handshake")
}

impl Client {
    pub fn new(target: Target, policy: Policy) -> Result<Self, BmcError> {
        let parsed = url::Url::parse(&target.base_url).map_err(|e| {
            BmcError::Config(format!("BMC_URL {:?}: {e}", redact(&target.base_url)))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(BmcError::Config(format!(
                "BMC_URL {:?}: must be http(s)://host[:port]",
                redact(&target.base_url)
            )));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(BmcError::Config(
                "BMC_URL must not carry credentials; use BMC_USERNAME and BMC_PASSWORD".into(),
            ));
        }
        if target.username.is_empty() {
            return Err(BmcError::Config("BMC_USERNAME is empty".into()));
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(policy.request_timeout.min(Duration::from_secs(30)))
            .pool_max_idle_per_host(1)
            .user_agent(concat!("metalplane-bmc/", env!("CARGO_PKG_VERSION")));
        if target.insecure {
            builder = builder.tls_danger_accept_invalid_certs(true);
        }
        if let Some(pem) = &target.ca_pem {
            let cert = reqwest::Certificate::from_pem(pem)
                .map_err(|e| BmcError::Config(format!("--ca-file: {e}")))?;
            builder = builder.tls_certs_only([cert]);
        }
        let http = builder.build().map_err(|e| {
            BmcError::Config(format!("cannot build the HTTP client: {}", chain(&e)))
        })?;
        Ok(Self {
            http,
            deadline: Instant::now() + policy.budget,
            target,
            policy,
            requests: AtomicU32::new(0),
        })
    }

    pub fn base_url(&self) -> &str {
        &self.target.base_url
    }

    /// Requests sent so far, retries included.
    pub fn requests(&self) -> u32 {
        self.requests.load(Ordering::Relaxed)
    }

    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    fn budget_error(&self, what: String) -> BmcError {
        BmcError::Budget(self.policy.budget, what)
    }

    /// Sleeps, but never past the budget.
    pub async fn pause(&self, d: Duration) -> Result<(), BmcError> {
        if d >= self.remaining() {
            return Err(self.budget_error(format!("waiting {d:?} would exceed it")));
        }
        tokio::time::sleep(d).await;
        Ok(())
    }

    /// One attempt, classified: Ok(reply), Err((retryable, error)).
    async fn attempt(
        &self,
        method: &Method,
        path: &str,
        body: Option<&Value>,
        idem: Idempotency,
    ) -> Result<Reply, (bool, BmcError)> {
        let timeout = self.policy.request_timeout.min(self.remaining());
        if timeout.is_zero() {
            return Err((false, self.budget_error(format!("before {method} {path}"))));
        }
        let url = format!("{}{}", self.target.base_url.trim_end_matches('/'), path);
        // Basic auth on every request: iDRAC8 answers a 401 challenge
        // round trip with 400, so never wait to be asked.
        let mut req = self
            .http
            .request(method.clone(), &url)
            .basic_auth(&self.target.username, Some(&self.target.password))
            .header("Accept", "application/json")
            .timeout(timeout);
        if let Some(b) = body {
            req = req.json(b);
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                let text = chain(&e);
                if is_tls_failure(&text) {
                    return Err((false, BmcError::Tls(text)));
                }
                // Refused connections never reached the BMC: always safe.
                let retry = e.is_connect() || idem == Idempotency::Safe;
                let err = if e.is_timeout() {
                    BmcError::Unreachable(format!("{method} {path} timed out after {timeout:?}"))
                } else {
                    BmcError::Unreachable(format!("{method} {path}: {text}"))
                };
                return Err((retry, err));
            }
        };
        let status = resp.status();
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let is_json = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.contains("json"));
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => {
                return Err((
                    idem == Idempotency::Safe,
                    BmcError::Unreachable(format!(
                        "{method} {path}: reading the answer: {}",
                        chain(&e)
                    )),
                ));
            }
        };
        let parsed: Option<Value> = if bytes.is_empty() {
            None
        } else {
            serde_json::from_slice(&bytes).ok()
        };
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err((
                false,
                BmcError::Auth(status.as_u16(), format!("{method} {path}")),
            ));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            // Busy: the BMC did not act on it.
            return Err((
                true,
                BmcError::Unreachable(format!("{method} {path}: HTTP 503 (BMC busy)")),
            ));
        }
        let html = !bytes.is_empty() && parsed.is_none() && (!is_json || bytes.starts_with(b"<"));
        if status.is_server_error() || (html && method == Method::GET) {
            // An iDRAC that is starting serves HTML error pages.
            let what = if html {
                "a non-JSON page"
            } else {
                "a server error"
            };
            return Err((
                idem == Idempotency::Safe,
                BmcError::Unreachable(format!(
                    "{method} {path}: HTTP {} with {what}",
                    status.as_u16()
                )),
            ));
        }
        Ok(Reply {
            status,
            body: parsed,
            location,
        })
    }

    /// Sends a request with retries; returns any HTTP answer that is not a
    /// transient failure for the caller to interpret.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idem: Idempotency,
    ) -> Result<Reply, BmcError> {
        let mut retry = 0u32;
        loop {
            match self.attempt(&method, path, body, idem).await {
                Ok(r) => {
                    tracing::debug!(%method, path, status = r.status.as_u16(), "redfish");
                    return Ok(r);
                }
                Err((retryable, err)) => {
                    retry += 1;
                    if !retryable || retry >= self.policy.attempts {
                        return Err(err);
                    }
                    let wait = self.policy.backoff(retry);
                    if wait >= self.remaining() {
                        return Err(self.budget_error(err.to_string()));
                    }
                    tracing::warn!(%method, path, attempt = retry, wait = ?wait, error = %err, "retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    pub async fn get(&self, path: &str) -> Result<Value, BmcError> {
        let r = self
            .send(Method::GET, path, None, Idempotency::Safe)
            .await?;
        if !r.ok() {
            return Err(BmcError::Refused {
                method: "GET".into(),
                path: path.into(),
                status: r.status.as_u16(),
                message: r.message(),
            });
        }
        r.body
            .ok_or_else(|| BmcError::Protocol(format!("GET {path} returned no JSON body")))
    }

    /// One GET with no retries, for probing whether the BMC answers.
    pub async fn probe(&self, path: &str, timeout: Duration) -> bool {
        let url = format!("{}{}", self.target.base_url.trim_end_matches('/'), path);
        self.requests.fetch_add(1, Ordering::Relaxed);
        let r = self
            .http
            .get(&url)
            .basic_auth(&self.target.username, Some(&self.target.password))
            .timeout(timeout.min(self.remaining().max(Duration::from_millis(1))))
            .send()
            .await;
        match r {
            Ok(resp) if resp.status().is_success() => resp.json::<Value>().await.is_ok(),
            _ => false,
        }
    }
}
