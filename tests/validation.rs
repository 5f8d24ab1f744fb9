//! Each validation rule, with an input that breaks it: a Fatal result that
//! names the field and the value, and nothing composed is dropped.

mod common;

use std::collections::BTreeMap;

use common::*;
use function_sdk_rust::proto::v1::{Resource, State};
use function_sdk_rust::resource::json_to_struct;
use metalplane::compose::compose;
use serde_json::{Value, json};

/// (field to set, bad value, text the message must contain besides the path)
fn cases() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        // required fields
        ("spec.host.pool", Value::Null, "is required"),
        ("spec.host.bootInterface", Value::Null, "is required"),
        ("spec.network.nodeIP", Value::Null, "is required"),
        ("spec.network.prefix", Value::Null, "is required"),
        ("spec.network.gateway", Value::Null, "is required"),
        ("spec.network.dnsServer", Value::Null, "is required"),
        ("spec.kubernetes.version", Value::Null, "is required"),
        ("spec.kubernetes.imageURL", Value::Null, "is required"),
        (
            "spec.kubernetes.imageChecksum",
            Value::Null,
            "is required unless",
        ),
        ("spec.gpu.driverInstallerURL", Value::Null, "is required"),
        ("spec.host.pool", json!(""), "must not be empty"),
        // IPs
        (
            "spec.network.nodeIP",
            json!("192.168.120.700"),
            "IPv4 address",
        ),
        ("spec.network.nodeIP", json!("fd00::70"), "IPv6"),
        ("spec.network.nodeIP", json!("127.0.0.1"), "loopback"),
        (
            "spec.network.nodeIP",
            json!("192.168.120.0"),
            "network or broadcast",
        ),
        ("spec.network.gateway", json!("gw"), "IPv4 address"),
        ("spec.network.dnsServer", json!(8), "must be a string"),
        // prefix 1-32
        ("spec.network.prefix", json!(0), "between 1 and 32"),
        ("spec.network.prefix", json!(33), "between 1 and 32"),
        ("spec.network.prefix", json!("24"), "must be an integer"),
        // reachability
        (
            "spec.network.gateway",
            json!("192.168.121.1"),
            "inside the node subnet 192.168.120.0/24",
        ),
        (
            "spec.network.gateway",
            json!("192.168.120.70"),
            "node's own address",
        ),
        (
            "spec.network.gateway",
            json!("192.168.120.255"),
            "network or broadcast",
        ),
        (
            "spec.network.dnsServer",
            json!("10.96.0.10"),
            "pod or service CIDR",
        ),
        (
            "spec.network.dnsServer",
            json!("192.168.120.70"),
            "node itself",
        ),
        ("spec.network.dnsServer", json!("0.0.0.0"), "unspecified"),
        ("spec.network.dnsServer", json!("169.254.1.1"), "link-local"),
        // CIDRs
        ("spec.network.podCIDR", json!("10.244.0.0/33"), "IPv4 CIDR"),
        (
            "spec.network.podCIDR",
            json!("10.244.0.1/16"),
            "did you mean 10.244.0.0/16",
        ),
        (
            "spec.network.podCIDR",
            json!("10.96.0.0/16"),
            "overlaps spec.network.serviceCIDR",
        ),
        (
            "spec.network.podCIDR",
            json!("192.168.0.0/16"),
            "overlaps spec.network.nodeIP/prefix",
        ),
        (
            "spec.network.serviceCIDR",
            json!("192.168.120.0/26"),
            "overlaps spec.network.nodeIP/prefix",
        ),
        (
            "spec.network.serviceCIDR",
            json!("10.0.0.0/8"),
            "at most a /12",
        ),
        (
            "spec.network.podCIDR",
            json!("10.244.0.0/25"),
            "/24 or larger",
        ),
        // versions
        ("spec.kubernetes.version", json!("1.34.1"), "vX.Y.Z"),
        ("spec.kubernetes.version", json!("v1.34"), "vX.Y.Z"),
        (
            "spec.kubernetes.version",
            json!("v1.34.1; reboot"),
            "vX.Y.Z",
        ),
        ("spec.cni.ciliumVersion", json!("latest"), "chart version"),
        // checksums
        (
            "spec.kubernetes.imageChecksum",
            json!("abc123"),
            "64 hex characters",
        ),
        (
            "spec.kubernetes.imageChecksumType",
            json!("crc32"),
            "one of md5, sha256, sha512",
        ),
        (
            "spec.gpu.driverInstallerChecksum",
            json!("z".repeat(64)),
            "64 hex characters",
        ),
        (
            "spec.gpu.driverInstallerChecksum",
            json!("abcd"),
            "64 hex characters",
        ),
        // disk format
        (
            "spec.kubernetes.imageDiskFormat",
            json!("iso"),
            "one of raw, qcow2, vdi, vmdk, live-iso",
        ),
        // URLs
        (
            "spec.gpu.driverInstallerURL",
            json!("http://lan/nvidia.run;reboot"),
            "shell metacharacters",
        ),
        (
            "spec.gpu.driverInstallerURL",
            json!("http://lan/$(id).run"),
            "shell metacharacters",
        ),
        (
            "spec.gpu.driverInstallerURL",
            json!("http://lan/a'b.run"),
            "shell metacharacters",
        ),
        (
            "spec.gpu.driverInstallerURL",
            json!("http://lan/a b.run"),
            "shell metacharacters",
        ),
        (
            "spec.gpu.driverInstallerURL",
            json!("ftp://lan/nvidia.run"),
            "http or https",
        ),
        ("spec.gpu.driverInstallerURL", json!("http://"), "URL"),
        (
            "spec.kubernetes.imageURL",
            json!("file:///images/a.qcow2"),
            "http or https or oci",
        ),
        (
            "spec.kubernetes.imageURL",
            json!("http://img/`id`.qcow2"),
            "shell metacharacters",
        ),
        // labels
        ("spec.host.pool", json!("gpu pool"), "valid label value"),
        ("spec.host.pool", json!("-gpu"), "valid label value"),
        ("spec.host.pool", json!("a".repeat(64)), "valid label value"),
        (
            "spec.kubernetes.nodeLabels",
            json!({"gpu/model": "tesla v100"}),
            "value must be a valid label value",
        ),
        (
            "spec.kubernetes.nodeLabels",
            json!({"bad key!": "x"}),
            "key must be a qualified name",
        ),
        (
            "spec.kubernetes.nodeLabels",
            json!({"UPPER.example/x": "x"}),
            "DNS subdomain",
        ),
        (
            "spec.kubernetes.nodeLabels",
            json!({"node-role.kubernetes.io/gpu": ""}),
            "reserved",
        ),
        (
            "spec.kubernetes.nodeLabels",
            json!({"metal3.io/uuid": "x"}),
            "set by MetalPlane",
        ),
        (
            "spec.kubernetes.nodeLabels",
            json!({"a": 1}),
            "must be a string",
        ),
        // interface
        (
            "spec.host.bootInterface",
            json!("eno1;reboot"),
            "interface name",
        ),
        (
            "spec.host.bootInterface",
            json!("averyveryverylongname0"),
            "interface name",
        ),
        ("spec.host.bootInterface", json!("1eno"), "interface name"),
        // access
        ("spec.access.username", json!("root"), "must not be root"),
        ("spec.access.username", json!("Bad User"), "Linux user name"),
        (
            "spec.access.sshAuthorizedKeys",
            json!(["not-a-key"]),
            "public key type",
        ),
        (
            "spec.access.sshAuthorizedKeys",
            json!(["ssh-ed25519 AAAA\nssh-rsa B"]),
            "single line",
        ),
        (
            "spec.access.sshAuthorizedKeys",
            json!("ssh-ed25519 AAAA"),
            "list of strings",
        ),
        // user-data is a Jinja template (CABPK): no Jinja in values
        (
            "spec.access.sshAuthorizedKeys",
            json!(["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq8m2wK3bVd3v1wE2xYz4Qh ops {{ lab }}"]),
            "Jinja",
        ),
        (
            "spec.access.sshAuthorizedKeys",
            json!(["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq8m2wK3bVd3v1wE2xYz4Qh {% if %}"]),
            "Jinja",
        ),
        ("spec.gpu.model", json!("NVIDIA {{ H200 }}"), "Jinja"),
        // GPU driver setup
        ("spec.gpu.driverSetup", json!("Download"), "Preinstalled"),
        // shapes
        (
            "spec.network",
            json!("192.168.120.70/24"),
            "must be an object",
        ),
        ("spec.gpu", json!(true), "must be an object"),
    ]
}

