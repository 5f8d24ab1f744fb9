//! The operation path: a decision table over BareMetalHost fixtures (every
//! state, error, driver and address form), the Jobs it emits, and the
//! operation round trip over gRPC with the watched resource.

mod common;

use common::*;
use function_sdk_rust::proto::v1::RunFunctionResponse;
use function_sdk_rust::resource::struct_to_json;
use k8s_openapi::api::batch::v1::Job;
use metalplane::operate::bmc::parse_address;
use metalplane::operate::decide;
use metalplane::operate::input::Input;
use metalplane::render;
use serde_json::{Value, json};

const STATES: [&str; 14] = [
    "",
    "unmanaged",
    "registering",
    "match profile",
    "preparing",
    "ready",
    "available",
    "provisioning",
    "provisioned",
    "externally provisioned",
    "deprovisioning",
    "inspecting",
    "powering off before delete",
    "deleting",
];

fn bmh(name: &str, address: &str, state: &str) -> Value {
    json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": "metal"},
        "spec": {"bmc": {"address": address, "credentialsName": format!("{name}-bmc")},
                 "consumerRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "Metal3Machine", "name": "r730-cluster-controlplane-8k2xq", "namespace": "metal"}},
        "status": {"provisioning": {"state": state}, "errorMessage": "", "errorCount": 0, "poweredOn": true},
    })
}

const IDRAC: &str = "idrac-virtualmedia://192.168.120.20/redfish/v1/Systems/System.Embedded.1";

/// The output and the Jobs an operation applies.
fn run(host: &Value, input: Option<Value>, required: &[Value]) -> (Value, Vec<Value>) {
    let (out, applied, _) = run_all(host, input, required);
    let jobs = applied.into_iter().filter(|d| d["kind"] == "Job").collect();
    (out, jobs)
}

