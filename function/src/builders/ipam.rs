//! Metal3 IPAM: the pools that hand the nodes their static addresses,
//! one for the control plane and one per worker pool.

use serde_json::{Value, json};

use super::{object, with_spec};
use crate::names::Names;
use crate::network::AddrRange;
use crate::spec::MetalCluster;

pub const API_VERSION: &str = "ipam.metal3.io/v1alpha1";

/// The control plane's pool: nodeIP alone, or spec.controlPlane.addresses.
pub fn ippool(mc: &MetalCluster, names: &Names) -> Value {
    pool(
        mc,
        names,
        &names.ippool,
        &names.node_prefix,
        mc.spec.control_plane.addresses,
    )
}

/// An IPPool handing out `range` in the node subnet.
pub fn pool(mc: &MetalCluster, names: &Names, name: &str, prefix: &str, range: AddrRange) -> Value {
    let n = &mc.spec.network;
    with_spec(
        object(mc, API_VERSION, "IPPool", name),
        json!({
            "clusterName": names.cluster,
            "namePrefix": prefix,
            "pools": [{"start": range.first.to_string(), "end": range.last.to_string()}],
            "prefix": n.prefix,
            "gateway": n.gateway.to_string(),
            "dnsServers": [n.dns_server.to_string()],
        }),
    )
}
