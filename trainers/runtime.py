"""What every trainer does around its steps: seeds, TensorFlow's threads, the run's files.

The files: model_config.json and train_config.json (rank 0, before step 1), and at the end the
summary of where the run stopped (step, data position, a digest of the weights), with
`--debug_dump` each rank's weights and summary under <output_dir>/debug.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os

import numpy as np
import tensorflow as tf

from trainers.config import TrainConfig

LOG = logging.getLogger("trainers")


def seed_everything(seed: int) -> None:
    """Python, NumPy and TensorFlow seeds (tf.keras.utils.set_random_seed where it exists)."""
    set_seed = getattr(tf.keras.utils, "set_random_seed", None)  # TF >= 2.7
    if set_seed is not None:
        set_seed(seed)
        return
    import random

    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)


def configure_tensorflow(cfg: TrainConfig) -> None:
    """Threads and determinism; call before TensorFlow runs anything."""
    if cfg.threads:
        tf.config.threading.set_intra_op_parallelism_threads(cfg.threads)
        tf.config.threading.set_inter_op_parallelism_threads(cfg.threads)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()


def write_json(path: str, obj) -> None:
    """`obj` as indented, key-sorted JSON at `path` (its directory created)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def finish_summary(cfg, rank: int, model, progress, summary: dict) -> None:
    """Record where a run ended (step, data position, weights digest); optionally dump the weights."""
    summary["final_step"] = int(progress.global_step.numpy())
    summary["position"] = list(progress.position())
    summary["weights_sha256"] = weights_digest(model.trainable_variables)
    if cfg.debug_dump:
        debug = os.path.join(cfg.output_dir, "debug")
        os.makedirs(debug, exist_ok=True)
        np.savez(os.path.join(debug, f"rank{rank}.npz"),
                 **{f"w{i:04d}": v.numpy() for i, v in enumerate(model.trainable_variables)})
        write_json(os.path.join(debug, f"rank{rank}.json"), summary)


def weights_digest(variables) -> str:
    """sha256 over the bytes of `variables`, in order (equal weights <=> equal digests)."""
    h = hashlib.sha256()
    for v in variables:
        h.update(np.ascontiguousarray(np.asarray(v.numpy() if hasattr(v, "numpy") else v)).tobytes())
    return h.hexdigest()


def setup_logging(rank: int, is_chief: bool) -> None:
    """INFO on rank 0, warnings only elsewhere; every line names its rank."""
    logging.basicConfig(level=logging.INFO if is_chief else logging.WARNING,
                        format=f"[rank {rank}] %(asctime)s %(levelname)s %(message)s")


def write_run_configs(cfg: TrainConfig, model_config) -> None:
    """model_config.json and train_config.json in the output directory (rank 0 calls it)."""
    write_json(os.path.join(cfg.output_dir, "model_config.json"), model_config.to_dict())
    write_json(os.path.join(cfg.output_dir, "train_config.json"), dataclasses.asdict(cfg))