/// The output, everything applied, and the results.
fn run_all(
    host: &Value,
    input: Option<Value>,
    required: &[Value],
) -> (Value, Vec<Value>, Vec<(String, String)>) {
    let r = render::operate(host, input.as_ref(), required).unwrap_or_else(|e| panic!("{e}"));
    let output = r.documents[0]["status"]["pipeline"][0]["output"].clone();
    (output, r.documents[1..].to_vec(), r.results)
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// A host whose virtual media failed `count` times, with the reset record
/// `record` (count, errorCount, seconds ago) on it.
fn failing(count: i64, record: Option<(u32, i64, i64)>) -> Value {
    let mut h = bmh("r730", IDRAC, "provisioning");
    h["status"]["errorMessage"] = json!("Virtual media mount failed: Base.1.2.InternalError");
    h["status"]["errorCount"] = json!(count);
    h["status"]["errorType"] = json!("provisioning error");
    if let Some((n, e, ago)) = record {
        h["metadata"]["annotations"] = json!({
            "metal.kube.farm/bmc-resets": json!({"count": n, "errorCount": e, "at": now() - ago}).to_string(),
        });
    }
    h
}

/// The reset record an operation writes on the host, if any.
fn record_written(applied: &[Value]) -> Option<Value> {
    applied
        .iter()
        .find(|d| d["kind"] == "BareMetalHost")
        .map(|h| {
            let raw = h["metadata"]["annotations"]["metal.kube.farm/bmc-resets"]
                .as_str()
                .unwrap_or_default();
            serde_json::from_str(raw).unwrap_or(Value::Null)
        })
}

#[test]
fn every_state_gets_the_right_action() {
    for state in STATES {
        let (out, jobs) = run(&bmh("r730", IDRAC, state), None, &[]);
        let want = if ["inspecting", "provisioning", "deprovisioning"].contains(&state) {
            "fix-boot-order"
        } else {
            "none"
        };
        assert_eq!(out["action"], want, "state {state:?}: {out}");
        assert_eq!(jobs.len(), usize::from(want != "none"), "state {state:?}");
        assert_eq!(out["host"], "metal/r730");
        assert_eq!(out["state"], state);
        assert!(!out["reason"].as_str().unwrap_or_default().is_empty());
    }
}

#[test]
fn boot_order_job_names_follow_the_original() {
    for (state, short) in [
        ("inspecting", "inspec"),
        ("provisioning", "provis"),
        ("deprovisioning", "deprov"),
    ] {
        let (out, jobs) = run(&bmh("r730", IDRAC, state), None, &[]);
        assert_eq!(
            out["job"],
            format!("r730-{short}-r730-cluster-controlplane-8k2xq")
        );
        assert_eq!(jobs[0]["metadata"]["name"], out["job"]);
    }
    let mut h = bmh("r730", IDRAC, "inspecting");
    h["spec"].as_object_mut().map(|s| s.remove("consumerRef"));
    assert_eq!(run(&h, None, &[]).0["job"], "r730-inspec-none");
}

#[test]
fn virtual_media_failure_resets_the_idrac_once_per_error_count() {
    // Each failure an hour after the last reset: a reset, recorded.
    for count in [1, 2, 3] {
        let prev = (count > 1).then(|| (count as u32 - 1, count - 1, 3600));
        let h = failing(count, prev);
        let (out, applied, results) = run_all(&h, None, &[]);
        assert_eq!(
            out["action"], "reset-bmc",
            "the reset wins over the boot order: {out}"
        );
        assert_eq!(out["job"], format!("r730-bmcreset-{count}"));
        let jobs: Vec<&Value> = applied.iter().filter(|d| d["kind"] == "Job").collect();
        assert_eq!(jobs.len(), 1);
        assert_eq!(
            jobs[0]["spec"]["template"]["spec"]["containers"][0]["args"][0],
            "reset-bmc"
        );
        let rec = record_written(&applied).expect("the reset is recorded on the host");
        assert_eq!(
            (rec["count"].as_i64(), rec["errorCount"].as_i64()),
            (Some(count), Some(count))
        );
        assert!((rec["at"].as_i64().unwrap_or(0) - now()).abs() < 60);
        // The record patch carries only the annotation.
        let patch = applied
            .iter()
            .find(|d| d["kind"] == "BareMetalHost")
            .expect("patch");
        assert!(
            patch.get("spec").is_none() && patch.get("status").is_none(),
            "{patch}"
        );
        assert!(results.is_empty(), "{results:?}");
        // The same errorCount again (another field changed): no second reset.
        let again = failing(count, Some((count as u32, count, 5)));
        let (out, applied, _) = run_all(&again, None, &[]);
        assert_eq!(out["action"], "none", "{out}");
        assert!(applied.is_empty(), "{applied:?}");
    }
}

#[test]
fn the_reset_budget_lives_on_the_host_and_is_paced() {
    // Spent: three resets recorded, the Jobs long gone (TTL).
    let (out, applied, results) = run_all(&failing(4, Some((3, 3, 7200))), None, &[]);
    assert_eq!(out["action"], "none");
    assert!(
        out["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("budget of 3"),
        "{out}"
    );
    assert!(applied.is_empty());
    assert!(
        results
            .iter()
            .any(|(sev, m)| sev.to_ascii_lowercase().contains("warning") && m.contains("budget")),
        "a spent budget is a Warning (an event on the Operation): {results:?}"
    );
    // The input raises it.
    let (out, _) = run(
        &failing(4, Some((3, 3, 7200))),
        Some(json!({"maxResets": 5})),
        &[],
    );
    assert_eq!(out["action"], "reset-bmc", "{out}");
    // Paced: BMO retried while the iDRAC still restarts from the last reset.
    let (out, applied, _) = run_all(&failing(2, Some((1, 1, 120))), None, &[]);
    assert_eq!(out["action"], "none");
    assert!(
        out["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("120 s after"),
        "{out}"
    );
    assert!(applied.is_empty());
    let (out, _) = run(
        &failing(2, Some((1, 1, 120))),
        Some(json!({"resetIntervalSeconds": 60})),
        &[],
    );
    assert_eq!(out["action"], "reset-bmc", "{out}");
    // Reset Jobs still present count too (a record lost or removed).
    let present: Vec<Value> = (0..3)
        .map(|i| json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": format!("r730-bmcreset-x{i}"), "namespace": "metal",
            "labels": {"metal.kube.farm/host": "r730", "metal.kube.farm/action": "reset-bmc"}}}))
        .collect();
    let (out, _) = run(&failing(1, None), None, &present);
    assert_eq!(out["action"], "none", "{out}");
    // A healthy host ends the episode: the budget is whole again.
    let mut healthy = bmh("r730", IDRAC, "provisioned");
    healthy["metadata"]["annotations"] = json!({"metal.kube.farm/bmc-resets": json!({"count": 3, "errorCount": 3, "at": 1}).to_string()});
    let (out, applied, _) = run_all(&healthy, None, &[]);
    assert_eq!(out["action"], "none");
    let rec = record_written(&applied).expect("the record is cleared");
    assert_eq!(rec["count"], 0);
    // Cleared already: nothing written.
    healthy["metadata"]["annotations"] = json!({"metal.kube.farm/bmc-resets": json!({"count": 0, "errorCount": 0, "at": 0}).to_string()});
    assert!(run_all(&healthy, None, &[]).1.is_empty());
}

