"""How documents become records: `PackingOptions` of `pile-pipeline run` (pipeline/core/packing.py, best_fit.py)."""

from __future__ import annotations

import dataclasses

from pipeline.config.output import PACKED
from pipeline.core import best_fit, best_fit_kernel
from pipeline.core.option_groups import OptionGroup
from pipeline.core.options import Bounds, option
from pipeline.format.records import BEST_FIT, PACKING_MODES

REMAINDER_POLICIES = ("pad", "drop")
MAX_SEQ_LEN = 1 << 20


def _best_fit(config) -> bool:
    # Recorded only for best_fit, so that a concat job keeps its manifest's bytes.
    return config.packing == BEST_FIT


@dataclasses.dataclass(frozen=True, kw_only=True)
class PackingOptions(OptionGroup):
    """--seq_len, the packing mode, its window, the job's partial record and per-document boundaries."""

    title = "records"

    seq_len: int = option(2048, bounds=Bounds(1, MAX_SEQ_LEN, why="a record holds seq_len + 1 token ids"),
                          help="label positions per record; records hold seq_len + 1 tokens")
    remainder: str = option("pad", choices=REMAINDER_POLICIES,
                            help="the job's one partial record: pad (marked by valid_labels) or drop")
    document_boundaries: bool = option(False, help="also write seqio-style segment_ids and positions")
    packing: str = option(
        "concat", choices=PACKING_MODES, recorded=_best_fit,
        help="concat: documents joined and cut every seq_len labels; best_fit: whole documents packed by best fit "
        "decreasing, the rest padded and loss-masked (implies --document_boundaries; tfrecord only)")
    packing_window: int = option(
        best_fit.DEFAULT_WINDOW, metavar="N", recorded=_best_fit,
        bounds=Bounds(1, (1 << best_fit_kernel.BIN_BITS) - 1,
                      why=f"best fit numbers a window's sequences in {best_fit_kernel.BIN_BITS} bits"),
        help="best_fit: documents packed together per window (in input order); larger pads less and holds more")

    def recorded_when(self) -> bool:
        """Recorded for an output of packed records only: a Megatron or JSON-lines output packs nothing."""
        return getattr(self, "output_format", PACKED) == PACKED

    def check(self) -> None:
        """best_fit implies --document_boundaries: a best_fit record is read through its segment ids (0: padding)."""
        if self.packing == BEST_FIT:
            object.__setattr__(self, "document_boundaries", True)
