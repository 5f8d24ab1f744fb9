//! `cargo xtask lab`: a real management cluster on one machine, as
//! processes inside a private network namespace: etcd, kube-apiserver,
//! kube-controller-manager, Crossplane core, our function, Cluster API
//! (core, KCP, CABPK), CAPM3, IPAM and BMO in demo mode, or against real
//! Ironic with `--ironic` (ironic.rs). Each controller
//! is its own ServiceAccount under its project's RBAC (identity.rs); only
//! the harness's kubectl is admin.

pub mod build;
pub mod chaos;
pub mod charts;
pub mod demo;
pub mod hosts;
pub mod identity;
pub mod install;
pub mod ironic;
pub mod kube;
pub mod manifests;
pub mod observe;
pub mod perf;
pub mod pki;
pub mod procs;
pub mod runtime;

use std::path::PathBuf;
use std::time::Duration;

use kube::Kube;
use procs::{Procs, Spec};

#[derive(Debug)]
pub struct LabError(pub String);

impl LabError {
    pub fn new(s: impl Into<String>) -> Self {
        LabError(s.into())
    }
}

impl std::fmt::Display for LabError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LabError {}

/// Progress on stderr, so stdout stays for what a caller parses.
pub fn progress(msg: &str) {
    eprintln!("lab: {msg}");
}

pub const APISERVER_PORT: u16 = 6443;
/// Where the lab's inventory lives (examples/lab/inventory.yaml). The
/// lab's BMO manages every namespace.
pub const INVENTORY_NAMESPACE: &str = "metal";
/// The add-on API server (see Lab::start_addons_apiserver).
pub const ADDONS_APISERVER_PORT: u16 = 6445;
pub const CROSSPLANE_WEBHOOK_PORT: u16 = 9443;
pub const CROSSPLANE_HEALTH_PORT: u16 = 8081;
pub const FUNCTION_PORT: u16 = 9445;
pub const REGISTRY_PORT: u16 = 5000;

/// Byte offsets into the lab's logs (`Lab::log_offsets`).
pub type LogOffsets = std::collections::BTreeMap<PathBuf, u64>;

/// The lab's folders and clients.
pub struct Lab {
    pub state: PathBuf,
    pub bin: PathBuf,
    pub procs: Procs,
    pub kube: Kube,
}

/// `target/lab` in this checkout unless METALPLANE_LAB_STATE names another.
pub fn state_dir() -> PathBuf {
    std::env::var_os("METALPLANE_LAB_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target/lab"))
}

impl Lab {
    pub fn open() -> Result<Lab, LabError> {
        let state = state_dir();
        let bin = build::bin_dir()?;
        Ok(Lab {
            procs: Procs {
                state: state.clone(),
            },
            kube: Kube {
                kubectl: bin.join("kubectl"),
                kubeconfig: state.join("admin.kubeconfig"),
            },
            state,
            bin,
        })
    }

    fn pki(&self) -> Result<pki::Pki, LabError> {
        pki::ensure(&self.state.join("pki"))
    }

    fn path(&self, p: &str) -> String {
        self.state.join(p).display().to_string()
    }

    /// A process that needs no API server credentials.
    fn spec(&self, name: &'static str, binary: &str, args: &[String]) -> Spec {
        Spec {
            name,
            program: self.bin.join(binary),
            args: args.to_vec(),
            env: vec![],
        }
    }

    /// A process talking to the API server as `kubeconfig`'s identity
    /// (never the admin's: see identity.rs).
    fn spec_as(
        &self,
        name: &'static str,
        binary: &str,
        args: &[String],
        kubeconfig: &std::path::Path,
    ) -> Spec {
        let mut spec = self.spec(name, binary, args);
        spec.env
            .push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
        spec
    }

    /// Every log of the lab (the processes' and the audit log), sorted.
    pub fn logs(&self) -> Vec<PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(self.state.join("logs"))
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Each log's length now: the start or end of a window of log lines.
    pub fn log_offsets(&self) -> LogOffsets {
        self.logs()
            .into_iter()
            .map(|p| {
                let n = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                (p, n)
            })
            .collect()
    }

