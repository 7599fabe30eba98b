r"""Document text made safe to show: cut to a length first, then every control character made visible.

A removed document is untrusted text: terminal escape sequences, bidirectional overrides that
reorder what a reader sees, NULs, a 10 MB line. `shown` cuts it to `chars` characters (linear in
what is kept, whatever the document's length) and writes each control or bidi character as a
visible escape, keeping newlines and tabs; the HTML page escapes that again (html.escape).

    >>> shown("a\x1b[31mred\x00", 100)
    'a\\x1b[31mred\\x00'
    >>> shown("x" * 10, 4)
    'xxxx… [6 more characters]'
"""

from __future__ import annotations

import re

# C0 and C1 controls but newline and tab, DEL, and the bidi embeddings, overrides and isolates.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """The text with each control or bidi character written as an escape (a backslash, x1b or u202e)."""
    return _UNSAFE.sub(_escape, text)


def clip(text: str, chars: int) -> str:
    """The first `chars` characters (all with chars <= 0), and how many more there are."""
    if chars <= 0 or len(text) <= chars:
        return text
    return f"{text[:chars]}… [{len(text) - chars:,} more characters]"


def shown(text: str, chars: int) -> str:
    """`clip`, then `visible`: what a terminal or a page may show of a document."""
    if chars <= 0 or len(text) <= chars:
        return visible(text)
    return f"{visible(text[:chars])}… [{len(text) - chars:,} more characters]"


def lines_cut(before: str, after: str) -> list[str]:
    """The lines of `before` that `after` does not keep, in order (a line changed counts as cut).

    Linear: each line of `before` is matched, stripped, against the lines of `after` left to match.
    """
    left: dict[str, int] = {}
    for line in after.split("\n"):
        left[line.strip()] = left.get(line.strip(), 0) + 1
    out = []
    for line in before.split("\n"):
        if left.get(line.strip(), 0):
            left[line.strip()] -= 1
        else:
            out.append(line)
    return out
