//! What happens when a spec field is edited on a live MetalCluster. Every
//! field is in exactly one class; the XRD's CEL rules, the docs' edit table
//! and the tests are checked against this table.
//!
//! A control plane behind a virtual IP rolls: a change to what builds its
//! machines makes new content-named templates, and KCP and the pools'
//! MachineDeployments replace their machines one at a time. A single node
//! at `spec.network.nodeIP` cannot: its one node holds the API endpoint,
//! and a second machine would need the same address. There every field
//! the machine is built from is refused, with the way to do it instead.

/// What an edit of a field does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Applied to the live objects, no machine replaced.
    InPlace,
    /// Replaces the machines it builds, one at a time (a control plane
    /// behind a virtual IP, worker pools); refused on a single node.
    Rolling,
    /// Refused by the API server (an XRD transition rule).
    Refused,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::InPlace => "applied in place",
            Class::Rolling => "rolls",
            Class::Refused => "refused",
        }
    }
}

/// One spec field: its path below `spec`, its class, and what the edit
/// does (in place) or why it is refused.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub path: &'static str,
    pub class: Class,
    pub effect: &'static str,
}

const MACHINE: &str = "every machine is replaced, the control plane's first, then each pool's, one at a time per set (a single node at network.nodeIP is refused: its node holds the API endpoint)";
const VERSION: &str = "the control plane's machines are replaced first, one at a time; each pool follows once the KubeadmControlPlane reports every machine at the new version. A downgrade, skipping a minor version and an edit while the last upgrade still rolls are refused (a single node at network.nodeIP is refused: its node holds the API endpoint)";
const POOL_ROLL: &str = "that pool's machines are replaced one at a time (maxSurge 0: no spare host needed); the control plane and the other pools are untouched";
const NETWORK: &str = "the node's network data and address pool are fixed at provisioning (CAPM3 and IPAM refuse changes to them), and the API endpoint is the node's address";

use Class::{InPlace, Refused, Rolling};

