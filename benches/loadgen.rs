//! RunFunction load generator. Starts each server command in turn on a
//! free loopback port, measures cold start (spawn to first answer), checks
//! that its desired state equals MetalPlane's for the built-in example,
//! then drives it at each concurrency for a fixed count with the SDK's
//! tonic client, sampling the server's RSS. Prints a table (and writes it
//! to --results) with latency, RPS, peak RSS and ratios against the first
//! server.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use function_sdk_rust::proto::v1::function_runner_service_client::FunctionRunnerServiceClient;
use function_sdk_rust::proto::v1::{Resource, RunFunctionRequest, RunFunctionResponse};
use function_sdk_rust::resource::struct_to_json;
use prost::Message as _;
use serde_json::{Value, json};
use tonic::transport::{Channel, Endpoint};
use xtask::procstat;

mod requests;

#[derive(Parser, Debug)]
#[command(about = "Drive RunFunction servers over loopback and compare them")]
struct Args {
    /// NAME=COMMAND; `{port}` in COMMAND is replaced by a free port. The
    /// first server is the reference for equality and ratios. Repeatable.
    #[arg(long = "server", required = true)]
    servers: Vec<String>,
    /// NAME=COMMAND of a floor (e.g. an echo function): measured the same
    /// way, but not required to emit MetalPlane's graph. Repeatable.
    #[arg(long = "floor")]
    floors: Vec<String>,
    /// Requests per concurrency level.
    #[arg(long, default_value_t = 5000)]
    count: usize,
    /// Concurrency levels, comma-separated.
    #[arg(long, default_value = "1,4,16", value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Markdown file to write the table to.
    #[arg(long)]
    results: Option<std::path::PathBuf>,
    /// Fleet sizes (nodes) to drive at concurrency 1 against the first
    /// server and the floors: how cost per request grows with the cluster.
    #[arg(long, value_delimiter = ',')]
    scale: Vec<usize>,
    /// JSON file to write every row to (for benches/run.sh's targets).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Cargo bench passes --bench to harness=false targets; accepted and ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// What must be equal across peers: every desired resource with its
/// readiness, and the desired XR.
fn desired_view(rsp: &RunFunctionResponse) -> Value {
    let res = |r: &Resource| json!({"resource": r.resource.as_ref().map(struct_to_json), "ready": r.ready});
    let d = rsp.desired.clone().unwrap_or_default();
    let mut resources: Vec<(String, Value)> = d
        .resources
        .iter()
        .map(|(k, v)| (k.clone(), res(v)))
        .collect();
    resources.sort_by(|a, b| a.0.cmp(&b.0));
    json!({
        "composite": d.composite.as_ref().and_then(|c| c.resource.as_ref()).map(struct_to_json),
        "resources": resources.into_iter().collect::<serde_json::Map<String, Value>>(),
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

struct Server {
    name: String,
    child: Child,
    addr: String,
    cold_start: Duration,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect(addr: &str) -> Result<Channel, String> {
    Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())
}

async fn start(spec: &str, req: &RunFunctionRequest) -> Result<Server, String> {
    let (name, cmd) = spec
        .split_once('=')
        .ok_or_else(|| format!("--server {spec:?}: want NAME=COMMAND"))?;
    let port = free_port();
    let cmd = cmd.replace("{port}", &port.to_string());
    let words = shlex::split(&cmd).ok_or_else(|| format!("cannot split {cmd:?}"))?;
    let (prog, args) = words.split_first().ok_or("empty command")?;
    let started = Instant::now();
    let child = Command::new(prog)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{name}: cannot start {prog}: {e}"))?;
    let addr = format!("127.0.0.1:{port}");
    let mut server = Server {
        name: name.to_string(),
        child,
        addr: addr.clone(),
        cold_start: Duration::ZERO,
    };
    loop {
        if let Ok(ch) = connect(&addr).await
            && FunctionRunnerServiceClient::new(ch)
                .run_function(req.clone())
                .await
                .is_ok()
        {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!("{name} did not answer within 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    server.cold_start = started.elapsed();
    Ok(server)
}

#[derive(Clone, Debug)]
struct Row {
    server: String,
    concurrency: usize,
    n: usize,
    p50: Duration,
    p90: Duration,
    p99: Duration,
    rps: f64,
    peak_rss_kib: u64,
    cold_start: Duration,
    /// Server CPU time over the level divided by its requests.
    cpu_per_req: Duration,
    /// Encoded RunFunctionResponse size.
    resp_bytes: usize,
    /// Fleet size of the request (scale rows), 0 for the comparison rows.
    nodes: usize,
}

async fn drive(
    server: &Server,
    req: &RunFunctionRequest,
    count: usize,
    concurrency: usize,
    resp_bytes: usize,
) -> Result<Row, String> {
    let pid = server.child.id();
    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(procstat::status_kib(pid, "VmRSS:"), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let mut tasks = Vec::new();
    let per = count / concurrency;
    let mut clients = Vec::new();
    for _ in 0..concurrency {
        clients.push(connect(&server.addr).await?);
    }
    let cpu0 = procstat::cpu_ticks(pid);
    let started = Instant::now();
    for ch in clients {
        let req = req.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = FunctionRunnerServiceClient::new(ch);
            let mut lat = Vec::with_capacity(per);
            for _ in 0..per {
                let t = Instant::now();
                client
                    .run_function(req.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                lat.push(t.elapsed());
            }
            Ok::<_, String>(lat)
        }));
    }
    let mut lat = Vec::with_capacity(count);
    for t in tasks {
        lat.extend(t.await.map_err(|e| e.to_string())??);
    }
    let wall = started.elapsed();
    let cpu = match (cpu0, procstat::cpu_ticks(pid)) {
        (Some(a), Some(b)) => (b - a) as f64 / procstat::clock_ticks(),
        _ => return Err(format!("{}: cannot read its CPU time", server.name)),
    };
    done.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    lat.sort();
    let q = |f: f64| lat[((lat.len() as f64 * f) as usize).min(lat.len() - 1)];
    Ok(Row {
        server: server.name.clone(),
        concurrency,
        n: lat.len(),
        p50: q(0.50),
        p90: q(0.90),
        p99: q(0.99),
        rps: lat.len() as f64 / wall.as_secs_f64(),
        peak_rss_kib: peak
            .load(Ordering::Relaxed)
            .max(procstat::status_kib(pid, "VmHWM:")),
        cold_start: server.cold_start,
        cpu_per_req: Duration::from_secs_f64(cpu / lat.len() as f64),
        resp_bytes,
        nodes: 0,
    })
}

fn us(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores, {cpu}")
}

fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| server | conc | n | p50 | p90 | p99 | RPS | CPU/req | response | peak RSS | cold start | p50 vs first | CPU/req vs first |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        let base = rows
            .iter()
            .find(|b| b.concurrency == r.concurrency)
            .unwrap_or(r);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.0} | {} | {} B | {:.1} MiB | {} | {:.1}x | {:.1}x |",
            r.server,
            r.concurrency,
            r.n,
            us(r.p50),
            us(r.p90),
            us(r.p99),
            r.rps,
            us(r.cpu_per_req),
            r.resp_bytes,
            r.peak_rss_kib as f64 / 1024.0,
            us(r.cold_start),
            r.p50.as_secs_f64() / base.p50.as_secs_f64(),
            r.cpu_per_req.as_secs_f64() / base.cpu_per_req.as_secs_f64(),
        );
    }
    out
}

/// How cost grows with the cluster: one row per server and size.
fn scale_table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| server | nodes | request | response | p50 | CPU/req | CPU/req per node | CPU/req vs 1 node |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let one = rows
            .iter()
            .find(|b| b.server == r.server && b.nodes == 1)
            .unwrap_or(r);
        let _ = writeln!(
            out,
            "| {} | {} | {} B | {} B | {} | {} | {} | {:.1}x |",
            r.server,
            r.nodes,
            r.n,
            r.resp_bytes,
            us(r.p50),
            us(r.cpu_per_req),
            us(r.cpu_per_req / r.nodes.max(1) as u32),
            r.cpu_per_req.as_secs_f64() / one.cpu_per_req.as_secs_f64(),
        );
    }
    out
}

