//! Cilium on the workload cluster through provider-helm, and the Usage that
//! makes Crossplane uninstall it before the Cluster goes away.

use serde_json::{Value, json};

use super::{capi, object, with_spec};
use crate::names::Names;
use crate::spec::MetalCluster;

pub const HELM_API_VERSION: &str = "helm.m.crossplane.io/v1beta1";
pub const USAGE_API_VERSION: &str = "protection.crossplane.io/v1beta1";
pub const CILIUM_REPOSITORY: &str = "https://helm.cilium.io";

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
pub fn cilium_values() -> Value {
    json!({
        "operator": {"replicas": 1},
        "ipam": {"mode": "kubernetes"},
        "l2announcements": {"enabled": true},
        // L2 announcement leases renew through the API server; the default
        // client rate limit starves them.
        "k8sClientRateLimit": {"qps": 50, "burst": 100},
    })
}

pub fn cilium_release(mc: &MetalCluster, names: &Names) -> Value {
    with_spec(
        object(mc, HELM_API_VERSION, "Release", &names.cilium_release),
        json!({
            "providerConfigRef": {"kind": "ProviderConfig", "name": names.helm_provider_config},
            "forProvider": {
                "chart": {
                    "name": "cilium",
                    "repository": CILIUM_REPOSITORY,
                    "version": mc.spec.cni.cilium_version,
                },
                "namespace": "kube-system",
                "values": cilium_values(),
            },
        }),
    )
}

pub fn cilium_usage(mc: &MetalCluster, names: &Names) -> Value {
    with_spec(
        object(mc, USAGE_API_VERSION, "Usage", &names.cilium_usage),
        json!({
            "of": {
                "apiVersion": capi::CLUSTER_API_VERSION,
                "kind": "Cluster",
                "resourceRef": {"name": names.cluster},
            },
            "by": {
                "apiVersion": HELM_API_VERSION,
                "kind": "Release",
                "resourceRef": {"name": names.cilium_release},
            },
            // Retry the Cluster's deletion as soon as the Release is gone.
            "replayDeletion": true,
        }),
    )
}
