//! kubectl inside the lab's namespace, with the admin kubeconfig.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::LabError;
use super::procs::in_netns;

#[derive(Clone)]
pub struct Kube {
    pub kubectl: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Kube {
    pub fn cmd(&self) -> Command {
        let mut c = in_netns(&self.kubectl);
        c.arg("--kubeconfig").arg(&self.kubeconfig);
        c
    }

    /// Runs kubectl; stdout on success, stderr in the error.
    pub fn run(&self, args: &[&str]) -> Result<String, LabError> {
        self.run_with_input(args, None)
    }

    pub fn run_with_input(&self, args: &[&str], input: Option<&str>) -> Result<String, LabError> {
        let mut c = self.cmd();
        c.args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c
            .spawn()
            .map_err(|e| LabError::new(format!("kubectl: {e}")))?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin
                .write_all(text.as_bytes())
                .map_err(|e| LabError::new(format!("kubectl stdin: {e}")))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| LabError::new(format!("kubectl: {e}")))?;
        if !out.status.success() {
            return Err(LabError::new(format!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Server-side apply of documents, as the lab's field manager.
    pub fn apply(&self, docs: &[Value]) -> Result<(), LabError> {
        if docs.is_empty() {
            return Ok(());
        }
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs});
        self.run_with_input(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=metalplane-lab",
                "-f",
                "-",
            ],
            Some(&list.to_string()),
        )
        .map(|_| ())
    }

    pub fn apply_file(&self, path: &Path) -> Result<(), LabError> {
        self.apply(&load_yaml(path)?)
    }

    /// One object as JSON, or None when it does not exist.
    pub fn get(&self, kind: &str, name: &str, ns: Option<&str>) -> Option<Value> {
        let mut args = vec!["get", kind, name, "-o", "json"];
        if let Some(n) = ns {
            args.extend(["-n", n]);
        }
        self.run(&args)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
    }

    /// The items of a list, empty when the kind is unknown.
    pub fn list(&self, kind: &str, ns: Option<&str>) -> Vec<Value> {
        let mut args = vec!["get", kind, "-o", "json"];
        match ns {
            Some(n) => args.extend(["-n", n]),
            None => args.push("-A"),
        }
        self.run(&args)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|v| v.get("items").and_then(|i| i.as_array()).cloned())
            .unwrap_or_default()
    }

    pub fn ready(&self) -> bool {
        self.run(&["get", "--raw", "/readyz"]).is_ok()
    }
}

/// Every document of a YAML stream, as JSON values (empty ones dropped).
pub fn load_yaml(path: &Path) -> Result<Vec<Value>, LabError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LabError::new(format!("{}: {e}", path.display())))?;
    parse_yaml(&text).map_err(|e| LabError::new(format!("{}: {e}", path.display())))
}

pub fn parse_yaml(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// A condition's status on an object ("True", "False", ...).
pub fn condition(obj: &Value, kind: &str) -> Option<String> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
        .and_then(|c| c.get("status").and_then(Value::as_str))
        .map(str::to_string)
}

pub fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}
