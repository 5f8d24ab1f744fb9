//! Shared test support: the upstream CRDs from `../shared/crds/` as JSON
//! Schema validators plus a CEL evaluator for their
//! `x-kubernetes-validations`, and builders for MetalCluster requests.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use function_sdk_rust::proto::v1::{RunFunctionRequest, Severity};
use function_sdk_rust::resource::struct_to_json;
use metalplane::render;
use serde_json::{Value, json};

/// Root of the repository.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `shared/` beside the checkout (CI lays a copy there); METALPLANE_SHARED overrides.
pub fn shared_dir() -> PathBuf {
    std::env::var_os("METALPLANE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("..").join("shared"))
}

pub fn crd_dir() -> PathBuf {
    shared_dir().join("crds")
}

pub fn load_yaml(path: &Path) -> Vec<Value> {
    render::load_documents(path).unwrap_or_else(|e| panic!("{e}"))
}

pub fn example_xr() -> Value {
    render::parse_stream(metalplane::EXAMPLE_XR, "example")
        .expect("example parses")
        .remove(0)
}

/// Converts a Kubernetes structural schema into JSON Schema that is
/// stricter than the API server in one way: unknown fields are errors
/// rather than silently pruned, because a pruned field is a rendering bug.
pub fn to_json_schema(s: &Value) -> Value {
    match s {
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                match k.as_str() {
                    "properties" | "patternProperties" | "definitions" => {
                        let props = v
                            .as_object()
                            .map(|p| {
                                p.iter()
                                    .map(|(pk, pv)| (pk.clone(), to_json_schema(pv)))
                                    .collect()
                            })
                            .unwrap_or_default();
                        out.insert(k.clone(), Value::Object(props));
                    }
                    "items" | "additionalProperties" | "not" => {
                        out.insert(k.clone(), to_json_schema(v));
                    }
                    "allOf" | "anyOf" | "oneOf" => {
                        let list = v
                            .as_array()
                            .map(|a| a.iter().map(to_json_schema).collect())
                            .unwrap_or_default();
                        out.insert(k.clone(), Value::Array(list));
                    }
                    "description" | "example" | "default" => {}
                    k if k.starts_with("x-kubernetes-") => {}
                    "nullable" => {}
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            if m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                out.remove("type");
                out.insert("type".into(), json!(["integer", "string"]));
            }
            if m.get("nullable") == Some(&Value::Bool(true))
                && let Some(Value::String(t)) = out.get("type").cloned()
            {
                out.insert("type".into(), json!([t, "null"]));
            }
            let preserve =
                m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            if m.contains_key("properties") && !m.contains_key("additionalProperties") && !preserve
            {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// One served version of one kind.
pub struct Schema {
    pub api_version: String,
    pub kind: String,
    pub raw: Value,
    pub validator: jsonschema::Validator,
}

/// Every served version of every CRD (and XRD) in `shared/crds`.
pub struct Schemas {
    pub by_gvk: HashMap<(String, String), Schema>,
}

fn add_versions(
    by_gvk: &mut HashMap<(String, String), Schema>,
    group: &str,
    kind: &str,
    versions: &[Value],
    xrd: bool,
) {
    for v in versions {
        let name = v["name"].as_str().unwrap_or_default();
        let Some(mut raw) = v.pointer("/schema/openAPIV3Schema").cloned() else {
            continue;
        };
        if xrd {
            // An XRD gives spec/status; Crossplane adds the rest of the object.
            if let Some(props) = raw.get_mut("properties").and_then(Value::as_object_mut) {
                props.insert("apiVersion".into(), json!({"type": "string"}));
                props.insert("kind".into(), json!({"type": "string"}));
                props.insert("metadata".into(), json!({"type": "object"}));
            }
            // Crossplane adds its own machinery to the CRD it generates.
            if let Some(spec) = raw
                .pointer_mut("/properties/spec/properties")
                .and_then(Value::as_object_mut)
            {
                spec.insert(
                    "crossplane".into(),
                    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
            }
            if let Some(status) = raw
                .pointer_mut("/properties/status/properties")
                .and_then(Value::as_object_mut)
            {
                status.insert("conditions".into(), json!({"type": "array", "items": {
                    "type": "object", "required": ["type", "status", "reason", "lastTransitionTime"],
                    "properties": {"type": {"type": "string"}, "status": {"type": "string"}, "reason": {"type": "string"},
                        "message": {"type": "string"}, "lastTransitionTime": {"type": "string"}, "observedGeneration": {"type": "integer"}}}}));
                status.insert(
                    "crossplane".into(),
                    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
            }
        }
        let js = to_json_schema(&raw);
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&js)
            .unwrap_or_else(|e| panic!("schema of {group}/{name} {kind} does not compile: {e}"));
        let api_version = format!("{group}/{name}");
        by_gvk.insert(
            (api_version.clone(), kind.to_string()),
            Schema {
                api_version,
                kind: kind.to_string(),
                raw,
                validator,
            },
        );
    }
}

impl Schemas {
    fn load() -> Self {
        let mut by_gvk = HashMap::new();
        let mut files: Vec<PathBuf> = std::fs::read_dir(crd_dir())
            .unwrap_or_else(|e| {
                panic!(
                    "cannot read {}: {e} (set METALPLANE_SHARED)",
                    crd_dir().display()
                )
            })
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.push(crd_dir().join("modelplane/inferenceclasses/definition.yaml"));
        files.push(crd_dir().join("modelplane/inferenceclusters/definition.yaml"));
        files.push(repo_root().join("apis/metalclusters/definition.yaml"));
        for f in files {
            for doc in load_yaml(&f) {
                let group = doc
                    .pointer("/spec/group")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let kind = doc
                    .pointer("/spec/names/kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let versions = doc
                    .pointer("/spec/versions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let xrd = doc["kind"] == "CompositeResourceDefinition";
                add_versions(&mut by_gvk, group, kind, &versions, xrd);
            }
        }
        Schemas { by_gvk }
    }

    pub fn get() -> &'static Schemas {
        static S: OnceLock<Schemas> = OnceLock::new();
        S.get_or_init(Schemas::load)
    }

    /// Every schema and CEL problem of `obj`, as readable strings.
    pub fn problems(&self, obj: &Value) -> Vec<String> {
        let api = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let Some(schema) = self.by_gvk.get(&(api.clone(), kind.clone())) else {
            return vec![format!("no CRD serves {api} {kind}")];
        };
        let mut out: Vec<String> = schema
            .validator
            .iter_errors(obj)
            .map(|e| format!("{kind} {}: {e}", e.instance_path()))
            .collect();
        let mut cel = CelReport::default();
        cel_walk(&schema.raw, obj, &kind, &mut cel);
        out.extend(cel.failures);
        out.extend(
            cel.unevaluated
                .into_iter()
                .map(|r| format!("CEL rule not evaluable: {r}")),
        );
        out.extend(metadata_problems(obj));
        out
    }

    pub fn assert_valid(&self, obj: &Value) {
        let p = self.problems(obj);
        assert!(
            p.is_empty(),
            "{} {} is invalid:\n{}",
            obj["kind"],
            obj["metadata"]["name"],
            p.join("\n")
        );
    }

    /// The CEL rules that applied to `obj` (evaluated against a present value).
    pub fn applied_rules(&self, obj: &Value) -> Vec<String> {
        let api = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let mut cel = CelReport::default();
        if let Some(schema) = self.by_gvk.get(&(api, kind.clone())) {
            cel_walk(&schema.raw, obj, &kind, &mut cel);
        }
        cel.applied
    }
}

/// Object metadata the API server would refuse.
fn metadata_problems(obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let subdomain = !name.is_empty()
        && name.len() <= 253
        && name
            .split('.')
            .all(|l| metalplane::validate::dns_label(l).is_ok());
    if !subdomain {
        out.push(format!("metadata.name {name:?} is not a DNS subdomain"));
    }
    out
}

#[derive(Default)]
pub struct CelReport {
    pub applied: Vec<String>,
    pub failures: Vec<String>,
    pub unevaluated: Vec<String>,
}

/// Kubernetes escapes CEL reserved words in field names as `__word__`.
fn unescape_k8s(rule: &str) -> String {
    let mut s = rule.to_string();
    for w in [
        "namespace",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "return",
        "var",
        "void",
        "while",
    ] {
        s = s.replace(&format!("__{w}__"), w);
    }
    s
}

pub fn eval_rule(rule: &str, value: &Value) -> Result<bool, String> {
    eval_transition_rule(rule, value, None)
}

/// Evaluates a rule with `self` and, for an update, `oldSelf` bound, as the
/// API server does for transition rules.
pub fn eval_transition_rule(
    rule: &str,
    value: &Value,
    old: Option<&Value>,
) -> Result<bool, String> {
    static ENV: OnceLock<std::sync::Arc<cel::Env>> = OnceLock::new();
    let env = ENV.get_or_init(|| {
        // Kubernetes CEL includes the strings extension (lowerAscii, ...).
        let mut env = cel::Env::stdlib();
        let _ = env.add_extension(cel::extensions::strings);
        std::sync::Arc::new(env)
    });
    let program = env
        .compile(&unescape_k8s(rule))
        .map_err(|e| format!("compile: {e}"))?;
    let mut ctx = cel::Context::with_env(env.clone());
    let v = cel::to_value(value).map_err(|e| format!("value: {e}"))?;
    ctx.add_variable_from_value("self", v);
    if let Some(old) = old {
        let o = cel::to_value(old).map_err(|e| format!("old value: {e}"))?;
        ctx.add_variable_from_value("oldSelf", o);
    }
    match program.execute(&ctx) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("rule returned {other:?}")),
        Err(e) => Err(format!("execute: {e}")),
    }
}

/// Walks schema and instance together, evaluating each applicable rule
/// with `self` bound to the instance value. Transition rules (oldSelf) do
/// not apply to a create and are skipped.
pub fn cel_walk(schema: &Value, value: &Value, path: &str, report: &mut CelReport) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for r in rules {
            let rule = r["rule"].as_str().unwrap_or_default();
            if rule.contains("oldSelf") {
                continue;
            }
            report.applied.push(rule.to_string());
            match eval_rule(rule, value) {
                Ok(true) => {}
                Ok(false) => report.failures.push(format!(
                    "{path}: CEL rule {rule:?} failed: {}",
                    r["message"].as_str().unwrap_or_default()
                )),
                Err(e) => report.unevaluated.push(format!("{path}: {rule} ({e})")),
            }
        }
    }
    match value {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            for (k, v) in m {
                let sub = props
                    .and_then(|p| p.get(k))
                    .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
                if let Some(sub) = sub {
                    cel_walk(sub, v, &format!("{path}.{k}"), report);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    cel_walk(sub, v, &format!("{path}[{i}]"), report);
                }
            }
        }
        _ => {}
    }
}

/// A RunFunctionRequest for an XR, its observed composed resources (by
/// composition resource name) and, optionally, resolved pool hosts.
pub fn request(
    xr: &Value,
    observed: &BTreeMap<&str, Value>,
    hosts: Option<&[Value]>,
) -> RunFunctionRequest {
    let docs: Vec<Value> = observed
        .iter()
        .map(|(name, o)| {
            let mut o = o.clone();
            o["metadata"]["annotations"][render::RESOURCE_NAME_ANNOTATION] = json!(name);
            o
        })
        .collect();
    let mut req = render::request(xr, &docs).expect("request builds");
    if let Some(hs) = hosts {
        render::with_required(&mut req, metalplane::compose::HOSTS_REQUIREMENT, hs).expect("hosts");
    }
    req
}

/// Desired composed resources of a response as JSON, by name.
pub fn desired(rsp: &function_sdk_rust::proto::v1::RunFunctionResponse) -> BTreeMap<String, Value> {
    rsp.desired
        .as_ref()
        .map(|d| {
            d.resources
                .iter()
                .filter_map(|(k, r)| r.resource.as_ref().map(|s| (k.clone(), struct_to_json(s))))
                .collect()
        })
        .unwrap_or_default()
}

pub fn desired_status(rsp: &function_sdk_rust::proto::v1::RunFunctionResponse) -> Value {
    rsp.desired
        .as_ref()
        .and_then(|d| d.composite.as_ref())
        .and_then(|c| c.resource.as_ref())
        .map(struct_to_json)
        .and_then(|v| v.get("status").cloned())
        .unwrap_or(Value::Null)
}

pub fn fatal(rsp: &function_sdk_rust::proto::v1::RunFunctionResponse) -> Option<String> {
    rsp.results
        .iter()
        .find(|r| r.severity == Severity::Fatal as i32)
        .map(|r| r.message.clone())
}

pub fn warnings(rsp: &function_sdk_rust::proto::v1::RunFunctionResponse) -> Vec<String> {
    rsp.results
        .iter()
        .filter(|r| r.severity == Severity::Warning as i32)
        .map(|r| r.message.clone())
        .collect()
}

/// Sets a dotted path in a JSON object, creating objects on the way;
/// `Value::Null` removes the field.
pub fn set_path(v: &mut Value, path: &str, new: Value) {
    let parts: Vec<&str> = path.split('.').collect();
    let mut cur = v;
    for p in &parts[..parts.len() - 1] {
        if !cur.get(*p).is_some_and(Value::is_object) {
            cur[*p] = json!({});
        }
        cur = &mut cur[*p];
    }
    let last = parts[parts.len() - 1];
    if new.is_null() {
        if let Some(m) = cur.as_object_mut() {
            m.remove(last);
        }
    } else {
        cur[last] = new;
    }
}

/// A BareMetalHost of the example pool, in a given provisioning state.
pub fn host(name: &str, state: &str, consumer: Option<&str>, powered_on: bool) -> Value {
    let mut h = json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": "metal", "labels": {"metal.kube.farm/pool": "r730"}},
        "spec": {
            "online": powered_on,
            "bmc": {"address": "idrac-virtualmedia://192.168.120.20/redfish/v1/Systems/System.Embedded.1", "credentialsName": format!("{name}-bmc")},
        },
        "status": {
            "provisioning": {"state": state, "ID": "", "bootMode": "UEFI", "image": {"url": ""}},
            "poweredOn": powered_on,
            "operationalStatus": "OK",
            "errorMessage": "",
            "errorCount": 0,
            "provisioningFailCount": 0,
            "hardwareProfile": "",
            "goodCredentials": {},
            "triedCredentials": {},
            "lastUpdated": "2026-12-01T10:00:00Z",
        },
    });
    if let Some(c) = consumer {
        h["spec"]["consumerRef"] = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "Metal3Machine",
            "name": c,
            "namespace": "metal",
        });
        h["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] = json!("r730-cluster");
    }
    h
}

