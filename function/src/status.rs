//! Readiness of composed resources and the progress shown on the XR, all
//! derived from observed state.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::builders::POOL_LABEL;
use crate::names::Names;
use crate::spec::MetalCluster;

/// The label CAPM3 puts on a BareMetalHost it claimed for a cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

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

/// Whether the observed composed resource named `resource_name` is ready.
pub fn is_ready(resource_name: &str, observed: Option<&Value>) -> bool {
    if resource_name == "inference-cluster" {
        return inference_gateway(observed).is_some();
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
    Provisioning,
    Bootstrapping,
    InstallingCNI,
    Ready,
    /// CNI installed; Modelplane is adopting the cluster.
    JoiningFleet,
    InferenceReady,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::WaitingForHost => "WaitingForHost",
            Phase::Provisioning => "Provisioning",
            Phase::Bootstrapping => "Bootstrapping",
            Phase::InstallingCNI => "InstallingCNI",
            Phase::Ready => "Ready",
            Phase::JoiningFleet => "JoiningFleet",
            Phase::InferenceReady => "InferenceReady",
        }
    }
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

/// The BareMetalHost CAPM3 claimed for this cluster: labelled with the
/// cluster name, or consumed by one of its Metal3Machines.
pub fn claimed_host<'a>(hosts: &'a [Value], names: &Names) -> Option<&'a Value> {
    let label_ptr = format!("/metadata/labels/{}", CLUSTER_NAME_LABEL.replace('/', "~1"));
    hosts.iter().find(|h| {
        let consumer = h.pointer("/spec/consumerRef");
        let by_label = str_at(h, &label_ptr) == Some(names.cluster.as_str());
        let by_consumer = consumer.is_some_and(|c| {
            str_at(c, "/kind") == Some("Metal3Machine")
                && str_at(c, "/name").is_some_and(|n| n.starts_with(&names.machine_template))
        });
        (by_label && consumer.is_some()) || by_consumer
    })
}

/// Whether CAPM3 could claim this host: available, unconsumed, healthy.
pub fn is_claimable(h: &Value) -> bool {
    let annotations = h
        .pointer("/metadata/annotations")
        .and_then(Value::as_object);
    let blocked = annotations.is_some_and(|a| {
        a.contains_key("baremetalhost.metal3.io/paused")
            || a.contains_key("baremetalhost.metal3.io/detached")
            || a.contains_key("capi.metal3.io/unhealthy")
    });
    str_at(h, "/status/provisioning/state") == Some("available")
        && h.pointer("/spec/consumerRef").is_none_or(Value::is_null)
        && str_at(h, "/status/errorMessage").is_none_or(str::is_empty)
        && !blocked
}

/// The `status.host` summary of a claimed host.
pub fn host_summary(h: &Value) -> Value {
    json!({
        "name": str_at(h, "/metadata/name").unwrap_or_default(),
        "provisioningState": str_at(h, "/status/provisioning/state").unwrap_or_default(),
        "poweredOn": h.pointer("/status/poweredOn").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// What the function knows about the host pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pool<'a> {
    /// Crossplane has not resolved the BareMetalHost requirement yet.
    Unknown,
    /// This host was claimed.
    Claimed(&'a Value),
    /// Nothing is claimed yet; this many hosts could be.
    Unclaimed { claimable: usize },
}

pub fn pool_state<'a>(hosts: Option<&'a [Value]>, names: &Names) -> Pool<'a> {
    match hosts {
        None => Pool::Unknown,
        Some(hs) => match claimed_host(hs, names) {
            Some(h) => Pool::Claimed(h),
            None => Pool::Unclaimed {
                claimable: hs.iter().filter(|h| is_claimable(h)).count(),
            },
        },
    }
}

pub fn phase(observed: &BTreeMap<String, Value>, pool: Pool<'_>, inference: bool) -> Phase {
    if is_ready("cluster", observed.get("cluster")) {
        if is_ready("cilium", observed.get("cilium")) {
            match (
                inference,
                is_ready("inference-cluster", observed.get("inference-cluster")),
            ) {
                (false, _) => Phase::Ready,
                (true, true) => Phase::InferenceReady,
                (true, false) => Phase::JoiningFleet,
            }
        } else {
            Phase::InstallingCNI
        }
    } else {
        match pool {
            Pool::Claimed(h) if str_at(h, "/status/provisioning/state") == Some("provisioned") => {
                Phase::Bootstrapping
            }
            Pool::Claimed(_) => Phase::Provisioning,
            Pool::Unknown | Pool::Unclaimed { .. } => Phase::WaitingForHost,
        }
    }
}

/// The XR's status: the original's four fields, the phase and the host.
pub fn xr_status(
    mc: &MetalCluster,
    names: &Names,
    observed: &BTreeMap<String, Value>,
    pool: Pool<'_>,
) -> Value {
    let mut status = json!({
        "controlPlaneEndpoint": format!("{}:{}", mc.spec.network.node_ip, crate::builders::metal3::API_SERVER_PORT),
        "kubeconfigSecret": names.kubeconfig_secret,
        "hostPool": mc.spec.host.pool,
        "controlPlaneAvailable": is_ready("cluster", observed.get("cluster")),
        "phase": phase(observed, pool, mc.spec.inference.is_some()).as_str(),
    });
    if let (Pool::Claimed(h), Value::Object(m)) = (pool, &mut status) {
        m.insert("host".into(), host_summary(h));
    }
    if let (Some(inf), Value::Object(m)) = (&mc.spec.inference, &mut status) {
        let mut s = json!({"cluster": inf.cluster_name, "class": inf.class_name, "nodePool": inf.node_pool});
        if let Some(addr) = inference_gateway(observed.get("inference-cluster")) {
            s["gatewayAddress"] = json!(addr);
        }
        m.insert("inference".into(), s);
    }
    status
}

/// The label selector of the pool's BareMetalHosts.
pub fn pool_selector(mc: &MetalCluster) -> std::collections::HashMap<String, String> {
    std::collections::HashMap::from([(POOL_LABEL.to_string(), mc.spec.host.pool.clone())])
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
