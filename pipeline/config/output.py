"""Where the output goes and what it is: `OutputOptions` of `pile-pipeline run` (format, shards, extras)."""

from __future__ import annotations

import dataclasses
import re

from pipeline.core.option_groups import OptionGroup
from pipeline.core.options import Bounds, option

OUTPUT_FORMATS = ("tfrecord", "megatron", "jsonl")  # pipeline/beam/formats.py's FORMATS
PACKED = "tfrecord"  # the one output of packed records (the packing options are recorded for it alone)
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")
MAX_SHARD_MB = 5 << 20  # 5 TiB: the largest object S3 and Google Cloud Storage hold


@dataclasses.dataclass(frozen=True, kw_only=True)
class OutputOptions(OptionGroup):
    """--output_dir, the output format, the shards' size and names, and what else is written beside them."""

    title = "output"

    output_dir: str = option(help="local path, EFS mount or s3:// URL", metavar="DIR", recorded=False)
    overwrite: bool = option(False, recorded=False,
                             help="replace a previous output of this pipeline in --output_dir")
    # Recorded where the output is not TFRecords (whose manifest says so by its format alone, and
    # keeps its bytes); --per_subset only where it changes a Megatron output's files.
    output_format: str = option(
        "tfrecord", choices=OUTPUT_FORMATS, recorded=lambda config: config.output_format != PACKED,
        help="tfrecord: packed records for the tf.data reader; megatron: Megatron's indexed dataset "
        "(.bin + .idx, one document per sequence) for Megatron-LM and NeMo (docs/megatron.md); jsonl: the kept "
        "documents' cleaned text as zstd-compressed JSON lines for datasets, datatrove and NeMo Curator, "
        "tokenized only to count tokens, with --tokenizer_model (docs/jsonl.md)")
    per_subset: bool = option(
        False, recorded=lambda config: config.output_format == "megatron",
        help="megatron: separate .bin/.idx files per subset, so that a blend can weigh subsets "
        "(pile-pipeline data-path --epochs pile_paper); tfrecord: one output per subset in OUT/<subset> and "
        "OUT/mixture.json for tfdata.make_dataset, --epochs as its weights (docs/reader.md)")
    split_by: str = option(
        "", metavar="LABEL", recorded=lambda config: bool(config.split_by), shown_default="none",
        help="one TFRecord output per value of this label of a stage on (hf.int_score, fasttext.<label>, "
        "language) in OUT/<label>=<value>, documents without it in OUT/<label>=none, and OUT/mixture.json "
        "over them for tfdata.make_dataset; the stages run once per document (docs/classifiers.md)")
    shard_size_mb: float = option(
        1024.0, bounds=Bounds(0, MAX_SHARD_MB, above=True, why="5 TiB is the largest object S3 and GCS hold"),
        help="upper bound per shard in MiB (+ one record; jsonl: of JSON lines, before compression)")
    split: str = option("train", help="shard name prefix: train-00000-of-00042.tfrecord")
    provenance: bool = option(False, recorded=False,
                              help="also write provenance/: each record's source spans (file, line, tokens), "
                              "for `pile-pipeline provenance`; the shards are the same bytes")

    def check(self) -> None:
        """A non-empty --output_dir; a --split name of letters, digits and underscores."""
        if not self.output_dir.strip():
            raise ValueError("--output_dir is empty: give the output directory (a path or an s3:// URL)")
        if not _SPLIT_NAME.match(self.split):
            raise ValueError(f"--split {self.split!r}: use letters, digits and underscores only")

    @property
    def shard_bytes(self) -> int:
        """Shard size bound in bytes (at least one)."""
        return max(1, int(self.shard_size_mb * (1 << 20)))
