//! The Python venv of the Redfish peer tests: sushy-tools (the emulator
//! Ironic's CI uses) and sushy-oem-idrac (Ironic's Dell library), from
//! PyPI, made once per machine inside the project.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub const PACKAGES: [&str; 3] = [
    "sushy-tools==2.2.0",
    "bcrypt==5.0.0",
    "sushy-oem-idrac==6.0.0",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn venv() -> &'static Path {
    static V: OnceLock<PathBuf> = OnceLock::new();
    V.get_or_init(|| {
        let dir = repo_root().join(".cache/sushy-venv");
        // Named by its contents: a venv from an older list is completed.
        let marker = dir.join(format!(".installed-{}", PACKAGES.join("-")));
        if !marker.exists() {
            if !dir.join("bin/pip").exists() {
                let ok = Command::new("python3")
                    .args(["-m", "venv"])
                    .arg(&dir)
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(
                    ok,
                    "python3 -m venv failed: this test needs Python 3 with venv"
                );
            }
            let ok = Command::new(dir.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .args(PACKAGES)
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "pip install {PACKAGES:?} failed (PyPI must be reachable)"
            );
            std::fs::write(&marker, "").expect("marker");
        }
        dir
    })
}
