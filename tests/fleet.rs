//! The fleet form: a control plane behind a virtual IP and worker pools.
//! Every validation rule with an input that breaks it (named by its path
//! with index), the objects per pool, host protection and status.

mod common;

use std::collections::BTreeMap;

use common::*;
use metalplane::compose::compose;
use metalplane::render;
use serde_json::{Value, json};

fn fleet_xr() -> Value {
    load_yaml(&repo_root().join("examples/metalcluster/fleet.yaml"))[0].clone()
}

/// Sets (or with Null removes) the value at a JSON pointer.
fn set(v: &mut Value, ptr: &str, new: Value) {
    let (parent, key) = ptr.rsplit_once('/').expect("pointer");
    let p = v.pointer_mut(parent).expect("parent exists");
    match (p, new) {
        (Value::Object(m), Value::Null) => {
            m.remove(key);
        }
        (Value::Object(m), n) => {
            m.insert(key.into(), n);
        }
        (Value::Array(a), n) => a[key.parse::<usize>().expect("index")] = n,
        _ => panic!("{ptr}: parent is neither object nor list"),
    }
}

/// (pointer to set, bad value, path the message names, text it must contain)
fn cases() -> Vec<(&'static str, Value, &'static str, &'static str)> {
    vec![
        (
            "/spec/controlPlane/replicas",
            json!(2),
            "spec.controlPlane.replicas",
            "must be 1, 3 or 5",
        ),
        (
            "/spec/controlPlane/replicas",
            json!(4),
            "spec.controlPlane.replicas",
            "must be 1, 3 or 5",
        ),
        (
            "/spec/controlPlane/endpoint",
            Value::Null,
            "spec.controlPlane.endpoint",
            "is required unless there is one replica",
        ),
        (
            "/spec/controlPlane/endpoint",
            json!("10.40.8.22"),
            "spec.controlPlane.endpoint",
            "is inside spec.controlPlane.addresses",
        ),
        (
            "/spec/controlPlane/endpoint",
            json!("10.40.8.31"),
            "spec.controlPlane.endpoint",
            "is inside spec.workers[0].addresses",
        ),
        (
            "/spec/controlPlane/endpoint",
            json!("10.41.0.5"),
            "spec.controlPlane.endpoint",
            "inside the node subnet 10.40.8.0/24",
        ),
        (
            "/spec/controlPlane/endpoint",
            json!("10.40.8.1"),
            "spec.controlPlane.endpoint",
            "is spec.network.gateway",
        ),
        (
            "/spec/controlPlane/endpoint",
            json!("10.40.8.205"),
            "spec.controlPlane.endpoint",
            "spec.network.loadBalancer",
        ),
        (
            "/spec/controlPlane/endpoint",
            json!("10.40.8.255"),
            "spec.controlPlane.endpoint",
            "broadcast",
        ),
        (
            "/spec/controlPlane/endpoint",
            json!("vip"),
            "spec.controlPlane.endpoint",
            "IPv4",
        ),
        (
            "/spec/controlPlane/addresses",
            json!("10.40.8.21-10.40.8.22"),
            "spec.controlPlane.addresses",
            "fewer than the 3 replicas",
        ),
        (
            "/spec/controlPlane/addresses",
            json!("10.40.9.21-10.40.9.24"),
            "spec.controlPlane.addresses",
            "inside the node subnet",
        ),
        (
            "/spec/controlPlane/addresses",
            json!("10.40.8.1-10.40.8.5"),
            "spec.controlPlane.addresses",
            "includes spec.network.gateway",
        ),
        (
            "/spec/controlPlane/addresses",
            json!("10.40.8.0-10.40.8.5"),
            "spec.controlPlane.addresses",
            "network or broadcast",
        ),
        (
            "/spec/controlPlane/addresses",
            json!("10.40.8.24-10.40.8.21"),
            "spec.controlPlane.addresses",
            "empty range",
        ),
        (
            "/spec/controlPlane/addresses",
            json!("10.40.8.21"),
            "spec.controlPlane.addresses",
            "FIRST-LAST",
        ),
        (
            "/spec/controlPlane/addresses",
            Value::Null,
            "spec.controlPlane.addresses",
            "is required",
        ),
        (
            "/spec/controlPlane/kubeVipImage",
            json!("kube-vip; reboot"),
            "spec.controlPlane.kubeVipImage",
            "container image reference",
        ),
        (
            "/spec/network/nodeIP",
            json!("10.40.8.50"),
            "spec.network.nodeIP",
            "is for a single node",
        ),
        (
            "/spec/workers/1/addresses",
            json!("10.40.8.35-10.40.8.44"),
            "spec.workers[1].addresses",
            "overlaps spec.workers[0].addresses",
        ),
        (
            "/spec/workers/0/addresses",
            json!("10.40.8.24-10.40.8.31"),
            "spec.workers[0].addresses",
            "overlaps spec.controlPlane.addresses",
        ),
        (
            "/spec/workers/0/addresses",
            json!("10.40.8.30-10.40.8.30"),
            "spec.workers[0].addresses",
            "fewer than the 2 replicas",
        ),
        (
            "/spec/workers/0/addresses",
            json!("10.40.8.195-10.40.8.201"),
            "spec.workers[0].addresses",
            "overlaps spec.network.loadBalancer",
        ),
        (
            "/spec/workers/1/addresses",
            json!("10.40.7.40-10.40.7.44"),
            "spec.workers[1].addresses",
            "inside the node subnet",
        ),
        (
            "/spec/workers/1/addresses",
            json!("10.40.8.240-10.40.8.255"),
            "spec.workers[1].addresses",
            "network or broadcast",
        ),
        (
            "/spec/workers/1/name",
            json!("gpu"),
            "spec.workers[1].name",
            "pool names are unique",
        ),
        (
            "/spec/workers/0/name",
            json!("GPU_1"),
            "spec.workers[0].name",
            "DNS label",
        ),
        (
            "/spec/workers/0/name",
            json!("a-very-long-pool-name"),
            "spec.workers[0].name",
            "at most 20 characters",
        ),
        (
            "/spec/workers/0/replicas",
            json!(101),
            "spec.workers[0].replicas",
            "between 0 and 100",
        ),
        (
            "/spec/workers/0/replicas",
            json!(-1),
            "spec.workers[0].replicas",
            "between 0 and 100",
        ),
        (
            "/spec/workers/0/pool",
            json!(""),
            "spec.workers[0].pool",
            "must not be empty",
        ),
        (
            "/spec/workers/0/pool",
            Value::Null,
            "spec.workers[0].pool",
            "is required",
        ),
        (
            "/spec/workers/0/bootInterface",
            json!("$(reboot)"),
            "spec.workers[0].bootInterface",
            "$(reboot)",
        ),
        (
            "/spec/workers/0/gpu/driverInstallerURL",
            json!("ftp://x/n.run"),
            "spec.workers[0].gpu.driverInstallerURL",
            "ftp://x/n.run",
        ),
        (
            "/spec/workers/0/gpu/count",
            json!(0),
            "spec.workers[0].gpu.count",
            "between 1 and 64",
        ),
        (
            "/spec/workers/0/nodeLabels",
            json!({"kubernetes.io/role": "x"}),
            "spec.workers[0].nodeLabels[\"kubernetes.io/role\"]",
            "key",
        ),
        // 3 control plane machines and 3 workers: a /22 holds 4 node /24s.
        (
            "/spec/network/podCIDR",
            json!("10.244.0.0/22"),
            "spec.network.podCIDR",
            "fewer than the 6 nodes the spec can run at once (3 control plane + 3 in spec.workers); use a /21 or larger",
        ),
        (
            "/spec/workers/0/gpu/model",
            json!("NVIDIA {% H200"),
            "spec.workers[0].gpu.model",
            "Jinja template",
        ),
        (
            "/spec/workers/0/gpu/driverSetup",
            json!("Preinstalled"),
            "spec.workers[0].gpu.driverInstallerURL",
            "is not used with driverSetup Preinstalled",
        ),
        (
            "/spec/workers/1",
            json!("cpu"),
            "spec.workers[1]",
            "must be an object",
        ),
        (
            "/spec/workers",
            json!({"name": "gpu"}),
            "spec.workers",
            "must be a list",
        ),
    ]
}

