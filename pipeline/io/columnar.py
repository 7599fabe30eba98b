"""Parquet and Arrow inputs (local or s3://) read as rows, streamed by row group with bounded memory.

A row becomes a `Line` like a JSON line's: its data is the JSON object of the two values the job
reads, at their paths (`{"body": ..., "source": {"name": ...}}` for `--text_key body --subset_key
source.name`), so validation, dead letters and the documents are exactly those of the same rows
written as JSON lines (pipeline/core/documents.py). A value JSON cannot hold (bytes, a date) rides in
`Line.row` and is a dead letter naming its type. Line numbers are 1-based row numbers of the file.

Only the columns on the two paths (and --id_key's, and those a stage reads, `Schema.extra_keys`: the
URL filter's --url_key) are read, one row group (Parquet) or record batch (Arrow) at a time, never a
whole file. Each Parquet row group is a work item (`RowGroup`) that any worker reads on its own; its
chunks are numbered `group * GROUP_CHUNKS + k`, so the chunks, and the output, are the same however
the groups are spread. An Arrow file (IPC file or stream format, as
`datasets.save_to_disk` writes) is one work item, its record batches numbered the same way.

`check_columns` runs before the job: a text path the file does not have (or a subset path without
--default_subset, or a stage's key) is refused naming the flag and the file's columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import fsspec
import orjson
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq

from pipeline.core.documents import Line, Schema
from pipeline.io.inputs import MAX_CHUNK_LINES, Chunk, CorruptInputError
from pipeline.io.urls import redact_url

PARQUET = (".parquet", ".pq")
ARROW = (".arrow", ".feather", ".ipc")
GROUP_CHUNKS = 1 << 12  # chunk numbers per row group: 16 GiB of text at 4 MiB chunks
ArrowError = pa.ArrowException  # what pyarrow raises on a file it cannot read


class ColumnError(ValueError):
    """A --text_key or --subset_key path that an input's columns do not have."""


@dataclasses.dataclass(frozen=True)
class RowGroup:
    """One Parquet row group of a file: its index and the rows before it."""

    index: int
    first_row: int
    rows: int
    size: int  # compressed bytes, for progress


def is_columnar(path: str) -> bool:
    """Whether the file is read as rows (Parquet, Arrow) rather than as lines."""
    return path.lower().endswith(PARQUET + ARROW)


def _open(path: str):
    fs, root = fsspec.core.url_to_fs(path)
    return fs.open(root, "rb")


def _arrow_reader(f):
    """An Arrow IPC file's or stream's reader: (schema, iterator of record batches)."""
    try:
        reader = pa.ipc.open_file(f)
        return reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))
    except pa.ArrowInvalid:
        f.seek(0)
        reader = pa.ipc.open_stream(f)
        return reader.schema, iter(reader)


def file_schema(path: str) -> pa.Schema:
    """The Arrow schema of a columnar input (reads only its footer or header)."""
    try:
        with _open(path) as f:
            if path.lower().endswith(PARQUET):
                return pq.ParquetFile(f).schema_arrow
            return _arrow_reader(f)[0]
    except (pa.ArrowInvalid, OSError) as e:
        kind = "Parquet" if path.lower().endswith(PARQUET) else "Arrow"
        raise CorruptInputError(f"{redact_url(path)}: not a readable {kind} file ({e})") from None


def _resolve(schema: pa.Schema, path: tuple[str, ...]) -> bool:
    """Whether the dotted path names a column, or a field of struct columns."""
    fields = schema
    for depth, key in enumerate(path):
        index = fields.get_field_index(key)
        if index < 0:
            return False
        kind = fields.field(index).type
        if depth < len(path) - 1:
            if not pa.types.is_struct(kind):
                return False
            fields = kind
    return True


def columns_of(schema: pa.Schema) -> str:
    """The columns of a schema for a message, struct fields as dotted paths."""
    names = []

    def walk(prefix: str, fields) -> None:
        for field in fields:
            names.append(prefix + field.name)
            if pa.types.is_struct(field.type):
                walk(prefix + field.name + ".", field.type)

    walk("", schema)
    return ", ".join(names)


def check_columns(path: str, schema: Schema) -> None:
    """Raise ColumnError unless the file has the text path (the subset path without a default, the stages' keys)."""
    arrow = file_schema(path)
    if not _resolve(arrow, schema.text_path):
        raise ColumnError(f"--text_key {schema.text_key}: {redact_url(path)} has no such column "
                          f"(its columns: {columns_of(arrow)})")
    if schema.default_subset is None and not _resolve(arrow, schema.subset_path):
        raise ColumnError(f"--subset_key {schema.subset_key}: {redact_url(path)} has no such column "
                          f"(its columns: {columns_of(arrow)}); pass --default_subset other to put every row in "
                          "one subset (any NAME)")
    for (flag, key), key_path in zip(schema.extra_keys, schema.extra_paths, strict=True):
        if not _resolve(arrow, key_path):  # every row would lack it: a stage would remove every document
            raise ColumnError(f"{flag} {key}: {redact_url(path)} has no such column "
                              f"(its columns: {columns_of(arrow)})")


