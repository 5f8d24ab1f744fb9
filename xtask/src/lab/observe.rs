//! What a person, a lab scenario and `lab perf` watch of a MetalCluster
//! and its hosts, read one way for all three: the XR's phase and host as
//! `kubectl get` shows them, a host's state, what is left of a deleted
//! cluster, and whether the inventory is still the one applied.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::kube::str_at;
use super::{Lab, LabError};

/// One moment of a MetalCluster and one of its hosts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    /// Whether the XR is absent (not applied yet, or deleted).
    pub gone: bool,
    /// `status.phase` (empty until the function set one).
    pub phase: String,
    /// `status.nodes`, ready/desired.
    pub nodes: String,
    /// The host the XR reports (`status.host.name`) and its state there.
    pub xr_host: String,
    pub xr_host_state: String,
    pub xr_host_on: bool,
    /// The BareMetalHost itself.
    pub host_state: String,
    pub powered_on: bool,
    pub consumer: String,
}

impl Observed {
    /// Whether the XR reports `host` provisioned.
    pub fn reports_provisioned(&self, host: &str) -> bool {
        self.xr_host == host && self.xr_host_state == "provisioned"
    }

    /// The host back in its pool: available, off, unclaimed.
    pub fn host_at_rest(&self) -> bool {
        self.host_state == "available" && !self.powered_on && self.consumer.is_empty()
    }

    /// The XR's host as a person reads it: `r730 provisioned, on`.
    pub fn xr_host_summary(&self) -> String {
        if self.xr_host.is_empty() {
            return "-".into();
        }
        let power = if self.xr_host_on { "on" } else { "off" };
        format!("{} {}, {power}", self.xr_host, self.xr_host_state)
    }

    /// One line of the live view.
    pub fn line(&self, host: &str, elapsed: Duration) -> String {
        let dash = |s: &str| {
            if s.is_empty() {
                "-".to_string()
            } else {
                s.to_string()
            }
        };
        format!(
            "{:>6.1}s  PHASE={:<14} NODES={:<5} HOST={:<28} | bmh/{host}: {}, {}, consumer {}",
            elapsed.as_secs_f64(),
            if self.gone {
                "(deleted)".to_string()
            } else {
                dash(&self.phase)
            },
            dash(&self.nodes),
            self.xr_host_summary(),
            dash(&self.host_state),
            if self.powered_on { "on" } else { "off" },
            dash(&self.consumer),
        )
    }
}

/// Reads MetalCluster `ns/xr` and BareMetalHost `ns/host` once.
pub fn observe(lab: &Lab, ns: &str, xr: &str, host: &str) -> Observed {
    let x = lab.kube.get("metalcluster", xr, Some(ns));
    let h = lab
        .kube
        .get("baremetalhost", host, Some(ns))
        .unwrap_or(Value::Null);
    let null = Value::Null;
    let xv = x.as_ref().unwrap_or(&null);
    Observed {
        gone: x.is_none(),
        phase: str_at(xv, "/status/phase").to_string(),
        nodes: str_at(xv, "/status/nodes").to_string(),
        xr_host: str_at(xv, "/status/host/name").to_string(),
        xr_host_state: str_at(xv, "/status/host/provisioningState").to_string(),
        xr_host_on: xv
            .pointer("/status/host/poweredOn")
            .and_then(Value::as_bool)
            == Some(true),
        host_state: str_at(&h, "/status/provisioning/state").to_string(),
        powered_on: h.pointer("/status/poweredOn").and_then(Value::as_bool) == Some(true),
        consumer: str_at(&h, "/spec/consumerRef/name").to_string(),
    }
}

