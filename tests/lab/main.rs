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
use xtask::lab::observe::{self, Inventory, Observed};
use xtask::lab::{Lab, procs};

mod bad_input;
mod chaos;
mod day2;
mod edits;
mod hosts;
// Our iDRAC emulator, served at a Dell host's BMC address in the lab.
#[path = "../idrac_emulator/mod.rs"]
mod idrac_emulator;
mod inference;
mod install;
mod ironic;
mod multi_node;
mod namespaces;
mod node_config;
mod operation;
mod privilege;
mod provision;
mod remediation;
mod support;
mod teardown;

use bad_input::*;
use chaos::*;
use day2::*;
use edits::*;
use hosts::*;
use inference::*;
use install::*;
use ironic::*;
use multi_node::*;
use namespaces::*;
use node_config::*;
use operation::*;
use privilege::*;
use provision::*;
use remediation::*;
use support::*;
use teardown::*;

type Outcome = Result<(), String>;

type Scenario = (&'static str, fn(&Lab) -> Outcome);

/// The index of the group that runs with BMO against Ironic.
const IRONIC_GROUP: usize = 17;

fn main() -> ExitCode {
    let started = Instant::now();
    let lab = match Lab::open().and_then(|lab| lab.up().map(|_| lab)) {
        Ok(lab) => lab,
        Err(e) => {
            eprintln!("lab: cannot start the lab: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Groups run in order; the scenarios of one group run at the same time
    // (independent: their own namespaces, hosts and addresses), to keep CI
    // short as scenarios are added.
    let groups: [&[Scenario]; 18] = [
        &[("install", install)],
        &[("provision", provision)],
        &[("operation", operation)],
        &[("operation-any-namespace", |l| {
            as_another_site(l, RACK_B, operation_any_namespace)
        })],
        &[("remediation-runs", remediation_runs)],
        &[("hosts-on-their-way", |l| {
            as_another_site(l, RACK_C, hosts_on_their_way)
        })],
        &[("edits", edits)],
        &[("host-error", host_error)],
        &[("fleet-and-secrets", fleet_and_secrets)],
        &[("least-privilege", least_privilege)],
        &[("fleet-teardown", |l| teardown(l, R740, true))],
        &[("teardown-background", |l| teardown(l, R730, false))],
        &[("bad-input-then-function-restart", bad_input_and_restart)],
        &[("recreate-at-once", recreate_at_once)],
        &[("teardown-foreground", |l| teardown(l, R730, true))],
        &[
            ("multi-node", multi_node),
            ("inventory-any-namespace", inventory_any_namespace),
        ],
        // Alone: it kills the processes every scenario shares.
        &[("chaos", chaos_pass)],
        // Last: BMO leaves demo mode for Ironic meanwhile (IRONIC_GROUP).
        &[
            ("ironic-provision", ironic_provision),
            ("ironic-failure", ironic_failure),
            ("ironic-remediate-worker", ironic_remediate_worker),
        ],
    ];
    // METALPLANE_LAB_ONLY=a,b runs just those scenarios (while developing
    // one; each leaves the lab as the next expects only in the full run).
    let only: Option<Vec<String>> = std::env::var("METALPLANE_LAB_ONLY")
        .ok()
        .map(|s| s.split(',').map(str::to_string).collect());
    let mut failed = Vec::new();
    for (i, group) in groups.iter().enumerate() {
        let chosen: Vec<Scenario> = group
            .iter()
            .filter(|(name, _)| only.as_ref().is_none_or(|o| o.iter().any(|n| n == name)))
            .copied()
            .collect();
        // The Ironic group runs on its own site (ironic.rs): set up once
        // for its concurrent scenarios, undone after them.
        let ironic = i == IRONIC_GROUP && !chosen.is_empty();
        if ironic && let Err(e) = ironic_site_up(&lab) {
            println!("site ironic ... FAILED\n  {e}");
            println!("{}", failure_report(&lab));
            failed.push("ironic-site");
            break;
        }
        let mut outcomes: Vec<(&str, Outcome)> = std::thread::scope(|s| {
            let running: Vec<_> = chosen
                .iter()
                .map(|(name, run)| {
                    let lab = &lab;
                    (
                        *name,
                        s.spawn(move || {
                            let t = Instant::now();
                            println!("scenario {name} ...");
                            let out = run(lab);
                            match &out {
                                Ok(()) => println!(
                                    "scenario {name} ... ok ({:.0} s)",
                                    t.elapsed().as_secs_f64()
                                ),
                                Err(e) => println!(
                                    "scenario {name} ... FAILED ({:.0} s)\n  {e}",
                                    t.elapsed().as_secs_f64()
                                ),
                            }
                            out
                        }),
                    )
                })
                .collect();
            running
                .into_iter()
                .map(|(name, h)| {
                    let out = h
                        .join()
                        .unwrap_or_else(|_| Err(format!("scenario {name} panicked")));
                    (name, out)
                })
                .collect()
        });
        if ironic {
            let down = ironic_site_down(&lab);
            if let Err(e) = &down {
                println!("site ironic down ... FAILED\n  {e}");
            }
            outcomes.push(("ironic-site-down", down));
        }
        let bad: Vec<&str> = outcomes
            .iter()
            .filter(|(_, o)| o.is_err())
            .map(|(n, _)| *n)
            .collect();
        if !bad.is_empty() {
            println!("{}", failure_report(&lab));
            failed.extend(bad);
            // Later scenarios build on this one's end state.
            break;
        }
    }
    // Over the whole run: no controller was refused anything.
    if failed.is_empty() {
        match privilege::nothing_forbidden(&lab) {
            Ok(()) => println!("check nothing-forbidden ... ok"),
            Err(e) => {
                println!("check nothing-forbidden ... FAILED\n  {e}");
                failed.push("nothing-forbidden");
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
