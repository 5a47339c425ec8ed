//! The timing rules of leader election as pure functions of the Lease
//! record and this candidate's clock, tested with paused time: when a
//! standby may take the Lease, when it tries next, when the leader must
//! give up, and what it writes to take, renew or release the Lease.
//!
//! Mirrors the decisions inside client-go `tools/leaderelection/
//! leaderelection.go` (`tryAcquireOrRenew`, `release`) over
//! `resourcelock.LeaderElectionRecord` (here the Lease's own `LeaseSpec`).
//! Nothing here does I/O; the [`super::elector`] calls these around the
//! [`super::lock`].
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::time::Instant;

/// A standby tries this long after the Lease it observed runs out (the
/// holder's clock may tick a little slower than ours).
const EXPIRY_MARGIN: Duration = Duration::from_millis(100);

/// The last Lease record this candidate saw, and when (on its own clock) it
/// first saw that exact record. Expiry is judged from `at`, not from the
/// record's timestamps.
#[derive(Clone, Debug)]
pub struct Observed {
    pub spec: LeaseSpec,
    pub at: Instant,
}

/// Remembers `fetched`; the observation time moves only when the record changed.
pub fn observe(prev: Option<&Observed>, fetched: LeaseSpec, now: Instant) -> Observed {
    match prev {
        Some(prev) if prev.spec == fetched => prev.clone(),
        _ => Observed {
            spec: fetched,
            at: now,
        },
    }
}

/// Who holds the Lease (`""`: nobody).
pub fn holder(spec: &LeaseSpec) -> &str {
    spec.holder_identity.as_deref().unwrap_or("")
}

fn record_duration(spec: &LeaseSpec) -> Duration {
    Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64)
}

/// May `me` write itself into the Lease? Yes when nobody holds it, when `me`
/// holds it, or when the holder has not changed the record for the duration
/// *it* advertised, counted from when we observed the record.
pub fn may_acquire(observed: &Observed, now: Instant, me: &str) -> bool {
    let holder = holder(&observed.spec);
    holder.is_empty()
        || holder == me
        || now.duration_since(observed.at) >= record_duration(&observed.spec)
}

/// How long a standby waits before its next acquire attempt: the jittered
/// retry period, unless the Lease it observed runs out sooner — then just
/// past that moment. client-go waits out the jitter (up to 2.2 retry
/// periods) even when the holder's Lease ran out meanwhile, which made
/// failover take up to ~4 s longer than `leaseDuration` after a leader froze.
pub fn next_attempt_in(
    observed: Option<&Observed>,
    me: &str,
    jittered: Duration,
    now: Instant,
) -> Duration {
    let Some(observed) = observed else {
        return jittered;
    };
    let holder = holder(&observed.spec);
    if holder.is_empty() || holder == me {
        return jittered;
    }
    let expires = observed.at + record_duration(&observed.spec);
    match expires.checked_duration_since(now) {
        Some(left) if left + EXPIRY_MARGIN < jittered => left + EXPIRY_MARGIN,
        _ => jittered,
    }
}

/// Has the leader gone `renew_deadline` without a successful renewal?
pub fn renew_deadline_passed(last_renew: Instant, now: Instant, renew_deadline: Duration) -> bool {
    now.duration_since(last_renew) >= renew_deadline
}

