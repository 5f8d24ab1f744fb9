//! End to end against real upstream tools, built by this test from the Go
//! module proxy (tests/tools/go.mod) into ~/.cache/metalplane-lab the first
//! time:
//! - the Crossplane CLI (v2.2 `crank`): `render`, `alpha render op` and
//!   `beta validate` against our function served on loopback, with the
//!   CLI's output required to equal our own `render`/`operate` output;
//! - `k8s.io/apiextensions-apiserver` over Debian's etcd: every rendered
//!   object is applied with server-side dry run, so the real schemas,
//!   defaulting and CEL rules judge them.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// Outside the clone, keyed by tests/tools/go.sum, beside the lab's
/// binaries (`$METALPLANE_LAB_CACHE`, else `~/.cache/metalplane-lab`): a
/// fresh CI clone finds the tools of the last run instead of building
/// them again.
fn bin_dir() -> PathBuf {
    use xtask::lab::build::{cache_root, go_sum_key};
    let key = go_sum_key(&repo_root().join("tests/tools")).expect("tests/tools/go.sum");
    cache_root().join(format!("e2e-tools-{key}"))
}

/// Builds the Go tools once per machine (about 5 minutes cold on 2 cores).
/// Go's own module and build caches (outside the clone) are shared with
/// the lab's builds.
fn go_tools() -> &'static PathBuf {
    static T: OnceLock<PathBuf> = OnceLock::new();
    T.get_or_init(|| {
        let bin = bin_dir();
        std::fs::create_dir_all(&bin).expect("the tools' cache folder");
        for (out, pkg) in [
            ("crank", "github.com/crossplane/crossplane/v2/cmd/crank"),
            ("apiextensions-apiserver", "k8s.io/apiextensions-apiserver"),
        ] {
            if bin.join(out).exists() {
                continue;
            }
            // Built under a temporary name: an interrupted build never
            // leaves a binary that would count as present.
            let partial = bin.join(format!("{out}.partial"));
            let status = Command::new("go")
                .current_dir(repo_root().join("tests/tools"))
                .env("GOFLAGS", "-mod=mod")
                .args(["build", "-o"])
                .arg(&partial)
                .arg(pkg)
                .status()
                .expect("the go command runs (Go is part of this machine kind)");
            assert!(status.success(), "go build {pkg} failed");
            std::fs::rename(&partial, bin.join(out)).expect("rename the built tool");
        }
        bin
    })
}

fn crank() -> PathBuf {
    go_tools().join("crank")
}

/// Debian's etcd-server, installed when missing (CI runs as root).
fn etcd() -> PathBuf {
    static E: OnceLock<PathBuf> = OnceLock::new();
    E.get_or_init(|| {
        let p = PathBuf::from("/usr/bin/etcd");
        if !p.exists() {
            let ok = Command::new("sh")
                .args(["-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server"])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok && p.exists(), "cannot install etcd-server from Debian");
        }
        p
    })
    .clone()
}

/// Our function, served insecure on loopback for the CLI's Development runtime.
fn function() -> (Proc, String) {
    let (proc, port) = start_function(&["--insecure"], &[], None);
    (proc, format!("127.0.0.1:{port}"))
}

fn run(cmd: &mut Command) -> Output {
    cmd.current_dir(repo_root()).output().expect("runs")
}

fn docs(out: &Output, what: &str) -> Vec<Value> {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    metalplane::render::parse_stream(&String::from_utf8_lossy(&out.stdout), what).expect("YAML")
}

