"""The rules every job applies: subset selection and empty text, then dedup's verdicts on the chunk.

`subset_not_selected` and `empty_text` are counted per subset under `filtered` and never listed in
removed/ (a default job writes no removed/ files). `DedupVerdicts` is the last stage of the policy
with --dedup / --decontaminate: it is fed the chunk's removed records by line (made by
pipeline/beam/dedup/transform.py, joined to the chunk by pipeline/beam/dedup/stage.py) and passes each on as
it is: a `contaminated_cut` document is kept with its text cut, any other record removes it.
"""

from __future__ import annotations

from pipeline.core import dedup
from pipeline.stages.base import FILTERED, Doc, DocumentStage, Remove

NOT_SELECTED = "subset_not_selected"
EMPTY_TEXT = "empty_text"

# What dedup and decontamination write as a record's reason (pipeline/beam/dedup/transform.py).
DEDUP_REASONS = ("duplicate_exact", "duplicate_near", "contaminated", dedup.CUT)


class SubsetSelection(DocumentStage):
    """A document of a subset that --subsets / --exclude_subsets leave out."""

    name = NOT_SELECTED
    counts_as = FILTERED
    builtin = True

    def __init__(self, selected):
        """`selected`: anything that answers `subset in selected` (a set, a `subsets.Selection`)."""
        super().__init__()
        self.selected = selected

    def apply(self, doc: Doc) -> Remove | None:
        """Filtered unless its subset is selected."""
        return None if self.reason(doc.text, doc.subset) is None else Remove(NOT_SELECTED)

    def reason(self, text: str, subset: str) -> str | None:  # noqa: ARG002 -- the built-in rules' shape
        """NOT_SELECTED or None, without building a Doc (the policy's per-line path)."""
        return None if subset in self.selected else NOT_SELECTED


class EmptyText(DocumentStage):
    """A document whose text is empty or whitespace only."""

    name = EMPTY_TEXT
    counts_as = FILTERED
    builtin = True

    def apply(self, doc: Doc) -> Remove | None:
        """Filtered when there is nothing to tokenize."""
        return None if self.reason(doc.text, doc.subset) is None else Remove(EMPTY_TEXT)

    def reason(self, text: str, subset: str) -> str | None:  # noqa: ARG002 -- the built-in rules' shape
        """EMPTY_TEXT or None, without building a Doc (the policy's per-line path)."""
        # `not text.strip()` without copying a text that ends in whitespace
        return EMPTY_TEXT if not text or text.isspace() else None


class DedupVerdicts:
    """Dedup's and decontamination's removed records, applied to the documents they name.

    Not a `DocumentStage`: its verdicts come from the chunk's records, made by Beam steps over the
    whole input, not from the document alone.
    """

    reasons = DEDUP_REASONS

    @staticmethod
    def cut_text(text: str, record: dict) -> str:
        """A `contaminated_cut` document's text without the spans its record names."""
        return dedup.cut_text(text, record["spans"])

    @staticmethod
    def is_cut(record: dict) -> bool:
        """Whether the record keeps its document, cut (`contaminated_cut`), rather than removing it."""
        return record["reason"] == dedup.CUT
