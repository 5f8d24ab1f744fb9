//! Scenario `remediation-runs`: the remediation Jobs the WatchOperation
//! creates actually run. The lab's node (the workload stand-in's job
//! runner, xtask/lab/workload/jobs.go) runs each Job's command from our
//! runtime image with its env and secretKeyRefs resolved, inside the lab's
//! network namespace, where our iDRAC emulator serves the host's BMC
//! address. A Job spec that names a wrong binary, env variable or Secret
//! key fails here.

use std::sync::{Arc, mpsc};

use super::idrac_emulator::{Config, Emulator, MANAGER, Shared0, State, VIRTUAL};
use super::*;

/// The Dell host's site: the lab's BMO leaves it alone meanwhile (the test
/// writes its status as BMO would), and the lab's node runs its Jobs.
const RACK_D: &str = "rack-d";
const HOST_D: &str = "d1";
const BMC_IP: &str = "192.168.120.50";
const BMC_PORT: u16 = 8000;
const BMC_PASS: &str = "lab-only-d1";

/// The emulated iDRAC, served from a thread inside the lab's network
/// namespace until the Sender is dropped.
struct Idrac {
    shared: Arc<Shared0>,
    _stop: mpsc::Sender<()>,
}

impl Idrac {
    fn with<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.shared.state.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Moves the calling thread into the lab's network namespace (a thread's
/// namespace is its own: sockets it opens afterwards live there).
fn enter_lab_netns() -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(format!("/var/run/netns/{}", procs::NETNS))
        .map_err(|e| format!("the lab's namespace: {e}"))?;
    // SAFETY: setns on a valid namespace fd affects only this thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn start_idrac() -> Result<Idrac, String> {
    procs::add_loopback_address(BMC_IP).map_err(|e| e.to_string())?;
    let (ready_tx, ready_rx) = mpsc::channel::<Result<Arc<Shared0>, String>>();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let run = || -> Result<(), String> {
            enter_lab_netns()?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let listener = tokio::net::TcpListener::bind((BMC_IP, BMC_PORT))
                    .await
                    .map_err(|e| format!("bind {BMC_IP}:{BMC_PORT}: {e}"))?;
                let emu = Emulator::start_on(
                    Config {
                        pass: BMC_PASS.into(),
                        // Long enough for metalplane-bmc's default 10 s
                        // poll to see the controller gone.
                        down_after_reset: Duration::from_secs(15),
                        ..Config::default()
                    },
                    listener,
                );
                let _ = ready_tx.send(Ok(emu.shared.clone()));
                let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
                drop(emu);
                Ok(())
            })
        };
        if let Err(e) = run() {
            let _ = ready_tx.send(Err(e));
        }
    });
    let shared = ready_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|e| format!("the iDRAC emulator did not start: {e}"))??;
    Ok(Idrac {
        shared,
        _stop: stop_tx,
    })
}

/// The Dell host and its BMC Secret; the namespace opts in to the lab's
/// node.
fn rack_d() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": RACK_D,
            "labels": {"lab.metal.kube.farm/job-node": "true"},
        }}),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "d1-bmc", "namespace": RACK_D},
            "stringData": {"username": "root", "password": BMC_PASS},
        }),
        json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": HOST_D, "namespace": RACK_D, "labels": {"metal.kube.farm/pool": RACK_D}},
            "spec": {
                "online": true,
                "bootMACAddress": "18:66:da:00:0d:01",
                "bmc": {
                    // +http: the emulator speaks plain HTTP (the transport
                    // is not what this shows).
                    "address": format!("idrac-virtualmedia+http://{BMC_IP}:{BMC_PORT}/redfish/v1/Systems/System.Embedded.1"),
                    "credentialsName": "d1-bmc",
                },
            },
        }),
    ]
}

/// A second Dell host whose BMC Secret lacks `password`: its Job must not
/// run (a kubelet keeps such a pod in CreateContainerConfigError).
fn broken_host() -> Vec<Value> {
    let mut docs = rack_d();
    docs.remove(0);
    docs[0]["metadata"]["name"] = json!("d2-bmc");
    docs[0]["stringData"] = json!({"username": "root", "passwd": BMC_PASS});
    docs[1]["metadata"]["name"] = json!("d2");
    docs[1]["spec"]["bootMACAddress"] = json!("18:66:da:00:0d:02");
    docs[1]["spec"]["bmc"]["credentialsName"] = json!("d2-bmc");
    docs
}

