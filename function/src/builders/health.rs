//! Node health: a MachineHealthCheck per machine set (the control plane,
//! each pool) and the Metal3RemediationTemplate they remediate with. An
//! unhealthy machine's host is rebooted by CAPM3 through the bare metal
//! operator (the reboot annotation on its BareMetalHost), which works for
//! a single node too; only when the reboots do not bring the node back
//! does the machine's owner (KCP, the MachineSet) replace it.

use serde_json::{Value, json};

use super::{metal3, object, with_spec};
use crate::names::Names;
use crate::spec::{MetalCluster, Worker};

pub const REMEDIATION_TEMPLATE: &str = "remediation-template";
/// Composition resource name of the control plane's MachineHealthCheck;
/// a pool's is `<pool resource>.health`.
pub const CONTROL_PLANE_HEALTH: &str = "controlplane-health";

/// Reboots before the machine is handed to its owner for replacement.
pub const REBOOT_RETRY_LIMIT: i64 = 2;
/// How long a reboot may take to bring the node back before the next one:
/// a server's POST and boot take minutes (CAPM3's minimum is 100 s).
pub const REBOOT_TIMEOUT_SECONDS: i64 = 600;

pub const MHC_KIND: &str = "MachineHealthCheck";
pub const REMEDIATION_TEMPLATE_KIND: &str = "Metal3RemediationTemplate";
const CONTROL_PLANE_NAME_LABEL: &str = "cluster.x-k8s.io/control-plane-name";

pub fn remediation_template_name(names: &Names) -> String {
    format!("{}-reboot", names.cluster)
}

pub fn remediation_template(mc: &MetalCluster, names: &Names) -> Value {
    with_spec(
        object(
            mc,
            metal3::API_VERSION,
            REMEDIATION_TEMPLATE_KIND,
            &remediation_template_name(names),
        ),
        json!({"template": {"spec": {"strategy": {
            "type": "Reboot",
            "retryLimit": REBOOT_RETRY_LIMIT,
            "timeoutSeconds": REBOOT_TIMEOUT_SECONDS,
        }}}}),
    )
}

/// How many unhealthy machines of `replicas` may be remediated at once:
/// `maxUnhealthy` of them (a count, or a percentage rounded down), but at
/// least one, so that a set of one or two machines is remediated too
/// (Cluster API rounds 40% of 2 down to none).
pub fn unhealthy_limit(max_unhealthy: &str, replicas: u32) -> i64 {
    let n = match max_unhealthy.strip_suffix('%') {
        Some(pct) => pct.parse::<u64>().unwrap_or(0) * u64::from(replicas) / 100,
        None => max_unhealthy.parse::<u64>().unwrap_or(0),
    };
    i64::try_from(n.max(1)).unwrap_or(1)
}

fn health_check(
    mc: &MetalCluster,
    names: &Names,
    name: &str,
    selector: Value,
    replicas: u32,
) -> Value {
    let h = &mc.spec.health;
    let after = h.unhealthy_after_seconds;
    with_spec(
        object(mc, super::capi::CLUSTER_API_VERSION, MHC_KIND, name),
        json!({
            "clusterName": names.cluster,
            "selector": {"matchLabels": selector},
            "checks": {
                "nodeStartupTimeoutSeconds": h.node_startup_timeout_seconds,
                "unhealthyNodeConditions": [
                    {"type": "Ready", "status": "Unknown", "timeoutSeconds": after},
                    {"type": "Ready", "status": "False", "timeoutSeconds": after},
                ],
            },
            "remediation": {
                "triggerIf": {"unhealthyLessThanOrEqualTo": unhealthy_limit(&h.max_unhealthy, replicas)},
                "templateRef": {
                    "apiVersion": metal3::API_VERSION,
                    "kind": REMEDIATION_TEMPLATE_KIND,
                    "name": remediation_template_name(names),
                },
            },
        }),
    )
}

pub fn control_plane_name(names: &Names) -> String {
    format!("{}-controlplane", names.cluster)
}

pub fn control_plane(mc: &MetalCluster, names: &Names) -> Value {
    health_check(
        mc,
        names,
        &control_plane_name(names),
        json!({CONTROL_PLANE_NAME_LABEL: names.cluster}),
        u32::from(mc.spec.control_plane.replicas),
    )
}

pub fn pool(mc: &MetalCluster, names: &Names, w: &Worker) -> Value {
    let md = names.pool(&mc.name, &w.name).machines;
    health_check(
        mc,
        names,
        &md,
        json!({super::workers::DEPLOYMENT_NAME_LABEL: md}),
        w.replicas,
    )
}

/// Every health object, as (composition resource name, manifest); none
/// with `spec.health.enabled: false`.
pub fn objects(mc: &MetalCluster, names: &Names) -> Vec<(String, Value)> {
    if !mc.spec.health.enabled {
        return Vec::new();
    }
    let mut out = vec![
        (
            REMEDIATION_TEMPLATE.to_string(),
            remediation_template(mc, names),
        ),
        (CONTROL_PLANE_HEALTH.to_string(), control_plane(mc, names)),
    ];
    for w in &mc.spec.workers {
        out.push((
            format!("{}.health", super::workers::resource_name(w)),
            pool(mc, names, w),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_set_may_remediate_one_machine() {
        assert_eq!(unhealthy_limit("40%", 1), 1);
        assert_eq!(unhealthy_limit("40%", 2), 1);
        assert_eq!(unhealthy_limit("40%", 5), 2);
        assert_eq!(unhealthy_limit("40%", 10), 4);
        assert_eq!(unhealthy_limit("3", 10), 3);
        assert_eq!(unhealthy_limit("0", 10), 1);
    }
}
