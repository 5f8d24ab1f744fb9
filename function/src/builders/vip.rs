//! The control plane's virtual IP, served by kube-vip as a static Pod on
//! every control plane node.
//!
//! Why kube-vip as a static Pod in the KubeadmControlPlane's files: it is
//! what CAPM3's, CAPV's and Sylva's templates use on clouds without load
//! balancers; it needs no node outside the cluster (keepalived + haproxy
//! would need a config per node and a health check of its own), and as a
//! static Pod it is up before `kubeadm init` waits for the endpoint. ARP on
//! the control plane's boot NIC: the VIP is in the node subnet, no BGP
//! peer is needed. Leader election picks one announcing node; it moves when
//! that node goes.

use serde_json::{Value, json};

use super::metal3::API_SERVER_PORT;
use crate::spec::MetalCluster;

pub const MANIFEST_PATH: &str = "/etc/kubernetes/manifests/kube-vip.yaml";
pub const KUBECONFIG: &str = "/etc/kubernetes/admin.conf";
/// The Pod's /etc/hosts, a file on the node (what CAPV does): kubelets
/// before the fix of kubernetes#119852 ignore `hostAliases` in static Pods
/// (kube-vip#692), and kube-vip must reach the API server as `kubernetes`
/// on this node while the VIP is not announced yet at init.
pub const HOSTS_PATH: &str = "/etc/kube-vip.hosts";
pub const HOSTS: &str = "127.0.0.1 localhost kubernetes\n";

/// Leader election timers in seconds: lease, renew deadline, retry. CAPV's
/// tested values; 5/3/1 flaps under an API server's load (a slow renew
/// moves the VIP mid-request).
pub const LEASE_SECONDS: (u8, u8, u8) = (15, 10, 2);

/// The static Pod, as JSON (which is YAML the kubelet reads).
pub fn manifest(mc: &MetalCluster, image: &str) -> Value {
    let env = |name: &str, value: String| json!({"name": name, "value": value});
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-vip", "namespace": "kube-system"},
        "spec": {
            "containers": [{
                "name": "kube-vip",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "args": ["manager"],
                "env": [
                    env("address", mc.spec.control_plane.endpoint.to_string()),
                    env("port", API_SERVER_PORT.to_string()),
                    env("vip_interface", mc.spec.host.link.data_interface()),
                    env("vip_subnet", "32".into()),
                    env("vip_arp", "true".into()),
                    env("cp_enable", "true".into()),
                    env("cp_namespace", "kube-system".into()),
                    // Services are Cilium's (LB IPAM and L2 announcements).
                    env("svc_enable", "false".into()),
                    env("vip_leaderelection", "true".into()),
                    env("vip_leasename", "plndr-cp-lock".into()),
                    env("vip_leaseduration", LEASE_SECONDS.0.to_string()),
                    env("vip_renewdeadline", LEASE_SECONDS.1.to_string()),
                    env("vip_retryperiod", LEASE_SECONDS.2.to_string()),
                    {"name": "vip_nodename", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                ],
                "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
                "volumeMounts": [
                    {"name": "kubeconfig", "mountPath": KUBECONFIG},
                    {"name": "etchosts", "mountPath": "/etc/hosts", "readOnly": true},
                ],
            }],
            "hostNetwork": true,
            "volumes": [
                {"name": "kubeconfig", "hostPath": {"path": KUBECONFIG}},
                {"name": "etchosts", "hostPath": {"path": HOSTS_PATH, "type": "File"}},
            ],
        },
    })
}

/// The KubeadmControlPlane file entries: the hosts file, then the static
/// Pod that mounts it (cloud-init writes files before kubeadm runs).
pub fn files(mc: &MetalCluster, image: &str) -> Value {
    let content = serde_json::to_string_pretty(&manifest(mc, image)).unwrap_or_default();
    json!([
        {
            "path": HOSTS_PATH,
            "owner": "root:root",
            "permissions": "0644",
            "content": HOSTS,
        },
        {
            "path": MANIFEST_PATH,
            "owner": "root:root",
            "permissions": "0644",
            "content": content,
        },
    ])
}
