//! Command line of the operation Jobs. Configuration comes from the
//! environment the Job sets (BMC_URL, BMC_USERNAME, BMC_PASSWORD from the
//! host's Secret, BMC_INSECURE) or from flags. Prints one outcome line on
//! stdout; logs go to stderr and never carry a credential.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use metalplane_bmc::dell::{self, FixOptions, Ids, Outcome, ResetOptions};
use metalplane_bmc::redfish::{BmcError, Client, Policy, Target};

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (e.g. 30s, 5m)"))
}

#[derive(Parser, Debug)]
#[command(
    name = "metalplane-bmc",
    version,
    about = "Redfish remediation for MetalPlane's BareMetalHosts"
)]
struct Cli {
    #[command(flatten)]
    bmc: BmcArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug)]
struct BmcArgs {
    /// Redfish base URL, scheme://host[:port].
    #[arg(long, env = "BMC_URL", global = true)]
    bmc_url: Option<String>,
    /// BMC user.
    #[arg(long, env = "BMC_USERNAME", global = true, hide_env_values = true)]
    username: Option<String>,
    /// BMC password (prefer the environment; flags show up in process lists).
    #[arg(long, env = "BMC_PASSWORD", global = true, hide_env_values = true)]
    password: Option<String>,
    /// Skip TLS verification (only when the host sets disableCertificateVerification).
    #[arg(long, env = "BMC_INSECURE", global = true, default_value_t = false)]
    insecure: bool,
    /// PEM file of the CA that signed the BMC's certificate.
    #[arg(long, env = "BMC_CA_FILE", global = true)]
    ca_file: Option<std::path::PathBuf>,
    /// Redfish system id.
    #[arg(
        long,
        env = "BMC_SYSTEM_ID",
        global = true,
        default_value = "System.Embedded.1"
    )]
    system_id: String,
    /// Redfish manager id.
    #[arg(
        long,
        env = "BMC_MANAGER_ID",
        global = true,
        default_value = "iDRAC.Embedded.1"
    )]
    manager_id: String,
    /// Per-request timeout.
    #[arg(long, global = true, default_value = "60s", value_parser = duration)]
    request_timeout: Duration,
    /// Total time budget of the run.
    #[arg(long, global = true, default_value = "15m", value_parser = duration)]
    budget: Duration,
    /// Attempts per request for transient failures (503, unreachable, non-JSON).
    #[arg(long, global = true, default_value_t = 12)]
    attempts: u32,
    /// First backoff; doubles per retry.
    #[arg(long, global = true, default_value = "5s", value_parser = duration)]
    backoff_initial: Duration,
    /// Backoff cap.
    #[arg(long, global = true, default_value = "30s", value_parser = duration)]
    backoff_max: Duration,
    /// Emit debug logs.
    #[arg(long, short, env = "DEBUG", global = true, default_value_t = false)]
    debug: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Put the virtual optical drive first in the UEFI boot order, commit it
    /// with a configuration job and restart the host.
    FixBootOrder {
        /// Dell boot source name of the virtual drive.
        #[arg(long, default_value = "Optical.iDRACVirtual.1-1")]
        boot_device: String,
        /// How long to wait for the drive to be listed (media attached).
        #[arg(long, default_value = "5m", value_parser = duration)]
        media_wait: Duration,
        /// Interval between boot source polls.
        #[arg(long, default_value = "10s", value_parser = duration)]
        poll: Duration,
        /// Poll interval while jobs of others (Ironic's) block the change.
        #[arg(long, default_value = "15s", value_parser = duration)]
        jobs_poll: Duration,
        /// How long to wait for them before deferring (they are never
        /// deleted).
        #[arg(long, default_value = "8m", value_parser = duration)]
        jobs_wait: Duration,
    },
    /// Reset the iDRAC (Manager.Reset GracefulRestart) and wait for it to return.
    ResetBmc {
        /// Watch this long for the iDRAC to go away after the reset.
        #[arg(long, default_value = "60s", value_parser = duration)]
        down_wait: Duration,
        /// Poll interval while it restarts.
        #[arg(long, default_value = "10s", value_parser = duration)]
        poll: Duration,
        /// Do not wait for the iDRAC to come back.
        #[arg(long, default_value_t = false)]
        no_wait: bool,
        /// How long to wait, from the reset, for it to answer and report
        /// its Lifecycle Controller Ready (outcome=timeout after it).
        #[arg(long, default_value = "12m", value_parser = duration)]
        ready_wait: Duration,
    },
    /// Restart the host: ForceRestart when on, On when off.
    Reboot {
        /// Wait until the host reports PowerState On.
        #[arg(long, default_value_t = false)]
        wait: bool,
        /// Poll interval while waiting.
        #[arg(long, default_value = "2s", value_parser = duration)]
        poll: Duration,
    },
}