#[test]
fn every_fleet_rule_refuses_its_bad_input_by_indexed_path() {
    assert_eq!(
        fatal(&compose(&request(&fleet_xr(), &BTreeMap::new(), Some(&[])))),
        None,
        "the example is valid"
    );
    for (ptr, bad, path, expect) in cases() {
        let mut xr = fleet_xr();
        set(&mut xr, ptr, bad.clone());
        let rsp = compose(&request(&xr, &BTreeMap::new(), Some(&[])));
        let msg = fatal(&rsp).unwrap_or_else(|| panic!("{ptr}={bad} was accepted"));
        assert!(
            msg.contains(&format!("{path} ")) || msg.contains(&format!("{path}:")),
            "{ptr}={bad}: does not name {path}: {msg}"
        );
        assert!(msg.contains(expect), "{ptr}={bad}: lacks {expect:?}: {msg}");
        assert!(
            desired(&rsp).is_empty(),
            "{ptr}: composed despite the Fatal"
        );
    }
}

#[test]
fn all_fleet_problems_are_reported_at_once() {
    let mut xr = fleet_xr();
    set(&mut xr, "/spec/controlPlane/replicas", json!(2));
    set(&mut xr, "/spec/workers/1/name", json!("gpu"));
    set(
        &mut xr,
        "/spec/workers/0/addresses",
        json!("10.40.8.30-10.40.8.30"),
    );
    let msg = fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))).expect("refused");
    for p in [
        "spec.controlPlane.replicas 2",
        "spec.workers[1].name \"gpu\"",
        "spec.workers[0].addresses",
    ] {
        assert!(msg.contains(p), "missing {p} in {msg}");
    }
}

#[test]
fn derived_machine_names_fit_63_characters() {
    let mut xr = fleet_xr();
    xr["metadata"]["name"] = json!("a".repeat(30));
    set(&mut xr, "/spec/workers/0/name", json!("b".repeat(20)));
    let msg = fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))).expect("refused");
    assert!(
        msg.contains("spec.workers") && msg.contains("at most 63"),
        "{msg}"
    );
    set(&mut xr, "/spec/workers/0/name", json!("b".repeat(9)));
    assert_eq!(
        fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))),
        None
    );
}

/// One replica with a one-address range needs no VIP: the address answers.
#[test]
fn one_replica_on_one_address_needs_no_virtual_ip() {
    let mut xr = fleet_xr();
    set(
        &mut xr,
        "/spec/controlPlane",
        json!({"replicas": 1, "addresses": "10.40.8.21-10.40.8.21"}),
    );
    let d = desired(&compose(&request(&xr, &BTreeMap::new(), Some(&[]))));
    assert_eq!(
        d["metal3cluster"]["spec"]["controlPlaneEndpoint"]["host"],
        "10.40.8.21"
    );
    assert!(
        d["kubeadmcontrolplane"]["spec"]["kubeadmConfigSpec"]
            .get("files")
            .is_none()
    );
}

