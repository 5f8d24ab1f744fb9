//! Readiness of composed resources and the progress shown on the XR, all
//! derived from observed state.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api;
use crate::builders::POOL_LABEL;
use crate::hosts;
use crate::names::Names;
use crate::spec::MetalCluster;

/// True when `obj` has `status.conditions[type=typ].status == "True"`.
pub fn condition_is_true(obj: &Value, typ: &str) -> bool {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(typ)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// Crossplane's condition on an XR saying whether it acts on the XR's watch
/// events: `False` (reason `WatchCircuitOpen`) once its circuit breaker
/// opened. The breaker drops events for its cooldown (5 minutes by
/// default), one let through every 30 s; the first event after that closes
/// it, but the condition says False until a reconcile sees it closed.
pub const RESPONSIVE: &str = "Responsive";

/// Crossplane's default `--circuit-breaker-cooldown`, plus one half-open
/// interval: how long after the circuit opened events may be dropped.
pub const CIRCUIT_DROPS_FOR_S: i64 = 300 + 30;

/// Whether Crossplane may be dropping the XR's watch events at `now` (Unix
/// seconds), the owner annotation an operation writes (operate::nudge)
/// among them: its circuit opened less than `CIRCUIT_DROPS_FOR_S` ago.
pub fn watch_events_dropped(xr: &Value, now: i64) -> bool {
    let Some(c) = xr
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(RESPONSIVE))
        })
    else {
        return false;
    };
    if c.get("status").and_then(Value::as_str) != Some("False") {
        return false;
    }
    let opened = c
        .get("lastTransitionTime")
        .cloned()
        .and_then(|t| {
            serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>(t).ok()
        })
        .map(|t| t.0.as_second());
    // Without a time, assume it closed: polling forever would be worse.
    opened.is_some_and(|o| now - o < CIRCUIT_DROPS_FOR_S)
}

/// When the XR last became Ready (Crossplane's `Ready` condition turned
/// True), in Unix seconds.
pub fn ready_since(xr: &Value) -> Option<i64> {
    let c = xr
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?;
    if c.get("status").and_then(Value::as_str) != Some("True") {
        return None;
    }
    let t: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
        serde_json::from_value(c.get("lastTransitionTime")?.clone()).ok()?;
    Some(t.0.as_second())
}

/// The condition that makes a composed resource ready, if it needs one.
/// Everything else is ready as soon as it exists.
pub fn readiness_condition(resource_name: &str) -> Option<&'static str> {
    match resource_name {
        "cluster" => Some("Available"),
        "cilium" => Some("Ready"),
        _ => None,
    }
}

/// The InferenceCluster as provider-kubernetes last observed it.
fn observed_manifest(object: &Value) -> Option<&Value> {
    object.pointer("/status/atProvider/manifest")
}

/// The gateway address of a Ready InferenceCluster: Modelplane's signal
/// that the cluster receives work.
pub fn inference_gateway(object: Option<&Value>) -> Option<String> {
    let m = observed_manifest(object?)?;
    if !condition_is_true(m, "Ready") {
        return None;
    }
    m.pointer("/status/gateway/address")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .map(String::from)
}

/// Whether the workload API server answers: the Cluster is Available, or
/// its control plane is (Cluster v1beta2 `ControlPlaneAvailable`: etcd
/// quorum and a healthy API server). A fleet's Cluster is Available only
/// once its worker pools are, whose nodes are NotReady until the CNI runs:
/// waiting for Available to install Cilium would never end.
pub fn api_up(cluster: Option<&Value>) -> bool {
    cluster.is_some_and(|c| {
        condition_is_true(c, "Available") || condition_is_true(c, "ControlPlaneAvailable")
    })
}

