r"""fineweb_quality: FineWeb's line rules (Penedo et al. 2024), as datatrove 0.10.1's `FineWebQualityFilter`.

Lines are `text.split("\n")` without the blank ones (not stripped: a line ending "\\r" does not end
with a stop character). The rules, in datatrove's order; the first that fails names the removal:

  empty              no line left
  line_punct_ratio   lines ending with a stop character (datatrove's TERMINAL_PUNCTUATION, 159
                     characters of many scripts) / lines < line_punct_thr (unless the share is 0 and
                     line_punct_exclude_zero)
  short_line_ratio   lines of at most short_line_length characters / lines > short_line_thr
  char_dup_ratio     characters of lines equal to an earlier line / characters of the text without
                     its "\n" > char_duplicates_ratio
  list_ratio         "\n" in the text / words (spaCy blank-English tokens) > new_line_ratio

A removal's record carries the rule's `value` (the share it measured) and its `threshold`.
"""

from __future__ import annotations

import dataclasses

from pipeline.core.options import option, parse_bool
from pipeline.stages.base import Doc, Remove, measured
from pipeline.stages.gopher_repetition import duplicates
from pipeline.stages.punctuation import TERMINAL
from pipeline.stages.ranges import AT_LEAST_0, SHARE, check_ranges
from pipeline.stages.spacy_stage import SpacyStage
from pipeline.stages.words import thread_words

TERMINAL_ENDINGS = tuple(TERMINAL)


@dataclasses.dataclass(frozen=True)
class FineWebQualityOptions:
    """The thresholds of fineweb_quality (datatrove's defaults)."""

    fineweb_line_punct_thr: float = option(
        0.12, help="fineweb_quality: smallest share of lines ending with a stop character (line_punct_ratio)")
    fineweb_line_punct_exclude_zero: bool = option(
        False, parse=parse_bool, help="fineweb_quality: keep texts where no line ends with one")
    fineweb_short_line_thr: float = option(
        0.67, help="fineweb_quality: largest share of short lines (short_line_ratio)")
    fineweb_short_line_length: int = option(30, help="fineweb_quality: a line of at most this many characters is short")
    fineweb_char_duplicates_ratio: float = option(
        0.01, help="fineweb_quality: largest share of characters in repeated lines (char_dup_ratio)")
    fineweb_new_line_ratio: float = option(0.3, help="fineweb_quality: most line breaks per word (list_ratio)")

    def __post_init__(self):
        check_ranges(self, {"fineweb_line_punct_thr": SHARE, "fineweb_short_line_thr": SHARE,
                            "fineweb_short_line_length": AT_LEAST_0, "fineweb_char_duplicates_ratio": SHARE,
                            "fineweb_new_line_ratio": AT_LEAST_0})  # line breaks per word: above 1 in lists


def fineweb_quality_removal(text: str, words_of, opts: FineWebQualityOptions) -> Remove | None:
    """The first rule the text fails (datatrove's reason string, with its value and threshold), or None.

    words_of(text) -> its words.
    """
    lines = [line for line in text.split("\n") if line.strip() != ""]
    if not lines:
        return Remove("empty")
    ratio = sum(1 for line in lines if line.endswith(TERMINAL_ENDINGS)) / len(lines)
    if ratio < opts.fineweb_line_punct_thr and not (ratio == 0 and opts.fineweb_line_punct_exclude_zero):
        return Remove("line_punct_ratio", measured(ratio, opts.fineweb_line_punct_thr))
    ratio = sum(1 for line in lines if len(line) <= opts.fineweb_short_line_length) / len(lines)
    if ratio > opts.fineweb_short_line_thr:
        return Remove("short_line_ratio", measured(ratio, opts.fineweb_short_line_thr))
    ratio = duplicates(lines)[1] / (len(text) - text.count("\n"))
    if ratio > opts.fineweb_char_duplicates_ratio:
        return Remove("char_dup_ratio", measured(ratio, opts.fineweb_char_duplicates_ratio))
    ratio = text.count("\n") / len(words_of(text))
    if ratio > opts.fineweb_new_line_ratio:
        return Remove("list_ratio", measured(ratio, opts.fineweb_new_line_ratio))
    return None


class FineWebQuality(SpacyStage):
    """--filters fineweb_quality (the module docstring)."""

    name = "fineweb_quality"
    Options = FineWebQualityOptions

    def apply(self, doc: Doc) -> Remove | None:
        """Removed with the first rule it fails."""
        return fineweb_quality_removal(doc.text, thread_words().words, self.options)
