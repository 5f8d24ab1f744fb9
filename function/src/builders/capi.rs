//! Cluster API core and the kubeadm control plane.

use serde_json::{Value, json};

use super::{bootstrap, metal3, object, vip, with_spec};
use crate::names::Names;
use crate::spec::MetalCluster;

pub const CLUSTER_API_VERSION: &str = "cluster.x-k8s.io/v1beta2";
pub const KCP_API_VERSION: &str = "controlplane.cluster.x-k8s.io/v1beta2";
pub const KCP_API_GROUP: &str = "controlplane.cluster.x-k8s.io";

pub fn cluster(mc: &MetalCluster, names: &Names) -> Value {
    let n = &mc.spec.network;
    with_spec(
        object(mc, CLUSTER_API_VERSION, "Cluster", &names.cluster),
        json!({
            "clusterNetwork": {
                "pods": {"cidrBlocks": [n.pod_cidr.to_string()]},
                "services": {"cidrBlocks": [n.service_cidr.to_string()]},
                "serviceDomain": "cluster.local",
            },
            "controlPlaneRef": {
                "apiGroup": KCP_API_GROUP,
                "kind": "KubeadmControlPlane",
                "name": names.cluster,
            },
            "infrastructureRef": {
                "apiGroup": metal3::API_GROUP,
                "kind": "Metal3Cluster",
                "name": names.cluster,
            },
        }),
    )
}

pub fn kubeadm_control_plane(mc: &MetalCluster, names: &Names, machine_template: &str) -> Value {
    let node_registration = bootstrap::node_registration(mc);
    let mut init = json!({"nodeRegistration": node_registration});
    if mc.spec.network.replaces_kube_proxy() {
        // Cilium replaces kube-proxy; kubeadm must not install it too.
        init["skipPhases"] = json!(["addon/kube-proxy"]);
    }
    let mut config = json!({
        "initConfiguration": init,
        "joinConfiguration": {
            "controlPlane": {},
            "nodeRegistration": node_registration,
        },
    });
    if let Value::Object(m) = &mut config {
        if let Some(users) = bootstrap::users(mc) {
            m.insert("users".into(), users);
        }
        if let Some(cmds) = bootstrap::pre_kubeadm_commands(mc) {
            m.insert("preKubeadmCommands".into(), cmds);
        }
        if let Some(image) = &mc.spec.control_plane.vip_image {
            m.insert("files".into(), vip::files(mc, image));
        }
    }
    let replicas = mc.spec.control_plane.replicas;
    let mut spec = json!({
            "replicas": replicas,
            "version": mc.spec.kubernetes.version,
            "machineTemplate": {"spec": {
                "infrastructureRef": {
                    "apiGroup": metal3::API_GROUP,
                    "kind": "Metal3MachineTemplate",
                    "name": machine_template,
                },
                "deletion": deletion(mc),
            }},
            "kubeadmConfigSpec": config,
    });
    if mc.spec.rollable() {
        // Scale in first with 3 or 5: a rollout needs no spare host or
        // address, and etcd keeps its quorum with one member gone. One
        // machine behind the VIP must add its successor first (a surge of
        // one: a spare host and the range's second address).
        let surge = if replicas >= 3 { 0 } else { 1 };
        spec["rollout"] = json!({
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge}},
            // kubeadm's certificates live a year: roll before they expire.
            "before": {"certificatesExpiryDays": mc.spec.kubernetes.renew_certificates_days},
        });
    }
    if mc.spec.health.enabled {
        // After the MachineHealthCheck's reboots failed, KCP replaces the
        // machine: at most 3 times, 5 minutes apart, and a machine healthy
        // for an hour starts afresh.
        spec["remediation"] = json!({
            "maxRetry": 3,
            "retryPeriodSeconds": 300,
            "minHealthyPeriodSeconds": 3600,
        });
    }
    with_spec(
        object(mc, KCP_API_VERSION, "KubeadmControlPlane", &names.cluster),
        spec,
    )
}

/// How long deleting a machine may wait for its node's drain and volume
/// detach (spec.drain), on the control plane and every pool.
pub fn deletion(mc: &MetalCluster) -> Value {
    json!({
        "nodeDrainTimeoutSeconds": mc.spec.drain.node_drain_timeout_seconds,
        "nodeVolumeDetachTimeoutSeconds": mc.spec.drain.node_volume_detach_timeout_seconds,
    })
}
