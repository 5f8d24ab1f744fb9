//! The composition path: one RunFunctionRequest in, one response out.
//! Pure: no I/O, so the gRPC server, the offline renderer and the
//! benchmarks all run exactly this.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use function_sdk_rust::proto::v1::{Ready, Resource, RunFunctionRequest, RunFunctionResponse};
use function_sdk_rust::request;
use function_sdk_rust::resource::struct_to_json;
use function_sdk_rust::response::{self, ResourceMatch};
use serde_json::Value;

use crate::builders::{capi, cni, fleet, health, ipam, lb, metal3, workers};
use crate::hosts;
use crate::leftovers;
use crate::machines;
use crate::names::Names;
use crate::rollout;
use crate::spec::{self, MetalCluster};
use crate::status::{self, Phase, Pool};

/// Requirement name of the pool's BareMetalHosts.
pub const HOSTS_REQUIREMENT: &str = "hosts";
pub const BMH_API_VERSION: &str = "metal3.io/v1alpha1";
pub const BMH_KIND: &str = "BareMetalHost";

/// How soon Crossplane calls again: with realtime compositions it requeues
/// after the response's TTL. Composed objects are watched; the hosts are
/// only read (required resources), so a claimed host's changes come by the
/// WatchOperation's annotation on the owner (`operate::nudge`), and an
/// unclaimed one's by polling. Quick while something is on its way (3 s:
/// with Crossplane's +-10% jitter and the reconcile's own time, 5 s let the
/// status trail a host by up to 5.8 s in `cargo xtask lab perf`); slow
/// while waiting on people (no host, a host in error); once settled, only
/// as a backstop for what nothing watches (the Machines, read as required
/// resources; a lost watch event), like CAPI's 10 minute sync period; every
/// 30 minutes once the WatchOperation follows the XR's hosts (it has left
/// its annotation on the XR), each look being an apply of every composed
/// object (16 writes for a single node), still twice as often as
/// Crossplane's own drift check (`--sync-interval`, 1 hour).
/// While Crossplane's circuit breaker may drop the XR's watch events (it
/// opens during a bring-up and drops them for 5 minutes), the host's
/// annotation may not reach it either: then the XR looks again every 3 s
/// whatever the phase, well under the breaker's 1 event/s refill.
pub const TTL_MOVING: Duration = Duration::from_secs(3);
pub const TTL_WAITING: Duration = Duration::from_secs(30);
pub const TTL_READY: Duration = Duration::from_secs(600);
pub const TTL_READY_FOLLOWED: Duration = Duration::from_secs(1800);
/// A MetalCluster just Ready still gathers what nothing watches (KCP
/// reports each machine's certificate expiry on the Machines, read as
/// required resources, after the node joined): for its first
/// `SETTLING_S` at Ready it looks again every minute.
pub const TTL_SETTLING: Duration = Duration::from_secs(60);
pub const SETTLING_S: i64 = 300;

/// What the TTL depends on besides the phase and the pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clock {
    /// Crossplane may be dropping the XR's watch events
    /// (`status::watch_events_dropped`).
    pub events_dropped: bool,
    /// The XR became Ready less than `SETTLING_S` ago.
    pub just_ready: bool,
    /// The WatchOperation passes the XR its hosts' transitions: it has
    /// written its annotation (`operate::nudge`) on the XR. Without
    /// `--enable-operations` it never does, and the XR keeps the shorter
    /// look, its only way to see a Ready host's changes.
    pub hosts_followed: bool,
}

impl Clock {
    pub fn of(xr: &Value, now: i64) -> Self {
        Self {
            events_dropped: status::watch_events_dropped(xr, now),
            just_ready: status::ready_since(xr).is_some_and(|t| now - t < SETTLING_S),
            hosts_followed: xr
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(crate::operate::nudge::HOST_OBSERVED_ANNOTATION))
                .is_some(),
        }
    }
}

