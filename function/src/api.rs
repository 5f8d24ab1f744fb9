//! The MetalCluster API as Rust types: the one source of truth for the
//! XRD's schema (`cargo xtask generate` renders it with schemars, a test
//! fails when the checked-in XRD drifts). The API server validates every
//! XR against that schema before the function sees it; the function reads
//! the spec into these same types (`decode`), and the semantic rules
//! (overlaps, ranges, shell safety) run on them (`spec`, `validate`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Defaults applied when a field is omitted: the XRD declares them (serde
/// defaults below become the schema's), and the function applies the same
/// ones to a spec the API server did not default.
pub const DEFAULT_POD_CIDR: &str = "10.244.0.0/16";
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";
pub const DEFAULT_USERNAME: &str = "metal3";
pub const DEFAULT_CILIUM_VERSION: &str = "1.18.4";
/// Cilium's own chart repository; `spec.cni.chartRepository` overrides it.
pub const DEFAULT_CHART_REPOSITORY: &str = "https://helm.cilium.io";
pub const DEFAULT_NODE_POOL: &str = "gpu";
/// kube-vip serves the control plane's virtual IP; air-gapped sites name
/// their mirror in `spec.controlPlane.kubeVipImage`.
pub const DEFAULT_KUBE_VIP_IMAGE: &str = "ghcr.io/kube-vip/kube-vip:v1.0.0";
/// kubeadm's certificates live one year; a rollable control plane rolls
/// this many days before they expire (KCP's certificatesExpiryDays).
pub const DEFAULT_RENEW_CERTIFICATES_DAYS: i64 = 30;
/// A node NotReady (or Unknown) this long is remediated: long enough that
/// a kubelet restart or a short network blip does not reboot a server.
pub const DEFAULT_UNHEALTHY_AFTER_SECONDS: i64 = 300;
/// A bare-metal machine may take this long from claim to a Ready node:
/// POST, inspection-free provisioning and first boot of a GPU server with
/// its driver build take tens of minutes, not the cloud's few.
pub const DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS: i64 = 3600;
/// CAPI's own recommendation: more unhealthy machines than this at once
/// means a shared cause (switch, power), which reboots do not fix.
pub const DEFAULT_MAX_UNHEALTHY: &str = "40%";
/// A drain gives up after 10 minutes: inference servers drain in-flight
/// requests and unload models within a few, and a PodDisruptionBudget that
/// never allows an eviction must not stall a rollout or scale-down forever.
pub const DEFAULT_NODE_DRAIN_TIMEOUT_SECONDS: i64 = 600;
/// Volumes of a drained node get 5 minutes to detach before the machine is
/// deleted anyway (CSI detach is seconds when the storage answers).
pub const DEFAULT_NODE_VOLUME_DETACH_TIMEOUT_SECONDS: i64 = 300;

fn default_pod_cidr() -> String {
    DEFAULT_POD_CIDR.into()
}
fn default_service_cidr() -> String {
    DEFAULT_SERVICE_CIDR.into()
}
fn default_cilium_version() -> String {
    DEFAULT_CILIUM_VERSION.into()
}
fn default_chart_repository() -> String {
    DEFAULT_CHART_REPOSITORY.into()
}
fn default_username() -> String {
    DEFAULT_USERNAME.into()
}
fn default_node_pool() -> String {
    DEFAULT_NODE_POOL.into()
}
fn default_provider_config_name() -> String {
    "default".into()
}
fn yes() -> bool {
    true
}
fn default_renew_certificates_days() -> i64 {
    DEFAULT_RENEW_CERTIFICATES_DAYS
}
fn default_unhealthy_after_seconds() -> i64 {
    DEFAULT_UNHEALTHY_AFTER_SECONDS
}
fn default_node_startup_timeout_seconds() -> i64 {
    DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS
}
fn default_max_unhealthy() -> String {
    DEFAULT_MAX_UNHEALTHY.into()
}
fn default_node_drain_timeout_seconds() -> i64 {
    DEFAULT_NODE_DRAIN_TIMEOUT_SECONDS
}
fn default_node_volume_detach_timeout_seconds() -> i64 {
    DEFAULT_NODE_VOLUME_DETACH_TIMEOUT_SECONDS
}

