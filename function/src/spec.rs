//! The MetalCluster API: reading the XR into typed, validated values.
//!
//! Parsing and validation happen in one pass so that every problem in the
//! spec is reported at once, each naming its field path and the bad value.
//! Nothing here panics on malformed input: a wrong type is just another
//! [`FieldError`].

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde_json::Value;

use crate::validate;

/// The API group, version and kind of the composite resource.
pub const API_VERSION: &str = "metal.kube.farm/v1alpha1";
pub const KIND: &str = "MetalCluster";

/// Defaults applied when a field is omitted (the XRD declares the same).
pub const DEFAULT_USERNAME: &str = "metal3";
pub const DEFAULT_POD_CIDR: &str = "10.244.0.0/16";
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";
pub const DEFAULT_CHECKSUM_TYPE: &str = "sha256";
pub const DEFAULT_DISK_FORMAT: &str = "qcow2";
pub const DEFAULT_CILIUM_VERSION: &str = "1.18.4";
/// Cilium's own chart repository; `spec.cni.chartRepository` overrides it.
pub const DEFAULT_CHART_REPOSITORY: &str = "https://helm.cilium.io";
pub const DEFAULT_NAMESPACE: &str = "default";

/// One problem with one field of the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the field, e.g. `spec.network.prefix`.
    pub path: String,
    /// The offending value rendered as JSON, or None when the field is absent.
    pub value: Option<String>,
    /// What is wrong and what is accepted.
    pub reason: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{} {}: {}", self.path, v, self.reason),
            None => write!(f, "{}: {}", self.path, self.reason),
        }
    }
}

/// Renders a JSON value for an error message, shortened so that a huge
/// value cannot flood an event.
pub fn show(value: &Value) -> String {
    let s = value.to_string();
    const MAX: usize = 120;
    if s.chars().count() > MAX {
        let cut: String = s.chars().take(MAX).collect();
        format!("{cut}...")
    } else {
        s
    }
}

/// A validated MetalCluster.
#[derive(Clone, Debug, PartialEq)]
pub struct MetalCluster {
    pub name: String,
    pub namespace: String,
    pub spec: Spec,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub host: Host,
    pub network: Network,
    pub kubernetes: Kubernetes,
    pub cni: Cni,
    pub gpu: Option<Gpu>,
    pub access: Option<Access>,
    pub inference: Option<crate::inference::Inference>,
    /// The Modelplane pool label every node carries (`spec.inference.nodePool`).
    pub node_pool: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    pub pool: String,
    pub boot_interface: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    pub node_ip: Ipv4Addr,
    pub prefix: u8,
    pub gateway: Ipv4Addr,
    pub dns_server: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
    pub service_cidr: Ipv4Net,
    pub load_balancer: Option<crate::inference::LoadBalancer>,
}

