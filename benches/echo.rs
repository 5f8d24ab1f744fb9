//! The transport floor: a function-sdk-rust server that answers every
//! RunFunction with `response::to(req)` and nothing else. Measured beside
//! MetalPlane in the same run, it shows what gRPC over loopback costs
//! before any composition work.
//!
//! With `--canned` it answers every request with MetalPlane's own response
//! to the built-in example, computed once at start: the same bytes on the
//! wire (encoding, transfer, the client's decoding) without composing, so
//! ours minus canned is what composing costs over gRPC.

use function_sdk_rust::proto::v1::function_runner_service_server::FunctionRunnerService;
use function_sdk_rust::proto::v1::{RunFunctionRequest, RunFunctionResponse};
use tonic::{Request, Response, Status};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Echo {
    canned: Option<RunFunctionResponse>,
}

#[tonic::async_trait]
impl FunctionRunnerService for Echo {
    async fn run_function(
        &self,
        r: Request<RunFunctionRequest>,
    ) -> Result<Response<RunFunctionResponse>, Status> {
        Ok(Response::new(match &self.canned {
            Some(rsp) => rsp.clone(),
            None => function_sdk_rust::response::to(
                r.get_ref(),
                function_sdk_rust::response::DEFAULT_TTL,
            ),
        }))
    }
}

#[derive(clap::Parser)]
struct Cli {
    /// Answer with MetalPlane's response to the built-in example.
    #[arg(long)]
    canned: bool,
    #[command(flatten)]
    serve: function_sdk_rust::Args,
}

#[tokio::main]
async fn main() -> Result<(), function_sdk_rust::Error> {
    use clap::Parser;
    let cli = Cli::parse();
    let canned = cli
        .canned
        .then(|| metalplane::run(&requests::example_request()));
    function_sdk_rust::serve(Echo { canned }, &cli.serve).await
}

// Shared with the benchmarks; the echo needs the example request only.
#[allow(dead_code)]
mod requests;
