"""Work items committed as they finish, and taken back by a resumed run: what each kind of item holds.

    kind     key (in the work folder)          payload, header
    result   (part, file, chunk)               the chunk's ChunkResult bytes; what reading it counted (`ReadInfo`),
                                               the digest of dedup's verdicts it was made with
    unit     ("", file, unit)                  -; the chunks a work item (a whole file, a frame, a row group) holds,
                                               whether it was damaged (--on_corrupt_file skip)
    dedup    ("", file, chunk)                 dedup's input of the chunk (`SignedChunk`: its documents' keys and
                                               signatures, decontamination's records, the stages' verdicts);
                                               what reading it counted

A chunk's result depends on its input bytes and the job's options only (pipeline/process/result.py),
never on which worker made it or what it was tokenized with, so an item is found by its chunk's
place: a resumed run on another number of workers, or on another runner, reuses it. `part` names
the step (a digest of its config), so two branches of one job never share an item. With dedup the
result also depends on the global verdicts: it is reused only with the same verdicts (`verdicts_digest`).

A work item whose every chunk is committed is not read again: it becomes `Done`, whose chunks go
on as `Committed` markers and are taken from the work folder by the step that would have
tokenized them (pipeline/beam/chunk_documents.py); a marker whose item turns out torn is read again
from its work item (`Committed.unit`).
"""

from __future__ import annotations

import dataclasses
import json

from pipeline.core.content import limbs, lines_term
from pipeline.io import columnar, frames
from pipeline.io.columnar import RowGroup
from pipeline.io.frames import Frame, Stripe
from pipeline.io.inputs import Chunk, CorruptInputError
from pipeline.io.urls import redact_url
from pipeline.io.workfolder import WorkFolder
from pipeline.process.result import ChunkResult
from pipeline.stages.policy import Verdict

RESULT, UNIT, DEDUP = "result", "unit", "dedup"


@dataclasses.dataclass(frozen=True)
class ReadInfo:
    """What the read stage counted of one chunk (its file stats' share): lines, decompressed bytes, content terms."""

    path: str  # as the manifest shows it (credentials removed)
    lines: int
    bytes: int
    content: int

    @classmethod
    def of(cls, chunk: Chunk) -> ReadInfo:
        """The read stage's counts of a chunk."""
        return cls(redact_url(chunk.path), len(chunk.lines), chunk.num_bytes, lines_term(chunk.lines))

    def stats(self, file_index: int) -> dict:
        """The read stage's stats of the chunk, as pipeline/beam/read.py emits a file's."""
        return {"inputs": {f"{file_index:05d}": {"path": self.path, "lines": self.lines,
                                                  "decompressed_bytes": self.bytes, "chunks": 1,
                                                  "content": limbs(self.content)}}}

    def to_json(self) -> dict:
        """The header's form (the content terms in hex)."""
        return {"path": self.path, "lines": self.lines, "bytes": self.bytes, "content": f"{self.content:x}"}

    @classmethod
    def from_json(cls, data: dict) -> ReadInfo:
        """The counts of `to_json`'s form."""
        return cls(data["path"], int(data["lines"]), int(data["bytes"]), int(data["content"], 16))


@dataclasses.dataclass(frozen=True)
class Done:
    """A work item whose every chunk is committed: its unit (as it was planned), its chunks, its damage."""

    unit: object  # None (a whole file), a Frame or a RowGroup
    chunks: tuple[int, ...]
    damaged: str | None = None
    size: int = 0  # stored bytes it stands for (progress)


@dataclasses.dataclass(frozen=True)
class Committed:
    """A chunk of a `Done` work item: its result is in the work folder (read back from `unit` if it is not)."""

    file_index: int
    chunk_index: int
    path: str
    unit: object
    input_bytes: int = 0
    tokenize_now: bool = False  # what a Chunk carries; markers wait for no batch


def part_of(config) -> str:
    """The name of a tokenizing step's items: a digest of its config (the branches of one job differ in theirs)."""
    import hashlib

    plain = {"config": config.to_json(), "format": config.output_format, "provenance": config.provenance,
             "per_subset": config.per_subset}
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:12]


def unit_key(unit) -> str | None:
    """A work item's record's name: the whole file ("whole", also a stripe's reader's), a frame, a row group."""
    if unit is None or isinstance(unit, Stripe):
        return "whole"
    if isinstance(unit, Frame):
        return f"frame-{unit.first_chunk:08d}"
    if isinstance(unit, RowGroup):
        return f"group-{unit.index:06d}"
    return None


def chunk_name(chunk_index: int) -> str:
    """A chunk's item name."""
    return f"{chunk_index:08d}"


def verdicts_digest(removed: dict | None, verdicts: dict | None) -> str | None:
    """A digest of the dedup verdicts a chunk was tokenized with (None without dedup)."""
    if removed is None and verdicts is None:
        return None
    import xxhash

    plain = {"removed": sorted(((int(line), record) for line, record in (removed or {}).items()),
                               key=lambda item: item[0]),
             "verdicts": None if verdicts is None else sorted(
                 ((int(line), dataclasses.asdict(v)) for line, v in verdicts.items()), key=lambda item: item[0])}
    return xxhash.xxh3_128_hexdigest(json.dumps(plain, sort_keys=True, default=str).encode())


def commit_result(folder: WorkFolder, part: str, result: ChunkResult, info: ReadInfo, verdicts: str | None) -> None:
    """Commit a chunk's result, with what reading it counted and the verdicts it was made with."""
    folder.commit(RESULT, part, result.file_index, chunk_name(result.chunk_index), result.to_bytes(),
                  {"read": info.to_json(), "verdicts": verdicts})