/// Whether the observed composed resource named `resource_name` is ready.
pub fn is_ready(resource_name: &str, observed: Option<&Value>) -> bool {
    if resource_name == "inference-cluster" {
        return inference_gateway(observed).is_some();
    }
    // A control plane is ready when its rollout is done, not when it exists:
    // a rollout that waits for a host must not sit under Ready=True.
    if resource_name == "kubeadmcontrolplane"
        || crate::builders::workers::is_machine_deployment(resource_name)
    {
        return rollout(observed).is_some_and(|r| r.complete());
    }
    match (observed, readiness_condition(resource_name)) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(o), Some(c)) => condition_is_true(o, c),
    }
}

/// Stages of a MetalCluster's life, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    WaitingForHost,
    /// The claimed host reports an error (BMO retries).
    HostError,
    Provisioning,
    Bootstrapping,
    InstallingCNI,
    Ready,
    /// The API and CNI are up; the control plane or a worker pool is
    /// adding, replacing or removing machines, or a machine is not ready.
    RollingOut,
    /// A new Kubernetes version rolls: the control plane first, then the
    /// worker pools.
    Upgrading,
    /// A MachineHealthCheck found a machine unhealthy; its host is being
    /// rebooted (or the machine replaced).
    Remediating,
    /// CNI installed; Modelplane is adopting the cluster.
    JoiningFleet,
    InferenceReady,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::WaitingForHost => "WaitingForHost",
            Phase::HostError => "HostError",
            Phase::Provisioning => "Provisioning",
            Phase::Bootstrapping => "Bootstrapping",
            Phase::InstallingCNI => "InstallingCNI",
            Phase::Ready => "Ready",
            Phase::RollingOut => "RollingOut",
            Phase::Upgrading => "Upgrading",
            Phase::Remediating => "Remediating",
            Phase::JoiningFleet => "JoiningFleet",
            Phase::InferenceReady => "InferenceReady",
        }
    }
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

/// The `status.host` summary of a claimed host, with BMO's error if any.
pub fn host_summary(h: &Value) -> api::HostStatus {
    let e = hosts::error(h);
    api::HostStatus {
        name: hosts::name(h).into(),
        provisioning_state: hosts::state(h).into(),
        powered_on: h
            .pointer("/status/poweredOn")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        operational_status: str_at(h, "/status/operationalStatus")
            .unwrap_or_default()
            .into(),
        error_type: e.as_ref().map(|e| e.error_type.clone()),
        error_message: e.as_ref().map(|e| e.message.clone()),
        error_count: e.as_ref().map(|e| e.count),
    }
}

/// What the function knows about the host pool.
#[derive(Clone, Debug, PartialEq)]
pub enum Pool<'a> {
    /// Crossplane has not resolved the BareMetalHost requirement yet.
    Unknown,
    /// This host was claimed.
    Claimed(&'a Value),
    /// Nothing is claimed yet: how many hosts CAPM3 could claim, the hosts
    /// BMO is still bringing to `available`, and why the others are passed over.
    Unclaimed {
        claimable: usize,
        on_the_way: Vec<&'a Value>,
        passed_over: Vec<(&'a Value, String)>,
    },
}

pub fn pool_state<'a>(hosts: Option<&'a [Value]>, names: &Names) -> Pool<'a> {
    let Some(hs) = hosts else {
        return Pool::Unknown;
    };
    if let Some(h) = hosts::claimed_host(hs, names) {
        return Pool::Claimed(h);
    }
    let mut claimable = 0;
    let mut on_the_way = Vec::new();
    let mut passed_over = Vec::new();
    for h in hs {
        if hosts::is_on_the_way(h, names) {
            on_the_way.push(h);
        } else if let Some(why) = hosts::unclaimable_reason(h, names) {
            passed_over.push((h, why));
        } else {
            claimable += 1;
        }
    }
    Pool::Unclaimed {
        claimable,
        on_the_way,
        passed_over,
    }
}

/// A rollout as KubeadmControlPlane and MachineDeployment v1beta2 report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rollout {
    pub desired: i64,
    pub replicas: i64,
    pub up_to_date: i64,
    pub ready: i64,
    /// KCP has seen its latest spec and every machine is up to date.
    pub settled: bool,
}

impl Rollout {
    pub fn rolling_out(&self) -> bool {
        !self.settled
    }