/// A Kubernetes cluster on BareMetalHosts: one node, or a control plane behind a virtual IP and pools of workers.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalClusterSpec {
    pub host: HostSpec,
    pub network: NetworkSpec,
    pub kubernetes: KubernetesSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni: Option<CniSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference: Option<InferenceSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneSpec>,
    /// Pools of worker machines; without them the control plane runs the workloads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub workers: Vec<WorkerSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainSpec>,
}

/// Node health remediation: a MachineHealthCheck per machine set (the control plane, each pool) reboots an unhealthy machine's host through the bare metal operator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthSpec {
    /// Set false to never remediate (no MachineHealthChecks).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// A node NotReady or Unknown this long is rebooted.
    #[serde(default = "default_unhealthy_after_seconds")]
    #[schemars(range(min = 30, max = 86400))]
    pub unhealthy_after_seconds: i64,
    /// A machine whose node has not joined this long after it was created is rebooted.
    #[serde(default = "default_node_startup_timeout_seconds")]
    #[schemars(range(min = 300, max = 86400))]
    pub node_startup_timeout_seconds: i64,
    /// Remediate only while at most this many machines of a set are unhealthy: a count or a percentage (e.g. 40%).
    #[serde(default = "default_max_unhealthy")]
    #[schemars(length(max = 4), pattern(r"^[0-9]+%?$"))]
    pub max_unhealthy: String,
}

impl Default for HealthSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            unhealthy_after_seconds: default_unhealthy_after_seconds(),
            node_startup_timeout_seconds: default_node_startup_timeout_seconds(),
            max_unhealthy: default_max_unhealthy(),
        }
    }
}

/// Bounds on draining a node before its machine is deleted (rollouts, scale-down, remediation by replacement), on the control plane and every pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainSpec {
    /// Give up evicting after this long (a PodDisruptionBudget cannot stall a rollout forever); 0 waits forever.
    #[serde(default = "default_node_drain_timeout_seconds")]
    #[schemars(range(min = 0, max = 86400))]
    pub node_drain_timeout_seconds: i64,
    /// Give up waiting for the node's volumes to detach after this long; 0 waits forever.
    #[serde(default = "default_node_volume_detach_timeout_seconds")]
    #[schemars(range(min = 0, max = 86400))]
    pub node_volume_detach_timeout_seconds: i64,
}

impl Default for DrainSpec {
    fn default() -> Self {
        Self {
            node_drain_timeout_seconds: default_node_drain_timeout_seconds(),
            node_volume_detach_timeout_seconds: default_node_volume_detach_timeout_seconds(),
        }
    }
}

fn one() -> i64 {
    1
}
fn default_kube_vip_image() -> String {
    DEFAULT_KUBE_VIP_IMAGE.into()
}

/// A control plane of several machines behind a virtual IP. Absent: one machine at network.nodeIP.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneSpec {
    /// Control plane machines: 1, 3 or 5 (etcd keeps a quorum with an odd count).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 5))]
    pub replicas: i64,
    /// The API server's virtual IP, in the node subnet and outside every address range; kube-vip announces it (ARP) from the control plane nodes. Required unless replicas is 1 and addresses is one address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 15), extend("format" = "ipv4"))]
    pub endpoint: Option<String>,
    /// FIRST-LAST: the control plane nodes' addresses, in the node subnet, at least replicas of them. Replaces network.nodeIP.
    #[schemars(length(max = 31))]
    pub addresses: String,
    /// kube-vip image serving the endpoint; air-gapped sites name their mirror.
    #[serde(default = "default_kube_vip_image")]
    #[schemars(length(max = 255))]
    pub kube_vip_image: String,
}

