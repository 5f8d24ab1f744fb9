//! The composition path: one RunFunctionRequest in, one response out.
//! Pure: no I/O, so the gRPC server, the offline renderer and the
//! benchmarks all run exactly this.

use std::collections::BTreeMap;
use std::time::Duration;

use function_sdk_rust::proto::v1::{Ready, Resource, RunFunctionRequest, RunFunctionResponse};
use function_sdk_rust::request;
use function_sdk_rust::resource::struct_to_json;
use function_sdk_rust::response::{self, ResourceMatch};
use serde_json::Value;

use crate::builders::{capi, cni, fleet, ipam, lb, metal3};
use crate::names::Names;
use crate::spec::{self, MetalCluster};
use crate::status::{self, Phase, Pool};

/// Requirement name of the pool's BareMetalHosts.
pub const HOSTS_REQUIREMENT: &str = "hosts";
pub const BMH_API_VERSION: &str = "metal3.io/v1alpha1";
pub const BMH_KIND: &str = "BareMetalHost";

/// Requeue quickly while provisioning so progress shows; slowly once Ready.
pub const TTL_PROGRESSING: Duration = Duration::from_secs(30);
pub const TTL_READY: Duration = Duration::from_secs(60);

/// Condition type that reports whether a host has been claimed.
pub const HOST_CLAIMED: &str = "HostClaimed";
pub const NO_AVAILABLE_HOST: &str = "NoAvailableHost";

/// Composition resource names of the CNI family, composed only once the
/// workload API server exists.
pub const CNI_RESOURCES: [&str; 5] = [
    "helm-providerconfig",
    "cilium",
    "cilium-needs-cluster",
    "cilium-needs-controlplane",
    "cilium-needs-providerconfig",
];

/// The Modelplane family, composed once the workload API server exists.
pub const FLEET_RESOURCES: [&str; 7] = [
    "inference-kubeconfig",
    "inference-class",
    "inference-cluster",
    "inference-needs-cluster",
    "inference-needs-controlplane",
    "inference-needs-kubeconfig",
    "inference-needs-class",
];

/// The LoadBalancer family, composed once Cilium (and its CRDs) is up.
pub const LB_RESOURCES: [&str; 7] = [
    "kubernetes-providerconfig",
    "lb-pool",
    "lb-l2policy",
    "lb-pool-needs-cilium",
    "lb-l2policy-needs-cilium",
    "lb-pool-needs-providerconfig",
    "lb-l2policy-needs-providerconfig",
];

/// Which optional families to compose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Families {
    pub cni: bool,
    pub fleet: bool,
    pub lb: bool,
}

/// The composed graph in a stable order: (composition resource name, manifest).
pub fn graph(mc: &MetalCluster, names: &Names, families: Families) -> Vec<(&'static str, Value)> {
    let mut out = vec![
        ("ippool", ipam::ippool(mc, names)),
        ("cluster", capi::cluster(mc, names)),
        ("metal3cluster", metal3::metal3_cluster(mc, names)),
        ("metal3machinetemplate", metal3::machine_template(mc, names)),
        ("metal3datatemplate", metal3::data_template(mc, names)),
        (
            "kubeadmcontrolplane",
            capi::kubeadm_control_plane(mc, names),
        ),
    ];
    if families.cni {
        out.push(("helm-providerconfig", cni::helm_provider_config(mc, names)));
        out.push(("cilium", cni::cilium_release(mc, names)));
        out.push(("cilium-needs-cluster", cni::cilium_usage(mc, names)));
        out.push((
            "cilium-needs-controlplane",
            cni::cilium_control_plane_usage(mc, names),
        ));
        out.push((
            "cilium-needs-providerconfig",
            cni::cilium_provider_config_usage(mc, names),
        ));
    }
    if let (true, Some(inf)) = (families.fleet, &mc.spec.inference) {
        out.push((
            "inference-kubeconfig",
            fleet::kubeconfig_copy(mc, names, inf),
        ));
        out.push(("inference-class", fleet::class(mc, names, inf)));
        out.push(("inference-cluster", fleet::cluster(mc, names, inf)));
        out.extend(fleet::usages(mc, names));
    }
    if let (true, Some(lb_range)) = (families.lb, &mc.spec.network.load_balancer) {
        out.push((
            "kubernetes-providerconfig",
            lb::workload_provider_config(mc, names),
        ));
        out.push(("lb-pool", lb::pool(mc, names, lb_range)));
        out.push(("lb-l2policy", lb::l2_policy(mc, names)));
        out.extend(lb::usages(mc, names));
    }
    out
}

