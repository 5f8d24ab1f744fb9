//! What the kubelet is told about its node, and kubeadm's limits on it.

use std::collections::BTreeMap;

/// Metal3 renders this at provisioning time; CAPM3 matches Node to Machine
/// through the uuid label.
pub const UUID_LABEL: &str = "metal3.io/uuid={{ ds.meta_data.uuid }}";

/// kubeadm limits: one kubeletExtraArgs value and one command.
pub const MAX_ARG_VALUE: usize = 1024;
pub const MAX_COMMAND: usize = 10240;

/// The single `node-labels` kubelet argument: the Metal3 uuid label first,
/// then the spec's labels in key order, comma-joined (kubeletExtraArgs
/// names must be unique).
pub fn node_labels_arg(labels: &BTreeMap<String, String>) -> String {
    let mut out = String::from(UUID_LABEL);
    for (k, v) in labels {
        out.push(',');
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
    out
}
