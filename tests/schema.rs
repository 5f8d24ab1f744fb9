//! Every composed object, in every scenario, validates against the real
//! upstream CRDs in ../shared/crds (structural schema + CEL rules).

mod common;

use std::collections::BTreeMap;

use common::*;
use metalplane::compose::compose;
use serde_json::{Value, json};

fn scenarios() -> Vec<(&'static str, Value, BTreeMap<&'static str, Value>)> {
    let ex = example_xr();
    let mut minimal = ex.clone();
    for p in [
        "spec.gpu",
        "spec.access",
        "spec.kubernetes.nodeLabels",
        "spec.network.podCIDR",
        "spec.network.serviceCIDR",
        "spec.cni",
        "spec.kubernetes.imageChecksumType",
        "spec.kubernetes.imageDiskFormat",
    ] {
        set_path(&mut minimal, p, Value::Null);
    }
    let mut checksum_url = ex.clone();
    set_path(
        &mut checksum_url,
        "spec.kubernetes.imageChecksum",
        json!("https://images.lan/ubuntu.qcow2.sha256sum"),
    );
    let mut live_iso = ex.clone();
    set_path(&mut live_iso, "spec.kubernetes.imageChecksum", Value::Null);
    set_path(
        &mut live_iso,
        "spec.kubernetes.imageDiskFormat",
        json!("live-iso"),
    );
    let mut unverified_gpu = ex.clone();
    set_path(
        &mut unverified_gpu,
        "spec.gpu.driverInstallerChecksum",
        Value::Null,
    );

    let available = BTreeMap::from([(
        "cluster",
        with_condition(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "r730-cluster"}}),
            "Available",
            "True",
        ),
    )]);
    let fleet = load_yaml(&repo_root().join("examples/metalcluster/fleet.yaml"))[0].clone();
    let mut fleet_available = available.clone();
    if let Some(c) = fleet_available.get_mut("cluster") {
        c["metadata"]["name"] = json!("rack1-cluster");
    }
    vec![
        ("fleet", fleet.clone(), BTreeMap::new()),
        ("fleet-cni", fleet.clone(), fleet_available.clone()),
        (
            "fleet-inference",
            {
                let mut f = fleet;
                f["spec"]["inference"] = json!({});
                f
            },
            fleet_available,
        ),
        ("example", ex.clone(), BTreeMap::new()),
        ("example-cni", ex, available.clone()),
        ("minimal", minimal.clone(), BTreeMap::new()),
        ("minimal-cni", minimal, available),
        ("checksum-url", checksum_url, BTreeMap::new()),
        ("live-iso", live_iso, BTreeMap::new()),
        ("unverified-gpu", unverified_gpu, BTreeMap::new()),
    ]
}

#[test]
fn every_composed_object_validates_against_upstream_crds() {
    let schemas = Schemas::get();
    for (name, xr, observed) in scenarios() {
        let rsp = compose(&request(&xr, &observed, Some(&[])));
        assert_eq!(fatal(&rsp), None, "scenario {name}");
        let desired = desired(&rsp);
        assert!(
            desired.len() >= 6,
            "scenario {name} composed {}",
            desired.len()
        );
        for (res, obj) in &desired {
            let n = obj["metadata"]["name"].as_str().unwrap_or_default();
            assert!(
                metalplane::validate::dns_label(n).is_ok(),
                "{name}/{res}: name {n:?}"
            );
            let p = schemas.problems(obj);
            assert!(
                p.is_empty(),
                "scenario {name}, resource {res}:\n{}",
                p.join("\n")
            );
        }
    }
}

/// What Crossplane's composite reconciler does to a composed kind: watch
/// it, apply it (create, patch), garbage-collect it (update, delete).
const COMPOSE_VERBS: [&str; 6] = ["list", "watch", "create", "patch", "update", "delete"];

