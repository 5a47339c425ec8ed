//! Serves the newest `tls.crt`/`tls.key` of a directory, so a renewed
//! certificate (cert-manager's, mounted from a Secret) is picked up without
//! a restart.
//!
//! controller-runtime's counterpart is `pkg/certwatcher`: it watches the
//! files (fsnotify, plus a poll every 10 s) and swaps the pair its
//! `GetCertificate` hands out. Here the check happens on a handshake, at
//! most once per interval: two `stat`s, and a re-read only when a
//! modification time changed (a Secret volume swaps its files atomically, so
//! both change together). A pair that fails to load (half written, key and
//! certificate not matching) is logged and the previous one kept, as
//! certwatcher does.
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::{CERT_FILE, KEY_FILE, TlsError};

/// How often the files are checked for a change (certwatcher's poll interval).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// The pair in `dir`, its key checked against its certificate.
pub fn load_pair(dir: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
    let chain = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Read {
            path: cert_path.clone(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: cert_path });
    }
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|source| TlsError::Read {
        path: key_path,
        source,
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(TlsError::Config)
}

/// The modification times of the two files (`None` when one is missing).
fn stamps(dir: &Path) -> Option<(SystemTime, SystemTime)> {
    let modified = |name| {
        std::fs::metadata(dir.join(name))
            .and_then(|m| m.modified())
            .ok()
    };
    Some((modified(CERT_FILE)?, modified(KEY_FILE)?))
}

#[derive(Debug)]
struct Watched {
    pair: Arc<CertifiedKey>,
    stamps: Option<(SystemTime, SystemTime)>,
    checked: Instant,
}

/// A certificate resolver that follows the files in a directory.
#[derive(Debug)]
pub struct CertWatcher {
    dir: PathBuf,
    provider: Arc<CryptoProvider>,
    interval: Duration,
    watched: Mutex<Watched>,
}

impl CertWatcher {
    /// Loads the pair in `dir` now (an error fails the start) and checks
    /// for a newer one at most every `interval`.
    pub fn new(
        dir: &Path,
        provider: Arc<CryptoProvider>,
        interval: Duration,
    ) -> Result<Self, TlsError> {
        let stamps = stamps(dir);
        let pair = Arc::new(load_pair(dir, &provider)?);
        Ok(Self {
            dir: dir.to_owned(),
            provider,
            interval,
            watched: Mutex::new(Watched {
                pair,
                stamps,
                checked: Instant::now(),
            }),
        })
    }

    /// The pair to serve now, re-read first if the interval has passed and
    /// the files changed.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        if watched.checked.elapsed() >= self.interval {
            watched.checked = Instant::now();
            let now = stamps(&self.dir);
            if now.is_some() && now != watched.stamps {
                match load_pair(&self.dir, &self.provider) {
                    Ok(pair) => {
                        tracing::info!(dir = %self.dir.display(), "loaded a renewed metrics certificate");
                        watched.pair = Arc::new(pair);
                        watched.stamps = now;
                    }
                    Err(error) => {
                        tracing::warn!(dir = %self.dir.display(), error = %error, "keeping the previous metrics certificate: the new files do not load");
                    }
                }
            }
        }
        watched.pair.clone()
    }
}

impl ResolvesServerCert for CertWatcher {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a fresh pair for `name` into `dir`, modified `stamp_secs` after the epoch.
    fn write_pair(dir: &Path, name: &str, stamp_secs: u64) -> CertificateDer<'static> {
        let generated = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        let stamp = SystemTime::UNIX_EPOCH + Duration::from_secs(stamp_secs);
        for (file, text) in [
            (CERT_FILE, generated.cert.pem()),
            (KEY_FILE, generated.signing_key.serialize_pem()),
        ] {
            std::fs::write(dir.join(file), text).unwrap();
            let f = std::fs::File::options()
                .write(true)
                .open(dir.join(file))
                .unwrap();
            f.set_modified(stamp).unwrap();
        }
        generated.cert.der().clone()
    }

    #[test]
    fn a_renewed_pair_is_served_and_a_broken_one_is_not() {
        let dir = std::env::temp_dir().join(format!("cert-watcher-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let first = write_pair(&dir, "first.example", 1_000);
        let watcher = CertWatcher::new(&dir, provider.clone(), Duration::ZERO).unwrap();
        assert_eq!(watcher.current().cert[0], first);

        let renewed = write_pair(&dir, "renewed.example", 2_000);
        assert_eq!(
            watcher.current().cert[0],
            renewed,
            "the renewed pair is served"
        );

        // A certificate whose key is another's: refused, the renewed pair stays.
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.join(KEY_FILE), other.serialize_pem()).unwrap();
        let f = std::fs::File::options()
            .write(true)
            .open(dir.join(KEY_FILE))
            .unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(3_000))
            .unwrap();
        assert_eq!(watcher.current().cert[0], renewed);

        // Starting with such a pair fails instead.
        let restarted = CertWatcher::new(&dir, provider, Duration::ZERO);
        assert!(restarted.is_err(), "a mismatched pair fails the start");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn within_the_interval_the_files_are_not_read_again() {
        let dir = std::env::temp_dir().join(format!("cert-watcher-slow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let first = write_pair(&dir, "first.example", 1_000);
        let watcher = CertWatcher::new(&dir, provider, Duration::from_secs(3600)).unwrap();
        write_pair(&dir, "renewed.example", 2_000);
        assert_eq!(watcher.current().cert[0], first);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
