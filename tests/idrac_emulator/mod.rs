//! Our iDRAC emulator: the Dell Redfish resources sushy-tools lacks
//! (BootSources, BootSources/Settings, Jobs with SYS011, Manager.Reset),
//! with the faults real iDRAC8s show, injectable per test: 503 bursts, HTML
//! error pages, slow answers, connection refused for a while after a
//! controller reset, and virtual media that shows up late.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State as AxState};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;

pub const SYSTEM: &str = "/redfish/v1/Systems/System.Embedded.1";
pub const MANAGER: &str = "/redfish/v1/Managers/iDRAC.Embedded.1";
pub const SOURCES: &str = "/redfish/v1/Systems/System.Embedded.1/BootSources";
pub const SETTINGS: &str = "/redfish/v1/Systems/System.Embedded.1/BootSources/Settings";
pub const BIOS_SETTINGS: &str = "/redfish/v1/Systems/System.Embedded.1/Bios/Settings";
pub const JOBS: &str = "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs";
pub const VIRTUAL: &str = "Optical.iDRACVirtual.1-1";
/// metalplane-bmc's timings shortened so the emulator's faults play out in
/// seconds; the budget is what a run must stay within.
pub const FAST_BMC_ARGS: [&str; 8] = [
    "--request-timeout",
    "2s",
    "--backoff-initial",
    "20ms",
    "--backoff-max",
    "200ms",
    "--budget",
    "20s",
];
pub const ROOT: &str = "/redfish/v1";
pub const IMPORT: &str =
    "/redfish/v1/Managers/iDRAC.Embedded.1/Actions/Oem/EID_674_Manager.ImportSystemConfiguration";
pub const TASKS: &str = "/redfish/v1/TaskService/Tasks";
pub const CLEAR_PENDING: &str = "/redfish/v1/Systems/System.Embedded.1/BootSources/Settings/Actions/Oem/DellManager.ClearPending";
pub const LC_SERVICE: &str = "/redfish/v1/Dell/Managers/iDRAC.Embedded.1/DellLCService";
pub const LC_STATUS: &str = "/redfish/v1/Dell/Managers/iDRAC.Embedded.1/DellLCService/Actions/DellLCService.GetRemoteServicesAPIStatus";

#[derive(Clone, Debug)]
pub struct Config {
    pub user: String,
    pub pass: String,
    /// UEFI sequence without the virtual drive: (name, enabled).
    pub boot: Vec<(&'static str, bool)>,
    /// The virtual drive is listed from this BootSources GET on (0: at
    /// once); None: media never attached.
    pub media_after_gets: Option<u32>,
    /// Where the virtual drive sits when listed (the iDRAC adds it last).
    pub virtual_first: bool,
    pub power_on: bool,
    /// Jobs already on the iDRAC, Ironic's: (id, state).
    pub jobs: Vec<(&'static str, &'static str)>,
    /// Those jobs complete once the job list was read this many times
    /// (None: they never finish).
    pub jobs_finish_after_lists: Option<u32>,
    /// BootProgress.LastState of the system (None: not reported, as on
    /// iDRAC8 firmware).
    pub boot_progress: Option<&'static str>,
    /// The first N requests get 503.
    pub busy_503: u32,
    /// The next N GETs get a 200 HTML page (an iDRAC that is starting).
    pub html_pages: u32,
    /// The first N requests are answered after this delay.
    pub slow: Duration,
    pub slow_count: u32,
    /// Connections are refused this long after Manager.Reset.
    pub down_after_reset: Duration,
    /// TargetSettingsURI values the Jobs POST accepts.
    pub job_targets: Vec<&'static str>,
    /// Manager.Reset answers only after this delay (but is taken at once).
    pub reset_delay: Duration,
    /// After a controller reset the Lifecycle Controller reports
    /// `LCStatus` other than Ready for this many status checks (it answers
    /// HTTP well before it takes configuration again).
    pub lc_not_ready_checks: u32,
    /// Jobs of others that appear the moment ours is created (Ironic's
    /// import racing the boot-order fix): (id, state).
    pub jobs_on_create: Vec<(&'static str, &'static str)>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            user: "root".into(),
            pass: "s3cret-Pa55".into(),
            boot: vec![
                ("Disk.SATAEmbedded.A-1", true),
                ("NIC.PxeDevice.1-1", true),
                ("Disk.USBFront.1-1", false),
            ],
            media_after_gets: Some(0),
            virtual_first: false,
            power_on: true,
            jobs: vec![],
            jobs_finish_after_lists: None,
            boot_progress: None,
            busy_503: 0,
            html_pages: 0,
            slow: Duration::ZERO,
            slow_count: 0,
            down_after_reset: Duration::from_millis(800),
            job_targets: vec![SETTINGS],
            reset_delay: Duration::ZERO,
            lc_not_ready_checks: 0,
            jobs_on_create: vec![],
        }
    }
}

