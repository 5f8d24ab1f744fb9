//! The remediation decision: a pure function of one BareMetalHost.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::bmc::{self, Endpoint};
use super::input::Input;

/// The BMO error text when Ironic cannot mount the virtual media; Dell's
/// remedy is an iDRAC reset.
pub const VMEDIA_FAILURE: &str = "virtual media mount failed";

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

/// Decides what to do for one watched host. `other_resets` is the number of
/// reset Jobs for this host that are still present, other than the one this
/// errorCount would create (None when not known yet).
pub fn decide(bmh: &Value, input: &Input, other_resets: Option<usize>) -> Decision {
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
    if error.to_ascii_lowercase().contains(VMEDIA_FAILURE) {
        let used = other_resets.unwrap_or(0);
        let cap = input.max_resets as usize;
        if error_count > cap as i64 || used >= cap {
            return skip(
                d,
                format!(
                    "virtual media mount failed again (errorCount {error_count}) but the reset cap of {cap} per host is reached; inspect the iDRAC by hand"
                ),
            );
        }
        d.action = Some(Action::ResetBmc);
        d.job_name = Some(reset_job_name(&host, error_count));
        d.reason = format!(
            "status.errorMessage reports a virtual media mount failure (errorCount {error_count}): resetting the iDRAC"
        );
        return d;
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
