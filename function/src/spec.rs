//! The MetalCluster API: reading the XR into typed, validated values.
//!
//! Parsing and validation happen in one pass so that every problem in the
//! spec is reported at once, each naming its field path and the bad value.
//! Nothing here panics on malformed input: a wrong type is just another
//! [`FieldError`].

use std::collections::BTreeMap;

use serde_json::Value;

pub use crate::machine::{Gpu, parse_gpu_at, parse_node_labels};
pub use crate::network::{DEFAULT_POD_CIDR, DEFAULT_SERVICE_CIDR, Network};
pub use crate::reader::{FieldError, Reader, show};
pub use crate::topology::{ControlPlane, Worker};
use crate::validate;

/// The API group, version and kind of the composite resource.
pub const API_VERSION: &str = "metal.kube.farm/v1alpha1";
pub const KIND: &str = "MetalCluster";

/// Defaults applied when a field is omitted (the XRD declares the same).
pub const DEFAULT_USERNAME: &str = "metal3";
pub const DEFAULT_CHECKSUM_TYPE: &str = "sha256";
pub const DEFAULT_DISK_FORMAT: &str = "qcow2";
pub const DEFAULT_CILIUM_VERSION: &str = "1.18.4";
/// Cilium's own chart repository; `spec.cni.chartRepository` overrides it.
pub const DEFAULT_CHART_REPOSITORY: &str = "https://helm.cilium.io";
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
}

