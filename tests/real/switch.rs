//! Moving from Kubeflow's training-operator with training running (issue
//! #40, point 5, on the real node): a MultiWorkerMirroredStrategy job is
//! started by the real training-operator (v1.9.2, as `e2e/peers.sh` builds
//! it, out of cluster for the test's namespace), and in the middle of its
//! training training-operator is stopped and ours started — the switch a
//! platform team makes. The TensorFlow processes must not notice: the same
//! three Pods (UIDs) from start to end, no container restarted, each
//! replica joined the cluster once and logged every epoch once, in step
//! with the others; ours then ends the job Succeeded, keeping the
//! conditions training-operator wrote.
//!
//! Under our CRD (the one the suite installs), not Kubeflow's: the KWOK
//! e2e (`tests/e2e/migration.rs`) covers Kubeflow's CRD and the counts;
//! this test is about real processes training through the switch.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::cluster;
use crate::training::{Setup, losses, names, set_env};
use crate::training_operator::TrainingOperator;

/// Enough epochs, slow enough, that the switch lands mid-training.
const EPOCHS: usize = 6;

fn uids(pods: &[Pod]) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = pods
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect();
    found.sort();
    found
}

fn restarts(pods: &[Pod]) -> i32 {
    pods.iter()
        .flat_map(|p| {
            p.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
        })
        .map(|c| c.restart_count)
        .sum()
}

#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn mwms_training_started_by_training_operator_runs_on_uninterrupted_when_ours_takes_over() {
    let mut s = Setup::without_operator("real-switch").await;
    let mut kubeflow = TrainingOperator::start(&s.client, &s.ns).await;
    s.say("training-operator runs the namespace");
    let name = format!("switch-{}", cluster::random_suffix());
    let jobs = s
        .apply("mwms.yaml", &name, |job| {
            set_env(job, "EPOCHS", &EPOCHS.to_string());
            set_env(job, "STEP_SLEEP_SECONDS", "0.5");
        })
        .await;
    let replicas = names(&name, &[("chief", 1), ("worker", 2)]);
    s.wait_logged(&replicas, "joined the cluster of 3 replicas")
        .await;
    s.wait_logged(&replicas[..1], &format!(": epoch 1/{EPOCHS} "))
        .await;
    let before = s.pods(&name).await;
    assert_eq!(
        before.len(),
        3,
        "training-operator made 3 Pods: {:?}",
        uids(&before)
    );
    let job_before = jobs
        .get(&name)
        .await
        .expect("the job under training-operator");
    let running_since = job_before
        .status
        .as_ref()
        .and_then(|st| st.conditions.iter().find(|c| c.type_ == "Running"))
        .map(|c| c.last_transition_time.clone())
        .expect("training-operator marked the job Running");

    kubeflow.stop();
    s.start_operator();
    let epochs_at_switch = losses(&s.logs(&replicas[0])).len();
    s.say(&format!(
        "switched: ours runs, the Chief has {epochs_at_switch} epoch(s) behind it"
    ));
    assert!(
        epochs_at_switch < EPOCHS,
        "the switch must land mid-training (the Chief had finished all {EPOCHS} epochs)"
    );

    let job = s.wait_condition(&jobs, &name, "Succeeded").await;
    let after = s.pods(&name).await;
    assert_eq!(
        uids(&after),
        uids(&before),
        "the same Pods from start to end: none deleted or created"
    );
    assert_eq!(restarts(&after), 0, "no container restarted: {after:?}");
    let status = job.status.as_ref().expect("a status");
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Created", "Running", "Succeeded"], "{status:?}");
    let running = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Running")
        .expect("Running");
    assert_eq!(
        running.last_transition_time, running_since,
        "the Running condition training-operator wrote goes on"
    );

    let mut all_losses = Vec::new();
    for pod in &replicas {
        let log = s.logs(pod);
        assert_eq!(
            log.matches("joined the cluster of 3 replicas").count(),
            1,
            "{pod} joined once: one run, not two:\n{log}"
        );
        let l = losses(&log);
        assert_eq!(l.len(), EPOCHS, "every epoch once in {pod}'s log:\n{log}");
        all_losses.push(l);
    }
    assert!(
        all_losses.windows(2).all(|w| w[0] == w[1]),
        "the replicas stayed in step through the switch: {all_losses:?}"
    );
    let kubeflow_log = kubeflow.log_text();
    assert!(
        !kubeflow_log.contains("Reconciler error"),
        "training-operator ran cleanly before the switch:\n{kubeflow_log}"
    );
}
