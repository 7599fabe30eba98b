"""Duplicates and eval overlap removed before tokenizing: `DedupOptions` of `pile-pipeline run` (docs/dedup.md).

The group is recorded in the manifest only when it is on (`--dedup` or `--decontaminate`), so that
a job without them keeps its manifest's bytes.
"""

from __future__ import annotations

import dataclasses

from pipeline.config.selection import SEED_BOUNDS
from pipeline.core.ngrams import NORMALIZATIONS
from pipeline.core.option_groups import OptionGroup
from pipeline.core.options import Bounds, option
from pipeline.io.urls import redact_url

DEDUP_MODES = ("none", "exact", "near")
MAX_PERMUTATIONS = 4096
# An n-gram folds its words' hashes one pass at a time: its cost per document grows with n.
NGRAM_BOUNDS = Bounds(1, 256, why="each n-gram folds n word hashes, one pass over the document each")
PERMUTATION_BOUNDS = Bounds(1, MAX_PERMUTATIONS, why="a signature block holds 2048 shingles x --minhash_num_perm "
                            "8-byte values (64 MiB at 4096) on every worker")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedupOptions(OptionGroup):
    """--dedup (exact, near: MinHash LSH and star rounds) and --decontaminate (eval sets' word n-grams)."""

    title = "dedup and decontamination"

    dedup: str = option(
        "none", choices=DEDUP_MODES,
        help="remove duplicate documents before tokenizing and epochs, keeping the first in input order: exact "
        "(identical text after --dedup_normalization) or near (exact, then MinHash LSH); each removal is listed "
        "in removed/ (docs/dedup.md)")
    dedup_normalization: str = option(
        "nfc_whitespace", choices=NORMALIZATIONS,
        help="text normalization before exact dedup: Unicode NFC with whitespace runs collapsed, NFC, or none")
    minhash_ngram: int = option(5, bounds=NGRAM_BOUNDS, help="--dedup near: word n-grams of the MinHash shingles")
    minhash_num_perm: int = option(128, bounds=PERMUTATION_BOUNDS, help="--dedup near: MinHash permutations")
    minhash_bands: int = option(7, bounds=PERMUTATION_BOUNDS,
                                help="--dedup near: LSH bands (7 x 18 rows: a Jaccard threshold of ~0.87)")
    minhash_rows: int = option(18, bounds=PERMUTATION_BOUNDS,
                               help="--dedup near: rows per LSH band (bands x rows <= --minhash_num_perm)")
    minhash_seed: int = option(1, bounds=SEED_BOUNDS, help="--dedup near: seed of the MinHash hash functions")
    dedup_verify_jaccard: float | None = option(
        None, metavar="J", shown_default="none: no check",
        bounds=Bounds(0, 1, above=True, why="a Jaccard similarity is at most 1",
                      low_why="a Jaccard similarity above 0 (leave the flag out for no check)"),
        help="--dedup near: join a candidate pair only if its true shingle Jaccard reaches J (two more shuffles)")
    dedup_rounds: int = option(
        8, bounds=Bounds(1, 64, why="each round adds shuffles of its own to the job's graph"),
        help="--dedup near: large-star/small-star rounds (the job fails naming this flag if the clusters did not "
        "converge)")
    decontaminate: tuple[str, ...] = option(
        (), many=True, metavar="EVAL_FILES", record=lambda urls: [redact_url(u) for u in urls],
        help="globs of eval sets (JSON lines with --decontam_text_key, or .txt files, one text each): a document "
        "sharing a --decontam_ngram word n-gram (lower-cased) with any is removed (listed in removed/)")
    decontam_text_key: str = option("text", metavar="KEY", help="the text's key in the eval JSON lines")
    decontam_ngram: int = option(13, bounds=NGRAM_BOUNDS,
                                 help="--decontaminate: words per n-gram (13: GPT-3's and the Pile paper's)")
    decontam_cut: bool = option(False, help="--decontaminate: keep the document without the overlapping spans "
                                "(tokenized cut) instead of removing it")
    decontam_max_ngrams: int = option(
        50_000_000, bounds=Bounds(1, 1 << 31, why="every worker holds them, 10 bytes each (20 GiB at 2**31)"),
        help="--decontaminate: most distinct eval n-grams (10 bytes each, held by every worker)")

    def check(self) -> None:
        """LSH bands within the signature; --decontam_cut only with --decontaminate."""
        if self.minhash_bands * self.minhash_rows > self.minhash_num_perm:
            raise ValueError(f"--minhash_bands x --minhash_rows ({self.minhash_bands} x {self.minhash_rows}) must be "
                             f"at most --minhash_num_perm ({self.minhash_num_perm})")
        if self.decontam_cut and not self.decontaminate:
            raise ValueError("--decontam_cut needs --decontaminate EVAL_FILES")

    def recorded_when(self) -> bool:
        """Only when dedup or decontamination is on."""
        return self.dedup_enabled

    @property
    def dedup_enabled(self) -> bool:
        """Whether the job removes duplicates or eval overlap before tokenizing (pipeline/beam/dedup/stage.py)."""
        return self.dedup != "none" or bool(self.decontaminate)
