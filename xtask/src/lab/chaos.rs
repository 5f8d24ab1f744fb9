//! `cargo xtask lab chaos`: on a running lab, runs scenarios while lab
//! processes are SIGKILLed and restarted at moments drawn from a seed, and
//! checks at every poll and at the end of each run that nothing of the
//! inventory is lost, that the XR never claims Ready over an unready
//! object, and that every MetalCluster converges (Ready, or gone with its
//! hosts back in their pool).
//!
//! A run is a pure function of its seed (`plan`): run `i` of `--seed S`
//! is `--seed S+i --runs 1`, so a failing run replays exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use super::kube::str_at;
use super::{Lab, LabError, hosts, observe};

/// Every run's cluster objects and hosts live here (one run at a time).
pub const NS: &str = "chaos";
const CP_POOL: &str = "chaos-cp";
const WORKER_POOL: &str = "chaos-w";
/// MAC/BMC numbering of the chaos hosts (hosts::host_docs), clear of the
/// other scenarios' hosts.
const FIRST_HOST: usize = 800;
const REMEDIATION_HOST_N: usize = 810;
/// BMO's demo provisioner keeps a host of this name in `provisioning`.
const PROVISIONING_HOST: &str = "demo-provisioning";

/// How long after the last fault a MetalCluster must reach each goal.
pub const CONVERGE_BOUND: Duration = Duration::from_secs(300);
/// How long the XR may go on saying Ready after a composed object stopped
/// being ready before that counts as a false claim: a watch event, a
/// reconcile and a status write, with a restarted Crossplane's resync.
pub const READY_CLAIM_GRACE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_secs(2);

/// What a fault hits: a lab process by its name in `Procs`, or the
/// function kept down long enough that Crossplane's calls are refused.
pub const COMPONENTS: [&str; 13] = [
    "function",
    "function-listener",
    "crossplane",
    "capi",
    "kcp",
    "cabpk",
    "capm3",
    "ipam",
    "bmo",
    "provider-helm",
    "provider-kubernetes",
    "kube-controller-manager",
    "kube-apiserver",
];

