//! Who each lab process is. A real install runs every controller under its
//! own ServiceAccount, bound to the roles its project ships; so does the
//! lab: the RBAC comes from the upstream modules themselves (kustomize's
//! `config/default`, Crossplane's Helm chart), and each process gets a
//! kubeconfig holding a token of its ServiceAccount (the TokenRequest API,
//! as a kubelet would project one). Only the harness's kubectl is admin.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::kube::{parse_yaml, str_at};
use super::{Lab, LabError, procs};

/// A ServiceAccount, the identity of one controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub namespace: String,
    pub name: String,
}

impl Account {
    pub fn new(namespace: &str, name: &str) -> Account {
        Account {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The user name the API server sees (what `--as` takes).
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

/// The kinds a project's RBAC consists of; everything else in a rendered
/// install (Deployments, Services, certificates) is what the lab replaces
/// with processes and its own PKI.
const RBAC_KINDS: &[&str] = &[
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// The RBAC objects of a rendered install, as they are.
pub fn rbac_objects(docs: Vec<Value>) -> Vec<Value> {
    docs.into_iter()
        .filter(|d| RBAC_KINDS.contains(&str_at(d, "/kind")))
        .collect()
}

/// Namespaces the objects live in.
fn namespaces(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .map(|d| str_at(d, "/metadata/namespace").to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The one ServiceAccount of a controller's RBAC.
pub fn service_account(docs: &[Value], what: &str) -> Result<Account, LabError> {
    let sas: Vec<Account> = docs
        .iter()
        .filter(|d| str_at(d, "/kind") == "ServiceAccount")
        .map(|d| {
            Account::new(
                str_at(d, "/metadata/namespace"),
                str_at(d, "/metadata/name"),
            )
        })
        .collect();
    match sas.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(LabError::new(format!(
            "{what}: expected one ServiceAccount in its RBAC, found {sas:?}"
        ))),
    }
}

/// Creates the namespaces, then applies the objects.
pub fn apply_rbac(lab: &Lab, docs: &[Value]) -> Result<(), LabError> {
    let ns: Vec<Value> = namespaces(docs)
        .into_iter()
        .map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}))
        .collect();
    lab.kube.apply(&ns)?;
    lab.kube.apply(docs)
}

/// A kubebuilder project's RBAC exactly as its `config/default` renders
/// it (namePrefix, namespace, patches such as CAPI's aggregated manager
/// role), with kubectl's built-in kustomize.
pub fn kustomized(lab: &Lab, dir: &Path) -> Result<Vec<Value>, LabError> {
    let text = procs::run(
        std::process::Command::new(&lab.kube.kubectl)
            .arg("kustomize")
            .arg(dir),
    )?;
    Ok(rbac_objects(parse_yaml(&text).map_err(LabError::new)?))
}

/// A Helm chart's RBAC, rendered by Helm itself with the chart's defaults.
pub fn helm_rbac(
    lab: &Lab,
    helm: &Path,
    chart: &Path,
    release: &str,
    namespace: &str,
) -> Result<(), LabError> {
    let text = procs::run(
        std::process::Command::new(helm)
            .args(["template", release])
            .arg(chart)
            .args(["--namespace", namespace]),
    )?;
    apply_rbac(
        lab,
        &rbac_objects(parse_yaml(&text).map_err(LabError::new)?),
    )
}

/// A token for `sa` from the TokenRequest API. A year: a lab outlives no
/// token, and nothing in it rotates one.
pub fn token(lab: &Lab, sa: &Account) -> Result<String, LabError> {
    lab.kube.apply(&[json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": sa.name, "namespace": sa.namespace},
    })])?;
    let t = lab.kube.run(&[
        "create",
        "token",
        &sa.name,
        "-n",
        &sa.namespace,
        "--duration=8760h",
    ])?;
    Ok(t.trim().to_string())
}

