//! metalplane-bmc against our iDRAC emulator, through every injected fault:
//! the final boot order, the jobs and resets issued, a bounded request
//! count, and logs without credentials.

mod idrac_emulator;

use std::time::{Duration, Instant};

use idrac_emulator::{Config, Emulator, JOBS, SETTINGS, SOURCES, VIRTUAL};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Fast timings so the faults play out in seconds; the budget is what the
/// run must stay within.
async fn bmc(emu: &Emulator, pass: &str, args: &[&str]) -> Run {
    let started = Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_metalplane-bmc"))
        .env("BMC_URL", emu.base_url())
        .env("BMC_USERNAME", "root")
        .env("BMC_PASSWORD", pass)
        .env_remove("BMC_INSECURE")
        .env_remove("RUST_LOG")
        .args(idrac_emulator::FAST_BMC_ARGS)
        .args(args)
        .output()
        .await
        .expect("metalplane-bmc runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    }
}

const PASS: &str = "s3cret-Pa55";

fn fix_args() -> Vec<&'static str> {
    vec![
        "fix-boot-order",
        "--poll",
        "50ms",
        "--jobs-poll",
        "100ms",
        "--media-wait",
        "3s",
    ]
}

fn assert_clean(r: &Run) {
    for secret in [PASS, "root:", "cm9vdDpz"] {
        assert!(
            !r.stderr.contains(secret) && !r.stdout.contains(secret),
            "a credential leaked:\n{}\n{}",
            r.stdout,
            r.stderr
        );
    }
    assert_eq!(
        r.stdout.lines().count(),
        1,
        "one outcome line: {}",
        r.stdout
    );
}

