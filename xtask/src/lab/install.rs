//! Installs the management cluster's software the way a user's cluster
//! gets it: upstream CRDs and webhooks from each controller's own module,
//! Crossplane core, and MetalPlane's packages through Crossplane's package
//! manager, pulled from a registry inside the lab.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::kube::{self, load_yaml};
use super::procs::{self, Spec};
use super::{
    CROSSPLANE_HEALTH_PORT, CROSSPLANE_WEBHOOK_PORT, FUNCTION_PORT, Lab, LabError, REGISTRY_PORT,
    build, identity, manifests, pki::Pki, progress, runtime,
};

/// The Function's name once Crossplane's package manager has installed it
/// as a dependency of the Configuration: `xpkg.ToDNSLabel` of the
/// repository path of `ghcr.io/kube-farm/function-metalplane`.
pub const FUNCTION_NAME: &str = "kube-farm-function-metalplane";
// (checked against `crate::dependency_name` of the dependsOn entry by tests/package.rs)
pub const CONFIGURATION_NAME: &str = "configuration-metalplane";

/// A Cluster API family controller as the lab runs it.
pub struct Controller {
    pub name: &'static str,
    pub binary: &'static str,
    pub module: &'static str,
    /// Folder of the module holding config/ (relative).
    pub subdir: &'static str,
    pub crds: &'static str,
    pub webhooks: &'static str,
    /// Provider CRDs carry the contract label Cluster API reads.
    pub contract: bool,
    pub port: u16,
}

pub const CONTROLLERS: &[Controller] = &[
    Controller {
        name: "capi",
        binary: "capi",
        module: "sigs.k8s.io/cluster-api",
        subdir: "",
        crds: "config/crd/bases",
        webhooks: "config/webhook/manifests.yaml",
        contract: false,
        port: 9501,
    },
    Controller {
        name: "kcp",
        binary: "kcp",
        module: "sigs.k8s.io/cluster-api",
        subdir: "controlplane/kubeadm",
        crds: "config/crd/bases",
        webhooks: "config/webhook/manifests.yaml",
        contract: true,
        port: 9502,
    },
    Controller {
        name: "cabpk",
        binary: "cabpk",
        module: "sigs.k8s.io/cluster-api",
        subdir: "bootstrap/kubeadm",
        crds: "config/crd/bases",
        webhooks: "config/webhook/manifests.yaml",
        contract: true,
        port: 9503,
    },
    Controller {
        name: "capm3",
        binary: "capm3",
        module: "github.com/metal3-io/cluster-api-provider-metal3",
        subdir: "",
        crds: "config/crd/bases",
        webhooks: "config/webhook/manifests.yaml",
        contract: true,
        port: 9504,
    },
    Controller {
        name: "ipam",
        binary: "ipam",
        module: "github.com/metal3-io/ip-address-manager",
        subdir: "",
        crds: "config/crd/bases",
        webhooks: "config/webhook/manifests.yaml",
        contract: false,
        port: 9505,
    },
    Controller {
        name: "bmo",
        binary: "bmo",
        module: "github.com/metal3-io/baremetal-operator",
        subdir: "",
        crds: "config/base/crds/bases",
        webhooks: "config/base/webhook/manifests.yaml",
        contract: false,
        port: 9506,
    },
];

impl Controller {
    /// BMO's flags. Demo mode: no Ironic, and every host's state is its
    /// own (power follows spec.online, each step completes at once). Not
    /// `-test-mode`: its fixture keeps ONE power flag and ONE image for all
    /// hosts, so a host that should be on and one that should be off flip
    /// that flag back and forth, each flip a rate-limited requeue whose
    /// delay doubles (8 in a row logged on one host), most likely what held
    /// one CI teardown past its wait. Every namespace, as a user's BMO
    /// watches, unless `scope` names one (a site running one BMO per
    /// namespace, as BMO's namespaced deployment does).
    fn bmo_args(&self, scope: Option<&str>, provisioner: Provisioner) -> Vec<String> {
        let mut args = match provisioner {
            Provisioner::Demo => vec!["-demo-mode".to_string()],
            // Ironic's address and the deploy ramdisk come in its env.
            Provisioner::Ironic => vec![],
        };
        if let Some(ns) = scope {
            args.push(format!("-namespace={ns}"));
        }
        args.extend([
            format!("-webhook-port={}", self.port),
            format!("-health-addr=127.0.0.1:{}", self.health_port()),
            format!("-metrics-addr=127.0.0.1:{}", self.port + 200),
        ]);
        args
    }

