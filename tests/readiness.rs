//! Readiness and progress through the stages of a real bring-up, driven by
//! observed fixtures: composed resources as Crossplane observes them, and
//! the pool's BareMetalHosts as required resources.

mod common;

use std::collections::BTreeMap;

use common::*;
use function_sdk_rust::proto::v1::{Ready, RunFunctionResponse};
use metalplane::compose::compose;
use serde_json::{Value, json};

const BASE: [&str; 8] = [
    "cluster",
    "controlplane-health",
    "ippool",
    "kubeadmcontrolplane",
    "metal3cluster",
    "metal3datatemplate",
    "metal3machinetemplate",
    "remediation-template",
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

/// A KubeadmControlPlane as KCP v1beta2 reports it: `up_to_date` of
/// `replicas` machines on the latest spec, `ready` of them ready.
fn kcp_status(obs: &mut BTreeMap<&'static str, Value>, replicas: i64, up_to_date: i64, ready: i64) {
    let mut k = obs["kubeadmcontrolplane"].clone();
    k["metadata"]["generation"] = json!(2);
    k["status"] = json!({
        "observedGeneration": 2,
        "replicas": replicas,
        "upToDateReplicas": up_to_date,
        "readyReplicas": ready,
        "availableReplicas": ready,
    });
    obs.insert("kubeadmcontrolplane", k);
}

fn condition<'a>(
    rsp: &'a RunFunctionResponse,
    typ: &str,
) -> Option<&'a function_sdk_rust::proto::v1::Condition> {
    rsp.conditions.iter().find(|c| c.r#type == typ)
}

/// The XR as Crossplane stores it after applying `rsp`'s conditions.
fn with_conditions_of(xr: &Value, rsp: &RunFunctionResponse) -> Value {
    let mut seen = xr.clone();
    seen["status"]["conditions"] = rsp
        .conditions
        .iter()
        .map(|c| json!({"type": c.r#type, "status": "False", "reason": c.reason}))
        .collect();
    seen
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
        !ready["kubeadmcontrolplane"],
        "a control plane without ready machines is not ready"
    );
    assert!(
        BASE.iter()
            .filter(|n| !["cluster", "kubeadmcontrolplane"].contains(*n))
            .all(|n| ready[*n]),
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
        json!({"name": "r730", "provisioningState": "provisioning", "poweredOn": true, "operationalStatus": "OK"})
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
    assert_eq!(names(&rsp).len(), BASE.len() + 1);
    assert!(names(&rsp).iter().any(|n| n == "host-in-use"));

    // 5. Control plane available: the CNI family appears.
    cluster_available(&mut obs, "True");
    let rsp = compose(&request(&xr, &obs, Some(&hosts)));
    let st = desired_status(&rsp);
    assert_eq!(st["phase"], "InstallingCNI");
    assert_eq!(st["controlPlaneAvailable"], true);
    assert_eq!(names(&rsp).len(), BASE.len() + 1 + CNI.len());
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

    // 7. Cilium Ready, the control plane's machine up to date and ready:
    // everything ready.
    kcp_status(&mut obs, 1, 1, 1);
    let c = obs["cilium"].clone();
    obs.insert("cilium", with_condition(c, "Ready", "True"));
    let rsp = compose(&request(&xr, &obs, Some(&hosts)));
    assert!(ready_of(&rsp).values().all(|r| *r), "{:?}", ready_of(&rsp));
    assert_eq!(desired_status(&rsp)["phase"], "Ready");
    assert_eq!(
        rsp.meta.as_ref().and_then(|m| m.ttl).map(|t| t.seconds),
        Some(600),
        "settled: the host's changes come by the WatchOperation's annotation"
    );

    // 8. A blip in the Cluster's Available condition keeps the CNI composed.
    cluster_available(&mut obs, "False");
    let rsp = compose(&request(&xr, &obs, Some(&hosts)));
    assert_eq!(
        names(&rsp).len(),
        BASE.len() + 1 + CNI.len(),
        "once composed, the CNI stays"
    );
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
fn unclaimable_hosts_do_not_count_and_say_why() {
    let xr = example_xr();
    let mut errored = host("a", "available", None, false);
    errored["status"]["errorMessage"] = json!("power management error");
    errored["status"]["errorType"] = json!("power management error");
    errored["status"]["operationalStatus"] = json!("error");
    let mut paused = host("b", "available", None, false);
    paused["metadata"]["annotations"] = json!({"baremetalhost.metal3.io/paused": ""});
    let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&[errored, paused])));
    assert_eq!(
        warnings(&rsp),
        vec!["no available host in pool r730".to_string()]
    );
    let msg = condition(&rsp, "HostClaimed")
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        msg.contains("a: power management error: power management error")
            && msg.contains("b: paused"),
        "{msg}"
    );
}

