//! The NVIDIA driver at first boot, as commands before kubeadm.
//!
//! cloud-init runs `runcmd` (CABPK puts these commands, then `kubeadm init`
//! or `join`, there) as one `sh` script without `set -e`: a failed step
//! would let kubeadm join a node labelled for Modelplane without a driver.
//! So every step that matters ends the script on failure, with the reason
//! on the console, and the node never joins. The last step checks what the
//! driver sees against `gpu` (count, NVML name, memory), since a node with
//! a missing or other GPU must not be offered to Modelplane either.
//!
//! Every value from the spec is validated first and single-quoted here.

use std::borrow::Cow;

use crate::api::DriverSetup;
use crate::spec::Gpu;

/// Where the installer is stored on the node; root-only.
pub const INSTALLER_DIR: &str = "/var/lib/metalplane";
pub const INSTALLER_PATH: &str = "/var/lib/metalplane/nvidia-installer.run";
/// What the node's driver reports, one `NAME, MIB` line per GPU.
pub const GPU_QUERY: &str =
    "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits";
pub const GPU_LIST: &str = "/run/metalplane-gpus.csv";
/// The prefix of every message the node prints when it stops.
pub const STOP: &str = "metalplane: stopping before kubeadm:";

/// Single-quotes a value for sh. Validation already refused NUL and every
/// metacharacter; quoting is the second line of defence.
pub fn sh_quote(s: &str) -> String {
    shlex::try_quote(s)
        .map(Cow::into_owned)
        .unwrap_or_else(|_| "''".to_string())
}

/// `cmd`, ending the first-boot script when it fails.
fn step(cmd: &str, what: &str) -> String {
    let msg = sh_quote(&format!("{STOP} {what} failed"));
    format!("{cmd} || {{ echo {msg} >&2; exit 1; }}")
}

pub fn gpu_commands(gpu: &Gpu) -> Vec<String> {
    let mut cmds = vec![
        "systemctl enable --now containerd".to_string(),
        step(
            "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > /etc/modprobe.d/blacklist-nouveau.conf",
            "blacklisting nouveau",
        ),
        // Not loaded is fine: nothing to unload.
        "modprobe -r nouveau || true".to_string(),
    ];
    match gpu.setup {
        DriverSetup::Build => cmds.push(step(
            // Headers, a compiler and DKMS for the running kernel, on
            // Debian/Ubuntu or Fedora/RHEL images.
            "if command -v apt-get >/dev/null 2>&1; then apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \"linux-headers-$(uname -r)\" gcc make dkms; else dnf install -y \"kernel-devel-$(uname -r)\" gcc make dkms; fi",
            "installing the kernel headers, compiler and DKMS",
        )),
        DriverSetup::BuildWithImageTools => cmds.push(step(
            "command -v gcc >/dev/null && command -v make >/dev/null && command -v dkms >/dev/null && [ -d \"/lib/modules/$(uname -r)/build\" ]",
            "finding the image's kernel headers, compiler and DKMS (gpu.driverSetup BuildWithImageTools)",
        )),
        DriverSetup::Preinstalled => {}
    }
    if let Some(url) = &gpu.driver_installer_url {
        let installer = sh_quote(INSTALLER_PATH);
        cmds.push(step(
            &format!(
                "install -d -m 0700 {dir} && curl -fsSL --retry 5 --retry-delay 5 -o {installer} {url}",
                dir = sh_quote(INSTALLER_DIR),
                url = sh_quote(url),
            ),
            "downloading the GPU driver installer",
        ));
        if let Some(sum) = &gpu.driver_installer_checksum {
            // A mismatch removes the file, so an unverified installer
            // never runs, not even on a rerun.
            cmds.push(format!(
                "echo {line} | sha256sum -c - || {{ rm -f {installer}; echo {msg} >&2; exit 1; }}",
                line = sh_quote(&format!("{sum}  {INSTALLER_PATH}")),
                msg = sh_quote(&format!(
                    "{STOP} the sha256 of the GPU driver installer does not match gpu.driverInstallerChecksum"
                )),
            ));
        }
        // --dkms registers the module with DKMS, which rebuilds it for
        // each new kernel; without it a kernel update loses the driver.
        cmds.push(step(
            &format!("sh {installer} --silent --dkms"),
            "installing the GPU driver",
        ));
    }
    cmds.push(step("modprobe nvidia", "loading the nvidia kernel module"));
    if let Some(check) = gpu_check(gpu) {
        cmds.push(step(
            &format!("{GPU_QUERY} > {GPU_LIST}"),
            "listing the GPUs (nvidia-smi)",
        ));
        cmds.push(check);
    }
    cmds
}

