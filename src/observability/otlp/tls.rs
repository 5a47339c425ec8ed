//! The TLS an `https://` OTLP endpoint is reached with.
//!
//! The OpenTelemetry Go exporters' counterpart is `otlptracehttp`'s TLS
//! configuration from `OTEL_EXPORTER_OTLP_CERTIFICATE`: the file's
//! certificates become a pool of their own, trusted *instead of* the
//! system's. So here: with `--otlp-certificate` (that variable), exactly the
//! CA certificates in that PEM file; without it, the system's roots, read
//! as hyper-rustls reads them (`SSL_CERT_FILE`, `SSL_CERT_DIR`, or the OS
//! store). The operator's container image carries no CA bundle, so there a
//! missing certificate is refused at startup rather than failing every
//! export later.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper_rustls::{ConfigBuilderExt, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::ClientConfig;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// How the flag and the variable are named in every error, so that the fix
/// is findable from the message alone.
const KNOB: &str = "--otlp-certificate / OTEL_EXPORTER_OTLP_CERTIFICATE";

/// Why TLS for the OTLP endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(
        "failed to read the OTLP CA certificate file {path} ({KNOB}): give a readable PEM file \
         with the CA certificate that signed the collector's"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    #[error(
        "the OTLP CA certificate file {path} ({KNOB}) holds no PEM certificate \
         (-----BEGIN CERTIFICATE-----): give the CA certificate that signed the collector's"
    )]
    NoCertificate { path: PathBuf },
    #[error(
        "the OTLP CA certificate file {path} ({KNOB}) holds a certificate that cannot be \
         trusted as a CA: give the PEM of the CA certificate that signed the collector's"
    )]
    BadCertificate {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error(
        "no system CA certificates to verify the https OTLP endpoint with (the operator's image \
         carries none): give the collector's CA certificate with {KNOB}"
    )]
    NoSystemRoots(#[source] std::io::Error),
    #[error("{KNOB} is set but the OTLP endpoint {0} is plain http: use https://, or unset it")]
    CertificateWithoutHttps(String),
    #[error("no TLS protocol version the crypto provider supports")]
    Versions(#[source] rustls::Error),
}

/// The rustls client configuration for an https endpoint: the CA
/// certificates in `certificate` when given, else the system's roots.
pub fn client_config(certificate: Option<&Path>) -> Result<ClientConfig, TlsError> {
    // The same crypto provider as the rest of the binary (ring), named
    // explicitly: no process-wide default has to be installed first.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Versions)?;
    let builder = match certificate {
        Some(path) => builder.with_root_certificates(roots_from(path)?),
        None => builder
            .with_native_roots()
            .map_err(TlsError::NoSystemRoots)?,
    };
    Ok(builder.with_no_client_auth())
}

/// The CA certificates in the PEM file at `path`, as trust anchors.
fn roots_from(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let read = |source| TlsError::Read {
        path: path.to_owned(),
        source,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(read)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    let mut roots = rustls::RootCertStore::empty();
    for certificate in certificates {
        roots
            .add(certificate)
            .map_err(|source| TlsError::BadCertificate {
                path: path.to_owned(),
                source,
            })?;
    }
    Ok(roots)
}

/// A connector speaking TLS (HTTP/1.1, as the plain connector) with `config`,
/// refusing plain http.
pub fn connector(config: ClientConfig) -> HttpsConnector<HttpConnector> {
    HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn message(error: &TlsError) -> String {
        error.to_string()
    }

    #[test]
    fn a_pem_ca_file_is_trusted_and_every_bad_one_is_refused_naming_the_flag_and_variable() {
        let dir = std::env::temp_dir().join(format!("otlp-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = rcgen::generate_simple_self_signed(vec!["collector".to_owned()]).unwrap();
        // A bundle with a key beside the certificate still reads: keys are skipped.
        let mut bundle = ca.cert.pem().into_bytes();
        bundle.extend(ca.signing_key.serialize_pem().into_bytes());
        let good = file(&dir, "ca.crt", &bundle);
        assert!(client_config(Some(&good)).is_ok());

        let missing = dir.join("missing.crt");
        let empty = file(&dir, "empty.crt", b"");
        let key_only = file(&dir, "key.pem", ca.signing_key.serialize_pem().as_bytes());
        let bad_base64 = file(
            &dir,
            "b64.crt",
            b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        );
        let not_a_certificate = file(
            &dir,
            "der.crt",
            b"-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
        );
        for (path, kind) in [
            (&missing, "failed to read"),
            (&empty, "holds no PEM certificate"),
            (&key_only, "holds no PEM certificate"),
            (&bad_base64, "failed to read"),
            (&not_a_certificate, "cannot be trusted"),
        ] {
            let error = client_config(Some(path)).expect_err(&path.display().to_string());
            let text = message(&error);
            assert!(text.contains(kind), "{text}");
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(
                text.contains("--otlp-certificate")
                    && text.contains("OTEL_EXPORTER_OTLP_CERTIFICATE"),
                "{text}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
