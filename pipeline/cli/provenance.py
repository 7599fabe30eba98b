"""`pile-pipeline provenance OUTPUT_DIR --step K --global_batch_size G --seed S`: the documents in global step k.

For an output written with `--provenance`, prints every record of global batch k as the reader
(pipeline/reader/engine/plan.py) orders it for that seed, global batch size, epoch and window, and for
each record the document pieces it holds: subset, input file, line, token range and first
characters. The answer does not depend on the number of ranks that trained: the reader gives the
same global batches to any number of them. `--step` is the global step (it may run past the first
epoch, or give `--epoch` and the step within it), as a trainer counts it.

Pass the reader's settings of the run in question: `--seed`, `--global_batch_size` (per-rank
batch x ranks), and `--shuffle_buffer` / `--no_shuffle` when the run changed them.

For a mixture, pass its `mixture.json` (with the run's schedule) instead of the output directory:
each record is labelled with the source it came from (pipeline/reader/engine/mixture.py).

For a document store (`--output_format megatron`, packed when read) or a mixture of stores, pass
also the reader's `--seq_len`, `--packing`, `--pack_window` and `--schedule` (JSON, as make_dataset's):
each sequence of the step is listed with the document pieces it holds (stored as shard:document, a
token range), and their input line and text when the store was written with `--provenance`.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np

from pipeline.core.documents import BadRecord, Schema, parse_line
from pipeline.core.options import ArgumentParser, UsageError
from pipeline.format.manifest import ManifestError, load_manifest, manifest_path
from pipeline.format.megatron import load_manifest as load_store_manifest
from pipeline.format.mixture import MixtureError, is_mixture, load_mixture
from pipeline.format.provenance import ProvenanceIndex, StoreProvenance
from pipeline.io.lookup import lines_at
from pipeline.reader.engine.doc_mixture import open_reader, step_layouts
from pipeline.reader.engine.doc_reader import StoreSettings
from pipeline.reader.engine.mixture import open_order
from pipeline.reader.engine.plan import batch_records, default_window, global_order, steps_for
from pipeline.reader.engine.store import is_store


@dataclasses.dataclass(frozen=True)
class Piece:
    """Labels of one record taken from one document: tokens [first_token, first_token + tokens)."""

    subset: str
    file: str
    line: int
    first_token: int
    tokens: int
    text: str  # the whole document


@dataclasses.dataclass(frozen=True)
class RecordSource:
    """One record of the global batch: where it is stored and the document pieces of its labels."""

    position: int  # in the global batch
    shard: str
    record: int  # in the shard
    pieces: tuple[Piece, ...]
    source: str = ""  # the mixture's source ("" for one output)


@dataclasses.dataclass(frozen=True)
class StoredPiece(Piece):
    """A piece of a document of a store: where it is stored (shard prefix, document in the shard)."""

    stored: str = ""


def step_documents(output_dir: str, step: int, global_batch_size: int, seed: int | None, *, epoch: int = 0,
                   shuffle: bool = True, shuffle_buffer: int | None = None) -> list[RecordSource]:
    """The records of global step `step` (of epoch `epoch`, or past it) and the documents they hold."""
    manifest = load_manifest(output_dir)
    path = manifest_path(output_dir) if not output_dir.endswith(".json") else output_dir
    index = ProvenanceIndex(path, manifest)
    counts = [int(s["records"]) for s in manifest["shards"]]
    steps = steps_for(sum(counts), global_batch_size)
    if steps == 0:
        raise ValueError(f"{sum(counts)} records cannot fill one global batch of {global_batch_size}")
    token_bytes = 2 if manifest["features"]["tokens"]["dtype"] == "uint16" else 4
    window = shuffle_buffer or default_window(int(manifest["seq_len"]), token_bytes)
    order = global_order(counts, global_batch_size, seed=seed, epoch=epoch + step // steps, shuffle=shuffle,
                         window=window)
    shards, records = batch_records(order, step % steps)
    return _documents(manifest, index, np.arange(len(shards)), shards, records)


def schema_of(config: dict) -> Schema:
    """Where the output's inputs keep their text and subset name, as its manifest records."""
    default = Schema()
    return Schema(config.get("text_key", default.text_key), config.get("subset_key", default.subset_key),
                  config.get("default_subset"), config.get("subset_names", "pile") == "any")


