//! Reading the XR's spec into the API's Rust types (`api`), with every
//! problem of shape (a missing field, a wrong type) reported at once by
//! its field path and value, never a panic.
//!
//! The API server validates an XR against the XRD's schema before the
//! function sees it, but `crossplane render`, a stale XRD or a hand-made
//! request can still send anything. serde stops at the first problem, so
//! the shape is checked first against the schema the types themselves
//! generate (the XRD's), collecting every problem; only a well-shaped spec
//! is deserialized, which then cannot fail. The semantic rules (ranges,
//! overlaps, shell safety) run on the typed values afterwards (`spec`).

use std::fmt;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::api::{MetalClusterSpec, structural_schema};

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

/// Every problem found so far; the semantic checks add theirs.
#[derive(Debug, Default)]
pub struct Problems {
    pub errors: Vec<FieldError>,
}

impl Problems {
    /// Records a problem with `path`, showing `value` when there is one.
    pub fn fail(&mut self, path: &str, value: Option<&Value>, reason: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.to_string(),
            value: value.map(show),
            reason: reason.into(),
        });
    }

    /// The parsed value, or None with the problem recorded against the
    /// raw string.
    pub fn check<T>(&mut self, path: &str, raw: &str, parsed: Result<T, String>) -> Option<T> {
        match parsed {
            Ok(v) => Some(v),
            Err(reason) => {
                self.fail(path, Some(&Value::String(raw.to_string())), reason);
                None
            }
        }
    }

    /// `raw` when `rule` accepts it.
    pub fn valid(
        &mut self,
        path: &str,
        raw: &str,
        rule: impl FnOnce(&str) -> Result<(), String>,
    ) -> Option<String> {
        let res = rule(raw).map(|_| raw.to_string());
        self.check(path, raw, res)
    }

    /// A required string that must say something: a blank one is refused.
    pub fn non_empty<'s>(&mut self, path: &str, raw: &'s str) -> Option<&'s str> {
        if raw.trim().is_empty() {
            self.fail(
                path,
                Some(&Value::String(raw.to_string())),
                "must not be empty",
            );
            None
        } else {
            Some(raw)
        }
    }
}

/// The schema of `spec`, generated once from the types.
fn spec_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(structural_schema::<MetalClusterSpec>)
}

/// `spec` of the XR as the API's types, or every problem of shape.
pub fn spec(xr: &Value) -> Result<MetalClusterSpec, Vec<FieldError>> {
    let mut p = Problems::default();
    let raw = match xr.get("spec") {
        None | Some(Value::Null) => {
            p.fail("spec", None, "is required");
            return Err(p.errors);
        }
        Some(v) => v,
    };
    let clean = shape(spec_schema(), raw, "spec", &mut p);
    if !p.errors.is_empty() {
        return Err(p.errors);
    }
    // The shape matches the types' own schema, so this does not fail; if
    // it ever did, the problem is still reported by path, not a panic.
    serde_json::from_value(clean).map_err(|e| {
        vec![FieldError {
            path: "spec".into(),
            value: None,
            reason: format!("cannot be read: {e}"),
        }]
    })
}

/// Checks `v` against `schema` at `path`, recording every problem, and
/// returns it without nulls (an absent optional field may arrive as null,
/// which serde would refuse where the type has a default).
fn shape(schema: &Value, v: &Value, path: &str, p: &mut Problems) -> Value {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        && schema.get("properties").is_none()
    {
        // Kept as given (Modelplane's device shape): only its type matters.
        if !v.is_object() {
            p.fail(path, Some(v), "must be an object");
        }
        return v.clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => object(schema, v, path, p),
        Some("array") => array(schema, v, path, p),
        Some("string") => {
            match v.as_str() {
                None => p.fail(path, Some(v), "must be a string"),
                Some(s) => enumerated(schema, s, path, p),
            }
            v.clone()
        }
        Some("integer") => {
            if v.as_i64().is_none() {
                p.fail(path, Some(v), "must be an integer");
            }
            v.clone()
        }
        Some("boolean") => {
            if !v.is_boolean() {
                p.fail(path, Some(v), "must be true or false");
            }
            v.clone()
        }
        _ => v.clone(),
    }
}

/// A string with a fixed set of values.
fn enumerated(schema: &Value, s: &str, path: &str, p: &mut Problems) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return;
    };
    if allowed.iter().any(|a| a.as_str() == Some(s)) {
        return;
    }
    let names: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
    let reason = match names.as_slice() {
        [a, b] => format!("must be {a} or {b}"),
        _ => format!("must be one of {}", names.join(", ")),
    };
    p.fail(path, Some(&Value::String(s.to_string())), reason);
}

fn object(schema: &Value, v: &Value, path: &str, p: &mut Problems) -> Value {
    let Value::Object(m) = v else {
        let reason = if schema.get("additionalProperties").is_some() {
            "must be a map of strings"
        } else {
            "must be an object"
        };
        p.fail(path, Some(v), reason);
        return Value::Null;
    };
    let mut out = Map::new();
    if let Some(item) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        // A map: each entry is named by its key, as a label is.
        for (k, e) in m {
            if !e.is_null() {
                let at = format!("{path}[{}]", Value::String(k.clone()));
                out.insert(k.clone(), shape(item, e, &at, p));
            }
        }
        return Value::Object(out);
    }
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if m.get(r).is_none_or(Value::is_null) {
                p.fail(&format!("{path}.{r}"), None, "is required");
            }
        }
    }
    for (k, e) in m {
        if e.is_null() {
            continue;
        }
        // A field not in the schema is one the API server would have pruned.
        if let Some(s) = props.get(k) {
            out.insert(k.clone(), shape(s, e, &format!("{path}.{k}"), p));
        }
    }
    Value::Object(out)
}

fn array(schema: &Value, v: &Value, path: &str, p: &mut Problems) -> Value {
    let item = schema.get("items").unwrap_or(&Value::Null);
    let Value::Array(items) = v else {
        let reason = match item.get("type").and_then(Value::as_str) {
            Some("string") => "must be a list of strings",
            _ => "must be a list of objects",
        };
        p.fail(path, Some(v), reason);
        return Value::Null;
    };
    Value::Array(
        items
            .iter()
            .enumerate()
            .map(|(i, e)| shape(item, e, &format!("{path}[{i}]"), p))
            .collect(),
    )
}