/// The reset record on a host carries the time of the run: the two
/// renders ran seconds apart, so its `at` is left out of the comparison.
/// The CLI lists applied resources in no fixed order (a Go map): both
/// sides are sorted.
fn without_reset_time(mut docs: Vec<Value>) -> Vec<Value> {
    let key = |o: &Value| {
        let s = |p: &str| {
            o.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        (
            s("/apiVersion"),
            s("/kind"),
            s("/metadata/name"),
            s("/name"),
        )
    };
    if docs.len() > 1 {
        docs[1..].sort_by_key(key);
    }
    if let Some(Value::Array(refs)) = docs
        .first_mut()
        .and_then(|d| d.pointer_mut("/status/appliedResourceRefs"))
    {
        refs.sort_by_key(key);
    }
    for d in &mut docs {
        if let Some(Value::String(raw)) =
            d.pointer_mut("/metadata/annotations/metal.kube.farm~1bmc-resets")
            && let Ok(mut rec) = serde_json::from_str::<Value>(raw)
        {
            assert!(
                rec["at"].as_i64().is_some_and(|t| t > 1_700_000_000),
                "{rec}"
            );
            rec["at"] = json!(0);
            *raw = rec.to_string();
        }
    }
    docs
}

fn ours(args: &[&str]) -> Output {
    run(Command::new(env!("CARGO_BIN_EXE_function-metalplane")).args(args))
}

fn crank_render(target: &str, xr: &str, extra: &[&str]) -> Output {
    run(Command::new(crank())
        .args([
            "render",
            xr,
            "examples/render/composition.yaml",
            "examples/render/functions.yaml",
        ])
        .arg(format!(
            "--function-annotations=render.crossplane.io/runtime-development-target={target}"
        ))
        .args(extra))
}

#[test]
fn crossplane_render_equals_our_render() {
    let (_f, target) = function();
    let cases: [(&str, &[&str]); 4] = [
        ("examples/render/xr.yaml", &[]),
        (
            "examples/render/xr.yaml",
            &[
                "-o",
                "tests/fixtures/observed/ready",
                "-e",
                "tests/fixtures/hosts",
            ],
        ),
        (
            "examples/metalcluster/r730-inference.yaml",
            &[
                "-o",
                "tests/fixtures/observed/inference",
                "-e",
                "tests/fixtures/hosts",
            ],
        ),
        (
            "examples/metalcluster/r730-inference.yaml",
            &[
                "-o",
                "tests/fixtures/observed/ready",
                "-e",
                "tests/fixtures/hosts",
                "-r",
            ],
        ),
    ];
    for (xr, extra) in cases {
        let cli = docs(&crank_render(&target, xr, extra), "crossplane render");
        let mut args = vec!["render", xr];
        args.extend_from_slice(extra);
        let mine = docs(&ours(&args), "function-metalplane render");
        assert!(cli.len() >= 7, "{xr} {extra:?}: {} documents", cli.len());
        assert_eq!(
            cli, mine,
            "crossplane render and our render differ for {xr} {extra:?}"
        );
    }
}

#[test]
fn crossplane_render_reports_our_fatal() {
    let (_f, target) = function();
    let dir = tempfile::tempdir().expect("tmp");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        metalplane::EXAMPLE_XR.replace("gateway: 192.168.120.1", "gateway: 10.9.9.9"),
    )
    .expect("write");
    let out = crank_render(&target, bad.to_str().expect("path"), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.network.gateway") && err.contains("10.9.9.9"),
        "{err}"
    );
}

fn operation_input(dir: &Path) -> PathBuf {
    let op = load_yaml(&repo_root().join("examples/operation/operation.yaml")).remove(0);
    let p = dir.join("input.yaml");
    std::fs::write(
        &p,
        serde_json::to_string(&op["spec"]["pipeline"][0]["input"]).expect("json"),
    )
    .expect("write");
    p
}

