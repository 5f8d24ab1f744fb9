//! Dell iDRAC specifics: the UEFI boot order for virtual media, the job
//! queue, the controller reset.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::redfish::{BmcError, Client, Idempotency, Reply};

/// Job states that block a new configuration job.
pub const UNFINISHED: [&str; 6] = [
    "Scheduled",
    "New",
    "Running",
    "Downloading",
    "Waiting",
    "Paused",
];

/// Error codes meaning "a configuration job is already pending or running".
pub const PENDING_CODES: [&str; 3] = ["SYS011", "RAC0679", "LC068"];

#[derive(Clone, Debug)]
pub struct Ids {
    pub system: String,
    pub manager: String,
}

impl Default for Ids {
    fn default() -> Self {
        Self {
            system: "System.Embedded.1".into(),
            manager: "iDRAC.Embedded.1".into(),
        }
    }
}

impl Ids {
    pub fn system_path(&self) -> String {
        format!("/redfish/v1/Systems/{}", self.system)
    }
    pub fn manager_path(&self) -> String {
        format!("/redfish/v1/Managers/{}", self.manager)
    }
    pub fn jobs_path(&self) -> String {
        format!("{}/Jobs", self.manager_path())
    }
}

/// What a run achieved, for the one-line outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Fixed {
        device: String,
        job: String,
        reset: Restart,
        waited_for: usize,
    },
    /// Jobs of others (Ironic's) kept the change blocked for the whole
    /// wait; nothing was changed.
    Deferred {
        device: String,
        blocking: Vec<String>,
    },
    AlreadyFirst {
        device: String,
    },
    /// An operating system (maybe Ironic's ramdisk, booted from the very
    /// media) is up: a job now would stay scheduled until its next reboot
    /// and make the iDRAC refuse Ironic's configuration import (LC068).
    /// Nothing was staged.
    OsRunning {
        device: String,
        last_state: String,
    },
    MediaNotAttached {
        device: String,
        waited: Duration,
    },
    BmcReset {
        came_back: bool,
        waited: Duration,
    },
    /// The reset was taken, but the iDRAC did not come back, or its
    /// Lifecycle Controller did not report Ready, within the wait. Not a
    /// failure of the run: a failed Job is retried, and a second reset
    /// would restart the initialization this one waited for.
    ResetTimeout {
        waited: Duration,
        stage: &'static str,
    },
    PowerReset {
        reset: String,
        power: String,
    },
}

impl Outcome {
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Fixed { .. } => "fixed",
            Outcome::Deferred { .. } => "deferred",
            Outcome::AlreadyFirst { .. } => "already-first",
            Outcome::OsRunning { .. } => "deferred",
            Outcome::MediaNotAttached { .. } => "media-not-attached",
            Outcome::BmcReset { .. } => "bmc-reset",
            Outcome::ResetTimeout { .. } => "timeout",
            Outcome::PowerReset { .. } => "power-reset",
        }
    }

    pub fn detail(&self) -> String {
        match self {
            Outcome::Fixed {
                device,
                job,
                reset,
                waited_for,
            } => format!(
                "{device} is first in the UEFI boot order, config job {job}, {}, waited for {waited_for} job(s) of others",
                reset.describe()
            ),
            Outcome::Deferred { device, blocking } => format!(
                "{device} not moved: job(s) {} of others still pending after the wait; they were left alone",
                blocking.join(", ")
            ),
            Outcome::AlreadyFirst { device } => format!("{device} is already first; nothing to do"),
            Outcome::OsRunning { device, last_state } => format!(
                "{device} not moved: an OS is up (BootProgress {last_state}), and a job waiting for its next reboot would block Ironic's configuration import; nothing staged"
            ),
            Outcome::MediaNotAttached { device, waited } => {
                format!(
                    "{device} did not appear in the boot sources within {waited:?}; nothing to do"
                )
            }
            Outcome::BmcReset {
                came_back: true,
                waited,
            } => {
                format!(
                    "iDRAC reset (GracefulRestart), answering again and its Lifecycle Controller Ready after {waited:?}"
                )
            }
            Outcome::BmcReset {
                came_back: false,
                waited,
            } => {
                format!(
                    "iDRAC reset (GracefulRestart) requested; not yet answering after {waited:?}"
                )
            }
            Outcome::ResetTimeout { waited, stage } => format!(
                "iDRAC reset (GracefulRestart) taken; {stage} within {waited:?}; not reset again"
            ),
            Outcome::PowerReset { reset, power } => format!("power was {power}: {reset}"),
        }
    }
}

