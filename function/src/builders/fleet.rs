//! Joining the Modelplane fleet: the kubeconfig copy, the InferenceClass
//! and the InferenceCluster, as provider-kubernetes Objects (a namespaced XR
//! cannot compose Modelplane's cluster-scoped XRs directly).

use serde_json::{Value, json};

use super::{OBJECT_API_VERSION, Ref, capi, k8s_object, usage};
use crate::inference::{Inference, MODELPLANE_NAMESPACE, NVIDIA_DRIVER};
use crate::names::Names;
use crate::spec::{Gpu, MetalCluster, Worker};

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

/// One Modelplane node pool: the single node's, or one per worker pool
/// with a GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct NodePool<'a> {
    pub name: String,
    pub class_name: String,
    pub gpu: Option<&'a Gpu>,
    pub count: u32,
    /// Composition resource names of its InferenceClass Object and Usage,
    /// and the Object's name.
    pub resource: String,
    pub usage_resource: String,
    pub object: String,
    pub usage_object: String,
}

/// The Modelplane node pools: with GPU worker pools one per pool (its own
/// InferenceClass from its GPUs), otherwise the control plane's one.
pub fn node_pools<'a>(mc: &'a MetalCluster, names: &Names, inf: &Inference) -> Vec<NodePool<'a>> {
    let gpu_pools: Vec<&Worker> = mc.spec.workers.iter().filter(|w| w.gpu.is_some()).collect();
    if gpu_pools.is_empty() {
        return vec![NodePool {
            name: inf.node_pool.clone(),
            class_name: inf.class_name.clone(),
            gpu: mc.spec.gpu.as_ref(),
            count: u32::from(mc.spec.control_plane.replicas),
            resource: "inference-class".into(),
            usage_resource: "inference-needs-class".into(),
            object: names.inference_class.clone(),
            usage_object: names.inference_class_usage.clone(),
        }];
    }
    gpu_pools
        .into_iter()
        .map(|w| NodePool {
            name: w.name.clone(),
            class_name: format!("{}-{}-{}", mc.namespace, mc.name, w.name),
            gpu: w.gpu.as_ref(),
            count: w.replicas,
            resource: format!("inference-class.{}", w.name),
            usage_resource: format!("inference-needs-class.{}", w.name),
            object: format!("{}-{}", names.inference_class, w.name),
            usage_object: format!("{}-{}", names.inference_class_usage, w.name),
        })
        .collect()
}

pub fn class(mc: &MetalCluster, inf: &Inference, pool: &NodePool<'_>) -> Value {
    let manifest = json!({
        "apiVersion": MODELPLANE_API_VERSION,
        "kind": "InferenceClass",
        "metadata": {"name": pool.class_name},
        "spec": {
            "description": description(mc, pool.gpu, inf),
            "devices": devices(pool.gpu, inf),
        },
    });
    let (kind, name) = management(inf);
    k8s_object(mc, &pool.object, manifest, kind, name)
}

pub fn cluster(mc: &MetalCluster, names: &Names, inf: &Inference, pools: &[NodePool<'_>]) -> Value {
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
            "nodePools": pools
                .iter()
                .map(|p| json!({"name": p.name, "className": p.class_name, "nodeCount": p.count}))
                .collect::<Vec<_>>(),
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
pub fn usages(mc: &MetalCluster, names: &Names, pools: &[NodePool<'_>]) -> Vec<(String, Value)> {
    let by = || Ref(OBJECT_API_VERSION, "Object", &names.inference_cluster);
    let mut out: Vec<(String, Value)> = [
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
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    for p in pools {
        out.push((
            p.usage_resource.clone(),
            usage(
                mc,
                &p.usage_object,
                Ref(OBJECT_API_VERSION, "Object", &p.object),
                by(),
            ),
        ));
    }
    // Modelplane drains the workers too: their pools stay until it is done.
    for w in &mc.spec.workers {
        let md = names.pool(&mc.name, &w.name).machines;
        out.push((
            format!("inference-needs-{}", super::workers::resource_name(w)),
            usage(
                mc,
                &format!("{}-inference-needs-{}", mc.name, w.name),
                Ref(capi::CLUSTER_API_VERSION, "MachineDeployment", &md),
                by(),
            ),
        ));
    }
    out
}

/// The InferenceClass devices: the spec's, or one NVIDIA device derived
/// from the pool's GPU section.
pub fn devices(gpu: Option<&Gpu>, inf: &Inference) -> Vec<Value> {
    if !inf.devices.is_empty() {
        return inf.devices.clone();
    }
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

pub fn description(mc: &MetalCluster, gpu: Option<&Gpu>, inf: &Inference) -> String {
    if !inf.description.is_empty() {
        return inf.description.clone();
    }
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
