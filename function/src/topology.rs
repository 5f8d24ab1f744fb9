//! The cluster's machines: `spec.controlPlane` (replicas, API endpoint,
//! address range) and `spec.workers` (pools of worker machines), read into
//! typed values, and the rules across them and the node network.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde_json::Value;

use crate::api;
use crate::decode::{FieldError, Problems, show};
use crate::network::{AddrRange, Network, parse_range};
use crate::validate;
/// Control plane sizes etcd keeps a quorum with.
pub const CONTROL_PLANE_SIZES: [u8; 3] = [1, 3, 5];
pub const MAX_WORKER_REPLICAS: i64 = 100;
pub const MAX_WORKER_POOLS: usize = 16;

/// The control plane: how many machines, where the API server answers
/// and which addresses its nodes take.
#[derive(Clone, Debug, PartialEq)]
pub struct ControlPlane {
    pub replicas: u8,
    /// host of the API server endpoint (port 6443).
    pub endpoint: Ipv4Addr,
    pub addresses: AddrRange,
    /// The kube-vip image, when the endpoint is a virtual IP the control
    /// plane nodes announce; None when it is the single node's address.
    pub vip_image: Option<String>,
}

impl ControlPlane {
    /// The single-node form: one machine at nodeIP, which is the endpoint.
    pub fn single(node_ip: Ipv4Addr) -> Self {
        Self {
            replicas: 1,
            endpoint: node_ip,
            addresses: AddrRange::one(node_ip),
            vip_image: None,
        }
    }
}

/// One pool of worker machines.
#[derive(Clone, Debug, PartialEq)]
pub struct Worker {
    pub name: String,
    pub replicas: u32,
    /// BareMetalHosts labelled metal.kube.farm/pool=<pool>.
    pub pool: String,
    /// bootInterface, bond, vlan, mtu.
    pub link: crate::links::NodeLink,
    pub addresses: AddrRange,
    /// Merged over spec.kubernetes.nodeLabels.
    pub node_labels: BTreeMap<String, String>,
    pub gpu: Option<crate::machine::Gpu>,
}

/// Reads `spec.controlPlane`, or the single-node form from nodeIP.
pub fn parse_control_plane(
    p: &mut Problems,
    cp: Option<&api::ControlPlaneSpec>,
    network: Option<&Network>,
) -> Option<ControlPlane> {
    let Some(cp) = cp else {
        return network.and_then(|n| n.node_ip).map(ControlPlane::single);
    };
    let replicas = if CONTROL_PLANE_SIZES
        .iter()
        .any(|s| i64::from(*s) == cp.replicas)
    {
        Some(cp.replicas as u8)
    } else {
        p.fail(
            "spec.controlPlane.replicas",
            Some(&Value::from(cp.replicas)),
            "must be 1, 3 or 5: etcd needs an odd number of members to keep a quorum",
        );
        None
    };
    let addresses = p
        .non_empty("spec.controlPlane.addresses", &cp.addresses)
        .and_then(|raw| {
            let res = parse_range(raw);
            p.check("spec.controlPlane.addresses", raw, res)
        });
    let endpoint = match &cp.endpoint {
        Some(raw) => {
            let res = validate::ipv4(raw);
            p.check("spec.controlPlane.endpoint", raw, res).map(Some)
        }
        None => Some(None),
    };
    let image = p.valid(
        "spec.controlPlane.kubeVipImage",
        &cp.kube_vip_image,
        validate::image_reference,
    );
    let (replicas, addresses, endpoint) = (replicas?, addresses?, endpoint?);
    let endpoint = match endpoint {
        Some(vip) => (vip, Some(image?)),
        // One machine whose range is one address: that address answers.
        None if replicas == 1 && addresses.size() == 1 => (addresses.first, None),
        None => {
            p.fail(
                "spec.controlPlane.endpoint",
                None,
                "is required unless there is one replica with a one-address range: it is the virtual IP the API server answers on, served by kube-vip on the control plane nodes",
            );
            return None;
        }
    };
    Some(ControlPlane {
        replicas,
        endpoint: endpoint.0,
        addresses,
        vip_image: endpoint.1,
    })
}

