"""Where a corpus's documents are, and how they are read: `DocumentLayout` and the job's `InputOptions`.

Every command that reads a corpus (`run`, `train-tokenizer`, `tokenizer-report`) takes the layout
(where each line keeps its text and subset name) by deriving its config from `DocumentLayout`; its
fields are keyword-only so that they can sit beside a command's required flags. `InputOptions` adds
the job's inputs and how they are cut and read (`pile-pipeline run`).
"""

from __future__ import annotations

import dataclasses

from pipeline.core.documents import Schema
from pipeline.core.option_groups import OptionGroup
from pipeline.core.options import Bounds, option
from pipeline.core.subsets import PILE_SUBSETS, suggest_name
from pipeline.io.inputs import MAX_LINE_MB, MAX_WINDOW, ChunkSizes
from pipeline.io.urls import redact_url

SUBSET_NAME_CHOICES = ("pile", "any")
CORRUPT_FILE_POLICIES = ("fail", "skip")
# The sizes a worker holds whole: a line of up to --max_line_mb (zstd's window is twice it) and a chunk.
MAX_LINE_BOUNDS = Bounds(0, MAX_LINE_MB, above=True, why=f"a zstd window of twice the longest line may be at most "
                         f"{MAX_WINDOW >> 20} MiB (zstd's limit)")
_SHARE = "a share of the lines, within [0, 1]"
CHUNK_BOUNDS = Bounds(0, MAX_LINE_MB, above=True, why="one worker holds a chunk whole, beside a line of up to "
                      "--max_line_mb and zstd's window (docs/operations.md)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DocumentLayout(OptionGroup):
    """--text_key, --subset_key, --subset_names, --default_subset and the Schema they make."""

    title = "your own JSON lines: where each line keeps its text and subset name"

    text_key: str = option("text", metavar="KEY",
                           help="the text's key in each JSON line, or column (a dotted path: doc.body)")
    subset_key: str = option("meta.pile_set_name", metavar="KEY",
                             help="the subset name's key, a dotted path; per-subset stats, selection and epochs use it")
    subset_names: str | None = option(
        None, choices=SUBSET_NAME_CHOICES,
        shown_default="pile; any when --default_subset names a subset of another corpus",
        help="pile: only the Pile's 22 names (others are dead letters, subset_unknown); any: any name")
    default_subset: str | None = option(
        None, metavar="NAME", shown_default="none: such lines are dead letters",
        help="the subset of a line without one (missing, null or empty); a name that neither is nor resembles "
        "a Pile name implies --subset_names any, unless that flag is given")

    def check(self) -> None:
        """Resolve --subset_names (so that configs and manifests record it) and check the keys and --default_subset."""
        self.resolve_subset_names()
        self.schema  # noqa: B018 -- checks the keys and --default_subset

    def _names(self) -> str:
        if self.subset_names is not None:
            return self.subset_names
        # Lines of a text alone (the commonest corpus) then run with one flag: --default_subset NAME. A
        # name close to a Pile name ('pile-cc') stays a mistake to report, with the name it resembles.
        name = self.default_subset
        own = name is not None and name not in PILE_SUBSETS and not suggest_name(name, PILE_SUBSETS)
        return "any" if own else "pile"

    def resolve_subset_names(self) -> None:
        """Set --subset_names when it was not given (`_names`), so that configs and manifests record it."""
        object.__setattr__(self, "subset_names", self._names())

    @property
    def any_names(self) -> bool:
        """Whether any subset name is accepted (`--subset_names any`, or implied by `--default_subset`)."""
        return self._names() == "any"

    @property
    def schema(self) -> Schema:
        """Where each line keeps its text and subset name, and which names are accepted."""
        if self._names() not in SUBSET_NAME_CHOICES:
            raise ValueError(f"--subset_names must be one of {', '.join(SUBSET_NAME_CHOICES)}; "
                             f"got {self.subset_names!r}")
        return Schema(self.text_key, self.subset_key, self.default_subset, self.any_names)


def _id_key_given(config) -> bool:
    return config.id_key is not None


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputOptions(DocumentLayout, ChunkSizes):
    """The job's inputs, their layout, each document's own id, and how the inputs are cut and read."""

    title = "inputs and bad input"

    inputs: tuple[str, ...] = option(
        help="globs or fsspec URLs of .jsonl[.zst|.gz], .parquet or .arrow files, or datasets.save_to_disk "
        "folders (local, EFS, s3://); several after one --input, or --input repeated", many=True,
        metavar="PATTERN", flag="--input", record=lambda urls: [redact_url(u) for u in urls])
    chunk_mb: float = option(4.0, bounds=CHUNK_BOUNDS,
                             help="decompressed MiB per unit of work (part of the output's identity)")
    max_line_mb: float = option(64.0, bounds=MAX_LINE_BOUNDS,
                                help="longer lines are dead-lettered without being held in memory")
    on_corrupt_file: str = option(
        "fail", choices=CORRUPT_FILE_POLICIES,
        help="a truncated or corrupt compressed file fails the job (fail) or keeps the lines read "
        "before the damage and is recorded in the manifest (skip)")
    max_dead_letter_fraction: float = option(
        0.05, recorded=False, bounds=Bounds(0, 1, why=_SHARE, low_why=_SHARE),
        help="fail the job, writing no manifest, when more than this share of the lines are dead letters "
        "(they are still written, to be looked at); 1 accepts any share. A job with no records always fails")
    # Recorded only when given, so that a job without it keeps its manifest's bytes.
    id_key: str | None = option(
        None, metavar="KEY", shown_default="none", recorded=_id_key_given,
        help="the key (a dotted path) of each document's own id: its value (a string of at most 256 characters, or "
        "an integer) is copied into the document's removed/ and dead-letter records as `id`")

    def check(self) -> None:
        """At least one --input."""
        if not self.inputs:
            raise ValueError("No --input given: pass one or more globs or URLs of .jsonl[.zst|.gz] files")

    @property
    def schema(self) -> Schema:
        """Where each line keeps its text, subset name and id, and which names are accepted."""
        return dataclasses.replace(DocumentLayout.schema.fget(self), id_key=self.id_key)
