//! `/metrics` over HTTPS for authorized tokens: the TLS listener
//! ([`MetricsTls::serve`]) and the token filter ([`MetricsAuth::protect`])
//! the manager's server is handed, served together as it serves them.
use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use futures::future::BoxFuture;
use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::observability::metrics::{encode, new_registry};
use crate::observability::metrics_auth::{self, MetricsAuth, Reviews};
use crate::observability::metrics_tls::MetricsTls;

/// Allows the token "reader"; authenticates no other.
struct OnlyReader;

impl Reviews for OnlyReader {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<metrics_auth::Identity>, metrics_auth::ReviewError>> {
        let who = (token == "reader").then(|| metrics_auth::Identity {
            username: "reader".into(),
            ..Default::default()
        });
        Box::pin(async move { Ok(who) })
    }

    fn authorize<'a>(
        &'a self,
        _: &'a metrics_auth::Identity,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<bool, metrics_auth::ReviewError>> {
        Box::pin(async { Ok(true) })
    }
}

/// GET over TLS, trusting exactly `cert` for the name `localhost`:
/// (status code, body), or the error of the connection.
async fn https_get(
    addr: SocketAddr,
    cert: &rustls_pki_types::CertificateDer<'static>,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    // rustls reports a peer that closes without close_notify as an
    // error after the data; the response is complete by then.
    let _ = tls.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no HTTP response: {text:?}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

#[tokio::test]
async fn a_secure_metrics_port_speaks_tls_and_answers_only_authorized_tokens() {
    let registry = new_registry();
    registry
        .lock()
        .unwrap()
        .register("demo", "a demo counter", Counter::<u64>::default());
    let tls = MetricsTls::self_signed().unwrap();
    let cert = tls.certificate().clone();
    let auth = MetricsAuth::with_reviews(OnlyReader);
    let routes = Router::new().route(
        "/metrics",
        get(move || {
            let registry = registry.clone();
            async move { encode(&registry) }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_at = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(tls.serve(
        listener,
        auth.protect(routes),
        Box::pin(stop.clone().cancelled_owned()),
    ));

    let (status, body) = https_get(metrics_at, &cert, "/metrics", Some("reader"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("demo_total 0"), "{body}");
    let (status, body) = https_get(metrics_at, &cert, "/metrics", None)
        .await
        .unwrap();
    assert_eq!((status, body.as_str()), (401, "Unauthorized\n"));
    let (status, _) = https_get(metrics_at, &cert, "/metrics", Some("intruder"))
        .await
        .unwrap();
    assert_eq!(status, 401);
    // Plain HTTP gets no HTTP answer from a TLS port.
    let plain = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let mut tcp = tokio::net::TcpStream::connect(metrics_at).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        tcp.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = tcp.read_to_end(&mut out).await;
        out
    })
    .await
    .unwrap();
    assert!(
        !plain.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&plain)
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}