    /// Every desired machine is up to date and ready.
    pub fn complete(&self) -> bool {
        self.settled && self.ready >= self.desired
    }
}

/// KubeadmControlPlane and MachineDeployment share the replica counters, observedGeneration and RollingOut.
pub fn rollout(kcp: Option<&Value>) -> Option<Rollout> {
    let kcp = kcp?;
    let int = |p: &str| kcp.pointer(p).and_then(Value::as_i64);
    let desired = int("/spec/replicas").unwrap_or(1);
    let replicas = int("/status/replicas").unwrap_or(0);
    let up_to_date = int("/status/upToDateReplicas").unwrap_or(0);
    let generation = int("/metadata/generation").unwrap_or(0);
    let observed = int("/status/observedGeneration").unwrap_or(0);
    let rolling_condition = condition_is_true(kcp, "RollingOut");
    Some(Rollout {
        desired,
        replicas,
        up_to_date,
        ready: int("/status/readyReplicas").unwrap_or(0),
        settled: observed >= generation
            && replicas == desired
            && up_to_date == desired
            && !rolling_condition,
    })
}

/// Whether the control plane and every worker pool are complete at the
/// replicas the spec asks for now (an edit not yet applied is not done).
pub fn machines_complete(mc: &MetalCluster, observed: &BTreeMap<String, Value>) -> bool {
    let cp = rollout(observed.get("kubeadmcontrolplane"))
        .is_none_or(|r| r.complete() && r.desired == i64::from(mc.spec.control_plane.replicas));
    cp && worker_rollouts(mc, observed)
        .into_iter()
        .zip(&mc.spec.workers)
        .all(|((_, r), w)| r.is_some_and(|r| r.complete() && r.desired == i64::from(w.replicas)))
}

/// Composition resource name of the control plane.
pub const KCP: &str = "kubeadmcontrolplane";

/// The version a MachineDeployment's machines are built at.
pub fn md_version(md: &Value) -> Option<&str> {
    md.pointer("/spec/template/spec/version")
        .and_then(Value::as_str)
}

/// Whether a machine set is told, or still runs, another version than the
/// spec's: the KubeadmControlPlane's status or a pool's MachineDeployment
/// (held at its version until the control plane is done).
pub fn upgrading(mc: &MetalCluster, observed: &BTreeMap<String, Value>) -> bool {
    let v = mc.spec.kubernetes.version.as_str();
    let cp = observed
        .get(KCP)
        .and_then(|k| k.pointer("/status/version"))
        .and_then(Value::as_str)
        .is_some_and(|cv| cv != v);
    cp || mc.spec.workers.iter().any(|w| {
        observed
            .get(&crate::builders::workers::resource_name(w))
            .and_then(md_version)
            .is_some_and(|mv| mv != v)
    })
}

/// One set's version and counts, as `status.kubernetes` shows them.
fn set_version(
    name: Option<String>,
    version: Option<&str>,
    r: Option<Rollout>,
    desired: i64,
) -> api::SetVersion {
    api::SetVersion {
        name,
        version: version.unwrap_or_default().into(),
        up_to_date: r.map_or(0, |r| r.up_to_date),
        desired,
    }
}

/// Where the Kubernetes version stands: each set's version (the control
/// plane's as KCP reports it, the oldest its machines run) and up-to-date
/// count; `version` only once every set runs the spec's version with every
/// machine up to date (no upgrade rolling).
pub fn kubernetes_status(
    mc: &MetalCluster,
    observed: &BTreeMap<String, Value>,
) -> Option<api::KubernetesStatus> {
    let kcp = observed.get(KCP)?;
    let v = mc.spec.kubernetes.version.as_str();
    let cp_rollout = rollout(Some(kcp));
    let cp = set_version(
        None,
        kcp.pointer("/status/version").and_then(Value::as_str),
        cp_rollout,
        i64::from(mc.spec.control_plane.replicas),
    );
    let settled = |r: Option<Rollout>| r.is_some_and(|r| r.settled);
    let mut done = cp.version == v && settled(cp_rollout);
    let mut workers = Vec::new();
    for w in &mc.spec.workers {
        let md = observed.get(&crate::builders::workers::resource_name(w));
        let r = rollout(md);
        let sv = set_version(
            Some(w.name.clone()),
            md.and_then(md_version),
            r,
            i64::from(w.replicas),
        );
        done &= sv.version == v && settled(r);
        workers.push(sv);
    }
    Some(api::KubernetesStatus {
        version: done.then(|| v.to_string()),
        control_plane: Some(cp),
        workers,
    })
}