/// A pool of worker machines.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerSpec {
    /// Pool name, a DNS label of at most 20 characters, unique; also its nodes' modelplane.ai/pool label.
    #[schemars(length(max = 20), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// Machines in the pool.
    #[serde(default = "one")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: i64,
    /// Selects BareMetalHosts labelled metal.kube.farm/pool=<pool> in this namespace.
    #[schemars(
        length(max = 63),
        pattern(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    )]
    pub pool: String,
    /// The NIC the node OS uses. A pool that sets none of bootInterface, bond, vlan and mtu takes spec.host's (all four); one that sets any describes its own network, bootInterface defaulting to spec.host.bootInterface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 15), pattern(r"^[a-zA-Z][a-zA-Z0-9._-]*$"))]
    pub boot_interface: Option<String>,
    /// bond, vlan, mtu.
    #[serde(flatten)]
    pub link: LinkSpec,
    /// FIRST-LAST: the pool's node addresses, in the node subnet, at least replicas of them.
    #[schemars(length(max = 31))]
    pub addresses: String,
    /// Labels of this pool's nodes, merged over spec.kubernetes.nodeLabels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64, "additionalProperties" = {"type": "string", "maxLength": 63}))]
    pub node_labels: BTreeMap<String, String>,
    /// Install the NVIDIA driver on this pool's nodes (same shape as spec.gpu).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuSpec>,
}

/// Which BareMetalHost to use.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostSpec {
    /// Selects BareMetalHosts labelled metal.kube.farm/pool=<pool> in this namespace.
    #[schemars(
        length(max = 63),
        pattern(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    )]
    pub pool: String,
    /// Name of the NIC the node OS uses, as reported by inspection (status.hardware.nics[].name), e.g. eno1.
    #[schemars(length(max = 15), pattern(r"^[a-zA-Z][a-zA-Z0-9._-]*$"))]
    pub boot_interface: String,
    /// bond, vlan, mtu.
    #[serde(flatten)]
    pub link: LinkSpec,
}

/// The node network's bond, VLAN and MTU, the same on `spec.host` and
/// each pool (flattened into both).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkSpec {
    /// Bond these NICs and put the node address on the bond (bond0). Needs bootInterface among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bond: Option<BondSpec>,
    /// VLAN id the node address sits on: a VLAN of the bond, or of bootInterface (the OS names it <link>.<vlan>).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4094))]
    pub vlan: Option<i64>,
    /// MTU of every link of the node network (NICs, bond, VLAN), e.g. 9000 for jumbo frames; at most 9000 (CAPM3 v1.13's limit). Default: the OS's (1500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1280, max = 9000))]
    pub mtu: Option<i64>,
}

/// A bond of the node's NICs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BondSpec {
    /// 2 to 8 NICs as inspection names them (status.hardware.nics[].name).
    #[schemars(
        length(min = 2, max = 8),
        inner(length(max = 15), pattern(r"^[a-zA-Z][a-zA-Z0-9._-]*$"))
    )]
    pub interfaces: Vec<String>,
    /// Bonding mode, one CAPM3 v1.13 accepts: 802.3ad (LACP, default), active-backup, balance-rr, balance-xor, broadcast, balance-tlb or balance-alb.
    #[serde(default)]
    pub mode: BondMode,
}

/// Linux bonding modes, as CAPM3's Metal3DataTemplate takes them (no
/// variant docs: they would make a non-structural `oneOf`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BondMode {
    #[default]
    #[serde(rename = "802.3ad")]
    Lacp,
    #[serde(rename = "active-backup")]
    ActiveBackup,
    #[serde(rename = "balance-rr")]
    BalanceRr,
    #[serde(rename = "balance-xor")]
    BalanceXor,
    #[serde(rename = "broadcast")]
    Broadcast,
    #[serde(rename = "balance-tlb")]
    BalanceTlb,
    #[serde(rename = "balance-alb")]
    BalanceAlb,
}

impl BondMode {
    /// As CAPM3 and the kernel write it.
    pub fn as_str(self) -> &'static str {
        match self {
            BondMode::Lacp => "802.3ad",
            BondMode::ActiveBackup => "active-backup",
            BondMode::BalanceRr => "balance-rr",
            BondMode::BalanceXor => "balance-xor",
            BondMode::Broadcast => "broadcast",
            BondMode::BalanceTlb => "balance-tlb",
            BondMode::BalanceAlb => "balance-alb",
        }
    }
}