    /// Health (readyz) and diagnostics ports follow the webhook port.
    pub fn health_port(&self) -> u16 {
        self.port + 100
    }

    pub fn args(&self, cert_dir: &Path) -> Vec<String> {
        if self.name == "bmo" {
            return self.bmo_args(None, Provisioner::Demo);
        }
        vec![
            format!("--webhook-port={}", self.port),
            format!("--webhook-cert-dir={}", cert_dir.display()),
            format!("--health-addr=127.0.0.1:{}", self.health_port()),
            format!("--diagnostics-address=127.0.0.1:{}", self.port + 200),
            "--insecure-diagnostics".into(),
            "--leader-elect=false".into(),
        ]
    }
}

fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, LabError> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| LabError::new(format!("{}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    v.sort();
    Ok(v)
}

fn wait_crds(lab: &Lab) -> Result<(), LabError> {
    lab.kube
        .run(&[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=120s",
        ])
        .map(|_| ())
}

fn ns(lab: &Lab, name: &str) -> Result<(), LabError> {
    lab.kube
        .apply(&[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})])
}

/// Crossplane core: `core init` installs its CRDs, then `core start` with
/// operations, webhooks (Usages are enforced only by its webhook) and the
/// External package runtime (the lab runs the function itself).
pub fn crossplane(lab: &Lab, pki: &Pki) -> Result<(), LabError> {
    let src = build::module_src("github.com/crossplane/crossplane/v2")?;
    ns(lab, "crossplane-system")?;
    // The chart's ServiceAccounts, ClusterRoles and bindings, rendered by
    // Helm with the chart's defaults (the RBAC manager deployed).
    identity::helm_rbac(
        lab,
        &build::provider_bin("helm")?,
        &src.join("cluster/charts/crossplane"),
        "crossplane",
        "crossplane-system",
    )?;
    // `crossplane` is an aggregated ClusterRole: wait for the aggregator
    // (kube-controller-manager) to fill it before Crossplane starts.
    procs::wait_for(
        "Crossplane's aggregated ClusterRole",
        Duration::from_secs(60),
        || {
            lab.kube
                .get("clusterrole", "crossplane", None)
                .and_then(|r| {
                    r.get("rules")
                        .and_then(Value::as_array)
                        .map(|r| !r.is_empty())
                })
                .unwrap_or(false)
        },
    )?;
    let core = identity::kubeconfig(lab, &core_account())?;
    if lab
        .kube
        .get("crd", "compositions.apiextensions.crossplane.io", None)
        .is_none()
    {
        progress("crossplane core init");
        let mut ok = false;
        let mut last = String::new();
        // The first init on a brand-new API server can race CRD
        // establishment: one retry.
        for _ in 0..3 {
            let out = procs::in_netns(&lab.bin.join("crossplane"))
                // --activation=*: what Crossplane's Helm chart installs by
                // default (provider.defaultActivations), so every managed
                // resource of an installed provider is active.
                .args(["core", "init", "--enable-webhooks=false", "--activation=*"])
                // kong spells the flag --cr-ds-path; the variable is stable.
                .env("CRDS_PATH", src.join("cluster/crds"))
                .env("KUBECONFIG", &core)
                .env("POD_NAMESPACE", "crossplane-system")
                // init insists on generating its CA and client secrets; the
                // lab's own certificates are what core start uses.
                .env("TLS_CA_SECRET_NAME", "crossplane-root-ca")
                .env("TLS_CLIENT_SECRET_NAME", "crossplane-tls-client")
                .output()
                .map_err(|e| LabError::new(format!("crossplane core init: {e}")))?;
            if out.status.success() {
                ok = true;
                break;
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            std::thread::sleep(Duration::from_secs(2));
        }
        if !ok {
            return Err(LabError::new(format!(
                "crossplane core init failed: {last}"
            )));
        }
    }
    let ca = pki.ca_pem()?;
    let hooks: Vec<Value> = load_yaml(&src.join("cluster/webhookconfigurations/usage.yaml"))?
        .into_iter()
        .map(|d| manifests::webhook_config_by_url(d, "lab", CROSSPLANE_WEBHOOK_PORT, &ca))
        .collect();
    lab.kube.apply(&hooks)?;
    start_core(lab, pki)?;
    // The RBAC manager, with the chart's flags: it writes the ClusterRoles
    // of every XRD and provider, aggregates them into Crossplane's and
    // binds each provider's to its ServiceAccount.
    let rbac = identity::kubeconfig(
        lab,
        &identity::Account::new("crossplane-system", "rbac-manager"),
    )?;
    let spec = lab.spec_as(
        "crossplane-rbac-manager",
        "crossplane",
        &[
            "rbac".into(),
            "start".into(),
            "--provider-clusterrole=crossplane:allowed-provider-permissions".into(),
        ],
        &rbac,
    );
    lab.start_and_wait(&spec, Duration::from_secs(60), || {
        procs::port_open(RBAC_MANAGER_METRICS_PORT)
    })
}

/// Crossplane core's ServiceAccount (its chart's).
fn core_account() -> identity::Account {
    identity::Account::new("crossplane-system", "crossplane")
}

/// `crossplane core start` as its ServiceAccount (crossplane() wrote its
/// kubeconfig).
fn start_core(lab: &Lab, pki: &Pki) -> Result<(), LabError> {
    let mut spec = lab.spec_as(
        "crossplane",
        "crossplane",
        &[
            "core".into(),
            "start".into(),
            "--package-runtime=External".into(),
            "--enable-operations".into(),
            "--enable-webhooks".into(),
            format!("--webhook-port={CROSSPLANE_WEBHOOK_PORT}"),
            // 8080 stays free: the RBAC manager serves its metrics there (no flag).
            "--metrics-port=8082".into(),
            format!("--health-probe-port={CROSSPLANE_HEALTH_PORT}"),
            format!("--tls-server-certs-dir={}", pki.server_dir().display()),
            format!(
                "--tls-client-certs-dir={}",
                pki.crossplane_client_dir().display()
            ),
            format!("--xpkg-cache-dir={}", lab.path("xpkg-cache")),
            // With realtime compositions only the Usage controller polls at
            // this interval (XRs set their own TTL). Each poll PUTs the Usage
            // and its used object even when nothing changed (v2.3.0's
            // `owners[0]` and `OwnedBy` checks never hold for a composed
            // Usage): at 1m that was 16 of the 25 steady-state requests a
            // minute per MetalCluster. Deletion waits on its own 30 s poll.
            "--poll-interval=10m".into(),
        ],
        &identity::kubeconfig_path(lab, &core_account()),
    );
    spec.env
        .push(("POD_NAMESPACE".into(), "crossplane-system".into()));
    // The package cache does not create its folder: a missing one fails
    // every pull with "read/write on closed pipe" (the cache's reader end
    // of the tee closes at once).
    std::fs::create_dir_all(lab.state.join("xpkg-cache"))
        .map_err(|e| LabError::new(format!("xpkg cache dir: {e}")))?;
    lab.start_and_wait(&spec, Duration::from_secs(120), || {
        procs::http_ok(CROSSPLANE_HEALTH_PORT, "/readyz")
    })
}

/// Restarts a controller as a crashed pod would be: `crossplane` or
/// `provider-kubernetes` (what the least-privilege scenario restarts so
/// that each starts its informers and reconciles anew).
pub fn restart(lab: &Lab, pki: &Pki, name: &str) -> Result<(), LabError> {
    lab.procs.stop(name);
    match name {
        "crossplane" => start_core(lab, pki),
        "provider-kubernetes" => start_provider_kubernetes(lab, pki).map(|_| ()),
        other => Err(LabError::new(format!("the lab cannot restart {other}"))),
    }
}

/// controller-runtime's default metrics port, where the RBAC manager
/// serves (it has no flag for it).
const RBAC_MANAGER_METRICS_PORT: u16 = 8080;

/// Cluster API core, KCP, CABPK, CAPM3, IPAM and BMO: CRDs, webhooks by
/// URL, then the processes.
pub fn cluster_api(lab: &Lab, pki: &Pki) -> Result<(), LabError> {
    let ca = pki.ca_pem()?;
    let mut crds = Vec::new();
    let mut hooks = Vec::new();
    for c in CONTROLLERS {
        let root = build::module_src(c.module)?.join(c.subdir);
        for f in yaml_files(&root.join(c.crds))? {
            for d in load_yaml(&f)? {
                crds.push(manifests::crd_for_lab(d, c.contract, c.port, &ca));
            }
        }
        for d in load_yaml(&root.join(c.webhooks))? {
            if manifests::is_webhook_config(&d) {
                hooks.push(manifests::webhook_config_by_url(d, c.name, c.port, &ca));
            }
        }
    }
    progress(&format!(
        "installing {} Cluster API and Metal3 CRDs",
        crds.len()
    ));
    lab.kube.apply(&crds)?;
    wait_crds(lab)?;
    lab.kube.apply(&hooks)?;
    let cert_dir = pki.server_dir();
    let bmo_certs = bmo_tmp(lab).join("k8s-webhook-server/serving-certs");
    std::fs::create_dir_all(&bmo_certs).map_err(|e| LabError::new(format!("bmo certs: {e}")))?;
    for f in ["tls.crt", "tls.key"] {
        std::fs::copy(cert_dir.join(f), bmo_certs.join(f))
            .map_err(|e| LabError::new(format!("bmo certs: {e}")))?;
    }
    for c in CONTROLLERS {
        let rbac = controller_rbac(lab, c)?;
        identity::apply_rbac(lab, &rbac)?;
        identity::kubeconfig(lab, &identity::service_account(&rbac, c.name)?)?;
        lab.procs
            .start(&controller_spec(lab, c, &c.args(&cert_dir))?)?;
    }
    for c in CONTROLLERS {
        wait_controller(lab, c)?;
    }
    workload(lab)
}

/// A controller's RBAC exactly as its project's `config/default` renders
/// it (identity::kustomized).
fn controller_rbac(lab: &Lab, c: &Controller) -> Result<Vec<Value>, LabError> {
    let root = build::module_src(c.module)?.join(c.subdir);
    identity::kustomized(lab, &root.join("config/default"))
}

/// BMO's webhook server has no cert-dir flag: it reads
/// $TMPDIR/k8s-webhook-server/serving-certs, so BMO gets a TMPDIR of its own.
fn bmo_tmp(lab: &Lab) -> PathBuf {
    lab.state.join("bmo-tmp")
}

/// A controller as its own ServiceAccount (the one its `config/default`
/// binds; identity::kustomized applied it and wrote its kubeconfig).
fn controller_spec(lab: &Lab, c: &Controller, args: &[String]) -> Result<Spec, LabError> {
    let sa = identity::service_account(&controller_rbac(lab, c)?, c.name)?;
    let kubeconfig = identity::kubeconfig_path(lab, &sa);
    let mut spec = lab.spec_as(c.name, c.binary, args, &kubeconfig);
    if c.name == "bmo" {
        spec.env
            .push(("TMPDIR".into(), bmo_tmp(lab).display().to_string()));
    }
    Ok(spec)
}

fn wait_controller(lab: &Lab, c: &Controller) -> Result<(), LabError> {
    procs::wait_for(c.name, Duration::from_secs(120), || {
        procs::http_ok(c.health_port(), "/readyz")
    })
    .map_err(|e| {
        LabError::new(format!(
            "{e}\nlast lines of {}:\n{}",
            lab.procs.log_file(c.name).display(),
            lab.procs.tail(c.name, 15)
        ))
    })?;
    progress(&format!("{} is up", c.name));
    Ok(())
}

/// What BMO provisions with: its demo provisioner (every step completes at
/// once) or the lab's Ironic (ironic.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provisioner {
    Demo,
    Ironic,
}

