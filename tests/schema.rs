//! Every composed object, in every scenario, validates against the real
//! upstream CRDs in ../shared/crds (structural schema + CEL rules).

mod common;

use std::collections::BTreeMap;

use common::*;
use metalplane::compose::compose;
use serde_json::{Value, json};

fn scenarios() -> Vec<(&'static str, Value, BTreeMap<&'static str, Value>)> {
    let ex = example_xr();
    let mut minimal = ex.clone();
    for p in [
        "spec.gpu",
        "spec.access",
        "spec.kubernetes.nodeLabels",
        "spec.network.podCIDR",
        "spec.network.serviceCIDR",
        "spec.cni",
        "spec.kubernetes.imageChecksumType",
        "spec.kubernetes.imageDiskFormat",
    ] {
        set_path(&mut minimal, p, Value::Null);
    }
    let mut checksum_url = ex.clone();
    set_path(
        &mut checksum_url,
        "spec.kubernetes.imageChecksum",
        json!("https://images.lan/ubuntu.qcow2.sha256sum"),
    );
    let mut live_iso = ex.clone();
    set_path(&mut live_iso, "spec.kubernetes.imageChecksum", Value::Null);
    set_path(
        &mut live_iso,
        "spec.kubernetes.imageDiskFormat",
        json!("live-iso"),
    );
    let mut unverified_gpu = ex.clone();
    set_path(
        &mut unverified_gpu,
        "spec.gpu.driverInstallerChecksum",
        Value::Null,
    );

    let available = BTreeMap::from([(
        "cluster",
        with_condition(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "r730-cluster"}}),
            "Available",
            "True",
        ),
    )]);
    vec![
        ("example", ex.clone(), BTreeMap::new()),
        ("example-cni", ex, available.clone()),
        ("minimal", minimal.clone(), BTreeMap::new()),
        ("minimal-cni", minimal, available),
        ("checksum-url", checksum_url, BTreeMap::new()),
        ("live-iso", live_iso, BTreeMap::new()),
        ("unverified-gpu", unverified_gpu, BTreeMap::new()),
    ]
}

#[test]
fn every_composed_object_validates_against_upstream_crds() {
    let schemas = Schemas::get();
    for (name, xr, observed) in scenarios() {
        let rsp = compose(&request(&xr, &observed, Some(&[])));
        assert_eq!(fatal(&rsp), None, "scenario {name}");
        let desired = desired(&rsp);
        assert!(
            desired.len() >= 6,
            "scenario {name} composed {}",
            desired.len()
        );
        for (res, obj) in &desired {
            let n = obj["metadata"]["name"].as_str().unwrap_or_default();
            assert!(
                metalplane::validate::dns_label(n).is_ok(),
                "{name}/{res}: name {n:?}"
            );
            let p = schemas.problems(obj);
            assert!(
                p.is_empty(),
                "scenario {name}, resource {res}:\n{}",
                p.join("\n")
            );
        }
    }
}

#[test]
fn xr_status_validates_against_the_xrd() {
    let schemas = Schemas::get();
    let xr = example_xr();
    let claimed = host(
        "r730",
        "provisioned",
        Some("r730-cluster-controlplane-abcde"),
        true,
    );
    let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&[claimed])));
    let mut doc = xr.clone();
    doc["status"] = desired_status(&rsp);
    assert_eq!(doc["status"]["host"]["name"], "r730");
    schemas.assert_valid(&doc);
}

#[test]
fn packaged_manifests_validate() {
    let schemas = Schemas::get();
    let root = repo_root();
    for f in [
        "apis/metalclusters/definition.yaml",
        "apis/metalclusters/composition.yaml",
        "apis/crossplane.yaml",
        "examples/metalcluster/r730.yaml",
        "examples/metalcluster/r730-inference.yaml",
    ] {
        for doc in load_yaml(&root.join(f)) {
            let p = schemas.problems(&doc);
            assert!(p.is_empty(), "{f}:\n{}", p.join("\n"));
        }
    }
    for doc in load_yaml(&root.join("examples/baremetalhost/r730.yaml")) {
        if doc["kind"] == "BareMetalHost" {
            schemas.assert_valid(&doc);
        }
    }
}

