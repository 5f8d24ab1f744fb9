//! Datacenter networking: bonds, VLANs and MTU on `spec.host` and each
//! worker pool, rendered into CAPM3's Metal3DataTemplate links; kube-vip
//! and Cilium's L2 announcements on each set's data interface; every
//! problem named by its path, all at once. What CAPM3 and cloud-init make
//! of it on a node is the lab's `node-config` check.

mod common;

use std::collections::BTreeMap;

use common::*;
use metalplane::compose::compose;
use serde_json::{Value, json};

fn fleet_xr() -> Value {
    load_yaml(&repo_root().join("examples/metalcluster/fleet.yaml"))[0].clone()
}

/// The fleet with the three shapes: the control plane on VLAN 100 of its
/// NIC, the gpu pool on VLAN 100 of a bond of two NICs with jumbo frames,
/// the cpu pool taking the host's network (it says nothing of its own).
fn networked_fleet() -> Value {
    let mut xr = fleet_xr();
    xr["spec"]["host"]["vlan"] = json!(100);
    let gpu = &mut xr["spec"]["workers"][0];
    gpu["bond"] = json!({"interfaces": ["eno1np0", "eno2np0"]});
    gpu["vlan"] = json!(100);
    gpu["mtu"] = json!(9000);
    xr
}

fn data_templates(d: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    d.iter()
        .filter(|(_, v)| v["kind"] == "Metal3DataTemplate")
        .map(|(k, v)| (k.clone(), v["spec"]["networkData"].clone()))
        .collect()
}

#[test]
fn bonds_vlans_and_mtu_render_into_valid_data_templates() {
    let xr = networked_fleet();
    let schemas = Schemas::get();
    schemas.assert_valid(&xr);
    let d = desired(&compose(&request(&xr, &BTreeMap::new(), Some(&[]))));
    for obj in d.values() {
        schemas.assert_valid(obj);
    }
    let t = data_templates(&d);
    let gpu = t
        .iter()
        .find(|(k, _)| k.starts_with("worker-gpu."))
        .map(|(_, v)| v)
        .expect("gpu pool data template");
    let mac = |nic: &str| json!({"fromHostInterface": nic});
    assert_eq!(
        gpu["links"],
        json!({
            "ethernets": [
                {"id": "eno1np0", "type": "phy", "name": "eno1np0", "mtu": 9000, "macAddress": mac("eno1np0")},
                {"id": "eno2np0", "type": "phy", "name": "eno2np0", "mtu": 9000, "macAddress": mac("eno2np0")},
            ],
            "bonds": [{
                "id": "bond0", "name": "bond0", "bondMode": "802.3ad", "bondXmitHashPolicy": "layer3+4",
                "bondLinks": ["eno1np0", "eno2np0"], "macAddress": mac("eno1np0"), "mtu": 9000,
                "parameters": [{"name": "miimon"}],
            }],
            "vlans": [{"id": "bond0.100", "name": "bond0.100", "vlanID": 100, "vlanLink": "bond0", "macAddress": mac("eno1np0"), "mtu": 9000}],
        })
    );
    assert_eq!(gpu["networks"]["ipv4"][0]["link"], "bond0.100");
    // The control plane and the cpu pool (which takes the host's): VLAN
    // 100 of eno1, no bond, no MTU given (the OS's default).
    let plain_vlan = json!({
        "ethernets": [{"id": "eno1", "type": "phy", "name": "eno1", "macAddress": mac("eno1")}],
        "vlans": [{"id": "eno1.100", "name": "eno1.100", "vlanID": 100, "vlanLink": "eno1", "macAddress": mac("eno1")}],
    });
    for (k, v) in t.iter().filter(|(k, _)| !k.starts_with("worker-gpu.")) {
        assert_eq!(v["links"], plain_vlan, "{k}");
        assert_eq!(v["networks"]["ipv4"][0]["link"], "eno1.100", "{k}");
    }
    assert_eq!(t.len(), 3);
}

