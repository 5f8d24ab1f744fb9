//! `spec.inference` and `spec.network.loadBalancer`: joining the Modelplane
//! fleet. Parsing and the cross-field rules that need the whole spec.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde_json::{Value, json};

use crate::spec::{FieldError, MetalCluster, Reader, show};
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

/// The node labels may not contradict the pool label MetalPlane sets.
pub fn check_pool_label(mc: &MetalCluster) -> Option<FieldError> {
    let v = mc.spec.kubernetes.node_labels.get(POOL_LABEL)?;
    (v != &mc.spec.node_pool).then(|| FieldError {
        path: format!("spec.kubernetes.nodeLabels[{:?}]", POOL_LABEL),
        value: Some(show(&Value::String(v.clone()))),
        reason: format!(
            "conflicts with spec.inference.nodePool {:?} (default gpu); drop the label, MetalPlane sets it",
            mc.spec.node_pool
        ),
    })
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

fn err(path: &str, value: Option<&Value>, reason: impl Into<String>) -> FieldError {
    FieldError {
        path: path.into(),
        value: value.map(show),
        reason: reason.into(),
    }
}

/// Rules across sections, on an otherwise valid spec.
pub fn check(mc: &MetalCluster) -> Vec<FieldError> {
    let mut out = Vec::new();
    let n = &mc.spec.network;
    if let Some(lb) = &n.load_balancer {
        let v = Value::String(format!("{}-{}", lb.first(), lb.last()));
        let subnet = n.node_subnet();
        if !(subnet.contains(&lb.first()) && subnet.contains(&lb.last())) {
            out.push(err(
                "spec.network.loadBalancer",
                Some(&v),
                format!("must lie inside the node subnet {subnet}, where L2 announcements reach"),
            ));
        } else {
            for (what, a) in [
                ("nodeIP", n.node_ip),
                ("gateway", n.gateway),
                ("dnsServer", n.dns_server),
                ("the subnet's network address", subnet.network()),
                ("the subnet's broadcast address", subnet.broadcast()),
            ] {
                if lb.contains(a) {
                    out.push(err(
                        "spec.network.loadBalancer",
                        Some(&v),
                        format!("includes {what} {a}"),
                    ));
                }
            }
        }
    }
    let Some(inf) = &mc.spec.inference else {
        return out;
    };
    if inf.devices.is_empty() && mc.spec.gpu.is_none() {
        out.push(err(
            "spec.inference",
            None,
            "needs spec.gpu (to derive the InferenceClass devices) or spec.inference.devices",
        ));
    }
    if n.load_balancer.is_none() {
        out.push(err(
            "spec.network.loadBalancer",
            None,
            "is required with spec.inference: the inference gateway needs LoadBalancer addresses (a range or CIDR in the node subnet)",
        ));
    }
    out
}

/// The InferenceClass devices: the spec's, or one NVIDIA device derived
/// from spec.gpu.
pub fn devices(mc: &MetalCluster, inf: &Inference) -> Vec<Value> {
    if !inf.devices.is_empty() {
        return inf.devices.clone();
    }
    let gpu = mc.spec.gpu.as_ref();
    let mut d = json!({
        "name": "gpu",
        "driver": NVIDIA_DRIVER,
        "claim": "DRA",
        "deviceClassName": NVIDIA_DRIVER,
        "count": gpu.and_then(|g| g.count).unwrap_or(1),
    });
    if let Some(model) = gpu.and_then(|g| g.model.as_ref()) {
        d["attributes"] = json!({"productName": {"string": model}});
    }
    if let Some(mem) = gpu.and_then(|g| g.memory.as_ref()) {
        d["capacity"] = json!({"memory": {"value": mem}});
    }
    vec![d]
}

pub fn description(mc: &MetalCluster, inf: &Inference) -> String {
    if !inf.description.is_empty() {
        return inf.description.clone();
    }
    let gpu = mc.spec.gpu.as_ref();
    let count = gpu.and_then(|g| g.count).unwrap_or(1);
    let model = gpu
        .and_then(|g| g.model.clone())
        .unwrap_or_else(|| "NVIDIA GPU".into());
    let mem = gpu
        .and_then(|g| g.memory.as_ref())
        .map(|m| format!(" ({m} each)"))
        .unwrap_or_default();
    format!(
        "{count}x {model}{mem} on bare metal {}/{}",
        mc.namespace, mc.name
    )
}
