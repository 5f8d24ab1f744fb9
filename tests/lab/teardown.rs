//! Scenarios `teardown-*` and `fleet-teardown`: deleting a MetalCluster returns its host, keeps the inventory and leaves nothing behind.

use super::*;

/// What is left of `who`'s cluster in the namespace.
pub(crate) fn leftovers(lab: &Lab, who: Subject) -> Result<Vec<String>, String> {
    observe::leftovers(lab, NS, who.xr).map_err(|e| e.to_string())
}

/// Deletes the XR (background or foreground) and asserts the host is back
/// in its pool, powered off, with its inventory intact.
pub(crate) fn teardown(lab: &Lab, who: Subject, foreground: bool) -> Outcome {
    let s = seen(lab, who);
    check(s.phase == who.settled() && !s.consumer.is_empty(), || {
        format!(
            "teardown needs MetalCluster {} {} on a claimed host; seen {s:?}",
            who.xr,
            who.settled()
        )
    })?;
    let inventory = Inventory::record(lab, NS, &[who.host]);
    let decoy_before = get(lab, "baremetalhost", DECOY).ok_or("decoy host missing")?;
    let addons_before = addons(lab, who);
    check(!addons_before.is_empty(), || {
        format!(
            "{} composed none of the CNI, Modelplane or LB objects",
            who.xr
        )
    })?;
    let cascade = if foreground {
        "--cascade=foreground"
    } else {
        "--cascade=background"
    };
    delete_xr(lab, who, cascade)?;
    let t = Instant::now();
    // The inventory must survive every moment of the teardown, not just
    // its end: the garbage collector acts within seconds.
    let mut gone_at = None;
    let mut addons_gone_at = None;
    let mut machine_deleting_at = None;
    let cluster = who.cluster();
    loop {
        if addons_gone_at.is_none() && addons(lab, who).is_empty() {
            addons_gone_at = Some(t.elapsed().as_secs_f64());
        }
        if machine_deleting_at.is_none()
            && lab
                .kube
                .list("machines.cluster.x-k8s.io", Some(NS))
                .iter()
                .filter(|m| str_at(m, "/metadata/labels/cluster.x-k8s.io~1cluster-name") == cluster)
                .any(|m| m.pointer("/metadata/deletionTimestamp").is_some())
        {
            machine_deleting_at = Some(t.elapsed().as_secs_f64());
            let left = addons(lab, who);
            check(left.is_empty(), || {
                format!(
                    "a Machine started deleting {:.1} s into the teardown while these still existed: {left:?}",
                    t.elapsed().as_secs_f64()
                )
            })?;
        }
        inventory_intact(lab, &inventory, t)?;
        let s = seen(lab, who);
        let xr_gone = get(lab, "metalcluster", who.xr).is_none();
        if xr_gone && gone_at.is_none() {
            gone_at = Some(t.elapsed().as_secs_f64());
        }
        let h = get(lab, "baremetalhost", who.host).unwrap_or(Value::Null);
        let off = h.pointer("/status/poweredOn").and_then(Value::as_bool) == Some(false);
        if xr_gone && s.host_state == "available" && s.consumer.is_empty() && off {
            break;
        }
        if t.elapsed() > Duration::from_secs(420) {
            return Err(format!(
                "teardown did not finish in 420 s: XR gone={xr_gone}, host {s:?}, poweredOn off={off}; left: {:?}",
                leftovers(lab, who)
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    println!(
        "  {} ({}) gone after {:.1} s, first Machine deleting at {:.1} s, XR gone after {:.1} s, host available and off after {:.1} s",
        addons_before.len(),
        addons_before.join(", "),
        addons_gone_at.unwrap_or_default(),
        machine_deleting_at.unwrap_or_default(),
        gone_at.unwrap_or_default(),
        t.elapsed().as_secs_f64()
    );
    let h = get(lab, "baremetalhost", who.host).ok_or("host gone")?;
    check(h.pointer("/spec/image").is_none(), || {
        format!(
            "host {} still carries an image: {:?}",
            who.host,
            h.pointer("/spec/image")
        )
    })?;
    wait(
        "nothing of the cluster left in namespace metal",
        120,
        || leftovers(lab, who).map(|l| l.is_empty()).unwrap_or(false),
    )
    .map_err(|e| format!("{e}: {:?}", leftovers(lab, who)))?;
    if who.fleet {
        let outside = fleet_outside(lab, who);
        check(outside.is_empty(), || {
            format!("left outside namespace {NS}: {outside:?}")
        })?;
    }
    decoy_untouched(lab, &decoy_before)
}

/// `kubectl delete` of `who`'s MetalCluster with `cascade`, not waiting.
fn delete_xr(lab: &Lab, who: Subject, cascade: &str) -> Outcome {
    lab.kube
        .run(&[
            "delete",
            "metalcluster",
            who.xr,
            "-n",
            NS,
            cascade,
            "--wait=false",
        ])
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The objects that talk to the workload API and must go before any
/// Machine: the Cilium Release, every provider-kubernetes Object applied
/// through the workload's own ProviderConfig (the LB's), and the
/// InferenceCluster (Modelplane drains the cluster through its API), as
/// kind/name. The kubeconfig copy and the InferenceClass live in the
/// management cluster: they go after the InferenceCluster, in any order
/// with the Machines.
pub(crate) fn addons(lab: &Lab, who: Subject) -> Vec<String> {
    let workload_pc = who.cluster();
    let inference_cluster = format!("{}-inference-cluster", who.xr);
    let releases = lab
        .kube
        .list("releases.helm.m.crossplane.io", Some(NS))
        .into_iter()
        .map(|o| str_at(&o, "/metadata/name").to_string())
        .filter(|n| who.owns(n))
        .map(|n| format!("releases.helm.m.crossplane.io/{n}"));
    let objects = lab
        .kube
        .list("objects.kubernetes.m.crossplane.io", Some(NS))
        .into_iter()
        .filter(|o| {
            let n = str_at(o, "/metadata/name");
            who.owns(n)
                && (n == inference_cluster
                    || str_at(o, "/spec/providerConfigRef/name") == workload_pc)
        })
        .map(|o| {
            format!(
                "objects.kubernetes.m.crossplane.io/{}",
                str_at(&o, "/metadata/name")
            )
        });
    releases.chain(objects).collect()
}

/// What the fleet family put outside the MetalCluster's namespace: the
/// inner Object and its kubeconfig Secret in modelplane-system, Modelplane's
/// cluster-scoped InferenceClass and InferenceCluster, and the Cilium
/// objects inside the workload cluster (the lab's add-on API server).
pub(crate) fn fleet_outside(lab: &Lab, who: Subject) -> Vec<String> {
    let prefix = format!("{NS}-{}", who.xr);
    let mut out = Vec::new();
    for (kind, ns) in [
        ("objects.kubernetes.m.crossplane.io", Some(MODELPLANE_NS)),
        ("secrets", Some(MODELPLANE_NS)),
        ("inferenceclasses.modelplane.ai", None),
        ("inferenceclusters.modelplane.ai", None),
    ] {
        for o in lab.kube.list(kind, ns) {
            let n = str_at(&o, "/metadata/name");
            if n.starts_with(&prefix) {
                out.push(format!("{kind}/{n}"));
            }
        }
    }
    let addons = addons_api(lab);
    for kind in [
        "ciliumloadbalancerippools.cilium.io",
        "ciliuml2announcementpolicies.cilium.io",
    ] {
        for o in addons.list(kind, None) {
            out.push(format!("workload {kind}/{}", str_at(&o, "/metadata/name")));
        }
    }
    out
}

/// Scenario `recreate-at-once`: a MetalCluster deleted in the background
/// and applied again as soon as it is gone waits while its predecessor's
/// objects (Cluster, IPPool, templates) are torn down (`HostClaimed` False, reason
/// `PreviousTeardown`), instead of adopting them mid-teardown (in `lab
/// perf` the adopted pool's old address made IPAM refuse the new node's
/// claim for good), then comes up Ready on objects of its own.
pub(crate) fn recreate_at_once(lab: &Lab) -> Outcome {
    let who = R730;
    let s = seen(lab, who);
    check(s.phase == "Ready", || {
        format!("recreate-at-once needs {} Ready; seen {s:?}", who.xr)
    })?;
    let pool = format!("{}-pool", who.xr);
    let old_pool = get(lab, "ippool", &pool)
        .map(|p| uid(&p))
        .unwrap_or_default();
    delete_xr(lab, who, "--cascade=background")?;
    wait("the MetalCluster gone", 60, || {
        get(lab, "metalcluster", who.xr).is_none()
    })?;
    let cluster_left = get(lab, "clusters.cluster.x-k8s.io", &who.cluster()).is_some();
    lab.kube
        .apply(&[example_xr()?])
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut waited: Option<(f64, String)> = None;
    loop {
        let x = get(lab, "metalcluster", who.xr).unwrap_or(Value::Null);
        let claimed = x
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| str_at(c, "/type") == "HostClaimed"));
        if waited.is_none()
            && let Some(c) = claimed.filter(|c| str_at(c, "/reason") == "PreviousTeardown")
        {
            waited = Some((t.elapsed().as_secs_f64(), str_at(c, "/message").to_string()));
        }
        let s = seen(lab, who);
        if s.phase == "Ready" && s.reports_provisioned(who.host) {
            break;
        }
        if t.elapsed() > Duration::from_secs(420) {
            return Err(format!(
                "the new {} not Ready in 420 s (waited for the old objects: {waited:?}); seen {s:?}",
                who.xr
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let ready = t.elapsed().as_secs_f64();
    let (at, message) = waited.ok_or_else(|| {
        format!(
            "the new MetalCluster never waited for the old objects (the old Cluster was {} at its apply)",
            if cluster_left { "still there" } else { "already gone" }
        )
    })?;
    let xr_uid = get(lab, "metalcluster", who.xr)
        .map(|x| uid(&x))
        .unwrap_or_default();
    let p = get(lab, "ippool", &pool).ok_or("no IPPool")?;
    check(uid(&p) != old_pool, || {
        format!("the new MetalCluster adopted the old IPPool {pool} ({old_pool})")
    })?;
    let controller = p
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|r| str_at(r, "/uid").to_string());
    check(controller.as_deref() == Some(xr_uid.as_str()), || {
        format!("IPPool {pool} is controlled by {controller:?}, not the new MetalCluster {xr_uid}")
    })?;
    println!(
        "  waited {at:.1} s after the apply: {message}; Ready after {ready:.1} s on a new IPPool"
    );
    Ok(())
}
