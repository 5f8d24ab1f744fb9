//! The MetalCluster API: the XR read into typed, validated values.
//!
//! `decode` reads the spec into the API's types (`api`), reporting every
//! problem of shape; the semantic rules then run on those types, so that
//! every problem in the spec is reported at once, each naming its field
//! path and the bad value. Nothing here panics on malformed input.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api;
pub use crate::decode::{FieldError, Problems, show};
pub use crate::machine::{Gpu, parse_gpu, parse_node_labels};
pub use crate::network::Network;
pub use crate::topology::{ControlPlane, Worker};
use crate::validate;

/// The API group, version and kind of the composite resource.
pub const API_VERSION: &str = "metal.kube.farm/v1alpha1";
pub const KIND: &str = "MetalCluster";

/// The namespace of an XR whose metadata names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A validated MetalCluster.
#[derive(Clone, Debug, PartialEq)]
pub struct MetalCluster {
    pub name: String,
    pub namespace: String,
    pub spec: Spec,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub host: Host,
    pub network: Network,
    pub kubernetes: Kubernetes,
    pub cni: Cni,
    pub gpu: Option<Gpu>,
    pub access: Option<Access>,
    pub inference: Option<crate::inference::Inference>,
    /// The Modelplane pool label every node carries (`spec.inference.nodePool`).
    pub node_pool: String,
    /// The control plane; the single node at nodeIP without `spec.controlPlane`.
    pub control_plane: ControlPlane,
    /// Whether `spec.controlPlane` is given (VIP and address range).
    pub fleet: bool,
    pub workers: Vec<Worker>,
    pub health: api::HealthSpec,
    pub drain: api::DrainSpec,
}

