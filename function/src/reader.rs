//! Reading an untyped document by dotted paths into typed values, every
//! problem collected with its field path and value, never a panic.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// One problem with one field of the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the field, e.g. `spec.network.prefix`.
    pub path: String,
    /// The offending value rendered as JSON, or None when the field is absent.
    pub value: Option<String>,
    /// What is wrong and what is accepted.
    pub reason: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{} {}: {}", self.path, v, self.reason),
            None => write!(f, "{}: {}", self.path, self.reason),
        }
    }
}

/// Renders a JSON value for an error message, shortened so that a huge
/// value cannot flood an event.
pub fn show(value: &Value) -> String {
    let s = value.to_string();
    const MAX: usize = 120;
    if s.chars().count() > MAX {
        let cut: String = s.chars().take(MAX).collect();
        format!("{cut}...")
    } else {
        s
    }
}

/// Walks a JSON document by dotted paths and collects typed errors.
#[derive(Default)]
pub struct Reader {
    pub errors: Vec<FieldError>,
}

impl Reader {
    pub fn fail(&mut self, path: &str, value: Option<&Value>, reason: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.to_string(),
            value: value.map(show),
            reason: reason.into(),
        });
    }

    /// Looks a dotted path up. A non-object on the way is reported once and
    /// treated as absent.
    pub fn lookup<'v>(&mut self, root: &'v Value, path: &str) -> Option<&'v Value> {
        let mut cur = root;
        // Byte offset of the end of the parent path walked so far; the
        // parent's name is only built when it is not an object.
        let mut parent_end: usize = 0;
        for part in path.split('.') {
            match cur {
                Value::Object(m) => match m.get(part) {
                    Some(Value::Null) | None => return None,
                    Some(v) => cur = v,
                },
                other => {
                    let parent = &path[..parent_end.saturating_sub(1)];
                    if !self.errors.iter().any(|e| e.path == parent) {
                        self.fail(parent, Some(other), "must be an object");
                    }
                    return None;
                }
            }
            parent_end += part.len() + 1;
        }
        Some(cur)
    }

    pub fn opt_str(&mut self, root: &Value, path: &str) -> Option<String> {
        match self.lookup(root, path)? {
            Value::String(s) => Some(s.clone()),
            other => {
                self.fail(path, Some(other), "must be a string");
                None
            }
        }
    }

    /// A required, non-empty string.
    pub fn req_str(&mut self, root: &Value, path: &str) -> Option<String> {
        let present = self.lookup(root, path).is_some();
        match self.opt_str(root, path) {
            Some(s) if s.trim().is_empty() => {
                self.fail(path, Some(&Value::String(s)), "must not be empty");
                None
            }
            Some(s) => Some(s),
            None => {
                if !present {
                    self.fail(path, None, "is required");
                }
                None
            }
        }
    }

    pub fn opt_int(&mut self, root: &Value, path: &str) -> Option<i64> {
        let v = self.lookup(root, path)?;
        match v.as_i64() {
            Some(i) => Some(i),
            None => {
                self.fail(path, Some(v), "must be an integer");
                None
            }
        }
    }

    pub fn opt_str_map(&mut self, root: &Value, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        match self.lookup(root, path) {
            None => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    match v {
                        Value::String(s) => {
                            out.insert(k.clone(), s.clone());
                        }
                        other => self.fail(
                            &format!("{path}[{}]", Value::String(k.clone())),
                            Some(other),
                            "must be a string",
                        ),
                    }
                }
            }
            Some(other) => self.fail(path, Some(other), "must be a map of strings"),
        }
        out
    }

    pub fn opt_str_list(&mut self, root: &Value, path: &str) -> Vec<String> {
        let mut out = Vec::new();
        match self.lookup(root, path) {
            None => {}
            Some(Value::Array(items)) => {
                for (i, v) in items.iter().enumerate() {
                    match v {
                        Value::String(s) => out.push(s.clone()),
                        other => {
                            self.fail(&format!("{path}[{i}]"), Some(other), "must be a string")
                        }
                    }
                }
            }
            Some(other) => self.fail(path, Some(other), "must be a list of strings"),
        }
        out
    }

    /// An optional string with a default, validated by `rule`.
    pub fn defaulted(
        &mut self,
        root: &Value,
        path: &str,
        default: &str,
        rule: fn(&str) -> Result<(), String>,
    ) -> Option<String> {
        let v = self
            .opt_str(root, path)
            .unwrap_or_else(|| default.to_string());
        let res = rule(&v);
        self.check(path, &v, res.map(|_| v.clone()))
    }

    pub fn check<T>(&mut self, path: &str, raw: &str, parsed: Result<T, String>) -> Option<T> {
        match parsed {
            Ok(v) => Some(v),
            Err(reason) => {
                self.fail(path, Some(&Value::String(raw.to_string())), reason);
                None
            }
        }
    }
}
