//! Readiness and progress through the stages of a real bring-up, driven by
//! observed fixtures: composed resources as Crossplane observes them, and
//! the pool's BareMetalHosts as required resources.

mod common;

use std::collections::BTreeMap;

use common::*;
use function_sdk_rust::proto::v1::{Ready, RunFunctionResponse};
use metalplane::compose::compose;
use serde_json::{Value, json};

const BASE: [&str; 6] = [
    "cluster",
    "ippool",
    "kubeadmcontrolplane",
    "metal3cluster",
    "metal3datatemplate",
    "metal3machinetemplate",
];
const CNI: [&str; 5] = [
    "cilium",
    "cilium-needs-cluster",
    "cilium-needs-controlplane",
    "cilium-needs-providerconfig",
    "helm-providerconfig",
];

/// What Crossplane would observe after applying `rsp`'s desired resources.
fn observe(rsp: &RunFunctionResponse) -> BTreeMap<&'static str, Value> {
    let d = desired(rsp);
    BASE.iter()
        .chain(CNI.iter())
        .filter_map(|n| d.get(*n).map(|v| (*n, v.clone())))
        .collect()
}

fn ready_of(rsp: &RunFunctionResponse) -> BTreeMap<String, bool> {
    rsp.desired
        .as_ref()
        .expect("desired")
        .resources
        .iter()
        .map(|(k, r)| (k.clone(), r.ready == Ready::True as i32))
        .collect()
}

fn names(rsp: &RunFunctionResponse) -> Vec<String> {
    desired(rsp).keys().cloned().collect()
}

fn cluster_available(obs: &mut BTreeMap<&'static str, Value>, status: &str) {
    let c = obs.get("cluster").cloned().expect("cluster observed");
    obs.insert("cluster", with_condition(c, "Available", status));
}