impl Network {
    /// The node's subnet, derived from nodeIP and prefix.
    pub fn node_subnet(&self) -> Ipv4Net {
        // prefix is validated to 1..=32 before a Network is built.
        Ipv4Net::new(self.node_ip, self.prefix)
            .map(|n| n.trunc())
            .unwrap_or_else(|_| Ipv4Net::from(self.node_ip))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Kubernetes {
    pub version: String,
    pub node_labels: BTreeMap<String, String>,
    pub image_url: String,
    pub image_checksum: Option<String>,
    pub image_checksum_type: String,
    pub image_disk_format: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Cni {
    pub cilium_version: String,
    /// Where the cilium chart comes from; air-gapped sites name a mirror.
    pub chart_repository: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Gpu {
    pub driver_installer_url: String,
    pub driver_installer_checksum: Option<String>,
    /// Product name as the NVIDIA DRA driver reports it, e.g. "Tesla V100-PCIE-16GB".
    pub model: Option<String>,
    /// GPUs in the host.
    pub count: Option<u32>,
    /// Usable memory per GPU, a Kubernetes quantity (e.g. 16Gi).
    pub memory: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub username: String,
    pub ssh_authorized_keys: Vec<String>,
}

/// Walks a JSON document by dotted paths and collects typed errors.
#[derive(Default)]
pub struct Reader {
    pub errors: Vec<FieldError>,
}

impl Reader {
    pub fn fail(&mut self, path: &str, value: Option<&Value>, reason: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.to_string(),
            value: value.map(show),
            reason: reason.into(),
        });
    }

    /// Looks a dotted path up. A non-object on the way is reported once and
    /// treated as absent.
    pub fn lookup<'v>(&mut self, root: &'v Value, path: &str) -> Option<&'v Value> {
        let mut cur = root;
        // Byte offset of the end of the parent path walked so far; the
        // parent's name is only built when it is not an object.
        let mut parent_end: usize = 0;
        for part in path.split('.') {
            match cur {
                Value::Object(m) => match m.get(part) {
                    Some(Value::Null) | None => return None,
                    Some(v) => cur = v,
                },
                other => {
                    let parent = &path[..parent_end.saturating_sub(1)];
                    if !self.errors.iter().any(|e| e.path == parent) {
                        self.fail(parent, Some(other), "must be an object");
                    }
                    return None;
                }
            }
            parent_end += part.len() + 1;
        }
        Some(cur)
    }

    pub fn opt_str(&mut self, root: &Value, path: &str) -> Option<String> {
        match self.lookup(root, path)? {
            Value::String(s) => Some(s.clone()),
            other => {
                self.fail(path, Some(other), "must be a string");
                None
            }
        }
    }

    /// A required, non-empty string.
    pub fn req_str(&mut self, root: &Value, path: &str) -> Option<String> {
        let present = self.lookup(root, path).is_some();
        match self.opt_str(root, path) {
            Some(s) if s.trim().is_empty() => {
                self.fail(path, Some(&Value::String(s)), "must not be empty");
                None
            }
            Some(s) => Some(s),
            None => {
                if !present {
                    self.fail(path, None, "is required");
                }
                None
            }
        }
    }

    pub fn opt_int(&mut self, root: &Value, path: &str) -> Option<i64> {
        let v = self.lookup(root, path)?;
        match v.as_i64() {
            Some(i) => Some(i),
            None => {
                self.fail(path, Some(v), "must be an integer");
                None
            }
        }
    }

    pub fn opt_str_map(&mut self, root: &Value, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        match self.lookup(root, path) {
            None => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    match v {
                        Value::String(s) => {
                            out.insert(k.clone(), s.clone());
                        }
                        other => self.fail(
                            &format!("{path}[{}]", Value::String(k.clone())),
                            Some(other),
                            "must be a string",
                        ),
                    }
                }
            }
            Some(other) => self.fail(path, Some(other), "must be a map of strings"),
        }
        out
    }

    pub fn opt_str_list(&mut self, root: &Value, path: &str) -> Vec<String> {
        let mut out = Vec::new();
        match self.lookup(root, path) {
            None => {}
            Some(Value::Array(items)) => {
                for (i, v) in items.iter().enumerate() {
                    match v {
                        Value::String(s) => out.push(s.clone()),
                        other => {
                            self.fail(&format!("{path}[{i}]"), Some(other), "must be a string")
                        }
                    }
                }
            }
            Some(other) => self.fail(path, Some(other), "must be a list of strings"),
        }
        out
    }

    /// An optional string with a default, validated by `rule`.
    fn defaulted(
        &mut self,
        root: &Value,
        path: &str,
        default: &str,
        rule: fn(&str) -> Result<(), String>,
    ) -> Option<String> {
        let v = self
            .opt_str(root, path)
            .unwrap_or_else(|| default.to_string());
        let res = rule(&v);
        self.check(path, &v, res.map(|_| v.clone()))
    }

    fn check<T>(&mut self, path: &str, raw: &str, parsed: Result<T, String>) -> Option<T> {
        match parsed {
            Ok(v) => Some(v),
            Err(reason) => {
                self.fail(path, Some(&Value::String(raw.to_string())), reason);
                None
            }
        }
    }
}