/// Every field of `spec`, in the XRD's order.
#[rustfmt::skip]
pub const FIELDS: &[Field] = &[
    Field { path: "host.pool", class: Refused, effect: "the claimed host stays claimed; a new pool would only select hosts for machines that are never created" },
    Field { path: "host.bootInterface", class: Refused, effect: NETWORK },
    Field { path: "host.bond", class: Refused, effect: NETWORK },
    Field { path: "host.vlan", class: Refused, effect: NETWORK },
    Field { path: "host.mtu", class: Refused, effect: NETWORK },
    Field { path: "network.nodeIP", class: Refused, effect: NETWORK },
    Field { path: "network.prefix", class: Refused, effect: NETWORK },
    Field { path: "network.gateway", class: Refused, effect: NETWORK },
    Field { path: "network.dnsServer", class: Refused, effect: NETWORK },
    Field { path: "network.podCIDR", class: Refused, effect: "kubeadm fixes the pod network when the cluster is created" },
    Field { path: "network.serviceCIDR", class: Refused, effect: "kubeadm fixes the service network when the cluster is created" },
    Field { path: "network.loadBalancer", class: InPlace, effect: "the Cilium LB IPAM pool's range is updated; adding or removing it is refused (it switches kube-proxy replacement, fixed at creation)" },
    Field { path: "kubernetes.version", class: Rolling, effect: VERSION },
    Field { path: "kubernetes.nodeLabels", class: Rolling, effect: MACHINE },
    Field { path: "kubernetes.imageURL", class: Rolling, effect: MACHINE },
    Field { path: "kubernetes.imageChecksum", class: Rolling, effect: MACHINE },
    Field { path: "kubernetes.imageChecksumType", class: Rolling, effect: MACHINE },
    Field { path: "kubernetes.imageDiskFormat", class: Rolling, effect: MACHINE },
    Field { path: "kubernetes.renewCertificatesDays", class: InPlace, effect: "KCP's rollout.before.certificatesExpiryDays: a control plane behind a virtual IP rolls its machines this many days before their certificates expire" },
    Field { path: "cni.ciliumVersion", class: InPlace, effect: "helm upgrades the Cilium release; the XR is not Ready until its pods are" },
    Field { path: "cni.chartRepository", class: InPlace, effect: "where the chart comes from: the running release is not re-fetched; the next install or version change uses it" },
    Field { path: "gpu", class: Rolling, effect: "adding or removing the driver changes the nodes' first-boot commands: every machine is replaced as for a change of it (a single node at network.nodeIP is refused)" },
    Field { path: "gpu.driverSetup", class: Rolling, effect: MACHINE },
    Field { path: "gpu.driverInstallerURL", class: Rolling, effect: MACHINE },
    Field { path: "gpu.driverInstallerChecksum", class: Rolling, effect: MACHINE },
    Field { path: "gpu.model", class: InPlace, effect: "describes the GPUs to Modelplane only: the InferenceClass is updated in the fleet, the value kept for joining later" },
    Field { path: "gpu.count", class: InPlace, effect: "describes the GPUs to Modelplane only: the InferenceClass is updated in the fleet, the value kept for joining later" },
    Field { path: "gpu.memory", class: InPlace, effect: "describes the GPUs to Modelplane only: the InferenceClass is updated in the fleet, the value kept for joining later" },
    Field { path: "access", class: Rolling, effect: MACHINE },
    Field { path: "inference", class: InPlace, effect: "joining, leaving (also enabled: false) and every setting below are applied to the Modelplane objects; the machine is untouched (its pool label is set from the start)" },
    Field { path: "inference.nodePool", class: Refused, effect: "it is the node's label modelplane.ai/pool, set at provisioning (default gpu, also when the cluster is not in the fleet)" },
    Field { path: "controlPlane", class: Refused, effect: "it switches between a single node at nodeIP and a control plane behind a virtual IP, which kubeadm fixes when the cluster is created" },
    Field { path: "controlPlane.replicas", class: InPlace, effect: "the KubeadmControlPlane scales to 1, 3 or 5 machines, taking hosts from spec.host.pool and addresses from controlPlane.addresses" },
    Field { path: "controlPlane.endpoint", class: Refused, effect: "it is the API server's address in every kubeconfig and certificate, fixed when the cluster is created" },
    Field { path: "controlPlane.addresses", class: Refused, effect: NETWORK },
    Field { path: "controlPlane.kubeVipImage", class: Rolling, effect: "it is in the control plane nodes' static Pod: the control plane's machines are replaced one at a time" },
    Field { path: "workers", class: InPlace, effect: "pools can be added (new machines) and removed (their machines are deleted, their hosts deprovisioned and returned to their pool)" },
    Field { path: "workers[].name", class: InPlace, effect: "it identifies the pool: a new name is a new pool, and the pool under the old name is removed" },
    Field { path: "workers[].replicas", class: InPlace, effect: "the pool's MachineDeployment scales: new machines claim hosts of its pool, removed ones are deprovisioned and their hosts returned" },
    Field { path: "workers[].pool", class: Refused, effect: POOL_MACHINES },
    Field { path: "workers[].bootInterface", class: Rolling, effect: POOL_ROLL },
    Field { path: "workers[].bond", class: Rolling, effect: POOL_ROLL },
    Field { path: "workers[].vlan", class: Rolling, effect: POOL_ROLL },
    Field { path: "workers[].mtu", class: Rolling, effect: POOL_ROLL },
    Field { path: "workers[].addresses", class: Refused, effect: NETWORK },
    Field { path: "workers[].nodeLabels", class: Rolling, effect: POOL_ROLL },
    Field { path: "workers[].gpu", class: Rolling, effect: POOL_ROLL },
    Field { path: "health.enabled", class: InPlace, effect: "the MachineHealthChecks and the reboot template are created or removed; no machine is touched" },
    Field { path: "health.unhealthyAfterSeconds", class: InPlace, effect: "the MachineHealthChecks are updated" },
    Field { path: "health.nodeStartupTimeoutSeconds", class: InPlace, effect: "the MachineHealthChecks are updated" },
    Field { path: "health.maxUnhealthy", class: InPlace, effect: "the MachineHealthChecks are updated" },
    Field { path: "drain.nodeDrainTimeoutSeconds", class: InPlace, effect: "Cluster API propagates it to the existing machines without replacing them" },
    Field { path: "drain.nodeVolumeDetachTimeoutSeconds", class: InPlace, effect: "Cluster API propagates it to the existing machines without replacing them" },
];