def fetch_result(folder: WorkFolder, part: str, file_index: int, chunk_index: int,
                 verdicts: str | None) -> tuple[ChunkResult, ReadInfo, str] | None:
    """A committed result made with these verdicts, its read counts and the run that made it; None: do it again."""
    item = folder.fetch(RESULT, part, file_index, chunk_name(chunk_index))
    if item is None:
        return None
    header, payload = item
    if header.get("verdicts") != verdicts:
        return None
    try:
        result = ChunkResult.from_bytes(bytes(payload))
        info = ReadInfo.from_json(header["read"])
    except (ValueError, KeyError, TypeError):
        return None
    if (result.file_index, result.chunk_index) != (file_index, chunk_index):
        return None
    return result, info, str(header.get("run", ""))


def read_again(marker: Committed, config) -> Chunk:
    """The chunk of a Committed marker whose result is not there after all (torn, removed): read from its work item."""
    path, unit = marker.path, marker.unit
    if columnar.is_columnar(path):
        chunks = columnar.iter_unit_chunks(path, marker.file_index, unit, config.chunk_bytes, config.schema)
    else:
        chunks = frames.iter_unit_chunks(path, marker.file_index, unit, config.chunk_bytes, config.max_line_bytes)
    for chunk in chunks:
        if chunk.chunk_index == marker.chunk_index:
            return dataclasses.replace(chunk, tokenize_now=marker.tokenize_now)
    raise CorruptInputError(f"{redact_url(path)}: chunk {marker.chunk_index}, which the run this one resumes read, "
                            "is not there now: the input changed. Run the job again with --overwrite")


@dataclasses.dataclass
class SignedChunk:
    """Dedup's input of one chunk: what its groups need, the text read once (pipeline/beam/dedup/chunks.py).

    signed: (exact key, (key, doc fields, signature bytes)) per document kept so far, as Dedup's
    Sign step emits them; shingles: (key, the n-gram hashes' bytes) with the Jaccard check, else
    None; removed: decontamination's records; verdicts: {line: Verdict} of the stages (None: none).
    """

    signed: list
    shingles: list | None
    removed: list[dict]
    verdicts: dict | None

    def to_bytes(self) -> bytes:
        """A JSON header (a line's length first) and the signatures' and shingles' bytes back to back."""
        blobs: list[bytes] = []

        def blob(data: bytes | None):
            if data is None:
                return None
            blobs.append(data)
            return len(data)

        header = {
            "signed": [[key, fields, None if exact is None else exact.hex(), blob(sig)]
                       for exact, (key, fields, sig) in self.signed],
            "shingles": None if self.shingles is None else [[key, blob(data)] for key, data in self.shingles],
            "removed": self.removed,
            "verdicts": None if self.verdicts is None else [[line, dataclasses.asdict(v)]
                                                            for line, v in self.verdicts.items()],
        }
        text = json.dumps(header, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        return b"".join([len(text).to_bytes(8, "little"), text, *blobs])

    @classmethod
    def from_bytes(cls, data: bytes) -> SignedChunk:
        """What `to_bytes` wrote (ValueError on anything else)."""
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + size])
        at = 8 + size

        def blob(length):
            nonlocal at
            if length is None:
                return None
            if at + length > len(data):
                raise ValueError("dedup's input of a chunk cut short")
            at += length
            return bytes(data[at - length:at])

        signed = [(None if exact is None else bytes.fromhex(exact), (key, fields, blob(sig)))
                  for key, fields, exact, sig in header["signed"]]
        shingles = None if header["shingles"] is None else [(key, blob(n)) for key, n in header["shingles"]]
        verdicts = None if header["verdicts"] is None else {
            int(line): Verdict(**{**v, "records": tuple(v["records"])}) for line, v in header["verdicts"]}
        if at != len(data):
            raise ValueError("dedup's input of a chunk is longer than its header says")
        return cls(signed, shingles, header["removed"], verdicts)


def commit_signed(folder: WorkFolder, chunk: Chunk, signed: SignedChunk) -> None:
    """Commit dedup's input of a chunk, with what reading it counted."""
    folder.commit(DEDUP, "", chunk.file_index, chunk_name(chunk.chunk_index), signed.to_bytes(),
                  {"read": ReadInfo.of(chunk).to_json()})


def fetch_signed(folder: WorkFolder, file_index: int, chunk_index: int) -> tuple[SignedChunk, ReadInfo] | None:
    """Dedup's committed input of a chunk and its read counts; None: do it again."""
    item = folder.fetch(DEDUP, "", file_index, chunk_name(chunk_index))
    if item is None:
        return None
    header, payload = item
    try:
        return SignedChunk.from_bytes(bytes(payload)), ReadInfo.from_json(header["read"])
    except (ValueError, KeyError, TypeError):
        return None


def commit_unit(folder: WorkFolder, file_index: int, key: str, chunks: list[int], damaged: str | None) -> None:
    """Commit what a work item held, once it was read to its end (or to its damage)."""
    folder.commit(UNIT, "", file_index, key, b"", {"chunks": list(chunks), "damaged": damaged})


def fetch_unit(folder: WorkFolder, file_index: int, key: str) -> tuple[tuple[int, ...], str | None] | None:
    """(chunks, damage) of a work item read before, or None."""
    item = folder.fetch(UNIT, "", file_index, key)
    if item is None:
        return None
    header, _ = item
    chunks = header.get("chunks")
    if not isinstance(chunks, list) or not all(isinstance(c, int) for c in chunks):
        return None
    return tuple(chunks), header.get("damaged")