/// The record `me` writes to take or renew the Lease. A renewal keeps the
/// acquire time and transition count; a takeover bumps the transitions.
pub fn next_spec(
    current: Option<&LeaseSpec>,
    me: &str,
    lease_duration: Duration,
    now: Timestamp,
) -> LeaseSpec {
    let renewing = current.is_some_and(|c| holder(c) == me);
    let transitions = current.and_then(|c| c.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(me.to_owned()),
        lease_duration_seconds: Some(lease_duration.as_secs().min(i32::MAX as u64) as i32),
        acquire_time: if renewing {
            current.and_then(|c| c.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if renewing || current.is_none() {
            transitions
        } else {
            transitions + 1
        }),
        ..current.cloned().unwrap_or_default()
    }
}

/// The record a leader writes when it steps down cleanly: no holder and a
/// 1 s duration (client-go's `release`), so standbys may take it at once.
pub fn released_spec(current: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..current.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(who: &str, secs: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(who.to_owned()),
            lease_duration_seconds: Some(secs),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_tries_just_after_the_observed_lease_runs_out_not_after_the_jitter() {
        let t0 = Instant::now();
        let obs = observe(None, held_by("other", 15), t0);
        let jittered = Duration::from_millis(4400);
        // 14 s after observing a 15 s Lease: try in 1.1 s, not 4.4 s.
        let at_14 = t0 + Duration::from_secs(14);
        assert_eq!(
            next_attempt_in(Some(&obs), "me", jittered, at_14),
            Duration::from_millis(1100)
        );
        // Far from expiry, or our own Lease, or none: the jittered period.
        assert_eq!(next_attempt_in(Some(&obs), "me", jittered, t0), jittered);
        assert_eq!(
            next_attempt_in(Some(&obs), "other", jittered, at_14),
            jittered
        );
        assert_eq!(next_attempt_in(None, "me", jittered, at_14), jittered);
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_lease_may_be_taken_at_once() {
        let obs = observe(None, LeaseSpec::default(), Instant::now());
        assert!(may_acquire(&obs, Instant::now(), "me"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_held_by_another_may_be_taken_only_after_its_duration_unchanged() {
        let t0 = Instant::now();
        let obs = observe(None, held_by("other", 15), t0);
        tokio::time::advance(Duration::from_secs(14)).await;
        assert!(!may_acquire(&obs, Instant::now(), "me"));
        // Seeing the same record again does not restart the clock...
        let obs = observe(Some(&obs), held_by("other", 15), Instant::now());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(may_acquire(&obs, Instant::now(), "me"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewed_record_restarts_the_expiry_clock() {
        let obs = observe(None, held_by("other", 15), Instant::now());
        tokio::time::advance(Duration::from_secs(10)).await;
        let mut renewed = held_by("other", 15);
        renewed.renew_time = Some(MicroTime(Timestamp::now()));
        let obs = observe(Some(&obs), renewed, Instant::now());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            !may_acquire(&obs, Instant::now(), "me"),
            "only 10 s since the renewal"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn our_own_lease_may_always_be_renewed() {
        let obs = observe(None, held_by("me", 15), Instant::now());
        assert!(may_acquire(&obs, Instant::now(), "me"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_lease_may_be_taken_at_once() {
        let released = released_spec(&held_by("other", 15), Timestamp::now());
        let obs = observe(None, released, Instant::now());
        assert!(may_acquire(&obs, Instant::now(), "me"));
    }

    #[tokio::test(start_paused = true)]
    async fn renew_deadline_passes_exactly_at_the_deadline() {
        let last = Instant::now();
        let deadline = Duration::from_secs(10);
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert!(!renew_deadline_passed(last, Instant::now(), deadline));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(renew_deadline_passed(last, Instant::now(), deadline));
    }

    #[test]
    fn taking_over_bumps_transitions_and_acquire_time() {
        let now = Timestamp::from_second(1_000).unwrap();
        let mut current = held_by("other", 15);
        current.acquire_time = Some(MicroTime(Timestamp::from_second(1).unwrap()));
        let next = next_spec(Some(&current), "me", Duration::from_secs(15), now);
        assert_eq!(next.holder_identity.as_deref(), Some("me"));
        assert_eq!(next.lease_transitions, Some(4));
        assert_eq!(next.acquire_time, Some(MicroTime(now)));
        assert_eq!(next.renew_time, Some(MicroTime(now)));
        assert_eq!(next.lease_duration_seconds, Some(15));
    }

    #[test]
    fn renewing_keeps_acquire_time_and_transitions() {
        let acquired = MicroTime(Timestamp::from_second(1).unwrap());
        let mut current = held_by("me", 15);
        current.acquire_time = Some(acquired.clone());
        let now = Timestamp::from_second(1_000).unwrap();
        let next = next_spec(Some(&current), "me", Duration::from_secs(15), now);
        assert_eq!(next.lease_transitions, Some(3));
        assert_eq!(next.acquire_time, Some(acquired));
        assert_eq!(next.renew_time, Some(MicroTime(now)));
    }

    #[test]
    fn a_new_lease_starts_with_zero_transitions() {
        let next = next_spec(None, "me", Duration::from_secs(15), Timestamp::UNIX_EPOCH);
        assert_eq!(next.lease_transitions, Some(0));
    }

    #[test]
    fn releasing_clears_the_holder_and_shortens_the_lease() {
        let released = released_spec(&held_by("me", 15), Timestamp::UNIX_EPOCH);
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_duration_seconds, Some(1));
        assert_eq!(released.lease_transitions, Some(3));
    }
}