/// Why a worker pool's machine settings are fixed (until pools roll).
const POOL_MACHINES: &str = "the pool's machines are built from it at provisioning";

/// What to do instead of a refused edit of a worker pool.
pub const POOL_INSTEAD: &str =
    "add a pool with the new value under a new name, then remove the old pool";

/// Markers of the generated edit table (docs/day2.md).
pub const TABLE_BEGIN: &str =
    "<!-- BEGIN generated by `cargo xtask generate` from function/src/fields.rs -->";
pub const TABLE_END: &str = "<!-- END generated -->";

/// The edit table: one row per field.
pub fn edit_table() -> String {
    let mut out = String::from("| field | on edit | effect |\n|---|---|---|\n");
    for f in FIELDS {
        out.push_str(&format!(
            "| `spec.{}` | {} | {} |\n",
            f.path,
            f.class.as_str(),
            f.effect
        ));
    }
    out
}

/// `text` (a checked-in page) with the part between `begin` and `end`
/// made afresh from `body`.
pub fn replace_between(text: &str, begin: &str, end: &str, body: &str) -> Result<String, String> {
    let start = text
        .find(begin)
        .ok_or_else(|| format!("no marker {begin}"))?
        + begin.len();
    let stop = text[start..]
        .find(end)
        .ok_or_else(|| format!("no marker {end}"))?
        + start;
    Ok(format!("{}\n{body}{}", &text[..start], &text[stop..]))
}

/// `text` (docs/day2.md) with the edit table made afresh.
pub fn regenerate_edit_table(text: &str) -> Result<String, String> {
    replace_between(text, TABLE_BEGIN, TABLE_END, &edit_table())
}

/// The pool label's value as the node has it: `gpu` unless set.
const POOL: &str = "(has(self.inference) && has(self.inference.nodePool) ? self.inference.nodePool : 'gpu') == (has(oldSelf.inference) && has(oldSelf.inference.nodePool) ? oldSelf.inference.nodePool : 'gpu')";

/// What to do instead of a refused edit.
pub const INSTEAD: &str =
    "create a new MetalCluster with the new value, move the workloads, then delete this one";

/// The message of a refused field's rule.
pub fn refusal(f: &Field) -> String {
    match f.path.split_once("[].") {
        Some((list, item)) => format!(
            "spec.{list}[].{item} cannot change: {}; {POOL_INSTEAD}",
            f.effect
        ),
        None => format!("spec.{} cannot change: {}; {INSTEAD}", f.path, f.effect),
    }
}

/// A field of the items of a list keyed by `name`: an item that was there
/// before (same name) keeps its value.
pub fn item_unchanged(list: &str, item: &str) -> String {
    let same = unchanged(item)
        .replace("oldSelf.", "o.")
        .replace("self.", "w.");
    format!(
        "!has(self.{list}) || !has(oldSelf.{list}) || self.{list}.all(w, !oldSelf.{list}.exists(o, o.name == w.name) || oldSelf.{list}.exists(o, o.name == w.name && ({same})))"
    )
}