fn action(c: &Command) -> &'static str {
    match c {
        Command::FixBootOrder { .. } => "fix-boot-order",
        Command::ResetBmc { .. } => "reset-bmc",
        Command::Reboot { .. } => "reboot",
    }
}

fn client(a: &BmcArgs) -> Result<Client, BmcError> {
    let base_url = a
        .bmc_url
        .clone()
        .ok_or_else(|| BmcError::Config("BMC_URL (or --bmc-url) is required".into()))?;
    let username = a
        .username
        .clone()
        .ok_or_else(|| BmcError::Config("BMC_USERNAME (or --username) is required".into()))?;
    let password = a
        .password
        .clone()
        .ok_or_else(|| BmcError::Config("BMC_PASSWORD (or --password) is required".into()))?;
    let ca_pem = match &a.ca_file {
        Some(p) => Some(
            std::fs::read(p)
                .map_err(|e| BmcError::Config(format!("--ca-file {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let policy = Policy {
        attempts: a.attempts.max(1),
        backoff_initial: a.backoff_initial,
        backoff_max: a.backoff_max,
        request_timeout: a.request_timeout,
        budget: a.budget,
    };
    Client::new(
        Target {
            base_url,
            username,
            password,
            insecure: a.insecure,
            ca_pem,
        },
        policy,
    )
}

async fn run(cli: &Cli) -> Result<(Client, Outcome), BmcError> {
    let c = client(&cli.bmc)?;
    let ids = Ids {
        system: cli.bmc.system_id.clone(),
        manager: cli.bmc.manager_id.clone(),
    };
    let outcome = match &cli.command {
        Command::FixBootOrder {
            boot_device,
            media_wait,
            poll,
            jobs_poll,
            jobs_wait,
        } => {
            let o = FixOptions {
                device: boot_device.clone(),
                media_wait: *media_wait,
                poll: *poll,
                jobs_poll: *jobs_poll,
                jobs_wait: *jobs_wait,
            };
            dell::fix_boot_order(&c, &ids, &o).await?
        }
        Command::ResetBmc {
            down_wait,
            poll,
            no_wait,
            ready_wait,
        } => {
            let o = ResetOptions {
                down_wait: *down_wait,
                poll: *poll,
                wait_back: !no_wait,
                ready_wait: *ready_wait,
            };
            dell::reset_bmc(&c, &ids, &o).await?
        }
        Command::Reboot { wait, poll } => {
            let (reset, power) = dell::power_reset(&c, &ids).await?;
            if *wait {
                dell::wait_power(&c, &ids, "On", *poll).await?;
            }
            Outcome::PowerReset { reset, power }
        }
    };
    Ok((c, outcome))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = if cli.bmc.debug { "debug" } else { "info" };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| filter.into()),
        )
        .with_target(false)
        .init();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let name = action(&cli.command);
    let bmc = cli
        .bmc
        .bmc_url
        .as_deref()
        .map(metalplane_bmc::redfish::redact)
        .unwrap_or_default();
    match rt.block_on(run(&cli)) {
        Ok((c, outcome)) => {
            println!(
                "outcome={} action={name} bmc={bmc} requests={} detail=\"{}\"",
                outcome.word(),
                c.requests(),
                outcome.detail()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!(
                "outcome=failed action={name} bmc={bmc} exit={} detail=\"{e}\"",
                e.exit_code()
            );
            ExitCode::from(e.exit_code())
        }
    }
}
