//! Shared by the scenarios: the subjects (MetalClusters and their hosts), waiting, reading, the inventory and phase checks. What the demo and `lab perf` share with them lives in `xtask::lab::observe`.

use super::*;

pub(crate) const NS: &str = "metal";

pub(crate) const XR: &str = "r730";

pub(crate) const HOST: &str = "r730";

pub(crate) const DECOY: &str = "decoy";

/// A MetalCluster and the host it claims (its pool has that one host).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Subject {
    pub(crate) xr: &'static str,
    pub(crate) host: &'static str,
    /// Whether it joins the Modelplane fleet (then it ends in JoiningFleet:
    /// no Modelplane controller runs in the lab).
    pub(crate) fleet: bool,
}

pub(crate) const R730: Subject = Subject {
    xr: XR,
    host: HOST,
    fleet: false,
};

/// examples/metalcluster/r730-inference.yaml, moved to the r740 host.
pub(crate) const R740: Subject = Subject {
    xr: "r740",
    host: "r740",
    fleet: true,
};

impl Subject {
    pub(crate) fn cluster(&self) -> String {
        format!("{}-cluster", self.xr)
    }

    /// Whether a composed object's name is this MetalCluster's.
    pub(crate) fn owns(&self, name: &str) -> bool {
        name.starts_with(&format!("{}-", self.xr))
    }

    /// The phase it settles in.
    pub(crate) fn settled(&self) -> &'static str {
        if self.fleet { "JoiningFleet" } else { "Ready" }
    }
}

pub(crate) const FUNCTION: &str = "kube-farm-function-metalplane";

pub(crate) fn check(ok: bool, what: impl FnOnce() -> String) -> Outcome {
    if ok { Ok(()) } else { Err(what()) }
}

pub(crate) fn wait(what: &str, secs: u64, f: impl FnMut() -> bool) -> Outcome {
    procs::wait_for(what, Duration::from_secs(secs), f).map_err(|e| e.to_string())
}

pub(crate) fn get(lab: &Lab, kind: &str, name: &str) -> Option<Value> {
    lab.kube.get(kind, name, Some(NS))
}

pub(crate) fn is_true(obj: &Option<Value>, cond: &str) -> bool {
    obj.as_ref().and_then(|o| condition(o, cond)).as_deref() == Some("True")
}

pub(crate) fn uid(v: &Value) -> String {
    str_at(v, "/metadata/uid").to_string()
}

/// One moment of `who`: its XR and its host (`xtask::lab::observe`).
pub(crate) fn seen(lab: &Lab, who: Subject) -> Observed {
    observe::observe(lab, NS, who.xr, who.host)
}

/// Polls until `done`, printing each change; returns the time each XR
/// phase first appeared.
pub(crate) fn follow(
    lab: &Lab,
    who: Subject,
    secs: u64,
    done: impl Fn(&Observed) -> bool,
) -> Result<Vec<(String, f64)>, String> {
    observe::follow(
        lab,
        (NS, who.xr, who.host),
        Duration::from_secs(secs),
        "  ",
        done,
    )
    .map_err(|e| e.to_string())
}

/// A lab kept from an earlier run (METALPLANE_LAB_KEEP) may still hold the
/// MetalCluster: delete it and wait for its host, so every run starts from
/// the same state.
pub(crate) fn clean_slate(lab: &Lab, who: Subject) -> Outcome {
    if get(lab, "metalcluster", who.xr).is_none() {
        return Ok(());
    }
    println!("  deleting the MetalCluster left by an earlier run");
    lab.kube
        .run(&["delete", "metalcluster", who.xr, "-n", NS, "--wait=false"])
        .map_err(|e| e.to_string())?;
    // Until nothing of its cluster is left: a MetalCluster of the same name
    // applied while the old Cluster is still deleting composes objects the
    // old Cluster owns, and the garbage collector fights Crossplane.
    wait(
        "the earlier run's cluster gone and host back in its pool",
        420,
        || {
            let s = seen(lab, who);
            get(lab, "metalcluster", who.xr).is_none()
                && s.host_state == "available"
                && s.consumer.is_empty()
                && leftovers(lab, who).is_ok_and(|l| l.is_empty())
        },
    )
}

