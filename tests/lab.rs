//! Scenarios on the lab: a real management cluster (etcd, kube-apiserver,
//! kube-controller-manager, Crossplane core, Cluster API, CAPM3, IPAM, BMO
//! in demo mode, our function over mTLS) started by `cargo xtask lab up`.
//! Each scenario asserts what the cluster shows, not what we rendered.
//!
//! One harness-less binary: the scenarios share one lab and run in order
//! (each starts from an empty namespace), and the lab is stopped at the end
//! unless METALPLANE_LAB_KEEP is set.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use xtask::lab::kube::{condition, str_at};
use xtask::lab::{Lab, procs};

const NS: &str = "metal";
const XR: &str = "r730";
const HOST: &str = "r730";
const DECOY: &str = "decoy";

/// A MetalCluster and the host it claims (its pool has that one host).
#[derive(Clone, Copy, Debug)]
struct Subject {
    xr: &'static str,
    host: &'static str,
    /// Whether it joins the Modelplane fleet (then it ends in JoiningFleet:
    /// no Modelplane controller runs in the lab).
    fleet: bool,
}

const R730: Subject = Subject {
    xr: XR,
    host: HOST,
    fleet: false,
};
/// examples/metalcluster/r730-inference.yaml, moved to the r740 host.
const R740: Subject = Subject {
    xr: "r740",
    host: "r740",
    fleet: true,
};

impl Subject {
    fn cluster(&self) -> String {
        format!("{}-cluster", self.xr)
    }

    /// Whether a composed object's name is this MetalCluster's.
    fn owns(&self, name: &str) -> bool {
        name.starts_with(&format!("{}-", self.xr))
    }

    /// The phase it settles in.
    fn settled(&self) -> &'static str {
        if self.fleet { "JoiningFleet" } else { "Ready" }
    }
}
const FUNCTION: &str = "kube-farm-function-metalplane";

