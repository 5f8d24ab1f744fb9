//! Day 2 on a running cluster, as the lab shows it: `upgrade` (the fleet
//! to the next minor version, control plane first), `pool-roll` (one
//! pool's labels), and `remediate` (a wedged node rebooted through BMO),
//! on the rack of `multi-node`, and a single node's remediation.

use super::*;

pub(crate) const FROM: &str = "v1.34.1";
pub(crate) const TO: &str = "v1.35.0";
/// Set by a test on a Machine: the lab's node stand-in stops its kubelet
/// until the host reboots (xtask/lab/workload).
pub(crate) const WEDGED: &str = "lab.metal.kube.farm/wedged";

/// One Machine as the scenarios read it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MachineSeen {
    pub(crate) name: String,
    pub(crate) uid: String,
    /// `controlplane` or the pool's MachineDeployment.
    pub(crate) set: String,
    pub(crate) version: String,
    pub(crate) kubelet: String,
    pub(crate) ready: bool,
    /// KCP reports the machine's etcd member and API server healthy.
    pub(crate) serving: bool,
    pub(crate) deleting: bool,
    pub(crate) node: String,
    pub(crate) infra: String,
}

/// The Machines of `cluster` in `ns`.
pub(crate) fn machines_in(lab: &Lab, ns: &str, cluster: &str) -> Vec<MachineSeen> {
    lab.kube
        .list("machines.cluster.x-k8s.io", Some(ns))
        .iter()
        .filter(|m| str_at(m, "/spec/clusterName") == cluster)
        .map(|m| {
            let labels = &m["metadata"]["labels"];
            let set = if labels.get("cluster.x-k8s.io/control-plane").is_some() {
                "controlplane".to_string()
            } else {
                str_at(labels, "/cluster.x-k8s.io~1deployment-name").to_string()
            };
            MachineSeen {
                name: str_at(m, "/metadata/name").into(),
                uid: str_at(m, "/metadata/uid").into(),
                set,
                version: str_at(m, "/spec/version").into(),
                kubelet: str_at(m, "/status/nodeInfo/kubeletVersion").into(),
                ready: condition(m, "Ready").as_deref() == Some("True"),
                serving: ["EtcdMemberHealthy", "APIServerPodHealthy"]
                    .iter()
                    .all(|c| condition(m, c).as_deref() == Some("True")),
                deleting: m.pointer("/metadata/deletionTimestamp").is_some(),
                node: str_at(m, "/status/nodeRef/name").into(),
                infra: str_at(m, "/spec/infrastructureRef/name").into(),
            }
        })
        .collect()
}

fn rack_machines(lab: &Lab) -> Vec<MachineSeen> {
    machines_in(lab, NS, &format!("{RACK}-cluster"))
}

/// The workload cluster's Nodes, read through its API endpoint with the
/// kubeconfig CAPI wrote (so a read also proves the endpoint answers).
pub(crate) fn workload_nodes(lab: &Lab, ns: &str, cluster: &str) -> Result<Vec<Value>, String> {
    let text = secret_value(lab, ns, &format!("{cluster}-kubeconfig"), &["value"])?;
    let path = lab
        .state
        .join(format!("{ns}-{cluster}-workload.kubeconfig"));
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    let out = lab
        .kube
        .run(&[
            "--kubeconfig",
            &path.display().to_string(),
            "--request-timeout=10s",
            "get",
            "nodes",
            "-o",
            "json",
        ])
        .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    Ok(v["items"].as_array().cloned().unwrap_or_default())
}

fn node_ready(n: &Value) -> bool {
    condition(n, "Ready").as_deref() == Some("True")
}

/// The templates of the rack's machine sets in the namespace, by kind.
fn rack_templates(lab: &Lab) -> Vec<String> {
    let mut out = Vec::new();
    for kind in [
        "metal3machinetemplates.infrastructure.cluster.x-k8s.io",
        "metal3datatemplates.infrastructure.cluster.x-k8s.io",
        "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
    ] {
        for t in lab.kube.list(kind, Some(NS)) {
            let name = str_at(&t, "/metadata/name");
            if name.starts_with(&format!("{RACK}-cluster-")) {
                out.push(format!("{}/{name}", kind.split('.').next().unwrap_or(kind)));
            }
        }
    }
    out.sort();
    out
}