/// Reads `spec.workers`.
pub fn parse_workers(
    p: &mut Problems,
    workers: &[api::WorkerSpec],
    host: Option<&crate::links::NodeLink>,
) -> Vec<Worker> {
    if workers.len() > MAX_WORKER_POOLS {
        p.fail(
            "spec.workers",
            None,
            format!("has {} pools; at most {MAX_WORKER_POOLS}", workers.len()),
        );
    }
    workers
        .iter()
        .enumerate()
        .filter_map(|(i, w)| parse_worker(p, &format!("spec.workers[{i}]"), w, host))
        .collect()
}

fn parse_worker(
    p: &mut Problems,
    at: &str,
    w: &api::WorkerSpec,
    host: Option<&crate::links::NodeLink>,
) -> Option<Worker> {
    let path = |f: &str| format!("{at}.{f}");
    let name = p.non_empty(&path("name"), &w.name).and_then(|n| {
        p.valid(&path("name"), n, |n| {
            validate::dns_label(n).and_then(|_| {
                (n.len() <= 20).then_some(()).ok_or_else(|| {
                    "must be at most 20 characters: machine and host names are derived from it"
                        .to_string()
                })
            })
        })
    });
    let replicas = if (0..=MAX_WORKER_REPLICAS).contains(&w.replicas) {
        Some(w.replicas as u32)
    } else {
        p.fail(
            &path("replicas"),
            Some(&Value::from(w.replicas)),
            format!("must be between 0 and {MAX_WORKER_REPLICAS}"),
        );
        None
    };
    let pool = p
        .non_empty(&path("pool"), &w.pool)
        .and_then(|v| p.valid(&path("pool"), v, validate::label_value));
    // A pool that says nothing of its network takes the host's; one that
    // says anything describes its own, booting from the host's NIC name
    // unless it names one.
    let fields = crate::links::Fields {
        boot: w.boot_interface.as_deref(),
        bond: w.link.bond.as_ref(),
        vlan: w.link.vlan,
        mtu: w.link.mtu,
    };
    let link = if fields.is_empty() {
        host.cloned()
    } else {
        let fields = crate::links::Fields {
            boot: fields.boot.or(host.map(|h| h.boot.as_str())),
            ..fields
        };
        match (fields.boot, host) {
            // The host's own NIC is invalid: reported there.
            (None, None) => None,
            _ => crate::links::parse(p, at, &fields),
        }
    };
    let addresses = p
        .non_empty(&path("addresses"), &w.addresses)
        .and_then(|raw| {
            let res = parse_range(raw);
            p.check(&path("addresses"), raw, res)
        });
    let node_labels = crate::machine::parse_node_labels(p, &w.node_labels, &path("nodeLabels"));
    let gpu = crate::machine::parse_gpu(p, w.gpu.as_ref(), &path("gpu"));
    Some(Worker {
        name: name?,
        replicas: replicas?,
        pool: pool?,
        link: link?,
        addresses: addresses?,
        node_labels,
        gpu: gpu.flatten(),
    })
}

/// Every name derived for the worker pools fits Kubernetes' 63 characters,
/// also the Machines CAPI and CAPM3 name after them.
pub fn derived_names(xr: &str, workers: &[Worker]) -> Result<(), String> {
    let names = crate::names::Names::new(xr);
    for w in workers {
        let p = names.pool(xr, &w.name);
        let machine = p.machines.len() + crate::names::MACHINE_SUFFIX;
        // The content-named templates (`<machines>-<8 hex>`) are shorter.
        if machine > 63 {
            return Err(format!(
                "pool {:?} of MetalCluster {xr:?} derives Machine names of {machine} characters (\"{}-xxxxx-xxxxx\"); Kubernetes names must be at most 63: shorten the pool or MetalCluster name",
                w.name, p.machines
            ));
        }
    }
    Ok(())
}