fn path_in_message(path: &str) -> String {
    // nodeLabels errors name the entry: spec.kubernetes.nodeLabels["key"].
    path.to_string()
}

#[test]
fn every_rule_refuses_its_bad_input_by_name() {
    for (path, bad, expect) in cases() {
        let mut xr = example_xr();
        set_path(&mut xr, path, bad.clone());
        let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&[])));
        let msg = fatal(&rsp).unwrap_or_else(|| panic!("{path}={bad} was accepted"));
        assert!(
            msg.contains(&path_in_message(path)),
            "{path}={bad}: message does not name the field: {msg}"
        );
        assert!(
            msg.contains(expect),
            "{path}={bad}: message lacks {expect:?}: {msg}"
        );
        if let Some(s) = bad.as_str()
            && !s.is_empty()
            && s.len() < 100
        {
            assert!(
                msg.contains(s) || msg.contains(&Value::String(s.into()).to_string()),
                "{path}: message does not show the value {s:?}: {msg}"
            );
        }
        assert!(
            desired(&rsp).is_empty(),
            "{path}: composed despite the Fatal"
        );
    }
}

#[test]
fn names_that_would_exceed_63_characters_are_refused() {
    let mut xr = example_xr();
    let long = "a".repeat(34);
    xr["metadata"]["name"] = json!(long);
    let msg = fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))).expect("refused");
    assert!(
        msg.contains("metadata.name") && msg.contains("at most 33 characters"),
        "{msg}"
    );

    xr["metadata"]["name"] = json!("a".repeat(33));
    assert_eq!(
        fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))),
        None
    );

    xr["metadata"]["name"] = json!("r730.lab");
    let msg = fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))).expect("refused");
    assert!(msg.contains("DNS label"), "{msg}");
}

