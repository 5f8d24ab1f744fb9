//! Joining the Modelplane fleet: the kubeconfig copy, the InferenceClass
//! and the InferenceCluster, as provider-kubernetes Objects (a namespaced XR
//! cannot compose Modelplane's cluster-scoped XRs directly).

use serde_json::{Value, json};

use super::{OBJECT_API_VERSION, Ref, capi, k8s_object, usage};
use crate::inference::{Inference, MODELPLANE_NAMESPACE, NVIDIA_DRIVER};
use crate::names::Names;
use crate::spec::MetalCluster;

pub const MODELPLANE_API_VERSION: &str = "modelplane.ai/v1alpha1";

fn management(inf: &Inference) -> (&str, &str) {
    (&inf.provider_config.kind, &inf.provider_config.name)
}

/// The CAPI kubeconfig copied into modelplane-system, without the key
/// ever landing outside a Secret. A namespaced XR composes only in its own
/// namespace, so the copy is an Object applying an inner Object to
/// modelplane-system. The inner one only observes the Cluster (so its
/// status mirrors nothing secret) and publishes the kubeconfig as its
/// connection Secret, named as Modelplane expects. Copying with
/// `patchesFrom` instead writes the key into the Object's spec
/// (provider-kubernetes issue 223) and, without `--sanitize-secrets`, its
/// status.
pub fn kubeconfig_copy(mc: &MetalCluster, names: &Names, inf: &Inference) -> Value {
    let (kind, name) = management(inf);
    let inner = json!({
        "apiVersion": OBJECT_API_VERSION,
        "kind": "Object",
        "metadata": {
            "name": inf.secret_name,
            "namespace": MODELPLANE_NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "metalplane", "metal.kube.farm/cluster": format!("{}.{}", mc.name, mc.namespace)},
        },
        "spec": {
            "managementPolicies": ["Observe"],
            "providerConfigRef": {"kind": kind, "name": name},
            "forProvider": {"manifest": {
                "apiVersion": capi::CLUSTER_API_VERSION,
                "kind": "Cluster",
                "metadata": {"name": names.cluster, "namespace": mc.namespace},
            }},
            "connectionDetails": [{
                "apiVersion": "v1",
                "kind": "Secret",
                "name": names.kubeconfig_secret,
                "namespace": mc.namespace,
                "fieldPath": "data.value",
                "toConnectionSecretKey": KUBECONFIG_KEY,
            }],
            "writeConnectionSecretToRef": {"name": inf.secret_name},
        },
    });
    k8s_object(mc, &names.kubeconfig_copy, inner, kind, name)
}

/// Key of the kubeconfig in CAPI's Secret and in the copy.
pub const KUBECONFIG_KEY: &str = "value";

pub fn class(mc: &MetalCluster, names: &Names, inf: &Inference) -> Value {
    let manifest = json!({
        "apiVersion": MODELPLANE_API_VERSION,
        "kind": "InferenceClass",
        "metadata": {"name": inf.class_name},
        "spec": {
            "description": description(mc, inf),
            "devices": devices(mc, inf),
        },
    });
    let (kind, name) = management(inf);
    k8s_object(mc, &names.inference_class, manifest, kind, name)
}

pub fn cluster(mc: &MetalCluster, names: &Names, inf: &Inference) -> Value {
    let mut existing = json!({"secretRef": {"name": inf.secret_name, "key": KUBECONFIG_KEY}});
    if let Some(sc) = &inf.cache_storage_class {
        existing["cache"] = json!({"storageClassName": sc});
    }
    let manifest = json!({
        "apiVersion": MODELPLANE_API_VERSION,
        "kind": "InferenceCluster",
        "metadata": {"name": inf.cluster_name},
        "spec": {
            "cluster": {"source": "Existing", "existing": existing},
            "nodePools": [{"name": inf.node_pool, "className": inf.class_name, "nodeCount": 1}],
        },
    });
    let (kind, name) = management(inf);
    let mut obj = k8s_object(mc, &names.inference_cluster, manifest, kind, name);
    // The Object is Ready when the InferenceCluster is.
    obj["spec"]["readiness"] = json!({"policy": "DeriveFromObject"});
    obj
}

/// Teardown order: the InferenceCluster goes first (Modelplane drains the
/// cluster while it still exists), then the kubeconfig copy and the class.
pub fn usages(mc: &MetalCluster, names: &Names) -> [(&'static str, Value); 4] {
    let by = || Ref(OBJECT_API_VERSION, "Object", &names.inference_cluster);
    [
        (
            "inference-needs-cluster",
            usage(
                mc,
                &names.inference_cluster_usage,
                Ref(capi::CLUSTER_API_VERSION, "Cluster", &names.cluster),
                by(),
            ),
        ),
        // Modelplane drains through the workload API: no Machine may start
        // deleting before the InferenceCluster is gone.
        (
            "inference-needs-controlplane",
            usage(
                mc,
                &names.inference_control_plane_usage,
                Ref(capi::KCP_API_VERSION, "KubeadmControlPlane", &names.cluster),
                by(),
            ),
        ),
        (
            "inference-needs-kubeconfig",
            usage(
                mc,
                &names.inference_secret_usage,
                Ref(OBJECT_API_VERSION, "Object", &names.kubeconfig_copy),
                by(),
            ),
        ),
        (
            "inference-needs-class",
            usage(
                mc,
                &names.inference_class_usage,
                Ref(OBJECT_API_VERSION, "Object", &names.inference_class),
                by(),
            ),
        ),
    ]
}

/// The InferenceClass devices: the spec's, or one NVIDIA device derived
/// from spec.gpu.
pub fn devices(mc: &MetalCluster, inf: &Inference) -> Vec<Value> {
    if !inf.devices.is_empty() {
        return inf.devices.clone();
    }
    let gpu = mc.spec.gpu.as_ref();
    let mut d = json!({
        "name": "gpu",
        "driver": NVIDIA_DRIVER,
        "claim": "DRA",
        "deviceClassName": NVIDIA_DRIVER,
        "count": gpu.and_then(|g| g.count).unwrap_or(1),
    });
    if let Some(model) = gpu.and_then(|g| g.model.as_ref()) {
        d["attributes"] = json!({"productName": {"string": model}});
    }
    if let Some(mem) = gpu.and_then(|g| g.memory.as_ref()) {
        d["capacity"] = json!({"memory": {"value": mem}});
    }
    vec![d]
}

pub fn description(mc: &MetalCluster, inf: &Inference) -> String {
    if !inf.description.is_empty() {
        return inf.description.clone();
    }
    let gpu = mc.spec.gpu.as_ref();
    let count = gpu.and_then(|g| g.count).unwrap_or(1);
    let model = gpu
        .and_then(|g| g.model.clone())
        .unwrap_or_else(|| "NVIDIA GPU".into());
    let mem = gpu
        .and_then(|g| g.memory.as_ref())
        .map(|m| format!(" ({m} each)"))
        .unwrap_or_default();
    format!(
        "{count}x {model}{mem} on bare metal {}/{}",
        mc.namespace, mc.name
    )
}