/// Parses and validates a MetalCluster XR. Returns every problem found.
pub fn parse(xr: &Value) -> Result<MetalCluster, Vec<FieldError>> {
    let mut r = Reader::default();

    let name = r.req_str(xr, "metadata.name");
    let namespace = r
        .opt_str(xr, "metadata.namespace")
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    if let Some(n) = &name {
        let value = Value::String(n.clone());
        if let Err(reason) = validate::xr_name(n) {
            r.fail("metadata.name", Some(&value), reason);
        }
    }
    if r.lookup(xr, "spec").is_none() {
        r.fail("spec", None, "is required");
    }

    // host
    let pool = r.req_str(xr, "spec.host.pool");
    let pool = pool.and_then(|p| {
        let res = validate::label_value(&p);
        r.check("spec.host.pool", &p, res.map(|_| p.clone()))
    });
    let boot_interface = r.req_str(xr, "spec.host.bootInterface").and_then(|b| {
        let res = validate::interface_name(&b);
        r.check("spec.host.bootInterface", &b, res.map(|_| b.clone()))
    });

    let network = parse_network(&mut r, xr);
    let kubernetes = parse_kubernetes(&mut r, xr);

    let cilium_version = r.defaulted(
        xr,
        "spec.cni.ciliumVersion",
        DEFAULT_CILIUM_VERSION,
        validate::chart_version,
    );
    let chart_repository = r.defaulted(
        xr,
        "spec.cni.chartRepository",
        DEFAULT_CHART_REPOSITORY,
        validate::chart_repository,
    );

    let gpu = parse_gpu(&mut r, xr);
    let access = parse_access(&mut r, xr);
    let inference = crate::inference::parse(&mut r, xr, name.as_deref(), &namespace);
    let node_pool = crate::inference::node_pool(&mut r, xr, inference.as_ref());

    if !r.errors.is_empty() {
        return Err(r.errors);
    }
    // Every Option below is Some when no error was recorded; the match keeps
    // that invariant explicit instead of unwrapping.
    match (
        name,
        pool,
        boot_interface,
        network,
        kubernetes,
        cilium_version,
        chart_repository,
    ) {
        (
            Some(name),
            Some(pool),
            Some(boot_interface),
            Some(network),
            Some(kubernetes),
            Some(cv),
            Some(repo),
        ) => {
            let mc = MetalCluster {
                name,
                namespace,
                spec: Spec {
                    host: Host {
                        pool,
                        boot_interface,
                    },
                    network,
                    kubernetes,
                    cni: Cni {
                        cilium_version: cv,
                        chart_repository: repo,
                    },
                    gpu: gpu.flatten(),
                    access: access.flatten(),
                    inference,
                    node_pool,
                },
            };
            // Rules across sections need the whole, otherwise valid spec.
            let mut errors = crate::inference::check(&mc);
            errors.extend(crate::inference::check_pool_label(&mc));
            if errors.is_empty() {
                Ok(mc)
            } else {
                Err(errors)
            }
        }
        _ => Err(vec![FieldError {
            path: "spec".into(),
            value: None,
            reason: "is incomplete".into(),
        }]),
    }
}

fn parse_ipv4(r: &mut Reader, xr: &Value, path: &str) -> Option<Ipv4Addr> {
    let raw = r.req_str(xr, path)?;
    let res = validate::ipv4(&raw);
    r.check(path, &raw, res)
}

fn parse_cidr(r: &mut Reader, xr: &Value, path: &str, default: &str) -> Option<Ipv4Net> {
    let raw = r.opt_str(xr, path).unwrap_or_else(|| default.to_string());
    let res = validate::ipv4_cidr(&raw);
    r.check(path, &raw, res)
}