def _documents(manifest: dict, index: ProvenanceIndex, positions, shards, records,
               source: str = "") -> list[RecordSource]:
    """The records (shard, record) at these positions of a global batch, with their documents."""
    spans = index.spans(shards, records)
    inputs = [entry["path"] for entry in manifest["inputs"]]
    documents = _texts(manifest, [(file_index, line) for rows in spans for file_index, line, _, _ in rows.tolist()])
    out = []
    for position, shard, record, rows in zip(np.asarray(positions).tolist(), shards.tolist(), records.tolist(), spans,
                                             strict=True):
        pieces = []
        for file_index, line, first, tokens in rows.tolist():
            text, subset = documents[file_index, line]
            pieces.append(Piece(subset, inputs[file_index], line, first, tokens, text))
        out.append(RecordSource(position, manifest["shards"][shard]["path"], record, tuple(pieces), source))
    return out


def mixture_documents(mixture: str, step: int, global_batch_size: int, seed: int | None, *, shuffle: bool = True,
                      shuffle_buffer: int | None = None) -> list[RecordSource]:
    """The records of global step `step` of a mixture (mixture.json), each with its source and documents.

    The mixture's schedule decides the step's sources; the answer holds for any number of ranks.
    """
    order = open_order(mixture, global_batch_size, seed=seed, shuffle=shuffle, shuffle_buffer=shuffle_buffer)
    sources, shards, records = order.batch_records(step)
    out = []
    for d, entry in enumerate(load_mixture(mixture).sources):
        at = np.flatnonzero(sources == d)
        if len(at):
            manifest = load_manifest(entry.manifest)
            index = ProvenanceIndex(entry.manifest, manifest)
            out += _documents(manifest, index, at, shards[at], records[at], entry.name)
    return sorted(out, key=lambda r: r.position)


def store_documents(location: str, step: int, global_batch_size: int, seed: int | None, *, seq_len: int,
                    packing: str = "concat", pack_window: int | None = None, schedule=None, shuffle: bool = True,
                    shuffle_buffer: int | None = None, epoch: int = 0) -> list[RecordSource]:
    """The sequences of global step `step` of a store (or mixture of stores) read at `seq_len`, with their documents."""
    mixture = load_mixture(location) if is_mixture(location) else None
    settings = StoreSettings(global_batch_size=global_batch_size, seq_len=seq_len, packing=packing, seed=seed,
                             shuffle=shuffle, epoch=epoch, shuffle_buffer=shuffle_buffer,
                             schedule=schedule, **({"pack_window": pack_window} if pack_window is not None else {}))
    reader = open_reader(mixture or location, settings, check=False)
    stores = reader.stores if mixture else [reader.store]
    names = list(mixture.names) if mixture else [""]
    lookups = [_store_lookup(store) for store in stores]
    out = []
    for position, d, layout in step_layouts(reader, step):
        store, (manifest, index) = stores[d], lookups[d]
        shards, locals_ = store.locate(layout.doc)
        wanted = []
        for shard, local in zip(shards.tolist(), locals_.tolist(), strict=True):
            wanted.append(index.line_of(shard, local) if index is not None else None)
        texts = _texts(manifest, [w for w in wanted if w is not None])
        pieces = []
        for shard, local, start, length, where in zip(shards.tolist(), locals_.tolist(), layout.start.tolist(),
                                                      layout.length.tolist(), wanted, strict=True):
            prefix = manifest["shards"][shard]["path"]
            subset = manifest["shards"][shard].get("subset") or ""
            file, line, text = ("", 0, "") if where is None else (manifest["inputs"][where[0]]["path"], where[1],
                                                                   texts[where][0])
            if where is not None:
                subset = texts[where][1]
            pieces.append(StoredPiece(subset, file, line, start, length, text, f"{prefix}:{local}"))
        out.append(RecordSource(position, "", 0, tuple(pieces), names[d]))
    return out


def _store_lookup(store) -> tuple[dict, StoreProvenance | None]:
    manifest = load_store_manifest(store.source.manifest_file)
    return manifest, (StoreProvenance(store.source.manifest_file, manifest) if manifest.get("provenance") else None)


def _texts(manifest: dict, wanted: list[tuple[int, int]]) -> dict:
    """{(file index, line): (text, subset)} of input lines."""
    inputs = [entry["path"] for entry in manifest["inputs"]]
    max_line = int(float(manifest["config"].get("max_line_mb", 64.0)) * (1 << 20))
    schema = schema_of(manifest["config"])
    by_file: dict[int, set[int]] = {}
    for file_index, line in wanted:
        by_file.setdefault(file_index, set()).add(line)
    out = {}
    for file_index, numbers in sorted(by_file.items()):
        for number, line in lines_at(inputs[file_index], numbers, max_line, schema).items():
            try:
                out[file_index, number] = parse_line(line, max_line, schema)
            except BadRecord as e:
                raise LookupError(f"{inputs[file_index]} line {number} is not the document it was ({e})") from e
    return out