#[test]
fn jobs_run_the_installed_package() {
    let h = bmh("r730", IDRAC, "provisioning");
    let image = |out: &Value, jobs: &[Value]| {
        let j = jobs[0]["spec"]["template"]["spec"]["containers"][0]["image"].clone();
        assert_eq!(out["image"], j, "the output names the Job's image");
        j
    };
    // No Function object (a development run): the published package.
    let (out, jobs) = run(&h, None, &[]);
    assert_eq!(
        image(&out, &jobs),
        format!(
            "ghcr.io/kube-farm/function-metalplane:v{}",
            env!("CARGO_PKG_VERSION")
        )
    );
    // Installed through a mirror: the rewritten path.
    let function = json!({"apiVersion": "pkg.crossplane.io/v1", "kind": "Function",
        "metadata": {"name": "kube-farm-function-metalplane"},
        "spec": {"package": "ghcr.io/kube-farm/function-metalplane:v0.1.0"},
        "status": {"resolvedPackage": "registry.lab:5000/kube-farm/function-metalplane:v0.1.0"}});
    let (out, jobs) = run(&h, None, std::slice::from_ref(&function));
    assert_eq!(
        image(&out, &jobs),
        "registry.lab:5000/kube-farm/function-metalplane:v0.1.0"
    );
    // The input wins.
    let (out, jobs) = run(&h, Some(json!({"image": "example.org/bmc:1"})), &[function]);
    assert_eq!(image(&out, &jobs), "example.org/bmc:1");
}

#[test]
fn only_idrac_drivers_unless_widened() {
    let cases = [
        (
            "idrac-virtualmedia://10.0.0.5/redfish/v1/Systems/System.Embedded.1",
            true,
        ),
        (
            "idrac-redfish://10.0.0.5/redfish/v1/Systems/System.Embedded.1",
            true,
        ),
        (
            "idrac-redfish+http://10.0.0.5:8000/redfish/v1/Systems/System.Embedded.1",
            true,
        ),
        ("idrac://10.0.0.5", false),
        (
            "redfish-virtualmedia://10.0.0.5/redfish/v1/Systems/1",
            false,
        ),
        ("redfish+https://10.0.0.5/redfish/v1/Systems/1", false),
        ("ipmi://10.0.0.5:623", false),
        ("ilo5-virtualmedia://10.0.0.5/redfish/v1/Systems/1", false),
    ];
    for (addr, acts) in cases {
        let (out, _) = run(&bmh("h1", addr, "provisioning"), None, &[]);
        assert_eq!(out["action"] != "none", acts, "{addr}: {out}");
    }
    let widened = json!({"drivers": ["idrac-*", "redfish*"]});
    let (out, jobs) = run(
        &bmh(
            "h1",
            "redfish-virtualmedia://10.0.0.5/redfish/v1/Systems/1",
            "provisioning",
        ),
        Some(widened),
        &[],
    );
    assert_eq!(out["action"], "fix-boot-order");
    let env = &jobs[0]["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(env.as_array().is_some_and(|e| {
        e.iter()
            .any(|v| v["name"] == "BMC_SYSTEM_ID" && v["value"] == "1")
    }));
}

