//! What a machine is built with beyond its network: the kubelet's node
//! labels and the GPU driver section, read the same way for the control
//! plane (`spec.kubernetes.nodeLabels`, `spec.gpu`) and each worker pool.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api;
use crate::decode::Problems;
use crate::validate;

#[derive(Clone, Debug, PartialEq)]
pub struct Gpu {
    pub setup: api::DriverSetup,
    /// None with `Preinstalled` only.
    pub driver_installer_url: Option<String>,
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
pub fn parse_node_labels(
    p: &mut Problems,
    labels: &BTreeMap<String, String>,
    path: &str,
) -> BTreeMap<String, String> {
    for (k, v) in labels {
        let item = format!("{path}[{}]", Value::String(k.clone()));
        if let Err(reason) = validate::node_label_key(k) {
            p.fail(
                &item,
                Some(&Value::String(k.clone())),
                format!("key {reason}"),
            );
        }
        if let Err(reason) = validate::label_value(v) {
            p.fail(
                &item,
                Some(&Value::String(v.clone())),
                format!("value {reason}"),
            );
        }
    }
    let arg = crate::kubelet::node_labels_arg(labels);
    if arg.len() > crate::kubelet::MAX_ARG_VALUE {
        p.fail(
            path,
            None,
            format!(
                "join into a node-labels kubelet argument of {} characters; kubeadm accepts at most {}",
                arg.len(),
                crate::kubelet::MAX_ARG_VALUE
            ),
        );
    }
    labels.clone()
}

/// A GPU section at `base` (`spec.gpu` or a worker pool's): Some(None)
/// when absent, None when invalid (the problems recorded).
pub fn parse_gpu(p: &mut Problems, gpu: Option<&api::GpuSpec>, base: &str) -> Option<Option<Gpu>> {
    let Some(g) = gpu else {
        return Some(None);
    };
    let at = |f: &str| format!("{base}.{f}");
    let preinstalled = g.driver_setup == api::DriverSetup::Preinstalled;
    let url = match (&g.driver_installer_url, preinstalled) {
        (None, false) => {
            p.fail(
                &at("driverInstallerURL"),
                None,
                "is required unless driverSetup is Preinstalled",
            );
            None
        }
        (Some(u), true) => {
            p.fail(
                &at("driverInstallerURL"),
                Some(&Value::String(u.clone())),
                "is not used with driverSetup Preinstalled (the image carries the driver): remove it",
            );
            None
        }
        (None, true) => Some(None),
        (Some(u), false) => p
            .non_empty(&at("driverInstallerURL"), u)
            .and_then(|u| p.valid(&at("driverInstallerURL"), u, validate::http_url))
            .map(Some),
    };
    let checksum = g.driver_installer_checksum.as_ref().and_then(|c| {
        if preinstalled {
            p.fail(
                &at("driverInstallerChecksum"),
                Some(&Value::String(c.clone())),
                "is not used with driverSetup Preinstalled: remove it",
            );
            return None;
        }
        let res = validate::sha256_hex(c).map(|_| c.to_ascii_lowercase());
        p.check(&at("driverInstallerChecksum"), c, res)
    });
    let model = g.model.as_ref().and_then(|m| {
        let ok = !m.trim().is_empty() && m.len() <= 253 && !m.contains(['\n', '\r']);
        let res = if ok {
            validate::jinja_free(m).map(|_| m.clone())
        } else {
            Err("must be a product name of at most 253 characters".to_string())
        };
        p.check(&at("model"), m, res)
    });
    let count = match g.count {
        Some(c) if (1..=64).contains(&c) => Some(c as u32),
        Some(c) => {
            p.fail(
                &at("count"),
                Some(&Value::from(c)),
                "must be between 1 and 64",
            );
            None
        }
        None => None,
    };
    let memory = g.memory.as_ref().and_then(|m| {
        let res = validate::quantity(m).map(|_| m.clone());
        p.check(&at("memory"), m, res)
    });
    url.map(|driver_installer_url| {
        Some(Gpu {
            setup: g.driver_setup,
            driver_installer_url,
            driver_installer_checksum: checksum,
            model,
            count,
            memory,
        })
    })
}
