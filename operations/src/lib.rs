//! `metalplane-bmc`: the Redfish program MetalPlane's operation Jobs run.
//!
//! `redfish` is a generic, retrying Redfish client; `dell` holds the iDRAC
//! procedures built on it (boot order for virtual media, job queue, reset).

pub mod dell;
pub mod redfish;
