//! Cilium on the workload cluster through provider-helm, and the Usage that
//! makes Crossplane uninstall it before the Cluster goes away.

use serde_json::{Value, json};

use super::{Ref, capi, object, usage, with_spec};
use crate::names::Names;
use crate::spec::MetalCluster;

pub const HELM_API_VERSION: &str = "helm.m.crossplane.io/v1beta1";

pub fn helm_provider_config(mc: &MetalCluster, names: &Names) -> Value {
    with_spec(
        object(
            mc,
            HELM_API_VERSION,
            "ProviderConfig",
            &names.helm_provider_config,
        ),
        json!({"credentials": {
            "source": "Secret",
            // Written by CAPI once the control plane is up.
            "secretRef": {
                "namespace": mc.namespace,
                "name": names.kubeconfig_secret,
                "key": "value",
            },
        }}),
    )
}

/// Cilium values: one operator for one node, node pod CIDRs from
/// Kubernetes, and L2 announcements since bare metal has no cloud load
/// balancer.
pub fn cilium_values(mc: &MetalCluster) -> Value {
    let mut v = json!({
        "operator": {"replicas": 1},
        "ipam": {"mode": "kubernetes"},
        "k8sClientRateLimit": {"qps": 50, "burst": 100},
    });
    if mc.spec.network.replaces_kube_proxy() {
        v["kubeProxyReplacement"] = json!(true);
        v["l2announcements"] = json!({"enabled": true});
        // Without kube-proxy nothing maps the kubernetes Service's
        // ClusterIP, so the agent dials the API server directly.
        v["k8sServiceHost"] = json!(mc.spec.control_plane.endpoint.to_string());
        v["k8sServicePort"] = json!(super::metal3::API_SERVER_PORT);
    }
    v
}

/// Helm's wait: the Release is Ready only once Cilium's DaemonSet, Deployment
/// and Services are (helm's ready checker), not when the manifests are sent.
/// Written as Go prints a duration: provider-helm stores it back as "10m0s",
/// and "10m" made every reconcile's apply and provider-helm's update undo
/// each other, a watch event each (found by `cargo xtask lab perf`).
pub const RELEASE_WAIT_TIMEOUT: &str = "10m0s";

pub fn cilium_release(mc: &MetalCluster, names: &Names) -> Value {
    with_spec(
        object(mc, HELM_API_VERSION, "Release", &names.cilium_release),
        json!({
            "providerConfigRef": {"kind": "ProviderConfig", "name": names.helm_provider_config},
            "forProvider": {
                "chart": {
                    "name": "cilium",
                    "repository": mc.spec.cni.chart_repository,
                    "version": mc.spec.cni.cilium_version,
                },
                "namespace": "kube-system",
                "wait": true,
                "waitTimeout": RELEASE_WAIT_TIMEOUT,
                "values": cilium_values(mc),
            },
        }),
    )
}

/// The Release also uses the control plane: CAPI deletes Machines when the
/// KubeadmControlPlane goes, and `helm uninstall` needs the workload API,
/// so the control plane may start deleting only once Cilium is gone.
pub fn cilium_control_plane_usage(mc: &MetalCluster, names: &Names) -> Value {
    usage(
        mc,
        &names.cilium_control_plane_usage,
        Ref(capi::KCP_API_VERSION, "KubeadmControlPlane", &names.cluster),
        Ref(HELM_API_VERSION, "Release", &names.cilium_release),
    )
}

pub fn cilium_usage(mc: &MetalCluster, names: &Names) -> Value {
    usage(
        mc,
        &names.cilium_usage,
        Ref(capi::CLUSTER_API_VERSION, "Cluster", &names.cluster),
        Ref(HELM_API_VERSION, "Release", &names.cilium_release),
    )
}

/// The Release uses its ProviderConfig: `helm uninstall` needs it, and a
/// foreground deletion of the XR deletes every composed object at once (a
/// lab run left the Release unable to connect, forever).
pub fn cilium_provider_config_usage(mc: &MetalCluster, names: &Names) -> Value {
    usage(
        mc,
        &names.cilium_provider_config_usage,
        Ref(
            HELM_API_VERSION,
            "ProviderConfig",
            &names.helm_provider_config,
        ),
        Ref(HELM_API_VERSION, "Release", &names.cilium_release),
    )
}
