"""The pipeline's configuration: one frozen, validated dataclass, recorded in the manifest."""

from __future__ import annotations

import dataclasses
import re

from pipeline.subsets import EPOCH_PRESETS, PILE_SUBSETS, SUBSET_PRESETS, check_subset_names

_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")
REMAINDER_POLICIES = ("pad", "drop")
CORRUPT_FILE_POLICIES = ("fail", "skip")
TOKENIZER_BACKENDS = ("sentencepiece", "gigatoken", "kitoken", "auto")  # pipeline/backends.py
VERIFY_TOKENIZER_MODES = ("off", "dead_letter", "fail")
FAN_OUT_CHOICES = ("auto", "yes", "no")  # pipeline/execution.py


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """Everything that decides the output bytes (plus where things are)."""

    inputs: tuple[str, ...]  # globs or fsspec URLs; expanded and sorted at start
    output_dir: str  # local path, EFS mount or s3:// URL
    tokenizer_model: str  # any SentencePiece .model (Llama-2's tokenizer.model included)
    seq_len: int = 2048  # label positions per record; records hold seq_len + 1 tokens
    shard_size_mb: float = 1024.0  # upper bound per shard (+ one record)
    split: str = "train"  # shard name prefix: train-00000-of-00042.tfrecord
    subsets: tuple[str, ...] = PILE_SUBSETS  # subsets kept; others are counted as filtered
    epochs: tuple[tuple[str, float], ...] = ()  # per-subset epochs; absent subsets get 1.0
    seed: int = 0  # global shuffle and fractional epochs
    add_bos: bool = False
    add_eos: bool = True
    bos_id: int | None = None  # None: the model's
    eos_id: int | None = None
    remainder: str = "pad"  # the job's last partial record: "pad" (marked by valid_labels) or "drop"
    document_boundaries: bool = False  # write seqio-style segment_ids and positions
    chunk_mb: float = 4.0  # decompressed bytes per unit of work after the fan-out
    max_line_mb: float = 64.0  # longer lines are dead-lettered without being held in memory
    on_corrupt_file: str = "fail"  # "fail" the job, or "skip" the rest of the file and record it
    tokenizer_backend: str = "sentencepiece"
    verify_tokenizer: str = "off"  # also run SentencePiece on every document: "dead_letter" or "fail" on a mismatch
    overwrite: bool = False
    # How the work spreads (pipeline/execution.py); output bytes do not depend on these.
    fan_out: str = "auto"  # fan chunks out to workers: "auto", "yes", "no"
    tokenizer_threads: int | None = None  # threads per tokenizer batch; None: per runner and workers

    def __post_init__(self):
        if not self.inputs:
            raise ValueError("No --input given: pass one or more globs or URLs of .jsonl[.zst|.gz] files")
        if not 1 <= self.seq_len <= 1 << 20:
            raise ValueError(f"--seq_len must be in [1, 1048576], got {self.seq_len}")
        if self.shard_size_mb <= 0:
            raise ValueError("--shard_size_mb must be > 0")
        if not _SPLIT_NAME.match(self.split):
            raise ValueError(f"--split {self.split!r}: use letters, digits and underscores only")
        check_subset_names(self.subsets, "--subsets")
        if not self.subsets:
            raise ValueError("The subset selection is empty: check --subsets and --exclude_subsets")
        check_subset_names([name for name, _ in self.epochs], "--epochs")
        for name, value in self.epochs:
            if not 0 <= value <= 100:
                raise ValueError(f"--epochs: {name}={value} must be within [0, 100]")
        if self.remainder not in REMAINDER_POLICIES:
            raise ValueError(f"--remainder must be one of {REMAINDER_POLICIES}")
        if self.on_corrupt_file not in CORRUPT_FILE_POLICIES:
            raise ValueError(f"--on_corrupt_file must be one of {CORRUPT_FILE_POLICIES}")
        if self.tokenizer_backend not in TOKENIZER_BACKENDS:
            raise ValueError(f"--tokenizer_backend must be one of {TOKENIZER_BACKENDS}")
        if self.verify_tokenizer not in VERIFY_TOKENIZER_MODES:
            raise ValueError(f"--verify_tokenizer must be one of {VERIFY_TOKENIZER_MODES}")
        if self.fan_out not in FAN_OUT_CHOICES:
            raise ValueError(f"--fan_out must be one of {FAN_OUT_CHOICES}")
        if self.tokenizer_threads is not None and self.tokenizer_threads < 1:
            raise ValueError("--tokenizer_threads must be at least 1")
        if self.chunk_mb <= 0 or self.max_line_mb <= 0:
            raise ValueError("--chunk_mb and --max_line_mb must be > 0")

    @property
    def chunk_bytes(self) -> int:
        """Decompressed bytes per chunk."""
        return int(self.chunk_mb * (1 << 20))

    @property
    def max_line_bytes(self) -> int:
        """Longest line accepted, in bytes."""
        return int(self.max_line_mb * (1 << 20))

    @property
    def shard_bytes(self) -> int:
        """Shard size bound in bytes."""
        return int(self.shard_size_mb * (1 << 20))

    def epochs_of(self, subset: str) -> float:
        """Epochs for a subset (1.0 unless configured)."""
        return dict(self.epochs).get(subset, 1.0)

    def to_json(self) -> dict:
        """A JSON-ready form for the manifest.

        Where the output went, whether it replaced another and how the work was spread are not
        recorded: the manifest lives in the output and must stay byte-identical when the same job
        writes elsewhere, on other machines, or is copied.
        """
        out = dataclasses.asdict(self)
        out["epochs"] = dict(self.epochs)
        del out["output_dir"], out["overwrite"], out["fan_out"], out["tokenizer_threads"]
        return out


def parse_subsets(value: str | None, exclude: str | None) -> tuple[str, ...]:
    """`--subsets` (a preset name or comma list) minus `--exclude_subsets`, in canonical order."""
    if value is None or value == "":
        chosen = set(PILE_SUBSETS)
    elif value in SUBSET_PRESETS:
        chosen = set(SUBSET_PRESETS[value])
    else:
        names = [s.strip() for s in value.split(",") if s.strip()]
        check_subset_names(names, "--subsets")
        chosen = set(names)
    if exclude:
        names = [s.strip() for s in exclude.split(",") if s.strip()]
        check_subset_names(names, "--exclude_subsets")
        chosen -= set(names)
    return tuple(s for s in PILE_SUBSETS if s in chosen)


def parse_epochs(value: str | None) -> tuple[tuple[str, float], ...]:
    """`--epochs`: a preset name (`pile_paper`) or `Name=2,Other Name=1.5`."""
    if not value or value == "none":
        return ()
    if value in EPOCH_PRESETS:
        return tuple(sorted(EPOCH_PRESETS[value].items()))
    pairs = []
    for item in value.split(","):
        name, sep, number = item.rpartition("=")
        if not sep:
            raise ValueError(f"--epochs: {item!r} is not NAME=EPOCHS (presets: {sorted(EPOCH_PRESETS)})")
        pairs.append((name.strip(), float(number)))
    return tuple(sorted(pairs))