pub(crate) fn apply_inventory(lab: &Lab) -> Outcome {
    lab.kube
        .apply_file(&xtask::repo_root().join("examples/lab/inventory.yaml"))
        .map_err(|e| e.to_string())?;
    wait("hosts r730 and decoy available", 180, || {
        [HOST, DECOY].iter().all(|h| {
            get(lab, "baremetalhost", h)
                .map(|b| str_at(&b, "/status/provisioning/state") == "available")
                .unwrap_or(false)
        })
    })
}

pub(crate) fn example_xr() -> Result<Value, String> {
    xtask::lab::demo::example_xr().map_err(|e| e.to_string())
}

/// The phases this lab can reach, in the order the XR must show them.
pub(crate) const PHASE_ORDER: [&str; 7] = [
    "WaitingForHost",
    "Provisioning",
    "Bootstrapping",
    "InstallingCNI",
    "RollingOut",
    "Ready",
    "JoiningFleet",
];

/// Prints the phases with the time each first appeared, and checks their
/// order.
pub(crate) fn phases_in_order(phases: &[(String, f64)]) -> Outcome {
    println!(
        "  phases (first seen, s after apply): {}",
        phases
            .iter()
            .map(|(p, t)| format!("{p} {t:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let idx: Vec<Option<usize>> = phases
        .iter()
        .map(|(p, _)| PHASE_ORDER.iter().position(|o| o == p))
        .collect();
    check(
        idx.iter().all(Option::is_some) && idx.windows(2).all(|w| w[0] <= w[1]),
        || format!("phases out of order or unknown: {phases:?}"),
    )
}

pub(crate) fn decoy_untouched(lab: &Lab, before: &Value) -> Outcome {
    let d = get(lab, "baremetalhost", DECOY).ok_or("the decoy host was deleted")?;
    check(
        uid(&d) == uid(before)
            && d.pointer("/spec/consumerRef").is_none()
            && d.pointer("/metadata/deletionTimestamp").is_none()
            && str_at(&d, "/status/provisioning/state") == "available"
            && d.pointer("/spec/image").is_none(),
        || {
            format!(
                "the decoy host was touched: spec={:?} status.provisioning={:?}",
                d.get("spec"),
                d.pointer("/status/provisioning")
            )
        },
    )
}

/// Writes the status of another site's host (see `as_another_site`), as
/// its BMO would.
pub(crate) fn set_host_status_in(
    lab: &Lab,
    ns: &str,
    host: &str,
    state: &str,
    error: &str,
    count: u32,
) -> Outcome {
    let patch = json!({"status": {
        "operationalStatus": if error.is_empty() { "OK" } else { "error" },
        // Merge patch: null removes it (it has no empty value).
        "errorType": if error.is_empty() { Value::Null } else { json!("provisioning error") },
        "errorMessage": error,
        "errorCount": count,
        "poweredOn": true,
        "provisioning": {"ID": format!("lab-{host}"), "state": state},
    }});
    lab.kube
        .run(&[
            "patch",
            "baremetalhost",
            host,
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ])
        .map(|_| ())
        .map_err(|e| e.to_string())
}

pub(crate) fn operations(lab: &Lab) -> Vec<Value> {
    lab.kube.list("operations.ops.crossplane.io", None)
}

pub(crate) fn operation_outputs(lab: &Lab) -> Vec<String> {
    operations(lab)
        .iter()
        .map(|o| {
            format!(
                "{} {}",
                str_at(o, "/metadata/name"),
                o.pointer("/status/pipeline/0/output")
                    .map(Value::to_string)
                    .unwrap_or_default()
            )
        })
        .collect()
}

pub(crate) const MODELPLANE_NS: &str = "modelplane-system";

/// kubectl against the lab's add-on API server (the workload clusters'
/// Cilium kinds).
pub(crate) fn addons_api(lab: &Lab) -> xtask::lab::kube::Kube {
    xtask::lab::kube::Kube {
        kubectl: lab.kube.kubectl.clone(),
        kubeconfig: lab.addons_kubeconfig(),
    }
}

pub(crate) fn patch_xr(lab: &Lab, xr: &str, patch: &Value) -> Result<String, String> {
    lab.kube
        .run(&[
            "patch",
            "metalcluster",
            xr,
            "-n",
            NS,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ])
        .map_err(|e| e.to_string())
}

/// Warning events the function raised on the XR with this reason, counting
/// repeats (Kubernetes folds a repeated event into one with a count).
pub(crate) fn warning_count(lab: &Lab, xr: &str, reason: &str) -> u64 {
    warning_count_in(lab, NS, xr, reason)
}

/// The Warning Event objects of MetalCluster `xr` with `reason`.
pub(crate) fn warning_events_in(lab: &Lab, ns: &str, xr: &str, reason: &str) -> Vec<Value> {
    lab.kube
        .list("events", Some(ns))
        .into_iter()
        .filter(|e| {
            str_at(e, "/involvedObject/kind") == "MetalCluster"
                && str_at(e, "/involvedObject/name") == xr
                && str_at(e, "/type") == "Warning"
                && str_at(e, "/reason") == reason
        })
        .collect()
}

pub(crate) fn warning_count_in(lab: &Lab, ns: &str, xr: &str, reason: &str) -> u64 {
    warning_events_in(lab, ns, xr, reason)
        .iter()
        .map(|e| {
            e.pointer("/count")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .max(
                    e.pointer("/series/count")
                        .and_then(Value::as_u64)
                        .unwrap_or(0),
                )
        })
        .sum()
}

pub(crate) fn xr_condition(x: &Value, typ: &str) -> (String, String, String) {
    x.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| str_at(c, "/type") == typ))
        .map(|c| {
            (
                str_at(c, "/status").to_string(),
                str_at(c, "/reason").to_string(),
                str_at(c, "/message").to_string(),
            )
        })
        .unwrap_or_default()
}

/// The text of the first of `keys` that Secret `ns`/`name` holds.
pub(crate) fn secret_value(
    lab: &Lab,
    ns: &str,
    name: &str,
    keys: &[&str],
) -> Result<String, String> {
    use base64::Engine;
    let s = lab
        .kube
        .get("secret", name, Some(ns))
        .ok_or_else(|| format!("Secret {ns}/{name} missing"))?;
    let b64 = keys
        .iter()
        .map(|k| str_at(&s, &format!("/data/{k}")))
        .find(|v| !v.is_empty())
        .ok_or_else(|| format!("Secret {ns}/{name} has none of {keys:?}"))?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| format!("Secret {ns}/{name}: {e}"))?;
    String::from_utf8(raw).map_err(|e| format!("Secret {ns}/{name}: {e}"))
}

