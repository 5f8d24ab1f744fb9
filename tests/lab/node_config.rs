//! What a node would boot with, checked by cloud-init itself: the user
//! data the real CABPK rendered and the network data the real CAPM3
//! rendered, read back from the Secrets each BareMetalHost points BMO at.
//!
//! Debian's `cloud-init` (installed by `.ci/run`) renders the Jinja user
//! data with the instance data BMO's config drive carries, validates the
//! result against its schema, and converts the network data into netplan;
//! the interface names there must be the ones kube-vip and Cilium's L2
//! policy use. The first-boot script (`runcmd`, written by cloud-init's own
//! `shellify`) then runs under `sh` in a private mount namespace with stub
//! programs for what a server has and the lab has not (curl, apt-get,
//! modprobe, systemctl, kubeadm, nvidia-smi): a failed GPU step, or GPUs
//! other than the spec's, must stop it before kubeadm.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

/// What the lab's driver installer is: the stub the sandbox downloads. The
/// fleet's gpu pool carries its sha256 as `driverInstallerChecksum`.
pub(crate) const INSTALLER_STUB: &str =
    "#!/bin/sh\n# the lab's NVIDIA installer: exits as told\nexit \"${LAB_INSTALLER_EXIT:-0}\"\n";

/// What `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`
/// printed on a real H200 (../shared/reference/gpu-facts.md).
pub(crate) const H200_LINE: &str = "NVIDIA H200, 143771";

/// The lab fleet's gpu pool: two H200s per node, as NVML reports them.
pub(crate) fn lab_gpu() -> Value {
    json!({
        "driverInstallerURL": "http://10.40.8.10/nvidia/NVIDIA-Linux-x86_64-580.159.04.run",
        "driverInstallerChecksum": xtask::sha256_hex(INSTALLER_STUB.as_bytes()),
        "model": "NVIDIA H200",
        "count": 2,
        "memory": "143771Mi",
    })
}

fn cloud_init(args: &[&str]) -> Result<String, String> {
    let out = Command::new("cloud-init")
        .args(args)
        .output()
        .map_err(|e| format!("cloud-init {args:?}: {e} (.ci/run installs Debian's cloud-init)"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("cloud-init {args:?} failed: {text}"))
    }
}

/// One machine as its host will boot it.
pub(crate) struct Booted {
    pub(crate) machine: String,
    pub(crate) host: String,
    pub(crate) control_plane: bool,
    /// The rendered cloud-config (Jinja done).
    pub(crate) cloud_config: PathBuf,
    /// The link netplan puts the node address on (NIC, bond or VLAN).
    pub(crate) iface: String,
}

