//! What the cluster's Machines say (read as required resources): which are
//! being remediated and on which host, and when the control plane's
//! certificates expire. Pure: the caller passes the clock.

use serde_json::Value;

/// The Machines' API and the label that ties them to their Cluster.
pub const MACHINE_API_VERSION: &str = "cluster.x-k8s.io/v1beta2";
pub const MACHINE_KIND: &str = "Machine";
pub const MACHINES_REQUIREMENT: &str = "machines";
/// A Warning when the earliest control plane certificate expires sooner.
pub const EXPIRY_WARNING_DAYS: i64 = 30;

/// A machine the MachineHealthCheck found unhealthy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unhealthy {
    pub machine: String,
    /// The BareMetalHost it runs on, if one is claimed for it.
    pub host: Option<String>,
    pub why: String,
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn condition<'a>(m: &'a Value, typ: &str) -> Option<&'a Value> {
    m.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(typ))
}

/// Machines whose `HealthCheckSucceeded` condition is False, each with the
/// host whose consumer is its infrastructure machine (the Metal3Machine
/// of the same name CAPM3 claimed the host for) and the check's reason.
pub fn unhealthy(machines: &[Value], hosts: &[&Value]) -> Vec<Unhealthy> {
    let mut out: Vec<Unhealthy> = machines
        .iter()
        .filter_map(|m| {
            let c = condition(m, "HealthCheckSucceeded")?;
            if c.get("status").and_then(Value::as_str) != Some("False") {
                return None;
            }
            let infra = str_at(m, "/spec/infrastructureRef/name");
            let host = hosts
                .iter()
                .find(|h| infra.is_some() && str_at(h, "/spec/consumerRef/name") == infra)
                .map(|h| crate::hosts::name(h).to_string());
            let why = c
                .get("message")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .or_else(|| c.get("reason").and_then(Value::as_str))
                .unwrap_or("unhealthy")
                .to_string();
            Some(Unhealthy {
                machine: str_at(m, "/metadata/name").unwrap_or_default().into(),
                host,
                why,
            })
        })
        .collect();
    out.sort_by(|a, b| a.machine.cmp(&b.machine));
    out
}

/// The earliest `status.certificatesExpiryDate` of the control plane's
/// Machines (KCP reads it from each node), as (RFC 3339, Unix seconds).
pub fn earliest_certificate_expiry(machines: &[Value]) -> Option<(String, i64)> {
    machines
        .iter()
        .filter(|m| {
            m.pointer("/metadata/labels/cluster.x-k8s.io~1control-plane")
                .is_some()
        })
        .filter_map(|m| {
            let s = str_at(m, "/status/certificatesExpiryDate")?;
            let t: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
                serde_json::from_value(Value::String(s.into())).ok()?;
            Some((s.to_string(), t.0.as_second()))
        })
        .min_by_key(|(_, secs)| *secs)
}

/// Whole days from `now` to `expiry` (negative once expired).
pub fn days_left(expiry: i64, now: i64) -> i64 {
    (expiry - now).div_euclid(86_400)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_the_unhealthy_machine_and_its_host() {
        let machines = vec![
            json!({"metadata": {"name": "c-gpu-a-b"}, "spec": {"infrastructureRef": {"name": "c-gpu-a-b"}},
                "status": {"conditions": [{"type": "HealthCheckSucceeded", "status": "False", "reason": "UnhealthyNode", "message": "Condition Ready on Node c-gpu-a-b was Unknown for more than 5m0s"}]}}),
            json!({"metadata": {"name": "c-cpu-a-b"}, "spec": {"infrastructureRef": {"name": "c-cpu-a-b"}},
                "status": {"conditions": [{"type": "HealthCheckSucceeded", "status": "True"}]}}),
        ];
        let host =
            json!({"metadata": {"name": "sm-1"}, "spec": {"consumerRef": {"name": "c-gpu-a-b"}}});
        let u = unhealthy(&machines, &[&host]);
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].machine, "c-gpu-a-b");
        assert_eq!(u[0].host.as_deref(), Some("sm-1"));
        assert!(u[0].why.contains("Unknown for more than"));
    }

    #[test]
    fn earliest_expiry_of_the_control_plane() {
        let cp = |name: &str, date: &str| json!({"metadata": {"name": name, "labels": {"cluster.x-k8s.io/control-plane": ""}}, "status": {"certificatesExpiryDate": date}});
        let worker = json!({"metadata": {"name": "w", "labels": {}}, "status": {"certificatesExpiryDate": "2020-01-01T00:00:00Z"}});
        let got = earliest_certificate_expiry(&[
            cp("a", "2027-12-04T10:00:00Z"),
            cp("b", "2027-06-01T00:00:00Z"),
            worker,
        ]);
        assert_eq!(got.map(|g| g.0), Some("2027-06-01T00:00:00Z".into()));
        assert_eq!(days_left(86_400 * 10 + 5, 0), 10);
        assert_eq!(days_left(-1, 0), -1);
    }
}
