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

/// Whether a composition resource name is one of a pool's templates
/// (`worker-<pool>.<kind>.<hash>`).
pub fn is_template(resource_name: &str) -> bool {
    resource_name.starts_with("worker-")
        && [".datatemplate.", ".machinetemplate.", ".config."]
            .iter()
            .any(|k| resource_name.contains(k))
}

/// Whether a composition resource name is a pool's MachineDeployment.
pub fn is_machine_deployment(resource_name: &str) -> bool {
    resource_name.starts_with("worker-") && !resource_name[7..].contains('.')
}

/// A pool's machine-building templates, named by content, as
/// (composition resource name, manifest), and the names the
/// MachineDeployment refers to.
pub struct PoolTemplates {
    pub objects: Vec<(String, Value)>,
    pub config: String,
    pub machine: String,
}

/// Every template of one pool: a change to any makes new ones, and the
/// MachineDeployment, pointed at them, rolls the pool's machines.
pub fn templates(mc: &MetalCluster, names: &Names, w: &Worker) -> PoolTemplates {
    let p = names.pool(&mc.name, &w.name);
    let r = resource_name(w);
    let base = &p.machines;
    let mut data = metal3::network_data(mc, names, base, &w.link, &p.ippool);
    let data_name = super::name_by_content(&mut data, base);
    let mut machine = metal3::template(mc, base, &data_name, &w.pool);
    let machine_name = super::name_by_content(&mut machine, base);
    let mut config = config_template(mc, &p, w);
    let config_name = super::name_by_content(&mut config, base);
    PoolTemplates {
        objects: vec![
            (
                super::template_resource(&format!("{r}.datatemplate"), &data_name),
                data,
            ),
            (
                super::template_resource(&format!("{r}.machinetemplate"), &machine_name),
                machine,
            ),
            (
                super::template_resource(&format!("{r}.config"), &config_name),
                config,
            ),
        ],
        config: config_name,
        machine: machine_name,
    }
}

/// Every object of one pool, as (composition resource name, manifest):
/// its address pool, templates and MachineDeployment.
pub fn pool(mc: &MetalCluster, names: &Names, w: &Worker) -> Vec<(String, Value)> {
    let p = names.pool(&mc.name, &w.name);
    let r = resource_name(w);
    let t = templates(mc, names, w);
    let mut out = vec![(
        format!("{r}.ippool"),
        ipam::pool(mc, names, &p.ippool, &p.node_prefix, w.addresses),
    )];
    out.extend(t.objects);
    out.push((
        r,
        machine_deployment(mc, names, &p, w, &t.config, &t.machine),
    ));
    out
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

pub fn machine_deployment(
    mc: &MetalCluster,
    names: &Names,
    p: &PoolNames,
    w: &Worker,
    config: &str,
    machine: &str,
) -> Value {
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
            // One machine of the pool remediated at a time.
            "remediation": {"maxInFlight": 1},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": names.cluster,
                    "version": mc.spec.kubernetes.version,
                    "bootstrap": {"configRef": {
                        "apiGroup": BOOTSTRAP_API_GROUP,
                        "kind": "KubeadmConfigTemplate",
                        "name": config,
                    }},
                    "infrastructureRef": {
                        "apiGroup": metal3::API_GROUP,
                        "kind": "Metal3MachineTemplate",
                        "name": machine,
                    },
                    "deletion": super::capi::deletion(mc),
                },
            },
        }),
    )
}
