"""The job's configuration: one frozen, validated dataclass; every `pipeline.run` flag is declared here.

The options marked `recorded` decide the output's bytes and go into the manifest's `config`; the
others say where things are or how the work is spread, and are left out so that the same job
written elsewhere, on other machines or with other workers gives byte-identical output.
"""

from __future__ import annotations

import dataclasses
import os
import re

from pipeline.config.inputs import SUBSET_NAME_CHOICES, DocumentLayout
from pipeline.config.stages import StageChoice
from pipeline.core import best_fit
from pipeline.core.documents import Schema
from pipeline.core.ngrams import NORMALIZATIONS
from pipeline.core.options import option, recorded
from pipeline.core.subsets import (
    ALL_NAMES,
    Selection,
    check_subset_names,
    parse_epochs,
    parse_names,
    parse_selection,
    resolve_selection,
)
from pipeline.format.megatron import subset_slug
from pipeline.io.inputs import ChunkSizes
from pipeline.io.urls import is_local_url, redact_url
from pipeline.stages.policy import DocumentPolicy
from pipeline.tokenize.kinds.registry import BACKENDS  # which apply depends on the kind (pipeline/beam/preflight.py)

_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")
REMAINDER_POLICIES = ("pad", "drop")
CORRUPT_FILE_POLICIES = ("fail", "skip")
VERIFY_TOKENIZER_MODES = ("off", "dead_letter", "fail")
FAN_OUT_CHOICES = ("auto", "yes", "no")  # pipeline/beam/execution.py
OUTPUT_FORMATS = ("tfrecord", "megatron")
PACKING_MODES = ("concat", "best_fit")  # pipeline/format/records.py's layouts
_BEST_FIT_ONLY = ("packing", "packing_window")  # recorded only for best_fit: concat manifests keep their bytes
DEDUP_MODES = ("none", "exact", "near")
# Recorded only when dedup or decontamination is on, so that a job without them keeps its manifest's bytes.
DEDUP_OPTIONS = ("dedup", "dedup_normalization", "minhash_ngram", "minhash_num_perm", "minhash_bands", "minhash_rows",
                 "minhash_seed", "dedup_verify_jaccard", "dedup_rounds", "decontaminate", "decontam_text_key",
                 "decontam_ngram", "decontam_cut", "decontam_max_ngrams")


