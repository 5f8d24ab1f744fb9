//! In-process cost of the function: the compose path for the built-in
//! example and a large variant (inference, everything observed), and the
//! operation decision. `response::to` (copying the request forward, which
//! every function does) is measured in the same run as the floor to
//! compare against.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use function_sdk_rust::proto::v1::{RunFunctionRequest, RunFunctionResponse};
use metalplane::render;
use prost::Message as _;

mod requests;
use requests::{example_request, fleet_request, load, with_hosts};

// The server's allocator, so in-process figures compare with its own.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
        Some(28)
    );

    let mut g = c.benchmark_group("function");
    g.bench_function("floor: response::to (example)", |b| {
        b.iter(|| {
            function_sdk_rust::response::to(black_box(&example), metalplane::compose::TTL_READY)
        })
    });
    // The two ends of the wire around compose: what a server pays to read
    // the request and write the response, beside the compose itself.
    let bytes = example.encode_to_vec();
    g.bench_function("decode: request (example)", |b| {
        b.iter(|| RunFunctionRequest::decode(black_box(bytes.as_slice())))
    });
    let rsp = metalplane::run(&example);
    g.bench_function("encode: response (example)", |b| {
        b.iter(|| black_box(&rsp).encode_to_vec())
    });
    // What the client (Crossplane) pays to read our answer.
    let rsp_bytes = rsp.encode_to_vec();
    g.bench_function("decode: response (example)", |b| {
        b.iter(|| RunFunctionResponse::decode(black_box(rsp_bytes.as_slice())))
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

criterion_group!(compose, benches);
criterion_main!(compose);
