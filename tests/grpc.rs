//! Protocol round trips against the real binary on an ephemeral port, with
//! the SDK's tonic client: insecure, and mTLS with certificates made here.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;

use common::*;
use function_sdk_rust::proto::v1::function_runner_service_client::FunctionRunnerServiceClient;
use function_sdk_rust::proto::v1::{RunFunctionRequest, RunFunctionResponse};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

struct Server {
    _proc: Proc,
    port: u16,
}

fn start(extra: &[&str], env: &[(&str, &str)], metrics_port: Option<u16>) -> Server {
    let (proc, port) = start_function(extra, env, metrics_port);
    Server { _proc: proc, port }
}

fn example_request() -> RunFunctionRequest {
    let mut req = request(
        &example_xr(),
        &BTreeMap::new(),
        Some(&[host("r730", "available", None, false)]),
    );
    req.meta.as_mut().expect("meta").tag = "grpc-test".into();
    req
}

async fn call(
    channel: Channel,
    req: RunFunctionRequest,
) -> Result<RunFunctionResponse, tonic::Status> {
    let mut client = FunctionRunnerServiceClient::new(channel);
    client
        .run_function(req)
        .await
        .map(tonic::Response::into_inner)
}

fn assert_same_as_in_process(rsp: &RunFunctionResponse, req: &RunFunctionRequest) {
    let local = metalplane::compose::compose(req);
    assert_eq!(rsp, &local, "the wire answer equals the in-process answer");
    assert_eq!(rsp.meta.as_ref().map(|m| m.tag.as_str()), Some("grpc-test"));
    // The graph (6), its health check and its reboot template.
    assert_eq!(desired(rsp).len(), 8);
}

#[tokio::test]
async fn insecure_round_trip() {
    let metrics_port = free_port();
    let server = start(&["--insecure"], &[], Some(metrics_port));
    let channel = Endpoint::from_shared(format!("http://127.0.0.1:{}", server.port))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let req = example_request();
    let rsp = call(channel.clone(), req.clone())
        .await
        .expect("RunFunction");
    assert_same_as_in_process(&rsp, &req);

    // A bad XR over the wire is a Fatal result, not a transport error.
    let mut bad = example_xr();
    set_path(
        &mut bad,
        "spec.network.nodeIP",
        serde_json::json!("300.1.1.1"),
    );
    let bad_req = request(&bad, &BTreeMap::new(), None);
    let rsp = call(channel, bad_req).await.expect("RunFunction");
    assert!(
        fatal(&rsp)
            .expect("fatal")
            .contains("spec.network.nodeIP \"300.1.1.1\"")
    );

    // The SDK serves its gRPC metrics beside the function.
    let mut s = TcpStream::connect(("127.0.0.1", metrics_port)).expect("metrics listen");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("read");
    assert!(body.contains("grpc_server_handled_total"), "{body}");
}

struct Pki {
    dir: tempfile::TempDir,
    client_cert: String,
    client_key: String,
    ca: String,
}

fn leaf(
    issuer: &CertifiedIssuer<'_, KeyPair>,
    name: &str,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec![name.to_string()]).expect("params");
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![usage];
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress("127.0.0.1".parse().expect("ip")));
    let cert = params.signed_by(&key, issuer).expect("sign");
    (cert.pem(), key.serialize_pem())
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("ca")
}

/// A CA, the function's server certificate (what Crossplane mounts at
/// /tls/server) and a client certificate for "Crossplane".
fn pki() -> Pki {
    let authority = ca("metalplane-test-ca");
    let (server_cert, server_key) =
        leaf(&authority, "localhost", ExtendedKeyUsagePurpose::ServerAuth);
    let (client_cert, client_key) = leaf(
        &authority,
        "crossplane",
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let dir = tempfile::tempdir().expect("tmp");
    let write = |p: &Path, s: &str| std::fs::write(p, s).expect("write");
    write(&dir.path().join("tls.crt"), &server_cert);
    write(&dir.path().join("tls.key"), &server_key);
    write(&dir.path().join("ca.crt"), &authority.pem());
    Pki {
        dir,
        client_cert,
        client_key,
        ca: authority.pem(),
    }
}

async fn tls_channel(
    port: u16,
    ca_pem: &str,
    identity: Option<(&str, &str)>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    if let Some((c, k)) = identity {
        tls = tls.identity(Identity::from_pem(c, k));
    }
    Endpoint::from_shared(format!("https://127.0.0.1:{port}"))?
        .tls_config(tls)?
        .connect()
        .await
}

#[tokio::test]
async fn mtls_round_trip() {
    let pki = pki();
    let dir = pki.dir.path().to_str().expect("path").to_string();
    // The env var is how Crossplane's runtime points the function at its certs.
    let server = start(&[], &[("TLS_SERVER_CERTS_DIR", &dir)], None);

    let channel = tls_channel(
        server.port,
        &pki.ca,
        Some((&pki.client_cert, &pki.client_key)),
    )
    .await
    .expect("mTLS connect");
    let req = example_request();
    let rsp = call(channel, req.clone())
        .await
        .expect("RunFunction over mTLS");
    assert_same_as_in_process(&rsp, &req);

    // No client certificate: refused.
    let anon = match tls_channel(server.port, &pki.ca, None).await {
        Ok(ch) => call(ch, req.clone()).await.is_err(),
        Err(_) => true,
    };
    assert!(anon, "a client without a certificate must be refused");

    // A client certificate from another CA: refused.
    let other = ca("someone-else");
    let (c, k) = leaf(&other, "crossplane", ExtendedKeyUsagePurpose::ClientAuth);
    let stranger = match tls_channel(server.port, &pki.ca, Some((&c, &k))).await {
        Ok(ch) => call(ch, req.clone()).await.is_err(),
        Err(_) => true,
    };
    assert!(
        stranger,
        "a client certificate from another CA must be refused"
    );

    // Plain text against the TLS port: refused.
    let plain = Endpoint::from_shared(format!("http://127.0.0.1:{}", server.port))
        .expect("uri")
        .connect()
        .await;
    let refused = match plain {
        Ok(ch) => call(ch, req).await.is_err(),
        Err(_) => true,
    };
    assert!(refused);
}

#[test]
fn serving_without_credentials_fails_clearly() {
    let out = Command::new(env!("CARGO_BIN_EXE_function-metalplane"))
        .args(["--address", "127.0.0.1:0", "--metrics-address", ""])
        .env_remove("TLS_SERVER_CERTS_DIR")
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--tls-certs-dir"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
