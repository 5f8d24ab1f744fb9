//! Scenarios `operation` and `operation-any-namespace`: the WatchOperation on BareMetalHosts and the remediation Jobs it creates.

use super::*;

/// BMO's demo provisioner keeps the host of this name in `provisioning`
/// (its other hosts provision at once), as a real host sits there for
/// minutes while its image is written.
pub(crate) const PROVISIONING_HOST: &str = "demo-provisioning";

/// A Dell host that enters `provisioning` gets the remediation Job in its
/// namespace, its BMC credentials by secretKeyRef only, from the package the
/// function was installed from. The host is real inventory to BMO (webhook,
/// state machine); it belongs to no pool a MetalCluster names.
pub(crate) fn operation(lab: &Lab) -> Outcome {
    let mut docs =
        xtask::lab::hosts::host_docs(NS, PROVISIONING_HOST, "by-hand", "eno1", 900).to_vec();
    docs[1]["spec"]["online"] = json!(true);
    docs[1]["spec"]["image"] = json!({
        "url": "http://192.168.120.9/images/ubuntu-24.04.qcow2",
        "checksum": "http://192.168.120.9/images/ubuntu-24.04.qcow2.sha256sum",
        "checksumType": "sha256",
        "format": "qcow2",
    });
    let prefix = format!("{PROVISIONING_HOST}-provis");
    let ours = |lab: &Lab| -> Vec<Value> {
        lab.kube
            .list("jobs.batch", Some(NS))
            .into_iter()
            .filter(|j| str_at(j, "/metadata/name").starts_with(&prefix))
            .collect()
    };
    // A Job left by an earlier run on a kept lab would pass unseen.
    for j in ours(lab) {
        let name = format!("job/{}", str_at(&j, "/metadata/name"));
        lab.kube
            .run(&["delete", "-n", NS, "--wait=true", &name])
            .map_err(|e| e.to_string())?;
    }
    lab.kube.apply(&docs).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let waited = wait("the remediation Job of a host in provisioning", 120, || {
        !ours(lab).is_empty()
    });
    let state = get(lab, "baremetalhost", PROVISIONING_HOST)
        .map(|h| str_at(&h, "/status/provisioning/state").to_string())
        .unwrap_or_default();
    waited.map_err(|e| {
        let ops: Vec<String> = lab
            .kube
            .list("operations.ops.crossplane.io", None)
            .iter()
            .map(|o| {
                format!(
                    "{} {:?}",
                    str_at(o, "/metadata/name"),
                    o.pointer("/status/pipeline")
                )
            })
            .collect();
        format!("{e}; host {PROVISIONING_HOST} in {state:?}; operations: {ops:?}")
    })?;
    println!(
        "  Job for {PROVISIONING_HOST} ({state}) after {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let ours = ours(lab);
    for j in &ours {
        let text = j.to_string();
        check(!text.contains("lab-only"), || {
            format!(
                "Job {} carries the BMC password",
                str_at(j, "/metadata/name")
            )
        })?;
        let env = j
            .pointer("/spec/template/spec/containers/0/env")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let creds: Vec<&Value> = env
            .iter()
            .filter(|e| {
                let n = str_at(e, "/name").to_ascii_lowercase();
                n.contains("user") || n.contains("pass")
            })
            .collect();
        check(
            !creds.is_empty()
                && creds.iter().all(|e| {
                    e.get("value").is_none()
                        && str_at(e, "/valueFrom/secretKeyRef/name")
                            == format!("{PROVISIONING_HOST}-bmc")
                }),
            || {
                format!(
                    "Job credentials are not secretKeyRefs to {PROVISIONING_HOST}-bmc: {creds:?}"
                )
            },
        )?;
    }
    // The Jobs run the package the function was installed from.
    let f = lab
        .kube
        .get("functions.pkg.crossplane.io", FUNCTION, None)
        .unwrap_or(Value::Null);
    let installed = [
        str_at(&f, "/status/resolvedPackage"),
        str_at(&f, "/spec/package"),
    ]
    .into_iter()
    .find(|s| !s.is_empty())
    .unwrap_or_default()
    .to_string();
    for j in &ours {
        let image = str_at(j, "/spec/template/spec/containers/0/image");
        check(!installed.is_empty() && image == installed, || {
            format!("Job image {image:?} is not the installed package {installed:?}")
        })?;
    }
    println!(
        "  Jobs: {}",
        ours.iter()
            .map(|j| str_at(j, "/metadata/name"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Gone from the inventory again: BMO deprovisions it and lets it go.
    // Each of BMO's state changes is a rate-limited requeue whose delay
    // doubles until a step asks for a delay of its own; the provisioning
    // step does (5 s), so after one the deletion's four steps take
    // milliseconds, where straight after registration they took minutes.
    std::thread::sleep(Duration::from_secs(6));
    lab.kube
        .run(&[
            "delete",
            "-n",
            NS,
            "--wait=false",
            &format!("baremetalhost/{PROVISIONING_HOST}"),
            &format!("hardwaredata/{PROVISIONING_HOST}"),
            &format!("secret/{PROVISIONING_HOST}-bmc"),
        ])
        .map_err(|e| e.to_string())?;
    wait("the demo host deleted by BMO", 60, || {
        get(lab, "baremetalhost", PROVISIONING_HOST).is_none()
    })
}

/// Ironic's virtual media failure, as BMO reports it.
pub(crate) const VMEDIA_ERROR: &str = "Virtual media mount failed: Unable to mount virtual media";

/// Namespace of the hosts that prove the WatchOperation is not bound to
/// the example's namespace.
pub(crate) const RACK_B: &str = "rack-b";

/// Two Dell hosts of another site (namespace rack-b, which the lab's BMO
/// leaves alone while this scenario runs: see `as_another_site`): the
/// scenario sets their status as their own BMO would.
pub(crate) fn rack_b_hosts() -> Vec<Value> {
    let mut docs =
        vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RACK_B}})];
    for (i, name) in ["b1", "b2"].iter().enumerate() {
        docs.push(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-bmc"), "namespace": RACK_B},
            "stringData": {"username": "root", "password": "lab-only"},
        }));
        docs.push(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": RACK_B, "labels": {"metal.kube.farm/pool": "rack-b"}},
            "spec": {
                "online": true,
                "bootMACAddress": format!("18:66:da:00:0b:0{i}"),
                "bmc": {
                    "address": format!("idrac-virtualmedia://192.168.120.{}/redfish/v1/Systems/System.Embedded.1", 40 + i),
                    "credentialsName": format!("{name}-bmc"),
                },
            },
        }));
    }
    docs
}

