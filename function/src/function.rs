//! The gRPC face of the function.

use function_sdk_rust::proto::v1::function_runner_service_server::FunctionRunnerService;
use function_sdk_rust::proto::v1::{RunFunctionRequest, RunFunctionResponse, Severity};
use tonic::{Request, Response, Status};

/// The MetalPlane function. Stateless: every answer derives from the request.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetalPlane;

#[tonic::async_trait]
impl FunctionRunnerService for MetalPlane {
    async fn run_function(
        &self,
        request: Request<RunFunctionRequest>,
    ) -> Result<Response<RunFunctionResponse>, Status> {
        let req = request.into_inner();
        let rsp = crate::run(&req);
        let fatal = rsp
            .results
            .iter()
            .find(|r| r.severity == Severity::Fatal as i32);
        // Names and outcomes only: the spec holds no secrets, but nothing
        // from it is logged either.
        let tag = req
            .meta
            .as_ref()
            .map(|m| m.tag.as_str())
            .unwrap_or_default();
        match fatal {
            Some(r) => tracing::warn!(tag, message = %r.message, "refused the MetalCluster"),
            None => tracing::debug!(
                tag,
                resources = rsp.desired.as_ref().map_or(0, |d| d.resources.len()),
                "composed"
            ),
        }
        Ok(Response::new(rsp))
    }
}
