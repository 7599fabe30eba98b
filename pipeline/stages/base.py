"""The document-stage interface: one class per stage, a verdict per document.

    class ShortDocs(DocumentStage):
        name = "short_docs"                       # the `reason` of its removals, found by name
        Options = ShortDocsOptions                # a frozen dataclass of option() fields, or None

        def apply(self, doc: Doc) -> Remove | Keep | None:
            if len(doc.text) < self.options.short_min_chars:
                return Remove("too_short", {"chars": len(doc.text)})
            return None                           # kept as it is

A stage sees each document the subset selection and the stages before it kept (`Doc`, with the
text they left) and returns `Remove` (left out, listed in removed/), `Keep` (kept, maybe with a new
text, a cut record, tallies or labels) or None (kept unchanged). It must decide from the document
alone (and its seed, file and line), so that the same input gives the same output on any runner
and any number of workers.

Heavy state (a model, a spaCy pipeline) is loaded in `setup()`, once per worker, never in
`__init__`: the stage is pickled to the workers with its options only. `apply_many` lets a stage
decide a chunk's documents in one call (a vectorized model); the policy always calls it.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from pipeline.core.documents import Line

REMOVED = "removed"  # counts_as: listed in removed/, counted per subset under removed and removed_tokens
FILTERED = "filtered"  # counts_as: counted per subset under filtered, not listed (built-in rules)
# A removed/ record's own keys: a stage's extra fields may not use them.
RECORD_KEYS = frozenset({"file", "file_index", "line", "subset", "reason", "rule", "id"})
DIGITS = 6  # decimals of a measured value in a record: the same bytes on every run and worker


def measured(value, threshold=None) -> dict:
    """A record's deciding value: {"value": what the rule measured, "threshold": what it was compared with}.

    Floats are rounded to DIGITS decimals; the threshold is left out where the rule has none.
    """
    out = {"value": round(value, DIGITS) if isinstance(value, float) else value}
    if threshold is not None:
        out["threshold"] = threshold
    return out


@dataclasses.dataclass(frozen=True)
class Doc:
    """What a stage sees of one document."""

    text: str  # as the stages before this one left it
    subset: str
    file_index: int  # the input file's index: seeded decisions hash (seed, file_index, line)
    line: int  # 1-based line (row) number in that file
    # The input line itself, for a stage that reads another field of it (a URL); not part of equality.
    raw: Line | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class Remove:
    """The document is left out; removed/ lists it with reason = the stage's name and this rule."""

    rule: str  # the precise reason (datatrove's reason string for its filters)
    fields: Mapping = dataclasses.field(default_factory=dict)  # extra JSON fields of its removed/ record

    def __post_init__(self):
        _check_fields(self.fields)


@dataclasses.dataclass(frozen=True)
class Keep:
    """The document is kept, maybe changed.

    text: its new text (None: unchanged). cut_rule: list it in removed/ as reason `<name>_cut` with
    this rule and `fields` (a cut is not a removal: counted per subset under `cut`). tally: counts
    added per subset under `tallies[<name>]`. labels: annotations ({"language": "en"}) counted per
    subset with the documents' tokens under `labels[key][value]`.
    """

    text: str | None = None
    cut_rule: str | None = None
    fields: Mapping = dataclasses.field(default_factory=dict)
    tally: Mapping = dataclasses.field(default_factory=dict)
    labels: Mapping = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        _check_fields(self.fields)
        if self.fields and self.cut_rule is None:
            raise ValueError("Keep(fields=...) describes a cut record: give cut_rule too")


def _check_fields(fields: Mapping) -> None:
    clash = sorted(RECORD_KEYS & set(fields))
    if clash:
        raise ValueError(f"a stage's record fields may not be named {clash}: the record's own keys")


class DocumentStage(abc.ABC):
    """One rule applied to every document the stages before it kept (see the module docstring).

    name: the registry's name, the `reason` of its removals and the key of its counts.
    Options: a frozen dataclass of `core.options.option` fields, every one with a default (its flags
    are `--<field name>`), or None. counts_as: REMOVED (listed in removed/) or FILTERED (counted only;
    the built-in rules). builtin: run by the policy itself, never named in --filters.
    """

    name: ClassVar[str]
    Options: ClassVar[type | None] = None
    counts_as: ClassVar[str] = REMOVED
    builtin: ClassVar[bool] = False

    def __init__(self, options=None):
        if options is None and self.Options is not None:
            options = self.Options()
        if self.Options is not None and not isinstance(options, self.Options):
            raise TypeError(f"stage {self.name}: options must be a {self.Options.__name__}, "
                            f"got {type(options).__name__}")
        self.options = options

    @classmethod
    def switched_on(cls, options) -> bool:  # noqa: ARG003 -- a stage's own options may turn it on
        """Whether these options turn the stage on without naming it in --filters (`--languages en`)."""
        return False

    def check(self) -> None:  # noqa: B027 -- optional: most stages need nothing outside themselves
        """Refuse, in the driver before the job starts, what would fail on every worker.

        A package or a model file missing: raise a ValueError naming the flag (the command exits 2).
        """

    def setup(self) -> None:  # noqa: B027 -- optional: most stages have no state to load
        """Load heavy state once per worker (before the first document)."""

    def line_keys(self) -> tuple[tuple[str, str], ...]:
        """(flag, dotted key) of each value besides the text that this stage reads from the input line (`Doc.raw`).

        A Parquet or Arrow input's rows then carry those columns too (pipeline/io/columnar.py).
        """
        return ()

    def labels(self) -> dict[str, tuple[str, ...] | None]:
        """The label keys of the documents this stage keeps, each with its values when known before the run.

        None: the values are found as the documents come. Asked in the driver after `check()`:
        `--split_by` names one of these keys (pipeline/format/buckets.py).
        """
        return {}

    @abc.abstractmethod
    def apply(self, doc: Doc) -> Remove | Keep | None:
        """The verdict on one document: Remove, Keep, or None (kept unchanged)."""

    def apply_many(self, docs: list[Doc]) -> list[Remove | Keep | None]:
        """The verdicts on a chunk's documents, in order (one call per chunk; default: `apply` each)."""
        return [self.apply(doc) for doc in docs]

    @property
    def cut_reason(self) -> str:
        """The reason of this stage's cut records."""
        return f"{self.name}_cut"
