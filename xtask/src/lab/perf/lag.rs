//! Status lag: how long after a claimed host changes the XR shows it, read
//! off the watch events of both, labelled by the XR's phase at the change.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Event;

const HOSTS: &str = "baremetalhosts";
const XRS: &str = "metalclusters";

/// What the XR shows of a host (`status.host`), read off either side: the
/// host's own status or the XR's copy of it. Equal views mean the XR is up
/// to date with the host.
pub fn host_view(obj: &Value) -> Option<String> {
    let (state, power, error) = match obj.pointer("/status/provisioning/state") {
        Some(s) => (
            s,
            obj.pointer("/status/poweredOn"),
            obj.pointer("/status/errorType"),
        ),
        None => {
            let h = obj.pointer("/status/host")?;
            (
                h.get("provisioningState")?,
                h.get("poweredOn"),
                h.get("errorType"),
            )
        }
    };
    let power = if power.and_then(Value::as_bool) == Some(true) {
        "on"
    } else {
        "off"
    };
    let mut v = format!("{}, power {power}", state.as_str()?);
    if let Some(e) = error.and_then(Value::as_str).filter(|e| !e.is_empty()) {
        v.push_str(", ");
        v.push_str(e);
    }
    Some(v)
}

/// One host change and when the XR showed it.
#[derive(Clone, Debug, PartialEq)]
pub struct Lag {
    pub xr: String,
    pub view: String,
    /// The XR's phase when the host changed.
    pub phase: String,
    pub host_at: f64,
    pub xr_at: Option<f64>,
    /// The host changed again before the XR showed this view: nothing to
    /// show any more, so not a lag.
    pub passed: bool,
}

impl Lag {
    pub fn lag(&self) -> Option<f64> {
        self.xr_at.map(|x| x - self.host_at)
    }
}

/// The first event at or after `from` of a host whose consumer is one of
/// `xr`'s machines: when, and which host, the XR's cluster claimed.
pub fn claim_event<'a>(events: &'a [Event], xr: &str, from: f64) -> Option<&'a Event> {
    let prefix = format!("{xr}-cluster-");
    events.iter().find(|e| {
        e.t >= from
            && e.kind.starts_with(HOSTS)
            && e.consumer
                .as_deref()
                .is_some_and(|c| c.starts_with(&prefix))
    })
}

/// Every change of the host `xr` claimed (first at or after `from`), from
/// the claim on, paired with the
/// first XR event at or after it showing the same view.
pub fn lags(events: &[Event], xr: &str, from: f64) -> Vec<Lag> {
    // From the claim on: before it the host is nobody's, and the XR shows
    // no host.
    let Some((host, claimed)) = claim_event(events, xr, from).map(|e| (e.name.clone(), e.t)) else {
        return vec![];
    };
    let xr_events: Vec<&Event> = events
        .iter()
        .filter(|e| e.kind.starts_with(XRS) && e.name == xr)
        .collect();
    let phase_at = |t: f64| {
        xr_events
            .iter()
            .take_while(|e| e.t <= t)
            .filter_map(|e| e.phase.clone())
            .last()
            .unwrap_or_else(|| "-".into())
    };
    let mut out: Vec<Lag> = Vec::new();
    let mut last = None;
    for e in events
        .iter()
        .filter(|e| e.t >= claimed && e.kind.starts_with(HOSTS) && e.name == host)
    {
        if e.host_view != last {
            last = e.host_view.clone();
            if let Some(v) = &e.host_view {
                out.push(Lag {
                    xr: xr.to_string(),
                    view: v.clone(),
                    phase: phase_at(e.t),
                    host_at: e.t,
                    xr_at: None,
                    passed: false,
                });
            }
        }
    }
    let next: Vec<Option<f64>> = (0..out.len())
        .map(|i| out.get(i + 1).map(|n| n.host_at))
        .collect();
    for (l, next) in out.iter_mut().zip(next) {
        l.xr_at = xr_events
            .iter()
            .find(|e| e.t >= l.host_at && e.host_view.as_deref() == Some(&l.view))
            .map(|e| e.t);
        l.passed = match (l.xr_at, next) {
            (None, Some(_)) => true,
            (Some(x), Some(n)) => x > n,
            _ => false,
        };
        if l.passed {
            l.xr_at = None;
        }
    }
    out
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Lag figures of one phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub shown: usize,
    pub passed: usize,
    pub never: usize,
    pub p50: f64,
    pub p95: f64,
    pub max: f64,
}