#[derive(Clone, Debug)]
pub struct Job {
    pub id: String,
    pub state: String,
    pub target: String,
}

#[derive(Debug)]
pub struct State {
    pub cfg: Config,
    pub requests: Vec<(Instant, String, String)>,
    pub boot: Vec<Value>,
    pub pending: Option<Vec<Value>>,
    pub jobs: BTreeMap<String, Job>,
    pub next_job: u64,
    pub power_on: bool,
    pub power_resets: Vec<String>,
    pub bmc_resets: u32,
    pub deletes: Vec<(Instant, String)>,
    pub source_gets: u32,
    pub job_lists: u32,
    pub busy_left: u32,
    pub html_left: u32,
    pub slow_left: u32,
    pub unauthenticated: u32,
    pub bad_credentials: u32,
    pub lc_not_ready_left: u32,
    /// Configuration imports (Ironic's virtual media boot), accepted or not:
    /// (accepted, MessageId when refused).
    pub imports: Vec<(bool, String)>,
    pub clear_pendings: u32,
    /// LCStatus answers given: (Instant, status).
    pub lc_checks: Vec<(Instant, String)>,
}

impl State {
    fn new(cfg: Config) -> Self {
        let boot = cfg
            .boot
            .iter()
            .enumerate()
            .map(|(i, (n, e))| entry(n, i as i64, *e))
            .collect();
        let jobs = cfg
            .jobs
            .iter()
            .map(|(id, st)| {
                (
                    id.to_string(),
                    Job {
                        id: id.to_string(),
                        state: st.to_string(),
                        target: SETTINGS.into(),
                    },
                )
            })
            .collect();
        Self {
            busy_left: cfg.busy_503,
            html_left: cfg.html_pages,
            slow_left: cfg.slow_count,
            power_on: cfg.power_on,
            cfg,
            requests: vec![],
            boot,
            pending: None,
            jobs,
            next_job: 100_000_000_001,
            power_resets: vec![],
            bmc_resets: 0,
            deletes: vec![],
            source_gets: 0,
            job_lists: 0,
            unauthenticated: 0,
            bad_credentials: 0,
            lc_not_ready_left: 0,
            imports: vec![],
            clear_pendings: 0,
            lc_checks: vec![],
        }
    }

    /// The UEFI sequence as the iDRAC lists it now.
    pub fn listed(&self) -> Vec<Value> {
        let attached = self
            .cfg
            .media_after_gets
            .is_some_and(|n| self.source_gets > n);
        let mut seq = self.boot.clone();
        let has_virtual = seq.iter().any(|e| e["Name"] == VIRTUAL);
        if attached && !has_virtual {
            if self.cfg.virtual_first {
                for e in &mut seq {
                    e["Index"] = json!(e["Index"].as_i64().unwrap_or(0) + 1);
                }
                seq.insert(0, entry(VIRTUAL, 0, true));
            } else {
                let n = seq.len() as i64;
                seq.push(entry(VIRTUAL, n, true));
            }
        }
        seq
    }