#[test]
fn hosts_on_their_way_are_named_without_a_warning() {
    let xr = example_xr();
    for state in [
        "",
        "registering",
        "inspecting",
        "preparing",
        "match profile",
        "deprovisioning",
    ] {
        let rsp = compose(&request(
            &xr,
            &BTreeMap::new(),
            Some(&[host("r730", state, None, false)]),
        ));
        assert!(warnings(&rsp).is_empty(), "{state:?}: {:?}", warnings(&rsp));
        let c = condition(&rsp, "HostClaimed").expect("HostClaimed");
        assert_eq!(c.reason, "HostOnTheWay", "{state:?}");
        let shown = if state.is_empty() { "new" } else { state };
        assert!(
            c.message
                .as_deref()
                .unwrap_or_default()
                .ends_with(&format!("on its way: r730 ({shown})")),
            "{:?}",
            c.message
        );
        assert_eq!(desired_status(&rsp)["phase"], "WaitingForHost");
    }
}

/// Each of CAPM3 v1.13's `chooseHost` rules, one host at a time: claimable
/// hosts give "Waiting" (CAPM3 will claim one), the others do not.
#[test]
fn host_choice_follows_capm3() {
    let xr = example_xr();
    let claimable = |h: Value| {
        let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&[h])));
        condition(&rsp, "HostClaimed").map(|c| c.reason.clone()) == Some("Waiting".into())
    };
    let annotated = |key: &str| {
        let mut h = host("h", "available", None, false);
        h["metadata"]["annotations"] = json!({key: ""});
        h
    };
    assert!(claimable(host("h", "available", None, false)));
    assert!(
        claimable(host("h", "ready", None, false)),
        "ready is claimable in v1.13"
    );
    for state in [
        "provisioning",
        "provisioned",
        "externally provisioned",
        "powering off before delete",
        "deleting",
        "unmanaged",
    ] {
        assert!(!claimable(host("h", state, None, false)), "{state}");
    }
    let mut deleting = host("h", "available", None, false);
    deleting["metadata"]["deletionTimestamp"] = json!("2026-12-01T10:00:00Z");
    assert!(!claimable(deleting), "hosts being deleted are skipped");
    let mut errored = host("h", "available", None, false);
    errored["status"]["errorMessage"] = json!("boom");
    assert!(!claimable(errored));
    assert!(!claimable(annotated("baremetalhost.metal3.io/paused")));
    assert!(!claimable(annotated("capm3.metal3.io/unhealthy")));
    assert!(
        !claimable(annotated("capi.metal3.io/unhealthy")),
        "the deprecated annotation still counts"
    );
    assert!(
        claimable(annotated("baremetalhost.metal3.io/detached")),
        "CAPM3 does not check detached"
    );
    let mut consumed = host("h", "available", None, false);
    consumed["spec"]["consumerRef"] =
        json!({"kind": "Metal3Machine", "name": "x", "namespace": "metal"});
    assert!(!claimable(consumed));
    let reuse = |owner: &str| {
        let mut h = host("h", "available", None, false);
        h["metadata"]["labels"]["infrastructure.cluster.x-k8s.io/node-reuse"] = json!(owner);
        h
    };
    assert!(!claimable(reuse("other-kcp")), "kept for another owner");
    assert!(
        claimable(reuse("r730-cluster")),
        "kept for this control plane"
    );
}

#[test]
fn a_host_is_ours_by_cluster_label_and_metal3machine_consumer() {
    let xr = example_xr();
    let mut unlabelled = host("r730", "provisioning", Some("r730-cluster-abcde"), true);
    unlabelled["metadata"]["labels"]
        .as_object_mut()
        .map(|l| l.remove("cluster.x-k8s.io/cluster-name"));
    let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&[unlabelled])));
    assert!(
        desired_status(&rsp).get("host").is_none(),
        "CAPM3 labels what it claims"
    );
    // KCP names machines <kcp>-<random>: any Metal3Machine name counts.
    let ours = host("r730", "provisioning", Some("r730-cluster-x7k2p"), true);
    let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&[ours])));
    assert_eq!(desired_status(&rsp)["host"]["name"], "r730");
    // Released: label gone with the consumer.
    let mut released = host("r730", "available", None, false);
    released["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] = json!("r730-cluster");
    let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&[released])));
    assert!(desired_status(&rsp).get("host").is_none());
}

