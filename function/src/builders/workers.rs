//! Worker pools: per pool a MachineDeployment, its KubeadmConfigTemplate
//! (labels, login, that pool's GPU driver), Metal3MachineTemplate (host
//! selector, image, cleaning), Metal3DataTemplate (its boot NIC) and
//! IPPool (its range).

use serde_json::{Value, json};

use super::{bootstrap, ipam, metal3, object, with_spec};
use crate::names::{Names, PoolNames};
use crate::spec::{MetalCluster, Worker};

pub const BOOTSTRAP_API_VERSION: &str = "bootstrap.cluster.x-k8s.io/v1beta2";
pub const BOOTSTRAP_API_GROUP: &str = "bootstrap.cluster.x-k8s.io";
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";

/// Composition resource name of a pool's MachineDeployment; its other
/// objects add a suffix.
pub fn resource_name(w: &Worker) -> String {
    format!("worker-{}", w.name)
}

/// Whether a composition resource name is a pool's MachineDeployment.
pub fn is_machine_deployment(resource_name: &str) -> bool {
    resource_name.starts_with("worker-") && !resource_name[7..].contains('.')
}

/// Every object of one pool, as (composition resource name, manifest).
pub fn pool(mc: &MetalCluster, names: &Names, w: &Worker) -> [(String, Value); 5] {
    let p = names.pool(&mc.name, &w.name);
    let r = resource_name(w);
    [
        (
            format!("{r}.ippool"),
            ipam::pool(mc, names, &p.ippool, &p.node_prefix, w.addresses),
        ),
        (
            format!("{r}.datatemplate"),
            metal3::network_data(mc, names, &p.data_template, &w.boot_interface, &p.ippool),
        ),
        (
            format!("{r}.machinetemplate"),
            metal3::template(mc, &p.machines, &p.data_template, &w.pool),
        ),
        (format!("{r}.config"), config_template(mc, &p, w)),
        (r, machine_deployment(mc, names, &p, w)),
    ]
}

pub fn config_template(mc: &MetalCluster, p: &PoolNames, w: &Worker) -> Value {
    let mut spec = json!({
        "joinConfiguration": {
            "nodeRegistration": bootstrap::registration(&bootstrap::worker_labels(mc, w)),
        },
    });
    if let Some(users) = bootstrap::users(mc) {
        spec["users"] = users;
    }
    if let Some(cmds) = bootstrap::worker_commands(w) {
        spec["preKubeadmCommands"] = cmds;
    }
    with_spec(
        object(
            mc,
            BOOTSTRAP_API_VERSION,
            "KubeadmConfigTemplate",
            &p.machines,
        ),
        json!({"template": {"spec": spec}}),
    )
}

pub fn machine_deployment(mc: &MetalCluster, names: &Names, p: &PoolNames, w: &Worker) -> Value {
    // The labels CAPI's webhook would default: set here so the desired
    // state matches what the API server keeps.
    let labels = json!({
        CLUSTER_NAME_LABEL: names.cluster,
        DEPLOYMENT_NAME_LABEL: p.machines,
    });
    with_spec(
        object(
            mc,
            super::capi::CLUSTER_API_VERSION,
            "MachineDeployment",
            &p.machines,
        ),
        json!({
            "clusterName": names.cluster,
            "replicas": w.replicas,
            "selector": {"matchLabels": labels},
            // Replace a machine by removing one first: no spare host or
            // address is needed, at the cost of one node of capacity.
            "rollout": {"strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            }},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": names.cluster,
                    "version": mc.spec.kubernetes.version,
                    "bootstrap": {"configRef": {
                        "apiGroup": BOOTSTRAP_API_GROUP,
                        "kind": "KubeadmConfigTemplate",
                        "name": p.machines,
                    }},
                    "infrastructureRef": {
                        "apiGroup": metal3::API_GROUP,
                        "kind": "Metal3MachineTemplate",
                        "name": p.machines,
                    },
                },
            },
        }),
    )
}
