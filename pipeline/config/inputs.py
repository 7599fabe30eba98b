"""The options that say where a corpus's documents keep their text and subset name, declared once.

Every command that reads a corpus (`run`, `train-tokenizer`, `tokenizer-report`) takes them by
deriving its config from `DocumentLayout`; its fields are keyword-only so that they can sit beside
a command's required flags.
"""

from __future__ import annotations

import dataclasses

from pipeline.core.documents import Schema
from pipeline.core.options import option
from pipeline.core.subsets import PILE_SUBSETS, suggest_name

SUBSET_NAME_CHOICES = ("pile", "any")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DocumentLayout:
    """--text_key, --subset_key, --subset_names, --default_subset and the Schema they make."""

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