#[test]
fn control_plane_behind_a_virtual_ip() {
    let d = desired(&compose(&request(&fleet_xr(), &BTreeMap::new(), Some(&[]))));
    let kcp = &d["kubeadmcontrolplane"]["spec"];
    assert_eq!(kcp["replicas"], 3);
    assert_eq!(kcp["rollout"]["strategy"]["rollingUpdate"]["maxSurge"], 0);
    assert_eq!(
        d["metal3cluster"]["spec"]["controlPlaneEndpoint"]["host"],
        "10.40.8.20"
    );
    assert_eq!(
        d["ippool"]["spec"]["pools"],
        json!([{"start": "10.40.8.21", "end": "10.40.8.26"}])
    );
    // With workers the control plane keeps kubeadm's taint.
    let cfg = &kcp["kubeadmConfigSpec"];
    assert!(
        cfg["initConfiguration"]["nodeRegistration"]
            .get("taints")
            .is_none()
    );
    // kube-vip: the static Pod names the VIP, the boot NIC and the image.
    let files = cfg["files"].as_array().expect("files");
    // The hosts file first: cloud-init writes files in order, all before
    // kubeadm, and the static Pod mounts it as its /etc/hosts.
    assert_eq!(files[0]["path"], "/etc/kube-vip.hosts");
    assert_eq!(files[0]["content"], "127.0.0.1 localhost kubernetes\n");
    let file = &files[1];
    assert_eq!(file["path"], "/etc/kubernetes/manifests/kube-vip.yaml");
    let pod: Value =
        serde_json::from_str(file["content"].as_str().expect("content")).expect("JSON manifest");
    let env: BTreeMap<String, Value> = pod["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                e.get("value").cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    assert_eq!(env["address"], "10.40.8.20");
    assert_eq!(env["vip_interface"], "eno1");
    assert_eq!(env["vip_arp"], "true");
    assert_eq!(env["cp_enable"], "true");
    // CAPV's tested leader election timers, not 5/3/1.
    assert_eq!(
        (
            &env["vip_leaseduration"],
            &env["vip_renewdeadline"],
            &env["vip_retryperiod"]
        ),
        (&json!("15"), &json!("10"), &json!("2"))
    );
    // No hostAliases: kubelets before kubernetes#119852 ignore them in
    // static Pods; the hosts file is mounted instead.
    assert!(pod["spec"].get("hostAliases").is_none());
    assert_eq!(
        pod["spec"]["containers"][0]["volumeMounts"][1],
        json!({"name": "etchosts", "mountPath": "/etc/hosts", "readOnly": true})
    );
    assert_eq!(
        pod["spec"]["volumes"][1],
        json!({"name": "etchosts", "hostPath": {"path": "/etc/kube-vip.hosts", "type": "File"}})
    );
    assert_eq!(
        pod["spec"]["containers"][0]["image"],
        "ghcr.io/kube-vip/kube-vip:v1.0.0"
    );
    // The first-boot command points only the hostPath at super-admin.conf.
    let cmds = cfg["preKubeadmCommands"].as_array().expect("commands");
    assert_eq!(cmds.len(), 1, "no GPU on the control plane: {cmds:?}");
}

/// The super-admin switch, run as the node runs it, on the manifest as
/// written: only the hostPath changes, and only on the init node.
#[test]
fn kube_vip_uses_super_admin_conf_on_the_init_node_only() {
    let d = desired(&compose(&request(&fleet_xr(), &BTreeMap::new(), Some(&[]))));
    let cfg = &d["kubeadmcontrolplane"]["spec"]["kubeadmConfigSpec"];
    let content = cfg["files"][1]["content"]
        .as_str()
        .expect("content")
        .to_string();
    let cmd = cfg["preKubeadmCommands"][0]
        .as_str()
        .expect("command")
        .to_string();
    for (init, join) in [(true, false), (false, true)] {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path();
        std::fs::create_dir_all(root.join("run/kubeadm")).expect("dir");
        std::fs::create_dir_all(root.join("etc/kubernetes/manifests")).expect("dir");
        std::fs::write(
            root.join("etc/kubernetes/manifests/kube-vip.yaml"),
            &content,
        )
        .expect("write");
        if init {
            std::fs::write(root.join("run/kubeadm/kubeadm.yaml"), "").expect("write");
        }
        if join {
            std::fs::write(root.join("run/kubeadm/kubeadm.yaml"), "").expect("write");
            std::fs::write(root.join("run/kubeadm/kubeadm-join-config.yaml"), "").expect("write");
        }
        let local = cmd
            .replace("/run/", &format!("{}/run/", root.display()))
            .replace(
                " /etc/kubernetes/manifests",
                &format!(" {}/etc/kubernetes/manifests", root.display()),
            );
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg(&local)
            .status()
            .expect("sh");
        assert!(st.success());
        let after: Value = serde_json::from_str(
            &std::fs::read_to_string(root.join("etc/kubernetes/manifests/kube-vip.yaml"))
                .expect("read"),
        )
        .expect("still JSON");
        let host_path = &after["spec"]["volumes"][0]["hostPath"]["path"];
        let mount = &after["spec"]["containers"][0]["volumeMounts"][0]["mountPath"];
        assert_eq!(
            mount, "/etc/kubernetes/admin.conf",
            "kube-vip reads the same path"
        );
        if init {
            assert_eq!(host_path, "/etc/kubernetes/super-admin.conf");
        } else {
            assert_eq!(host_path, "/etc/kubernetes/admin.conf");
        }
    }
}

#[test]
fn each_worker_pool_gets_its_machines() {
    let d = desired(&compose(&request(&fleet_xr(), &BTreeMap::new(), Some(&[]))));
    let md = &d["worker-gpu"];
    assert_eq!(md["kind"], "MachineDeployment");
    assert_eq!(md["metadata"]["name"], "rack1-cluster-gpu");
    assert_eq!(md["spec"]["replicas"], 2);
    assert_eq!(
        md["spec"]["rollout"]["strategy"]["rollingUpdate"]["maxSurge"],
        0
    );
    assert_eq!(md["spec"]["template"]["spec"]["version"], "v1.34.1");
    assert_eq!(d["worker-cpu"]["spec"]["replicas"], 1);
    // Host selector, NIC and range per pool.
    assert_eq!(
        template(&d, "worker-gpu.machinetemplate")["spec"]["template"]["spec"]["hostSelector"]["matchLabels"]
            ["metal.kube.farm/pool"],
        "sm-4029-w"
    );
    assert_eq!(
        template(&d, "worker-gpu.datatemplate")["spec"]["networkData"]["links"]["ethernets"][0]["id"],
        "eno1np0"
    );
    assert_eq!(
        template(&d, "worker-cpu.datatemplate")["spec"]["networkData"]["links"]["ethernets"][0]["id"],
        "eno1",
        "defaults to spec.host.bootInterface"
    );
    assert_eq!(
        d["worker-gpu.ippool"]["spec"]["pools"],
        json!([{"start": "10.40.8.30", "end": "10.40.8.39"}])
    );
    // Only the gpu pool installs the driver; labels merge, pool label set.
    let gpu_cfg = &template(&d, "worker-gpu.config")["spec"]["template"]["spec"];
    assert!(
        gpu_cfg["preKubeadmCommands"]
            .to_string()
            .contains("NVIDIA-Linux-x86_64-580.95.05.run")
    );
    assert!(
        template(&d, "worker-cpu.config")["spec"]["template"]["spec"]
            .get("preKubeadmCommands")
            .is_none()
    );
    let labels = gpu_cfg["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"][0]["value"]
        .as_str()
        .expect("labels");
    assert!(
        labels.contains("gpu.kube.farm/model=tesla-v100")
            && labels.contains("modelplane.ai/pool=gpu"),
        "{labels}"
    );
    assert!(gpu_cfg["users"][0]["sshAuthorizedKeys"].is_array());
}

fn pool_host(name: &str, pool: &str, claimed: bool) -> Value {
    let mut h = host(
        name,
        if claimed { "provisioned" } else { "available" },
        claimed.then_some(name),
        claimed,
    );
    h["metadata"]["labels"]["metal.kube.farm/pool"] = json!(pool);
    if claimed {
        h["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] = json!("rack1-cluster");
    }
    h
}

fn fleet_request(
    observed: &BTreeMap<&str, Value>,
    cp: &[Value],
    gpu: Option<&[Value]>,
    cpu: &[Value],
) -> function_sdk_rust::proto::v1::RunFunctionRequest {
    let mut req = request(&fleet_xr(), observed, Some(cp));
    if let Some(g) = gpu {
        render::with_required(&mut req, "hosts.sm-4029-w", g).expect("gpu hosts");
    }
    render::with_required(&mut req, "hosts.rack1-cpu", cpu).expect("cpu hosts");
    req
}

#[test]
fn every_claimed_host_is_protected_and_listed() {
    let cp = [
        pool_host("cp1", "rack1-cp", true),
        pool_host("cp2", "rack1-cp", true),
        pool_host("cp3", "rack1-cp", false),
    ];
    let gpu = [
        pool_host("g1", "sm-4029-w", true),
        pool_host("g2", "sm-4029-w", false),
    ];
    let cpu = [pool_host("c1", "rack1-cpu", true)];
    let rsp = compose(&fleet_request(&BTreeMap::new(), &cp, Some(&gpu), &cpu));
    let reqs = rsp.requirements.as_ref().expect("requirements");
    // Besides the objects a same-name predecessor may have left (read
    // while nothing is composed yet: leftovers.rs), one per pool.
    let mut wanted: Vec<&String> = reqs
        .resources
        .keys()
        .filter(|k| !k.starts_with("same-name-"))
        .collect();
    wanted.sort();
    assert_eq!(
        wanted,
        ["hosts", "hosts.rack1-cpu", "hosts.sm-4029-w", "machines"]
    );
    let d = desired(&rsp);
    let mut protected: Vec<&str> = d
        .iter()
        .filter(|(k, _)| k.starts_with("host-in-use"))
        .map(|(_, u)| {
            u["spec"]["of"]["resourceRef"]["name"]
                .as_str()
                .unwrap_or_default()
        })
        .collect();
    protected.sort_unstable();
    assert_eq!(protected, ["c1", "cp1", "cp2", "g1"]);
    let status = desired_status(&rsp);
    let listed: Vec<&str> = status["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .map(|h| h["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(listed, ["cp1", "cp2", "g1", "c1"]);
    assert_eq!(status["hosts"][2]["pool"], "sm-4029-w");
    assert_eq!(status["nodes"], "0/6");

    // A pool not resolved yet keeps the hosts already protected.
    let mut observed = BTreeMap::new();
    for (k, u) in d.iter().filter(|(k, _)| k.starts_with("host-in-use")) {
        observed.insert(k.as_str(), u.clone());
    }
    let rsp = compose(&fleet_request(&observed, &cp, None, &cpu));
    let mut kept: Vec<String> = desired(&rsp)
        .keys()
        .filter(|k| k.starts_with("host-in-use"))
        .cloned()
        .collect();
    kept.sort();
    assert_eq!(kept.len(), 4, "{kept:?}");
}

fn rollout(kind: &str, desired: i64, ready: i64, up_to_date: i64) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind,
        "metadata": {"name": "x", "generation": 2},
        "spec": {"replicas": desired},
        "status": {"observedGeneration": 2, "replicas": desired, "readyReplicas": ready, "upToDateReplicas": up_to_date},
    })
}

