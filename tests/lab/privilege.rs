//! Least privilege: every lab controller runs as its own ServiceAccount
//! with the RBAC its project ships (xtask::lab::identity). No controller
//! may be refused anything over a whole run, and each rule of MetalPlane's
//! own RBAC is shown to be needed.

use std::sync::Mutex;

use xtask::lab::identity;

use super::*;

/// Windows of the audit log and every process log (byte offsets at their
/// start and end) that the final check skips: the deliberate refusals of
/// `least_privilege`, and the first seconds of each API server the chaos
/// pass restarted (its authorizer answers before its RBAC caches are
/// filled, see `exempt_windows`).
type Offsets = xtask::lab::LogOffsets;
static WINDOWS: Mutex<Vec<(Offsets, Offsets)>> = Mutex::new(Vec::new());

fn logs(lab: &Lab) -> Vec<std::path::PathBuf> {
    lab.logs()
}

/// Skips these windows in the final check.
pub(crate) fn exempt_windows(windows: impl IntoIterator<Item = (Offsets, Offsets)>) {
    if let Ok(mut w) = WINDOWS.lock() {
        w.extend(windows);
    }
}

/// A file's text without the exempt windows.
fn read_to_cut(path: &std::path::Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let n = bytes.len();
    let mut cuts: Vec<(usize, usize)> = WINDOWS
        .lock()
        .map(|w| {
            w.iter()
                .filter_map(|(a, b)| match (a.get(path), b.get(path)) {
                    (Some(a), Some(b)) => Some(((*a as usize).min(n), (*b as usize).min(n))),
                    // A log that began inside the window: all of it up to the end.
                    (None, Some(b)) => Some((0, (*b as usize).min(n))),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    cuts.sort();
    let mut kept = Vec::with_capacity(n);
    let mut at = 0;
    for (from, to) in cuts {
        if from > at {
            kept.extend_from_slice(&bytes[at..from]);
        }
        at = at.max(to);
    }
    kept.extend_from_slice(&bytes[at.min(n)..]);
    String::from_utf8_lossy(&kept).into_owned()
}

/// No request of any controller was refused by the authorizer (the API
/// server's audit log), and no controller logged an RBAC refusal.
pub(crate) fn nothing_forbidden(lab: &Lab) -> Outcome {
    let denied = identity::denied(&read_to_cut(&lab.audit_log()));
    let mut problems: Vec<String> = denied.iter().map(|d| format!("refused: {d}")).collect();
    for log in logs(lab) {
        if log == lab.audit_log() {
            continue;
        }
        let text = read_to_cut(&log);
        for l in identity::forbidden_lines(&text).into_iter().take(3) {
            let name = log.file_name().unwrap_or_default().to_string_lossy();
            problems.push(format!(
                "{name}: {}",
                l.chars().take(400).collect::<String>()
            ));
        }
    }
    check(problems.is_empty(), || {
        format!(
            "{} RBAC refusals during the run:\n  {}",
            problems.len(),
            problems.join("\n  ")
        )
    })
}

/// A ClusterRole's holder: Crossplane for the roles aggregated into its
/// own, else the ServiceAccount the same file binds the role to.
fn holder(role: &Value, docs: &[Value]) -> Option<identity::Account> {
    let name = str_at(role, "/metadata/name");
    if str_at(
        role,
        "/metadata/labels/rbac.crossplane.io~1aggregate-to-crossplane",
    ) == "true"
    {
        return Some(identity::Account::new("crossplane-system", "crossplane"));
    }
    docs.iter()
        .filter(|d| {
            str_at(d, "/kind") == "ClusterRoleBinding" && str_at(d, "/roleRef/name") == name
        })
        .flat_map(|b| {
            b.get("subjects")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .find(|s| str_at(s, "/kind") == "ServiceAccount")
        .map(|s| identity::Account::new(str_at(&s, "/namespace"), str_at(&s, "/name")))
}

/// One rule of MetalPlane's RBAC.
struct Rule {
    file: &'static str,
    role: Value,
    index: usize,
    holder: identity::Account,
    /// The lab process that acts as `holder`.
    process: &'static str,
}

impl Rule {
    fn rule(&self) -> &Value {
        &self.role["rules"][self.index]
    }
    fn name(&self) -> String {
        format!(
            "{} {} rule {} {}",
            self.file,
            str_at(&self.role, "/metadata/name"),
            self.index + 1,
            self.rule()
        )
    }
}

/// Every rule of every ClusterRole a user applies (install::RBAC_FILES).
fn rules() -> Result<Vec<Rule>, String> {
    let mut out = Vec::new();
    for file in xtask::lab::install::RBAC_FILES {
        let docs = xtask::lab::kube::load_yaml(&xtask::repo_root().join(file))
            .map_err(|e| e.to_string())?;
        for role in docs.iter().filter(|d| str_at(d, "/kind") == "ClusterRole") {
            let holder = holder(role, &docs).ok_or_else(|| {
                format!(
                    "{file}: nobody holds ClusterRole {}",
                    str_at(role, "/metadata/name")
                )
            })?;
            let process = match holder.name.as_str() {
                "crossplane" => "crossplane",
                "provider-kubernetes" => "provider-kubernetes",
                other => return Err(format!("{file}: no lab process runs as {other}")),
            };
            let n = role["rules"].as_array().map_or(0, Vec::len);
            for index in 0..n {
                out.push(Rule {
                    file,
                    role: role.clone(),
                    index,
                    holder: holder.clone(),
                    process,
                });
            }
        }
    }
    Ok(out)
}

/// What makes the code path a rule is for run, after its holder restarts
/// (every informer lists anew, every object is reconciled anew).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Trigger {
    /// Nothing more: on start Crossplane re-applies every composed
    /// resource of the live MetalClusters and reads their hosts and
    /// Machines; provider-kubernetes reconciles every Object.
    Restart,
    /// The host's `crossplane.io/in-use` label removed: the Usage
    /// controller puts it back (an Update of the host).
    InUseLabel,
    /// A twin of the kubeconfig copy's Object deleted: provider-kubernetes
    /// deletes its inner Object in modelplane-system.
    CopyDeleted,
    /// A Dell host starts provisioning: the operation applies its
    /// boot-order Job.
    BootOrderJob,
    /// A Dell host's virtual media fails: the reset is recorded on the host
    /// (a patch).
    ResetRecorded,
}

/// The code path of each rule, by what the rule grants. A rule this does
/// not know fails the scenario: every rule needs a proof.
fn trigger(rule: &Rule) -> Option<Trigger> {
    let r = rule.rule();
    let has = |key: &str, v: &str| {
        r.get(key)
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x == v))
    };
    let verbs: Vec<&str> = r["verbs"]
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match rule.file {
        "apis/operations/rbac.yaml" if has("resources", "jobs") => Some(Trigger::BootOrderJob),
        "apis/operations/rbac.yaml" if has("resources", "baremetalhosts") => {
            Some(Trigger::ResetRecorded)
        }
        "apis/metalclusters/rbac.yaml" if has("resources", "baremetalhosts") => {
            Some(Trigger::InUseLabel)
        }
        "apis/metalclusters/rbac.yaml" => Some(Trigger::Restart),
        "apis/providers/rbac.yaml" if verbs == ["delete"] => Some(Trigger::CopyDeleted),
        "apis/providers/rbac.yaml" => Some(Trigger::Restart),
        _ => None,
    }
}

/// Applies `role` with or without rule `index`, and waits until the
/// holder's effective role shows it (the aggregator rewrites Crossplane's
/// `crossplane` ClusterRole).
fn apply_role(lab: &Lab, rule: &Rule, without: bool) -> Outcome {
    let mut role = rule.role.clone();
    if without && let Some(rules) = role["rules"].as_array_mut() {
        rules.remove(rule.index);
    }
    let aggregated = |lab: &Lab| {
        lab.kube
            .get("clusterrole", "crossplane", None)
            .map(|r| r["rules"].as_array().cloned().unwrap_or_default())
            .unwrap_or_default()
    };
    lab.kube.apply(&[role]).map_err(|e| e.to_string())?;
    if rule.process == "crossplane" {
        let want = rule.rule().clone();
        // The aggregated role is a union: it holds the rule exactly when
        // some aggregated role still grants it.
        let others_grant = |lab: &Lab| {
            lab.kube
                .list("clusterroles", None)
                .iter()
                .filter(|r| {
                    str_at(
                        r,
                        "/metadata/labels/rbac.crossplane.io~1aggregate-to-crossplane",
                    ) == "true"
                })
                .any(|r| r["rules"].as_array().is_some_and(|rs| rs.contains(&want)))
        };
        wait("Crossplane's aggregated ClusterRole updated", 60, || {
            aggregated(lab).contains(&want) == others_grant(lab)
        })?;
    }
    Ok(())
}

/// Byte lengths of the audit log and the process logs now.
fn offsets(lab: &Lab) -> Offsets {
    lab.log_offsets()
}

/// Refusals in the audit log after `from` bytes.
fn denied_since(lab: &Lab, from: u64) -> std::collections::BTreeSet<identity::Denied> {
    let bytes = std::fs::read(lab.audit_log()).unwrap_or_default();
    let start = (from as usize).min(bytes.len());
    identity::denied(&String::from_utf8_lossy(&bytes[start..]))
}

/// Runs what `trigger` names.
fn run_trigger(lab: &Lab, t: Trigger) -> Outcome {
    let e = |e: xtask::lab::LabError| e.to_string();
    match t {
        Trigger::Restart => Ok(()),
        Trigger::InUseLabel => lab
            .kube
            .run(&[
                "label",
                "baremetalhost",
                R740.host,
                "-n",
                NS,
                "crossplane.io/in-use-",
            ])
            .map(|_| ())
            .map_err(e),
        Trigger::CopyDeleted => lab
            .kube
            .run(&["delete", OBJECTS, PROBE, "-n", NS, "--wait=false"])
            .map(|_| ())
            .map_err(e),
        Trigger::BootOrderJob => set_host_status(lab, "b1", "provisioning", "", 0),
        Trigger::ResetRecorded => set_host_status(lab, "b2", "provisioning", VMEDIA_ERROR, 1),
    }
}

const OBJECTS: &str = "objects.kubernetes.m.crossplane.io";

/// A twin of the r740 kubeconfig copy (its Usages keep the copy itself
/// from being deleted while the cluster lives): an Object applying an
/// observe-only inner Object to modelplane-system, as the copy does, minus
/// the connection Secret.
const PROBE: &str = "least-privilege-probe";

fn apply_probe(lab: &Lab) -> Outcome {
    let copy = kubeconfig_copy(lab).ok_or("no kubeconfig copy Object for r740")?;
    let live = lab
        .kube
        .get(OBJECTS, &copy, Some(NS))
        .ok_or("the kubeconfig copy is gone")?;
    let mut spec = live["spec"].clone();
    let inner = &mut spec["forProvider"]["manifest"];
    inner["metadata"] = json!({"name": PROBE, "namespace": MODELPLANE_NS});
    if let Some(s) = inner["spec"].as_object_mut() {
        s.remove("connectionDetails");
        s.remove("writeConnectionSecretToRef");
    }
    lab.kube
        .apply(&[json!({
            "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
            "kind": "Object",
            "metadata": {"name": PROBE, "namespace": NS},
            "spec": spec,
        })])
        .map_err(|e| e.to_string())?;
    wait("the probe's inner Object in modelplane-system", 90, || {
        lab.kube.get(OBJECTS, PROBE, Some(MODELPLANE_NS)).is_some()
    })
}

/// The r740 MetalCluster's kubeconfig copy (the Object whose manifest is
/// an Object in modelplane-system).
fn kubeconfig_copy(lab: &Lab) -> Option<String> {
    lab.kube
        .list("objects.kubernetes.m.crossplane.io", Some(NS))
        .into_iter()
        .find(|o| {
            str_at(o, "/metadata/name").starts_with(R740.xr)
                && str_at(o, "/spec/forProvider/manifest/kind") == "Object"
        })
        .map(|o| str_at(&o, "/metadata/name").to_string())
}

/// One rule shown needed: without it, its holder (restarted) running the
/// rule's code path is refused something only this rule grants. Returns
/// the refusal.
fn prove(lab: &Lab, rule: &Rule) -> Result<identity::Denied, String> {
    let t = trigger(rule).ok_or_else(|| format!("no code path known for {}", rule.name()))?;
    let from = std::fs::metadata(lab.audit_log())
        .map(|m| m.len())
        .unwrap_or(0);
    apply_role(lab, rule, true)?;
    let proved = (|| {
        lab.restart(rule.process).map_err(|e| e.to_string())?;
        run_trigger(lab, t)?;
        let mut found = None;
        let waited = wait(&format!("a refusal for {}", rule.name()), 120, || {
            found = denied_since(lab, from)
                .into_iter()
                .find(|d| d.user == rule.holder.user() && d.allowed_by(rule.rule()));
            found.is_some()
        });
        match (waited, found) {
            (Ok(()), Some(d)) => Ok(d),
            (w, _) => Err(format!(
                "{} removed, yet {} was refused nothing it grants ({:?}): it may not be needed",
                rule.name(),
                rule.holder.user(),
                w.err()
            )),
        }
    })();
    apply_role(lab, rule, false)?;
    proved
}

/// Scenario `least-privilege`, while the r740 MetalCluster joins the fleet
/// (after `fleet-and-secrets`): no lab controller holds system:masters;
/// the README's `kubectl auth can-i` lines hold; nothing was refused so
/// far; then each rule of MetalPlane's RBAC is removed in turn and shown
/// needed, and the r740 MetalCluster is back where it was.
pub(crate) fn least_privilege(lab: &Lab) -> Outcome {
    no_controller_is_admin(lab)?;
    readme_can_i(lab)?;
    nothing_forbidden(lab)?;
    let rules = rules()?;
    for r in &rules {
        trigger(r).ok_or_else(|| format!("no code path known for {}", r.name()))?;
    }
    // The kinds only a fleet with worker pools composes
    // (KubeadmConfigTemplates, MachineDeployments): the rack's MetalCluster,
    // whose hosts are not registered, so it composes and claims nothing.
    lab.kube.apply(&[rack_xr()?]).map_err(|e| e.to_string())?;
    wait("the rack's KubeadmConfigTemplates composed", 120, || {
        !lab.kube
            .list(
                "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
                Some(NS),
            )
            .is_empty()
    })?;
    apply_probe(lab)?;
    let start = offsets(lab);
    let t = Instant::now();
    let mut outcome = Ok(());
    for r in rules.iter().filter(|r| !is_operation(r)) {
        match prove(lab, r) {
            Ok(d) => println!("  needed: {} (without it: {d})", r.name()),
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    if outcome.is_ok() {
        outcome = as_another_site(lab, RACK_B, operation_rules);
    }
    // Back to normal: both holders start with every rule in place.
    for p in ["crossplane", "provider-kubernetes"] {
        lab.restart(p).map_err(|e| e.to_string())?;
    }
    exempt_windows([(start, offsets(lab))]);
    outcome?;
    println!(
        "  {} rules, each needed ({:.0} s)",
        rules.len(),
        t.elapsed().as_secs_f64()
    );
    lab.kube
        .run(&[
            "delete",
            "metalcluster",
            "rack1",
            "-n",
            NS,
            "--wait=true",
            "--timeout=300s",
        ])
        .map_err(|e| e.to_string())?;
    // The Usage controller labels the host in-use again (the Usage
    // webhook only guards objects with that label).
    wait("r740's host labelled in-use again", 120, || {
        get(lab, "baremetalhost", R740.host)
            .is_some_and(|h| str_at(&h, "/metadata/labels/crossplane.io~1in-use") == "true")
    })?;
    wait("r740 settled again with its kubeconfig copy", 300, || {
        let x = get(lab, "metalcluster", R740.xr);
        kubeconfig_copy(lab).is_some()
            && x.as_ref().is_some_and(|x| {
                str_at(x, "/status/phase") == R740.settled()
                    && condition(x, "Synced").as_deref() == Some("True")
            })
    })?;
    Ok(())
}

fn is_operation(r: &Rule) -> bool {
    matches!(
        trigger(r),
        Some(Trigger::BootOrderJob | Trigger::ResetRecorded)
    )
}

/// The operation's rules, with two Dell hosts of another site (rack-b,
/// which the lab's BMO leaves alone meanwhile): b1 starts provisioning,
/// b2's virtual media fails.
fn operation_rules(lab: &Lab) -> Outcome {
    lab.kube.apply(&rack_b_hosts()).map_err(|e| e.to_string())?;
    for r in rules()?.iter().filter(|r| is_operation(r)) {
        let d = prove(lab, r)?;
        println!("  needed: {} (without it: {d})", r.name());
    }
    Ok(())
}

/// Every lab process that talks to the API server does so as an identity
/// outside system:masters (`kubectl auth whoami` with its credentials).
fn no_controller_is_admin(lab: &Lab) -> Outcome {
    let mut seen = Vec::new();
    for name in lab.procs.started() {
        let Some(pid) = lab.procs.running(&name) else {
            continue;
        };
        let Some(kubeconfig) = process_kubeconfig(pid) else {
            continue;
        };
        check(kubeconfig != lab.kube.kubeconfig, || {
            format!("{name} runs with the admin kubeconfig")
        })?;
        let who = procs::run(
            procs::in_netns(&lab.kube.kubectl)
                .args(["auth", "whoami", "-o", "json", "--kubeconfig"])
                .arg(&kubeconfig),
        )
        .map_err(|e| format!("{name}: {e}"))?;
        let who: Value = serde_json::from_str(&who).map_err(|e| e.to_string())?;
        let user = str_at(&who, "/status/userInfo/username").to_string();
        let groups: Vec<&str> = who
            .pointer("/status/userInfo/groups")
            .and_then(Value::as_array)
            .map(|g| g.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        check(!groups.contains(&"system:masters"), || {
            format!("{name} is {user} in system:masters")
        })?;
        seen.push(format!("{name}={user}"));
    }
    let want = [
        "kube-controller-manager",
        "crossplane",
        "crossplane-rbac-manager",
        "capi",
        "kcp",
        "cabpk",
        "capm3",
        "ipam",
        "bmo",
        "provider-helm",
        "provider-kubernetes",
        "workload",
    ];
    let missing: Vec<&&str> = want
        .iter()
        .filter(|w| !seen.iter().any(|s| s.starts_with(&format!("{w}="))))
        .collect();
    check(missing.is_empty(), || {
        format!(
            "not checked (not running, or no credentials found): {missing:?}; checked: {seen:?}"
        )
    })?;
    println!("  identities: {}", seen.join(", "));
    Ok(())
}

/// The kubeconfig a process uses: its --kubeconfig flag, else KUBECONFIG.
fn process_kubeconfig(pid: u32) -> Option<std::path::PathBuf> {
    let split = |b: Vec<u8>| -> Vec<String> {
        b.split(|c| *c == 0)
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect()
    };
    let args = split(std::fs::read(format!("/proc/{pid}/cmdline")).ok()?);
    if let Some(k) = args.iter().find_map(|a| a.strip_prefix("--kubeconfig=")) {
        return Some(k.into());
    }
    split(std::fs::read(format!("/proc/{pid}/environ")).ok()?)
        .iter()
        .find_map(|kv| kv.strip_prefix("KUBECONFIG=").map(Into::into))
}

/// The README's `kubectl auth can-i` lines, each answered yes.
fn readme_can_i(lab: &Lab) -> Outcome {
    let readme =
        std::fs::read_to_string(xtask::repo_root().join("README.md")).map_err(|e| e.to_string())?;
    let lines: Vec<&str> = readme
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("kubectl auth can-i "))
        .collect();
    check(lines.len() >= 5, || {
        format!("the README lists {} can-i checks", lines.len())
    })?;
    for l in &lines {
        let args: Vec<&str> = l.split_whitespace().skip(1).collect();
        let out = lab.kube.run(&args).map_err(|e| format!("{l}: {e}"))?;
        check(out.trim() == "yes", || format!("{l}: {}", out.trim()))?;
    }
    println!("  README: {} can-i checks answered yes", lines.len());
    Ok(())
}
