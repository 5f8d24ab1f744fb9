//! The lab's fake agent (xtask/lab/fake-agent) against real Ironic: the
//! stand-in for ironic-python-agent must do what the real one does, so
//! Ironic 39 (PyPI, all-in-one, SQLite, no auth, as Metal3's ironic-image
//! configures it) drives a sushy-tools fake Redfish server through
//! inspection, automated cleaning, a deploy with a config drive and an
//! undeploy, with our agent as its ramdisk (which downloads the image and
//! checks its sha256); a deploy of an image that is not there fails with
//! Ironic's message naming it. Everything
//! runs in a network namespace of its own with only loopback up.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use xtask::lab::ironic::{self, System};

const SYSTEM: &str = "5e1f0e2a-1b7c-4d0a-9c64-2a4f7b1d0001";
const MAC: &str = "00:5c:52:31:3a:01";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The test's own namespace and processes, gone when dropped.
struct Netns {
    name: String,
    children: Vec<Child>,
}

impl Netns {
    fn new() -> Netns {
        let name = format!("metalplane-ironic-{}", std::process::id());
        let ok = |c: &mut Command| c.status().is_ok_and(|s| s.success());
        assert!(
            ok(Command::new("ip").args(["netns", "add", &name])),
            "ip netns add {name} (needs root and iproute2)"
        );
        assert!(ok(
            Command::new("ip").args(["-n", &name, "link", "set", "lo", "up"])
        ));
        Netns {
            name,
            children: vec![],
        }
    }

    fn cmd(&self, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    fn spawn(&mut self, mut c: Command, log: &Path) {
        let f = std::fs::File::create(log).expect("log file");
        let child = c
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("log"))
            .stderr(f)
            .spawn()
            .expect("a lab process starts");
        self.children.push(child);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

#[test]
fn real_ironic_takes_the_fake_agent_through_a_servers_life() {
    assert!(
        Command::new("sh")
            .args(["-c", "command -v xorrisofs || command -v genisoimage"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "Ironic builds config drives with xorrisofs or genisoimage: apt-get install xorriso"
    );
    let venv = ironic::venv().expect("the Ironic venv (PyPI must be reachable)");
    let dir = std::env::temp_dir().join(format!("metalplane-ironic-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["http", "tftp/master"] {
        std::fs::create_dir_all(dir.join(d)).expect("dirs");
    }
    // The deploy ramdisk and ESP are only served, never booted; the image
    // is downloaded and checked by the agent.
    for (f, n) in [
        ("ipa.kernel", 1024),
        ("ipa.initramfs", 1024),
        ("esp.img", 4096),
    ] {
        std::fs::write(dir.join("http").join(f), ironic::file_bytes(n)).expect("file");
    }
    let (image, sha) = ironic::image();
    std::fs::write(dir.join("http/image.raw"), image).expect("image");
    // The lab's own configuration of both (xtask::lab::ironic).
    std::fs::write(dir.join("ironic.conf"), ironic::ironic_conf(&dir)).expect("conf");
    let system = System {
        uuid: SYSTEM.into(),
        name: "lab-ironic-1".into(),
        nics: vec![("eno1".into(), MAC.into(), "192.168.120.90".into())],
    };
    std::fs::write(dir.join("sushy.conf"), ironic::sushy_conf(&[system])).expect("conf");
    let conf = dir.join("ironic.conf");
    let out = Command::new(venv.join("bin/ironic-dbsync"))
        .arg("--config-file")
        .arg(&conf)
        .arg("create_schema")
        .output()
        .expect("ironic-dbsync");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut ns = Netns::new();
    let py = venv.join("bin/python3");
    let mut http = ns.cmd(&py);
    http.args([
        "-m",
        "http.server",
        &ironic::IMAGES_PORT.to_string(),
        "--bind",
        "127.0.0.1",
        "--directory",
    ])
    .arg(dir.join("http"));
    ns.spawn(http, &dir.join("http.log"));
    let mut sushy = ns.cmd(&venv.join("bin/sushy-emulator"));
    sushy.arg("--config").arg(dir.join("sushy.conf"));
    ns.spawn(sushy, &dir.join("sushy.log"));
    let mut ironic = ns.cmd(&venv.join("bin/ironic"));
    ironic.arg("--config-file").arg(&conf);
    ns.spawn(ironic, &dir.join("ironic.out"));
    let mut agent = ns.cmd(&py);
    agent
        .arg(repo_root().join("xtask/lab/fake-agent/fake_agent.py"))
        .args(["--ironic", &ironic::api(), "--redfish", &ironic::redfish()]);
    ns.spawn(agent, &dir.join("agent.log"));

    let t = Instant::now();
    let out = ns
        .cmd(&py)
        .arg(repo_root().join("tests/tools/ironic_cycle.py"))
        .args([
            &ironic::api(),
            &ironic::redfish(),
            SYSTEM,
            MAC,
            &format!("{}/image.raw", ironic::images()),
            &sha,
        ])
        .output()
        .expect("the driver runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let agent_log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    let tail = |f: &str| {
        let s = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    };
    assert!(
        out.status.success(),
        "the cycle stopped:\n{stdout}\n{}\nagent:\n{}\nironic:\n{}",
        String::from_utf8_lossy(&out.stderr),
        tail("agent.log"),
        tail("ironic.log")
    );
    println!(
        "{}\n(all in {:.0} s)",
        stdout
            .lines()
            .filter(|l| l.starts_with("phase="))
            .collect::<Vec<_>>()
            .join("\n"),
        t.elapsed().as_secs_f64()
    );
    // Inspection data as BMO reads it: the NIC under the name the
    // MetalClusters use, with its MAC; a disk for the root device.
    let inv: serde_json::Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("inventory="))
        .and_then(|j| serde_json::from_str(j).ok())
        .expect("inventory line");
    assert_eq!(inv["interfaces"][0]["name"], "eno1", "{inv}");
    assert_eq!(inv["interfaces"][0]["mac_address"], MAC);
    assert!(inv["disks"][0]["size"].as_u64().unwrap_or(0) > 0);
    // The image was really downloaded and checked, with the config drive.
    assert!(
        agent_log.contains("written (sha256 ok), config drive present"),
        "{agent_log}"
    );
    // A missing image fails the deploy in Ironic's words, naming it.
    let phase = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("phase={name} ")))
            .unwrap_or_default()
            .to_string()
    };
    let missing = phase("bad-image");
    assert!(
        missing.contains("state=deploy failed")
            && missing.contains("404")
            && missing.contains("image.raw.missing"),
        "{missing}"
    );

    let _ = std::fs::remove_dir_all(&dir);
}