/// Static IPv4 addressing of the node.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    /// The single node's address, also the API server endpoint (<nodeIP>:6443). Required without spec.controlPlane, refused with it.
    #[serde(rename = "nodeIP", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 15), extend("format" = "ipv4"))]
    pub node_ip: Option<String>,
    /// Prefix length of the node subnet.
    #[schemars(range(min = 1, max = 32))]
    pub prefix: i64,
    /// Default gateway, inside the node subnet.
    #[schemars(length(max = 15), extend("format" = "ipv4"))]
    pub gateway: String,
    /// DNS resolver the node uses.
    #[schemars(length(max = 15), extend("format" = "ipv4"))]
    pub dns_server: String,
    /// Pod network; must not overlap the service CIDR or the node subnet.
    #[serde(rename = "podCIDR", default = "default_pod_cidr")]
    #[schemars(length(max = 18))]
    pub pod_cidr: String,
    /// Service network (at most a /12).
    #[serde(rename = "serviceCIDR", default = "default_service_cidr")]
    #[schemars(length(max = 18))]
    pub service_cidr: String,
    /// Addresses for LoadBalancer Services (the inference gateway), a range FIRST-LAST or a CIDR inside the node subnet. Composes a Cilium LB IPAM pool and an L2 announcement policy on the workload cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub load_balancer: Option<String>,
}

/// Digest algorithm of imageChecksum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumType {
    Md5,
    #[default]
    Sha256,
    Sha512,
}

/// Format of the image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DiskFormat {
    Raw,
    #[default]
    Qcow2,
    Vdi,
    Vmdk,
    LiveIso,
}

impl ChecksumType {
    /// As written in the spec (and in Metal3's `checksumType`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChecksumType::Md5 => "md5",
            ChecksumType::Sha256 => "sha256",
            ChecksumType::Sha512 => "sha512",
        }
    }
}

impl DiskFormat {
    /// As written in the spec (and in Metal3's `format`).
    pub fn as_str(self) -> &'static str {
        match self {
            DiskFormat::Raw => "raw",
            DiskFormat::Qcow2 => "qcow2",
            DiskFormat::Vdi => "vdi",
            DiskFormat::Vmdk => "vmdk",
            DiskFormat::LiveIso => "live-iso",
        }
    }
}

/// The Kubernetes release and the OS image that carries it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesSpec {
    /// Kubernetes version vX.Y.Z; must match the image.
    #[schemars(length(max = 32), pattern(r"^v[0-9]+\.[0-9]+\.[0-9]+$"))]
    pub version: String,
    /// Labels the kubelet sets on the node (node-labels). kubernetes.io and k8s.io keys are refused except the ones the kubelet may set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64, "additionalProperties" = {"type": "string", "maxLength": 63}))]
    pub node_labels: BTreeMap<String, String>,
    /// http(s) or oci URL of the node OS image.
    #[serde(rename = "imageURL")]
    #[schemars(length(max = 2048))]
    pub image_url: String,
    /// Digest of the image (hex, matching imageChecksumType) or URL of a checksum file. Required unless imageDiskFormat is live-iso or imageURL is oci://.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub image_checksum: Option<String>,
    /// Digest algorithm of imageChecksum.
    #[serde(default)]
    pub image_checksum_type: ChecksumType,
    /// Format of the image.
    #[serde(default)]
    pub image_disk_format: DiskFormat,
    /// A control plane behind a virtual IP rolls its machines (renewing kubeadm's one-year certificates) this many days before they expire.
    #[serde(default = "default_renew_certificates_days")]
    #[schemars(range(min = 7, max = 180))]
    pub renew_certificates_days: i64,
}

/// The CNI installed into the new cluster.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CniSpec {
    /// Cilium chart version (from chartRepository).
    #[serde(default = "default_cilium_version")]
    pub cilium_version: String,
    /// Helm repository (http(s)) or OCI registry path (oci://) serving the cilium chart; air-gapped sites name their mirror.
    #[serde(default = "default_chart_repository")]
    pub chart_repository: String,
}

/// The same defaults when `spec.cni` is absent altogether.
impl Default for CniSpec {
    fn default() -> Self {
        Self {
            cilium_version: default_cilium_version(),
            chart_repository: default_chart_repository(),
        }
    }
}

