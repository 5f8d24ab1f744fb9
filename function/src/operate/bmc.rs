//! BMC addresses of BareMetalHosts, as Ironic reads them.

/// A Redfish endpoint derived from `spec.bmc.address`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The driver, e.g. `idrac-virtualmedia`.
    pub driver: String,
    /// `scheme://host[:port]`, IPv6 hosts in brackets.
    pub base_url: String,
    /// The system id from the address path, when it names one.
    pub system_id: Option<String>,
}

/// Parses `driver[+http|+https]://host[:port][/redfish/v1/Systems/<id>]`.
pub fn parse_address(address: &str) -> Result<Endpoint, String> {
    let (scheme, rest) = address
        .split_once("://")
        .ok_or_else(|| format!("BMC address {address:?} has no scheme (driver://host)"))?;
    let (driver, transport) = match scheme.split_once('+') {
        Some((d, t)) => (d, t),
        None => (scheme, "https"),
    };
    if !matches!(transport, "http" | "https") {
        return Err(format!(
            "BMC address {address:?}: transport {transport:?} is not http or https"
        ));
    }
    if driver.is_empty()
        || !driver
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(format!(
            "BMC address {address:?}: driver {driver:?} is not a driver name"
        ));
    }
    let url = url::Url::parse(&format!("{transport}://{rest}"))
        .map_err(|e| format!("BMC address {address:?}: {e}"))?;
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("BMC address {address:?} names no host"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "BMC address of driver {driver:?} must not carry credentials"
        ));
    }
    let base_url = match url.port() {
        Some(p) => format!("{transport}://{host}:{p}"),
        None => format!("{transport}://{host}"),
    };
    let system_id = url
        .path()
        .strip_prefix("/redfish/v1/Systems/")
        .map(|s| s.trim_end_matches('/'))
        .filter(|s| !s.is_empty() && !s.contains('/'))
        .filter(|s| {
            s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        })
        .map(String::from);
    Ok(Endpoint {
        driver: driver.to_string(),
        base_url,
        system_id,
    })
}