impl Spec {
    /// Whether the control plane can roll onto new machines: it sits behind
    /// a virtual IP (kube-vip), so no machine holds the API endpoint.
    pub fn rollable(&self) -> bool {
        self.control_plane.vip_image.is_some()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    pub pool: String,
    /// bootInterface, bond, vlan, mtu.
    pub link: crate::links::NodeLink,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Kubernetes {
    pub version: String,
    pub node_labels: BTreeMap<String, String>,
    pub image_url: String,
    pub image_checksum: Option<String>,
    pub image_checksum_type: String,
    pub image_disk_format: String,
    pub renew_certificates_days: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Cni {
    pub cilium_version: String,
    /// Where the cilium chart comes from; air-gapped sites name a mirror.
    pub chart_repository: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub username: String,
    pub ssh_authorized_keys: Vec<String>,
}

/// The XR's name and namespace: read by hand, they are Kubernetes'
/// metadata, not the API's spec.
fn metadata(p: &mut Problems, xr: &Value) -> (Option<String>, String) {
    let namespace = match xr.pointer("/metadata/namespace") {
        Some(Value::String(ns)) => ns.clone(),
        _ => DEFAULT_NAMESPACE.to_string(),
    };
    let name = match xr.pointer("/metadata/name") {
        None | Some(Value::Null) => {
            p.fail("metadata.name", None, "is required");
            None
        }
        Some(Value::String(n)) => p
            .non_empty("metadata.name", n)
            .and_then(|n| p.valid("metadata.name", n, validate::xr_name)),
        Some(other) => {
            p.fail("metadata.name", Some(other), "must be a string");
            None
        }
    };
    (name, namespace)
}

/// Parses and validates a MetalCluster XR. Returns every problem found:
/// every problem of shape (with the metadata's), or, once the shape is
/// right, every semantic one.
pub fn parse(xr: &Value) -> Result<MetalCluster, Vec<FieldError>> {
    let mut p = Problems::default();
    let (name, namespace) = metadata(&mut p, xr);
    let spec = match crate::decode::spec(xr) {
        Ok(spec) => spec,
        Err(shape) => {
            p.errors.extend(shape);
            return Err(p.errors);
        }
    };
    let mc = check(&mut p, &spec, name.as_deref(), &namespace);
    match (name, mc) {
        (Some(name), Some(spec)) if p.errors.is_empty() => {
            let mc = MetalCluster {
                name,
                namespace,
                spec,
            };
            // Rules across sections need the whole, otherwise valid spec.
            let mut errors = check_inference(&mc);
            errors.extend(check_pool_label(&mc));
            if errors.is_empty() {
                Ok(mc)
            } else {
                Err(errors)
            }
        }
        _ if !p.errors.is_empty() => Err(p.errors),
        _ => Err(vec![FieldError {
            path: "spec".into(),
            value: None,
            reason: "is incomplete".into(),
        }]),
    }
}

/// The semantic rules on the typed spec; None when any section is invalid
/// (its problems are recorded).
fn check(
    p: &mut Problems,
    spec: &api::MetalClusterSpec,
    name: Option<&str>,
    namespace: &str,
) -> Option<Spec> {
    let pool = p
        .non_empty("spec.host.pool", &spec.host.pool)
        .and_then(|v| p.valid("spec.host.pool", v, validate::label_value));
    let host_link = crate::links::parse(
        p,
        "spec.host",
        &crate::links::Fields {
            boot: Some(&spec.host.boot_interface),
            bond: spec.host.link.bond.as_ref(),
            vlan: spec.host.link.vlan,
            mtu: spec.host.link.mtu,
        },
    );

    let fleet = spec.control_plane.is_some();
    let network = crate::network::parse(p, &spec.network, fleet);
    let control_plane =
        crate::topology::parse_control_plane(p, spec.control_plane.as_ref(), network.as_ref());
    let workers = crate::topology::parse_workers(p, &spec.workers, host_link.as_ref());
    if let Some(n) = &network {
        let found = crate::topology::check(n, control_plane.as_ref(), &workers, fleet);
        p.errors.extend(found);
    }
    if let Some(n) = name
        && let Err(reason) = crate::topology::derived_names(n, &workers)
    {
        p.fail("spec.workers", None, reason);
    }
    let kubernetes = parse_kubernetes(p, &spec.kubernetes);

    let cni = spec.cni.clone().unwrap_or_default();
    let cilium_version = p.valid(
        "spec.cni.ciliumVersion",
        &cni.cilium_version,
        validate::chart_version,
    );
    let chart_repository = p.valid(
        "spec.cni.chartRepository",
        &cni.chart_repository,
        validate::chart_repository,
    );

    let gpu = parse_gpu(p, spec.gpu.as_ref(), "spec.gpu");
    let access = parse_access(p, spec.access.as_ref());
    let inference = crate::inference::parse(
        p,
        spec.inference.as_ref(),
        name.unwrap_or_default(),
        namespace,
    );
    let node_pool = crate::inference::node_pool(p, spec.inference.as_ref(), inference.as_ref());
    let health = spec.health.clone().unwrap_or_default();
    if let Some(pct) = health.max_unhealthy.strip_suffix('%')
        && pct.parse::<u32>().is_ok_and(|v| v > 100)
    {
        p.fail(
            "spec.health.maxUnhealthy",
            Some(&Value::String(health.max_unhealthy.clone())),
            "must be a count or a percentage of at most 100%",
        );
    }

    Some(Spec {
        host: Host {
            pool: pool?,
            link: host_link?,
        },
        network: network?,
        kubernetes: kubernetes?,
        cni: Cni {
            cilium_version: cilium_version?,
            chart_repository: chart_repository?,
        },
        gpu: gpu?,
        access: access?,
        inference,
        node_pool,
        control_plane: control_plane?,
        fleet,
        workers,
        health,
        drain: spec.drain.clone().unwrap_or_default(),
    })
}

fn parse_kubernetes(p: &mut Problems, k: &api::KubernetesSpec) -> Option<Kubernetes> {
    let version = p
        .non_empty("spec.kubernetes.version", &k.version)
        .and_then(|v| p.valid("spec.kubernetes.version", v, validate::kubernetes_version));
    let node_labels = parse_node_labels(p, &k.node_labels, "spec.kubernetes.nodeLabels");
    let image_url = p
        .non_empty("spec.kubernetes.imageURL", &k.image_url)
        .and_then(|u| p.valid("spec.kubernetes.imageURL", u, validate::image_url));
    let checksum_type = k.image_checksum_type.as_str();
    let disk_format = k.image_disk_format.as_str();

    // CAPM3's webhook requires a checksum unless the image is a live ISO or
    // an OCI artifact; refuse early rather than at provisioning time.
    let checksum_optional = disk_format == "live-iso"
        || image_url
            .as_deref()
            .is_some_and(|u| u.starts_with("oci://"));
    let checksum = match &k.image_checksum {
        None if !checksum_optional => {
            p.fail(
                "spec.kubernetes.imageChecksum",
                None,
                "is required unless imageDiskFormat is live-iso or imageURL is oci://",
            );
            None
        }
        None => None,
        Some(c) => {
            let res = validate::image_checksum(c, checksum_type);
            p.check("spec.kubernetes.imageChecksum", c, res);
            Some(c.clone())
        }
    };

    Some(Kubernetes {
        version: version?,
        node_labels,
        image_url: image_url?,
        image_checksum: checksum,
        image_checksum_type: checksum_type.to_string(),
        image_disk_format: disk_format.to_string(),
        renew_certificates_days: k.renew_certificates_days,
    })
}

/// `spec.access`: Some(None) when absent, None when invalid.
fn parse_access(p: &mut Problems, a: Option<&api::AccessSpec>) -> Option<Option<Access>> {
    let Some(a) = a else {
        return Some(None);
    };
    let username = p.valid("spec.access.username", &a.username, validate::unix_username);
    for (i, k) in a.ssh_authorized_keys.iter().enumerate() {
        if let Err(reason) = validate::ssh_public_key(k) {
            p.fail(
                &format!("spec.access.sshAuthorizedKeys[{i}]"),
                Some(&Value::String(k.clone())),
                reason,
            );
        }
    }
    username.map(|username| {
        Some(Access {
            username,
            ssh_authorized_keys: a.ssh_authorized_keys.clone(),
        })
    })
}

fn err(path: &str, value: Option<&Value>, reason: impl Into<String>) -> FieldError {
    FieldError {
        path: path.into(),
        value: value.map(show),
        reason: reason.into(),
    }
}

/// Rules across sections, once each section is valid on its own.
pub fn check_inference(mc: &MetalCluster) -> Vec<FieldError> {
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
                ("nodeIP", n.node_ip.unwrap_or(n.gateway)),
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
    let gpu_workers = mc.spec.workers.iter().any(|w| w.gpu.is_some());
    if inf.devices.is_empty() && mc.spec.gpu.is_none() && !gpu_workers {
        out.push(err(
            "spec.inference",
            None,
            "needs spec.gpu or a worker pool with gpu (to derive the InferenceClass devices) or spec.inference.devices",
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

/// The node labels may not contradict the pool label MetalPlane sets.
pub fn check_pool_label(mc: &MetalCluster) -> Option<FieldError> {
    let v = mc
        .spec
        .kubernetes
        .node_labels
        .get(crate::inference::POOL_LABEL)?;
    (v != &mc.spec.node_pool).then(|| FieldError {
        path: format!("spec.kubernetes.nodeLabels[{:?}]", crate::inference::POOL_LABEL),
        value: Some(show(&Value::String(v.clone()))),
        reason: format!(
            "conflicts with spec.inference.nodePool {:?} (default gpu); drop the label, MetalPlane sets it",
            mc.spec.node_pool
        ),
    })
}
