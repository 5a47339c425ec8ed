//! Kueue without its built-in TFJob integration: the Workload this
//! operator creates and owns for a job labelled `kueue.x-k8s.io/queue-name`
//! (issue #31; `docs/kueue.md` is the user's side).
//!
//! Kueue decides *when* and *where* a job runs through a Workload: one
//! podSet per replica type, with counts and templates. Its built-in
//! `kubeflow.org/tfjob` integration (deprecated, off by default after
//! v0.17) builds that Workload itself and drives the job through
//! `spec.runPolicy.suspend`. With `integrations.externalFrameworks:
//! ["TFJob.v1.kubeflow.org"]` instead, Kueue only recognises the kind, and
//! the job's controller does the rest through the Workload API — here:
//!
//! - [`api`]: the kinds (`kueue.x-k8s.io/v1beta2` Workload, ResourceFlavor,
//!   WorkloadPriorityClass), as much as is read and written;
//! - [`workload`]: the Workload a job gets (name, podSets, priority);
//! - [`gate`]: hold, run (with the admission's placement) or stop a job, and
//!   the Workload writes that follow;
//! - [`status`]: the Workload status applies, as Kueue's own reconciler
//!   makes them;
//! - this file: `--kueue`, and what the API server's answer makes of it
//!   (asked until it answers; under `auto` asked again until Kueue is
//!   found: `crate::tfjob::integrations::optional_apis`).
//!
//! The writes are sent by `crate::tfjob::controller::reconciler` (`workload.rs`).
pub mod api;
pub mod gate;
pub mod multikueue;
pub mod observe;
pub mod plan;
mod sha1;
pub mod status;
pub mod workload;
pub mod write;

/// `--kueue`: who makes a queued job's Workload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum KueueMode {
    /// `workload` when the server serves Kueue's Workloads, else `off`.
    /// Safe with Kueue's built-in TFJob integration on: a job the
    /// built-in has a Workload for is left to it.
    #[default]
    Auto,
    /// The operator creates and owns the Workloads (refuses to start when
    /// the server does not serve them).
    Workload,
    /// Kueue's built-in integration does it all; the operator only honours
    /// `spec.runPolicy.suspend`, as Kubeflow's does.
    Builtin,
    /// Kueue is not used: the queue label is ignored.
    Off,
}

impl KueueMode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Workload => "workload",
            Self::Builtin => "builtin",
            Self::Off => "off",
        }
    }
}

/// What the operator does about Kueue: decided from the server's first
/// answer, and switched on if `--kueue=auto` finds Kueue later
/// (`crate::tfjob::integrations::optional_apis`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kueue {
    /// Nothing (`off`, `builtin`, or `auto` without Kueue's API).
    #[default]
    Off,
    /// Jobs with the queue label wait for their Workload's admission.
    Workload,
}

impl Kueue {
    /// The setting for `mode` when Workloads are (`served`) or are not served.
    pub fn decide(mode: KueueMode, served: bool) -> Result<Self, String> {
        Ok(match (mode, served) {
            (KueueMode::Workload | KueueMode::Auto, true) => Self::Workload,
            (KueueMode::Workload, false) => {
                return Err(format!(
                    "--kueue=workload, but the API server does not serve {}/{} workloads (Kueue \
                     v0.15+ installed?): install Kueue, or use --kueue=auto",
                    api::GROUP,
                    api::VERSION
                ));
            }
            (KueueMode::Auto | KueueMode::Builtin | KueueMode::Off, _) => Self::Off,
        })
    }

    pub fn enabled(self) -> bool {
        self == Self::Workload
    }
}

/// What startup found: the setting, and the `/readyz` detail line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detected {
    pub setting: Kueue,
    pub detail: String,
}

/// The `/readyz` detail line for `mode`, what was found and what follows.
pub fn describe(mode: KueueMode, found: &str, setting: Kueue) -> String {
    let what = match (mode, setting) {
        (_, Kueue::Workload) => {
            "jobs labelled kueue.x-k8s.io/queue-name get a Workload from the operator and wait \
             for its admission (unless Kueue's built-in TFJob integration made one first)"
        }
        (KueueMode::Builtin, Kueue::Off) => {
            "Kueue's built-in TFJob integration queues jobs (through spec.runPolicy.suspend)"
        }
        (KueueMode::Off, Kueue::Off) => "the queue label is ignored",
        (_, Kueue::Off) => "the queue label is ignored (no Kueue)",
    };
    format!("kueue: {}, {found}: {what}", mode.name())
}

/// Asks the API server whether it serves Kueue's Workloads, until it
/// answers (an error is no answer: `--kueue=auto` never takes one for "no
/// Kueue"; each is logged and asked again with backoff), and decides with
/// `mode`. `builtin` and `off` ask nothing. The `Err` is `--kueue=workload`
/// on a server that answered without them.
pub async fn detect(client: &kube::Client, mode: KueueMode) -> Result<Detected, String> {
    detect_reporting(client, mode, |waiting| tracing::warn!("{waiting}")).await
}

/// [`detect`], telling `waiting` (the `/readyz` line) each time the server
/// gave no answer.
pub async fn detect_reporting(
    client: &kube::Client,
    mode: KueueMode,
    mut waiting: impl FnMut(&str),
) -> Result<Detected, String> {
    if !asks(mode) {
        let setting = Kueue::Off;
        return Ok(Detected {
            setting,
            detail: describe(mode, "not asked", setting),
        });
    }
    let versions = crate::runtime::client::discovery::versions_serving_answered(
        client,
        api::GROUP,
        api::WORKLOADS,
        |u| waiting(&unanswered(mode, &u)),
    )
    .await;
    decide_from(mode, &versions)
}

/// Whether `mode` asks the server at all (and, for `auto`, again later).
pub fn asks(mode: KueueMode) -> bool {
    matches!(mode, KueueMode::Auto | KueueMode::Workload)
}

/// Whether `versions` (an answer) include the one this operator speaks.
pub fn served(versions: &[String]) -> bool {
    versions.iter().any(|v| v == api::VERSION)
}

/// The `/readyz` line while the server gives no answer: the API, the error,
/// and that no job is reconciled meanwhile.
pub fn unanswered(
    mode: KueueMode,
    u: &crate::runtime::client::discovery::Unanswered<'_>,
) -> String {
    format!(
        "kueue: {}, could not ask the API server for {}/{} Workloads (attempt {}: {}); asking \
         again in {} s; no TFJob is reconciled until it answers",
        mode.name(),
        api::GROUP,
        api::VERSION,
        u.attempt,
        u.error,
        u.retry_in.as_secs()
    )
}

/// What a discovery answer (`versions` serving Workloads) decides with `mode`.
pub fn decide_from(mode: KueueMode, versions: &[String]) -> Result<Detected, String> {
    let found = if served(versions) {
        format!("{}/{} Workloads served", api::GROUP, api::VERSION)
    } else if versions.is_empty() {
        "no kueue.x-k8s.io Workloads served".to_owned()
    } else {
        format!(
            "kueue.x-k8s.io Workloads served only in {} (this operator speaks {})",
            versions.join(", "),
            api::VERSION
        )
    };
    let setting = Kueue::decide(mode, served(versions)).map_err(|e| format!("{e} ({found})"))?;
    Ok(Detected {
        setting,
        detail: describe(mode, &found, setting),
    })
}

#[cfg(test)]
mod tests;