/// One entry of a Dell boot sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct BootEntry {
    pub id: String,
    pub index: i64,
    pub enabled: bool,
    pub name: String,
}

impl BootEntry {
    fn from_json(v: &Value) -> Option<Self> {
        Some(Self {
            id: v.get("Id")?.as_str()?.to_string(),
            index: v.get("Index").and_then(Value::as_i64).unwrap_or(i64::MAX),
            enabled: v.get("Enabled").and_then(Value::as_bool).unwrap_or(false),
            name: v
                .get("Name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        })
    }

    fn to_json(&self) -> Value {
        json!({"Id": self.id, "Index": self.index, "Enabled": self.enabled, "Name": self.name})
    }

    fn is(&self, device: &str) -> bool {
        self.name == device || self.id.split('#').any(|p| p == device)
    }
}

/// The sequence attribute to read and write: UEFI unless only the legacy
/// BIOS sequence lists the device.
pub fn sequence(sources: &Value, device: &str) -> Option<(&'static str, Vec<BootEntry>)> {
    for attr in ["UefiBootSeq", "BootSeq"] {
        let entries: Vec<BootEntry> = sources
            .pointer(&format!("/Attributes/{attr}"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(BootEntry::from_json).collect())
            .unwrap_or_default();
        if entries.iter().any(|e| e.is(device)) {
            return Some((attr, entries));
        }
    }
    None
}

/// The same entries with `device` first and enabled, the others keeping
/// their relative order, indexes renumbered from 0.
pub fn reorder(entries: &[BootEntry], device: &str) -> Vec<BootEntry> {
    let mut sorted = entries.to_vec();
    sorted.sort_by_key(|e| e.index);
    let (mut first, rest): (Vec<_>, Vec<_>) = sorted.into_iter().partition(|e| e.is(device));
    first.truncate(1);
    if let Some(f) = first.first_mut() {
        f.enabled = true;
    }
    first
        .into_iter()
        .chain(rest)
        .enumerate()
        .map(|(i, mut e)| {
            e.index = i as i64;
            e
        })
        .collect()
}

fn refused(method: &str, path: &str, r: &Reply) -> BmcError {
    BmcError::Refused {
        method: method.into(),
        path: path.into(),
        status: r.status.as_u16(),
        message: r.message(),
    }
}

fn odata_id(v: &Value) -> Option<String> {
    v.get("@odata.id").and_then(Value::as_str).map(String::from)
}

/// Where this iDRAC keeps its boot sources: the system's Dell OEM link
/// (`DELL` on iDRAC8, `Dell` later), else the iDRAC8 default path.
pub async fn boot_sources_path(c: &Client, ids: &Ids) -> Result<String, BmcError> {
    let system = c.get(&ids.system_path()).await?;
    let link = [
        "/Links/Oem/DELL/BootOrder",
        "/Links/Oem/Dell/BootOrder",
        "/Links/Oem/Dell/DellBootSources",
    ]
    .iter()
    .find_map(|p| system.pointer(p).and_then(odata_id));
    Ok(link.unwrap_or_else(|| format!("{}/BootSources", ids.system_path())))
}

/// Inlines every job in the collection's answer (Redfish `$expand`, on
/// iDRAC9): an iDRAC holds hundreds of jobs, one GET each would take
/// minutes of the run's budget.
pub const EXPAND_JOBS: &str = "?$expand=.($levels=1)";

/// The unfinished jobs on the iDRAC, by id: one expanded request; a job
/// the firmware did not inline (iDRAC8 ignores `$expand`) is read alone.
pub async fn unfinished_jobs(c: &Client, ids: &Ids) -> Result<Vec<String>, BmcError> {
    let list = c.get(&format!("{}{EXPAND_JOBS}", ids.jobs_path())).await?;
    let members: Vec<Value> = list
        .get("Members")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut open = Vec::new();
    for member in members {
        let Some(path) = odata_id(&member) else {
            continue;
        };
        let job = if member.get("JobState").is_some() {
            member
        } else {
            c.get(&path).await?
        };
        let state = job
            .get("JobState")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if UNFINISHED.contains(&state) {
            open.push(path.rsplit('/').next().unwrap_or(&path).to_string());
        }
    }
    Ok(open)
}

/// Waits, polling every `o.jobs_poll` for at most `o.jobs_wait`, until no
/// unfinished job blocks a configuration change. Jobs are never deleted:
/// Ironic runs its virtual media boot setting (ImportSystemConfiguration),
/// BIOS and RAID steps as iDRAC jobs, and sushy-oem-idrac itself waits on a
/// running job (RAC0679) rather than deleting it. Returns the number of
/// jobs waited for, or the ids still blocking when the wait ran out.
pub async fn wait_for_jobs(
    c: &Client,
    ids: &Ids,
    o: &FixOptions,
) -> Result<Result<usize, Vec<String>>, BmcError> {
    let started = Instant::now();
    let first = unfinished_jobs(c, ids).await?;
    let mut open = first.clone();
    while !open.is_empty() {
        if started.elapsed() + o.jobs_poll > o.jobs_wait || o.jobs_poll >= c.remaining() {
            return Ok(Err(open));
        }
        tracing::info!(jobs = ?open, "waiting for job(s) of others to finish");
        c.pause(o.jobs_poll).await?;
        open = unfinished_jobs(c, ids).await?;
    }
    Ok(Ok(first.len()))
}

/// `wait_for_jobs`, adding what it waited for to `waited_for`; the
/// deferred outcome when the jobs of others outlast the wait.
async fn wait_or_defer(
    c: &Client,
    ids: &Ids,
    o: &FixOptions,
    waited_for: &mut usize,
) -> Result<Option<Outcome>, BmcError> {
    Ok(match wait_for_jobs(c, ids, o).await? {
        Ok(n) => {
            *waited_for += n;
            None
        }
        Err(blocking) => Some(Outcome::Deferred {
            device: o.device.clone(),
            blocking,
        }),
    })
}

/// What to do with the host's power once the configuration job exists (it
/// runs at the next boot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restart {
    /// Off: power it on; nothing runs that a boot could interrupt.
    PowerOn,
    /// On, in firmware or stuck before an OS: restart now.
    ForceRestart,
    /// On with an operating system booting or running: that may be Ironic's
    /// ramdisk booted from the virtual media, which a restart would kill.
    /// Checked before anything is staged (`Outcome::OsRunning`).
    Leave { last_state: String },
    /// Jobs of others (Ironic's configuration import) appeared while ours
    /// was created: a restart would interrupt them, so ours runs at the
    /// reboot Ironic makes.
    OthersPending { jobs: Vec<String> },
}

impl Restart {
    pub fn reset_type(&self) -> Option<&'static str> {
        match self {
            Restart::PowerOn => Some("On"),
            Restart::ForceRestart => Some("ForceRestart"),
            Restart::Leave { .. } | Restart::OthersPending { .. } => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Restart::PowerOn => "host was off: On".into(),
            Restart::ForceRestart => "host was on before any OS: ForceRestart".into(),
            Restart::Leave { last_state } => format!(
                "host left running (BootProgress {last_state}: an OS, maybe Ironic's ramdisk, is up; the job runs at the next reboot)"
            ),
            Restart::OthersPending { jobs } => format!(
                "host not restarted: job(s) {} of others pending (a restart would interrupt them); ours runs at their reboot",
                jobs.join(", ")
            ),
        }
    }
}

/// Boot progress states at which an operating system is booting or running
/// (Redfish BootProgressTypes).
pub const OS_STATES: [&str; 2] = ["OSBootStarted", "OSRunning"];

/// The restart rule, from the system's PowerState and
/// BootProgress.LastState (absent on iDRAC8 firmware, which then restarts
/// as before: it cannot tell).
pub fn restart_rule(power: &str, last_state: Option<&str>) -> Restart {
    match (power, last_state) {
        ("On", Some(s)) if OS_STATES.contains(&s) => Restart::Leave {
            last_state: s.to_string(),
        },
        ("On", _) => Restart::ForceRestart,
        _ => Restart::PowerOn,
    }
}

#[derive(Clone, Debug)]
pub struct FixOptions {
    pub device: String,
    pub media_wait: Duration,
    pub poll: Duration,
    /// Poll interval while jobs of others block the change.
    pub jobs_poll: Duration,
    /// How long to wait for them before deferring.
    pub jobs_wait: Duration,
}

/// The whole boot-order fix. See the module docs of the crate.
pub async fn fix_boot_order(c: &Client, ids: &Ids, o: &FixOptions) -> Result<Outcome, BmcError> {
    let sources_path = boot_sources_path(c, ids).await?;
    let settings_path = format!("{sources_path}/Settings");

    // 1. The iDRAC lists the virtual drive only while media is attached.
    let started = Instant::now();
    let (attr, entries) = loop {
        let sources = c.get(&sources_path).await?;
        if let Some(found) = sequence(&sources, &o.device) {
            break found;
        }
        if started.elapsed() + o.poll > o.media_wait {
            return Ok(Outcome::MediaNotAttached {
                device: o.device.clone(),
                waited: started.elapsed(),
            });
        }
        tracing::info!(device = %o.device, "virtual drive not listed yet; waiting");
        c.pause(o.poll).await?;
    };

    // 2. Already first?
    let mut sorted = entries.clone();
    sorted.sort_by_key(|e| e.index);
    if sorted.first().is_some_and(|e| e.is(&o.device) && e.enabled) {
        return Ok(Outcome::AlreadyFirst {
            device: o.device.clone(),
        });
    }

    // 3. Nothing is staged unless the job can follow: not while jobs of
    // others (Ironic's) are pending (SYS011 otherwise; they are waited
    // for, never deleted), nor while an OS is up.
    let mut waited_for = 0;
    if let Some(deferred) = wait_or_defer(c, ids, o, &mut waited_for).await? {
        return Ok(deferred);
    }
    let (power, last_state) = power_and_progress(c, ids).await?;
    if let Restart::Leave { last_state } = restart_rule(&power, last_state.as_deref()) {
        return Ok(Outcome::OsRunning {
            device: o.device.clone(),
            last_state,
        });
    }

    // 4. Stage the new order, then commit it with a configuration job.
    // Staged values without a job survive reboots and make the iDRAC
    // refuse Ironic's configuration import (LC068, after which
    // sushy-oem-idrac power-cycles the host): every way out after the
    // PATCH either has the job or clears what was staged.
    let body = json!({"Attributes": {attr: reorder(&entries, &o.device).iter().map(BootEntry::to_json).collect::<Vec<_>>()}});
    for round in 0..3 {
        let r = c
            .send(
                Method::PATCH,
                &settings_path,
                Some(&body),
                Idempotency::Safe,
            )
            .await?;
        if r.ok() {
            break;
        }
        if round < 2 && PENDING_CODES.iter().any(|code| r.has_message(code)) {
            tracing::info!(code = %r.message(), "a job created meanwhile blocks the change; waiting for it");
            if let Some(deferred) = wait_or_defer(c, ids, o, &mut waited_for).await? {
                return Ok(deferred);
            }
            continue;
        }
        return Err(refused("PATCH", &settings_path, &r));
    }
    let job = match create_job(c, ids, o, &settings_path, &mut waited_for).await {
        Ok(Ok(job)) => job,
        Ok(Err(deferred)) => {
            clear_pending(c, &settings_path).await?;
            return Ok(deferred);
        }
        Err(e) => {
            // Best effort: the error says what went wrong first.
            if let Err(clear) = clear_pending(c, &settings_path).await {
                tracing::warn!(error = %clear, "clearing the staged boot order failed too");
            }
            return Err(e);
        }
    };

    // 5. The job runs at the next boot: start one (power as read before
    // staging, seconds ago), unless jobs of others appeared meanwhile (a
    // restart would interrupt Ironic's import).
    let others: Vec<String> = unfinished_jobs(c, ids)
        .await?
        .into_iter()
        .filter(|j| *j != job)
        .collect();
    let reset = if others.is_empty() {
        restart_rule(&power, last_state.as_deref())
    } else {
        Restart::OthersPending { jobs: others }
    };
    if let Some(t) = reset.reset_type() {
        system_reset(c, ids, t).await?;
    }
    Ok(Outcome::Fixed {
        device: o.device.clone(),
        job,
        reset,
        waited_for,
    })
}

/// The system's PowerState and BootProgress.LastState (absent on iDRAC8).
async fn power_and_progress(c: &Client, ids: &Ids) -> Result<(String, Option<String>), BmcError> {
    let system = c.get(&ids.system_path()).await?;
    let power = system
        .get("PowerState")
        .and_then(Value::as_str)
        .unwrap_or("Unknown")
        .to_string();
    let last_state = system
        .pointer("/BootProgress/LastState")
        .and_then(Value::as_str)
        .map(String::from);
    Ok((power, last_state))
}

/// Creates the configuration job for what `settings_path` staged: its id,
/// or the deferred outcome when jobs of others keep blocking it. The
/// original targets BootSources/Settings; Dell's own scripts use
/// Bios/Settings: try the first and fall back once when the firmware
/// rejects the target.
async fn create_job(
    c: &Client,
    ids: &Ids,
    o: &FixOptions,
    settings_path: &str,
    waited_for: &mut usize,
) -> Result<Result<String, Outcome>, BmcError> {
    let bios_settings = format!("{}/Bios/Settings", ids.system_path());
    let mut targets = vec![settings_path.to_string(), bios_settings];
    let mut pending_round = 0;
    while let Some(target) = targets.first().cloned() {
        let r = c
            .send(
                Method::POST,
                &ids.jobs_path(),
                Some(&json!({"TargetSettingsURI": target})),
                Idempotency::Once,
            )
            .await?;
        if r.ok() {
            let id = r
                .location
                .as_deref()
                .and_then(|l| l.rsplit('/').next())
                .map(String::from)
                .or_else(|| {
                    r.body
                        .as_ref()
                        .and_then(|b| b.get("Id"))
                        .and_then(Value::as_str)
                        .map(String::from)
                })
                .unwrap_or_else(|| "(unnamed)".into());
            return Ok(Ok(id));
        }
        if PENDING_CODES.iter().any(|code| r.has_message(code)) && pending_round < 2 {
            pending_round += 1;
            if let Some(deferred) = wait_or_defer(c, ids, o, waited_for).await? {
                return Ok(Err(deferred));
            }
            continue;
        }
        if r.status.as_u16() == 400 && targets.len() > 1 {
            tracing::info!(target = %target, reason = %r.message(), "configuration job target refused; trying Bios/Settings");
            targets.remove(0);
            continue;
        }
        return Err(refused("POST", &ids.jobs_path(), &r));
    }
    Err(BmcError::Protocol(
        "no configuration job was created".into(),
    ))
}

/// Dell's ClearPending on the settings resource that holds the staged
/// values: its advertised action target, else the conventional path.
pub async fn clear_pending(c: &Client, settings_path: &str) -> Result<(), BmcError> {
    let settings = c.get(settings_path).await.unwrap_or(Value::Null);
    let target = [
        "/Actions/Oem/#DellManager.ClearPending/target",
        "/Actions/#DellManager.ClearPending/target",
    ]
    .iter()
    .find_map(|p| {
        settings
            .pointer(p)
            .and_then(Value::as_str)
            .map(String::from)
    })
    .unwrap_or_else(|| format!("{settings_path}/Actions/Oem/DellManager.ClearPending"));
    let r = c
        .send(Method::POST, &target, Some(&json!({})), Idempotency::Safe)
        .await?;
    if !r.ok() {
        return Err(refused("POST", &target, &r));
    }
    tracing::info!("staged boot order cleared (no job could commit it)");
    Ok(())
}

async fn system_reset(c: &Client, ids: &Ids, reset: &str) -> Result<(), BmcError> {
    let path = format!("{}/Actions/ComputerSystem.Reset", ids.system_path());
    let r = c
        .send(
            Method::POST,
            &path,
            Some(&json!({"ResetType": reset})),
            Idempotency::Once,
        )
        .await?;
    if !r.ok() {
        return Err(refused("POST", &path, &r));
    }
    Ok(())
}

/// ForceRestart when on, On when off. Returns (reset type, power state).
pub async fn power_reset(c: &Client, ids: &Ids) -> Result<(String, String), BmcError> {
    let (power, _) = power_and_progress(c, ids).await?;
    let reset = if power == "On" { "ForceRestart" } else { "On" };
    system_reset(c, ids, reset).await?;
    Ok((reset.to_string(), power))
}

/// Waits until the system reports `want` as its PowerState.
pub async fn wait_power(c: &Client, ids: &Ids, want: &str, poll: Duration) -> Result<(), BmcError> {
    loop {
        let system = c.get(&ids.system_path()).await?;
        if system.get("PowerState").and_then(Value::as_str) == Some(want) {
            return Ok(());
        }
        c.pause(poll).await?;
    }
}

#[derive(Clone, Debug)]
pub struct ResetOptions {
    /// How long to watch for the iDRAC going away after the reset.
    pub down_wait: Duration,
    pub poll: Duration,
    /// Wait for it to answer again and its Lifecycle Controller to be
    /// Ready (within the budget).
    pub wait_back: bool,
    /// How long to wait for it, from the reset.
    pub ready_wait: Duration,
}

/// Where the Lifecycle Controller's status action is: the manager's Dell
/// OEM link to DellLCService, its action target, else iDRAC9's paths.
pub async fn lc_status_target(c: &Client, ids: &Ids) -> Result<String, BmcError> {
    let manager = c.get(&ids.manager_path()).await?;
    let service = manager
        .pointer("/Links/Oem/Dell/DellLCService")
        .and_then(odata_id)
        .unwrap_or_else(|| format!("/redfish/v1/Dell/Managers/{}/DellLCService", ids.manager));
    let lc = c.get(&service).await?;
    Ok(lc
        .pointer("/Actions/#DellLCService.GetRemoteServicesAPIStatus/target")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| format!("{service}/Actions/DellLCService.GetRemoteServicesAPIStatus")))
}

/// Whether the Lifecycle Controller takes configuration: `LCStatus` Ready
/// (what sushy-oem-idrac's `reset_idrac` waits for before Ironic goes on).
pub async fn lc_ready(c: &Client, target: &str) -> Result<bool, BmcError> {
    let r = c
        .send(Method::POST, target, Some(&json!({})), Idempotency::Safe)
        .await?;
    Ok(r.ok()
        && r.body
            .as_ref()
            .and_then(|b| b.get("LCStatus"))
            .and_then(Value::as_str)
            == Some("Ready"))
}

/// Manager.Reset with GracefulRestart (the only type iDRAC allows), then
/// wait for it to go away, answer again, and report its Lifecycle
/// Controller Ready: it answers HTTP well before it takes configuration,
/// and BMO's next try would fail again on a controller not yet ready.
pub async fn reset_bmc(c: &Client, ids: &Ids, o: &ResetOptions) -> Result<Outcome, BmcError> {
    let path = format!("{}/Actions/Manager.Reset", ids.manager_path());
    let started = Instant::now();
    match c
        .send(
            Method::POST,
            &path,
            Some(&json!({"ResetType": "GracefulRestart"})),
            Idempotency::Once,
        )
        .await
    {
        Ok(r) if r.ok() => {}
        Ok(r) => return Err(refused("POST", &path, &r)),
        // A reset that timed out may well have happened; never send a
        // second one, go on to watch the controller instead.
        Err(BmcError::Unreachable(e)) => {
            tracing::warn!(error = %e, "no answer to the reset; assuming it was taken")
        }
        Err(e) => return Err(e),
    }
    tracing::info!("iDRAC reset requested");
    if !o.wait_back {
        return Ok(Outcome::BmcReset {
            came_back: false,
            waited: started.elapsed(),
        });
    }
    let manager = ids.manager_path();
    // It keeps answering for a few seconds before it goes down.
    let down_deadline = Instant::now() + o.down_wait;
    while Instant::now() < down_deadline
        && c.probe(&manager, o.poll.max(Duration::from_secs(1))).await
    {
        c.pause(o.poll).await?;
    }
    let out_of_time = || started.elapsed() + o.poll > o.ready_wait || o.poll >= c.remaining();
    loop {
        if c.probe(&manager, o.poll.max(Duration::from_secs(2))).await {
            break;
        }
        if out_of_time() {
            return Ok(Outcome::ResetTimeout {
                waited: started.elapsed(),
                stage: "it did not answer again",
            });
        }
        c.pause(o.poll).await?;
    }
    let target = lc_status_target(c, ids).await?;
    loop {
        if lc_ready(c, &target).await? {
            return Ok(Outcome::BmcReset {
                came_back: true,
                waited: started.elapsed(),
            });
        }
        if out_of_time() {
            return Ok(Outcome::ResetTimeout {
                waited: started.elapsed(),
                stage: "its Lifecycle Controller did not report Ready",
            });
        }
        tracing::info!("iDRAC answers; its Lifecycle Controller is not Ready yet");
        c.pause(o.poll).await?;
    }
}
