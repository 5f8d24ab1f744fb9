//! `function-metalplane`: serves the function (no subcommand, as Crossplane
//! starts it) or renders a MetalCluster offline.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use metalplane::render::{self, RenderError};

#[derive(Parser, Debug)]
#[command(
    name = "function-metalplane",
    version,
    about = "MetalPlane: a racked server becomes a Kubernetes node from one MetalCluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// The SDK's standard serving flags (--insecure, --address, --tls-certs-dir, ...).
    #[command(flatten)]
    serve: function_sdk_rust::Args,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Render a MetalCluster offline through the same code path as RunFunction
    /// and print the YAML stream Crossplane would apply.
    Render(RenderArgs),
    /// Run the operation path offline for one BareMetalHost, as a
    /// WatchOperation would, and print the Operation output and the Jobs.
    Operate(OperateArgs),
}

#[derive(clap::Args, Debug)]
struct OperateArgs {
    /// The watched BareMetalHost.
    bmh: PathBuf,
    /// The operation input (a BMCRemediation object).
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,
    /// Resources that satisfy the function's requirements (the host's
    /// reset Jobs still present): a file or folder. Repeatable.
    #[arg(long, short = 'e', value_name = "PATH")]
    required: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct RenderArgs {
    /// The MetalCluster to render; the built-in example (examples/metalcluster/r730.yaml) when omitted.
    xr: Option<PathBuf>,
    /// Observed composed resources: a file or a folder of YAML/JSON, matched by
    /// their crossplane.io/composition-resource-name annotation. Repeatable.
    #[arg(long, short = 'o', value_name = "PATH")]
    observed: Vec<PathBuf>,
    /// Resources that satisfy the function's requirements (the pool's
    /// BareMetalHosts): a file or folder. Repeatable.
    #[arg(long, short = 'e', value_name = "PATH")]
    required: Vec<PathBuf>,
    /// Also print the function's results as Result documents.
    #[arg(long, short = 'r')]
    include_function_results: bool,
}

fn load_all(paths: &[PathBuf]) -> Result<Vec<serde_json::Value>, RenderError> {
    let mut out = Vec::new();
    for p in paths {
        out.extend(render::load_documents(p)?);
    }
    Ok(out)
}

fn run_render(args: &RenderArgs) -> Result<String, RenderError> {
    let xr_docs = match &args.xr {
        Some(p) => render::load_documents(p)?,
        None => render::parse_stream(metalplane::EXAMPLE_XR, "built-in example")?,
    };
    let xr = xr_docs
        .into_iter()
        .next()
        .ok_or_else(|| RenderError::Input("the XR file holds no document".into()))?;
    let observed = load_all(&args.observed)?;
    let required = load_all(&args.required)?;
    let rendered = render::render(&xr, &observed, &required)?;
    for (sev, msg) in &rendered.results {
        if sev == "SEVERITY_WARNING" {
            eprintln!("warning: {msg}");
        }
    }
    let mut docs = rendered.documents;
    if args.include_function_results {
        docs.extend(render::result_documents(&rendered.results));
    }
    Ok(render::to_yaml_stream(&docs))
}

fn first_doc(path: &std::path::Path) -> Result<serde_json::Value, RenderError> {
    render::load_documents(path)?
        .into_iter()
        .next()
        .ok_or_else(|| RenderError::Input(format!("{} holds no document", path.display())))
}

fn run_operate(args: &OperateArgs) -> Result<String, RenderError> {
    let bmh = first_doc(&args.bmh)?;
    let input = args.input.as_deref().map(first_doc).transpose()?;
    let required = load_all(&args.required)?;
    let rendered = render::operate(&bmh, input.as_ref(), &required)?;
    Ok(render::to_yaml_stream(&rendered.documents))
}

fn finish(result: Result<String, RenderError>) -> ExitCode {
    match result {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(RenderError::Fatal(msg)) => {
            eprintln!("fatal: {msg}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

// mimalloc: a request decodes and builds thousands of small maps and
// strings; glibc's malloc was a fifth of the server's CPU per request, and
// this cut CPU per request by about a sixth (benches/results.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Operate(args)) => finish(run_operate(&args)),
        Some(Command::Render(args)) => finish(run_render(&args)),
        None => serve(&cli.serve),
    }
}

fn serve(args: &function_sdk_rust::Args) -> ExitCode {
    function_sdk_rust::logging::configure(args.debug);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(function_sdk_rust::serve(
        metalplane::function::MetalPlane,
        args,
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "function server failed");
            ExitCode::FAILURE
        }
    }
}
