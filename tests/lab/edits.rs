//! Scenario `edits`: every refused edit refused by the API server naming the field, and the in-place ones applied.

use super::*;

/// Edits of each class on the provisioned r730, with their documented
/// outcome: every refused field is refused by the API server with a message
/// naming it (and the XR keeps its spec); an in-place edit (Cilium's
/// version) is applied and the XR is Ready again only once helm's wait
/// found the upgraded DaemonSet ready; the control plane's rollout state is
/// in the status.
pub(crate) fn edits(lab: &Lab) -> Outcome {
    let x = get(lab, "metalcluster", XR).ok_or("r730 missing")?;
    check(str_at(&x, "/status/phase") == "Ready", || {
        format!("r730 is not Ready: {:?}", x.pointer("/status/phase"))
    })?;
    let cp = x
        .pointer("/status/controlPlane")
        .cloned()
        .unwrap_or(Value::Null);
    check(
        cp == json!({"desiredReplicas": 1, "replicas": 1, "upToDateReplicas": 1, "readyReplicas": 1, "rollingOut": false}),
        || format!("status.controlPlane of a settled r730: {cp}"),
    )?;
    cilium_and_kube_proxy(lab, R730, false)?;
    let generation = x.pointer("/metadata/generation").cloned();
    // One valid new value per refused field (valid for the schema, so the
    // refusal is the edit rule's).
    let refused: [(&str, Value); 24] = [
        ("host.pool", json!({"host": {"pool": "r740"}})),
        (
            "host.bootInterface",
            json!({"host": {"bootInterface": "eno2"}}),
        ),
        (
            "host.bond",
            json!({"host": {"bond": {"interfaces": ["eno1", "eno2"]}}}),
        ),
        ("host.vlan", json!({"host": {"vlan": 120}})),
        ("host.mtu", json!({"host": {"mtu": 9000}})),
        (
            "gpu.driverSetup",
            json!({"gpu": {"driverSetup": "BuildWithImageTools"}}),
        ),
        (
            "network.nodeIP",
            json!({"network": {"nodeIP": "192.168.120.75"}}),
        ),
        ("network.prefix", json!({"network": {"prefix": 23}})),
        (
            "network.gateway",
            json!({"network": {"gateway": "192.168.120.2"}}),
        ),
        (
            "network.dnsServer",
            json!({"network": {"dnsServer": "192.168.120.2"}}),
        ),
        (
            "network.podCIDR",
            json!({"network": {"podCIDR": "10.245.0.0/16"}}),
        ),
        (
            "network.serviceCIDR",
            json!({"network": {"serviceCIDR": "10.112.0.0/12"}}),
        ),
        (
            "network.loadBalancer",
            json!({"network": {"loadBalancer": "192.168.120.200-192.168.120.210"}}),
        ),
        (
            "kubernetes.version",
            json!({"kubernetes": {"version": "v1.35.0"}}),
        ),
        (
            "kubernetes.nodeLabels",
            json!({"kubernetes": {"nodeLabels": {"tier": "gold"}}}),
        ),
        (
            "kubernetes.imageURL",
            json!({"kubernetes": {"imageURL": "http://192.168.120.10/images/other.qcow2"}}),
        ),
        (
            "kubernetes.imageChecksumType",
            json!({"kubernetes": {"imageChecksumType": "sha512"}}),
        ),
        (
            "kubernetes.imageDiskFormat",
            json!({"kubernetes": {"imageDiskFormat": "raw"}}),
        ),
        (
            "gpu.driverInstallerURL",
            json!({"gpu": {"driverInstallerURL": "http://192.168.120.10/nvidia/other.run"}}),
        ),
        ("gpu", json!({"gpu": null})),
        ("access", json!({"access": {"username": "ops"}})),
        (
            "kubernetes.imageChecksum",
            json!({"kubernetes": {"imageChecksum": "0".repeat(64)}}),
        ),
        (
            "gpu.driverInstallerChecksum",
            json!({"gpu": {"driverInstallerChecksum": "1".repeat(64)}}),
        ),
        (
            "inference.nodePool",
            json!({"inference": {"nodePool": "a100"}}),
        ),
    ];
    // Every refused field of the single-node form is tried here; the
    // fleet's (controlPlane, workers) in the multi-node scenario.
    every_refused_field_edited(refused.iter().map(|(p, _)| *p), false)?;
    for (path, spec) in &refused {
        let out = patch_xr(lab, XR, &json!({"spec": spec}));
        let Err(e) = out else {
            return Err(format!("editing spec.{path} was accepted: {out:?}"));
        };
        let says = format!("spec.{path} cannot");
        check(
            e.contains(&says) && e.contains("create a new MetalCluster"),
            || {
                format!(
                    "editing spec.{path}: the refusal does not say {says:?} and what to do: {e}"
                )
            },
        )?;
    }
    let x = get(lab, "metalcluster", XR).ok_or("r730 missing")?;
    check(
        x.pointer("/metadata/generation").cloned() == generation,
        || "a refused edit changed the spec".into(),
    )?;
    println!(
        "  {} refused edits, each refused by the API server naming its field",
        refused.len()
    );

    // In place: Cilium's version. helm upgrades the release; the XR is
    // Ready again only once the Release is.
    let release = format!("{XR}-cluster-cilium");
    let revision = |lab: &Lab| {
        get(lab, "releases.helm.m.crossplane.io", &release)
            .and_then(|r| {
                r.pointer("/status/atProvider/revision")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(0)
    };
    let before = revision(lab);
    // The other chart version than the current one (a kept lab may run
    // this twice).
    let x = get(lab, "metalcluster", XR).ok_or("r730 missing")?;
    let from = str_at(&x, "/spec/cni/ciliumVersion").to_string();
    let [a, b] = xtask::lab::charts::CHART_VERSIONS;
    let to = if from == a { b } else { a };
    patch_xr(lab, XR, &json!({"spec": {"cni": {"ciliumVersion": to}}}))?;
    let t = Instant::now();
    wait(
        &format!("the Release upgraded to {to} and Ready, the XR Ready"),
        300,
        || {
            let r = get(lab, "releases.helm.m.crossplane.io", &release);
            let x = get(lab, "metalcluster", XR);
            r.as_ref().is_some_and(|r| {
                !str_at(r, "/status/atProvider/releaseDescription").is_empty()
                    && str_at(r, "/spec/forProvider/chart/version") == to
            }) && revision(lab) > before
                && is_true(&r, "Ready")
                && is_true(&x, "Ready")
                && x.as_ref()
                    .is_some_and(|x| str_at(x, "/status/phase") == "Ready")
        },
    )?;
    let r = get(lab, "releases.helm.m.crossplane.io", &release).ok_or("release missing")?;
    check(
        r.pointer("/spec/forProvider/wait") == Some(&json!(true)),
        || "the Release does not wait for its resources".into(),
    )?;
    println!(
        "  cni.ciliumVersion {from} -> {to} applied in place: release revision {before} -> {}, Ready again in {:.1} s",
        revision(lab),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
