//! Simulated inventory: a BareMetalHost with its BMC Secret and
//! HardwareData, inspection disabled (BMO's demo mode has no agent), so
//! BMO makes it available at once. The BMC addresses are never dialled.

use serde_json::{Value, json};

/// The second NIC of a host whose first is `nic`, named as the same
/// vendor names it (eno1 -> eno2, eno1np0 -> eno2np0): bonds pair them.
pub fn second_nic(nic: &str) -> String {
    nic.replacen('1', "2", 1)
}

/// The three objects of host `name` in `pool`, booting from `nic` and
/// with a second NIC (`second_nic`); `n` makes its MACs, BMC address and
/// serial unique.
pub fn host_docs(ns: &str, name: &str, pool: &str, nic: &str, n: usize) -> [Value; 3] {
    let mac = format!("18:66:da:00:{:02x}:{:02x}", n / 256, n % 256);
    let mac2 = format!("18:66:da:01:{:02x}:{:02x}", n / 256, n % 256);
    [
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-bmc"), "namespace": ns},
            "stringData": {"username": "root", "password": "lab-only"},
        }),
        json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": ns, "labels": {"metal.kube.farm/pool": pool},
                         "annotations": {"inspect.metal3.io": "disabled"}},
            "spec": {
                "online": false, "bootMode": "UEFI", "bootMACAddress": mac,
                "bmc": {
                    "address": format!("idrac-virtualmedia://10.40.{}.{}/redfish/v1/Systems/System.Embedded.1", 8 + n / 200, 1 + n % 200),
                    "credentialsName": format!("{name}-bmc"),
                    "disableCertificateVerification": true,
                },
            },
        }),
        json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "HardwareData",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"hardware": {
                "hostname": name,
                "cpu": {"arch": "x86_64", "model": "Intel Xeon Gold 6248", "clockMegahertz": 2500, "count": 80, "flags": ["vmx"]},
                "ramMebibytes": 393216,
                "nics": [
                    {"name": nic, "mac": mac, "speedGbps": 25, "pxe": true},
                    {"name": second_nic(nic), "mac": mac2, "speedGbps": 25},
                ],
                "storage": [{"name": "/dev/sda", "sizeBytes": 960197124096_u64, "rotational": false, "type": "SSD"}],
                "systemVendor": {"manufacturer": "Supermicro", "productName": "SYS-4029GP-TRT", "serialNumber": format!("LABF{n:03}")},
                "firmware": {"bios": {"vendor": "American Megatrends", "version": "3.4", "date": "01/01/2025"}},
            }},
        }),
    ]
}

/// `count` hosts named `<pool>-<i>` (i from 1), numbered from `first`.
pub fn docs(ns: &str, pool: &str, nic: &str, count: usize, first: usize) -> Vec<Value> {
    (1..=count)
        .flat_map(|i| host_docs(ns, &format!("{pool}-{i}"), pool, nic, first + i))
        .collect()
}