/// Moves a JSON object into a protobuf Struct. Unlike the SDK's borrowing
/// `json_to_struct` it copies no string: this conversion was the largest
/// single cost of a compose (callgrind).
pub fn into_struct(m: serde_json::Map<String, Value>) -> pbjson_types::Struct {
    pbjson_types::Struct {
        fields: m.into_iter().map(|(k, v)| (k, into_pb(v))).collect(),
    }
}

fn into_pb(v: Value) -> pbjson_types::Value {
    use pbjson_types::value::Kind;
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Kind::StringValue(s),
        Value::Array(a) => Kind::ListValue(pbjson_types::ListValue {
            values: a.into_iter().map(into_pb).collect(),
        }),
        Value::Object(m) => Kind::StructValue(into_struct(m)),
    };
    pbjson_types::Value { kind: Some(kind) }
}

/// Observed composed resources whose state the function reads; every
/// other observed resource only counts as present (Null), which spares
/// converting objects whose content nothing looks at.
pub const READ_OBSERVED: [&str; 4] = ["cluster", "cilium", "inference-cluster", HOST_USAGE];

/// Composition resource name of the Usage protecting the claimed host.
pub const HOST_USAGE: &str = "host-in-use";

/// Observed composed resources by composition resource name.
pub fn observed_resources(req: &RunFunctionRequest) -> BTreeMap<String, Value> {
    req.observed
        .as_ref()
        .map(|o| {
            o.resources
                .iter()
                .filter_map(|(k, r)| {
                    let s = r.resource.as_ref()?;
                    let v = if READ_OBSERVED.contains(&k.as_str()) {
                        struct_to_json(s)
                    } else {
                        Value::Null
                    };
                    Some((k.clone(), v))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The CNI objects need the workload kubeconfig, which exists only once the
/// cluster is available. Once composed they stay, so a passing blip in the
/// Cluster's conditions never uninstalls Cilium.
pub fn families(observed: &BTreeMap<String, Value>) -> Families {
    let seen = |names: &[&str]| names.iter().any(|n| observed.contains_key(*n));
    let cluster_up = status::is_ready("cluster", observed.get("cluster"));
    Families {
        cni: cluster_up || seen(&CNI_RESOURCES),
        // Modelplane adopts through the workload kubeconfig.
        fleet: cluster_up || seen(&FLEET_RESOURCES),
        // Cilium's CRDs exist once Cilium runs.
        lb: status::is_ready("cilium", observed.get("cilium")) || seen(&LB_RESOURCES),
    }
}

fn fatal_message(xr: &Value, errors: &[spec::FieldError]) -> String {
    let ns = xr
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or(spec::DEFAULT_NAMESPACE);
    let name = xr
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>");
    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
    format!(
        "invalid MetalCluster {ns}/{name}: {}; nothing was changed, fix the spec and apply it again",
        list.join("; ")
    )
}

fn observed_condition_reason(xr: &Value, typ: &str) -> Option<String> {
    xr.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(typ))
        .and_then(|c| c.get("reason").and_then(Value::as_str))
        .map(String::from)
}

/// Runs the composition for one request.
pub fn compose(req: &RunFunctionRequest) -> RunFunctionResponse {
    let Some(xr) = request::observed_composite(req).and_then(|r| r.resource.as_ref()) else {
        let mut rsp = response::to(req, TTL_PROGRESSING);
        response::fatal(
            &mut rsp,
            "the request has no observed composite resource (MetalCluster)",
        );
        return rsp;
    };
    let xr = struct_to_json(xr);

    let mc = match spec::parse(&xr) {
        Ok(mc) => mc,
        Err(errors) => {
            let mut rsp = response::to(req, TTL_PROGRESSING);
            response::fatal(&mut rsp, fatal_message(&xr, &errors));
            return rsp;
        }
    };
    let names = Names::new(&mc.name);
    let observed = observed_resources(req);

    let hosts = request::get_required_resources(req, HOSTS_REQUIREMENT);
    let pool = status::pool_state(hosts.as_deref(), &names);
    let phase = status::phase(&observed, pool, mc.spec.inference.is_some());
    let ttl = if phase == Phase::Ready {
        TTL_READY
    } else {
        TTL_PROGRESSING
    };
    let mut rsp = response::to(req, ttl);

    // BareMetalHosts are inventory: read, never composed.
    response::require_resources(
        &mut rsp,
        HOSTS_REQUIREMENT,
        BMH_API_VERSION,
        BMH_KIND,
        Some(ResourceMatch::Labels(status::pool_selector(&mc))),
        Some(mc.namespace.clone()),
    );

    for (name, manifest) in graph(&mc, &names, families(&observed)) {
        let Value::Object(map) = manifest else {
            continue;
        };
        let ready = if status::is_ready(name, observed.get(name)) {
            Ready::True
        } else {
            Ready::False
        };
        let desired: &mut Resource = response::desired_composed(&mut rsp, name);
        desired.resource = Some(into_struct(map));
        function_sdk_rust::resource::set_ready(desired, ready);
    }

    // The claimed host, or the one already protected (kept while the pool
    // is briefly unknown, so protection never lapses mid-life).
    let protected = match pool {
        Pool::Claimed(h) => h.pointer("/metadata/name").and_then(Value::as_str),
        _ => observed
            .get(HOST_USAGE)
            .and_then(|u| u.pointer("/spec/of/resourceRef/name"))
            .and_then(Value::as_str),
    };
    if let Some(host) = protected
        && let Value::Object(map) =
            crate::builders::host_usage(&mc, &names.host_usage, host, &names.cluster)
    {
        let desired = response::desired_composed(&mut rsp, HOST_USAGE);
        desired.resource = Some(into_struct(map));
        function_sdk_rust::resource::set_ready(desired, Ready::True);
    }

    let xr_status = status::xr_status(&mc, &names, &observed, pool);
    let composite = response::desired_composite(&mut rsp);
    // A map-shaped status always serializes; the error arm is unreachable.
    let _ = function_sdk_rust::resource::update_status(composite, &xr_status);

    host_condition(&mut rsp, &xr, &mc, pool);
    if mc.spec.inference.is_some() {
        inference_condition(&mut rsp, &observed);
    }

    if let Some(gpu) = &mc.spec.gpu
        && gpu.driver_installer_checksum.is_none()
    {
        let r = response::warning(
            &mut rsp,
            "spec.gpu.driverInstallerChecksum is not set: the GPU driver installer will run without verification; set its sha256",
        );
        r.reason = Some("UnverifiedDriverInstaller".into());
    }
    rsp
}

fn host_condition(rsp: &mut RunFunctionResponse, xr: &Value, mc: &MetalCluster, pool: Pool<'_>) {
    match pool {
        Pool::Unknown => {}
        Pool::Claimed(h) => {
            let host = h
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            response::condition_true(rsp, HOST_CLAIMED, "Claimed").message =
                Some(format!("BareMetalHost {host} is claimed"));
        }
        Pool::Unclaimed { claimable: 0 } => {
            let msg = format!("no available host in pool {}", mc.spec.host.pool);
            // Say it once: only on the transition into this state.
            if observed_condition_reason(xr, HOST_CLAIMED).as_deref() != Some(NO_AVAILABLE_HOST) {
                response::warning(rsp, msg.clone()).reason = Some(NO_AVAILABLE_HOST.into());
            }
            response::condition_false(rsp, HOST_CLAIMED, NO_AVAILABLE_HOST).message =
                Some(format!(
                    "{msg}: label an available BareMetalHost in namespace {} with {}={}",
                    mc.namespace,
                    crate::builders::POOL_LABEL,
                    mc.spec.host.pool
                ));
        }
        Pool::Unclaimed { claimable } => {
            response::condition_false(rsp, HOST_CLAIMED, "Waiting").message = Some(format!(
                "{claimable} available host(s) in pool {}; waiting for CAPM3 to claim one",
                mc.spec.host.pool
            ));
        }
    }
}

fn inference_condition(rsp: &mut RunFunctionResponse, observed: &BTreeMap<String, Value>) {
    match status::inference_gateway(observed.get("inference-cluster")) {
        Some(addr) => {
            response::condition_true(rsp, "InferenceReady", "GatewayReady").message = Some(
                format!("the InferenceCluster is Ready and its gateway answers at {addr}"),
            );
        }
        None if observed.contains_key("inference-cluster") => {
            response::condition_false(rsp, "InferenceReady", "Joining").message =
                Some("Modelplane is adopting the cluster; waiting for the InferenceCluster to be Ready with a gateway address".into());
        }
        None => {
            response::condition_false(rsp, "InferenceReady", "WaitingForCluster").message = Some(
                "the InferenceCluster is composed once the workload cluster is available".into(),
            );
        }
    }
}