pub fn ttl(phase: Phase, pool: &Pool<'_>, clock: Clock) -> Duration {
    if clock.events_dropped {
        return TTL_MOVING;
    }
    match phase {
        Phase::Ready | Phase::InferenceReady if clock.just_ready => TTL_SETTLING,
        Phase::Ready | Phase::InferenceReady if clock.hosts_followed => TTL_READY_FOLLOWED,
        Phase::Ready | Phase::InferenceReady => TTL_READY,
        Phase::Provisioning
        | Phase::Bootstrapping
        | Phase::InstallingCNI
        | Phase::RollingOut
        | Phase::Upgrading
        | Phase::Remediating => TTL_MOVING,
        Phase::WaitingForHost => match pool {
            Pool::Unclaimed {
                claimable,
                on_the_way,
                ..
            } if *claimable > 0 || !on_the_way.is_empty() => TTL_MOVING,
            _ => TTL_WAITING,
        },
        Phase::HostError | Phase::JoiningFleet => TTL_WAITING,
    }
}

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
pub fn graph(
    mc: &MetalCluster,
    names: &Names,
    families: Families,
) -> Vec<(Cow<'static, str>, Value)> {
    let mut out = base_graph(mc, names, families);
    if let (true, Some(inf)) = (families.fleet, &mc.spec.inference) {
        let pools = fleet::node_pools(mc, names, inf);
        out.push((
            Cow::Borrowed("inference-kubeconfig"),
            fleet::kubeconfig_copy(mc, names, inf),
        ));
        for p in &pools {
            out.push((Cow::Owned(p.resource.clone()), fleet::class(mc, inf, p)));
        }
        out.push((
            Cow::Borrowed("inference-cluster"),
            fleet::cluster(mc, names, inf, &pools),
        ));
        out.extend(
            fleet::usages(mc, names, &pools)
                .into_iter()
                .map(|(n, v)| (Cow::Owned(n), v)),
        );
    }
    for w in &mc.spec.workers {
        out.extend(
            workers::pool(mc, names, w)
                .into_iter()
                .map(|(n, v)| (Cow::Owned(n), v)),
        );
    }
    out
}