fn parse_network(r: &mut Reader, xr: &Value) -> Option<Network> {
    let node_ip = parse_ipv4(r, xr, "spec.network.nodeIP");
    let prefix = match r.opt_int(xr, "spec.network.prefix") {
        None => {
            if r.lookup(xr, "spec.network.prefix").is_none() {
                r.fail("spec.network.prefix", None, "is required");
            }
            None
        }
        Some(p) if (1..=32).contains(&p) => Some(p as u8),
        Some(p) => {
            r.fail(
                "spec.network.prefix",
                Some(&Value::from(p)),
                "must be between 1 and 32",
            );
            None
        }
    };
    let gateway = parse_ipv4(r, xr, "spec.network.gateway");
    let dns_server = parse_ipv4(r, xr, "spec.network.dnsServer");
    let pod_cidr = parse_cidr(r, xr, "spec.network.podCIDR", DEFAULT_POD_CIDR);
    let service_cidr = parse_cidr(r, xr, "spec.network.serviceCIDR", DEFAULT_SERVICE_CIDR);

    let load_balancer = crate::inference::parse_load_balancer(r, xr);
    let network = Network {
        load_balancer,
        node_ip: node_ip?,
        prefix: prefix?,
        gateway: gateway?,
        dns_server: dns_server?,
        pod_cidr: pod_cidr?,
        service_cidr: service_cidr?,
    };
    for e in validate::network(&network) {
        r.errors.push(e);
    }
    Some(network)
}

fn parse_kubernetes(r: &mut Reader, xr: &Value) -> Option<Kubernetes> {
    let version = r.req_str(xr, "spec.kubernetes.version").and_then(|v| {
        let res = validate::kubernetes_version(&v);
        r.check("spec.kubernetes.version", &v, res.map(|_| v.clone()))
    });

    let node_labels = r.opt_str_map(xr, "spec.kubernetes.nodeLabels");
    for (k, v) in &node_labels {
        let path = format!("spec.kubernetes.nodeLabels[{}]", Value::String(k.clone()));
        if let Err(reason) = validate::node_label_key(k) {
            r.fail(
                &path,
                Some(&Value::String(k.clone())),
                format!("key {reason}"),
            );
        }
        if let Err(reason) = validate::label_value(v) {
            r.fail(
                &path,
                Some(&Value::String(v.clone())),
                format!("value {reason}"),
            );
        }
    }

    let arg = crate::builders::bootstrap::node_labels_arg(&node_labels);
    if arg.len() > crate::builders::bootstrap::MAX_ARG_VALUE {
        r.fail(
            "spec.kubernetes.nodeLabels",
            None,
            format!(
                "join into a node-labels kubelet argument of {} characters; kubeadm accepts at most {}",
                arg.len(),
                crate::builders::bootstrap::MAX_ARG_VALUE
            ),
        );
    }

    let image_url = r.req_str(xr, "spec.kubernetes.imageURL").and_then(|u| {
        let res = validate::image_url(&u);
        r.check("spec.kubernetes.imageURL", &u, res.map(|_| u.clone()))
    });

    let checksum_type = r
        .opt_str(xr, "spec.kubernetes.imageChecksumType")
        .unwrap_or_else(|| DEFAULT_CHECKSUM_TYPE.to_string());
    let checksum_type = {
        let res = validate::one_of(&checksum_type, &["md5", "sha256", "sha512"]);
        r.check(
            "spec.kubernetes.imageChecksumType",
            &checksum_type,
            res.map(|_| checksum_type.clone()),
        )
    };

    let disk_format = r
        .opt_str(xr, "spec.kubernetes.imageDiskFormat")
        .unwrap_or_else(|| DEFAULT_DISK_FORMAT.to_string());
    let disk_format = {
        let res = validate::one_of(&disk_format, &["raw", "qcow2", "vdi", "vmdk", "live-iso"]);
        r.check(
            "spec.kubernetes.imageDiskFormat",
            &disk_format,
            res.map(|_| disk_format.clone()),
        )
    };

    // CAPM3's webhook requires a checksum unless the image is a live ISO or
    // an OCI artifact; refuse early rather than at provisioning time.
    let checksum = r.opt_str(xr, "spec.kubernetes.imageChecksum");
    let checksum_optional = disk_format.as_deref() == Some("live-iso")
        || image_url
            .as_deref()
            .is_some_and(|u| u.starts_with("oci://"));
    let checksum = match checksum {
        None if !checksum_optional => {
            r.fail(
                "spec.kubernetes.imageChecksum",
                None,
                "is required unless imageDiskFormat is live-iso or imageURL is oci://",
            );
            None
        }
        None => None,
        Some(c) => {
            if let Some(t) = &checksum_type {
                let res = validate::image_checksum(&c, t);
                r.check("spec.kubernetes.imageChecksum", &c, res);
            }
            Some(c)
        }
    };

    Some(Kubernetes {
        version: version?,
        node_labels,
        image_url: image_url?,
        image_checksum: checksum,
        image_checksum_type: checksum_type?,
        image_disk_format: disk_format?,
    })
}