#[test]
fn bmc_urls_from_every_address_form() {
    for (addr, url, system) in [
        (
            "idrac-virtualmedia://192.168.120.20/redfish/v1/Systems/System.Embedded.1",
            "https://192.168.120.20",
            Some("System.Embedded.1"),
        ),
        (
            "idrac-virtualmedia+https://192.168.120.20:8443/redfish/v1/Systems/System.Embedded.1",
            "https://192.168.120.20:8443",
            Some("System.Embedded.1"),
        ),
        (
            "idrac-redfish+http://bmc-r730.lab:8000/redfish/v1/Systems/System.Embedded.1/",
            "http://bmc-r730.lab:8000",
            Some("System.Embedded.1"),
        ),
        (
            "idrac-virtualmedia://[fd00::20]/redfish/v1/Systems/System.Embedded.1",
            "https://[fd00::20]",
            Some("System.Embedded.1"),
        ),
        (
            "idrac-virtualmedia+https://[fd00::20]:8443/redfish/v1/Systems/System.Embedded.1",
            "https://[fd00::20]:8443",
            Some("System.Embedded.1"),
        ),
        ("idrac-redfish://10.0.0.5", "https://10.0.0.5", None),
        ("idrac-redfish://10.0.0.5:443/", "https://10.0.0.5", None),
    ] {
        let e = parse_address(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
        assert_eq!(e.base_url, url, "{addr}");
        assert_eq!(e.system_id.as_deref(), system, "{addr}");
    }
    for bad in [
        "10.0.0.5",
        "idrac-redfish+ftp://10.0.0.5",
        "idrac-redfish://",
        "idrac-redfish://user:pw@10.0.0.5",
        "IDRAC$://x",
    ] {
        assert!(parse_address(bad).is_err(), "{bad}");
    }
}

#[test]
fn hosts_without_what_is_needed_are_skipped_with_a_reason() {
    let mut no_creds = bmh("r730", IDRAC, "provisioning");
    no_creds["spec"]["bmc"]
        .as_object_mut()
        .map(|b| b.remove("credentialsName"));
    let mut no_addr = bmh("r730", IDRAC, "provisioning");
    no_addr["spec"]["bmc"]
        .as_object_mut()
        .map(|b| b.remove("address"));
    let mut bad_addr = bmh("r730", "idrac-virtualmedia://", "provisioning");
    bad_addr["status"]["errorMessage"] = json!("Virtual media mount failed");
    let mut paused = bmh("r730", IDRAC, "provisioning");
    paused["metadata"]["annotations"] = json!({"baremetalhost.metal3.io/paused": ""});
    let mut detached = bmh("r730", IDRAC, "provisioned");
    detached["metadata"]["annotations"] = json!({"baremetalhost.metal3.io/detached": ""});
    for (h, why) in [
        (no_creds, "credentialsName"),
        (no_addr, "spec.bmc.address"),
        (bad_addr, "empty host"),
        (paused, "paused"),
        (detached, "detached"),
    ] {
        let (out, jobs) = run(&h, None, &[]);
        assert_eq!(out["action"], "none");
        assert!(
            out["reason"].as_str().unwrap_or_default().contains(why),
            "{out}"
        );
        assert!(jobs.is_empty());
    }
}

#[test]
fn jobs_are_safe_and_typed() {
    let mut h = bmh("r730", IDRAC, "provisioning");
    h["spec"]["bmc"]["disableCertificateVerification"] = json!(true);
    let (_, jobs) = run(&h, None, &[]);
    let job: Job = serde_json::from_value(jobs[0].clone()).expect("a batch/v1 Job");
    let spec = job.spec.expect("spec");
    assert_eq!(spec.backoff_limit, Some(2));
    assert_eq!(spec.ttl_seconds_after_finished, Some(3600));
    assert!(spec.active_deadline_seconds.is_some_and(|d| d > 900));
    let pod = spec.template.spec.expect("pod");
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.automount_service_account_token, Some(false));
    let psc = pod.security_context.expect("pod security");
    assert_eq!(
        (psc.run_as_non_root, psc.run_as_user),
        (Some(true), Some(2000))
    );
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().expect("container security");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert!(
        c.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .is_some_and(|l| l.contains_key("memory") && l.contains_key("cpu"))
    );
    let env = c.env.as_ref().expect("env");
    let get = |n: &str| env.iter().find(|e| e.name == n).cloned();
    assert_eq!(
        get("BMC_URL").and_then(|e| e.value).as_deref(),
        Some("https://192.168.120.20")
    );
    assert_eq!(
        get("BMC_INSECURE").and_then(|e| e.value).as_deref(),
        Some("true"),
        "the host opted out of verification"
    );
    for (var, key) in [("BMC_USERNAME", "username"), ("BMC_PASSWORD", "password")] {
        let e = get(var).expect(var);
        assert!(e.value.is_none(), "credentials never inline");
        let r = e
            .value_from
            .and_then(|v| v.secret_key_ref)
            .expect("secretKeyRef");
        assert_eq!((r.name.as_str(), r.key.as_str()), ("r730-bmc", key));
    }
    // Verification stays on by default.
    let (_, jobs) = run(&bmh("r730", IDRAC, "provisioning"), None, &[]);
    assert!(!jobs[0].to_string().contains("BMC_INSECURE"));
}

