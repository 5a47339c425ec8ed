"""What mwms.py and ps.py share: reading TF_CONFIG, fitting TensorFlow to a
small machine, the synthetic data, the model, checkpoints and the log lines
the tests read.

Every line meant for a person or a test starts with "[tfjob-example]" and
names this replica (e.g. "worker-1"), so `kubectl logs` of any replica tells
what it did: joined the cluster, the loss per epoch, checkpoints written or
restored. tests/real/training.rs matches these lines: change them together.
"""

import json
import os
import signal
import sys
import time

# TensorFlow reads these when it starts: one thread per op pool, so that
# three to six replicas share 2 cores without thrashing (the TFJobs set them
# too; the defaults below are for run-local.sh). Set before importing it.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import tensorflow as tf  # noqa: E402

# In a container this program is PID 1, which ignores SIGTERM unless it
# handles it: without this, deleting a Pod (cleanPodPolicy, a deadline)
# waits out the whole grace period. Exit as SIGTERM would (143).
signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))

FEATURES = 8
# The weights the synthetic data is drawn from: the model can learn them
# exactly, so the loss falls towards the noise floor.
TRUE_WEIGHTS = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 1.0, -2.0]


def env_int(name, default):
    """An integer setting from the environment, with a clear error if bad."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        sys.exit(f"{name}={raw!r} is not an integer: set it to a whole number")


class Settings:
    """The knobs, from the environment so the TFJobs set them per replica."""

    def __init__(self):
        self.epochs = env_int("EPOCHS", 2)
        self.steps_per_epoch = env_int("STEPS_PER_EPOCH", 20)
        self.global_batch = env_int("GLOBAL_BATCH", 64)
        # A pause after each step: stretches a run so that a test can kill a
        # replica in the middle of it, or let activeDeadlineSeconds end it.
        self.step_sleep = float(os.environ.get("STEP_SLEEP_SECONDS", "0") or 0)
        # Exit with this code at the start of this epoch (1-based) on the
        # replica named in EXIT_REPLICA (e.g. "worker-1"): a program that
        # fails by itself, for restartPolicy tests.
        self.exit_code = env_int("EXIT_CODE", 0)
        self.exit_at_epoch = env_int("EXIT_AT_EPOCH", 0)
        self.exit_replica = os.environ.get("EXIT_REPLICA", "")
        self.checkpoint_dir = os.environ.get("CHECKPOINT_DIR", "/tmp/tfjob-example-checkpoints")


def tf_config():
    """TF_CONFIG as the operator wrote it: the cluster and this task (a
    one-worker cluster of this process when there is none)."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        # Kubeflow (and so the operator) sets no TF_CONFIG for a job of one
        # replica: TensorFlow then trains in this process alone.
        return {"worker": ["localhost"]}, "worker", 0
    try:
        config = json.loads(raw)
        cluster, task = config["cluster"], config["task"]
        return cluster, task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as err:
        sys.exit(f"TF_CONFIG is not Kubeflow's shape (cluster, task.type, task.index): {err}")


def replica_name():
    _, task_type, index = tf_config()
    return f"{task_type}-{index}"


def say(message):
    """One log line for people and tests, stamped with this replica's name."""
    print(f"[tfjob-example] {replica_name()}: {message}", flush=True)


def maybe_exit(settings, epoch):
    """The deliberate failure of Settings.exit_code, if it is due here."""
    if (
        settings.exit_code
        and settings.exit_at_epoch == epoch
        and settings.exit_replica == replica_name()
    ):
        say(f"exiting with code {settings.exit_code} at epoch {epoch} as EXIT_CODE asks")
        sys.stdout.flush()
        os._exit(settings.exit_code)


def synthetic_dataset(batch, seed):
    """Endless (x, y) batches of a noisy linear function; no download."""
    weights = tf.constant(TRUE_WEIGHTS, shape=(FEATURES, 1))

    def make(step):
        x = tf.random.stateless_normal((batch, FEATURES), seed=[seed, step])
        noise = tf.random.stateless_normal((batch, 1), seed=[seed + 1, step]) * 0.1
        return x, tf.matmul(x, weights) + noise

    return tf.data.Dataset.range(1 << 30).map(make)


def build_model():
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(FEATURES,)),
            tf.keras.layers.Dense(16, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )


class SmallModel(tf.Module):
    """The same two layers in plain TensorFlow variables, for
    ParameterServerStrategy: Keras 3 does not support that strategy (its
    model hangs creating variables on the parameter servers)."""

    def __init__(self):
        super().__init__()
        init = tf.keras.initializers.GlorotUniform(seed=3)
        self.w1 = tf.Variable(init((FEATURES, 16)), name="w1")
        self.b1 = tf.Variable(tf.zeros((16,)), name="b1")
        self.w2 = tf.Variable(init((16, 1)), name="w2")
        self.b2 = tf.Variable(tf.zeros((1,)), name="b2")

    def __call__(self, x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, self.w1) + self.b1), self.w2) + self.b2


def sleep_between_steps(settings):
    if settings.step_sleep > 0:
        time.sleep(settings.step_sleep)
