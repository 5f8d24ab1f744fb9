//! Scenario `inventory-any-namespace`: an inventory and its MetalCluster in
//! a namespace of the user's choosing (not the lab's `metal`) provision,
//! reach Ready, have their wedged node rebooted (remediation of a single
//! node) and give the host back, as they do in `metal`.

use super::*;

/// Where the user keeps this inventory.
const LAB_NS: &str = "lab";
const R630: &str = "r630";

/// The built-in example moved to namespace `lab`, on host r630 (pool
/// r630) at its own address.
fn r630_xr() -> Result<Value, String> {
    let mut xr = example_xr()?;
    xr["metadata"]["name"] = json!(R630);
    xr["metadata"]["namespace"] = json!(LAB_NS);
    xr["spec"]["host"]["pool"] = json!(R630);
    xr["spec"]["network"]["nodeIP"] = json!("192.168.120.71");
    xr["spec"]["health"] = json!({"unhealthyAfterSeconds": 30});
    // Datacenter networking on a single node: both NICs bonded
    // (active-backup), the address on VLAN 120 of the bond, jumbo frames.
    xr["spec"]["host"]["bond"] = json!({"interfaces": ["eno1", "eno2"], "mode": "active-backup"});
    xr["spec"]["host"]["vlan"] = json!(120);
    xr["spec"]["host"]["mtu"] = json!(9000);
    Ok(xr)
}

pub(crate) fn inventory_any_namespace(lab: &Lab) -> Outcome {
    let mut docs =
        vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LAB_NS}})];
    docs.extend(xtask::lab::hosts::host_docs(
        LAB_NS, R630, R630, "eno1", 0x63,
    ));
    lab.kube.apply(&docs).map_err(|e| e.to_string())?;
    let t = Instant::now();
    wait(
        "host lab/r630 available (BMO manages namespace lab)",
        120,
        || observe::hosts_in_state(lab, LAB_NS, R630, "available") == 1,
    )
    .map_err(|e| {
        let h = lab.kube.get("baremetalhost", R630, Some(LAB_NS));
        format!("{e}; host: {:?}", h.map(|h| h["status"].clone()))
    })?;
    println!(
        "  host lab/r630 available {:.1} s after it was applied",
        t.elapsed().as_secs_f64()
    );
    let inventory = Inventory::record(lab, LAB_NS, &[R630]);
    lab.kube.apply(&[r630_xr()?]).map_err(|e| e.to_string())?;
    let at = (LAB_NS, R630, R630);
    let phases = observe::follow(lab, at, Duration::from_secs(600), "  ", |o| {
        o.phase == "Ready" && o.reports_provisioned(R630) && o.nodes == "1/1"
    })
    .map_err(|e| e.to_string())?;
    phases_in_order(&phases)?;
    // What CAPM3 rendered for the bond and VLAN, as cloud-init reads it.
    let booted = check_node_configs(lab, LAB_NS, &format!("{R630}-cluster"))?;
    println!(
        "  cloud-init: the node's address on {} (bond0 of eno1+eno2, active-backup, VLAN 120, MTU 9000)",
        booted
            .iter()
            .map(|b| b.iface.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    // A single node is remediated the same way: its host rebooted by BMO.
    let machine = machines_in(lab, LAB_NS, &format!("{R630}-cluster"))
        .into_iter()
        .next()
        .ok_or("no Machine of r630")?;
    day2_step("remediate (single node)", || {
        remediate(lab, LAB_NS, R630, &machine, R630, Power::Unreported)
    })?;
    lab.kube
        .run(&["delete", "metalcluster", R630, "-n", LAB_NS, "--wait=false"])
        .map_err(|e| e.to_string())?;
    // The inventory is checked at every poll of the teardown, as the
    // other teardowns do: the garbage collector acts within seconds.
    let broken = std::cell::RefCell::new(Vec::new());
    observe::follow(lab, at, Duration::from_secs(420), "  ", |o| {
        let changed = inventory.changed(lab);
        if !changed.is_empty() {
            broken.borrow_mut().extend(changed);
            return true;
        }
        o.gone && o.host_at_rest()
    })
    .map_err(|e| e.to_string())?;
    let broken = broken.into_inner();
    check(broken.is_empty(), || {
        format!(
            "{broken:?} of namespace lab's inventory deleted, replaced or being deleted during the teardown"
        )
    })?;
    wait(
        "nothing of r630's cluster left in namespace lab",
        120,
        || observe::leftovers(lab, LAB_NS, R630).is_ok_and(|l| l.is_empty()),
    )
    .map_err(|e| format!("{e}: {:?}", observe::leftovers(lab, LAB_NS, R630)))?;
    lab.kube
        .run(&[
            "delete",
            "namespace",
            LAB_NS,
            "--wait=true",
            "--timeout=180s",
        ])
        .map(|_| ())
        .map_err(|e| e.to_string())
}
