//! `spec.inference` and `spec.network.loadBalancer`: joining the Modelplane
//! fleet. Parsing and the cross-field rules that need the whole spec.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde_json::{Value, json};

use crate::api;
use crate::api::DEFAULT_NODE_POOL;
use crate::decode::Problems;
use crate::validate;

/// Modelplane reads adopted clusters' kubeconfigs from this namespace only.
pub const MODELPLANE_NAMESPACE: &str = "modelplane-system";
pub const POOL_LABEL: &str = "modelplane.ai/pool";
pub const NVIDIA_DRIVER: &str = "gpu.nvidia.com";

/// Addresses Cilium LB IPAM hands to LoadBalancer Services.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadBalancer {
    Range { start: Ipv4Addr, stop: Ipv4Addr },
    Cidr(Ipv4Net),
}

impl LoadBalancer {
    pub fn first(&self) -> Ipv4Addr {
        match self {
            LoadBalancer::Range { start, .. } => *start,
            LoadBalancer::Cidr(n) => n.network(),
        }
    }
    pub fn last(&self) -> Ipv4Addr {
        match self {
            LoadBalancer::Range { stop, .. } => *stop,
            LoadBalancer::Cidr(n) => n.broadcast(),
        }
    }
    pub fn contains(&self, a: Ipv4Addr) -> bool {
        self.first() <= a && a <= self.last()
    }
    /// The CiliumLoadBalancerIPPool block.
    pub fn block(&self) -> Value {
        match self {
            LoadBalancer::Range { start, stop } => {
                json!({"start": start.to_string(), "stop": stop.to_string()})
            }
            LoadBalancer::Cidr(n) => json!({"cidr": n.to_string()}),
        }
    }
}

/// Where a provider-kubernetes Object is applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderConfigRef {
    pub kind: String,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Inference {
    pub node_pool: String,
    pub class_name: String,
    pub description: String,
    pub devices: Vec<Value>,
    pub cluster_name: String,
    pub cache_storage_class: Option<String>,
    /// The management cluster, where Modelplane runs.
    pub provider_config: ProviderConfigRef,
    /// The kubeconfig copy in modelplane-system.
    pub secret_name: String,
}

pub fn parse_load_balancer(p: &mut Problems, raw: Option<&str>) -> Option<LoadBalancer> {
    let path = "spec.network.loadBalancer";
    let raw = raw?;
    let parsed = if let Some((a, b)) = raw.split_once('-') {
        match (validate::ipv4(a.trim()), validate::ipv4(b.trim())) {
            (Ok(start), Ok(stop)) if start <= stop => Ok(LoadBalancer::Range { start, stop }),
            (Ok(_), Ok(_)) => {
                Err("is an empty range: the first address must not be after the last".to_string())
            }
            _ => Err(
                "must be an IPv4 range FIRST-LAST or a CIDR (e.g. 192.168.120.200-192.168.120.220)"
                    .to_string(),
            ),
        }
    } else if raw.contains('/') {
        validate::ipv4_cidr(raw).map(LoadBalancer::Cidr)
    } else {
        Err(
            "must be an IPv4 range FIRST-LAST or a CIDR (e.g. 192.168.120.200-192.168.120.220)"
                .to_string(),
        )
    };
    p.check(path, raw, parsed)
}

/// One of `spec.inference.devices`: kept as given (Modelplane's shape),
/// checked for what Modelplane needs of it.
fn check_device(p: &mut Problems, path: &str, d: &Value) {
    let empty = serde_json::Map::new();
    let m = d.as_object().unwrap_or(&empty);
    let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
    if name.is_empty() || name.len() > 63 {
        p.fail(
            &format!("{path}.name"),
            m.get("name"),
            "is required: at most 63 characters",
        );
    }
    let driver = m.get("driver").and_then(Value::as_str).unwrap_or_default();
    if driver.is_empty() || driver.len() > 253 {
        p.fail(
            &format!("{path}.driver"),
            m.get("driver"),
            "is required: a DRA driver name such as gpu.nvidia.com",
        );
    }
    let claim = m.get("claim").and_then(Value::as_str).unwrap_or("DRA");
    if !["DRA", "Synthetic"].contains(&claim) {
        p.fail(
            &format!("{path}.claim"),
            m.get("claim"),
            "must be DRA or Synthetic",
        );
    }
    if claim == "DRA"
        && m.get("deviceClassName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        p.fail(
            &format!("{path}.deviceClassName"),
            None,
            "is required when claim is DRA",
        );
    }
    if let Some(c) = m.get("count")
        && !c.as_i64().is_some_and(|c| (1..=64).contains(&c))
    {
        p.fail(
            &format!("{path}.count"),
            Some(c),
            "must be between 1 and 64",
        );
    }
}