def read_units(path: str) -> list[RowGroup | None]:
    """A Parquet file's row groups; [None] for an Arrow file (read whole)."""
    if not path.lower().endswith(PARQUET):
        return [None]
    with _open(path) as f:
        meta = pq.ParquetFile(f).metadata
    groups, first = [], 0
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        size = sum(group.column(c).total_compressed_size for c in range(group.num_columns))
        groups.append(RowGroup(i, first, group.num_rows, size))
        first += group.num_rows
    return groups or [None]


def _leaf(table: pa.Table, path: tuple[str, ...]):
    """The values at a dotted path (parent nulls kept as nulls), or None when the file lacks it."""
    if not _resolve(table.schema, path):
        return None
    array = table.column(path[0]).combine_chunks()
    for key in path[1:]:
        array = array.flatten()[array.type.get_field_index(key)]  # flatten applies the parent's nulls
    return array.to_pylist()


def _nest(row: dict, path: tuple[str, ...], value) -> None:
    for key in path[:-1]:
        row = row.setdefault(key, {})
    row[path[-1]] = value


def _lines(table: pa.Table, schema: Schema, first_row: int) -> Iterator[tuple[Line, int]]:
    """(Line, its size for chunking) of each row.

    The size is the row's without its --id_key value and the stages' extra values, so that they never
    move a chunk's boundary (the chunks, and so the shards, are those of the same job without them).
    """
    texts = _leaf(table, schema.text_path)
    subsets = _leaf(table, schema.subset_path)
    more = [(path, _leaf(table, path)) for path in ((schema.id_path,) if schema.id_path else ()) + schema.extra_paths]
    more = [(path, values) for path, values in more if values is not None]
    for i in range(table.num_rows):
        row: dict = {}
        _nest(row, schema.text_path, None if texts is None else texts[i])
        if subsets is not None:
            _nest(row, schema.subset_path, subsets[i])
        size = None
        for path, values in more:
            if values[i] is not None:
                if size is None:
                    size = len(orjson.dumps(row, default=repr))
                _nest(row, path, values[i])
        try:
            line = Line(first_row + i + 1, first_row + i, orjson.dumps(row))
        except TypeError:  # a value JSON cannot hold: validated from the row itself
            line = Line(first_row + i + 1, first_row + i, orjson.dumps(row, default=repr), row=row)
        yield line, len(line.data) if size is None else size


def _chunks(tables: Iterator[tuple[int, int, pa.Table, int]], path: str, file_index: int, chunk_bytes: int,
            schema: Schema) -> Iterator[Chunk]:
    """Chunks of (group index, first row, table, stored bytes) tables, numbered per group."""
    for group, first_row, table, stored in tables:
        lines: list[Line] = []
        size = k = 0
        last = table.num_rows - 1
        for i, (line, line_size) in enumerate(_lines(table, schema, first_row)):
            lines.append(line)
            size += line_size + 1
            if size >= chunk_bytes or len(lines) >= MAX_CHUNK_LINES or i == last:
                if k == GROUP_CHUNKS:  # its number would be the next group's first
                    raise CorruptInputError(f"{redact_url(path)}: row group {group} makes more than {GROUP_CHUNKS} "
                                            "chunks (a larger --chunk_mb reads it)")
                # The group's stored bytes (for progress) ride on its last chunk.
                yield Chunk(file_index, group * GROUP_CHUNKS + k, path, tuple(lines), stored if i == last else 0)
                k += 1
                lines, size = [], 0


def _columns(schema: Schema, arrow: pa.Schema) -> list[str]:
    paths = (schema.text_path, schema.subset_path) + ((schema.id_path,) if schema.id_path else ()) + schema.extra_paths
    return sorted({p[0] for p in paths if arrow.get_field_index(p[0]) >= 0})


def iter_unit_chunks(path: str, file_index: int, unit: RowGroup | None, chunk_bytes: int,
                     schema: Schema) -> Iterator[Chunk]:
    """The chunks of one work item: a Parquet row group, or a whole file (unit None)."""
    shown = redact_url(path)
    if unit is not None and not isinstance(unit, RowGroup):  # a stripe: every worker would read every row
        raise ValueError(f"{shown}: a columnar file is read by row group or whole, not in {type(unit).__name__}s")
    try:
        with _open(path) as f:
            if path.lower().endswith(PARQUET):
                parquet = pq.ParquetFile(f)
                columns = _columns(schema, parquet.schema_arrow)
                groups = [unit] if unit is not None else read_units(path)
                tables = ((g.index, g.first_row, parquet.read_row_group(g.index, columns=columns), g.size)
                          for g in groups if g is not None)
                yield from _chunks(tables, path, file_index, chunk_bytes, schema)
                return
            arrow, batches = _arrow_reader(f)
            columns = _columns(schema, arrow)

            def tables():
                first = 0
                for i, batch in enumerate(batches):
                    yield i, first, pa.Table.from_batches([batch.select(columns)]), 0
                    first += batch.num_rows

            yield from _chunks(tables(), path, file_index, chunk_bytes, schema)
    except (pa.ArrowInvalid, pa.ArrowIOError) as e:
        raise CorruptInputError(f"{shown}: damaged columnar file ({e})") from None



def iter_lines(path: str, schema: Schema) -> Iterator[Line]:
    """Every row of a columnar file as a Line, one row group or batch in memory at a time."""
    for chunk in iter_unit_chunks(path, 0, None, 1 << 62, schema):
        yield from chunk.lines
