//! `spec.inference` and `spec.network.loadBalancer`: joining the Modelplane
//! fleet. Parsing and the cross-field rules that need the whole spec.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde_json::{Value, json};

use crate::reader::Reader;
use crate::validate;

/// Modelplane reads adopted clusters' kubeconfigs from this namespace only.
pub const MODELPLANE_NAMESPACE: &str = "modelplane-system";
pub const POOL_LABEL: &str = "modelplane.ai/pool";
pub const DEFAULT_NODE_POOL: &str = "gpu";
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

pub fn parse_load_balancer(r: &mut Reader, xr: &Value) -> Option<LoadBalancer> {
    let path = "spec.network.loadBalancer";
    let raw = r.opt_str(xr, path)?;
    let v = Value::String(raw.clone());
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
        validate::ipv4_cidr(&raw).map(LoadBalancer::Cidr)
    } else {
        Err(
            "must be an IPv4 range FIRST-LAST or a CIDR (e.g. 192.168.120.200-192.168.120.220)"
                .to_string(),
        )
    };
    match parsed {
        Ok(lb) => Some(lb),
        Err(reason) => {
            r.fail(path, Some(&v), reason);
            None
        }
    }
}

fn check_device(r: &mut Reader, path: &str, d: &Value) {
    let Value::Object(m) = d else {
        r.fail(path, Some(d), "must be an object");
        return;
    };
    let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
    if name.is_empty() || name.len() > 63 {
        r.fail(
            &format!("{path}.name"),
            m.get("name"),
            "is required: at most 63 characters",
        );
    }
    let driver = m.get("driver").and_then(Value::as_str).unwrap_or_default();
    if driver.is_empty() || driver.len() > 253 {
        r.fail(
            &format!("{path}.driver"),
            m.get("driver"),
            "is required: a DRA driver name such as gpu.nvidia.com",
        );
    }
    let claim = m.get("claim").and_then(Value::as_str).unwrap_or("DRA");
    if !["DRA", "Synthetic"].contains(&claim) {
        r.fail(
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
        r.fail(
            &format!("{path}.deviceClassName"),
            None,
            "is required when claim is DRA",
        );
    }
    if let Some(c) = m.get("count")
        && !c.as_i64().is_some_and(|c| (1..=64).contains(&c))
    {
        r.fail(
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
pub fn node_pool(r: &mut Reader, xr: &Value, parsed: Option<&Inference>) -> String {
    match parsed {
        Some(inf) => inf.node_pool.clone(),
        None => read_node_pool(r, xr),
    }
}

/// `spec.inference.nodePool`, validated, or the default.
fn read_node_pool(r: &mut Reader, xr: &Value) -> String {
    let pool = r
        .opt_str(xr, "spec.inference.nodePool")
        .unwrap_or_else(|| DEFAULT_NODE_POOL.into());
    if validate::dns_label(&pool).is_err() || pool.len() > 40 {
        r.fail(
            "spec.inference.nodePool",
            Some(&Value::String(pool.clone())),
            "must be a DNS label of at most 40 characters (Modelplane node pool name)",
        );
    }
    pool
}

/// Parses `spec.inference`. None when absent or `enabled: false`.
pub fn parse(
    r: &mut Reader,
    xr: &Value,
    xr_name: Option<&str>,
    namespace: &str,
) -> Option<Inference> {
    r.lookup(xr, "spec.inference")?;
    let enabled = match r.lookup(xr, "spec.inference.enabled") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            r.fail(
                "spec.inference.enabled",
                Some(other),
                "must be true or false",
            );
            false
        }
    };
    if !enabled {
        return None;
    }
    let name = xr_name.unwrap_or_default();

    let node_pool = read_node_pool(r, xr);
    let subdomain = |s: &str| {
        !s.is_empty() && s.len() <= 253 && s.split('.').all(|l| validate::dns_label(l).is_ok())
    };

    let class_name = r
        .opt_str(xr, "spec.inference.className")
        .unwrap_or_else(|| format!("{namespace}-{name}-{node_pool}"));
    if !subdomain(&class_name) {
        r.fail(
            "spec.inference.className",
            Some(&Value::String(class_name.clone())),
            "must be a DNS subdomain (an InferenceClass name)",
        );
    }
    let cluster_name = r
        .opt_str(xr, "spec.inference.clusterName")
        .unwrap_or_else(|| format!("{namespace}-{name}"));
    if validate::dns_label(&cluster_name).is_err() {
        r.fail(
            "spec.inference.clusterName",
            Some(&Value::String(cluster_name.clone())),
            "must be a DNS label of at most 63 characters (an InferenceCluster name, cluster-scoped: unique across namespaces)",
        );
    }
    let description = r
        .opt_str(xr, "spec.inference.description")
        .unwrap_or_default();
    let devices: Vec<Value> = match r.lookup(xr, "spec.inference.devices") {
        None => Vec::new(),
        Some(Value::Array(list)) if !list.is_empty() && list.len() <= 16 => {
            for (i, d) in list.iter().enumerate() {
                check_device(r, &format!("spec.inference.devices[{i}]"), d);
            }
            list.clone()
        }
        Some(other) => {
            r.fail(
                "spec.inference.devices",
                Some(other),
                "must be a list of 1 to 16 devices",
            );
            Vec::new()
        }
    };
    let cache = r.opt_str(xr, "spec.inference.existing.cache.storageClassName");
    if let Some(c) = &cache
        && !subdomain(c)
    {
        r.fail(
            "spec.inference.existing.cache.storageClassName",
            Some(&Value::String(c.clone())),
            "must be a StorageClass name",
        );
    }
    let pc_kind = r
        .opt_str(xr, "spec.inference.providerConfigRef.kind")
        .unwrap_or_else(|| "ClusterProviderConfig".into());
    if !["ClusterProviderConfig", "ProviderConfig"].contains(&pc_kind.as_str()) {
        r.fail(
            "spec.inference.providerConfigRef.kind",
            Some(&Value::String(pc_kind.clone())),
            "must be ClusterProviderConfig or ProviderConfig",
        );
    }
    let pc_name = r
        .opt_str(xr, "spec.inference.providerConfigRef.name")
        .unwrap_or_else(|| "default".into());
    if !subdomain(&pc_name) {
        r.fail(
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
            kind: pc_kind,
            name: pc_name,
        },
    })
}
