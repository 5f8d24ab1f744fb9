//! `cargo xtask lab demo`: the main job on the built-in example. Applies the
//! inventory and the r730 MetalCluster, shows PHASE and HOST as they
//! change, deletes it and shows the host back in its pool, powered off.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::kube::{condition, str_at};
use super::{Lab, LabError, progress};

pub const NAMESPACE: &str = "metal";

/// What one line of the live view shows about the XR and its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub phase: String,
    pub host: String,
    pub host_state: String,
    pub powered_on: bool,
    pub consumer: String,
}

pub fn observe(lab: &Lab, xr: &str, host: &str) -> Observed {
    let x = lab
        .kube
        .get("metalcluster", xr, Some(NAMESPACE))
        .unwrap_or(Value::Null);
    let h = lab
        .kube
        .get("baremetalhost", host, Some(NAMESPACE))
        .unwrap_or(Value::Null);
    Observed {
        phase: if x.is_null() {
            "(deleted)".into()
        } else {
            str_at(&x, "/status/phase").to_string()
        },
        host: x
            .pointer("/status/host")
            .map(|v| v.to_string())
            .unwrap_or_default(),
        host_state: str_at(&h, "/status/provisioning/state").to_string(),
        powered_on: h
            .pointer("/status/poweredOn")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        consumer: str_at(&h, "/spec/consumerRef/name").to_string(),
    }
}

/// Polls until `done` holds, printing every change with its time.
pub fn watch(
    lab: &Lab,
    xr: &str,
    host: &str,
    timeout: Duration,
    done: impl Fn(&Observed) -> bool,
) -> Result<Observed, LabError> {
    let start = Instant::now();
    let mut last: Option<Observed> = None;
    loop {
        let o = observe(lab, xr, host);
        if last.as_ref() != Some(&o) {
            println!(
                "{:>6.1}s  PHASE={:<16} HOST={} | bmh/{host}: state={} poweredOn={} consumer={}",
                start.elapsed().as_secs_f64(),
                if o.phase.is_empty() { "-" } else { &o.phase },
                if o.host.is_empty() { "-" } else { &o.host },
                o.host_state,
                o.powered_on,
                if o.consumer.is_empty() {
                    "-"
                } else {
                    &o.consumer
                },
            );
            last = Some(o.clone());
        }
        if done(&o) {
            return Ok(o);
        }
        if start.elapsed() > timeout {
            return Err(LabError::new(format!(
                "timed out after {} s; last seen {o:?}",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The built-in example MetalCluster, pointed at the lab's chart mirror
/// (the lab reaches nothing outside the machine, as an air-gapped site).
pub fn example_xr() -> Result<Value, LabError> {
    let path = crate::repo_root().join("examples/metalcluster/r730.yaml");
    let mut xr = super::kube::load_yaml(&path)?
        .into_iter()
        .next()
        .ok_or_else(|| LabError::new(format!("{} is empty", path.display())))?;
    xr["spec"]["cni"]["chartRepository"] = serde_json::json!(super::charts::repository());
    Ok(xr)
}

pub fn run(lab: &Lab) -> Result<(), LabError> {
    if !lab.kube.ready() {
        progress("the lab is not up: starting it (cargo xtask lab up)");
        lab.up()?;
    }
    let root = crate::repo_root();
    progress(
        "applying the inventory: BareMetalHost r730 (pool r730), its BMC Secret and HardwareData, and a decoy host",
    );
    lab.kube
        .apply_file(&root.join("examples/lab/inventory.yaml"))?;
    super::procs::wait_for(
        "BareMetalHost r730 available",
        Duration::from_secs(120),
        || observe(lab, "r730", "r730").host_state == "available",
    )?;
    progress(
        "applying MetalCluster metal/r730 (examples/metalcluster/r730.yaml, charts from the lab's mirror)",
    );
    lab.kube.apply(&[example_xr()?])?;
    // The lab's workload stand-in boots the node once the host is
    // provisioned and serves its API, so the Cluster becomes Available and
    // Cilium installs from the lab's chart mirror.
    watch(lab, "r730", "r730", Duration::from_secs(600), |o| {
        o.phase == "Ready" && o.host_state == "provisioned"
    })?;
    let xr = lab.kube.get("metalcluster", "r730", Some(NAMESPACE));
    if let Some(x) = &xr {
        println!(
            "MetalCluster r730: Synced={} Ready={}",
            condition(x, "Synced").unwrap_or_default(),
            condition(x, "Ready").unwrap_or_default()
        );
    }
    progress("deleting MetalCluster metal/r730");
    lab.kube.run(&[
        "delete",
        "metalcluster",
        "r730",
        "-n",
        NAMESPACE,
        "--wait=false",
    ])?;
    let end = watch(lab, "r730", "r730", Duration::from_secs(300), |o| {
        o.phase == "(deleted)"
            && o.host_state == "available"
            && !o.powered_on
            && o.consumer.is_empty()
    })?;
    println!(
        "host r730 is back in pool r730: state={} poweredOn={} (inventory kept)",
        end.host_state, end.powered_on
    );
    Ok(())
}