/// Polls every `every` until `done` holds, printing each change with its
/// time (with `indent` before it); returns each phase with the time it was
/// first seen.
pub fn follow(
    lab: &Lab,
    (ns, xr, host): (&str, &str, &str),
    timeout: Duration,
    indent: &str,
    done: impl Fn(&Observed) -> bool,
) -> Result<Vec<(String, f64)>, LabError> {
    let t = Instant::now();
    let mut phases: Vec<(String, f64)> = Vec::new();
    let mut last: Option<Observed> = None;
    loop {
        let o = observe(lab, ns, xr, host);
        if last.as_ref() != Some(&o) {
            println!("{indent}{}", o.line(host, t.elapsed()));
            if !o.phase.is_empty() && phases.last().map(|p| &p.0) != Some(&o.phase) {
                phases.push((o.phase.clone(), t.elapsed().as_secs_f64()));
            }
            last = Some(o.clone());
        }
        if done(&o) {
            return Ok(phases);
        }
        if t.elapsed() > timeout {
            return Err(LabError::new(format!(
                "timed out after {} s; last seen {o:?}",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The phase of MetalCluster `ns/xr` (empty when none yet or gone).
pub fn phase(lab: &Lab, ns: &str, xr: &str) -> String {
    lab.kube
        .get("metalcluster", xr, Some(ns))
        .map(|x| str_at(&x, "/status/phase").to_string())
        .unwrap_or_default()
}

/// How many hosts of `pool` in `ns` are in provisioning state `state`.
pub fn hosts_in_state(lab: &Lab, ns: &str, pool: &str, state: &str) -> usize {
    lab.kube
        .list("baremetalhost", Some(ns))
        .iter()
        .filter(|h| {
            str_at(h, "/metadata/labels/metal.kube.farm~1pool") == pool
                && str_at(h, "/status/provisioning/state") == state
        })
        .count()
}

/// Every kind a MetalCluster composes or Cluster API creates for it in
/// its namespace; none may be left once it is deleted.
pub const CLUSTER_KINDS: &str = "clusters.cluster.x-k8s.io,kubeadmcontrolplanes.controlplane.cluster.x-k8s.io,\
machines.cluster.x-k8s.io,machinesets.cluster.x-k8s.io,machinedeployments.cluster.x-k8s.io,\
kubeadmconfigs.bootstrap.cluster.x-k8s.io,kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io,metal3clusters.infrastructure.cluster.x-k8s.io,\
metal3machines.infrastructure.cluster.x-k8s.io,metal3machinetemplates.infrastructure.cluster.x-k8s.io,\
metal3datatemplates.infrastructure.cluster.x-k8s.io,metal3datas.infrastructure.cluster.x-k8s.io,\
metal3dataclaims.infrastructure.cluster.x-k8s.io,ippools.ipam.metal3.io,ipclaims.ipam.metal3.io,\
ipaddresses.ipam.metal3.io,usages.protection.crossplane.io,releases.helm.m.crossplane.io,\
providerconfigs.helm.m.crossplane.io,objects.kubernetes.m.crossplane.io,\
providerconfigs.kubernetes.m.crossplane.io";

/// What is left in `ns` of MetalCluster `xr`'s cluster (its objects are
/// named `<xr>-...`), and its Cluster's Secrets, as kind/name.
pub fn leftovers(lab: &Lab, ns: &str, xr: &str) -> Result<Vec<String>, LabError> {
    let out = lab
        .kube
        .run(&["get", CLUSTER_KINDS, "-n", ns, "-o", "name"])?;
    let prefix = format!("{xr}-");
    let mut left: Vec<String> = out
        .lines()
        .filter(|l| l.rsplit('/').next().is_some_and(|n| n.starts_with(&prefix)))
        .map(str::to_string)
        .collect();
    let selector = format!("cluster.x-k8s.io/cluster-name={xr}-cluster");
    let secrets = lab
        .kube
        .run(&["get", "secrets", "-n", ns, "-l", &selector, "-o", "name"])?;
    left.extend(secrets.lines().map(str::to_string));
    Ok(left)
}

/// The inventory objects of some hosts (BareMetalHost, HardwareData, BMC
/// Secret) with the UIDs they had when recorded: MetalPlane never deletes
/// or replaces them.
#[derive(Debug, Clone)]
pub struct Inventory {
    ns: String,
    objects: Vec<(&'static str, String, String)>,
}

impl Inventory {
    /// Records the inventory of `hosts` in `ns` as it is now.
    pub fn record(lab: &Lab, ns: &str, hosts: &[&str]) -> Inventory {
        let mut objects = Vec::new();
        for h in hosts {
            for (kind, name) in [
                ("baremetalhost", h.to_string()),
                ("hardwaredata", h.to_string()),
                ("secret", format!("{h}-bmc")),
            ] {
                // A host registered without HardwareData has none to keep.
                if let Some(v) = lab.kube.get(kind, &name, Some(ns)) {
                    let uid = str_at(&v, "/metadata/uid").to_string();
                    objects.push((kind, name, uid));
                }
            }
        }
        Inventory {
            ns: ns.to_string(),
            objects,
        }
    }

    /// Each recorded object now gone, replaced or being deleted.
    pub fn changed(&self, lab: &Lab) -> Vec<String> {
        self.objects
            .iter()
            .filter(|(kind, name, uid)| {
                !lab.kube.get(kind, name, Some(&self.ns)).is_some_and(|v| {
                    str_at(&v, "/metadata/uid") == uid
                        && v.pointer("/metadata/deletionTimestamp").is_none()
                })
            })
            .map(|(kind, name, _)| format!("{kind} {name}"))
            .collect()
    }
}
