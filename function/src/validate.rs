//! Field validators. Each returns a reason the user can act on; the caller
//! attaches the field path and value.

use std::net::{IpAddr, Ipv4Addr};

use ipnet::Ipv4Net;

use crate::names;

type Check = Result<(), String>;

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// The XR name prefixes every composed object, so it must leave room for
/// the longest derived name within the 63-character label limit.
pub fn xr_name(n: &str) -> Check {
    dns_label(n)?;
    let longest = names::longest_derived(n);
    if longest.len() > 63 {
        return Err(format!(
            "derives object name {longest:?} ({} characters) but Kubernetes names must be at most 63: \
             use a name of at most {} characters",
            longest.len(),
            63 - (longest.len() - n.len())
        ));
    }
    Ok(())
}

/// A container image reference (registry/path:tag or @digest): it lands in
/// a static Pod manifest, so nothing but reference characters.
pub fn image_reference(i: &str) -> Check {
    let ok = !i.is_empty()
        && i.len() <= 255
        && i.chars()
            .all(|c| c.is_ascii_alphanumeric() || "./:_@-".contains(c))
        && i.starts_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err("must be a container image reference such as ghcr.io/kube-vip/kube-vip:v1.0.0".into())
    }
}

/// RFC 1123 label: lower-case alphanumerics and '-', starting and ending
/// alphanumeric, at most 63 characters.
pub fn dns_label(n: &str) -> Check {
    let ok = !n.is_empty()
        && n.len() <= 63
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err("must be a DNS label: at most 63 lower-case letters, digits or '-', starting and ending with a letter or digit".into())
    }
}

/// Kubernetes label value: empty, or at most 63 of [A-Za-z0-9._-] starting
/// and ending alphanumeric.
pub fn label_value(v: &str) -> Check {
    if v.is_empty() {
        return Ok(());
    }
    let ok = v.len() <= 63
        && v.chars()
            .all(|c| is_alnum(c) || matches!(c, '-' | '_' | '.'))
        && v.starts_with(is_alnum)
        && v.ends_with(is_alnum);
    if ok {
        Ok(())
    } else {
        Err("must be a valid label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit".into())
    }
}

fn dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(|l| dns_label(l).is_ok())
}

/// A label key: optional DNS-subdomain prefix and '/', then a name part.
pub fn label_key(k: &str) -> Check {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix
        && !dns_subdomain(p)
    {
        return Err(format!(
            "has prefix {p:?}, which must be a DNS subdomain (lower-case, at most 253 characters)"
        ));
    }
    if name.is_empty() || label_value(name).is_err() {
        return Err("must be a qualified name: an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit".into());
    }
    Ok(())
}

/// The kubelet refuses to register a node that sets labels in the
/// kubernetes.io / k8s.io namespaces other than these (NodeRestriction).
const KUBELET_ALLOWED: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];

/// A label key the kubelet accepts in `--node-labels`.
pub fn node_label_key(k: &str) -> Check {
    label_key(k)?;
    let Some((prefix, _)) = k.rsplit_once('/') else {
        return Ok(());
    };
    let reserved = ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|ns| prefix == *ns || prefix.ends_with(&format!(".{ns}")));
    let allowed_ns = ["kubelet.kubernetes.io", "node.kubernetes.io"]
        .iter()
        .any(|ns| prefix == *ns || prefix.ends_with(&format!(".{ns}")));
    if reserved && !allowed_ns && !KUBELET_ALLOWED.contains(&k) {
        return Err(format!(
            "is in the reserved {prefix:?} namespace, which the kubelet may not set (node-role labels must be applied after the node joins)"
        ));
    }
    if k == "metal3.io/uuid" {
        return Err("is set by MetalPlane itself to match the node to its Machine".into());
    }
    Ok(())
}

/// A Linux network interface name as Metal3 accepts it.
pub fn interface_name(n: &str) -> Check {
    let ok = n.len() <= 15
        && n.starts_with(|c: char| c.is_ascii_alphabetic())
        && n.chars()
            .all(|c| is_alnum(c) || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err("must be an interface name: at most 15 letters, digits, '.', '_' or '-', starting with a letter (e.g. eno1)".into())
    }
}

fn numeric_triplet(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars().all(|c| c.is_ascii_digit())
                && (p.len() == 1 || !p.starts_with('0'))
        })
}

/// Kubernetes release: `vX.Y.Z`.
pub fn kubernetes_version(v: &str) -> Check {
    match v.strip_prefix('v') {
        Some(rest) if numeric_triplet(rest) => Ok(()),
        _ => Err("must be a Kubernetes version vX.Y.Z (e.g. v1.34.1)".into()),
    }
}

/// A Helm chart version: `X.Y.Z` with an optional pre-release suffix.
pub fn chart_version(v: &str) -> Check {
    let core = v.strip_prefix('v').unwrap_or(v);
    let (core, pre) = match core.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (core, None),
    };
    let pre_ok =
        pre.is_none_or(|p| !p.is_empty() && p.chars().all(|c| is_alnum(c) || c == '.' || c == '-'));
    if numeric_triplet(core) && pre_ok {
        Ok(())
    } else {
        Err("must be a chart version X.Y.Z (e.g. 1.18.4)".into())
    }
}

pub fn ipv4(raw: &str) -> Result<Ipv4Addr, String> {
    match raw.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => Ok(a),
        Ok(IpAddr::V6(_)) => {
            Err("is an IPv6 address; MetalPlane node networks are IPv4 for now".into())
        }
        Err(_) => Err("must be an IPv4 address (e.g. 192.168.120.70)".into()),
    }
}

