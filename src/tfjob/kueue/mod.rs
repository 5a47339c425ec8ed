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
//! - this file: `--kueue`, and what it becomes on the cluster at hand.
//!
//! The writes are sent by `crate::tfjob::reconcile` (`workload.rs`).
pub mod api;
pub mod gate;
mod sha1;
pub mod status;
pub mod workload;

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

/// What the operator does about Kueue, decided at startup.
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

/// Asks the API server whether it serves Kueue's Workloads and decides with
/// `mode`. `builtin` and `off` ask nothing.
pub async fn detect(client: &kube::Client, mode: KueueMode) -> Result<Detected, String> {
    if matches!(mode, KueueMode::Builtin | KueueMode::Off) {
        let setting = Kueue::Off;
        return Ok(Detected {
            setting,
            detail: describe(mode, "not asked", setting),
        });
    }
    let served =
        crate::runtime::client::discovery::versions_serving(client, api::GROUP, api::WORKLOADS)
            .await;
    let (ok, found) = match &served {
        Ok(v) if v.iter().any(|v| v == api::VERSION) => (
            true,
            format!("{}/{} Workloads served", api::GROUP, api::VERSION),
        ),
        Ok(v) if v.is_empty() => (false, "no kueue.x-k8s.io Workloads served".to_owned()),
        Ok(v) => (
            false,
            format!(
                "kueue.x-k8s.io Workloads served only in {} (this operator speaks {})",
                v.join(", "),
                api::VERSION
            ),
        ),
        Err(e) => (
            false,
            format!("could not ask for kueue.x-k8s.io Workloads: {e}"),
        ),
    };
    let setting = Kueue::decide(mode, ok).map_err(|e| format!("{e} ({found})"))?;
    Ok(Detected {
        setting,
        detail: describe(mode, &found, setting),
    })
}

#[cfg(test)]
mod tests;