/// Restarts BMO watching only namespace `scope`, or every namespace with
/// None, and waits until it is ready (its webhooks serve again).
pub fn restart_bmo(lab: &Lab, scope: Option<&str>) -> Result<(), LabError> {
    restart_bmo_with(lab, scope, Provisioner::Demo)
}

/// `restart_bmo` with `provisioner` (Ironic must be running for Ironic).
pub fn restart_bmo_with(
    lab: &Lab,
    scope: Option<&str>,
    provisioner: Provisioner,
) -> Result<(), LabError> {
    let c = CONTROLLERS
        .iter()
        .find(|c| c.name == "bmo")
        .ok_or_else(|| LabError::new("no bmo controller"))?;
    lab.procs.stop(c.name);
    let mut spec = controller_spec(lab, c, &c.bmo_args(scope, provisioner))?;
    if provisioner == Provisioner::Ironic {
        spec.env.extend(super::ironic::bmo_env());
    }
    lab.procs.start(&spec)?;
    wait_controller(lab, c)
}

/// Readiness port of the workload stand-in (xtask/lab/workload).
pub const WORKLOAD_HEALTH_PORT: u16 = 9610;

/// The stand-in for the servers' OS: boots a node when its host is
/// provisioned and serves the workload API at the cluster's endpoint.
pub fn workload(lab: &Lab) -> Result<(), LabError> {
    let rbac = kube::load_yaml(&build::module_dir().join("workload/rbac.yaml"))?;
    identity::apply_rbac(lab, &rbac)?;
    let kubeconfig = identity::kubeconfig(lab, &identity::service_account(&rbac, "workload")?)?;
    let spec = lab.spec_as(
        "workload",
        "workload",
        &[
            format!("--health-addr=127.0.0.1:{WORKLOAD_HEALTH_PORT}"),
            format!("--addons-kubeconfig={}", lab.addons_kubeconfig().display()),
        ],
        &kubeconfig,
    );
    lab.start_and_wait(&spec, Duration::from_secs(60), || {
        procs::http_ok(WORKLOAD_HEALTH_PORT, "/readyz")
    })
}

