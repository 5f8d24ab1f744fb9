//! Property tests: random, mutated or truncated MetalClusters never panic
//! and always give either a Fatal or a complete graph, and every graph that
//! is produced validates against the upstream CRDs.

mod common;

use std::collections::BTreeMap;

use common::*;
use metalplane::compose::compose;
use proptest::prelude::*;
use serde_json::{Value, json};

const PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec",
    "spec.host",
    "spec.host.pool",
    "spec.host.bootInterface",
    "spec.network",
    "spec.network.nodeIP",
    "spec.network.prefix",
    "spec.network.gateway",
    "spec.network.dnsServer",
    "spec.network.podCIDR",
    "spec.network.serviceCIDR",
    "spec.kubernetes",
    "spec.kubernetes.version",
    "spec.kubernetes.nodeLabels",
    "spec.kubernetes.imageURL",
    "spec.kubernetes.imageChecksum",
    "spec.kubernetes.imageChecksumType",
    "spec.kubernetes.imageDiskFormat",
    "spec.cni",
    "spec.cni.ciliumVersion",
    "spec.gpu",
    "spec.gpu.driverInstallerURL",
    "spec.gpu.driverInstallerChecksum",
    "spec.access",
    "spec.access.username",
    "spec.access.sshAuthorizedKeys",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[ -~]{0,40}".prop_map(Value::from),
        "[0-9./]{1,20}".prop_map(Value::from),
        "\\PC{0,16}".prop_map(Value::from),
        (0u8..=255, 0u8..=255, 0u8..=255, 0u8..=255)
            .prop_map(|(a, b, c, d)| json!(format!("{a}.{b}.{c}.{d}"))),
        (0u8..=40).prop_map(Value::from),
        Just(json!("v1.34.1")),
        Just(json!("http://10.0.0.1/x")),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z./-]{1,12}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn check(xr: &Value, hosts: Option<&[Value]>) -> Result<(), TestCaseError> {
    let available = BTreeMap::from([(
        "cluster",
        with_condition(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "x"}}),
            "Available",
            "True",
        ),
    )]);
    for observed in [BTreeMap::new(), available] {
        let rsp = compose(&request(xr, &observed, hosts));
        let d = desired(&rsp);
        match fatal(&rsp) {
            Some(msg) => {
                prop_assert!(d.is_empty(), "a Fatal composes nothing new");
                prop_assert!(!msg.is_empty());
            }
            None => {
                // The graph (6) with its health check and reboot template
                // (+2) unless spec.health.enabled is false, with the CNI
                // family (+5), each plus the claimed host's Usage when a
                // host is claimed (+1).
                prop_assert!(
                    [6, 7, 8, 9, 11, 12, 13, 14].contains(&d.len()),
                    "a complete graph, got {}",
                    d.len()
                );
                let schemas = Schemas::get();
                for (name, obj) in &d {
                    let p = schemas.problems(obj);
                    prop_assert!(
                        p.is_empty(),
                        "accepted input composed an invalid {}: {:?}\ninput: {}",
                        name,
                        p,
                        xr
                    );
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_examples(muts in prop::collection::vec((prop::sample::select(PATHS), value()), 1..4)) {
        let mut xr = example_xr();
        for (p, v) in muts {
            set_path(&mut xr, p, v);
        }
        check(&xr, Some(&[]))?;
    }

    #[test]
    fn truncated_examples(cut in 0usize..2000) {
        let text = metalplane::EXAMPLE_XR;
        let mut end = cut.min(text.len());
        while !text.is_char_boundary(end) { end -= 1; }
        if let Ok(docs) = metalplane::render::parse_stream(&text[..end], "truncated")
            && let Some(xr) = docs.into_iter().next()
            && xr.is_object()
        {
            check(&xr, None)?;
        }
    }

    #[test]
    fn random_networks(a in 1u8..=223, b: u8, c: u8, d in 1u8..=254, prefix in 8u8..=30, g: u8, dns: u8) {
        let mut xr = example_xr();
        set_path(&mut xr, "spec.network.nodeIP", json!(format!("{a}.{b}.{c}.{d}")));
        set_path(&mut xr, "spec.network.prefix", json!(prefix));
        set_path(&mut xr, "spec.network.gateway", json!(format!("{a}.{b}.{c}.{g}")));
        set_path(&mut xr, "spec.network.dnsServer", json!(format!("{a}.{b}.{dns}.{g}")));
        check(&xr, Some(&[host("r730", "available", None, false)]))?;
    }
}

proptest! {
    /// The consuming conversion equals the SDK's borrowing one.
    #[test]
    fn into_struct_equals_the_sdk_conversion(m in prop::collection::btree_map("[a-zA-Z./-]{1,12}", value(), 0..6)) {
        let map: serde_json::Map<String, Value> = m.into_iter().collect();
        let sdk = function_sdk_rust::resource::json_to_struct(&map);
        prop_assert_eq!(metalplane::compose::into_struct(map), sdk);
    }
}

/// Guards the property itself: the generator reaches both outcomes.
#[test]
fn generators_reach_both_outcomes() {
    let good = compose(&request(&example_xr(), &BTreeMap::new(), Some(&[])));
    assert!(fatal(&good).is_none());
    let mut bad = example_xr();
    set_path(&mut bad, "spec.network.prefix", json!(true));
    assert!(fatal(&compose(&request(&bad, &BTreeMap::new(), Some(&[])))).is_some());
}
