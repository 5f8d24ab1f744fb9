//! `cargo xtask package`: static binaries, the runtime image and the
//! Crossplane package, into target/xpkg/.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build target/xpkg/: metalplane-runtime.oci.tar, function-metalplane.xpkg, configuration-metalplane.xpkg.
    Package,
    /// Regenerate the checked-in YAML made from Rust (the XRD's edit rules).
    Generate,
    /// A real management cluster on this machine, in its own network namespace.
    Lab {
        #[command(subcommand)]
        command: LabCmd,
    },
}

#[derive(Subcommand)]
enum LabCmd {
    /// Build what is missing, start every process, install the packages; returns when ready.
    Up {
        /// BMO against real Ironic, sushy-tools and the lab's fake agent (not its demo provisioner).
        #[arg(long)]
        ironic: bool,
    },
    /// Only build the lab's Go programs and the packages' binaries (what `up` builds first).
    Build,
    /// Stop exactly what `up` started; remove the namespace and the state.
    Down,
    /// Each process of the lab: running or stopped, and its log file.
    Status,
    /// Run CMD inside the namespace with KUBECONFIG set and kubectl on PATH.
    Exec {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<String>,
    },
    /// The main job on the built-in example: inventory, the r730 MetalCluster, live phases, teardown.
    Demo {
        /// Through real Ironic (starts `lab up --ironic` if the lab is not in that mode).
        #[arg(long)]
        ironic: bool,
    },
    /// Scenarios under SIGKILLs of lab processes at moments drawn from a seed; invariants checked at every poll.
    Chaos {
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// Run i uses seed SEED+i: `--runs 1 --seed N` replays run N.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Every run's plan, faults and outcome as JSON.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// The lab's performance figures (benches/run.sh): bring-up times, status lag, steady-state load per MetalCluster.
    Perf {
        /// MetalClusters in all at each stage, comma-separated (e.g. 20,100): each stage adds MetalClusters up to its count, settles, measures a window and injects a host error on every one.
        #[arg(long, value_delimiter = ',', default_value = "20")]
        xrs: Vec<usize>,
        /// Seconds per steady-state window.
        #[arg(long, default_value_t = 60)]
        window: u64,
        /// Seconds of the last stage's window (default: --window); 600 averages over the 10-minute polls of Crossplane's Usages and CAPM3's resync.
        #[arg(long)]
        last_window: Option<u64>,
        /// After each stage's host errors: its last N MetalClusters deleted and applied again one after another, each Ready before the next, the others Ready (the bring-up a site sees day to day, apart from a stage's burst); 0 skips it.
        #[arg(long, default_value_t = 10)]
        one_by_one: usize,
        /// Markdown file for the figures (also printed).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
}

fn lab(cmd: LabCmd) -> Result<i32, xtask::lab::LabError> {
    let lab = xtask::lab::Lab::open()?;
    match cmd {
        LabCmd::Up { ironic: false } => lab.up().map(|_| 0),
        LabCmd::Up { ironic: true } => xtask::lab::ironic::up(&lab).map(|_| 0),
        LabCmd::Build => xtask::lab::build::ensure_binaries()
            .and_then(|_| xtask::lab::install::ensure_packages())
            .map(|_| 0),
        LabCmd::Down => lab.down().map(|_| 0),
        LabCmd::Status => {
            print!("{}", lab.status());
            Ok(0)
        }
        LabCmd::Exec { cmd } => lab.exec(&cmd),
        LabCmd::Demo { ironic } => xtask::lab::demo::run(&lab, ironic).map(|_| 0),
        LabCmd::Chaos { runs, seed, json } => {
            let s = xtask::lab::chaos::run(&lab, &xtask::lab::chaos::Options { runs, seed })?;
            println!("{}", xtask::lab::chaos::table(&s));
            if let Some(p) = json {
                let text = serde_json::to_string_pretty(&s).unwrap_or_default();
                std::fs::write(&p, text)
                    .map_err(|e| xtask::lab::LabError::new(format!("{}: {e}", p.display())))?;
            }
            Ok(if s.violations == 0 { 0 } else { 1 })
        }
        LabCmd::Perf {
            xrs,
            window,
            last_window,
            one_by_one,
            out,
        } => {
            let opts = xtask::lab::perf::Options {
                xrs,
                window: std::time::Duration::from_secs(window),
                last_window: std::time::Duration::from_secs(last_window.unwrap_or(window)),
                one_by_one,
            };
            let md = xtask::lab::perf::run(&lab, &opts)?;
            println!("{md}");
            match out {
                Some(p) => std::fs::write(&p, &md)
                    .map(|_| 0)
                    .map_err(|e| xtask::lab::LabError::new(format!("{}: {e}", p.display()))),
                None => Ok(0),
            }
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Cmd::Generate => match xtask::generate() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask generate: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Lab { command } => match lab(command) {
            Ok(0) => ExitCode::SUCCESS,
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(e) => {
                eprintln!("lab: error: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Package => match xtask::package() {
            Ok(o) => {
                println!(
                    "{}\n{}\n{}",
                    o.runtime.display(),
                    o.xpkg.display(),
                    o.configuration.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
