//! Rolling changes (pure decisions on observed state): which version a
//! worker pool may run while the control plane upgrades, and which old
//! templates must stay because machines still refer to them.
//!
//! Cluster API's version skew rule: the control plane upgrades first, the
//! kubelets follow. A pool therefore keeps its observed version and
//! templates until the KubeadmControlPlane reports every machine at the
//! new version; then it rolls once onto everything the spec asks for.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::builders::{metal3, workers};
use crate::spec::MetalCluster;
use crate::status::rollout;
pub use crate::status::{KCP, md_version};

/// Whether the KubeadmControlPlane runs the spec's version on every
/// machine: its spec and status say so and its rollout is complete.
pub fn control_plane_at_version(mc: &MetalCluster, observed: &BTreeMap<String, Value>) -> bool {
    let Some(kcp) = observed.get(KCP) else {
        return false;
    };
    let v = mc.spec.kubernetes.version.as_str();
    kcp.pointer("/spec/version").and_then(Value::as_str) == Some(v)
        && kcp.pointer("/status/version").and_then(Value::as_str) == Some(v)
        && rollout(Some(kcp)).is_some_and(|r| r.complete())
}

/// The composition resource name of the set a Machine belongs to: the
/// control plane, or the pool whose MachineDeployment `md_resource` maps
/// its `cluster.x-k8s.io/deployment-name` label to.
fn machine_set<'a>(m: &Value, pools: &'a [(String, String)]) -> Option<&'a str> {
    let labels = m.pointer("/metadata/labels")?;
    if labels.get("cluster.x-k8s.io/control-plane").is_some() {
        return Some(KCP);
    }
    let md = labels
        .get(workers::DEPLOYMENT_NAME_LABEL)
        .and_then(Value::as_str)?;
    pools
        .iter()
        .find(|(_, name)| name == md)
        .map(|(resource, _)| resource.as_str())
}

/// Machine sets whose Machines do not all run the version their owner
/// now asks for: right after a version change a MachineDeployment may
/// report every replica up to date before its MachineSets have looked at
/// their machines, which would read as a finished rollout. Such a set's
/// observed status is taken as not yet caught up (its observedGeneration
/// cleared), so it counts as rolling. Returns whether any set is behind
/// (an upgrade still rolls).
pub fn distrust_stale_sets(
    mc: &MetalCluster,
    names: &crate::names::Names,
    observed: &mut BTreeMap<String, Value>,
    machines: &[Value],
) -> bool {
    let pools: Vec<(String, String)> = mc
        .spec
        .workers
        .iter()
        .map(|w| {
            (
                workers::resource_name(w),
                names.pool(&mc.name, &w.name).machines,
            )
        })
        .collect();
    let mut stale: Vec<String> = Vec::new();
    for m in machines {
        if m.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let Some(set) = machine_set(m, &pools) else {
            continue;
        };
        let want = observed.get(set).and_then(|o| {
            o.pointer("/spec/version")
                .or_else(|| o.pointer("/spec/template/spec/version"))
                .and_then(Value::as_str)
        });
        let has = m.pointer("/spec/version").and_then(Value::as_str);
        if want.is_some() && has != want {
            stale.push(set.to_string());
        }
    }
    let behind = !stale.is_empty();
    for set in stale {
        if let Some(status) = observed
            .get_mut(&set)
            .and_then(|o| o.get_mut("status"))
            .and_then(Value::as_object_mut)
        {
            status.remove("observedGeneration");
        }
    }
    behind
}

/// The fields of a MachineDeployment that build its machines.
const MACHINE_FIELDS: [&str; 3] = [
    "/spec/template/spec/version",
    "/spec/template/spec/bootstrap/configRef/name",
    "/spec/template/spec/infrastructureRef/name",
];

/// Holds a pool at its observed version while the control plane is not
/// yet at the spec's: the desired MachineDeployment keeps the observed
/// version and template references (so nothing of the pool rolls), while
/// its replicas and everything else follow the spec. Returns whether it
/// held. A pool not observed yet is built as the spec says.
pub fn hold_pool(desired_md: &mut Value, observed_md: Option<&Value>, cp_at_version: bool) -> bool {
    let Some(obs) = observed_md else {
        return false;
    };
    if cp_at_version || md_version(obs) == md_version(desired_md) {
        return false;
    }
    for ptr in MACHINE_FIELDS {
        if let (Some(v), Some(slot)) = (obs.pointer(ptr), desired_md.pointer_mut(ptr)) {
            *slot = v.clone();
        }
    }
    true
}

