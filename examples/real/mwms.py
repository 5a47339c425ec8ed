"""Synchronous data-parallel training with MultiWorkerMirroredStrategy.

Every replica (Chief + Workers) runs this same program; TensorFlow reads the
cluster from TF_CONFIG, which the operator writes, and the replicas find each
other through the operator's headless Services. Each step's gradients are
all-reduced across the replicas, so they stay in step.

A custom loop with strategy.run, not Keras' model.fit: Keras 3's fit under
this strategy fails here with a PerReplica conversion error.

Checkpoints: the Chief writes to CHECKPOINT_DIR after every epoch (the other
replicas must take part in the save, and write to a scratch dir of their own).
On start every replica restores the latest checkpoint, so a job whose
replicas were re-created resumes where it was.

When a peer dies, the collective ops of the others fail: this program then
exits with PEER_LOST_EXIT_CODE (143, as if terminated: retryable under
Kubeflow's ExitCode rule, 128 and above), so the operator re-creates the
replica and the whole group re-forms and resumes from the checkpoint. This is
TensorFlow's documented recovery for this strategy: restart all workers.
"""

import os
import shutil
import sys
import tempfile

import trainlib
from trainlib import say, tf

PEER_LOST_EXIT_CODE = 143
PEER_LOST_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
    tf.errors.InternalError,
)


def main():
    settings = trainlib.Settings()
    cluster, task_type, task_index = trainlib.tf_config()
    replicas = sum(len(cluster.get(role, [])) for role in ("chief", "worker"))
    say(f"starting; TF_CONFIG names {replicas} replicas: {cluster}")

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    say(f"joined the cluster of {strategy.num_replicas_in_sync} replicas")

    with strategy.scope():
        model = trainlib.build_model()
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
        epoch = tf.Variable(0, dtype=tf.int64, trainable=False)

    is_writer = task_type == "chief" or (task_type == "worker" and "chief" not in cluster and task_index == 0)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch)
    directory = settings.checkpoint_dir if is_writer else tempfile.mkdtemp(prefix="mwms-scratch-")
    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=2)
    latest = tf.train.latest_checkpoint(settings.checkpoint_dir)
    if latest:
        checkpoint.restore(latest)
        say(f"resumed from checkpoint {latest} at epoch {int(epoch.numpy())}")

    dataset = trainlib.synthetic_dataset(settings.global_batch, seed=7)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    iterator = iter(strategy.experimental_distribute_dataset(dataset.with_options(options)))

    @tf.function
    def train_step(batch):
        def step(x, y):
            with tf.GradientTape() as tape:
                per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=settings.global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=batch), axis=None)

    try:
        while int(epoch.numpy()) < settings.epochs:
            current = int(epoch.numpy()) + 1
            trainlib.maybe_exit(settings, current)
            total = 0.0
            for _ in range(settings.steps_per_epoch):
                total += float(train_step(next(iterator)))
                trainlib.sleep_between_steps(settings)
            epoch.assign(current)
            path = manager.save(checkpoint_number=current)
            if is_writer:
                say(f"wrote checkpoint {path}")
            say(f"epoch {current}/{settings.epochs} loss {total / settings.steps_per_epoch:.4f}")
    except PEER_LOST_ERRORS as err:
        say(f"lost a peer ({type(err).__name__}); exiting {PEER_LOST_EXIT_CODE} so the group re-forms")
        sys.stdout.flush()
        os._exit(PEER_LOST_EXIT_CODE)

    if not is_writer:
        shutil.rmtree(directory, ignore_errors=True)
    say(f"done: {settings.epochs} epochs")


if __name__ == "__main__":
    main()