/// The process a component's fault kills.
pub fn process_of(component: &str) -> &str {
    match component {
        "function-listener" => "function",
        c => c,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// One MetalCluster (the built-in example) to Ready, then deleted.
    Single,
    /// A fleet (one control plane machine behind a VIP, a pool of one) to
    /// Ready, the pool scaled to two, then deleted.
    FleetScale,
    /// A MetalCluster deleted as soon as its host is claimed.
    DeleteProvisioning,
    /// A Dell host entering `provisioning`: its boot-order Job, once.
    RemediationJob,
}

impl Scenario {
    const ALL: [Scenario; 4] = [
        Scenario::Single,
        Scenario::FleetScale,
        Scenario::DeleteProvisioning,
        Scenario::RemediationJob,
    ];

    /// The window faults are drawn in: about the scenario's length with
    /// no fault (demo mode, this machine), so a fault can land in any of
    /// its phases.
    fn horizon_s(self) -> u64 {
        match self {
            Scenario::Single => 90,
            Scenario::FleetScale => 160,
            Scenario::DeleteProvisioning => 45,
            Scenario::RemediationJob => 20,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fault {
    /// Seconds after the run's start.
    pub at_s: f64,
    pub component: &'static str,
    /// Seconds between the SIGKILL and the restart.
    pub down_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub seed: u64,
    pub scenario: Scenario,
    pub faults: Vec<Fault>,
}

/// splitmix64: the same numbers from a seed on every machine and build.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// A tenth of a second in [lo, hi).
    fn tenths(&mut self, lo: u64, hi: u64) -> f64 {
        (lo * 10 + self.below((hi - lo) * 10)) as f64 / 10.0
    }
}

/// The scenario and the 1-3 faults of the run with this seed.
pub fn plan(seed: u64) -> Plan {
    let mut r = Rng(seed);
    let scenario = Scenario::ALL[r.below(Scenario::ALL.len() as u64) as usize];
    let n = 1 + r.below(3) as usize;
    let mut faults: Vec<Fault> = (0..n)
        .map(|_| {
            let component = COMPONENTS[r.below(COMPONENTS.len() as u64) as usize];
            let at_s = r.tenths(1, scenario.horizon_s());
            let down_s = match component {
                // Long enough for Crossplane's calls to be refused and
                // its reconciles to back off.
                "function-listener" => r.tenths(15, 45),
                _ => r.tenths(0, 5),
            };
            Fault {
                at_s,
                component,
                down_s,
            }
        })
        .collect();
    faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    Plan {
        seed,
        scenario,
        faults,
    }
}

/// The short pass `.ci/run` runs (the lab scenario `chaos`): three runs
/// whose faults kill, in a MetalCluster's scenarios, each of the function,
/// Crossplane, CAPM3, BMO and the API server (a unit test checks it).
pub const CI_SEED: u64 = 10334;
pub const CI_RUNS: usize = 3;
/// What the CI pass must kill at least once while a MetalCluster lives.
pub const CI_MUST_KILL: [&str; 5] = ["function", "crossplane", "capm3", "bmo", "kube-apiserver"];

pub struct Options {
    pub runs: usize,
    pub seed: u64,
}

/// What happened to one fault.
#[derive(Clone, Debug, Serialize)]
pub struct Struck {
    pub component: &'static str,
    pub killed_at_s: f64,
    pub restarted_at_s: f64,
    /// The phase the XR was in when the process died.
    pub phase: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub plan: Plan,
    pub struck: Vec<Struck>,
    pub violations: Vec<String>,
    /// From the last restart until the run's end state held.
    pub converged_after_last_fault_s: Option<f64>,
    /// Processes found dead that no fault killed (restarted, as a kubelet
    /// would).
    pub crashed: Vec<String>,
    pub duration_s: f64,
    /// The logs' windows around each API server restart (Injector::play).
    #[serde(skip)]
    pub api_restart_windows: Vec<(super::LogOffsets, super::LogOffsets)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub runs: Vec<RunReport>,
    pub faults_per_component: BTreeMap<String, usize>,
    pub violations: usize,
    pub converge_p50_s: f64,
    pub converge_p95_s: f64,
    pub converge_max_s: f64,
}

/// The figures over runs: faults per component, violations, convergence
/// after the last fault (nearest-rank percentiles).
pub fn summarize(runs: Vec<RunReport>) -> Summary {
    let mut per: BTreeMap<String, usize> = COMPONENTS.iter().map(|c| (c.to_string(), 0)).collect();
    for r in &runs {
        for s in &r.struck {
            *per.entry(s.component.to_string()).or_default() += 1;
        }
    }
    let mut conv: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.converged_after_last_fault_s)
        .collect();
    conv.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        if conv.is_empty() {
            return 0.0;
        }
        let i = ((p * conv.len() as f64).ceil() as usize).clamp(1, conv.len()) - 1;
        conv[i]
    };
    Summary {
        faults_per_component: per,
        violations: runs.iter().map(|r| r.violations.len()).sum(),
        converge_p50_s: rank(0.5),
        converge_p95_s: rank(0.95),
        converge_max_s: conv.last().copied().unwrap_or(0.0),
        runs,
    }
}

// ---------------------------------------------------------------- faults

/// The fault schedule played against the lab while a scenario runs.
struct Injector<'a> {
    lab: &'a Lab,
    t0: Instant,
    /// Processes a fault holds down (not crashes to restart).
    down: Mutex<BTreeSet<String>>,
    struck: Mutex<Vec<Struck>>,
    api_windows: Mutex<Vec<(super::LogOffsets, super::LogOffsets)>>,
    phase: Mutex<String>,
    stop: AtomicBool,
    /// The run's MetalCluster (empty for the remediation scenario).
    xr: String,
    seed: u64,
}

impl Injector<'_> {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn play(&self, faults: &[Fault]) {
        for f in faults {
            while self.now() < f.at_s {
                if self.stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let proc = process_of(f.component);
            if let Ok(mut d) = self.down.lock() {
                d.insert(proc.to_string());
            }
            let killed = self.now();
            let phase = self.phase.lock().map(|p| p.clone()).unwrap_or_default();
            super::progress(&format!(
                "chaos: {killed:.1} s: SIGKILL {proc} (phase {phase:?}), down {:.1} s",
                f.down_s
            ));
            let before = self.lab.log_offsets();
            self.lab.procs.kill(proc);
            std::thread::sleep(Duration::from_secs_f64(f.down_s));
            if let Err(e) = self.lab.procs.respawn(proc) {
                super::progress(&format!("chaos: cannot restart {proc}: {e}"));
            }
            if proc == "kube-apiserver" {
                // A starting API server answers before its RBAC
                // authorizer's caches are filled: for about a second it
                // refuses what every role allows, and clients log that.
                // The window, until it is ready and its clients retried,
                // is reported so a check for RBAC gaps can skip it.
                let t = Instant::now();
                while !self.lab.kube.ready() && t.elapsed() < Duration::from_secs(60) {
                    std::thread::sleep(Duration::from_millis(200));
                }
                std::thread::sleep(Duration::from_secs(5));
                if let Ok(mut w) = self.api_windows.lock() {
                    w.push((before, self.lab.log_offsets()));
                }
            }
            if let Ok(mut d) = self.down.lock() {
                d.remove(proc);
            }
            if let Ok(mut s) = self.struck.lock() {
                s.push(Struck {
                    component: f.component,
                    killed_at_s: killed,
                    restarted_at_s: self.now(),
                    phase,
                });
            }
        }
    }

    fn last_restart(&self) -> f64 {
        self.struck
            .lock()
            .map(|s| s.iter().map(|x| x.restarted_at_s).fold(0.0, f64::max))
            .unwrap_or(0.0)
    }
}