fn err(path: &str, value: impl Into<Value>, reason: String) -> FieldError {
    FieldError {
        path: path.into(),
        value: Some(show(&value.into())),
        reason,
    }
}

/// Rules across the control plane, the worker pools and the network:
/// every range inside the node subnet, large enough, apart from each other
/// and from the gateway, DNS server and load balancer range; the endpoint
/// outside every range; unique pool names.
/// Runs on whatever parsed, so that every problem is reported at once:
/// `cp` is None when the control plane itself is invalid.
pub fn check(
    n: &Network,
    cp: Option<&ControlPlane>,
    workers: &[Worker],
    fleet: bool,
) -> Vec<FieldError> {
    let mut out = Vec::new();
    let subnet = n.node_subnet();
    let mut ranges: Vec<(String, AddrRange)> = Vec::new();
    let cp = cp.filter(|_| fleet);
    if let Some(cp) = cp {
        ranges.push(("spec.controlPlane.addresses".into(), cp.addresses));
    }
    for (i, w) in workers.iter().enumerate() {
        ranges.push((format!("spec.workers[{i}].addresses"), w.addresses));
    }
    // A one-machine control plane behind a VIP rolls by adding the new
    // machine first: it needs an address for it.
    if let Some(cp) = cp
        && cp.replicas == 1
        && cp.vip_image.is_some()
        && cp.addresses.size() < 2
    {
        out.push(err(
            "spec.controlPlane.addresses",
            cp.addresses.to_string(),
            "holds 1 address: a one-machine control plane behind an endpoint needs 2, since its rollouts (upgrades, certificate renewal) add the new machine before removing the old".into(),
        ));
    }
    if let Some(cp) = cp
        && u64::from(cp.replicas) > cp.addresses.size()
    {
        out.push(err(
            "spec.controlPlane.addresses",
            cp.addresses.to_string(),
            format!(
                "holds {} addresses, fewer than the {} replicas",
                cp.addresses.size(),
                cp.replicas
            ),
        ));
    }
    for (i, w) in workers.iter().enumerate() {
        if u64::from(w.replicas) > w.addresses.size() {
            out.push(err(
                &format!("spec.workers[{i}].addresses"),
                w.addresses.to_string(),
                format!(
                    "holds {} addresses, fewer than the {} replicas",
                    w.addresses.size(),
                    w.replicas
                ),
            ));
        }
        if let Some(j) = workers[..i].iter().position(|o| o.name == w.name) {
            out.push(err(
                &format!("spec.workers[{i}].name"),
                w.name.clone(),
                format!("is also the name of spec.workers[{j}]: pool names are unique"),
            ));
        }
    }
    let mut singles: Vec<(&str, Ipv4Addr)> = vec![
        ("spec.network.gateway", n.gateway),
        ("spec.network.dnsServer", n.dns_server),
    ];
    if let Some(ip) = n.node_ip {
        singles.push(("spec.network.nodeIP", ip));
    }
    for (i, (path, r)) in ranges.iter().enumerate() {
        if !r.within(&subnet) {
            out.push(err(
                path,
                r.to_string(),
                format!("must lie inside the node subnet {subnet}"),
            ));
            continue;
        }
        for edge in [subnet.network(), subnet.broadcast()] {
            if n.prefix <= 30 && r.contains(edge) {
                out.push(err(
                    path,
                    r.to_string(),
                    format!("includes {edge}, the network or broadcast address of {subnet}"),
                ));
            }
        }
        for (what, a) in &singles {
            if r.contains(*a) {
                out.push(err(path, r.to_string(), format!("includes {what} {a}")));
            }
        }
        if let Some(lb) = &n.load_balancer
            && r.first <= lb.last()
            && lb.first() <= r.last
        {
            out.push(err(
                path,
                r.to_string(),
                format!(
                    "overlaps spec.network.loadBalancer {}-{}",
                    lb.first(),
                    lb.last()
                ),
            ));
        }
        for (other_path, o) in &ranges[..i] {
            if r.overlaps(o) {
                out.push(err(
                    path,
                    r.to_string(),
                    format!("overlaps {other_path} {o}"),
                ));
            }
        }
    }
    if let Some(cp) = cp.filter(|cp| cp.vip_image.is_some()) {
        let vip = cp.endpoint;
        let path = "spec.controlPlane.endpoint";
        if !subnet.contains(&vip) {
            out.push(err(
                path,
                vip.to_string(),
                format!("must lie inside the node subnet {subnet}: kube-vip announces it by ARP on the nodes' link"),
            ));
        } else if n.prefix <= 30 && (vip == subnet.network() || vip == subnet.broadcast()) {
            out.push(err(
                path,
                vip.to_string(),
                format!("is the network or broadcast address of {subnet}"),
            ));
        }
        for (what, a) in &singles {
            if vip == *a {
                out.push(err(path, vip.to_string(), format!("is {what}")));
            }
        }
        if let Some(lb) = &n.load_balancer
            && lb.contains(vip)
        {
            out.push(err(
                path,
                vip.to_string(),
                "is inside spec.network.loadBalancer".to_string(),
            ));
        }
        for (range_path, r) in &ranges {
            if r.contains(vip) {
                out.push(err(
                    path,
                    vip.to_string(),
                    format!("is inside {range_path} {r}: a node would take the virtual IP"),
                ));
            }
        }
    }
    out.extend(check_pod_cidr(n, cp, workers));
    out
}