/// The templates the KubeadmControlPlane and the MachineDeployments refer
/// to now (and the data templates their machine templates refer to).
fn referenced_templates(lab: &Lab) -> Vec<String> {
    let cluster = format!("{RACK}-cluster");
    let mut machine = Vec::new();
    let mut out = Vec::new();
    if let Some(kcp) = lab.kube.get("kubeadmcontrolplane", &cluster, Some(NS)) {
        machine.push(str_at(&kcp, "/spec/machineTemplate/spec/infrastructureRef/name").to_string());
    }
    for md in lab
        .kube
        .list("machinedeployments.cluster.x-k8s.io", Some(NS))
    {
        if str_at(&md, "/spec/clusterName") != cluster {
            continue;
        }
        machine.push(str_at(&md, "/spec/template/spec/infrastructureRef/name").to_string());
        out.push(format!(
            "kubeadmconfigtemplates/{}",
            str_at(&md, "/spec/template/spec/bootstrap/configRef/name")
        ));
    }
    for m in machine {
        if let Some(t) = lab.kube.get("metal3machinetemplate", &m, Some(NS)) {
            out.push(format!(
                "metal3datatemplates/{}",
                str_at(&t, "/spec/template/spec/dataTemplate/name")
            ));
        }
        out.push(format!("metal3machinetemplates/{m}"));
    }
    out.sort();
    out
}

fn pool_replicas() -> BTreeMap<String, usize> {
    BTreeMap::from([
        (format!("{RACK}-cluster-gpu"), 2),
        (format!("{RACK}-cluster-cpu"), 1),
    ])
}

/// Refused by the API server with a message containing `says`.
fn refused(lab: &Lab, patch: &Value, says: &str) -> Outcome {
    match patch_xr(lab, RACK, patch) {
        Ok(_) => Err(format!("{patch} was accepted")),
        Err(e) if e.contains("spec.kubernetes.version cannot") && e.contains(says) => {
            println!("  refused: {}", e.lines().last().unwrap_or(&e).trim());
            Ok(())
        }
        Err(e) => Err(format!("{patch}: refused without saying {says:?}: {e}")),
    }
}

fn version_patch(v: &str) -> Value {
    json!({"spec": {"kubernetes": {
        "version": v,
        "imageURL": format!("http://10.40.8.10/images/ubuntu-2404-kube-{v}.qcow2"),
    }}})
}

