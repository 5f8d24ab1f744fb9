//! Pure rewrites of upstream manifests for controllers that run as local
//! processes: webhooks and CRD conversion reach them by URL instead of a
//! Service, and provider CRDs carry the Cluster API contract label.

use base64::Engine;
use serde_json::{Value, json};

/// Points every webhook of a (Validating|Mutating)WebhookConfiguration at
/// `https://127.0.0.1:<port><path>` with the lab CA, and prefixes its name
/// with the component (kubebuilder projects all call theirs the same).
pub fn webhook_config_by_url(mut doc: Value, component: &str, port: u16, ca_pem: &str) -> Value {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    if let Some(name) = doc.pointer("/metadata/name").and_then(Value::as_str) {
        let renamed = format!("{component}-{name}");
        doc["metadata"]["name"] = json!(renamed);
    }
    if let Some(hooks) = doc.get_mut("webhooks").and_then(Value::as_array_mut) {
        for h in hooks {
            let path = h
                .pointer("/clientConfig/service/path")
                .and_then(Value::as_str)
                .unwrap_or("/")
                .to_string();
            h["clientConfig"] = json!({
                "url": format!("https://127.0.0.1:{port}{path}"),
                "caBundle": ca,
            });
        }
    }
    doc
}

/// Cluster API reads the contract version from this label on provider CRDs.
pub const CONTRACT_LABEL: &str = "cluster.x-k8s.io/v1beta2";

/// A CRD as the lab installs it: the contract label when `contract`, and a
/// conversion webhook (if the CRD asks for one) served by `port`.
pub fn crd_for_lab(mut crd: Value, contract: bool, port: u16, ca_pem: &str) -> Value {
    if contract {
        crd["metadata"]["labels"][CONTRACT_LABEL] = json!("v1beta2");
    }
    let strategy = crd
        .pointer("/spec/conversion/strategy")
        .and_then(Value::as_str)
        .unwrap_or("None");
    if strategy == "Webhook" {
        let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
        crd["spec"]["conversion"]["webhook"]["clientConfig"] = json!({
            "url": format!("https://127.0.0.1:{port}/convert"),
            "caBundle": ca,
        });
    }
    crd
}

/// The documents of a manifest that are webhook configurations.
pub fn is_webhook_config(doc: &Value) -> bool {
    matches!(
        doc.get("kind").and_then(Value::as_str),
        Some("ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_service_becomes_url() {
        let doc = json!({
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "validating-webhook-configuration"},
            "webhooks": [{"name": "a", "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": "/validate-x"}}}]
        });
        let out = webhook_config_by_url(doc, "capm3", 9504, "PEM");
        assert_eq!(
            out["metadata"]["name"],
            "capm3-validating-webhook-configuration"
        );
        assert_eq!(
            out["webhooks"][0]["clientConfig"]["url"],
            "https://127.0.0.1:9504/validate-x"
        );
        assert_eq!(out["webhooks"][0]["clientConfig"]["caBundle"], "UEVN");
        assert!(out["webhooks"][0]["clientConfig"].get("service").is_none());
    }

    #[test]
    fn crd_gets_label_and_conversion_url() {
        let crd = json!({"metadata": {"name": "x"}, "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "s"}}, "conversionReviewVersions": ["v1"]}}}});
        let out = crd_for_lab(crd, true, 9501, "PEM");
        assert_eq!(out["metadata"]["labels"][CONTRACT_LABEL], "v1beta2");
        assert_eq!(
            out["spec"]["conversion"]["webhook"]["clientConfig"]["url"],
            "https://127.0.0.1:9501/convert"
        );
        assert_eq!(
            out["spec"]["conversion"]["webhook"]["conversionReviewVersions"][0],
            "v1"
        );
        let plain = crd_for_lab(json!({"metadata": {"name": "y"}, "spec": {}}), false, 1, "");
        assert!(plain["metadata"].get("labels").is_none());
        assert!(plain["spec"].get("conversion").is_none());
    }
}