#[test]
fn long_names_are_cut_to_63_with_a_hash() {
    let long_host = "r730-".to_string() + &"x".repeat(50);
    let consumer = "c".repeat(60);
    let a = decide::boot_job_name(&long_host, "provisioning", Some(&consumer));
    let b = decide::boot_job_name(&long_host, "provisioning", Some(&(consumer.clone() + "z")));
    assert!(a.len() <= 63 && b.len() <= 63, "{a}");
    assert_ne!(a, b, "distinct inputs stay distinct");
    assert_eq!(
        a,
        decide::boot_job_name(&long_host, "provisioning", Some(&consumer)),
        "deterministic"
    );
    assert!(metalplane::validate::dns_label(&a).is_ok(), "{a}");
    let dotted = decide::reset_job_name("r730.lab.example", 2);
    assert!(
        metalplane::validate::dns_label(&dotted).is_ok()
            && dotted.starts_with("r730-lab-example-bmcreset-2-"),
        "{dotted}"
    );
    assert_eq!(decide::reset_job_name("r730", 2), "r730-bmcreset-2");
}

#[test]
fn dry_run_reports_and_creates_nothing() {
    let (out, jobs) = run(
        &bmh("r730", IDRAC, "inspecting"),
        Some(json!({"dryRun": true})),
        &[],
    );
    assert_eq!(out["action"], "fix-boot-order");
    assert_eq!(out["dryRun"], true);
    assert!(jobs.is_empty());
}

