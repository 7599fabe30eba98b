"""The job's configuration: one frozen, validated dataclass; every `pipeline.run` flag is declared here.

The options marked `recorded` decide the output's bytes and go into the manifest's `config`; the
others say where things are or how the work is spread, and are left out so that the same job
written elsewhere, on other machines or with other workers gives byte-identical output.
"""

from __future__ import annotations

import dataclasses
import re

from pipeline.core.options import option, recorded
from pipeline.core.subsets import PILE_SUBSETS, check_subset_names, parse_epochs, parse_exclude, parse_subsets
from pipeline.tokenize.engines import BACKENDS

_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")
REMAINDER_POLICIES = ("pad", "drop")
CORRUPT_FILE_POLICIES = ("fail", "skip")
VERIFY_TOKENIZER_MODES = ("off", "dead_letter", "fail")
FAN_OUT_CHOICES = ("auto", "yes", "no")  # pipeline/beam/execution.py


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """Everything that decides the output bytes (plus where things are and how the work spreads)."""

    inputs: tuple[str, ...] = option(
        help="globs or fsspec URLs of .jsonl.zst/.jsonl.gz/.jsonl files (local, EFS, s3://); several "
        "after one --input, or --input repeated", many=True, metavar="PATTERN", flag="--input")
    output_dir: str = option(help="local path, EFS mount or s3:// URL", metavar="DIR", recorded=False)
    tokenizer_model: str = option(help="SentencePiece .model (Llama-2's tokenizer.model works)", metavar="FILE")
    seq_len: int = option(2048, help="label positions per record; records hold seq_len + 1 tokens")
    shard_size_mb: float = option(1024.0, help="upper bound per shard in MiB (+ one record)")
    split: str = option("train", help="shard name prefix: train-00000-of-00042.tfrecord")
    subsets: tuple[str, ...] = option(
        PILE_SUBSETS, parse=parse_subsets, metavar="SUBSETS", shown_default="all",
        help="'all', 'uncopyrighted' (drops Books3, BookCorpus2, OpenSubtitles, YoutubeSubtitles, "
        "OpenWebText2) or a comma list of pile_set_name values; others are counted as not selected")
    exclude_subsets: tuple[str, ...] = option(
        (), parse=parse_exclude, metavar="SUBSETS", recorded=False,
        help="comma list of subsets to leave out of the --subsets selection")
    epochs: tuple[tuple[str, float], ...] = option(
        (), parse=parse_epochs, metavar="SPEC",
        help="per-subset epochs: 'pile_paper' (Gao et al. 2020, Table 1) or 'Name=2,Other=1.5'; "
        "fractional epochs pick documents by a hash of (seed, file, line); unnamed subsets get 1")
    seed: int = option(0, help="seed of the global shuffle and of fractional epochs")
    add_bos: bool = option(False, help="BOS before every document (the model's id, or --bos_id)")
    add_eos: bool = option(True, help="EOS after every document (the model's id, or --eos_id)")
    bos_id: int | None = option(None, help="BOS id instead of the model's")
    eos_id: int | None = option(None, help="EOS id instead of the model's")
    remainder: str = option("pad", choices=REMAINDER_POLICIES,
                            help="the job's one partial record: pad (marked by valid_labels) or drop")
    document_boundaries: bool = option(False, help="also write seqio-style segment_ids and positions")
    provenance: bool = option(False, recorded=False,
                              help="also write provenance/: each record's source spans (file, line, tokens), "
                              "for `pile-pipeline provenance`; the shards are the same bytes")
    chunk_mb: float = option(4.0, help="decompressed MiB per unit of work (part of the output's identity)")
    max_line_mb: float = option(64.0, help="longer lines are dead-lettered without being held in memory")
    on_corrupt_file: str = option(
        "fail", choices=CORRUPT_FILE_POLICIES,
        help="a truncated or corrupt compressed file fails the job (fail) or keeps the lines read "
        "before the damage and is recorded in the manifest (skip)")
    tokenizer_backend: str = option(
        "sentencepiece", choices=BACKENDS,
        help="gigatoken, kitoken or auto: faster engines, used only when their ids equal SentencePiece's")
    verify_tokenizer: str = option(
        "off", choices=VERIFY_TOKENIZER_MODES, const="dead_letter",
        help="also run SentencePiece on every document and dead-letter (or fail on) any mismatch")
    overwrite: bool = option(False, recorded=False,
                             help="replace a previous output of this pipeline in --output_dir")
    fan_out: str = option(
        "auto", choices=FAN_OUT_CHOICES, recorded=False,
        help="shuffle chunks to any worker (yes), give each worker whole files (no), or auto; the "
        "output is the same either way")
    tokenizer_threads: int | None = option(
        None, recorded=False,
        help="threads per tokenizer batch (default: cores / workers on DirectRunner, 1 elsewhere)")

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
        check_subset_names(self.exclude_subsets, "--exclude_subsets")
        if self.exclude_subsets:
            # Normalized here so that the config (and the manifest) holds the selection itself.
            chosen = set(self.subsets) - set(self.exclude_subsets)
            object.__setattr__(self, "subsets", tuple(s for s in PILE_SUBSETS if s in chosen))
            object.__setattr__(self, "exclude_subsets", ())
        if not self.subsets:
            raise ValueError("The subset selection is empty: check --subsets and --exclude_subsets")
        check_subset_names([name for name, _ in self.epochs], "--epochs")
        for name, value in self.epochs:
            if not 0 <= value <= 100:
                raise ValueError(f"--epochs: {name}={value} must be within [0, 100]")
        for name, choices in (("remainder", REMAINDER_POLICIES), ("on_corrupt_file", CORRUPT_FILE_POLICIES),
                              ("tokenizer_backend", BACKENDS), ("verify_tokenizer", VERIFY_TOKENIZER_MODES),
                              ("fan_out", FAN_OUT_CHOICES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"--{name} must be one of {', '.join(choices)}; got {getattr(self, name)!r}")
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
        """The recorded options, JSON-ready, for the manifest (see the module docstring)."""
        out = recorded(self)
        out["inputs"] = list(self.inputs)
        out["subsets"] = list(self.subsets)
        out["epochs"] = dict(self.epochs)
        return out