/// Crossplane may manage every kind the function composes: kinds of
/// Crossplane packages (helm, kubernetes, Usages) are granted by their
/// packages, every other kind by apis/metalclusters/rbac.yaml, with the
/// verbs the composite reconciler uses and no wildcard.
#[test]
fn crossplane_is_granted_every_composed_kind() {
    let rbac = load_yaml(&repo_root().join("apis/metalclusters/rbac.yaml"));
    let rules = rbac[0]["rules"].as_array().expect("rules").clone();
    for r in &rules {
        for key in ["apiGroups", "resources", "verbs"] {
            assert!(
                !r[key].as_array().expect(key).iter().any(|v| v == "*"),
                "a wildcard in {r}"
            );
        }
    }
    let granted = |group: &str, plural: &str| {
        rules.iter().any(|r| {
            r["apiGroups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|g| g == group))
                && r["resources"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| p == plural))
                && COMPOSE_VERBS.iter().all(|want| {
                    r["verbs"]
                        .as_array()
                        .is_some_and(|v| v.iter().any(|v| v == want))
                })
        })
    };
    for (name, xr, observed) in scenarios() {
        for (res, obj) in desired(&compose(&request(&xr, &observed, Some(&[])))) {
            let group = obj["apiVersion"]
                .as_str()
                .unwrap_or_default()
                .split('/')
                .next()
                .unwrap_or_default()
                .to_string();
            if group.ends_with(".crossplane.io") {
                continue;
            }
            let plural = format!(
                "{}s",
                obj["kind"].as_str().unwrap_or_default().to_lowercase()
            );
            assert!(
                granted(&group, &plural),
                "{name}/{res}: {plural}.{group} is not granted to Crossplane"
            );
        }
    }
}

#[test]
fn xr_status_validates_against_the_xrd() {
    let schemas = Schemas::get();
    let xr = example_xr();
    let claimed = host(
        "r730",
        "provisioned",
        Some("r730-cluster-controlplane-abcde"),
        true,
    );
    let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&[claimed])));
    let mut doc = xr.clone();
    doc["status"] = desired_status(&rsp);
    assert_eq!(doc["status"]["host"]["name"], "r730");
    schemas.assert_valid(&doc);
}

#[test]
fn packaged_manifests_validate() {
    let schemas = Schemas::get();
    let root = repo_root();
    for f in [
        "apis/metalclusters/definition.yaml",
        "apis/metalclusters/composition.yaml",
        "apis/crossplane.yaml",
        "examples/metalcluster/r730.yaml",
        "examples/metalcluster/r730-inference.yaml",
        "examples/metalcluster/fleet.yaml",
    ] {
        for doc in load_yaml(&root.join(f)) {
            let p = schemas.problems(&doc);
            assert!(p.is_empty(), "{f}:\n{}", p.join("\n"));
        }
    }
    for doc in load_yaml(&root.join("examples/baremetalhost/r730.yaml")) {
        if doc["kind"] == "BareMetalHost" {
            schemas.assert_valid(&doc);
        }
    }
}

#[test]
fn host_fixtures_are_real_baremetalhosts() {
    let schemas = Schemas::get();
    for state in ["available", "provisioning", "provisioned", "deprovisioning"] {
        schemas.assert_valid(&host(
            "r730",
            state,
            Some("r730-cluster-controlplane-x1"),
            true,
        ));
    }
}

/// The validator is not a rubber stamp: it refuses what the API server refuses.
#[test]
fn validator_rejects_broken_objects() {
    let schemas = Schemas::get();
    let rsp = compose(&request(&example_xr(), &BTreeMap::new(), Some(&[])));
    let d = desired(&rsp);

    let mut kcp = d["kubeadmcontrolplane"].clone();
    kcp["spec"].as_object_mut().map(|m| m.remove("version"));
    assert!(
        schemas.problems(&kcp).iter().any(|p| p.contains("version")),
        "missing required field"
    );

    let mut m3mt = d["metal3machinetemplate"].clone();
    m3mt["spec"]["template"]["spec"]["image"]["diskFormat"] = json!("iso");
    assert!(!schemas.problems(&m3mt).is_empty(), "enum");

    let mut cluster = d["cluster"].clone();
    cluster["spec"]["controlPlaneRef"]["apiVersion"] =
        json!("controlplane.cluster.x-k8s.io/v1beta2");
    assert!(
        !schemas.problems(&cluster).is_empty(),
        "v1beta1-style ref field is unknown in v1beta2"
    );

    let mut ds = d["metal3datatemplate"].clone();
    ds["spec"]["networkData"]["links"]["ethernets"] = json!([]);
    assert!(!schemas.problems(&ds).is_empty(), "minItems");
}

