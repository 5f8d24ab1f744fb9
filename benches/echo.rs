//! The transport floor: a function-sdk-rust server that answers every
//! RunFunction with `response::to(req)` and nothing else. Measured beside
//! MetalPlane in the same run, it shows what gRPC over loopback costs
//! before any composition work.

use function_sdk_rust::proto::v1::function_runner_service_server::FunctionRunnerService;
use function_sdk_rust::proto::v1::{RunFunctionRequest, RunFunctionResponse};
use tonic::{Request, Response, Status};

struct Echo;

#[tonic::async_trait]
impl FunctionRunnerService for Echo {
    async fn run_function(
        &self,
        r: Request<RunFunctionRequest>,
    ) -> Result<Response<RunFunctionResponse>, Status> {
        Ok(Response::new(function_sdk_rust::response::to(
            r.get_ref(),
            function_sdk_rust::response::DEFAULT_TTL,
        )))
    }
}

#[tokio::main]
async fn main() -> Result<(), function_sdk_rust::Error> {
    use clap::Parser;
    let args = function_sdk_rust::Args::parse();
    function_sdk_rust::serve(Echo, &args).await
}