pub fn with_condition(mut obj: Value, typ: &str, status: &str) -> Value {
    obj["status"]["conditions"] = json!([{"type": typ, "status": status, "reason": "Test", "lastTransitionTime": "2026-12-01T10:00:00Z"}]);
    obj
}

/// A child process killed when dropped (servers started by a test).
pub struct Proc(pub std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Waits until something accepts TCP connections on the loopback port.
pub fn wait_listening(port: u16, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} did not listen on {port}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The real function binary on a free loopback port, with `extra` flags
/// and `env`; metrics on `metrics_port` or disabled. Returns it and its port.
pub fn start_function(
    extra: &[&str],
    env: &[(&str, &str)],
    metrics_port: Option<u16>,
) -> (Proc, u16) {
    let port = free_port();
    let metrics = metrics_port
        .map(|p| format!("127.0.0.1:{p}"))
        .unwrap_or_default();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_function-metalplane"))
        .args([
            "--address",
            &format!("127.0.0.1:{port}"),
            "--metrics-address",
            &metrics,
        ])
        .args(extra)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the function starts");
    let proc = Proc(child);
    wait_listening(port, "the function");
    (proc, port)
}

/// The one desired template composed as `<prefix>.<content hash>`; panics
/// when there is none or more than one.
pub fn template<'a>(d: &'a BTreeMap<String, Value>, prefix: &str) -> &'a Value {
    let found: Vec<&Value> = d
        .iter()
        .filter(|(k, _)| {
            k.strip_prefix(prefix)
                .and_then(|r| r.strip_prefix('.'))
                .is_some_and(|h| h.len() == metalplane::names::CONTENT_HASH_LEN)
        })
        .map(|(_, v)| v)
        .collect();
    assert_eq!(found.len(), 1, "one {prefix}.<hash> in {:?}", d.keys());
    found[0]
}

/// The `interfaces` of the Cilium L2 announcement policy composed for `xr`.
pub fn l2_interfaces(xr: &Value) -> Value {
    let mc = metalplane::spec::parse(xr).expect("valid");
    let names = metalplane::names::Names::new(&mc.name);
    metalplane::builders::lb::l2_policy(&mc, &names)["spec"]["forProvider"]["manifest"]["spec"]
        ["interfaces"]
        .clone()
}
