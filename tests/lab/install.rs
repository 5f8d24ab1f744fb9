//! Scenario `install`: the package manager installed the Function, the Configuration and the XRD, and every function reference resolves.

use super::*;

/// The Composition and the WatchOperation resolve an installed Function,
/// installed by the package manager from the Configuration's dependency.
pub(crate) fn install(lab: &Lab) -> Outcome {
    let f = lab.kube.get("functions.pkg.crossplane.io", FUNCTION, None);
    check(is_true(&f, "Installed") && is_true(&f, "Healthy"), || {
        format!("Function {FUNCTION} is not installed and healthy: {f:?}")
    })?;
    let conf = lab.kube.get(
        "configurations.pkg.crossplane.io",
        "configuration-metalplane",
        None,
    );
    check(is_true(&conf, "Healthy"), || {
        format!("Configuration configuration-metalplane is not healthy: {conf:?}")
    })?;
    let xrd = lab.kube.get(
        "compositeresourcedefinitions",
        "metalclusters.metal.kube.farm",
        None,
    );
    check(is_true(&xrd, "Established"), || {
        "the MetalCluster XRD is not established".into()
    })?;
    let functions: Vec<String> = lab
        .kube
        .list("functions.pkg.crossplane.io", None)
        .iter()
        .map(|f| str_at(f, "/metadata/name").to_string())
        .collect();
    let mut refs = Vec::new();
    for c in lab.kube.list("compositions", None) {
        if str_at(&c, "/spec/compositeTypeRef/kind") == "MetalCluster" {
            for s in c
                .pointer("/spec/pipeline")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                refs.push(("Composition", str_at(s, "/functionRef/name").to_string()));
            }
        }
    }
    for w in lab.kube.list("watchoperations", None) {
        for s in w
            .pointer("/spec/operationTemplate/spec/pipeline")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            refs.push(("WatchOperation", str_at(s, "/functionRef/name").to_string()));
        }
    }
    check(refs.iter().any(|(k, _)| *k == "Composition"), || {
        "no MetalCluster Composition installed".into()
    })?;
    check(refs.iter().any(|(k, _)| *k == "WatchOperation"), || {
        "no WatchOperation installed".into()
    })?;
    for (kind, name) in &refs {
        check(functions.contains(name), || {
            format!("the {kind} references function {name}, but installed are {functions:?}")
        })?;
    }
    println!(
        "  Function {FUNCTION} installed and healthy; {} function references resolve",
        refs.len()
    );
    Ok(())
}