#[test]
fn cel_kcp_kubelet_extra_args_names_unique() {
    let schemas = Schemas::get();
    let rsp = compose(&request(&example_xr(), &BTreeMap::new(), Some(&[])));
    let mut kcp = desired(&rsp)["kubeadmcontrolplane"].clone();
    let rule = "self.all(x, self.exists_one(y, x.name == y.name))";
    assert!(
        schemas.applied_rules(&kcp).iter().any(|r| r == rule),
        "the uniqueness rule applies to our KCP"
    );
    schemas.assert_valid(&kcp);
    let nr = &mut kcp["spec"]["kubeadmConfigSpec"]["initConfiguration"]["nodeRegistration"]["kubeletExtraArgs"];
    nr.as_array_mut()
        .expect("list")
        .push(json!({"name": "node-labels", "value": "a=b"}));
    assert!(
        schemas
            .problems(&kcp)
            .iter()
            .any(|p| p.contains("must be unique"))
    );
}

#[test]
fn cel_usage_needs_by_or_reason_and_a_reference() {
    let schemas = Schemas::get();
    let observed = BTreeMap::from([(
        "cluster",
        with_condition(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "r730-cluster"}}),
            "Available",
            "True",
        ),
    )]);
    let rsp = compose(&request(&example_xr(), &observed, Some(&[])));
    let usage = desired(&rsp)["cilium-needs-cluster"].clone();
    let applied = schemas.applied_rules(&usage);
    assert!(
        applied
            .iter()
            .any(|r| r == "has(self.by) || has(self.reason)")
    );
    assert!(
        applied.iter().any(|r| r.contains("__namespace__")),
        "cross-namespace rule is evaluated"
    );
    schemas.assert_valid(&usage);

    let mut no_by = usage.clone();
    no_by["spec"].as_object_mut().map(|m| m.remove("by"));
    assert!(
        schemas
            .problems(&no_by)
            .iter()
            .any(|p| p.contains("spec.by"))
    );

    let mut no_ref = usage;
    no_ref["spec"]["of"]
        .as_object_mut()
        .map(|m| m.remove("resourceRef"));
    assert!(
        schemas
            .problems(&no_ref)
            .iter()
            .any(|p| p.contains("resource reference"))
    );
}

fn xrd() -> Value {
    load_yaml(&repo_root().join("apis/metalclusters/definition.yaml"))
        .into_iter()
        .next()
        .expect("XRD")
}

fn spec_schema(xrd: &Value) -> Value {
    xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

/// Dotted paths of every leaf below `schema` (objects with properties are
/// walked into, so are the items of lists of them as `list[]`; maps, lists
/// of scalars and opaque objects are leaves).
fn leaves(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Some(items) = schema
        .get("items")
        .filter(|i| i.get("properties").is_some())
    {
        return leaves(items, &format!("{prefix}[]"), out);
    }
    match schema.get("properties").and_then(Value::as_object) {
        Some(props) => {
            for (k, v) in props {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(v, &p, out);
            }
        }
        None => out.push(prefix.to_string()),
    }
}

/// The API reference is the types' own: every spec field is on the page,
/// and the page is what `cargo xtask generate` makes of them.
#[test]
fn api_reference_is_generated_from_the_rust_types() {
    let path = repo_root().join("docs/api-reference.md");
    let text = std::fs::read_to_string(&path).expect("docs/api-reference.md");
    assert!(
        metalplane::reference::regenerate(&text).expect("markers") == text,
        "docs/api-reference.md drifted from function/src/api.rs and fields.rs: run cargo xtask generate"
    );
    for f in metalplane::fields::FIELDS {
        assert!(
            text.contains(&format!("| `spec.{}` |", f.path)),
            "docs/api-reference.md lacks spec.{}",
            f.path
        );
    }
}

#[test]
fn xrd_schema_is_generated_from_the_rust_types() {
    let path = repo_root().join("apis/metalclusters/definition.yaml");
    let text = std::fs::read_to_string(&path).expect("XRD");
    let fresh = metalplane::xrd::regenerate(&text).expect("markers");
    assert!(
        fresh == text,
        "the XRD's schema drifted from function/src/api.rs and fields.rs: run cargo xtask generate"
    );
    let root = xrd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    assert_eq!(root, metalplane::xrd::open_api_v3_schema());
    let rules = root["x-kubernetes-validations"].clone();
    assert_eq!(
        rules.as_array().map(Vec::len),
        Some(metalplane::fields::root_rules().len())
    );
}

/// The examples are instances of the types: every field they use is known
/// to the API, and nothing is lost reading them.
#[test]
fn examples_read_into_the_api_types() {
    for f in [
        "examples/metalcluster/r730.yaml",
        "examples/metalcluster/r730-inference.yaml",
        "examples/metalcluster/fleet.yaml",
    ] {
        let xr = load_yaml(&repo_root().join(f))[0].clone();
        let spec: metalplane::api::MetalClusterSpec =
            serde_json::from_value(xr["spec"].clone()).unwrap_or_else(|e| panic!("{f}: {e}"));
        let back = serde_json::to_value(&spec).expect("serialize");
        fn subset(a: &Value, b: &Value) -> bool {
            match (a, b) {
                (Value::Object(x), Value::Object(y)) => x
                    .iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| subset(v, w))),
                // Items gain their defaults as objects do.
                (Value::Array(x), Value::Array(y)) => {
                    x.len() == y.len() && x.iter().zip(y).all(|(v, w)| subset(v, w))
                }
                _ => a == b,
            }
        }
        assert!(
            subset(&xr["spec"], &back),
            "{f}: reading into the types lost something:\n{back}"
        );
    }
}