/// Writes a rack-b host's status: `state`, and an error message with its
/// count.
pub(crate) fn set_host_status(
    lab: &Lab,
    host: &str,
    state: &str,
    error: &str,
    count: u32,
) -> Outcome {
    set_host_status_in(lab, RACK_B, host, state, error, count)
}

/// Hosts outside the example's namespace get their Jobs, two hosts changing
/// at once both get theirs, and a deleted host leaves a succeeded
/// Operation (not a failed one).
pub(crate) fn operation_any_namespace(lab: &Lab) -> Outcome {
    // A kept lab may hold an earlier run's hosts.
    lab.kube
        .run(&[
            "delete",
            "namespace",
            RACK_B,
            "--ignore-not-found",
            "--timeout=180s",
        ])
        .map_err(|e| e.to_string())?;
    lab.kube.apply(&rack_b_hosts()).map_err(|e| e.to_string())?;
    // Both hosts start provisioning at the same moment, then b1's virtual
    // media fails (Ironic's message, as BMO reports it).
    set_host_status(lab, "b1", "provisioning", "", 0)?;
    set_host_status(lab, "b2", "provisioning", "", 0)?;
    let want = ["b1-provis-none", "b2-provis-none", "b1-bmcreset-1"];
    let jobs = |lab: &Lab| -> Vec<String> {
        lab.kube
            .list("jobs.batch", Some(RACK_B))
            .iter()
            .map(|j| str_at(j, "/metadata/name").to_string())
            .collect()
    };
    let expect = |lab: &Lab, what: &str, want: &[&str]| -> Outcome {
        wait(what, 60, || {
            let have = jobs(lab);
            want.iter().all(|w| have.iter().any(|h| h == w))
        })
        .map_err(|e| {
            format!(
                "{e}; Jobs in {RACK_B}: {:?}; operations: {:?}",
                jobs(lab),
                operation_outputs(lab)
            )
        })
    };
    expect(lab, "boot-order Jobs for b1 and b2", &want[..2])?;
    set_host_status(lab, "b1", "provisioning", VMEDIA_ERROR, 1)?;
    expect(lab, "the iDRAC reset Job for b1", &want)?;
    // The reset is recorded on the host: its Job expiring (TTL) refills
    // nothing, and BMO's next retry right after is paced, not reset again.
    let record = |lab: &Lab| {
        lab.kube
            .get("baremetalhost", "b1", Some(RACK_B))
            .and_then(|h| {
                h.pointer("/metadata/annotations/metal.kube.farm~1bmc-resets")
                    .and_then(Value::as_str)
                    .and_then(|r| serde_json::from_str::<Value>(r).ok())
            })
            .unwrap_or(Value::Null)
    };
    wait("b1's reset recorded on the host", 30, || {
        record(lab)["count"] == 1
    })
    .map_err(|e| format!("{e}; b1 record: {}", record(lab)))?;
    lab.kube
        .run(&["delete", "job", "b1-bmcreset-1", "-n", RACK_B])
        .map_err(|e| e.to_string())?;
    set_host_status(lab, "b1", "provisioning", VMEDIA_ERROR, 2)?;
    let paced = |o: &Value| {
        o.pointer("/status/pipeline/0/output/reason")
            .and_then(Value::as_str)
            .is_some_and(|r| r.contains("after the last iDRAC reset"))
    };
    wait("an Operation pacing b1's second failure", 30, || {
        operations(lab).iter().any(paced)
    })
    .map_err(|e| format!("{e}; operations: {:?}", operation_outputs(lab)))?;
    check(!jobs(lab).iter().any(|j| j == "b1-bmcreset-2"), || {
        format!("a second reset while the iDRAC restarts: {:?}", jobs(lab))
    })?;
    println!("  Jobs in {RACK_B}: {}", jobs(lab).join(", "));
    lab.kube
        .run(&[
            "delete",
            "baremetalhost",
            "b2",
            "-n",
            RACK_B,
            "--wait=true",
            "--timeout=120s",
        ])
        .map_err(|e| e.to_string())?;
    let gone_ok = |o: &Value| {
        condition(o, "Succeeded").as_deref() == Some("True")
            && o.pointer("/status/pipeline/0/output/reason")
                .and_then(Value::as_str)
                .is_some_and(|r| r.contains("no longer exists"))
    };
    let failed = |lab: &Lab| {
        operations(lab)
            .iter()
            .filter(|o| condition(o, "Succeeded").as_deref() == Some("False"))
            .map(|o| str_at(o, "/metadata/name").to_string())
            .collect::<Vec<_>>()
    };
    let waited = wait("a succeeded Operation for the deleted host b2", 60, || {
        operations(lab).iter().any(gone_ok)
    });
    if let Err(e) = waited {
        return Err(format!("{e}; operations: {:?}", operation_outputs(lab)));
    }
    let f = failed(lab);
    check(f.is_empty(), || format!("failed Operations: {f:?}"))?;
    lab.kube
        .run(&[
            "delete",
            "namespace",
            RACK_B,
            "--wait=true",
            "--timeout=180s",
        ])
        .map_err(|e| e.to_string())?;
    Ok(())
}
