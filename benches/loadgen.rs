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
use function_sdk_rust::proto::v1::{Resource, Resources, RunFunctionRequest, RunFunctionResponse};
use function_sdk_rust::resource::struct_to_json;
use serde_json::{Value, json};
use tonic::transport::{Channel, Endpoint};

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
    /// Cargo bench passes --bench to harness=false targets; accepted and ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The built-in example with its pool resolved empty: what Crossplane sends
/// on the first reconcile after the BareMetalHosts were looked up.
fn request() -> RunFunctionRequest {
    let xr = metalplane::render::parse_stream(metalplane::EXAMPLE_XR, "example")
        .expect("example")
        .remove(0);
    let mut req = metalplane::render::request(&xr, &[]).expect("request");
    req.required_resources.insert(
        metalplane::compose::HOSTS_REQUIREMENT.into(),
        Resources { items: vec![] },
    );
    req
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

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
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
}

async fn drive(
    server: &Server,
    req: &RunFunctionRequest,
    count: usize,
    concurrency: usize,
) -> Result<Row, String> {
    let pid = server.child.id();
    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid, "VmRSS:"), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let mut tasks = Vec::new();
    let per = count / concurrency;
    let started = Instant::now();
    for _ in 0..concurrency {
        let ch = connect(&server.addr).await?;
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
        peak_rss_kib: peak.load(Ordering::Relaxed).max(rss_kib(pid, "VmHWM:")),
        cold_start: server.cold_start,
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
        "| server | conc | n | p50 | p90 | p99 | RPS | peak RSS | cold start | p50 vs first | RPS first/this |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        let base = rows
            .iter()
            .find(|b| b.concurrency == r.concurrency)
            .unwrap_or(r);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.0} | {:.1} MiB | {} | {:.1}x | {:.1}x |",
            r.server,
            r.concurrency,
            r.n,
            us(r.p50),
            us(r.p90),
            us(r.p99),
            r.rps,
            r.peak_rss_kib as f64 / 1024.0,
            us(r.cold_start),
            r.p50.as_secs_f64() / base.p50.as_secs_f64(),
            base.rps / r.rps,
        );
    }
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let req = request();
    let reference = desired_view(&metalplane::run(&req));
    let mut rows = Vec::new();
    let all: Vec<(&String, bool)> = args
        .servers
        .iter()
        .map(|s| (s, false))
        .chain(args.floors.iter().map(|s| (s, true)))
        .collect();
    for (spec, floor) in all {
        let server = match start(spec, &req).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        // Same graph, or the comparison is meaningless.
        let ch = match connect(&server.addr).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {}: {e}", server.name);
                return std::process::ExitCode::FAILURE;
            }
        };
        let mut client = FunctionRunnerServiceClient::new(ch);
        let got = match client.run_function(req.clone()).await {
            Ok(r) => desired_view(&r.into_inner()),
            Err(e) => {
                eprintln!("error: {}: {e}", server.name);
                return std::process::ExitCode::FAILURE;
            }
        };
        if !floor && got != reference {
            eprintln!(
                "error: {} does not emit MetalPlane's graph for the built-in example",
                server.name
            );
            eprintln!(
                "--- metalplane\n{}\n--- {}\n{}",
                serde_json::to_string_pretty(&reference).unwrap_or_default(),
                server.name,
                serde_json::to_string_pretty(&got).unwrap_or_default()
            );
            return std::process::ExitCode::FAILURE;
        }
        eprintln!(
            "{}: same graph as MetalPlane; cold start {}",
            server.name,
            us(server.cold_start)
        );
        // Warm-up.
        for _ in 0..200 {
            let _ = client.run_function(req.clone()).await;
        }
        for &c in &args.concurrency {
            match drive(&server, &req, args.count, c.max(1)).await {
                Ok(r) => {
                    eprintln!("{} conc={} p50={} rps={:.0}", r.server, c, us(r.p50), r.rps);
                    rows.push(r);
                }
                Err(e) => {
                    eprintln!("error: {}: {e}", server.name);
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
    }
    let mut order = rows.clone();
    order.sort_by_key(|r| r.concurrency);
    let text = format!(
        "Machine: {}. Request: the built-in example (6 composed resources), {} requests per level, client on the same machine (its cost is in every figure).\n\n{}",
        machine(),
        args.count,
        table(&order)
    );
    println!("{text}");
    if let Some(p) = &args.results
        && let Err(e) = std::fs::write(p, &text)
    {
        eprintln!("error: cannot write {}: {e}", p.display());
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