#[test]
fn every_spec_field_has_one_class() {
    let mut all = Vec::new();
    leaves(&spec_schema(&xrd()), "", &mut all);
    let table: Vec<&str> = metalplane::fields::FIELDS.iter().map(|f| f.path).collect();
    for leaf in &all {
        assert!(
            table
                .iter()
                .any(|t| leaf == t || leaf.starts_with(&format!("{t}."))),
            "spec.{leaf} is in no class of function/src/fields.rs"
        );
    }
    for t in &table {
        assert!(
            all.iter().any(|l| l == t
                || l.starts_with(&format!("{t}."))
                || l.starts_with(&format!("{t}[]."))),
            "spec.{t} is classified but not in the XRD"
        );
    }
    let readme = std::fs::read_to_string(repo_root().join("docs/day2.md")).expect("docs/day2.md");
    assert!(
        metalplane::fields::regenerate_edit_table(&readme).expect("markers") == readme,
        "docs/day2.md's edit table drifted from function/src/fields.rs: run cargo xtask generate"
    );
    for f in metalplane::fields::FIELDS {
        let row = format!(
            "| `spec.{}` | {} | {} |",
            f.path,
            f.class.as_str(),
            f.effect
        );
        assert!(readme.contains(&row), "docs/day2.md lacks the row {row:?}");
    }
}

fn edited(v: &Value) -> Value {
    match v {
        Value::String(s) => json!(format!("{s}-edited")),
        Value::Number(n) => json!(n.as_i64().unwrap_or(0) + 1),
        Value::Bool(b) => json!(!b),
        Value::Array(a) => {
            let mut a = a.clone();
            a.push(json!("added"));
            Value::Array(a)
        }
        Value::Object(m) => {
            let mut m = m.clone();
            m.insert("added".into(), json!("x"));
            Value::Object(m)
        }
        Value::Null => json!("new"),
    }
}

/// `edited`, but a version stays a version (the next minor one), and a
/// bounded number stays in its range.
fn edited_field(path: &str, v: &Value) -> Value {
    match (path, v) {
        ("kubernetes.version", Value::String(s)) => json!(next_minor(s)),
        (_, Value::Number(n)) if path.ends_with("Days") || path.ends_with("Seconds") => {
            json!(n.as_i64().unwrap_or(0) + 1)
        }
        _ => edited(v),
    }
}

/// v1.34.1 -> v1.35.0.
fn next_minor(v: &str) -> String {
    let parts: Vec<u64> = v
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse().unwrap_or(0))
        .collect();
    format!("v{}.{}.0", parts[0], parts[1] + 1)
}

/// A JSON pointer to `path`, the first item of a list standing for `[]`.
fn pointer(path: &str) -> String {
    format!("/{}", path.replace("[]", ".0").replace('.', "/"))
}

/// The examples' specs: the single node with every optional section, and
/// the fleet (control plane and worker pools).
fn example_specs() -> [Value; 2] {
    ["r730-inference.yaml", "fleet.yaml"]
        .map(|f| load_yaml(&repo_root().join("examples/metalcluster").join(f))[0]["spec"].clone())
}

/// The XRD's transition rules that fail for old -> new specs of a
/// MetalCluster the function composed (status.phase set), by fieldPath
/// relative to spec.
fn refusals(old: &Value, new: &Value) -> Vec<(String, String)> {
    refusals_with(old, new, &json!({"phase": "Ready"}))
}

