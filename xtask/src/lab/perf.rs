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
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::kube::str_at;
use super::{Lab, LabError, hosts, procs};

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
/// Processes whose CPU the steady-state windows report.
const PROCS: [&str; 8] = [
    "kube-apiserver",
    "crossplane",
    "function",
    "capi",
    "kcp",
    "capm3",
    "provider-helm",
    "bmo",
];

pub struct Options {
    /// MetalClusters in the large steady state.
    pub xrs: usize,
    /// Length of each steady-state window.
    pub window: Duration,
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

/// Per-minute rates between two samples.
struct Window {
    minutes: f64,
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
    /// A BareMetalHost's provisioning state, or the XR's status.host one.
    host_state: Option<String>,
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

struct Watches {
    started: Instant,
    events: Arc<Mutex<Vec<Event>>>,
    children: Vec<Child>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Watches {
    fn start(lab: &Lab, kinds: &[&str]) -> Result<Watches, LabError> {
        let started = Instant::now();
        let events = Arc::new(Mutex::new(Vec::new()));
        let mut children = Vec::new();
        for kind in kinds {
            let mut child = lab
                .kube
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
            let Some(out) = child.stdout.take() else {
                continue;
            };
            children.push(child);
            let (events, kind) = (events.clone(), kind.to_string());
            std::thread::spawn(move || {
                let mut last: BTreeMap<String, Value> = BTreeMap::new();
                let stream =
                    serde_json::Deserializer::from_reader(BufReader::new(out)).into_iter::<Value>();
                for ev in stream.flatten() {
                    let obj = &ev["object"];
                    let name = str_at(obj, "/metadata/name").to_string();
                    let mut changed = Vec::new();
                    if let Some(prev) = last.get(&name) {
                        changed_paths(prev, obj, "", 0, &mut changed);
                    }
                    let host_state = [
                        "/status/provisioning/state",
                        "/status/host/provisioningState",
                    ]
                    .iter()
                    .find_map(|p| obj.pointer(p).and_then(Value::as_str))
                    .map(str::to_string);
                    let consumer = obj
                        .pointer("/spec/consumerRef/name")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    let e = Event {
                        t: started.elapsed().as_secs_f64(),
                        kind: kind.clone(),
                        name: name.clone(),
                        changed,
                        host_state,
                        consumer,
                    };
                    last.insert(name, obj.clone());
                    if let Ok(mut v) = events.lock() {
                        v.push(e);
                    }
                }
            });
        }
        Ok(Watches {
            started,
            events,
            children,
        })
    }

    fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn snapshot(&self) -> Vec<Event> {
        self.events.lock().map(|v| v.clone()).unwrap_or_default()
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

fn all_ready(lab: &Lab, n: usize) -> bool {
    let items = lab.kube.list("metalcluster", Some(NS));
    let ready = items
        .iter()
        .filter(|x| {
            str_at(x, "/metadata/name").starts_with("perf-")
                && str_at(x, "/status/phase") == "Ready"
        })
        .count();
    ready >= n
}

/// A row of state changes: when the host showed each state, when the XR did.
struct Lag {
    state: String,
    host_at: f64,
    xr_at: Option<f64>,
}

/// The first event of a host whose consumer is one of `xr`'s machines at
/// or after `from`: when, and which host, the XR's cluster claimed.
fn claim_event<'a>(events: &'a [Event], xr: &str, from: f64) -> Option<&'a Event> {
    let prefix = format!("{xr}-cluster-");
    events.iter().find(|e| {
        e.t >= from
            && e.kind.starts_with("baremetalhosts")
            && e.consumer
                .as_deref()
                .is_some_and(|c| c.starts_with(&prefix))
    })
}

fn lags(events: &[Event], xr: &str, from: f64) -> Vec<Lag> {
    let Some(host) = claim_event(events, xr, from).map(|e| e.name.clone()) else {
        return vec![];
    };
    let mut out: Vec<Lag> = Vec::new();
    let mut last = None;
    for e in events
        .iter()
        .filter(|e| e.t >= from && e.kind.starts_with("baremetalhosts") && e.name == host)
    {
        if e.host_state != last {
            last = e.host_state.clone();
            if let Some(s) = &e.host_state {
                out.push(Lag {
                    state: s.clone(),
                    host_at: e.t,
                    xr_at: None,
                });
            }
        }
    }
    for l in &mut out {
        l.xr_at = events
            .iter()
            .find(|e| {
                e.kind.starts_with("metalclusters")
                    && e.name == xr
                    && e.t >= l.host_at
                    && e.host_state.as_deref() == Some(&l.state)
            })
            .map(|e| e.t);
    }
    out
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

pub fn run(lab: &Lab, opts: &Options) -> Result<String, LabError> {
    if !lab.kube.ready() {
        return Err(LabError::new("the lab is not up (cargo xtask lab up)"));
    }
    let n = opts.xrs.max(1);
    let mut md = String::new();
    super::progress(&format!("perf: {n} hosts in pool {POOL}"));
    let mut docs = vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})];
    docs.extend(hosts::docs(NS, POOL, "eno1", n, 0x40));
    lab.kube.apply(&docs)?;
    wait("perf hosts available", Duration::from_secs(300), || {
        super::observe::hosts_in_state(lab, NS, POOL, "available") >= n
    })?;

