//! The remediation decision: a pure function of one BareMetalHost.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::bmc::{self, Endpoint};
use super::input::Input;

/// The BMO error text when Ironic cannot mount the virtual media; Dell's
/// remedy is an iDRAC reset.
pub const VMEDIA_FAILURE: &str = "virtual media mount failed";

/// Annotation on the host recording MetalPlane's iDRAC resets, so the
/// budget survives the Jobs' TTL: `{"count": n, "errorCount": e, "at":
/// unix seconds}`.
pub const RESETS_ANNOTATION: &str = "metal.kube.farm/bmc-resets";

/// What the host's annotation records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResetRecord {
    /// Resets in this failure episode (back to 0 once the host is healthy).
    pub count: u32,
    /// The errorCount the last reset answered.
    pub error_count: i64,
    /// When it was requested (unix seconds).
    pub at: i64,
}

impl ResetRecord {
    pub fn read(bmh: &Value) -> Option<ResetRecord> {
        let raw = bmh
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(RESETS_ANNOTATION))
            .and_then(Value::as_str)?;
        serde_json::from_str(raw).ok()
    }
}

/// States where Ironic boots the host from virtual media, which an iDRAC
/// with an installed OS first in its UEFI order never does.
pub const BOOT_ORDER_STATES: [&str; 3] = ["inspecting", "provisioning", "deprovisioning"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    ResetBmc,
    FixBootOrder,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::ResetBmc => "reset-bmc",
            Action::FixBootOrder => "fix-boot-order",
        }
    }
}

/// Everything the Job builder needs, and what the output reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub host: String,
    pub namespace: String,
    pub state: String,
    pub action: Option<Action>,
    pub reason: String,
    pub job_name: Option<String>,
    pub endpoint: Option<Endpoint>,
    pub credentials_name: Option<String>,
    pub verify_tls: bool,
    pub error_count: i64,
    /// The reset record to write on the host, when it changes.
    pub record: Option<ResetRecord>,
    /// The reset budget is spent: worth a Warning, not just an output line.
    pub exhausted: bool,
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// A Job name within 63 characters: as is when it fits, else cut and
/// suffixed with a short hash of the full name so distinct inputs stay
/// distinct.
pub fn fit_name(full: &str) -> String {
    let clean: String = full
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let clean = clean.trim_matches('-').to_string();
    if clean.len() <= 63 && clean == full {
        return clean;
    }
    let digest = Sha256::digest(full.as_bytes());
    let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let cut: String = clean.chars().take(63 - 9).collect();
    format!("{}-{hash}", cut.trim_end_matches('-'))
}

pub fn reset_job_name(host: &str, error_count: i64) -> String {
    fit_name(&format!("{host}-bmcreset-{error_count}"))
}

pub fn boot_job_name(host: &str, state: &str, consumer: Option<&str>) -> String {
    let short: String = state.chars().take(6).collect();
    fit_name(&format!("{host}-{short}-{}", consumer.unwrap_or("none")))
}

