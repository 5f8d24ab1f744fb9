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
}

fn main() -> ExitCode {
    match Cli::parse().command {
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
