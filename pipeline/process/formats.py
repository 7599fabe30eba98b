"""Every output format's writer, by --output_format name: `WRITERS[name]` (pipeline/process/writer.py).

A new format's writer is one module of this package and one row here (docs/extending.md).
"""

from __future__ import annotations

from pipeline.process.jsonl import JsonLines
from pipeline.process.megatron import DocumentSequences
from pipeline.process.tfrecord import PackedRecords
from pipeline.process.writer import Writer

WRITERS: dict[str, type[Writer]] = {
    PackedRecords.name: PackedRecords,
    DocumentSequences.name: DocumentSequences,
    JsonLines.name: JsonLines,
}


def writer_class(output_format: str) -> type[Writer]:
    """The writer of an output format (KeyError naming the known ones for another name)."""
    try:
        return WRITERS[output_format]
    except KeyError:
        raise KeyError(f"no engine writer for output format {output_format!r}; known: {', '.join(WRITERS)}") from None
