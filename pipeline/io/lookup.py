"""Look up given lines of an input file (for `pile-pipeline provenance`): one streaming pass, bounded memory."""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.core.documents import PILE, Line, Schema
from pipeline.io import columnar
from pipeline.io.inputs import iter_lines


def lines_at(path: str, numbers: Iterable[int], max_line_bytes: int, schema: Schema = PILE) -> dict[int, Line]:
    """The lines numbered `numbers` (1-based) of a file; reading stops after the last one wanted.

    A Parquet or Arrow file's lines are its rows, read from the columns `schema` names.

    Raises:
        LookupError: the file has fewer lines than asked for (not the file the output was made from).
    """
    wanted = set(numbers)
    found: dict[int, Line] = {}
    if not wanted:
        return found
    lines = columnar.iter_lines(path, schema) if columnar.is_columnar(path) else iter_lines(path, max_line_bytes)
    for line in lines:
        if line.number in wanted:
            found[line.number] = line
            if len(found) == len(wanted):
                break
    missing = sorted(wanted - set(found))
    if missing:
        raise LookupError(f"{path} has no line {missing[0]}: is it the file the output was made from?")
    return found