/// kube-vip announces the VIP, and Cilium LoadBalancer addresses, on each
/// set's data interface: where the node address is.
#[test]
fn kube_vip_and_l2_announcements_use_the_data_interface() {
    assert_eq!(
        l2_interfaces(&networked_fleet()),
        json!(["^eno1\\.100$", "^bond0\\.100$"])
    );
    let mc = metalplane::spec::parse(&networked_fleet()).expect("valid");
    let pod = metalplane::builders::vip::manifest(&mc, "ghcr.io/kube-vip/kube-vip:v1.0.0");
    let env = pod["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "vip_interface")
        .cloned()
        .expect("vip_interface");
    assert_eq!(env["value"], "eno1.100");
}

/// A single node: a bond with a VLAN, active-backup.
#[test]
fn a_single_node_bonds_too() {
    let mut xr = example_xr();
    xr["spec"]["host"]["bond"] = json!({"interfaces": ["eno1", "eno2"], "mode": "active-backup"});
    xr["spec"]["host"]["vlan"] = json!(120);
    xr["spec"]["host"]["mtu"] = json!(9000);
    Schemas::get().assert_valid(&xr);
    let d = desired(&compose(&request(&xr, &BTreeMap::new(), Some(&[]))));
    for obj in d.values() {
        Schemas::get().assert_valid(obj);
    }
    let t = data_templates(&d);
    let (_, nd) = t.iter().next().expect("one data template");
    assert_eq!(nd["links"]["bonds"][0]["bondMode"], "active-backup");
    assert_eq!(nd["links"]["bonds"][0]["bondXmitHashPolicy"], "layer2");
    assert_eq!(nd["links"]["vlans"][0]["id"], "bond0.120");
    assert_eq!(nd["networks"]["ipv4"][0]["link"], "bond0.120");
}

/// Every problem of the new fields at once, each by its path.
#[test]
fn every_network_problem_is_named_at_once() {
    let mut xr = fleet_xr();
    xr["spec"]["host"]["bond"] = json!({"interfaces": ["eno1"]});
    xr["spec"]["host"]["mtu"] = json!(9216);
    let gpu = &mut xr["spec"]["workers"][0];
    gpu["bond"] = json!({"interfaces": ["eno2np0", "eno2np0", "2bad"]});
    gpu["vlan"] = json!(5000);
    let cpu = &mut xr["spec"]["workers"][1];
    cpu["bootInterface"] = json!("enp129s0f0np0");
    cpu["vlan"] = json!(4000);
    let msg = fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))).expect("refused");
    for (path, what) in [
        ("spec.host.bond.interfaces", "2 to 8 NICs"),
        ("spec.host.mtu", "9000"),
        (
            "spec.workers[0].bond.interfaces[1]",
            "is also spec.workers[0].bond.interfaces[0]",
        ),
        ("spec.workers[0].bond.interfaces[2]", "interface name"),
        (
            "spec.workers[0].bootInterface",
            "must be one of spec.workers[0].bond.interfaces",
        ),
        ("spec.workers[0].vlan", "between 1 and 4094"),
        (
            "spec.workers[1].vlan",
            "enp129s0f0np0.4000, longer than Linux's 15 characters",
        ),
    ] {
        assert!(
            msg.contains(path) && msg.contains(what),
            "{path}: {what} missing from: {msg}"
        );
    }
}

/// Without the new fields nothing changes: the examples render as before
/// (the goldens hold them byte for byte), and a pool that names only its
/// NIC keeps no VLAN or bond of the host's.
#[test]
fn a_pool_that_names_its_network_takes_nothing_else_of_the_hosts() {
    let mut xr = fleet_xr();
    xr["spec"]["host"]["vlan"] = json!(100);
    xr["spec"]["host"]["mtu"] = json!(9000);
    let mc = metalplane::spec::parse(&xr).expect("valid");
    let gpu = &mc.spec.workers[0];
    assert_eq!(gpu.link.data_interface(), "eno1np0");
    assert_eq!(gpu.link.mtu, None);
    let cpu = &mc.spec.workers[1];
    assert_eq!(cpu.link, mc.spec.host.link);
}