@dataclasses.dataclass(frozen=True)
class PipelineConfig(DocumentLayout, StageChoice, ChunkSizes):
    """Everything that decides the output bytes (plus where things are and how the work spreads)."""

    inputs: tuple[str, ...] = option(
        help="globs or fsspec URLs of .jsonl[.zst|.gz], .parquet or .arrow files, or datasets.save_to_disk "
        "folders (local, EFS, s3://); several after one --input, or --input repeated", many=True,
        metavar="PATTERN", flag="--input")
    output_dir: str = option(help="local path, EFS mount or s3:// URL", metavar="DIR", recorded=False)
    tokenizer_model: str = option(
        help="the tokenizer, its kind read from the file: a SentencePiece .model (Llama-2's tokenizer.model), a "
        "Hugging Face tokenizer.json or a directory holding one (GPT-NeoX-20B, Llama-3), or a tiktoken BPE ranks "
        "file with its pattern and specials in <file>.json or --tiktoken_encoding (docs/tokenizers.md)",
        metavar="FILE")
    # Recorded by the manifest's `tokenizer` (its encoding, pattern and pad id), not in `config`.
    tiktoken_encoding: str | None = option(
        None, recorded=False, metavar="NAME", shown_default="the JSON beside the ranks file",
        help="a tiktoken ranks file's built-in split pattern and special tokens: cl100k_base, o200k_base, llama3, "
        "r50k_base (the ranks are still read from --tokenizer_model; nothing is downloaded)")
    seq_len: int = option(2048, help="label positions per record; records hold seq_len + 1 tokens")
    shard_size_mb: float = option(1024.0, help="upper bound per shard in MiB (+ one record)")
    split: str = option("train", help="shard name prefix: train-00000-of-00042.tfrecord")
    subsets: tuple[str, ...] = option(
        ("all",), parse=parse_selection, metavar="SUBSETS", shown_default="all",
        help="'all', 'uncopyrighted' (drops Books3, BookCorpus2, OpenSubtitles, YoutubeSubtitles, "
        "OpenWebText2) or a comma list of subset names; others are counted as not selected")
    exclude_subsets: tuple[str, ...] = option(
        (), parse=parse_names, metavar="SUBSETS",
        help="comma list of subsets to leave out of the --subsets selection")
    epochs: tuple[tuple[str, float], ...] = option(
        (), parse=parse_epochs, metavar="SPEC",
        help="per-subset epochs: 'pile_paper' (Gao et al. 2020, Table 1) or 'Name=2,Other=1.5'; "
        "fractional epochs pick documents by a hash of (seed, file, line); unnamed subsets get 1")
    seed: int = option(0, help="seed of the global shuffle and of fractional epochs")
    add_bos: bool = option(False, help="BOS before every document (the model's id, or --bos_id)")
    add_eos: bool = option(True, help="EOS after every document (the model's id, or --eos_id)")
    bos_id: int | None = option(None, shown_default="the model's", help="BOS id instead of the model's")
    eos_id: int | None = option(None, shown_default="the model's", help="EOS id instead of the model's")
    allow_text_eos: bool = option(False, recorded=False,
                                  help="let --eos_id / --bos_id name an ordinary token, which text produces too (a "
                                  "model without a special one); by default only special/control tokens are taken")
    pad_id: int | None = option(None, recorded=False, shown_default="the model's, else the separator",
                                help="id of padded positions instead of the model's")
    remainder: str = option("pad", choices=REMAINDER_POLICIES,
                            help="the job's one partial record: pad (marked by valid_labels) or drop")
    document_boundaries: bool = option(False, help="also write seqio-style segment_ids and positions")
    packing: str = option(
        "concat", choices=PACKING_MODES,
        help="concat: documents joined and cut every seq_len labels; best_fit: whole documents packed by best fit "
        "decreasing, the rest padded and loss-masked (implies --document_boundaries; tfrecord only)")
    packing_window: int = option(
        best_fit.DEFAULT_WINDOW, metavar="N",
        help="best_fit: documents packed together per window (in input order); larger pads less and holds more")
    provenance: bool = option(False, recorded=False,
                              help="also write provenance/: each record's source spans (file, line, tokens), "
                              "for `pile-pipeline provenance`; the shards are the same bytes")
    chunk_mb: float = option(4.0, help="decompressed MiB per unit of work (part of the output's identity)")
    max_line_mb: float = option(64.0, help="longer lines are dead-lettered without being held in memory")
    on_corrupt_file: str = option(
        "fail", choices=CORRUPT_FILE_POLICIES,
        help="a truncated or corrupt compressed file fails the job (fail) or keeps the lines read "
        "before the damage and is recorded in the manifest (skip)")
    max_dead_letter_fraction: float = option(
        0.05, recorded=False,
        help="fail the job, writing no manifest, when more than this share of the lines are dead letters "
        "(they are still written, to be looked at); 1 accepts any share. A job with no records always fails")
    tokenizer_backend: str | None = option(
        None, choices=BACKENDS, shown_default="the kind's own library: sentencepiece, tokenizers or tiktoken",
        help="auto or a fast engine, used only when its ids equal the kind's own library's: gigatoken, kitoken "
        "(SentencePiece); tokenizers_batch, gigatoken (tokenizer.json); tiktoken_batch (tiktoken)")
    verify_tokenizer: str = option(
        "off", choices=VERIFY_TOKENIZER_MODES, const="dead_letter",
        help="also run the reference (the kind's own library) on every document and dead-letter (or fail on) "
        "any mismatch")
    overwrite: bool = option(False, recorded=False,
                             help="replace a previous output of this pipeline in --output_dir")
    fan_out: str = option(
        "auto", choices=FAN_OUT_CHOICES, recorded=False,
        help="shuffle chunks to any worker (yes), give each worker whole files (no), or auto: fan out on "
        "distributed runners; on DirectRunner whole files or stripes of them, by estimated cost. The output is "
        "the same either way")
    tokenizer_threads: int | None = option(
        None, recorded=False, shown_default="cores / workers on DirectRunner, 1 elsewhere",
        help="threads per tokenizer batch")
    progress_every: float = option(
        10.0, recorded=False,
        help="seconds between progress lines on DirectRunner (0: none); a progress bar instead on a terminal")
    # Not in `recorded`: a TFRecord output does not depend on them; the Megatron manifest records
    # them itself (pipeline/beam/megatron.py).
    output_format: str = option(
        "tfrecord", choices=OUTPUT_FORMATS, recorded=False,
        help="tfrecord: packed records for the tf.data reader; megatron: Megatron's indexed dataset "
        "(.bin + .idx, one document per sequence) for Megatron-LM and NeMo (docs/megatron.md)")
    per_subset: bool = option(
        False, recorded=False,
        help="megatron: separate .bin/.idx files per subset, so that a blend can weigh subsets "
        "(pile-pipeline data-path --epochs pile_paper); tfrecord: one output per subset in OUT/<subset> and "
        "OUT/mixture.json for tfdata.make_dataset, --epochs as its weights (docs/reader.md)")
    dedup: str = option(
        "none", choices=DEDUP_MODES,
        help="remove duplicate documents before tokenizing and epochs, keeping the first in input order: exact "
        "(identical text after --dedup_normalization) or near (exact, then MinHash LSH); each removal is listed "
        "in removed/ (docs/dedup.md)")
    dedup_normalization: str = option(
        "nfc_whitespace", choices=NORMALIZATIONS,
        help="text normalization before exact dedup: Unicode NFC with whitespace runs collapsed, NFC, or none")
    minhash_ngram: int = option(5, help="--dedup near: word n-grams of the MinHash shingles")
    minhash_num_perm: int = option(128, help="--dedup near: MinHash permutations")
    minhash_bands: int = option(7, help="--dedup near: LSH bands (7 x 18 rows: a Jaccard threshold of ~0.87)")
    minhash_rows: int = option(18, help="--dedup near: rows per LSH band (bands x rows <= --minhash_num_perm)")
    minhash_seed: int = option(1, help="--dedup near: seed of the MinHash hash functions")
    dedup_verify_jaccard: float | None = option(
        None, metavar="J", shown_default="none: no check",
        help="--dedup near: join a candidate pair only if its true shingle Jaccard reaches J (two more shuffles)")
    dedup_rounds: int = option(8, help="--dedup near: large-star/small-star rounds (the job fails naming this "
                               "flag if the clusters did not converge)")
    decontaminate: tuple[str, ...] = option(
        (), many=True, metavar="EVAL_FILES",
        help="globs of eval sets (JSON lines with --decontam_text_key, or .txt files, one text each): a document "
        "sharing a --decontam_ngram word n-gram (lower-cased) with any is removed (listed in removed/)")
    decontam_text_key: str = option("text", metavar="KEY", help="the text's key in the eval JSON lines")
    decontam_ngram: int = option(13, help="--decontaminate: words per n-gram (13: GPT-3's and the Pile paper's)")
    decontam_cut: bool = option(False, help="--decontaminate: keep the document without the overlapping spans "
                                "(tokenized cut) instead of removing it")
    decontam_max_ngrams: int = option(
        50_000_000, help="--decontaminate: most distinct eval n-grams (10 bytes each, held by every worker)")
    # Recorded only when given, so that a job without it keeps its manifest's bytes.
    id_key: str | None = option(
        None, metavar="KEY", shown_default="none",
        help="the key (a dotted path) of each document's own id: its value (a string of at most 256 characters, or "
        "an integer) is copied into the document's removed/ and dead-letter records as `id`")

    def __post_init__(self):
        self.resolve_subset_names()
        if not self.inputs:
            raise ValueError("No --input given: pass one or more globs or URLs of .jsonl[.zst|.gz] files")
        if not self.output_dir.strip():
            raise ValueError("--output_dir is empty: give the output directory (a path or an s3:// URL)")
        for flag, value in (("--bos_id", self.bos_id), ("--eos_id", self.eos_id)):
            if value is not None and value < 0:
                raise ValueError(f"{flag} {value}: a token id is >= 0 (leave the flag out to use the model's)")
        if not 1 <= self.seq_len <= 1 << 20:
            raise ValueError(f"--seq_len must be in [1, 1048576], got {self.seq_len}")
        if self.shard_size_mb <= 0:
            raise ValueError("--shard_size_mb must be > 0")
        if not _SPLIT_NAME.match(self.split):
            raise ValueError(f"--split {self.split!r}: use letters, digits and underscores only")
        for name, choices in (("remainder", REMAINDER_POLICIES), ("on_corrupt_file", CORRUPT_FILE_POLICIES),
                              ("verify_tokenizer", VERIFY_TOKENIZER_MODES),
                              ("fan_out", FAN_OUT_CHOICES), ("subset_names", SUBSET_NAME_CHOICES),
                              ("packing", PACKING_MODES), ("dedup", DEDUP_MODES),
                              ("dedup_normalization", NORMALIZATIONS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"--{name} must be one of {', '.join(choices)}; got {getattr(self, name)!r}")
        if self.tokenizer_backend is not None and self.tokenizer_backend not in BACKENDS:
            raise ValueError(f"--tokenizer_backend must be one of {', '.join(BACKENDS)}; "
                             f"got {self.tokenizer_backend!r}")
        any_names = self.subset_names == "any"
        # Normalized here so that the config (and the manifest) holds the selection itself.
        subsets, exclude = resolve_selection(self.subsets, self.exclude_subsets, any_names)
        object.__setattr__(self, "subsets", subsets)
        object.__setattr__(self, "exclude_subsets", exclude)
        check_subset_names([name for name, _ in self.epochs], "--epochs", any_names)
        self.schema  # noqa: B018 -- checks the keys and --default_subset
        for name, value in self.epochs:
            if not 0 <= value <= 100:
                raise ValueError(f"--epochs: {name}={value} must be within [0, 100]")
        if self.tokenizer_threads is not None and self.tokenizer_threads < 1:
            raise ValueError("--tokenizer_threads must be at least 1")
        self.check_chunk_sizes()
        if not 0 <= self.max_dead_letter_fraction <= 1:
            raise ValueError(f"--max_dead_letter_fraction must be within [0, 1], got {self.max_dead_letter_fraction}")
        if self.progress_every < 0:
            raise ValueError("--progress_every must be >= 0 (0: no progress lines)")
        if self.output_format not in OUTPUT_FORMATS:
            raise ValueError(f"--output_format must be one of {', '.join(OUTPUT_FORMATS)}; got {self.output_format!r}")
        if self.per_subset and self.output_format == "tfrecord":
            per_subset_outputs(self)  # checks that the subsets are named and their directories distinct
        if self.packing_window < 1:
            raise ValueError(f"--packing_window must be at least 1, got {self.packing_window}")
        if self.packing == "best_fit":
            if self.output_format == "megatron":
                raise ValueError("--packing best_fit is for packed TFRecords: the Megatron output keeps one "
                                 "document per sequence (Megatron's GPTDataset does its own packing)")
            # A best_fit record is read through its segment ids (0: padding), so they are always written.
            object.__setattr__(self, "document_boundaries", True)
        if self.document_boundaries and self.output_format == "megatron":
            raise ValueError("--document_boundaries is for packed TFRecords: the Megatron output keeps one "
                             "document per sequence (Megatron's GPTDataset packs and can reset positions)")

        self._check_dedup()
        self.check_stages()

    def _check_dedup(self):
        for name in ("minhash_ngram", "minhash_num_perm", "minhash_bands", "minhash_rows", "dedup_rounds",
                     "decontam_ngram", "decontam_max_ngrams"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.minhash_bands * self.minhash_rows > self.minhash_num_perm:
            raise ValueError(f"--minhash_bands x --minhash_rows ({self.minhash_bands} x {self.minhash_rows}) must be "
                             f"at most --minhash_num_perm ({self.minhash_num_perm})")
        if self.dedup_verify_jaccard is not None and not 0 < self.dedup_verify_jaccard <= 1:
            raise ValueError(f"--dedup_verify_jaccard must be in (0, 1], got {self.dedup_verify_jaccard}")
        if self.decontam_cut and not self.decontaminate:
            raise ValueError("--decontam_cut needs --decontaminate EVAL_FILES")

    @property
    def schema(self) -> Schema:
        """Where each line keeps its text, subset name and id, and which names are accepted."""
        return dataclasses.replace(DocumentLayout.schema.fget(self), id_key=self.id_key)

    def document_policy(self) -> DocumentPolicy:
        """Validation, subset selection and the configured stages, as every DoFn reading documents applies them."""
        return DocumentPolicy(self.schema, self.max_line_bytes, self.selection(), self.configured_stages())

    @property
    def lists_removed(self) -> bool:
        """Whether the job lists removed documents in removed/ (dedup, decontamination or a removing stage)."""
        return self.dedup_enabled or self.document_policy().lists_removed

    @property
    def dedup_enabled(self) -> bool:
        """Whether the job removes duplicates or eval overlap before tokenizing (pipeline/beam/dedup_stage.py)."""
        return self.dedup != "none" or bool(self.decontaminate)

    def selection(self) -> Selection:
        """The selected subsets: `name in config.selection()`."""
        every = self.subsets == (ALL_NAMES,)
        return Selection(frozenset(() if every else self.subsets), every, frozenset(self.exclude_subsets))

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
        if self.packing == "concat":
            for name in _BEST_FIT_ONLY:
                del out[name]
        out["inputs"] = [redact_url(u) for u in self.inputs]  # a presigned URL's signature stays out
        out["tokenizer_model"] = recorded_location(self.tokenizer_model)
        out["subsets"] = list(self.subsets)
        out["exclude_subsets"] = list(self.exclude_subsets)
        out["epochs"] = dict(self.epochs)
        if self.dedup_enabled:
            out["decontaminate"] = [redact_url(u) for u in self.decontaminate]
        else:
            for name in DEDUP_OPTIONS:
                out.pop(name)
        if self.id_key is None:
            out.pop("id_key")
        out.update(self.stages_json())
        return out


def recorded_location(path: str) -> str:
    """A location as the manifest records it: a local path absolute (`show` finds it from anywhere), a URL redacted."""
    if "://" not in path and is_local_url(path) and path:
        return os.path.abspath(os.path.expanduser(path))
    return redact_url(path)


def per_subset_outputs(config: PipelineConfig) -> tuple[tuple[str, str], ...]:
    """(subset, directory name) of each output of a `--per_subset` TFRecord job, in the selection's order."""
    if config.subsets == (ALL_NAMES,):
        raise ValueError("--per_subset with --subset_names any needs the subsets named: --subsets 'A,B,...' "
                         "(each gets its own output directory, so the job must know them before it reads)")
    pairs = tuple((name, subset_slug(name)) for name in config.subsets)
    slugs = [slug for _, slug in pairs]
    clashes = sorted({n for n, slug in pairs if slugs.count(slug) > 1})
    if clashes:
        raise ValueError(f"--per_subset: subsets {clashes} would share an output directory name; rename them")
    return pairs