/// What `cargo xtask package` built, plus provider packages made from the
/// providers' own modules (package/crossplane.yaml and CRDs, exactly the
/// package layer of their published xpkg; the lab runs no provider image).
pub struct Packages {
    /// (repository path under the registry, tag, file)
    pub images: Vec<(String, String, PathBuf)>,
}

/// Where the lab builds the packages' binaries: its own cargo target
/// folder, because the lab scenarios run under `cargo test`, which holds the
/// lock of the checkout's; outside the clone, so CI's next clone starts warm.
pub fn cargo_target() -> PathBuf {
    build::cache_root().join("cargo-target")
}

/// The function binary inside the runtime image the lab installs.
pub fn function_bin() -> PathBuf {
    cargo_target()
        .join(crate::TARGET)
        .join("release/function-metalplane")
}

pub const PROVIDERS: &[(&str, &str)] = &[
    ("github.com/crossplane-contrib/provider-helm", "v1.3.0"),
    // The version the lab runs (see xtask/lab/provider-kubernetes).
    (
        "github.com/crossplane-contrib/provider-kubernetes",
        "v1.3.0",
    ),
];

/// Builds the MetalPlane packages and the provider packages.
pub fn ensure_packages() -> Result<Packages, LabError> {
    progress("building MetalPlane's packages (cargo xtask package)");
    let out =
        crate::package_in(&cargo_target()).map_err(|e| LabError::new(format!("package: {e}")))?;
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let mut images = vec![
        (
            "kube-farm/function-metalplane".to_string(),
            version.clone(),
            out.xpkg,
        ),
        (
            "kube-farm/configuration-metalplane".to_string(),
            version,
            out.configuration,
        ),
    ];
    let dir = crate::out_dir().join("lab");
    std::fs::create_dir_all(&dir).map_err(|e| LabError::new(format!("{}: {e}", dir.display())))?;
    for (module, version) in PROVIDERS {
        let src = build::module_at(module, version)?;
        let mut yaml = std::fs::read_to_string(src.join("package/crossplane.yaml"))
            .map_err(|e| LabError::new(format!("{module} package: {e}")))?;
        for f in yaml_files(&src.join("package/crds"))? {
            yaml.push_str("\n---\n");
            yaml.push_str(
                &std::fs::read_to_string(&f)
                    .map_err(|e| LabError::new(format!("{}: {e}", f.display())))?,
            );
        }
        let name = module.rsplit('/').next().unwrap_or(module);
        let layer = crate::layer(
            &[("package.yaml", 0o644, yaml.into_bytes())],
            "crossplane package.yaml",
        )
        .map_err(|e| LabError::new(e.to_string()))?;
        let path = dir.join(format!("{name}.xpkg"));
        crate::write_image(&path, &[layer], Some(0), &format!("{name}:{version}"))
            .map_err(|e| LabError::new(e.to_string()))?;
        images.push((
            format!("crossplane-contrib/{name}"),
            version.to_string(),
            path,
        ));
    }
    Ok(Packages { images })
}

