"""A trainer's data: this rank's batches from the reader, and the signature that makes a resume exact.

The reader (`pipeline.tfdata.make_dataset`) is given the data-parallel rank and size (Horovod's or
smddp's rank, SMP's `dp_rank()`), each rank taking its slice of every global batch. Every rank gets
the same number of batches (no Horovod deadlock). The data position (epoch, step in epoch) is part
of every checkpoint, so a resumed run consumes exactly the batches an uninterrupted run would have
(it passes them back as `epoch`/`start_step`). The reader's global batches do not depend on the
number of ranks, so with `--global_batch_size` a run resumes exactly on any number of ranks that
divides it (a spot job stopped on 16 GPUs continues on 8).

The data signature is everything that fixes the data order: the shards, the global batch size,
seed, shuffling, window and the reader's order. Resuming with a different one is refused, except a
different global batch size at an epoch boundary (a new epoch starts whole).

`--train_data` may also be a mixture (a mixture.json, or a `--per_subset` output's directory):
`open_train_data` then gives a `MixtureRun` (trainers/mixture.py), whose reader state is saved
beside each checkpoint and given back to the reader on a resume.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath

from trainers.config import TrainConfig, batch_sizes
from trainers.mixture import ENDLESS, MixtureRun, mixture_file

LOG = logging.getLogger("trainers")


def reader_kwargs(cfg: TrainConfig) -> dict:
    """Reader options the run sets (omitted: the reader's defaults)."""
    out = {}
    if cfg.shuffle_buffer is not None:
        out["shuffle_buffer"] = cfg.shuffle_buffer
    if cfg.num_parallel_reads is not None:
        out["num_parallel_reads"] = cfg.num_parallel_reads
    return out


def features(cfg: TrainConfig):
    """The reader's `features`: its default (every feature the shards have), or none beyond the tokens."""
    return None if cfg.use_document_boundaries else ()


class TrainData:
    """The run's training data: one output, or a mixture (`mixture` set); what both trainers ask of it."""

    def __init__(self, cfg: TrainConfig, global_batch: int):
        from pipeline import tfdata
        from pipeline.format import manifest as manifest_lib

        path = mixture_file(cfg.train_data)
        self.mixture: MixtureRun | None = None
        if path is None:
            self.manifest = manifest_lib.load_manifest(cfg.train_data)
            self.steps_per_epoch = tfdata.steps_per_epoch(cfg.train_data, global_batch)
            if self.steps_per_epoch == 0:
                raise SystemExit(
                    f"{cfg.train_data}: {self.manifest['totals'].get('records', '?')} records cannot fill one "
                    f"global batch of {global_batch}; lower the batch size")
        else:
            self.mixture = MixtureRun(path, global_batch, 0, seed=cfg.seed, shuffle=cfg.shuffle,
                                      shuffle_buffer=cfg.shuffle_buffer)
            self.manifest = self.mixture.manifest
            self.mixture.seq_len = int(self.manifest["seq_len"])
            self.steps_per_epoch = ENDLESS  # a mixture's position is its global step (per-source epochs)

    def resume(self, checkpoint: str | None, step: int) -> None:
        """A mixture: the reader's state at `step`, from beside `checkpoint` (its prefix), on every rank."""
        if self.mixture is not None:
            self.mixture.resume(checkpoint, step)

    def saving(self, save):
        """`save(step) -> checkpoint path or None`, also writing a mixture's state beside the checkpoint."""
        if self.mixture is None:
            return save

        def save_with_state(step: int):
            path = save(step)
            self.mixture.save(path, step)
            return path

        return save_with_state

    @property
    def scalars(self):
        """Step -> a mixture's per-source scalars (tokens seen, epoch), or None for one output."""
        return None if self.mixture is None else self.mixture.scalars


def open_train_data(cfg: TrainConfig, global_batch: int) -> TrainData:
    """The run's training data (`--train_data`: an output directory, a mixture.json or a --per_subset output)."""
    return TrainData(cfg, global_batch)


def train_dataset(cfg: TrainConfig, dp_rank: int, dp_size: int, epoch: int, step_in_epoch: int,
                  mixture: MixtureRun | None = None):
    """This rank's training batches from a data position on (forever: the loop decides when to stop)."""
    from pipeline import tfdata

    if mixture is not None:
        return tfdata.make_dataset(
            mixture.path, global_batch_size=batch_sizes(cfg, dp_size)[1], dp_rank=dp_rank, dp_size=dp_size,
            seed=cfg.seed, shuffle=cfg.shuffle, verify=cfg.verify_data, features=features(cfg),
            **mixture.dataset_kwargs(), **reader_kwargs(cfg),
        )
    return tfdata.make_dataset(
        cfg.train_data, global_batch_size=batch_sizes(cfg, dp_size)[1], dp_rank=dp_rank, dp_size=dp_size,
        seed=cfg.seed, shuffle=cfg.shuffle, epoch=epoch, start_step=step_in_epoch, num_epochs=None,
        verify=cfg.verify_data, features=features(cfg), **reader_kwargs(cfg),
    )


def eval_dataset(cfg: TrainConfig, dp_rank: int, dp_size: int, is_chief: bool):
    """This rank's validation batches (the same global batches at every evaluation), or None."""
    from pipeline import tfdata

    if not cfg.val_data or cfg.eval_steps == 0:
        return None
    global_batch = batch_sizes(cfg, dp_size)[1]
    steps = min(cfg.eval_steps, tfdata.steps_per_epoch(cfg.val_data, global_batch))
    if steps == 0:
        if is_chief:
            LOG.warning("validation data %s cannot fill one global batch of %d: no evaluation", cfg.val_data,
                        global_batch)
        return None
    ds = tfdata.make_dataset(cfg.val_data, global_batch_size=global_batch, dp_rank=dp_rank, dp_size=dp_size,
                             shuffle=False, num_epochs=1, features=features(cfg), **reader_kwargs(cfg))
    return ds.take(steps)


def data_signature(cfg: TrainConfig, manifest: dict, dp_size: int, mixture: MixtureRun | None = None) -> dict:
    """Everything that fixes which records global step k holds (not the number of ranks).

    A mixture's weights are not in it: its reader state checks them (a schedule may add weights).
    """
    from pipeline import tfdata

    if mixture is not None:
        shards = mixture.signature()
    else:
        # By name, not path: a rerun of the same job writes the same shards into another run directory.
        listed = [(posixpath.basename(s["path"]), s["records"], s.get("sha256")) for s in manifest["shards"]]
        shards = hashlib.sha256(json.dumps(listed).encode()).hexdigest()
    return {
        "shards": shards,
        "global_batch_size": batch_sizes(cfg, dp_size)[1],
        "seed": cfg.seed,
        "shuffle": cfg.shuffle,
        "shuffle_buffer": cfg.shuffle_buffer,
        "order": tfdata.ORDER,
    }


def resume_problem(saved: dict, current: dict, step_in_epoch: int) -> str | None:
    """Why resuming `saved` as `current` would not be exact, or None when it is.

    The number of ranks is not part of the order. A different global batch size is fine at an epoch
    boundary (step_in_epoch == 0): the new epoch is planned whole for it.
    """
    diff = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
    if not diff or (diff == ["global_batch_size"] and step_in_epoch == 0):
        return None
    details = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {current.get(k)!r}" for k in diff)
    hint = ""
    if "global_batch_size" in diff:
        hint = (" To resume on another number of workers, keep the global batch: pass --global_batch_size "
                f"{saved.get('global_batch_size')} (it must be a multiple of the number of workers).")
    return f"the checkpoint was written with another data order ({details}).{hint}"