/// The composition resource name of the set a template builds machines
/// for (KCP or a pool's MachineDeployment), if it is a template: the
/// content-named `<kind>.<hash>` ones and the fixed names before them.
pub fn template_owner(resource: &str) -> Option<&str> {
    let cp = [metal3::CP_MACHINE_TEMPLATE, metal3::CP_DATA_TEMPLATE];
    if cp
        .iter()
        .any(|k| resource == *k || resource.starts_with(&format!("{k}.")))
    {
        return Some(KCP);
    }
    let (owner, rest) = resource.split_once('.')?;
    if !workers::is_machine_deployment(owner) {
        return None;
    }
    let kind = rest.split('.').next().unwrap_or_default();
    ["datatemplate", "machinetemplate", "config"]
        .contains(&kind)
        .then_some(owner)
}

/// The template names a machine set's object refers to.
fn references(owner: &Value) -> Vec<&str> {
    [
        "/spec/machineTemplate/spec/infrastructureRef/name",
        "/spec/template/spec/bootstrap/configRef/name",
        "/spec/template/spec/infrastructureRef/name",
        "/spec/template/spec/dataTemplate/name",
    ]
    .iter()
    .filter_map(|p| owner.pointer(p).and_then(Value::as_str))
    .collect()
}

fn name(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Old templates that stay: every observed template the desired graph no
/// longer has, while its set still rolls (the observed owner refers to
/// other templates than the desired one, or has not completed its
/// rollout: machines built from it may remain) or while the desired graph
/// still refers to it (a held pool). Returned as manifests to apply
/// unchanged; once the set is done, they are left out and deleted.
pub fn kept_templates(
    desired: &[(Cow<'static, str>, Value)],
    observed: &BTreeMap<String, Value>,
) -> Vec<(String, Value)> {
    let get = |k: &str| desired.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    let mut referenced: Vec<String> = desired
        .iter()
        .flat_map(|(_, v)| references(v))
        .map(String::from)
        .collect();
    let mut kept: Vec<(String, Value)> = Vec::new();
    // Machine templates first: a kept one keeps its data template.
    let mut old: Vec<(&String, &Value)> = observed
        .iter()
        .filter(|(k, v)| get(k).is_none() && !v.is_null())
        .filter(|(k, _)| template_owner(k).is_some())
        .collect();
    old.sort_by_key(|(k, _)| k.contains("datatemplate"));
    for (resource, obj) in old {
        let Some(owner) = template_owner(resource) else {
            continue;
        };
        let Some(want) = get(owner) else {
            // The set itself is gone: so are its templates.
            continue;
        };
        let have = observed.get(owner);
        let settled = have.is_some_and(|h| {
            references(h) == references(want) && rollout(Some(h)).is_some_and(|r| r.complete())
        });
        if settled && !referenced.iter().any(|r| r == name(obj)) {
            continue;
        }
        let manifest = json!({
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": {"name": name(obj), "namespace": obj.pointer("/metadata/namespace")},
            "spec": obj.get("spec"),
        });
        if let Some(d) = manifest
            .pointer("/spec/template/spec/dataTemplate/name")
            .and_then(Value::as_str)
        {
            referenced.push(d.to_string());
        }
        kept.push((resource.clone(), manifest));
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_know_their_set() {
        assert_eq!(template_owner("metal3machinetemplate.0a1b2c3d"), Some(KCP));
        assert_eq!(template_owner("metal3datatemplate"), Some(KCP));
        assert_eq!(
            template_owner("worker-gpu.config.0a1b2c3d"),
            Some("worker-gpu")
        );
        assert_eq!(
            template_owner("worker-gpu.machinetemplate"),
            Some("worker-gpu")
        );
        assert_eq!(template_owner("worker-gpu.ippool"), None);
        assert_eq!(template_owner("worker-gpu"), None);
        assert_eq!(template_owner("cluster"), None);
    }
}