fn refusals_with(old: &Value, new: &Value, old_status: &Value) -> Vec<(String, String)> {
    let root = xrd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    let old = json!({"spec": old, "status": old_status});
    let new = json!({"spec": new, "status": old_status});
    root["x-kubernetes-validations"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| {
            !eval_transition_rule(r["rule"].as_str().unwrap_or_default(), &new, Some(&old))
                .unwrap_or_else(|e| panic!("{}: {e}", r["rule"]))
        })
        .map(|r| {
            (
                r["fieldPath"]
                    .as_str()
                    .unwrap_or_default()
                    .trim_start_matches(".spec")
                    .to_string(),
                r["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A spec the function refused built nothing: fixing it is allowed.
#[test]
fn edits_before_anything_was_composed_are_allowed() {
    let full = load_yaml(&repo_root().join("examples/metalcluster/r730-inference.yaml"))[0]["spec"]
        .clone();
    let mut bad = full.clone();
    bad["network"]["gateway"] = json!("10.1.1.1");
    for status in [json!({}), json!({"conditions": []})] {
        assert!(refusals_with(&bad, &full, &status).is_empty(), "{status}");
    }
    assert!(
        !refusals(&bad, &full).is_empty(),
        "once composed, the gateway is fixed"
    );
}

/// Every field's class, decided by the XRD's own rules on old/new pairs:
/// a refused field's edit fails exactly its rule, whose message names it;
/// an in-place edit fails none.
#[test]
fn edit_rules_refuse_exactly_the_refused_fields() {
    let [single, fleet] = example_specs();
    for full in [&single, &fleet] {
        assert!(refusals(full, full).is_empty(), "no edit, no refusal");
    }
    let full = single.clone();
    let fields = metalplane::fields::FIELDS;
    for f in fields {
        // An object whose fields are listed: its presence is tested below.
        if fields
            .iter()
            .any(|c| c.path.starts_with(&format!("{}.", f.path)))
        {
            continue;
        }
        let ptr = pointer(f.path);
        // The example that has the field's parent.
        let (parent_ptr, _) = ptr.rsplit_once('/').expect("path");
        let full = if parent_ptr.is_empty() || full.pointer(parent_ptr).is_some() {
            full.clone()
        } else if fleet.pointer(parent_ptr).is_some() {
            fleet.clone()
        } else {
            // A section neither example sets (health, drain): given empty,
            // then its field edited.
            let mut f = fleet.clone();
            let (grand, section) = parent_ptr.rsplit_once('/').expect("section");
            f.pointer_mut(if grand.is_empty() { "" } else { grand })
                .and_then(Value::as_object_mut)
                .expect("spec")
                .insert(section.into(), json!({}));
            f
        };
        let mut new = full.clone();
        let before = full.pointer(&ptr).cloned().unwrap_or(Value::Null);
        let (parent, key) = ptr.rsplit_once('/').expect("path");
        let target = if parent.is_empty() {
            Some(&mut new)
        } else {
            new.pointer_mut(parent)
        };
        target.expect("parent exists in the example")[key] = edited_field(f.path, &before);
        let failed = refusals(&full, &new);
        if f.class == metalplane::fields::Class::Rolling {
            // Refused on the single node with the way to an upgradeable one;
            // on the fleet it rolls: no rule refuses it.
            if !f.path.contains("[]") && single.pointer(parent_ptr).is_some() {
                let mut new = single.clone();
                let before = single.pointer(&ptr).cloned().unwrap_or(Value::Null);
                new.pointer_mut(parent).expect("parent")[key] = edited_field(f.path, &before);
                let failed = refusals(&single, &new);
                assert_eq!(failed.len(), 1, "spec.{}: {failed:?}", f.path);
                assert_eq!(failed[0].0, format!(".{}", f.path));
                assert!(failed[0].1.starts_with(&format!("spec.{} cannot", f.path)));
                assert!(
                    failed[0].1.contains(metalplane::fields::UPGRADEABLE_SINGLE),
                    "{}",
                    failed[0].1
                );
            }
            if let Some(parent_in_fleet) = fleet.pointer(parent_ptr).cloned() {
                let _ = parent_in_fleet;
                let mut new = fleet.clone();
                let before = fleet.pointer(&ptr).cloned().unwrap_or(Value::Null);
                new.pointer_mut(parent).expect("parent")[key] = edited_field(f.path, &before);
                let failed = refusals(&fleet, &new);
                assert!(
                    failed.is_empty(),
                    "spec.{} rolls on a fleet, yet: {failed:?}",
                    f.path
                );
            }
            continue;
        }
        match f.class {
            metalplane::fields::Class::Refused => {
                assert_eq!(failed.len(), 1, "spec.{}: {failed:?}", f.path);
                let list = f.path.split_once("[]").map_or(f.path, |(l, _)| l);
                assert_eq!(failed[0].0, format!(".{list}"));
                assert!(
                    failed[0].1.starts_with(&format!("spec.{} cannot", f.path)),
                    "{}",
                    failed[0].1
                );
                assert!(
                    failed[0].1.contains("create a new MetalCluster")
                        || failed[0].1.contains(metalplane::fields::POOL_INSTEAD),
                    "says what to do instead"
                );
            }
            metalplane::fields::Class::Rolling => {}
            metalplane::fields::Class::InPlace => {
                assert!(
                    failed.is_empty(),
                    "spec.{} is applied in place, yet: {failed:?}",
                    f.path
                );
            }
        }
    }
    // Optional fields may not appear or disappear when they shape the machine.
    for (path, field) in [
        ("gpu", ".gpu"),
        ("access", ".access"),
        ("network/loadBalancer", ".network.loadBalancer"),
        ("kubernetes/imageChecksum", ".kubernetes.imageChecksum"),
        (
            "gpu/driverInstallerChecksum",
            ".gpu.driverInstallerChecksum",
        ),
    ] {
        let mut new = full.clone();
        let (parent, key) = match path.rsplit_once('/') {
            Some((p, k)) => (format!("/{p}"), k),
            None => (String::new(), path),
        };
        let target = if parent.is_empty() {
            Some(&mut new)
        } else {
            new.pointer_mut(&parent)
        };
        target.and_then(Value::as_object_mut).map(|m| m.remove(key));
        let failed = refusals(&full, &new);
        assert!(
            !failed.is_empty() && failed.iter().all(|(p, _)| p.starts_with(field)),
            "{path}: {failed:?}"
        );
        assert!(failed.iter().any(|(p, _)| p == field), "{path}: {failed:?}");
    }
    // Removing the inference settings is applied in place (leaves the fleet).
    let mut new = full.clone();
    new.as_object_mut().map(|m| m.remove("inference"));
    assert!(refusals(&full, &new).is_empty());
}

/// The version skew rules on a fleet: one minor up (and patches) roll; a
/// downgrade, a skipped minor and an edit while the last upgrade rolls
/// are each refused by exactly one rule naming spec.kubernetes.version.
#[test]
fn version_edits_follow_the_skew_policy() {
    let [single, fleet] = example_specs();
    assert_eq!(fleet["kubernetes"]["version"], "v1.34.1");
    let at = |spec: &Value, v: &str| {
        let mut s = spec.clone();
        s["kubernetes"]["version"] = json!(v);
        s
    };
    let settled = json!({"phase": "Ready", "kubernetes": {"version": "v1.34.1"}});
    let rolling = json!({"phase": "Upgrading", "kubernetes": {"controlPlane": {"version": "v1.33.4", "upToDate": 1, "desired": 3}}});
    for ok in ["v1.34.2", "v1.35.0", "v1.35.7"] {
        assert!(
            refusals_with(&fleet, &at(&fleet, ok), &settled).is_empty(),
            "{ok}"
        );
    }
    for (to, status, says) in [
        ("v1.34.0", &settled, "cannot go back"),
        ("v1.33.9", &settled, "cannot go back"),
        ("v1.36.0", &settled, "cannot skip a minor version"),
        ("v2.0.0", &settled, "cannot skip a minor version"),
        ("v1.35.0", &rolling, "while the last upgrade still rolls"),
    ] {
        let failed = refusals_with(&fleet, &at(&fleet, to), status);
        assert_eq!(failed.len(), 1, "{to}: {failed:?}");
        assert_eq!(failed[0].0, ".kubernetes.version", "{to}");
        assert!(failed[0].1.starts_with("spec.kubernetes.version cannot"));
        assert!(failed[0].1.contains(says), "{to}: {}", failed[0].1);
    }
    // A single node's version is fixed, by its own rule only.
    let failed = refusals_with(&single, &at(&single, "v1.35.0"), &settled);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].1.contains(metalplane::fields::UPGRADEABLE_SINGLE));
}