type Outcome = Result<(), String>;
type Scenario = (&'static str, fn(&Lab) -> Outcome);

fn main() -> ExitCode {
    let started = Instant::now();
    let lab = match Lab::open().and_then(|lab| lab.up().map(|_| lab)) {
        Ok(lab) => lab,
        Err(e) => {
            eprintln!("lab: cannot start the lab: {e}");
            return ExitCode::FAILURE;
        }
    };
    let scenarios: [Scenario; 13] = [
        ("install", install),
        ("provision", provision),
        ("operation", operation),
        ("operation-any-namespace", operation_any_namespace),
        ("hosts-on-their-way", hosts_on_their_way),
        ("edits", edits),
        ("host-error", host_error),
        ("fleet-and-secrets", fleet_and_secrets),
        ("fleet-teardown", |l| teardown(l, R740, true)),
        ("teardown-background", |l| teardown(l, R730, false)),
        ("bad-input-then-function-restart", bad_input_and_restart),
        ("teardown-foreground", |l| teardown(l, R730, true)),
        ("multi-node", multi_node),
    ];
    // METALPLANE_LAB_ONLY=a,b runs just those scenarios (while developing
    // one; each leaves the lab as the next expects only in the full run).
    let only: Option<Vec<String>> = std::env::var("METALPLANE_LAB_ONLY")
        .ok()
        .map(|s| s.split(',').map(str::to_string).collect());
    let mut failed = Vec::new();
    for (name, run) in scenarios {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let t = Instant::now();
        println!("scenario {name} ...");
        match run(&lab) {
            Ok(()) => println!(
                "scenario {name} ... ok ({:.0} s)",
                t.elapsed().as_secs_f64()
            ),
            Err(e) => {
                println!(
                    "scenario {name} ... FAILED ({:.0} s)\n  {e}",
                    t.elapsed().as_secs_f64()
                );
                println!("{}", failure_report(&lab));
                failed.push(name);
                // Later scenarios build on this one's end state.
                break;
            }
        }
    }
    if failed.is_empty() && std::env::var_os("METALPLANE_LAB_KEEP").is_none() {
        if let Err(e) = lab.down() {
            eprintln!("lab: down: {e}");
        }
    } else {
        eprintln!("lab: left running for inspection (cargo xtask lab down stops it)");
    }
    println!(
        "lab scenarios: {} failed, {:.0} s in all",
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What CI shows of a failed scenario, since the lab dies with the CI
/// machine: every lab process (alive or not, a dead one's last lines), and
/// each host of the inventory that is not at rest with its errors,
/// annotations and BMO's last lines about it.
fn failure_report(lab: &Lab) -> String {
    let mut out = String::from("  lab state at the failure:\n");
    let mut procs = lab.procs.started();
    procs.sort();
    let (up, down): (Vec<String>, Vec<String>) = procs
        .into_iter()
        .partition(|p| lab.procs.running(p).is_some());
    out += &format!("    processes running: {}\n", up.join(", "));
    for p in &down {
        out += &format!("    process {p} is not running; its log ends:\n");
        for l in lab.procs.tail(p, 15).lines() {
            out += &format!("      {l}\n");
        }
    }
    let bmo_log = std::fs::read_to_string(lab.procs.log_file("bmo")).unwrap_or_default();
    for h in lab.kube.list("baremetalhosts", Some(NS)) {
        let name = str_at(&h, "/metadata/name");
        let state = str_at(&h, "/status/provisioning/state");
        let consumer = str_at(&h, "/spec/consumerRef/name");
        if matches!(state, "available" | "provisioned") {
            continue;
        }
        let annotations: Vec<&String> = h
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .map(|a| a.keys().collect())
            .unwrap_or_default();
        out += &format!(
            "    host {name}: state={state} consumer={consumer:?} online={} poweredOn={} image={:?} \
             errorType={:?} errorMessage={:?} errorCount={} operationalStatus={} annotations={annotations:?}\n",
            h.pointer("/spec/online").unwrap_or(&Value::Null),
            h.pointer("/status/poweredOn").unwrap_or(&Value::Null),
            str_at(&h, "/spec/image/url"),
            str_at(&h, "/status/errorType"),
            str_at(&h, "/status/errorMessage"),
            h.pointer("/status/errorCount").unwrap_or(&Value::Null),
            str_at(&h, "/status/operationalStatus"),
        );
        let quoted = format!("\"{name}\"");
        let lines: Vec<&str> = bmo_log.lines().filter(|l| l.contains(&quoted)).collect();
        out += &format!(
            "      BMO's last lines about {name} (of {}):\n",
            lines.len()
        );
        for l in &lines[lines.len().saturating_sub(12)..] {
            out += &format!("      {l}\n");
        }
    }
    out
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Outcome {
    if ok { Ok(()) } else { Err(what()) }
}

fn wait(what: &str, secs: u64, f: impl FnMut() -> bool) -> Outcome {
    procs::wait_for(what, Duration::from_secs(secs), f).map_err(|e| e.to_string())
}

fn get(lab: &Lab, kind: &str, name: &str) -> Option<Value> {
    lab.kube.get(kind, name, Some(NS))
}

fn is_true(obj: &Option<Value>, cond: &str) -> bool {
    obj.as_ref().and_then(|o| condition(o, cond)).as_deref() == Some("True")
}

fn uid(v: &Value) -> String {
    str_at(v, "/metadata/uid").to_string()
}

/// The Composition and the WatchOperation resolve an installed Function,
/// installed by the package manager from the Configuration's dependency.
fn install(lab: &Lab) -> Outcome {
    let f = lab.kube.get("functions.pkg.crossplane.io", FUNCTION, None);
    check(is_true(&f, "Installed") && is_true(&f, "Healthy"), || {
        format!("Function {FUNCTION} is not installed and healthy: {f:?}")
    })?;
    let conf = lab.kube.get(
        "configurations.pkg.crossplane.io",
        "configuration-metalplane",
        None,
    );
    check(is_true(&conf, "Healthy"), || {
        format!("Configuration configuration-metalplane is not healthy: {conf:?}")
    })?;
    let xrd = lab.kube.get(
        "compositeresourcedefinitions",
        "metalclusters.metal.kube.farm",
        None,
    );
    check(is_true(&xrd, "Established"), || {
        "the MetalCluster XRD is not established".into()
    })?;
    let functions: Vec<String> = lab
        .kube
        .list("functions.pkg.crossplane.io", None)
        .iter()
        .map(|f| str_at(f, "/metadata/name").to_string())
        .collect();
    let mut refs = Vec::new();
    for c in lab.kube.list("compositions", None) {
        if str_at(&c, "/spec/compositeTypeRef/kind") == "MetalCluster" {
            for s in c
                .pointer("/spec/pipeline")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                refs.push(("Composition", str_at(s, "/functionRef/name").to_string()));
            }
        }
    }
    for w in lab.kube.list("watchoperations", None) {
        for s in w
            .pointer("/spec/operationTemplate/spec/pipeline")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            refs.push(("WatchOperation", str_at(s, "/functionRef/name").to_string()));
        }
    }
    check(refs.iter().any(|(k, _)| *k == "Composition"), || {
        "no MetalCluster Composition installed".into()
    })?;
    check(refs.iter().any(|(k, _)| *k == "WatchOperation"), || {
        "no WatchOperation installed".into()
    })?;
    for (kind, name) in &refs {
        check(functions.contains(name), || {
            format!("the {kind} references function {name}, but installed are {functions:?}")
        })?;
    }
    println!(
        "  Function {FUNCTION} installed and healthy; {} function references resolve",
        refs.len()
    );
    Ok(())
}

/// One line of the live view: the XR's phase and host flag, the host.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    phase: String,
    host_flag: bool,
    host_state: String,
    consumer: String,
}

fn seen(lab: &Lab, who: Subject) -> Seen {
    let x = get(lab, "metalcluster", who.xr).unwrap_or(Value::Null);
    let h = get(lab, "baremetalhost", who.host).unwrap_or(Value::Null);
    Seen {
        phase: str_at(&x, "/status/phase").to_string(),
        host_flag: str_at(&x, "/status/host/name") == who.host
            && str_at(&x, "/status/host/provisioningState") == "provisioned",
        host_state: str_at(&h, "/status/provisioning/state").to_string(),
        consumer: str_at(&h, "/spec/consumerRef/name").to_string(),
    }
}

/// Polls until `done`, recording the time each XR phase first appeared.
fn follow(
    lab: &Lab,
    who: Subject,
    secs: u64,
    done: impl Fn(&Seen) -> bool,
) -> Result<Vec<(String, f64)>, String> {
    let t = Instant::now();
    let mut phases: Vec<(String, f64)> = Vec::new();
    let mut last = None;
    loop {
        let s = seen(lab, who);
        if last.as_ref() != Some(&s) {
            println!(
                "  {:>6.1}s phase={} host={} bmh={} consumer={}",
                t.elapsed().as_secs_f64(),
                s.phase,
                s.host_flag,
                s.host_state,
                s.consumer
            );
            if !s.phase.is_empty() && phases.last().map(|p| &p.0) != Some(&s.phase) {
                phases.push((s.phase.clone(), t.elapsed().as_secs_f64()));
            }
            last = Some(s.clone());
        }
        if done(&s) {
            return Ok(phases);
        }
        if t.elapsed() > Duration::from_secs(secs) {
            return Err(format!("timed out after {secs} s; last seen {s:?}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A lab kept from an earlier run (METALPLANE_LAB_KEEP) may still hold the
/// MetalCluster: delete it and wait for its host, so every run starts from
/// the same state.
fn clean_slate(lab: &Lab, who: Subject) -> Outcome {
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

fn apply_inventory(lab: &Lab) -> Outcome {
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

fn example_xr() -> Result<Value, String> {
    xtask::lab::demo::example_xr().map_err(|e| e.to_string())
}

/// The phases this lab can reach, in the order the XR must show them.
const PHASE_ORDER: [&str; 7] = [
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
fn phases_in_order(phases: &[(String, f64)]) -> Outcome {
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

/// Inventory + MetalCluster: the right host claimed and provisioned, the
/// phases in order up to Ready (the Cilium Release installed into the
/// workload API), `status.host` true, the decoy untouched.
fn provision(lab: &Lab) -> Outcome {
    clean_slate(lab, R740)?;
    clean_slate(lab, R730)?;
    apply_inventory(lab)?;
    let decoy_before = get(lab, "baremetalhost", DECOY).ok_or("decoy host missing")?;
    lab.kube
        .apply(&[example_xr()?])
        .map_err(|e| e.to_string())?;
    let phases = follow(lab, R730, 600, |s| s.phase == "Ready" && s.host_flag)?;
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
    decoy_untouched(lab, &decoy_before)
}

fn decoy_untouched(lab: &Lab, before: &Value) -> Outcome {
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

/// BMO's demo provisioner keeps the host of this name in `provisioning`
/// (its other hosts provision at once), as a real host sits there for
/// minutes while its image is written.
const PROVISIONING_HOST: &str = "demo-provisioning";

/// A Dell host that enters `provisioning` gets the remediation Job in its
/// namespace, its BMC credentials by secretKeyRef only, from the package the
/// function was installed from. The host is real inventory to BMO (webhook,
/// state machine); it belongs to no pool a MetalCluster names.
fn operation(lab: &Lab) -> Outcome {
    let mut docs =
        xtask::lab::hosts::host_docs(NS, PROVISIONING_HOST, "by-hand", "eno1", 900).to_vec();
    docs[1]["spec"]["online"] = json!(true);
    docs[1]["spec"]["image"] = json!({
        "url": "http://192.168.120.9/images/ubuntu-24.04.qcow2",
        "checksum": "http://192.168.120.9/images/ubuntu-24.04.qcow2.sha256sum",
        "checksumType": "sha256",
        "format": "qcow2",
    });
    let prefix = format!("{PROVISIONING_HOST}-provis");
    let ours = |lab: &Lab| -> Vec<Value> {
        lab.kube
            .list("jobs.batch", Some(NS))
            .into_iter()
            .filter(|j| str_at(j, "/metadata/name").starts_with(&prefix))
            .collect()
    };
    // A Job left by an earlier run on a kept lab would pass unseen.
    for j in ours(lab) {
        let name = format!("job/{}", str_at(&j, "/metadata/name"));
        lab.kube
            .run(&["delete", "-n", NS, "--wait=true", &name])
            .map_err(|e| e.to_string())?;
    }
    lab.kube.apply(&docs).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let waited = wait("the remediation Job of a host in provisioning", 120, || {
        !ours(lab).is_empty()
    });
    let state = get(lab, "baremetalhost", PROVISIONING_HOST)
        .map(|h| str_at(&h, "/status/provisioning/state").to_string())
        .unwrap_or_default();
    waited.map_err(|e| {
        let ops: Vec<String> = lab
            .kube
            .list("operations.ops.crossplane.io", None)
            .iter()
            .map(|o| {
                format!(
                    "{} {:?}",
                    str_at(o, "/metadata/name"),
                    o.pointer("/status/pipeline")
                )
            })
            .collect();
        format!("{e}; host {PROVISIONING_HOST} in {state:?}; operations: {ops:?}")
    })?;
    println!(
        "  Job for {PROVISIONING_HOST} ({state}) after {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let ours = ours(lab);
    for j in &ours {
        let text = j.to_string();
        check(!text.contains("lab-only"), || {
            format!(
                "Job {} carries the BMC password",
                str_at(j, "/metadata/name")
            )
        })?;
        let env = j
            .pointer("/spec/template/spec/containers/0/env")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let creds: Vec<&Value> = env
            .iter()
            .filter(|e| {
                let n = str_at(e, "/name").to_ascii_lowercase();
                n.contains("user") || n.contains("pass")
            })
            .collect();
        check(
            !creds.is_empty()
                && creds.iter().all(|e| {
                    e.get("value").is_none()
                        && str_at(e, "/valueFrom/secretKeyRef/name")
                            == format!("{PROVISIONING_HOST}-bmc")
                }),
            || {
                format!(
                    "Job credentials are not secretKeyRefs to {PROVISIONING_HOST}-bmc: {creds:?}"
                )
            },
        )?;
    }
    // The Jobs run the package the function was installed from.
    let f = lab
        .kube
        .get("functions.pkg.crossplane.io", FUNCTION, None)
        .unwrap_or(Value::Null);
    let installed = [
        str_at(&f, "/status/resolvedPackage"),
        str_at(&f, "/spec/package"),
    ]
    .into_iter()
    .find(|s| !s.is_empty())
    .unwrap_or_default()
    .to_string();
    for j in &ours {
        let image = str_at(j, "/spec/template/spec/containers/0/image");
        check(!installed.is_empty() && image == installed, || {
            format!("Job image {image:?} is not the installed package {installed:?}")
        })?;
    }
    println!(
        "  Jobs: {}",
        ours.iter()
            .map(|j| str_at(j, "/metadata/name"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Gone from the inventory again: BMO deprovisions it and lets it go.
    // Each of BMO's state changes is a rate-limited requeue whose delay
    // doubles until a step asks for a delay of its own; the provisioning
    // step does (5 s), so after one the deletion's four steps take
    // milliseconds, where straight after registration they took minutes.
    std::thread::sleep(Duration::from_secs(6));
    lab.kube
        .run(&[
            "delete",
            "-n",
            NS,
            "--wait=false",
            &format!("baremetalhost/{PROVISIONING_HOST}"),
            &format!("hardwaredata/{PROVISIONING_HOST}"),
            &format!("secret/{PROVISIONING_HOST}-bmc"),
        ])
        .map_err(|e| e.to_string())?;
    wait("the demo host deleted by BMO", 60, || {
        get(lab, "baremetalhost", PROVISIONING_HOST).is_none()
    })
}

/// Ironic's virtual media failure, as BMO reports it.
const VMEDIA_ERROR: &str = "Virtual media mount failed: Unable to mount virtual media";

/// Namespace of the hosts that prove the WatchOperation is not bound to
/// the example's namespace.
const RACK_B: &str = "rack-b";

/// Two Dell hosts in another namespace, which the lab's BMO does not
/// manage (see the BMO flags in xtask's install.rs): the scenario sets
/// their status as their own BMO would.
fn rack_b_hosts() -> Vec<Value> {
    let mut docs =
        vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RACK_B}})];
    for (i, name) in ["b1", "b2"].iter().enumerate() {
        docs.push(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-bmc"), "namespace": RACK_B},
            "stringData": {"username": "root", "password": "lab-only"},
        }));
        docs.push(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": RACK_B, "labels": {"metal.kube.farm/pool": "rack-b"}},
            "spec": {
                "online": true,
                "bootMACAddress": format!("18:66:da:00:0b:0{i}"),
                "bmc": {
                    "address": format!("idrac-virtualmedia://192.168.120.{}/redfish/v1/Systems/System.Embedded.1", 40 + i),
                    "credentialsName": format!("{name}-bmc"),
                },
            },
        }));
    }
    docs
}

/// Writes a rack-b host's status: `state`, and an error message with its
/// count.
fn set_host_status(lab: &Lab, host: &str, state: &str, error: &str, count: u32) -> Outcome {
    set_host_status_in(lab, RACK_B, host, state, error, count)
}

/// Writes the status of a host no BMO manages (outside the inventory
/// namespace), as BMO would.
fn set_host_status_in(
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

fn operations(lab: &Lab) -> Vec<Value> {
    lab.kube.list("operations.ops.crossplane.io", None)
}

fn operation_outputs(lab: &Lab) -> Vec<String> {
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

/// Hosts outside the example's namespace get their Jobs, two hosts changing
/// at once both get theirs, and a deleted host leaves a succeeded
/// Operation (not a failed one).
fn operation_any_namespace(lab: &Lab) -> Outcome {
    // A kept lab may hold an earlier run's hosts.
    lab.kube
        .run(&[
            "delete",
            "namespace",
            RACK_B,
            "--ignore-not-found",
            "--timeout=180s",
        ])
        .map_err(|e| e.to_string())?;
    lab.kube.apply(&rack_b_hosts()).map_err(|e| e.to_string())?;
    // Both hosts start provisioning at the same moment, then b1's virtual
    // media fails (Ironic's message, as BMO reports it).
    set_host_status(lab, "b1", "provisioning", "", 0)?;
    set_host_status(lab, "b2", "provisioning", "", 0)?;
    let want = ["b1-provis-none", "b2-provis-none", "b1-bmcreset-1"];
    let jobs = |lab: &Lab| -> Vec<String> {
        lab.kube
            .list("jobs.batch", Some(RACK_B))
            .iter()
            .map(|j| str_at(j, "/metadata/name").to_string())
            .collect()
    };
    let expect = |lab: &Lab, what: &str, want: &[&str]| -> Outcome {
        wait(what, 60, || {
            let have = jobs(lab);
            want.iter().all(|w| have.iter().any(|h| h == w))
        })
        .map_err(|e| {
            format!(
                "{e}; Jobs in {RACK_B}: {:?}; operations: {:?}",
                jobs(lab),
                operation_outputs(lab)
            )
        })
    };
    expect(lab, "boot-order Jobs for b1 and b2", &want[..2])?;
    set_host_status(lab, "b1", "provisioning", VMEDIA_ERROR, 1)?;
    expect(lab, "the iDRAC reset Job for b1", &want)?;
    // The reset is recorded on the host: its Job expiring (TTL) refills
    // nothing, and BMO's next retry right after is paced, not reset again.
    let record = |lab: &Lab| {
        lab.kube
            .get("baremetalhost", "b1", Some(RACK_B))
            .and_then(|h| {
                h.pointer("/metadata/annotations/metal.kube.farm~1bmc-resets")
                    .and_then(Value::as_str)
                    .and_then(|r| serde_json::from_str::<Value>(r).ok())
            })
            .unwrap_or(Value::Null)
    };
    wait("b1's reset recorded on the host", 30, || {
        record(lab)["count"] == 1
    })
    .map_err(|e| format!("{e}; b1 record: {}", record(lab)))?;
    lab.kube
        .run(&["delete", "job", "b1-bmcreset-1", "-n", RACK_B])
        .map_err(|e| e.to_string())?;
    set_host_status(lab, "b1", "provisioning", VMEDIA_ERROR, 2)?;
    let paced = |o: &Value| {
        o.pointer("/status/pipeline/0/output/reason")
            .and_then(Value::as_str)
            .is_some_and(|r| r.contains("after the last iDRAC reset"))
    };
    wait("an Operation pacing b1's second failure", 30, || {
        operations(lab).iter().any(paced)
    })
    .map_err(|e| format!("{e}; operations: {:?}", operation_outputs(lab)))?;
    check(!jobs(lab).iter().any(|j| j == "b1-bmcreset-2"), || {
        format!("a second reset while the iDRAC restarts: {:?}", jobs(lab))
    })?;
    println!("  Jobs in {RACK_B}: {}", jobs(lab).join(", "));
    lab.kube
        .run(&[
            "delete",
            "baremetalhost",
            "b2",
            "-n",
            RACK_B,
            "--wait=true",
            "--timeout=120s",
        ])
        .map_err(|e| e.to_string())?;
    let gone_ok = |o: &Value| {
        condition(o, "Succeeded").as_deref() == Some("True")
            && o.pointer("/status/pipeline/0/output/reason")
                .and_then(Value::as_str)
                .is_some_and(|r| r.contains("no longer exists"))
    };
    let failed = |lab: &Lab| {
        operations(lab)
            .iter()
            .filter(|o| condition(o, "Succeeded").as_deref() == Some("False"))
            .map(|o| str_at(o, "/metadata/name").to_string())
            .collect::<Vec<_>>()
    };
    let waited = wait("a succeeded Operation for the deleted host b2", 60, || {
        operations(lab).iter().any(gone_ok)
    });
    if let Err(e) = waited {
        return Err(format!("{e}; operations: {:?}", operation_outputs(lab)));
    }
    let f = failed(lab);
    check(f.is_empty(), || format!("failed Operations: {f:?}"))?;
    lab.kube
        .run(&[
            "delete",
            "namespace",
            RACK_B,
            "--wait=true",
            "--timeout=180s",
        ])
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Cluster-side kinds, each of which must hold nothing in the namespace
/// after a teardown.
const CLUSTER_KINDS: &str = "clusters.cluster.x-k8s.io,kubeadmcontrolplanes.controlplane.cluster.x-k8s.io,\
machines.cluster.x-k8s.io,machinesets.cluster.x-k8s.io,machinedeployments.cluster.x-k8s.io,\
kubeadmconfigs.bootstrap.cluster.x-k8s.io,kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io,metal3clusters.infrastructure.cluster.x-k8s.io,\
metal3machines.infrastructure.cluster.x-k8s.io,metal3machinetemplates.infrastructure.cluster.x-k8s.io,\
metal3datatemplates.infrastructure.cluster.x-k8s.io,metal3datas.infrastructure.cluster.x-k8s.io,\
metal3dataclaims.infrastructure.cluster.x-k8s.io,ippools.ipam.metal3.io,ipclaims.ipam.metal3.io,\
ipaddresses.ipam.metal3.io,usages.protection.crossplane.io,releases.helm.m.crossplane.io,\
providerconfigs.helm.m.crossplane.io,objects.kubernetes.m.crossplane.io,\
providerconfigs.kubernetes.m.crossplane.io";

/// What is left of `who`'s cluster in the namespace.
fn leftovers(lab: &Lab, who: Subject) -> Result<Vec<String>, String> {
    let out = lab
        .kube
        .run(&["get", CLUSTER_KINDS, "-n", NS, "-o", "name"])
        .map_err(|e| e.to_string())?;
    let mut left: Vec<String> = out
        .lines()
        .filter(|l| l.rsplit('/').next().is_some_and(|n| who.owns(n)))
        .map(str::to_string)
        .collect();
    let selector = format!("cluster.x-k8s.io/cluster-name={}", who.cluster());
    let secrets = lab
        .kube
        .run(&["get", "secrets", "-n", NS, "-l", &selector, "-o", "name"])
        .map_err(|e| e.to_string())?;
    left.extend(secrets.lines().map(str::to_string));
    Ok(left)
}

/// Deletes the XR (background or foreground) and asserts the host is back
/// in its pool, powered off, with its inventory intact.
fn teardown(lab: &Lab, who: Subject, foreground: bool) -> Outcome {
    let s = seen(lab, who);
    check(s.phase == who.settled() && !s.consumer.is_empty(), || {
        format!(
            "teardown needs MetalCluster {} {} on a claimed host; seen {s:?}",
            who.xr,
            who.settled()
        )
    })?;
    let bmc_secret = format!("{}-bmc", who.host);
    let inventory: Vec<(&str, String, String)> = [
        ("baremetalhost", who.host.to_string()),
        ("hardwaredata", who.host.to_string()),
        ("secret", bmc_secret.clone()),
    ]
    .into_iter()
    .map(|(k, n)| {
        let u = get(lab, k, &n).map(|v| uid(&v)).unwrap_or_default();
        (k, n, u)
    })
    .collect();
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
        .map_err(|e| e.to_string())?;
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
        for (kind, name, before) in &inventory {
            let now = get(lab, kind, name);
            let ok = now.as_ref().is_some_and(|v| {
                &uid(v) == before && v.pointer("/metadata/deletionTimestamp").is_none()
            });
            check(ok, || {
                format!(
                    "{kind} {name} of the inventory deleted or being deleted {:.0} s into the teardown",
                    t.elapsed().as_secs_f64()
                )
            })?;
        }
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

/// The objects that talk to the workload API and must go before any
/// Machine: the Cilium Release, every provider-kubernetes Object applied
/// through the workload's own ProviderConfig (the LB's), and the
/// InferenceCluster (Modelplane drains the cluster through its API), as
/// kind/name. The kubeconfig copy and the InferenceClass live in the
/// management cluster: they go after the InferenceCluster, in any order
/// with the Machines.
fn addons(lab: &Lab, who: Subject) -> Vec<String> {
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
fn fleet_outside(lab: &Lab, who: Subject) -> Vec<String> {
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

const MODELPLANE_NS: &str = "modelplane-system";

/// kubectl against the lab's add-on API server (the workload clusters'
/// Cilium kinds).
fn addons_api(lab: &Lab) -> xtask::lab::kube::Kube {
    xtask::lab::kube::Kube {
        kubectl: lab.kube.kubectl.clone(),
        kubeconfig: lab.addons_kubeconfig(),
    }
}

/// The inference MetalCluster: the repository's inference example, moved
/// to the r740 host and the lab's chart mirror.
fn fleet_xr() -> Result<Value, String> {
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
fn fleet_and_secrets(lab: &Lab) -> Outcome {
    clean_slate(lab, R740)?;
    wait("host r740 available", 180, || {
        get(lab, "baremetalhost", R740.host)
            .is_some_and(|b| str_at(&b, "/status/provisioning/state") == "available")
    })?;
    lab.kube.apply(&[fleet_xr()?]).map_err(|e| e.to_string())?;
    let phases = follow(lab, R740, 600, |s| s.phase == "JoiningFleet" && s.host_flag)?;
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
fn no_client_key_outside_secrets(lab: &Lab, kubeconfig_b64: &str) -> Outcome {
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

/// Bad input applied live: the XR names the field, nothing is composed;
/// the fixed spec converges. Then the function is killed mid-provisioning:
/// nothing composed is deleted, and it converges once it is back.
fn bad_input_and_restart(lab: &Lab) -> Outcome {
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
        .run(&["get", CLUSTER_KINDS, "-n", NS, "-o", "name"])
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
    follow(lab, R730, 600, |s| s.phase == "Ready" && s.host_flag)?;
    let after = composed_uids(lab);
    check(before.iter().all(|(k, u)| after.get(k) == Some(u)), || {
        format!(
            "composed resources replaced across the restart: before {before:?}, after {after:?}"
        )
    })
}

/// Each composed object (kind/name) with its UID, read from the API server.
fn composed_uids(lab: &Lab) -> BTreeMap<String, String> {
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

fn patch_xr(lab: &Lab, xr: &str, patch: &Value) -> Result<String, String> {
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
fn warning_count(lab: &Lab, xr: &str, reason: &str) -> u64 {
    warning_count_in(lab, NS, xr, reason)
}

fn warning_count_in(lab: &Lab, ns: &str, xr: &str, reason: &str) -> u64 {
    lab.kube
        .list("events", Some(ns))
        .iter()
        .filter(|e| {
            str_at(e, "/involvedObject/kind") == "MetalCluster"
                && str_at(e, "/involvedObject/name") == xr
                && str_at(e, "/type") == "Warning"
                && str_at(e, "/reason") == reason
        })
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

fn xr_condition(x: &Value, typ: &str) -> (String, String, String) {
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

/// Edits of each class on the provisioned r730, with their documented
/// outcome: every refused field is refused by the API server with a message
/// naming it (and the XR keeps its spec); an in-place edit (Cilium's
/// version) is applied and the XR is Ready again only once helm's wait
/// found the upgraded DaemonSet ready; the control plane's rollout state is
/// in the status.
fn edits(lab: &Lab) -> Outcome {
    let x = get(lab, "metalcluster", XR).ok_or("r730 missing")?;
    check(str_at(&x, "/status/phase") == "Ready", || {
        format!("r730 is not Ready: {:?}", x.pointer("/status/phase"))
    })?;
    let cp = x
        .pointer("/status/controlPlane")
        .cloned()
        .unwrap_or(Value::Null);
    check(
        cp == json!({"desiredReplicas": 1, "replicas": 1, "upToDateReplicas": 1, "readyReplicas": 1, "rollingOut": false}),
        || format!("status.controlPlane of a settled r730: {cp}"),
    )?;
    cilium_and_kube_proxy(lab, R730, false)?;
    let generation = x.pointer("/metadata/generation").cloned();
    // One valid new value per refused field (valid for the schema, so the
    // refusal is the edit rule's).
    let refused: [(&str, Value); 20] = [
        ("host.pool", json!({"host": {"pool": "r740"}})),
        (
            "host.bootInterface",
            json!({"host": {"bootInterface": "eno2"}}),
        ),
        (
            "network.nodeIP",
            json!({"network": {"nodeIP": "192.168.120.75"}}),
        ),
        ("network.prefix", json!({"network": {"prefix": 23}})),
        (
            "network.gateway",
            json!({"network": {"gateway": "192.168.120.2"}}),
        ),
        (
            "network.dnsServer",
            json!({"network": {"dnsServer": "192.168.120.2"}}),
        ),
        (
            "network.podCIDR",
            json!({"network": {"podCIDR": "10.245.0.0/16"}}),
        ),
        (
            "network.serviceCIDR",
            json!({"network": {"serviceCIDR": "10.112.0.0/12"}}),
        ),
        (
            "network.loadBalancer",
            json!({"network": {"loadBalancer": "192.168.120.200-192.168.120.210"}}),
        ),
        (
            "kubernetes.version",
            json!({"kubernetes": {"version": "v1.35.0"}}),
        ),
        (
            "kubernetes.nodeLabels",
            json!({"kubernetes": {"nodeLabels": {"tier": "gold"}}}),
        ),
        (
            "kubernetes.imageURL",
            json!({"kubernetes": {"imageURL": "http://192.168.120.10/images/other.qcow2"}}),
        ),
        (
            "kubernetes.imageChecksumType",
            json!({"kubernetes": {"imageChecksumType": "sha512"}}),
        ),
        (
            "kubernetes.imageDiskFormat",
            json!({"kubernetes": {"imageDiskFormat": "raw"}}),
        ),
        (
            "gpu.driverInstallerURL",
            json!({"gpu": {"driverInstallerURL": "http://192.168.120.10/nvidia/other.run"}}),
        ),
        ("gpu", json!({"gpu": null})),
        ("access", json!({"access": {"username": "ops"}})),
        (
            "kubernetes.imageChecksum",
            json!({"kubernetes": {"imageChecksum": "0".repeat(64)}}),
        ),
        (
            "gpu.driverInstallerChecksum",
            json!({"gpu": {"driverInstallerChecksum": "1".repeat(64)}}),
        ),
        (
            "inference.nodePool",
            json!({"inference": {"nodePool": "a100"}}),
        ),
    ];
    // Every refused field of the single-node form is tried here; the
    // fleet's (controlPlane, workers) in the multi-node scenario.
    for f in metalplane::fields::FIELDS {
        if f.class == metalplane::fields::Class::Refused && !is_fleet_field(f.path) {
            check(refused.iter().any(|(p, _)| *p == f.path), || {
                format!("no live edit of the refused field spec.{}", f.path)
            })?;
        }
    }
    for (path, spec) in &refused {
        let out = patch_xr(lab, XR, &json!({"spec": spec}));
        let Err(e) = out else {
            return Err(format!("editing spec.{path} was accepted: {out:?}"));
        };
        let says = format!("spec.{path} cannot");
        check(
            e.contains(&says) && e.contains("create a new MetalCluster"),
            || {
                format!(
                    "editing spec.{path}: the refusal does not say {says:?} and what to do: {e}"
                )
            },
        )?;
    }
    let x = get(lab, "metalcluster", XR).ok_or("r730 missing")?;
    check(
        x.pointer("/metadata/generation").cloned() == generation,
        || "a refused edit changed the spec".into(),
    )?;
    println!(
        "  {} refused edits, each refused by the API server naming its field",
        refused.len()
    );

    // In place: Cilium's version. helm upgrades the release; the XR is
    // Ready again only once the Release is.
    let release = format!("{XR}-cluster-cilium");
    let revision = |lab: &Lab| {
        get(lab, "releases.helm.m.crossplane.io", &release)
            .and_then(|r| {
                r.pointer("/status/atProvider/revision")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(0)
    };
    let before = revision(lab);
    // The other chart version than the current one (a kept lab may run
    // this twice).
    let x = get(lab, "metalcluster", XR).ok_or("r730 missing")?;
    let from = str_at(&x, "/spec/cni/ciliumVersion").to_string();
    let [a, b] = xtask::lab::charts::CHART_VERSIONS;
    let to = if from == a { b } else { a };
    patch_xr(lab, XR, &json!({"spec": {"cni": {"ciliumVersion": to}}}))?;
    let t = Instant::now();
    wait(
        &format!("the Release upgraded to {to} and Ready, the XR Ready"),
        300,
        || {
            let r = get(lab, "releases.helm.m.crossplane.io", &release);
            let x = get(lab, "metalcluster", XR);
            r.as_ref().is_some_and(|r| {
                !str_at(r, "/status/atProvider/releaseDescription").is_empty()
                    && str_at(r, "/spec/forProvider/chart/version") == to
            }) && revision(lab) > before
                && is_true(&r, "Ready")
                && is_true(&x, "Ready")
                && x.as_ref()
                    .is_some_and(|x| str_at(x, "/status/phase") == "Ready")
        },
    )?;
    let r = get(lab, "releases.helm.m.crossplane.io", &release).ok_or("release missing")?;
    check(
        r.pointer("/spec/forProvider/wait") == Some(&json!(true)),
        || "the Release does not wait for its resources".into(),
    )?;
    println!(
        "  cni.ciliumVersion {from} -> {to} applied in place: release revision {before} -> {}, Ready again in {:.1} s",
        revision(lab),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A claimed host that fails: BMO (demo mode) cannot find the host's BMC
/// secret, reports a registration error and retries. The XR says so in its
/// phase and HostHealthy condition with BMO's words and count, one Warning
/// event however many reconciles pass, and recovers when the host does.
fn host_error(lab: &Lab) -> Outcome {
    let host = get(lab, "baremetalhost", HOST).ok_or("host r730 missing")?;
    let secret = str_at(&host, "/spec/bmc/credentialsName").to_string();
    let warnings_before = warning_count(lab, XR, "HostError");
    let set_secret = |name: &str| {
        lab.kube
            .run(&[
                "patch",
                "baremetalhost",
                HOST,
                "-n",
                NS,
                "--type=merge",
                "-p",
                &json!({"spec": {"bmc": {"credentialsName": name}}}).to_string(),
            ])
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    set_secret("r730-bmc-missing")?;
    let t = Instant::now();
    let mut shown = 0.0;
    wait("the XR in phase HostError with BMO's error", 120, || {
        let x = get(lab, "metalcluster", XR).unwrap_or(Value::Null);
        let (status, reason, msg) = xr_condition(&x, "HostHealthy");
        let ok = str_at(&x, "/status/phase") == "HostError"
            && status == "False"
            && reason == "HostError"
            && msg.contains("registration error")
            && msg.contains("r730-bmc-missing")
            && msg.contains("error count")
            && str_at(&x, "/status/host/errorType") == "registration error";
        if ok {
            shown = t.elapsed().as_secs_f64();
        }
        ok
    })?;
    let x = get(lab, "metalcluster", XR).ok_or("r730 missing")?;
    println!(
        "  host error shown in {shown:.1} s: {}",
        xr_condition(&x, "HostHealthy").2
    );
    // BMO retries and counts; the XR follows the count, events do not.
    let count = |lab: &Lab| {
        get(lab, "baremetalhost", HOST)
            .and_then(|h| h.pointer("/status/errorCount").and_then(Value::as_u64))
            .unwrap_or(0)
    };
    let first = count(lab);
    // Events are recorded asynchronously, and client-go's spam filter may
    // drop one for an object that already raised many: what is asserted is
    // that retries and reconciles add none.
    std::thread::sleep(Duration::from_secs(3));
    let at_transition = warning_count(lab, XR, "HostError") - warnings_before;
    wait("BMO retried the registration", 120, || count(lab) > first)?;
    std::thread::sleep(Duration::from_secs(5));
    let warnings = warning_count(lab, XR, "HostError") - warnings_before;
    check(at_transition <= 2 && warnings == at_transition, || {
        format!(
            "HostError Warning events: {at_transition} at the transition, {warnings} after BMO's retries"
        )
    })?;
    set_secret(&secret)?;
    let t = Instant::now();
    wait("the XR Ready again, HostHealthy True", 180, || {
        let x = get(lab, "metalcluster", XR).unwrap_or(Value::Null);
        str_at(&x, "/status/phase") == "Ready"
            && xr_condition(&x, "HostHealthy").0 == "True"
            && x.pointer("/status/host/errorType").is_none()
    })?;
    println!(
        "  host recovered; XR Ready again in {:.1} s; BMO retried {} times; {warnings} Warning event(s), none for the retries",
        t.elapsed().as_secs_f64(),
        count(lab).max(first)
    );
    Ok(())
}

const RACK_C: &str = "rack-c";

/// A pool whose only host is still being inspected is not "no available
/// host": the XR names the host and its state, without a Warning. Once the
/// host is in error and nothing else is coming, the Warning comes, once,
/// and the condition says why the host was passed over. The hosts are
/// outside BMO's namespace; the test writes their status as BMO would.
fn hosts_on_their_way(lab: &Lab) -> Outcome {
    lab.kube
        .run(&[
            "delete",
            "namespace",
            RACK_C,
            "--ignore-not-found",
            "--timeout=180s",
        ])
        .map_err(|e| e.to_string())?;
    lab.kube
        .apply(&[
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RACK_C}}),
            json!({
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": "c1-bmc", "namespace": RACK_C},
                "stringData": {"username": "root", "password": "lab-only"},
            }),
            json!({
                "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                "metadata": {"name": "c1", "namespace": RACK_C, "labels": {"metal.kube.farm/pool": "rack-c"}},
                "spec": {
                    "online": false,
                    "bootMACAddress": "18:66:da:00:0c:01",
                    "bmc": {"address": "redfish://192.168.120.51/redfish/v1/Systems/1", "credentialsName": "c1-bmc"},
                },
            }),
        ])
        .map_err(|e| e.to_string())?;
    set_host_status_in(lab, RACK_C, "c1", "inspecting", "", 0)?;
    let mut xr = example_xr()?;
    xr["metadata"] = json!({"name": "otw", "namespace": RACK_C});
    xr["spec"]["host"]["pool"] = json!("rack-c");
    lab.kube.apply(&[xr]).map_err(|e| e.to_string())?;
    let claimed = |lab: &Lab| {
        lab.kube
            .get("metalcluster", "otw", Some(RACK_C))
            .map(|x| xr_condition(&x, "HostClaimed"))
            .unwrap_or_default()
    };
    for state in ["inspecting", "preparing"] {
        set_host_status_in(lab, RACK_C, "c1", state, "", 0)?;
        wait(
            &format!("the XR naming c1 ({state}) as on its way"),
            90,
            || {
                let (_, reason, msg) = claimed(lab);
                reason == "HostOnTheWay" && msg.contains(&format!("c1 ({state})"))
            },
        )
        .map_err(|e| format!("{e}; HostClaimed: {:?}", claimed(lab)))?;
    }
    let (_, _, msg) = claimed(lab);
    println!("  {msg}");
    check(
        warning_count_in(lab, RACK_C, "otw", "NoAvailableHost") == 0,
        || "a host on its way raised the no-available-host Warning".into(),
    )?;
    set_host_status_in(lab, RACK_C, "c1", "available", "power management error", 1)?;
    wait("the XR saying no host is available, and why", 90, || {
        let (_, reason, msg) = claimed(lab);
        reason == "NoAvailableHost"
            && msg.contains("c1: provisioning error: power management error")
    })
    .map_err(|e| format!("{e}; HostClaimed: {:?}", claimed(lab)))?;
    let (_, _, msg) = claimed(lab);
    println!("  {msg}");
    // The transition raised the Warning; the reconciles after it (dozens
    // in 35 s here, the Cluster's status churns) keep the condition and
    // raise none. (Two reconciles that read the XR before either wrote the
    // condition may both announce the one transition.)
    std::thread::sleep(Duration::from_secs(3));
    let at_transition = warning_count_in(lab, RACK_C, "otw", "NoAvailableHost");
    set_host_status_in(lab, RACK_C, "c1", "available", "power management error", 2)?;
    std::thread::sleep(Duration::from_secs(35));
    let n = warning_count_in(lab, RACK_C, "otw", "NoAvailableHost");
    check(
        (1..=2).contains(&at_transition) && n == at_transition,
        || {
            format!(
                "NoAvailableHost Warning events: {at_transition} at the transition, {n} after 35 s of reconciles"
            )
        },
    )?;
    println!(
        "  {n} NoAvailableHost Warning event(s) for one transition; none after 35 s of reconciles"
    );
    lab.kube
        .run(&[
            "delete",
            "metalcluster",
            "otw",
            "-n",
            RACK_C,
            "--timeout=300s",
        ])
        .map_err(|e| e.to_string())?;
    lab.kube
        .run(&["delete", "namespace", RACK_C, "--timeout=180s"])
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// An object inside `who`'s workload cluster, read with its kubeconfig.
fn workload_get(
    lab: &Lab,
    who: Subject,
    kind: &str,
    name: &str,
    ns: &str,
) -> Result<Option<Value>, String> {
    use base64::Engine;
    let secret = get(lab, "secret", &format!("{}-kubeconfig", who.cluster()))
        .ok_or_else(|| format!("no kubeconfig Secret of {}", who.cluster()))?;
    let text = base64::engine::general_purpose::STANDARD
        .decode(str_at(&secret, "/data/value"))
        .map_err(|e| format!("kubeconfig Secret: {e}"))?;
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
fn cilium_and_kube_proxy(lab: &Lab, who: Subject, replaced: bool) -> Outcome {
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

/// The multi-node MetalCluster: the repository's fleet example (three
/// control plane machines behind a VIP, a gpu pool of two and a cpu pool of
/// one) on seven simulated hosts of three pools.
const RACK: &str = "rack1";
const RACK_POOLS: [(&str, &str, usize); 3] = [
    ("rack1-cp", "eno1", 3),
    ("rack1-gpu", "eno1np0", 3),
    ("rack1-cpu", "eno1", 1),
];

fn rack_host_names() -> Vec<String> {
    RACK_POOLS
        .iter()
        .flat_map(|(pool, _, n)| (1..=*n).map(move |i| format!("{pool}-{i}")))
        .collect()
}

/// The rack's hosts in BMO's namespace, inspection disabled and their
/// HardwareData given (NIC names as the example's boot interfaces).
fn rack_hosts() -> Vec<Value> {
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

fn rack_xr() -> Result<Value, String> {
    let path = xtask::repo_root().join("examples/metalcluster/fleet.yaml");
    let mut xr = xtask::lab::kube::load_yaml(&path)
        .map_err(|e| e.to_string())?
        .into_iter()
        .next()
        .ok_or("the fleet example is empty")?;
    xr["spec"]["workers"][0]["pool"] = json!("rack1-gpu");
    xr["spec"]["cni"] = json!({"chartRepository": xtask::lab::charts::repository()});
    Ok(xr)
}

/// What the rack looks like now: the XR's phase and nodes, and per host
/// (state, powered on, consumer).
#[derive(Clone, Debug, PartialEq)]
struct RackSeen {
    phase: String,
    nodes: String,
    listed: usize,
    hosts: BTreeMap<String, (String, bool, String)>,
}

fn rack_seen(lab: &Lab) -> RackSeen {
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
fn follow_rack(
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
fn protected_hosts(lab: &Lab) -> Vec<String> {
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
fn scale_gpu(lab: &Lab, replicas: u32) -> Outcome {
    let patch = json!([
        {"op": "test", "path": "/spec/workers/0/name", "value": "gpu"},
        {"op": "replace", "path": "/spec/workers/0/replicas", "value": replicas},
    ]);
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
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn is_fleet_field(path: &str) -> bool {
    path.starts_with("controlPlane") || path.starts_with("workers")
}

/// Every refused field of the fleet form, edited live on the Ready rack
/// (JSON patches: list items by index), each refused by the API server with
/// a message naming it and what to do instead; the spec unchanged.
fn fleet_refused_edits(lab: &Lab) -> Outcome {
    let refused: [(&str, Value); 9] = [
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
            json!({"op": "replace", "path": "/spec/controlPlane/addresses", "value": "10.40.8.21-10.40.8.25"}),
        ),
        (
            "controlPlane.kubeVipImage",
            json!({"op": "add", "path": "/spec/controlPlane/kubeVipImage", "value": "mirror.lan/kube-vip/kube-vip:v1.0.0"}),
        ),
        (
            "workers[].pool",
            json!({"op": "replace", "path": "/spec/workers/0/pool", "value": "rack1-cpu"}),
        ),
        (
            "workers[].bootInterface",
            json!({"op": "replace", "path": "/spec/workers/0/bootInterface", "value": "eno2"}),
        ),
        (
            "workers[].addresses",
            json!({"op": "replace", "path": "/spec/workers/0/addresses", "value": "10.40.8.30-10.40.8.38"}),
        ),
        (
            "workers[].nodeLabels",
            json!({"op": "add", "path": "/spec/workers/0/nodeLabels/tier", "value": "gold"}),
        ),
        (
            "workers[].gpu",
            json!({"op": "remove", "path": "/spec/workers/0/gpu"}),
        ),
    ];
    for f in metalplane::fields::FIELDS {
        if f.class == metalplane::fields::Class::Refused && is_fleet_field(f.path) {
            check(refused.iter().any(|(p, _)| *p == f.path), || {
                format!("no live edit of the refused field spec.{}", f.path)
            })?;
        }
    }
    let generation =
        get(lab, "metalcluster", RACK).and_then(|x| x.pointer("/metadata/generation").cloned());
    for (path, op) in &refused {
        let patch = json!([{"op": "test", "path": "/spec/workers/0/name", "value": "gpu"}, op]);
        let out = lab.kube.run(&[
            "patch",
            "metalcluster",
            RACK,
            "-n",
            NS,
            "--type=json",
            "-p",
            &patch.to_string(),
        ]);
        let Err(e) = out.map_err(|e| e.to_string()) else {
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

/// A 3 + 2 + 1 cluster reaches Ready with every node; the gpu pool scales
/// 2 -> 3 -> 2 (the freed host deprovisioned, powered off and back in its
/// pool); deleting the MetalCluster returns every host, inventory intact.
fn multi_node(lab: &Lab) -> Outcome {
    apply_inventory(lab)?;
    lab.kube.apply(&rack_hosts()).map_err(|e| e.to_string())?;
    let names = rack_host_names();
    wait("the rack's seven hosts available", 240, || {
        let s = rack_seen(lab);
        names
            .iter()
            .all(|n| s.hosts.get(n).is_some_and(|h| h.0 == "available"))
    })?;
    let uids: BTreeMap<String, String> = names
        .iter()
        .map(|n| {
            (
                n.clone(),
                get(lab, "baremetalhost", n)
                    .map(|v| uid(&v))
                    .unwrap_or_default(),
            )
        })
        .collect();
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
    fleet_refused_edits(lab)?;

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
        for (n, before) in &uids {
            let ok = get(lab, "baremetalhost", n).is_some_and(|v| {
                &uid(&v) == before && v.pointer("/metadata/deletionTimestamp").is_none()
            });
            check(ok, || {
                format!(
                    "host {n} deleted or being deleted {:.0} s into the teardown",
                    t.elapsed().as_secs_f64()
                )
            })?;
        }
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
        lab.kube
            .run(&["get", CLUSTER_KINDS, "-n", NS, "-o", "name"])
            .is_ok_and(|o| !o.contains("rack1"))
    })?;
    decoy_untouched(lab, &decoy_before)
}