#[test]
fn ready_means_every_pool_ready() {
    let up = |o: Value| with_condition(o, "Available", "True");
    let mut observed: BTreeMap<&str, Value> = BTreeMap::from([
        (
            "cluster",
            up(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "rack1-cluster"}}),
            ),
        ),
        (
            "cilium",
            with_condition(
                json!({"apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "Release", "metadata": {"name": "c"}}),
                "Ready",
                "True",
            ),
        ),
        (
            "kubeadmcontrolplane",
            rollout("KubeadmControlPlane", 3, 3, 3),
        ),
        ("worker-gpu", rollout("MachineDeployment", 2, 1, 2)),
        ("worker-cpu", rollout("MachineDeployment", 1, 1, 1)),
    ]);
    let cp = [pool_host("cp1", "rack1-cp", true)];
    let rsp = compose(&fleet_request(&observed, &cp, Some(&[]), &[]));
    let status = desired_status(&rsp);
    assert_eq!(status["phase"], "RollingOut", "{status}");
    assert_eq!(status["nodes"], "5/6");
    assert_eq!(status["workers"][0]["name"], "gpu");
    assert_eq!(status["workers"][0]["readyReplicas"], 1);
    observed.insert("worker-gpu", rollout("MachineDeployment", 2, 2, 2));
    // Every machine there and up to date, one control plane node not ready.
    observed.insert(
        "kubeadmcontrolplane",
        rollout("KubeadmControlPlane", 3, 2, 3),
    );
    let status = desired_status(&compose(&fleet_request(&observed, &cp, Some(&[]), &[])));
    assert_eq!(status["phase"], "RollingOut", "{status}");
    observed.insert(
        "kubeadmcontrolplane",
        rollout("KubeadmControlPlane", 3, 3, 3),
    );
    let status = desired_status(&compose(&fleet_request(&observed, &cp, Some(&[]), &[])));
    assert_eq!(status["phase"], "Ready", "{status}");
    assert_eq!(status["nodes"], "6/6");
    // Just scaled (the spec asks 2, the pool has not seen it): not done.
    observed.insert("worker-gpu", rollout("MachineDeployment", 1, 1, 1));
    let status = desired_status(&compose(&fleet_request(&observed, &cp, Some(&[]), &[])));
    assert_eq!(status["phase"], "RollingOut", "{status}");
    assert_eq!(status["nodes"], "5/6");
}