#[test]
fn stages_from_nothing_to_ready() {
    let xr = example_xr();

    // 1. First call: nothing observed, hosts not resolved yet.
    let rsp = compose(&request(&xr, &BTreeMap::new(), None));
    assert_eq!(
        names(&rsp),
        BASE.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        "no CNI before the cluster exists"
    );
    assert!(
        ready_of(&rsp).values().all(|r| !r),
        "nothing is ready before it is observed"
    );
    let st = desired_status(&rsp);
    assert_eq!(st["phase"], "WaitingForHost");
    assert_eq!(st["controlPlaneEndpoint"], "192.168.120.70:6443");
    assert_eq!(st["kubeconfigSecret"], "r730-cluster-kubeconfig");
    assert_eq!(st["hostPool"], "r730");
    assert_eq!(st["controlPlaneAvailable"], false);
    assert!(st.get("host").is_none());
    let reqs = rsp.requirements.as_ref().expect("requires hosts");
    let sel = &reqs.resources["hosts"];
    assert_eq!(
        (
            sel.api_version.as_str(),
            sel.kind.as_str(),
            sel.namespace.as_deref()
        ),
        ("metal3.io/v1alpha1", "BareMetalHost", Some("metal"))
    );
    assert!(
        warnings(&rsp).is_empty(),
        "unresolved hosts are not 'no hosts'"
    );

    // 2. Objects observed, host available but not yet claimed.
    let mut obs = observe(&rsp);
    let rsp = compose(&request(
        &xr,
        &obs,
        Some(&[host("r730", "available", None, false)]),
    ));
    let ready = ready_of(&rsp);
    assert!(!ready["cluster"], "Cluster waits for Available");
    assert!(
        BASE.iter().filter(|n| **n != "cluster").all(|n| ready[*n]),
        "{ready:?}"
    );
    assert_eq!(desired_status(&rsp)["phase"], "WaitingForHost");
    assert!(
        rsp.conditions
            .iter()
            .any(|c| c.r#type == "HostClaimed" && c.reason == "Waiting")
    );

    // 3. CAPM3 claimed the host and is provisioning it.
    let claimed = host(
        "r730",
        "provisioning",
        Some("r730-cluster-controlplane-8k2xq"),
        true,
    );
    let rsp = compose(&request(&xr, &obs, Some(std::slice::from_ref(&claimed))));
    let st = desired_status(&rsp);
    assert_eq!(st["phase"], "Provisioning");
    assert_eq!(
        st["host"],
        json!({"name": "r730", "provisioningState": "provisioning", "poweredOn": true})
    );
    assert!(
        rsp.conditions
            .iter()
            .any(|c| c.r#type == "HostClaimed" && c.reason == "Claimed")
    );

    // 4. Image written, node booting into kubeadm.
    let provisioned = host(
        "r730",
        "provisioned",
        Some("r730-cluster-controlplane-8k2xq"),
        true,
    );
    let hosts = [provisioned];
    let rsp = compose(&request(&xr, &obs, Some(&hosts)));
    assert_eq!(desired_status(&rsp)["phase"], "Bootstrapping");
    // The graph and the Usage protecting the claimed host.
    assert_eq!(names(&rsp).len(), 7);
    assert!(names(&rsp).iter().any(|n| n == "host-in-use"));

    // 5. Control plane available: the CNI family appears.
    cluster_available(&mut obs, "True");
    let rsp = compose(&request(&xr, &obs, Some(&hosts)));
    let st = desired_status(&rsp);
    assert_eq!(st["phase"], "InstallingCNI");
    assert_eq!(st["controlPlaneAvailable"], true);
    assert_eq!(names(&rsp).len(), 12);
    let ready = ready_of(&rsp);
    assert!(ready["cluster"]);
    assert!(!ready["cilium"], "Release not yet observed");
    assert!(
        !ready["helm-providerconfig"] && !ready["cilium-needs-cluster"],
        "not observed yet"
    );

    // 6. CNI objects observed, Release not Ready yet.
    obs = {
        let mut o = observe(&rsp);
        o.insert("cluster", obs["cluster"].clone());
        o
    };
    let rsp = compose(&request(&xr, &obs, Some(&hosts)));
    let ready = ready_of(&rsp);
    assert!(!ready["cilium"]);
    assert!(ready["helm-providerconfig"] && ready["cilium-needs-cluster"]);
    assert_eq!(desired_status(&rsp)["phase"], "InstallingCNI");

    // 7. Cilium Ready: everything ready.
    let c = obs["cilium"].clone();
    obs.insert("cilium", with_condition(c, "Ready", "True"));
    let rsp = compose(&request(&xr, &obs, Some(&hosts)));
    assert!(ready_of(&rsp).values().all(|r| *r), "{:?}", ready_of(&rsp));
    assert_eq!(desired_status(&rsp)["phase"], "Ready");
    assert_eq!(
        rsp.meta.as_ref().and_then(|m| m.ttl).map(|t| t.seconds),
        Some(60)
    );

    // 8. A blip in the Cluster's Available condition keeps the CNI composed.
    cluster_available(&mut obs, "False");
    let rsp = compose(&request(&xr, &obs, Some(&hosts)));
    assert_eq!(names(&rsp).len(), 12, "once composed, the CNI stays");
    assert!(!ready_of(&rsp)["cluster"]);
    assert_ne!(desired_status(&rsp)["phase"], "Ready");
}

#[test]
fn no_available_host_is_said_once() {
    let xr = example_xr();
    let busy = host(
        "r730",
        "provisioned",
        Some("other-cluster-controlplane-1"),
        true,
    );
    let mut busy_other = busy.clone();
    busy_other["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] = json!("other-cluster");
    for hosts in [vec![], vec![busy_other]] {
        let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&hosts)));
        let w = warnings(&rsp);
        assert_eq!(w, vec!["no available host in pool r730".to_string()]);
        let cond = rsp
            .conditions
            .iter()
            .find(|c| c.r#type == "HostClaimed")
            .expect("condition");
        assert_eq!(cond.reason, "NoAvailableHost");
        assert_eq!(desired_status(&rsp)["phase"], "WaitingForHost");

        // The next reconcile sees the condition on the XR: no second event.
        let mut seen = xr.clone();
        seen["status"]["conditions"] =
            json!([{"type": "HostClaimed", "status": "False", "reason": "NoAvailableHost"}]);
        let rsp = compose(&request(&seen, &BTreeMap::new(), Some(&hosts)));
        assert!(warnings(&rsp).is_empty());
        assert!(
            rsp.conditions.iter().any(|c| c.reason == "NoAvailableHost"),
            "condition stays"
        );
    }
}

#[test]
fn unclaimable_hosts_do_not_count() {
    let xr = example_xr();
    let mut errored = host("a", "available", None, false);
    errored["status"]["errorMessage"] = json!("power management error");
    let mut paused = host("b", "available", None, false);
    paused["metadata"]["annotations"] = json!({"baremetalhost.metal3.io/paused": ""});
    let inspecting = host("c", "inspecting", None, false);
    let rsp = compose(&request(
        &xr,
        &BTreeMap::new(),
        Some(&[errored, paused, inspecting]),
    ));
    assert_eq!(
        warnings(&rsp),
        vec!["no available host in pool r730".to_string()]
    );
}

#[test]
fn claimed_host_found_by_consumer_without_label() {
    let xr = example_xr();
    let mut h = host(
        "r730",
        "provisioning",
        Some("r730-cluster-controlplane-abcde"),
        true,
    );
    h["metadata"]["labels"]
        .as_object_mut()
        .map(|l| l.remove("cluster.x-k8s.io/cluster-name"));
    let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&[h])));
    assert_eq!(desired_status(&rsp)["host"]["name"], "r730");
}

#[test]
fn cluster_ready_needs_available_true_not_just_existence() {
    let xr = example_xr();
    let first = compose(&request(&xr, &BTreeMap::new(), Some(&[])));
    let mut obs = observe(&first);
    for status in ["False", "Unknown"] {
        cluster_available(&mut obs, status);
        let rsp = compose(&request(&xr, &obs, Some(&[])));
        assert!(!ready_of(&rsp)["cluster"], "{status}");
        assert_eq!(names(&rsp).len(), 6, "no CNI while Available is {status}");
    }
    // Ready=True on a Cluster is not Available=True.
    let c = with_condition(obs["cluster"].clone(), "Ready", "True");
    obs.insert("cluster", c);
    assert!(!ready_of(&compose(&request(&xr, &obs, Some(&[]))))["cluster"]);
}
