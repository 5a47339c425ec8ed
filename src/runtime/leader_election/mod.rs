//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several
//! replicas of the operator only one runs the controllers at a time.
//!
//! Mirrors client-go `tools/leaderelection` (with the
//! `resourcelock/leaselock.go` lock) and controller-runtime
//! `pkg/leaderelection`, with the 15 s / 10 s / 2 s defaults of
//! controller-runtime `pkg/manager/internal.go`. Chapter:
//! `docs/10-manager.md`.
//!
//! - A candidate reads the Lease and takes it when it is free (no holder),
//!   already its own, or *expired*: not changed for `leaseDurationSeconds`
//!   as measured on this candidate's own clock since it last saw the record
//!   change (never by comparing `renewTime` with the local wall clock, which
//!   would trust the other node's clock).
//! - Every write is a `replace` carrying the `resourceVersion` that was read,
//!   so two candidates racing for a free Lease cannot both win: the API server
//!   refuses the second write with 409 Conflict.
//! - The leader renews every retry period; if it has not renewed for the renew
//!   deadline it gives up leadership, before its Lease can expire for others
//!   (lease duration > renew deadline), so two leaders never overlap.
//! - On a clean shutdown (client-go's `ReleaseOnCancel`) the leader clears the
//!   holder and sets a 1 s duration. A standby *watches* the Lease while it
//!   waits and tries at once when it sees it released or deleted, so a
//!   graceful handover takes a round trip, not a retry period (client-go
//!   only polls: up to 2.2 retry periods, 4.4 s at the defaults).
//!
//! ```text
//!  config ──► elector ──(get / create / update / watch)──► lock (trait)
//!   (timings,   │  acquire ─► hold (renew) ─► release           │
//!    identity)  │  decisions: record (pure, paused-time tests)  └─ lease_lock: the Lease
//!               ▼
//!           callbacks: started leading · stopped leading · new leader
//!           (the manager starts leader-only work; MasterStatus sets the gauge)
//! ```
//!
//! | module | mirrors |
//! |---|---|
//! | [`config`] | `LeaderElectionConfig` and its validation |
//! | [`record`] | the decisions in `tryAcquireOrRenew` and `release`, as pure functions |
//! | [`lock`] | `resourcelock.Interface` |
//! | [`lease_lock`] | `resourcelock.LeaseLock` |
//! | [`elector`] | `LeaderElector` (`Run`, `acquire`, `renew`, `release`) |
//! | [`callbacks`] | `LeaderCallbacks` |
//! | [`error`] | the errors of all of these |
//!
//! Nothing here starts or stops work: the callbacks and
//! [`elector::LeaderElector::run`]'s outcome tell the caller, and the
//! manager decides what leadership means.
pub mod callbacks;
pub mod config;
pub mod elector;
pub mod error;
pub mod lease_lock;
pub mod lock;
pub mod record;
