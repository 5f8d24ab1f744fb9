//! The lab's Ironic mode: BMO drives the simulated servers through real
//! Ironic (PyPI, all-in-one, SQLite, no auth, configured as Metal3's
//! ironic-image does), sushy-tools' fake Redfish systems as their BMCs, our
//! fake agent (xtask/lab/fake-agent) as their ramdisk and an image server,
//! all inside the lab's network namespace. The demo provisioner stays the
//! default where speed matters; both modes read one inventory description
//! (the BareMetalHosts and HardwareData of the demo inventory): `for_ironic`
//! turns it into sushy's systems and hosts whose BMC is sushy.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use super::procs::{self, Spec};
use super::{Lab, LabError, progress};

pub const API_PORT: u16 = 6385;
pub const REDFISH_PORT: u16 = 8100;
pub const IMAGES_PORT: u16 = 6180;
pub const AGENT_PORT: u16 = 9999;

/// What the venv holds: Ironic as Metal3 runs it, and sushy-tools.
pub const PACKAGES: [&str; 2] = ["ironic==39.0.0", "sushy-tools==2.2.0"];

/// The image every Ironic-mode MetalCluster boots (the lab is air-gapped:
/// its own image server stands in for the site's).
pub const IMAGE: &str = "lab-node.raw";

pub fn api() -> String {
    format!("http://127.0.0.1:{API_PORT}")
}

pub fn redfish() -> String {
    format!("http://127.0.0.1:{REDFISH_PORT}")
}

pub fn images() -> String {
    format!("http://127.0.0.1:{IMAGES_PORT}")
}

/// The Python venv with PACKAGES, made once per machine outside every
/// clone (`build::cache_root`), named by its contents.
pub fn venv() -> Result<PathBuf, LabError> {
    let key = PACKAGES.join("-").replace(['=', '.'], "_");
    let dir = super::build::cache_root().join(format!("ironic-venv-{key}"));
    let marker = dir.join(".installed");
    if marker.exists() {
        return Ok(dir);
    }
    progress("making the Ironic venv (pip, about a minute)");
    procs::run(Command::new("python3").args(["-m", "venv"]).arg(&dir))?;
    procs::run(
        Command::new(dir.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(PACKAGES),
    )?;
    std::fs::write(&marker, "").map_err(|e| LabError::new(format!("venv marker: {e}")))?;
    Ok(dir)
}

/// One simulated server as sushy's fake driver holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct System {
    pub uuid: String,
    pub name: String,
    /// (name, MAC, address): what the agent reports in its inventory.
    pub nics: Vec<(String, String, String)>,
}

/// A system's UUID, from its boot MAC (unique in an inventory).
pub fn system_uuid(mac: &str) -> String {
    format!("5e1f0e2a-1b7c-4d0a-9c64-{}", mac.replace(':', ""))
}

/// The inventory for Ironic mode, and the servers behind it. Each
/// BareMetalHost's BMC becomes its sushy system; inspection is Ironic's
/// (the demo's `inspect.metal3.io: disabled` and HardwareData go: BMO
/// writes HardwareData from what the agent reports); the NICs the agent
/// reports are the HardwareData's, so the names MetalClusters use hold in
/// both modes. Other documents pass through.
pub fn for_ironic(docs: &[Value]) -> Result<(Vec<Value>, Vec<System>), LabError> {
    let hardware = |ns: &str, name: &str| {
        docs.iter().find(|d| {
            d["kind"] == "HardwareData"
                && d["metadata"]["name"] == name
                && d["metadata"]["namespace"] == ns
        })
    };
    let mut out = Vec::new();
    let mut systems = Vec::new();
    for d in docs {
        match d["kind"].as_str() {
            Some("HardwareData") => continue,
            Some("BareMetalHost") => {}
            _ => {
                out.push(d.clone());
                continue;
            }
        }
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        let ns = d["metadata"]["namespace"].as_str().unwrap_or_default();
        let mac = d["spec"]["bootMACAddress"]
            .as_str()
            .ok_or_else(|| LabError::new(format!("host {ns}/{name}: no spec.bootMACAddress")))?;
        let nics: Vec<(String, String, String)> = hardware(ns, name)
            .and_then(|h| h["spec"]["hardware"]["nics"].as_array())
            .map(|nics| {
                nics.iter()
                    .enumerate()
                    .map(|(i, n)| {
                        let s = |k: &str| n[k].as_str().unwrap_or_default().to_string();
                        // Only data to Ironic, but it must not be loopback.
                        let ip = Some(s("ip"))
                            .filter(|ip| !ip.is_empty())
                            .unwrap_or_else(|| format!("192.0.2.{}", 10 + i));
                        (s("name"), s("mac"), ip)
                    })
                    .collect()
            })
            .unwrap_or_else(|| vec![("eno1".into(), mac.to_string(), "192.0.2.10".into())]);
        let uuid = system_uuid(mac);
        let mut host = d.clone();
        host["spec"]["bmc"]["address"] =
            json!(format!("redfish+{}/redfish/v1/Systems/{uuid}", redfish()));
        if let Some(a) = host["metadata"]["annotations"].as_object_mut() {
            a.remove("inspect.metal3.io");
        }
        out.push(host);
        systems.push(System {
            uuid,
            name: name.to_string(),
            nics,
        });
    }
    Ok((out, systems))
}

