//! Scenario `provision`: the single node from apply to Ready.

use super::*;

/// Inventory + MetalCluster: the right host claimed and provisioned, the
/// phases in order up to Ready (the Cilium Release installed into the
/// workload API), `status.host` true, the decoy untouched.
pub(crate) fn provision(lab: &Lab) -> Outcome {
    clean_slate(lab, R740)?;
    clean_slate(lab, R730)?;
    apply_inventory(lab)?;
    let decoy_before = get(lab, "baremetalhost", DECOY).ok_or("decoy host missing")?;
    lab.kube
        .apply(&[example_xr()?])
        .map_err(|e| e.to_string())?;
    let phases = follow(lab, R730, 600, |s| {
        s.phase == "Ready" && s.reports_provisioned(R730.host)
    })?;
    phases_in_order(&phases)?;
    let h = get(lab, "baremetalhost", HOST).ok_or("host r730 missing")?;
    check(
        str_at(&h, "/spec/consumerRef/kind") == "Metal3Machine",
        || {
            format!(
                "host r730 is not claimed by a Metal3Machine: {:?}",
                h.pointer("/spec/consumerRef")
            )
        },
    )?;
    let m3m = str_at(&h, "/spec/consumerRef/name");
    check(m3m.starts_with("r730-"), || {
        format!("host r730 claimed by {m3m}, not by r730's machine")
    })?;
    // What the host boots with, as cloud-init reads it.
    let booted = check_node_configs(lab, NS, &R730.cluster())?;
    println!(
        "  cloud-init: {} user data rendered and valid, network data on {} (netplan)",
        booted.len(),
        booted
            .iter()
            .map(|b| b.iface.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    decoy_untouched(lab, &decoy_before)
}