/// Reads, renders and checks every Machine of `cluster` in `ns`.
pub(crate) fn check_node_configs(
    lab: &Lab,
    ns: &str,
    cluster: &str,
) -> Result<Vec<Booted>, String> {
    let xr_name = {
        let c = lab
            .kube
            .get("clusters.cluster.x-k8s.io", cluster, Some(ns))
            .ok_or_else(|| format!("Cluster {ns}/{cluster} missing"))?;
        str_at(&c, "/metadata/labels/crossplane.io~1composite").to_string()
    };
    let xr = lab
        .kube
        .get("metalcluster", &xr_name, Some(ns))
        .ok_or_else(|| format!("MetalCluster {ns}/{xr_name} missing"))?;
    let machines: Vec<Value> = lab
        .kube
        .list("machines.cluster.x-k8s.io", Some(ns))
        .into_iter()
        .filter(|m| str_at(m, "/spec/clusterName") == cluster)
        .collect();
    check(!machines.is_empty(), || format!("no Machines of {cluster}"))?;
    let dir = lab.state.join(format!("node-config-{ns}-{cluster}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for m in &machines {
        out.push(check_machine(lab, ns, &xr, m, &dir)?);
    }
    // The names netplan gives the data NICs are the ones kube-vip and the
    // L2 announcement policy were told.
    let kcp = lab
        .kube
        .get(
            "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
            cluster,
            Some(ns),
        )
        .ok_or("KubeadmControlPlane missing")?;
    let vip = kcp
        .pointer("/spec/kubeadmConfigSpec/files")
        .and_then(Value::as_array)
        .and_then(|fs| {
            fs.iter()
                .find(|f| str_at(f, "/path") == "/etc/kubernetes/manifests/kube-vip.yaml")
        })
        .map(|f| str_at(f, "/content").to_string());
    if let Some(manifest) = vip {
        let pod: Value = serde_json::from_str(&manifest).map_err(|e| e.to_string())?;
        let iface = pod["spec"]["containers"][0]["env"]
            .as_array()
            .and_then(|e| e.iter().find(|e| e["name"] == "vip_interface"))
            .map(|e| str_at(e, "/value").to_string())
            .unwrap_or_default();
        for b in out.iter().filter(|b| b.control_plane) {
            check(b.iface == iface, || {
                format!(
                    "{}: netplan names the NIC {} but kube-vip announces on {iface}",
                    b.machine, b.iface
                )
            })?;
        }
    }
    let policy = lab
        .kube
        .list("objects.kubernetes.m.crossplane.io", Some(ns))
        .into_iter()
        .find(|o| {
            str_at(o, "/metadata/labels/crossplane.io~1composite") == xr_name
                && str_at(o, "/spec/forProvider/manifest/kind") == "CiliumL2AnnouncementPolicy"
        });
    if let Some(p) = policy {
        let patterns: Vec<String> = p
            .pointer("/spec/forProvider/manifest/spec/interfaces")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| {
                        v.as_str()
                            .unwrap_or_default()
                            .trim_start_matches('^')
                            .trim_end_matches('$')
                            .replace("\\.", ".")
                    })
                    .collect()
            })
            .unwrap_or_default();
        for b in &out {
            check(patterns.contains(&b.iface), || {
                format!(
                    "{}: netplan names the NIC {}, which the L2 announcement policy ({patterns:?}) leaves out",
                    b.machine, b.iface
                )
            })?;
        }
    }
    Ok(out)
}