pub fn phase(
    mc: &MetalCluster,
    observed: &BTreeMap<String, Value>,
    pool: &Pool<'_>,
    remediating: bool,
    machines_behind: bool,
) -> Phase {
    let inference = mc.spec.inference.is_some();
    if let Pool::Claimed(h) = pool
        && hosts::error(h).is_some()
    {
        return Phase::HostError;
    }
    // A single node being rebooted takes its API down with it: the
    // remediation is what is going on, not a new bootstrap.
    if remediating {
        return Phase::Remediating;
    }
    if api_up(observed.get("cluster")) {
        if !is_ready("cilium", observed.get("cilium")) {
            return Phase::InstallingCNI;
        }
        // A set at another version than the spec's is upgrading even when
        // complete at its own (a pool held until the control plane is done).
        if machines_behind || upgrading(mc, observed) {
            return Phase::Upgrading;
        }
        // Not complete: rolling out, scaling, or machines not ready yet.
        if !machines_complete(mc, observed) {
            return Phase::RollingOut;
        }
        match (
            inference,
            is_ready("inference-cluster", observed.get("inference-cluster")),
        ) {
            (false, _) => Phase::Ready,
            (true, true) => Phase::InferenceReady,
            (true, false) => Phase::JoiningFleet,
        }
    } else {
        match pool {
            Pool::Claimed(h) if hosts::state(h) == "provisioned" => Phase::Bootstrapping,
            Pool::Claimed(_) => Phase::Provisioning,
            Pool::Unknown | Pool::Unclaimed { .. } => Phase::WaitingForHost,
        }
    }
}

fn rollout_status(r: Rollout) -> api::RolloutStatus {
    api::RolloutStatus {
        desired_replicas: r.desired,
        replicas: r.replicas,
        up_to_date_replicas: r.up_to_date,
        ready_replicas: r.ready,
        rolling_out: r.rolling_out(),
    }
}

/// A claimed host as `status.hosts` lists it: its summary and its pool.
pub fn claimed_host(h: &Value) -> api::ClaimedHost {
    let s = host_summary(h);
    api::ClaimedHost {
        name: s.name,
        pool: h
            .pointer("/metadata/labels")
            .and_then(|l| l.get(POOL_LABEL))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .into(),
        provisioning_state: s.provisioning_state,
        powered_on: s.powered_on,
        error_message: hosts::error(h).map(|e| e.summary()),
    }
}

/// The worker pools' rollouts, in spec order (absent until observed).
pub fn worker_rollouts(
    mc: &MetalCluster,
    observed: &BTreeMap<String, Value>,
) -> Vec<(String, Option<Rollout>)> {
    mc.spec
        .workers
        .iter()
        .map(|w| {
            let r = rollout(observed.get(&crate::builders::workers::resource_name(w)));
            (w.name.clone(), r)
        })
        .collect()
}

/// `ready/desired` nodes over the control plane and every worker pool.
pub fn nodes(mc: &MetalCluster, observed: &BTreeMap<String, Value>) -> String {
    let cp = rollout(observed.get("kubeadmcontrolplane"));
    let mut ready = cp.map_or(0, |r| r.ready);
    let mut desired = i64::from(mc.spec.control_plane.replicas);
    for (w, (_, r)) in mc.spec.workers.iter().zip(worker_rollouts(mc, observed)) {
        ready += r.map_or(0, |r| r.ready);
        desired += i64::from(w.replicas);
    }
    format!("{ready}/{desired}")
}