pub fn ipv4_cidr(raw: &str) -> Result<Ipv4Net, String> {
    let net: Ipv4Net = raw
        .parse()
        .map_err(|_| "must be an IPv4 CIDR (e.g. 10.244.0.0/16)".to_string())?;
    if net.trunc() != net {
        return Err(format!("has host bits set: did you mean {}?", net.trunc()));
    }
    Ok(net)
}

pub fn one_of(v: &str, allowed: &[&str]) -> Check {
    if allowed.contains(&v) {
        Ok(())
    } else {
        Err(format!("must be one of {}", allowed.join(", ")))
    }
}

/// Characters allowed in a URL that may reach a shell or a template: RFC
/// 3986 unreserved and the delimiters that carry no shell meaning.
fn url_chars_ok(u: &str) -> bool {
    u.chars().all(|c| {
        is_alnum(c)
            || matches!(
                c,
                '-' | '.'
                    | '_'
                    | '~'
                    | ':'
                    | '/'
                    | '?'
                    | '#'
                    | '['
                    | ']'
                    | '@'
                    | '%'
                    | '+'
                    | '='
                    | ','
            )
    })
}

fn url_with(u: &str, schemes: &[&str]) -> Check {
    if !url_chars_ok(u) {
        return Err(
            "contains characters outside [A-Za-z0-9-._~:/?#[]@%+=,] (shell metacharacters, quotes or spaces are refused)"
                .into(),
        );
    }
    let parsed = url::Url::parse(u).map_err(|e| format!("is not a URL: {e}"))?;
    if !schemes.contains(&parsed.scheme()) {
        return Err(format!("must use {}", schemes.join(" or ")));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".into());
    }
    Ok(())
}

pub fn http_url(u: &str) -> Check {
    url_with(u, &["http", "https"]).map_err(|e| format!("{e} (an http(s) URL)"))
}

/// A Helm chart repository: http(s) index or an OCI registry path.
pub fn chart_repository(u: &str) -> Check {
    url_with(u, &["http", "https", "oci"])
        .map_err(|e| format!("{e} (an http(s) chart repository or an oci:// registry path)"))
}

pub fn image_url(u: &str) -> Check {
    url_with(u, &["http", "https", "oci"]).map_err(|e| format!("{e} (an http(s) or oci URL)"))
}

fn hex_len(c: &str, len: usize) -> bool {
    c.len() == len && c.chars().all(|ch| ch.is_ascii_hexdigit())
}

/// A literal digest whose length matches the type, or a URL to a checksum file.
pub fn image_checksum(c: &str, typ: &str) -> Result<(), String> {
    if c.starts_with("http://") || c.starts_with("https://") {
        return http_url(c);
    }
    let want = match typ {
        "md5" => 32,
        "sha256" => 64,
        _ => 128,
    };
    if hex_len(c, want) {
        Ok(())
    } else {
        Err(format!(
            "must be a {typ} digest of {want} hex characters (imageChecksumType is {typ}), or an http(s) URL of a checksum file"
        ))
    }
}

pub fn sha256_hex(c: &str) -> Check {
    if hex_len(c, 64) {
        Ok(())
    } else {
        Err("must be a sha256 digest: 64 hex characters".into())
    }
}

pub fn unix_username(u: &str) -> Check {
    let ok = !u.is_empty()
        && u.len() <= 32
        && u.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && u.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !ok {
        return Err("must be a Linux user name: at most 32 lower-case letters, digits, '_' or '-', starting with a letter or '_'".into());
    }
    if u == "root" {
        return Err("must not be root: MetalPlane creates a sudo user".into());
    }
    Ok(())
}

const SSH_KEY_TYPES: &[&str] = &[
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

/// One OpenSSH public key line: `type base64 [comment]`.
pub fn ssh_public_key(k: &str) -> Check {
    if k.contains(['\n', '\r']) {
        return Err("must be a single line; give each key its own list item".into());
    }
    jinja_free(k)?;
    let mut parts = k.split_whitespace();
    let typ = parts.next().unwrap_or("");
    let body = parts.next().unwrap_or("");
    if !SSH_KEY_TYPES.contains(&typ) {
        return Err(format!(
            "must start with a public key type ({})",
            SSH_KEY_TYPES.join(", ")
        ));
    }
    let b64 = body.len() >= 16
        && body
            .chars()
            .all(|c| is_alnum(c) || matches!(c, '+' | '/' | '='));
    if !b64 {
        return Err("must carry a base64 key after the type".into());
    }
    Ok(())
}

/// Jinja's openers: CABPK marks the user-data `## template: jinja`, so
/// cloud-init renders it and any of these in a value breaks the render (or
/// turns into something else) on the node.
pub const JINJA_OPENERS: [&str; 3] = ["{{", "{%", "{#"];

/// A value that reaches the node's user-data as text.
pub fn jinja_free(v: &str) -> Check {
    match JINJA_OPENERS.iter().find(|o| v.contains(**o)) {
        Some(o) => Err(format!(
            "must not contain {o:?}: CABPK renders user-data as a Jinja template (## template: jinja), where it starts a Jinja expression and cloud-init fails to render the node's config"
        )),
        None => Ok(()),
    }
}

/// A Kubernetes quantity such as 16Gi, 80G or 40960Mi.
pub fn quantity(q: &str) -> Check {
    let digits = q.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &q[digits.len()..];
    let number_ok = !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
        && digits.chars().filter(|c| *c == '.').count() <= 1
        && !digits.starts_with('.')
        && !digits.ends_with('.');
    let suffix_ok = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "k", "M", "G", "T", "P"].contains(&suffix);
    if number_ok && suffix_ok && q.len() <= 32 {
        Ok(())
    } else {
        Err("must be a quantity such as 16Gi or 80G".into())
    }
}