#[test]
fn host_fixtures_are_real_baremetalhosts() {
    let schemas = Schemas::get();
    for state in ["available", "provisioning", "provisioned", "deprovisioning"] {
        schemas.assert_valid(&host(
            "r730",
            state,
            Some("r730-cluster-controlplane-x1"),
            true,
        ));
    }
}

/// The validator is not a rubber stamp: it refuses what the API server refuses.
#[test]
fn validator_rejects_broken_objects() {
    let schemas = Schemas::get();
    let rsp = compose(&request(&example_xr(), &BTreeMap::new(), Some(&[])));
    let d = desired(&rsp);

    let mut kcp = d["kubeadmcontrolplane"].clone();
    kcp["spec"].as_object_mut().map(|m| m.remove("version"));
    assert!(
        schemas.problems(&kcp).iter().any(|p| p.contains("version")),
        "missing required field"
    );

    let mut m3mt = d["metal3machinetemplate"].clone();
    m3mt["spec"]["template"]["spec"]["image"]["diskFormat"] = json!("iso");
    assert!(!schemas.problems(&m3mt).is_empty(), "enum");

    let mut cluster = d["cluster"].clone();
    cluster["spec"]["controlPlaneRef"]["apiVersion"] =
        json!("controlplane.cluster.x-k8s.io/v1beta2");
    assert!(
        !schemas.problems(&cluster).is_empty(),
        "v1beta1-style ref field is unknown in v1beta2"
    );

    let mut ds = d["metal3datatemplate"].clone();
    ds["spec"]["networkData"]["links"]["ethernets"] = json!([]);
    assert!(!schemas.problems(&ds).is_empty(), "minItems");
}

#[test]
fn cel_kcp_kubelet_extra_args_names_unique() {
    let schemas = Schemas::get();
    let rsp = compose(&request(&example_xr(), &BTreeMap::new(), Some(&[])));
    let mut kcp = desired(&rsp)["kubeadmcontrolplane"].clone();
    let rule = "self.all(x, self.exists_one(y, x.name == y.name))";
    assert!(
        schemas.applied_rules(&kcp).iter().any(|r| r == rule),
        "the uniqueness rule applies to our KCP"
    );
    schemas.assert_valid(&kcp);
    let nr = &mut kcp["spec"]["kubeadmConfigSpec"]["initConfiguration"]["nodeRegistration"]["kubeletExtraArgs"];
    nr.as_array_mut()
        .expect("list")
        .push(json!({"name": "node-labels", "value": "a=b"}));
    assert!(
        schemas
            .problems(&kcp)
            .iter()
            .any(|p| p.contains("must be unique"))
    );
}

#[test]
fn cel_usage_needs_by_or_reason_and_a_reference() {
    let schemas = Schemas::get();
    let observed = BTreeMap::from([(
        "cluster",
        with_condition(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "r730-cluster"}}),
            "Available",
            "True",
        ),
    )]);
    let rsp = compose(&request(&example_xr(), &observed, Some(&[])));
    let usage = desired(&rsp)["cilium-needs-cluster"].clone();
    let applied = schemas.applied_rules(&usage);
    assert!(
        applied
            .iter()
            .any(|r| r == "has(self.by) || has(self.reason)")
    );
    assert!(
        applied.iter().any(|r| r.contains("__namespace__")),
        "cross-namespace rule is evaluated"
    );
    schemas.assert_valid(&usage);

    let mut no_by = usage.clone();
    no_by["spec"].as_object_mut().map(|m| m.remove("by"));
    assert!(
        schemas
            .problems(&no_by)
            .iter()
            .any(|p| p.contains("spec.by"))
    );

    let mut no_ref = usage;
    no_ref["spec"]["of"]
        .as_object_mut()
        .map(|m| m.remove("resourceRef"));
    assert!(
        schemas
            .problems(&no_ref)
            .iter()
            .any(|p| p.contains("resource reference"))
    );
}