/// Install the NVIDIA kernel driver at first boot.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuSpec {
    /// How the node gets the driver. Build (default): the package manager (apt-get or dnf) installs the kernel headers, a compiler and DKMS, then the installer builds the driver with DKMS so a kernel update rebuilds it. BuildWithImageTools: the image already carries the kernel headers, a compiler and DKMS (air-gapped sites): no package manager runs, the installer from driverInstallerURL (e.g. on the LAN) builds with DKMS. Preinstalled: the image already carries the driver: nothing is installed, the node loads it and checks its GPUs.
    #[serde(default)]
    pub driver_setup: DriverSetup,
    /// http(s) URL of an NVIDIA .run installer (e.g. served on the LAN); required unless driverSetup is Preinstalled.
    #[serde(
        rename = "driverInstallerURL",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 2048))]
    pub driver_installer_url: Option<String>,
    /// sha256 of the installer; when set, the node verifies the download before running it. Without it the installer runs unverified and a Warning is reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(r"^[0-9a-fA-F]{64}$"))]
    pub driver_installer_checksum: Option<String>,
    /// GPU product name exactly as NVML reports it (nvidia-smi --query-gpu=name; the NVIDIA DRA driver's productName), e.g. NVIDIA H200. When set, a node whose GPUs carry another name stops before kubeadm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub model: Option<String>,
    /// GPUs in the host. When set, a node that sees another number stops before kubeadm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub count: Option<i64>,
    /// Memory per GPU as NVML reports it (nvidia-smi --query-gpu=memory.total), a quantity such as 143771Mi for an H200 (not the data sheet's 141 GB). When set, a node with a GPU that has less stops before kubeadm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub memory: Option<String>,
}

/// How a node gets the NVIDIA driver (spec.gpu.driverSetup); the values
/// are described on the field (variant docs would make a non-structural
/// `oneOf` in the XRD).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DriverSetup {
    #[default]
    Build,
    BuildWithImageTools,
    Preinstalled,
}

/// A sudo login user on the node.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessSpec {
    /// Login name.
    #[serde(default = "default_username")]
    #[schemars(length(max = 32))]
    pub username: String,
    /// OpenSSH public keys allowed to log in as username.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 16384)))]
    pub ssh_authorized_keys: Vec<String>,
}

/// Join the Modelplane inference fleet (InferenceClass, InferenceCluster, kubeconfig copy) once the cluster runs. Needs network.loadBalancer.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InferenceSpec {
    /// Set false to leave the fleet while keeping the settings.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Modelplane node pool name; the node carries modelplane.ai/pool=<nodePool> from its first boot, in the fleet or not (default gpu), so it is fixed after creation.
    #[serde(default = "default_node_pool")]
    #[schemars(length(max = 40))]
    pub node_pool: String,
    /// InferenceClass name (cluster-scoped); default <namespace>-<name>-<nodePool>.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    /// InferenceClass description; derived from spec.gpu when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// InferenceClass devices; derived from spec.gpu (one gpu.nvidia.com DRA device) when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "devices_schema")]
    pub devices: Option<Vec<BTreeMap<String, Value>>>,
    /// InferenceCluster name (cluster-scoped); default <namespace>-<name>.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing: Option<ExistingSpec>,
    /// provider-kubernetes config of the management cluster (where Modelplane runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_config_ref: Option<ProviderConfigRef>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ExistingSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheSpec>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheSpec {
    /// StorageClass for Modelplane's model cache; Modelplane requires ReadWriteMany (e.g. an NFS or CephFS class), so a ReadWriteOnce class such as local-path does not work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ProviderConfigKind {
    #[default]
    ClusterProviderConfig,
    ProviderConfig,
}

impl ProviderConfigKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderConfigKind::ClusterProviderConfig => "ClusterProviderConfig",
            ProviderConfigKind::ProviderConfig => "ProviderConfig",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ProviderConfigRef {
    #[serde(default)]
    pub kind: ProviderConfigKind,
    #[serde(default = "default_provider_config_name")]
    pub name: String,
}