fn check_machine(lab: &Lab, ns: &str, xr: &Value, m: &Value, dir: &Path) -> Result<Booted, String> {
    let machine = str_at(m, "/metadata/name").to_string();
    let control_plane = m
        .pointer("/metadata/labels/cluster.x-k8s.io~1control-plane")
        .is_some();
    let m3m = lab
        .kube
        .get(
            "metal3machines.infrastructure.cluster.x-k8s.io",
            str_at(m, "/spec/infrastructureRef/name"),
            Some(ns),
        )
        .ok_or_else(|| format!("{machine}: Metal3Machine missing"))?;
    let (host_ns, host) = str_at(&m3m, "/metadata/annotations/metal3.io~1BareMetalHost")
        .split_once('/')
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .ok_or_else(|| format!("{machine}: no host yet"))?;
    let bmh = lab
        .kube
        .get("baremetalhost", &host, Some(&host_ns))
        .ok_or_else(|| format!("{machine}: host {host} missing"))?;
    // BMO names the node after the host, as the stand-in does.
    let node = str_at(m, "/status/nodeRef/name");
    check(node == host, || {
        format!("{machine}: node {node:?}, but BMO's config drive names it after host {host}")
    })?;

    // User data: the Jinja template CABPK wrote, rendered by cloud-init
    // with the instance data BMO's config drive gives.
    let user_data = secret_value(
        lab,
        &host_ns,
        str_at(&bmh, "/spec/userData/name"),
        &["value", "userData"],
    )?;
    check(user_data.starts_with("## template: jinja"), || {
        format!(
            "{machine}: user data is not CABPK's Jinja template: {}",
            first_line(&user_data)
        )
    })?;
    let raw = dir.join(format!("{machine}.user-data"));
    std::fs::write(&raw, &user_data).map_err(|e| e.to_string())?;
    let meta = json!({
        "uuid": uid(&bmh),
        "metal3-namespace": host_ns,
        "metal3-name": host,
        "local-hostname": host,
        "local_hostname": host,
        "name": host,
    });
    let instance = json!({"ds": {"meta_data": meta}, "v1": {"instance_id": uid(&bmh), "local_hostname": host}});
    let inst = dir.join(format!("{machine}.instance-data.json"));
    std::fs::write(&inst, instance.to_string()).map_err(|e| e.to_string())?;
    let rendered = cloud_init(&[
        "devel",
        "render",
        &raw.display().to_string(),
        "--instance-data",
        &inst.display().to_string(),
    ])
    .map_err(|e| format!("{machine}: {e}"))?;
    check(
        !rendered.contains("{{") && !rendered.contains("CI_MISSING_JINJA_VAR"),
        || format!("{machine}: Jinja left unrendered:\n{rendered}"),
    )?;
    check(rendered.contains(&host), || {
        format!("{machine}: kubeadm's nodeRegistration does not name host {host}")
    })?;
    let cloud_config = dir.join(format!("{machine}.cloud-config"));
    std::fs::write(&cloud_config, &rendered).map_err(|e| e.to_string())?;
    let verdict = cloud_init(&[
        "schema",
        "--config-file",
        &cloud_config.display().to_string(),
    ])
    .map_err(|e| format!("{machine}: {e}"))?;
    check(verdict.contains("Valid cloud-config"), || {
        format!("{machine}: cloud-init schema: {verdict}")
    })?;

    // Network data: CAPM3's rendering, converted as cloud-init on the
    // installed OS converts it.
    let nd = secret_value(
        lab,
        &host_ns,
        str_at(&bmh, "/spec/networkData/name"),
        &["networkData"],
    )?;
    // CAPM3 writes it as YAML; BMO reads it as YAML and hands Ironic JSON
    // for the config drive's network_data.json.
    let nd: Value =
        serde_yaml_ng::from_str(&nd).map_err(|e| format!("{machine}: network data: {e}"))?;
    let nd_path = dir.join(format!("{machine}.network_data.json"));
    std::fs::write(&nd_path, nd.to_string()).map_err(|e| e.to_string())?;
    let out_dir = dir.join(format!("{machine}.netplan"));
    cloud_init(&[
        "devel",
        "net-convert",
        "--network-data",
        &nd_path.display().to_string(),
        "--kind",
        "network_data.json",
        "--output-kind",
        "netplan",
        "--distro",
        "ubuntu",
        "--directory",
        &out_dir.display().to_string(),
    ])
    .map_err(|e| format!("{machine}: {e}"))?;
    let text = std::fs::read_to_string(out_dir.join("etc/netplan/50-cloud-init.yaml"))
        .map_err(|e| format!("{machine}: netplan output: {e}"))?;
    let plan: Value = serde_yaml_ng::from_str(&text).map_err(|e| format!("{machine}: {e}"))?;
    let hw = lab
        .kube
        .get("hardwaredata", &host, Some(&host_ns))
        .ok_or_else(|| format!("{machine}: HardwareData {host} missing"))?;
    let pool = str_at(&bmh, "/metadata/labels/metal.kube.farm~1pool");
    let want = Expect::of(xr, pool).ok_or_else(|| format!("{machine}: no set of pool {pool}"))?;
    let iface = check_netplan(&plan, &want, &hw, xr)
        .map_err(|e| format!("{machine} (pool {pool}): netplan {e}:\n{text}"))?;
    Ok(Booted {
        machine,
        host,
        control_plane,
        cloud_config,
        iface,
    })
}

/// The node network a set's spec asks for (`spec.host` or the pool with
/// that `pool`), read from the XR as a user reads it: a pool that says
/// nothing of bootInterface, bond, vlan and mtu takes the host's.
pub(crate) struct Expect {
    pub(crate) nics: Vec<String>,
    pub(crate) bond_mode: Option<String>,
    pub(crate) vlan: Option<u64>,
    pub(crate) mtu: Option<u64>,
    pub(crate) data: String,
}

