"""Kubeflow's Python SDK (kubeflow-training) against our operator, unchanged.

Creates a TFJob with TrainingClient, waits for Running through the SDK, lists
the job's Pods through the SDK (it selects them by Kubeflow's labels), makes
worker 0 finish (KWOK plays the kubelet: an annotation, see
e2e/kwok/stages.yaml), waits for Succeeded through the SDK, reads the
conditions and deletes the job. Any SDK error or failed check exits non-zero.

Usage: check_sdk.py KUBECONFIG NAMESPACE
"""
import sys
import time

from kubernetes import client as k8s, config as k8s_config
from kubeflow.training import TrainingClient, models

kubeconfig, namespace = sys.argv[1], sys.argv[2]
name = "sdk-mnist"

job = models.KubeflowOrgV1TFJob(
    api_version="kubeflow.org/v1",
    kind="TFJob",
    metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
    spec=models.KubeflowOrgV1TFJobSpec(
        run_policy=models.KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
        tf_replica_specs={
            "Worker": models.KubeflowOrgV1ReplicaSpec(
                replicas=2,
                restart_policy="OnFailure",
                template=k8s.V1PodTemplateSpec(
                    spec=k8s.V1PodSpec(
                        containers=[
                            k8s.V1Container(
                                name="tensorflow",
                                image="kubeflow/tf-mnist-with-summaries:latest",
                                command=["python", "/var/tf_mnist/mnist_with_summaries.py"],
                            )
                        ]
                    )
                ),
            )
        },
    ),
)

tc = TrainingClient(config_file=kubeconfig, namespace=namespace, job_kind="TFJob")
tc.create_job(job)
print("created", flush=True)

tc.wait_for_job_conditions(name, namespace, expected_conditions={"Running"}, wait_timeout=120, polling_interval=1)
assert tc.is_job_running(name, namespace), "SDK: is_job_running"
print("running", flush=True)

pods = tc.get_job_pod_names(name, namespace)
assert sorted(pods) == [f"{name}-worker-0", f"{name}-worker-1"], pods
master = tc.get_job_pod_names(name, namespace, is_master=True)
assert master == [f"{name}-worker-0"], f"job-role=master on worker 0 without a chief: {master}"
print("pods", pods, flush=True)

k8s_config.load_kube_config(config_file=kubeconfig)
core = k8s.CoreV1Api()
core.patch_namespaced_pod(
    f"{name}-worker-0",
    namespace,
    {"metadata": {"annotations": {
        "e2e.tfjob-operator.local/exit-code": "0",
        "e2e.tfjob-operator.local/exit-container": "tensorflow",
    }}},
)

tc.wait_for_job_conditions(name, namespace, expected_conditions={"Succeeded"}, wait_timeout=120, polling_interval=1)
assert tc.is_job_succeeded(name, namespace), "SDK: is_job_succeeded"
conditions = [c.type for c in tc.get_job_conditions(name, namespace)]
assert conditions[0] == "Created" and conditions[-1] == "Succeeded", conditions
got = tc.get_job(name, namespace)
assert got.status.replica_statuses["Worker"].succeeded == 2, got.status.replica_statuses
print("succeeded", conditions, flush=True)

tc.delete_job(name, namespace)
deadline = time.time() + 60
while time.time() < deadline:
    if not core.list_namespaced_pod(namespace, label_selector=f"training.kubeflow.org/job-name={name}").items:
        break
    time.sleep(0.5)
else:
    raise SystemExit("pods were not garbage-collected after delete_job")
print("deleted", flush=True)
print("SDK CHECK PASSED", flush=True)