/// The control plane, its health checks and the add-on families.
fn base_graph(
    mc: &MetalCluster,
    names: &Names,
    families: Families,
) -> Vec<(Cow<'static, str>, Value)> {
    let (templates, machine_template) = metal3::control_plane_templates(mc, names);
    let mut out: Vec<(Cow<'static, str>, Value)> = vec![
        (Cow::Borrowed("ippool"), ipam::ippool(mc, names)),
        (Cow::Borrowed("cluster"), capi::cluster(mc, names)),
        (
            Cow::Borrowed("metal3cluster"),
            metal3::metal3_cluster(mc, names),
        ),
    ];
    out.extend(templates.into_iter().map(|(n, v)| (Cow::Owned(n), v)));
    out.push((
        Cow::Borrowed(rollout::KCP),
        capi::kubeadm_control_plane(mc, names, &machine_template),
    ));
    out.extend(
        health::objects(mc, names)
            .into_iter()
            .map(|(n, v)| (Cow::Owned(n), v)),
    );
    let mut rest: Vec<(&'static str, Value)> = Vec::new();
    if families.cni {
        rest.push(("helm-providerconfig", cni::helm_provider_config(mc, names)));
        rest.push(("cilium", cni::cilium_release(mc, names)));
        rest.push(("cilium-needs-cluster", cni::cilium_usage(mc, names)));
        rest.push((
            "cilium-needs-controlplane",
            cni::cilium_control_plane_usage(mc, names),
        ));
        rest.push((
            "cilium-needs-providerconfig",
            cni::cilium_provider_config_usage(mc, names),
        ));
    }
    if let (true, Some(lb_range)) = (families.lb, &mc.spec.network.load_balancer) {
        rest.push((
            "kubernetes-providerconfig",
            lb::workload_provider_config(mc, names),
        ));
        rest.push(("lb-pool", lb::pool(mc, names, lb_range)));
        rest.push(("lb-l2policy", lb::l2_policy(mc, names)));
        rest.extend(lb::usages(mc, names));
    }
    out.extend(rest.into_iter().map(|(n, v)| (Cow::Borrowed(n), v)));
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
pub const READ_OBSERVED: [&str; 5] = [
    "cluster",
    "kubeadmcontrolplane",
    "cilium",
    "inference-cluster",
    HOST_USAGE,
];

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
                    let v = if READ_OBSERVED.contains(&k.as_str())
                        || workers::is_machine_deployment(k)
                        || k.starts_with(HOST_USAGE)
                        || rollout::template_owner(k).is_some()
                    {
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

/// The CNI objects need the workload API, which answers once the control
/// plane is available. Once composed they stay, so a passing blip in the
/// Cluster's conditions never uninstalls Cilium.
pub fn families(observed: &BTreeMap<String, Value>) -> Families {
    let seen = |names: &[&str]| names.iter().any(|n| observed.contains_key(*n));
    let cluster_up = status::api_up(observed.get("cluster"));
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

/// Runs the composition for one request, now.
pub fn compose(req: &RunFunctionRequest) -> RunFunctionResponse {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    compose_at(req, now)
}

/// Runs the composition for one request at `now` (Unix seconds): the
/// clock only decides how many days the certificates have left.
pub fn compose_at(req: &RunFunctionRequest, now: i64) -> RunFunctionResponse {
    let Some(xr) = request::observed_composite(req).and_then(|r| r.resource.as_ref()) else {
        let mut rsp = response::to(req, TTL_WAITING);
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
            let mut rsp = response::to(req, TTL_WAITING);
            response::fatal(&mut rsp, fatal_message(&xr, &errors));
            return rsp;
        }
    };
    let names = Names::new(&mc.name);
    let mut observed = observed_resources(req);

    let hosts = request::get_required_resources(req, HOSTS_REQUIREMENT);
    let pool = status::pool_state(hosts.as_deref(), &names);
    let machine_list =
        request::get_required_resources(req, machines::MACHINES_REQUIREMENT).unwrap_or_default();
    let remediating = !machines::unhealthy(&machine_list, &[]).is_empty();
    let behind = rollout::distrust_stale_sets(&mc, &names, &mut observed, &machine_list);
    let observed = observed;
    let phase = status::phase(&mc, &observed, &pool, remediating, behind);
    let mut rsp = response::to(req, ttl(phase, &pool, Clock::of(&xr, now)));

    // The cluster's Machines: who is being remediated, certificate expiry.
    response::require_resources(
        &mut rsp,
        machines::MACHINES_REQUIREMENT,
        machines::MACHINE_API_VERSION,
        machines::MACHINE_KIND,
        Some(ResourceMatch::Labels(std::collections::HashMap::from([(
            workers::CLUSTER_NAME_LABEL.to_string(),
            names.cluster.clone(),
        )]))),
        Some(mc.namespace.clone()),
    );

    // BareMetalHosts are inventory: read, never composed.
    response::require_resources(
        &mut rsp,
        HOSTS_REQUIREMENT,
        BMH_API_VERSION,
        BMH_KIND,
        Some(ResourceMatch::Labels(status::pool_selector(&mc))),
        Some(mc.namespace.clone()),
    );
    let worker_pools = status::worker_host_pools(&mc);
    let mut worker_hosts = Vec::new();
    for (requirement, pool_name) in &worker_pools {
        response::require_resources(
            &mut rsp,
            requirement,
            BMH_API_VERSION,
            BMH_KIND,
            Some(ResourceMatch::Labels(status::selector(pool_name))),
            Some(mc.namespace.clone()),
        );
        worker_hosts.push(request::get_required_resources(req, requirement));
    }
    // A previous MetalCluster of this name may still be tearing its
    // objects down: a new one composes nothing until they are gone.
    if observed.is_empty() {
        for (requirement, api_version, kind) in leftovers::KINDS {
            response::require_resources(
                &mut rsp,
                requirement,
                api_version,
                kind,
                Some(ResourceMatch::Labels(leftovers::selector(&mc.name))),
                Some(mc.namespace.clone()),
            );
        }
        let found: Vec<(&str, Value)> = leftovers::KINDS
            .into_iter()
            .flat_map(|(requirement, _, kind)| {
                request::get_required_resources(req, requirement)
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |o| (kind, o))
            })
            .collect();
        let objects: Vec<(&str, &Value)> = found.iter().map(|(k, o)| (*k, o)).collect();
        let uid = xr
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let left = leftovers::not_ours(&objects, uid);
        if !left.is_empty() {
            return wait_for_leftovers(req, rsp, &left);
        }
    }

    // Every host claimed for this cluster, once, from every pool read.
    let mut claimed: Vec<&Value> = Vec::new();
    for hs in std::iter::once(&hosts).chain(worker_hosts.iter()).flatten() {
        for h in hs.iter().filter(|h| hosts::is_claimed_by(h, &names)) {
            if !claimed.iter().any(|c| hosts::name(c) == hosts::name(h)) {
                claimed.push(h);
            }
        }
    }
    let all_known = hosts.is_some() && worker_hosts.iter().all(Option::is_some);
    let pool_hosts: BTreeMap<&str, &[Value]> =
        std::iter::once((mc.spec.host.pool.as_str(), hosts.as_deref()))
            .chain(
                worker_pools
                    .iter()
                    .zip(worker_hosts.iter())
                    .map(|((_, p), hs)| (p.as_str(), hs.as_deref())),
            )
            .filter_map(|(p, hs)| Some((p, hs?)))
            .collect();

    let mut desired = graph(&mc, &names, families(&observed));
    // Workers follow the control plane's version, never lead it.
    let cp_at_version = rollout::control_plane_at_version(&mc, &observed);
    for (name, manifest) in desired.iter_mut() {
        if workers::is_machine_deployment(name) {
            rollout::hold_pool(manifest, observed.get(name.as_ref()), cp_at_version);
        }
    }
    let kept = rollout::kept_templates(&desired, &observed);
    desired.extend(kept.into_iter().map(|(n, v)| (Cow::Owned(n), v)));
    for (name, manifest) in desired {
        let Value::Object(map) = manifest else {
            continue;
        };
        let ready = if status::is_ready(&name, observed.get(name.as_ref())) {
            Ready::True
        } else {
            Ready::False
        };
        let desired: &mut Resource = response::desired_composed(&mut rsp, name.as_ref());
        desired.resource = Some(into_struct(map));
        function_sdk_rust::resource::set_ready(desired, ready);
    }

    // The claimed host, or the one already protected (kept while the pool
    // is briefly unknown, so protection never lapses mid-life).
    let protected = match &pool {
        Pool::Claimed(h) => Some(hosts::name(h)),
        _ => observed
            .get(HOST_USAGE)
            .and_then(|u| u.pointer("/spec/of/resourceRef/name"))
            .and_then(Value::as_str),
    };
    if let Some(host) = protected {
        protect(
            &mut rsp,
            &mc,
            HOST_USAGE,
            &names.host_usage,
            host,
            &names.cluster,
        );
    }
    // Every other claimed host (fleets), or, while a pool is unknown, every
    // host already protected.
    let others: Vec<&str> = if all_known {
        claimed
            .iter()
            .map(|h| hosts::name(h))
            .filter(|n| Some(*n) != protected)
            .collect()
    } else {
        observed
            .iter()
            .filter(|(k, _)| k.starts_with(HOST_USAGE) && k.as_str() != HOST_USAGE)
            .filter_map(|(_, u)| {
                u.pointer("/spec/of/resourceRef/name")
                    .and_then(Value::as_str)
            })
            .collect()
    };
    for host in others {
        let resource = format!("{HOST_USAGE}.{host}");
        let name = format!("{}-{host}-in-use", mc.name);
        protect(&mut rsp, &mc, &resource, &name, host, &names.cluster);
    }

    let seen = status::MachinesSeen {
        unhealthy: machines::unhealthy(&machine_list, &claimed),
        expiry: machines::earliest_certificate_expiry(&machine_list),
        behind,
    };
    let xr_status = status::xr_status(&mc, &names, &observed, &pool, &claimed, &seen);
    let composite = response::desired_composite(&mut rsp);
    // A map-shaped status always serializes; the error arm is unreachable.
    let _ = function_sdk_rust::resource::update_status(composite, &xr_status);

    host_conditions(&mut rsp, &xr, &mc, &pool);
    if (mc.spec.fleet || !mc.spec.workers.is_empty()) && all_known {
        capacity_condition(&mut rsp, &xr, &mc, &names, &pool_hosts);
    }
    if mc.spec.inference.is_some() {
        inference_condition(&mut rsp, &observed);
    }

    if let Some(gpu) = &mc.spec.gpu {
        driver_condition(&mut rsp, &xr, gpu.driver_installer_checksum.is_some());
    }
    if mc.spec.health.enabled {
        health_condition(&mut rsp, &seen.unhealthy);
    }
    certificates_condition(&mut rsp, &xr, &mc, seen.expiry.as_ref(), now);
    rsp
}

/// While a previous MetalCluster's objects are left: nothing desired (so
/// nothing is adopted), the phase `WaitingForHost`, `HostClaimed` False
/// saying what is left, and a look every 3 s: they go within seconds.
fn wait_for_leftovers(
    req: &RunFunctionRequest,
    mut composed: RunFunctionResponse,
    left: &[String],
) -> RunFunctionResponse {
    let mut rsp = response::to(req, TTL_MOVING);
    rsp.requirements = composed.requirements.take();
    let composite = response::desired_composite(&mut rsp);
    let _ = function_sdk_rust::resource::update_status(
        composite,
        &serde_json::json!({"phase": Phase::WaitingForHost.as_str()}),
    );
    response::condition_false(&mut rsp, HOST_CLAIMED, PREVIOUS_TEARDOWN).message =
        Some(leftovers::message(left));
    rsp
}

/// `HostClaimed` reason while a previous MetalCluster's objects are left.
pub const PREVIOUS_TEARDOWN: &str = "PreviousTeardown";

pub const NODES_HEALTHY: &str = "NodesHealthy";
pub const CERTIFICATES_VALID: &str = "CertificatesValid";
pub const CERTIFICATES_EXPIRING: &str = "ExpiringSoon";

/// `NodesHealthy`: every machine the MachineHealthChecks found unhealthy,
/// its host and why, while it is remediated.
fn health_condition(rsp: &mut RunFunctionResponse, unhealthy: &[machines::Unhealthy]) {
    if unhealthy.is_empty() {
        response::condition_true(rsp, NODES_HEALTHY, "AllHealthy").message =
            Some("no machine is unhealthy".into());
        return;
    }
    let items: Vec<String> = unhealthy
        .iter()
        .map(|u| match &u.host {
            Some(h) => format!("machine {} on host {h}: {}", u.machine, u.why),
            None => format!("machine {}: {}", u.machine, u.why),
        })
        .collect();
    response::condition_false(rsp, NODES_HEALTHY, "Remediating").message = Some(format!(
        "remediating (rebooting the host through the bare metal operator): {}",
        status::first_n_and_more(items, 5)
    ));
}

/// `CertificatesValid`: when the control plane's earliest certificate
/// expires, and who renews it (KCP's rollout, or the user for a single
/// node that cannot roll); a Warning when it falls under 30 days.
fn certificates_condition(
    rsp: &mut RunFunctionResponse,
    xr: &Value,
    mc: &MetalCluster,
    expiry: Option<&(String, i64)>,
    now: i64,
) {
    let Some((date, at)) = expiry else {
        response::condition_unknown(rsp, CERTIFICATES_VALID, "NotReported").message =
            Some("no control plane machine reports its certificates' expiry yet".into());
        return;
    };
    let days = machines::days_left(*at, now);
    let renewal = if mc.spec.rollable() {
        format!(
            "the control plane rolls onto new machines (new certificates) {} days before",
            mc.spec.kubernetes.renew_certificates_days
        )
    } else {
        "a single node cannot roll: renew them by hand before then (docs/day2.md, Certificates)"
            .to_string()
    };
    let msg =
        format!("the control plane's certificates expire on {date}, in {days} days; {renewal}");
    if days < machines::EXPIRY_WARNING_DAYS {
        warn_on_transition(
            rsp,
            xr,
            CERTIFICATES_VALID,
            CERTIFICATES_EXPIRING,
            msg.clone(),
        );
        response::condition_false(rsp, CERTIFICATES_VALID, CERTIFICATES_EXPIRING).message =
            Some(msg);
    } else {
        response::condition_true(rsp, CERTIFICATES_VALID, "Valid").message = Some(msg);
    }
}

/// Whose a Metal3Machine is, by its name: Machines, and so their
/// Metal3Machines, are named `<kcp>-<random>` (KCP) and
/// `<machinedeployment>-<random>-<random>` (a pool).
enum MachineSet {
    ControlPlane(String),
    Pool(String),
}

impl MachineSet {
    fn owns(&self, consumer: &str) -> bool {
        match self {
            MachineSet::ControlPlane(p) => consumer
                .strip_prefix(p.as_str())
                .is_some_and(|r| !r.contains('-')),
            MachineSet::Pool(p) => consumer.starts_with(p.as_str()),
        }
    }
}

pub const HOSTS_SUFFICE: &str = "HostsSuffice";
pub const NOT_ENOUGH_HOSTS: &str = "NotEnoughHosts";

/// Whether every machine set (the control plane, each worker pool) has or
/// can get a host for each replica: hosts claimed for it plus hosts CAPM3
/// could claim or BMO is bringing to `available` in its pool. Several sets
/// may share a pool: they share its free hosts too.
fn capacity_condition(
    rsp: &mut RunFunctionResponse,
    xr: &Value,
    mc: &MetalCluster,
    names: &Names,
    pool_hosts: &BTreeMap<&str, &[Value]>,
) {
    // One machine behind a VIP rolls by adding its successor first: it
    // needs a spare host for every rollout (upgrade, renewal), so say so
    // before one is due.
    let cp_replicas = u32::from(mc.spec.control_plane.replicas);
    let surge = mc.spec.rollable() && cp_replicas == 1;
    let mut sets: Vec<(String, &str, u32, MachineSet)> = vec![(
        if surge {
            "the control plane (one machine behind a VIP, plus a spare host for its rollouts)"
                .into()
        } else {
            "the control plane".into()
        },
        mc.spec.host.pool.as_str(),
        cp_replicas + u32::from(surge),
        MachineSet::ControlPlane(format!("{}-", names.cluster)),
    )];
    for w in &mc.spec.workers {
        sets.push((
            format!("pool {}", w.name),
            w.pool.as_str(),
            w.replicas,
            MachineSet::Pool(format!("{}-", names.pool(&mc.name, &w.name).machines)),
        ));
    }
    let mut short = Vec::new();
    let mut free_used: BTreeMap<&str, usize> = BTreeMap::new();
    for (what, pool, replicas, ours) in &sets {
        let hs = pool_hosts.get(pool).copied().unwrap_or_default();
        let claimed = hs
            .iter()
            .filter(|h| {
                hosts::is_claimed_by(h, names)
                    && h.pointer("/spec/consumerRef/name")
                        .and_then(Value::as_str)
                        .is_some_and(|c| ours.owns(c))
            })
            .count();
        let free = hs
            .iter()
            .filter(|h| hosts::is_claimable(h, names) || hosts::is_on_the_way(h, names))
            .count();
        let need = (*replicas as usize).saturating_sub(claimed);
        let used = free_used.entry(pool).or_default();
        let left = free.saturating_sub(*used);
        *used += need.min(left);
        if need > left {
            short.push(format!(
                "{what} needs {replicas} host(s): {claimed} claimed, {left} free in pool {pool}"
            ));
        }
    }
    if short.is_empty() {
        response::condition_true(rsp, HOSTS_SUFFICE, "Enough").message =
            Some("every machine has or can get a host in its pool".into());
    } else {
        let msg = format!(
            "{}: label more available BareMetalHosts in namespace {} or lower the replicas",
            short.join("; "),
            mc.namespace
        );
        warn_on_transition(rsp, xr, HOSTS_SUFFICE, NOT_ENOUGH_HOSTS, msg.clone());
        response::condition_false(rsp, HOSTS_SUFFICE, NOT_ENOUGH_HOSTS).message = Some(msg);
    }
}

/// A Usage keeping BareMetalHost `host` while the Cluster exists.
fn protect(
    rsp: &mut RunFunctionResponse,
    mc: &MetalCluster,
    resource: &str,
    name: &str,
    host: &str,
    cluster: &str,
) {
    if let Value::Object(map) = crate::builders::host_usage(mc, name, host, cluster) {
        let desired = response::desired_composed(rsp, resource);
        desired.resource = Some(into_struct(map));
        function_sdk_rust::resource::set_ready(desired, Ready::True);
    }
}

/// Condition types and reasons the function sets on the XR.
pub const HOST_HEALTHY: &str = "HostHealthy";
pub const HOST_ERROR: &str = "HostError";
pub const HOST_ON_THE_WAY: &str = "HostOnTheWay";
pub const DRIVER_VERIFIED: &str = "DriverInstallerVerified";
pub const UNVERIFIED_DRIVER: &str = "UnverifiedDriverInstaller";

/// A Warning event, only when the XR does not already carry `reason` on
/// condition `typ`: events say what changed, the condition what holds.
fn warn_on_transition(
    rsp: &mut RunFunctionResponse,
    xr: &Value,
    typ: &str,
    reason: &str,
    msg: String,
) {
    if observed_condition_reason(xr, typ).as_deref() != Some(reason) {
        response::warning(rsp, msg).reason = Some(reason.into());
    }
}

fn driver_condition(rsp: &mut RunFunctionResponse, xr: &Value, verified: bool) {
    if verified {
        response::condition_true(rsp, DRIVER_VERIFIED, "ChecksumSet").message =
            Some("the GPU driver installer is verified against spec.gpu.driverInstallerChecksum before it runs".into());
        return;
    }
    let msg = "spec.gpu.driverInstallerChecksum is not set: the GPU driver installer runs without verification; give its sha256 when you create a MetalCluster (the field is fixed afterwards)";
    warn_on_transition(rsp, xr, DRIVER_VERIFIED, UNVERIFIED_DRIVER, msg.into());
    response::condition_false(rsp, DRIVER_VERIFIED, UNVERIFIED_DRIVER).message = Some(msg.into());
}

fn host_list(hosts: &[&Value]) -> String {
    let items: Vec<String> = hosts
        .iter()
        .map(|h| match hosts::state(h) {
            "" => format!("{} (new)", hosts::name(h)),
            s => format!("{} ({s})", hosts::name(h)),
        })
        .collect();
    status::first_n_and_more(items, 5)
}

fn host_conditions(rsp: &mut RunFunctionResponse, xr: &Value, mc: &MetalCluster, pool: &Pool<'_>) {
    let pool_name = &mc.spec.host.pool;
    match pool {
        Pool::Unknown => {}
        Pool::Claimed(h) => {
            let host = hosts::name(h);
            response::condition_true(rsp, HOST_CLAIMED, "Claimed").message =
                Some(format!("BareMetalHost {host} is claimed"));
            match hosts::error(h) {
                Some(e) => {
                    let msg = format!(
                        "BareMetalHost {host} reports {} (state {}); the bare metal operator retries, error count {}",
                        e.summary(),
                        hosts::state(h),
                        e.count
                    );
                    warn_on_transition(rsp, xr, HOST_HEALTHY, HOST_ERROR, msg.clone());
                    response::condition_false(rsp, HOST_HEALTHY, HOST_ERROR).message = Some(msg);
                }
                None => {
                    response::condition_true(rsp, HOST_HEALTHY, "NoError").message = Some(format!(
                        "BareMetalHost {host} reports no error (state {})",
                        hosts::state(h)
                    ));
                }
            }
        }
        Pool::Unclaimed {
            claimable,
            on_the_way,
            passed_over,
        } => {
            // A released host's old error must not linger on the XR.
            response::condition_unknown(rsp, HOST_HEALTHY, "NoHostClaimed").message =
                Some("no BareMetalHost is claimed".into());
            if *claimable > 0 {
                response::condition_false(rsp, HOST_CLAIMED, "Waiting").message = Some(format!(
                    "{claimable} available host(s) in pool {pool_name}; waiting for CAPM3 to claim one"
                ));
            } else if !on_the_way.is_empty() {
                response::condition_false(rsp, HOST_CLAIMED, HOST_ON_THE_WAY).message =
                    Some(format!(
                        "no host in pool {pool_name} is available yet; on its way: {}",
                        host_list(on_the_way)
                    ));
            } else {
                let msg = format!("no available host in pool {pool_name}");
                warn_on_transition(rsp, xr, HOST_CLAIMED, NO_AVAILABLE_HOST, msg.clone());
                let why: Vec<String> = passed_over
                    .iter()
                    .map(|(h, why)| format!("{}: {why}", hosts::name(h)))
                    .collect();
                let detail = if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", status::first_n_and_more(why, 5))
                };
                response::condition_false(rsp, HOST_CLAIMED, NO_AVAILABLE_HOST).message = Some(
                    format!(
                        "{msg}{detail}: label an available BareMetalHost in namespace {} with {}={pool_name}",
                        mc.namespace,
                        crate::builders::POOL_LABEL,
                    ),
                );
            }
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