    /// The main API server's audit log (identity::denied reads it).
    pub fn audit_log(&self) -> PathBuf {
        self.state.join("logs/audit.log")
    }

    fn start_and_wait(
        &self,
        spec: &Spec,
        timeout: Duration,
        ready: impl FnMut() -> bool,
    ) -> Result<(), LabError> {
        self.procs.start(spec)?;
        let name = spec.name;
        procs::wait_for(name, timeout, ready).map_err(|e| {
            LabError::new(format!(
                "{e}\nlast lines of {}:\n{}",
                self.procs.log_file(name).display(),
                self.procs.tail(name, 15)
            ))
        })?;
        progress(&format!("{name} is up"));
        Ok(())
    }

    /// A kube-apiserver's flags: on `port`, storing under `prefix` in the
    /// lab's etcd, serving with the lab's certificates.
    fn apiserver_args(&self, pki: &pki::Pki, port: u16, prefix: &str, certs: &str) -> Vec<String> {
        let d = |p: PathBuf| p.display().to_string();
        let server = pki.server_dir();
        let mut args = vec![
            "--etcd-servers=http://127.0.0.1:2379".into(),
            format!("--etcd-prefix={prefix}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", d(server.join("tls.crt"))),
            format!("--tls-private-key-file={}", d(server.join("tls.key"))),
            format!("--client-ca-file={}", d(pki.ca())),
            "--authorization-mode=Node,RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", d(pki.sa_pub())),
            format!("--service-account-signing-key-file={}", d(pki.sa_key())),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            "--enable-priority-and-fairness=false".into(),
            // The loopback advertise address is not a valid endpoint.
            "--endpoint-reconciler-type=none".into(),
            "--allow-privileged=true".into(),
            format!("--cert-dir={}", self.path(certs)),
        ];
        if port == APISERVER_PORT {
            // Every refusal of the authorizer, by whom and for what: the
            // lab's check that no controller lacks a permission.
            args.extend([
                format!("--audit-policy-file={}", self.path("audit-policy.yaml")),
                format!("--audit-log-path={}", d(self.audit_log())),
                "--audit-log-format=json".into(),
            ]);
        }
        args
    }

    /// The add-on API server: a second, real kube-apiserver (own etcd
    /// prefix) holding the CRDs of what the CNI would install, Cilium's
    /// LB IPAM and L2 announcement kinds from `../shared/crds`. The
    /// workload stand-in routes those groups to it, so objects MetalPlane
    /// applies inside the workload cluster are validated, applied
    /// server-side and deleted by a real API server. Shared by every
    /// workload cluster of the lab: one cluster with a load balancer at a
    /// time.
    fn start_addons_apiserver(&self, pki: &pki::Pki) -> Result<Kube, LabError> {
        let addons = Kube {
            kubectl: self.kube.kubectl.clone(),
            kubeconfig: self.state.join("addons.kubeconfig"),
        };
        std::fs::write(
            &addons.kubeconfig,
            pki::kubeconfig(pki, &format!("https://127.0.0.1:{ADDONS_APISERVER_PORT}")),
        )
        .map_err(|e| LabError::new(format!("addons kubeconfig: {e}")))?;
        let spec = self.spec(
            "addons-apiserver",
            "kube-apiserver",
            &self.apiserver_args(
                pki,
                ADDONS_APISERVER_PORT,
                "/metalplane-addons",
                "addons-apiserver-certs",
            ),
        );
        self.start_and_wait(&spec, Duration::from_secs(120), || addons.ready())?;
        let crds = crate::shared_dir().join("crds");
        for f in [
            "cilium.io_ciliumloadbalancerippools.yaml",
            "cilium.io_ciliuml2announcementpolicies.yaml",
        ] {
            addons.apply_file(&crds.join(f))?;
        }
        Ok(addons)
    }

    /// etcd, kube-apiserver and kube-controller-manager.
    fn start_kubernetes(&self, pki: &pki::Pki) -> Result<(), LabError> {
        let etcd = which("etcd").ok_or_else(|| {
            LabError::new("etcd is missing: apt-get install etcd-server (Debian's etcd)")
        })?;
        std::fs::create_dir_all(self.state.join("etcd"))
            .map_err(|e| LabError::new(format!("etcd dir: {e}")))?;
        let spec = Spec {
            name: "etcd",
            program: etcd,
            args: vec![
                format!("--data-dir={}", self.path("etcd")),
                "--listen-client-urls=http://127.0.0.1:2379".into(),
                "--advertise-client-urls=http://127.0.0.1:2379".into(),
                "--listen-peer-urls=http://127.0.0.1:2380".into(),
                "--initial-advertise-peer-urls=http://127.0.0.1:2380".into(),
                "--initial-cluster=default=http://127.0.0.1:2380".into(),
            ],
            env: vec![],
        };
        self.start_and_wait(&spec, Duration::from_secs(30), || procs::port_open(2379))?;

        std::fs::create_dir_all(self.state.join("logs"))
            .and_then(|_| {
                std::fs::write(self.state.join("audit-policy.yaml"), identity::AUDIT_POLICY)
            })
            .map_err(|e| LabError::new(format!("audit policy: {e}")))?;
        let apiserver = self.spec(
            "kube-apiserver",
            "kube-apiserver",
            &self.apiserver_args(pki, APISERVER_PORT, "/registry", "apiserver-certs"),
        );
        self.start_and_wait(&apiserver, Duration::from_secs(120), || self.kube.ready())?;

        // The garbage collector and namespace controller: without them no
        // owner-reference cascade (composed resources, Machines) happens.
        // The ClusterRole aggregator: Crossplane's and CAPI's roles are
        // aggregated ones. As in a kubeadm cluster, the manager is
        // system:kube-controller-manager and each controller runs as its
        // own ServiceAccount in kube-system (bootstrap policy roles).
        let kcm_kubeconfig = self.state.join("kube-controller-manager.kubeconfig");
        std::fs::write(
            &kcm_kubeconfig,
            pki::kcm_kubeconfig(pki, &format!("https://127.0.0.1:{APISERVER_PORT}")),
        )
        .map_err(|e| LabError::new(format!("controller-manager kubeconfig: {e}")))?;
        let kcm = self.spec(
            "kube-controller-manager",
            "kube-controller-manager",
            &[
                format!("--kubeconfig={}", kcm_kubeconfig.display()),
                "--controllers=garbagecollector,namespace,clusterrole-aggregation".into(),
                "--bind-address=127.0.0.1".into(),
                "--secure-port=10257".into(),
                "--leader-elect=false".into(),
                "--use-service-account-credentials=true".into(),
            ],
        );
        self.start_and_wait(&kcm, Duration::from_secs(60), || procs::port_open(10257))
    }

    /// Everything, idempotently; returns when every controller is ready.
    pub fn up(&self) -> Result<(), LabError> {
        let started = std::time::Instant::now();
        if which("ip").is_none() {
            return Err(LabError::new("`ip` (iproute2) is missing"));
        }
        build::ensure_binaries()?;
        let packages = install::ensure_packages()?;
        procs::ensure_netns()?;
        let pki = self.pki()?;
        std::fs::write(
            &self.kube.kubeconfig,
            pki::kubeconfig(&pki, &format!("https://127.0.0.1:{APISERVER_PORT}")),
        )
        .map_err(|e| LabError::new(format!("kubeconfig: {e}")))?;
        self.start_kubernetes(&pki)?;
        install::crossplane(self, &pki)?;
        self.start_addons_apiserver(&pki)?;
        install::cluster_api(self, &pki)?;
        install::function(self, &pki)?;
        install::packages(self, &packages)?;
        charts::serve(self)?;
        install::providers(self, &pki)?;
        progress(&format!(
            "ready in {:.0} s. Reach it with:\n  cargo xtask lab exec -- kubectl get metalclusters -A\n  (KUBECONFIG={}, inside network namespace {})",
            started.elapsed().as_secs_f64(),
            self.kube.kubeconfig.display(),
            procs::NETNS
        ));
        Ok(())
    }

    /// A file in the lab's state folder.
    pub fn state_path(&self, p: &str) -> PathBuf {
        self.state.join(p)
    }

    /// The add-on API server's kubeconfig (see start_addons_apiserver).
    pub fn addons_kubeconfig(&self) -> PathBuf {
        self.state.join("addons.kubeconfig")
    }

    /// Stops the function process (the scenario of a function crashing
    /// mid-provisioning).
    pub fn stop_function(&self) {
        self.procs.stop("function");
    }

    /// Starts the function again, as a restarted pod would be.
    pub fn start_function(&self) -> Result<(), LabError> {
        install::function(self, &self.pki()?)
    }

    /// Restarts `crossplane` or `provider-kubernetes` (install::restart).
    pub fn restart(&self, name: &str) -> Result<(), LabError> {
        install::restart(self, &self.pki()?, name)
    }

    /// Stops what `up` started, removes the namespace and the state (its
    /// logs move to `lab-logs` beside it).
    pub fn down(&self) -> Result<(), LabError> {
        for name in self.procs.started() {
            progress(&format!("stopping {name}"));
            self.procs.stop(&name);
        }
        procs::delete_netns()?;
        // The last lab's logs outlive it (its audit log says whose each
        // request was: benches/audit_by_actor.py).
        let logs = self.state.join("logs");
        if logs.exists() {
            let kept = self.state.with_file_name("lab-logs");
            let _ = std::fs::remove_dir_all(&kept);
            if std::fs::rename(&logs, &kept).is_ok() {
                progress(&format!("logs kept in {}", kept.display()));
            }
        }
        if self.state.exists() {
            std::fs::remove_dir_all(&self.state)
                .map_err(|e| LabError::new(format!("{}: {e}", self.state.display())))?;
        }
        progress("down");
        Ok(())
    }

    /// Each process the lab started: running (with its pid) or not, and
    /// its log; then whether the API server answers.
    pub fn status(&self) -> String {
        let mut names = self.procs.started();
        names.sort();
        let mut out = String::new();
        if names.is_empty() {
            out.push_str("the lab is not up (cargo xtask lab up starts it)\n");
            return out;
        }
        out.push_str(&format!("{:<28} {:<16} LOG\n", "PROCESS", "STATE"));
        for n in &names {
            let state = match self.procs.running(n) {
                Some(pid) => format!("running {pid}"),
                None => "stopped".into(),
            };
            out.push_str(&format!(
                "{n:<28} {state:<16} {}\n",
                self.procs.log_file(n).display()
            ));
        }
        out.push_str(&format!(
            "API server: {} (KUBECONFIG={}, network namespace {})\n",
            if self.kube.ready() {
                "answers"
            } else {
                "does not answer"
            },
            self.kube.kubeconfig.display(),
            procs::NETNS
        ));
        out
    }

    /// Runs a command inside the namespace with KUBECONFIG and kubectl.
    pub fn exec(&self, cmd: &[String]) -> Result<i32, LabError> {
        let Some((program, args)) = cmd.split_first() else {
            return Err(LabError::new("exec needs a command: lab exec -- CMD..."));
        };
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let status = std::process::Command::new("ip")
            .args(["netns", "exec", procs::NETNS, "env"])
            .arg(format!("PATH={path}"))
            .arg(format!("KUBECONFIG={}", self.kube.kubeconfig.display()))
            .arg(program)
            .args(args)
            .status()
            .map_err(|e| LabError::new(format!("exec: {e}")))?;
        Ok(status.code().unwrap_or(1))
    }
}

/// A program on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|c| c.is_file())
    })
}
