//! The operation path: a WatchOperation on BareMetalHosts injects the host
//! that changed; we answer with at most one Job and a summary output.

pub mod bmc;
pub mod decide;
pub mod input;
pub mod jobs;
pub mod nudge;

use std::collections::HashMap;

use function_sdk_rust::proto::v1::{RunFunctionRequest, RunFunctionResponse};
use function_sdk_rust::request::{self, WATCHED_RESOURCE_KEY};
use function_sdk_rust::resource::json_to_struct;
use function_sdk_rust::response::{self, ResourceMatch};
use serde_json::{Value, json};

use decide::{Action, Decision};
use input::Input;

/// Requirement name of the host's reset Jobs still present.
pub const RESET_JOBS_REQUIREMENT: &str = "reset-jobs";

/// Desired-resource name of the host's reset record.
pub const HOST_RECORD: &str = "host-reset-record";

/// The host with only the reset record: applied server-side, it changes
/// that one annotation and nothing else of the inventory.
pub fn record_patch(bmh: &Value, record: &decide::ResetRecord) -> Value {
    json!({
        "apiVersion": bmh.get("apiVersion").cloned().unwrap_or(json!("metal3.io/v1alpha1")),
        "kind": "BareMetalHost",
        "metadata": {
            "name": bmh.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
            "namespace": bmh.pointer("/metadata/namespace").cloned().unwrap_or(Value::Null),
            "annotations": {
                decide::RESETS_ANNOTATION: serde_json::to_string(record).unwrap_or_default(),
            },
        },
    })
}

/// Requirement name of the Function object this function runs as.
pub const FUNCTION_REQUIREMENT: &str = "function";

/// The Jobs' image: the input's, else the package this function was
/// installed from (its Function object, asked for as a required resource),
/// else the published package of this version.
fn job_image(
    req: &RunFunctionRequest,
    rsp: &mut RunFunctionResponse,
    input: &Input,
    acting: bool,
) -> String {
    if !input.image.is_empty() {
        return input.image.clone();
    }
    if acting {
        response::require_resources(
            rsp,
            FUNCTION_REQUIREMENT,
            "pkg.crossplane.io/v1",
            "Function",
            Some(ResourceMatch::Name(input.function_name.clone())),
            None,
        );
    }
    request::get_required_resources(req, FUNCTION_REQUIREMENT)
        .and_then(|fs| fs.iter().find_map(input::installed_image))
        .unwrap_or_else(input::published_image)
}

/// Tells the MetalCluster that claimed the host that what it shows of the
/// host changed (`nudge`): the owner is read as a required resource and
/// annotated only when its annotation differs. Independent of `dryRun`,
/// which governs remediation: this only refreshes a status. Returns the
/// owner annotated, as `namespace/name`.
fn owner_nudge(
    req: &RunFunctionRequest,
    rsp: &mut RunFunctionResponse,
    bmh: &Value,
) -> Option<String> {
    let (ns, xr) = nudge::owner(bmh)?;
    response::require_resources(
        rsp,
        nudge::OWNER_REQUIREMENT,
        crate::spec::API_VERSION,
        crate::spec::KIND,
        Some(ResourceMatch::Name(xr.to_string())),
        Some(ns.to_string()),
    );
    let owner = request::get_required_resources(req, nudge::OWNER_REQUIREMENT)?
        .into_iter()
        .next()?;
    let Value::Object(map) = nudge::patch(&owner, bmh)? else {
        return None;
    };
    response::desired_composed(rsp, nudge::OWNER_NUDGE).resource = Some(json_to_struct(&map));
    Some(format!("{ns}/{xr}"))
}

/// Whether a request is an operation run (it carries a watched resource).
pub fn is_operation(req: &RunFunctionRequest) -> bool {
    req.required_resources.contains_key(WATCHED_RESOURCE_KEY)
}