#[test]
fn crossplane_render_op_equals_our_operate() {
    let (_f, target) = function();
    let dir = tempfile::tempdir().expect("tmp");
    let input = operation_input(dir.path());
    let mut scenarios = Vec::new();
    for state in [
        "provisioning",
        "inspecting",
        "deprovisioning",
        "provisioned",
        "available",
    ] {
        let mut h =
            load_yaml(&repo_root().join("tests/fixtures/hosts/r730-provisioned.yaml")).remove(0);
        h["status"]["provisioning"]["state"] = json!(state);
        scenarios.push((state.to_string(), h));
    }
    let mut failed = scenarios[0].1.clone();
    failed["status"]["errorMessage"] = json!("Virtual media mount failed: Base.1.2.InternalError");
    failed["status"]["errorCount"] = json!(2);
    scenarios.push(("vmedia-failure".into(), failed));
    let mut ipmi = scenarios[0].1.clone();
    ipmi["spec"]["bmc"]["address"] = json!("ipmi://192.168.120.20:623");
    scenarios.push(("ipmi".into(), ipmi));

    let mut actions = Vec::new();
    for (name, host) in scenarios {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, serde_json::to_string(&host).expect("json")).expect("write");
        let p = path.to_str().expect("path");
        let cli = docs(
            &run(Command::new(crank())
                .args(["alpha", "render", "op", "examples/operation/operation.yaml", "examples/operation/functions.yaml", "-w", p])
                .arg(format!("--function-annotations=render.crossplane.io/runtime-development-target={target}"))),
            "crossplane alpha render op",
        );
        let mine = docs(
            &ours(&["operate", p, "--input", input.to_str().expect("path")]),
            "function-metalplane operate",
        );
        assert_eq!(
            without_reset_time(cli.clone()),
            without_reset_time(mine),
            "{name}: crossplane alpha render op and our operate differ"
        );
        actions.push((
            name,
            cli[0]["status"]["pipeline"][0]["output"]["action"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            cli.len() - 1,
        ));
    }
    let want = [
        ("provisioning", "fix-boot-order", 1),
        ("inspecting", "fix-boot-order", 1),
        ("deprovisioning", "fix-boot-order", 1),
        ("provisioned", "none", 0),
        ("available", "none", 0),
        // The Job and the reset record on the host.
        ("vmedia-failure", "reset-bmc", 2),
        ("ipmi", "none", 0),
    ];
    let got: Vec<(&str, &str, usize)> = actions
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), *c))
        .collect();
    assert_eq!(got, want);
}

/// CRDs and XRDs the CLI and the API server validate against: the shared
/// upstream copies, Modelplane's XRDs, our XRD and input CRD.
fn schema_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(crd_dir())
        .expect("crds")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files.push(crd_dir().join("modelplane/inferenceclasses/definition.yaml"));
    files.push(crd_dir().join("modelplane/inferenceclusters/definition.yaml"));
    files.push(repo_root().join("apis/metalclusters/definition.yaml"));
    files.push(repo_root().join("package/input/metalplane.fn.kube.farm_bmcremediations.yaml"));
    files
}