fn requests_of(r: &Run) -> u32 {
    r.stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("requests="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(u32::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixes_the_boot_order() {
    let emu = Emulator::start(Config::default()).await;
    let r = bmc(&emu, PASS, &fix_args()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.starts_with("outcome=fixed action=fix-boot-order"),
        "{}",
        r.stdout
    );
    assert_clean(&r);
    emu.with(|st| {
        assert_eq!(
            st.order()[0],
            VIRTUAL,
            "virtual drive first: {:?}",
            st.order()
        );
        assert_eq!(
            st.order()[1..],
            [
                "Disk.SATAEmbedded.A-1",
                "NIC.PxeDevice.1-1",
                "Disk.USBFront.1-1"
            ],
            "the rest keep their order"
        );
        assert_eq!(st.jobs.len(), 1, "one configuration job");
        assert!(
            st.jobs
                .values()
                .all(|j| j.state == "Completed" && j.target == SETTINGS)
        );
        assert_eq!(st.power_resets, vec!["ForceRestart"], "host was on");
        assert_eq!(st.bmc_resets, 0);
        assert_eq!(st.unauthenticated, 0, "Basic auth is sent preemptively");
        assert!(st.requests.len() <= 8, "{} requests", st.requests.len());
    });
    assert_eq!(requests_of(&r) as usize, emu.with(|s| s.requests.len()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn already_first_changes_nothing() {
    let emu = Emulator::start(Config {
        virtual_first: true,
        ..Config::default()
    })
    .await;
    let r = bmc(&emu, PASS, &fix_args()).await;
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.starts_with("outcome=already-first"),
        "{}",
        r.stdout
    );
    emu.with(|st| {
        assert_eq!(st.count("PATCH", SETTINGS), 0);
        assert!(st.jobs.is_empty() && st.power_resets.is_empty());
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_media_attached_late() {
    let emu = Emulator::start(Config {
        media_after_gets: Some(4),
        ..Config::default()
    })
    .await;
    let r = bmc(&emu, PASS, &fix_args()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("outcome=fixed"));
    emu.with(|st| {
        assert_eq!(
            st.count("GET", SOURCES),
            5,
            "polled until the drive was listed"
        );
        assert_eq!(st.order()[0], VIRTUAL);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gives_up_quietly_without_media() {
    let emu = Emulator::start(Config {
        media_after_gets: None,
        ..Config::default()
    })
    .await;
    let r = bmc(
        &emu,
        PASS,
        &["fix-boot-order", "--poll", "100ms", "--media-wait", "1s"],
    )
    .await;
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.starts_with("outcome=media-not-attached"),
        "{}",
        r.stdout
    );
    assert!(r.took < Duration::from_secs(5), "{:?}", r.took);
    emu.with(|st| {
        assert_eq!(st.count("PATCH", SETTINGS), 0);
        assert!(st.power_resets.is_empty());
        let polls = st.count("GET", SOURCES);
        assert!((5..=12).contains(&polls), "{polls} polls in 1s at 100ms");
    });
}

/// Ironic runs its virtual media boot setting, BIOS and RAID steps as
/// iDRAC jobs: they block our change (SYS011) and must survive. The program
/// waits for them, then fixes the order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ironic_jobs_are_waited_for_never_deleted() {
    let cfg = Config {
        jobs: vec![
            ("JID_000000000001", "Completed"),
            ("JID_000000000002", "Scheduled"),
            ("JID_000000000003", "Running"),
            ("JID_000000000004", "Failed"),
        ],
        jobs_finish_after_lists: Some(3),
        power_on: false,
        ..Config::default()
    };
    let emu = Emulator::start(cfg).await;
    let r = bmc(&emu, PASS, &fix_args()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("outcome=fixed"), "{}", r.stdout);
    assert!(
        r.stdout.contains("waited for 2 job(s) of others"),
        "{}",
        r.stdout
    );
    assert_clean(&r);
    emu.with(|st| {
        assert!(st.deletes.is_empty(), "deleted {:?}", st.deletes);
        for id in [
            "JID_000000000001",
            "JID_000000000002",
            "JID_000000000003",
            "JID_000000000004",
        ] {
            assert!(st.jobs.contains_key(id), "{id} survives");
        }
        assert_eq!(
            st.count("PATCH", SETTINGS),
            1,
            "no PATCH while a job blocks it"
        );
        assert_eq!(st.order()[0], VIRTUAL);
        assert_eq!(st.power_resets, vec!["On"], "host was off");
    });
}

/// Jobs of others that never finish within the wait: nothing is changed,
/// nothing deleted, nothing restarted; the outcome says who blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_by_jobs_of_others_defers_without_touching_them() {
    let cfg = Config {
        jobs: vec![("JID_000000000007", "Scheduled")],
        ..Config::default()
    };
    let emu = Emulator::start(cfg).await;
    let mut args = fix_args();
    args.extend(["--jobs-wait", "600ms"]);
    let r = bmc(&emu, PASS, &args).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("outcome=deferred"), "{}", r.stdout);
    assert!(r.stdout.contains("JID_000000000007"), "{}", r.stdout);
    emu.with(|st| {
        assert!(st.deletes.is_empty());
        assert_eq!(st.count("PATCH", SETTINGS), 0);
        assert!(st.power_resets.is_empty());
        assert!(st.job_lists >= 3, "it polled: {}", st.job_lists);
    });
}

/// An OS is already up (maybe Ironic's ramdisk from the virtual media):
/// nothing is staged and the host is not restarted, since a job waiting
/// for its next reboot would make the iDRAC refuse Ironic's import.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_running_an_os_is_left_alone() {
    for (progress, want) in [
        (Some("OSRunning"), vec![]),
        (Some("OSBootStarted"), vec![]),
        (
            Some("SystemHardwareInitializationComplete"),
            vec!["ForceRestart"],
        ),
        (None, vec!["ForceRestart"]),
    ] {
        let cfg = Config {
            boot_progress: progress,
            ..Config::default()
        };
        let emu = Emulator::start(cfg).await;
        let r = bmc(&emu, PASS, &fix_args()).await;
        assert_eq!(r.code, 0, "{progress:?}: {}\n{}", r.stdout, r.stderr);
        emu.with(|st| {
            assert_eq!(st.power_resets, want, "{progress:?}");
            if want.is_empty() {
                assert!(r.stdout.contains("outcome=deferred"), "{}", r.stdout);
                assert!(r.stdout.contains("nothing staged"), "{}", r.stdout);
                assert!(st.pending.is_none(), "{progress:?}: staged");
                assert!(st.jobs.is_empty(), "{progress:?}: a job");
                assert_eq!(st.count("PATCH", SETTINGS), 0);
            } else {
                assert!(r.stdout.contains("outcome=fixed"), "{}", r.stdout);
                assert_eq!(st.order()[0], VIRTUAL, "{progress:?}");
            }
        });
    }
}

/// The configuration job cannot be created (the firmware refuses both
/// targets): what was staged is cleared (ClearPending), so nothing waits
/// for a reboot that would block Ironic's import, and the run fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_job_leaves_nothing_staged() {
    let emu = Emulator::start(Config {
        job_targets: vec![],
        ..Config::default()
    })
    .await;
    let r = bmc(&emu, PASS, &fix_args()).await;
    assert_eq!(r.code, 4, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("outcome=failed"), "{}", r.stdout);
    emu.with(|st| {
        assert_eq!(st.count("PATCH", SETTINGS), 1);
        assert_eq!(st.clear_pendings, 1);
        assert!(st.pending.is_none(), "still staged");
        assert!(st.jobs.is_empty());
        assert!(st.power_resets.is_empty());
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_503_bursts_html_pages_and_slow_answers() {
    let cfg = Config {
        busy_503: 5,
        html_pages: 3,
        slow: Duration::from_millis(300),
        slow_count: 3,
        ..Config::default()
    };
    let emu = Emulator::start(cfg).await;
    let r = bmc(&emu, PASS, &fix_args()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("outcome=fixed"));
    assert!(r.stderr.contains("retrying"), "retries are logged");
    assert_clean(&r);
    emu.with(|st| {
        assert_eq!(st.order()[0], VIRTUAL);
        assert_eq!(
            st.jobs.len(),
            1,
            "a 503 on the job POST is not a second job"
        );
        assert_eq!(st.power_resets.len(), 1);
        assert!(
            st.requests.len() <= 8 + 5 + 3,
            "bounded: {} requests",
            st.requests.len()
        );
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn falls_back_to_bios_settings_when_firmware_wants_it() {
    let emu = Emulator::start(Config {
        job_targets: vec![idrac_emulator::BIOS_SETTINGS],
        ..Config::default()
    })
    .await;
    let r = bmc(&emu, PASS, &fix_args()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    emu.with(|st| {
        assert_eq!(st.count("POST", JOBS), 2);
        assert_eq!(
            st.jobs
                .values()
                .map(|j| j.target.as_str())
                .collect::<Vec<_>>(),
            [idrac_emulator::BIOS_SETTINGS]
        );
        assert_eq!(st.order()[0], VIRTUAL);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_the_idrac_and_waits_through_refused_connections() {
    let emu = Emulator::start(Config {
        down_after_reset: Duration::from_millis(1500),
        busy_503: 1,
        lc_not_ready_checks: 3,
        ..Config::default()
    })
    .await;
    let r = bmc(
        &emu,
        PASS,
        &["reset-bmc", "--poll", "100ms", "--down-wait", "3s"],
    )
    .await;
    // Answering again is not enough: the Lifecycle Controller must say
    // Ready (sushy-oem-idrac's reset_idrac waits for the same).
    emu.with(|st| {
        let said: Vec<&str> = st.lc_checks.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(
            said,
            [
                "NotInitialized",
                "NotInitialized",
                "NotInitialized",
                "Ready"
            ],
            "{}",
            r.stdout
        );
    });
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.starts_with("outcome=bmc-reset")
            && r.stdout
                .contains("answering again and its Lifecycle Controller Ready"),
        "{}",
        r.stdout
    );
    assert!(
        r.took >= Duration::from_millis(1500),
        "it waited for the controller: {:?}",
        r.took
    );
    assert_clean(&r);
    emu.with(|st| {
        assert_eq!(
            st.bmc_resets, 1,
            "exactly one reset (the 503 was not processed)"
        );
        assert!(st.requests.len() < 60, "{}", st.requests.len());
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_that_times_out_is_never_repeated() {
    let emu = Emulator::start(Config {
        reset_delay: Duration::from_secs(3),
        down_after_reset: Duration::from_millis(300),
        ..Config::default()
    })
    .await;
    let r = bmc(
        &emu,
        PASS,
        &["reset-bmc", "--poll", "100ms", "--down-wait", "1s"],
    )
    .await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    emu.with(|st| assert_eq!(st.bmc_resets, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gives_up_within_the_budget_when_always_busy() {
    let emu = Emulator::start(Config {
        busy_503: u32::MAX,
        ..Config::default()
    })
    .await;
    let started = Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_metalplane-bmc"))
        .env("BMC_URL", emu.base_url())
        .env("BMC_USERNAME", "root")
        .env("BMC_PASSWORD", PASS)
        .args([
            "--request-timeout",
            "1s",
            "--backoff-initial",
            "50ms",
            "--backoff-max",
            "400ms",
            "--budget",
            "2s",
            "--attempts",
            "100",
        ])
        .args(fix_args())
        .output()
        .await
        .expect("runs");
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("budget"), "{stdout}");
    assert!(
        took < Duration::from_millis(3500),
        "stopped within the budget: {took:?}"
    );
    let n = emu.with(|s| s.requests.len());
    assert!(
        (3..=20).contains(&n),
        "backoff bounds the request count: {n}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_are_capped() {
    let emu = Emulator::start(Config {
        busy_503: u32::MAX,
        ..Config::default()
    })
    .await;
    let r = bmc(&emu, PASS, &["--attempts", "4", "fix-boot-order"]).await;
    assert_eq!(r.code, 3);
    emu.with(|s| assert_eq!(s.requests.len(), 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_exit_5_without_leaking_them() {
    let emu = Emulator::start(Config::default()).await;
    let r = bmc(&emu, "wrong-Pa55word", &fix_args()).await;
    assert_eq!(r.code, 5, "{}", r.stdout);
    assert!(!r.stdout.contains("wrong-Pa55word") && !r.stderr.contains("wrong-Pa55word"));
    emu.with(|s| assert_eq!(s.bad_credentials, 1, "no retry on 401"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_bmc_exits_3() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_metalplane-bmc"))
        .env("BMC_URL", format!("http://127.0.0.1:{port}"))
        .env("BMC_USERNAME", "root")
        .env("BMC_PASSWORD", PASS)
        .args([
            "--backoff-initial",
            "10ms",
            "--backoff-max",
            "20ms",
            "--attempts",
            "3",
            "reboot",
        ])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_errors_exit_2() {
    for (url, user) in [
        ("", "root"),
        ("ftp://x", "root"),
        ("http://root:pw@10.0.0.1", "root"),
    ] {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_metalplane-bmc"));
        if !url.is_empty() {
            cmd.env("BMC_URL", url);
        } else {
            cmd.env_remove("BMC_URL");
        }
        let out = cmd
            .env("BMC_USERNAME", user)
            .env("BMC_PASSWORD", PASS)
            .arg("reboot")
            .output()
            .await
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{url}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("pw@"),
            "credentials in a URL are not echoed"
        );
    }
}

/// End to end: the Job the operation emits for a provisioning host runs,
/// with its own args and env (secret refs filled in as the kubelet would),
/// against the emulator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emitted_job_runs_as_written() {
    let emu = Emulator::start(Config::default()).await;
    let host = serde_json::json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "r730", "namespace": "metal"},
        "spec": {"bmc": {"address": format!("idrac-virtualmedia+http://{}/redfish/v1/Systems/System.Embedded.1", emu.addr), "credentialsName": "r730-bmc"}},
        "status": {"provisioning": {"state": "provisioning"}, "errorCount": 0},
    });
    let input = serde_json::json!({"mediaWaitSeconds": 10});
    let rendered = metalplane::render::operate(&host, Some(&input), &[]).expect("operate");
    let job = &rendered.documents[1];
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"][0], "/usr/local/bin/metalplane-bmc");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_metalplane-bmc"));
    cmd.env_clear();
    for e in c["env"].as_array().expect("env") {
        let name = e["name"].as_str().expect("name");
        let value = match e
            .pointer("/valueFrom/secretKeyRef/key")
            .and_then(|k| k.as_str())
        {
            Some("username") => "root".to_string(),
            Some("password") => PASS.to_string(),
            Some(other) => panic!("unexpected secret key {other}"),
            None => e["value"].as_str().expect("value").to_string(),
        };
        cmd.env(name, value);
    }
    let args: Vec<String> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("arg").to_string())
        .collect();
    let out = cmd
        .args(&args)
        .args(["--backoff-initial", "20ms", "--poll", "50ms"])
        .output()
        .await
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("outcome=fixed"), "{stdout}");
    emu.with(|st| assert_eq!(st.order()[0], VIRTUAL));
}

/// A Lifecycle Controller that never reports Ready: the wait is bounded,
/// the outcome says timeout, and the iDRAC is reset once only (a failed
/// Job would be retried, and a second reset restarts what was waited for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifecycle_controller_never_ready_times_out_after_one_reset() {
    let emu = Emulator::start(Config {
        down_after_reset: Duration::from_millis(300),
        lc_not_ready_checks: u32::MAX,
        ..Config::default()
    })
    .await;
    let r = bmc(
        &emu,
        PASS,
        &[
            "reset-bmc",
            "--poll",
            "100ms",
            "--down-wait",
            "2s",
            "--ready-wait",
            "2s",
        ],
    )
    .await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.starts_with("outcome=timeout")
            && r.stdout
                .contains("Lifecycle Controller did not report Ready"),
        "{}",
        r.stdout
    );
    assert!(r.took < Duration::from_secs(6), "bounded: {:?}", r.took);
    assert_clean(&r);
    emu.with(|st| {
        assert_eq!(st.bmc_resets, 1);
        assert!(st.lc_checks.len() >= 3, "{}", st.lc_checks.len());
        assert!(st.lc_checks.iter().all(|(_, s)| s != "Ready"));
    });
}

/// Hundreds of finished jobs on the iDRAC: the job queue is read with one
/// expanded request per look, never one GET per job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_queue_is_read_in_one_expanded_request() {
    let ids: Vec<&'static str> = (0..300)
        .map(|i| &*Box::leak(format!("JID_{:012}", 500_000 + i).into_boxed_str()))
        .collect();
    let emu = Emulator::start(Config {
        jobs: ids.iter().map(|id| (*id, "Completed")).collect(),
        ..Config::default()
    })
    .await;
    let r = bmc(&emu, PASS, &fix_args()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("outcome=fixed"), "{}", r.stdout);
    emu.with(|st| {
        let job_gets = st
            .requests
            .iter()
            .filter(|(_, m, p)| m == "GET" && p.starts_with(&format!("{JOBS}/")))
            .count();
        assert_eq!(job_gets, 0, "one GET per job");
        assert!(st.job_lists >= 1);
        assert!(st.requests.len() < 30, "{} requests", st.requests.len());
    });
}

/// Ironic's import job appears while ours is created: the host is not
/// restarted under it; ours runs at the reboot Ironic makes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_restart_while_ironics_job_pends() {
    let emu = Emulator::start(Config {
        jobs_on_create: vec![("JID_000000000042", "Running")],
        ..Config::default()
    })
    .await;
    let r = bmc(&emu, PASS, &fix_args()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.starts_with("outcome=fixed") && r.stdout.contains("JID_000000000042"),
        "{}",
        r.stdout
    );
    emu.with(|st| {
        assert!(st.power_resets.is_empty(), "{:?}", st.power_resets);
        assert_eq!(st.jobs["JID_000000000042"].state, "Running");
    });
}
