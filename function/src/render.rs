//! Offline rendering: builds the RunFunctionRequest Crossplane would send,
//! runs the same composition path, and prints what Crossplane would apply,
//! shaped like `crossplane render` output.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use function_sdk_rust::proto::v1::{
    Ready, RequestMeta, Requirements, Resource, ResourceSelector, Resources, RunFunctionRequest,
    RunFunctionResponse, Severity, State, Status, resource_selector,
};
use function_sdk_rust::request::WATCHED_RESOURCE_KEY;
use function_sdk_rust::resource::{json_to_struct, struct_to_json};
use serde_json::{Value, json};

use crate::status::first_n_and_more;

/// The annotation Crossplane uses to match observed to desired resources.
pub const RESOURCE_NAME_ANNOTATION: &str = "crossplane.io/composition-resource-name";

/// The label Crossplane puts on composed resources, naming their XR.
pub const COMPOSITE_LABEL: &str = "crossplane.io/composite";

/// crossplane render stamps conditions with this fixed time.
pub const RENDER_TIME: &str = "2024-01-01T00:00:00Z";

/// Crossplane resolves requirements at most this many times.
const MAX_REQUIREMENT_ROUNDS: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot parse {path}: {message}")]
    Parse { path: String, message: String },
    #[error("{0}")]
    Input(String),
    /// The function returned a Fatal result.
    #[error("{0}")]
    Fatal(String),
}

/// What a render produced.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The XR (with its desired status), then composed resources.
    pub documents: Vec<Value>,
    /// Results the function returned, as (severity name, message).
    pub results: Vec<(String, String)>,
    /// The last response, for callers that want the raw protocol view.
    pub response: RunFunctionResponse,
}

/// Parses a YAML (or JSON) stream into its non-empty documents.
pub fn parse_stream(text: &str, origin: &str) -> Result<Vec<Value>, RenderError> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| RenderError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

fn is_manifest(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// Reads every document of a file, or of every manifest under a folder
/// (sorted by path, so results never depend on directory order).
pub fn load_documents(path: &Path) -> Result<Vec<Value>, RenderError> {
    let read_err = |source| RenderError::Read {
        path: path.to_path_buf(),
        source,
    };
    if path.is_dir() {
        let mut files = Vec::new();
        let mut stack = vec![path.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).map_err(read_err)? {
                let p = entry.map_err(read_err)?.path();
                if p.is_dir() {
                    stack.push(p);
                } else if is_manifest(&p) {
                    files.push(p);
                }
            }
        }
        files.sort();
        let mut out = Vec::new();
        for f in files {
            out.extend(load_documents(&f)?);
        }
        return Ok(out);
    }
    let text = std::fs::read_to_string(path).map_err(read_err)?;
    parse_stream(&text, &path.display().to_string())
}

fn to_resource(v: &Value) -> Result<Resource, RenderError> {
    match v {
        Value::Object(m) => Ok(Resource {
            resource: Some(json_to_struct(m)),
            ..Default::default()
        }),
        other => Err(RenderError::Input(format!(
            "expected a Kubernetes object, got {}",
            crate::spec::show(other)
        ))),
    }
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// Whether `obj` matches a requirement selector, as Crossplane resolves it.
pub fn selector_matches(sel: &ResourceSelector, obj: &Value) -> bool {
    if str_at(obj, "/apiVersion") != sel.api_version || str_at(obj, "/kind") != sel.kind {
        return false;
    }
    if let Some(ns) = &sel.namespace
        && str_at(obj, "/metadata/namespace") != ns
    {
        return false;
    }
    match &sel.r#match {
        None => true,
        Some(resource_selector::Match::MatchName(n)) => str_at(obj, "/metadata/name") == n,
        Some(resource_selector::Match::MatchLabels(ml)) => ml.labels.iter().all(|(k, v)| {
            obj.pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                == Some(v.as_str())
        }),
    }
}

fn resolve(reqs: &Requirements, pool: &[Value]) -> HashMap<String, Resources> {
    reqs.resources
        .iter()
        .map(|(name, sel)| {
            let items = pool
                .iter()
                .filter(|o| selector_matches(sel, o))
                .filter_map(|o| to_resource(o).ok())
                .collect();
            (name.clone(), Resources { items })
        })
        .collect()
}

/// Builds the first request for an XR and its observed composed resources.
pub fn request(xr: &Value, observed: &[Value]) -> Result<RunFunctionRequest, RenderError> {
    let mut resources = HashMap::new();
    for o in observed {
        let name = o
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(RESOURCE_NAME_ANNOTATION))
            .and_then(Value::as_str);
        match name {
            Some(n) => {
                resources.insert(n.to_string(), to_resource(o)?);
            }
            None => {
                return Err(RenderError::Input(format!(
                    "observed {} {} has no {RESOURCE_NAME_ANNOTATION} annotation",
                    str_at(o, "/kind"),
                    str_at(o, "/metadata/name")
                )));
            }
        }
    }
    Ok(RunFunctionRequest {
        meta: Some(RequestMeta {
            tag: "render".into(),
            ..Default::default()
        }),
        observed: Some(State {
            composite: Some(to_resource(xr)?),
            resources,
        }),
        desired: Some(State::default()),
        ..Default::default()
    })
}