/// The operation summary put in `status.pipeline[].output`; `image` is
/// the Jobs' image, shown when the decision acts.
pub fn output(d: &Decision, dry_run: bool, image: &str) -> Value {
    let mut out = json!({
        "host": format!("{}/{}", d.namespace, d.host),
        "state": d.state,
        "action": d.action.map_or("none", Action::as_str),
        "reason": d.reason,
    });
    if let Value::Object(m) = &mut out {
        if let Some(job) = &d.job_name {
            m.insert("job".into(), json!(job));
            if dry_run {
                m.insert("dryRun".into(), json!(true));
            }
        }
        if d.action.is_some() {
            m.insert("image".into(), json!(image));
        }
    }
    out
}

pub fn operate(req: &RunFunctionRequest) -> RunFunctionResponse {
    let mut rsp = response::to(req, response::DEFAULT_TTL);
    let input = match req.input.as_ref() {
        None => Input::default(),
        Some(_) => match request::get_input::<Input>(req) {
            Ok(i) => i,
            Err(e) => {
                response::fatal(&mut rsp, format!("invalid operation input: {e}"));
                return rsp;
            }
        },
    };
    if let Err(e) = input.validate() {
        response::fatal(&mut rsp, format!("invalid operation input: {e}"));
        return rsp;
    }
    let Some(bmh) = request::get_watched_resource(req) else {
        // Crossplane runs an Operation for a deletion too, and fetches the
        // watched host when the Operation starts: a host deleted meanwhile
        // arrives as nothing. There is nothing to remediate; failing the
        // Operation would only page someone for a normal deletion.
        let out = json!({
            "action": "none",
            "reason": "the watched host no longer exists (deleted): nothing to remediate",
        });
        let _ = response::set_output(&mut rsp, &out);
        tracing::info!("operation for a host that no longer exists");
        return rsp;
    };
    if bmh.get("kind").and_then(Value::as_str) != Some("BareMetalHost") {
        let kind = crate::spec::show(bmh.get("kind").unwrap_or(&Value::Null));
        response::fatal(
            &mut rsp,
            format!("the watched resource is a {kind}, not a BareMetalHost"),
        );
        return rsp;
    }

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    let first = decide::decide(&bmh, &input, None, now);
    let mut decision = first.clone();
    if first.action == Some(Action::ResetBmc) {
        // Count the host's reset Jobs that are still there.
        let labels = HashMap::from([
            (jobs::HOST_LABEL.to_string(), jobs::host_label(&first.host)),
            (
                jobs::ACTION_LABEL.to_string(),
                Action::ResetBmc.as_str().to_string(),
            ),
        ]);
        response::require_resources(
            &mut rsp,
            RESET_JOBS_REQUIREMENT,
            "batch/v1",
            "Job",
            Some(ResourceMatch::Labels(labels)),
            Some(first.namespace.clone()),
        );
        if let Some(present) = request::get_required_resources(req, RESET_JOBS_REQUIREMENT) {
            let others = present
                .iter()
                .filter(|j| {
                    j.pointer("/metadata/name").and_then(Value::as_str) != first.job_name.as_deref()
                })
                .count();
            decision = decide::decide(&bmh, &input, Some(others), now);
        }
    }

    let input = Input {
        image: job_image(req, &mut rsp, &input, decision.action.is_some()),
        ..input
    };
    if !input.dry_run
        && let (Some(job), Some(name)) = (jobs::job(&decision, &input), decision.job_name.clone())
        && let Ok(Value::Object(map)) = serde_json::to_value(&job)
    {
        response::desired_composed(&mut rsp, name).resource = Some(json_to_struct(&map));
    }
    if !input.dry_run
        && let Some(record) = decision.record
        && let Value::Object(map) = record_patch(&bmh, &record)
    {
        response::desired_composed(&mut rsp, HOST_RECORD).resource = Some(json_to_struct(&map));
    }
    let nudged = owner_nudge(req, &mut rsp, &bmh);
    if decision.exhausted {
        response::warning(&mut rsp, decision.reason.clone());
    }
    let mut out = output(&decision, input.dry_run, &input.image);
    if let (Some(owner), Value::Object(m)) = (nudged, &mut out) {
        m.insert("ownerNudged".into(), json!(owner));
    }
    // A JSON object always converts; the error arm cannot happen.
    let _ = response::set_output(&mut rsp, &out);
    tracing::info!(host = %out["host"], action = %out["action"], "operation decided");
    rsp
}
