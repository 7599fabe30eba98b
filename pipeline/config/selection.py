"""Which documents go into the output, how many times, in which order: `SelectionOptions` of `pile-pipeline run`.

The selection is resolved against the layout's names (`--subset_names`): the config holds (and
the manifest records) the selection itself, not the words that named it.
"""

from __future__ import annotations

import dataclasses

from pipeline.config.inputs import DocumentLayout
from pipeline.core.options import Bounds, option
from pipeline.core.subsets import (
    ALL_NAMES,
    Selection,
    check_subset_names,
    parse_epochs,
    parse_names,
    parse_selection,
    resolve_selection,
)
from pipeline.format.jsonl import OUTPUT_FORMAT as TEXT

MAX_EPOCHS = 100
SEED_BOUNDS = Bounds(-(1 << 63), (1 << 63) - 1, why="a seed is a 64-bit integer",
                     low_why="a seed is a 64-bit integer")


def _orders_copies(config) -> bool:
    # A JSON-lines output writes each kept document once, in input order: no epochs, no shuffle.
    return getattr(config, "output_format", None) != TEXT


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelectionOptions(DocumentLayout):
    """--subsets, --exclude_subsets, --epochs and the seed of the shuffle and of fractional epochs."""

    title = "selection and epochs"

    subsets: tuple[str, ...] = option(
        ("all",), parse=parse_selection, metavar="SUBSETS", shown_default="all", record=list,
        help="'all', 'uncopyrighted' (drops Books3, BookCorpus2, OpenSubtitles, YoutubeSubtitles, "
        "OpenWebText2) or a comma list of subset names; others are counted as not selected")
    exclude_subsets: tuple[str, ...] = option(
        (), parse=parse_names, metavar="SUBSETS", record=list,
        help="comma list of subsets to leave out of the --subsets selection")
    epochs: tuple[tuple[str, float], ...] = option(
        (), parse=parse_epochs, metavar="SPEC", record=dict, recorded=_orders_copies,
        help="per-subset epochs: 'pile_paper' (Gao et al. 2020, Table 1) or 'Name=2,Other=1.5'; "
        "fractional epochs pick documents by a hash of (seed, file, line); unnamed subsets get 1")
    seed: int = option(0, bounds=SEED_BOUNDS, recorded=_orders_copies,
                       help="seed of the global shuffle and of fractional epochs")

    def check(self) -> None:
        """Resolve the selection against the layout's names; every --epochs name known and its value in [0, 100]."""
        # Normalized here so that the config (and the manifest) holds the selection itself.
        subsets, exclude = resolve_selection(self.subsets, self.exclude_subsets, self.any_names)
        object.__setattr__(self, "subsets", subsets)
        object.__setattr__(self, "exclude_subsets", exclude)
        check_subset_names([name for name, _ in self.epochs], "--epochs", self.any_names)
        for name, value in self.epochs:
            if not 0 <= value <= MAX_EPOCHS:
                raise ValueError(f"--epochs: {name}={value} must be within [0, {MAX_EPOCHS}]")

    def selection(self) -> Selection:
        """The selected subsets: `name in config.selection()`."""
        every = self.subsets == (ALL_NAMES,)
        return Selection(frozenset(() if every else self.subsets), every, frozenset(self.exclude_subsets))

    def epochs_of(self, subset: str) -> float:
        """Epochs for a subset (1.0 unless configured)."""
        return dict(self.epochs).get(subset, 1.0)
