//! Scenario `bad-input-then-function-restart`: a refused spec loses nothing already composed, and a restarted function picks up where it was.

use super::*;

/// Bad input applied live: the XR names the field, nothing is composed;
/// the fixed spec converges. Then the function is killed mid-provisioning:
/// nothing composed is deleted, and it converges once it is back.
pub(crate) fn bad_input_and_restart(lab: &Lab) -> Outcome {
    // A new MetalCluster, not an edit of the last one (whose network is
    // fixed): wait until the background teardown removed it.
    clean_slate(lab, R730)?;
    let mut xr = example_xr()?;
    xr["spec"]["network"]["gateway"] = json!("10.1.1.1");
    lab.kube.apply(&[xr.clone()]).map_err(|e| e.to_string())?;
    let mut message = String::new();
    wait("the XR reports the bad gateway", 60, || {
        let x = get(lab, "metalcluster", XR);
        message = x
            .as_ref()
            .and_then(|x| x.pointer("/status/conditions"))
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| str_at(c, "/type") == "Synced" && str_at(c, "/status") == "False")
            })
            .map(|c| str_at(c, "/message").to_string())
            .unwrap_or_default();
        message.contains("spec.network.gateway") && message.contains("10.1.1.1")
    })
    .map_err(|e| format!("{e}; last Synced message: {message:?}"))?;
    println!("  Synced=False: {message}");
    let composed = lab
        .kube
        .run(&["get", observe::CLUSTER_KINDS, "-n", NS, "-o", "name"])
        .map_err(|e| e.to_string())?;
    check(composed.trim().is_empty(), || {
        format!("bad input composed: {composed}")
    })?;

    xr["spec"]["network"]["gateway"] = json!("192.168.120.1");
    lab.kube.apply(&[xr]).map_err(|e| e.to_string())?;
    follow(lab, R730, 300, |s| {
        s.host_state == "provisioning" || s.host_state == "provisioned"
    })?;
    let before = composed_uids(lab);
    check(!before.is_empty(), || {
        "the fixed spec composed nothing".into()
    })?;

    lab.stop_function();
    println!(
        "  function stopped with {} composed resources",
        before.len()
    );
    // Long enough for Crossplane to retry against the dead endpoint.
    std::thread::sleep(Duration::from_secs(20));
    let during = composed_uids(lab);
    check(before.iter().all(|(k, u)| during.get(k) == Some(u)), || {
        format!(
            "composed resources changed while the function was down: before {before:?}, during {during:?}"
        )
    })?;
    lab.start_function().map_err(|e| e.to_string())?;
    follow(lab, R730, 600, |s| {
        s.phase == "Ready" && s.reports_provisioned(R730.host)
    })?;
    let after = composed_uids(lab);
    check(before.iter().all(|(k, u)| after.get(k) == Some(u)), || {
        format!(
            "composed resources replaced across the restart: before {before:?}, after {after:?}"
        )
    })
}

/// Each composed object (kind/name) with its UID, read from the API server.
pub(crate) fn composed_uids(lab: &Lab) -> BTreeMap<String, String> {
    let Some(x) = get(lab, "metalcluster", XR) else {
        return BTreeMap::new();
    };
    x.pointer("/spec/crossplane/resourceRefs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let api = str_at(r, "/apiVersion");
            let group = api.split_once('/').map(|(g, _)| g).unwrap_or("");
            let kind = format!("{}.{group}", str_at(r, "/kind")).to_ascii_lowercase();
            let kind = kind.trim_end_matches('.').to_string();
            let name = str_at(r, "/name");
            let ns = r.get("namespace").and_then(Value::as_str);
            let obj = lab.kube.get(&kind, name, ns.or(Some(NS)))?;
            Some((format!("{kind}/{name}"), uid(&obj)))
        })
        .collect()
}
