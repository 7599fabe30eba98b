"""The JSON-lines output's writing: every kept document one line of its cleaned text, one block per work item.

    Documents -> JsonLines.write -> one block (source ("", 0, file, chunk)) of the documents' JSON lines

A block's records are its lines back to back (a FramedRecords of byte strings, pipeline/format/framing.py),
in input order; the line is pipeline/format/jsonl.py's `document_line`. The source has the Megatron
output's shape (group, copy, file, chunk), with one group and one copy: the shard layout and the
files are pipeline/beam/jsonl.py's. Tokens, when the job has a tokenizer, are only counted.
"""

from __future__ import annotations

import numpy as np

from pipeline.format import jsonl as fmt
from pipeline.format.framing import FramedRecords
from pipeline.io.urls import redact_url
from pipeline.process.documents import Documents
from pipeline.process.result import Block
from pipeline.process.writer import Writer, Written


class JsonLines(Writer):
    """Documents -> one block of their JSON lines (none when the work item keeps none)."""

    name = fmt.OUTPUT_FORMAT

    @staticmethod
    def token_dtype(vocab_size: int) -> np.dtype:
        """Unused: the output holds text (the writer's interface asks every format)."""
        return np.dtype("<i4")

    def write(self, docs: Documents) -> Written:
        """The block of the work item's kept documents (source ("", 0, file, chunk))."""
        chunk = docs.chunk
        path, labels, own_ids = redact_url(chunk.path), docs.labels, docs.own_ids
        lines = [fmt.document_line(docs.texts[i], docs.subsets[i], path, docs.lines[i].number,
                                   labels[i] if labels else None, (own_ids[i],) if own_ids is not None else None)
                 for i in np.flatnonzero(docs.copies > 0).tolist()]
        if not lines:
            return Written()
        block = FramedRecords(b"".join(lines), np.cumsum([len(line) for line in lines], dtype=np.int64))
        return Written([Block(("", 0, chunk.file_index, chunk.chunk_index), block)])
