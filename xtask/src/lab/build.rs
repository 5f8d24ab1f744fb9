//! The upstream programs the lab runs, built from the Go module pinned in
//! `xtask/lab/`. Binaries are cached outside the clone, in a folder keyed
//! by that module's go.sum, so a warm machine only relinks nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{LabError, progress};

/// Kubernetes version the API server reports; controllers refuse a server
/// whose version they cannot parse, so it is set at link time.
pub const KUBE_VERSION: (&str, &str, &str) = ("v1.35.4", "1", "35");
pub const CROSSPLANE_VERSION: &str = "v2.3.0";

/// (binary name, Go package). Order is the start order, so the first
/// binaries are ready soonest on a cold build.
pub const BINARIES: &[(&str, &str)] = &[
    ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
    (
        "kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
    ),
    ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
    (
        "crossplane",
        "github.com/crossplane/crossplane/v2/cmd/crossplane",
    ),
    ("crane", "github.com/google/go-containerregistry/cmd/crane"),
    ("capi", "sigs.k8s.io/cluster-api"),
    ("kcp", "sigs.k8s.io/cluster-api/controlplane/kubeadm"),
    ("cabpk", "sigs.k8s.io/cluster-api/bootstrap/kubeadm"),
    ("capm3", "github.com/metal3-io/cluster-api-provider-metal3"),
    ("ipam", "github.com/metal3-io/ip-address-manager"),
    ("bmo", "github.com/metal3-io/baremetal-operator"),
    // The lab's own stand-in for the servers' OS and workload API.
    ("workload", LOCAL_WORKLOAD),
];

/// Lab code of ours (in the module, not upstream): its source changes
/// without go.sum changing, so it is rebuilt on every `up` (Go's build
/// cache makes that a relink).
const LOCAL_WORKLOAD: &str = "./workload";

pub fn module_dir() -> PathBuf {
    crate::repo_root().join("xtask/lab")
}

/// `$METALPLANE_LAB_CACHE`, else `~/.cache/metalplane-lab`: outside every
/// clone, so CI's fresh clone finds the binaries of the last run.
pub fn cache_root() -> PathBuf {
    if let Some(p) = std::env::var_os("METALPLANE_LAB_CACHE") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/metalplane-lab")
}

/// The cache key of a Go module: the start of its go.sum's SHA-256.
pub fn go_sum_key(module: &Path) -> Result<String, LabError> {
    let sum = std::fs::read(module.join("go.sum"))
        .map_err(|e| LabError::new(format!("{}/go.sum: {e}", module.display())))?;
    Ok(crate::sha256_hex(&sum)[..16].to_string())
}

/// The binary folder for this go.sum.
pub fn bin_dir() -> Result<PathBuf, LabError> {
    Ok(cache_root().join(format!("bin-{}", go_sum_key(&module_dir())?)))
}

/// Programs built in a module of their own in `xtask/lab/<module>/`
/// (their Kubernetes and crossplane-runtime versions differ from the lab
/// module's).
pub struct ModuleBinary {
    pub name: &'static str,
    pub module: &'static str,
    pub package: &'static str,
    /// Link-time settings beyond ldflags().
    pub extra_ldflags: &'static str,
}

pub const PROVIDER_BINARIES: &[ModuleBinary] = &[
    ModuleBinary {
        name: "provider-helm",
        module: "provider-helm",
        package: "github.com/crossplane-contrib/provider-helm/cmd/provider",
        // provider-helm has no metrics flag and takes controller-runtime's
        // default :8080, which Crossplane's RBAC manager (no flag either)
        // also takes. In a pod each has its own network; in the lab's one
        // namespace provider-helm's default moves to PROVIDER_HELM_METRICS.
        extra_ldflags: "-X sigs.k8s.io/controller-runtime/pkg/metrics/server.DefaultBindAddress=127.0.0.1:8085",
    },
    ModuleBinary {
        name: "provider-kubernetes",
        module: "provider-kubernetes",
        package: "github.com/crossplane-contrib/provider-kubernetes/cmd/provider",
        extra_ldflags: "",
    },
    // Renders Crossplane's Helm chart for its RBAC (identity::helm_rbac):
    // the Helm of provider-helm's module, so no module is added.
    ModuleBinary {
        name: "helm",
        module: "provider-helm",
        package: "helm.sh/helm/v3/cmd/helm",
        extra_ldflags: "",
    },
];

/// provider-helm's metrics port (see PROVIDER_BINARIES).
pub const PROVIDER_HELM_METRICS: u16 = 8085;

/// Modules the checksum database has no entries for: Metal3's, and the
/// Nebius SDK version provider-kubernetes is raised to.
const GONOSUMDB: &str = "github.com/metal3-io,github.com/nebius";

/// A PROVIDER_BINARIES program, keyed by its module's go.sum.
pub fn provider_bin(name: &str) -> Result<PathBuf, LabError> {
    let b = PROVIDER_BINARIES
        .iter()
        .find(|b| b.name == name)
        .ok_or_else(|| LabError::new(format!("no module binary {name}")))?;
    let module = module_dir().join(b.module);
    Ok(cache_root().join(format!("{name}-{}", go_sum_key(&module)?)))
}