/// The node's Modelplane pool label value: `spec.inference.nodePool`
/// (default `gpu`), whether or not the cluster is in the fleet. The label
/// is on every node from its first boot, so joining or leaving the fleet
/// never changes the machine (which a single node could not roll).
pub fn node_pool(
    p: &mut Problems,
    spec: Option<&api::InferenceSpec>,
    parsed: Option<&Inference>,
) -> String {
    match (parsed, spec) {
        (Some(inf), _) => inf.node_pool.clone(),
        (None, Some(s)) => read_node_pool(p, &s.node_pool),
        (None, None) => DEFAULT_NODE_POOL.into(),
    }
}

/// `spec.inference.nodePool`, validated.
fn read_node_pool(p: &mut Problems, pool: &str) -> String {
    if validate::dns_label(pool).is_err() || pool.len() > 40 {
        p.fail(
            "spec.inference.nodePool",
            Some(&Value::String(pool.to_string())),
            "must be a DNS label of at most 40 characters (Modelplane node pool name)",
        );
    }
    pool.to_string()
}

/// Parses `spec.inference`. None when absent or `enabled: false`.
pub fn parse(
    p: &mut Problems,
    spec: Option<&api::InferenceSpec>,
    name: &str,
    namespace: &str,
) -> Option<Inference> {
    let s = spec.filter(|s| s.enabled)?;
    let node_pool = read_node_pool(p, &s.node_pool);
    let subdomain = |s: &str| {
        !s.is_empty() && s.len() <= 253 && s.split('.').all(|l| validate::dns_label(l).is_ok())
    };

    let class_name = s
        .class_name
        .clone()
        .unwrap_or_else(|| format!("{namespace}-{name}-{node_pool}"));
    if !subdomain(&class_name) {
        p.fail(
            "spec.inference.className",
            Some(&Value::String(class_name.clone())),
            "must be a DNS subdomain (an InferenceClass name)",
        );
    }
    let cluster_name = s
        .cluster_name
        .clone()
        .unwrap_or_else(|| format!("{namespace}-{name}"));
    if validate::dns_label(&cluster_name).is_err() {
        p.fail(
            "spec.inference.clusterName",
            Some(&Value::String(cluster_name.clone())),
            "must be a DNS label of at most 63 characters (an InferenceCluster name, cluster-scoped: unique across namespaces)",
        );
    }
    let description = s.description.clone().unwrap_or_default();
    // Kept as given: each device as the JSON object Modelplane reads.
    let given: Option<Vec<Value>> = s.devices.as_ref().map(|list| {
        list.iter()
            .map(|d| Value::Object(d.clone().into_iter().collect()))
            .collect()
    });
    let devices = match given {
        None => Vec::new(),
        Some(list) if !list.is_empty() && list.len() <= 16 => {
            for (i, d) in list.iter().enumerate() {
                check_device(p, &format!("spec.inference.devices[{i}]"), d);
            }
            list
        }
        Some(list) => {
            p.fail(
                "spec.inference.devices",
                Some(&Value::Array(list)),
                "must be a list of 1 to 16 devices",
            );
            Vec::new()
        }
    };
    let cache = s
        .existing
        .as_ref()
        .and_then(|e| e.cache.as_ref())
        .and_then(|c| c.storage_class_name.clone());
    if let Some(c) = &cache
        && !subdomain(c)
    {
        p.fail(
            "spec.inference.existing.cache.storageClassName",
            Some(&Value::String(c.clone())),
            "must be a StorageClass name",
        );
    }
    let (pc_kind, pc_name) = match &s.provider_config_ref {
        Some(r) => (r.kind, r.name.clone()),
        None => (api::ProviderConfigKind::default(), "default".to_string()),
    };
    if !subdomain(&pc_name) {
        p.fail(
            "spec.inference.providerConfigRef.name",
            Some(&Value::String(pc_name.clone())),
            "must be a ProviderConfig name",
        );
    }
    Some(Inference {
        secret_name: format!("{namespace}-{name}-kubeconfig"),
        node_pool,
        class_name,
        description,
        devices,
        cluster_name,
        cache_storage_class: cache,
        provider_config: ProviderConfigRef {
            kind: pc_kind.as_str().to_string(),
            name: pc_name,
        },
    })
}
