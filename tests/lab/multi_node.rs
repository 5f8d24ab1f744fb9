//! Scenario `multi-node`: a fleet (HA control plane and worker pools) from apply to Ready, scaled up and down, and deleted.

use super::*;

/// The multi-node MetalCluster: the repository's fleet example (three
/// control plane machines behind a VIP, a gpu pool of two and a cpu pool of
/// one) on seven simulated hosts of three pools.
pub(crate) const RACK: &str = "rack1";

pub(crate) const RACK_POOLS: [(&str, &str, usize); 3] = [
    ("rack1-cp", "eno1", 3),
    ("rack1-gpu", "eno1np0", 3),
    ("rack1-cpu", "eno1", 1),
];

pub(crate) fn rack_host_names() -> Vec<String> {
    RACK_POOLS
        .iter()
        .flat_map(|(pool, _, n)| (1..=*n).map(move |i| format!("{pool}-{i}")))
        .collect()
}

/// The rack's hosts in BMO's namespace, inspection disabled and their
/// HardwareData given (NIC names as the example's boot interfaces).
pub(crate) fn rack_hosts() -> Vec<Value> {
    let mut docs = Vec::new();
    let mut n = 0;
    for (pool, nic, count) in RACK_POOLS {
        for i in 1..=count {
            n += 1;
            docs.extend(xtask::lab::hosts::host_docs(
                NS,
                &format!("{pool}-{i}"),
                pool,
                nic,
                n,
            ));
        }
    }
    docs
}

pub(crate) fn rack_xr() -> Result<Value, String> {
    let path = xtask::repo_root().join("examples/metalcluster/fleet.yaml");
    let mut xr = xtask::lab::kube::load_yaml(&path)
        .map_err(|e| e.to_string())?
        .into_iter()
        .next()
        .ok_or("the fleet example is empty")?;
    xr["spec"]["workers"][0]["pool"] = json!("rack1-gpu");
    // H200s as NVML reports them, and the lab's installer (a stub the
    // first-boot sandbox downloads) with its checksum.
    xr["spec"]["workers"][0]["gpu"] = lab_gpu();
    // Datacenter networking: the gpu pool bonds its two NICs (LACP) with
    // the address on VLAN 100 and jumbo frames; the cpu pool puts it on
    // VLAN 100 of its NIC; the control plane keeps a plain NIC.
    xr["spec"]["workers"][0]["bond"] = json!({"interfaces": ["eno1np0", "eno2np0"]});
    xr["spec"]["workers"][0]["vlan"] = json!(100);
    xr["spec"]["workers"][0]["mtu"] = json!(9000);
    xr["spec"]["workers"][1]["vlan"] = json!(100);
    xr["spec"]["cni"] = json!({"chartRepository": xtask::lab::charts::repository()});
    // The lab's wedged node is remediated after 30 s, not 5 minutes.
    xr["spec"]["health"] = json!({"unhealthyAfterSeconds": 30});
    Ok(xr)
}

/// What the rack looks like now: the XR's phase and nodes, and per host
/// (state, powered on, consumer).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RackSeen {
    pub(crate) phase: String,
    pub(crate) nodes: String,
    pub(crate) listed: usize,
    pub(crate) hosts: BTreeMap<String, (String, bool, String)>,
}

pub(crate) fn rack_seen(lab: &Lab) -> RackSeen {
    let x = get(lab, "metalcluster", RACK).unwrap_or(Value::Null);
    let hosts = lab
        .kube
        .list("baremetalhosts", Some(NS))
        .into_iter()
        .filter(|h| str_at(h, "/metadata/name").starts_with("rack1-"))
        .map(|h| {
            (
                str_at(&h, "/metadata/name").to_string(),
                (
                    str_at(&h, "/status/provisioning/state").to_string(),
                    h.pointer("/status/poweredOn").and_then(Value::as_bool) == Some(true),
                    str_at(&h, "/spec/consumerRef/name").to_string(),
                ),
            )
        })
        .collect();
    RackSeen {
        phase: str_at(&x, "/status/phase").to_string(),
        nodes: str_at(&x, "/status/nodes").to_string(),
        listed: x
            .pointer("/status/hosts")
            .and_then(Value::as_array)
            .map_or(0, Vec::len),
        hosts,
    }
}