/// Scenario `upgrade`: the Ready rack at FROM is upgraded to TO with its
/// image. At every poll: at least 2 of 3 control plane machines serving (Ready, or etcd member and API server healthy per KCP), the
/// workload API answers, no worker Machine rolls before KCP reports every
/// machine at TO, at most one machine of a pool away, the inventory intact.
/// At the end every Machine and kubelet runs TO, the XR is Ready showing
/// TO everywhere, no old template is left, every host claimed or available.
pub(crate) fn upgrade(lab: &Lab, inventory: &Inventory) -> Outcome {
    certificates_shown(lab)?;
    refused(lab, &version_patch("v1.33.0"), "cannot go back")?;
    refused(
        lab,
        &version_patch("v1.36.0"),
        "cannot skip a minor version",
    )?;
    let before = rack_machines(lab);
    check(
        before.len() == 6 && before.iter().all(|m| m.version == FROM && m.ready),
        || format!("before the upgrade: {before:?}"),
    )?;
    let templates_before = rack_templates(lab);
    patch_xr(lab, RACK, &version_patch(TO))?;
    let t = Instant::now();
    refused(
        lab,
        &version_patch("v1.35.1"),
        "while the last upgrade still rolls",
    )?;

    let kcp_done = |lab: &Lab| {
        lab.kube
            .get("kubeadmcontrolplane", &format!("{RACK}-cluster"), Some(NS))
            .is_some_and(|k| {
                str_at(&k, "/status/version") == TO
                    && k.pointer("/status/upToDateReplicas")
                        .and_then(Value::as_i64)
                        == Some(3)
                    && k.pointer("/status/readyReplicas").and_then(Value::as_i64) == Some(3)
            })
    };
    let before_uids: Vec<String> = before.iter().map(|m| m.uid.clone()).collect();
    let mut cp_done_at: Option<f64> = None;
    let mut phases: Vec<String> = Vec::new();
    let mut api_failures = 0;
    let (mut min_cp, mut polls) = (3, 0);
    loop {
        inventory_intact(lab, inventory, t)?;
        let cp_before = kcp_done(lab);
        let ms = rack_machines(lab);
        let cp_after = kcp_done(lab);
        if cp_before && cp_done_at.is_none() {
            cp_done_at = Some(t.elapsed().as_secs_f64());
            println!(
                "  {:>6.1}s KCP reports every control plane machine at {TO}",
                t.elapsed().as_secs_f64()
            );
        }
        polls += 1;
        // A control plane machine serves when it is Ready, or when KCP
        // reports its etcd member and API server healthy: KCP deletes the
        // next old machine on those, and the new one's Ready condition
        // follows a machine controller reconcile later (a loaded CI run
        // saw the old one deleting while the new one's Ready was not yet
        // True). KCP writes those conditions when the reconcile that
        // decided the deletion ends, so a poll in between is read again.
        let serving = |ms: &[MachineSeen]| {
            ms.iter()
                .filter(|m| m.set == "controlplane" && (m.ready || m.serving) && !m.deleting)
                .count()
        };
        let mut ms = ms;
        let mut cp_ready = serving(&ms);
        if cp_ready < 2 {
            std::thread::sleep(Duration::from_secs(1));
            ms = rack_machines(lab);
            cp_ready = serving(&ms);
        }
        min_cp = min_cp.min(cp_ready);
        check(cp_ready >= 2, || {
            format!(
                "{:.0} s into the upgrade only {cp_ready} control plane machines serving: {ms:?}",
                t.elapsed().as_secs_f64()
            )
        })?;
        for (set, replicas) in pool_replicas() {
            let up = ms
                .iter()
                .filter(|m| m.set == set && m.ready && !m.deleting)
                .count();
            check(up + 1 >= replicas, || {
                format!("{set}: {up} of {replicas} machines up: more than one away at once: {ms:?}")
            })?;
            let rolling = ms.iter().any(|m| {
                m.set == set && (m.deleting || !before_uids.contains(&m.uid) || m.version == TO)
            });
            check(!rolling || cp_after, || {
                format!(
                    "{set} started rolling before the KubeadmControlPlane reported every machine at {TO}: {ms:?}"
                )
            })?;
        }
        match workload_nodes(lab, NS, &format!("{RACK}-cluster")) {
            Ok(_) => api_failures = 0,
            Err(e) => {
                // One slow answer is not an outage; three polls in a row are.
                api_failures += 1;
                check(api_failures < 3, || {
                    format!("the workload API did not answer three times in a row: {e}")
                })?;
            }
        }
        let x = get(lab, "metalcluster", RACK).unwrap_or(Value::Null);
        let phase = str_at(&x, "/status/phase").to_string();
        if phases.last() != Some(&phase) {
            println!(
                "  {:>6.1}s phase={phase} kubernetes={}",
                t.elapsed().as_secs_f64(),
                x.pointer("/status/kubernetes")
                    .cloned()
                    .unwrap_or(Value::Null)
            );
            phases.push(phase.clone());
        }
        let all_at = ms.len() == 6 && ms.iter().all(|m| m.version == TO && m.ready && !m.deleting);
        // Ready, or status.kubernetes.version, only once every machine is.
        // Until the XR's first reconcile after the edit its status is the
        // one from before it: Ready at FROM, which claims nothing about TO.
        let shown = str_at(&x, "/status/kubernetes/version");
        let claims_done = shown == TO || (phase == "Ready" && shown != FROM);
        check(!claims_done || ms.iter().all(|m| m.version == TO), || {
            format!(
                "{:.0} s into the upgrade the XR says done (phase {phase}, kubernetes {}) while machines run {:?}",
                t.elapsed().as_secs_f64(),
                x["status"]["kubernetes"],
                ms.iter().map(|m| (&m.name, &m.version)).collect::<Vec<_>>()
            )
        })?;
        if phase == "Ready" && str_at(&x, "/status/kubernetes/version") == TO && all_at {
            break;
        }
        if t.elapsed() > Duration::from_secs(1500) {
            return Err(format!(
                "the upgrade did not finish in 1500 s: phase {phase}, machines {ms:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let took = t.elapsed().as_secs_f64();
    check(phases.iter().any(|p| p == "Upgrading"), || {
        format!("the phase never showed Upgrading: {phases:?}")
    })?;
    let ms = rack_machines(lab);
    check(ms.iter().all(|m| !before_uids.contains(&m.uid)), || {
        format!("a machine was not replaced: {ms:?}")
    })?;
    wait(
        "every Machine reports its kubelet at the new version",
        120,
        || rack_machines(lab).iter().all(|m| m.kubelet == TO),
    )
    .map_err(|e| format!("{e}: {:?}", rack_machines(lab)))?;
    let nodes = workload_nodes(lab, NS, &format!("{RACK}-cluster"))?;
    check(
        nodes.len() == 6
            && nodes
                .iter()
                .all(|n| str_at(n, "/status/nodeInfo/kubeletVersion") == TO && node_ready(n)),
        || {
            format!(
                "workload nodes: {:?}",
                nodes
                    .iter()
                    .map(|n| (
                        str_at(n, "/metadata/name"),
                        str_at(n, "/status/nodeInfo/kubeletVersion")
                    ))
                    .collect::<Vec<_>>()
            )
        },
    )?;
    let x = get(lab, "metalcluster", RACK).ok_or("rack1 missing")?;
    let k = &x["status"]["kubernetes"];
    check(
        str_at(k, "/controlPlane/version") == TO
            && k["workers"]
                .as_array()
                .is_some_and(|w| w.len() == 2 && w.iter().all(|p| str_at(p, "/version") == TO)),
        || format!("status.kubernetes: {k}"),
    )?;
    wait("no old template left", 180, || {
        rack_templates(lab) == referenced_templates(lab)
    })
    .map_err(|e| {
        format!(
            "{e}: {:?} vs referenced {:?}",
            rack_templates(lab),
            referenced_templates(lab)
        )
    })?;
    check(rack_templates(lab) != templates_before, || {
        "the templates did not change".into()
    })?;
    let s = rack_seen(lab);
    check(
        s.hosts.values().all(|h| {
            (h.0 == "provisioned" && !h.2.is_empty()) || (h.0 == "available" && h.2.is_empty())
        }),
        || format!("a host neither claimed nor available: {:?}", s.hosts),
    )?;
    println!(
        "  {FROM} -> {TO}: control plane done after {:.0} s, every pool after {took:.0} s ({polls} polls: never fewer than {min_cp} of 3 control plane machines serving, the API answered, no worker rolled before the control plane was done)",
        cp_done_at.unwrap_or(0.0)
    );
    Ok(())
}

/// The XR shows the earliest certificate expiry KCP read from the control
/// plane's nodes, and `CertificatesValid` True with who renews them.
fn certificates_shown(lab: &Lab) -> Outcome {
    let cp_dates = || {
        let mut d: Vec<String> = lab
            .kube
            .list("machines.cluster.x-k8s.io", Some(NS))
            .iter()
            .filter(|m| {
                str_at(m, "/spec/clusterName") == format!("{RACK}-cluster")
                    && m.pointer("/metadata/labels/cluster.x-k8s.io~1control-plane")
                        .is_some()
            })
            .map(|m| str_at(m, "/status/certificatesExpiryDate").to_string())
            .collect();
        d.sort();
        d
    };
    wait(
        "KCP reporting each control plane machine's certificate expiry",
        120,
        || {
            let d = cp_dates();
            d.len() == 3 && d.iter().all(|e| !e.is_empty())
        },
    )
    .map_err(|e| format!("{e}: {:?}", cp_dates()))?;
    let earliest = cp_dates().first().cloned().unwrap_or_default();
    let shown = |lab: &Lab| {
        let x = get(lab, "metalcluster", RACK).unwrap_or(Value::Null);
        let (status, reason, msg) = xr_condition(&x, "CertificatesValid");
        (
            str_at(&x, "/status/certificatesExpiryDate").to_string(),
            status,
            reason,
            msg,
        )
    };
    wait("the XR showing the earliest expiry", 120, || {
        let (date, status, _, msg) = shown(lab);
        date == earliest && status == "True" && msg.contains("rolls onto new machines")
    })
    .map_err(|e| format!("{e}: want {earliest}, got {:?}", shown(lab)))?;
    println!("  CertificatesValid: {}", shown(lab).3);
    Ok(())
}

/// Scenario `pool-roll`: new labels for the cpu pool replace that pool's
/// machine only; the control plane's and the gpu pool's keep their UIDs;
/// the new node carries the labels.
pub(crate) fn pool_roll(lab: &Lab, inventory: &Inventory) -> Outcome {
    let before = rack_machines(lab);
    let others: Vec<String> = before
        .iter()
        .filter(|m| m.set != format!("{RACK}-cluster-cpu"))
        .map(|m| m.uid.clone())
        .collect();
    let patch = json!([
        {"op": "test", "path": "/spec/workers/1/name", "value": "cpu"},
        {"op": "add", "path": "/spec/workers/1/nodeLabels", "value": {"rack.kube.farm/row": "b"}},
    ]);
    patch_rack(lab, &patch)?;
    let t = Instant::now();
    let cpu = format!("{RACK}-cluster-cpu");
    loop {
        inventory_intact(lab, inventory, t)?;
        let ms = rack_machines(lab);
        for m in ms.iter().filter(|m| m.set != cpu) {
            check(others.contains(&m.uid) && !m.deleting, || {
                format!(
                    "{} of {} was touched by the cpu pool's roll: {ms:?}",
                    m.name, m.set
                )
            })?;
        }
        let x = get(lab, "metalcluster", RACK).unwrap_or(Value::Null);
        let new_cpu: Vec<&MachineSeen> = ms
            .iter()
            .filter(|m| m.set == cpu && !before.iter().any(|b| b.uid == m.uid))
            .collect();
        if str_at(&x, "/status/phase") == "Ready"
            && new_cpu.len() == 1
            && new_cpu[0].ready
            && ms.len() == 6
        {
            let node = new_cpu[0].node.clone();
            let nodes = workload_nodes(lab, NS, &format!("{RACK}-cluster"))?;
            let labelled = nodes.iter().any(|n| {
                str_at(n, "/metadata/name") == node
                    && str_at(n, "/metadata/labels/rack.kube.farm~1row") == "b"
            });
            check(labelled, || {
                format!("node {node} lacks rack.kube.farm/row=b")
            })?;
            println!(
                "  cpu pool's labels: its machine replaced in {:.0} s, node {node} carries rack.kube.farm/row=b; the 5 other machines kept their UIDs",
                t.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(600) {
            return Err(format!("the cpu pool did not roll in 600 s: {ms:?}"));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The reboot annotations CAPM3's remediation puts on a host (BMO's
/// reboot API).
fn reboot_annotations(h: &Value) -> Vec<String> {
    h.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|a| {
            a.keys()
                .filter(|k| k.starts_with("reboot.metal3.io/metal3-remediation-"))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Whether BMO's log shows it acting on a reboot of `host` in `ns` (the
/// power-off it asks its provisioner for).
fn bmo_reboots(lab: &Lab, ns: &str, host: &str) -> bool {
    let log = std::fs::read_to_string(lab.procs.log_file("bmo")).unwrap_or_default();
    let who = format!("\"baremetalhost\":{{\"name\":\"{host}\",\"namespace\":\"{ns}\"}}");
    log.lines().any(|l| {
        l.contains("power state change needed")
            && l.contains(&who)
            && l.contains("\"reboot process\":true")
    })
}

/// How a remediation's power cycle shows.
pub(crate) enum Power<'a> {
    /// BMO's demo provisioner: no power change is ever reported.
    Unreported,
    /// A provisioner that drives the BMC (Ironic mode), and how to read
    /// the BMC's own power state (sushy-tools).
    Reported(&'a dyn Fn() -> Result<String, String>),
}

/// Wedges the kubelet of `machine` (in `ns`) and follows the remediation:
/// the MachineHealthCheck finds it unhealthy, the XR's NodesHealthy turns
/// False naming the machine and its host (phase Remediating), a
/// Metal3Remediation asks BMO to reboot the host (CAPM3's reboot
/// annotation; BMO asks its provisioner to power it off), the node comes
/// back Ready on the same Machine, and NodesHealthy turns True again.
///
/// With `Power::Reported` the host is seen off (BMO's status and the BMC
/// itself) and on again, and CAPM3 finishes on its own: it removes the
/// reboot annotation and its finalizer. BMO's demo provisioner reports no
/// power change (BMO sets status.poweredOn from spec.online after a
/// provisioner that had nothing to do), so CAPM3 never sees the host off
/// and its remediation cannot finish: the server stand-in takes the
/// reboot request as the reboot, and the test then ends CAPM3's
/// remediation as an operator would after a manual power cycle (its
/// finalizer, then the reboot annotation).
pub(crate) fn remediate(
    lab: &Lab,
    ns: &str,
    xr: &str,
    machine: &MachineSeen,
    host: &str,
    power: Power,
) -> Outcome {
    lab.kube
        .run(&[
            "annotate",
            "machine",
            &machine.name,
            "-n",
            ns,
            &format!("{WEDGED}=true"),
        ])
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let (mut named_at, mut reboot_at, mut off_at, mut on_at) = (None, None, None, None);
    let secs = |t: &Instant| t.elapsed().as_secs_f64();
    // A real power cycle adds the BMC's own delays (sushy-tools: 1-11 s
    // each way) and the provisioner's polls.
    let limit = match power {
        Power::Unreported => 300,
        Power::Reported(_) => 420,
    };
    loop {
        let x = lab
            .kube
            .get("metalcluster", xr, Some(ns))
            .unwrap_or(Value::Null);
        let (status, _, msg) = xr_condition(&x, "NodesHealthy");
        if status == "False" && named_at.is_none() {
            check(msg.contains(&machine.name) && msg.contains(host), || {
                format!(
                    "NodesHealthy names neither machine {} nor host {host}: {msg}",
                    machine.name
                )
            })?;
            check(str_at(&x, "/status/phase") == "Remediating", || {
                format!("phase {} while remediating", str_at(&x, "/status/phase"))
            })?;
            named_at = Some(secs(&t));
            println!(
                "  {:>6.1}s NodesHealthy False, phase Remediating: {msg}",
                secs(&t)
            );
        }
        let h = lab
            .kube
            .get("baremetalhost", host, Some(ns))
            .unwrap_or(Value::Null);
        let annotated = !reboot_annotations(&h).is_empty();
        if reboot_at.is_none() && annotated {
            let r = lab
                .kube
                .get("metal3remediation", &machine.name, Some(ns))
                .ok_or_else(|| {
                    format!(
                        "host {host} is rebooted without a Metal3Remediation of {}",
                        machine.name
                    )
                })?;
            reboot_at = Some(secs(&t));
            println!(
                "  {:>6.1}s Metal3Remediation {} ({} {}) set BMO's reboot annotation on host {host}",
                secs(&t),
                machine.name,
                str_at(&r, "/spec/strategy/type"),
                str_at(&r, "/status/phase"),
            );
        }
        let finished = match &power {
            Power::Unreported => true,
            Power::Reported(bmc) => {
                let reported_on = h.pointer("/status/poweredOn").and_then(Value::as_bool);
                if reboot_at.is_some() && off_at.is_none() && reported_on == Some(false) {
                    let state = bmc()?;
                    check(state == "Off", || {
                        format!("BMO reports host {host} off, its BMC says {state}")
                    })?;
                    off_at = Some(secs(&t));
                    println!("  {:>6.1}s host {host} off (BMO and its BMC)", secs(&t));
                }
                if off_at.is_some() && on_at.is_none() && reported_on == Some(true) {
                    on_at = Some(secs(&t));
                    println!("  {:>6.1}s host {host} on again", secs(&t));
                }
                // CAPM3 ends the remediation itself: annotation and
                // finalizer gone, the request deleted by the health check.
                on_at.is_some()
                    && !annotated
                    && lab
                        .kube
                        .get("metal3remediation", &machine.name, Some(ns))
                        .is_none()
            }
        };
        if named_at.is_some() && reboot_at.is_some() && status == "True" && finished {
            break;
        }
        if t.elapsed() > Duration::from_secs(limit) {
            return Err(format!(
                "remediation of {} did not finish in {limit} s: NodesHealthy {status} {msg}; host annotations {:?}, poweredOn {}; off seen after {off_at:?} s, on after {on_at:?} s",
                machine.name,
                reboot_annotations(&h),
                h.pointer("/status/poweredOn").unwrap_or(&Value::Null),
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let healthy_at = secs(&t);
    wait(
        "BMO acting on the reboot (asking its provisioner to power off)",
        90,
        || bmo_reboots(lab, ns, host),
    )?;
    let m = machines_in(lab, ns, &format!("{xr}-cluster"))
        .into_iter()
        .find(|m| m.name == machine.name)
        .ok_or_else(|| format!("machine {} was replaced, not rebooted", machine.name))?;
    check(m.uid == machine.uid && m.ready, || {
        format!("after the reboot: {m:?}")
    })?;
    let nodes = workload_nodes(lab, ns, &format!("{xr}-cluster"))?;
    check(
        nodes
            .iter()
            .any(|n| str_at(n, "/metadata/name") == m.node && node_ready(n)),
        || format!("node {} is not Ready", m.node),
    )?;
    let x = lab
        .kube
        .get("metalcluster", xr, Some(ns))
        .unwrap_or(Value::Null);
    check(str_at(&x, "/status/phase") != "Remediating", || {
        "still Remediating".into()
    })?;
    match power {
        Power::Reported(bmc) => {
            let state = bmc()?;
            check(state == "On", || {
                format!("host {host}'s BMC says {state} after the remediation")
            })?;
            println!(
                "  remediated by a power cycle through the provisioner: named after {:.0} s, reboot requested after {:.0} s, off after {:.0} s, on after {:.0} s, node Ready and NodesHealthy True after {healthy_at:.0} s, CAPM3 done on its own, same Machine",
                named_at.unwrap_or(0.0),
                reboot_at.unwrap_or(0.0),
                off_at.unwrap_or(0.0),
                on_at.unwrap_or(0.0),
            );
            Ok(())
        }
        Power::Unreported => end_unreported_remediation(lab, ns, machine, host).map(|()| {
            println!(
                "  remediated by reboot: named after {:.0} s, reboot requested after {:.0} s, node Ready and NodesHealthy True after {healthy_at:.0} s, same Machine",
                named_at.unwrap_or(0.0),
                reboot_at.unwrap_or(0.0),
            );
        }),
    }
}

/// What an operator does after a manual power cycle, where the
/// provisioner reports none: CAPM3's finalizer off the finished
/// Metal3Remediation, then the reboot annotation off the host.
fn end_unreported_remediation(lab: &Lab, ns: &str, machine: &MachineSeen, host: &str) -> Outcome {
    // The healthy machine's remediation is deleted by the health check;
    // CAPM3 still waits for the power-off demo mode never reports.
    wait(
        "the health check deleting the finished Metal3Remediation",
        60,
        || {
            lab.kube
                .get("metal3remediation", &machine.name, Some(ns))
                .is_none_or(|r| r.pointer("/metadata/deletionTimestamp").is_some())
        },
    )?;
    let _ = lab.kube.run(&[
        "patch",
        "metal3remediation",
        &machine.name,
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    wait("the Metal3Remediation gone", 60, || {
        lab.kube
            .get("metal3remediation", &machine.name, Some(ns))
            .is_none()
    })?;
    let h = lab
        .kube
        .get("baremetalhost", host, Some(ns))
        .unwrap_or(Value::Null);
    for a in reboot_annotations(&h) {
        lab.kube
            .run(&[
                "annotate",
                "baremetalhost",
                host,
                "-n",
                ns,
                &format!("{a}-"),
            ])
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Scenario `remediate` on the rack: a gpu worker's node wedged.
pub(crate) fn remediate_worker(lab: &Lab) -> Outcome {
    let ms = rack_machines(lab);
    let m = ms
        .iter()
        .find(|m| m.set == format!("{RACK}-cluster-gpu"))
        .ok_or("no gpu machine")?
        .clone();
    let host = rack_seen(lab)
        .hosts
        .into_iter()
        .find(|(_, h)| h.2 == m.infra)
        .map(|(n, _)| n)
        .ok_or_else(|| format!("no host claimed for {}", m.infra))?;
    remediate(lab, NS, RACK, &m, &host, Power::Unreported)
}