/// Decides what to do for one watched host at `now` (unix seconds).
/// `other_resets` is the number of reset Jobs for this host that are still
/// present, other than the one this errorCount would create (None when not
/// known yet); the host's own record counts too, as Jobs expire.
pub fn decide(bmh: &Value, input: &Input, other_resets: Option<usize>, now: i64) -> Decision {
    let host = s(bmh, "/metadata/name").to_string();
    let state = s(bmh, "/status/provisioning/state").to_string();
    let error_count = bmh
        .pointer("/status/errorCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut d = Decision {
        host: host.clone(),
        namespace: s(bmh, "/metadata/namespace").to_string(),
        state: state.clone(),
        action: None,
        reason: String::new(),
        job_name: None,
        endpoint: None,
        credentials_name: None,
        verify_tls: bmh
            .pointer("/spec/bmc/disableCertificateVerification")
            .and_then(Value::as_bool)
            != Some(true),
        error_count,
        record: None,
        exhausted: false,
    };
    let skip = |mut d: Decision, why: String| {
        d.reason = why;
        d
    };

    if host.is_empty() {
        return skip(d, "the watched resource has no metadata.name".into());
    }
    let credentials = s(bmh, "/spec/bmc/credentialsName");
    if credentials.is_empty() {
        return skip(
            d,
            "spec.bmc.credentialsName is not set: no credentials to reach the BMC".into(),
        );
    }
    d.credentials_name = Some(credentials.to_string());
    let address = s(bmh, "/spec/bmc/address");
    if address.is_empty() {
        return skip(d, "spec.bmc.address is not set".into());
    }
    let endpoint = match bmc::parse_address(address) {
        Ok(e) => e,
        Err(e) => return skip(d, e),
    };
    if !input.covers(&endpoint.driver) {
        let why = format!(
            "BMC driver {} is not covered (input.drivers: {})",
            endpoint.driver,
            input.drivers.join(", ")
        );
        return skip(d, why);
    }
    d.endpoint = Some(endpoint);
    let annotations = bmh
        .pointer("/metadata/annotations")
        .and_then(Value::as_object);
    if let Some(a) = annotations
        && let Some(k) = [
            "baremetalhost.metal3.io/paused",
            "baremetalhost.metal3.io/detached",
        ]
        .into_iter()
        .find(|k| a.contains_key(*k))
    {
        return skip(
            d,
            format!("the host is annotated {k}: BMO leaves it alone, so do we"),
        );
    }

    let error = s(bmh, "/status/errorMessage");
    let record = ResetRecord::read(bmh);
    if error.to_ascii_lowercase().contains(VMEDIA_FAILURE) {
        return reset_decision(d, input, other_resets, record, now);
    }
    // A healthy host ends the failure episode: the budget is whole again.
    if error.is_empty() && error_count == 0 && record.is_some_and(|r| r.count > 0) {
        d.record = Some(ResetRecord::default());
    }

    if BOOT_ORDER_STATES.contains(&state.as_str()) {
        let consumer = bmh
            .pointer("/spec/consumerRef/name")
            .and_then(Value::as_str);
        d.action = Some(Action::FixBootOrder);
        d.job_name = Some(boot_job_name(&host, &state, consumer));
        d.reason = format!("the host entered {state}: the virtual media drive must boot first");
        return d;
    }
    let shown = if state.is_empty() {
        "(none)"
    } else {
        state.as_str()
    };
    skip(d, format!("provisioning state {shown} needs no action"))
}

/// The virtual media failure: one iDRAC reset per errorCount, at most
/// `max_resets` per failure episode, never sooner than
/// `reset_interval_seconds` after the last one.
fn reset_decision(
    mut d: Decision,
    input: &Input,
    other_resets: Option<usize>,
    record: Option<ResetRecord>,
    now: i64,
) -> Decision {
    let e = d.error_count;
    let rec = record.unwrap_or_default();
    if record.is_some() && rec.error_count == e && rec.count > 0 {
        // A repeat of the same failure (another field of the host changed):
        // the Job for it was applied when the record was written.
        d.reason = format!(
            "virtual media mount failed (errorCount {e}); the iDRAC was already reset for this errorCount"
        );
        return d;
    }
    let used = (rec.count as usize).max(other_resets.unwrap_or(0));
    let cap = input.max_resets as usize;
    if used >= cap {
        d.exhausted = true;
        d.reason = format!(
            "virtual media mount failed again (errorCount {e}) but the reset budget of {cap} per host is spent ({used} resets); inspect the iDRAC by hand, then remove annotation {RESETS_ANNOTATION} to allow more"
        );
        return d;
    }
    let since = now - rec.at;
    let interval = i64::from(input.reset_interval_seconds);
    if rec.count > 0 && since < interval {
        // BMO retries after 2^errorCount minutes; an early retry fails
        // while the iDRAC still restarts. The next failure comes back.
        d.reason = format!(
            "virtual media mount failed (errorCount {e}) {since} s after the last iDRAC reset; it may still be restarting, no reset before {interval} s"
        );
        return d;
    }
    d.action = Some(Action::ResetBmc);
    d.job_name = Some(reset_job_name(&d.host, e));
    d.record = Some(ResetRecord {
        count: used as u32 + 1,
        error_count: e,
        at: now,
    });
    d.reason = format!(
        "status.errorMessage reports a virtual media mount failure (errorCount {e}): resetting the iDRAC ({} of {cap})",
        used + 1
    );
    d
}
