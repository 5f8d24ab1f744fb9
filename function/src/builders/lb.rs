//! LoadBalancer addresses on the workload cluster: a Cilium LB IPAM pool
//! and an L2 announcement policy, applied through provider-kubernetes with
//! the workload kubeconfig.

use serde_json::{Value, json};

use super::{OBJECT_API_VERSION, Ref, cni, k8s_object, object, usage, with_spec};
use crate::inference::LoadBalancer;
use crate::names::Names;
use crate::spec::MetalCluster;

pub const K8S_PC_API_VERSION: &str = "kubernetes.m.crossplane.io/v1alpha1";
/// Names of the cluster-scoped Cilium objects inside the workload cluster.
pub const POOL_NAME: &str = "metalplane-lb";
pub const POLICY_NAME: &str = "metalplane-l2";

/// provider-kubernetes credentials for the workload cluster.
pub fn workload_provider_config(mc: &MetalCluster, names: &Names) -> Value {
    with_spec(
        object(
            mc,
            K8S_PC_API_VERSION,
            "ProviderConfig",
            &names.workload_provider_config,
        ),
        json!({"credentials": {
            "source": "Secret",
            "secretRef": {"namespace": mc.namespace, "name": names.kubeconfig_secret, "key": "value"},
        }}),
    )
}

pub fn pool(mc: &MetalCluster, names: &Names, lb: &LoadBalancer) -> Value {
    let manifest = json!({
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumLoadBalancerIPPool",
        "metadata": {"name": POOL_NAME},
        "spec": {"blocks": [lb.block()]},
    });
    k8s_object(
        mc,
        &names.lb_pool,
        manifest,
        "ProviderConfig",
        &names.workload_provider_config,
    )
}

pub fn l2_policy(mc: &MetalCluster, names: &Names) -> Value {
    let manifest = json!({
        "apiVersion": "cilium.io/v2alpha1",
        "kind": "CiliumL2AnnouncementPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            // Answer ARP for LoadBalancer IPs on the nodes' data
            // interfaces only, every set's: the lease can go to any node,
            // and a node with none of the names announces nothing
            // (Cilium's l2announcer).
            "interfaces": interface_patterns(mc),
            "loadBalancerIPs": true,
            "externalIPs": false,
        },
    });
    k8s_object(
        mc,
        &names.l2_policy,
        manifest,
        "ProviderConfig",
        &names.workload_provider_config,
    )
}

/// Anchored patterns for the data interface (the NIC, bond or VLAN with
/// the node address) of the control plane and of every pool, each once,
/// the control plane's first.
pub fn interface_patterns(mc: &MetalCluster) -> Vec<String> {
    let mut names = vec![mc.spec.host.link.data_interface()];
    for w in &mc.spec.workers {
        let n = w.link.data_interface();
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
        .into_iter()
        .map(|n| format!("^{}$", regex_escape(&n)))
        .collect()
}

/// Interface names allow '.', the one regex metacharacter to escape.
fn regex_escape(s: &str) -> String {
    s.replace('.', "\\.")
}

/// The LB objects go before Cilium (Cilium's operator must clean up) and
/// before their ProviderConfig: without it provider-kubernetes cannot reach
/// the workload cluster to delete them, and a foreground deletion (which
/// deletes everything at once) hangs forever.
pub fn usages(mc: &MetalCluster, names: &Names) -> [(&'static str, Value); 4] {
    let cilium = || Ref(cni::HELM_API_VERSION, "Release", &names.cilium_release);
    let pc = || {
        Ref(
            K8S_PC_API_VERSION,
            "ProviderConfig",
            &names.workload_provider_config,
        )
    };
    let pool = || Ref(OBJECT_API_VERSION, "Object", &names.lb_pool);
    let policy = || Ref(OBJECT_API_VERSION, "Object", &names.l2_policy);
    [
        (
            "lb-pool-needs-cilium",
            usage(mc, &names.lb_pool_usage, cilium(), pool()),
        ),
        (
            "lb-l2policy-needs-cilium",
            usage(mc, &names.l2_policy_usage, cilium(), policy()),
        ),
        (
            "lb-pool-needs-providerconfig",
            usage(mc, &names.lb_pool_pc_usage, pc(), pool()),
        ),
        (
            "lb-l2policy-needs-providerconfig",
            usage(mc, &names.l2_policy_pc_usage, pc(), policy()),
        ),
    ]
}