/// What the XR shows (written by the function, read by people).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalClusterStatus {
    /// host:port of the workload API server.
    pub control_plane_endpoint: String,
    /// Secret (key value) with the workload cluster's admin kubeconfig.
    pub kubeconfig_secret: String,
    /// The pool the host is taken from.
    pub host_pool: String,
    /// The Cluster's Available condition is True.
    pub control_plane_available: bool,
    /// WaitingForHost, HostError (the claimed host reports an error), Provisioning, Bootstrapping, InstallingCNI, Ready, RollingOut (the control plane or a worker pool is adding, replacing or removing machines, or a machine is not ready yet), Upgrading (a new Kubernetes version rolls: control plane first, then the pools), Remediating (an unhealthy machine is being rebooted); with inference JoiningFleet, InferenceReady.
    pub phase: String,
    /// The cluster in the Modelplane fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference: Option<InferenceStatus>,
    /// The BareMetalHost CAPM3 claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostStatus>,
    /// The KubeadmControlPlane's rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<RolloutStatus>,
    /// Ready/desired nodes of the control plane and every worker pool (1/1 for a ready single node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<String>,
    /// Every BareMetalHost claimed for this cluster (with spec.controlPlane or spec.workers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub hosts: Vec<ClaimedHost>,
    /// Each worker pool's MachineDeployment rollout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub workers: Vec<WorkerPoolStatus>,
    /// Where the Kubernetes version stands on each machine set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesStatus>,
    /// The earliest expiry of the control plane machines' certificates (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_expiry_date: Option<String>,
}

/// The Kubernetes version of every machine set.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesStatus {
    /// The version every machine runs; absent while an upgrade rolls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<SetVersion>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub workers: Vec<SetVersion>,
}

/// One machine set's version: what it is told to run, and how many of its machines are up to date with that.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetVersion {
    /// The pool's name; absent for the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The version its machines are built at (the control plane's: the oldest a machine runs, as KCP reports it).
    pub version: String,
    pub up_to_date: i64,
    pub desired: i64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedHost {
    pub name: String,
    /// Its metal.kube.farm/pool label.
    pub pool: String,
    pub provisioning_state: String,
    pub powered_on: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerPoolStatus {
    pub name: String,
    #[serde(flatten)]
    pub rollout: RolloutStatus,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InferenceStatus {
    pub cluster: String,
    pub class: String,
    pub node_pool: String,
    /// Address of the inference gateway, once Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_address: Option<String>,
    /// With GPU worker pools: each pool's Modelplane node pool and InferenceClass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub pools: Vec<InferencePoolStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolStatus {
    pub node_pool: String,
    pub class: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostStatus {
    pub name: String,
    pub provisioning_state: String,
    pub powered_on: bool,
    /// BMO's operationalStatus (OK, discovered, error, delayed, detached, servicing).
    pub operational_status: String,
    /// BMO's errorType while the host reports an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Failed attempts so far; BMO keeps retrying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_count: Option<u64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    pub desired_replicas: i64,
    pub replicas: i64,
    pub up_to_date_replicas: i64,
    pub ready_replicas: i64,
    pub rolling_out: bool,
}

/// Modelplane's device shape is Modelplane's to validate: kept as given.
fn devices_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": 16,
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    })
}

/// The JSON Schema of `T` as a Kubernetes structural schema: inlined, no
/// `$schema`/`title`, no nulls, only formats the API server knows.
pub fn structural_schema<T: JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::openapi3();
    settings.inline_subschemas = true;
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut v = schema.to_value();
    clean(&mut v);
    v
}

/// Removes what structural schemas do not carry.
fn clean(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for k in ["$schema", "title", "definitions", "components", "nullable"] {
                m.remove(k);
            }
            // An Option is "may be absent", never null.
            if let Some(Value::Array(types)) = m.get("type") {
                let one: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
                if let [t] = one.as_slice() {
                    m.insert("type".into(), t.clone());
                }
            }
            if let Some(Value::Array(any)) = m.get("anyOf") {
                let rest: Vec<Value> = any
                    .iter()
                    .filter(|s| s.get("type").and_then(Value::as_str) != Some("null"))
                    .cloned()
                    .collect();
                if let [Value::Object(only)] = rest.as_slice() {
                    m.remove("anyOf");
                    for (k, v) in only {
                        m.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
            }
            // schemars marks integers by width; the API server knows int32/int64 only.
            if m.get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| f != "ipv4")
            {
                m.remove("format");
            }
            for (_, child) in m.iter_mut() {
                clean(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(clean),
        _ => {}
    }
}
