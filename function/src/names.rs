//! Object names derived from the MetalCluster name. They are the original
//! configuration's names, so clusters it created are adopted unchanged.

/// Names of every object composed for one MetalCluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    pub ippool: String,
    pub node_prefix: String,
    pub cluster: String,
    pub machine_template: String,
    pub data_template: String,
    pub kubeconfig_secret: String,
    pub helm_provider_config: String,
    pub cilium_release: String,
    pub cilium_usage: String,
    pub cilium_control_plane_usage: String,
    pub cilium_provider_config_usage: String,
    pub host_usage: String,
    pub inference_control_plane_usage: String,
    pub workload_provider_config: String,
    pub lb_pool: String,
    pub l2_policy: String,
    pub lb_pool_usage: String,
    pub l2_policy_usage: String,
    pub lb_pool_pc_usage: String,
    pub l2_policy_pc_usage: String,
    pub kubeconfig_copy: String,
    pub inference_class: String,
    pub inference_cluster: String,
    pub inference_cluster_usage: String,
    pub inference_secret_usage: String,
    pub inference_class_usage: String,
}

impl Names {
    pub fn new(xr: &str) -> Self {
        let cluster = format!("{xr}-cluster");
        Self {
            ippool: format!("{xr}-pool"),
            node_prefix: format!("{xr}-node"),
            machine_template: format!("{cluster}-controlplane"),
            data_template: format!("{cluster}-controlplane-template"),
            // CAPI writes the admin kubeconfig to <cluster>-kubeconfig.
            kubeconfig_secret: format!("{cluster}-kubeconfig"),
            helm_provider_config: cluster.clone(),
            cilium_release: format!("{cluster}-cilium"),
            cilium_usage: format!("{cluster}-cilium-needs-cluster"),
            cilium_control_plane_usage: format!("{cluster}-cilium-needs-kcp"),
            cilium_provider_config_usage: format!("{cluster}-cilium-needs-pc"),
            host_usage: format!("{xr}-host-in-use"),
            inference_control_plane_usage: format!("{xr}-inference-needs-kcp"),
            workload_provider_config: cluster.clone(),
            lb_pool: format!("{xr}-lb-pool"),
            l2_policy: format!("{xr}-l2-policy"),
            lb_pool_usage: format!("{xr}-lb-pool-needs-cilium"),
            l2_policy_usage: format!("{xr}-l2-policy-needs-cilium"),
            lb_pool_pc_usage: format!("{xr}-lb-pool-needs-pc"),
            l2_policy_pc_usage: format!("{xr}-l2-policy-needs-pc"),
            kubeconfig_copy: format!("{xr}-kubeconfig-copy"),
            inference_class: format!("{xr}-inference-class"),
            inference_cluster: format!("{xr}-inference-cluster"),
            inference_cluster_usage: format!("{xr}-inference-needs-cluster"),
            inference_secret_usage: format!("{xr}-inference-needs-secret"),
            inference_class_usage: format!("{xr}-inference-needs-class"),
            cluster,
        }
    }

    pub fn all(&self) -> [&str; 26] {
        [
            &self.workload_provider_config,
            &self.lb_pool,
            &self.l2_policy,
            &self.lb_pool_usage,
            &self.l2_policy_usage,
            &self.lb_pool_pc_usage,
            &self.l2_policy_pc_usage,
            &self.kubeconfig_copy,
            &self.inference_class,
            &self.inference_cluster,
            &self.inference_cluster_usage,
            &self.inference_secret_usage,
            &self.inference_class_usage,
            &self.ippool,
            &self.node_prefix,
            &self.cluster,
            &self.machine_template,
            &self.data_template,
            &self.kubeconfig_secret,
            &self.helm_provider_config,
            &self.cilium_release,
            &self.cilium_usage,
            &self.cilium_control_plane_usage,
            &self.cilium_provider_config_usage,
            &self.host_usage,
            &self.inference_control_plane_usage,
        ]
    }
}

/// Names of one worker pool's objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolNames {
    /// MachineDeployment, KubeadmConfigTemplate and Metal3MachineTemplate.
    pub machines: String,
    pub data_template: String,
    pub ippool: String,
    pub node_prefix: String,
}

/// CAPI names a MachineDeployment's Machines `<name>-<5>-<5>` and CAPM3
/// its Metal3Machines `<template>-<5>`: 12 characters past the pool's.
pub const MACHINE_SUFFIX: usize = 12;

impl Names {
    pub fn pool(&self, xr: &str, worker: &str) -> PoolNames {
        PoolNames {
            machines: format!("{}-{worker}", self.cluster),
            data_template: format!("{}-{worker}-template", self.cluster),
            ippool: format!("{xr}-{worker}-pool"),
            node_prefix: format!("{xr}-{worker}-node"),
        }
    }
}

/// The longest name derived from `xr`, for the 63-character check.
pub fn longest_derived(xr: &str) -> String {
    let names = Names::new(xr);
    names
        .all()
        .iter()
        .max_by_key(|n| n.len())
        .map(|n| n.to_string())
        .unwrap_or_default()
}