/// A Job's terminal condition: Some(true) Complete, Some(false) Failed.
fn job_outcome(lab: &Lab, name: &str) -> Option<bool> {
    let j = lab.kube.get("jobs.batch", name, Some(RACK_D))?;
    if condition(&j, "Complete").as_deref() == Some("True") {
        return Some(true);
    }
    if condition(&j, "Failed").as_deref() == Some("True") {
        return Some(false);
    }
    None
}

fn wait_job(lab: &Lab, name: &str, secs: u64) -> Outcome {
    let mut outcome = None;
    wait(&format!("Job {name} finished"), secs, || {
        outcome = job_outcome(lab, name);
        outcome.is_some()
    })
    .map_err(|e| format!("{e}; Jobs: {:?}", jobs_in(lab)))?;
    check(outcome == Some(true), || {
        format!(
            "Job {name} failed on the lab's node (workload log: {})",
            lab.procs.log_file("workload").display()
        )
    })
}

fn jobs_in(lab: &Lab) -> Vec<String> {
    lab.kube
        .list("jobs.batch", Some(RACK_D))
        .iter()
        .map(|j| str_at(j, "/metadata/name").to_string())
        .collect()
}

pub(crate) fn remediation_runs(lab: &Lab) -> Outcome {
    let idrac = start_idrac()?;
    let out = as_another_site(lab, RACK_D, |lab| {
        lab.kube.apply(&rack_d()).map_err(|e| e.to_string())?;
        // Provisioning starts: the boot-order Job runs and the virtual drive
        // is first in the iDRAC's UEFI boot sequence.
        let t = Instant::now();
        set_host_status_in(lab, RACK_D, HOST_D, "provisioning", "", 0)?;
        wait("the boot-order Job", 60, || {
            jobs_in(lab).iter().any(|j| j == "d1-provis-none")
        })?;
        wait_job(lab, "d1-provis-none", 180)?;
        let order = idrac.with(State::order);
        check(order.first().map(String::as_str) == Some(VIRTUAL), || {
            format!("the virtual drive is not first: {order:?}")
        })?;
        println!(
            "  boot-order Job Complete after {:.0} s; the iDRAC boots {order:?}",
            t.elapsed().as_secs_f64()
        );
        // The virtual media fails: the reset Job runs and resets the iDRAC
        // once.
        let t = Instant::now();
        set_host_status_in(lab, RACK_D, HOST_D, "provisioning", VMEDIA_ERROR, 1)?;
        wait("the iDRAC reset Job", 60, || {
            jobs_in(lab).iter().any(|j| j == "d1-bmcreset-1")
        })?;
        wait_job(lab, "d1-bmcreset-1", 240)?;
        let resets = idrac.with(|s| s.bmc_resets);
        let posted = idrac.with(|s| s.count("POST", &format!("{MANAGER}/Actions/Manager.Reset")));
        check(resets == 1 && posted == 1, || {
            format!("the iDRAC was reset {resets} times ({posted} requests)")
        })?;
        println!(
            "  reset Job Complete after {:.0} s; the iDRAC reset once",
            t.elapsed().as_secs_f64()
        );
        // A Job whose Secret lacks a key never starts.
        lab.kube.apply(&broken_host()).map_err(|e| e.to_string())?;
        let before = idrac.with(|s| s.requests.len());
        set_host_status_in(lab, RACK_D, "d2", "provisioning", "", 0)?;
        wait("d2's boot-order Job", 60, || {
            jobs_in(lab).iter().any(|j| j == "d2-provis-none")
        })?;
        let log = || std::fs::read_to_string(lab.procs.log_file("workload")).unwrap_or_default();
        wait("the lab's node reporting d2's missing key", 30, || {
            log().contains("couldn't find key password in Secret rack-d/d2-bmc")
        })?;
        check(job_outcome(lab, "d2-provis-none").is_none(), || {
            "d2's Job finished though its Secret lacks password".to_string()
        })?;
        let after = idrac.with(|s| s.requests.len());
        check(after == before, || {
            format!("d2's Job reached the iDRAC: {} requests", after - before)
        })?;
        println!("  d2 (Secret without password): its Job stays pending, never run");
        Ok(())
    });
    drop(idrac);
    out
}