/// With inference, each GPU worker pool is a Modelplane node pool with its
/// own InferenceClass from its GPUs; the pools stay until Modelplane let go.
#[test]
fn each_gpu_pool_is_a_modelplane_node_pool() {
    let mut xr = fleet_xr();
    xr["spec"]["inference"] = json!({"existing": {"cache": {"storageClassName": "nfs-client"}}});
    let observed = BTreeMap::from([(
        "cluster",
        with_condition(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "rack1-cluster"}}),
            "Available",
            "True",
        ),
    )]);
    let rsp = compose(&request(&xr, &observed, Some(&[])));
    assert_eq!(fatal(&rsp), None);
    let d = desired(&rsp);
    assert!(
        !d.contains_key("inference-class"),
        "no control plane class with GPU pools"
    );
    assert!(
        !d.contains_key("inference-class.cpu"),
        "the cpu pool has no GPU"
    );
    let class = &d["inference-class.gpu"]["spec"]["forProvider"]["manifest"];
    assert_eq!(class["metadata"]["name"], "metal-rack1-gpu");
    assert_eq!(class["spec"]["devices"][0]["count"], 4);
    assert_eq!(
        class["spec"]["devices"][0]["attributes"]["productName"]["string"],
        "Tesla V100-PCIE-16GB"
    );
    let cluster = &d["inference-cluster"]["spec"]["forProvider"]["manifest"];
    assert_eq!(
        cluster["spec"]["nodePools"],
        json!([{"name": "gpu", "className": "metal-rack1-gpu", "nodeCount": 2}])
    );
    for (usage, of) in [
        ("inference-needs-class.gpu", "rack1-inference-class-gpu"),
        ("inference-needs-worker-gpu", "rack1-cluster-gpu"),
        ("inference-needs-worker-cpu", "rack1-cluster-cpu"),
    ] {
        assert_eq!(d[usage]["spec"]["of"]["resourceRef"]["name"], of, "{usage}");
        assert_eq!(
            d[usage]["spec"]["by"]["resourceRef"]["name"],
            "rack1-inference-cluster"
        );
    }
    let status = desired_status(&rsp);
    assert_eq!(
        status["inference"]["pools"],
        json!([{"nodePool": "gpu", "class": "metal-rack1-gpu"}])
    );

    // Without GPUs anywhere the fleet has nothing to describe.
    let mut no_gpu = xr.clone();
    no_gpu["spec"]["workers"][0]
        .as_object_mut()
        .map(|w| w.remove("gpu"));
    let msg = fatal(&compose(&request(&no_gpu, &BTreeMap::new(), Some(&[])))).expect("refused");
    assert!(
        msg.contains("spec.inference") && msg.contains("worker pool with gpu"),
        "{msg}"
    );
}

fn condition(
    rsp: &function_sdk_rust::proto::v1::RunFunctionResponse,
    typ: &str,
) -> Option<(i32, String, String)> {
    rsp.conditions.iter().find(|c| c.r#type == typ).map(|c| {
        (
            c.status,
            c.reason.clone(),
            c.message.clone().unwrap_or_default(),
        )
    })
}

/// A pool that cannot get a host for every replica says so, naming the
/// pool; control plane and worker hosts are told apart by their machines.
#[test]
fn a_pool_short_of_hosts_says_so() {
    let mut cp1 = pool_host("cp1", "rack1-cp", true);
    cp1["spec"]["consumerRef"]["name"] = json!("rack1-cluster-x7k2p");
    let cp = [
        cp1,
        pool_host("cp2", "rack1-cp", false),
        pool_host("cp3", "rack1-cp", false),
    ];
    let mut g1 = pool_host("g1", "sm-4029-w", true);
    g1["spec"]["consumerRef"]["name"] = json!("rack1-cluster-gpu-5d8f9-q2w4e");
    let mut g2 = pool_host("g2", "sm-4029-w", false);
    g2["status"]["provisioning"]["state"] = json!("deprovisioning");
    g2["spec"].as_object_mut().map(|s| s.remove("consumerRef"));
    let cpu = [pool_host("c1", "rack1-cpu", false)];

    let rsp = compose(&fleet_request(
        &BTreeMap::new(),
        &cp,
        Some(std::slice::from_ref(&g1)),
        &cpu,
    ));
    let (status, reason, msg) = condition(&rsp, "HostsSuffice").expect("condition");
    assert_eq!((status, reason.as_str()), (3, "NotEnoughHosts"), "{msg}");
    assert!(
        msg.contains("pool gpu needs 2 host(s): 1 claimed, 0 free in pool sm-4029-w"),
        "{msg}"
    );
    assert!(
        !msg.contains("control plane") && !msg.contains("pool cpu"),
        "{msg}"
    );
    assert!(
        warnings(&rsp).iter().any(|w| w.contains("pool gpu")),
        "a Warning on the transition"
    );

    // A host on its way counts: it becomes available without anyone acting.
    let rsp = compose(&fleet_request(&BTreeMap::new(), &cp, Some(&[g1, g2]), &cpu));
    let (status, reason, _) = condition(&rsp, "HostsSuffice").expect("condition");
    assert_eq!((status, reason.as_str()), (2, "Enough"));

    // The single-node form has HostClaimed and no such condition.
    let rsp = compose(&request(&example_xr(), &BTreeMap::new(), Some(&[])));
    assert!(condition(&rsp, "HostsSuffice").is_none());

    // One machine behind a VIP needs a spare host for its rollouts.
    let mut xr = fleet_xr();
    xr["spec"]["controlPlane"]["replicas"] = json!(1);
    xr["spec"]["workers"] = json!([]);
    let mut only = pool_host("cp1", "rack1-cp", true);
    only["spec"]["consumerRef"]["name"] = json!("rack1-cluster-x7k2p");
    let rsp = compose(&request(
        &xr,
        &BTreeMap::new(),
        Some(std::slice::from_ref(&only)),
    ));
    let (status, _, msg) = condition(&rsp, "HostsSuffice").expect("condition");
    assert_eq!(status, 3, "{msg}");
    assert!(
        msg.contains("a spare host for its rollouts")
            && msg.contains("needs 2 host(s): 1 claimed, 0 free"),
        "{msg}"
    );
    let rsp = compose(&request(
        &xr,
        &BTreeMap::new(),
        Some(&[only, pool_host("cp2", "rack1-cp", false)]),
    ));
    assert_eq!(condition(&rsp, "HostsSuffice").map(|c| c.0), Some(2));
}

/// A fleet's workers are NotReady until the CNI runs, so its Cluster is not
/// Available before Cilium: Cilium is composed once the control plane is.
#[test]
fn cilium_waits_for_the_control_plane_not_the_workers() {
    let cluster = |conds: &[(&str, &str)]| {
        let mut c = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "rack1-cluster"}});
        for (t, st) in conds {
            c = with_condition(c, t, st);
        }
        c
    };
    let cp = [pool_host("cp1", "rack1-cp", true)];
    let none = BTreeMap::from([(
        "cluster",
        cluster(&[("Available", "False"), ("ControlPlaneAvailable", "False")]),
    )]);
    let rsp = compose(&fleet_request(&none, &cp, Some(&[]), &[]));
    assert!(!desired(&rsp).contains_key("cilium"));
    let cp_only = BTreeMap::from([(
        "cluster",
        cluster(&[("Available", "False"), ("ControlPlaneAvailable", "True")]),
    )]);
    let rsp = compose(&fleet_request(&cp_only, &cp, Some(&[]), &[]));
    assert!(desired(&rsp).contains_key("cilium"));
    assert_eq!(desired_status(&rsp)["phase"], "InstallingCNI");
}