// ---------------------------------------------------------------- invariants

/// `kubectl get KINDS -n NS -o json`'s items, or None while the API
/// server does not answer (no evidence either way).
fn items(lab: &Lab, kinds: &str, ns: &str) -> Option<Vec<Value>> {
    let out = lab.kube.run(&["get", kinds, "-n", ns, "-o", "json"]).ok()?;
    let v: Value = serde_json::from_str(&out).ok()?;
    v.get("items").and_then(Value::as_array).cloned()
}

fn name(v: &Value) -> &str {
    str_at(v, "/metadata/name")
}

fn kind(v: &Value) -> &str {
    str_at(v, "/kind")
}

fn condition_true(v: &Value, typ: &str) -> Option<bool> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| str_at(c, "/type") == typ)
        .map(|c| str_at(c, "/status") == "True")
}

/// The readiness a composed kind reports, by the condition its
/// controller sets; None for kinds without one.
fn composed_ready(v: &Value) -> Option<bool> {
    let typ = match kind(v) {
        "Cluster" | "KubeadmControlPlane" | "MachineDeployment" => "Available",
        "Release" | "Object" => "Ready",
        _ => return None,
    };
    Some(condition_true(v, typ).unwrap_or(false))
}

const READY_KINDS: &str = "clusters.cluster.x-k8s.io,kubeadmcontrolplanes.controlplane.cluster.x-k8s.io,\
machinedeployments.cluster.x-k8s.io,releases.helm.m.crossplane.io,objects.kubernetes.m.crossplane.io";

/// The inventory's objects and their UIDs when the pass began.
type Uids = BTreeMap<(String, String), String>;

fn inventory_uids(lab: &Lab, host_names: &[String]) -> Result<Uids, LabError> {
    let all = items(lab, "baremetalhosts,hardwaredata,secrets", NS)
        .ok_or_else(|| LabError::new("the API server does not answer"))?;
    let mut out = BTreeMap::new();
    for v in &all {
        let n = name(v);
        let ours = host_names.iter().any(|h| n == h || n == format!("{h}-bmc"));
        if ours {
            out.insert(
                (kind(v).to_string(), n.to_string()),
                str_at(v, "/metadata/uid").to_string(),
            );
        }
    }
    Ok(out)
}

struct Checker<'a> {
    lab: &'a Lab,
    uids: Uids,
    /// Since when the XR has said Ready over an unready composed object.
    false_ready_since: Option<(Instant, String)>,
    violations: Vec<String>,
    crashed: Vec<String>,
}