/// Ironic's configuration: Metal3's settings that matter with fake
/// hardware (ironic-image's ironic.conf.j2): fast track with the agent
/// kept on after inspection (else a stale agent races the new one), its
/// own inspection, no DHCP, no TLS for the agent, and the API's own URL
/// for the agent's callbacks (else inspection finds no Ironic endpoint).
pub fn ironic_conf(dir: &Path) -> String {
    let d = dir.display();
    let http = images();
    let api = api();
    format!(
        "[DEFAULT]
auth_strategy = noauth
rpc_transport = none
enabled_hardware_types = redfish
enabled_bios_interfaces = no-bios,redfish
enabled_boot_interfaces = ipxe,redfish-virtual-media
enabled_deploy_interfaces = direct,ramdisk,custom-agent
enabled_firmware_interfaces = no-firmware,redfish
enabled_inspect_interfaces = agent,no-inspect
enabled_management_interfaces = redfish
enabled_network_interfaces = noop
enabled_power_interfaces = redfish
enabled_raid_interfaces = no-raid,agent,redfish
enabled_vendor_interfaces = no-vendor,redfish
host = lab
log_file = {d}/ironic.log
use_stderr = false
[api]
host_ip = 127.0.0.1
port = {API_PORT}
[conductor]
automated_clean = true
deploy_kernel = {http}/ipa.kernel
deploy_ramdisk = {http}/ipa.initramfs
bootloader = {http}/esp.img
[database]
connection = sqlite:///{d}/ironic.sqlite
[dhcp]
dhcp_provider = none
[deploy]
fast_track = true
http_url = {http}
http_root = {d}/http
[pxe]
ipxe_enabled = true
tftp_root = {d}/tftp
tftp_master_path = {d}/tftp/master
[agent]
require_tls = false
[inspector]
power_off = false
require_managed_boot = false
[service_catalog]
endpoint_override = {api}
[json_rpc]
auth_strategy = noauth
"
    )
}

/// sushy-tools' configuration: the fake driver (power changes land after
/// a random delay, as a BMC's do) with `systems`, each change sent to the
/// agent.
pub fn sushy_conf(systems: &[System]) -> String {
    let list: Vec<Value> = systems
        .iter()
        .map(|s| {
            json!({
                "uuid": s.uuid, "name": s.name, "power_state": "Off",
                "external_notifier": true,
                "nics": s.nics.iter().map(|(n, m, ip)| json!({"name": n, "mac": m, "ip": ip})).collect::<Vec<_>>(),
            })
        })
        .collect();
    // The file is Python: JSON read by json.loads stays JSON.
    format!(
        "import json
SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'
SUSHY_EMULATOR_LISTEN_PORT = {REDFISH_PORT}
SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_FAKE_SYSTEMS = json.loads(r'''{}''')
EXTERNAL_NOTIFICATION_URL = 'http://127.0.0.1:{AGENT_PORT}'
",
        Value::Array(list)
    )
}