/// Each desired object as the API server would show it after applying,
/// rolled out completely at `version` (status says so), keyed by its
/// composition resource name.
fn applied(d: &BTreeMap<String, Value>, cp_version: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (k, v) in d {
        let mut v = v.clone();
        v["metadata"]["generation"] = json!(3);
        let replicas = v["spec"]["replicas"].as_i64().unwrap_or(1);
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        if kind == "KubeadmControlPlane" || kind == "MachineDeployment" {
            v["status"] = json!({"observedGeneration": 3, "replicas": replicas, "readyReplicas": replicas, "upToDateReplicas": replicas});
        }
        if kind == "KubeadmControlPlane" {
            v["status"]["version"] = json!(cp_version);
        }
        out.insert(k.clone(), v);
    }
    out
}

fn as_observed(m: &BTreeMap<String, Value>) -> BTreeMap<&str, Value> {
    m.iter().map(|(k, v)| (k.as_str(), v.clone())).collect()
}

fn template_keys(d: &BTreeMap<String, Value>, set: &str) -> Vec<String> {
    d.keys()
        .filter(|k| metalplane::rollout::template_owner(k) == Some(set))
        .cloned()
        .collect()
}

/// Content-derived names: a change to one pool's labels makes new
/// templates for that pool only; nothing else is renamed.
#[test]
fn a_pool_edit_renames_only_that_pools_templates() {
    let before = desired(&compose(&request(&fleet_xr(), &BTreeMap::new(), Some(&[]))));
    let mut xr = fleet_xr();
    xr["spec"]["workers"][1]["nodeLabels"] = json!({"rack": "b"});
    let after = desired(&compose(&request(&xr, &BTreeMap::new(), Some(&[]))));
    for set in ["kubeadmcontrolplane", "worker-gpu"] {
        assert_eq!(
            template_keys(&before, set),
            template_keys(&after, set),
            "{set}"
        );
    }
    let (b, a) = (
        template_keys(&before, "worker-cpu"),
        template_keys(&after, "worker-cpu"),
    );
    // The data and machine templates do not carry labels: only the config.
    let changed: Vec<&String> = a.iter().filter(|k| !b.contains(k)).collect();
    assert_eq!(changed.len(), 1, "{b:?} -> {a:?}");
    assert!(changed[0].starts_with("worker-cpu.config."));
    let md = &after["worker-cpu"]["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"];
    assert_eq!(
        md.as_str(),
        template(&after, "worker-cpu.config")["metadata"]["name"].as_str()
    );
    // The same spec twice: the same names.
    let again = desired(&compose(&request(&xr, &BTreeMap::new(), Some(&[]))));
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        again.keys().collect::<Vec<_>>()
    );
}

