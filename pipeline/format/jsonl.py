"""Cleaned text as JSON lines (`--output_format jsonl`): the kept documents' text, as the stages left it.

    OUT/run-<id>/train-00000-of-00003.jsonl.zst   one zstd frame of JSON lines, one document a line

A line holds these keys, in this order (`id` only with --id_key, for a document that has one):

    {"text": "...", "id": "doc-17", "metadata": {"subset": "Pile-CC",
     "source": {"file": "data/train/00.jsonl.zst", "line": 17}, "language": "en"}}

text: exactly the text a tokenizing run of the same config tokenizes (after every stage, cut and
PII redaction); id: the document's own id, redacted as every record is with --pii; metadata: its
subset, its source (the input as the manifest's `inputs` name it, its 1-based line) and the stages'
labels (the language stage's `language`), beside `subset` and `source`. These are the keys of
datatrove's `Document` (`JsonlReader` puts `metadata`'s keys in its metadata), and the columns
`datasets.load_dataset("json", ...)` and NeMo Curator give.

The documents are in input order (input file, line), cut into shards of at most --shard_size_mb
of JSON lines before compression (plus one line): the Megatron output's shard layout
(pipeline/format/megatron.py `Layout`, `shard_slots`, `shard_names`), a document's bytes being its
line's. Each shard is one zstd frame at level ZSTD_LEVEL with its content size and checksum,
compressed from pieces of PIECE_BYTES whatever the blocks the lines came in, so that its bytes
depend on its lines and the zstd library's version alone. The manifest (format
`pile-cleaned-text`) lists every shard with its documents, sizes and sha256. Importable without
Beam; zstandard and orjson load where a line is made or a shard compressed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from pipeline.core.tables import format_table
from pipeline.format import manifest as manifest_lib
from pipeline.format.summary import cleaning_lines, has_removals, removed_documents

OUTPUT_FORMAT = "jsonl"  # its --output_format
FORMAT = manifest_lib.FORMAT_JSONL  # the manifest's `format`: "pile-cleaned-text"
FORMAT_VERSION = 1
SUFFIX = ".jsonl.zst"
ZSTD_LEVEL = 3  # zstd's own default: fast, and fixed, as the bytes depend on it
PIECE_BYTES = 1 << 20  # what the compressor is fed at a time (its output depends on the pieces)
OWN_KEYS = ("subset", "source")  # metadata's keys of ours; a stage's label may not take them
ORDER = "input order: input file, line"


def document_line(text: str, subset: str, file: str, line: int, labels: dict | None = None,
                  own_id: tuple | None = None) -> bytes:
    r"""One document's JSON line, newline included (module docstring).

    own_id: `(id,)` with --id_key, None without; an id of None is left out (datatrove then names the
    document by its file and line, `datasets` gives null).

    >>> document_line("a b", "ArXiv", "in.jsonl", 3, {"language": "en"}, ("x1",))
    b'{"text":"a b","id":"x1","metadata":{"subset":"ArXiv","source":{"file":"in.jsonl","line":3},"language":"en"}}\n'
    """
    import orjson

    metadata = {"subset": subset, "source": {"file": file, "line": line}}
    for key, value in (labels or {}).items():
        if key in OWN_KEYS:
            raise ValueError(f"a stage's label {key!r} would replace the JSON-lines output's metadata.{key}: "
                             "rename the label")
        metadata[key] = value
    has_id = own_id is not None and own_id[0] is not None
    document = {"text": text, "id": own_id[0], "metadata": metadata} if has_id else {"text": text, "metadata": metadata}
    try:
        return orjson.dumps(document) + b"\n"
    except TypeError:  # what orjson refuses (an integer past 64 bits, a lone surrogate): escaped, as JSON allows
        return json.dumps(document, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def _pieces(parts: Iterable[bytes], size: int) -> Iterator[bytes]:
    """The bytes of `parts`, back to back, as pieces of `size` bytes (the last one shorter)."""
    pending, held = [], 0
    for part in parts:
        view = memoryview(part)
        while view.nbytes:
            take = min(size - held, view.nbytes)
            pending.append(view[:take])
            held += take
            view = view[take:]
            if held == size:
                yield b"".join(pending)
                pending, held = [], 0
    if held:
        yield b"".join(pending)


def compressed(parts: Iterable[bytes], total: int) -> Iterator[bytes]:
    """One zstd frame of `parts` (`total` bytes in all, written in the frame's header), in pieces.

    >>> import zstandard
    >>> zstandard.ZstdDecompressor().decompress(b"".join(compressed([b"ab", b"c"], 3)))
    b'abc'
    """
    import zstandard

    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, write_content_size=True)
    stream = compressor.compressobj(size=total)
    fed = 0
    for piece in _pieces(parts, PIECE_BYTES):
        fed += len(piece)
        out = stream.compress(piece)
        if out:
            yield out
    if fed != total:
        raise RuntimeError(f"a shard's lines hold {fed} bytes, not the {total} its layout counted")
    yield stream.flush()


def compression_entry() -> dict:
    """The manifest's `jsonl.compression`: what the shards' bytes depend on besides their lines."""
    import zstandard

    return {"codec": "zstd", "level": ZSTD_LEVEL, "checksum": True, "content_size": True,
            "piece_bytes": PIECE_BYTES, "zstd": ".".join(map(str, zstandard.ZSTD_VERSION))}


def shard_file(prefix: str) -> str:
    """A shard's file name from its name prefix: `train-00000-of-00003.jsonl.zst`."""
    return prefix + SUFFIX


def load_manifest(path_or_dir: str) -> dict:
    """Read and check the manifest of a JSON-lines output (see pipeline.format.manifest)."""
    manifest = manifest_lib.load_manifest(path_or_dir, FORMAT, FORMAT_VERSION)
    for i, shard in enumerate(manifest["shards"]):
        for key in ("documents", "bytes", "uncompressed_bytes"):
            if not isinstance(shard.get(key), int) or isinstance(shard.get(key), bool) or shard[key] < 0:
                raise manifest_lib.ManifestError(f"{path_or_dir}: shards[{i}]: {key!r} is not a count")
        if not shard["path"].endswith(SUFFIX) or not isinstance(shard.get("sha256"), str):
            raise manifest_lib.ManifestError(f"{path_or_dir}: shards[{i}] is not a {SUFFIX} file with its sha256")
    return manifest


def data_files(manifest: dict, root: str) -> list[str]:
    """Every shard's location under `root` (the output directory), in order: `data_files=` of `datasets`."""
    return [f"{root.rstrip('/')}/{shard['path']}" for shard in manifest["shards"]]


def format_summary(manifest: dict, seconds: float | None = None, root: str | None = None,
                   link: str | None = None) -> str:
    """A plain-text summary of a JSON-lines output: per-subset counts, the shards, how to read them.

    `root`: the output directory as shown; `link`: the name of a link to the run directory there
    (`latest`), which the reading lines use when given.
    """
    subsets = manifest["subsets"]
    removing, tokens = has_removals(manifest), any("tokens" in s for s in subsets.values())
    header = ("subset", "docs", "kept", "filtered", *(["removed"] if removing else []), *(["tokens"] if tokens else []),
              "text MB")
    rows, total = [header], [0] * (len(header) - 1)
    for name, s in subsets.items():
        cells = [s.get("documents", 0), s.get("kept", 0), sum(s.get("filtered", {}).values()),
                 *([removed_documents(s)] if removing else []), *([s.get("tokens", 0)] if tokens else []),
                 s.get("text_bytes", 0)]
        total = [a + b for a, b in zip(total, cells, strict=True)]
        rows.append((name, *map(str, cells[:-1]), f"{cells[-1] / 1e6:.2f}"))
    rows.append(("total", *map(str, total[:-1]), f"{total[-1] / 1e6:.2f}"))
    totals, dead = manifest["totals"], manifest["dead_letters"]
    lines = [
        format_table(rows, rules_before=(len(rows) - 1,)),
        "",
        f"cleaned text: {totals['documents']} documents in {len(manifest['shards'])} .jsonl.zst shard(s), "
        f"{totals['uncompressed_bytes'] / 1e6:.1f} MB of JSON lines, {totals['bytes'] / 1e6:.1f} MB compressed "
        f"(zstd {manifest['jsonl']['compression']['level']})" + ("" if tokens else "; not tokenized"),
        f"dead letters: {dead['records']} {dict(sorted(dead['by_reason'].items()))}",
    ]
    lines += cleaning_lines(manifest)
    if root is not None and manifest["shards"]:
        folder = f"{root.rstrip('/')}/{link or manifest_lib.run_dir(manifest['run_id'])}"
        first = manifest["split"]
        lines += ["read it (the manifest lists every shard):",
                  f'  datasets.load_dataset("json", data_files="{folder}/{first}-*{SUFFIX}", split="train")',
                  f'  datatrove: JsonlReader("{folder}", glob_pattern="{first}-*{SUFFIX}")']
    if seconds is not None:
        lines.append(f"time: {seconds:.1f} s")
    return "\n".join(lines)
