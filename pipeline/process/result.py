"""What the engine returns for one work item (`ChunkResult`), and its bytes.

A ChunkResult holds everything the job writes or counts for its work item: the format's blocks of
records (or of document tokens), the tails left for joining (TFRecord concat packing), the dead
letters, the removed/ records and the counts. It depends on the work item and the config only (never
on what was tokenized beside it), and `to_bytes` is a function of it, so that a result kept on disk
is the same bytes on every run.

Its bytes (no pickle; `from_bytes(to_bytes(r))` gives r back):
    MAGIC (8 bytes) | header length (u64 little-endian) | header: JSON, ASCII | arrays, back to back
The header holds every field (a block's or tail's bucket and the buckets' counts only with
--split_by); an array is written in it as {"array": [dtype, shape, offset, bytes]}, its bytes
little-endian at `offset` of the array part. Records and dead letters keep their keys'
order; a tuple in them reads back as a list (they are written as JSON either way).
"""

from __future__ import annotations

import dataclasses
import json
import struct

import numpy as np

from pipeline.core.packing import Piece
from pipeline.core.stats import JobStats
from pipeline.format.framing import FramedRecords

MAGIC = b"PILECHR1"


@dataclasses.dataclass
class Block:
    """A block of the format's records from one work item.

    source: the format's source id (its place in the output's order); records: the framed records (or
    documents' tokens back to back); spans: with --provenance, where the block's labels come from
    (pipeline/core/provenance.py), else None; bucket: with --split_by, the bucket whose output it is in.
    """

    source: tuple
    records: FramedRecords
    spans: np.ndarray | None = None
    bucket: str | None = None


@dataclasses.dataclass
class Tail:
    """The labels of one epoch copy (of one bucket) left after the work item's full records, for joining."""

    copy: int
    piece: Piece
    bucket: str | None = None  # with --split_by: tails join within their bucket only


@dataclasses.dataclass
class ChunkResult:
    """One work item's processed output: see the module docstring."""

    file_index: int
    chunk_index: int
    input_bytes: int  # the stored input bytes the work item covers (for progress)
    blocks: list[Block]
    tails: list[Tail]
    dead_letters: list[dict]
    removed: list[dict]  # removed/ records (removals and cuts)
    stats: JobStats
    buckets: dict[str, JobStats] = dataclasses.field(default_factory=dict)  # with --split_by: each bucket's counts

    @property
    def documents(self) -> int:
        """Documents written (one copy each)."""
        return sum(s.kept for s in self.stats.subsets.values())

    @property
    def tokens(self) -> int:
        """Tokens of the documents written, one copy each (BOS/EOS included)."""
        return sum(s.tokens or 0 for s in self.stats.subsets.values())

    @property
    def tokens_with_epochs(self) -> int:
        """Tokens written, every epoch copy counted."""
        return sum(s.tokens_with_epochs or 0 for s in self.stats.subsets.values())

    @property
    def filtered(self) -> int:
        """Documents left out and not listed."""
        return sum(sum(s.filtered.values()) for s in self.stats.subsets.values())

    def to_bytes(self) -> bytes:
        """The result's bytes (module docstring)."""
        arrays = _Arrays()
        header = {
            "file_index": self.file_index, "chunk_index": self.chunk_index, "input_bytes": self.input_bytes,
            "blocks": [{"source": list(b.source), "data": arrays.add(np.frombuffer(b.records.data, np.uint8)),
                        "ends": arrays.add(b.records.ends), "spans": arrays.add(b.spans), **_bucket(b)}
                       for b in self.blocks],
            "tails": [{"copy": t.copy, "context": t.piece.context, "labels": arrays.add(t.piece.labels),
                       "starts": arrays.add(t.piece.starts), "spans": arrays.add(t.piece.spans), **_bucket(t)}
                      for t in self.tails],
            "dead_letters": self.dead_letters,
            "removed": self.removed,
            "stats": self.stats.to_json(),
        }
        if self.buckets:  # only with --split_by, so that a result without buckets keeps its bytes
            header["buckets"] = {name: s.to_json() for name, s in sorted(self.buckets.items())}
        text = json.dumps(header, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        return b"".join([MAGIC, struct.pack("<Q", len(text)), text, *arrays.parts])

    @classmethod
    def from_bytes(cls, data: bytes) -> ChunkResult:
        """The result `to_bytes` wrote; ValueError on anything else."""
        if data[:8] != MAGIC or len(data) < 16:
            raise ValueError("not a work item's result (its first bytes are not the engine's)")
        (size,) = struct.unpack("<Q", data[8:16])
        if 16 + size > len(data):
            raise ValueError("a work item's result cut short")
        header = json.loads(data[16 : 16 + size])
        body = memoryview(data)[16 + size :]

        def array(ref):
            if ref is None:
                return None
            dtype, shape, offset, nbytes = ref["array"]
            if offset + nbytes > len(body):
                raise ValueError("a work item's result cut short")
            return np.frombuffer(body[offset : offset + nbytes], np.dtype(dtype)).reshape(shape).copy()

        blocks = [Block(tuple(b["source"]), FramedRecords(array(b["data"]).tobytes(), array(b["ends"])),
                        array(b["spans"]), b.get("bucket")) for b in header["blocks"]]
        tails = [Tail(t["copy"], Piece(t["context"], array(t["labels"]), array(t["starts"]), array(t["spans"])),
                      t.get("bucket")) for t in header["tails"]]
        buckets = {name: JobStats.from_json(s) for name, s in header.get("buckets", {}).items()}
        return cls(header["file_index"], header["chunk_index"], header["input_bytes"], blocks, tails,
                   header["dead_letters"], header["removed"], JobStats.from_json(header["stats"]), buckets)


def _bucket(part: Block | Tail) -> dict:
    """A block's or tail's bucket in its header entry: only with --split_by."""
    return {} if part.bucket is None else {"bucket": part.bucket}


class _Arrays:
    """The array part of a result's bytes, filled as the header refers to its arrays."""

    def __init__(self):
        self.parts: list[bytes] = []
        self._size = 0

    def add(self, values: np.ndarray | None) -> dict | None:
        if values is None:
            return None
        values = np.ascontiguousarray(values)
        dtype = values.dtype.newbyteorder("<") if values.dtype.byteorder == ">" else values.dtype
        data = values.astype(dtype, copy=False).tobytes()
        ref = {"array": [dtype.str, list(values.shape), self._size, len(data)]}
        self.parts.append(data)
        self._size += len(data)
        return ref
