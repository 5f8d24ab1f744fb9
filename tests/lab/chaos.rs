//! Scenario `chaos`: the short fixed-seed pass of `cargo xtask lab chaos`
//! (xtask/src/lab/chaos.rs), each of its invariants checked live.

use super::*;
use xtask::lab::chaos;

/// Three runs from `chaos::CI_SEED`: SIGKILLs of the function, Crossplane,
/// CAPM3, BMO and the API server (and more) while MetalClusters provision,
/// run and are deleted; no invariant violated, every run converged.
pub(crate) fn chaos_pass(lab: &Lab) -> Outcome {
    let s = chaos::run(
        lab,
        &chaos::Options {
            runs: chaos::CI_RUNS,
            seed: chaos::CI_SEED,
        },
    )
    .map_err(|e| e.to_string())?;
    // The RBAC check at the end of the run skips each restarted API
    // server's first seconds (Injector::play says why).
    privilege::exempt_windows(s.runs.iter().flat_map(|r| r.api_restart_windows.clone()));
    for line in chaos::table(&s).lines() {
        println!("  {line}");
    }
    for c in chaos::CI_MUST_KILL {
        check(
            s.faults_per_component.get(c).is_some_and(|n| *n > 0),
            || format!("the pass killed no {c}"),
        )?;
    }
    let failed: Vec<String> = s
        .runs
        .iter()
        .filter(|r| !r.violations.is_empty())
        .map(|r| format!("seed {}: {}", r.plan.seed, r.violations.join("; ")))
        .collect();
    check(failed.is_empty(), || failed.join("\n  "))?;
    // The pass's own hosts leave with their namespace, so the groups after
    // it see the lab as before.
    lab.kube
        .run(&["delete", "namespace", chaos::NS, "--timeout=180s"])
        .map(|_| ())
        .map_err(|e| e.to_string())
}