fn severity_name(s: i32) -> &'static str {
    match Severity::try_from(s) {
        Ok(Severity::Fatal) => "SEVERITY_FATAL",
        Ok(Severity::Warning) => "SEVERITY_WARNING",
        Ok(Severity::Normal) => "SEVERITY_NORMAL",
        _ => "SEVERITY_UNSPECIFIED",
    }
}

fn condition_status(s: i32) -> &'static str {
    match Status::try_from(s) {
        Ok(Status::ConditionTrue) => "True",
        Ok(Status::ConditionFalse) => "False",
        _ => "Unknown",
    }
}

/// Runs the function until its requirements stop changing, as Crossplane does.
pub fn run(
    xr: &Value,
    observed: &[Value],
    required: &[Value],
) -> Result<RunFunctionResponse, RenderError> {
    Ok(iterate(request(xr, observed)?, required))
}

/// Calls the function, resolves what it requires from `required`, and calls
/// again until the requirements stabilise. An operation's watched resource
/// is injected by Crossplane itself and stays in every round.
fn iterate(mut req: RunFunctionRequest, required: &[Value]) -> RunFunctionResponse {
    let mut rsp = crate::run(&req);
    for _ in 1..MAX_REQUIREMENT_ROUNDS {
        let Some(reqs) = rsp.requirements.as_ref() else {
            break;
        };
        let mut resolved = resolve(reqs, required);
        if let Some(w) = req.required_resources.get(WATCHED_RESOURCE_KEY) {
            resolved.insert(WATCHED_RESOURCE_KEY.to_string(), w.clone());
        }
        if resolved == req.required_resources {
            break;
        }
        req.required_resources = resolved;
        rsp = crate::run(&req);
    }
    rsp
}

/// The XR as `crossplane render` prints it: identity plus desired status,
/// with the Ready condition Crossplane derives from composed readiness.
fn xr_document(xr: &Value, rsp: &RunFunctionResponse) -> Value {
    let desired = rsp.desired.as_ref();
    let mut status = desired
        .and_then(|d| d.composite.as_ref())
        .and_then(|c| c.resource.as_ref())
        .map(struct_to_json)
        .and_then(|v| v.get("status").cloned())
        .unwrap_or_else(|| json!({}));

    let resources: BTreeMap<&String, &Resource> = desired
        .map(|d| d.resources.iter().collect())
        .unwrap_or_default();
    let unready: Vec<String> = resources
        .iter()
        .filter(|(_, r)| r.ready != Ready::True as i32)
        .map(|(n, _)| n.to_string())
        .collect();
    let ready = if unready.is_empty() {
        json!({"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": RENDER_TIME})
    } else {
        json!({
            "type": "Ready", "status": "False", "reason": "Creating",
            "message": format!("Unready resources: {}", first_n_and_more(unready, 3)),
            "lastTransitionTime": RENDER_TIME,
        })
    };
    let mut conditions = vec![ready];
    for c in &rsp.conditions {
        let mut cond = json!({
            "type": c.r#type, "status": condition_status(c.status),
            "reason": c.reason, "lastTransitionTime": RENDER_TIME,
        });
        if let (Some(m), Value::Object(o)) = (&c.message, &mut cond) {
            o.insert("message".into(), json!(m));
        }
        conditions.push(cond);
    }
    if let Value::Object(s) = &mut status {
        s.insert("conditions".into(), Value::Array(conditions));
    }
    let mut metadata = json!({"name": str_at(xr, "/metadata/name")});
    if let Some(ns) = xr.pointer("/metadata/namespace") {
        metadata["namespace"] = ns.clone();
    }
    json!({
        "apiVersion": str_at(xr, "/apiVersion"),
        "kind": str_at(xr, "/kind"),
        "metadata": metadata,
        "status": status,
    })
}

/// The function's results as (severity, message); a Fatal one is the error.
fn results_or_fatal(rsp: &RunFunctionResponse) -> Result<Vec<(String, String)>, RenderError> {
    if let Some(f) = rsp
        .results
        .iter()
        .find(|r| r.severity == Severity::Fatal as i32)
    {
        return Err(RenderError::Fatal(f.message.clone()));
    }
    Ok(rsp
        .results
        .iter()
        .map(|r| (severity_name(r.severity).to_string(), r.message.clone()))
        .collect())
}

/// Adds resolved required resources under `name`, as Crossplane sends them.
pub fn with_required(
    req: &mut RunFunctionRequest,
    name: &str,
    items: &[Value],
) -> Result<(), RenderError> {
    let items = items
        .iter()
        .map(to_resource)
        .collect::<Result<Vec<_>, _>>()?;
    req.required_resources
        .insert(name.to_string(), Resources { items });
    Ok(())
}