#[test]
fn crossplane_beta_validate_accepts_everything_we_render() {
    let dir = tempfile::tempdir().expect("tmp");
    let schemas = dir.path().join("schemas");
    std::fs::create_dir(&schemas).expect("mkdir");
    for (i, f) in schema_files().iter().enumerate() {
        // Links, not copies: the CRDs stay in ../shared.
        std::os::unix::fs::symlink(
            f,
            schemas.join(format!(
                "{i:02}-{}",
                f.file_name().expect("name").to_string_lossy()
            )),
        )
        .expect("link");
    }
    let mut rendered = String::new();
    for args in [
        vec!["render"],
        vec![
            "render",
            "-o",
            "tests/fixtures/observed/ready",
            "-e",
            "tests/fixtures/hosts",
        ],
        vec![
            "render",
            "examples/metalcluster/r730-inference.yaml",
            "-o",
            "tests/fixtures/observed/inference",
            "-e",
            "tests/fixtures/hosts",
        ],
    ] {
        // The rendered XR carries only its status; the full XRs come below.
        for d in docs(&ours(&args), "render")
            .into_iter()
            .filter(|d| d["kind"] != "MetalCluster")
        {
            rendered.push_str("---\n");
            rendered.push_str(&serde_json::to_string(&d).expect("json"));
            rendered.push('\n');
        }
    }
    for f in [
        "examples/metalcluster/r730.yaml",
        "examples/metalcluster/r730-inference.yaml",
        "tests/fixtures/hosts/r730-provisioned.yaml",
        "apis/operations/watchoperation.yaml",
        "examples/operation/operation.yaml",
        "apis/metalclusters/composition.yaml",
    ] {
        rendered.push_str("---\n");
        rendered.push_str(&std::fs::read_to_string(repo_root().join(f)).expect("read"));
    }
    let resources = dir.path().join("rendered.yaml");
    std::fs::write(&resources, &rendered).expect("write");
    // The CLI wants Crossplane's own CRDs from the Crossplane image, which
    // cannot be pulled here: seed its cache with the shared upstream copies.
    let cache = dir.path().join("cache");
    let image = "local/crossplane:v2.2.1";
    let seeded = cache.join(image.replace(':', "@"));
    std::fs::create_dir_all(&seeded).expect("mkdir");
    let mut builtin = String::new();
    for f in schema_files() {
        let n = f.file_name().expect("name").to_string_lossy().to_string();
        if [
            "apiextensions.crossplane.io_",
            "ops.crossplane.io_",
            "pkg.crossplane.io_",
            "protection.crossplane.io_",
        ]
        .iter()
        .any(|p| n.starts_with(p))
        {
            builtin.push_str(&std::fs::read_to_string(&f).expect("read"));
            builtin.push_str("\n---\n");
        }
    }
    std::fs::write(seeded.join("package.yaml"), builtin).expect("write");
    let validate = |resources: &Path| {
        run(Command::new(crank())
            .args([
                "beta",
                "validate",
                "--error-on-missing-schemas",
                "--crossplane-image",
                image,
                "--cache-dir",
            ])
            .arg(&cache)
            .arg(&schemas)
            .arg(resources))
    };
    let out = validate(&resources);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("0 failure cases") && text.contains("0 missing schemas"),
        "{text}"
    );

    // And it does refuse a broken object.
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        rendered.replace("\"diskFormat\":\"qcow2\"", "\"diskFormat\":\"iso\""),
    )
    .expect("write");
    let out = validate(&broken);
    assert!(!out.status.success(), "a bad enum must fail validation");
}

// ---- a real API server -------------------------------------------------

struct ApiServer {
    _etcd: Proc,
    _apiserver: Proc,
    _dir: tempfile::TempDir,
    base: String,
    client: reqwest::Client,
}

fn admin_identity(dir: &Path) -> (PathBuf, reqwest::Identity) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "e2e-client-ca");
    let ca =
        CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("ca");
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    // system:masters passes authorization without any webhook.
    params
        .distinguished_name
        .push(DnType::CommonName, "metalplane-e2e");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    let cert = params.signed_by(&key, &ca).expect("sign");
    let ca_path = dir.join("client-ca.crt");
    std::fs::write(&ca_path, ca.pem()).expect("write");
    let pem = format!("{}{}", cert.pem(), key.serialize_pem());
    (
        ca_path,
        reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"),
    )
}