/// The XR's status: the original's four fields, the phase, the host and
/// the ready/desired nodes; with spec.controlPlane or spec.workers also
/// every host and pool.
pub fn xr_status(
    mc: &MetalCluster,
    names: &Names,
    observed: &BTreeMap<String, Value>,
    pool: &Pool<'_>,
    claimed: &[&Value],
    machines: &MachinesSeen,
) -> api::MetalClusterStatus {
    let multi = mc.spec.fleet || !mc.spec.workers.is_empty();
    api::MetalClusterStatus {
        // A single node shows 1/1 too: the NODES column is never empty.
        nodes: Some(nodes(mc, observed)),
        hosts: if multi {
            claimed.iter().map(|h| claimed_host(h)).collect()
        } else {
            Vec::new()
        },
        workers: worker_rollouts(mc, observed)
            .into_iter()
            .filter_map(|(name, r)| {
                r.map(|r| api::WorkerPoolStatus {
                    name,
                    rollout: rollout_status(r),
                })
            })
            .collect(),
        control_plane_endpoint: format!(
            "{}:{}",
            mc.spec.control_plane.endpoint,
            crate::builders::metal3::API_SERVER_PORT
        ),
        kubeconfig_secret: names.kubeconfig_secret.clone(),
        host_pool: mc.spec.host.pool.clone(),
        control_plane_available: is_ready("cluster", observed.get("cluster")),
        phase: phase(
            mc,
            observed,
            pool,
            !machines.unhealthy.is_empty(),
            machines.behind,
        )
        .as_str()
        .into(),
        kubernetes: kubernetes_status(mc, observed),
        certificates_expiry_date: machines.expiry.as_ref().map(|(s, _)| s.clone()),
        control_plane: rollout(observed.get("kubeadmcontrolplane")).map(rollout_status),
        host: match pool {
            Pool::Claimed(h) => Some(host_summary(h)),
            _ => None,
        },
        inference: mc.spec.inference.as_ref().map(|inf| api::InferenceStatus {
            cluster: inf.cluster_name.clone(),
            class: inf.class_name.clone(),
            node_pool: inf.node_pool.clone(),
            gateway_address: inference_gateway(observed.get("inference-cluster")),
            pools: if mc.spec.workers.iter().any(|w| w.gpu.is_some()) {
                crate::builders::fleet::node_pools(mc, names, inf)
                    .into_iter()
                    .map(|p| api::InferencePoolStatus {
                        node_pool: p.name,
                        class: p.class_name,
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }),
    }
}

/// What the function read from the cluster's Machines.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachinesSeen {
    pub unhealthy: Vec<crate::machines::Unhealthy>,
    /// The earliest control plane certificate expiry (RFC 3339, seconds).
    pub expiry: Option<(String, i64)>,
    /// A machine runs another version than its set asks for.
    pub behind: bool,
}

/// The label selector of the pool's BareMetalHosts.
pub fn pool_selector(mc: &MetalCluster) -> std::collections::HashMap<String, String> {
    selector(&mc.spec.host.pool)
}

pub fn selector(pool: &str) -> std::collections::HashMap<String, String> {
    std::collections::HashMap::from([(POOL_LABEL.to_string(), pool.to_string())])
}

/// The host pools the worker pools draw from besides the control plane's,
/// each once, as (requirement name, pool).
pub fn worker_host_pools(mc: &MetalCluster) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for w in &mc.spec.workers {
        if w.pool != mc.spec.host.pool && !out.iter().any(|(_, p)| *p == w.pool) {
            out.push((format!("hosts.{}", w.pool), w.pool.clone()));
        }
    }
    out
}

/// `a, b, c, and N more`, like Crossplane's unready-resources message.
pub fn first_n_and_more(mut names: Vec<String>, n: usize) -> String {
    names.sort();
    if names.len() <= n {
        return names.join(", ");
    }
    let more = names.len() - n;
    format!("{}, and {more} more", names[..n].join(", "))
}
