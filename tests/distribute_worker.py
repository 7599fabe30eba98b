"""One process of a tf.distribute run over the reader, for tests/test_tfdata_distribute.py.

    python tests/distribute_worker.py OUTPUT_DIR RESULT.json {mirrored|multiworker} GLOBAL_BATCH STEPS FIT

`mirrored`: one process, MirroredStrategy over two logical CPU devices. `multiworker`: one worker of a
MultiWorkerMirroredStrategy (TF_CONFIG set by the test). For both entry points
(`experimental_distribute_dataset` of a global-batch dataset, `distribute_datasets_from_function`
with the InputContext) it records the record ids each local replica received at each step and runs a
step that all-reduces across every replica (the token count of the global batch). FIT: `global`
trains a small Keras model with `model.fit` on the Keras form of the global dataset (Keras
distributes it), `function` on the InputContext form, `none` skips it (Keras 3 cannot `fit` under
MultiWorkerMirroredStrategy, whatever the data: it fails converting a PerReplica value).
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "datagen"))

import tensorflow as tf  # noqa: E402
from synthetic_output import VOCAB_SIZE, record_ids  # noqa: E402

from pipeline import tfdata  # noqa: E402

SEED, WINDOW = 13, 48


def _strategy(kind: str):
    if kind == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    return tf.distribute.MultiWorkerMirroredStrategy()


def _collect(strategy, dist, steps: int) -> dict:
    @tf.function
    def tokens(batch):
        per_replica = strategy.run(lambda b: tf.reduce_sum(b["loss_mask"]), args=(batch,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    it = iter(dist)
    ids, counts = [], []
    for _ in range(steps):
        batch = next(it)
        local = strategy.experimental_local_results(batch)
        ids.append([record_ids(b["inputs"].numpy()).tolist() for b in local])
        counts.append(float(tokens(batch)))
    return {"ids": ids, "tokens": counts}


def main(out_dir: str, result: str, kind: str, global_batch: int, steps: int, fit: str) -> None:
    strategy = _strategy(kind)
    kw = dict(seed=SEED, shuffle_buffer=WINDOW, num_epochs=None)
    report = {"replicas": strategy.num_replicas_in_sync}
    whole = tfdata.make_dataset(out_dir, global_batch_size=global_batch, **kw)
    report["experimental"] = _collect(strategy, strategy.experimental_distribute_dataset(whole), steps)
    report["function"] = _collect(strategy, strategy.distribute_datasets_from_function(
        lambda ctx: tfdata.make_dataset(out_dir, global_batch_size=global_batch, input_context=ctx, **kw)), steps)

    if fit != "none":
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.layers.Embedding(VOCAB_SIZE, 4), tf.keras.layers.Dense(VOCAB_SIZE)])
            model.compile(optimizer=tf.keras.optimizers.SGD(0.1),
                          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        if fit == "global":  # Keras distributes a plain dataset of global batches itself
            fit_data = tfdata.make_dataset(out_dir, global_batch_size=global_batch, keras=True, features=(), **kw)
        else:
            fit_data = strategy.distribute_datasets_from_function(
                lambda ctx: tfdata.make_dataset(out_dir, global_batch_size=global_batch, input_context=ctx,
                                                keras=True, features=(), **kw))
        history = model.fit(fit_data, epochs=1, steps_per_epoch=2, verbose=0)
        report["fit_loss"] = [float(x) for x in history.history["loss"]]
    with open(result, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