/// A kubeconfig for `sa` (CA and token inline, so every client reads it),
/// written to the state folder; its path.
pub fn kubeconfig(lab: &Lab, sa: &Account) -> Result<PathBuf, LabError> {
    use base64::Engine;
    let token = token(lab, sa)?;
    let ca = base64::engine::general_purpose::STANDARD.encode(
        std::fs::read(lab.state.join("pki/ca.crt"))
            .map_err(|e| LabError::new(format!("lab CA: {e}")))?,
    );
    let text = super::pki::kubeconfig_yaml(
        &format!("https://127.0.0.1:{}", super::APISERVER_PORT),
        &format!("certificate-authority-data: {ca}"),
        &sa.user(),
        &[format!("token: {token}")],
    );
    let path = kubeconfig_path(lab, sa);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| LabError::new(format!("{}: {e}", dir.display())))?;
    }
    std::fs::write(&path, text).map_err(|e| LabError::new(format!("{}: {e}", path.display())))?;
    Ok(path)
}

/// Where kubeconfig() writes `sa`'s kubeconfig.
pub fn kubeconfig_path(lab: &Lab, sa: &Account) -> PathBuf {
    lab.state
        .join("identities")
        .join(format!("{}.{}.kubeconfig", sa.namespace, sa.name))
}

/// The API server's audit policy: every request of every identity but the
/// harness's own admin, at Metadata level (who, what, the authorizer's
/// decision), never bodies (Secrets stay out of it).
pub const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: [admin]
- level: Metadata
";

/// One request the authorizer refused.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Denied {
    pub user: String,
    pub verb: String,
    /// API group ("" for the core group) and resource (plural).
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} may not {} {}", self.user, self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        if !self.namespace.is_empty() {
            write!(f, " in {}", self.namespace)?;
        }
        Ok(())
    }
}

impl Denied {
    /// Whether an RBAC rule (apiGroups, resources, verbs) would have
    /// allowed this request.
    pub fn allowed_by(&self, rule: &Value) -> bool {
        let has = |key: &str, want: &str| {
            rule.get(key)
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().any(|x| x == want || x == "*"))
        };
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        has("apiGroups", &self.group) && has("resources", &resource) && has("verbs", &self.verb)
    }
}

/// Requests the RBAC authorizer refused, from audit log lines: the
/// `authorization.k8s.io/decision: forbid` annotation it writes on each,
/// and the 403s of checks inside a request (a server-side apply that
/// creates also needs `create`: its refusal says `User "..." cannot
/// create ...` while the patch itself was allowed).
pub fn denied(audit_lines: &str) -> BTreeSet<Denied> {
    audit_lines
        .lines()
        .filter(|l| l.contains("\"forbid\"") || l.contains("\"code\":403"))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| {
            let forbid = str_at(&e, "/annotations/authorization.k8s.io~1decision") == "forbid";
            let message = str_at(&e, "/responseStatus/message");
            let nested = e.pointer("/responseStatus/code").and_then(Value::as_u64) == Some(403)
                && message.contains("User \"");
            if !forbid && !nested {
                return None;
            }
            // The verb refused: the message's when it names one.
            let verb = message
                .split_once(" cannot ")
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .filter(|_| !forbid)
                .unwrap_or(str_at(&e, "/verb"));
            Some(Denied {
                user: str_at(&e, "/user/username").to_string(),
                verb: verb.to_string(),
                group: str_at(&e, "/objectRef/apiGroup").to_string(),
                resource: str_at(&e, "/objectRef/resource").to_string(),
                subresource: str_at(&e, "/objectRef/subresource").to_string(),
                namespace: str_at(&e, "/objectRef/namespace").to_string(),
            })
        })
        .collect()
}

