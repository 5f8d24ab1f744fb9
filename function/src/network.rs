//! The node network: its type, reading `spec.network`, and the rules
//! across its fields (subnet, gateway, DNS, pod and service networks).

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde_json::Value;

use crate::api;
use crate::decode::{FieldError, Problems, show};
use crate::validate;

/// An inclusive range of IPv4 addresses, written FIRST-LAST.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrRange {
    pub first: Ipv4Addr,
    pub last: Ipv4Addr,
}

impl AddrRange {
    pub fn one(a: Ipv4Addr) -> Self {
        Self { first: a, last: a }
    }
    /// How many addresses it holds (at least one: parsing refuses empty ranges).
    pub fn size(&self) -> u64 {
        u64::from(u32::from(self.last)) - u64::from(u32::from(self.first)) + 1
    }
    pub fn contains(&self, a: Ipv4Addr) -> bool {
        self.first <= a && a <= self.last
    }
    pub fn overlaps(&self, o: &AddrRange) -> bool {
        self.first <= o.last && o.first <= self.last
    }
    pub fn within(&self, net: &Ipv4Net) -> bool {
        net.contains(&self.first) && net.contains(&self.last)
    }
}

impl std::fmt::Display for AddrRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// `FIRST-LAST` (a single address is FIRST-FIRST).
pub fn parse_range(raw: &str) -> Result<AddrRange, String> {
    let bad =
        || format!("must be an IPv4 range FIRST-LAST (e.g. 10.40.8.21-10.40.8.24), got {raw:?}");
    let (a, b) = raw.split_once('-').ok_or_else(bad)?;
    let first = validate::ipv4(a.trim()).map_err(|_| bad())?;
    let last = validate::ipv4(b.trim()).map_err(|_| bad())?;
    if first > last {
        return Err("is an empty range: the first address must not be after the last".into());
    }
    Ok(AddrRange { first, last })
}

#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    /// The single node's address; absent with `spec.controlPlane`, whose
    /// nodes take addresses from ranges.
    pub node_ip: Option<Ipv4Addr>,
    /// The node subnet: nodeIP/prefix, or gateway/prefix without nodeIP.
    pub subnet: Ipv4Net,
    pub prefix: u8,
    pub gateway: Ipv4Addr,
    pub dns_server: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
    pub service_cidr: Ipv4Net,
    pub load_balancer: Option<crate::inference::LoadBalancer>,
}

impl Network {
    /// Whether Cilium replaces kube-proxy: with a load balancer range, whose
    /// L2 announcements work only with the replacement (Cilium's L2
    /// announcement guide lists `kubeProxyReplacement: true` as a
    /// prerequisite).
    pub fn replaces_kube_proxy(&self) -> bool {
        self.load_balancer.is_some()
    }

    /// The node subnet.
    pub fn node_subnet(&self) -> Ipv4Net {
        self.subnet
    }
}

fn parse_ipv4(p: &mut Problems, path: &str, raw: &str) -> Option<Ipv4Addr> {
    let raw = p.non_empty(path, raw)?;
    let res = validate::ipv4(raw);
    p.check(path, raw, res)
}

fn parse_cidr(p: &mut Problems, path: &str, raw: &str) -> Option<Ipv4Net> {
    let res = validate::ipv4_cidr(raw);
    p.check(path, raw, res)
}

/// The subnet of `a` with `prefix` (validated to 1..=32).
fn subnet_of(a: Ipv4Addr, prefix: u8) -> Ipv4Net {
    Ipv4Net::new(a, prefix)
        .map(|n| n.trunc())
        .unwrap_or_else(|_| Ipv4Net::from(a))
}

/// Reads `spec.network`; `fleet` when `spec.controlPlane` is given.
pub fn parse(p: &mut Problems, n: &api::NetworkSpec, fleet: bool) -> Option<Network> {
    // With spec.controlPlane the nodes take addresses from ranges; nodeIP
    // belongs to the single-node form only.
    let node_ip = match (fleet, &n.node_ip) {
        (false, None) => {
            p.fail("spec.network.nodeIP", None, "is required");
            Some(None)
        }
        (false, Some(ip)) => Some(parse_ipv4(p, "spec.network.nodeIP", ip)),
        (true, None) => None,
        (true, Some(ip)) => {
            p.fail(
                "spec.network.nodeIP",
                Some(&Value::String(ip.clone())),
                "is for a single node: with spec.controlPlane the nodes take spec.controlPlane.addresses",
            );
            Some(None)
        }
    };
    let prefix = if (1..=32).contains(&n.prefix) {
        Some(n.prefix as u8)
    } else {
        p.fail(
            "spec.network.prefix",
            Some(&Value::from(n.prefix)),
            "must be between 1 and 32",
        );
        None
    };
    let gateway = parse_ipv4(p, "spec.network.gateway", &n.gateway);
    let dns_server = parse_ipv4(p, "spec.network.dnsServer", &n.dns_server);
    let pod_cidr = parse_cidr(p, "spec.network.podCIDR", &n.pod_cidr);
    let service_cidr = parse_cidr(p, "spec.network.serviceCIDR", &n.service_cidr);

    let load_balancer = crate::inference::parse_load_balancer(p, n.load_balancer.as_deref());
    let node_ip = match node_ip {
        Some(n) => Some(n?),
        None => None,
    };
    let prefix = prefix?;
    let gateway = gateway?;
    let network = Network {
        load_balancer,
        subnet: subnet_of(node_ip.unwrap_or(gateway), prefix),
        node_ip,
        prefix,
        gateway,
        dns_server: dns_server?,
        pod_cidr: pod_cidr?,
        service_cidr: service_cidr?,
    };
    p.errors.extend(check(&network));
    Some(network)
}

