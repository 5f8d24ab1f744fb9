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
        Some(20)
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
    g.bench_function("compose: large (inference, 20 observed)", |b| {
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
}

criterion_group!(compose, benches);
criterion_main!(compose);
