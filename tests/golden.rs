//! Golden renders through the real binary, as a user runs it. Regenerate
//! with UPDATE_GOLDEN=1 after an intended change, and review the diff.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

fn render(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_function-metalplane"))
        .arg("render")
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("the binary runs")
}

fn check_golden(name: &str, out: &Output) {
    assert!(
        out.status.success(),
        "render failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = repo_root().join("tests/golden").join(name);
    let got = String::from_utf8(out.stdout.clone()).expect("utf-8");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &got).expect("write golden");
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    assert!(
        got == want,
        "{name} differs from the golden file; diff with UPDATE_GOLDEN=1 and git diff\n--- got ---\n{got}"
    );
}

#[test]
fn built_in_example() {
    let out = render(&[]);
    check_golden("r730.yaml", &out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim(), "warning: no available host in pool r730");
}

/// The fleet: three control plane machines behind a VIP, two worker pools.
#[test]
fn fleet_example() {
    let out = render(&["examples/metalcluster/fleet.yaml"]);
    check_golden("fleet.yaml", &out);
}

#[test]
fn explicit_file_matches_built_in_example() {
    let a = render(&[]);
    let b = render(&["examples/metalcluster/r730.yaml"]);
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn ready_stage_with_observed_and_required() {
    let out = render(&[
        "-o",
        "tests/fixtures/observed/ready",
        "-e",
        "tests/fixtures/hosts",
        "-e",
        "examples/baremetalhost/r730.yaml",
    ]);
    check_golden("r730-ready.yaml", &out);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = metalplane::render::parse_stream(&String::from_utf8_lossy(&out.stdout), "out")
        .expect("yaml");
    assert_eq!(docs[0]["status"]["phase"], "Ready");
    assert_eq!(docs[0]["status"]["conditions"][0]["status"], "True");
    // The graph (with its health check and reboot template), the CNI
    // family with its three Usages, and the claimed host's Usage.
    assert_eq!(docs.len(), 15);
}

#[test]
fn every_rendered_document_is_valid() {
    let schemas = Schemas::get();
    for args in [
        &[][..],
        &[
            "-o",
            "tests/fixtures/observed/ready",
            "-e",
            "tests/fixtures/hosts",
        ][..],
    ] {
        let out = render(args);
        let docs = metalplane::render::parse_stream(&String::from_utf8_lossy(&out.stdout), "out")
            .expect("yaml");
        for d in &docs {
            schemas.assert_valid(d);
        }
    }
    for f in std::fs::read_dir(repo_root().join("tests/fixtures/observed/ready")).expect("dir") {
        for d in load_yaml(&f.expect("entry").path()) {
            let mut spec_only = d.clone();
            // Observed status is the controllers'; validate what we wrote.
            spec_only.as_object_mut().map(|m| m.remove("status"));
            schemas.assert_valid(&spec_only);
        }
    }
    for d in load_yaml(Path::new(
        &repo_root().join("tests/fixtures/hosts/r730-provisioned.yaml"),
    )) {
        schemas.assert_valid(&d);
    }
}

#[test]
fn fatal_exits_2_with_the_message_on_stderr() {
    let dir = tempfile::tempdir().expect("tmp");
    let bad = dir.path().join("bad.yaml");
    let text = metalplane::EXAMPLE_XR.replace("prefix: 24", "prefix: 64");
    std::fs::write(&bad, text).expect("write");
    let out = render(&[bad.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.network.prefix 64: must be between 1 and 32"),
        "{err}"
    );
}

#[test]
fn unreadable_input_is_an_error_not_a_panic() {
    let out = render(&["/nonexistent/xr.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("error: cannot read /nonexistent/xr.yaml")
    );
    let dir = tempfile::tempdir().expect("tmp");
    let bad = dir.path().join("broken.yaml");
    std::fs::write(&bad, "spec: [unclosed").expect("write");
    let out = render(&[bad.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot parse"));
}

#[test]
fn function_results_can_be_included() {
    let out = render(&["-r"]);
    let docs = metalplane::render::parse_stream(&String::from_utf8_lossy(&out.stdout), "out")
        .expect("yaml");
    let last = docs.last().expect("docs");
    assert_eq!(last["kind"], "Result");
    assert_eq!(last["severity"], "SEVERITY_WARNING");
}
