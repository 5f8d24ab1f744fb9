//! The lab's chart repository: a stand-in `cilium` chart served over HTTP
//! inside the namespace, as an air-gapped site's mirror would serve the
//! real one (`spec.cni.chartRepository`). The chart installs the objects
//! Cilium's agent is made of (ServiceAccount, ConfigMap of its values,
//! DaemonSet), so provider-helm really installs into, and uninstalls from,
//! the workload API.

use std::path::Path;
use std::time::Duration;

use super::{Lab, LabError, procs};

pub const CHART_PORT: u16 = 8879;
pub const CHART_VERSION: &str = "1.18.4";
/// A second version, so that an upgrade (an in-place edit of
/// `spec.cni.ciliumVersion`) can be observed.
pub const CHART_VERSIONS: [&str; 2] = [CHART_VERSION, "1.18.5"];

/// The repository URL MetalClusters in the lab name.
pub fn repository() -> String {
    format!("http://127.0.0.1:{CHART_PORT}")
}

const CHART_YAML: &str = "apiVersion: v2
name: cilium
description: Lab stand-in for the Cilium chart (agent DaemonSet and its configuration)
type: application
version: VERSION
appVersion: VERSION
";

const TEMPLATES: &[(&str, &str)] = &[
    (
        "serviceaccount.yaml",
        "apiVersion: v1
kind: ServiceAccount
metadata:
  name: cilium
  namespace: {{ .Release.Namespace }}
",
    ),
    (
        "configmap.yaml",
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: cilium-config
  namespace: {{ .Release.Namespace }}
data:
  kube-proxy-replacement: {{ .Values.kubeProxyReplacement | default false | quote }}
  enable-l2-announcements: {{ (.Values.l2announcements).enabled | default false | quote }}
  ipam: {{ (.Values.ipam).mode | default \"cluster-pool\" | quote }}
  values: {{ toJson .Values | quote }}
",
    ),
    (
        "daemonset.yaml",
        "apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: cilium
  namespace: {{ .Release.Namespace }}
  labels:
    k8s-app: cilium
spec:
  selector:
    matchLabels:
      k8s-app: cilium
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 2
  template:
    metadata:
      labels:
        k8s-app: cilium
    spec:
      serviceAccountName: cilium
      hostNetwork: true
      containers:
        - name: cilium-agent
          image: quay.io/cilium/cilium:v{{ .Chart.AppVersion }}
",
    ),
];

/// The chart as a .tgz (entries under `cilium/`).
fn chart_tgz(version: &str) -> Result<Vec<u8>, LabError> {
    let err = |e: std::io::Error| LabError::new(format!("chart: {e}"));
    let mut files = vec![(
        "cilium/Chart.yaml".to_string(),
        CHART_YAML.replace("VERSION", version),
    )];
    for (name, text) in TEMPLATES {
        files.push((format!("cilium/templates/{name}"), text.to_string()));
    }
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for (path, text) in &files {
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o644);
        h.set_size(text.len() as u64);
        h.set_mtime(0);
        tar.append_data(&mut h, path, text.as_bytes())
            .map_err(err)?;
    }
    tar.into_inner().map_err(err)?.finish().map_err(err)
}

fn index_entry(version: &str, tgz: &[u8]) -> String {
    format!(
        "    - apiVersion: v2
      name: cilium
      version: {version}
      appVersion: {version}
      created: \"2026-01-01T00:00:00Z\"
      digest: {}
      urls:
        - {}/cilium-{version}.tgz
",
        crate::sha256_hex(tgz),
        repository()
    )
}

fn index_yaml(entries: &[String]) -> String {
    format!(
        "apiVersion: v1\nentries:\n  cilium:\n{}generated: \"2026-01-01T00:00:00Z\"\n",
        entries.concat()
    )
}

/// Writes the repository's files into `dir`.
pub fn write(dir: &Path) -> Result<(), LabError> {
    let err = |e: std::io::Error| LabError::new(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(err)?;
    let mut entries = Vec::new();
    for version in CHART_VERSIONS {
        let tgz = chart_tgz(version)?;
        std::fs::write(dir.join(format!("cilium-{version}.tgz")), &tgz).map_err(err)?;
        entries.push(index_entry(version, &tgz));
    }
    std::fs::write(dir.join("index.yaml"), index_yaml(&entries)).map_err(err)
}

/// Serves the repository inside the namespace (Python's http.server: any
/// static server would do, and the machine has Python).
pub fn serve(lab: &Lab) -> Result<(), LabError> {
    let dir = lab.state.join("charts");
    write(&dir)?;
    let python = super::which("python3")
        .ok_or_else(|| LabError::new("python3 is missing (the lab's chart repository)"))?;
    let spec = procs::Spec {
        name: "charts",
        program: python,
        args: vec![
            "-m".into(),
            "http.server".into(),
            "--bind=127.0.0.1".into(),
            format!("--directory={}", dir.display()),
            CHART_PORT.to_string(),
        ],
        env: vec![],
    };
    lab.start_and_wait(&spec, Duration::from_secs(30), || {
        procs::http_ok(CHART_PORT, "/index.yaml")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_names_the_chart_by_digest() {
        let tgz = chart_tgz("1.18.4").expect("chart");
        let idx = index_yaml(&[index_entry("1.18.4", &tgz)]);
        assert!(idx.contains(&crate::sha256_hex(&tgz)));
        assert!(idx.contains("http://127.0.0.1:8879/cilium-1.18.4.tgz"));
        let parsed: serde_yaml_ng::Value = serde_yaml_ng::from_str(&idx).expect("index is YAML");
        assert_eq!(parsed["entries"]["cilium"][0]["version"], "1.18.4");
    }
}
