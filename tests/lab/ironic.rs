//! Scenarios `ironic-provision` (with a single node's remediation),
//! `ironic-failure` and `ironic-remediate-worker`: the lab's BMO without
//! its demo provisioner, against real Ironic (xtask::lab::ironic), with
//! sushy-tools' fake Redfish systems as the BMCs and the lab's fake agent
//! as the ramdisk. The hosts come from the same description as the demo
//! inventory's (xtask::lab::hosts), turned into Ironic's by `for_ironic`.
//! The site is namespace `ironic`; BMO watches only it meanwhile
//! (`on_ironic`), so the demo hosts elsewhere are left alone.

use xtask::lab::install::{self, Provisioner};
use xtask::lab::ironic;

use super::*;

pub(crate) const IRONIC_NS: &str = "ironic";

/// A MetalCluster of the Ironic site and its pool's one host.
#[derive(Clone, Copy)]
struct Site {
    xr: &'static str,
    host: &'static str,
    /// Unique MACs and serials across the lab's inventories.
    n: usize,
    node_ip: &'static str,
}

const PROVISION: Site = Site {
    xr: "i1",
    host: "i1",
    n: 901,
    node_ip: "192.168.122.71",
};

const FAILURE: Site = Site {
    xr: "i2",
    host: "i2",
    n: 902,
    node_ip: "192.168.122.72",
};

/// The fleet whose worker is remediated through Ironic: one control
/// plane machine behind a VIP and a pool of one worker, each host its own
/// pool (`node_ip` unused: fleet machines take theirs from the ranges
/// `fleet_xr` gives).
const FLEET_CP: Site = Site {
    xr: "i3",
    host: "i3-cp",
    n: 903,
    node_ip: "",
};

const FLEET_WORKER: Site = Site {
    xr: "i3",
    host: "i3-w",
    n: 904,
    node_ip: "",
};

/// The file the failure's image URL names: absent (404) until the fault
/// is removed.
const LATE_IMAGE: &str = "late-node.raw";

fn host_docs(s: Site) -> [Value; 3] {
    xtask::lab::hosts::host_docs(IRONIC_NS, s.host, s.host, "eno1", s.n)
}

fn docs() -> Vec<Value> {
    let mut v =
        vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": IRONIC_NS}})];
    v.extend(host_docs(PROVISION));
    v.extend(host_docs(FAILURE));
    v.extend(host_docs(FLEET_CP));
    v.extend(host_docs(FLEET_WORKER));
    v
}