/// Renders an XR: the full offline path behind `function-metalplane render`.
pub fn render(xr: &Value, observed: &[Value], required: &[Value]) -> Result<Rendered, RenderError> {
    let rsp = run(xr, observed, required)?;
    let results = results_or_fatal(&rsp)?;

    let mut documents = vec![xr_document(xr, &rsp)];
    let mut composed: Vec<(&String, &Resource)> = rsp
        .desired
        .as_ref()
        .map(|d| d.resources.iter().collect())
        .unwrap_or_default();
    composed.sort_by(|a, b| a.0.cmp(b.0));
    for (name, r) in composed {
        let mut obj = r
            .resource
            .as_ref()
            .map(struct_to_json)
            .unwrap_or_else(|| json!({}));
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            // What Crossplane adds to every composed resource it applies.
            let ann = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Value::Object(a) = ann {
                a.insert(RESOURCE_NAME_ANNOTATION.into(), json!(name));
            }
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if let Value::Object(l) = labels {
                l.insert(COMPOSITE_LABEL.into(), json!(str_at(xr, "/metadata/name")));
            }
            meta.insert(
                "ownerReferences".into(),
                json!([{
                    "apiVersion": str_at(xr, "/apiVersion"),
                    "kind": str_at(xr, "/kind"),
                    "name": str_at(xr, "/metadata/name"),
                    "uid": str_at(xr, "/metadata/uid"),
                    "controller": true,
                    "blockOwnerDeletion": true,
                }]),
            );
        }
        documents.push(obj);
    }
    Ok(Rendered {
        documents,
        results,
        response: rsp,
    })
}

/// Result documents as `crossplane render -r` prints them.
pub fn result_documents(results: &[(String, String)]) -> Vec<Value> {
    results
        .iter()
        .map(|(sev, msg)| {
            json!({
                "apiVersion": "render.crossplane.io/v1beta1",
                "kind": "Result",
                "severity": sev,
                "step": "metalplane",
                "message": msg,
            })
        })
        .collect()
}

/// A YAML stream, each document introduced by `---`.
pub fn to_yaml_stream(docs: &[Value]) -> String {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(d).unwrap_or_default());
    }
    out
}

/// The request a WatchOperation makes for one changed BareMetalHost.
pub fn operation_request(
    watched: &Value,
    input: Option<&Value>,
) -> Result<RunFunctionRequest, RenderError> {
    let mut req = RunFunctionRequest {
        meta: Some(RequestMeta {
            tag: "operate".into(),
            ..Default::default()
        }),
        desired: Some(State::default()),
        ..Default::default()
    };
    req.required_resources.insert(
        WATCHED_RESOURCE_KEY.to_string(),
        Resources {
            items: vec![to_resource(watched)?],
        },
    );
    if let Some(i) = input {
        match i {
            Value::Object(m) => req.input = Some(json_to_struct(m)),
            other => {
                return Err(RenderError::Input(format!(
                    "the operation input must be an object, got {}",
                    crate::spec::show(other)
                )));
            }
        }
    }
    Ok(req)
}

/// Runs the operation path offline: the Operation (with its pipeline output)
/// first, then every desired resource.
pub fn operate(
    watched: &Value,
    input: Option<&Value>,
    required: &[Value],
) -> Result<Rendered, RenderError> {
    let rsp = iterate(operation_request(watched, input)?, required);
    let results = results_or_fatal(&rsp)?;
    let output = rsp
        .output
        .as_ref()
        .map(struct_to_json)
        .unwrap_or_else(|| json!({}));
    let mut desired: Vec<(&String, &Resource)> = rsp
        .desired
        .as_ref()
        .map(|d| d.resources.iter().collect())
        .unwrap_or_default();
    desired.sort_by(|a, b| a.0.cmp(b.0));
    let mut applied: Vec<Value> = desired
        .iter()
        .filter_map(|(_, r)| r.resource.as_ref().map(struct_to_json))
        .collect();
    // `crossplane alpha render op` lists applied resources by API version,
    // kind and name.
    applied.sort_by_key(|o| {
        (
            str_at(o, "/apiVersion").to_string(),
            str_at(o, "/kind").to_string(),
            str_at(o, "/metadata/name").to_string(),
        )
    });
    let mut status = json!({"pipeline": [{"step": "metalplane", "output": output}]});
    {
        // What Crossplane records of the resources an operation applied.
        status["appliedResourceRefs"] = applied
            .iter()
            .map(|o| {
                json!({
                    "apiVersion": str_at(o, "/apiVersion"),
                    "kind": str_at(o, "/kind"),
                    "name": str_at(o, "/metadata/name"),
                    "namespace": str_at(o, "/metadata/namespace"),
                })
            })
            .collect();
    }
    let mut documents = vec![json!({
        "apiVersion": "ops.crossplane.io/v1alpha1",
        "kind": "Operation",
        "metadata": {"name": format!("{}-remediation", str_at(watched, "/metadata/name"))},
        "status": status,
    })];
    documents.extend(applied);
    Ok(Rendered {
        documents,
        results,
        response: rsp,
    })
}
