//! Effects of the lab: the network namespace and the processes inside it.
//! Every process runs in the namespace (only loopback up), so nothing it
//! dials can leave the machine, and its ports cannot collide with the host's.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::LabError;

pub const NETNS: &str = "metalplane-lab";

/// Runs a command to completion; stdout, or stderr in the error.
pub fn run(cmd: &mut Command) -> Result<String, LabError> {
    let out = cmd
        .output()
        .map_err(|e| LabError::new(format!("{cmd:?}: {e}")))?;
    if !out.status.success() {
        return Err(LabError::new(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn netns_exists() -> bool {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.split_whitespace().next() == Some(NETNS))
        })
        .unwrap_or(false)
}

/// Creates the namespace with loopback up and nothing else: no route, no
/// other interface.
pub fn ensure_netns() -> Result<(), LabError> {
    if !netns_exists() {
        run(Command::new("ip").args(["netns", "add", NETNS]))?;
    }
    run(Command::new("ip").args(["-n", NETNS, "link", "set", "lo", "up"]))?;
    Ok(())
}

/// Adds an address to the namespace's loopback (a node address the
/// workload API answers on): reachable inside the namespace only.
pub fn add_loopback_address(ip: &str) -> Result<(), LabError> {
    let have = run(Command::new("ip").args(["-n", NETNS, "-o", "addr", "show", "dev", "lo"]))?;
    if have.contains(&format!(" {ip}/")) {
        return Ok(());
    }
    run(Command::new("ip").args(["-n", NETNS, "addr", "add", &format!("{ip}/32"), "dev", "lo"]))?;
    Ok(())
}

pub fn delete_netns() -> Result<(), LabError> {
    if netns_exists() {
        run(Command::new("ip").args(["netns", "delete", NETNS]))?;
    }
    Ok(())
}

/// A command that runs inside the namespace.
pub fn in_netns(program: &Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", NETNS]).arg(program);
    c
}

/// One long-running process of the lab.
pub struct Spec {
    pub name: &'static str,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

pub struct Procs {
    pub state: PathBuf,
}

impl Procs {
    fn pid_file(&self, name: &str) -> PathBuf {
        self.state.join("pids").join(name)
    }
    pub fn log_file(&self, name: &str) -> PathBuf {
        self.state.join("logs").join(format!("{name}.log"))
    }

    /// The pid of a running process the lab started, if it still runs.
    pub fn running(&self, name: &str) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.pid_file(name))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        // A recycled pid would be another program: check it is still ours.
        let cmdline = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let marker = format!("METALPLANE_LAB_PROC={name}");
        cmdline
            .split(|b| *b == 0)
            .any(|kv| kv == marker.as_bytes())
            .then_some(pid)
    }

    /// Starts `spec` in its own session (it outlives this command), with
    /// output appended to its log. Idempotent: a running process is kept.
    pub fn start(&self, spec: &Spec) -> Result<u32, LabError> {
        if let Some(pid) = self.running(spec.name) {
            // A rebuilt binary (the function after a code change, say)
            // replaces the running one; otherwise `up` leaves it alone.
            let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            match (modified(&spec.program), modified(&self.pid_file(spec.name))) {
                (Some(bin), Some(started)) if bin > started => self.stop(spec.name),
                _ => return Ok(pid),
            }
        }
        for d in ["pids", "logs", "specs"] {
            std::fs::create_dir_all(self.state.join(d))
                .map_err(|e| LabError::new(format!("{}: {e}", self.state.display())))?;
        }
        // Kept so `respawn` starts it again exactly as it ran (chaos.rs).
        let saved =
            serde_json::json!({"program": spec.program, "args": spec.args, "env": spec.env});
        std::fs::write(self.spec_file(spec.name), saved.to_string())
            .map_err(|e| LabError::new(format!("spec of {}: {e}", spec.name)))?;
        self.spawn(spec.name, &spec.program, &spec.args, &spec.env)
    }

    fn spec_file(&self, name: &str) -> PathBuf {
        self.state.join("specs").join(format!("{name}.json"))
    }

    fn spawn(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<u32, LabError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_file(name))
            .map_err(|e| LabError::new(format!("log of {name}: {e}")))?;
        let err = log
            .try_clone()
            .map_err(|e| LabError::new(format!("log of {name}: {e}")))?;
        let mut cmd = Command::new("setsid");
        cmd.args(["ip", "netns", "exec", NETNS])
            .arg(program)
            .args(args)
            .env("METALPLANE_LAB_PROC", name)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .map_err(|e| LabError::new(format!("cannot start {name}: {e}")))?;
        let pid = child.id();
        std::fs::write(self.pid_file(name), pid.to_string())
            .map_err(|e| LabError::new(format!("pid of {name}: {e}")))?;
        Ok(pid)
    }

    /// SIGKILL to a process and its session, no grace: a crash, an OOM
    /// kill. Its pid file stays (`respawn` replaces it).
    pub fn kill(&self, name: &str) -> Option<u32> {
        let pid = self.running(name)?;
        signal(pid, "KILL");
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.running(name).is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(pid)
    }

    /// Starts a stopped process again with the program, flags and
    /// environment it last ran with, as a kubelet restarts a container.
    pub fn respawn(&self, name: &str) -> Result<u32, LabError> {
        if let Some(pid) = self.running(name) {
            return Ok(pid);
        }
        let path = self.spec_file(name);
        let saved: serde_json::Value = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .ok_or_else(|| LabError::new(format!("{}: no saved spec", path.display())))?;
        let program = PathBuf::from(saved["program"].as_str().unwrap_or_default());
        let args: Vec<String> = serde_json::from_value(saved["args"].clone()).unwrap_or_default();
        let env: Vec<(String, String)> =
            serde_json::from_value(saved["env"].clone()).unwrap_or_default();
        self.spawn(name, &program, &args, &env)
    }

    /// Stops one process: TERM to its session, then KILL after a grace period.
    pub fn stop(&self, name: &str) {
        if let Some(pid) = self.running(name) {
            signal(pid, "TERM");
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.running(name).is_some() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            if self.running(name).is_some() {
                signal(pid, "KILL");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let _ = std::fs::remove_file(self.pid_file(name));
    }

    /// Names of every process with a pid file, newest first, so `down`
    /// stops dependents before what they depend on.
    pub fn started(&self) -> Vec<String> {
        let mut v: Vec<(std::time::SystemTime, String)> =
            std::fs::read_dir(self.state.join("pids"))
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .filter_map(|e| {
                            let t = e.metadata().ok()?.modified().ok()?;
                            Some((t, e.file_name().to_string_lossy().into_owned()))
                        })
                        .collect()
                })
                .unwrap_or_default();
        v.sort();
        v.into_iter().rev().map(|(_, n)| n).collect()
    }

    /// The last lines of a process's log, for error messages.
    pub fn tail(&self, name: &str, lines: usize) -> String {
        let s = std::fs::read_to_string(self.log_file(name)).unwrap_or_default();
        let all: Vec<&str> = s.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

fn signal(pid: u32, sig: &str) {
    // The process leads its own session (setsid): signal the group.
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), "--", &format!("-{pid}")])
        .stderr(Stdio::null())
        .status();
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Polls `check` until it holds or `timeout` passes; `what` names it.
pub fn wait_for(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> bool,
) -> Result<(), LabError> {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(LabError::new(format!(
                "timed out after {} s waiting for {what}",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// An HTTP(S)-less probe inside the namespace: does anything listen on
/// 127.0.0.1:port? (bash's /dev/tcp, so no client tool is needed.)
pub fn port_open(port: u16) -> bool {
    Command::new("ip")
        .args(["netns", "exec", NETNS, "bash", "-c"])
        .arg(format!("exec 3<>/dev/tcp/127.0.0.1/{port}"))
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Plain-HTTP GET inside the namespace: the body of a 200 answer. Python's
/// client, since the function's metrics server (hyper) does not answer
/// bash's bare /dev/tcp request.
pub fn http_get(port: u16, path: &str) -> Result<String, LabError> {
    run(Command::new("ip")
        .args(["netns", "exec", NETNS, "python3", "-c"])
        .arg(
            "import sys, urllib.request; \
             sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())",
        )
        .arg(format!("http://127.0.0.1:{port}{path}")))
}

/// Plain-HTTP GET inside the namespace; true on a 200 answer.
pub fn http_ok(port: u16, path: &str) -> bool {
    Command::new("ip")
        .args(["netns", "exec", NETNS, "bash", "-c"])
        .arg(format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET {path} HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' >&3 && head -c 12 <&3 | grep -q ' 200'"
        ))
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}
