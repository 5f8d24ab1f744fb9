//! metalplane-bmc against a real third-party Redfish implementation:
//! sushy-tools' emulator (PyPI) with the fake system driver, TLS and Basic
//! auth, started on 127.0.0.1 by the test. The test installs sushy-tools
//! into `.cache/sushy-venv` the first time.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod python_venv;

use python_venv::venv;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};

const USER: &str = "admin";
const PASS: &str = "Sushy-Pa55-9f2c";

struct Sushy {
    child: Child,
    port: u16,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Sushy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

/// A CA and a server certificate for 127.0.0.1 signed by it (rustls wants a
/// real chain: a self-signed CA:TRUE end entity is refused).
fn certs(dir: &Path) -> PathBuf {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sushy-test-ca");
    let ca =
        CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("ca");
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress("127.0.0.1".parse().expect("ip")));
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca).expect("sign");
    std::fs::write(dir.join("cert.pem"), cert.pem()).expect("write");
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).expect("write");
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).expect("write");
    ca_path
}

fn start(power: &str) -> Sushy {
    let venv = venv();
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let ca = certs(d);
    // sushy accepts bcrypt htpasswd entries only.
    let hash = Command::new(venv.join("bin/python"))
        .args(["-c", &format!("import bcrypt;print(bcrypt.hashpw({PASS:?}.encode(), bcrypt.gensalt(rounds=4)).decode())")])
        .output()
        .expect("python");
    std::fs::write(
        d.join("htpasswd"),
        format!("{USER}:{}", String::from_utf8_lossy(&hash.stdout).trim()),
    )
    .expect("htpasswd");
    let port = free_port();
    let conf = format!(
        "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n\
         SUSHY_EMULATOR_LISTEN_PORT = {port}\n\
         SUSHY_EMULATOR_SSL_CERT = '{d}/cert.pem'\n\
         SUSHY_EMULATOR_SSL_KEY = '{d}/key.pem'\n\
         SUSHY_EMULATOR_AUTH_FILE = '{d}/htpasswd'\n\
         SUSHY_EMULATOR_FAKE_DRIVER = True\n\
         SUSHY_EMULATOR_STATE_DIR = '{d}/state'\n\
         SUSHY_EMULATOR_FEATURE_SET = 'full'\n\
         SUSHY_EMULATOR_FAKE_SYSTEMS = [{{'uuid': 'System.Embedded.1', 'name': 'r730', 'power_state': '{power}', 'nics': [{{'mac': '18:66:da:00:00:01', 'ip': '192.168.120.70'}}]}}]\n",
        d = d.display()
    );
    std::fs::write(d.join("conf.py"), conf).expect("conf");
    let child = Command::new(venv.join("bin/sushy-emulator"))
        .arg("--config")
        .arg(d.join("conf.py"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sushy-emulator starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "sushy-emulator did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    Sushy {
        child,
        port,
        ca,
        _dir: dir,
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn bmc(s: &Sushy, pass: &str, ca: bool, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_metalplane-bmc"));
    cmd.env("BMC_URL", format!("https://127.0.0.1:{}", s.port))
        .env("BMC_USERNAME", USER)
        .env("BMC_PASSWORD", pass)
        .env_remove("BMC_INSECURE")
        .args([
            "--request-timeout",
            "10s",
            "--backoff-initial",
            "200ms",
            "--backoff-max",
            "1s",
            "--budget",
            "60s",
        ]);
    if ca {
        cmd.arg("--ca-file").arg(&s.ca);
    }
    let out = cmd.args(args).output().expect("metalplane-bmc runs");
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !r.stdout.contains(pass) && !r.stderr.contains(pass),
        "the password leaked"
    );
    r
}

/// The system's PowerState, read through the same TLS stack.
fn power_state(s: &Sushy) -> String {
    let pem = std::fs::read(&s.ca).expect("ca");
    let url = format!(
        "https://127.0.0.1:{}/redfish/v1/Systems/System.Embedded.1",
        s.port
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let cert = reqwest::Certificate::from_pem(&pem).expect("pem");
        let c = reqwest::Client::builder()
            .tls_certs_only([cert])
            .build()
            .expect("client");
        let v: serde_json::Value = c
            .get(&url)
            .basic_auth(USER, Some(PASS))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        v["PowerState"].as_str().unwrap_or_default().to_string()
    })
}

#[test]
fn powers_on_an_off_host_then_force_restarts_it() {
    let s = start("Off");
    assert_eq!(power_state(&s), "Off");
    let r = bmc(&s, PASS, true, &["reboot", "--wait", "--poll", "500ms"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.starts_with("outcome=power-reset action=reboot"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("power was Off: On"), "{}", r.stdout);
    assert_eq!(power_state(&s), "On");

    let r = bmc(&s, PASS, true, &["reboot"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("power was On: ForceRestart"),
        "{}",
        r.stdout
    );
}

#[test]
fn verifies_tls_unless_told_not_to() {
    let s = start("On");
    // No CA given: the emulator's certificate is not trusted.
    let r = bmc(&s, PASS, false, &["reboot"]);
    assert_eq!(r.code, 6, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("TLS verification"), "{}", r.stdout);
    // The host opted out (spec.bmc.disableCertificateVerification).
    let r = bmc(&s, PASS, false, &["--insecure", "reboot"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
}

#[test]
fn wrong_password_is_an_auth_failure() {
    let s = start("On");
    let r = bmc(&s, "not-the-Pa55", true, &["reboot"]);
    assert_eq!(r.code, 5, "{}\n{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("not-the-Pa55"));
}

#[test]
fn reset_bmc_without_manager_reset_is_refused_clearly() {
    let s = start("On");
    let r = bmc(&s, PASS, true, &["reset-bmc", "--no-wait"]);
    assert_eq!(r.code, 4, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("Manager.Reset") && r.stdout.contains("HTTP 404"),
        "{}",
        r.stdout
    );
}

#[test]
fn fix_boot_order_on_a_non_dell_bmc_fails_cleanly() {
    let s = start("On");
    let r = bmc(
        &s,
        PASS,
        true,
        &["fix-boot-order", "--media-wait", "10s", "--poll", "1s"],
    );
    // sushy has no Dell BootSources: a clear refusal, never a panic.
    assert_eq!(r.code, 4, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("BootSources"), "{}", r.stdout);
}
