//! MetalPlane: a Crossplane composition function that turns one
//! `MetalCluster` into the Metal3 + Cluster API graph of a GPU node.

pub mod api;
pub mod builders;
pub mod compose;
pub mod decode;
pub mod fields;
pub mod function;
pub mod hosts;
pub mod inference;
pub mod kubelet;
pub mod leftovers;
pub mod links;
pub mod machine;
pub mod machines;
pub mod names;
pub mod network;
pub mod operate;
pub mod reference;
pub mod render;
pub mod rollout;
pub mod spec;
pub mod status;
pub mod topology;
pub mod validate;
pub mod xrd;

/// The built-in example, rendered when `render` gets no file.
pub const EXAMPLE_XR: &str = include_str!("../../examples/metalcluster/r730.yaml");

/// One entry point for both capabilities: an operation when the request
/// carries a watched resource, a composition otherwise.
pub fn run(
    req: &function_sdk_rust::proto::v1::RunFunctionRequest,
) -> function_sdk_rust::proto::v1::RunFunctionResponse {
    if operate::is_operation(req) {
        operate::operate(req)
    } else {
        compose::compose(req)
    }
}
