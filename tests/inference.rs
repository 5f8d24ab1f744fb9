//! spec.inference and spec.network.loadBalancer: the Modelplane objects,
//! the LB objects, their schemas, readiness stages, validation and the
//! deletion-order Usages.

mod common;

use std::collections::BTreeMap;

use common::*;
use metalplane::compose::compose;
use serde_json::{Value, json};

fn inference_xr() -> Value {
    load_yaml(&repo_root().join("examples/metalcluster/r730-inference.yaml")).remove(0)
}

fn fixtures(dir: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for d in load_yaml(&repo_root().join("tests/fixtures/observed").join(dir)) {
        let name = d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
            .as_str()
            .expect("annotated")
            .to_string();
        out.insert(name, d);
    }
    out
}

fn observed<'a>(all: &'a BTreeMap<String, Value>, keep: &[&str]) -> BTreeMap<&'a str, Value> {
    all.iter()
        .filter(|(k, _)| keep.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect()
}

// With the provisioned host, its protecting Usage is composed from the start.
const BASE: [&str; 9] = [
    "cluster",
    "controlplane-health",
    "host-in-use",
    "ippool",
    "kubeadmcontrolplane",
    "metal3cluster",
    "metal3datatemplate",
    "metal3machinetemplate",
    "remediation-template",
];
const FLEET: [&str; 7] = [
    "inference-class",
    "inference-cluster",
    "inference-kubeconfig",
    "inference-needs-class",
    "inference-needs-cluster",
    "inference-needs-controlplane",
    "inference-needs-kubeconfig",
];
const LB: [&str; 7] = [
    "kubernetes-providerconfig",
    "lb-l2policy",
    "lb-l2policy-needs-cilium",
    "lb-l2policy-needs-providerconfig",
    "lb-pool",
    "lb-pool-needs-cilium",
    "lb-pool-needs-providerconfig",
];

/// Composes `xr` with every fixture of an observed stage and the provisioned host.
fn compose_ready(xr: &Value, stage: &str) -> function_sdk_rust::proto::v1::RunFunctionResponse {
    let all = fixtures(stage);
    let observed: BTreeMap<&str, Value> =
        all.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    compose(&request(xr, &observed, Some(&hosts())))
}

fn hosts() -> Vec<Value> {
    load_yaml(&repo_root().join("tests/fixtures/hosts/r730-provisioned.yaml"))
}

#[test]
fn without_inference_nothing_changes() {
    let plain = compose(&request(&example_xr(), &BTreeMap::new(), Some(&[])));
    let mut disabled = example_xr();
    disabled["spec"]["inference"] = json!({"enabled": false, "nodePool": "gpu"});
    let off = compose(&request(&disabled, &BTreeMap::new(), Some(&[])));
    assert_eq!(desired(&plain), desired(&off));
    assert_eq!(desired_status(&plain), desired_status(&off));
    assert!(
        !desired_status(&plain)
            .as_object()
            .expect("status")
            .contains_key("inference")
    );
    // The pool label is on the node from the start, so joining the fleet
    // later never changes the machine.
    assert!(
        desired(&plain)["kubeadmcontrolplane"]
            .to_string()
            .contains("modelplane.ai/pool=gpu")
    );
}