fn parse_gpu(r: &mut Reader, xr: &Value) -> Option<Option<Gpu>> {
    r.lookup(xr, "spec.gpu")?;
    let url = r.req_str(xr, "spec.gpu.driverInstallerURL").and_then(|u| {
        let res = validate::http_url(&u);
        r.check("spec.gpu.driverInstallerURL", &u, res.map(|_| u.clone()))
    });
    let checksum = r
        .opt_str(xr, "spec.gpu.driverInstallerChecksum")
        .and_then(|c| {
            let res = validate::sha256_hex(&c);
            r.check(
                "spec.gpu.driverInstallerChecksum",
                &c,
                res.map(|_| c.to_ascii_lowercase()),
            )
        });
    let model = r.opt_str(xr, "spec.gpu.model").and_then(|m| {
        let ok = !m.trim().is_empty() && m.len() <= 253 && !m.contains(['\n', '\r']);
        let res = if ok {
            Ok(m.clone())
        } else {
            Err("must be a product name of at most 253 characters".to_string())
        };
        r.check("spec.gpu.model", &m, res)
    });
    let count = match r.opt_int(xr, "spec.gpu.count") {
        Some(c) if (1..=64).contains(&c) => Some(c as u32),
        Some(c) => {
            r.fail(
                "spec.gpu.count",
                Some(&Value::from(c)),
                "must be between 1 and 64",
            );
            None
        }
        None => None,
    };
    let memory = r.opt_str(xr, "spec.gpu.memory").and_then(|m| {
        let res = validate::quantity(&m).map(|_| m.clone());
        r.check("spec.gpu.memory", &m, res)
    });
    Some(url.map(|driver_installer_url| Gpu {
        driver_installer_url,
        driver_installer_checksum: checksum,
        model,
        count,
        memory,
    }))
}

fn parse_access(r: &mut Reader, xr: &Value) -> Option<Option<Access>> {
    r.lookup(xr, "spec.access")?;
    let username = r
        .opt_str(xr, "spec.access.username")
        .unwrap_or_else(|| DEFAULT_USERNAME.to_string());
    let username = {
        let res = validate::unix_username(&username);
        r.check(
            "spec.access.username",
            &username,
            res.map(|_| username.clone()),
        )
    };
    let keys = r.opt_str_list(xr, "spec.access.sshAuthorizedKeys");
    for (i, k) in keys.iter().enumerate() {
        if let Err(reason) = validate::ssh_public_key(k) {
            r.fail(
                &format!("spec.access.sshAuthorizedKeys[{i}]"),
                Some(&Value::String(k.clone())),
                reason,
            );
        }
    }
    Some(username.map(|username| Access {
        username,
        ssh_authorized_keys: keys,
    }))
}