/// Compares what the driver sees with `gpu.count`, `gpu.model` and
/// `gpu.memory`; None when the spec says none of them. The expected values
/// travel as environment variables, which awk reads without interpreting
/// escapes (`-v` would).
pub fn gpu_check(gpu: &Gpu) -> Option<String> {
    if gpu.count.is_none() && gpu.model.is_none() && gpu.memory.is_none() {
        return None;
    }
    let count = gpu.count.map(|c| c.to_string()).unwrap_or_default();
    let model = gpu.model.clone().unwrap_or_default();
    let mib = gpu
        .memory
        .as_deref()
        .and_then(quantity_mib)
        .map(|m| m.to_string())
        .unwrap_or_default();
    let program = concat!(
        "{ n++; name = $1; mem = $2 + 0; ",
        "if (ENVIRON[\"WANT_MODEL\"] != \"\" && name != ENVIRON[\"WANT_MODEL\"]) bad = bad sprintf(\" GPU %d is %s, gpu.model says %s;\", n - 1, name, ENVIRON[\"WANT_MODEL\"]); ",
        "if (ENVIRON[\"WANT_MIB\"] != \"\" && mem < ENVIRON[\"WANT_MIB\"] + 0) bad = bad sprintf(\" GPU %d has %d MiB, gpu.memory asks for %d MiB;\", n - 1, mem, ENVIRON[\"WANT_MIB\"]) } ",
        "END { if (ENVIRON[\"WANT_COUNT\"] != \"\" && n + 0 != ENVIRON[\"WANT_COUNT\"] + 0) bad = bad sprintf(\" the node sees %d GPUs, gpu.count says %d;\", n, ENVIRON[\"WANT_COUNT\"]); ",
        "if (bad != \"\") { print ENVIRON[\"STOP\"] \" the GPUs do not match spec.gpu:\" bad > \"/dev/stderr\"; exit 1 } }",
    );
    Some(format!(
        "STOP={stop} WANT_COUNT={count} WANT_MODEL={model} WANT_MIB={mib} awk -F ', *' {program} {GPU_LIST} || exit 1",
        stop = sh_quote(STOP),
        count = sh_quote(&count),
        model = sh_quote(&model),
        mib = sh_quote(&mib),
        program = sh_quote(program),
    ))
}

/// A validated quantity (16Gi, 80G, 143771Mi) in MiB, rounded up: NVML
/// reports whole MiB, and a GPU must have at least the quantity.
pub fn quantity_mib(q: &str) -> Option<u64> {
    let digits = q.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let factor: f64 = match &q[digits.len()..] {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0_f64.powi(3),
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        _ => return None,
    };
    let bytes = digits.parse::<f64>().ok()? * factor;
    Some((bytes / (1024.0 * 1024.0)).ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(setup: DriverSetup, url: Option<&str>) -> Gpu {
        Gpu {
            setup,
            driver_installer_url: url.map(String::from),
            driver_installer_checksum: None,
            model: Some("NVIDIA H200".into()),
            count: Some(8),
            memory: Some("143771Mi".into()),
        }
    }

    /// Each setup runs what it says and nothing else, and every command
    /// but the tolerant nouveau unload ends the script on failure.
    #[test]
    fn each_driver_setup_runs_its_steps() {
        let joined = |g: &Gpu| gpu_commands(g).join("\n");
        let build = joined(&gpu(DriverSetup::Build, Some("http://lan/n.run")));
        assert!(build.contains("apt-get install") && build.contains(" dkms"));
        assert!(build.contains("--silent --dkms"));
        let offline = joined(&gpu(
            DriverSetup::BuildWithImageTools,
            Some("http://lan/n.run"),
        ));
        assert!(!offline.contains("apt-get") && !offline.contains("dnf"));
        assert!(offline.contains("command -v dkms") && offline.contains("--silent --dkms"));
        let pre = joined(&gpu(DriverSetup::Preinstalled, None));
        assert!(!pre.contains("apt-get") && !pre.contains("curl") && !pre.contains("installer"));
        for g in [
            gpu(DriverSetup::Build, Some("http://lan/n.run")),
            gpu(DriverSetup::Preinstalled, None),
        ] {
            let cmds = gpu_commands(&g);
            assert!(cmds.iter().any(|c| c.starts_with("modprobe nvidia ||")));
            assert!(cmds.last().is_some_and(|c| c.contains("WANT_COUNT=8 ")
                && c.contains("WANT_MIB=143771 ")
                && c.ends_with("|| exit 1")));
            for c in &cmds {
                assert!(
                    c.contains("exit 1")
                        || c == "systemctl enable --now containerd"
                        || c == "modprobe -r nouveau || true",
                    "fails open: {c}"
                );
            }
        }
    }

    #[test]
    fn no_check_without_a_gpu_description() {
        let mut g = gpu(DriverSetup::Build, Some("http://lan/n.run"));
        (g.model, g.count, g.memory) = (None, None, None);
        assert!(gpu_check(&g).is_none());
        assert!(!gpu_commands(&g).iter().any(|c| c.contains("nvidia-smi")));
    }

    #[test]
    fn memory_in_mib_rounds_up() {
        assert_eq!(quantity_mib("143771Mi"), Some(143771));
        assert_eq!(quantity_mib("16Gi"), Some(16384));
        assert_eq!(quantity_mib("141G"), Some(134469));
        assert_eq!(quantity_mib("1"), Some(1));
        assert_eq!(quantity_mib("1.5Gi"), Some(1536));
        assert_eq!(quantity_mib("3X"), None);
    }
}