/// `self.a.b == oldSelf.a.b`, safe when any step is absent: both sides must
/// have the same steps present, and then equal values.
pub fn unchanged(path: &str) -> String {
    let parts: Vec<&str> = path.split('.').collect();
    let mut expr = String::new();
    for i in (0..parts.len()).rev() {
        let p = parts[..=i].join(".");
        let inner = if expr.is_empty() {
            format!("self.{p} == oldSelf.{p}")
        } else {
            expr.clone()
        };
        expr = format!("has(self.{p}) == has(oldSelf.{p}) && (!has(self.{p}) || {inner})");
    }
    expr
}

/// Presence only: the field may change but not appear or disappear.
pub fn same_presence(path: &str) -> String {
    format!("has(self.{path}) == has(oldSelf.{path})")
}

/// A transition rule on `spec`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub rule: String,
    pub message: String,
    /// Relative to `spec`, e.g. `.host.pool`.
    pub field_path: String,
}

/// The XRD's transition rules, on the object's root so that they can read
/// the old status: a field is fixed only once the function composed the
/// graph from it (`status.phase` set). A spec the function refused built
/// nothing, and fixing it is exactly what the refusal asks for.
pub fn root_rules() -> Vec<Rule> {
    let version = version_rules();
    rules()
        .into_iter()
        .map(|r| Rule {
            rule: format!(
                "!has(oldSelf.status) || !has(oldSelf.status.phase) || ({})",
                // `oldSelf.` is not matched by `self.` (case differs).
                r.rule
                    .replace("self.", "self.spec.")
                    .replace("oldSelf.", "oldSelf.spec.")
            ),
            message: r.message,
            field_path: format!(".spec{}", r.field_path),
        })
        .chain(version.into_iter().map(|r| Rule {
            rule: format!(
                "!has(oldSelf.status) || !has(oldSelf.status.phase) || ({})",
                r.rule
            ),
            ..r
        }))
        .collect()
}

/// The transition rules relative to `spec`, in FIELDS order.
pub fn rules() -> Vec<Rule> {
    let mut out = Vec::new();
    for f in FIELDS {
        let field_path = format!(".{}", f.path);
        // An object whose fields are listed too: only its presence is fixed.
        let parent = FIELDS.iter().any(|c| {
            c.path.len() > f.path.len()
                && c.path.starts_with(f.path)
                && c.path.as_bytes()[f.path.len()] == b'.'
        });
        match f.class {
            Class::Refused if f.path.contains("[].") => {
                let (list, item) = f.path.split_once("[].").unwrap_or_default();
                out.push(Rule {
                    rule: item_unchanged(list, item),
                    message: refusal(f),
                    field_path: format!(".{list}"),
                });
            }
            Class::Refused if parent => out.push(Rule {
                rule: same_presence(f.path),
                message: format!("spec.{} cannot be added or removed: {}; {INSTEAD}", f.path, f.effect),
                field_path,
            }),
            // Compared by effective value: adding the settings with the
            // default pool changes nothing on the node.
            Class::Refused if f.path == "inference.nodePool" => out.push(Rule {
                rule: POOL.into(),
                message: refusal(f),
                field_path,
            }),
            Class::Refused => out.push(Rule {
                rule: unchanged(f.path),
                message: refusal(f),
                field_path,
            }),
            // Its presence decides kube-proxy replacement.
            Class::InPlace if f.path == "network.loadBalancer" => out.push(Rule {
                rule: same_presence(f.path),
                message: format!(
                    "spec.{} cannot be added or removed: it switches Cilium's kube-proxy replacement, fixed when the cluster is created; its range can change; {INSTEAD}",
                    f.path
                ),
                field_path,
            }),
            // Items of a pool: pools always roll.
            Class::Rolling if f.path.contains("[].") => {}
            Class::Rolling if parent => out.push(Rule {
                rule: format!("{ROLLABLE} || {}", same_presence(f.path)),
                message: single_refusal(f, "be added or removed"),
                field_path,
            }),
            Class::Rolling => out.push(Rule {
                rule: format!("{ROLLABLE} || {}", unchanged(f.path)),
                message: single_refusal(f, "change"),
                field_path,
            }),
            Class::InPlace => {}
        }
    }
    out
}

