//! The lab's certificates: one CA, one serving certificate for 127.0.0.1
//! (API server, every webhook, the function), client certificates for the
//! admin (system:masters, the harness's kubectl only), for
//! kube-controller-manager and for Crossplane dialling functions, and the
//! service-account key pair.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, SanType,
};

use super::LabError;

pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    /// tls.crt, tls.key, ca.crt: what controller-runtime webhook servers and
    /// the function SDK read from a certificate folder.
    pub fn server_dir(&self) -> PathBuf {
        self.dir.join("server")
    }
    pub fn crossplane_client_dir(&self) -> PathBuf {
        self.dir.join("crossplane-client")
    }
    pub fn admin_cert(&self) -> PathBuf {
        self.dir.join("admin.crt")
    }
    pub fn admin_key(&self) -> PathBuf {
        self.dir.join("admin.key")
    }
    /// kube-controller-manager's own identity (the bootstrap policy's
    /// `system:kube-controller-manager` user).
    pub fn kcm_cert(&self) -> PathBuf {
        self.dir.join("kcm.crt")
    }
    pub fn kcm_key(&self) -> PathBuf {
        self.dir.join("kcm.key")
    }
    pub fn sa_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }
    pub fn sa_pub(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }
    pub fn ca_pem(&self) -> Result<String, LabError> {
        read(&self.ca())
    }
}

fn read(p: &Path) -> Result<String, LabError> {
    std::fs::read_to_string(p).map_err(|e| LabError::new(format!("{}: {e}", p.display())))
}

fn write(p: &Path, s: &str) -> Result<(), LabError> {
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| LabError::new(format!("{}: {e}", parent.display())))?;
    }
    std::fs::write(p, s).map_err(|e| LabError::new(format!("{}: {e}", p.display())))
}

fn rc(e: rcgen::Error) -> LabError {
    LabError::new(format!("certificate: {e}"))
}

fn leaf(
    ca: &CertifiedIssuer<'_, KeyPair>,
    cn: &str,
    org: Option<&str>,
    usage: ExtendedKeyUsagePurpose,
    sans: bool,
) -> Result<(String, String), LabError> {
    let key = KeyPair::generate().map_err(rc)?;
    let names = if sans {
        vec!["localhost".to_string()]
    } else {
        vec![]
    };
    let mut params = CertificateParams::new(names).map_err(rc)?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = org {
        params.distinguished_name.push(DnType::OrganizationName, o);
    }
    params.extended_key_usages = vec![usage];
    if sans {
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    }
    let cert = params.signed_by(&key, ca).map_err(rc)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Creates the certificates once; a second `up` reuses them.
pub fn ensure(dir: &Path) -> Result<Pki, LabError> {
    let pki = Pki {
        dir: dir.to_path_buf(),
    };
    // The controller-manager certificate is written last: its presence
    // means the set is complete.
    if pki.kcm_cert().exists() {
        return Ok(pki);
    }
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rc)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "metalplane-lab-ca");
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().map_err(rc)?).map_err(rc)?;
    let ca_pem = ca.pem();
    write(&pki.ca(), &ca_pem)?;

    let (crt, key) = leaf(
        &ca,
        "127.0.0.1",
        None,
        ExtendedKeyUsagePurpose::ServerAuth,
        true,
    )?;
    let d = pki.server_dir();
    write(&d.join("tls.crt"), &crt)?;
    write(&d.join("tls.key"), &key)?;
    write(&d.join("ca.crt"), &ca_pem)?;
    let (crt, key) = leaf(
        &ca,
        "admin",
        Some("system:masters"),
        ExtendedKeyUsagePurpose::ClientAuth,
        false,
    )?;
    write(&pki.admin_cert(), &crt)?;
    write(&pki.admin_key(), &key)?;
    let (crt, key) = leaf(
        &ca,
        "crossplane",
        None,
        ExtendedKeyUsagePurpose::ClientAuth,
        false,
    )?;
    let d = pki.crossplane_client_dir();
    write(&d.join("tls.crt"), &crt)?;
    write(&d.join("tls.key"), &key)?;
    write(&d.join("ca.crt"), &ca_pem)?;

    let sa = KeyPair::generate().map_err(rc)?;
    write(&pki.sa_key(), &sa.serialize_pem())?;
    write(&pki.sa_pub(), &sa.public_key_pem())?;
    let (crt, key) = leaf(
        &ca,
        "system:kube-controller-manager",
        None,
        ExtendedKeyUsagePurpose::ClientAuth,
        false,
    )?;
    write(&pki.kcm_key(), &key)?;
    write(&pki.kcm_cert(), &crt)?;
    Ok(pki)
}

/// A kubeconfig for the admin client certificate, the files referenced by
/// path.
pub fn kubeconfig(pki: &Pki, server: &str) -> String {
    let path = |p: PathBuf| p.display().to_string();
    admin_kubeconfig(
        server,
        "",
        [
            path(pki.ca()),
            path(pki.admin_cert()),
            path(pki.admin_key()),
        ],
    )
}

/// A kubeconfig for kube-controller-manager's own certificate.
pub fn kcm_kubeconfig(pki: &Pki, server: &str) -> String {
    let path = |p: PathBuf| p.display().to_string();
    admin_kubeconfig(
        server,
        "",
        [path(pki.ca()), path(pki.kcm_cert()), path(pki.kcm_key())],
    )
}

/// `suffix` "" names files, "-data" carries base64 contents.
fn admin_kubeconfig(server: &str, suffix: &str, [ca, crt, key]: [String; 3]) -> String {
    kubeconfig_yaml(
        server,
        &format!("certificate-authority{suffix}: {ca}"),
        "admin",
        &[
            format!("client-certificate{suffix}: {crt}"),
            format!("client-key{suffix}: {key}"),
        ],
    )
}

/// A kubeconfig with one cluster (`ca_line` its certificate authority)
/// and one user (`user_lines` its credentials).
pub fn kubeconfig_yaml(server: &str, ca_line: &str, user: &str, user_lines: &[String]) -> String {
    let creds: String = user_lines.iter().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: {server}
    {ca_line}
users:
- name: {user}
  user:
{creds}contexts:
- name: lab
  context: {{cluster: lab, user: {user}}}
current-context: lab
"
    )
}
