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
                    env("vip_interface", mc.spec.host.boot_interface.clone()),
                    env("vip_subnet", "32".into()),
                    env("vip_arp", "true".into()),
                    env("cp_enable", "true".into()),
                    env("cp_namespace", "kube-system".into()),
                    // Services are Cilium's (LB IPAM and L2 announcements).
                    env("svc_enable", "false".into()),
                    env("vip_leaderelection", "true".into()),
                    env("vip_leasename", "plndr-cp-lock".into()),
                    env("vip_leaseduration", "5".into()),
                    env("vip_renewdeadline", "3".into()),
                    env("vip_retryperiod", "1".into()),
                    {"name": "vip_nodename", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                ],
                "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
                "volumeMounts": [{"name": "kubeconfig", "mountPath": KUBECONFIG}],
            }],
            // kube-vip dials the API server as `kubernetes:<port>`, which
            // must be this node: the VIP is not announced yet at init.
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["kubernetes"]}],
            "hostNetwork": true,
            "volumes": [{"name": "kubeconfig", "hostPath": {"path": KUBECONFIG}}],
        },
    })
}

/// The KubeadmControlPlane file entry that writes the static Pod.
pub fn file(mc: &MetalCluster, image: &str) -> Value {
    let content = serde_json::to_string_pretty(&manifest(mc, image)).unwrap_or_default();
    json!({
        "path": MANIFEST_PATH,
        "owner": "root:root",
        "permissions": "0644",
        "content": content,
    })
}