/// Our function, served over mTLS with the lab's certificates, as the
/// External package runtime expects someone to.
pub fn function(lab: &Lab, pki: &Pki) -> Result<(), LabError> {
    let spec = Spec {
        name: "function",
        program: function_bin(),
        args: vec![
            format!("--address=127.0.0.1:{FUNCTION_PORT}"),
            format!("--tls-certs-dir={}", pki.server_dir().display()),
            "--metrics-address=127.0.0.1:8090".into(),
        ],
        env: vec![],
    };
    lab.start_and_wait(&spec, Duration::from_secs(30), || {
        procs::port_open(FUNCTION_PORT)
    })
}

/// MetalPlane's RBAC, every file a user applies (README, install).
pub const RBAC_FILES: &[&str] = &[
    "apis/metalclusters/rbac.yaml",
    "apis/operations/rbac.yaml",
    "apis/providers/rbac.yaml",
];

/// The registry address inside the lab.
pub fn registry() -> String {
    format!("localhost:{REGISTRY_PORT}")
}

/// Pushes the packages to the lab's registry, points the package manager
/// at it with ImageConfigs (the package names stay the published ones),
/// installs the Configuration and publishes the function's endpoint.
pub fn packages(lab: &Lab, packages: &Packages) -> Result<(), LabError> {
    let spec = lab.spec(
        "registry",
        "crane",
        &[
            "registry".into(),
            "serve".into(),
            format!("--address=127.0.0.1:{REGISTRY_PORT}"),
            format!("--disk={}", lab.path("registry")),
        ],
    );
    std::fs::create_dir_all(lab.state.join("registry"))
        .map_err(|e| LabError::new(format!("registry dir: {e}")))?;
    lab.start_and_wait(&spec, Duration::from_secs(30), || {
        procs::port_open(REGISTRY_PORT)
    })?;
    for (repo, tag, file) in &packages.images {
        procs::run(
            procs::in_netns(&lab.bin.join("crane"))
                .arg("push")
                .arg(file)
                .arg(format!("{}/{repo}:{tag}", registry())),
        )?;
    }
    progress("packages pushed to the lab registry");
    let rewrite = |name: &str, from: &str, to: &str| {
        json!({
            "apiVersion": "pkg.crossplane.io/v1beta1",
            "kind": "ImageConfig",
            "metadata": {"name": name},
            "spec": {
                "matchImages": [{"type": "Prefix", "prefix": from}],
                "rewriteImage": {"prefix": to},
            }
        })
    };
    lab.kube.apply(&[
        rewrite(
            "lab-kube-farm",
            "ghcr.io/kube-farm",
            &format!("{}/kube-farm", registry()),
        ),
        rewrite(
            "lab-crossplane-contrib",
            "xpkg.crossplane.io/crossplane-contrib",
            &format!("{}/crossplane-contrib", registry()),
        ),
    ])?;
    let root = crate::repo_root();
    for f in RBAC_FILES {
        lab.kube.apply_file(&root.join(f))?;
    }
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    lab.kube.apply(&[json!({
        "apiVersion": "pkg.crossplane.io/v1",
        "kind": "Configuration",
        "metadata": {"name": CONFIGURATION_NAME},
        "spec": {"package": format!("ghcr.io/kube-farm/configuration-metalplane:{version}")},
    })])?;
    progress("Configuration applied; waiting for the package manager to install the function");
    runtime::publish(lab, &lab.pki()?)?;
    wait_crd(
        lab,
        "metalclusters.metal.kube.farm",
        "the MetalCluster API (XRD established)",
    )?;
    progress("MetalCluster API installed");
    Ok(())
}