pub fn ldflags() -> String {
    let (v, major, minor) = KUBE_VERSION;
    let mut f = vec!["-s".to_string(), "-w".to_string()];
    for pkg in [
        "k8s.io/component-base/version",
        "k8s.io/client-go/pkg/version",
    ] {
        f.push(format!("-X {pkg}.gitVersion={v}"));
        f.push(format!("-X {pkg}.gitMajor={major}"));
        f.push(format!("-X {pkg}.gitMinor={minor}"));
    }
    f.push(format!(
        "-X github.com/crossplane/crossplane-runtime/v2/pkg/version.version={CROSSPLANE_VERSION}"
    ));
    f.join(" ")
}

/// Builds every missing binary; returns the folder holding all of them.
pub fn ensure_binaries() -> Result<PathBuf, LabError> {
    let dir = bin_dir()?;
    std::fs::create_dir_all(&dir).map_err(|e| LabError::new(format!("{}: {e}", dir.display())))?;
    let missing: Vec<_> = BINARIES
        .iter()
        .filter(|(name, pkg)| *pkg == LOCAL_WORKLOAD || !dir.join(name).exists())
        .collect();
    for (i, (name, pkg)) in missing.iter().enumerate() {
        progress(&format!(
            "building {name} ({}/{}) from {pkg}; a cold build of the whole set took about 15 min on 2 cores",
            i + 1,
            missing.len()
        ));
        go_build(&module_dir(), &dir.join(name), pkg, "")?;
    }
    for b in PROVIDER_BINARIES {
        let out = provider_bin(b.name)?;
        if !out.exists() {
            progress(&format!(
                "building {} from {} (module {}, about 5 min cold)",
                b.name, b.package, b.module
            ));
            go_build(
                &module_dir().join(b.module),
                &out,
                b.package,
                b.extra_ldflags,
            )?;
        }
    }
    Ok(dir)
}

fn go_build(module: &Path, out: &Path, pkg: &str, extra_ldflags: &str) -> Result<(), LabError> {
    let started = std::time::Instant::now();
    // Build to a temporary name, then rename: an interrupted build never
    // leaves a half-written binary that would count as present.
    let tmp = out.with_extension("partial");
    let status = Command::new("go")
        .current_dir(module)
        .env("GOFLAGS", "-mod=mod")
        .env("GONOSUMDB", GONOSUMDB)
        .env("GOTOOLCHAIN", "local")
        .args(["build", "-trimpath", "-ldflags"])
        .arg(format!("{} {extra_ldflags}", ldflags()).trim())
        .arg("-o")
        .arg(&tmp)
        .arg(pkg)
        .status()
        .map_err(|e| LabError::new(format!("cannot run go: {e}")))?;
    if !status.success() {
        return Err(LabError::new(format!("go build {pkg} failed")));
    }
    // An identical rebuild keeps the old file (and its mtime), so `up`
    // does not restart a process whose program did not change.
    if std::fs::read(out).ok() == std::fs::read(&tmp).ok() {
        let _ = std::fs::remove_file(&tmp);
        return Ok(());
    }
    std::fs::rename(&tmp, out).map_err(|e| LabError::new(format!("{}: {e}", out.display())))?;
    progress(&format!(
        "built {} in {:.0} s",
        out.display(),
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// A Go module's folder in the module cache (for CRDs, webhook manifests
/// and package metadata), at the version the lab module resolves.
pub fn module_src(module: &str) -> Result<PathBuf, LabError> {
    download(module, &module_dir())
}

/// A module at an exact `module@version`, downloaded outside the lab module
/// so its go.mod and go.sum stay as pinned.
pub fn module_at(module: &str, version: &str) -> Result<PathBuf, LabError> {
    let dir = cache_root().join("gomod");
    std::fs::create_dir_all(&dir).map_err(|e| LabError::new(format!("{}: {e}", dir.display())))?;
    download(&format!("{module}@{version}"), &dir)
}

/// `go mod download -json` run in `dir`; the module's folder.
fn download(spec: &str, dir: &Path) -> Result<PathBuf, LabError> {
    let out = Command::new("go")
        .current_dir(dir)
        .env("GOFLAGS", "-mod=mod")
        .env("GONOSUMDB", GONOSUMDB)
        .env("GOTOOLCHAIN", "local")
        .args(["mod", "download", "-json", spec])
        .output()
        .map_err(|e| LabError::new(format!("cannot run go: {e}")))?;
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    match info.get("Dir").and_then(|d| d.as_str()) {
        Some(dir) if out.status.success() => Ok(PathBuf::from(dir)),
        _ => Err(LabError::new(format!(
            "go mod download {spec}: {}{}",
            String::from_utf8_lossy(&out.stderr).trim(),
            info.get("Error").and_then(|e| e.as_str()).unwrap_or("")
        ))),
    }
}
