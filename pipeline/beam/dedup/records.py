"""What Dedup emits: the output tags, its counters, the removed documents' records.

A removed record (one dict) carries the document's small fields (not its text), file_index, line,
subset, reason, similarity, the twin's file_index and line for a duplicate, the file names where
known, and the document's tokens where a token counter is given.
"""

from __future__ import annotations

from collections.abc import Callable

import apache_beam as beam

from pipeline.core import dedup

KEPT, REMOVED, COUNTS = "kept", "removed", "counts"


def counter(name: str):
    """Dedup's Beam counter `name` (namespace "dedup")."""
    return beam.metrics.Metrics.counter("dedup", name)


class Records:
    """Builds removed records: names, carried fields, tokens."""

    def __init__(self, file_names: list[str] | None, token_count: Callable[[str], int] | None):
        self._names = file_names
        self._tokens = token_count

    def record(self, key: int, doc: dict, reason: str, similarity: float, twin: int | None = None, **extra) -> dict:
        file_index, line = dedup.order_parts(key)
        rec = {k: v for k, v in doc.items() if k != "text"}
        rec.update(file_index=file_index, line=line, subset=doc["subset"], reason=reason,
                   similarity=round(float(similarity), 4))
        if self._names is not None:
            rec["file"] = self._names[file_index]
        if twin is not None:  # the kept document it duplicates
            t_file, t_line = dedup.order_parts(twin)
            rec.update(twin_file_index=t_file, twin_line=t_line)
            if self._names is not None:
                rec["twin_file"] = self._names[t_file]
        rec.update(extra)
        if self._tokens is not None:
            rec["tokens"] = int(self._tokens(doc["text"]))
        return rec
