//! kubeadm bootstrap details: node registration, the login user and the
//! first-boot commands (the GPU driver's are `driver`'s).
//!
//! Every value that reaches a shell is validated by `spec` first and
//! single-quoted as well (`driver::sh_quote`), so a value can never become
//! shell syntax.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::spec::{MetalCluster, Worker};

/// Metal3 renders this at provisioning time.
pub const NODE_NAME: &str = "{{ ds.meta_data.name }}";

pub use crate::kubelet::{MAX_ARG_VALUE, MAX_COMMAND, UUID_LABEL, node_labels_arg};

/// The spec's node labels plus the Modelplane pool label (always: joining
/// the fleet later must not need a new machine).
pub fn node_labels(mc: &MetalCluster) -> BTreeMap<String, String> {
    let mut labels = mc.spec.kubernetes.node_labels.clone();
    labels.insert(
        crate::inference::POOL_LABEL.to_string(),
        mc.spec.node_pool.clone(),
    );
    labels
}

/// A worker pool's labels: the spec's, the pool's over them, and the
/// Modelplane pool label naming the worker pool.
pub fn worker_labels(mc: &MetalCluster, w: &Worker) -> BTreeMap<String, String> {
    let mut labels = mc.spec.kubernetes.node_labels.clone();
    labels.extend(w.node_labels.clone());
    labels.insert(crate::inference::POOL_LABEL.to_string(), w.name.clone());
    labels
}

/// The control plane nodes' registration.
pub fn node_registration(mc: &MetalCluster) -> Value {
    let mut reg = registration(&node_labels(mc));
    if mc.spec.workers.is_empty() {
        // Without workers the control plane runs the workloads: drop the
        // control-plane taint. With workers kubeadm's default taint stays.
        reg["taints"] = json!([]);
    }
    reg
}

/// A node registering under its Metal3 name with `labels`.
pub fn registration(labels: &BTreeMap<String, String>) -> Value {
    json!({
        "name": NODE_NAME,
        "kubeletExtraArgs": [{
            "name": "node-labels",
            "value": node_labels_arg(labels),
        }],
    })
}

/// A sudo user with the spec's keys; none when no key is given, since a
/// user nobody can log in as is no access at all.
pub fn users(mc: &MetalCluster) -> Option<Value> {
    let access = mc.spec.access.as_ref()?;
    if access.ssh_authorized_keys.is_empty() {
        return None;
    }
    Some(json!([{
        "name": access.username,
        "sshAuthorizedKeys": access.ssh_authorized_keys,
        "sudo": "ALL=(ALL) NOPASSWD:ALL",
        "shell": "/bin/bash",
    }]))
}

/// The control plane's first-boot commands: the GPU driver (spec.gpu) and,
/// with a virtual IP, kube-vip's kubeconfig on the first node.
pub fn pre_kubeadm_commands(mc: &MetalCluster) -> Option<Value> {
    let mut cmds = Vec::new();
    if mc.spec.control_plane.vip_image.is_some() && super_admin_on_init(&mc.spec.kubernetes.version)
    {
        cmds.push(KUBE_VIP_SUPER_ADMIN.to_string());
    }
    if let Some(gpu) = &mc.spec.gpu {
        cmds.extend(super::driver::gpu_commands(gpu));
    }
    (!cmds.is_empty()).then(|| json!(cmds))
}

/// kubeadm 1.29 and later give `admin.conf` cluster-admin through RBAC,
/// which does not exist yet while `kubeadm init` waits for the API server
/// behind the VIP kube-vip has not announced; only `super-admin.conf`
/// (written on the init node only) works then (kube-vip issue 684). The
/// manifest keeps it: switching back restarts kube-vip while it holds the
/// VIP, which CAPV found flaky.
pub const KUBE_VIP_SUPER_ADMIN: &str = "if [ -f /run/kubeadm/kubeadm.yaml ] && [ ! -f /run/kubeadm/kubeadm-join-config.yaml ]; then sed -i 's#\"path\": \"/etc/kubernetes/admin.conf\"#\"path\": \"/etc/kubernetes/super-admin.conf\"#' /etc/kubernetes/manifests/kube-vip.yaml; fi";

/// Whether kubeadm `version` (vX.Y.Z, validated) writes super-admin.conf.
pub fn super_admin_on_init(version: &str) -> bool {
    let mut parts = version.trim_start_matches('v').split('.');
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= (1, 29)
}

/// A worker pool's first-boot commands: its own GPU driver.
pub fn worker_commands(w: &Worker) -> Option<Value> {
    w.gpu
        .as_ref()
        .map(|g| json!(super::driver::gpu_commands(g)))
}