fn json_row(r: &Row) -> Value {
    json!({
        "server": r.server, "concurrency": r.concurrency, "nodes": r.nodes,
        "n": r.n, "p50_us": r.p50.as_secs_f64() * 1e6, "p90_us": r.p90.as_secs_f64() * 1e6,
        "p99_us": r.p99.as_secs_f64() * 1e6, "rps": r.rps,
        "cpu_per_req_us": r.cpu_per_req.as_secs_f64() * 1e6, "response_bytes": r.resp_bytes,
        "peak_rss_kib": r.peak_rss_kib, "cold_start_us": r.cold_start.as_secs_f64() * 1e6,
    })
}

/// Starts a server, checks its graph (unless a floor), warms it up and
/// returns it with its client and the response size for `req`.
async fn ready(
    spec: &str,
    req: &RunFunctionRequest,
    reference: Option<&Value>,
) -> Result<(Server, usize), String> {
    let server = start(spec, req).await?;
    let ch = connect(&server.addr)
        .await
        .map_err(|e| format!("{}: {e}", server.name))?;
    let mut client = FunctionRunnerServiceClient::new(ch);
    let rsp = client
        .run_function(req.clone())
        .await
        .map_err(|e| format!("{}: {e}", server.name))?
        .into_inner();
    let got = desired_view(&rsp);
    // Same graph, or the comparison is meaningless.
    if let Some(reference) = reference
        && &got != reference
    {
        return Err(format!(
            "{} does not emit MetalPlane's graph for the built-in example\n--- metalplane\n{}\n--- {}\n{}",
            server.name,
            serde_json::to_string_pretty(reference).unwrap_or_default(),
            server.name,
            serde_json::to_string_pretty(&got).unwrap_or_default()
        ));
    }
    for _ in 0..200 {
        let _ = client.run_function(req.clone()).await;
    }
    Ok((server, rsp.encoded_len()))
}