/// Bytes of a served file: the ramdisk and ESP are never booted, only
/// fetched; the image is downloaded and checked by the agent.
pub fn file_bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// The node image's bytes and its sha256.
pub fn image() -> (Vec<u8>, String) {
    let b = file_bytes(2 << 20);
    let sha = crate::sha256_hex(&b);
    (b, sha)
}

fn state(lab: &Lab) -> PathBuf {
    lab.state.join("ironic")
}

/// The image server's folder: a file placed here is served at once.
pub fn served_dir(lab: &Lab) -> PathBuf {
    state(lab).join("http")
}

fn py(venv: &Path, name: &'static str, program: &str, args: Vec<String>) -> Spec {
    Spec {
        name,
        program: venv.join("bin").join(program),
        args,
        // Ironic retitles itself (setproctitle), which by default writes
        // over its environment, and with it the mark `Procs` finds it by.
        env: vec![("SPT_NOENV".into(), "1".into())],
    }
}

/// Starts the image server, sushy-tools with `systems`, Ironic and the
/// fake agent in the lab's namespace, and waits for Ironic's API. A
/// running stack with other systems gets sushy and the agent restarted.
pub fn start(lab: &Lab, systems: &[System]) -> Result<(), LabError> {
    let venv = venv()?;
    let dir = state(lab);
    let io = |e: std::io::Error| LabError::new(format!("{}: {e}", dir.display()));
    for d in ["http", "tftp/master"] {
        std::fs::create_dir_all(dir.join(d)).map_err(io)?;
    }
    for (f, n) in [
        ("ipa.kernel", 1024),
        ("ipa.initramfs", 1024),
        ("esp.img", 4096),
    ] {
        std::fs::write(dir.join("http").join(f), file_bytes(n)).map_err(io)?;
    }
    std::fs::write(dir.join("http").join(IMAGE), image().0).map_err(io)?;
    let conf = dir.join("ironic.conf");
    std::fs::write(&conf, ironic_conf(&dir)).map_err(io)?;
    let sushy = dir.join("sushy.conf");
    let sushy_text = sushy_conf(systems);
    if std::fs::read_to_string(&sushy).ok().as_deref() != Some(sushy_text.as_str()) {
        std::fs::write(&sushy, sushy_text).map_err(io)?;
        lab.procs.stop("sushy");
        lab.procs.stop("fake-agent");
    }
    // Ironic's migrations alter constraints, which SQLite cannot, so a new
    // database gets the current schema in one step; one already there was
    // made by the same pinned Ironic and is kept with its nodes.
    if !dir.join("ironic.sqlite").exists() {
        procs::run(
            Command::new(venv.join("bin/ironic-dbsync"))
                .arg("--config-file")
                .arg(&conf)
                .arg("create_schema"),
        )?;
    }
    let s = |p: &Path| p.display().to_string();
    lab.procs.start(&py(
        &venv,
        "images",
        "python3",
        vec![
            "-m".into(),
            "http.server".into(),
            IMAGES_PORT.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--directory".into(),
            s(&dir.join("http")),
        ],
    ))?;
    lab.procs.start(&py(
        &venv,
        "sushy",
        "sushy-emulator",
        vec!["--config".into(), s(&sushy)],
    ))?;
    lab.procs.start(&py(
        &venv,
        "ironic",
        "ironic",
        vec!["--config-file".into(), s(&conf)],
    ))?;
    lab.procs.start(&py(
        &venv,
        "fake-agent",
        "python3",
        vec![
            s(&crate::repo_root().join("xtask/lab/fake-agent/fake_agent.py")),
            "--listen".into(),
            format!("127.0.0.1:{AGENT_PORT}"),
            "--ironic".into(),
            api(),
            "--redfish".into(),
            redfish(),
        ],
    ))?;
    procs::wait_for("Ironic's API", Duration::from_secs(90), || {
        procs::http_ok(API_PORT, "/v1/") && procs::http_ok(REDFISH_PORT, "/redfish/v1/Systems")
    })
    .map_err(|e| {
        LabError::new(format!(
            "{e}\nlast lines of {}:\n{}",
            dir.join("ironic.log").display(),
            tail(&dir.join("ironic.log"), 15)
        ))
    })?;
    progress(&format!(
        "Ironic is up ({} simulated servers behind sushy-tools)",
        systems.len()
    ));
    Ok(())
}