#[test]
fn a_failing_host_is_a_phase_and_a_condition_until_it_recovers() {
    let xr = example_xr();
    let mut failing = host("r730", "provisioning", Some("r730-cluster-x7k2p"), true);
    failing["status"]["errorType"] = json!("registration error");
    failing["status"]["errorMessage"] = json!("The BMC secret metal/r730-bmc does not exist");
    failing["status"]["operationalStatus"] = json!("error");
    failing["status"]["errorCount"] = json!(3);
    let rsp = compose(&request(
        &xr,
        &BTreeMap::new(),
        Some(std::slice::from_ref(&failing)),
    ));
    let st = desired_status(&rsp);
    assert_eq!(st["phase"], "HostError");
    assert_eq!(st["host"]["errorType"], "registration error");
    assert_eq!(st["host"]["errorCount"], 3);
    let c = condition(&rsp, "HostHealthy").expect("HostHealthy");
    assert_eq!(
        (c.status, c.reason.as_str()),
        (
            function_sdk_rust::proto::v1::Status::ConditionFalse as i32,
            "HostError"
        )
    );
    let msg = c.message.clone().unwrap_or_default();
    assert!(
        msg.contains("registration error: The BMC secret metal/r730-bmc does not exist")
            && msg.contains("retries, error count 3"),
        "{msg}"
    );
    assert_eq!(warnings(&rsp).len(), 1, "said once, on the transition");
    // Next reconcile, still failing, count rising: no second event.
    let seen = with_conditions_of(&xr, &rsp);
    failing["status"]["errorCount"] = json!(4);
    let rsp = compose(&request(
        &seen,
        &BTreeMap::new(),
        Some(std::slice::from_ref(&failing)),
    ));
    assert!(warnings(&rsp).is_empty());
    assert!(
        condition(&rsp, "HostHealthy")
            .and_then(|c| c.message.clone())
            .unwrap_or_default()
            .contains("error count 4")
    );
    // Recovered: BMO cleared the error.
    let healthy = host("r730", "provisioning", Some("r730-cluster-x7k2p"), true);
    let rsp = compose(&request(&seen, &BTreeMap::new(), Some(&[healthy])));
    assert_eq!(desired_status(&rsp)["phase"], "Provisioning");
    assert!(desired_status(&rsp)["host"].get("errorType").is_none());
    assert_eq!(
        condition(&rsp, "HostHealthy").map(|c| c.reason.as_str()),
        Some("NoError")
    );
}

#[test]
fn a_rollout_is_shown_and_is_not_ready() {
    let xr = example_xr();
    let hosts = [host(
        "r730",
        "provisioned",
        Some("r730-cluster-x7k2p"),
        true,
    )];
    let first = compose(&request(&xr, &BTreeMap::new(), Some(&hosts)));
    let mut obs = observe(&first);
    cluster_available(&mut obs, "True");
    let with_cni = compose(&request(&xr, &obs, Some(&hosts)));
    for (k, v) in observe(&with_cni) {
        obs.entry(k).or_insert(v);
    }
    let c = obs["cilium"].clone();
    obs.insert("cilium", with_condition(c, "Ready", "True"));
    kcp_status(&mut obs, 1, 1, 1);
    let rsp = compose(&request(&xr, &obs, Some(&hosts)));
    assert_eq!(desired_status(&rsp)["phase"], "Ready");
    assert_eq!(
        desired_status(&rsp)["controlPlane"],
        json!({"desiredReplicas": 1, "replicas": 1, "upToDateReplicas": 1, "readyReplicas": 1, "rollingOut": false})
    );
    // A new machine is added and the old one is not up to date any more.
    kcp_status(&mut obs, 2, 1, 1);
    let rsp = compose(&request(&xr, &obs, Some(&hosts)));
    assert_eq!(desired_status(&rsp)["phase"], "RollingOut");
    assert_eq!(desired_status(&rsp)["controlPlane"]["rollingOut"], true);
    assert!(
        !ready_of(&rsp)["kubeadmcontrolplane"],
        "no Ready=True under a rollout"
    );
    // A spec KCP has not seen yet counts as rolling out too.
    kcp_status(&mut obs, 1, 1, 1);
    if let Some(k) = obs.get_mut("kubeadmcontrolplane") {
        k["metadata"]["generation"] = json!(3);
    }
    assert_eq!(
        desired_status(&compose(&request(&xr, &obs, Some(&hosts))))["phase"],
        "RollingOut"
    );
}

