//! Cluster API Provider Metal3: the infrastructure cluster, the machine
//! template that claims a BareMetalHost, and the data template that gives
//! the node its static network configuration.

use serde_json::{Value, json};

use super::{POOL_LABEL, object, with_spec};
use crate::names::Names;
use crate::spec::MetalCluster;

pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta2";
pub const API_GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const API_SERVER_PORT: u16 = 6443;

pub fn metal3_cluster(mc: &MetalCluster, names: &Names) -> Value {
    with_spec(
        object(mc, API_VERSION, "Metal3Cluster", &names.cluster),
        json!({
            // Bare metal without a cloud controller manager.
            "cloudProviderEnabled": false,
            "controlPlaneEndpoint": {
                "host": mc.spec.control_plane.endpoint.to_string(),
                "port": API_SERVER_PORT,
            },
        }),
    )
}

/// The control plane's machine template.
pub fn machine_template(mc: &MetalCluster, names: &Names) -> Value {
    template(
        mc,
        &names.machine_template,
        &names.data_template,
        &mc.spec.host.pool,
    )
}

/// A Metal3MachineTemplate claiming hosts of `pool`, built by `data_template`.
pub fn template(mc: &MetalCluster, name: &str, data_template: &str, pool: &str) -> Value {
    let k = &mc.spec.kubernetes;
    let mut image = json!({
        "url": k.image_url,
        "checksumType": k.image_checksum_type,
        "diskFormat": k.image_disk_format,
    });
    if let (Some(c), Value::Object(m)) = (&k.image_checksum, &mut image) {
        m.insert("checksum".into(), json!(c));
    }
    with_spec(
        object(mc, API_VERSION, "Metal3MachineTemplate", name),
        json!({
            "nodeReuse": false,
            "template": {"spec": {
                // A full disk erase takes hours; metadata cleaning wipes the
                // partition tables, enough for the next tenant.
                "automatedCleaningMode": "metadata",
                "dataTemplate": {"name": data_template},
                "hostSelector": {"matchLabels": {POOL_LABEL: pool}},
                "image": image,
            }},
        }),
    )
}

/// The control plane's data template.
pub fn data_template(mc: &MetalCluster, names: &Names) -> Value {
    network_data(
        mc,
        names,
        &names.data_template,
        &mc.spec.host.boot_interface,
        &names.ippool,
    )
}

/// A Metal3DataTemplate: a static address from `ippool` on `iface`.
pub fn network_data(
    mc: &MetalCluster,
    names: &Names,
    name: &str,
    iface: &str,
    ippool: &str,
) -> Value {
    with_spec(
        object(mc, API_VERSION, "Metal3DataTemplate", name),
        json!({
            // Deprecated on CAPM3 main but still required by v1.13.x.
            "clusterName": names.cluster,
            "networkData": {
                "links": {"ethernets": [{
                    "id": iface,
                    "type": "phy",
                    "macAddress": {"fromHostInterface": iface},
                }]},
                // Without a static address the node takes a DHCP lease that
                // does not match the control plane endpoint.
                "networks": {"ipv4": [{
                    "id": "baremetal",
                    "link": iface,
                    "ipAddressFromIPPool": ippool,
                    "routes": [{
                        "network": "0.0.0.0",
                        "prefix": 0,
                        "gateway": {"fromIPPool": ippool},
                    }],
                }]},
                "services": {"dns": [mc.spec.network.dns_server.to_string()]},
            },
        }),
    )
}
