"""What the --split_by tests share: a labelling stage of their own (declared values or not), registered by them."""

from __future__ import annotations

import dataclasses

from pipeline.core.options import option
from pipeline.stages.base import DocumentStage, Keep, Remove


@dataclasses.dataclass(frozen=True)
class ShelfOptions:
    """The shelf stage's own options."""

    shelf_declared: bool = option(True, help="declare the shelves 0, 1 and 2 before the run")
    shelf_only: str = option("", help="remove the documents of every other shelf")
    shelf_names: str = option("", help="the shelves' values, 0 to 2, comma-separated (default: the digits)")


def shelf(text: str) -> str | None:
    """A text's shelf: its words modulo 3; none for a text holding `loose`."""
    words = text.split()
    return None if "loose" in words else str(len(words) % 3)


class ShelfStage(DocumentStage):
    """Labels each document `shelf` (`shelf()`), cuts a leading `CUT `; with --shelf_only, keeps one shelf."""

    name = "split_shelf"
    Options = ShelfOptions

    def apply(self, doc):
        value = shelf(doc.text)
        if self.options.shelf_only and value != self.options.shelf_only:
            return Remove("other_shelf", {"shelf": value})
        names = self.options.shelf_names.split(",") if self.options.shelf_names else None
        labels = {} if value is None else {"shelf": names[int(value)] if names else value, "tag": "x"}
        if doc.text.startswith("CUT "):
            return Keep(text=doc.text[4:], cut_rule="cut_prefix", tally={"cuts": 1}, labels=labels)
        return Keep(labels=labels)

    def labels(self):
        names = tuple(self.options.shelf_names.split(",")) if self.options.shelf_names else ("0", "1", "2")
        return {"shelf": names if self.options.shelf_declared else None, "tag": ("x",)}