async fn run(args: &Args) -> Result<String, String> {
    let req = requests::example_request();
    let reference = desired_view(&metalplane::run(&req));
    let mut rows = Vec::new();
    let all: Vec<(&String, bool)> = args
        .servers
        .iter()
        .map(|s| (s, false))
        .chain(args.floors.iter().map(|s| (s, true)))
        .collect();
    for &(spec, floor) in &all {
        let (server, bytes) = ready(spec, &req, (!floor).then_some(&reference)).await?;
        eprintln!("{}: cold start {}", server.name, us(server.cold_start));
        for &c in &args.concurrency {
            let r = drive(&server, &req, args.count, c.max(1), bytes).await?;
            eprintln!(
                "{} conc={} p50={} cpu/req={} rps={:.0}",
                r.server,
                c,
                us(r.p50),
                us(r.cpu_per_req),
                r.rps
            );
            rows.push(r);
        }
    }
    // Fleets: the first server (ours) and the floors; the peers implement
    // the single-node graph only.
    let mut scale = Vec::new();
    for &(spec, _) in all
        .iter()
        .filter(|(s, floor)| *floor || *s == &args.servers[0])
    {
        for &nodes in &args.scale {
            let req = requests::fleet_request(nodes);
            let (server, bytes) = ready(spec, &req, None).await?;
            let mut r = drive(&server, &req, args.count, 1, bytes).await?;
            // The request size goes in `n`'s place in the scale table.
            r.n = req.encoded_len();
            r.nodes = nodes;
            eprintln!("{} nodes={} cpu/req={}", r.server, nodes, us(r.cpu_per_req));
            scale.push(r);
        }
    }
    let mut order = rows.clone();
    order.sort_by_key(|r| r.concurrency);
    let mut text = format!(
        "Machine: {}. Request: the built-in example ({} composed resources), {} requests per level, client on the same machine (its cost is in latency and RPS, not in the server's CPU/req, which is the server process's own CPU time from /proc over the level).\n\n{}",
        machine(),
        reference["resources"].as_object().map_or(0, |r| r.len()),
        args.count,
        table(&order)
    );
    if !scale.is_empty() {
        let _ = write!(
            text,
            "\n### By cluster size (concurrency 1; every host claimed; request and response sizes encoded)\n\n{}",
            scale_table(&scale)
        );
    }
    if let Some(p) = &args.json {
        let all: Vec<Value> = rows.iter().chain(&scale).map(json_row).collect();
        std::fs::write(p, serde_json::to_string_pretty(&all).unwrap_or_default())
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    if let Some(p) = &args.results {
        std::fs::write(p, &text).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    Ok(text)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args).await {
        Ok(text) => {
            println!("{text}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
