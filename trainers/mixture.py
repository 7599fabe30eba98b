"""Training on a mixture (`--train_data mixture.json`): its reader state beside each checkpoint, tokens per source.

A mixture has no epoch of its own (each source runs through its own epochs, pipeline/reader/engine/mixture.py),
so the run's data position is its global step. At every checkpoint `ckpt-N`, rank 0 writes
`mixture_state-N.json` beside it: `tfdata.mixture_state` after N global steps, a small dict. A
resume from `ckpt-N` reads it and hands it to the reader as `state=` (on any number of ranks); a
rank that cannot read the file (a checkpoint directory only rank 0 sees) computes the same state
from step 0, which the order defines exactly. The state also holds the schedule of weights, so a
mixture.json whose past weights were edited is refused on resume, and new schedule entries from
the resumed step on are accepted.

Tokens seen per source (label positions of the records each source gave, over every rank) and
each source's epoch go to TensorBoard as `mixture/tokens/<source>` and `mixture/epoch/<source>`
at every logging step, from the same order: exact, with no extra reading.
"""

from __future__ import annotations

import json
import logging
import os

LOG = logging.getLogger("trainers")
STATE_PREFIX = "mixture_state-"
ENDLESS = 1 << 62  # steps per "epoch" of a mixture: the data position never rolls over


def is_mixture(train_data: str) -> bool:
    """Whether `--train_data` names a mixture (a .json other than manifest.json, or a --per_subset output)."""
    return mixture_file(train_data) is not None


def mixture_file(train_data: str) -> str | None:
    """The mixture.json that `--train_data` names or holds (a --per_subset output's directory), or None."""
    from pipeline.format.mixture import is_mixture as names_mixture

    if names_mixture(train_data):
        return train_data
    inside = os.path.join(train_data, "mixture.json")
    if "://" not in train_data and not os.path.exists(os.path.join(train_data, "manifest.json")) \
            and os.path.exists(inside):
        return inside
    return None


def state_path(checkpoint: str) -> str:
    """`<dir>/mixture_state-N.json` beside checkpoint prefix `<dir>/ckpt-N`."""
    directory, name = os.path.split(checkpoint)
    return os.path.join(directory, f"{STATE_PREFIX}{name.rsplit('-', 1)[-1]}.json")


class MixtureRun:
    """A run's mixture: the reader's state at the resume step, states saved beside checkpoints, per-source tokens.

    Args:
        path: the mixture.json.
        global_batch: records per global step.
        seq_len: label positions per record.
        seed, shuffle, shuffle_buffer: the reader's settings (they fix the order).
    """

    def __init__(self, path: str, global_batch: int, seq_len: int, *, seed: int, shuffle: bool,
                 shuffle_buffer: int | None):
        from pipeline import tfdata

        self.path = path
        self.mixture = tfdata.load_mixture(path)
        self.global_batch, self.seq_len = int(global_batch), int(seq_len)
        self._reader = {"seed": seed, "shuffle": shuffle, "shuffle_buffer": shuffle_buffer}
        self.state: dict | None = None  # at the resume step (None: step 0)
        self._order = None

    @property
    def manifest(self) -> dict:
        """The first source's manifest: what every source shares (tokenizer, seq_len)."""
        from pipeline.format.manifest import load_manifest

        return load_manifest(self.mixture.sources[0].manifest)

    def signature(self) -> str:
        """The data signature's `shards` for a mixture: the reader state checks the sources themselves.

        Their names, record counts and the schedule are in the state; a source may join through
        the schedule, so the list of sources is not fixed here.
        """
        return "mixture"

    def resume(self, checkpoint: str | None, step: int) -> None:
        """The reader's state after `step` steps: from beside `checkpoint` if readable, else computed."""
        if step == 0:
            self.state = None
            return
        saved = None
        if checkpoint and os.path.exists(state_path(checkpoint)):
            with open(state_path(checkpoint), encoding="utf-8") as f:
                saved = json.load(f)
            if saved.get("step") != step:
                raise SystemExit(f"{state_path(checkpoint)} is the state at step {saved.get('step')}, the "
                                 f"checkpoint is at step {step}: the files do not belong together")
        else:
            LOG.info("no mixture state beside the checkpoint on this rank: computing it for step %d", step)
        self.state = self._state_at(step, saved)

    def _state_at(self, step: int, state: dict | None = None) -> dict:
        from pipeline.reader.engine.mixture import open_order

        if self._order is None or state is not None:
            # Checks `state` against the mixture (sources, schedule, order): a mismatch is a MixtureError.
            self._order = open_order(self.path, self.global_batch, state=state or self.state, **self._reader)
        return self._order.state(step)

    def dataset_kwargs(self) -> dict:
        """What `make_dataset` takes for this run's mixture (besides the batch, ranks and reader settings)."""
        return {"state": self.state, "num_steps": None, "num_epochs": None}

    def save(self, checkpoint: str | None, step: int) -> str | None:
        """Write the state after `step` beside `checkpoint` (rank 0: the one with a checkpoint path)."""
        if checkpoint is None:
            return None
        path = state_path(checkpoint)
        text = json.dumps(self._state_at(step), sort_keys=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
        _prune(os.path.dirname(path))
        return path

    def scalars(self, step: int) -> dict[str, float]:
        """Tokens seen and epoch per source after `step` global steps, as `tokens/<name>`, `epoch/<name>`."""
        state = self._state_at(step)
        out = {}
        for name, count, epoch in zip(state["sources"], state["counts"], state["epochs"], strict=True):
            out[f"tokens/{name}"] = float(count * self.seq_len)
            out[f"epoch/{name}"] = float(epoch)
        return out


def _prune(directory: str) -> None:
    """Remove the states whose checkpoint tf.train.CheckpointManager has deleted (--keep_checkpoints)."""
    for name in os.listdir(directory):
        if name.startswith(STATE_PREFIX) and name.endswith(".json"):
            ckpt = f"ckpt-{name[len(STATE_PREFIX):-len('.json')]}"
            if not any(other.startswith(ckpt) and not other[len(ckpt):][:1].isdigit()
                       for other in os.listdir(directory)):
                os.remove(os.path.join(directory, name))