    /// Names in boot order.
    pub fn order(&self) -> Vec<String> {
        let mut seq = self.listed();
        seq.sort_by_key(|e| e["Index"].as_i64().unwrap_or(0));
        seq.iter()
            .map(|e| e["Name"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    fn unfinished(&self) -> bool {
        self.jobs.values().any(|j| {
            [
                "Scheduled",
                "New",
                "Running",
                "Downloading",
                "Waiting",
                "Paused",
            ]
            .contains(&j.state.as_str())
        })
    }

    pub fn count(&self, method: &str, path: &str) -> usize {
        self.requests
            .iter()
            .filter(|(_, m, p)| m == method && p == path)
            .count()
    }
}

fn entry(name: &str, index: i64, enabled: bool) -> Value {
    json!({"Enabled": enabled, "Id": format!("BIOS.Setup.1-1#UefiBootSeq#{name}#{:x}", name.len() * 7919), "Index": index, "Name": name})
}

fn dell_error(status: StatusCode, id: &str, msg: &str) -> Response {
    let body = json!({"error": {
        "@Message.ExtendedInfo": [{"MessageId": id, "Message": msg, "Resolution": "See the iDRAC documentation.", "Severity": "Warning"}],
        "code": "Base.1.2.GeneralError",
        "message": "A general error has occurred. See ExtendedInfo for more information",
    }});
    (status, axum::Json(body)).into_response()
}

type Shared = Arc<Shared0>;

pub struct Shared0 {
    pub state: Mutex<State>,
    down: Notify,
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Auth, faults and request log, before routing.
async fn gate(
    AxState(s): AxState<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (delay, fault) = {
        let mut st = lock(&s);
        st.requests
            .push((Instant::now(), method.to_string(), uri.path().to_string()));
        let delay = if st.slow_left > 0 {
            st.slow_left -= 1;
            st.cfg.slow
        } else {
            Duration::ZERO
        };
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let expected = format!("Basic {}", b64(&format!("{}:{}", st.cfg.user, st.cfg.pass)));
        // The service root is public (Redfish): sushy reads it first.
        let public = method == Method::GET && (uri.path() == ROOT || uri.path() == "/redfish/v1/");
        let fault = match auth {
            None if public => None,
            // iDRAC8 answers the challenge round trip with 400.
            None => {
                st.unauthenticated += 1;
                Some(dell_error(
                    StatusCode::BAD_REQUEST,
                    "Base.1.2.GeneralError",
                    "Authorization header required",
                ))
            }
            Some(a) if a != expected => {
                st.bad_credentials += 1;
                Some((StatusCode::UNAUTHORIZED, axum::Json(json!({"error": {"code": "Base.1.2.AccessDenied", "message": "invalid credentials"}}))).into_response())
            }
            Some(_) if st.busy_left > 0 => {
                st.busy_left -= 1;
                Some(dell_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "RAC0679",
                    "The iDRAC is busy. Retry the operation later.",
                ))
            }
            Some(_) if st.html_left > 0 && method == Method::GET => {
                st.html_left -= 1;
                Some(
                    (
                        StatusCode::OK,
                        [("content-type", "text/html")],
                        "<html><body><h1>iDRAC is starting</h1></body></html>",
                    )
                        .into_response(),
                )
            }
            Some(_) => None,
        };
        (delay, fault)
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    match fault {
        Some(f) => f,
        None => next.run(req).await,
    }
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

async fn system(AxState(s): AxState<Shared>) -> Response {
    let st = lock(&s);
    let mut body = json!({
        "@odata.id": SYSTEM, "Id": "System.Embedded.1",
        "PowerState": if st.power_on { "On" } else { "Off" },
        "Links": {"Oem": {"DELL": {"BootOrder": {"@odata.id": SOURCES}}}},
        "Actions": {"#ComputerSystem.Reset": {"target": format!("{SYSTEM}/Actions/ComputerSystem.Reset"),
            "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "ForceRestart", "GracefulShutdown", "PushPowerButton", "Nmi"]}},
    });
    if let Some(p) = st.cfg.boot_progress {
        body["BootProgress"] = json!({"LastState": p});
    }
    axum::Json(body).into_response()
}

async fn sources(AxState(s): AxState<Shared>) -> Response {
    let mut st = lock(&s);
    st.source_gets += 1;
    let seq = st.listed();
    axum::Json(json!({"@odata.type": "#DellBootSources.v1_0_0.DellBootSources", "@odata.id": SOURCES, "Attributes": {"BootSeq": [], "UefiBootSeq": seq}})).into_response()
}

async fn settings_get(AxState(s): AxState<Shared>) -> Response {
    let st = lock(&s);
    axum::Json(json!({"@odata.id": SETTINGS, "Attributes": {"UefiBootSeq": st.pending.clone().unwrap_or_default()},
        "Actions": {"Oem": {"#DellManager.ClearPending": {"target": CLEAR_PENDING}}}}))
    .into_response()
}

/// Dell's ClearPending: the staged values are dropped.
async fn clear_pending(AxState(s): AxState<Shared>) -> Response {
    let mut st = lock(&s);
    st.clear_pendings += 1;
    st.pending = None;
    (StatusCode::OK, axum::Json(json!({"@Message.ExtendedInfo": [{"MessageId": "SYS097", "Message": "Pending configuration values are deleted."}]}))).into_response()
}

/// The service root sushy starts from.
async fn root() -> Response {
    axum::Json(json!({"@odata.id": ROOT, "@odata.type": "#ServiceRoot.v1_6_0.ServiceRoot", "Id": "RootService",
        "Name": "Root Service", "RedfishVersion": "1.11.0",
        "Systems": {"@odata.id": "/redfish/v1/Systems"}, "Managers": {"@odata.id": "/redfish/v1/Managers"}}))
    .into_response()
}

/// Ironic's virtual media boot (sushy-oem-idrac `set_virtual_boot_device`):
/// the iDRAC refuses an import with LC068 while configuration values are
/// staged or a configuration job is scheduled or running; otherwise it
/// takes it as a task that completes at once.
async fn import_configuration(AxState(s): AxState<Shared>) -> Response {
    let mut st = lock(&s);
    if st.pending.is_some() || st.unfinished() {
        st.imports.push((false, "LC068".into()));
        return dell_error(
            StatusCode::BAD_REQUEST,
            "IDRAC.2.8.LC068",
            "Unable to perform the import or export operation because there are pending attribute changes or a configuration job is in progress.",
        );
    }
    st.imports.push((true, String::new()));
    let id = format!("JID_{}", st.next_job);
    st.next_job += 1;
    (
        StatusCode::ACCEPTED,
        [("location", format!("{TASKS}/{id}"))],
        axum::Json(json!({})),
    )
        .into_response()
}

async fn task_get(Path(id): Path<String>) -> Response {
    axum::Json(json!({"@odata.id": format!("{TASKS}/{id}"), "@odata.type": "#Task.v1_4_3.Task", "Id": id, "Name": "Import Configuration",
        "TaskState": "Completed", "TaskStatus": "OK", "PercentComplete": 100,
        "Messages": [{"MessageId": "IDRAC.2.8.SYS054", "Message": "No changes were applied since the current component configuration matched the requested configuration."}]}))
    .into_response()
}

async fn settings_patch(AxState(s): AxState<Shared>, body: Bytes) -> Response {
    let mut st = lock(&s);
    if st.unfinished() {
        return dell_error(
            StatusCode::BAD_REQUEST,
            "IDRAC.2.8.SYS011",
            "Pending configuration values are already committed, unable to perform another set operation.",
        );
    }
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return dell_error(
            StatusCode::BAD_REQUEST,
            "Base.1.2.MalformedJSON",
            "malformed JSON",
        );
    };
    let Some(list) = v
        .pointer("/Attributes/UefiBootSeq")
        .and_then(Value::as_array)
        .cloned()
    else {
        return dell_error(
            StatusCode::BAD_REQUEST,
            "Base.1.2.PropertyMissing",
            "Attributes.UefiBootSeq is required",
        );
    };
    let mut want: Vec<String> = st
        .listed()
        .iter()
        .map(|e| e["Id"].as_str().unwrap_or_default().to_string())
        .collect();
    let mut got: Vec<String> = list
        .iter()
        .map(|e| e["Id"].as_str().unwrap_or_default().to_string())
        .collect();
    want.sort();
    got.sort();
    let mut idx: Vec<i64> = list.iter().filter_map(|e| e["Index"].as_i64()).collect();
    idx.sort();
    if want != got || idx != (0..list.len() as i64).collect::<Vec<_>>() {
        return dell_error(
            StatusCode::BAD_REQUEST,
            "SYS405",
            "The boot sequence must list every boot source once with indexes 0..n",
        );
    }
    st.pending = Some(list);
    (StatusCode::OK, axum::Json(json!({"@Message.ExtendedInfo": [{"MessageId": "SYS413", "Message": "The operation successfully completed."}]}))).into_response()
}

/// A job as the iDRAC shows it.
fn job_json(j: &Job) -> Value {
    json!({"@odata.id": format!("{JOBS}/{}", j.id), "Id": j.id, "Name": "Configure: BIOS.Setup.1-1", "JobType": "BIOSConfiguration", "JobState": j.state, "PercentComplete": 0, "Message": "Task successfully scheduled.", "MessageId": "JCP001"})
}

/// The job collection; `$expand=.($levels=1)` inlines each job, as iDRAC9
/// firmware does (one request for hundreds of jobs).
async fn jobs_list(
    AxState(s): AxState<Shared>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    let mut st = lock(&s);
    st.job_lists += 1;
    if st
        .cfg
        .jobs_finish_after_lists
        .is_some_and(|n| st.job_lists > n)
    {
        let preexisting: Vec<String> = st.cfg.jobs.iter().map(|(id, _)| id.to_string()).collect();
        for id in preexisting {
            if let Some(j) = st.jobs.get_mut(&id) {
                j.state = "Completed".into();
            }
        }
    }
    let expand = query.is_some_and(|q| {
        q.replace("%24", "$")
            .replace("%28", "(")
            .replace("%29", ")")
            .replace("%3D", "=")
            .contains("$expand=.($levels=1)")
    });
    let members: Vec<Value> = st
        .jobs
        .values()
        .map(|j| {
            if expand {
                job_json(j)
            } else {
                json!({"@odata.id": format!("{JOBS}/{}", j.id)})
            }
        })
        .collect();
    axum::Json(json!({"@odata.id": JOBS, "Members": members, "Members@odata.count": members.len()}))
        .into_response()
}

async fn jobs_post(AxState(s): AxState<Shared>, body: Bytes) -> Response {
    let mut st = lock(&s);
    let target = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["TargetSettingsURI"].as_str().map(String::from))
        .unwrap_or_default();
    if !st.cfg.job_targets.contains(&target.as_str()) {
        return dell_error(
            StatusCode::BAD_REQUEST,
            "SYS030",
            "Invalid TargetSettingsURI",
        );
    }
    if st.unfinished() {
        return dell_error(
            StatusCode::BAD_REQUEST,
            "IDRAC.2.8.SYS011",
            "Pending configuration values are already committed.",
        );
    }
    if st.pending.is_none() {
        return dell_error(
            StatusCode::BAD_REQUEST,
            "SYS403",
            "No pending data present to create a Configuration job",
        );
    }
    let id = format!("JID_{}", st.next_job);
    st.next_job += 1;
    st.jobs.insert(
        id.clone(),
        Job {
            id: id.clone(),
            state: "Scheduled".into(),
            target,
        },
    );
    for (other, state) in st.cfg.jobs_on_create.clone() {
        st.jobs.insert(
            other.to_string(),
            Job {
                id: other.to_string(),
                state: state.to_string(),
                target: "ImportConfiguration".into(),
            },
        );
    }
    (
        StatusCode::OK,
        [("location", format!("{JOBS}/{id}"))],
        axum::Json(json!({})),
    )
        .into_response()
}

async fn job_get(AxState(s): AxState<Shared>, Path(id): Path<String>) -> Response {
    let st = lock(&s);
    match st.jobs.get(&id) {
        Some(j) => axum::Json(job_json(j)).into_response(),
        None => dell_error(
            StatusCode::NOT_FOUND,
            "Base.1.2.ResourceMissingAtURI",
            "no such job",
        ),
    }
}

async fn job_delete(AxState(s): AxState<Shared>, Path(id): Path<String>) -> Response {
    let mut st = lock(&s);
    st.deletes.push((Instant::now(), id.clone()));
    match st.jobs.remove(&id) {
        Some(_) => (StatusCode::OK, axum::Json(json!({}))).into_response(),
        None => dell_error(
            StatusCode::NOT_FOUND,
            "Base.1.2.ResourceMissingAtURI",
            "no such job",
        ),
    }
}

async fn system_reset(AxState(s): AxState<Shared>, body: Bytes) -> Response {
    let mut st = lock(&s);
    let t = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["ResetType"].as_str().map(String::from))
        .unwrap_or_default();
    if ![
        "On",
        "ForceOff",
        "ForceRestart",
        "GracefulShutdown",
        "PushPowerButton",
        "Nmi",
    ]
    .contains(&t.as_str())
    {
        return dell_error(
            StatusCode::BAD_REQUEST,
            "Base.1.2.PropertyValueNotInList",
            "ResetType not allowed",
        );
    }
    st.power_resets.push(t.clone());
    if t == "On" || t == "ForceRestart" {
        st.power_on = true;
        // The scheduled configuration job runs during this boot.
        let scheduled: Vec<String> = st
            .jobs
            .values()
            .filter(|j| j.state == "Scheduled")
            .map(|j| j.id.clone())
            .collect();
        if let Some(pending) = st.pending.take().filter(|_| !scheduled.is_empty()) {
            st.boot = pending;
        }
        for id in scheduled {
            if let Some(j) = st.jobs.get_mut(&id) {
                j.state = "Completed".into();
            }
        }
    } else if t == "ForceOff" || t == "GracefulShutdown" {
        st.power_on = false;
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn manager(AxState(_s): AxState<Shared>) -> Response {
    axum::Json(json!({"@odata.id": MANAGER, "@odata.type": "#Manager.v1_9_0.Manager", "Id": "iDRAC.Embedded.1", "Name": "Manager", "ManagerType": "BMC",
        "Links": {"Oem": {"Dell": {"@odata.type": "#DellOem.v1_1_0.DellOemLinks", "DellLCService": {"@odata.id": LC_SERVICE}}}},
        "Actions": {
            "#Manager.Reset": {"ResetType@Redfish.AllowableValues": ["GracefulRestart"], "target": format!("{MANAGER}/Actions/Manager.Reset")},
            "Oem": {"OemManager.v1_2_0#OemManager.ImportSystemConfiguration": {"target": IMPORT,
                "ShutdownType@Redfish.AllowableValues": ["Graceful", "Forced", "NoReboot"]}},
        },
        "Oem": {"Dell": {"@odata.type": "#DellOem.v1_1_0.DellOemResources"}}}))
    .into_response()
}

async fn lc_service(AxState(_s): AxState<Shared>) -> Response {
    axum::Json(json!({"@odata.id": LC_SERVICE, "Id": "DellLCService",
        "Actions": {"#DellLCService.GetRemoteServicesAPIStatus": {"target": LC_STATUS}}}))
    .into_response()
}

/// The Lifecycle Controller's readiness: not Ready for a while after a
/// controller reset.
async fn lc_status(AxState(s): AxState<Shared>) -> Response {
    let mut st = lock(&s);
    let status = if st.lc_not_ready_left > 0 {
        st.lc_not_ready_left -= 1;
        "NotInitialized"
    } else {
        "Ready"
    };
    st.lc_checks.push((Instant::now(), status.to_string()));
    axum::Json(json!({"LCStatus": status, "RTStatus": "Ready", "ServerStatus": "OutOfPOST", "Status": status}))
        .into_response()
}

async fn manager_reset(AxState(s): AxState<Shared>, body: Bytes) -> Response {
    let t = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["ResetType"].as_str().map(String::from))
        .unwrap_or_default();
    if t != "GracefulRestart" {
        return dell_error(
            StatusCode::BAD_REQUEST,
            "Base.1.2.PropertyValueNotInList",
            "iDRAC allows only GracefulRestart",
        );
    }
    let delay = {
        let mut st = lock(&s);
        st.bmc_resets += 1;
        st.lc_not_ready_left = st.cfg.lc_not_ready_checks;
        st.cfg.reset_delay
    };
    // The controller goes down shortly after it accepted the reset.
    let s2 = s.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        s2.down.notify_one();
    });
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn fallback(method: Method, uri: Uri) -> Response {
    dell_error(
        StatusCode::NOT_FOUND,
        "Base.1.2.ResourceMissingAtURI",
        &format!("{method} {} is not emulated", uri.path()),
    )
}

pub struct Emulator {
    pub addr: SocketAddr,
    pub shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Emulator {
    pub async fn start(cfg: Config) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        Self::start_on(cfg, listener)
    }

    /// On a listener of the caller's (the lab binds one at a BMC address
    /// inside its network namespace: run this on a current-thread runtime
    /// in that namespace, so the rebind after a reset lands there too).
    pub fn start_on(cfg: Config, listener: TcpListener) -> Self {
        let shared: Shared = Arc::new(Shared0 {
            state: Mutex::new(State::new(cfg)),
            down: Notify::new(),
        });
        let app = Router::new()
            .route(SYSTEM, get(system))
            .route(SOURCES, get(sources))
            .route(SETTINGS, get(settings_get).patch(settings_patch))
            .route(BIOS_SETTINGS, axum::routing::patch(settings_patch))
            .route(JOBS, get(jobs_list).post(jobs_post))
            .route(&format!("{JOBS}/{{id}}"), get(job_get).delete(job_delete))
            .route(
                &format!("{SYSTEM}/Actions/ComputerSystem.Reset"),
                post(system_reset),
            )
            .route(MANAGER, get(manager))
            .route(ROOT, get(root))
            .route("/redfish/v1/", get(root))
            .route(IMPORT, post(import_configuration))
            .route(&format!("{TASKS}/{{id}}"), get(task_get))
            .route(CLEAR_PENDING, post(clear_pending))
            .route(LC_SERVICE, get(lc_service))
            .route(LC_STATUS, post(lc_status))
            .route(
                &format!("{MANAGER}/Actions/Manager.Reset"),
                post(manager_reset),
            )
            .fallback(fallback)
            .layer(axum::middleware::from_fn_with_state(shared.clone(), gate))
            .with_state(shared.clone());
        let addr = listener.local_addr().expect("addr");
        let s = shared.clone();
        let task = tokio::spawn(serve(listener, addr, app, s));
        Self { addr, shared, task }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn with<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&lock(&self.shared))
    }

    /// Changes the iDRAC's state as something else would (Ironic's jobs
    /// finishing, values staged by hand).
    pub fn with_mut<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut lock(&self.shared))
    }
}

/// Accepts until a controller reset, then refuses connections (no
/// listener at all) for the configured time, then listens again.
async fn serve(mut listener: TcpListener, addr: SocketAddr, app: Router, s: Shared) {
    loop {
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                acc = listener.accept() => {
                    let Ok((stream, _)) = acc else { continue };
                    let svc = hyper_util::service::TowerToHyperService::new(app.clone());
                    conns.spawn(async move {
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
                    });
                }
                () = s.down.notified() => break,
            }
        }
        drop(listener);
        conns.abort_all();
        let down = lock(&s).cfg.down_after_reset;
        tokio::time::sleep(down).await;
        listener = loop {
            match TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
    }
}