#[test]
fn stages_until_inference_ready() {
    let xr = inference_xr();
    let all = fixtures("inference");

    // Provisioning: no fleet objects yet, but the node will carry the pool label.
    let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&hosts())));
    let d = desired(&rsp);
    assert_eq!(d.keys().cloned().collect::<Vec<_>>(), BASE);
    let labels = d["kubeadmcontrolplane"]["spec"]["kubeadmConfigSpec"]["initConfiguration"]["nodeRegistration"]["kubeletExtraArgs"][0]["value"].as_str().expect("labels").to_string();
    assert!(
        labels.split(',').any(|l| l == "modelplane.ai/pool=gpu"),
        "{labels}"
    );
    let c = rsp
        .conditions
        .iter()
        .find(|c| c.r#type == "InferenceReady")
        .expect("condition");
    assert_eq!(c.reason, "WaitingForCluster");

    // Cluster available: CNI and the fleet objects, not yet the LB objects.
    let obs = observed(&all, &["cluster", "ippool", "kubeadm", "metal3"]);
    let mut obs_cluster = obs.clone();
    obs_cluster.remove("cilium");
    let rsp = compose(&request(&xr, &obs_cluster, Some(&hosts())));
    let d = desired(&rsp);
    for n in FLEET {
        assert!(
            d.contains_key(n),
            "{n} composed once the cluster is available"
        );
    }
    for n in LB {
        assert!(!d.contains_key(n), "{n} waits for Cilium");
    }
    assert_eq!(desired_status(&rsp)["phase"], "InstallingCNI");

    // Cilium Ready: the LB objects appear; Modelplane still adopting.
    let obs = observed(
        &all,
        &["cluster", "ippool", "kubeadm", "metal3", "helm", "cilium"],
    );
    let rsp = compose(&request(&xr, &obs, Some(&hosts())));
    let d = desired(&rsp);
    for n in LB.iter().chain(FLEET.iter()) {
        assert!(d.contains_key(*n), "{n}");
    }
    assert_eq!(desired_status(&rsp)["phase"], "JoiningFleet");

    // Everything observed, InferenceCluster Ready with a gateway address.
    let obs: BTreeMap<&str, Value> = all.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let rsp = compose(&request(&xr, &obs, Some(&hosts())));
    let st = desired_status(&rsp);
    assert_eq!(st["phase"], "InferenceReady");
    assert_eq!(
        st["inference"],
        json!({"cluster": "metal-r730", "class": "metal-r730-gpu", "nodePool": "gpu", "gatewayAddress": "192.168.120.200"})
    );
    let c = rsp
        .conditions
        .iter()
        .find(|c| c.r#type == "InferenceReady")
        .expect("condition");
    assert_eq!(
        (c.status, c.reason.as_str()),
        (
            function_sdk_rust::proto::v1::Status::ConditionTrue as i32,
            "GatewayReady"
        )
    );
    let ready: Vec<bool> = rsp
        .desired
        .as_ref()
        .expect("d")
        .resources
        .values()
        .map(|r| r.ready == 1)
        .collect();
    assert!(ready.iter().all(|r| *r), "everything ready");

    // Ready without a gateway address is not inference ready.
    let mut no_gw = obs.clone();
    let mut ic = no_gw["inference-cluster"].clone();
    ic["status"]["atProvider"]["manifest"]["status"]["gateway"]["address"] = json!("");
    no_gw.insert("inference-cluster", ic);
    let rsp = compose(&request(&xr, &no_gw, Some(&hosts())));
    assert_eq!(desired_status(&rsp)["phase"], "JoiningFleet");
    assert!(
        desired_status(&rsp)["inference"]
            .get("gatewayAddress")
            .is_none()
    );
    assert!(rsp.desired.as_ref().expect("d").resources["inference-cluster"].ready != 1);
}

#[test]
fn every_new_object_and_manifest_validates() {
    let schemas = Schemas::get();
    let all = fixtures("inference");
    let obs: BTreeMap<&str, Value> = all.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let mut variants = vec![inference_xr()];
    let mut cidr = inference_xr();
    cidr["spec"]["network"]["loadBalancer"] = json!("192.168.120.192/28");
    cidr["spec"]["inference"] = json!({"nodePool": "v100", "devices": [{"name": "v100", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com", "count": 2,
        "attributes": {"productName": {"string": "Tesla V100"}, "cudaComputeCapability": {"version": "7.0.0"}}, "capacity": {"memory": {"value": "16Gi"}}}]});
    variants.push(cidr);
    let mut bare = inference_xr();
    for f in ["model", "count", "memory"] {
        bare["spec"]["gpu"].as_object_mut().map(|g| g.remove(f));
    }
    bare["spec"]["inference"] = json!({});
    variants.push(bare);
    for xr in variants {
        let rsp = compose(&request(&xr, &obs, Some(&hosts())));
        assert_eq!(fatal(&rsp), None);
        let d = desired(&rsp);
        assert_eq!(d.len(), 28);
        for (name, obj) in &d {
            let p = schemas.problems(obj);
            assert!(p.is_empty(), "{name}:\n{}", p.join("\n"));
            if obj["kind"] == "Object" {
                let m = &obj["spec"]["forProvider"]["manifest"];
                if m["apiVersion"] != "v1" {
                    let p = schemas.problems(m);
                    assert!(p.is_empty(), "{name} manifest:\n{}", p.join("\n"));
                }
            }
        }
        let class = &d["inference-class"]["spec"]["forProvider"]["manifest"];
        assert!(
            schemas
                .applied_rules(class)
                .iter()
                .any(|r| r.contains("deviceClassName")),
            "the DRA rule applies to our devices"
        );
    }
}

#[test]
fn devices_are_derived_from_the_gpu() {
    let rsp = compose_ready(&inference_xr(), "inference");
    let class = &desired(&rsp)["inference-class"]["spec"]["forProvider"]["manifest"];
    assert_eq!(class["metadata"]["name"], "metal-r730-gpu");
    assert_eq!(
        class["spec"]["devices"],
        json!([{
            "name": "gpu", "driver": "gpu.nvidia.com", "claim": "DRA", "deviceClassName": "gpu.nvidia.com", "count": 2,
            "attributes": {"productName": {"string": "Tesla V100-PCIE-16GB"}}, "capacity": {"memory": {"value": "16Gi"}},
        }])
    );
    assert_eq!(
        class["spec"]["description"],
        "2x Tesla V100-PCIE-16GB (16Gi each) on bare metal metal/r730"
    );
    let ic = &desired(&rsp)["inference-cluster"];
    assert_eq!(ic["spec"]["readiness"]["policy"], "DeriveFromObject");
    let m = &ic["spec"]["forProvider"]["manifest"];
    assert_eq!(
        m["spec"]["cluster"],
        json!({"source": "Existing", "existing": {"secretRef": {"name": "metal-r730-kubeconfig", "key": "value"}, "cache": {"storageClassName": "nfs-client"}}})
    );
    assert_eq!(
        m["spec"]["nodePools"],
        json!([{"name": "gpu", "className": "metal-r730-gpu", "nodeCount": 1}])
    );
    assert_eq!(
        ic["spec"]["providerConfigRef"],
        json!({"kind": "ClusterProviderConfig", "name": "default"})
    );
}

#[test]
fn the_kubeconfig_is_copied_without_passing_through_the_function() {
    let rsp = compose_ready(&inference_xr(), "inference");
    let copy = &desired(&rsp)["inference-kubeconfig"];
    assert!(
        copy["spec"].get("references").is_none(),
        "patchesFrom would write the key into the Object's spec"
    );
    let inner = &copy["spec"]["forProvider"]["manifest"];
    assert_eq!(
        (
            inner["kind"].as_str(),
            inner["metadata"]["namespace"].as_str()
        ),
        (Some("Object"), Some("modelplane-system"))
    );
    // It observes the Cluster only: its status mirrors nothing secret.
    assert_eq!(inner["spec"]["managementPolicies"], json!(["Observe"]));
    assert_eq!(inner["spec"]["forProvider"]["manifest"]["kind"], "Cluster");
    // The kubeconfig lands in the connection Secret Modelplane reads.
    assert_eq!(
        inner["spec"]["connectionDetails"],
        json!([{"apiVersion": "v1", "kind": "Secret", "name": "r730-cluster-kubeconfig", "namespace": "metal",
                "fieldPath": "data.value", "toConnectionSecretKey": "value"}])
    );
    assert_eq!(
        inner["spec"]["writeConnectionSecretToRef"],
        json!({"name": "metal-r730-kubeconfig"})
    );
    let text = copy.to_string();
    assert!(
        !text.contains("\"data\"") && !text.contains("stringData"),
        "no secret data in the desired state"
    );
}

#[test]
fn load_balancer_objects_and_cilium_values() {
    let rsp = compose_ready(&inference_xr(), "inference");
    let d = desired(&rsp);
    let pool = &d["lb-pool"];
    assert_eq!(
        pool["spec"]["providerConfigRef"],
        json!({"kind": "ProviderConfig", "name": "r730-cluster"})
    );
    assert_eq!(
        pool["spec"]["forProvider"]["manifest"]["spec"]["blocks"],
        json!([{"start": "192.168.120.200", "stop": "192.168.120.220"}])
    );
    let l2 = &d["lb-l2policy"]["spec"]["forProvider"]["manifest"]["spec"];
    assert_eq!(l2["interfaces"], json!(["^eno1$"]));
    assert_eq!(l2["loadBalancerIPs"], true);
    let pc = &d["kubernetes-providerconfig"];
    assert_eq!(
        (pc["apiVersion"].as_str(), pc["kind"].as_str()),
        (
            Some("kubernetes.m.crossplane.io/v1alpha1"),
            Some("ProviderConfig")
        )
    );
    assert_eq!(
        pc["spec"]["credentials"]["secretRef"],
        json!({"namespace": "metal", "name": "r730-cluster-kubeconfig", "key": "value"})
    );
    let values = &d["cilium"]["spec"]["forProvider"]["values"];
    assert_eq!(values["l2announcements"]["enabled"], true);
    assert_eq!(values["kubeProxyReplacement"], true);
    assert_eq!(values["k8sServiceHost"], "192.168.120.70");
    assert_eq!(values["k8sServicePort"], 6443);
    // Without a load balancer the Cilium values stay the original's.
    let plain = compose_ready(&example_xr(), "ready");
    assert!(
        desired(&plain)["cilium"]["spec"]["forProvider"]["values"]
            .get("kubeProxyReplacement")
            .is_none()
    );
}

#[test]
fn deletion_order_usages() {
    let rsp = compose_ready(&inference_xr(), "inference");
    let d = desired(&rsp);
    let pair = |n: &str| {
        let s = &d[n]["spec"];
        assert_eq!(s["replayDeletion"], true, "{n}");
        (
            format!(
                "{}/{}",
                s["of"]["kind"].as_str().unwrap_or_default(),
                s["of"]["resourceRef"]["name"].as_str().unwrap_or_default()
            ),
            format!(
                "{}/{}",
                s["by"]["kind"].as_str().unwrap_or_default(),
                s["by"]["resourceRef"]["name"].as_str().unwrap_or_default()
            ),
        )
    };
    // "by" is deleted before "of".
    assert_eq!(
        pair("inference-needs-cluster"),
        (
            "Cluster/r730-cluster".into(),
            "Object/r730-inference-cluster".into()
        )
    );
    assert_eq!(
        pair("inference-needs-kubeconfig"),
        (
            "Object/r730-kubeconfig-copy".into(),
            "Object/r730-inference-cluster".into()
        )
    );
    assert_eq!(
        pair("inference-needs-class"),
        (
            "Object/r730-inference-class".into(),
            "Object/r730-inference-cluster".into()
        )
    );
    assert_eq!(
        pair("lb-pool-needs-cilium"),
        (
            "Release/r730-cluster-cilium".into(),
            "Object/r730-lb-pool".into()
        )
    );
    assert_eq!(
        pair("lb-l2policy-needs-cilium"),
        (
            "Release/r730-cluster-cilium".into(),
            "Object/r730-l2-policy".into()
        )
    );
    assert_eq!(
        pair("lb-pool-needs-providerconfig"),
        (
            "ProviderConfig/r730-cluster".into(),
            "Object/r730-lb-pool".into()
        )
    );
    assert_eq!(
        pair("lb-l2policy-needs-providerconfig"),
        (
            "ProviderConfig/r730-cluster".into(),
            "Object/r730-l2-policy".into()
        )
    );
    assert_eq!(
        pair("cilium-needs-cluster"),
        (
            "Cluster/r730-cluster".into(),
            "Release/r730-cluster-cilium".into()
        )
    );
    // Every referenced object is one we compose, under that name.
    let names: Vec<String> = d
        .values()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    for n in [
        "inference-needs-cluster",
        "inference-needs-kubeconfig",
        "inference-needs-class",
        "lb-pool-needs-cilium",
        "lb-l2policy-needs-cilium",
        "lb-pool-needs-providerconfig",
        "lb-l2policy-needs-providerconfig",
    ] {
        let (of, by) = pair(n);
        assert!(
            names.contains(&of) && names.contains(&by),
            "{n}: {of} / {by}"
        );
    }
}

#[test]
fn bad_ranges_and_pool_names_are_refused_by_name() {
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "spec.network.loadBalancer",
            json!("10.0.0.1-10.0.0.9"),
            "inside the node subnet 192.168.120.0/24",
        ),
        (
            "spec.network.loadBalancer",
            json!("192.168.120.220-192.168.120.200"),
            "empty range",
        ),
        (
            "spec.network.loadBalancer",
            json!("192.168.120.60-192.168.120.80"),
            "includes nodeIP 192.168.120.70",
        ),
        (
            "spec.network.loadBalancer",
            json!("192.168.120.0/28"),
            "includes gateway",
        ),
        (
            "spec.network.loadBalancer",
            json!("192.168.120.240/28"),
            "broadcast",
        ),
        (
            "spec.network.loadBalancer",
            json!("192.168.120.201/28"),
            "did you mean",
        ),
        (
            "spec.network.loadBalancer",
            json!("lots"),
            "range FIRST-LAST or a CIDR",
        ),
        (
            "spec.network.loadBalancer",
            json!("192.168.120.200-"),
            "range FIRST-LAST or a CIDR",
        ),
        (
            "spec.network.loadBalancer",
            Value::Null,
            "is required with spec.inference",
        ),
        (
            "spec.inference.nodePool",
            json!("gpu_pool"),
            "DNS label of at most 40",
        ),
        (
            "spec.inference.nodePool",
            json!("g".repeat(41)),
            "DNS label of at most 40",
        ),
        (
            "spec.inference.clusterName",
            json!("Metal.R730"),
            "DNS label",
        ),
        (
            "spec.inference.className",
            json!("bad class"),
            "DNS subdomain",
        ),
        ("spec.inference.enabled", json!("yes"), "true or false"),
        ("spec.inference.devices", json!([]), "1 to 16 devices"),
        (
            "spec.inference.devices",
            json!([{"name": "x", "driver": "gpu.nvidia.com"}]),
            "deviceClassName",
        ),
        (
            "spec.inference.devices",
            json!([{"name": "x", "driver": "d", "claim": "Synthetic", "count": 65}]),
            "between 1 and 64",
        ),
        (
            "spec.inference.providerConfigRef.kind",
            json!("Secret"),
            "ClusterProviderConfig or ProviderConfig",
        ),
        (
            "spec.inference.existing.cache.storageClassName",
            json!("Fast SSD"),
            "StorageClass",
        ),
        ("spec.gpu.memory", json!("16 GB"), "quantity"),
        ("spec.gpu.count", json!(0), "between 1 and 64"),
        (
            "spec.kubernetes.nodeLabels",
            json!({"modelplane.ai/pool": "other"}),
            "conflicts with spec.inference.nodePool",
        ),
    ];
    for (path, bad, expect) in cases {
        let mut xr = inference_xr();
        set_path(&mut xr, path, bad.clone());
        let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&[])));
        let msg = fatal(&rsp).unwrap_or_else(|| panic!("{path}={bad} accepted"));
        let shown_path = path.split('[').next().unwrap_or(path);
        assert!(msg.contains(shown_path), "{path}: {msg}");
        assert!(
            msg.contains(expect),
            "{path}={bad}: wants {expect:?}: {msg}"
        );
    }
    let mut no_gpu = inference_xr();
    set_path(&mut no_gpu, "spec.gpu", Value::Null);
    let msg = fatal(&compose(&request(&no_gpu, &BTreeMap::new(), Some(&[])))).expect("refused");
    assert!(msg.contains("spec.inference: needs spec.gpu"), "{msg}");
    // Devices given explicitly need no gpu section.
    set_path(
        &mut no_gpu,
        "spec.inference.devices",
        json!([{"name": "npu", "driver": "npu.example.com", "claim": "Synthetic"}]),
    );
    assert_eq!(
        fatal(&compose(&request(&no_gpu, &BTreeMap::new(), Some(&[])))),
        None
    );
}

#[test]
fn golden_inference_ready() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_function-metalplane"))
        .args([
            "render",
            "examples/metalcluster/r730-inference.yaml",
            "-o",
            "tests/fixtures/observed/inference",
            "-e",
            "tests/fixtures/hosts",
        ])
        .current_dir(repo_root())
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8_lossy(&out.stdout).into_owned();
    let path = repo_root().join("tests/golden/r730-inference-ready.yaml");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &got).expect("write");
    }
    let want = std::fs::read_to_string(&path).expect("golden (UPDATE_GOLDEN=1 to create)");
    assert!(got == want, "differs from {}", path.display());
}