/// An upgrade: the control plane goes first; the pools keep their version
/// and templates until KCP reports every machine at the new version, then
/// roll; old templates stay until their set has rolled.
#[test]
fn an_upgrade_rolls_the_control_plane_first_then_the_pools() {
    let old = fleet_xr();
    let at_a = applied(
        &desired(&compose(&request(&old, &BTreeMap::new(), Some(&[])))),
        "v1.34.1",
    );
    let mut xr = old.clone();
    xr["spec"]["kubernetes"]["version"] = json!("v1.35.0");
    xr["spec"]["kubernetes"]["imageURL"] =
        json!("http://10.40.8.10/images/ubuntu-2404-kube-v1.35.0.qcow2");

    // 1. KCP is told B; the pools stay at A with their old templates.
    let d = desired(&compose(&request(&xr, &as_observed(&at_a), Some(&[]))));
    assert_eq!(d["kubeadmcontrolplane"]["spec"]["version"], "v1.35.0");
    let new_cp =
        d["kubeadmcontrolplane"]["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["name"]
            .clone();
    assert_ne!(
        new_cp,
        at_a["kubeadmcontrolplane"]["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["name"]
    );
    for pool in ["worker-gpu", "worker-cpu"] {
        assert_eq!(
            d[pool]["spec"]["template"], at_a[pool]["spec"]["template"],
            "{pool} held"
        );
        for k in template_keys(&at_a, pool) {
            assert!(d.contains_key(&k), "{pool}'s old {k} kept");
        }
    }
    for k in template_keys(&at_a, "kubeadmcontrolplane") {
        assert!(
            d.contains_key(&k),
            "the control plane's old {k} kept while it rolls"
        );
    }
    let status = desired_status(&compose(&request(&xr, &as_observed(&at_a), Some(&[]))));
    assert!(
        status["kubernetes"].get("version").is_none(),
        "{}",
        status["kubernetes"]
    );

    // 2. KCP rolling (observed at B, status still A): pools still held.
    let mut rolling = applied(&d, "v1.34.1");
    rolling.insert("kubeadmcontrolplane".into(), {
        let mut k = d["kubeadmcontrolplane"].clone();
        k["metadata"]["generation"] = json!(4);
        k["status"] = json!({"observedGeneration": 4, "replicas": 3, "readyReplicas": 2, "upToDateReplicas": 1, "version": "v1.34.1"});
        k
    });
    let d2 = desired(&compose(&request(&xr, &as_observed(&rolling), Some(&[]))));
    assert_eq!(
        d2["worker-gpu"]["spec"]["template"],
        at_a["worker-gpu"]["spec"]["template"]
    );
    for k in template_keys(&at_a, "kubeadmcontrolplane") {
        assert!(d2.contains_key(&k), "{k} kept while KCP rolls");
    }
    let status = desired_status(&compose(&request(&xr, &as_observed(&rolling), Some(&[]))));
    assert_eq!(status["kubernetes"]["controlPlane"]["version"], "v1.34.1");
    assert_eq!(status["kubernetes"]["controlPlane"]["upToDate"], 1);

    // 3. KCP done at B: the pools roll to B; the control plane's old
    // templates go, the pools' old ones stay while the pools roll.
    let cp_done = applied(&d2, "v1.35.0");
    let d3 = desired(&compose(&request(&xr, &as_observed(&cp_done), Some(&[]))));
    for pool in ["worker-gpu", "worker-cpu"] {
        assert_eq!(
            d3[pool]["spec"]["template"]["spec"]["version"], "v1.35.0",
            "{pool}"
        );
        for k in template_keys(&at_a, pool) {
            assert!(d3.contains_key(&k), "{pool}'s {k} kept until it rolled");
        }
    }
    let fresh = desired(&compose(&request(&xr, &BTreeMap::new(), Some(&[]))));
    assert_eq!(
        template_keys(&d3, "kubeadmcontrolplane"),
        template_keys(&fresh, "kubeadmcontrolplane"),
        "only the control plane's new templates once KCP is done"
    );

    // 4. Everything at B: only the new templates remain; status says B.
    let done = applied(&d3, "v1.35.0");
    let rsp = compose(&request(&xr, &as_observed(&done), Some(&[])));
    let d4 = desired(&rsp);
    for pool in ["worker-gpu", "worker-cpu"] {
        assert_eq!(
            template_keys(&d4, pool),
            template_keys(&fresh, pool),
            "{pool}"
        );
        assert_ne!(
            template_keys(&d4, pool),
            template_keys(&at_a, pool),
            "{pool}"
        );
    }
    let status = desired_status(&rsp);
    assert_eq!(status["kubernetes"]["version"], "v1.35.0");
    assert_eq!(status["kubernetes"]["workers"][0]["version"], "v1.35.0");
}

/// What keeps a fleet alive: certificate renewal before expiry, bounded
/// drains, KCP's remediation limits, a health check per set with the
/// reboot template, and a one-machine control plane behind a VIP that
/// rolls by adding its successor first.
#[test]
fn day_two_settings_are_rendered() {
    let d = desired(&compose(&request(&fleet_xr(), &BTreeMap::new(), Some(&[]))));
    let kcp = &d["kubeadmcontrolplane"]["spec"];
    assert_eq!(kcp["rollout"]["before"]["certificatesExpiryDays"], 30);
    assert_eq!(
        kcp["machineTemplate"]["spec"]["deletion"],
        json!({"nodeDrainTimeoutSeconds": 600, "nodeVolumeDetachTimeoutSeconds": 300})
    );
    assert_eq!(kcp["remediation"]["maxRetry"], 3);
    let md = &d["worker-gpu"]["spec"];
    assert_eq!(
        md["template"]["spec"]["deletion"]["nodeDrainTimeoutSeconds"],
        600
    );
    assert_eq!(md["remediation"]["maxInFlight"], 1);
    let mhc = &d["worker-gpu.health"]["spec"];
    assert_eq!(
        mhc["selector"]["matchLabels"]["cluster.x-k8s.io/deployment-name"],
        "rack1-cluster-gpu"
    );
    assert_eq!(
        mhc["remediation"]["templateRef"]["name"],
        "rack1-cluster-reboot"
    );
    assert_eq!(
        d["remediation-template"]["spec"]["template"]["spec"]["strategy"]["type"],
        "Reboot"
    );
    assert!(d.contains_key("controlplane-health") && d.contains_key("worker-cpu.health"));

    // Settings from the spec; health off removes the checks.
    let mut xr = fleet_xr();
    xr["spec"]["kubernetes"]["renewCertificatesDays"] = json!(45);
    xr["spec"]["drain"] = json!({"nodeDrainTimeoutSeconds": 0});
    xr["spec"]["health"] = json!({"unhealthyAfterSeconds": 120, "maxUnhealthy": "2"});
    let d = desired(&compose(&request(&xr, &BTreeMap::new(), Some(&[]))));
    assert_eq!(
        d["kubeadmcontrolplane"]["spec"]["rollout"]["before"]["certificatesExpiryDays"],
        45
    );
    assert_eq!(
        d["worker-gpu"]["spec"]["template"]["spec"]["deletion"]["nodeDrainTimeoutSeconds"],
        0
    );
    let mhc = &d["controlplane-health"]["spec"];
    assert_eq!(
        mhc["checks"]["unhealthyNodeConditions"][0]["timeoutSeconds"],
        120
    );
    assert_eq!(
        mhc["remediation"]["triggerIf"]["unhealthyLessThanOrEqualTo"],
        2
    );
    xr["spec"]["health"] = json!({"enabled": false});
    let d = desired(&compose(&request(&xr, &BTreeMap::new(), Some(&[]))));
    assert!(
        !d.keys()
            .any(|k| k.ends_with("health") || k == "remediation-template")
    );
    assert!(
        d["kubeadmcontrolplane"]["spec"]
            .get("remediation")
            .is_none()
    );

    // One machine behind a VIP: a surge of one, and 2 addresses needed.
    let mut xr = fleet_xr();
    xr["spec"]["controlPlane"]["replicas"] = json!(1);
    xr["spec"]["controlPlane"]["addresses"] = json!("10.40.8.21-10.40.8.22");
    let d = desired(&compose(&request(&xr, &BTreeMap::new(), Some(&[]))));
    assert_eq!(
        d["kubeadmcontrolplane"]["spec"]["rollout"]["strategy"]["rollingUpdate"]["maxSurge"],
        1
    );
    xr["spec"]["controlPlane"]["addresses"] = json!("10.40.8.21-10.40.8.21");
    let msg = fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))).expect("refused");
    assert!(
        msg.contains("spec.controlPlane.addresses") && msg.contains("needs 2"),
        "{msg}"
    );
    // A single node: no rollout settings (it cannot roll).
    let single = load_yaml(&repo_root().join("examples/metalcluster/r730.yaml"))[0].clone();
    let d = desired(&compose(&request(&single, &BTreeMap::new(), Some(&[]))));
    assert!(d["kubeadmcontrolplane"]["spec"].get("rollout").is_none());
    assert!(d.contains_key("metal3machinetemplate") && d.contains_key("controlplane-health"));
}

