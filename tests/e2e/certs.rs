//! Certificates minted by a test: a CA of its own and a serving
//! certificate it signed, written as PEM files, for servers the suite runs
//! over TLS (an OTLP collector) and clients told to trust exactly that CA.
//!
//! Mirrors: client-go's `cert.GenerateSelfSignedCertKey` fixtures, and the
//! OpenTelemetry Collector's `configtls` tests, which sign a server
//! certificate with a test CA the same way.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// The files [`mint`] wrote.
pub struct ServingCert {
    /// The CA's certificate: what a client trusts.
    pub ca: PathBuf,
    /// The serving certificate (signed by the CA) and its key.
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A fresh CA, and a certificate it signed for `names` (DNS names or IP
/// addresses), as `ca.crt`, `tls.crt` and `tls.key` in `dir`.
pub fn mint(dir: &Path, names: &[&str]) -> ServingCert {
    std::fs::create_dir_all(dir).expect("the certificates' dir");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tfjob-operator e2e test CA");
    let ca_key = KeyPair::generate().expect("a CA key");
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("a CA certificate");

    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let params = CertificateParams::new(names).expect("serving certificate parameters");
    let key = KeyPair::generate().expect("a serving key");
    let cert = params
        .signed_by(&key, &ca)
        .expect("a signed serving certificate");

    let files = ServingCert {
        ca: dir.join("ca.crt"),
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    std::fs::write(&files.ca, ca.pem()).expect("ca.crt");
    std::fs::write(&files.cert, cert.pem()).expect("tls.crt");
    std::fs::write(&files.key, key.serialize_pem()).expect("tls.key");
    files
}