fn tail(p: &Path, n: usize) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let l: Vec<&str> = s.lines().collect();
    l[l.len().saturating_sub(n)..].join("\n")
}

/// Ironic's own log (its errors name the node and the step).
pub fn log(lab: &Lab) -> PathBuf {
    state(lab).join("ironic.log")
}

/// Stops the Ironic stack (BMO must be back in demo mode first).
pub fn stop(lab: &Lab) {
    for p in ["fake-agent", "ironic", "sushy", "images"] {
        lab.procs.stop(p);
    }
}

/// BMO's environment against this Ironic: its API, and the deploy
/// ramdisk it names in every node's driver_info. No auth: BMO reads
/// credentials only from its auth folder, which the lab does not make.
pub fn bmo_env() -> Vec<(String, String)> {
    vec![
        ("IRONIC_ENDPOINT".into(), format!("{}/v1/", api())),
        (
            "DEPLOY_KERNEL_URL".into(),
            format!("{}/ipa.kernel", images()),
        ),
        (
            "DEPLOY_RAMDISK_URL".into(),
            format!("{}/ipa.initramfs", images()),
        ),
    ]
}

/// `cargo xtask lab up --ironic`: the lab, then Ironic with the servers of
/// examples/lab/inventory.yaml, and BMO (every namespace) against it.
pub fn up(lab: &Lab) -> Result<(), LabError> {
    lab.up()?;
    let (_, systems) = inventory()?;
    start(lab, &systems)?;
    super::install::restart_bmo_with(lab, None, super::install::Provisioner::Ironic)?;
    progress("BMO provisions through Ironic (Redfish: sushy-tools; ramdisk: the lab's fake agent)");
    Ok(())
}

/// The inventory file (examples/lab/inventory.yaml) in Ironic mode.
pub fn inventory() -> Result<(Vec<Value>, Vec<System>), LabError> {
    let docs = super::kube::load_yaml(&crate::repo_root().join("examples/lab/inventory.yaml"))?;
    for_ironic(&docs)
}

/// A MetalCluster booting the lab's served image (raw, its sha256).
pub fn with_lab_image(mut xr: Value) -> Value {
    let k = &mut xr["spec"]["kubernetes"];
    k["imageURL"] = json!(format!("{}/{IMAGE}", images()));
    k["imageChecksum"] = json!(image().1);
    k["imageChecksumType"] = json!("sha256");
    k["imageDiskFormat"] = json!("raw");
    xr
}

/// Whether the lab runs in Ironic mode (its Ironic is running).
pub fn active(lab: &Lab) -> bool {
    lab.procs.running("ironic").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_inventory_becomes_sushy_systems_and_redfish_hosts() {
        let docs =
            super::super::kube::load_yaml(&crate::repo_root().join("examples/lab/inventory.yaml"))
                .expect("inventory");
        let (hosts, systems) = for_ironic(&docs).expect("ironic inventory");
        let r730 = systems.iter().find(|s| s.name == "r730").expect("r730");
        assert_eq!(r730.uuid, "5e1f0e2a-1b7c-4d0a-9c64-1866da000001");
        assert_eq!(
            r730.nics[0],
            (
                "eno1".to_string(),
                "18:66:da:00:00:01".to_string(),
                "192.168.120.70".to_string()
            )
        );
        assert_eq!(r730.nics[1].0, "eno2");
        assert!(hosts.iter().all(|d| d["kind"] != "HardwareData"));
        let bmh = hosts
            .iter()
            .find(|d| d["kind"] == "BareMetalHost" && d["metadata"]["name"] == "r730")
            .expect("bmh");
        assert_eq!(
            bmh["spec"]["bmc"]["address"],
            format!(
                "redfish+http://127.0.0.1:{REDFISH_PORT}/redfish/v1/Systems/{}",
                r730.uuid
            )
        );
        assert!(
            bmh["metadata"]["annotations"]
                .get("inspect.metal3.io")
                .is_none()
        );
        // Secrets and the namespace pass through.
        assert!(hosts.iter().any(|d| d["kind"] == "Secret"));
        let conf = sushy_conf(&systems);
        assert!(conf.contains(&r730.uuid) && conf.contains("\"eno2\""));
    }
}
