r"""gopher_repetition: Gopher's repetition rules (Rae et al. 2021, table A1), as datatrove 0.10.1's filter.

The rules, in datatrove's order; the first that fails names the removal (its reason string):

  empty                     the text is empty
  dup_para_frac             paragraphs (the stripped text split on "\n{2,}") that repeat an earlier one,
                            / paragraphs > dup_para_frac
  dup_para_char_frac        their characters / the text's characters > dup_para_char_frac
  dup_line_frac             lines (the text split on "\n+", not stripped: a leading "\n" makes an empty
                            line) that repeat an earlier one / lines > dup_line_frac
  dup_line_char_frac        their characters / the text's characters > dup_line_char_frac
  top_{n}_gram              for each (n, fraction) of top_n_grams, in order: the most frequent word n-gram
                            (the first seen among equals; words joined by " "), its length times its count,
                            / the text's characters > fraction (a text with one n-gram, seen once, can fail)
  duplicated_{n}_n_grams    for each (n, fraction) of dup_n_grams, in order: scanning the word n-grams (words
                            joined with nothing between) from the start, a repeat of one seen before adds
                            its characters and skips n words, else the scan moves one word;
                            / the text's characters > fraction

Words are spaCy blank-English tokens (`words/`). As in datatrove, a fraction of 0 turns the four
line and paragraph rules off; an n-gram rule is off when left out of its list; n is at most MAX_N.
A removal's record carries the rule's `value` (the share it measured) and its `threshold`.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections import Counter
from operator import itemgetter

from pipeline.core.options import option
from pipeline.stages.base import Doc, Remove, measured
from pipeline.stages.ranges import SHARE, check_ranges
from pipeline.stages.spacy_stage import SpacyStage
from pipeline.stages.words import thread_words

_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile("\n+")


# The largest n of an n-gram rule. Both rules keep an n-gram per word of the document, so their
# time and memory grow with n times its words (n = 16,000 took 1.5 GB on one 250 KB document);
# Gopher's rules use n of 2 to 10.
MAX_N = 20


def parse_n_grams(value) -> tuple[tuple[int, float], ...]:
    """Parse "2:0.2,3:0.18" (or a TOML list of [n, fraction] pairs; "none": no rule) -> ((2, 0.2), (3, 0.18)).

    n in 1..MAX_N, each n once; a fraction in [0, 1].
    """
    if isinstance(value, str):
        if value.strip().lower() in ("", "none"):
            return ()
        pairs = [item.split(":") for item in value.split(",")]
    else:
        pairs = list(value)
    out = []
    for pair in pairs:
        if len(pair) != 2:
            raise ValueError(f"expected N:FRACTION pairs separated by commas (2:0.2,3:0.18), got {value!r}")
        n, fraction = int(pair[0]), float(pair[1])
        if not 1 <= n <= MAX_N or not 0 <= fraction <= 1:
            raise ValueError(f"an n-gram size is 1 to {MAX_N} (time and memory grow with n times a document's "
                             f"words) and a fraction in [0, 1], got {n}:{fraction:g}")
        if n in (m for m, _ in out):
            raise ValueError(f"n = {n} given twice")
        out.append((n, fraction))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class GopherRepetitionOptions:
    """The thresholds of gopher_repetition (datatrove's defaults, Gopher's table A1)."""

    gopher_dup_para_frac: float = option(
        0.3, help="gopher_repetition: largest share of repeated paragraphs (dup_para_frac; 0: off)")
    gopher_dup_para_char_frac: float = option(
        0.2, help="gopher_repetition: largest share of characters in repeated paragraphs (dup_para_char_frac; 0: off)")
    gopher_dup_line_frac: float = option(
        0.3, help="gopher_repetition: largest share of repeated lines (dup_line_frac; 0: off)")
    gopher_dup_line_char_frac: float = option(
        0.2, help="gopher_repetition: largest share of characters in repeated lines (dup_line_char_frac; 0: off)")
    gopher_top_n_grams: tuple = option(
        ((2, 0.2), (3, 0.18), (4, 0.16)), parse=parse_n_grams, metavar="N:FRAC,...",
        shown_default="2:0.2,3:0.18,4:0.16",
        help="gopher_repetition: largest share of characters in the most frequent word n-gram (top_{n}_gram; "
        "none: off)")
    gopher_dup_n_grams: tuple = option(
        ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)), parse=parse_n_grams,
        metavar="N:FRAC,...", shown_default="5:0.15,6:0.14,7:0.13,8:0.12,9:0.11,10:0.1",
        help="gopher_repetition: largest share of characters in repeated word n-grams (duplicated_{n}_n_grams; "
        "none: off)")

    def __post_init__(self):
        check_ranges(self, {name: SHARE for name in ("gopher_dup_para_frac", "gopher_dup_para_char_frac",
                                                     "gopher_dup_line_frac", "gopher_dup_line_char_frac")})
        for name in ("gopher_top_n_grams", "gopher_dup_n_grams"):
            try:
                parse_n_grams(getattr(self, name))  # the same checks when the options are made in code
            except ValueError as e:
                raise ValueError(f"--{name}: {e}") from None


def duplicates(items: list[str]) -> tuple[int, int]:
    """(items equal to an earlier one, their characters): datatrove's `find_duplicates`."""
    counts = Counter(items)
    if len(counts) == len(items):
        return 0, 0
    extra = [(len(item), c - 1) for item, c in counts.items() if c > 1]
    return sum(c for _, c in extra), sum(size * c for size, c in extra)