#[test]
fn node_labels_longer_than_one_kubelet_argument_are_refused() {
    let mut xr = example_xr();
    let labels: serde_json::Map<String, Value> = (0..40)
        .map(|i| (format!("example.com/label-{i:02}"), json!("v".repeat(20))))
        .collect();
    xr["spec"]["kubernetes"]["nodeLabels"] = Value::Object(labels);
    let msg = fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))).expect("refused");
    assert!(
        msg.contains("spec.kubernetes.nodeLabels") && msg.contains("at most 1024"),
        "{msg}"
    );
}

#[test]
fn all_problems_are_reported_at_once() {
    let mut xr = example_xr();
    set_path(&mut xr, "spec.network.prefix", json!(40));
    set_path(&mut xr, "spec.kubernetes.version", json!("latest"));
    set_path(&mut xr, "spec.host.bootInterface", json!("$(reboot)"));
    let msg = fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))).expect("refused");
    for p in [
        "spec.network.prefix 40",
        "spec.kubernetes.version \"latest\"",
        "spec.host.bootInterface \"$(reboot)\"",
    ] {
        assert!(msg.contains(p), "missing {p} in {msg}");
    }
    assert!(
        msg.starts_with("invalid MetalCluster metal/r730: "),
        "{msg}"
    );
}

/// A Fatal stops the pipeline and Crossplane applies nothing; the response
/// still carries every previously desired resource forward unchanged.
#[test]
fn a_fatal_keeps_what_was_desired() {
    let good = compose(&request(&example_xr(), &BTreeMap::new(), Some(&[])));
    let mut xr = example_xr();
    set_path(&mut xr, "spec.network.gateway", json!("10.0.0.1"));
    let mut req = request(&xr, &BTreeMap::new(), Some(&[]));
    let prior = good.desired.clone().expect("desired");
    req.desired = Some(prior.clone());
    let rsp = compose(&req);
    assert!(fatal(&rsp).is_some());
    assert_eq!(rsp.desired, Some(prior));
}

#[test]
fn missing_spec_or_wrong_types_never_panic() {
    for xr in [
        json!({}),
        json!({"metadata": {"name": "r730"}}),
        json!({"metadata": {"name": "r730"}, "spec": null}),
        json!({"metadata": {"name": "r730"}, "spec": []}),
        json!({"metadata": {"name": 7}, "spec": {"host": "x", "network": 1, "kubernetes": []}}),
    ] {
        let rsp = compose(&request(&xr, &BTreeMap::new(), None));
        assert!(fatal(&rsp).is_some(), "{xr}");
    }
    let empty = function_sdk_rust::proto::v1::RunFunctionRequest::default();
    assert!(
        fatal(&compose(&empty))
            .expect("fatal")
            .contains("no observed composite")
    );
    let mut no_xr = request(&example_xr(), &BTreeMap::new(), None);
    no_xr.observed = Some(State {
        composite: Some(Resource {
            resource: Some(json_to_struct(&serde_json::Map::new())),
            ..Default::default()
        }),
        ..Default::default()
    });
    assert!(fatal(&compose(&no_xr)).is_some());
}