impl Expect {
    pub(crate) fn of(xr: &Value, pool: &str) -> Option<Self> {
        let host = &xr["spec"]["host"];
        let set = if str_at(host, "/pool") == pool {
            host
        } else {
            xr["spec"]["workers"]
                .as_array()?
                .iter()
                .find(|w| str_at(w, "/pool") == pool)?
        };
        let own = ["bootInterface", "bond", "vlan", "mtu"]
            .iter()
            .any(|k| set.get(*k).is_some());
        let src = if own { set } else { host };
        let boot = src
            .get("bootInterface")
            .or(host.get("bootInterface"))?
            .as_str()?
            .to_string();
        let bond = src.get("bond");
        let nics = match bond {
            Some(b) => b["interfaces"]
                .as_array()?
                .iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect(),
            None => vec![boot.clone()],
        };
        let bond_mode = bond.map(|b| b["mode"].as_str().unwrap_or("802.3ad").to_string());
        let vlan = src.get("vlan").and_then(Value::as_u64);
        let base = if bond.is_some() {
            "bond0".to_string()
        } else {
            boot
        };
        let data = match vlan {
            Some(v) => format!("{base}.{v}"),
            None => base,
        };
        Some(Self {
            nics,
            bond_mode,
            vlan,
            mtu: src.get("mtu").and_then(Value::as_u64),
            data,
        })
    }
}

/// Checks cloud-init's netplan against the spec: each NIC matched by its
/// MAC and renamed to its inspected name, the bond with its members and
/// mode, the VLAN with its id and link, the MTU on every link, and the
/// static address, default route and DNS on the data interface alone.
/// Returns the data interface's name.
fn check_netplan(plan: &Value, want: &Expect, hw: &Value, xr: &Value) -> Result<String, String> {
    let net = &plan["network"];
    let section = |s: &str| net[s].as_object().cloned().unwrap_or_default();
    let (eths, bonds, vlans) = (section("ethernets"), section("bonds"), section("vlans"));
    let mtu_ok = |e: &Value| want.mtu.is_none_or(|m| e["mtu"].as_u64() == Some(m));
    let names: Vec<&String> = eths.keys().collect();
    if names.len() != want.nics.len() || want.nics.iter().any(|n| !eths.contains_key(n)) {
        return Err(format!("ethernets {names:?}, not {:?}", want.nics));
    }
    for nic in &want.nics {
        let e = &eths[nic];
        let mac = hw
            .pointer("/spec/hardware/nics")
            .and_then(Value::as_array)
            .and_then(|n| n.iter().find(|n| str_at(n, "/name") == nic))
            .map(|n| str_at(n, "/mac").to_string())
            .ok_or_else(|| format!("names NIC {nic}, which the host does not have"))?;
        if str_at(e, "/match/macaddress") != mac || str_at(e, "/set-name") != nic || !mtu_ok(e) {
            return Err(format!(
                "{nic} is not matched by {mac}, renamed to {nic} with MTU {:?}",
                want.mtu
            ));
        }
    }
    match &want.bond_mode {
        Some(mode) => {
            let b = bonds.get("bond0").ok_or("has no bond0")?;
            let members: Vec<&str> = b["interfaces"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if members != want.nics.iter().map(String::as_str).collect::<Vec<_>>()
                || str_at(b, "/parameters/mode") != mode
                || !mtu_ok(b)
            {
                return Err(format!(
                    "bond0 is not {:?} in mode {mode} with MTU {:?}",
                    want.nics, want.mtu
                ));
            }
        }
        None if !bonds.is_empty() => return Err("has a bond the spec does not ask for".into()),
        None => {}
    }
    match want.vlan {
        Some(id) => {
            let v = vlans
                .get(&want.data)
                .ok_or_else(|| format!("has no VLAN {}", want.data))?;
            let link = want
                .data
                .rsplit_once('.')
                .map(|(l, _)| l)
                .unwrap_or_default();
            if v["id"].as_u64() != Some(id) || str_at(v, "/link") != link || !mtu_ok(v) {
                return Err(format!(
                    "VLAN {} is not id {id} on {link} with MTU {:?}",
                    want.data, want.mtu
                ));
            }
        }
        None if !vlans.is_empty() => return Err("has a VLAN the spec does not ask for".into()),
        None => {}
    }
    let addressed: Vec<(&String, &Value)> = eths
        .iter()
        .chain(bonds.iter())
        .chain(vlans.iter())
        .filter(|(_, e)| e.get("addresses").is_some())
        .collect();
    let [(name, e)] = addressed.as_slice() else {
        return Err(format!("addresses {} links, not one", addressed.len()));
    };
    if **name != want.data {
        return Err(format!("puts the address on {name}, not {}", want.data));
    }
    let gateway = str_at(xr, "/spec/network/gateway");
    let prefix = xr["spec"]["network"]["prefix"].as_u64().unwrap_or(0);
    let address = e["addresses"][0].as_str().unwrap_or_default();
    let routed = e["routes"].as_array().is_some_and(|r| {
        r.iter()
            .any(|r| str_at(r, "/to") == "0.0.0.0/0" && str_at(r, "/via") == gateway)
    });
    if !address.ends_with(&format!("/{prefix}"))
        || !routed
        || e["nameservers"]["addresses"][0] != xr["spec"]["network"]["dnsServer"]
    {
        return Err(format!(
            "{name} lacks its static address, default route by {gateway} or DNS"
        ));
    }
    Ok(name.to_string())
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

/// The first-boot script exactly as cloud-init writes it (its own
/// `shellify` of the rendered `runcmd`).
fn runcmd_script(cloud_config: &Path) -> Result<String, String> {
    let out = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys, yaml\nfrom cloudinit import util\nc = yaml.safe_load(open(sys.argv[1]))\nsys.stdout.write(util.shellify(c['runcmd']))",
        ])
        .arg(cloud_config)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "shellify: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| e.to_string())
}