    super::progress("perf: baseline window (no MetalCluster of ours)");
    let base = measure(lab, opts.window)?;

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
    let lag = lags(&evs, &xr1, applied);
    let claimed = claim_event(&evs, &xr1, applied).map(|e| e.t - applied);
    let provisioned = lag
        .iter()
        .find(|l| l.state == "provisioned")
        .map(|l| l.host_at - applied);

    // Steady state with one.
    super::progress("perf: settling, then the 1-MetalCluster window");
    std::thread::sleep(Duration::from_secs(30));
    let w1_from = watches.now();
    let one = measure(lab, opts.window)?;
    let w1_to = watches.now();

    // Steady state with n.
    let mut ready_n = None;
    let mut wn = None;
    let mut wn_span = (0.0, 0.0);
    if n > 1 {
        super::progress(&format!("perf: applying {} more", n - 1));
        let t = Instant::now();
        let docs = (2..=n).map(perf_xr).collect::<Result<Vec<_>, _>>()?;
        lab.kube.apply(&docs)?;
        wait(
            &format!("{n} MetalClusters Ready"),
            Duration::from_secs(900),
            || all_ready(lab, n),
        )?;
        ready_n = Some(t.elapsed().as_secs_f64());
        super::progress(&format!("perf: settling, then the {n}-MetalCluster window"));
        std::thread::sleep(Duration::from_secs(30));
        let from = watches.now();
        wn = Some(measure(lab, opts.window)?);
        wn_span = (from, watches.now());
    }
    let evs = watches.snapshot();
    drop(watches);

