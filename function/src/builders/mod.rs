//! One builder per composed family. Each is a pure function from the
//! validated MetalCluster to the JSON manifest Crossplane applies.

pub mod bootstrap;
pub mod capi;
pub mod cni;
pub mod driver;
pub mod fleet;
pub mod health;
pub mod ipam;
pub mod lb;
pub mod metal3;
pub mod vip;
pub mod workers;

use serde_json::{Value, json};

use crate::spec::MetalCluster;

/// The label CAPM3's host selector matches to pick a BareMetalHost.
pub const POOL_LABEL: &str = "metal.kube.farm/pool";

/// apiVersion, kind and metadata of a namespaced object beside the XR.
pub(crate) fn object(mc: &MetalCluster, api_version: &str, kind: &str, name: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": mc.namespace},
    })
}

/// Adds `spec` to an object built by [`object`].
pub(crate) fn with_spec(mut obj: Value, spec: Value) -> Value {
    if let Value::Object(m) = &mut obj {
        m.insert("spec".into(), spec);
    }
    obj
}

/// A template named after its content (`<base>-<hash of its spec>`, see
/// `names::content_name`): returns its name, set on the object too.
pub(crate) fn name_by_content(obj: &mut Value, base: &str) -> String {
    let name = crate::names::content_name(base, &obj["spec"]);
    obj["metadata"]["name"] = Value::String(name.clone());
    name
}

/// The composition resource name of a content-named template: its set's
/// prefix, its kind and the name's hash (`<prefix>.<hash>`), so that the
/// old and the new template of a rollout are two resources.
pub(crate) fn template_resource(prefix: &str, name: &str) -> String {
    let hash = &name[name.len().saturating_sub(crate::names::CONTENT_HASH_LEN)..];
    format!("{prefix}.{hash}")
}

pub const USAGE_API_VERSION: &str = "protection.crossplane.io/v1beta1";
pub const OBJECT_API_VERSION: &str = "kubernetes.m.crossplane.io/v1alpha1";

/// A namespaced reference (apiVersion, kind, name) for a Usage.
pub(crate) struct Ref<'a>(pub &'a str, pub &'a str, pub &'a str);

/// A Usage: `by` uses `of`, so `of` is deleted only after `by` is gone;
/// replayDeletion retries the blocked deletion as soon as it may proceed.
pub(crate) fn usage(mc: &MetalCluster, name: &str, of: Ref<'_>, by: Ref<'_>) -> Value {
    with_spec(
        object(mc, USAGE_API_VERSION, "Usage", name),
        json!({
            "of": {"apiVersion": of.0, "kind": of.1, "resourceRef": {"name": of.2}},
            "by": {"apiVersion": by.0, "kind": by.1, "resourceRef": {"name": by.2}},
            "replayDeletion": true,
        }),
    )
}

/// Protects the claimed BareMetalHost (inventory) from deletion while the
/// Cluster exists. CAPM3 makes its Metal3Machine the host's controller
/// owner, so a foreground deletion would otherwise let the garbage
/// collector delete the host (and with it its HardwareData and BMC Secret)
/// before CAPM3 has deprovisioned it and removed that owner reference.
/// Crossplane's webhook refuses the collector's DELETE; once the Cluster is
/// gone CAPM3 has released the host and the Usage goes. No replayDeletion:
/// a deletion the collector attempted must never be replayed on inventory.
pub(crate) fn host_usage(mc: &MetalCluster, name: &str, host: &str, cluster: &str) -> Value {
    with_spec(
        object(mc, USAGE_API_VERSION, "Usage", name),
        json!({
            "of": {"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost", "resourceRef": {"name": host}},
            "by": {"apiVersion": capi::CLUSTER_API_VERSION, "kind": "Cluster", "resourceRef": {"name": cluster}},
        }),
    )
}

/// A provider-kubernetes Object applying `manifest` through a ProviderConfig.
pub(crate) fn k8s_object(
    mc: &MetalCluster,
    name: &str,
    manifest: Value,
    pc_kind: &str,
    pc_name: &str,
) -> Value {
    with_spec(
        object(mc, OBJECT_API_VERSION, "Object", name),
        json!({
            "forProvider": {"manifest": manifest},
            "providerConfigRef": {"kind": pc_kind, "name": pc_name},
        }),
    )
}