def top_n_gram_chars(words: list[str], n: int) -> int:
    """The most frequent word n-gram's length (words joined by " ") times its count; the first seen wins ties."""
    grams = Counter(zip(*(itertools.islice(words, i, None) for i in range(n)), strict=False))
    gram, count = max(grams.items(), key=itemgetter(1))  # max keeps the first of equals, as most_common(1)
    return (sum(map(len, gram)) + n - 1) * count


def repeated_n_gram_chars(joined: str, offsets: list[int], n: int, size: int = 1,
                          fraction: float = float("inf")) -> int:
    """Characters in repeated n-grams (words joined with nothing), counted greedily: datatrove's `find_all_duplicate`.

    joined is "".join(words) and offsets its word starts plus its end; the scan may stop once the
    count / size exceeds `fraction` (the count only grows, so the decision is the same).
    """
    grams = [joined[a:b] for a, b in zip(offsets, offsets[n:], strict=False)]
    if len(set(grams)) == len(grams):
        return 0
    seen: set[str] = set()
    repeated, i = 0, 0
    while i < len(grams):
        gram = grams[i]
        if gram in seen:
            repeated += len(gram)
            if repeated / size > fraction:
                return repeated
            i += n
        else:
            seen.add(gram)
            i += 1
    return repeated


def gopher_repetition_removal(text: str, words: list[str], opts: GopherRepetitionOptions) -> Remove | None:
    """The first rule the text fails (datatrove's reason string, with its value and threshold), or None."""
    if not text:
        return Remove("empty")
    size = len(text)
    paragraphs = _PARAGRAPHS.split(text.strip())
    dup, chars = duplicates(paragraphs)
    if opts.gopher_dup_para_frac and dup / len(paragraphs) > opts.gopher_dup_para_frac:
        return Remove("dup_para_frac", measured(dup / len(paragraphs), opts.gopher_dup_para_frac))
    if opts.gopher_dup_para_char_frac and chars / size > opts.gopher_dup_para_char_frac:
        return Remove("dup_para_char_frac", measured(chars / size, opts.gopher_dup_para_char_frac))
    lines = _LINES.split(text)
    dup, chars = duplicates(lines)
    if opts.gopher_dup_line_frac and dup / len(lines) > opts.gopher_dup_line_frac:
        return Remove("dup_line_frac", measured(dup / len(lines), opts.gopher_dup_line_frac))
    if opts.gopher_dup_line_char_frac and chars / size > opts.gopher_dup_line_char_frac:
        return Remove("dup_line_char_frac", measured(chars / size, opts.gopher_dup_line_char_frac))
    for n, fraction in opts.gopher_top_n_grams:
        if len(words) >= n:
            share = top_n_gram_chars(words, n) / size
            if share > fraction:
                return Remove(f"top_{n}_gram", measured(share, fraction))
    if opts.gopher_dup_n_grams:
        joined = "".join(words)
        offsets = [0, *itertools.accumulate(map(len, words))]
        for n, fraction in opts.gopher_dup_n_grams:
            if repeated_n_gram_chars(joined, offsets, n, size, fraction) / size > fraction:
                # the scan stopped past the threshold: the whole scan for the record's value
                return Remove(f"duplicated_{n}_n_grams", measured(repeated_n_gram_chars(joined, offsets, n) / size,
                                                                  fraction))
    return None


class GopherRepetition(SpacyStage):
    """--filters gopher_repetition (the module docstring)."""

    name = "gopher_repetition"
    Options = GopherRepetitionOptions

    def apply(self, doc: Doc) -> Remove | None:
        """Removed with the first rule it fails."""
        return gopher_repetition_removal(doc.text, thread_words().words(doc.text), self.options)