/// The stub programs: each does what the real one does for this script,
/// as the environment (the case) tells it.
const STUBS: &[(&str, &str)] = &[
    ("systemctl", "exit 0"),
    ("apt-get", "exit \"${LAB_APT_EXIT:-0}\""),
    ("dnf", "exit \"${LAB_APT_EXIT:-0}\""),
    (
        "curl",
        // Writes the installer where -o says, or fails as curl -f does.
        "out=''\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n[ -z \"${LAB_CURL_EXIT:-}\" ] || exit \"$LAB_CURL_EXIT\"\nprintf '%s' \"$LAB_INSTALLER\" > \"$out\"\n[ -z \"${LAB_CORRUPT:-}\" ] || echo corrupt >> \"$out\"",
    ),
    (
        "modprobe",
        "[ \"$1\" = -r ] && exit 0\n[ \"$1\" = nvidia ] && exit \"${LAB_MODPROBE_EXIT:-0}\"\nexit 1",
    ),
    ("nvidia-smi", "printf '%s\\n' \"$LAB_GPUS\""),
    ("kubeadm", "echo \"$@\" > \"$LAB_MARKS/kubeadm\""),
];

/// Runs the script in a private mount namespace where /run is a fresh
/// tmpfs and /etc and /var/lib are overlays on it, so the node's paths are
/// written without touching this machine's. Returns
/// (exit status, stderr, whether kubeadm ran).
fn run_sandboxed(
    dir: &Path,
    script: &str,
    env: &[(&str, String)],
) -> Result<(i32, String, bool), String> {
    let _ = std::fs::remove_dir_all(dir);
    let bin = dir.join("bin");
    let marks = dir.join("marks");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&marks).map_err(|e| e.to_string())?;
    for (name, body) in STUBS {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).map_err(|e| e.to_string())?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
    }
    let script_path = dir.join("runcmd");
    std::fs::write(&script_path, script).map_err(|e| e.to_string())?;
    // /etc and /var/lib as overlays (their files stay readable: awk is an
    // /etc/alternatives link), /run a fresh tmpfs.
    let setup = "set -e; mount -t tmpfs tmpfs /run; for d in etc var/lib; do n=$(echo \"$d\" | tr / _); mkdir -p \"/run/.sandbox/$n/upper\" \"/run/.sandbox/$n/work\"; mount -t overlay overlay -o \"lowerdir=/$d,upperdir=/run/.sandbox/$n/upper,workdir=/run/.sandbox/$n/work\" \"/$d\"; done; mkdir -p /run/kubeadm /run/cluster-api /etc/modprobe.d /etc/kubernetes/manifests; set +e; exec sh \"$0\"";
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", setup])
        .arg(&script_path)
        .env(
            "PATH",
            format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display()),
        )
        .env("LAB_MARKS", &marks)
        .env("LAB_INSTALLER", INSTALLER_STUB);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().map_err(|e| format!("unshare: {e}"))?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        marks.join("kubeadm").exists(),
    ))
}

