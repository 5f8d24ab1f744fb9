//! The node network: its type, reading `spec.network`, and the rules
//! across its fields (subnet, gateway, DNS, pod and service networks).

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde_json::Value;

use crate::reader::{FieldError, Reader, show};
use crate::validate;

/// Defaults of the optional networks (the XRD declares the same).
pub const DEFAULT_POD_CIDR: &str = "10.244.0.0/16";
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";

#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    pub node_ip: Ipv4Addr,
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

    /// The node's subnet, derived from nodeIP and prefix.
    pub fn node_subnet(&self) -> Ipv4Net {
        // prefix is validated to 1..=32 before a Network is built.
        Ipv4Net::new(self.node_ip, self.prefix)
            .map(|n| n.trunc())
            .unwrap_or_else(|_| Ipv4Net::from(self.node_ip))
    }
}

fn parse_ipv4(r: &mut Reader, xr: &Value, path: &str) -> Option<Ipv4Addr> {
    let raw = r.req_str(xr, path)?;
    let res = validate::ipv4(&raw);
    r.check(path, &raw, res)
}

fn parse_cidr(r: &mut Reader, xr: &Value, path: &str, default: &str) -> Option<Ipv4Net> {
    let raw = r.opt_str(xr, path).unwrap_or_else(|| default.to_string());
    let res = validate::ipv4_cidr(&raw);
    r.check(path, &raw, res)
}

pub fn parse(r: &mut Reader, xr: &Value) -> Option<Network> {
    let node_ip = parse_ipv4(r, xr, "spec.network.nodeIP");
    let prefix = match r.opt_int(xr, "spec.network.prefix") {
        None => {
            if r.lookup(xr, "spec.network.prefix").is_none() {
                r.fail("spec.network.prefix", None, "is required");
            }
            None
        }
        Some(p) if (1..=32).contains(&p) => Some(p as u8),
        Some(p) => {
            r.fail(
                "spec.network.prefix",
                Some(&Value::from(p)),
                "must be between 1 and 32",
            );
            None
        }
    };
    let gateway = parse_ipv4(r, xr, "spec.network.gateway");
    let dns_server = parse_ipv4(r, xr, "spec.network.dnsServer");
    let pod_cidr = parse_cidr(r, xr, "spec.network.podCIDR", DEFAULT_POD_CIDR);
    let service_cidr = parse_cidr(r, xr, "spec.network.serviceCIDR", DEFAULT_SERVICE_CIDR);

    let load_balancer = crate::inference::parse_load_balancer(r, xr);
    let network = Network {
        load_balancer,
        node_ip: node_ip?,
        prefix: prefix?,
        gateway: gateway?,
        dns_server: dns_server?,
        pod_cidr: pod_cidr?,
        service_cidr: service_cidr?,
    };
    for e in check(&network) {
        r.errors.push(e);
    }
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

    if let Some(why) = unusable(n.node_ip) {
        out.push(err(
            "spec.network.nodeIP",
            n.node_ip.to_string(),
            why.into(),
        ));
    } else if is_edge(n.node_ip) {
        out.push(err(
            "spec.network.nodeIP",
            n.node_ip.to_string(),
            format!("is the network or broadcast address of {subnet}"),
        ));
    }

    if !subnet.contains(&n.gateway) {
        out.push(err(
            "spec.network.gateway",
            n.gateway.to_string(),
            format!("is not reachable: it must be inside the node subnet {subnet} (nodeIP/prefix)"),
        ));
    } else if n.gateway == n.node_ip {
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
    } else if dns == n.node_ip {
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
        ("spec.network.nodeIP/prefix", subnet),
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
