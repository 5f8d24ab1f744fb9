//! What a package runtime does, done by the lab: under Crossplane's
//! External runtime nobody runs a Deployment, so for each active function
//! and provider revision the lab writes the TLS Secrets, reports
//! RuntimeHealthy and publishes our function's endpoint, and gives each
//! provider the ServiceAccount (and an owned Deployment naming it) that the
//! Deployment runtime would, so Crossplane's RBAC manager binds the
//! provider's role to it.

use std::time::Duration;

use serde_json::{Value, json};

use super::install::FUNCTION_NAME;
use super::kube::{self, str_at};
use super::pki::Pki;
use super::{FUNCTION_PORT, Lab, LabError, identity, procs, progress};

/// With the External runtime Crossplane creates no Deployment, Service or
/// TLS Secrets: the package runtime is whoever runs the package. For each
/// active function and provider revision the lab does what Crossplane's
/// runtime controller would: writes the revision's TLS server and client
/// Secrets (the lab CA's serving certificate; the establisher reads
/// `tls.crt` as the CA bundle), records their names in the revision's
/// status, and for our function publishes its endpoint.
pub fn publish(lab: &Lab, pki: &Pki) -> Result<(), LabError> {
    let server = pki.server_dir();
    let read =
        |f: &str| std::fs::read(server.join(f)).map_err(|e| LabError::new(format!("{f}: {e}")));
    let data = json!({
        "tls.crt": b64(&read("tls.crt")?),
        "tls.key": b64(&read("tls.key")?),
        "ca.crt": b64(pki.ca_pem()?.as_bytes()),
    });
    // Until every package is healthy: a revision that appears later (a
    // rebuilt package has a new digest) needs the same as the first.
    procs::wait_for(
        "the function and providers healthy",
        Duration::from_secs(300),
        || {
            for kind in ["functionrevisions", "providerrevisions"] {
                for r in lab.kube.list(kind, None) {
                    let name = str_at(&r, "/metadata/name");
                    if str_at(&r, "/spec/desiredState") != "Active"
                        || (!str_at(&r, "/status/tlsServerSecretName").is_empty()
                            && kube::condition(&r, "RuntimeHealthy").as_deref() == Some("True"))
                    {
                        continue;
                    }
                    if publish_revision(lab, kind, &r, &data).is_ok() {
                        progress(&format!("{kind}/{name}: runtime published"));
                    }
                }
            }
            let healthy = |kind: &str| {
                let items = lab.kube.list(kind, None);
                !items.is_empty()
                    && items
                        .iter()
                        .all(|p| kube::condition(p, "Healthy").as_deref() == Some("True"))
            };
            healthy("functions.pkg.crossplane.io") && healthy("providers.pkg.crossplane.io")
        },
    )
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The ServiceAccount Crossplane's Deployment runtime gives a provider
/// revision: the `serviceAccountTemplate` name of its DeploymentRuntimeConfig
/// (an ImageConfig's `runtime.configRef` for its image, else the
/// revision's own reference), else the revision's name.
pub fn provider_account(lab: &Lab, rev: &Value) -> identity::Account {
    let images = [
        str_at(rev, "/status/resolvedImage"),
        str_at(rev, "/spec/image"),
    ];
    let from_image = lab
        .kube
        .list("imageconfigs.pkg.crossplane.io", None)
        .into_iter()
        .filter_map(|ic| {
            let config = str_at(&ic, "/spec/runtime/configRef/name").to_string();
            let prefixes: Vec<String> = ic
                .pointer("/spec/matchImages")
                .and_then(Value::as_array)
                .map(|m| m.iter().map(|p| str_at(p, "/prefix").to_string()).collect())
                .unwrap_or_default();
            let longest = prefixes
                .iter()
                .filter(|p| {
                    images
                        .iter()
                        .any(|i| !i.is_empty() && i.starts_with(p.as_str()))
                })
                .map(String::len)
                .max()?;
            (!config.is_empty()).then_some((longest, config))
        })
        .max()
        .map(|(_, c)| c);
    let config = from_image.unwrap_or_else(|| {
        let r = str_at(rev, "/spec/runtimeConfigRef/name");
        if r.is_empty() { "default" } else { r }.to_string()
    });
    let sa = lab
        .kube
        .get("deploymentruntimeconfigs.pkg.crossplane.io", &config, None)
        .map(|c| str_at(&c, "/spec/serviceAccountTemplate/metadata/name").to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| str_at(rev, "/metadata/name").to_string());
    identity::Account::new("crossplane-system", &sa)
}

/// What the Deployment runtime creates for a provider revision and the
/// RBAC manager binds the revision's system ClusterRole to: the
/// ServiceAccount and a Deployment (no replicas: the lab runs the process)
/// naming it, both controlled by the revision.
fn provider_identity(lab: &Lab, rev: &Value) -> Result<(), LabError> {
    let name = str_at(rev, "/metadata/name");
    let owner = json!([{
        "apiVersion": "pkg.crossplane.io/v1",
        "kind": "ProviderRevision",
        "name": name,
        "uid": str_at(rev, "/metadata/uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    }]);
    let sa = provider_account(lab, rev);
    let labels = json!({"pkg.crossplane.io/revision": name});
    lab.kube.apply(&[
        json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": sa.name, "namespace": sa.namespace, "ownerReferences": owner},
        }),
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": sa.namespace, "ownerReferences": owner},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": sa.name,
                        "containers": [{"name": "package-runtime", "image": str_at(rev, "/spec/image")}],
                    },
                },
            },
        }),
    ])
}

