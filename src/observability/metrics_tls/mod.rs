//! The certificate `/metrics` is served with over HTTPS (`--metrics-secure`).
//!
//! controller-runtime's counterpart is the metrics server's `SecureServing`
//! (`pkg/metrics/server/server.go`): `tls.crt` and `tls.key` from `CertDir`
//! when set, otherwise a self-signed certificate generated in memory at
//! startup (client-go's `GenerateSelfSignedCertKeyWithFixtures("localhost",
//! 127.0.0.1)`), which scrapers accept with `insecure_skip_verify`: the
//! bearer token, checked by [`crate::observability::metrics_auth`], is what
//! protects the endpoint; TLS keeps the token and the metrics off the wire.
//!
//! Files in the directory are followed as controller-runtime's certwatcher
//! follows them ([`cert_watcher`]): a renewed certificate is served within
//! 10 s, without a restart.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::ResolvesServerCert;
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

pub mod cert_watcher;

use cert_watcher::{CHECK_INTERVAL, CertWatcher};

use super::tls_listener::TlsListener;

/// The certificate file in `--metrics-cert-dir` (controller-runtime's `CertName`).
pub const CERT_FILE: &str = "tls.crt";
/// The key file in `--metrics-cert-dir` (controller-runtime's `KeyName`).
pub const KEY_FILE: &str = "tls.key";

/// Why the serving certificate could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("failed to generate a self-signed certificate")]
    Generate(#[source] rcgen::Error),
    #[error("the certificate and key do not make a TLS configuration")]
    Config(#[source] rustls::Error),
}

/// How `/metrics` is served over TLS. Cheap to clone.
#[derive(Clone, Debug)]
pub struct MetricsTls {
    config: Arc<ServerConfig>,
    /// The leaf certificate served (a client that wants to verify the
    /// self-signed one can trust exactly it).
    leaf: CertificateDer<'static>,
    /// Where the certificate came from, for the startup log.
    source: String,
}

impl MetricsTls {
    /// `tls.crt` and `tls.key` from `dir` if given, else a self-signed
    /// certificate (as controller-runtime without `CertDir`).
    pub fn new(cert_dir: Option<&Path>) -> Result<Self, TlsError> {
        match cert_dir {
            Some(dir) => Self::from_dir(dir),
            None => Self::self_signed(),
        }
    }

    /// `tls.crt` (a chain, leaf first) and `tls.key` (PKCS#8, PKCS#1 or
    /// SEC1) from `dir`, read again when they change.
    pub fn from_dir(dir: &Path) -> Result<Self, TlsError> {
        let provider = provider();
        let watcher = CertWatcher::new(dir, provider.clone(), CHECK_INTERVAL)?;
        let leaf = watcher.current().cert[0].clone();
        let source = format!("{} (followed)", dir.join(CERT_FILE).display());
        Self::with(provider, Arc::new(watcher), leaf, source)
    }

    /// A certificate for `localhost` and 127.0.0.1, valid from yesterday for
    /// a year, signed by its own fresh ECDSA P-256 key. The key never leaves
    /// the process.
    pub fn self_signed() -> Result<Self, TlsError> {
        let key = rcgen::KeyPair::generate().map_err(TlsError::Generate)?;
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .map_err(TlsError::Generate)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tfjob-operator metrics");
        let today = jiff::Zoned::now().date();
        let ymd = |d: jiff::civil::Date| {
            rcgen::date_time_ymd(d.year().into(), d.month() as u8, d.day() as u8)
        };
        params.not_before = ymd(today.yesterday().unwrap_or(today));
        params.not_after = ymd(today.saturating_add(jiff::Span::new().years(1)));
        let cert = params.self_signed(&key).map_err(TlsError::Generate)?;
        let leaf = cert.der().clone();
        let provider = provider();
        let pair = CertifiedKey::from_der(vec![leaf.clone()], PrivateKeyDer::from(key), &provider)
            .map_err(TlsError::Config)?;
        let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(pair));
        let source = "a self-signed certificate (no --metrics-cert-dir)".to_owned();
        Self::with(provider, resolver, leaf, source)
    }

    fn with(
        provider: Arc<CryptoProvider>,
        resolver: Arc<dyn ResolvesServerCert>,
        leaf: CertificateDer<'static>,
        source: String,
    ) -> Result<Self, TlsError> {
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        // The metrics server speaks HTTP/1.1 only (axum's `http1`).
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            config: Arc::new(config),
            leaf,
            source,
        })
    }

    /// The rustls configuration to accept connections with.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }

    /// The certificate served at startup (the first of the chain).
    pub fn certificate(&self) -> &CertificateDer<'static> {
        &self.leaf
    }

    /// Where the certificate came from (a file, or self-signed).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Serves `router` on `listener` over TLS until `stop` resolves, then
    /// lets in-flight requests finish (what the manager's server is handed
    /// as a secure `/metrics`'s listener).
    pub fn serve(
        &self,
        listener: tokio::net::TcpListener,
        router: axum::Router,
        stop: futures::future::BoxFuture<'static, ()>,
    ) -> futures::future::BoxFuture<'static, std::io::Result<()>> {
        let config = self.server_config();
        Box::pin(async move {
            let listener = TlsListener::new(listener, config);
            axum::serve(listener, router)
                .with_graceful_shutdown(stop)
                .await
        })
    }
}

/// rustls with ring, as kube's client is built.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[cfg(test)]
mod tests;
