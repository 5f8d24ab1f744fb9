//! After every outcome of `metalplane-bmc fix-boot-order`, Ironic's own
//! Dell library (sushy-oem-idrac, PyPI) sets the virtual media boot on our
//! iDRAC emulator, as Ironic's `idrac` virtual media boot does: it must be
//! taken at once, without the power cycle sushy-oem-idrac makes when the
//! iDRAC refuses the import (LC068: values staged or a configuration job
//! pending). A control run stages values without a job, as the job program
//! once could, and shows the library power-cycling the server.

mod idrac_emulator;
mod python_venv;

use std::time::Duration;

use idrac_emulator::{Config, Emulator, VIRTUAL};

const PASS: &str = "s3cret-Pa55";

struct Run {
    code: i32,
    out: String,
}

async fn run(cmd: &mut tokio::process::Command, emu: &Emulator) -> Run {
    let out = cmd
        .env("BMC_URL", emu.base_url())
        .env("BMC_USERNAME", "root")
        .env("BMC_PASSWORD", PASS)
        .output()
        .await
        .expect("runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        out: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

async fn fix(emu: &Emulator, extra: &[&str]) -> Run {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_metalplane-bmc"));
    cmd.args(idrac_emulator::FAST_BMC_ARGS)
        .args([
            "fix-boot-order",
            "--poll",
            "50ms",
            "--jobs-poll",
            "100ms",
            "--media-wait",
            "1s",
            "--jobs-wait",
            "500ms",
        ])
        .args(extra)
        .env_remove("RUST_LOG");
    run(&mut cmd, emu).await
}

async fn ironic_sets_virtual_media_boot(emu: &Emulator) -> Run {
    let venv = tokio::task::spawn_blocking(|| python_venv::venv().to_path_buf())
        .await
        .expect("venv");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/tools/oem_idrac_boot.py");
    let mut cmd = tokio::process::Command::new(venv.join("bin/python"));
    cmd.arg(script);
    run(&mut cmd, emu).await
}

/// (case, emulator, what fix-boot-order must say, exit code)
fn cases() -> Vec<(&'static str, Config, &'static str, i32)> {
    vec![
        ("done", Config::default(), "outcome=fixed", 0),
        (
            "already first",
            Config {
                virtual_first: true,
                ..Config::default()
            },
            "outcome=already-first",
            0,
        ),
        (
            "deferred by Ironic's jobs",
            Config {
                jobs: vec![("JID_000000000007", "Running")],
                ..Config::default()
            },
            "outcome=deferred",
            0,
        ),
        (
            "deferred: an OS is up",
            Config {
                boot_progress: Some("OSRunning"),
                ..Config::default()
            },
            "outcome=deferred",
            0,
        ),
        (
            "media never appeared",
            Config {
                media_after_gets: None,
                ..Config::default()
            },
            "outcome=media-not-attached",
            0,
        ),
        (
            "job creation refused",
            Config {
                job_targets: vec![],
                ..Config::default()
            },
            "outcome=failed",
            4,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ironic_boots_virtual_media_after_every_outcome_without_a_power_cycle() {
    for (case, cfg, said, code) in cases() {
        let emu = Emulator::start(cfg).await;
        let r = fix(&emu, &[]).await;
        assert_eq!(r.code, code, "{case}: {}", r.out);
        assert!(r.out.contains(said), "{case}: {}", r.out);
        // Ironic's own jobs (the deferring case) finish before it imports.
        emu.with_mut(|st| {
            for (id, _) in st.cfg.jobs.clone() {
                if let Some(j) = st.jobs.get_mut(id) {
                    j.state = "Completed".into();
                }
            }
        });
        let resets_before = emu.with(|st| st.power_resets.len());
        let ironic = ironic_sets_virtual_media_boot(&emu).await;
        assert_eq!(ironic.code, 0, "{case}: sushy-oem-idrac: {}", ironic.out);
        emu.with(|st| {
            assert_eq!(
                st.imports,
                vec![(true, String::new())],
                "{case}: the import was taken at once"
            );
            assert_eq!(
                st.power_resets.len(),
                resets_before,
                "{case}: sushy-oem-idrac power-cycled the server: {:?}",
                st.power_resets
            );
            assert!(st.pending.is_none(), "{case}: values still staged");
        });
        println!(
            "{case}: {} then Ironic's import taken, no power cycle",
            said
        );
    }
}

/// The control: values staged without a job (what the job program could
/// leave before). The iDRAC refuses the import with LC068, and
/// sushy-oem-idrac power-cycles the server, as in the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_staged_without_a_job_make_ironic_power_cycle() {
    let emu = Emulator::start(Config::default()).await;
    emu.with_mut(|st| {
        let mut seq = st.listed();
        for e in &mut seq {
            if e["Name"] == VIRTUAL {
                e["Index"] = serde_json::json!(-1);
            }
        }
        st.pending = Some(seq);
    });
    let ironic = tokio::time::timeout(
        Duration::from_secs(120),
        ironic_sets_virtual_media_boot(&emu),
    )
    .await
    .expect("sushy-oem-idrac gives up in time");
    emu.with(|st| {
        assert!(
            st.imports
                .first()
                .is_some_and(|(ok, id)| !ok && id == "LC068"),
            "{:?}",
            st.imports
        );
        assert!(
            st.power_resets.iter().any(|r| r == "ForceOff"),
            "no power cycle: {:?}; {}",
            st.power_resets,
            ironic.out
        );
    });
}
