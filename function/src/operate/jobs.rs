//! Kubernetes Jobs that run `metalplane-bmc` against one host's BMC.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, SecretKeySelector, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::decide::{Action, Decision, fit_name};
use super::input::Input;

pub const BMC_BINARY: &str = "/usr/local/bin/metalplane-bmc";
pub const RUN_AS: i64 = 2000;
pub const BACKOFF_LIMIT: i32 = 2;
pub const TTL_SECONDS: i32 = 3600;
pub const HOST_LABEL: &str = "metal.kube.farm/host";
pub const ACTION_LABEL: &str = "metal.kube.farm/action";

/// The program's own time budget and the Job deadline around it.
pub fn budgets(action: Action, input: &Input) -> (u32, i64) {
    match action {
        // Media wait, then the fix with its retries.
        Action::FixBootOrder => {
            let budget = input.media_wait_seconds + 600;
            (budget, i64::from(budget) + 120)
        }
        // An iDRAC may take several minutes to come back after a reset.
        Action::ResetBmc => (900, 1020),
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The host's label value: its name when that is a valid label value.
pub fn host_label(host: &str) -> String {
    if host.len() <= 63 {
        host.to_string()
    } else {
        fit_name(host)
    }
}

/// The Job for a decision with an action; None when there is nothing to do.
pub fn job(d: &Decision, input: &Input) -> Option<Job> {
    let action = d.action?;
    let name = d.job_name.clone()?;
    let endpoint = d.endpoint.as_ref()?;
    let secret = d.credentials_name.as_deref()?;
    let (budget, deadline) = budgets(action, input);

    let mut args = vec![
        action.as_str().to_string(),
        "--budget".into(),
        format!("{budget}s"),
    ];
    if action == Action::FixBootOrder {
        args.extend(["--boot-device".into(), input.boot_device.clone()]);
        args.extend([
            "--media-wait".into(),
            format!("{}s", input.media_wait_seconds),
        ]);
    }
    let mut envs = vec![
        env("BMC_URL", &endpoint.base_url),
        secret_env("BMC_USERNAME", secret, "username"),
        secret_env("BMC_PASSWORD", secret, "password"),
    ];
    if let Some(id) = &endpoint.system_id {
        envs.push(env("BMC_SYSTEM_ID", id));
    }
    if !d.verify_tls {
        // The host itself opted out (spec.bmc.disableCertificateVerification).
        envs.push(env("BMC_INSECURE", "true"));
    }

    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "metalplane-bmc".to_string(),
        ),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "metalplane".to_string(),
        ),
        (HOST_LABEL.to_string(), host_label(&d.host)),
        (ACTION_LABEL.to_string(), action.as_str().to_string()),
    ]);
    let limits = BTreeMap::from([
        ("cpu".to_string(), Quantity("200m".into())),
        ("memory".to_string(), Quantity("64Mi".into())),
    ]);
    let requests = BTreeMap::from([
        ("cpu".to_string(), Quantity("10m".into())),
        ("memory".to_string(), Quantity("16Mi".into())),
    ]);

    let container = Container {
        name: "bmc".into(),
        image: Some(input.image.clone()),
        command: Some(vec![BMC_BINARY.into()]),
        args: Some(args),
        env: Some(envs),
        resources: Some(ResourceRequirements {
            limits: Some(limits),
            requests: Some(requests),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Some(Job {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(d.namespace.clone()),
            labels: Some(labels.clone()),
            annotations: Some(BTreeMap::from([(
                "metal.kube.farm/reason".to_string(),
                d.reason.clone(),
            )])),
            ..Default::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(BACKOFF_LIMIT),
            active_deadline_seconds: Some(deadline),
            ttl_seconds_after_finished: Some(TTL_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(RUN_AS),
                        run_as_group: Some(RUN_AS),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    containers: vec![container],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    })
}