#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    pub pool: String,
    pub boot_interface: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Kubernetes {
    pub version: String,
    pub node_labels: BTreeMap<String, String>,
    pub image_url: String,
    pub image_checksum: Option<String>,
    pub image_checksum_type: String,
    pub image_disk_format: String,
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

/// Parses and validates a MetalCluster XR. Returns every problem found.
pub fn parse(xr: &Value) -> Result<MetalCluster, Vec<FieldError>> {
    let mut r = Reader::default();

    let name = r.req_str(xr, "metadata.name");
    let namespace = r
        .opt_str(xr, "metadata.namespace")
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    if let Some(n) = &name {
        let value = Value::String(n.clone());
        if let Err(reason) = validate::xr_name(n) {
            r.fail("metadata.name", Some(&value), reason);
        }
    }
    if r.lookup(xr, "spec").is_none() {
        r.fail("spec", None, "is required");
    }

    // host
    let pool = r.req_str(xr, "spec.host.pool");
    let pool = pool.and_then(|p| {
        let res = validate::label_value(&p);
        r.check("spec.host.pool", &p, res.map(|_| p.clone()))
    });
    let boot_interface = r.req_str(xr, "spec.host.bootInterface").and_then(|b| {
        let res = validate::interface_name(&b);
        r.check("spec.host.bootInterface", &b, res.map(|_| b.clone()))
    });

    let network = crate::network::parse(&mut r, xr);
    let fleet = r.lookup(xr, "spec.controlPlane").is_some();
    let control_plane = crate::topology::parse_control_plane(&mut r, xr, network.as_ref());
    let workers = crate::topology::parse_workers(&mut r, xr, boot_interface.as_deref());
    if let Some(n) = &network {
        let found = crate::topology::check(n, control_plane.as_ref(), &workers, fleet);
        r.errors.extend(found);
    }
    if let Some(n) = &name
        && let Err(reason) = crate::topology::derived_names(n, &workers)
    {
        r.fail("spec.workers", None, reason);
    }
    let kubernetes = parse_kubernetes(&mut r, xr);

    let cilium_version = r.defaulted(
        xr,
        "spec.cni.ciliumVersion",
        DEFAULT_CILIUM_VERSION,
        validate::chart_version,
    );
    let chart_repository = r.defaulted(
        xr,
        "spec.cni.chartRepository",
        DEFAULT_CHART_REPOSITORY,
        validate::chart_repository,
    );

    let gpu = parse_gpu(&mut r, xr);
    let access = parse_access(&mut r, xr);
    let inference = crate::inference::parse(&mut r, xr, name.as_deref(), &namespace);
    let node_pool = crate::inference::node_pool(&mut r, xr, inference.as_ref());

    if !r.errors.is_empty() {
        return Err(r.errors);
    }
    // Every Option below is Some when no error was recorded; the match keeps
    // that invariant explicit instead of unwrapping.
    match (
        name,
        pool,
        boot_interface,
        network,
        kubernetes,
        cilium_version,
        chart_repository,
        control_plane,
    ) {
        (
            Some(name),
            Some(pool),
            Some(boot_interface),
            Some(network),
            Some(kubernetes),
            Some(cv),
            Some(repo),
            Some(control_plane),
        ) => {
            let mc = MetalCluster {
                name,
                namespace,
                spec: Spec {
                    host: Host {
                        pool,
                        boot_interface,
                    },
                    network,
                    kubernetes,
                    cni: Cni {
                        cilium_version: cv,
                        chart_repository: repo,
                    },
                    gpu: gpu.flatten(),
                    access: access.flatten(),
                    inference,
                    node_pool,
                    control_plane,
                    fleet,
                    workers,
                },
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
        _ => Err(vec![FieldError {
            path: "spec".into(),
            value: None,
            reason: "is incomplete".into(),
        }]),
    }
}

fn parse_kubernetes(r: &mut Reader, xr: &Value) -> Option<Kubernetes> {
    let version = r.req_str(xr, "spec.kubernetes.version").and_then(|v| {
        let res = validate::kubernetes_version(&v);
        r.check("spec.kubernetes.version", &v, res.map(|_| v.clone()))
    });

    let node_labels = parse_node_labels(r, xr, "spec.kubernetes.nodeLabels");

    let image_url = r.req_str(xr, "spec.kubernetes.imageURL").and_then(|u| {
        let res = validate::image_url(&u);
        r.check("spec.kubernetes.imageURL", &u, res.map(|_| u.clone()))
    });

    let checksum_type = r
        .opt_str(xr, "spec.kubernetes.imageChecksumType")
        .unwrap_or_else(|| DEFAULT_CHECKSUM_TYPE.to_string());
    let checksum_type = {
        let res = validate::one_of(&checksum_type, &["md5", "sha256", "sha512"]);
        r.check(
            "spec.kubernetes.imageChecksumType",
            &checksum_type,
            res.map(|_| checksum_type.clone()),
        )
    };

    let disk_format = r
        .opt_str(xr, "spec.kubernetes.imageDiskFormat")
        .unwrap_or_else(|| DEFAULT_DISK_FORMAT.to_string());
    let disk_format = {
        let res = validate::one_of(&disk_format, &["raw", "qcow2", "vdi", "vmdk", "live-iso"]);
        r.check(
            "spec.kubernetes.imageDiskFormat",
            &disk_format,
            res.map(|_| disk_format.clone()),
        )
    };

    // CAPM3's webhook requires a checksum unless the image is a live ISO or
    // an OCI artifact; refuse early rather than at provisioning time.
    let checksum = r.opt_str(xr, "spec.kubernetes.imageChecksum");
    let checksum_optional = disk_format.as_deref() == Some("live-iso")
        || image_url
            .as_deref()
            .is_some_and(|u| u.starts_with("oci://"));
    let checksum = match checksum {
        None if !checksum_optional => {
            r.fail(
                "spec.kubernetes.imageChecksum",
                None,
                "is required unless imageDiskFormat is live-iso or imageURL is oci://",
            );
            None
        }
        None => None,
        Some(c) => {
            if let Some(t) = &checksum_type {
                let res = validate::image_checksum(&c, t);
                r.check("spec.kubernetes.imageChecksum", &c, res);
            }
            Some(c)
        }
    };

    Some(Kubernetes {
        version: version?,
        node_labels,
        image_url: image_url?,
        image_checksum: checksum,
        image_checksum_type: checksum_type?,
        image_disk_format: disk_format?,
    })
}

fn parse_gpu(r: &mut Reader, xr: &Value) -> Option<Option<Gpu>> {
    parse_gpu_at(r, xr, "spec.gpu")
}

fn parse_access(r: &mut Reader, xr: &Value) -> Option<Option<Access>> {
    r.lookup(xr, "spec.access")?;
    let username = r
        .opt_str(xr, "spec.access.username")
        .unwrap_or_else(|| DEFAULT_USERNAME.to_string());
    let username = {
        let res = validate::unix_username(&username);
        r.check(
            "spec.access.username",
            &username,
            res.map(|_| username.clone()),
        )
    };
    let keys = r.opt_str_list(xr, "spec.access.sshAuthorizedKeys");
    for (i, k) in keys.iter().enumerate() {
        if let Err(reason) = validate::ssh_public_key(k) {
            r.fail(
                &format!("spec.access.sshAuthorizedKeys[{i}]"),
                Some(&Value::String(k.clone())),
                reason,
            );
        }
    }
    Some(username.map(|username| Access {
        username,
        ssh_authorized_keys: keys,
    }))
}

fn err(path: &str, value: Option<&Value>, reason: impl Into<String>) -> FieldError {
    FieldError {
        path: path.into(),
        value: value.map(show),
        reason: reason.into(),
    }
}

/// Rules across sections, on an otherwise valid spec.
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