#[test]
fn values_reaching_the_shell_are_quoted() {
    let rsp = compose(&request(&example_xr(), &BTreeMap::new(), Some(&[])));
    let kcp = &desired(&rsp)["kubeadmcontrolplane"];
    let cmds: Vec<&str> = kcp["spec"]["kubeadmConfigSpec"]["preKubeadmCommands"]
        .as_array()
        .expect("commands")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let url = example_xr()["spec"]["gpu"]["driverInstallerURL"]
        .as_str()
        .expect("url")
        .to_string();
    let download = cmds
        .iter()
        .find(|c| c.contains("curl"))
        .expect("download command");
    // shlex leaves a string of only safe characters bare and single-quotes
    // anything else; either way sh reads it back as exactly the URL.
    let words = shlex::split(download).expect("parses as sh words");
    assert!(words.contains(&url), "{download}");
    let sum = example_xr()["spec"]["gpu"]["driverInstallerChecksum"]
        .as_str()
        .expect("sum")
        .to_string();
    let verify = cmds
        .iter()
        .position(|c| c.contains("sha256sum -c"))
        .expect("verify step");
    let run = cmds
        .iter()
        .position(|c| c.contains("--silent"))
        .expect("run step");
    let dl = cmds
        .iter()
        .position(|c| c.contains("curl"))
        .expect("download");
    assert!(
        dl < verify && verify < run,
        "download, verify, then run: {cmds:?}"
    );
    assert!(cmds[verify].contains(&sum) && cmds[verify].contains("exit 1"));
    for c in &cmds {
        assert!(c.len() <= metalplane::builders::bootstrap::MAX_COMMAND);
    }
}

#[test]
fn quoting_is_a_second_line_of_defence() {
    use metalplane::builders::driver::sh_quote;
    for hostile in ["a'b", "$(reboot)", "`id`", "a b; rm -rf /", "\"x\""] {
        let q = sh_quote(hostile);
        assert_eq!(
            shlex::split(&q),
            Some(vec![hostile.to_string()]),
            "{hostile} -> {q}"
        );
    }
}

#[test]
fn missing_driver_checksum_renders_with_one_warning() {
    let mut xr = example_xr();
    set_path(&mut xr, "spec.gpu.driverInstallerChecksum", Value::Null);
    let rsp = compose(&request(
        &xr,
        &BTreeMap::new(),
        Some(&[host("r730", "available", None, false)]),
    ));
    assert_eq!(fatal(&rsp), None);
    let w = warnings(&rsp);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("spec.gpu.driverInstallerChecksum"));
    let kcp = &desired(&rsp)["kubeadmcontrolplane"];
    let cmds = kcp["spec"]["kubeadmConfigSpec"]["preKubeadmCommands"].to_string();
    assert!(
        !cmds.contains("sha256sum"),
        "no verification step without a checksum"
    );
    assert!(cmds.contains("--silent"));
}

/// The spec is read into the API's types; problems of shape (wrong types,
/// missing fields) anywhere in it are reported together, by path.
#[test]
fn shape_problems_are_reported_at_once() {
    let mut xr = example_xr();
    set_path(&mut xr, "spec.network.prefix", json!("24"));
    set_path(&mut xr, "spec.host.pool", Value::Null);
    set_path(&mut xr, "spec.kubernetes.imageDiskFormat", json!("iso"));
    set_path(&mut xr, "spec.access.sshAuthorizedKeys", json!(["ok", 7]));
    let msg = fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))).expect("refused");
    for p in [
        "spec.network.prefix \"24\": must be an integer",
        "spec.host.pool: is required",
        "spec.kubernetes.imageDiskFormat \"iso\": must be one of raw, qcow2, vdi, vmdk, live-iso",
        "spec.access.sshAuthorizedKeys[1] 7: must be a string",
    ] {
        assert!(msg.contains(p), "missing {p} in {msg}");
    }
}