async fn start_apiserver() -> ApiServer {
    let tools = go_tools().clone();
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let (client_port, peer_port, api_port) = (free_port(), free_port(), free_port());
    let etcd = Command::new(etcd())
        .arg("--data-dir")
        .arg(d.join("etcd"))
        .args([
            "--listen-client-urls",
            &format!("http://127.0.0.1:{client_port}"),
        ])
        .args([
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{client_port}"),
        ])
        .args([
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer_port}"),
        ])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer_port}"),
        ])
        .args([
            "--initial-cluster",
            &format!("default=http://127.0.0.1:{peer_port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd starts");
    let etcd = Proc(etcd);
    wait_listening(client_port, "etcd");
    // The server needs a kubeconfig for the core API it would delegate to;
    // nothing answers there, and nothing needs to.
    let kubeconfig = d.join("none.kubeconfig");
    std::fs::write(&kubeconfig, "apiVersion: v1\nkind: Config\nclusters:\n- name: none\n  cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}\nusers:\n- name: none\n  user: {token: none}\ncontexts:\n- name: none\n  context: {cluster: none, user: none}\ncurrent-context: none\n").expect("write");
    let (client_ca, identity) = admin_identity(d);
    let apiserver = Command::new(tools.join("apiextensions-apiserver"))
        .args(["--etcd-servers", &format!("http://127.0.0.1:{client_port}")])
        .args(["--bind-address", "127.0.0.1", "--secure-port", &api_port.to_string()])
        .arg("--cert-dir")
        .arg(d.join("certs"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--authentication-kubeconfig")
        .arg(&kubeconfig)
        .arg("--authorization-kubeconfig")
        .arg(&kubeconfig)
        .args(["--authentication-skip-lookup", "--authentication-tolerate-lookup-failure"])
        .arg("--client-ca-file")
        .arg(&client_ca)
        // No core API behind it: namespaces and webhooks do not exist here.
        .args(["--disable-admission-plugins", "NamespaceLifecycle,MutatingAdmissionPolicy,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("apiserver.log")).expect("log"))
        .spawn()
        .expect("apiextensions-apiserver starts");
    let apiserver = Proc(apiserver);
    wait_listening(api_port, "apiextensions-apiserver");
    let client = reqwest::Client::builder()
        .identity(identity)
        .tls_danger_accept_invalid_certs(true)
        .build()
        .expect("client");
    let base = format!("https://127.0.0.1:{api_port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = client
            .get(format!(
                "{base}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
            ))
            .send()
            .await;
        if r.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        assert!(Instant::now() < deadline, "the API server did not answer");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ApiServer {
        _etcd: etcd,
        _apiserver: apiserver,
        _dir: dir,
        base,
        client,
    }
}

/// The CRD Crossplane would generate for an XRD, close enough for the API
/// server to judge our XRs: same names and schema, plus the fields
/// Crossplane adds.
fn crd_from_xrd(xrd: &Value) -> Value {
    let spec = &xrd["spec"];
    let versions: Vec<Value> = spec["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut schema = v["schema"]["openAPIV3Schema"].clone();
            let props = schema["properties"].as_object_mut().expect("properties");
            props.insert("apiVersion".into(), json!({"type": "string"}));
            props.insert("kind".into(), json!({"type": "string"}));
            props.insert("metadata".into(), json!({"type": "object"}));
            if let Some(s) = props.get_mut("spec").and_then(|s| s["properties"].as_object_mut()) {
                s.insert("crossplane".into(), json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
            }
            let status = props.entry("status").or_insert_with(|| json!({"type": "object", "properties": {}}));
            if let Some(s) = status["properties"].as_object_mut() {
                s.insert("conditions".into(), json!({"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}));
            }
            json!({"name": v["name"], "served": true, "storage": i == 0, "schema": {"openAPIV3Schema": schema}, "subresources": {"status": {}}})
        })
        .collect();
    let mut names = spec["names"].clone();
    names["listKind"] = json!(format!(
        "{}List",
        names["kind"].as_str().unwrap_or_default()
    ));
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{}", names["plural"].as_str().unwrap_or_default(), spec["group"].as_str().unwrap_or_default())},
        "spec": {"group": spec["group"], "names": names, "scope": spec["scope"].as_str().unwrap_or("Namespaced"), "versions": versions},
    })
}

/// (group, kind) -> (plural, namespaced)
type Kinds = std::collections::HashMap<(String, String), (String, bool)>;

async fn install_crds(api: &ApiServer) -> Kinds {
    let mut kinds = Kinds::new();
    let mut names = Vec::new();
    for f in schema_files() {
        for doc in load_yaml(&f) {
            let crd = if doc["kind"] == "CompositeResourceDefinition" {
                crd_from_xrd(&doc)
            } else {
                doc
            };
            let group = crd["spec"]["group"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let kind = crd["spec"]["names"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let plural = crd["spec"]["names"]["plural"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let namespaced = crd["spec"]["scope"] != "Cluster";
            kinds.insert((group, kind), (plural, namespaced));
            let r = api
                .client
                .post(format!(
                    "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    api.base
                ))
                .json(&crd)
                .send()
                .await
                .expect("POST CRD");
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            assert!(
                status.is_success(),
                "installing {}: {status} {body}",
                crd["metadata"]["name"]
            );
            names.push(
                crd["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    for n in names {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v: Value = api
                .client
                .get(format!(
                    "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}",
                    api.base
                ))
                .send()
                .await
                .expect("GET")
                .json()
                .await
                .expect("json");
            let established = v["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
            if established {
                break;
            }
            assert!(Instant::now() < deadline, "{n} never became Established");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    kinds
}

/// Server-side apply with dryRun=All: (HTTP status, body).
async fn dry_run(api: &ApiServer, kinds: &Kinds, obj: &Value) -> (u16, String) {
    let (group, version) = obj["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .split_once('/')
        .expect("group/version");
    let kind = obj["kind"].as_str().unwrap_or_default();
    let (plural, namespaced) = kinds
        .get(&(group.to_string(), kind.to_string()))
        .unwrap_or_else(|| panic!("no CRD for {group} {kind}"));
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("metal");
    let path = if *namespaced {
        format!("/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}")
    } else {
        format!("/apis/{group}/{version}/{plural}/{name}")
    };
    let r = api
        .client
        .patch(format!(
            "{}{path}?dryRun=All&fieldManager=metalplane-e2e&force=true",
            api.base
        ))
        .header("Content-Type", "application/apply-patch+yaml")
        .body(serde_json::to_vec(obj).expect("json"))
        .send()
        .await
        .expect("PATCH");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

/// Everything we render in the scenarios that matter, with the XR given a
/// uid as the API server assigns one (owner references need it).
fn rendered_objects() -> Vec<Value> {
    let dir = tempfile::tempdir().expect("tmp");
    let mut out = Vec::new();
    for (xr, extra) in [
        ("examples/metalcluster/r730.yaml", vec![]),
        (
            "examples/metalcluster/r730.yaml",
            vec![
                "-o",
                "tests/fixtures/observed/ready",
                "-e",
                "tests/fixtures/hosts",
            ],
        ),
        (
            "examples/metalcluster/r730-inference.yaml",
            vec![
                "-o",
                "tests/fixtures/observed/inference",
                "-e",
                "tests/fixtures/hosts",
            ],
        ),
    ] {
        let mut x = load_yaml(&repo_root().join(xr)).remove(0);
        x["metadata"]["uid"] = json!("6c1e5a4e-1111-4000-8000-000000000001");
        let p = dir.path().join("xr.yaml");
        std::fs::write(&p, serde_json::to_string(&x).expect("json")).expect("write");
        let mut args = vec!["render", p.to_str().expect("path")];
        args.extend(extra);
        let docs = docs(&ours(&args), "render");
        for mut d in docs {
            if d["kind"] == "MetalCluster" {
                // The XR as a user applies it (the server assigns the uid),
                // with the status we desire.
                let status = d["status"].clone();
                d = x.clone();
                d["metadata"].as_object_mut().map(|m| m.remove("uid"));
                d["status"] = status;
            }
            if d["kind"] == "Object" {
                let m = d["spec"]["forProvider"]["manifest"].clone();
                if m["apiVersion"] != "v1" {
                    out.push(m);
                }
            }
            out.push(d);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_api_server_accepts_every_rendered_object() {
    let api = start_apiserver().await;
    let kinds = install_crds(&api).await;

    let mut objects = rendered_objects();
    objects.extend(load_yaml(
        &repo_root().join("tests/fixtures/hosts/r730-provisioned.yaml"),
    ));
    for f in [
        "apis/operations/watchoperation.yaml",
        "examples/operation/operation.yaml",
        "apis/metalclusters/composition.yaml",
        "apis/metalclusters/definition.yaml",
    ] {
        objects.extend(load_yaml(&repo_root().join(f)));
    }
    for d in load_yaml(&repo_root().join("examples/baremetalhost/r730.yaml")) {
        if d["kind"] == "BareMetalHost" {
            objects.push(d);
        }
    }
    let mut kinds_seen = std::collections::BTreeSet::new();
    for obj in &objects {
        let (status, body) = dry_run(&api, &kinds, obj).await;
        assert!(
            (200..300).contains(&status),
            "{} {}: HTTP {status}\n{body}",
            obj["kind"],
            obj["metadata"]["name"]
        );
        kinds_seen.insert(obj["kind"].as_str().unwrap_or_default().to_string());
    }
    for k in [
        "MetalCluster",
        "IPPool",
        "Cluster",
        "Metal3Cluster",
        "Metal3MachineTemplate",
        "Metal3DataTemplate",
        "KubeadmControlPlane",
        "ProviderConfig",
        "Release",
        "Usage",
        "Object",
        "InferenceClass",
        "InferenceCluster",
        "CiliumLoadBalancerIPPool",
        "CiliumL2AnnouncementPolicy",
        "BareMetalHost",
        "WatchOperation",
        "Operation",
    ] {
        assert!(kinds_seen.contains(k), "{k} was applied");
    }

    // The server judges for real: schema, enums and CEL.
    let kcp = objects
        .iter()
        .find(|o| o["kind"] == "KubeadmControlPlane")
        .expect("kcp")
        .clone();
    let mut no_version = kcp.clone();
    no_version["spec"]
        .as_object_mut()
        .map(|s| s.remove("version"));
    let (status, body) = dry_run(&api, &kinds, &no_version).await;
    assert_eq!(status, 422, "{body}");
    let mut dup = kcp;
    dup["spec"]["kubeadmConfigSpec"]["initConfiguration"]["nodeRegistration"]["kubeletExtraArgs"]
        .as_array_mut()
        .expect("args")
        .push(json!({"name": "node-labels", "value": "a=b"}));
    let (status, body) = dry_run(&api, &kinds, &dup).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("must be unique"),
        "the CEL rule fired: {body}"
    );
    let usage = objects
        .iter()
        .find(|o| o["kind"] == "Usage")
        .expect("usage")
        .clone();
    let mut no_by = usage;
    no_by["spec"].as_object_mut().map(|s| s.remove("by"));
    let (status, body) = dry_run(&api, &kinds, &no_by).await;
    assert_eq!(status, 422, "{body}");
}

/// The packages `cargo xtask package` writes, built here when missing.
fn packages() -> PathBuf {
    let out = repo_root().join("target/xpkg");
    let files = ["function-metalplane.xpkg", "configuration-metalplane.xpkg"];
    if !files.iter().all(|f| out.join(f).exists()) {
        // Its own target dir: the lock of this cargo test is held.
        let ok = Command::new(env!("CARGO"))
            .current_dir(repo_root())
            .args([
                "run",
                "-q",
                "-p",
                "xtask",
                "--target-dir",
                "target/package-test",
                "--",
                "package",
            ])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cargo xtask package failed");
    }
    out
}

#[test]
fn crossplane_reads_our_packages() {
    let out = packages();
    let dir = tempfile::tempdir().expect("tmp");
    for (pkg, kinds) in [
        (
            "function-metalplane.xpkg",
            vec!["Function", "CustomResourceDefinition"],
        ),
        (
            "configuration-metalplane.xpkg",
            vec![
                "Configuration",
                "CompositeResourceDefinition",
                "Composition",
                "WatchOperation",
            ],
        ),
    ] {
        let gz = dir.path().join(format!("{pkg}.gz"));
        let r = run(Command::new(crank())
            .args(["xpkg", "extract", "--from-xpkg"])
            .arg(out.join(pkg))
            .arg("-o")
            .arg(&gz));
        assert!(
            r.status.success(),
            "crossplane xpkg extract {pkg}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2_reader(&gz), &mut text).expect("gzip");
        let docs =
            metalplane::render::parse_stream(&text, pkg).expect("the extracted package parses");
        let got: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(got, kinds, "{pkg}");
    }
}

fn flate2_reader(p: &Path) -> impl std::io::Read {
    flate2::read::GzDecoder::new(std::fs::File::open(p).expect("extracted package"))
}