/// Lines of a controller's log that report an RBAC refusal (the API
/// server's wording: `... is forbidden: User "..." cannot ...`).
pub fn forbidden_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("forbidden: User \""))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_rbac_kinds_are_kept() {
        let docs = parse_yaml(
            "kind: ServiceAccount\nmetadata: {name: m, namespace: ns}\n---\nkind: Deployment\nmetadata: {name: d}\n---\nkind: ClusterRole\nmetadata: {name: r}\n",
        )
        .expect("yaml");
        let kept = rbac_objects(docs);
        assert_eq!(kept.len(), 2);
        assert_eq!(
            service_account(&kept, "x").expect("one SA"),
            Account::new("ns", "m")
        );
        assert_eq!(namespaces(&kept), BTreeSet::from(["ns".to_string()]));
    }

    #[test]
    fn a_token_kubeconfig_parses() {
        let text = super::super::pki::kubeconfig_yaml(
            "https://127.0.0.1:6443",
            "certificate-authority-data: Q0E=",
            "system:serviceaccount:a:b",
            &["token: t0k".to_string()],
        );
        let v = &parse_yaml(&text).expect("yaml")[0];
        assert_eq!(str_at(v, "/users/0/user/token"), "t0k");
        assert_eq!(str_at(v, "/users/0/name"), "system:serviceaccount:a:b");
        assert_eq!(
            str_at(v, "/clusters/0/cluster/certificate-authority-data"),
            "Q0E="
        );
        assert_eq!(
            str_at(v, "/contexts/0/context/user"),
            "system:serviceaccount:a:b"
        );
    }

    #[test]
    fn two_service_accounts_are_refused() {
        let docs = parse_yaml(
            "kind: ServiceAccount\nmetadata: {name: a, namespace: n}\n---\nkind: ServiceAccount\nmetadata: {name: b, namespace: n}\n",
        )
        .expect("yaml");
        assert!(service_account(&docs, "x").is_err());
    }

    #[test]
    fn the_authorizers_refusals_are_read_from_the_audit_log() {
        let log = r#"{"kind":"Event","verb":"update","user":{"username":"system:serviceaccount:crossplane-system:crossplane"},"objectRef":{"resource":"baremetalhosts","namespace":"metal","name":"r730","apiGroup":"metal3.io"},"responseStatus":{"code":403},"annotations":{"authorization.k8s.io/decision":"forbid","authorization.k8s.io/reason":""}}
{"kind":"Event","verb":"get","user":{"username":"system:serviceaccount:capi-system:capi-manager"},"objectRef":{"resource":"machines","apiGroup":"cluster.x-k8s.io"},"responseStatus":{"code":200},"annotations":{"authorization.k8s.io/decision":"allow"}}
"#;
        let d: Vec<String> = denied(log).iter().map(ToString::to_string).collect();
        assert_eq!(
            d,
            [
                "system:serviceaccount:crossplane-system:crossplane may not update baremetalhosts.metal3.io in metal"
            ]
        );
        let refused = denied(log).into_iter().next().expect("one");
        let rule = |verbs: &[&str]| json!({"apiGroups": ["metal3.io"], "resources": ["baremetalhosts"], "verbs": verbs});
        assert!(refused.allowed_by(&rule(&["get", "update"])));
        assert!(refused.allowed_by(&rule(&["*"])));
        assert!(!refused.allowed_by(&rule(&["get", "patch"])));
        // An apply that would create, allowed as a patch, refused as a create.
        let nested = r#"{"verb":"patch","user":{"username":"u"},"objectRef":{"resource":"jobs","namespace":"m","apiGroup":"batch"},"responseStatus":{"code":403,"message":"jobs.batch \"j\" is forbidden: User \"u\" cannot create resource \"jobs\" in API group \"batch\" in the namespace \"m\""},"annotations":{"authorization.k8s.io/decision":"allow"}}"#;
        let d: Vec<String> = denied(nested).iter().map(ToString::to_string).collect();
        assert_eq!(d, ["u may not create jobs.batch in m"]);
        // A namespace being deleted is no RBAC refusal.
        let terminating = r#"{"verb":"create","user":{"username":"u"},"objectRef":{"resource":"events"},"responseStatus":{"code":403,"message":"events is forbidden: unable to create new content in namespace x because it is being terminated"},"annotations":{"authorization.k8s.io/decision":"allow"}}"#;
        assert!(denied(terminating).is_empty());
    }

    #[test]
    fn rbac_refusals_are_found_in_logs_and_field_errors_are_not() {
        let log = "E1 reconcile: baremetalhosts.metal3.io \"r730\" is forbidden: User \"system:serviceaccount:crossplane-system:crossplane\" cannot update resource\nE2 spec.version: Forbidden: cannot be downgraded\nE3 namespace x is forbidden: unable to create new content in namespace x because it is being terminated\n";
        assert_eq!(forbidden_lines(log).len(), 1);
    }
}