impl Checker<'_> {
    fn violate(&mut self, at: f64, v: String) {
        if !self.violations.iter().any(|x| x.ends_with(&v)) {
            super::progress(&format!("chaos: {at:.1} s: VIOLATION {v}"));
            self.violations.push(format!("{at:.1} s: {v}"));
        }
    }

    /// The checks of every poll.
    fn poll(&mut self, inj: &Injector<'_>, xr: Option<&str>) {
        let at = inj.now();
        // A process that died on its own comes back, as its pod would.
        let down = inj.down.lock().map(|d| d.clone()).unwrap_or_default();
        for p in self.lab.procs.started() {
            if !down.contains(&p) && self.lab.procs.running(&p).is_none() {
                super::progress(&format!(
                    "chaos: {at:.1} s: {p} died unasked; restarting it"
                ));
                self.crashed.push(format!("{at:.1} s: {p}"));
                let _ = self.lab.procs.respawn(&p);
            }
        }
        // The inventory: never deleted, replaced, or being deleted.
        if let Some(now) = items(self.lab, "baremetalhosts,hardwaredata,secrets", NS) {
            let seen: BTreeMap<(String, String), (String, bool)> = now
                .iter()
                .map(|v| {
                    (
                        (kind(v).to_string(), name(v).to_string()),
                        (
                            str_at(v, "/metadata/uid").to_string(),
                            v.pointer("/metadata/deletionTimestamp").is_some(),
                        ),
                    )
                })
                .collect();
            let uids = self.uids.clone();
            for ((k, n), uid) in &uids {
                match seen.get(&(k.clone(), n.clone())) {
                    None => self.violate(at, format!("inventory {k} {n} was deleted")),
                    Some((u, _)) if u != uid => self.violate(
                        at,
                        format!("inventory {k} {n} was replaced (UID {uid} -> {u})"),
                    ),
                    Some((_, true)) => {
                        self.violate(at, format!("inventory {k} {n} is being deleted"))
                    }
                    _ => {}
                }
            }
        }
        let Some(xr) = xr else { return };
        // Ready only over ready objects (beyond the grace of a status lag).
        let Some(x) = self.lab.kube.get("metalcluster", xr, Some(NS)) else {
            self.false_ready_since = None;
            return;
        };
        if str_at(&x, "/status/phase") != "Ready" {
            self.false_ready_since = None;
            return;
        }
        let Some(objs) = items(self.lab, READY_KINDS, NS) else {
            return;
        };
        let prefix = format!("{xr}-");
        let unready: Vec<String> = objs
            .iter()
            .filter(|o| name(o).starts_with(&prefix) && composed_ready(o) == Some(false))
            .map(|o| format!("{} {}", kind(o), name(o)))
            .collect();
        if unready.is_empty() {
            self.false_ready_since = None;
            return;
        }
        let what = unready.join(", ");
        match &self.false_ready_since {
            None => self.false_ready_since = Some((Instant::now(), what)),
            Some((since, first)) if since.elapsed() > READY_CLAIM_GRACE => {
                let v = format!(
                    "XR {xr} says Ready while {first} has not been ready for {:.0} s",
                    since.elapsed().as_secs_f64()
                );
                self.violate(at, v);
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------- scenarios

fn single_xr(name: &str) -> Result<Value, LabError> {
    let mut xr = super::demo::example_xr()?;
    xr["metadata"] = json!({"name": name, "namespace": NS});
    xr["spec"]["host"]["pool"] = json!(CP_POOL);
    xr["spec"]["network"]["nodeIP"] = json!("192.168.120.190");
    Ok(xr)
}

fn fleet_xr(name: &str) -> Result<Value, LabError> {
    let mut xr = single_xr(name)?;
    if let Some(n) = xr["spec"]["network"].as_object_mut() {
        n.remove("nodeIP");
    }
    xr["spec"]["controlPlane"] = json!({
        "replicas": 1,
        "endpoint": "192.168.120.191",
        "addresses": "192.168.120.192-192.168.120.193",
    });
    xr["spec"]["workers"] = json!([{
        "name": "w",
        "replicas": 1,
        "pool": WORKER_POOL,
        "addresses": "192.168.120.194-192.168.120.197",
    }]);
    Ok(xr)
}

fn chaos_hosts() -> Vec<String> {
    let mut v = vec![format!("{CP_POOL}-1")];
    v.extend((1..=2).map(|i| format!("{WORKER_POOL}-{i}")));
    v
}

/// The pass's namespace and its three hosts, once; every host available.
fn ensure_site(lab: &Lab) -> Result<(), LabError> {
    let mut docs = vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})];
    docs.extend(hosts::docs(NS, CP_POOL, "eno1", 1, FIRST_HOST));
    docs.extend(hosts::docs(NS, WORKER_POOL, "eno1", 2, FIRST_HOST + 1));
    lab.kube.apply(&docs)?;
    let t = Instant::now();
    while !hosts_at_rest(lab, &chaos_hosts()).unwrap_or(false) {
        if t.elapsed() > Duration::from_secs(180) {
            return Err(LabError::new("the chaos hosts did not become available"));
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// Each host available, off, unclaimed; None when the API is away.
fn hosts_at_rest(lab: &Lab, names: &[String]) -> Option<bool> {
    let hs = items(lab, "baremetalhosts", NS)?;
    Some(names.iter().all(|n| {
        hs.iter().any(|h| {
            name(h) == n
                && str_at(h, "/status/provisioning/state") == "available"
                && h.pointer("/status/poweredOn").and_then(Value::as_bool) != Some(true)
                && h.pointer("/spec/online").and_then(Value::as_bool) != Some(true)
                && h.pointer("/spec/consumerRef").is_none()
        })
    }))
}

/// A deleted MetalCluster's end state: nothing of it left (every composed
/// kind, its Secrets, Modelplane's copy), its hosts back in their pool.
fn gone_and_at_rest(lab: &Lab, xr: &str, host_names: &[String]) -> Result<bool, String> {
    if lab.kube.get("metalcluster", xr, Some(NS)).is_some() {
        return Ok(false);
    }
    let left = observe::leftovers(lab, NS, xr).map_err(|e| e.to_string())?;
    if !left.is_empty() {
        return Ok(false);
    }
    let copy = format!("{NS}-{xr}-kubeconfig");
    if lab
        .kube
        .get("secret", &copy, Some("modelplane-system"))
        .is_some()
    {
        return Ok(false);
    }
    Ok(hosts_at_rest(lab, host_names).unwrap_or(false))
}

fn nodes_are(lab: &Lab, xr: &str, want: &str) -> bool {
    lab.kube.get("metalcluster", xr, Some(NS)).is_some_and(|x| {
        str_at(&x, "/status/phase") == "Ready" && str_at(&x, "/status/nodes") == want
    })
}

/// Polls (running the checks) until `goal` holds, at most
/// CONVERGE_BOUND after the later of now and the last fault's restart.
fn until(
    inj: &Injector<'_>,
    chk: &mut Checker<'_>,
    xr: Option<&str>,
    what: &str,
    mut goal: impl FnMut() -> bool,
) -> Result<f64, String> {
    let from = inj.now();
    loop {
        chk.poll(inj, xr);
        note_phase(inj, chk.lab);
        if goal() {
            return Ok(inj.now());
        }
        let bound = from.max(inj.last_restart()) + CONVERGE_BOUND.as_secs_f64();
        let pending = inj.down.lock().map(|d| !d.is_empty()).unwrap_or(false);
        if inj.now() > bound && !pending {
            return Err(format!(
                "not {what} within {} s of the last fault",
                CONVERGE_BOUND.as_secs()
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// The phase a fault lands in, as the README's table names it: the XR's
/// `status.phase`, `Deleting`, `TearingDown` (the XR gone, its hosts on
/// their way back), `Gone`, or the remediation host's provisioning state.
fn note_phase(inj: &Injector<'_>, lab: &Lab) {
    let p = if inj.xr.is_empty() {
        let ns = remediation_ns(inj.seed);
        match lab.kube.get("baremetalhost", PROVISIONING_HOST, Some(&ns)) {
            Some(h) => format!("host {}", str_at(&h, "/status/provisioning/state")),
            None => return,
        }
    } else {
        match lab.kube.get("metalcluster", &inj.xr, Some(NS)) {
            // The XR is gone; its cluster's teardown goes on until the
            // hosts are back.
            None if hosts_at_rest(lab, &chaos_hosts()) == Some(true) => "Gone".into(),
            None => "TearingDown".into(),
            Some(x) if x.pointer("/metadata/deletionTimestamp").is_some() => "Deleting".into(),
            Some(x) => match str_at(&x, "/status/phase") {
                "" => "Applied".into(),
                p => p.into(),
            },
        }
    };
    if let Ok(mut ph) = inj.phase.lock() {
        *ph = p;
    }
}

/// The scenario's steps; returns once its end state holds.
fn drive(lab: &Lab, plan: &Plan, inj: &Injector<'_>, chk: &mut Checker<'_>) -> Result<(), String> {
    let xr = xr_name(plan.seed);
    let all = chaos_hosts();
    let e = |e: LabError| e.to_string();
    match plan.scenario {
        Scenario::Single | Scenario::DeleteProvisioning => {
            lab.kube.apply(&[single_xr(&xr).map_err(e)?]).map_err(e)?;
            if plan.scenario == Scenario::Single {
                until(inj, chk, Some(&xr), "Ready", || {
                    observe::phase(lab, NS, &xr) == "Ready"
                })?;
            } else {
                until(inj, chk, Some(&xr), "claiming its host", || {
                    lab.kube
                        .get("baremetalhost", &all[0], Some(NS))
                        .is_some_and(|h| h.pointer("/spec/consumerRef").is_some())
                })?;
            }
            delete(inj, chk, lab, &xr)?;
            until(inj, chk, None, "gone with its host at rest", || {
                gone_and_at_rest(lab, &xr, &all).unwrap_or(false)
            })?;
        }
        Scenario::FleetScale => {
            lab.kube.apply(&[fleet_xr(&xr).map_err(e)?]).map_err(e)?;
            until(inj, chk, Some(&xr), "Ready with 2/2 nodes", || {
                nodes_are(lab, &xr, "2/2")
            })?;
            let patch = json!({"spec": {"workers": [{
                "name": "w", "replicas": 2, "pool": WORKER_POOL,
                "addresses": "192.168.120.194-192.168.120.197",
            }]}});
            kubectl_retrying(
                inj,
                lab,
                &[
                    "patch",
                    "metalcluster",
                    &xr,
                    "-n",
                    NS,
                    "--type=merge",
                    "-p",
                    &patch.to_string(),
                ],
            )?;
            until(inj, chk, Some(&xr), "Ready with 3/3 nodes", || {
                nodes_are(lab, &xr, "3/3")
            })?;
            delete(inj, chk, lab, &xr)?;
            until(inj, chk, None, "gone with its hosts at rest", || {
                gone_and_at_rest(lab, &xr, &all).unwrap_or(false)
            })?;
        }
        Scenario::RemediationJob => {
            let ns = remediation_ns(plan.seed);
            let mut docs =
                vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})];
            let mut host = hosts::host_docs(
                &ns,
                PROVISIONING_HOST,
                "by-hand",
                "eno1",
                REMEDIATION_HOST_N,
            )
            .to_vec();
            host[1]["spec"]["online"] = json!(true);
            host[1]["spec"]["image"] = json!({
                "url": "http://192.168.120.9/images/ubuntu-24.04.qcow2",
                "checksum": "http://192.168.120.9/images/ubuntu-24.04.qcow2.sha256sum",
                "checksumType": "sha256", "format": "qcow2",
            });
            docs.extend(host);
            retrying(inj, || lab.kube.apply(&docs))?;
            let job = format!("{PROVISIONING_HOST}-provis-none");
            let mut duplicate = None;
            let found = until(
                inj,
                chk,
                None,
                "the host's one boot-order Job",
                || match items(lab, "jobs.batch", &ns) {
                    Some(js) => {
                        let ours: Vec<&Value> = js
                            .iter()
                            .filter(|j| name(j).starts_with(PROVISIONING_HOST))
                            .collect();
                        if ours.len() > 1 {
                            let names: Vec<&str> = ours.iter().map(|j| name(j)).collect();
                            duplicate =
                                Some(format!("more than one Job for one transition: {names:?}"));
                        }
                        ours.len() == 1 && name(ours[0]) == job
                    }
                    None => false,
                },
            );
            if let Some(d) = duplicate {
                return Err(d);
            }
            found?;
        }
    }
    Ok(())
}

fn xr_name(seed: u64) -> String {
    format!("chaos-{}", seed % 1000)
}

fn remediation_ns(seed: u64) -> String {
    format!("chaos-r{}", seed % 1000)
}

/// Retries a kubectl call while the API server may be the one down, up
/// to 60 s after the later of the first try and the last fault's restart.
fn retrying(
    inj: &Injector<'_>,
    mut call: impl FnMut() -> Result<(), LabError>,
) -> Result<(), String> {
    let from = inj.now();
    loop {
        match call() {
            Ok(()) => return Ok(()),
            Err(e) if inj.now() - from.max(inj.last_restart()) > 60.0 => return Err(e.to_string()),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

fn kubectl_retrying(inj: &Injector<'_>, lab: &Lab, args: &[&str]) -> Result<(), String> {
    retrying(inj, || lab.kube.run(args).map(|_| ()))
}

fn delete(inj: &Injector<'_>, chk: &mut Checker<'_>, lab: &Lab, xr: &str) -> Result<(), String> {
    chk.poll(inj, Some(xr));
    kubectl_retrying(
        inj,
        lab,
        &[
            "delete",
            "metalcluster",
            xr,
            "-n",
            NS,
            "--wait=false",
            "--ignore-not-found",
        ],
    )
}

/// Every remediation Job and reset record of the run's host: a host's
/// reset record never counts more resets than its Jobs.
fn reset_records_hold(lab: &Lab, ns: &str) -> Option<String> {
    let hs = items(lab, "baremetalhosts", ns)?;
    let js = items(lab, "jobs.batch", ns)?;
    for h in &hs {
        let raw = str_at(h, "/metadata/annotations/metal.kube.farm~1bmc-resets");
        if raw.is_empty() {
            continue;
        }
        let count = serde_json::from_str::<Value>(raw)
            .ok()
            .and_then(|r| r.get("count").and_then(Value::as_u64))
            .unwrap_or(u64::MAX);
        let resets = js
            .iter()
            .filter(|j| name(j).starts_with(&format!("{}-reset", name(h))))
            .count() as u64;
        if count > resets {
            return Some(format!(
                "host {} records {count} iDRAC resets, {resets} reset Jobs exist",
                name(h)
            ));
        }
    }
    None
}

/// One run: the plan's scenario under its faults, its end state, then the
/// lab whole again for the next run.
pub fn run_one(lab: &Lab, plan: &Plan, uids: &Uids) -> RunReport {
    let t0 = Instant::now();
    let inj = Injector {
        lab,
        t0,
        down: Mutex::new(BTreeSet::new()),
        struck: Mutex::new(Vec::new()),
        api_windows: Mutex::new(Vec::new()),
        phase: Mutex::new("Applied".into()),
        stop: AtomicBool::new(false),
        xr: match plan.scenario {
            Scenario::RemediationJob => String::new(),
            _ => xr_name(plan.seed),
        },
        seed: plan.seed,
    };
    let mut chk = Checker {
        lab,
        uids: uids.clone(),
        false_ready_since: None,
        violations: Vec::new(),
        crashed: Vec::new(),
    };
    let mut converged = None;
    std::thread::scope(|s| {
        let faults = s.spawn(|| inj.play(&plan.faults));
        let outcome = drive(lab, plan, &inj, &mut chk);
        // The end state must also survive the faults after it.
        while !faults.is_finished() {
            chk.poll(&inj, None);
            std::thread::sleep(POLL);
        }
        let _ = faults.join();
        match outcome {
            Err(e) => chk.violations.push(format!("{:.1} s: {e}", inj.now())),
            Ok(()) => {
                let xr = xr_name(plan.seed);
                let all = chaos_hosts();
                let ns = remediation_ns(plan.seed);
                let settled = until(
                    &inj,
                    &mut chk,
                    None,
                    "still at its end state after the last fault",
                    || match plan.scenario {
                        Scenario::RemediationJob => {
                            items(lab, "jobs.batch", &ns).is_some_and(|js| {
                                js.iter()
                                    .filter(|j| name(j).starts_with(PROVISIONING_HOST))
                                    .count()
                                    == 1
                            })
                        }
                        _ => gone_and_at_rest(lab, &xr, &all).unwrap_or(false),
                    },
                );
                match settled {
                    Ok(t) => converged = Some((t - inj.last_restart()).max(0.0)),
                    Err(e) => chk.violations.push(e),
                }
                if plan.scenario == Scenario::RemediationJob
                    && let Some(v) = reset_records_hold(lab, &ns)
                {
                    chk.violations.push(v);
                }
            }
        }
        inj.stop.store(true, Ordering::Relaxed);
    });
    // The next run starts from a whole lab.
    for p in lab.procs.started() {
        if lab.procs.running(&p).is_none() {
            let _ = lab.procs.respawn(&p);
        }
    }
    if plan.scenario == Scenario::RemediationJob {
        let ns = remediation_ns(plan.seed);
        let _ = lab.kube.run(&[
            "delete",
            "namespace",
            &ns,
            "--timeout=120s",
            "--ignore-not-found",
        ]);
    }
    let struck = inj.struck.lock().map(|s| s.clone()).unwrap_or_default();
    RunReport {
        plan: plan.clone(),
        struck,
        violations: chk.violations,
        converged_after_last_fault_s: converged,
        crashed: chk.crashed,
        duration_s: t0.elapsed().as_secs_f64(),
        api_restart_windows: inj
            .api_windows
            .lock()
            .map(|w| w.clone())
            .unwrap_or_default(),
    }
}

/// The killed processes' last log lines, for a failing run's report.
fn killed_logs(lab: &Lab, r: &RunReport) -> String {
    let mut names: Vec<&str> = r.struck.iter().map(|s| process_of(s.component)).collect();
    names.dedup();
    names
        .iter()
        .map(|n| {
            format!(
                "--- {} (last 20 lines)\n{}",
                lab.procs.log_file(n).display(),
                lab.procs.tail(n, 20)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `opts.runs` runs (seeds `opts.seed`, `opts.seed + 1`, ...) on the
/// running lab, printing each and, for a failing one, what replays it.
pub fn run(lab: &Lab, opts: &Options) -> Result<Summary, LabError> {
    if !lab.kube.ready() {
        return Err(LabError::new("the lab is not up (cargo xtask lab up)"));
    }
    if super::ironic::active(lab) {
        return Err(LabError::new(
            "chaos runs on the demo-mode lab (cargo xtask lab down, then up)",
        ));
    }
    ensure_site(lab)?;
    let uids = inventory_uids(lab, &chaos_hosts())?;
    let mut runs = Vec::new();
    for i in 0..opts.runs {
        let plan = plan(opts.seed.wrapping_add(i as u64));
        let faults: Vec<String> = plan
            .faults
            .iter()
            .map(|f| {
                format!(
                    "{} at {:.1} s (down {:.1} s)",
                    f.component, f.at_s, f.down_s
                )
            })
            .collect();
        super::progress(&format!(
            "chaos: run {}/{} seed {} {:?}: {}",
            i + 1,
            opts.runs,
            plan.seed,
            plan.scenario,
            faults.join(", ")
        ));
        let r = run_one(lab, &plan, &uids);
        if r.violations.is_empty() {
            super::progress(&format!(
                "chaos: run {} ok in {:.0} s, converged {:.1} s after the last fault{}",
                i + 1,
                r.duration_s,
                r.converged_after_last_fault_s.unwrap_or(0.0),
                if r.crashed.is_empty() {
                    String::new()
                } else {
                    format!("; died unasked: {}", r.crashed.join(", "))
                }
            ));
        } else {
            super::progress(&format!(
                "chaos: run {} FAILED (replay: cargo xtask lab chaos --runs 1 --seed {}): {:?}\nfaults: {:?}\n{}",
                i + 1,
                plan.seed,
                r.violations,
                r.struck,
                killed_logs(lab, &r)
            ));
        }
        runs.push(r);
    }
    Ok(summarize(runs))
}

/// The summary as a person reads it (README figures).
pub fn table(s: &Summary) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "{} runs, {} faults, {} invariant violations; convergence after the last fault p50 {:.1} s, p95 {:.1} s, max {:.1} s\n",
        s.runs.len(),
        s.faults_per_component.values().sum::<usize>(),
        s.violations,
        s.converge_p50_s,
        s.converge_p95_s,
        s.converge_max_s
    );
    let _ = writeln!(md, "| component | faults |\n|---|---:|");
    for (c, n) in &s.faults_per_component {
        let _ = writeln!(md, "| {c} | {n} |");
    }
    // What a kill in each phase cost: kills, and the slowest convergence
    // after the last fault of a run with such a kill.
    let mut cells: BTreeMap<(&str, &str), (usize, f64)> = BTreeMap::new();
    for r in &s.runs {
        for x in &r.struck {
            let c = cells.entry((x.component, x.phase.as_str())).or_default();
            c.0 += 1;
            c.1 = c.1.max(r.converged_after_last_fault_s.unwrap_or(0.0));
        }
    }
    let _ = writeln!(
        md,
        "\n| component | phase at the kill | kills | slowest convergence after the run's last fault |\n|---|---|---:|---:|"
    );
    for ((c, p), (n, worst)) in &cells {
        let _ = writeln!(md, "| {c} | {p} | {n} | {worst:.1} s |");
    }
    let _ = writeln!(
        md,
        "\n| seed | scenario | faults (phase at the kill) | converged after the last fault | result |\n|---:|---|---|---:|---|"
    );
    for r in &s.runs {
        let f: Vec<String> = r
            .struck
            .iter()
            .map(|x| format!("{} at {:.0} s ({})", x.component, x.killed_at_s, x.phase))
            .collect();
        let _ = writeln!(
            md,
            "| {} | {:?} | {} | {} | {} |",
            r.plan.seed,
            r.plan.scenario,
            f.join(", "),
            r.converged_after_last_fault_s
                .map_or("-".into(), |c| format!("{c:.1} s")),
            if r.violations.is_empty() {
                "ok".to_string()
            } else {
                r.violations.join("; ")
            }
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_plan_every_time() {
        assert_eq!(plan(7), plan(7));
        assert_ne!(plan(7), plan(8));
        for s in 0..200 {
            let p = plan(s);
            assert!((1..=3).contains(&p.faults.len()));
            assert!(p.faults.windows(2).all(|w| w[0].at_s <= w[1].at_s));
            assert!(
                p.faults
                    .iter()
                    .all(|f| f.at_s < p.scenario.horizon_s() as f64)
            );
        }
    }

    #[test]
    fn the_ci_pass_kills_each_required_component_under_a_metalcluster() {
        let killed: BTreeSet<&str> = (0..CI_RUNS as u64)
            .map(|i| plan(CI_SEED + i))
            .filter(|p| p.scenario != Scenario::RemediationJob)
            .flat_map(|p| p.faults.into_iter().map(|f| f.component))
            .collect();
        for c in CI_MUST_KILL {
            assert!(killed.contains(c), "{c} not killed: {killed:?}");
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let run = |c: f64| RunReport {
            plan: plan(1),
            struck: vec![],
            violations: vec![],
            converged_after_last_fault_s: Some(c),
            crashed: vec![],
            duration_s: 0.0,
            api_restart_windows: vec![],
        };
        let s = summarize((1..=20).map(|i| run(i as f64)).collect());
        assert_eq!(
            (s.converge_p50_s, s.converge_p95_s, s.converge_max_s),
            (10.0, 19.0, 20.0)
        );
    }
}
