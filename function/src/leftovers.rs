//! A MetalCluster deleted in the background (plain `kubectl delete`) is
//! gone at once, while its Cluster and IPPool are still being torn down:
//! CAPI and CAPM3 own them too, so the garbage collector only drops the
//! gone MetalCluster's reference and waits for the Cluster. A new
//! MetalCluster of the same name would compose onto them and adopt them
//! mid-teardown; in the lab (`lab perf`, one bring-up at a time) its node's
//! IP claim met the old address still allocated, `Exhausted IP Pools`, which
//! IPAM never retries. So a MetalCluster that has composed nothing yet
//! composes nothing while an object labelled as composed for its name is
//! controlled by anything but itself. Crossplane reads these from its
//! informers (list and watch, which it holds for every composed kind).

use serde_json::Value;

use crate::builders::{capi, ipam, metal3};

/// Crossplane's label on every composed object: the XR's name.
pub const COMPOSITE_LABEL: &str = "crossplane.io/composite";

/// The kinds read, by requirement name: the ones CAPI, CAPM3 or IPAM also
/// own (the Cluster), so they outlive a MetalCluster deleted in the
/// background, and the Cluster itself.
pub const KINDS: [(&str, &str, &str); 6] = [
    ("same-name-cluster", capi::CLUSTER_API_VERSION, "Cluster"),
    (
        "same-name-controlplane",
        capi::KCP_API_VERSION,
        "KubeadmControlPlane",
    ),
    (
        "same-name-metal3cluster",
        metal3::API_VERSION,
        "Metal3Cluster",
    ),
    (
        "same-name-machinetemplates",
        metal3::API_VERSION,
        "Metal3MachineTemplate",
    ),
    (
        "same-name-datatemplates",
        metal3::API_VERSION,
        "Metal3DataTemplate",
    ),
    ("same-name-ippool", ipam::API_VERSION, "IPPool"),
];

/// The label selector of every object composed for a MetalCluster named
/// `xr`, this one or an earlier one of the same name.
pub fn selector(xr: &str) -> std::collections::HashMap<String, String> {
    std::collections::HashMap::from([(COMPOSITE_LABEL.to_string(), xr.to_string())])
}

/// The UID of `obj`'s controller owner, if it has one.
fn controller_uid(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

/// Each object (kind, object) not controlled by the XR of UID `xr_uid`,
/// described for the status: `Cluster metal/r730-cluster (being deleted)`.
pub fn not_ours(objects: &[(&str, &Value)], xr_uid: &str) -> Vec<String> {
    objects
        .iter()
        .filter(|(_, o)| controller_uid(o) != Some(xr_uid))
        .map(|(kind, o)| {
            let name = o
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let why = if o.pointer("/metadata/deletionTimestamp").is_some() {
                "being deleted"
            } else if controller_uid(o).is_some() {
                "controlled by another owner"
            } else {
                "without a controller"
            };
            format!("{kind} {name} ({why})")
        })
        .collect()
}

/// The status message while waiting.
pub fn message(left: &[String]) -> String {
    format!(
        "waiting before composing anything: {} of a previous MetalCluster of this name still exist; \
         they go once its teardown ends (`kubectl delete --cascade=foreground` waits for it)",
        left.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owned(uid: &str, deleting: bool) -> Value {
        let mut o = json!({"metadata": {"name": "r730-cluster", "ownerReferences": [
            {"kind": "Cluster", "uid": "capi", "controller": false},
            {"kind": "MetalCluster", "uid": uid, "controller": true}
        ]}});
        if deleting {
            o["metadata"]["deletionTimestamp"] = json!("2026-12-07T23:36:00Z");
        }
        o
    }

    #[test]
    fn own_objects_are_not_left_over() {
        let c = owned("new", false);
        assert!(not_ours(&[("Cluster", &c)], "new").is_empty());
    }

    #[test]
    fn a_previous_xrs_objects_are_named_with_why() {
        let old = owned("old", true);
        let pool = json!({"metadata": {"name": "r730-pool", "ownerReferences": [
            {"kind": "Cluster", "uid": "capi", "controller": false}
        ]}});
        let left = not_ours(&[("Cluster", &old), ("IPPool", &pool)], "new");
        assert_eq!(
            left,
            vec![
                "Cluster r730-cluster (being deleted)",
                "IPPool r730-pool (without a controller)"
            ]
        );
        assert!(message(&left).contains("IPPool r730-pool"));
        let other = owned("old", false);
        assert_eq!(
            not_ours(&[("Cluster", &other)], "new"),
            vec!["Cluster r730-cluster (controlled by another owner)"]
        );
    }
}
