//! Cluster API Provider Metal3: the infrastructure cluster, the machine
//! template that claims a BareMetalHost, and the data template that gives
//! the node its static network configuration.

use serde_json::{Value, json};

use super::{POOL_LABEL, object, with_spec};
use crate::api::BondMode;
use crate::links::{BOND_NAME, NodeLink};
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

/// Composition resource names of the control plane's templates; with a
/// rollable control plane the name carries the content hash.
pub const CP_MACHINE_TEMPLATE: &str = "metal3machinetemplate";
pub const CP_DATA_TEMPLATE: &str = "metal3datatemplate";

/// The control plane's data and machine templates, as (composition
/// resource name, manifest), and the machine template's name for KCP. A
/// single node keeps the original configuration's fixed names (it never
/// rolls); a control plane behind a VIP names them by content, so that a
/// change makes new templates and KCP rolls onto them.
pub fn control_plane_templates(mc: &MetalCluster, names: &Names) -> ([(String, Value); 2], String) {
    let pool = &mc.spec.host.pool;
    let iface = &mc.spec.host.link;
    if !mc.spec.rollable() {
        let data = network_data(mc, names, &names.data_template, iface, &names.ippool);
        let machine = template(mc, &names.machine_template, &names.data_template, pool);
        return (
            [
                (CP_DATA_TEMPLATE.into(), data),
                (CP_MACHINE_TEMPLATE.into(), machine),
            ],
            names.machine_template.clone(),
        );
    }
    let base = &names.machine_template;
    let mut data = network_data(mc, names, base, iface, &names.ippool);
    let data_name = super::name_by_content(&mut data, base);
    let mut machine = template(mc, base, &data_name, pool);
    let machine_name = super::name_by_content(&mut machine, base);
    (
        [
            (super::template_resource(CP_DATA_TEMPLATE, &data_name), data),
            (
                super::template_resource(CP_MACHINE_TEMPLATE, &machine_name),
                machine,
            ),
        ],
        machine_name,
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

/// A Metal3DataTemplate: the node's links (`link`) and a static address
/// from `ippool` on its data interface.
pub fn network_data(
    mc: &MetalCluster,
    names: &Names,
    name: &str,
    link: &NodeLink,
    ippool: &str,
) -> Value {
    let data = link.data_interface();
    with_spec(
        object(mc, API_VERSION, "Metal3DataTemplate", name),
        json!({
            // Deprecated on CAPM3 main but still required by v1.13.x.
            "clusterName": names.cluster,
            "networkData": {
                "links": links(link),
                // Without a static address the node takes a DHCP lease that
                // does not match the control plane endpoint.
                "networks": {"ipv4": [{
                    "id": "baremetal",
                    "link": data,
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

/// The transmit hash policy of a bond mode. CAPM3 always renders one, and
/// cloud-init turns an empty one into a bond without its mode; `layer3+4`
/// spreads flows over the members where the mode hashes, `layer2` (the
/// kernel's default) elsewhere, where it is unused.
pub fn xmit_hash_policy(mode: BondMode) -> &'static str {
    match mode {
        BondMode::Lacp | BondMode::BalanceXor | BondMode::BalanceTlb | BondMode::BalanceAlb => {
            "layer3+4"
        }
        BondMode::ActiveBackup | BondMode::BalanceRr | BondMode::Broadcast => "layer2",
    }
}

/// Each link with the `name` the OS is to use: cloud-init renames a NIC
/// with the link's MAC to it, so the names kube-vip and Cilium are given
/// hold on the installed OS whatever it would call the NIC. The bond and
/// the VLAN take the boot NIC's MAC (the one the host is known by).
pub fn links(link: &NodeLink) -> Value {
    let with_mtu = |mut v: Value| {
        if let (Some(m), Value::Object(o)) = (link.mtu, &mut v) {
            o.insert("mtu".into(), json!(m));
        }
        v
    };
    let mac = |nic: &str| json!({"fromHostInterface": nic});
    let ethernets: Vec<Value> = link
        .nics()
        .into_iter()
        .map(|nic| with_mtu(json!({"id": nic, "type": "phy", "name": nic, "macAddress": mac(nic)})))
        .collect();
    let mut out = json!({"ethernets": ethernets});
    if let Some(b) = &link.bond {
        out["bonds"] = json!([with_mtu(json!({
            "id": BOND_NAME,
            "name": BOND_NAME,
            "bondMode": b.mode.as_str(),
            "bondXmitHashPolicy": xmit_hash_policy(b.mode),
            "bondLinks": b.interfaces,
            "macAddress": mac(&link.boot),
            // CAPM3 v1.13 requires a parameter but types its value as an
            // object, so no scalar such as miimon can pass; one without a
            // value renders null, which cloud-init drops: the bond runs
            // with netplan's defaults (docs/networking.md).
            "parameters": [{"name": "miimon"}],
        }))]);
    }
    if let Some(v) = link.vlan {
        let id = link.data_interface();
        out["vlans"] = json!([with_mtu(json!({
            "id": id,
            "name": id,
            "vlanID": v,
            "vlanLink": link.base(),
            "macAddress": mac(&link.boot),
        }))]);
    }
    out
}