/// Ironic up with the site's servers and BMO against it for namespace
/// `ironic` only.
pub(crate) fn ironic_site_up(lab: &Lab) -> Outcome {
    let t = Instant::now();
    let (docs, systems) = ironic::for_ironic(&docs()).map_err(|e| e.to_string())?;
    // The namespace only: each scenario registers its own host.
    lab.kube.apply(&docs[..1]).map_err(|e| e.to_string())?;
    ironic::start(lab, &systems).map_err(|e| e.to_string())?;
    install::restart_bmo_with(lab, Some(IRONIC_NS), Provisioner::Ironic)
        .map_err(|e| e.to_string())?;
    println!(
        "  Ironic, sushy-tools ({} systems), the fake agent and the image server up, BMO against Ironic for namespace {IRONIC_NS}, in {:.1} s",
        systems.len(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The site removed, BMO back in demo mode for every namespace, Ironic
/// stopped.
pub(crate) fn ironic_site_down(lab: &Lab) -> Outcome {
    let removed = lab
        .kube
        .run(&[
            "delete",
            "namespace",
            IRONIC_NS,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=240s",
        ])
        .map(|_| ())
        .map_err(|e| e.to_string());
    let back = install::restart_bmo(lab, None).map_err(|e| e.to_string());
    ironic::stop(lab);
    removed.and(back)
}

fn host(lab: &Lab, s: Site) -> Option<Value> {
    lab.kube.get("baremetalhost", s.host, Some(IRONIC_NS))
}

fn state(lab: &Lab, s: Site) -> String {
    host(lab, s)
        .map(|h| str_at(&h, "/status/provisioning/state").to_string())
        .unwrap_or_default()
}

/// Registers the host and waits until Ironic has inspected it and BMO
/// calls it available; returns the BMO states it passed through.
fn enroll(lab: &Lab, s: Site) -> Result<Vec<String>, String> {
    let (docs, _) = ironic::for_ironic(&host_docs(s)).map_err(|e| e.to_string())?;
    lab.kube.apply(&docs).map_err(|e| e.to_string())?;
    let mut states: Vec<String> = Vec::new();
    wait(
        &format!("host {} available through Ironic", s.host),
        300,
        || {
            let st = state(lab, s);
            if !st.is_empty() && states.last() != Some(&st) {
                states.push(st.clone());
            }
            st == "available"
        },
    )
    .map_err(|e| format!("{e}; states {states:?}; {}", ironic_tail(lab)))?;
    Ok(states)
}

fn ironic_tail(lab: &Lab) -> String {
    let agent = lab.procs.tail("fake-agent", 8);
    let log = std::fs::read_to_string(ironic::log(lab)).unwrap_or_default();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    // BMO's own refusals (a 400 from Ironic's API) are not in Ironic's log.
    let bmo = std::fs::read_to_string(lab.procs.log_file("bmo")).unwrap_or_default();
    let refused: Vec<&str> = bmo
        .lines()
        .filter(|l| {
            l.contains("Reconciler error") && l.contains(&format!("\"namespace\":\"{IRONIC_NS}\""))
        })
        .collect();
    format!(
        "agent's last lines:\n{agent}\nIronic's last errors:\n{}\nBMO's last error:\n{}",
        errors[errors.len().saturating_sub(5)..].join("\n"),
        refused.last().unwrap_or(&"")
    )
}

/// What the agent logs once it wrote an image, its checksum good and the
/// config drive there.
const IMAGE_WRITTEN: &str = "written (sha256 ok), config drive present";

/// The agent's log lines about `host` containing `what`.
fn agent_lines(lab: &Lab, host: &str, what: &str) -> usize {
    std::fs::read_to_string(lab.procs.log_file("fake-agent"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&format!(" {host}: ")) && l.contains(what))
        .count()
}

/// The power state sushy-tools holds for the host's system.
fn sushy_power(s: Site) -> Result<String, String> {
    let mac = format!("18:66:da:00:{:02x}:{:02x}", s.n / 256, s.n % 256);
    let body = procs::http_get(
        ironic::REDFISH_PORT,
        &format!("/redfish/v1/Systems/{}", ironic::system_uuid(&mac)),
    )
    .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("sushy: {e}: {body}"))?;
    Ok(str_at(&v, "/PowerState").to_string())
}

fn site_xr(s: Site, image: Value) -> Result<Value, String> {
    let mut xr = example_xr()?;
    xr["metadata"]["name"] = json!(s.xr);
    xr["metadata"]["namespace"] = json!(IRONIC_NS);
    xr["spec"]["host"]["pool"] = json!(s.host);
    let net = &mut xr["spec"]["network"];
    net["nodeIP"] = json!(s.node_ip);
    net["gateway"] = json!("192.168.122.1");
    net["dnsServer"] = json!("192.168.122.1");
    // The health check's default waits 5 min: the lab's node is wedged
    // on purpose (the remediation through Ironic).
    xr["spec"]["health"] = json!({"unhealthyAfterSeconds": 30});
    let mut xr = ironic::with_lab_image(xr);
    xr["spec"]["kubernetes"]["imageURL"] = image;
    Ok(xr)
}

fn seen_at(lab: &Lab, s: Site) -> Observed {
    observe::observe(lab, IRONIC_NS, s.xr, s.host)
}

fn follow_site(
    lab: &Lab,
    s: Site,
    secs: u64,
    done: impl Fn(&Observed) -> bool,
) -> Result<Vec<(String, f64)>, String> {
    observe::follow(
        lab,
        (IRONIC_NS, s.xr, s.host),
        Duration::from_secs(secs),
        "  ",
        done,
    )
    .map_err(|e| format!("{e}; {}", ironic_tail(lab)))
}

/// Background delete: the cluster gone, each of its hosts cleaned by
/// Ironic, powered off (sushy-tools shows it), available, the inventory
/// intact.
fn delete_and_rest(lab: &Lab, xr: &str, hosts: &[Site]) -> Outcome {
    let names: Vec<&str> = hosts.iter().map(|h| h.host).collect();
    let inventory = Inventory::record(lab, IRONIC_NS, &names);
    let cleaned: Vec<usize> = hosts
        .iter()
        .map(|h| agent_lines(lab, h.host, "clean step"))
        .collect();
    lab.kube
        .run(&[
            "delete",
            "metalcluster",
            xr,
            "-n",
            IRONIC_NS,
            "--cascade=background",
            "--wait=false",
        ])
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut intact = Ok(());
    wait(
        &format!("{xr} gone and hosts {names:?} back in their pools, off"),
        420,
        || {
            if intact.is_ok() {
                intact = inventory_intact(lab, &inventory, t);
            }
            intact.is_err()
                || hosts.iter().all(|h| {
                    let o = seen_at(lab, *h);
                    o.gone && o.host_at_rest()
                })
        },
    )
    .map_err(|e| format!("{e}; {}", ironic_tail(lab)))?;
    intact?;
    let mut steps = 0;
    for (h, before) in hosts.iter().zip(cleaned) {
        let after = agent_lines(lab, h.host, "clean step");
        check(after > before, || {
            format!("Ironic ran no clean step on {} after the undeploy", h.host)
        })?;
        steps += after - before;
        let power = sushy_power(*h)?;
        check(power == "Off", || {
            format!("sushy-tools holds {} {power}, not Off", h.host)
        })?;
    }
    println!(
        "  {xr} deleted: hosts {names:?} cleaned ({steps} clean steps), Off in sushy-tools, available, inventory intact, in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The built-in example through Ironic to Ready: inspection data in
/// HardwareData (from the agent, under the names the MetalCluster uses),
/// cleaning once the deploy starts, a deploy with the config drive CAPM3's user data makes and
/// the image checked by its sha256; a wedged node remediated by a power
/// cycle through Ironic; then a background delete.
pub(crate) fn ironic_provision(lab: &Lab) -> Outcome {
    let s = PROVISION;
    let t = Instant::now();
    let states = enroll(lab, s)?;
    println!(
        "  host {} available in {:.0} s through {}",
        s.host,
        t.elapsed().as_secs_f64(),
        states.join(" -> ")
    );
    // Inspection takes Ironic about 20 s, so a poll sees it; `preparing`
    // (BMO's manual cleaning, nothing to do here) can pass between polls.
    check(states.iter().any(|st| st == "inspecting"), || {
        format!("host {} never went through inspecting: {states:?}", s.host)
    })?;
    let hw = lab
        .kube
        .get("hardwaredata", s.host, Some(IRONIC_NS))
        .ok_or("no HardwareData: BMO wrote none from the inspection")?;
    let nics = hw
        .pointer("/spec/hardware/nics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mac = format!("18:66:da:00:{:02x}:{:02x}", s.n / 256, s.n % 256);
    check(
        nics.iter()
            .any(|n| n["name"] == "eno1" && n["mac"] == mac.as_str())
            && nics.iter().any(|n| n["name"] == "eno2"),
        || format!("inspected NICs are not eno1 ({mac}) and eno2: {nics:?}"),
    )?;
    // The agent's CPU, not the demo description's: Ironic inspected it.
    let cpu = str_at(&hw, "/spec/hardware/cpu/model");
    check(cpu == "Intel(R) Xeon(R) Gold 6430", || {
        format!("HardwareData cpu.model {cpu:?} is not what the agent reported")
    })?;
    // BMO keeps an available host `manageable` in Ironic and provides it
    // (automated cleaning) only when a deploy starts.
    let cleaned = agent_lines(lab, s.host, "clean step");
    // The agent's log outlives a lab kept running: count from here.
    let written = agent_lines(lab, s.host, IMAGE_WRITTEN);
    lab.kube
        .apply(&[site_xr(
            s,
            json!(format!("{}/{}", ironic::images(), ironic::IMAGE)),
        )?])
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let phases = follow_site(lab, s, 600, |o| {
        o.phase == "Ready" && o.reports_provisioned(s.host)
    })?;
    phases_in_order(&phases)?;
    check(agent_lines(lab, s.host, "clean step") > cleaned, || {
        format!("Ironic ran no clean step on {} before its deploy", s.host)
    })?;
    check(
        agent_lines(lab, s.host, IMAGE_WRITTEN) == written + 1,
        || {
            format!(
                "the agent did not write {}'s image with its config drive once",
                s.host
            )
        },
    )?;
    let power = sushy_power(s)?;
    check(power == "On", || {
        format!("sushy-tools holds {} {power} while provisioned", s.host)
    })?;
    println!(
        "  Ready through Ironic in {:.0} s (image downloaded and sha256-checked, config drive written)",
        t.elapsed().as_secs_f64()
    );
    // Issue 22's remediation with the power cycle itself: Ironic powers
    // the host off and on through its BMC, and CAPM3 finishes on its own.
    let machine = machines_in(lab, IRONIC_NS, &format!("{}-cluster", s.xr))
        .into_iter()
        .next()
        .ok_or_else(|| format!("no Machine of {}", s.xr))?;
    day2_step("remediate (through Ironic)", || {
        remediate(
            lab,
            IRONIC_NS,
            s.xr,
            &machine,
            s.host,
            Power::Reported(&|| sushy_power(s)),
        )
    })?;
    delete_and_rest(lab, s.xr, &[s])
}

/// A deploy Ironic fails (the image server answers 404 for the image):
/// the XR shows HostError with Ironic's own message and one Warning, and
/// recovers once the image is served.
pub(crate) fn ironic_failure(lab: &Lab) -> Outcome {
    let s = FAILURE;
    let late = ironic::served_dir(lab).join(LATE_IMAGE);
    let _ = std::fs::remove_file(&late);
    enroll(lab, s)?;
    let before = warning_count_in(lab, IRONIC_NS, s.xr, "HostError");
    let url = format!("{}/{LATE_IMAGE}", ironic::images());
    lab.kube
        .apply(&[site_xr(s, json!(url))?])
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let get_xr = || {
        lab.kube
            .get("metalcluster", s.xr, Some(IRONIC_NS))
            .unwrap_or(Value::Null)
    };
    wait("the XR in HostError with Ironic's message", 300, || {
        let x = get_xr();
        let (status, reason, msg) = xr_condition(&x, "HostHealthy");
        str_at(&x, "/status/phase") == "HostError"
            && status == "False"
            && reason == "HostError"
            && msg.contains("404")
            && msg.contains(LATE_IMAGE)
            && str_at(&x, "/status/host/errorType") == "provisioning error"
    })
    .map_err(|e| {
        let x = get_xr();
        format!(
            "{e}: phase {:?}, HostHealthy {:?}; {}",
            str_at(&x, "/status/phase"),
            xr_condition(&x, "HostHealthy"),
            ironic_tail(lab)
        )
    })?;
    let x = get_xr();
    println!(
        "  Ironic's failure shown in {:.0} s: {}",
        t.elapsed().as_secs_f64(),
        xr_condition(&x, "HostHealthy").2
    );
    std::thread::sleep(Duration::from_secs(3));
    let at_transition = warning_count_in(lab, IRONIC_NS, s.xr, "HostError").saturating_sub(before);
    // Two reconciles that read the XR before either wrote the condition
    // may both announce the one transition; BMO's retries add none.
    check((1..=2).contains(&at_transition), || {
        format!("{at_transition} HostError Warning events at the failure, not one")
    })?;
    // The fault removed: BMO retries the deploy, which now succeeds.
    std::fs::write(&late, ironic::image().0).map_err(|e| e.to_string())?;
    let t = Instant::now();
    wait("the XR Ready again, HostHealthy True", 600, || {
        let x = get_xr();
        str_at(&x, "/status/phase") == "Ready"
            && xr_condition(&x, "HostHealthy").0 == "True"
            && x.pointer("/status/host/errorType").is_none()
            && seen_at(lab, s).reports_provisioned(s.host)
    })
    .map_err(|e| format!("{e}; {}", ironic_tail(lab)))?;
    let warnings = warning_count_in(lab, IRONIC_NS, s.xr, "HostError").saturating_sub(before);
    check(warnings == at_transition, || {
        format!("{warnings} HostError Warnings after the retries, {at_transition} at the failure")
    })?;
    println!(
        "  recovered once the image was served: Ready in {:.0} s, {warnings} Warning in all",
        t.elapsed().as_secs_f64()
    );
    delete_and_rest(lab, s.xr, &[s])
}

/// The built-in example as a fleet on the Ironic site: its control plane
/// one machine behind a VIP, one worker pool of one, in the site's subnet.
fn fleet_xr() -> Result<Value, String> {
    let mut xr = site_xr(
        FLEET_CP,
        json!(format!("{}/{}", ironic::images(), ironic::IMAGE)),
    )?;
    if let Some(n) = xr["spec"]["network"].as_object_mut() {
        n.remove("nodeIP");
    }
    xr["spec"]["controlPlane"] = json!({
        "replicas": 1,
        "endpoint": "192.168.122.80",
        "addresses": "192.168.122.81-192.168.122.82",
    });
    xr["spec"]["workers"] = json!([{
        "name": "w",
        "replicas": 1,
        "pool": FLEET_WORKER.host,
        "addresses": "192.168.122.90-192.168.122.91",
    }]);
    Ok(xr)
}

/// Issue 22's `remediate` for a worker, with the power cycle itself: a
/// fleet whose two hosts Ironic inspected and deployed; the worker's node
/// wedged is remediated by its pool's health check, Ironic powers its host
/// off and on, CAPM3 finishes on its own, and the control plane machine
/// and its host are untouched; then a background delete returns both
/// hosts.
pub(crate) fn ironic_remediate_worker(lab: &Lab) -> Outcome {
    let hosts = [FLEET_CP, FLEET_WORKER];
    let t = Instant::now();
    std::thread::scope(|sc| {
        let enrolling: Vec<_> = hosts.iter().map(|h| sc.spawn(|| enroll(lab, *h))).collect();
        enrolling.into_iter().try_for_each(|e| {
            e.join()
                .unwrap_or_else(|_| Err("an enrolment panicked".into()))
                .map(|_| ())
        })
    })?;
    println!(
        "  hosts {} and {} available through Ironic in {:.0} s",
        FLEET_CP.host,
        FLEET_WORKER.host,
        t.elapsed().as_secs_f64()
    );
    let xr = FLEET_CP.xr;
    lab.kube.apply(&[fleet_xr()?]).map_err(|e| e.to_string())?;
    let t = Instant::now();
    wait(
        &format!("{xr} Ready with 2/2 nodes through Ironic"),
        600,
        || {
            lab.kube
                .get("metalcluster", xr, Some(IRONIC_NS))
                .is_some_and(|x| {
                    str_at(&x, "/status/phase") == "Ready" && str_at(&x, "/status/nodes") == "2/2"
                })
        },
    )
    .map_err(|e| format!("{e}; {}", ironic_tail(lab)))?;
    println!(
        "  {xr} Ready (2/2) through Ironic in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let cluster = format!("{xr}-cluster");
    let machines = machines_in(lab, IRONIC_NS, &cluster);
    let set = |name: &str| {
        machines
            .iter()
            .find(|m| m.set == name)
            .cloned()
            .ok_or_else(|| format!("no Machine of set {name}: {machines:?}"))
    };
    let worker = set(&format!("{cluster}-w"))?;
    let cp = set("controlplane")?;
    // The worker's host: the one CAPM3 claimed for its Metal3Machine.
    let claimed = |h: Site, m: &MachineSeen| {
        host(lab, h).is_some_and(|b| str_at(&b, "/spec/consumerRef/name") == m.infra)
    };
    check(
        claimed(FLEET_WORKER, &worker) && claimed(FLEET_CP, &cp),
        || {
            format!(
                "the worker {} is not on {} nor the control plane {} on {}",
                worker.name, FLEET_WORKER.host, cp.name, FLEET_CP.host
            )
        },
    )?;
    day2_step("remediate (a worker, through Ironic)", || {
        remediate(
            lab,
            IRONIC_NS,
            xr,
            &worker,
            FLEET_WORKER.host,
            Power::Reported(&|| sushy_power(FLEET_WORKER)),
        )
    })?;
    let cp_now = machines_in(lab, IRONIC_NS, &cluster)
        .into_iter()
        .find(|m| m.name == cp.name);
    check(
        cp_now.as_ref().is_some_and(|m| m.uid == cp.uid && m.ready),
        || format!("the control plane machine changed: {cp_now:?}, was {cp:?}"),
    )?;
    let power = sushy_power(FLEET_CP)?;
    check(power == "On", || {
        format!("the control plane's host {} is {power}", FLEET_CP.host)
    })?;
    delete_and_rest(lab, xr, &hosts)
}