fn err(path: &str, value: impl Into<Value>, reason: String) -> FieldError {
    FieldError {
        path: path.into(),
        value: Some(show(&value.into())),
        reason,
    }
}

fn unusable(a: Ipv4Addr) -> Option<&'static str> {
    if a.is_unspecified() {
        Some("is the unspecified address")
    } else if a.is_loopback() {
        Some("is a loopback address")
    } else if a.is_multicast() {
        Some("is a multicast address")
    } else if a.is_broadcast() {
        Some("is the broadcast address")
    } else {
        None
    }
}

/// Cross-field rules of the node network.
pub fn check(n: &Network) -> Vec<FieldError> {
    let mut out = Vec::new();
    let subnet = n.node_subnet();
    let is_edge =
        |a: Ipv4Addr| n.prefix <= 30 && (a == subnet.network() || a == subnet.broadcast());

    if let Some(ip) = n.node_ip {
        if let Some(why) = unusable(ip) {
            out.push(err("spec.network.nodeIP", ip.to_string(), why.into()));
        } else if is_edge(ip) {
            out.push(err(
                "spec.network.nodeIP",
                ip.to_string(),
                format!("is the network or broadcast address of {subnet}"),
            ));
        }
    }

    if !subnet.contains(&n.gateway) {
        out.push(err(
            "spec.network.gateway",
            n.gateway.to_string(),
            format!("is not reachable: it must be inside the node subnet {subnet} (nodeIP/prefix)"),
        ));
    } else if Some(n.gateway) == n.node_ip {
        out.push(err(
            "spec.network.gateway",
            n.gateway.to_string(),
            "must not be the node's own address".into(),
        ));
    } else if is_edge(n.gateway) {
        out.push(err(
            "spec.network.gateway",
            n.gateway.to_string(),
            format!("is the network or broadcast address of {subnet}"),
        ));
    }

    let dns = n.dns_server;
    let dns_problem = if let Some(why) = unusable(dns) {
        Some(why.to_string())
    } else if Some(dns) == n.node_ip {
        Some("is the node itself, which has no resolver while it boots".into())
    } else if subnet.contains(&dns) && is_edge(dns) {
        Some(format!("is the network or broadcast address of {subnet}"))
    } else if dns.is_link_local() && !subnet.contains(&dns) {
        Some(format!(
            "is link-local and outside the node subnet {subnet}"
        ))
    } else if n.service_cidr.contains(&dns) || n.pod_cidr.contains(&dns) {
        Some(
            "is inside the pod or service CIDR, which does not exist until the cluster runs".into(),
        )
    } else {
        None
    };
    if let Some(reason) = dns_problem {
        out.push(err(
            "spec.network.dnsServer",
            dns.to_string(),
            format!("is not reachable from the node subnet {subnet}: it {reason}"),
        ));
    }

    // kube-apiserver refuses a service range wider than 20 bits; a pod range
    // must hold at least one /24 per node (the controller-manager default).
    if n.service_cidr.prefix_len() < 12 {
        out.push(err(
            "spec.network.serviceCIDR",
            n.service_cidr.to_string(),
            "is too large: kube-apiserver accepts at most a /12".into(),
        ));
    }
    if n.pod_cidr.prefix_len() > 24 {
        out.push(err(
            "spec.network.podCIDR",
            n.pod_cidr.to_string(),
            "is too small: each node takes a /24, so use /24 or larger".into(),
        ));
    }

    let overlaps = |a: &Ipv4Net, b: &Ipv4Net| a.contains(&b.network()) || b.contains(&a.network());
    let ranges = [
        ("spec.network.podCIDR", n.pod_cidr),
        ("spec.network.serviceCIDR", n.service_cidr),
        (
            if n.node_ip.is_some() {
                "spec.network.nodeIP/prefix"
            } else {
                "spec.network.gateway/prefix"
            },
            subnet,
        ),
    ];
    for i in 0..ranges.len() {
        for j in i + 1..ranges.len() {
            let (pa, a) = ranges[i];
            let (pb, b) = ranges[j];
            if overlaps(&a, &b) {
                out.push(err(pa, a.to_string(), format!("overlaps {pb} {b}")));
            }
        }
    }
    out
}
