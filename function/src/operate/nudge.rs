//! Host status within seconds: Crossplane watches what an XR composes, not
//! the BareMetalHosts it only reads (required resources), so a claimed
//! host's transition would wait for the XR's next poll. The WatchOperation
//! sees every host change; when what the XR shows of its host changed, the
//! operation writes one annotation on the owning MetalCluster, and that
//! write is a watch event that makes Crossplane reconcile it now.

use serde_json::{Value, json};

use crate::hosts;
use crate::names::Names;
use crate::spec;
use crate::status;

/// Requirement name of the MetalCluster that claimed the watched host.
pub const OWNER_REQUIREMENT: &str = "owner";

/// Desired-resource name of the owner's annotation patch.
pub const OWNER_NUDGE: &str = "owner-host-observed";

/// The annotation: the last host transition the operation passed on,
/// readable (`gpu-0: provisioned, power on, OK`).
pub const HOST_OBSERVED_ANNOTATION: &str = "metal.kube.farm/host-observed";

/// The MetalCluster (namespace, name) that claimed a host: CAPM3 labels a
/// claimed host with its Cluster's name, which MetalPlane names
/// `<metalcluster>-cluster`. Hosts of hand-made Clusters may match too;
/// the owner is then looked up and not found, and nothing is written.
pub fn owner(bmh: &Value) -> Option<(&str, &str)> {
    let cluster = bmh
        .pointer("/metadata/labels")
        .and_then(|l| l.get(hosts::CLUSTER_NAME_LABEL))
        .and_then(Value::as_str)?;
    let ns = bmh.pointer("/metadata/namespace").and_then(Value::as_str)?;
    Some((ns, Names::xr_of_cluster(cluster)?))
}

/// What the MetalCluster's `status.host` shows of a host, as one line:
/// equal lines mean the XR has nothing new to show.
pub fn observed(bmh: &Value) -> String {
    let s = status::host_summary(bmh);
    let mut line = format!(
        "{}: {}, power {}, {}",
        s.name,
        if s.provisioning_state.is_empty() {
            "unknown"
        } else {
            &s.provisioning_state
        },
        if s.powered_on { "on" } else { "off" },
        if s.operational_status.is_empty() {
            "unknown"
        } else {
            &s.operational_status
        },
    );
    if let Some(t) = s.error_type.filter(|t| !t.is_empty()) {
        line.push_str(&format!(", {t}"));
    }
    if let Some(n) = s.error_count.filter(|n| *n > 0) {
        line.push_str(&format!(" (attempt {n})"));
    }
    line
}

/// The owner's annotation patch, or nothing when the owner already shows
/// this line (a write would only cost a reconcile). Applied server-side it
/// changes that one annotation; were the owner deleted since it was read,
/// the apply would have to create a MetalCluster without `spec`, which its
/// schema refuses, so a deleted cluster is never brought back.
pub fn patch(owner: &Value, bmh: &Value) -> Option<Value> {
    let line = observed(bmh);
    let shown = owner
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(HOST_OBSERVED_ANNOTATION))
        .and_then(Value::as_str);
    if shown == Some(line.as_str()) {
        return None;
    }
    Some(json!({
        "apiVersion": spec::API_VERSION,
        "kind": spec::KIND,
        "metadata": {
            "name": owner.pointer("/metadata/name")?.as_str()?,
            "namespace": owner.pointer("/metadata/namespace")?.as_str()?,
            "annotations": {HOST_OBSERVED_ANNOTATION: line},
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(labels: Value, status: Value) -> Value {
        json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "metadata": {"name": "gpu-0", "namespace": "metal", "labels": labels},
            "status": status,
        })
    }

    fn xr(annotation: Option<&str>) -> Value {
        let mut x = json!({
            "apiVersion": spec::API_VERSION,
            "kind": spec::KIND,
            "metadata": {"name": "r730", "namespace": "metal"},
        });
        if let Some(a) = annotation {
            x["metadata"]["annotations"] = json!({HOST_OBSERVED_ANNOTATION: a});
        }
        x
    }

    const PROVISIONED: &str = "gpu-0: provisioned, power on, OK";

    fn provisioned() -> Value {
        host(
            json!({"cluster.x-k8s.io/cluster-name": "r730-cluster"}),
            json!({"provisioning": {"state": "provisioned"}, "poweredOn": true, "operationalStatus": "OK"}),
        )
    }

    #[test]
    fn the_owner_is_named_by_capm3s_cluster_label() {
        assert_eq!(owner(&provisioned()), Some(("metal", "r730")));
        let other = host(
            json!({"cluster.x-k8s.io/cluster-name": "hand-made"}),
            json!({}),
        );
        assert_eq!(owner(&other), None);
        assert_eq!(owner(&host(json!({}), json!({}))), None);
    }

    #[test]
    fn one_line_of_what_the_xr_shows() {
        assert_eq!(observed(&provisioned()), PROVISIONED);
        let failed = host(
            json!({}),
            json!({"provisioning": {"state": "provisioned"}, "poweredOn": false,
                   "operationalStatus": "error", "errorType": "power management error",
                   "errorMessage": "no route", "errorCount": 2}),
        );
        assert_eq!(
            observed(&failed),
            "gpu-0: provisioned, power off, error, power management error (attempt 2)"
        );
    }

    #[test]
    fn a_change_is_written_once() {
        let p = patch(&xr(None), &provisioned()).expect("a first line is written");
        assert_eq!(
            p["metadata"]["annotations"][HOST_OBSERVED_ANNOTATION],
            PROVISIONED
        );
        assert_eq!(p["metadata"]["name"], "r730");
        assert_eq!(p.get("spec"), None, "the patch touches one annotation");
        assert_eq!(patch(&xr(Some(PROVISIONED)), &provisioned()), None);
        assert!(
            patch(
                &xr(Some("gpu-0: provisioning, power on, OK")),
                &provisioned()
            )
            .is_some()
        );
    }
}
