"""Asynchronous training with ParameterServerStrategy.

Roles, from TF_CONFIG (which the operator writes):
  - ps and worker: start a TensorFlow server and serve until stopped. The
    variables live on the PS; the workers run the steps the coordinator
    sends them. They never exit by themselves, so the job ends when the
    Chief does (Kubeflow's default success policy), and cleanPodPolicy says
    what happens to these Pods then.
  - chief: the coordinator. It builds the model under the strategy (its
    variables are placed on the PS), schedules training steps on the
    workers, and writes a checkpoint after every epoch.
  - evaluator (optional): not part of the training cluster; it evaluates each
    checkpoint the Chief writes, on held-out synthetic data, and exits after
    the last epoch's. It notes each one in the file `evaluated` beside the
    checkpoints, and a Chief whose TF_CONFIG names an evaluator waits (at most
    EVALUATOR_WAIT_SECONDS, 300) for the note of the last checkpoint before it
    exits: the job's success, which is the Chief's, then covers the
    evaluation, and cleanPodPolicy finds the evaluator done rather than
    deleting it mid-evaluation.

A worker that dies is TensorFlow's business here: the coordinator re-schedules
its steps on the other workers and takes it back when it is re-created.
"""

import os
import time

# More than one inter-op thread (trainlib sets one by default): with one, a
# worker running the coordinator's step function waits on itself and the
# Chief hangs in coordinator.join().
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "4")

import trainlib  # noqa: E402
from trainlib import say, tf  # noqa: E402

LEARNING_RATE = 0.05


def serve(cluster_resolver, task_type, task_index):
    # Workers fail fast on a lost PS instead of retrying forever (TensorFlow's
    # advice for this strategy).
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    server = tf.distribute.Server(
        cluster_resolver.cluster_spec(),
        job_name=task_type,
        task_index=task_index,
        protocol="grpc",
        start=True,
    )
    say(f"serving as {task_type} {task_index} of the cluster")
    server.join()


def coordinate(settings, cluster_resolver, cluster):
    strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    spec = cluster_resolver.cluster_spec().as_dict()
    say(
        f"joined the cluster: coordinating {len(spec.get('worker', []))} workers "
        f"and {len(spec.get('ps', []))} parameter servers"
    )

    with strategy.scope():
        # Its variables are placed on the parameter servers, round-robin.
        model = trainlib.SmallModel()
        epoch = tf.Variable(0, dtype=tf.int64, trainable=False)

    checkpoint = tf.train.Checkpoint(model=model, epoch=epoch)
    manager = tf.train.CheckpointManager(checkpoint, settings.checkpoint_dir, max_to_keep=2)
    latest = tf.train.latest_checkpoint(settings.checkpoint_dir)
    if latest:
        checkpoint.restore(latest)
        say(f"resumed from checkpoint {latest} at epoch {int(epoch.numpy())}")

    per_worker_batch = settings.global_batch // max(1, len(spec.get("worker", [])))

    def dataset_fn():
        return trainlib.synthetic_dataset(per_worker_batch, seed=11)

    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train_step(iterator):
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            # Plain SGD, applied on the parameter servers.
            for variable, grad in zip(model.trainable_variables, grads):
                variable.assign_sub(LEARNING_RATE * grad)
            return loss

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=next(iterator)), axis=None)

    while int(epoch.numpy()) < settings.epochs:
        current = int(epoch.numpy()) + 1
        trainlib.maybe_exit(settings, current)
        losses = []
        for _ in range(settings.steps_per_epoch):
            losses.append(coordinator.schedule(train_step, args=(per_worker_iterator,)))
            trainlib.sleep_between_steps(settings)
        coordinator.join()
        mean_loss = sum(float(loss.fetch()) for loss in losses) / len(losses)
        epoch.assign(current)
        say(f"wrote checkpoint {manager.save(checkpoint_number=current)}")
        say(f"epoch {current}/{settings.epochs} loss {mean_loss:.4f}")
    say(f"done: {settings.epochs} epochs")
    if "evaluator" in cluster and manager.latest_checkpoint:
        wait_for_evaluator(settings, manager.latest_checkpoint)


def evaluated_note(settings):
    return os.path.join(settings.checkpoint_dir, "evaluated")


def wait_for_evaluator(settings, last_checkpoint):
    """Waits until the evaluator noted the last checkpoint (bounded: an
    evaluator that never comes does not hold the job for ever)."""
    wanted = os.path.basename(last_checkpoint)
    deadline = time.monotonic() + trainlib.env_int("EVALUATOR_WAIT_SECONDS", 300)
    say(f"waiting for the evaluator to evaluate {wanted}")
    while time.monotonic() < deadline:
        try:
            with open(evaluated_note(settings)) as note:
                text = note.read().strip()
        except FileNotFoundError:
            text = ""
        if text.split(" ")[0] == wanted:
            say(f"the evaluator evaluated {text}")
            return
        time.sleep(1)
    say(f"the evaluator did not evaluate {wanted} in time: finishing without it")


def evaluate(settings):
    """Evaluates each new checkpoint until the last epoch's."""
    model = trainlib.SmallModel()
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, epoch=epoch)
    x, y = next(iter(trainlib.synthetic_dataset(256, seed=99)))
    say("evaluating each checkpoint of the chief")
    seen = None
    while int(epoch.numpy()) < settings.epochs:
        latest = tf.train.latest_checkpoint(settings.checkpoint_dir)
        if latest is None or latest == seen:
            time.sleep(1)
            continue
        checkpoint.restore(latest).expect_partial()
        seen = latest
        loss = float(tf.reduce_mean(tf.square(model(x) - y)))
        say(f"evaluated {latest} (epoch {int(epoch.numpy())}): loss {loss:.4f}")
        # Written aside and renamed: the Chief never reads half a note.
        note = evaluated_note(settings)
        with open(note + ".tmp", "w") as out:
            out.write(f"{os.path.basename(latest)} loss {loss:.4f}\n")
        os.replace(note + ".tmp", note)
    say("done: evaluated the last epoch")


def main():
    settings = trainlib.Settings()
    cluster, task_type, task_index = trainlib.tf_config()
    say(f"starting; TF_CONFIG names {cluster}")
    if task_type == "evaluator":
        evaluate(settings)
        return
    # The training cluster, without the evaluator that Kubeflow's TF_CONFIG
    # also lists: it runs no server, so nothing may wait for it.
    training = {role: addresses for role, addresses in cluster.items() if role != "evaluator"}
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(training), task_type=task_type, task_id=task_index, rpc_layer="grpc"
    )
    if task_type in ("ps", "worker"):
        serve(resolver, task_type, task_index)
    else:
        coordinate(settings, resolver, cluster)


if __name__ == "__main__":
    main()
