//! The peer MetalPlane's overhead is measured against: the same graph as
//! hand-written manifests. The function renders the built-in example once,
//! offline, in its final shape (Cilium's family included, as a person
//! would write it from the start); `kubectl apply` puts it on the lab, and
//! the same readiness the function reports decides when it is up. Usages
//! are left out: they are Crossplane's deletion ordering, which by hand is
//! the order of the `kubectl delete`s below.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use metalplane::render::RESOURCE_NAME_ANNOTATION;
use serde_json::{Value, json};

use super::super::kube::str_at;
use super::super::{Lab, LabError};

/// The hand-made cluster's name: not `perf-*`, so nothing of the
/// MetalCluster runs counts it.
pub const NAME: &str = "hand";

/// A resource selector kubectl resolves (`kind.group`).
fn resource(obj: &Value) -> String {
    let kind = str_at(obj, "/kind").to_lowercase();
    match str_at(obj, "/apiVersion").split_once('/') {
        Some((group, _)) => format!("{kind}.{group}"),
        None => kind,
    }
}

/// The example's graph in its final shape, by composition resource name,
/// without Usages.
pub fn manifests(xr: &Value, hosts: &[Value]) -> Result<BTreeMap<String, Value>, LabError> {
    // An observed, Ready Cilium release: the function then composes every
    // family a Ready MetalCluster has.
    let cilium = json!({
        "apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "Release",
        "metadata": {"name": "cilium", "annotations": {RESOURCE_NAME_ANNOTATION: "cilium"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    });
    let rendered = metalplane::render::render(xr, &[cilium], hosts)
        .map_err(|e| LabError::new(format!("rendering the by-hand graph: {e}")))?;
    Ok(rendered
        .documents
        .into_iter()
        .skip(1)
        .filter(|o| str_at(o, "/kind") != "Usage")
        .map(|mut o| {
            let name = str_at(
                &o,
                &format!(
                    "/metadata/annotations/{}",
                    RESOURCE_NAME_ANNOTATION.replace('/', "~1")
                ),
            )
            .to_string();
            // What Crossplane adds: by hand there is no composite.
            if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("ownerReferences");
                for (key, field) in [
                    (RESOURCE_NAME_ANNOTATION, "annotations"),
                    (metalplane::render::COMPOSITE_LABEL, "labels"),
                ] {
                    if let Some(Value::Object(f)) = m.get_mut(field) {
                        f.remove(key);
                    }
                }
            }
            (name, o)
        })
        .collect())
}

/// What one by-hand bring-up took.
pub struct BringUp {
    pub objects: usize,
    pub ready_s: f64,
}

/// Applies the graph and waits until every object is ready as the function
/// would report it.
pub fn bring_up(
    lab: &Lab,
    graph: &BTreeMap<String, Value>,
    timeout: Duration,
) -> Result<BringUp, LabError> {
    let t = Instant::now();
    lab.kube
        .apply(&graph.values().cloned().collect::<Vec<_>>())?;
    let ready = || {
        graph.iter().all(|(name, obj)| {
            let got = lab.kube.get(
                &resource(obj),
                str_at(obj, "/metadata/name"),
                Some(str_at(obj, "/metadata/namespace")),
            );
            metalplane::status::is_ready(name, got.as_ref())
        })
    };
    super::super::procs::wait_for("the by-hand graph ready", timeout, ready)?;
    Ok(BringUp {
        objects: graph.len(),
        ready_s: t.elapsed().as_secs_f64(),
    })
}

/// Deletes the graph in the order Usages give a MetalCluster (Cilium before
/// its cluster, the cluster before its templates and pool), each waited for.
pub fn tear_down(lab: &Lab, graph: &BTreeMap<String, Value>) -> Result<(), LabError> {
    let rank = |obj: &Value| match str_at(obj, "/kind") {
        "Release" | "Object" => 0,
        "ProviderConfig" => 1,
        "Cluster" => 2,
        _ => 3,
    };
    let mut objs: Vec<&Value> = graph.values().collect();
    objs.sort_by_key(|o| rank(o));
    for step in 0..4 {
        let mut args: Vec<String> = vec!["delete".into()];
        let these: Vec<&&Value> = objs.iter().filter(|o| rank(o) == step).collect();
        if these.is_empty() {
            continue;
        }
        for o in &these {
            args.push(format!("{}/{}", resource(o), str_at(o, "/metadata/name")));
        }
        let ns = str_at(these[0], "/metadata/namespace").to_string();
        args.extend(
            [
                "-n",
                &ns,
                "--ignore-not-found",
                "--wait=true",
                "--timeout=600s",
            ]
            .map(String::from),
        );
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        lab.kube.run(&refs)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_graph_is_the_functions_final_one_without_usages() {
        let path = crate::repo_root().join("examples/metalcluster/r730.yaml");
        let xr = super::super::super::kube::load_yaml(&path)
            .ok()
            .and_then(|d| d.into_iter().next())
            .expect("the built-in example");
        let g = manifests(&xr, &[]).expect("renders");
        let kinds: Vec<&str> = g.values().map(|o| str_at(o, "/kind")).collect();
        for k in [
            "Cluster",
            "KubeadmControlPlane",
            "Metal3Cluster",
            "IPPool",
            "Release",
        ] {
            assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
        }
        assert!(!kinds.contains(&"Usage"), "{kinds:?}");
        assert_eq!(
            resource(&g["cluster"]),
            "cluster.cluster.x-k8s.io",
            "kubectl's kind.group"
        );
    }
}