/// (case, the stubs' environment, the reason the node must stop with, or
/// None when kubeadm must run)
type Case = (
    &'static str,
    Vec<(&'static str, String)>,
    Option<&'static str>,
);

/// The first-boot script of a GPU machine, run for every outcome: kubeadm
/// runs only when every step succeeded and the GPUs are the spec's.
pub(crate) fn first_boot_fails_closed(lab: &Lab, b: &Booted) -> Outcome {
    let script = runcmd_script(&b.cloud_config)?;
    check(
        script.starts_with("#!/bin/sh") && script.contains("kubeadm join"),
        || format!("{}: not a join script:\n{script}", b.machine),
    )?;
    let two = format!("{H200_LINE}\n{H200_LINE}");
    let cases: Vec<Case> = vec![
        ("every step succeeds", vec![("LAB_GPUS", two.clone())], None),
        (
            "the download fails",
            vec![("LAB_GPUS", two.clone()), ("LAB_CURL_EXIT", "22".into())],
            Some("downloading the GPU driver installer failed"),
        ),
        (
            "the checksum fails",
            vec![("LAB_GPUS", two.clone()), ("LAB_CORRUPT", "1".into())],
            Some(
                "the sha256 of the GPU driver installer does not match gpu.driverInstallerChecksum",
            ),
        ),
        (
            "the installer fails",
            vec![
                ("LAB_GPUS", two.clone()),
                ("LAB_INSTALLER_EXIT", "1".into()),
            ],
            Some("installing the GPU driver failed"),
        ),
        (
            "modprobe nvidia fails",
            vec![("LAB_GPUS", two.clone()), ("LAB_MODPROBE_EXIT", "1".into())],
            Some("loading the nvidia kernel module failed"),
        ),
        (
            "one GPU is missing",
            vec![("LAB_GPUS", H200_LINE.into())],
            Some("the node sees 1 GPUs, gpu.count says 2"),
        ),
        (
            "the GPUs are another model",
            vec![(
                "LAB_GPUS",
                "NVIDIA H100 80GB HBM3, 81559\nNVIDIA H100 80GB HBM3, 81559".into(),
            )],
            Some("GPU 0 is NVIDIA H100 80GB HBM3, gpu.model says NVIDIA H200"),
        ),
    ];
    let dir = lab.state.join(format!("first-boot-{}", b.machine));
    for (case, env, stop) in cases {
        let (code, stderr, kubeadm) = run_sandboxed(&dir, &script, &env)?;
        match stop {
            None => check(code == 0 && kubeadm, || {
                format!(
                    "{}: {case}: exit {code}, kubeadm ran {kubeadm}: {stderr}",
                    b.machine
                )
            })?,
            Some(reason) => check(
                code != 0
                    && !kubeadm
                    && stderr.contains("metalplane: stopping before kubeadm:")
                    && stderr.contains(reason),
                || {
                    format!(
                        "{}: {case}: exit {code}, kubeadm ran {kubeadm}, stderr lacks {reason:?}: {stderr}",
                        b.machine
                    )
                },
            )?,
        }
        println!(
            "    first boot, {case}: exit {code}, kubeadm {}",
            if kubeadm { "ran" } else { "never ran" }
        );
    }
    Ok(())
}