#[test]
fn bad_input_is_fatal_by_field() {
    for (input, field) in [
        (json!({"mediaWaitSeconds": 1}), "input.mediaWaitSeconds"),
        (json!({"bootDevice": "x; reboot"}), "input.bootDevice"),
        (json!({"image": "img with space"}), "input.image"),
        (json!({"drivers": []}), "input.drivers"),
        (json!({"maxResets": "three"}), "invalid operation input"),
    ] {
        let err = render::operate(&bmh("r730", IDRAC, "inspecting"), Some(&input), &[])
            .expect_err("refused");
        assert!(err.to_string().contains(field), "{input}: {err}");
    }
    let err = render::operate(
        &json!({"kind": "Secret", "metadata": {"name": "x"}}),
        None,
        &[],
    )
    .expect_err("not a BMH");
    assert!(err.to_string().contains("not a BareMetalHost"));
}

#[test]
fn operation_manifests_validate() {
    let schemas = Schemas::get();
    for d in load_yaml(&repo_root().join("apis/operations/watchoperation.yaml")) {
        schemas.assert_valid(&d);
        // Its input is what the function accepts.
        let input = d
            .pointer("/spec/operationTemplate/spec/pipeline/0/input")
            .cloned()
            .expect("input");
        let parsed: Input = serde_json::from_value(input).expect("input parses");
        parsed.validate().expect("input is valid");
    }
    for d in load_yaml(&repo_root().join("package/crossplane.yaml")) {
        schemas.assert_valid(&d);
        assert_eq!(
            d["spec"]["capabilities"],
            json!(["composition", "operation"])
        );
    }
    let input_crd =
        load_yaml(&repo_root().join("package/input/metalplane.fn.kube.farm_bmcremediations.yaml"))
            .remove(0);
    assert_eq!(input_crd["spec"]["group"], "metalplane.fn.kube.farm");
    assert_eq!(input_crd["spec"]["names"]["kind"], "BMCRemediation");
}

#[tokio::test]
async fn operation_round_trip_over_grpc() {
    use function_sdk_rust::proto::v1::function_runner_service_client::FunctionRunnerServiceClient;
    let (server, port) = start_function(&["--insecure"], &[], None);
    let mut failed = bmh("r730", IDRAC, "provisioning");
    failed["status"]["errorMessage"] = json!("Virtual media mount failed");
    failed["status"]["errorCount"] = json!(2);
    let mut req = render::operation_request(&failed, None).expect("request");
    let mut client = FunctionRunnerServiceClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .expect("connect");
    let rsp: RunFunctionResponse = client
        .run_function(req.clone())
        .await
        .expect("RunFunction")
        .into_inner();
    drop(server);
    // The function asks for the host's reset Jobs, then decides.
    let reqs = rsp.requirements.as_ref().expect("requirements");
    let sel = &reqs.resources["reset-jobs"];
    assert_eq!(
        (
            sel.api_version.as_str(),
            sel.kind.as_str(),
            sel.namespace.as_deref()
        ),
        ("batch/v1", "Job", Some("metal"))
    );
    // The reset record carries the time of the call: compare without it.
    let without_record = |mut r: RunFunctionResponse| {
        if let Some(d) = r.desired.as_mut() {
            d.resources.remove(metalplane::operate::HOST_RECORD);
        }
        r
    };
    assert_eq!(
        without_record(rsp.clone()),
        without_record(metalplane::run(&req)),
        "the wire answer equals the in-process answer"
    );
    let output = struct_to_json(rsp.output.as_ref().expect("output"));
    assert_eq!(output["action"], "reset-bmc");
    let desired = rsp.desired.as_ref().expect("desired");
    let job = struct_to_json(
        desired.resources["r730-bmcreset-2"]
            .resource
            .as_ref()
            .expect("job"),
    );
    assert_eq!(job["kind"], "Job");
    assert!(rsp.results.is_empty(), "{:?}", rsp.results);
    req.required_resources
        .remove("ops.crossplane.io/watched-resource");
    assert!(!metalplane::operate::is_operation(&req));
}

