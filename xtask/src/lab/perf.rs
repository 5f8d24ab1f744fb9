//! `cargo xtask lab perf`: the lab's figures for `benches/run.sh`. On a
//! running lab it brings up one MetalCluster, then `xrs` of them, and
//! measures what operators pay: time from apply to host claimed,
//! provisioned and Ready; how long a host state change takes to show in the
//! XR; and at steady state the API server's requests (its own metrics),
//! Crossplane's reconciles and watch events (its own metrics), the
//! function's calls and each process's CPU, per MetalCluster, against a
//! baseline window with none. Watches on every composed kind say which
//! object's changes drive the XR's watch events, and what changed in them.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::process::{Child, ChildStdout, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::kube::str_at;
use super::{Lab, LabError, hosts, procs};

mod by_hand;
mod lag;

const NS: &str = super::INVENTORY_NAMESPACE;
/// The XR, its hosts and every kind the built-in example composes.
const WATCHED: [&str; 11] = [
    "metalclusters.metal.kube.farm",
    "baremetalhosts.metal3.io",
    "clusters.cluster.x-k8s.io",
    "metal3clusters.infrastructure.cluster.x-k8s.io",
    "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
    "metal3machinetemplates.infrastructure.cluster.x-k8s.io",
    "metal3datatemplates.infrastructure.cluster.x-k8s.io",
    "ippools.ipam.metal3.io",
    "releases.helm.m.crossplane.io",
    "providerconfigs.helm.m.crossplane.io",
    "usages.protection.crossplane.io",
];
const POOL: &str = "perf";
/// Processes whose CPU the steady-state windows report: every controller
/// and server a MetalCluster makes work.
const PROCS: [&str; 14] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "crossplane",
    "function",
    "capi",
    "kcp",
    "cabpk",
    "capm3",
    "ipam",
    "bmo",
    "provider-helm",
    "provider-kubernetes",
    "crossplane-rbac-manager",
];

pub struct Options {
    /// The stages: MetalClusters in all at each (e.g. 20 then 100).
    pub xrs: Vec<usize>,
    /// Length of each steady-state window.
    pub window: Duration,
    /// Length of the last stage's window: long enough to average over the
    /// 10-minute polls (Crossplane's Usages, CAPM3's resync) that a short
    /// window catches all at once or not at all.
    pub last_window: Duration,
    /// How many of each stage's MetalClusters are replaced one at a time
    /// after its host errors (`replace_one_by_one`).
    pub one_by_one: usize,
}

fn xr_name(i: usize) -> String {
    format!("perf-{i:02}")
}

/// The built-in example as MetalCluster `i`: its own name, node address and
/// the perf pool.
fn perf_xr(i: usize) -> Result<Value, LabError> {
    let mut xr = super::demo::example_xr()?;
    xr["metadata"]["name"] = json!(xr_name(i));
    xr["metadata"]["namespace"] = json!(NS);
    xr["spec"]["host"]["pool"] = json!(POOL);
    xr["spec"]["network"]["nodeIP"] = json!(format!("192.168.120.{}", 100 + i));
    Ok(xr)
}

// ---------------------------------------------------------------- metrics

/// One Prometheus text exposition: (name, labels, value).
type Series = Vec<(String, BTreeMap<String, String>, f64)>;

/// Parses Prometheus' text format (comments skipped; label values may hold
/// escaped quotes).
pub fn parse_metrics(text: &str) -> Series {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (head, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match head.split_once('{') {
            Some((n, rest)) => (n, parse_labels(rest.trim_end_matches('}'))),
            None => (head, BTreeMap::new()),
        };
        out.push((name.to_string(), labels, value));
    }
    out
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(n);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    out
}

/// Sum of a metric's series whose labels all match `want`.
fn sum(series: &Series, name: &str, want: &[(&str, &str)]) -> f64 {
    series
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && want
                    .iter()
                    .all(|(k, v)| l.get(*k).is_some_and(|x| x.contains(v)))
        })
        .map(|(_, _, v)| v)
        .sum()
}

/// Everything one window needs at its start and end.
struct Sample {
    at: Instant,
    /// The wall clock (UTC time of day), for the audit log.
    utc: String,
    /// etcd's database as the API server reports it (bytes).
    etcd_bytes: f64,
    api: Series,
    crossplane: Series,
    function: Series,
    cpu: BTreeMap<&'static str, f64>,
}

fn sample(lab: &Lab) -> Result<Sample, LabError> {
    let api = parse_metrics(&lab.kube.run(&["get", "--raw", "/metrics"])?);
    let crossplane = parse_metrics(&procs::http_get(8082, "/metrics")?);
    let function = parse_metrics(&procs::http_get(8090, "/metrics")?);
    let cpu = PROCS
        .iter()
        .filter_map(|p| Some((*p, crate::procstat::cpu_seconds(lab.procs.running(p)?)?)))
        .collect();
    Ok(Sample {
        at: Instant::now(),
        utc: utc_now(),
        etcd_bytes: sum(&api, "apiserver_storage_size_bytes", &[]),
        api,
        crossplane,
        function,
        cpu,
    })
}

const XR_CONTROLLER: &str = "metalclusters.metal.kube.farm";
const WRITES: [&str; 5] = ["POST", "PUT", "PATCH", "APPLY", "DELETE"];