/// kube-controller-manager's default node mask: each node's pod range is a
/// /24 carved from the cluster's, and Cilium (`ipam.mode: kubernetes`)
/// waits for it forever on a node that gets none.
pub const NODE_POD_PREFIX: u8 = 24;

/// The most nodes the spec runs at once: every machine set at its replicas,
/// and the surge machine a one-machine control plane behind a VIP adds
/// while it rolls (pools and larger control planes roll with surge 0).
pub fn max_nodes(cp: Option<&ControlPlane>, workers: &[Worker]) -> (u64, String) {
    let (cp_nodes, surge) = match cp {
        Some(cp) => (
            u64::from(cp.replicas),
            u64::from(cp.replicas == 1 && cp.vip_image.is_some()),
        ),
        None => (1, 0),
    };
    let pools: u64 = workers.iter().map(|w| u64::from(w.replicas)).sum();
    let mut how = format!("{cp_nodes} control plane");
    if surge > 0 {
        how.push_str(" + 1 while it rolls");
    }
    if !workers.is_empty() {
        how.push_str(&format!(" + {pools} in spec.workers"));
    }
    (cp_nodes + surge + pools, how)
}

/// The pod range must hold a node range for every node the spec can have;
/// re-checked on every compose, so a scale edit past it is refused too.
pub fn check_pod_cidr(
    n: &Network,
    cp: Option<&ControlPlane>,
    workers: &[Worker],
) -> Option<FieldError> {
    let prefix = n.pod_cidr.prefix_len();
    if prefix > NODE_POD_PREFIX {
        // network::check names this one.
        return None;
    }
    let room = 1u64 << (NODE_POD_PREFIX - prefix);
    let (nodes, how) = max_nodes(cp, workers);
    (nodes > room).then(|| {
        err(
            "spec.network.podCIDR",
            n.pod_cidr.to_string(),
            format!(
                "holds {room} node pod range(s) of /{NODE_POD_PREFIX} (kube-controller-manager's default node mask), fewer than the {nodes} nodes the spec can run at once ({how}); use a /{} or larger",
                NODE_POD_PREFIX - bits_for(nodes)
            ),
        )
    })
}

/// Bits needed to count `n` ranges.
fn bits_for(n: u64) -> u8 {
    (64 - n.saturating_sub(1).leading_zeros()) as u8
}
