//! The operation's input (`package/input/`): how the Jobs are run.

use serde::Deserialize;

pub const INPUT_API_VERSION: &str = "metalplane.fn.kube.farm/v1alpha1";
pub const INPUT_KIND: &str = "BMCRemediation";

/// The Function package MetalPlane publishes; its runtime layer holds
/// `metalplane-bmc`, so the Jobs can run it.
pub const PUBLISHED_PACKAGE: &str = "ghcr.io/kube-farm/function-metalplane";
/// The name Crossplane's package manager gives the Function it installs
/// for the Configuration's dependency.
pub const DEFAULT_FUNCTION_NAME: &str = "kube-farm-function-metalplane";
pub const DEFAULT_BOOT_DEVICE: &str = "Optical.iDRACVirtual.1-1";
pub const DEFAULT_MEDIA_WAIT_SECONDS: u32 = 300;
pub const DEFAULT_MAX_RESETS: u32 = 3;
pub const DEFAULT_RESET_INTERVAL_SECONDS: u32 = 600;

/// Operation input. Every field is optional; see the defaults above.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Input {
    /// Image holding `metalplane-bmc`; empty: the package this function
    /// was installed from (the Function `functionName`).
    pub image: String,
    /// The Function object this function runs as.
    pub function_name: String,
    /// The boot source to put first while virtual media is attached.
    pub boot_device: String,
    /// How long the Job waits for the iDRAC to list the virtual drive.
    pub media_wait_seconds: u32,
    /// Resets per host and failure episode at most, recorded on the host
    /// (and never fewer than the reset Jobs still present).
    pub max_resets: u32,
    /// Seconds after an iDRAC reset before another one (it takes minutes
    /// to restart).
    pub reset_interval_seconds: u32,
    /// Decide and report, create nothing.
    pub dry_run: bool,
    /// BMC drivers (the address scheme before `+`/`://`) to act for; a
    /// trailing `*` is a prefix match.
    pub drivers: Vec<String>,
}

impl Default for Input {
    fn default() -> Self {
        Self {
            image: String::new(),
            function_name: DEFAULT_FUNCTION_NAME.into(),
            boot_device: DEFAULT_BOOT_DEVICE.into(),
            media_wait_seconds: DEFAULT_MEDIA_WAIT_SECONDS,
            max_resets: DEFAULT_MAX_RESETS,
            reset_interval_seconds: DEFAULT_RESET_INTERVAL_SECONDS,
            dry_run: false,
            drivers: vec!["idrac-*".into()],
        }
    }
}

impl Input {
    /// Checks values that end up in a Job; returns a reason naming the field.
    pub fn validate(&self) -> Result<(), String> {
        if !self.image.is_empty() && !is_image_ref(&self.image) {
            return Err(format!(
                "input.image {:?}: must be an image reference",
                self.image
            ));
        }
        let name_ok = !self.function_name.is_empty()
            && self.function_name.len() <= 253
            && self
                .function_name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-'));
        if !name_ok {
            return Err(format!(
                "input.functionName {:?}: must be a Function object's name",
                self.function_name
            ));
        }
        let dev_ok = !self.boot_device.is_empty()
            && self.boot_device.len() <= 128
            && self
                .boot_device
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
        if !dev_ok {
            return Err(format!(
                "input.bootDevice {:?}: must be a Dell boot source name like Optical.iDRACVirtual.1-1",
                self.boot_device
            ));
        }
        if !(10..=3600).contains(&self.media_wait_seconds) {
            return Err(format!(
                "input.mediaWaitSeconds {}: must be between 10 and 3600",
                self.media_wait_seconds
            ));
        }
        if self.max_resets > 20 {
            return Err(format!(
                "input.maxResets {}: must be at most 20",
                self.max_resets
            ));
        }
        if !(60..=86_400).contains(&self.reset_interval_seconds) {
            return Err(format!(
                "input.resetIntervalSeconds {}: must be between 60 and 86400",
                self.reset_interval_seconds
            ));
        }
        if self.drivers.is_empty() {
            return Err("input.drivers: must name at least one BMC driver".into());
        }
        Ok(())
    }

    /// Whether this input acts for a BMC driver.
    pub fn covers(&self, driver: &str) -> bool {
        self.drivers.iter().any(|d| match d.strip_suffix('*') {
            Some(prefix) => driver.starts_with(prefix),
            None => driver == d,
        })
    }
}

/// Whether `s` can be a container image reference (it reaches a Job spec,
/// never a shell).
pub fn is_image_ref(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 512
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | ':' | '-' | '_' | '@'))
}

/// The image of the Function this runs as: the package path after any
/// ImageConfig rewrite (`status.resolvedPackage`), else `spec.package`.
/// None when neither is a usable reference.
pub fn installed_image(function: &serde_json::Value) -> Option<String> {
    ["/status/resolvedPackage", "/spec/package"]
        .iter()
        .filter_map(|p| function.pointer(p).and_then(serde_json::Value::as_str))
        .find(|s| is_image_ref(s))
        .map(str::to_string)
}

/// The published package of this very version, when no Function object
/// says where it was installed from (a development run).
pub fn published_image() -> String {
    format!("{PUBLISHED_PACKAGE}:v{}", env!("CARGO_PKG_VERSION"))
}