/// provider-helm and provider-kubernetes as processes (the External
/// runtime runs no Deployment), once their packages' CRDs are established:
/// they watch them at start.
pub fn providers(lab: &Lab, pki: &Pki) -> Result<(), LabError> {
    wait_crd(
        lab,
        "releases.helm.m.crossplane.io",
        "provider-helm's CRDs (installed by the package manager)",
    )?;
    let creds = runtime::provider_kubeconfig(lab, PROVIDER_HELM)?;
    let mut spec = lab.spec_as(
        "provider-helm",
        "provider-helm",
        &["--poll=1m".into()],
        &creds,
    );
    spec.program = build::provider_bin("provider-helm")?;
    lab.start_and_wait(&spec, Duration::from_secs(60), || {
        procs::port_open(build::PROVIDER_HELM_METRICS)
    })?;

    wait_crd(
        lab,
        "objects.kubernetes.m.crossplane.io",
        "provider-kubernetes's CRDs (installed by the package manager)",
    )?;
    let creds = start_provider_kubernetes(lab, pki)?;
    // What a real install gets from InjectedIdentity, for a process: the
    // provider's own ServiceAccount, from a file, never from a Secret.
    lab.kube.apply(&[json!({
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "ClusterProviderConfig",
        "metadata": {"name": "default"},
        "spec": {"credentials": {
            "source": "Filesystem",
            "fs": {"path": creds.display().to_string()},
        }},
    })])?;
    modelplane(lab)
}

