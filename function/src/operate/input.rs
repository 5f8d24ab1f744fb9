//! The operation's input (`package/input/`): how the Jobs are run.

use serde::Deserialize;

pub const INPUT_API_VERSION: &str = "metalplane.fn.kube.farm/v1alpha1";
pub const INPUT_KIND: &str = "BMCRemediation";

pub const DEFAULT_IMAGE: &str = "ghcr.io/kube-farm/metalplane:v0.1.0";
pub const DEFAULT_BOOT_DEVICE: &str = "Optical.iDRACVirtual.1-1";
pub const DEFAULT_MEDIA_WAIT_SECONDS: u32 = 300;
pub const DEFAULT_MAX_RESETS: u32 = 3;

/// Operation input. Every field is optional; see the defaults above.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Input {
    /// Image holding `metalplane-bmc`.
    pub image: String,
    /// The boot source to put first while virtual media is attached.
    pub boot_device: String,
    /// How long the Job waits for the iDRAC to list the virtual drive.
    pub media_wait_seconds: u32,
    /// Resets per host at most (counted over the host's errorCount and the
    /// reset Jobs still present).
    pub max_resets: u32,
    /// Decide and report, create nothing.
    pub dry_run: bool,
    /// BMC drivers (the address scheme before `+`/`://`) to act for; a
    /// trailing `*` is a prefix match.
    pub drivers: Vec<String>,
}

impl Default for Input {
    fn default() -> Self {
        Self {
            image: DEFAULT_IMAGE.into(),
            boot_device: DEFAULT_BOOT_DEVICE.into(),
            media_wait_seconds: DEFAULT_MEDIA_WAIT_SECONDS,
            max_resets: DEFAULT_MAX_RESETS,
            dry_run: false,
            drivers: vec!["idrac-*".into()],
        }
    }
}

impl Input {
    /// Checks values that end up in a Job; returns a reason naming the field.
    pub fn validate(&self) -> Result<(), String> {
        let image_ok = !self.image.is_empty()
            && self.image.len() <= 512
            && self.image.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | ':' | '-' | '_' | '@')
            });
        if !image_ok {
            return Err(format!(
                "input.image {:?}: must be an image reference",
                self.image
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
