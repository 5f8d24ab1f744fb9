//! Metal3 IPAM: the pool that hands the node its one static address.

use serde_json::{Value, json};

use super::{object, with_spec};
use crate::names::Names;
use crate::spec::MetalCluster;

pub const API_VERSION: &str = "ipam.metal3.io/v1alpha1";

pub fn ippool(mc: &MetalCluster, names: &Names) -> Value {
    let n = &mc.spec.network;
    with_spec(
        object(mc, API_VERSION, "IPPool", &names.ippool),
        json!({
            "clusterName": names.cluster,
            "namePrefix": names.node_prefix,
            "pools": [{"start": n.node_ip.to_string(), "end": n.node_ip.to_string()}],
            "prefix": n.prefix,
            "gateway": n.gateway.to_string(),
            "dnsServers": [n.dns_server.to_string()],
        }),
    )
}
