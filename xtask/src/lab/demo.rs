//! `cargo xtask lab demo`: the main job on the built-in example. Applies the
//! inventory and the r730 MetalCluster, shows PHASE and HOST as they
//! change, deletes it and shows the host back in its pool, powered off.

use std::time::Duration;

use serde_json::Value;

use super::kube::condition;
use super::observe::{self, Observed};
use super::{Lab, LabError, progress};

pub const NAMESPACE: &str = "metal";

/// Follows the example's XR and host, printing each change.
fn watch(
    lab: &Lab,
    timeout: Duration,
    done: impl Fn(&Observed) -> bool,
) -> Result<Observed, LabError> {
    observe::follow(lab, (NAMESPACE, "r730", "r730"), timeout, "", &done)?;
    Ok(observe::observe(lab, NAMESPACE, "r730", "r730"))
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

/// With `ironic` (or a lab already in Ironic mode) the host is inspected,
/// cleaned and deployed by Ironic, and boots the lab's served image.
pub fn run(lab: &Lab, ironic: bool) -> Result<(), LabError> {
    let ironic = ironic || super::ironic::active(lab);
    if ironic && !super::ironic::active(lab) {
        progress("starting the lab in Ironic mode (cargo xtask lab up --ironic)");
        super::ironic::up(lab)?;
    } else if !lab.kube.ready() {
        progress("the lab is not up: starting it (cargo xtask lab up)");
        lab.up()?;
    }
    let root = crate::repo_root();
    let mut xr = example_xr()?;
    if ironic {
        progress(
            "applying the inventory for Ironic: BareMetalHost r730 (pool r730) and a decoy host, their BMCs sushy-tools' systems; Ironic inspects, cleans and deploys",
        );
        lab.kube.apply(&super::ironic::inventory()?.0)?;
        xr = super::ironic::with_lab_image(xr);
    } else {
        progress(
            "applying the inventory: BareMetalHost r730 (pool r730), its BMC Secret and HardwareData, and a decoy host",
        );
        lab.kube
            .apply_file(&root.join("examples/lab/inventory.yaml"))?;
    }
    super::procs::wait_for(
        "BareMetalHost r730 available",
        Duration::from_secs(if ironic { 240 } else { 120 }),
        || observe::observe(lab, NAMESPACE, "r730", "r730").host_state == "available",
    )?;
    progress(
        "applying MetalCluster metal/r730 (examples/metalcluster/r730.yaml, charts from the lab's mirror)",
    );
    lab.kube.apply(&[xr])?;
    // The lab's workload stand-in boots the node once the host is
    // provisioned and serves its API, so the Cluster becomes Available and
    // Cilium installs from the lab's chart mirror.
    watch(lab, Duration::from_secs(600), |o| {
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
    let end = watch(lab, Duration::from_secs(300), |o| {
        o.gone && o.host_at_rest()
    })?;
    println!(
        "host r730 is back in pool r730: {}, {} (inventory kept)",
        end.host_state,
        if end.powered_on { "on" } else { "off" }
    );
    progress(
        "the lab is still running: `cargo xtask lab status` lists its processes, `cargo xtask lab exec -- kubectl get metalclusters -A` reaches it, `cargo xtask lab down` stops it",
    );
    Ok(())
}