    // Report.
    use std::fmt::Write as _;
    let f1 = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1} s"));
    let _ = writeln!(
        md,
        "Lab: the processes of `cargo xtask lab up` on this machine (BMO in demo mode: provisioning is instant, the rest is the real controllers). Windows of {:.0} s; per MetalCluster = (window - baseline) / count.\n",
        opts.window.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "### Time from apply (one MetalCluster, the built-in example)\n"
    );
    let _ = writeln!(
        md,
        "| host claimed | host provisioned | Ready | {} more Ready |",
        n - 1
    );
    let _ = writeln!(md, "|---:|---:|---:|---:|");
    let _ = writeln!(
        md,
        "| {} | {} | {:.1} s | {} |\n",
        f1(claimed),
        f1(provisioned),
        ready_1,
        f1(ready_n)
    );
    let _ = writeln!(
        md,
        "### Status lag: a host state change until the XR shows it (target <= 5 s)\n"
    );
    let _ = writeln!(md, "| host state | host at | XR at | lag |");
    let _ = writeln!(md, "|---|---:|---:|---:|");
    for l in &lag {
        let _ = writeln!(
            md,
            "| {} | {:.1} s | {} | {} |",
            l.state,
            l.host_at - applied,
            l.xr_at
                .map_or("never (passed)".into(), |t| format!("{:.1} s", t - applied)),
            l.xr_at
                .map_or("-".into(), |t| format!("{:.1} s", t - l.host_at)),
        );
    }
    let per =
        |w: &Window, f: &dyn Fn(&Window) -> f64, count: usize| (f(w) - f(&base)) / count as f64;
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
    ];
    for p in PROCS {
        rows.push((
            p,
            Box::new(move |w: &Window| w.cpu_ms.get(p).copied().unwrap_or(0.0)),
        ));
    }
    let _ = writeln!(md, "\n### Steady state (all Ready)\n");
    let _ = writeln!(
        md,
        "| per minute | baseline | 1 XR | per XR (1) | {n} XRs | per XR ({n}) |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|");
    for (label, f) in &rows {
        let label = if PROCS.contains(label) {
            format!("{label} CPU ms/min")
        } else {
            label.to_string()
        };
        let _ = writeln!(
            md,
            "| {label} | {:.1} | {:.1} | {:.1} | {} | {} |",
            f(&base),
            f(&one),
            per(&one, f.as_ref(), 1),
            wn.as_ref().map_or("-".into(), |w| format!("{:.1}", f(w))),
            wn.as_ref()
                .map_or("-".into(), |w| format!("{:.1}", per(w, f.as_ref(), n))),
        );
    }
    let _ = writeln!(
        md,
        "\nCircuit breaker opens on MetalClusters: {:.0} (1 XR window), {} ({n} XRs window).",
        one.breaker_opens,
        wn.as_ref()
            .map_or("-".into(), |w| format!("{:.0}", w.breaker_opens))
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
    let (wf, wt, count, w) = match &wn {
        Some(w) => (wn_span.0, wn_span.1, n, w),
        None => (w1_from, w1_to, 1, &one),
    };
    let _ = writeln!(
        md,
        "\n### Steady state ({count} XRs): what drives the XR's watch events (per XR per minute)\n"
    );
    md.push_str(&events_table(&evs, wf, wt, count, true));
    let _ = writeln!(
        md,
        "\n### Writes at steady state ({count} XRs, per XR per minute, API server metrics)\n"
    );
    let _ = writeln!(md, "| verb resource | per XR/min | baseline/min |");
    let _ = writeln!(md, "|---|---:|---:|");
    for (k, v) in &w.writes_by_resource {
        let b = base.writes_by_resource.get(k).copied().unwrap_or(0.0);
        if v - b > 0.05 * count as f64 {
            let _ = writeln!(md, "| {k} | {:.2} | {b:.2} |", (v - b) / count as f64);
        }
    }
    let _ = w.minutes;

    super::progress("perf: deleting the perf MetalClusters");
    let names: Vec<String> = (1..=n).map(xr_name).collect();
    let mut args = vec!["delete", "metalcluster", "-n", NS, "--wait=false"];
    args.extend(names.iter().map(String::as_str));
    let _ = lab.kube.run(&args);
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn lag_pairs_host_states_with_the_xr() {
        let ev = |t: f64, kind: &str, name: &str, state: &str, consumer: Option<&str>| Event {
            t,
            kind: kind.into(),
            name: name.into(),
            changed: vec![],
            host_state: Some(state.into()),
            consumer: consumer.map(str::to_string),
        };
        let events = vec![
            ev(
                1.0,
                "baremetalhosts.metal3.io",
                "h1",
                "available",
                Some("x-cluster-abc"),
            ),
            ev(2.0, "metalclusters.metal.kube.farm", "x", "available", None),
            ev(
                3.0,
                "baremetalhosts.metal3.io",
                "h1",
                "provisioned",
                Some("x-cluster-abc"),
            ),
        ];
        let l = lags(&events, "x", 0.0);
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].xr_at, Some(2.0));
        assert_eq!(l[1].state, "provisioned");
        assert_eq!(l[1].xr_at, None);
    }
}
