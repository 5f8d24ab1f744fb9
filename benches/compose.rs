//! In-process cost of the function: the compose path for the built-in
//! example and a large variant (inference, everything observed), and the
//! operation decision. `response::to` (copying the request forward, which
//! every function does) is measured in the same run as the floor to
//! compare against.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use function_sdk_rust::proto::v1::RunFunctionRequest;
use metalplane::render;
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn load(p: &str) -> Vec<Value> {
    render::load_documents(&root().join(p)).expect("fixture")
}

fn with_hosts(mut req: RunFunctionRequest, hosts: &[Value]) -> RunFunctionRequest {
    render::with_required(&mut req, metalplane::compose::HOSTS_REQUIREMENT, hosts).expect("hosts");
    req
}

pub fn example_request() -> RunFunctionRequest {
    let xr = render::parse_stream(metalplane::EXAMPLE_XR, "example")
        .expect("example")
        .remove(0);
    with_hosts(render::request(&xr, &[]).expect("request"), &[])
}

fn large_request() -> RunFunctionRequest {
    let xr = load("examples/metalcluster/r730-inference.yaml").remove(0);
    let observed = load("tests/fixtures/observed/inference");
    with_hosts(
        render::request(&xr, &observed).expect("request"),
        &load("tests/fixtures/hosts"),
    )
}

fn operation_request() -> RunFunctionRequest {
    let mut host = load("tests/fixtures/hosts/r730-provisioned.yaml").remove(0);
    host["status"]["provisioning"]["state"] = "provisioning".into();
    render::operation_request(&host, None).expect("request")
}

fn benches(c: &mut Criterion) {
    let example = example_request();
    let large = large_request();
    let op = operation_request();
    assert_eq!(
        metalplane::compose::compose(&large)
            .desired
            .as_ref()
            .map(|d| d.resources.len()),
        Some(26)
    );

    let mut g = c.benchmark_group("function");
    g.bench_function("floor: response::to (example)", |b| {
        b.iter(|| {
            function_sdk_rust::response::to(black_box(&example), metalplane::compose::TTL_READY)
        })
    });
    g.bench_function("compose: built-in example", |b| {
        b.iter(|| metalplane::run(black_box(&example)))
    });
    g.bench_function("compose: large (inference, 25 observed)", |b| {
        b.iter(|| metalplane::run(black_box(&large)))
    });
    g.bench_function("operation: full (provisioning host)", |b| {
        b.iter(|| metalplane::run(black_box(&op)))
    });
    let host = load("tests/fixtures/hosts/r730-provisioned.yaml").remove(0);
    let input = metalplane::operate::input::Input::default();
    g.bench_function("operation: decide only", |b| {
        b.iter(|| {
            metalplane::operate::decide::decide(
                black_box(&host),
                black_box(&input),
                Some(0),
                1_800_000_000,
            )
        })
    });
    g.finish();

    // Fleet size: every host claimed and listed, one Usage each; the
    // objects per pool are fixed, so the cost should grow linearly in nodes.
    let mut g = c.benchmark_group("fleet");
    for n in [1, 10, 50] {
        let req = fleet_request(n);
        assert_eq!(
            metalplane::compose::compose(&req)
                .results
                .iter()
                .filter(|r| r.severity == 1)
                .count(),
            0
        );
        g.bench_function(format!("nodes={n:02}"), |b| {
            b.iter(|| metalplane::run(black_box(&req)))
        });
    }
    g.finish();
}

/// A claimed, provisioned host of `pool` for the fleet example's cluster.
fn claimed(name: &str, pool: &str) -> Value {
    let mut h = load("tests/fixtures/hosts/r730-provisioned.yaml").remove(0);
    h["metadata"]["name"] = name.into();
    h["metadata"]["labels"]["metal.kube.farm/pool"] = pool.into();
    h["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] = "rack1-cluster".into();
    h["spec"]["consumerRef"]["name"] = format!("{name}-m3m").into();
    h
}

/// One node: the built-in example on its claimed host. More: three
/// control plane machines and a gpu pool of n - 3, every host claimed.
fn fleet_request(n: usize) -> RunFunctionRequest {
    if n == 1 {
        let mut h = load("tests/fixtures/hosts/r730-provisioned.yaml").remove(0);
        h["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] = "r730-cluster".into();
        let xr = render::parse_stream(metalplane::EXAMPLE_XR, "example")
            .expect("example")
            .remove(0);
        return with_hosts(render::request(&xr, &[]).expect("request"), &[h]);
    }
    let mut xr = load("examples/metalcluster/fleet.yaml").remove(0);
    xr["spec"]["workers"] = serde_json::json!([{
        "name": "gpu", "replicas": n - 3, "pool": "rack1-gpu",
        "addresses": "10.40.8.30-10.40.8.129",
        "gpu": xr["spec"]["workers"][0]["gpu"].clone(),
    }]);
    let cp: Vec<Value> = (1..=3)
        .map(|i| claimed(&format!("cp-{i}"), "rack1-cp"))
        .collect();
    let gpu: Vec<Value> = (1..=n - 3)
        .map(|i| claimed(&format!("gpu-{i}"), "rack1-gpu"))
        .collect();
    let mut req = with_hosts(render::request(&xr, &[]).expect("request"), &cp);
    render::with_required(&mut req, "hosts.rack1-gpu", &gpu).expect("hosts");
    req
}

criterion_group!(compose, benches);
criterion_main!(compose);