def format_step(records: list[RecordSource], chars: int = 60) -> str:
    """One line per document piece: position, shard:record, subset, file:line, token range, first characters."""
    lines = []
    for r in records:
        for i, p in enumerate(r.pieces):
            label = f"{r.source} " if r.source else ""
            stored = getattr(p, "stored", "")
            where = f"{r.position:5d} {label}{stored or f'{r.shard}:{r.record}'}"
            where = where if i == 0 or stored else " " * len(where)
            start = " ".join(p.text[:chars].split())
            span = f"tokens {p.first_token}..{p.first_token + p.tokens}"
            source = f"{p.file}:{p.line}" if p.file else "(written without --provenance)"
            lines.append(f"{where}  {p.subset:<18} {source}  {span}  {start!r}")
    return "\n".join(lines)


def build_parser() -> ArgumentParser:
    """The command's flags."""
    p = ArgumentParser(prog="pile-pipeline provenance", description=__doc__)
    p.add_argument("output_dir", help="the pipeline's output directory, written with --provenance; or a "
                   "mixture.json of such outputs")
    p.add_argument("--step", type=int, required=True, help="the global step (as the trainer counts it)")
    p.add_argument("--global_batch_size", type=int, required=True, help="records per global step (all ranks)")
    p.add_argument("--seed", type=int, help="the reader's seed (required unless --no_shuffle)")
    p.add_argument("--epoch", type=int, default=0, help="the epoch --step counts from (default: 0)")
    p.add_argument("--shuffle_buffer", type=int, help="the reader's window, if the run set one")
    p.add_argument("--no_shuffle", action="store_true", help="the run read without shuffling")
    p.add_argument("--chars", type=int, default=60, help="characters of each document to show (default: 60)")
    p.add_argument("--seq_len", type=int, help="a document store: the reader's seq_len (the first, with a schedule)")
    p.add_argument("--packing", choices=("concat", "best_fit"), default="concat", help="a document store: "
                   "the reader's packing (default: concat)")
    p.add_argument("--pack_window", type=int, help="a document store, best_fit: the reader's pack_window")
    p.add_argument("--schedule", help='a document store: the reader\'s schedule, as JSON: [{"step": K, "seq_len": '
                   'L, "global_batch_size": G}, ...]')
    return p


def main(argv=None) -> None:
    """Parse the flags and print the documents of the step."""
    args = build_parser().parse_args(argv)
    if args.seed is None and not args.no_shuffle:
        raise UsageError("--seed is required (the reader's seed of the run), or --no_shuffle")
    for flag, value, lowest in (("--step", args.step, 0), ("--global_batch_size", args.global_batch_size, 1),
                                ("--epoch", args.epoch, 0), ("--chars", args.chars, 0)):
        if value < lowest:  # a negative step would wrap around to another step's records
            raise UsageError(f"{flag} {value}: must be >= {lowest}")
    if _is_store_input(args.output_dir):
        if args.seq_len is None:
            raise UsageError("--seq_len is required for a document store (the reader packs it at that length)")
        try:
            schedule = json.loads(args.schedule) if args.schedule else None
        except json.JSONDecodeError as e:
            raise UsageError(f"--schedule: not JSON ({e})") from None
        records = store_documents(args.output_dir, args.step, args.global_batch_size, args.seed,
                                  seq_len=args.seq_len, packing=args.packing, pack_window=args.pack_window,
                                  schedule=schedule, shuffle=not args.no_shuffle, shuffle_buffer=args.shuffle_buffer,
                                  epoch=args.epoch)
    elif is_mixture(args.output_dir):
        if args.epoch:
            raise UsageError("--epoch: a mixture has no epoch of its own; give the global --step")
        records = mixture_documents(args.output_dir, args.step, args.global_batch_size, args.seed,
                                    shuffle=not args.no_shuffle, shuffle_buffer=args.shuffle_buffer)
    else:
        records = step_documents(args.output_dir, args.step, args.global_batch_size, args.seed, epoch=args.epoch,
                                 shuffle=not args.no_shuffle, shuffle_buffer=args.shuffle_buffer)
    print(format_step(records, args.chars))


def _is_store_input(location: str) -> bool:
    if is_mixture(location):
        try:
            return is_store(load_mixture(location).sources[0].manifest)
        except MixtureError:
            return False
    return is_store(location)


def cli(argv=None) -> int:
    """The command: exit status 0, or 2 with one line."""
    try:
        main(argv)
    except (UsageError, ManifestError, FileNotFoundError, LookupError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
