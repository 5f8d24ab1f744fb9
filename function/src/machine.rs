//! What a machine is built with beyond its network: the kubelet's node
//! labels and the GPU driver section, read the same way for the control
//! plane (`spec.kubernetes.nodeLabels`, `spec.gpu`) and each worker pool.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::reader::Reader;
use crate::validate;

#[derive(Clone, Debug, PartialEq)]
pub struct Gpu {
    pub driver_installer_url: String,
    pub driver_installer_checksum: Option<String>,
    /// Product name as the NVIDIA DRA driver reports it, e.g. "Tesla V100-PCIE-16GB".
    pub model: Option<String>,
    /// GPUs in the host.
    pub count: Option<u32>,
    /// Usable memory per GPU, a Kubernetes quantity (e.g. 16Gi).
    pub memory: Option<String>,
}

/// Node labels at `path`: keys the kubelet may set, label values, and a
/// node-labels argument kubeadm accepts.
pub fn parse_node_labels(r: &mut Reader, xr: &Value, path: &str) -> BTreeMap<String, String> {
    let node_labels = r.opt_str_map(xr, path);
    for (k, v) in &node_labels {
        let item = format!("{path}[{}]", Value::String(k.clone()));
        if let Err(reason) = validate::node_label_key(k) {
            r.fail(
                &item,
                Some(&Value::String(k.clone())),
                format!("key {reason}"),
            );
        }
        if let Err(reason) = validate::label_value(v) {
            r.fail(
                &item,
                Some(&Value::String(v.clone())),
                format!("value {reason}"),
            );
        }
    }
    let arg = crate::kubelet::node_labels_arg(&node_labels);
    if arg.len() > crate::kubelet::MAX_ARG_VALUE {
        r.fail(
            path,
            None,
            format!(
                "join into a node-labels kubelet argument of {} characters; kubeadm accepts at most {}",
                arg.len(),
                crate::kubelet::MAX_ARG_VALUE
            ),
        );
    }
    node_labels
}

/// A GPU section at `base` (`spec.gpu` or a worker pool's).
pub fn parse_gpu_at(r: &mut Reader, xr: &Value, base: &str) -> Option<Option<Gpu>> {
    r.lookup(xr, base)?;
    let at = |f: &str| format!("{base}.{f}");
    let url = r.req_str(xr, &at("driverInstallerURL")).and_then(|u| {
        let res = validate::http_url(&u);
        r.check(&at("driverInstallerURL"), &u, res.map(|_| u.clone()))
    });
    let checksum = r.opt_str(xr, &at("driverInstallerChecksum")).and_then(|c| {
        let res = validate::sha256_hex(&c);
        r.check(
            &at("driverInstallerChecksum"),
            &c,
            res.map(|_| c.to_ascii_lowercase()),
        )
    });
    let model = r.opt_str(xr, &at("model")).and_then(|m| {
        let ok = !m.trim().is_empty() && m.len() <= 253 && !m.contains(['\n', '\r']);
        let res = if ok {
            Ok(m.clone())
        } else {
            Err("must be a product name of at most 253 characters".to_string())
        };
        r.check(&at("model"), &m, res)
    });
    let count = match r.opt_int(xr, &at("count")) {
        Some(c) if (1..=64).contains(&c) => Some(c as u32),
        Some(c) => {
            r.fail(
                &at("count"),
                Some(&Value::from(c)),
                "must be between 1 and 64",
            );
            None
        }
        None => None,
    };
    let memory = r.opt_str(xr, &at("memory")).and_then(|m| {
        let res = validate::quantity(&m).map(|_| m.clone());
        r.check(&at("memory"), &m, res)
    });
    Some(url.map(|driver_installer_url| Gpu {
        driver_installer_url,
        driver_installer_checksum: checksum,
        model,
        count,
        memory,
    }))
}