#[test]
fn the_unverified_driver_warning_is_said_once() {
    let mut xr = example_xr();
    xr["spec"]["gpu"]
        .as_object_mut()
        .map(|g| g.remove("driverInstallerChecksum"));
    let rsp = compose(&request(&xr, &BTreeMap::new(), None));
    assert_eq!(warnings(&rsp).len(), 1, "{:?}", warnings(&rsp));
    assert_eq!(
        condition(&rsp, "DriverInstallerVerified").map(|c| c.reason.as_str()),
        Some("UnverifiedDriverInstaller")
    );
    let seen = with_conditions_of(&xr, &rsp);
    for _ in 0..3 {
        assert!(warnings(&compose(&request(&seen, &BTreeMap::new(), None))).is_empty());
    }
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
        assert_eq!(
            names(&rsp).len(),
            BASE.len(),
            "no CNI while Available is {status}"
        );
    }
    // Ready=True on a Cluster is not Available=True.
    let c = with_condition(obs["cluster"].clone(), "Ready", "True");
    obs.insert("cluster", c);
    assert!(!ready_of(&compose(&request(&xr, &obs, Some(&[]))))["cluster"]);
}

fn ttl_of(rsp: &RunFunctionResponse) -> Option<i64> {
    rsp.meta.as_ref().and_then(|m| m.ttl).map(|t| t.seconds)
}

/// The host is not watched: while it moves, the XR looks again within
/// seconds; while it waits on people or is settled, slowly.
#[test]
fn the_next_look_comes_sooner_while_a_host_moves() {
    let xr = example_xr();
    let empty = BTreeMap::new();
    let ttl = |hosts: &[Value]| ttl_of(&compose(&request(&xr, &empty, Some(hosts))));
    assert_eq!(ttl(&[]), Some(30), "no host: waiting on people");
    assert_eq!(
        ttl(&[host("r730", "inspecting", None, false)]),
        Some(3),
        "on its way"
    );
    assert_eq!(
        ttl(&[host("r730", "available", None, false)]),
        Some(3),
        "about to be claimed"
    );
    let claimed = |state: &str| host("r730", state, Some("r730-cluster-x7k2p"), true);
    assert_eq!(ttl(&[claimed("provisioning")]), Some(3));
    assert_eq!(ttl(&[claimed("provisioned")]), Some(3), "bootstrapping");
    let mut failing = claimed("provisioning");
    failing["status"]["errorMessage"] = json!("boom");
    assert_eq!(
        ttl(&[failing.clone()]),
        Some(30),
        "BMO retries on its own schedule"
    );

    // Crossplane's circuit breaker opened at midnight and drops the XR's
    // watch events (the host's annotation among them) for its 5 minute
    // cooldown: meanwhile the XR polls, whatever the phase. Later the first
    // event closes it, though the condition still says False.
    let midnight = 1_796_601_600; // 2026-12-07T00:00:00Z
    let mut dropping = xr.clone();
    dropping["status"]["conditions"] = json!([{"type": "Responsive", "status": "False",
        "reason": "WatchCircuitOpen", "lastTransitionTime": "2026-12-07T00:00:00Z"}]);
    let at = |hosts: &[Value], now: i64| {
        ttl_of(&metalplane::compose::compose_at(
            &request(&dropping, &empty, Some(hosts)),
            now,
        ))
    };
    assert_eq!(at(&[], midnight + 60), Some(3));
    assert_eq!(at(std::slice::from_ref(&failing), midnight + 320), Some(3));
    assert_eq!(at(&[], midnight + 331), Some(30), "the cooldown is over");
    assert_eq!(at(&[failing], midnight + 3600), Some(30));
}

