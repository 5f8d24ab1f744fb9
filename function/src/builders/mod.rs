//! One builder per composed family. Each is a pure function from the
//! validated MetalCluster to the JSON manifest Crossplane applies.

pub mod bootstrap;
pub mod capi;
pub mod cni;
pub mod ipam;
pub mod metal3;

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
