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

    /// The MetalCluster a Cluster name was derived from (`<xr>-cluster`).
    pub fn xr_of_cluster(cluster: &str) -> Option<&str> {
        cluster.strip_suffix("-cluster").filter(|x| !x.is_empty())
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
    /// MachineDeployment, MachineHealthCheck, and the base of the pool's
    /// content-named templates (`<machines>-<hash>`).
    pub machines: String,
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

/// Hex digits of the content hash in a template's name.
pub const CONTENT_HASH_LEN: usize = 8;

/// `<base>-<hash>`: the name of a machine-building template, derived from
/// its content (sha256 over the JSON with sorted keys, so neither map
/// order nor formatting changes it). Cluster API rolls machines only when
/// a template reference changes, and CAPM3's templates are immutable: a
/// new content is a new template, and the name changes exactly when the
/// content does.
pub fn content_name(base: &str, content: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    let mut canonical = String::new();
    write_canonical(content, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    let hex: String = digest
        .iter()
        .take(CONTENT_HASH_LEN / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{base}-{hex}")
}

fn write_canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cluster_name_leads_back_to_its_metalcluster() {
        let n = Names::new("lab-cluster");
        assert_eq!(Names::xr_of_cluster(&n.cluster), Some("lab-cluster"));
        assert_eq!(Names::xr_of_cluster("-cluster"), None);
        assert_eq!(Names::xr_of_cluster("hand-made"), None);
    }

    #[test]
    fn content_names_change_exactly_with_the_content() {
        let a = json!({"spec": {"x": 1, "y": [1, 2]}});
        let same = json!({"spec": {"y": [1, 2], "x": 1}});
        let other = json!({"spec": {"x": 2, "y": [1, 2]}});
        assert_eq!(content_name("t", &a), content_name("t", &same));
        assert_ne!(content_name("t", &a), content_name("t", &other));
        assert_eq!(content_name("t", &a).len(), "t-".len() + CONTENT_HASH_LEN);
    }
}
