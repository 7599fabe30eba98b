"""Plain-text tables for terminal output: the first column left-aligned, the others right-aligned.

>>> print(format_table([("name", "n"), ("a", "1"), ("bb", "22")]))
name   n
--------
a      1
bb    22
"""

from __future__ import annotations

from collections.abc import Sequence


def format_table(rows: Sequence[Sequence[str]], rules_before: Sequence[int] = ()) -> str:
    """Rows of cells (the first is the header, underlined); `rules_before`: row indices to rule off."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    rule = "-" * len(lines[0])
    out = [lines[0], rule]
    for index, line in enumerate(lines[1:], start=1):
        if index in rules_before:
            out.append(rule)
        out.append(line)
    return "\n".join(out)
