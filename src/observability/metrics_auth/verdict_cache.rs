//! How long a bearer token's verdict is remembered, so that a Prometheus
//! scraping every few seconds does not cost the API server a TokenReview and
//! a SubjectAccessReview per scrape.
//!
//! controller-runtime gets this from k8s.io/apiserver: the delegating
//! authenticator caches TokenReviews for 1 min (`CacheTTL`), the delegating
//! authorizer caches SubjectAccessReviews for 5 min when allowed and 30 s
//! when denied (`AllowCacheTTL`, `DenyCacheTTL`). We cache the outcome of
//! both reviews in one entry per token, for:
//!
//! - 60 s when allowed: a revoked binding (or a deleted ServiceAccount) stops
//!   reading metrics within a minute, not five; a scraper still costs two API
//!   calls a minute at most, whatever its interval;
//! - 30 s when refused (bad token or denied): a binding just granted works
//!   within 30 s, as controller-runtime's deny TTL, and a scraper with a bad
//!   token costs one or two calls per 30 s instead of per scrape.
//!
//! Keys are the SHA-256 of the token (as the apiserver's token cache keys
//! its entries by a hash): the cache never holds a token. At most
//! [`MAX_ENTRIES`] entries: when full, expired ones are dropped, and if none
//! has expired the new verdict is simply not remembered, so a flood of
//! random tokens costs reviews but never memory. Errors reaching the API
//! server are never cached.
use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// How long an allowed verdict is remembered.
pub const ALLOW_TTL: Duration = Duration::from_secs(60);
/// How long a refusal (bad token or denied) is remembered.
pub const REFUSE_TTL: Duration = Duration::from_secs(30);
/// The most tokens remembered at once.
pub const MAX_ENTRIES: usize = 1024;

/// What the reviews decided for one token and request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Authenticated, and the SubjectAccessReview allowed the request.
    Allowed,
    /// The TokenReview did not authenticate the token (401).
    Unauthenticated,
    /// Authenticated as `user`, but the SubjectAccessReview denied (403).
    Denied { user: String },
}

impl Verdict {
    fn ttl(&self) -> Duration {
        match self {
            Self::Allowed => ALLOW_TTL,
            Self::Unauthenticated | Self::Denied { .. } => REFUSE_TTL,
        }
    }
}

/// A cache key: the token's SHA-256 with the request's verb and path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    token_sha256: [u8; 32],
    verb: String,
    path: String,
}

impl Key {
    pub fn new(token: &str, verb: &str, path: &str) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut token_sha256 = [0u8; 32];
        token_sha256.copy_from_slice(digest.as_ref());
        Self {
            token_sha256,
            verb: verb.to_owned(),
            path: path.to_owned(),
        }
    }
}

/// Verdicts by token, each until its TTL ends.
#[derive(Debug, Default)]
pub struct VerdictCache {
    entries: HashMap<Key, (Verdict, Instant)>,
}

impl VerdictCache {
    /// The remembered verdict, if it has not expired.
    pub fn get(&self, key: &Key) -> Option<Verdict> {
        let (verdict, until) = self.entries.get(key)?;
        (Instant::now() < *until).then(|| verdict.clone())
    }

    /// Remembers `verdict` for its TTL (unless the cache is full of live entries).
    pub fn insert(&mut self, key: Key, verdict: Verdict) {
        let now = Instant::now();
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (_, until)| now < *until);
            if self.entries.len() >= MAX_ENTRIES {
                return;
            }
        }
        let until = now + verdict.ttl();
        self.entries.insert(key, (verdict, until));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(token: &str) -> Key {
        Key::new(token, "get", "/metrics")
    }

    #[tokio::test(start_paused = true)]
    async fn an_allowed_verdict_lives_a_minute_and_a_refusal_half_a_minute() {
        let mut cache = VerdictCache::default();
        let denied = Verdict::Denied {
            user: "system:serviceaccount:ns:nobody".into(),
        };
        cache.insert(key("good"), Verdict::Allowed);
        cache.insert(key("denied"), denied.clone());
        cache.insert(key("bad"), Verdict::Unauthenticated);
        tokio::time::advance(REFUSE_TTL - Duration::from_millis(1)).await;
        assert_eq!(cache.get(&key("denied")), Some(denied));
        assert_eq!(cache.get(&key("bad")), Some(Verdict::Unauthenticated));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(cache.get(&key("denied")), None);
        assert_eq!(cache.get(&key("bad")), None);
        assert_eq!(cache.get(&key("good")), Some(Verdict::Allowed));
        tokio::time::advance(ALLOW_TTL - REFUSE_TTL).await;
        assert_eq!(cache.get(&key("good")), None);
    }

    #[test]
    fn the_key_holds_a_hash_of_the_token_not_the_token() {
        let k = key("secret-token");
        assert!(!format!("{k:?}").contains("secret-token"));
        assert_eq!(k, key("secret-token"));
        assert_ne!(k, key("secret-token2"));
        assert_ne!(k, Key::new("secret-token", "get", "/other"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_cache_drops_expired_entries_and_otherwise_remembers_nothing_new() {
        let mut cache = VerdictCache::default();
        for i in 0..MAX_ENTRIES {
            cache.insert(key(&format!("t{i}")), Verdict::Unauthenticated);
        }
        cache.insert(key("late"), Verdict::Allowed);
        assert_eq!(cache.len(), MAX_ENTRIES);
        assert_eq!(cache.get(&key("late")), None, "no room: not remembered");
        // A known key is still updated in place.
        cache.insert(key("t0"), Verdict::Allowed);
        assert_eq!(cache.get(&key("t0")), Some(Verdict::Allowed));

        tokio::time::advance(REFUSE_TTL).await;
        cache.insert(key("later"), Verdict::Allowed);
        assert_eq!(cache.get(&key("later")), Some(Verdict::Allowed));
        assert_eq!(cache.len(), 2, "the expired refusals were dropped");
    }
}