/// A row of the steady-state table: its label and how to read it off a window.
type Metric = (&'static str, Box<dyn Fn(&Window) -> f64>);

/// UTC time of day, HH:MM:SS (the audit log's clock).
fn utc_now() -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
        % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Per-minute rates between two samples.
struct Window {
    minutes: f64,
    /// Its span in UTC (`benches/audit_by_actor.py --from --to`).
    utc: (String, String),
    /// etcd's database at the window's end (bytes).
    etcd_bytes: f64,
    requests: f64,
    writes: f64,
    writes_by_resource: BTreeMap<String, f64>,
    reconciles: f64,
    breaker: BTreeMap<String, f64>,
    breaker_opens: f64,
    calls: f64,
    cpu_ms: BTreeMap<&'static str, f64>,
}

fn window(a: &Sample, b: &Sample) -> Window {
    let minutes = (b.at - a.at).as_secs_f64() / 60.0;
    let rate = |x: f64, y: f64| (y - x).max(0.0) / minutes;
    let req = |s: &Series, verbs: &[&str]| {
        verbs
            .iter()
            .map(|v| sum(s, "apiserver_request_total", &[("verb", v)]))
            .sum::<f64>()
    };
    let all = [
        "GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "APPLY", "DELETE",
    ];
    let mut writes_by_resource = BTreeMap::new();
    for (n, l, v) in &b.api {
        if n != "apiserver_request_total" || !WRITES.contains(&l.get("verb").map_or("", |s| s)) {
            continue;
        }
        let key = format!(
            "{} {}{}",
            l.get("verb").map_or("", |s| s),
            l.get("resource").map_or("", |s| s),
            l.get("subresource")
                .filter(|s| !s.is_empty())
                .map_or(String::new(), |s| format!("/{s}"))
        );
        let before: f64 = a
            .api
            .iter()
            .filter(|(n2, l2, _)| n2 == n && l2 == l)
            .map(|(_, _, v)| v)
            .sum();
        let r = rate(before, *v);
        if r > 0.0 {
            *writes_by_resource.entry(key).or_insert(0.0) += r;
        }
    }
    let breaker_results = ["Allowed", "Dropped", "HalfOpenAllowed"];
    let breaker = breaker_results
        .iter()
        .map(|r| {
            let f = |s: &Series| {
                sum(
                    s,
                    "circuit_breaker_events_total",
                    &[("controller", XR_CONTROLLER), ("result", r)],
                )
            };
            (r.to_string(), rate(f(&a.crossplane), f(&b.crossplane)))
        })
        .collect();
    let opens = |s: &Series| {
        sum(
            s,
            "circuit_breaker_opens_total",
            &[("controller", XR_CONTROLLER)],
        )
    };
    let reconciles = |s: &Series| {
        sum(
            s,
            "controller_runtime_reconcile_total",
            &[("controller", XR_CONTROLLER)],
        )
    };
    let calls = |s: &Series| {
        sum(
            s,
            "grpc_server_handled_total",
            &[("grpc_method", "RunFunction")],
        )
    };
    Window {
        minutes,
        utc: (a.utc.clone(), b.utc.clone()),
        etcd_bytes: b.etcd_bytes,
        requests: rate(req(&a.api, &all), req(&b.api, &all)),
        writes: rate(req(&a.api, &WRITES), req(&b.api, &WRITES)),
        writes_by_resource,
        reconciles: rate(reconciles(&a.crossplane), reconciles(&b.crossplane)),
        breaker,
        breaker_opens: opens(&b.crossplane) - opens(&a.crossplane),
        calls: rate(calls(&a.function), calls(&b.function)),
        cpu_ms: b
            .cpu
            .iter()
            .map(|(p, v)| (*p, rate(a.cpu.get(p).copied().unwrap_or(*v), *v) * 1000.0))
            .collect(),
    }
}

// ---------------------------------------------------------------- watches

/// One watch event as the XR's watches see it, with what changed since the
/// object's previous event.
#[derive(Clone, Debug)]
struct Event {
    t: f64,
    kind: String,
    name: String,
    changed: Vec<String>,
    /// What the XR shows of a host (`lag::host_view`), from either side.
    host_view: Option<String>,
    /// The XR's phase (XR events only).
    phase: Option<String>,
    /// The BareMetalHost's consumer (its Metal3Machine), if any.
    consumer: Option<String>,
}

/// Dotted paths (at most three deep) whose values differ; the bookkeeping
/// every write changes is left out.
fn changed_paths(a: &Value, b: &Value, prefix: &str, depth: usize, out: &mut Vec<String>) {
    if a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) if depth < 3 => {
            for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if matches!(
                    p.as_str(),
                    "metadata.resourceVersion" | "metadata.generation"
                ) {
                    continue;
                }
                if p == "metadata.managedFields" {
                    managers_changed(x.get(k), y.get(k), out);
                    continue;
                }
                changed_paths(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &p,
                    depth + 1,
                    out,
                );
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

/// Which field managers' entries changed (their fields or their time): a
/// write that changed nothing else still moves its manager's time.
fn managers_changed(a: Option<&Value>, b: Option<&Value>, out: &mut Vec<String>) {
    let entries = |v: Option<&Value>| -> BTreeMap<String, Value> {
        v.and_then(Value::as_array)
            .map(|es| {
                es.iter()
                    .map(|e| {
                        let key = format!(
                            "{}/{}{}",
                            str_at(e, "/manager"),
                            str_at(e, "/operation"),
                            match str_at(e, "/subresource") {
                                "" => String::new(),
                                s => format!("/{s}"),
                            }
                        );
                        (key, e.clone())
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (x, y) = (entries(a), entries(b));
    for (k, v) in &y {
        if x.get(k) != Some(v) {
            out.push(format!("managedFields[{k}]"));
        }
    }
}

/// `kubectl get --watch` of each kind, resumed whenever the API server ends
/// it: a watch lasts `--min-request-timeout` to twice that (30-60 minutes),
/// shorter than a run with 10-minute windows, and an ended watch would
/// leave every later transition "never shown".
struct Watches {
    started: Instant,
    events: Arc<Mutex<Vec<Event>>>,
    children: Arc<Mutex<Vec<Child>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Ok(mut children) = self.children.lock() {
            for c in children.iter_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Watches {
    fn start(lab: &Lab, kinds: &[&str]) -> Result<Watches, LabError> {
        let w = Watches {
            started: Instant::now(),
            events: Arc::new(Mutex::new(Vec::new())),
            children: Arc::new(Mutex::new(Vec::new())),
            stop: Arc::new(AtomicBool::new(false)),
        };
        for kind in kinds {
            // The first watch is started here, so that a kubectl that
            // cannot start fails the run.
            let first = spawn_watch(&lab.kube, kind, &w.children)?;
            let (kube, kind) = (lab.kube.clone(), kind.to_string());
            let (events, children, stop) = (w.events.clone(), w.children.clone(), w.stop.clone());
            let started = w.started;
            std::thread::spawn(move || {
                let mut last: BTreeMap<String, Value> = BTreeMap::new();
                let mut out = Some(first);
                while let Some(stdout) = out.take() {
                    let stream = serde_json::Deserializer::from_reader(BufReader::new(stdout))
                        .into_iter::<Value>();
                    for ev in stream.flatten() {
                        record(&ev["object"], &kind, started, &mut last, &events);
                    }
                    // Checked after the pause too: a kubectl started once
                    // the Watches were dropped would never be killed.
                    std::thread::sleep(Duration::from_secs(1));
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    out = spawn_watch(&kube, &kind, &children).ok();
                }
            });
        }
        Ok(w)
    }

    fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn snapshot(&self) -> Vec<Event> {
        self.events.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Starts one `kubectl get --watch` of `kind`; its process is kept in
/// `children` (killed with the Watches).
fn spawn_watch(
    kube: &super::kube::Kube,
    kind: &str,
    children: &Mutex<Vec<Child>>,
) -> Result<ChildStdout, LabError> {
    let mut child = kube
        .cmd()
        .args([
            "get",
            kind,
            "-n",
            NS,
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| LabError::new(format!("kubectl watch {kind}: {e}")))?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| LabError::new(format!("kubectl watch {kind}: no stdout")));
    if let Ok(mut c) = children.lock() {
        c.push(child);
    }
    out
}

/// One watch event as an `Event`. A resumed watch lists every object again:
/// an object at the resourceVersion already seen is no change and is left
/// out.
fn record(
    obj: &Value,
    kind: &str,
    started: Instant,
    last: &mut BTreeMap<String, Value>,
    events: &Mutex<Vec<Event>>,
) {
    let name = str_at(obj, "/metadata/name").to_string();
    let mut changed = Vec::new();
    if let Some(prev) = last.get(&name) {
        if str_at(prev, "/metadata/resourceVersion") == str_at(obj, "/metadata/resourceVersion") {
            return;
        }
        changed_paths(prev, obj, "", 0, &mut changed);
    }
    let e = Event {
        t: started.elapsed().as_secs_f64(),
        kind: kind.to_string(),
        name: name.clone(),
        changed,
        host_view: lag::host_view(obj),
        phase: obj
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .map(str::to_string),
        consumer: obj
            .pointer("/spec/consumerRef/name")
            .and_then(Value::as_str)
            .map(str::to_string),
    };
    last.insert(name, obj.clone());
    if let Ok(mut v) = events.lock() {
        v.push(e);
    }
}

// ---------------------------------------------------------------- the run

fn wait(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Result<f64, LabError> {
    let t = Instant::now();
    procs::wait_for(what, timeout, &mut f)?;
    Ok(t.elapsed().as_secs_f64())
}

/// Rates over one window of `span` from now.
fn measure(lab: &Lab, span: Duration) -> Result<Window, LabError> {
    let a = sample(lab)?;
    std::thread::sleep(span);
    Ok(window(&a, &sample(lab)?))
}

/// The perf MetalClusters (`xr_name`'s), the by-hand cluster left out.
fn perf_xrs(lab: &Lab) -> Vec<Value> {
    lab.kube
        .list("metalcluster", Some(NS))
        .into_iter()
        .filter(|x| str_at(x, "/metadata/name").starts_with("perf-"))
        .collect()
}

fn all_ready(lab: &Lab, n: usize) -> bool {
    count_in_phase(lab, "Ready") >= n
}

/// Watch events per object kind in [from, to), and the most frequent
/// changed paths of each.
fn events_by_kind(
    events: &[Event],
    from: f64,
    to: f64,
) -> BTreeMap<String, (usize, BTreeMap<String, usize>)> {
    let mut out: BTreeMap<String, (usize, BTreeMap<String, usize>)> = BTreeMap::new();
    for e in events.iter().filter(|e| e.t >= from && e.t < to) {
        let entry = out.entry(e.kind.clone()).or_default();
        entry.0 += 1;
        for p in &e.changed {
            *entry.1.entry(p.clone()).or_insert(0) += 1;
        }
    }
    out
}

/// Watch events per kind in [from, to) and what changed in them: counts,
/// or per XR per minute when `rate`.
fn events_table(events: &[Event], from: f64, to: f64, per: usize, rate: bool) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let unit = if rate { "events/min per XR" } else { "events" };
    let _ = writeln!(
        md,
        "| object kind | {unit} | what changed (share of events) |"
    );
    let _ = writeln!(md, "|---|---:|---|");
    let minutes = ((to - from) / 60.0).max(1e-9);
    for (kind, (count, paths)) in events_by_kind(events, from, to) {
        let mut p: Vec<_> = paths.into_iter().collect();
        p.sort_by_key(|x| std::cmp::Reverse(x.1));
        let what = p
            .iter()
            .take(4)
            .map(|(k, c)| format!("{k} ({:.0}%)", 100.0 * *c as f64 / count as f64))
            .collect::<Vec<_>>()
            .join(", ");
        let value = if rate {
            format!("{:.2}", count as f64 / minutes / per as f64)
        } else {
            count.to_string()
        };
        let _ = writeln!(md, "| {kind} | {value} | {what} |");
    }
    md
}

/// The claimed host of each perf MetalCluster: (XR, host, BMC secret).
fn claimed_hosts(lab: &Lab, n: usize) -> Vec<(String, String, String)> {
    let hosts = lab.kube.list("baremetalhost", Some(NS));
    (1..=n)
        .filter_map(|i| {
            let xr = xr_name(i);
            let prefix = format!("{xr}-cluster-");
            let h = hosts
                .iter()
                .find(|h| str_at(h, "/spec/consumerRef/name").starts_with(&prefix))?;
            Some((
                xr,
                str_at(h, "/metadata/name").to_string(),
                str_at(h, "/spec/bmc/credentialsName").to_string(),
            ))
        })
        .collect()
}

fn set_bmc_secret(lab: &Lab, host: &str, secret: &str) -> Result<(), LabError> {
    let patch = json!({"spec": {"bmc": {"credentialsName": secret}}}).to_string();
    lab.kube
        .run(&[
            "patch",
            "baremetalhost",
            host,
            "-n",
            NS,
            "--type=merge",
            "-p",
            &patch,
        ])
        .map(|_| ())
}

/// Waits until every perf XR is settled: Crossplane acts on its watch
/// events again (its circuit breaker opens during a bring-up and drops them
/// for 5 minutes, while the function polls every 3 s) and it has been
/// Ready 5 minutes (until then it looks again every minute). Crossplane
/// sets `Responsive` True only at the first event after the cooldown, and
/// that flip is a write and a reconcile of every XR: up to 4 minutes more
/// for it, so the window does not count it. Gives up waiting after 7
/// minutes (the window then begins unsettled). Returns how many were
/// Responsive.
fn settle(lab: &Lab, n: usize) -> usize {
    std::thread::sleep(Duration::from_secs(30));
    let settled = || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or_default();
        perf_xrs(lab)
            .iter()
            .filter(|x| {
                let clock = metalplane::compose::Clock::of(x, now);
                !clock.events_dropped && !clock.just_ready
            })
            .count()
    };
    // Not an error when some never settle: on a saturated lab (100 on two
    // cores) CAPM3's status loops keep reopening a fifth of the circuits
    // (2026-12-07 19:58 UTC); the window is measured anyway and the report
    // says how many were Responsive when it began.
    let responsive = || perf_xrs(lab).iter().filter(|x| responsive(x)).count();
    if !poll(Duration::from_secs(420), || settled() >= n) {
        super::progress(&format!(
            "perf: {} of {n} MetalClusters settled after 420 s; measuring anyway",
            settled()
        ));
        return responsive();
    }
    poll(Duration::from_secs(240), || responsive() >= n);
    // The flip's own reconciles pass.
    std::thread::sleep(Duration::from_secs(5));
    responsive()
}

/// Polls `done` every 2 s until it holds (true) or `timeout` passes
/// (false); unlike `wait`, running out is not an error.
fn poll(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while !done() {
        if t.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    true
}

/// Crossplane's `Responsive` condition is not False (its circuit breaker
/// acts on the XR's watch events).
fn responsive(xr: &Value) -> bool {
    xr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_none_or(|cs| {
            !cs.iter()
                .any(|c| str_at(c, "/type") == "Responsive" && str_at(c, "/status") == "False")
        })
}

fn count_in_phase(lab: &Lab, phase: &str) -> usize {
    perf_xrs(lab)
        .iter()
        .filter(|x| str_at(x, "/status/phase") == phase)
        .count()
}

/// Transitions at Ready: every claimed host loses its BMC secret (BMO
/// reports a registration error, as in scenario host-error), then gets it
/// back. Returns the seconds until all XRs showed HostError, and until all
/// were Ready again.
fn host_errors(lab: &Lab, n: usize) -> Result<(f64, f64), LabError> {
    let claimed = claimed_hosts(lab, n);
    if claimed.len() < n {
        return Err(LabError::new(format!(
            "{} of {n} perf MetalClusters have a claimed host",
            claimed.len()
        )));
    }
    for (_, host, secret) in &claimed {
        set_bmc_secret(lab, host, &format!("{secret}-missing"))?;
    }
    let errors = wait(
        &format!("{n} MetalClusters in HostError"),
        Duration::from_secs(300 + 3 * n as u64),
        || count_in_phase(lab, "HostError") >= n,
    );
    // The secrets come back whatever happened.
    for (_, host, secret) in &claimed {
        set_bmc_secret(lab, host, secret)?;
    }
    let errors = errors?;
    let back = wait(
        &format!("{n} MetalClusters Ready again"),
        Duration::from_secs(300 + 6 * n as u64),
        || all_ready(lab, n),
    )?;
    Ok((errors, back))
}

/// Deletes every perf MetalCluster and waits until all are gone and their
/// hosts `available` again (powered off, unclaimed).
fn delete_all(lab: &Lab, n: usize) -> Result<f64, LabError> {
    let names: Vec<String> = (1..=n).map(xr_name).collect();
    let mut args = vec!["delete", "metalcluster", "-n", NS, "--wait=false"];
    args.extend(names.iter().map(String::as_str));
    lab.kube.run(&args)?;
    wait(
        &format!("{n} MetalClusters gone, their hosts available"),
        Duration::from_secs(600 + 10 * n as u64),
        || {
            let left = perf_xrs(lab).len();
            let at_rest = lab
                .kube
                .list("baremetalhost", Some(NS))
                .iter()
                .filter(|h| {
                    str_at(h, "/metadata/labels/metal.kube.farm~1pool") == POOL
                        && str_at(h, "/status/provisioning/state") == "available"
                        && h.pointer("/spec/consumerRef").is_none()
                        && h.pointer("/status/poweredOn").and_then(Value::as_bool) != Some(true)
                })
                .count();
            left == 0 && at_rest >= n
        },
    )
}

/// One step of the large steady state: `n` MetalClusters in all.
struct Stage {
    n: usize,
    /// From applying this stage's new MetalClusters until all `n` were Ready.
    ready_s: f64,
    /// How many of the `n` Crossplane showed Responsive when the window began.
    responsive: usize,
    window: Window,
    span: (f64, f64),
    errors_shown: f64,
    ready_again: f64,
    lags: Vec<lag::Lag>,
    one_by_one: OneByOne,
}

/// Bring-ups one at a time, the stage's other MetalClusters Ready.
#[derive(Default)]
struct OneByOne {
    /// Apply to Ready of each, in seconds.
    ready_s: Vec<f64>,
    lags: Vec<lag::Lag>,
    /// When each was applied again (watch clock), by its index.
    applied: Vec<(usize, f64)>,
}

/// Deletes the stage's last `count` MetalClusters (never the first, whose
/// host the report follows) and applies each again, one after another:
/// gone and its host `available` before the apply, Ready before the next.
/// What a site sees when one cluster is rebuilt among the others, apart
/// from a stage's burst of bring-ups at once.
fn replace_one_by_one(
    lab: &Lab,
    size: usize,
    count: usize,
    watches: &Watches,
) -> Result<OneByOne, LabError> {
    let mut out = OneByOne::default();
    let count = count.min(size.saturating_sub(1));
    for k in (size - count + 1..=size).rev() {
        let xr = xr_name(k);
        let host = claimed_hosts(lab, size)
            .into_iter()
            .find(|(x, _, _)| *x == xr)
            .map(|(_, h, _)| h)
            .ok_or_else(|| LabError::new(format!("{xr} has no claimed host")))?;
        lab.kube
            .run(&["delete", "metalcluster", "-n", NS, &xr, "--wait=false"])?;
        wait(
            &format!("{xr} gone, {host} available"),
            Duration::from_secs(600),
            || {
                let gone = !perf_xrs(lab)
                    .iter()
                    .any(|x| str_at(x, "/metadata/name") == xr);
                gone && lab.kube.list("baremetalhost", Some(NS)).iter().any(|h| {
                    str_at(h, "/metadata/name") == host
                        && str_at(h, "/status/provisioning/state") == "available"
                        && h.pointer("/spec/consumerRef").is_none()
                })
            },
        )?;
        let applied = watches.now();
        out.applied.push((k, applied));
        lab.kube.apply(&[perf_xr(k)?])?;
        let ready = wait(
            &format!("{xr} Ready again"),
            Duration::from_secs(600),
            || super::observe::phase(lab, NS, &xr) == "Ready",
        )?;
        // The last change (power on) may be shown with Ready's own write.
        std::thread::sleep(Duration::from_secs(2));
        out.ready_s.push(ready);
        out.lags.extend(
            lag::lags(&watches.snapshot(), &xr, applied)
                .into_iter()
                .filter(|l| l.host_at >= applied),
        );
    }
    Ok(out)
}

/// The stages' sizes: ascending, without repeats, at least one MetalCluster.
pub fn stage_sizes(xrs: &[usize]) -> Vec<usize> {
    let mut v: Vec<usize> = xrs.iter().copied().filter(|n| *n > 0).collect();
    v.sort_unstable();
    v.dedup();
    if v.is_empty() {
        v.push(1);
    }
    v
}

pub fn run(lab: &Lab, opts: &Options) -> Result<String, LabError> {
    if !lab.kube.ready() {
        return Err(LabError::new("the lab is not up (cargo xtask lab up)"));
    }
    let sizes = stage_sizes(&opts.xrs);
    let n = sizes.last().copied().unwrap_or(1);
    let mut md = String::new();
    super::progress(&format!("perf: {n} hosts in pool {POOL}, stages {sizes:?}"));
    let mut docs = vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})];
    docs.extend(hosts::docs(NS, POOL, "eno1", n, 0x40));
    lab.kube.apply(&docs)?;
    wait(
        "perf hosts available",
        Duration::from_secs(300 + 5 * n as u64),
        || super::observe::hosts_in_state(lab, NS, POOL, "available") >= n,
    )?;

    super::progress("perf: baseline window (no MetalCluster of ours)");
    let base = measure(lab, opts.window)?;

    // The peer: the same graph by hand, on a host of the same pool.
    super::progress("perf: the example's graph as hand-written manifests (kubectl apply)");
    let mut hand_xr = perf_xr(0)?;
    hand_xr["metadata"]["name"] = json!(by_hand::NAME);
    hand_xr["spec"]["network"]["nodeIP"] = json!("192.168.120.99");
    let graph = by_hand::manifests(&hand_xr, &lab.kube.list("baremetalhost", Some(NS)))?;
    let before = sample(lab)?;
    let hand = by_hand::bring_up(lab, &graph, Duration::from_secs(600))?;
    let hand_w = window(&before, &sample(lab)?);
    super::progress(&format!(
        "perf: by hand: {} objects ready in {:.1} s; deleting them",
        hand.objects, hand.ready_s
    ));
    by_hand::tear_down(lab, &graph)?;
    wait(
        "perf hosts available again",
        Duration::from_secs(300 + 5 * n as u64),
        || super::observe::hosts_in_state(lab, NS, POOL, "available") >= n,
    )?;

    // One MetalCluster, watched from its apply.
    let watches = Watches::start(lab, &WATCHED)?;
    std::thread::sleep(Duration::from_secs(3));
    let xr1 = xr_name(1);
    super::progress(&format!("perf: applying {xr1}"));
    let applied = watches.now();
    let before = sample(lab)?;
    lab.kube.apply(&[perf_xr(1)?])?;
    let ready_1 = wait(&format!("{xr1} Ready"), Duration::from_secs(300), || {
        super::observe::phase(lab, NS, &xr1) == "Ready"
    })?;
    let bringup = window(&before, &sample(lab)?);
    let ready_at = watches.now();
    let evs = watches.snapshot();
    let lag1 = lag::lags(&evs, &xr1, applied);
    let claimed = lag::claim_event(&evs, &xr1, applied).map(|e| e.t - applied);
    let provisioned = lag1
        .iter()
        .find(|l| l.view.starts_with("provisioned"))
        .map(|l| l.host_at - applied);

    // Steady state with one.
    super::progress("perf: settling, then the 1-MetalCluster window");
    let responsive_1 = settle(lab, 1);
    let w1_from = watches.now();
    let one = measure(lab, opts.window)?;
    let w1_to = watches.now();

    // Each stage: more MetalClusters, settled, a window, then a host error
    // on every one at Ready and its recovery.
    let mut stages: Vec<Stage> = Vec::new();
    let mut have = 1;
    // When each MetalCluster was last applied: its host is the one it
    // claimed after that.
    let mut applied_at: BTreeMap<usize, f64> = BTreeMap::from([(1, applied)]);
    for &size in &sizes {
        let from = watches.now();
        applied_at.extend((have + 1..=size).map(|i| (i, from)));
        let mut ready_s = 0.0;
        if size > have {
            super::progress(&format!(
                "perf: applying {} more ({size} in all)",
                size - have
            ));
            let docs = (have + 1..=size)
                .map(perf_xr)
                .collect::<Result<Vec<_>, _>>()?;
            lab.kube.apply(&docs)?;
            ready_s = wait(
                &format!("{size} MetalClusters Ready"),
                Duration::from_secs(900 + 15 * size as u64),
                || all_ready(lab, size),
            )?;
            have = size;
        }
        super::progress(&format!(
            "perf: settling, then the {size}-MetalCluster window"
        ));
        let responsive = settle(lab, size);
        let w_from = watches.now();
        let w = measure(
            lab,
            if size == n {
                opts.last_window
            } else {
                opts.window
            },
        )?;
        let span = (w_from, watches.now());
        super::progress(&format!(
            "perf: {size} XRs: {:.1} requests/min, {:.1} writes/min, {:.2} reconciles/min per XR; a host error on each, then its recovery",
            (w.requests - base.requests) / size as f64,
            (w.writes - base.writes) / size as f64,
            w.reconciles / size as f64,
        ));
        let (errors_shown, ready_again) = host_errors(lab, size)?;
        std::thread::sleep(Duration::from_secs(5));
        let to = watches.now();
        let evs = watches.snapshot();
        let lags: Vec<lag::Lag> = (1..=size)
            .flat_map(|i| {
                let since = applied_at.get(&i).copied().unwrap_or(applied);
                lag::lags(&evs, &xr_name(i), since)
            })
            .filter(|l| l.host_at >= from && l.host_at < to)
            .collect();
        let one_by_one = if opts.one_by_one > 0 {
            super::progress(&format!(
                "perf: {size} XRs: replacing {} one at a time",
                opts.one_by_one.min(size - 1)
            ));
            replace_one_by_one(lab, size, opts.one_by_one, &watches)?
        } else {
            OneByOne::default()
        };
        applied_at.extend(one_by_one.applied.iter().copied());
        stages.push(Stage {
            n: size,
            ready_s,
            responsive,
            window: w,
            span,
            errors_shown,
            ready_again,
            lags,
            one_by_one,
        });
    }
    let evs = watches.snapshot();
    drop(watches);

    // Deletion of all.
    super::progress(&format!("perf: deleting the {n} perf MetalClusters"));
    let deleted = delete_all(lab, n)?;
    std::thread::sleep(Duration::from_secs(5));
    let after = sample(lab)?;

    // Report.
    use std::fmt::Write as _;
    let f1 = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1} s"));
    let _ = writeln!(
        md,
        "Lab: the processes of `cargo xtask lab up` on this machine (BMO in demo mode: provisioning is instant, the rest is the real controllers). Windows of {:.0} s ({:.0} s at the last stage), each begun once every MetalCluster was settled (Crossplane's circuit breaker closed, 5 minutes Ready) or after 7 minutes of waiting (the Responsive count below says which); per MetalCluster = (window - baseline) / count.\n",
        opts.window.as_secs_f64(),
        opts.last_window.as_secs_f64()
    );
    let _ = writeln!(md, "### Time from apply\n");
    let _ = writeln!(
        md,
        "One MetalCluster: host claimed {}, host provisioned {}, Ready {ready_1:.1} s.\n",
        f1(claimed),
        f1(provisioned),
    );
    let _ = writeln!(
        md,
        "| MetalClusters | more applied at once | all Ready after | a host error on each: all shown after | all Ready again after |"
    );
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|");
    let mut prev = 1;
    for s in &stages {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} s | {:.1} s | {:.1} s |",
            s.n,
            s.n - prev,
            s.ready_s,
            s.errors_shown,
            s.ready_again
        );
        prev = s.n;
    }
    let _ = writeln!(
        md,
        "\nDeleting all {n} at once: gone, every host `available`, powered off and unclaimed after {deleted:.1} s.\n"
    );
    let _ = writeln!(
        md,
        "### Overhead against hand-written manifests (the same graph, one single node each, one after the other)\n"
    );
    let _ = writeln!(
        md,
        "By hand: the function's final graph for the built-in example ({} objects, Usages left out), `kubectl apply`'d at once; ready when every object is, by the readiness the function reports. MetalPlane: the MetalCluster from apply to phase Ready.\n",
        hand.objects
    );
    let total = |w: &Window, f: &dyn Fn(&Window) -> f64| f(w) * w.minutes;
    let cpu_of = |w: &Window, ps: &[&str]| {
        ps.iter()
            .map(|p| w.cpu_ms.get(p).copied().unwrap_or(0.0))
            .sum::<f64>()
    };
    let _ = writeln!(
        md,
        "| | to Ready | API requests | of them writes | CPU, all listed | of it Crossplane + function | of it CAPI, KCP, CABPK, CAPM3, IPAM, BMO |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|");
    let ours = ["crossplane", "function"];
    let theirs = ["capi", "kcp", "cabpk", "capm3", "ipam", "bmo"];
    for (label, w, secs) in [
        ("by hand", &hand_w, hand.ready_s),
        ("MetalCluster", &bringup, ready_1),
    ] {
        let _ = writeln!(
            md,
            "| {label} | {secs:.1} s | {:.0} | {:.0} | {:.0} ms | {:.0} ms | {:.0} ms |",
            total(w, &|w| w.requests),
            total(w, &|w| w.writes),
            total(w, &|w| w.cpu_ms.values().sum()),
            total(w, &|w| cpu_of(w, &ours)),
            total(w, &|w| cpu_of(w, &theirs)),
        );
    }
    let _ = writeln!(
        md,
        "\nMetalPlane's time to Ready / by hand: {:.2}.\n",
        ready_1 / hand.ready_s.max(1e-9)
    );
    let _ = writeln!(
        md,
        "### Status lag: a claimed host's change until the XR shows it (target <= 5 s p95 in every phase)\n"
    );
    let _ = writeln!(
        md,
        "Per stage: the bring-up of the MetalClusters it added (all applied at once) and the host error injected at Ready on every one, then its recovery; the phase is the XR's when the host changed. Passed: the host changed again before any reconcile could show it.\n"
    );
    let _ = writeln!(
        md,
        "| MetalClusters | XR phase | transitions shown | p50 | p95 | max | passed | never shown |"
    );
    let _ = writeln!(md, "|---:|---|---:|---:|---:|---:|---:|---:|");
    for s in &stages {
        for (phase, st) in lag::by_phase(&s.lags) {
            let _ = writeln!(
                md,
                "| {} | {phase} | {} | {:.2} s | {:.2} s | {:.2} s | {} | {} |",
                s.n, st.shown, st.p50, st.p95, st.max, st.passed, st.never
            );
        }
    }
    if stages.iter().any(|s| !s.one_by_one.ready_s.is_empty()) {
        let _ = writeln!(
            md,
            "\nOne bring-up at a time: after its host errors, each stage's last {} MetalClusters deleted and applied again one after another (each gone and its host `available` before its apply, Ready before the next), the stage's others Ready. Every phase of a bring-up, without a stage's burst.\n",
            opts.one_by_one
        );
        let _ = writeln!(
            md,
            "| MetalClusters | bring-ups | to Ready p50 | max | XR phase | transitions shown | p50 | p95 | max | passed | never shown |"
        );
        let _ = writeln!(
            md,
            "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"
        );
        for s in &stages {
            let o = &s.one_by_one;
            if o.ready_s.is_empty() {
                continue;
            }
            let mut r = o.ready_s.clone();
            r.sort_by(f64::total_cmp);
            for (phase, st) in lag::by_phase(&o.lags) {
                let _ = writeln!(
                    md,
                    "| {} | {} | {:.1} s | {:.1} s | {phase} | {} | {:.2} s | {:.2} s | {:.2} s | {} | {} |",
                    s.n,
                    r.len(),
                    lag::percentile(&r, 0.5),
                    r.last().copied().unwrap_or(0.0),
                    st.shown,
                    st.p50,
                    st.p95,
                    st.max,
                    st.passed,
                    st.never
                );
            }
        }
    }
    let _ = writeln!(md, "\nThe first MetalCluster's host, change by change:\n");
    let _ = writeln!(md, "| host shows | XR phase | host at | XR at | lag |");
    let _ = writeln!(md, "|---|---|---:|---:|---:|");
    for l in lag::lags(&evs, &xr1, applied) {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} s | {} | {} |",
            l.view,
            l.phase,
            l.host_at - applied,
            match (l.xr_at, l.passed) {
                (Some(t), _) => format!("{:.1} s", t - applied),
                (None, true) => "passed".into(),
                (None, false) => "never".into(),
            },
            l.lag().map_or("-".into(), |d| format!("{d:.1} s")),
        );
    }
    let per =
        |w: &Window, f: &dyn Fn(&Window) -> f64, count: usize| (f(w) - f(&base)) / count as f64;
    let cpu_total = |w: &Window| w.cpu_ms.values().sum::<f64>();
    let mut rows: Vec<Metric> = vec![
        ("API requests/min", Box::new(|w: &Window| w.requests)),
        ("of them writes/min", Box::new(|w: &Window| w.writes)),
        ("XR reconciles/min", Box::new(|w: &Window| w.reconciles)),
        (
            "XR watch events/min (breaker: allowed + dropped)",
            Box::new(|w: &Window| w.breaker.values().sum()),
        ),
        (
            "of them dropped (breaker open)",
            Box::new(|w: &Window| w.breaker.get("Dropped").copied().unwrap_or(0.0)),
        ),
        ("function calls/min", Box::new(|w: &Window| w.calls)),
        ("CPU of all listed, ms/min", Box::new(cpu_total)),
    ];
    for p in PROCS {
        rows.push((
            p,
            Box::new(move |w: &Window| w.cpu_ms.get(p).copied().unwrap_or(0.0)),
        ));
    }
    let _ = writeln!(md, "\n### Steady state (all Ready)\n");
    let mut head = "| per minute | baseline | 1 XR | per XR (1) |".to_string();
    let mut rule = "|---|---:|---:|---:|".to_string();
    for s in &stages {
        let _ = write!(head, " {} XRs | per XR ({}) |", s.n, s.n);
        rule.push_str("---:|---:|");
    }
    let _ = writeln!(md, "{head}\n{rule}");
    for (label, f) in &rows {
        let label = if PROCS.contains(label) {
            format!("{label} CPU ms/min")
        } else {
            label.to_string()
        };
        let mut line = format!(
            "| {label} | {:.1} | {:.1} | {:.1} |",
            f(&base),
            f(&one),
            per(&one, f.as_ref(), 1)
        );
        for s in &stages {
            let _ = write!(
                line,
                " {:.1} | {:.2} |",
                f(&s.window),
                per(&s.window, f.as_ref(), s.n)
            );
        }
        let _ = writeln!(md, "{line}");
    }
    let share = |w: &Window| {
        100.0 * w.cpu_ms.get("function").copied().unwrap_or(0.0) / cpu_total(w).max(1e-9)
    };
    let mib = |b: f64| b / (1024.0 * 1024.0);
    let by_stage = |f: &dyn Fn(&Stage) -> String| {
        stages
            .iter()
            .map(|s| format!("{} ({} XRs)", f(s), s.n))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        md,
        "\nThe function's share of that CPU: {:.1}% (1 XR), {}.",
        share(&one),
        by_stage(&|s| format!("{:.1}%", share(&s.window)))
    );
    let _ = writeln!(
        md,
        "etcd's database (API server's apiserver_storage_size_bytes): {:.1} MiB at baseline, {:.1} MiB with 1, {}, {:.1} MiB after deleting all (etcd does not compact in the lab: the size only grows).",
        mib(base.etcd_bytes),
        mib(one.etcd_bytes),
        by_stage(&|s| format!("{:.1} MiB", mib(s.window.etcd_bytes))),
        mib(after.etcd_bytes),
    );
    let _ = writeln!(
        md,
        "Windows in UTC (whose requests: `benches/audit_by_actor.py --from --to`): baseline {}-{}, 1 XR {}-{}, {}.",
        base.utc.0,
        base.utc.1,
        one.utc.0,
        one.utc.1,
        by_stage(&|s| format!("{}-{}", s.window.utc.0, s.window.utc.1)),
    );
    let _ = writeln!(
        md,
        "Circuit breaker on MetalClusters: Responsive when the window began {responsive_1}/1, {}; opens during the window {:.0} (1 XR), {}.",
        by_stage(&|s| format!("{}/{}", s.responsive, s.n)),
        one.breaker_opens,
        by_stage(&|s| format!("{:.0}", s.window.breaker_opens)),
    );
    let _ = writeln!(
        md,
        "\n### Bring-up of one MetalCluster (apply to Ready, {ready_1:.0} s): what drives the XR's watch events\n"
    );
    let _ = writeln!(
        md,
        "Crossplane's circuit breaker on MetalClusters: {:.0} events allowed, {:.0} dropped, opened {:.0} times.\n",
        (bringup.breaker.get("Allowed").copied().unwrap_or(0.0)
            + bringup
                .breaker
                .get("HalfOpenAllowed")
                .copied()
                .unwrap_or(0.0))
            * bringup.minutes,
        bringup.breaker.get("Dropped").copied().unwrap_or(0.0) * bringup.minutes,
        bringup.breaker_opens,
    );
    md.push_str(&events_table(&evs, applied, ready_at, 1, false));
    let mut windows: Vec<(usize, &Window, (f64, f64))> = vec![(1, &one, (w1_from, w1_to))];
    windows.extend(stages.iter().map(|s| (s.n, &s.window, s.span)));
    for (count, w, (wf, wt)) in windows {
        let _ = writeln!(
            md,
            "\n### Steady state ({count} XRs): what drives the XR's watch events (per XR per minute)\n"
        );
        md.push_str(&events_table(&evs, wf, wt, count, true));
        let _ = writeln!(
            md,
            "\nWrites at steady state ({count} XRs, per XR per minute, API server metrics):\n"
        );
        let _ = writeln!(md, "| verb resource | per XR/min | baseline/min |");
        let _ = writeln!(md, "|---|---:|---:|");
        for (k, v) in &w.writes_by_resource {
            let b = base.writes_by_resource.get(k).copied().unwrap_or(0.0);
            if v - b > 0.05 * count as f64 {
                let _ = writeln!(md, "| {k} | {:.2} | {b:.2} |", (v - b) / count as f64);
            }
        }
    }
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_ascend_once_each() {
        assert_eq!(stage_sizes(&[100, 20, 20, 0]), vec![20, 100]);
        assert_eq!(stage_sizes(&[]), vec![1]);
    }

    #[test]
    fn responsive_unless_crossplane_says_false() {
        let cond =
            |s: &str| json!({"status": {"conditions": [{"type": "Responsive", "status": s}]}});
        assert!(!responsive(&cond("False")));
        assert!(responsive(&cond("True")));
        assert!(responsive(&json!({"status": {}})));
    }

    #[test]
    fn prometheus_text_with_escaped_labels() {
        let s = parse_metrics(
            "# HELP x y\nrequests_total{verb=\"GET\",path=\"/a\\\"b\",code=\"200\"} 12\nup 1\n",
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].1.get("path").map(String::as_str), Some("/a\"b"));
        assert_eq!(sum(&s, "requests_total", &[("verb", "GET")]), 12.0);
        assert_eq!(sum(&s, "requests_total", &[("verb", "PUT")]), 0.0);
    }

    #[test]
    fn a_resumed_watch_records_only_changes() {
        let (started, events) = (Instant::now(), Mutex::new(Vec::new()));
        let mut last = BTreeMap::new();
        let obj = |rv: &str, phase: &str| {
            json!({"metadata": {"name": "perf-01", "resourceVersion": rv},
                "status": {"phase": phase}})
        };
        let mut see = |o: &Value| record(o, "metalclusters", started, &mut last, &events);
        see(&obj("1", "Provisioning"));
        see(&obj("2", "Ready"));
        // The resumed watch lists the object again, unchanged.
        see(&obj("2", "Ready"));
        see(&obj("3", "HostError"));
        let phases: Vec<_> = events
            .lock()
            .map(|v| v.iter().filter_map(|e| e.phase.clone()).collect())
            .unwrap_or_default();
        assert_eq!(phases, ["Provisioning", "Ready", "HostError"]);
    }

    #[test]
    fn changes_name_paths_and_managers() {
        let a = json!({"metadata": {"resourceVersion": "1", "managedFields": [
            {"manager": "crossplane", "operation": "Apply", "time": "t1"}]},
            "status": {"lastUpdated": "t1", "ready": true}});
        let b = json!({"metadata": {"resourceVersion": "2", "managedFields": [
            {"manager": "crossplane", "operation": "Apply", "time": "t2"}]},
            "status": {"lastUpdated": "t2", "ready": true}});
        let mut out = Vec::new();
        changed_paths(&a, &b, "", 0, &mut out);
        assert_eq!(
            out,
            vec!["managedFields[crossplane/Apply]", "status.lastUpdated"]
        );
    }
}
