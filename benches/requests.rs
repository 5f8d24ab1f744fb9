//! Requests shared by the criterion benchmark and the load generator, so
//! both measure the same inputs.

use std::path::Path;

use function_sdk_rust::proto::v1::RunFunctionRequest;
use metalplane::render;
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

pub fn load(p: &str) -> Vec<Value> {
    render::load_documents(&root().join(p)).expect("fixture")
}

pub fn with_hosts(mut req: RunFunctionRequest, hosts: &[Value]) -> RunFunctionRequest {
    render::with_required(&mut req, metalplane::compose::HOSTS_REQUIREMENT, hosts).expect("hosts");
    req
}

/// The built-in example with its pool resolved empty: what Crossplane sends
/// on the first reconcile after the BareMetalHosts were looked up.
pub fn example_request() -> RunFunctionRequest {
    let xr = render::parse_stream(metalplane::EXAMPLE_XR, "example")
        .expect("example")
        .remove(0);
    with_hosts(render::request(&xr, &[]).expect("request"), &[])
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
pub fn fleet_request(n: usize) -> RunFunctionRequest {
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