/// Lags by the XR's phase at the host's change, plus `all`.
pub fn by_phase(lags: &[Lag]) -> BTreeMap<String, Stats> {
    let mut groups: BTreeMap<String, Vec<&Lag>> = BTreeMap::new();
    for l in lags {
        groups.entry(l.phase.clone()).or_default().push(l);
        groups.entry("all".into()).or_default().push(l);
    }
    groups
        .into_iter()
        .map(|(phase, ls)| {
            let mut v: Vec<f64> = ls.iter().filter_map(|l| l.lag()).collect();
            v.sort_by(f64::total_cmp);
            let s = Stats {
                shown: v.len(),
                passed: ls.iter().filter(|l| l.passed).count(),
                never: ls.iter().filter(|l| !l.passed && l.xr_at.is_none()).count(),
                p50: percentile(&v, 0.5),
                p95: percentile(&v, 0.95),
                max: v.last().copied().unwrap_or(0.0),
            };
            (phase, s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(t: f64, kind: &str, name: &str, view: &str, consumer: Option<&str>) -> Event {
        Event {
            t,
            kind: kind.into(),
            name: name.into(),
            changed: vec![],
            host_view: Some(view.into()),
            phase: kind.starts_with(XRS).then(|| "Provisioning".into()),
            consumer: consumer.map(str::to_string),
        }
    }

    #[test]
    fn views_compare_the_host_with_the_xrs_copy() {
        let host = json!({"status": {"provisioning": {"state": "provisioned"}, "poweredOn": true,
                                      "errorType": "registration error"}});
        let xr = json!({"status": {"host": {"provisioningState": "provisioned", "poweredOn": true,
                                             "errorType": "registration error"}}});
        assert_eq!(
            host_view(&host).as_deref(),
            Some("provisioned, power on, registration error")
        );
        assert_eq!(host_view(&host), host_view(&xr));
        assert_eq!(host_view(&json!({"status": {}})), None);
    }

    #[test]
    fn lag_pairs_host_changes_with_the_xr() {
        let h = "baremetalhosts.metal3.io";
        let x = "metalclusters.metal.kube.farm";
        let events = vec![
            ev(1.0, h, "h1", "available, power off", Some("x-cluster-abc")),
            ev(2.0, x, "x", "available, power off", None),
            ev(
                3.0,
                h,
                "h1",
                "provisioning, power off",
                Some("x-cluster-abc"),
            ),
            // Gone by before the XR looked: passed, not a lag.
            ev(3.2, h, "h1", "provisioned, power on", Some("x-cluster-abc")),
            ev(4.0, x, "x", "provisioned, power on", None),
            ev(
                9.0,
                h,
                "h1",
                "provisioned, power off",
                Some("x-cluster-abc"),
            ),
        ];
        let l = lags(&events, "x", 0.0);
        assert_eq!(l.len(), 4);
        assert_eq!(l[0].lag(), Some(1.0));
        assert_eq!(l[0].phase, "-", "no XR event before the first change");
        assert!(l[1].passed);
        assert!(l[2].lag().is_some_and(|d| (d - 0.8).abs() < 1e-9));
        assert_eq!(l[2].phase, "Provisioning");
        assert_eq!((l[3].xr_at, l[3].passed), (None, false), "never shown");
        let s = by_phase(&l);
        assert_eq!(s["all"].shown, 2);
        assert_eq!((s["all"].passed, s["all"].never), (1, 1));
        assert_eq!(s["all"].p95, 1.0);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 10.0);
        assert_eq!(percentile(&v, 0.95), 19.0);
        assert_eq!(percentile(&[], 0.95), 0.0);
    }
}
