//! A model checker over the planner (issue #38): the real [`plan`] driven by
//! random sequences of world events, its plans applied to a small model of
//! the API server, and the lifecycle's invariants checked after every step.
//!
//! The planner is pure (`plan(observed) -> Plan`), so the whole lifecycle
//! can be explored without a cluster: Pods start, run, exit with any code
//! and are deleted by others; the operator's writes are refused, conflict,
//! or stop at a crash (a SIGKILL at any write position of a pass); the
//! operator restarts (its cache relisted); its cache lags the server
//! (events arrive late or coalesced: a stale view, as Sieve perturbs it);
//! Kueue admits, evicts, and loses a flavor; the user suspends, resumes,
//! scales and edits templates; gangs get a PodGroup; another TFJob
//! controller (training-operator) writes the job's status, and time passes.
//!
//! - [`cluster`]: the API server's side (the job, its Pods, Services,
//!   Workload and PodGroup) and what others do to it;
//! - [`kueue`]: what Kueue does to the Workload;
//! - [`rival`]: another controller's status writes, and the rule that a
//!   pass writes nothing to a job while one writes it;
//! - [`operator`]: one reconcile pass: [`plan`], then its writes in the
//!   reconcile's order (bookkeeping, PodGroup, Workload, the rest, status);
//! - [`invariants`]: what must hold after every step.
//!
//! A failing sequence shrinks (proptest) to a short one, printed as the
//! events that led there. `make test` runs a bounded, seeded number of cases
//! (`TFJOB_MODEL_CASES`, default 300, seed `TFJOB_MODEL_SEED`, default 38);
//! `make test-faults` a deeper run. What the model covers and leaves out:
//! docs/reliability.md, "The lifecycle model".
//!
//! [`plan`]: crate::tfjob::plan::plan
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

mod cluster;
mod invariants;
mod kueue;
mod operator;
mod rival;

use cluster::{Scenario, World};

/// One thing that happens in the world.
#[derive(Clone, Debug)]
pub(super) enum Event {
    /// The operator reconciles the job. `crash_at`: the process dies before
    /// its write at this position (0: bookkeeping, then the actions in the
    /// order they are sent, then the status); `refuse_status`: a policy
    /// refuses the status write.
    Pass {
        crash_at: Option<usize>,
        refuse_status: bool,
    },
    /// The operator's cache catches up with the server.
    Sync,
    /// The operator restarts: memory lost, caches relisted.
    OperatorRestart,
    /// A Pod (by its place among the job's Pods) starts running.
    PodRuns(usize),
    /// A Pod's main container exits with this code.
    PodExits(usize, i32),
    /// Someone else deletes a Pod (a user, an eviction, a lost node).
    PodDeleted(usize),
    KueueAdmits,
    /// Kueue evicts the admitted Workload (preemption).
    KueueEvicts,
    /// The admission's ResourceFlavor leaves the cache, or comes back.
    FlavorGone,
    FlavorBack,
    UserSuspends,
    UserResumes,
    /// The user sets the Workers' replicas.
    UserScales(i32),
    /// The user edits the Worker template.
    UserEditsTemplate,
    /// Another TFJob controller (training-operator) writes the job's status.
    RivalWritesStatus,
    /// Half a minute passes (the hold on a job another controller wrote
    /// ends a minute after its last write).
    TimePasses,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        8 => (prop::option::weighted(0.2, 0usize..6), prop::bool::weighted(0.15))
            .prop_map(|(crash_at, refuse_status)| Event::Pass { crash_at, refuse_status }),
        3 => Just(Event::Sync),
        1 => Just(Event::OperatorRestart),
        4 => (0usize..5).prop_map(Event::PodRuns),
        3 => (0usize..5, prop_oneof![Just(0), Just(1), Just(137)])
            .prop_map(|(pod, code)| Event::PodExits(pod, code)),
        1 => (0usize..5).prop_map(Event::PodDeleted),
        3 => Just(Event::KueueAdmits),
        1 => Just(Event::KueueEvicts),
        1 => Just(Event::FlavorGone),
        1 => Just(Event::FlavorBack),
        1 => Just(Event::UserSuspends),
        1 => Just(Event::UserResumes),
        1 => (1i32..5).prop_map(Event::UserScales),
        1 => Just(Event::UserEditsTemplate),
        1 => Just(Event::RivalWritesStatus),
        1 => Just(Event::TimePasses),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        any::<bool>(),
        1i32..4,
        0usize..3,
        0usize..3,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(chief, workers, clean, restart, kueue, gang)| Scenario {
            chief,
            workers,
            clean,
            restart,
            kueue,
            gang,
        })
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `cases` random histories of up to 60 events from a seeded RNG;
/// panics with the shrunk history of the first one breaking an invariant.
pub(super) fn check(cases: u32, seed: u64) {
    let config = Config {
        cases,
        max_shrink_iters: 20_000,
        failure_persistence: None,
        ..Config::default()
    };
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let strategy = (scenario(), prop::collection::vec(event(), 1..60));
    let result = runner.run(&strategy, |(scenario, events)| {
        let mut world = World::new(&scenario);
        for (step, e) in events.iter().enumerate() {
            world.step(e);
            if let Err(broken) = invariants::check(&world) {
                return Err(TestCaseError::fail(format!(
                    "after step {step} ({e:?}): {broken}"
                )));
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("the lifecycle model found a history that breaks an invariant:\n{e}");
    }
}

#[test]
fn no_history_of_world_events_breaks_a_lifecycle_invariant() {
    let cases = u32::try_from(env_or("TFJOB_MODEL_CASES", 300)).unwrap_or(u32::MAX);
    check(cases, env_or("TFJOB_MODEL_SEED", 38));
}
