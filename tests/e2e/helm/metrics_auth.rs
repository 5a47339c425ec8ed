//! The chart's `metrics.secure` against the real API server: the operator
//! binary, authenticated as the chart's ServiceAccount (so the chart's RBAC
//! for TokenReviews and SubjectAccessReviews is what lets it review), serves
//! `/metrics` over https and answers
//!
//! - 401 without a token, and with a token the API server does not know;
//! - 403 to a ServiceAccount without the chart's `metrics-reader` ClusterRole;
//! - 200 with the metrics to a ServiceAccount bound to it (through the
//!   chart's `metrics.secure.readers`).
//!
//! Mirrors: controller-runtime's `pkg/metrics/filters` tests (envtest's real
//! API server, a ServiceAccount token with and without the role).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Release, service_account_token, token_kubeconfig};
use crate::cluster::{client, cluster_dir, kubectl, run_ok, test_namespace, wait_until};
use crate::loopback::http_get;
use crate::operator::{Operator, ensure_crd};
use crate::support::shared_cluster;

/// A certificate and key for `localhost` in `<dir>/tls.crt` and `tls.key`
/// (what `--metrics-cert-dir` reads); returns the certificate to trust.
fn write_serving_cert(dir: &Path) -> CertificateDer<'static> {
    std::fs::create_dir_all(dir).expect("the cert dir");
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("a certificate");
    std::fs::write(dir.join("tls.crt"), generated.cert.pem()).expect("tls.crt");
    std::fs::write(dir.join("tls.key"), generated.signing_key.serialize_pem()).expect("tls.key");
    CertificateDer::from_pem_file(dir.join("tls.crt")).expect("the written certificate")
}

/// `GET /metrics` over TLS on loopback `port`, trusting exactly `cert` as
/// `localhost`, with `token` as bearer if given: (status, body).
async fn https_get(
    port: u16,
    cert: &CertificateDer<'static>,
    token: Option<&str>,
) -> (u16, String) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).expect("a trusted certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("the metrics port accepts");
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("a server name");
    let mut tls = connector
        .connect(name, tcp)
        .await
        .expect("a TLS handshake with the operator's certificate");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
    tls.write_all(request.as_bytes())
        .await
        .expect("the request is sent");
    let mut response = Vec::new();
    // A close without close_notify is reported after the data; the
    // response is complete by then.
    let _ = tls.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP response: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn secure_metrics_answer_the_metrics_reader_and_refuse_everyone_else() {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "metrics-auth").await;
    for account in ["reader", "stranger"] {
        run_ok(kubectl().args(["create", "serviceaccount", account, "-n", &ns]));
    }
    // replicas=0: the operator under test is the binary, as the chart's
    // ServiceAccount; `reader` is bound to the chart's metrics-reader role.
    let reader_kind = "metrics.secure.readers[0].kind=ServiceAccount".to_owned();
    let reader_name = "metrics.secure.readers[0].name=reader".to_owned();
    let reader_ns = format!("metrics.secure.readers[0].namespace={ns}");
    let release = Release::install(
        &ns,
        &[
            "--set",
            "replicas=0",
            "--set",
            "crd.install=false",
            "--set",
            "metrics.secure.enabled=true",
            "--set",
            &reader_kind,
            "--set",
            &reader_name,
            "--set",
            &reader_ns,
        ],
    );
    let operator_token = service_account_token(&ns, &release.service_account());
    let kubeconfig = token_kubeconfig(&ns, &operator_token);
    let cert_dir: PathBuf = cluster_dir().join(format!("metrics-certs-{ns}"));
    let cert = write_serving_cert(&cert_dir);
    let cert_dir_arg = format!("--metrics-cert-dir={}", cert_dir.display());
    let mut operator =
        Operator::start_with(&ns, &["--metrics-secure", &cert_dir_arg], Some(kubeconfig));
    operator.wait_ready().await;
    let port = operator.metrics_port;

    let (status, body) = https_get(port, &cert, None).await;
    assert_eq!(status, 401, "no token: {body}");
    let (status, body) = https_get(port, &cert, Some("not-a-token")).await;
    assert_eq!(status, 401, "a token the API server does not know: {body}");

    let stranger = service_account_token(&ns, "stranger");
    let (status, body) = https_get(port, &cert, Some(&stranger)).await;
    assert_eq!(
        status, 403,
        "a token without the metrics-reader role: {body}"
    );
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:stranger")),
        "the 403 names the user: {body}"
    );

    // RBAC reaches the API server's authorizer within moments of the
    // install; a 403 seen meanwhile is cached 30 s, so allow a minute.
    let reader = service_account_token(&ns, "reader");
    let body = wait_until(
        "the metrics-reader's token to be answered with the metrics",
        Duration::from_secs(60),
        || async {
            let (status, body) = https_get(port, &cert, Some(&reader)).await;
            (status == 200).then_some(body)
        },
    )
    .await;
    assert!(body.contains("tfjob_operator_build_info"), "{body}");

    // Plain HTTP gets no HTTP answer from the TLS port; the probes stay plain.
    assert!(
        http_get(port, "/metrics").is_none_or(|(code, _)| code != 200),
        "plain HTTP was answered on the secure port"
    );
    assert_eq!(
        http_get(operator.probe_port, "/healthz").map(|(c, _)| c),
        Some(200)
    );
    let log = operator.log_text();
    assert!(
        !log.contains("failed to review"),
        "the chart's RBAC refused the operator a review:\n{log}"
    );
    let _ = std::fs::remove_dir_all(&cert_dir);
}