/// Once Ready the XR looks again every minute for its first 5 minutes
/// (KCP still reports what nothing watches), then every 10 minutes, or
/// every 30 once the WatchOperation has annotated it (its hosts' changes
/// come as events).
#[test]
fn a_settled_cluster_looks_again_rarely() {
    let midnight = 1_796_601_600; // 2026-12-07T00:00:00Z
    let mut xr = example_xr();
    xr["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
        "reason": "Available", "lastTransitionTime": "2026-12-07T00:00:00Z"}]);
    let c = |now| metalplane::compose::Clock::of(&xr, now);
    assert!(c(midnight + 299).just_ready);
    assert!(!c(midnight + 300).just_ready);
    assert!(!c(midnight).events_dropped);
    let pool = metalplane::status::Pool::Unknown;
    let ttl = |now| metalplane::compose::ttl(metalplane::status::Phase::Ready, &pool, c(now));
    assert_eq!(ttl(midnight + 10).as_secs(), 60);
    assert_eq!(ttl(midnight + 301).as_secs(), 600);
    assert!(!c(midnight + 301).hosts_followed);
    let mut followed = xr.clone();
    followed["metadata"]["annotations"] = json!({metalplane::operate::nudge::HOST_OBSERVED_ANNOTATION: "gpu-0: provisioned, power on, OK"});
    let clock = metalplane::compose::Clock::of(&followed, midnight + 301);
    assert!(clock.hosts_followed);
    let ready = |c| metalplane::compose::ttl(metalplane::status::Phase::Ready, &pool, c);
    assert_eq!(ready(clock).as_secs(), 1800);
    let settling = metalplane::compose::Clock::of(&followed, midnight + 10);
    assert_eq!(ready(settling).as_secs(), 60, "settling first");
    let waiting = metalplane::compose::ttl(metalplane::status::Phase::HostError, &pool, clock);
    assert_eq!(waiting.as_secs(), 30, "only Ready looks rarely");
    let mut not_ready = xr.clone();
    not_ready["status"]["conditions"][0]["status"] = json!("False");
    assert!(
        !metalplane::compose::Clock::of(&not_ready, midnight + 10).just_ready,
        "not Ready: not settling"
    );
}

/// A MetalCluster deleted in the background leaves its Cluster and IPPool
/// to CAPI's teardown; a new one of the same name composes nothing (adopts
/// nothing) until they are gone, then composes as usual.
#[test]
fn a_new_metalcluster_waits_for_the_previous_ones_objects() {
    let mut xr = example_xr();
    xr["metadata"]["uid"] = json!("new-uid");
    let old_cluster = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "r730-cluster", "namespace": "metal",
            "deletionTimestamp": "2026-12-07T23:36:00Z",
            "ownerReferences": [{"apiVersion": "metal.kube.farm/v1alpha1",
                "kind": "MetalCluster", "name": "r730", "uid": "old-uid", "controller": true}]}
    });
    let mut req = request(&xr, &BTreeMap::new(), Some(&[]));
    for (requirement, _, kind) in metalplane::leftovers::KINDS {
        let items = if kind == "Cluster" {
            vec![old_cluster.clone()]
        } else {
            vec![]
        };
        metalplane::render::with_required(&mut req, requirement, &items).expect("required");
    }
    let rsp = compose(&req);
    assert!(
        desired(&rsp).is_empty(),
        "nothing composed: {:?}",
        desired(&rsp).keys()
    );
    assert_eq!(desired_status(&rsp)["phase"], "WaitingForHost");
    let c = rsp
        .conditions
        .iter()
        .find(|c| c.r#type == "HostClaimed")
        .expect("HostClaimed");
    assert_eq!(c.reason, "PreviousTeardown");
    assert!(
        c.message
            .as_deref()
            .is_some_and(|m| m.contains("Cluster r730-cluster (being deleted)")),
        "{:?}",
        c.message
    );
    let reqs = rsp.requirements.as_ref().expect("still reads them");
    let sel = &reqs.resources["same-name-cluster"];
    assert_eq!(
        (sel.kind.as_str(), sel.namespace.as_deref()),
        ("Cluster", Some("metal"))
    );
    assert!(reqs.resources.contains_key("hosts"));

    // Gone: the usual graph.
    let mut req = request(&xr, &BTreeMap::new(), Some(&[]));
    for (requirement, _, _) in metalplane::leftovers::KINDS {
        metalplane::render::with_required(&mut req, requirement, &[]).expect("empty");
    }
    let rsp = compose(&req);
    assert!(desired(&rsp).contains_key("cluster"));
    assert!(desired(&rsp).contains_key("ippool"));
}