/// The active revision of a provider package, once there is one.
fn active_provider_revision(lab: &Lab, package: &str) -> Option<Value> {
    lab.kube
        .list("providerrevisions", None)
        .into_iter()
        .find(|r| {
            str_at(r, "/metadata/labels/pkg.crossplane.io~1package") == package
                && str_at(r, "/spec/desiredState") == "Active"
        })
}

/// A provider's kubeconfig: its runtime ServiceAccount's, once the RBAC
/// manager has bound the revision's system ClusterRole to it.
pub fn provider_kubeconfig(lab: &Lab, package: &str) -> Result<std::path::PathBuf, LabError> {
    let rev = active_provider_revision(lab, package)
        .ok_or_else(|| LabError::new(format!("{package} has no active revision")))?;
    let sa = provider_account(lab, &rev);
    let binding = format!(
        "crossplane:provider:{}:system",
        str_at(&rev, "/metadata/name")
    );
    procs::wait_for(
        &format!("the RBAC manager binding {binding} to {}", sa.user()),
        Duration::from_secs(120),
        || {
            lab.kube
                .get("clusterrolebinding", &binding, None)
                .and_then(|b| b.get("subjects").and_then(Value::as_array).cloned())
                .is_some_and(|s| {
                    s.iter().any(|s| {
                        str_at(s, "/name") == sa.name && str_at(s, "/namespace") == sa.namespace
                    })
                })
        },
    )?;
    identity::kubeconfig(lab, &sa)
}

fn publish_revision(lab: &Lab, kind: &str, rev: &Value, data: &Value) -> Result<(), LabError> {
    let name = str_at(rev, "/metadata/name");
    let package = str_at(rev, "/metadata/labels/pkg.crossplane.io~1package");
    if package.is_empty() {
        return Err(LabError::new(format!("{name} has no package label yet")));
    }
    if kind == "providerrevisions" {
        provider_identity(lab, rev)?;
    }
    // Under the Deployment runtime the package manager names these
    // `<package>-tls-server` and `-tls-client` and the runtime controller
    // records them in the revision's status; under External, the runtime
    // (here, the lab) does both.
    let mut status = serde_json::Map::new();
    for (suffix, key) in [
        ("tls-server", "tlsServerSecretName"),
        ("tls-client", "tlsClientSecretName"),
    ] {
        let secret = format!("{package}-{suffix}");
        lab.kube.apply(&[json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret, "namespace": "crossplane-system"},
            "type": "kubernetes.io/tls",
            "data": data,
        })])?;
        status.insert(key.into(), json!(secret));
    }
    if kind == "functionrevisions" && package == FUNCTION_NAME {
        status.insert(
            "endpoint".into(),
            json!(format!("127.0.0.1:{FUNCTION_PORT}")),
        );
    }
    // The runtime reports the runtime's health; the package is Healthy
    // only when both the revision and its runtime are.
    let mut conditions: Vec<Value> = rev
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| str_at(c, "/type") != "RuntimeHealthy");
    conditions.push(json!({
        "type": "RuntimeHealthy",
        "status": "True",
        "reason": "HealthyPackageRevision",
        "lastTransitionTime": now_rfc3339(),
    }));
    status.insert("conditions".into(), Value::Array(conditions));
    let patch = json!({ "status": status }).to_string();
    lab.kube
        .run(&[
            "patch",
            kind,
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ])
        .map(|_| ())
}

/// Now as RFC 3339 (UTC), for condition timestamps.
fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
