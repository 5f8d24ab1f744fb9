//! The pool's BareMetalHosts as CAPM3 and BMO see them: which one is
//! claimed, which could be, which are on their way, and which report an
//! error. Pure reads of the required resources.
//!
//! The rules follow CAPM3 v1.13 (`baremetal/metal3machine_manager.go`) and
//! BMO v0.13 exactly; each function cites the code it mirrors.

use serde_json::Value;

use crate::names::Names;

/// The label CAPM3 puts on a BareMetalHost it claimed for a cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// BMO's pause annotation (`metal3api.PausedAnnotation`).
pub const PAUSED_ANNOTATION: &str = "baremetalhost.metal3.io/paused";
/// CAPM3 v1.13's unhealthy annotation (`infrav1.UnhealthyAnnotation`) and
/// the deprecated one it still honours.
pub const UNHEALTHY_ANNOTATION: &str = "capm3.metal3.io/unhealthy";
pub const UNHEALTHY_ANNOTATION_DEPRECATED: &str = "capi.metal3.io/unhealthy";
/// CAPM3's node reuse label; its value names the owning KCP or MachineDeployment.
pub const NODE_REUSE_LABEL: &str = "infrastructure.cluster.x-k8s.io/node-reuse";

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn label<'a>(h: &'a Value, key: &str) -> Option<&'a str> {
    h.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

fn has_annotation(h: &Value, key: &str) -> bool {
    h.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(key))
}

pub fn name(h: &Value) -> &str {
    str_at(h, "/metadata/name").unwrap_or_default()
}

pub fn state(h: &Value) -> &str {
    str_at(h, "/status/provisioning/state").unwrap_or_default()
}

fn consumer(h: &Value) -> Option<&Value> {
    h.pointer("/spec/consumerRef").filter(|c| !c.is_null())
}

/// Whether this host is claimed by the cluster `names.cluster`.
///
/// CAPM3's `Associate` sets, in one update, the host's consumerRef to the
/// Metal3Machine (`setHostConsumerRef`) and the label
/// `cluster.x-k8s.io/cluster-name` to the Machine's cluster (`setHostLabel`);
/// on release it removes both. Metal3Machine names are the Machine's
/// (`<kcp>-<random>`), so the label, not the name, says whose host it is.
pub fn is_claimed_by(h: &Value, names: &Names) -> bool {
    label(h, CLUSTER_NAME_LABEL) == Some(names.cluster.as_str())
        && consumer(h).is_some_and(|c| str_at(c, "/kind") == Some("Metal3Machine"))
}

/// The BareMetalHost CAPM3 claimed for this cluster.
pub fn claimed_host<'a>(hosts: &'a [Value], names: &Names) -> Option<&'a Value> {
    hosts.iter().find(|h| is_claimed_by(h, names))
}

/// Why CAPM3 would pass this host over, or None when it could claim it.
///
/// Mirrors `chooseHost` in CAPM3 v1.13, in its order: a consumerRef; a node
/// reuse label naming another owner (this cluster's control plane is the
/// KCP named like the cluster); a deletion timestamp; a non-empty
/// `status.errorMessage`; the paused or unhealthy annotations (current and
/// deprecated); and any provisioning state but `ready` or `available`.
pub fn unclaimable_reason(h: &Value, names: &Names) -> Option<String> {
    if consumer(h).is_some() {
        return Some("claimed by another cluster".into());
    }
    if let Some(owner) = label(h, NODE_REUSE_LABEL)
        && owner != names.cluster
    {
        return Some(format!("kept for reuse by {owner}"));
    }
    if h.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return Some("being deleted".into());
    }
    if let Some(e) = error(h) {
        return Some(e.summary());
    }
    if has_annotation(h, PAUSED_ANNOTATION) {
        return Some("paused".into());
    }
    if has_annotation(h, UNHEALTHY_ANNOTATION) || has_annotation(h, UNHEALTHY_ANNOTATION_DEPRECATED)
    {
        return Some("marked unhealthy".into());
    }
    match state(h) {
        "ready" | "available" => None,
        "" => Some("state: new".into()),
        s => Some(format!("state: {s}")),
    }
}

pub fn is_claimable(h: &Value, names: &Names) -> bool {
    unclaimable_reason(h, names).is_none()
}

/// States from which BMO moves an unconsumed host to `available` on its
/// own (BMO v0.13's state machine: none -> registering -> inspecting ->
/// preparing/match profile -> available; deprovisioning ends in available).
pub const ON_THE_WAY: [&str; 6] = [
    "",
    "registering",
    "inspecting",
    "match profile",
    "preparing",
    "deprovisioning",
];

/// Whether an unconsumed, healthy host is on its way to `available`.
pub fn is_on_the_way(h: &Value, names: &Names) -> bool {
    consumer(h).is_none()
        && error(h).is_none()
        && h.pointer("/metadata/deletionTimestamp")
            .is_none_or(Value::is_null)
        && label(h, NODE_REUSE_LABEL).is_none_or(|o| o == names.cluster)
        && ON_THE_WAY.contains(&state(h))
}

/// A host's error as BMO reports it (`setErrorMessage`: errorType,
/// errorMessage, operationalStatus `error`, errorCount incremented on each
/// failed attempt, all cleared by `clearError` once an action succeeds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostError {
    pub error_type: String,
    pub message: String,
    pub count: u64,
}

impl HostError {
    /// `registration error: The BMC secret metal/x does not exist`
    pub fn summary(&self) -> String {
        match (self.error_type.is_empty(), self.message.is_empty()) {
            (false, false) => format!("{}: {}", self.error_type, self.message),
            (false, true) => self.error_type.clone(),
            (true, _) => self.message.clone(),
        }
    }
}

pub fn error(h: &Value) -> Option<HostError> {
    let error_type = str_at(h, "/status/errorType").unwrap_or_default();
    let message = str_at(h, "/status/errorMessage").unwrap_or_default();
    let operational = str_at(h, "/status/operationalStatus").unwrap_or_default();
    if error_type.is_empty() && message.is_empty() && operational != "error" {
        return None;
    }
    Some(HostError {
        error_type: error_type.to_string(),
        message: message.to_string(),
        count: h
            .pointer("/status/errorCount")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}