/// Crossplane fetches the watched host when the Operation starts; a host
/// deleted by then arrives as an empty entry. That is no failure.
#[test]
fn a_vanished_host_is_reported_not_failed() {
    let mut req =
        render::operation_request(&bmh("r730", IDRAC, "provisioning"), None).expect("request");
    let watched = req
        .required_resources
        .get_mut("ops.crossplane.io/watched-resource")
        .expect("watched entry");
    watched.items.clear();
    assert!(metalplane::operate::is_operation(&req));
    let rsp = metalplane::run(&req);
    assert!(rsp.results.is_empty(), "{:?}", rsp.results);
    let output = struct_to_json(rsp.output.as_ref().expect("output"));
    assert_eq!(output["action"], "none");
    assert!(
        output["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("no longer exists"),
        "{output}"
    );
    let desired = rsp.desired.map(|d| d.resources.len()).unwrap_or_default();
    assert_eq!(desired, 0, "no Job for a host that is gone");
}

/// A claimed host's owning MetalCluster, as Crossplane reads it back.
fn owner(annotation: Option<&str>) -> Value {
    let mut xr = json!({
        "apiVersion": "metal.kube.farm/v1alpha1",
        "kind": "MetalCluster",
        "metadata": {"name": "r730", "namespace": "metal"},
        "spec": {},
    });
    if let Some(a) = annotation {
        xr["metadata"]["annotations"] = json!({"metal.kube.farm/host-observed": a});
    }
    xr
}

fn claimed(state: &str) -> Value {
    let mut h = bmh("r730", IDRAC, state);
    h["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "r730-cluster"});
    h["status"]["operationalStatus"] = json!("OK");
    h
}

/// The owner annotated, if the operation applied it.
fn nudge_of(applied: &[Value]) -> Option<&Value> {
    applied.iter().find(|d| d["kind"] == "MetalCluster")
}

#[test]
fn a_claimed_hosts_change_reaches_its_metalcluster_once() {
    let (out, applied, _) = run_all(&claimed("provisioned"), None, &[owner(None)]);
    let nudge = nudge_of(&applied).expect("the owner is annotated");
    assert_eq!(
        nudge["metadata"],
        json!({"name": "r730", "namespace": "metal", "annotations": {
            "metal.kube.farm/host-observed": "r730: provisioned, power on, OK"}})
    );
    assert_eq!(nudge.get("spec"), None, "one annotation, nothing else");
    assert_eq!(out["ownerNudged"], "metal/r730");

    // Crossplane runs the operation again for the same host with nothing
    // new: the owner already shows it, so nothing is written.
    let shown = owner(Some("r730: provisioned, power on, OK"));
    let (out, applied, _) = run_all(&claimed("provisioned"), None, std::slice::from_ref(&shown));
    assert_eq!(nudge_of(&applied), None);
    assert_eq!(out.get("ownerNudged"), None);

    // The same owner, the host now in error: written again.
    let mut failed = claimed("provisioned");
    failed["status"]["operationalStatus"] = json!("error");
    failed["status"]["errorType"] = json!("power management error");
    failed["status"]["errorCount"] = json!(1);
    let (_, applied, _) = run_all(&failed, Some(json!({"dryRun": true})), &[shown]);
    let line = &nudge_of(&applied).expect("dry runs refresh status too")["metadata"]["annotations"]
        ["metal.kube.farm/host-observed"];
    assert_eq!(
        line,
        "r730: provisioned, power on, error, power management error (attempt 1)"
    );
}

#[test]
fn no_owner_no_write() {
    // The owner is gone (or a hand-made Cluster claimed the host): nothing
    // is applied, so a deleted MetalCluster is never recreated.
    let (out, applied, _) = run_all(&claimed("deprovisioning"), None, &[]);
    assert_eq!(nudge_of(&applied), None, "{applied:?}");
    assert_eq!(out.get("ownerNudged"), None);
    // An unclaimed host names no owner.
    let (_, applied, _) = run_all(&bmh("r730", IDRAC, "available"), None, &[owner(None)]);
    assert_eq!(nudge_of(&applied), None);
}
