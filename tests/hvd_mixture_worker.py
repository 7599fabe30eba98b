"""One Horovod process reading a mixture, for tests/test_mixture_horovod.py.

    horovodrun -np 2 --gloo python tests/hvd_mixture_worker.py MIXTURE.json RESULT_DIR GLOBAL_BATCH STEPS RESUME_AT

Each rank reads its slice of every global batch (`dp_from_horovod`), all-gathers the record ids
of the step (so every rank holds the whole global batch) and takes one training step of a tiny
model with Horovod's averaged gradients. Then it resumes at RESUME_AT from the mixture's state and
reads the remaining steps again. Rank r writes RESULT_DIR/rank{r}.json.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "datagen"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import horovod.tensorflow as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402
from synthetic_output import VOCAB_SIZE, record_ids  # noqa: E402

from pipeline import tfdata  # noqa: E402

SEED, WINDOW = 5, 96


def main(mixture: str, result_dir: str, global_batch: int, steps: int, resume_at: int) -> None:
    hvd.init()
    rank, size = tfdata.dp_from_horovod()
    kw = dict(global_batch_size=global_batch, dp_rank=rank, dp_size=size, seed=SEED, shuffle_buffer=WINDOW)
    model = tf.keras.Sequential([tf.keras.layers.Embedding(VOCAB_SIZE, 4), tf.keras.layers.Dense(VOCAB_SIZE)])
    model.build((None, None))
    optimizer = tf.keras.optimizers.SGD(0.1)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(autograph=False)  # no tensor-dependent Python control flow; transpiling Keras costs seconds
    def train_step(batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(batch["labels"], model(batch["inputs"]), sample_weight=batch["loss_mask"])
        tape = hvd.DistributedGradientTape(tape)  # Horovod: gradients averaged over the ranks
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return hvd.allreduce(loss)

    def global_ids(ds) -> list[list[int]]:
        out = []
        for batch in ds:
            local = tf.constant(record_ids(batch["inputs"].numpy()), tf.int64)
            out.append(hvd.allgather(local).numpy().tolist())  # rank order: the global batch
        return out

    report = {"rank": rank, "size": size, "losses": []}
    ds = tfdata.make_dataset(mixture, num_steps=steps, **kw)
    first = True
    for batch in ds:
        report["losses"].append(float(train_step(batch)))
        if first:  # Horovod: the same initial weights everywhere
            hvd.broadcast_variables(model.variables, root_rank=0)
            first = False
    report["batches"] = global_ids(tfdata.make_dataset(mixture, num_steps=steps, **kw))
    state = tfdata.mixture_state(mixture, global_batch, resume_at, seed=SEED, shuffle_buffer=WINDOW)
    report["resumed"] = global_ids(tfdata.make_dataset(mixture, num_steps=steps - resume_at, state=state, **kw))
    with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