/// The old spec's control plane sits behind a virtual IP, so it rolls.
pub const ROLLABLE: &str = "(has(oldSelf.controlPlane) && has(oldSelf.controlPlane.endpoint))";

/// How to get a single node that can be upgraded.
pub const UPGRADEABLE_SINGLE: &str = "for a single node that upgrades in place, use a one-machine control plane behind a virtual IP (spec.controlPlane with replicas: 1, an endpoint and 2 addresses)";

/// The message of a rolling field's rule on a single node.
pub fn single_refusal(f: &Field, verb: &str) -> String {
    format!(
        "spec.{} cannot {verb} on a single node at spec.network.nodeIP: its node holds the API endpoint, so it cannot roll onto a new machine; {UPGRADEABLE_SINGLE}, or {INSTEAD}",
        f.path
    )
}

/// `int(<side>.spec.kubernetes.version.substring(1).split('.')[i])`.
fn version_part(side: &str, i: usize) -> String {
    format!("int({side}.spec.kubernetes.version.substring(1).split('.')[{i}])")
}

/// The Kubernetes version skew rules, on the root (they read the old
/// status): for a control plane that rolls, a version edit may not go
/// back, may not skip a minor version, and may not start while the last
/// upgrade still rolls. A single node's version is fixed by its own rule.
pub fn version_rules() -> Vec<Rule> {
    let (nmaj, nmin, npat) = (
        version_part("self", 0),
        version_part("self", 1),
        version_part("self", 2),
    );
    let (omaj, omin, opat) = (
        version_part("oldSelf", 0),
        version_part("oldSelf", 1),
        version_part("oldSelf", 2),
    );
    let guard = format!(
        "self.spec.kubernetes.version == oldSelf.spec.kubernetes.version || !{}",
        ROLLABLE.replace("oldSelf.", "oldSelf.spec.")
    );
    let rule = |cond: String, message: &str| Rule {
        rule: format!("{guard} || ({cond})"),
        message: message.into(),
        field_path: ".spec.kubernetes.version".into(),
    };
    vec![
        rule(
            format!("{nmaj} > {omaj} || ({nmaj} == {omaj} && ({nmin} > {omin} || ({nmin} == {omin} && {npat} >= {opat})))"),
            "spec.kubernetes.version cannot go back to an older version: kubeadm does not downgrade a cluster (etcd and the API objects may already be stored at the new version); restore a backup into a new MetalCluster instead",
        ),
        rule(
            format!("{nmaj} == {omaj} && {nmin} <= {omin} + 1"),
            "spec.kubernetes.version cannot skip a minor version: Kubernetes' version skew policy lets kubeadm upgrade one minor version at a time; upgrade to each minor version in turn",
        ),
        rule(
            "!has(oldSelf.status.kubernetes) || (has(oldSelf.status.kubernetes.version) && oldSelf.status.kubernetes.version == oldSelf.spec.kubernetes.version)".into(),
            "spec.kubernetes.version cannot change while the last upgrade still rolls (status.kubernetes shows each machine set's version); change it again once status.kubernetes.version shows the version being rolled out",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_guards_every_step() {
        assert_eq!(
            unchanged("gpu.driverInstallerURL"),
            "has(self.gpu) == has(oldSelf.gpu) && (!has(self.gpu) || has(self.gpu.driverInstallerURL) == has(oldSelf.gpu.driverInstallerURL) && (!has(self.gpu.driverInstallerURL) || self.gpu.driverInstallerURL == oldSelf.gpu.driverInstallerURL))"
        );
    }

    #[test]
    fn paths_are_unique() {
        let mut p: Vec<_> = FIELDS.iter().map(|f| f.path).collect();
        p.sort_unstable();
        p.dedup();
        assert_eq!(p.len(), FIELDS.len());
    }
}