/// The health and certificate conditions from the cluster's Machines.
#[test]
fn machines_tell_health_and_certificate_expiry() {
    let xr = fleet_xr();
    let machines = vec![
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "rack1-cluster-abcde", "namespace": "metal", "labels": {"cluster.x-k8s.io/cluster-name": "rack1-cluster", "cluster.x-k8s.io/control-plane": ""}},
            "spec": {"clusterName": "rack1-cluster", "infrastructureRef": {"name": "rack1-cluster-abcde"}},
            "status": {"certificatesExpiryDate": "2027-01-10T00:00:00Z"}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "rack1-cluster-gpu-a-b", "namespace": "metal", "labels": {"cluster.x-k8s.io/cluster-name": "rack1-cluster"}},
            "spec": {"clusterName": "rack1-cluster", "infrastructureRef": {"name": "rack1-cluster-gpu-a-b"}},
            "status": {"conditions": [{"type": "HealthCheckSucceeded", "status": "False", "reason": "UnhealthyNode", "message": "Condition Ready on Node is reporting status Unknown for more than 30s"}]}}),
    ];
    let mut gpu = pool_host("g1", "sm-4029-w", true);
    gpu["spec"]["consumerRef"]["name"] = json!("rack1-cluster-gpu-a-b");
    let mut req = fleet_request(&BTreeMap::new(), &[], Some(&[gpu]), &[]);
    let _ = xr;
    render::with_required(&mut req, "machines", &machines).expect("machines");
    // 2026-12-20: 21 days before the expiry.
    let rsp = metalplane::compose::compose_at(&req, 1_797_724_800);
    use function_sdk_rust::proto::v1::Status;
    let (status, _, msg) = condition(&rsp, "NodesHealthy").expect("NodesHealthy");
    assert_eq!(status, Status::ConditionFalse as i32);
    assert!(
        msg.contains("machine rack1-cluster-gpu-a-b on host g1"),
        "{msg}"
    );
    let (status, reason, msg) = condition(&rsp, "CertificatesValid").expect("CertificatesValid");
    assert_eq!(
        (status, reason.as_str()),
        (Status::ConditionFalse as i32, "ExpiringSoon")
    );
    assert!(
        msg.contains("2027-01-10T00:00:00Z") && msg.contains("in 21 days"),
        "{msg}"
    );
    assert_eq!(desired_status(&rsp)["phase"], "Remediating");
    let status = desired_status(&rsp);
    assert_eq!(status["certificatesExpiryDate"], "2027-01-10T00:00:00Z");
}

/// Right after a pool is told the new version its MachineDeployment may
/// still report every replica up to date: the Machines, at the old
/// version, say otherwise, and the XR is not Ready meanwhile.
#[test]
fn machines_at_the_old_version_keep_the_upgrade_rolling() {
    let mut xr = fleet_xr();
    xr["spec"]["kubernetes"]["version"] = json!("v1.35.0");
    let at_b = applied(
        &desired(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))),
        "v1.35.0",
    );
    let mut observed = as_observed(&at_b);
    observed.insert(
        "cluster",
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "rack1-cluster"},
            "status": {"conditions": [{"type": "Available", "status": "True"}]}}),
    );
    observed.insert(
        "cilium",
        json!({"apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "Release", "metadata": {"name": "rack1-cluster-cilium"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    let machine = |name: &str, md: &str, version: &str| {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": "metal", "labels": {"cluster.x-k8s.io/cluster-name": "rack1-cluster", "cluster.x-k8s.io/deployment-name": md}},
            "spec": {"clusterName": "rack1-cluster", "version": version}})
    };
    let phase_with = |gpu_version: &str| {
        let mut req = request(&xr, &observed, Some(&[]));
        let ms = [
            machine("g-1", "rack1-cluster-gpu", gpu_version),
            machine("g-2", "rack1-cluster-gpu", "v1.35.0"),
            machine("c-1", "rack1-cluster-cpu", "v1.35.0"),
        ];
        render::with_required(&mut req, "machines", &ms).expect("machines");
        desired_status(&compose(&req))
    };
    let rolling = phase_with("v1.34.1");
    assert_eq!(rolling["phase"], "Upgrading");
    assert!(
        rolling["kubernetes"].get("version").is_none(),
        "{}",
        rolling["kubernetes"]
    );
    let done = phase_with("v1.35.0");
    assert_eq!(done["phase"], "Ready");
    assert_eq!(done["kubernetes"]["version"], "v1.35.0");
}

/// The pod range is checked against every node the spec can have, so a
/// scale edit past it is refused naming the range and the count; the
/// one-machine control plane's surge machine counts too.
#[test]
fn the_pod_range_holds_a_node_range_for_every_node() {
    let mut xr = fleet_xr();
    set(&mut xr, "/spec/network/podCIDR", json!("10.244.0.0/21"));
    let ok = compose(&request(&xr, &BTreeMap::new(), Some(&[])));
    assert_eq!(fatal(&ok), None, "8 node ranges hold 6 nodes");
    set(&mut xr, "/spec/workers/0/replicas", json!(6));
    let msg =
        fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[])))).expect("10 nodes in 8 ranges");
    assert!(
        msg.contains("spec.network.podCIDR") && msg.contains("fewer than the 10 nodes"),
        "{msg}"
    );
    // One control plane machine behind a VIP rolls with a surge of one.
    let mut xr = fleet_xr();
    set(&mut xr, "/spec/network/podCIDR", json!("10.244.0.0/22"));
    set(&mut xr, "/spec/controlPlane/replicas", json!(1));
    if let Some(w) = xr
        .pointer_mut("/spec/workers")
        .and_then(Value::as_array_mut)
    {
        w.truncate(1);
    }
    set(&mut xr, "/spec/workers/0/replicas", json!(3));
    let msg = fatal(&compose(&request(&xr, &BTreeMap::new(), Some(&[]))))
        .expect("1 + 1 surge + 3 workers in 4 ranges");
    assert!(
        msg.contains("1 control plane + 1 while it rolls + 3 in spec.workers"),
        "{msg}"
    );
}

/// Every set's NIC is in the L2 announcement policy (a worker that wins an
/// address's lease announces only on a listed NIC), and every data template
/// names its link, so the installed OS uses the names kube-vip and the
/// policy use.
#[test]
fn every_sets_nic_is_named_and_announced() {
    assert_eq!(l2_interfaces(&fleet_xr()), json!(["^eno1$", "^eno1np0$"]));
    let d = desired(&compose(&request(&fleet_xr(), &BTreeMap::new(), Some(&[]))));
    let mut links = 0;
    for (k, v) in &d {
        if v["kind"] == "Metal3DataTemplate" {
            for e in v["spec"]["networkData"]["links"]["ethernets"]
                .as_array()
                .expect("ethernets")
            {
                assert_eq!(e["name"], e["id"], "{k}: {e}");
                assert_eq!(e["macAddress"]["fromHostInterface"], e["id"], "{k}: {e}");
                links += 1;
            }
        }
    }
    assert_eq!(links, 3, "one data template per set");
}
