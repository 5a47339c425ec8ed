use super::*;

#[test]
fn without_a_cert_dir_a_self_signed_certificate_is_made() {
    let tls = MetricsTls::new(None).unwrap();
    assert!(tls.source().contains("self-signed"), "{}", tls.source());
    assert_eq!(
        tls.server_config().alpn_protocols,
        vec![b"http/1.1".to_vec()]
    );
}

#[test]
fn a_cert_dir_is_read_and_its_missing_or_bad_files_are_named() {
    let dir = std::env::temp_dir().join(format!("metrics-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let err = MetricsTls::from_dir(&dir).unwrap_err();
    assert!(err.to_string().contains("tls.crt"), "{err}");

    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.join(CERT_FILE), generated.cert.pem()).unwrap();
    let err = MetricsTls::from_dir(&dir).unwrap_err();
    assert!(err.to_string().contains("tls.key"), "{err}");

    std::fs::write(dir.join(KEY_FILE), generated.signing_key.serialize_pem()).unwrap();
    let tls = MetricsTls::from_dir(&dir).unwrap();
    assert!(tls.source().contains("tls.crt"), "{}", tls.source());

    std::fs::write(dir.join(CERT_FILE), "not a certificate\n").unwrap();
    let err = MetricsTls::from_dir(&dir).unwrap_err();
    assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

mod serve;