/// An object inside `who`'s workload cluster, read with its kubeconfig.
pub(crate) fn workload_get(
    lab: &Lab,
    who: Subject,
    kind: &str,
    name: &str,
    ns: &str,
) -> Result<Option<Value>, String> {
    let text = secret_value(
        lab,
        NS,
        &format!("{}-kubeconfig", who.cluster()),
        &["value"],
    )?;
    let path = lab.state.join(format!("{}-workload.kubeconfig", who.xr));
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    let path = path.display().to_string();
    match lab.kube.run(&[
        "--kubeconfig",
        &path,
        "get",
        kind,
        name,
        "-n",
        ns,
        "-o",
        "json",
        "--ignore-not-found",
    ]) {
        Ok(out) if out.trim().is_empty() => Ok(None),
        Ok(out) => serde_json::from_str(&out)
            .map(Some)
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Cilium's values as its chart rendered them in the workload cluster, and
/// whether kubeadm installed kube-proxy: L2 announcements only with
/// kube-proxy replacement, and then no kube-proxy.
pub(crate) fn cilium_and_kube_proxy(lab: &Lab, who: Subject, replaced: bool) -> Outcome {
    let cm = workload_get(lab, who, "configmap", "cilium-config", "kube-system")?
        .ok_or("no cilium-config in the workload cluster")?;
    let want = if replaced { "true" } else { "false" };
    for key in ["kube-proxy-replacement", "enable-l2-announcements"] {
        check(str_at(&cm, &format!("/data/{key}")) == want, || {
            format!(
                "{}: cilium-config {key}={:?}, want {want}",
                who.xr,
                cm.pointer(&format!("/data/{key}"))
            )
        })?;
    }
    let kube_proxy = workload_get(lab, who, "daemonset", "kube-proxy", "kube-system")?.is_some();
    check(kube_proxy != replaced, || {
        format!(
            "{}: kube-proxy installed={kube_proxy} with kube-proxy replacement={replaced}",
            who.xr
        )
    })?;
    println!(
        "  {}: kube-proxy replacement and L2 announcements {want}, kube-proxy DaemonSet {}",
        who.xr,
        if kube_proxy { "present" } else { "absent" }
    );
    Ok(())
}

/// Runs `f` with the lab's BMO watching only the inventory namespace
/// (`metal`), as a site running one BMO per namespace does: the hosts
/// `f` puts in namespace `ns` stand for another site's, whose BMO the
/// scenario plays by writing their status (states and errors the demo
/// provisioner never produces). Then `ns` is removed and BMO watches
/// every namespace again, whatever `f` returned.
pub(crate) fn as_another_site(lab: &Lab, ns: &str, f: impl FnOnce(&Lab) -> Outcome) -> Outcome {
    let scoped = Instant::now();
    xtask::lab::install::restart_bmo(lab, Some(NS)).map_err(|e| e.to_string())?;
    println!(
        "  BMO restarted for namespace {NS} only in {:.1} s",
        scoped.elapsed().as_secs_f64()
    );
    let out = f(lab);
    let removed = lab
        .kube
        .run(&[
            "delete",
            "namespace",
            ns,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=180s",
        ])
        .map(|_| ())
        .map_err(|e| e.to_string());
    let back = xtask::lab::install::restart_bmo(lab, None).map_err(|e| e.to_string());
    out.and(removed).and(back)
}

/// Every refused field of the edit table (the fleet's with `fleet`, the
/// single node's without) is among the `edited` paths: no refusal goes
/// untried in the lab.
pub(crate) fn every_refused_field_edited<'a>(
    edited: impl Iterator<Item = &'a str> + Clone,
    fleet: bool,
) -> Outcome {
    use metalplane::fields::Class;
    for f in metalplane::fields::FIELDS {
        // A single node refuses what a fleet rolls.
        let refused = f.class == Class::Refused || (!fleet && f.class == Class::Rolling);
        if refused && is_fleet_field(f.path) == fleet {
            check(edited.clone().any(|p| p == f.path), || {
                format!("no live edit of the refused field spec.{}", f.path)
            })?;
        }
    }
    Ok(())
}

/// The recorded inventory is all there, `t` into a teardown: checked at
/// every poll, since the garbage collector acts within seconds.
pub(crate) fn inventory_intact(lab: &Lab, inventory: &Inventory, t: Instant) -> Outcome {
    let changed = inventory.changed(lab);
    check(changed.is_empty(), || {
        format!(
            "{changed:?} of the inventory deleted, replaced or being deleted {:.0} s into the teardown",
            t.elapsed().as_secs_f64()
        )
    })
}
