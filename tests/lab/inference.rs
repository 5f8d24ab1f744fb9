//! Scenario `fleet-and-secrets`: joining the Modelplane fleet, and no secret outside Secrets.

use super::*;

/// The inference MetalCluster: the repository's inference example, moved
/// to the r740 host and the lab's chart mirror.
pub(crate) fn fleet_xr() -> Result<Value, String> {
    let path = xtask::repo_root().join("examples/metalcluster/r730-inference.yaml");
    let mut xr = xtask::lab::kube::load_yaml(&path)
        .map_err(|e| e.to_string())?
        .into_iter()
        .next()
        .ok_or("the inference example is empty")?;
    xr["metadata"]["name"] = json!(R740.xr);
    xr["spec"]["host"]["pool"] = json!("r740");
    xr["spec"]["network"]["nodeIP"] = json!("192.168.120.71");
    xr["spec"]["cni"]["chartRepository"] = json!(xtask::lab::charts::repository());
    Ok(xr)
}

/// The inference example joins the fleet: the phases in order up to
/// JoiningFleet, the workload kubeconfig copied to modelplane-system for
/// Modelplane, the InferenceCluster and the LB objects applied (the latter
/// inside the workload cluster). Then no object other than a Secret,
/// anywhere in the management cluster, holds the workload cluster's client
/// key.
pub(crate) fn fleet_and_secrets(lab: &Lab) -> Outcome {
    clean_slate(lab, R740)?;
    wait("host r740 available", 180, || {
        get(lab, "baremetalhost", R740.host)
            .is_some_and(|b| str_at(&b, "/status/provisioning/state") == "available")
    })?;
    lab.kube.apply(&[fleet_xr()?]).map_err(|e| e.to_string())?;
    let phases = follow(lab, R740, 600, |s| {
        s.phase == "JoiningFleet" && s.reports_provisioned(R740.host)
    })?;
    phases_in_order(&phases)?;
    let source = format!("{}-kubeconfig", R740.cluster());
    let copy = format!("{NS}-{}-kubeconfig", R740.xr);
    let data = |lab: &Lab, name: &str, ns: &str| {
        lab.kube
            .get("secret", name, Some(ns))
            .map(|s| str_at(&s, "/data/value").to_string())
            .unwrap_or_default()
    };
    let kubeconfig = data(lab, &source, NS);
    check(!kubeconfig.is_empty(), || format!("no Secret {source}"))?;
    wait(
        "the workload kubeconfig copied to modelplane-system, the InferenceCluster and the LB objects applied",
        180,
        || {
            data(lab, &copy, MODELPLANE_NS) == kubeconfig
                && lab
                    .kube
                    .get("inferenceclusters.modelplane.ai", &copy.replace("-kubeconfig", ""), None)
                    .is_some()
                && addons_api(lab)
                    .get("ciliumloadbalancerippools.cilium.io", "metalplane-lb", None)
                    .is_some()
        },
    )
    .map_err(|e| format!("{e}; outside the namespace: {:?}", fleet_outside(lab, R740)))?;
    cilium_and_kube_proxy(lab, R740, true)?;
    no_client_key_outside_secrets(lab, &kubeconfig)
}

/// Searches every object of every listable kind but Secrets for the
/// workload kubeconfig's client key: its base64 (as in the kubeconfig), a
/// line of its PEM body, and the Secret's own encoded value.
pub(crate) fn no_client_key_outside_secrets(lab: &Lab, kubeconfig_b64: &str) -> Outcome {
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD
        .decode(kubeconfig_b64)
        .map_err(|e| format!("kubeconfig Secret: {e}"))?;
    let text = String::from_utf8_lossy(&text).into_owned();
    let key_b64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("client-key-data:"))
        .map(str::trim)
        .ok_or("the workload kubeconfig has no client-key-data")?
        .to_string();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(&key_b64)
        .map_err(|e| format!("client-key-data: {e}"))?;
    let pem = String::from_utf8_lossy(&pem).into_owned();
    let pem_line = pem
        .lines()
        .nth(2)
        .ok_or("the client key PEM is too short")?
        .to_string();
    let needles = [
        ("the client key (base64)", key_b64.as_str()),
        ("a line of the client key PEM", pem_line.as_str()),
        ("the kubeconfig Secret's value", kubeconfig_b64),
    ];
    let kinds: Vec<String> = lab
        .kube
        .run(&["api-resources", "--verbs=list", "-o", "name"])
        .map_err(|e| e.to_string())?
        .lines()
        .filter(|k| *k != "secrets")
        .map(str::to_string)
        .collect();
    let all = lab
        .kube
        .run(&["get", &kinds.join(","), "-A", "-o", "json"])
        .map_err(|e| e.to_string())?;
    let all: Value = serde_json::from_str(&all).map_err(|e| e.to_string())?;
    let items = all
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut leaks = Vec::new();
    for o in &items {
        let json = o.to_string();
        for (what, needle) in needles {
            // JSON escapes the PEM's newlines; the needles hold none.
            if json.contains(needle) {
                leaks.push(format!(
                    "{} {}/{} holds {what}",
                    str_at(o, "/kind"),
                    str_at(o, "/metadata/namespace"),
                    str_at(o, "/metadata/name")
                ));
            }
        }
    }
    println!(
        "  searched {} objects of {} kinds (all but Secrets) for the workload client key: {} found",
        items.len(),
        kinds.len(),
        leaks.len()
    );
    check(leaks.is_empty(), || leaks.join("; "))
}