/// Polls the rack until `done`, printing every change.
pub(crate) fn follow_rack(
    lab: &Lab,
    what: &str,
    secs: u64,
    done: impl Fn(&RackSeen) -> bool,
) -> Result<f64, String> {
    let t = Instant::now();
    let mut last: Option<RackSeen> = None;
    loop {
        let s = rack_seen(lab);
        if last.as_ref().map(|l| (&l.phase, &l.nodes, l.listed))
            != Some((&s.phase, &s.nodes, s.listed))
        {
            let provisioned = s.hosts.values().filter(|h| h.0 == "provisioned").count();
            println!(
                "  {:>6.1}s phase={} nodes={} hosts listed={} provisioned={provisioned}",
                t.elapsed().as_secs_f64(),
                s.phase,
                s.nodes,
                s.listed
            );
        }
        if done(&s) {
            return Ok(t.elapsed().as_secs_f64());
        }
        if t.elapsed() > Duration::from_secs(secs) {
            return Err(format!("{what}: timed out after {secs} s; last seen {s:?}"));
        }
        last = Some(s);
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The hosts whose BareMetalHost is protected by a Usage.
pub(crate) fn protected_hosts(lab: &Lab) -> Vec<String> {
    let mut out: Vec<String> = lab
        .kube
        .list("usages.protection.crossplane.io", Some(NS))
        .iter()
        .filter(|u| str_at(u, "/spec/of/kind") == "BareMetalHost")
        .map(|u| str_at(u, "/spec/of/resourceRef/name").to_string())
        .collect();
    out.sort();
    out
}

/// Patches the gpu pool's replicas (a JSON patch: a merge patch would
/// replace the whole list).
pub(crate) fn scale_gpu(lab: &Lab, replicas: u32) -> Outcome {
    patch_rack(
        lab,
        &json!([
            {"op": "test", "path": "/spec/workers/0/name", "value": "gpu"},
            {"op": "replace", "path": "/spec/workers/0/replicas", "value": replicas},
        ]),
    )
    .map(|_| ())
}

/// A JSON patch of the rack (list items by index; a merge patch would
/// replace the whole list).
pub(crate) fn patch_rack(lab: &Lab, patch: &Value) -> Result<String, String> {
    lab.kube
        .run(&[
            "patch",
            "metalcluster",
            RACK,
            "-n",
            NS,
            "--type=json",
            "-p",
            &patch.to_string(),
        ])
        .map_err(|e| e.to_string())
}

/// One day-2 scenario inside multi-node, timed and named in the output
/// and in a failure.
pub(crate) fn day2_step(name: &str, f: impl FnOnce() -> Outcome) -> Outcome {
    let t = Instant::now();
    println!("  scenario {name} ...");
    let out = f().map_err(|e| format!("{name}: {e}"));
    println!(
        "  scenario {name} ... {} ({:.0} s)",
        if out.is_ok() { "ok" } else { "FAILED" },
        t.elapsed().as_secs_f64()
    );
    out
}

pub(crate) fn is_fleet_field(path: &str) -> bool {
    path.starts_with("controlPlane") || path.starts_with("workers")
}

/// Every refused field of the fleet form, edited live on the Ready rack
/// (JSON patches: list items by index), each refused by the API server with
/// a message naming it and what to do instead; the spec unchanged.
pub(crate) fn fleet_refused_edits(lab: &Lab) -> Outcome {
    let refused: [(&str, Value); 5] = [
        (
            "controlPlane",
            json!({"op": "remove", "path": "/spec/controlPlane"}),
        ),
        (
            "controlPlane.endpoint",
            json!({"op": "replace", "path": "/spec/controlPlane/endpoint", "value": "10.40.8.25"}),
        ),
        (
            "controlPlane.addresses",
            json!({"op": "replace", "path": "/spec/controlPlane/addresses", "value": "10.40.8.21-10.40.8.27"}),
        ),
        (
            "workers[].pool",
            json!({"op": "replace", "path": "/spec/workers/0/pool", "value": "rack1-cpu"}),
        ),
        (
            "workers[].addresses",
            json!({"op": "replace", "path": "/spec/workers/0/addresses", "value": "10.40.8.30-10.40.8.38"}),
        ),
    ];
    every_refused_field_edited(refused.iter().map(|(p, _)| *p), true)?;
    let generation =
        get(lab, "metalcluster", RACK).and_then(|x| x.pointer("/metadata/generation").cloned());
    for (path, op) in &refused {
        let patch = json!([{"op": "test", "path": "/spec/workers/0/name", "value": "gpu"}, op]);
        let Err(e) = patch_rack(lab, &patch) else {
            return Err(format!("editing spec.{path} was accepted"));
        };
        let says = format!("spec.{path} cannot");
        check(
            e.contains(&says)
                && (e.contains("create a new MetalCluster")
                    || e.contains(metalplane::fields::POOL_INSTEAD)),
            || {
                format!(
                    "editing spec.{path}: the refusal does not say {says:?} and what to do: {e}"
                )
            },
        )?;
    }
    let now =
        get(lab, "metalcluster", RACK).and_then(|x| x.pointer("/metadata/generation").cloned());
    check(now == generation, || {
        "a refused edit changed the spec".into()
    })?;
    println!(
        "  {} refused edits of the fleet's fields, each refused by the API server naming its field",
        refused.len()
    );
    Ok(())
}

/// A 3 + 2 + 1 cluster reaches Ready with every node; day 2 on it
/// (`upgrade`, `pool-roll`, `remediate`, see day2.rs); the gpu pool scales
/// 2 -> 3 -> 2 (the freed host deprovisioned, powered off and back in its
/// pool); deleting the MetalCluster returns every host, inventory intact.
pub(crate) fn multi_node(lab: &Lab) -> Outcome {
    apply_inventory(lab)?;
    lab.kube.apply(&rack_hosts()).map_err(|e| e.to_string())?;
    let names = rack_host_names();
    wait("the rack's seven hosts available", 240, || {
        let s = rack_seen(lab);
        names
            .iter()
            .all(|n| s.hosts.get(n).is_some_and(|h| h.0 == "available"))
    })?;
    let hosts: Vec<&str> = names.iter().map(String::as_str).collect();
    let inventory = Inventory::record(lab, NS, &hosts);
    let decoy_before = get(lab, "baremetalhost", DECOY).ok_or("decoy host missing")?;

    lab.kube.apply(&[rack_xr()?]).map_err(|e| e.to_string())?;
    let up = follow_rack(
        lab,
        "3 control plane + 2 gpu + 1 cpu nodes Ready",
        900,
        |s| s.phase == "Ready" && s.nodes == "6/6" && s.listed == 6,
    )?;
    let x = get(lab, "metalcluster", RACK).ok_or("rack1 missing")?;
    let pools: Vec<&str> = x["status"]["hosts"]
        .as_array()
        .map(|a| a.iter().map(|h| str_at(h, "/pool")).collect())
        .unwrap_or_default();
    for (pool, _, n) in RACK_POOLS {
        let want = if pool == "rack1-gpu" { 2 } else { n };
        check(pools.iter().filter(|p| **p == pool).count() == want, || {
            format!("status.hosts of pool {pool}: {pools:?}")
        })?;
    }
    check(
        str_at(&x, "/status/controlPlaneEndpoint") == "10.40.8.20:6443",
        || format!("endpoint {}", str_at(&x, "/status/controlPlaneEndpoint")),
    )?;
    let claimed: Vec<String> = rack_seen(lab)
        .hosts
        .iter()
        .filter(|(_, h)| !h.2.is_empty())
        .map(|(n, _)| n.clone())
        .collect();
    wait("a Usage protects each claimed host", 60, || {
        protected_hosts(lab) == claimed
    })
    .map_err(|e| format!("{e}: {:?} vs {claimed:?}", protected_hosts(lab)))?;
    println!("  Ready with 6/6 nodes after {up:.1} s; Usages protect {claimed:?}");
    day2_step("node-config", || {
        let booted = check_node_configs(lab, NS, &format!("{RACK}-cluster"))?;
        println!(
            "  cloud-init: {} machines' user data rendered and schema-valid, network data converted to netplan (addresses on {}), names as kube-vip's and the L2 policy's",
            booted.len(),
            booted
                .iter()
                .map(|b| b.iface.as_str())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(", ")
        );
        let gpu = booted
            .iter()
            .find(|b| b.host.starts_with("rack1-gpu"))
            .ok_or("no gpu machine")?;
        first_boot_fails_closed(lab, gpu)
    })?;
    fleet_refused_edits(lab)?;
    day2_step("upgrade", || upgrade(lab, &inventory))?;
    day2_step("pool-roll", || pool_roll(lab, &inventory))?;
    day2_step("remediate", || remediate_worker(lab))?;

    scale_gpu(lab, 3)?;
    let t = follow_rack(lab, "gpu pool scaled to 3", 600, |s| {
        s.phase == "Ready" && s.nodes == "7/7" && s.listed == 7
    })?;
    println!("  gpu pool 2 -> 3: Ready with 7/7 nodes after {t:.1} s");

    scale_gpu(lab, 2)?;
    let t = follow_rack(lab, "gpu pool scaled back to 2", 600, |s| {
        let freed = s
            .hosts
            .iter()
            .filter(|(n, h)| {
                n.starts_with("rack1-gpu") && h.0 == "available" && !h.1 && h.2.is_empty()
            })
            .count();
        s.phase == "Ready" && s.nodes == "6/6" && s.listed == 6 && freed == 1
    })?;
    let freed: Vec<String> = rack_seen(lab)
        .hosts
        .into_iter()
        .filter(|(n, h)| n.starts_with("rack1-gpu") && h.2.is_empty())
        .map(|(n, _)| n)
        .collect();
    wait("the freed host's Usage gone", 60, || {
        !protected_hosts(lab).iter().any(|p| freed.contains(p)) && protected_hosts(lab).len() == 6
    })
    .map_err(|e| format!("{e}: {:?}", protected_hosts(lab)))?;
    println!(
        "  gpu pool 3 -> 2: Ready with 6/6 after {t:.1} s; {freed:?} deprovisioned, off, back in pool rack1-gpu"
    );

    lab.kube
        .run(&[
            "delete",
            "metalcluster",
            RACK,
            "-n",
            NS,
            "--cascade=foreground",
            "--wait=false",
        ])
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    loop {
        inventory_intact(lab, &inventory, t)?;
        let s = rack_seen(lab);
        let home = s
            .hosts
            .values()
            .all(|h| h.0 == "available" && !h.1 && h.2.is_empty());
        if get(lab, "metalcluster", RACK).is_none() && home {
            break;
        }
        if t.elapsed() > Duration::from_secs(600) {
            return Err(format!("teardown did not finish in 600 s: {s:?}"));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    println!(
        "  deleted: every host available, off and unclaimed after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    wait("nothing of rack1's cluster left", 120, || {
        observe::leftovers(lab, NS, RACK).is_ok_and(|l| l.is_empty())
    })
    .map_err(|e| format!("{e}: {:?}", observe::leftovers(lab, NS, RACK)))?;
    decoy_untouched(lab, &decoy_before)
}