/// provider-kubernetes as its runtime ServiceAccount; that account's
/// kubeconfig.
fn start_provider_kubernetes(lab: &Lab, pki: &Pki) -> Result<std::path::PathBuf, LabError> {
    // Not --sanitize-secrets: the secrets scenario proves MetalPlane's
    // objects leak nothing even where status mirrors Secrets.
    let creds = runtime::provider_kubeconfig(lab, PROVIDER_KUBERNETES)?;
    let mut spec = lab.spec_as(
        "provider-kubernetes",
        "provider-kubernetes",
        &[
            "--poll=1m".into(),
            format!("--metrics-bind-address=127.0.0.1:{PK_METRICS_PORT}"),
            format!("--health-probe-bind-addr=127.0.0.1:{PK_HEALTH_PORT}"),
            format!("--webhook-port={PK_WEBHOOK_PORT}"),
        ],
        &creds,
    );
    spec.program = build::provider_bin("provider-kubernetes")?;
    // Its conversion webhook (cluster-scoped Objects) serves with the lab's
    // server certificate.
    spec.env.push((
        "TLS_SERVER_CERTS_DIR".into(),
        pki.server_dir().display().to_string(),
    ));
    lab.start_and_wait(&spec, Duration::from_secs(60), || {
        procs::port_open(PK_HEALTH_PORT)
    })?;
    Ok(creds)
}

/// The provider packages' names (Crossplane's dependency naming).
const PROVIDER_HELM: &str = "crossplane-contrib-provider-helm";
const PROVIDER_KUBERNETES: &str = "crossplane-contrib-provider-kubernetes";

/// provider-kubernetes's ports in the netns (8080/8081 and 9443 are taken
/// by provider-helm and Crossplane).
const PK_METRICS_PORT: u16 = 8083;
const PK_HEALTH_PORT: u16 = 8084;
const PK_WEBHOOK_PORT: u16 = 9447;

/// What a Modelplane install leaves that MetalPlane's fleet family needs:
/// its namespace and its two XRDs (from `../shared/crds/modelplane`, the
/// upstream definitions), so the InferenceClass and InferenceCluster our
/// Objects apply are accepted. No Modelplane controller runs: an
/// InferenceCluster here never turns Ready.
pub fn modelplane(lab: &Lab) -> Result<(), LabError> {
    lab.kube.apply(&[json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "modelplane-system"},
    })])?;
    let dir = crate::shared_dir().join("crds/modelplane");
    for kind in ["inferenceclasses", "inferenceclusters"] {
        lab.kube
            .apply_file(&dir.join(kind).join("definition.yaml"))?;
        wait_crd(
            lab,
            &format!("{kind}.modelplane.ai"),
            &format!("Modelplane's {kind} XRD offered"),
        )?;
    }
    progress("modelplane is up (its XRDs and namespace)");
    Ok(())
}

/// Waits until the CRD `name` is Established; `what` names it in progress.
fn wait_crd(lab: &Lab, name: &str, what: &str) -> Result<(), LabError> {
    procs::wait_for(what, Duration::from_secs(180), || {
        lab.kube
            .get("crd", name, None)
            .is_some_and(|c| kube::condition(&c, "Established").as_deref() == Some("True"))
    })
}
