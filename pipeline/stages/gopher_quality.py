"""gopher_quality: Gopher's quality rules (Rae et al. 2021, A1), as datatrove 0.10.1's `GopherQualityFilter`.

The rules, in datatrove's order; the first that fails names the removal (its reason string):

  words: spaCy blank-English tokens (`words/`); "non-symbol words": those with a character
  outside datatrove's punctuation set (`punctuation.py`)
  gopher_short_doc / gopher_long_doc       non-symbol words < min_doc_words / > max_doc_words
  gopher_below_avg_threshold / ..._above_  mean length of the non-symbol words outside [min, max]
  gopher_too_many_hashes                   count("#") / words > max_symbol_word_ratio
  gopher_too_many_ellipsis                 (count("...") + count("…")) / words > max_symbol_word_ratio
  gopher_too_many_bullets                  lines (str.splitlines) starting, after lstrip, with "•" or "-" / lines
                                           > max_bullet_lines_ratio
  gopher_too_many_end_ellipsis             lines ending, after rstrip, with "..." or "…" / lines
                                           > max_ellipsis_lines_ratio
  gopher_below_alpha_threshold             words with an alphabetic character / words < max_non_alpha_words_ratio
                                           (datatrove's name; it is a minimum)
  gopher_enough_stop_words                 distinct stop words among the words (case-sensitive) < min_stop_words

As in datatrove, a threshold of 0 turns its rule off. One difference, where datatrove cannot
answer: a text without words (whitespace only) with min_doc_words off makes datatrove divide by
zero; here it is removed as gopher_short_doc. A removal's record carries the rule's `value` (the
count, mean or share it measured) and its `threshold`.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator

from pipeline.core.options import option
from pipeline.stages.base import Doc, Remove, measured
from pipeline.stages.punctuation import PUNCTUATION_SET
from pipeline.stages.ranges import AT_LEAST_0, SHARE, check_ranges
from pipeline.stages.spacy_stage import SpacyStage
from pipeline.stages.words import thread_words

STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")


def _words_list(value) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else list(value)
    words = tuple(w.strip() for item in items for w in str(item).split(",") if w.strip())
    if not words:
        raise ValueError("give at least one stop word (or --gopher_min_stop_words 0 to turn the rule off)")
    return words


@dataclasses.dataclass(frozen=True)
class GopherQualityOptions:
    """The thresholds of gopher_quality (datatrove's defaults; 0 turns a rule off)."""

    gopher_min_doc_words: int = option(50, help="gopher_quality: fewest non-symbol words (gopher_short_doc)")
    gopher_max_doc_words: int = option(100_000, help="gopher_quality: most non-symbol words (gopher_long_doc)")
    gopher_min_avg_word_length: float = option(
        3, help="gopher_quality: shortest mean length of the non-symbol words (gopher_below_avg_threshold)")
    gopher_max_avg_word_length: float = option(
        10, help="gopher_quality: longest mean length of the non-symbol words (gopher_above_avg_threshold)")
    gopher_max_symbol_word_ratio: float = option(
        0.1, help="gopher_quality: most '#', and most '...' or '…', per word (gopher_too_many_hashes, _ellipsis)")
    gopher_max_bullet_lines_ratio: float = option(
        0.9, help="gopher_quality: largest share of lines starting with a bullet '•' or '-' (gopher_too_many_bullets)")
    gopher_max_ellipsis_lines_ratio: float = option(
        0.3, help="gopher_quality: largest share of lines ending with '...' or '…' (gopher_too_many_end_ellipsis)")
    gopher_max_non_alpha_words_ratio: float = option(
        0.8, help="gopher_quality: smallest share of words with a letter (gopher_below_alpha_threshold; "
        "datatrove's name)")
    gopher_min_stop_words: int = option(
        2, help="gopher_quality: fewest distinct stop words present, case-sensitive (gopher_enough_stop_words)")
    gopher_stop_words: tuple = option(STOP_WORDS, parse=_words_list, metavar="WORD,WORD",
                                      help="gopher_quality: the stop words")

    def __post_init__(self):
        check_ranges(self, _RANGES)
        for low, high in (("gopher_min_doc_words", "gopher_max_doc_words"),
                          ("gopher_min_avg_word_length", "gopher_max_avg_word_length")):
            if getattr(self, low) and getattr(self, high) and getattr(self, low) > getattr(self, high):
                raise ValueError(f"--{low} {getattr(self, low):g} is above --{high} {getattr(self, high):g}: "
                                 "every document would be removed")
        stop_words = len(set(self.gopher_stop_words))
        if self.gopher_min_stop_words > stop_words:
            raise ValueError(f"--gopher_min_stop_words {self.gopher_min_stop_words} is above the {stop_words} distinct "
                             "--gopher_stop_words: every document would be removed")


_RANGES = {"gopher_min_doc_words": AT_LEAST_0, "gopher_max_doc_words": AT_LEAST_0,
           "gopher_min_avg_word_length": AT_LEAST_0, "gopher_max_avg_word_length": AT_LEAST_0,
           "gopher_max_symbol_word_ratio": AT_LEAST_0,  # '#' per word: above 1 when words hold several
           "gopher_max_bullet_lines_ratio": SHARE, "gopher_max_ellipsis_lines_ratio": SHARE,
           "gopher_max_non_alpha_words_ratio": SHARE, "gopher_min_stop_words": AT_LEAST_0}


class _WordFacts(dict):
    """word -> whether it is a non-symbol word, computed once per word (bounded: emptied when full)."""

    def __init__(self, fact):
        super().__init__()
        self._fact = fact

    def __missing__(self, word: str) -> bool:
        value = self._fact(word)
        if len(word) <= 1000:  # memory bounded by the count of entries
            if len(self) >= 200_000:
                self.clear()
            self[word] = value
        return value


_NON_SYMBOL = _WordFacts(lambda w: not PUNCTUATION_SET.issuperset(w))
_HAS_ALPHA = _WordFacts(lambda w: w.isalpha() or any(map(str.isalpha, w)))
_STARTS_WITH_BULLET = operator.methodcaller("startswith", ("•", "-"))
_ENDS_WITH_ELLIPSIS = operator.methodcaller("endswith", ("...", "…"))


def gopher_quality_removal(text: str, words: list[str], opts: GopherQualityOptions) -> Remove | None:
    """The first rule the text fails (datatrove's reason string, with its value and threshold), or None."""
    n_words = len(words)
    non_symbol = list(map(_NON_SYMBOL.__getitem__, words))
    n_non_symbol = sum(non_symbol)
    if opts.gopher_min_doc_words and n_non_symbol < opts.gopher_min_doc_words:
        return Remove("gopher_short_doc", measured(n_non_symbol, opts.gopher_min_doc_words))
    if opts.gopher_max_doc_words and n_non_symbol > opts.gopher_max_doc_words:
        return Remove("gopher_long_doc", measured(n_non_symbol, opts.gopher_max_doc_words))
    if n_words == 0:
        return Remove("gopher_short_doc", measured(0, opts.gopher_min_doc_words))
    if n_non_symbol:  # numpy's mean of no values is nan, which passes both bounds
        # an exact float sum of integers, then one rounding: numpy's mean to the last bit
        mean = sum(itertools.compress(map(len, words), non_symbol)) / n_non_symbol
        if opts.gopher_min_avg_word_length and mean < opts.gopher_min_avg_word_length:
            return Remove("gopher_below_avg_threshold", measured(mean, opts.gopher_min_avg_word_length))
        if opts.gopher_max_avg_word_length and mean > opts.gopher_max_avg_word_length:
            return Remove("gopher_above_avg_threshold", measured(mean, opts.gopher_max_avg_word_length))
    ratio = opts.gopher_max_symbol_word_ratio
    if ratio and text.count("#") / n_words > ratio:
        return Remove("gopher_too_many_hashes", measured(text.count("#") / n_words, ratio))
    if ratio and (text.count("...") + text.count("…")) / n_words > ratio:
        return Remove("gopher_too_many_ellipsis", measured((text.count("...") + text.count("…")) / n_words, ratio))
    lines = text.splitlines()
    threshold = opts.gopher_max_bullet_lines_ratio
    if threshold:
        share = sum(map(_STARTS_WITH_BULLET, map(str.lstrip, lines))) / len(lines)
        if share > threshold:
            return Remove("gopher_too_many_bullets", measured(share, threshold))
    threshold = opts.gopher_max_ellipsis_lines_ratio
    if threshold:
        share = sum(map(_ENDS_WITH_ELLIPSIS, map(str.rstrip, lines))) / len(lines)
        if share > threshold:
            return Remove("gopher_too_many_end_ellipsis", measured(share, threshold))
    threshold = opts.gopher_max_non_alpha_words_ratio
    if threshold:
        share = sum(map(_HAS_ALPHA.__getitem__, words)) / n_words
        if share < threshold:
            return Remove("gopher_below_alpha_threshold", measured(share, threshold))
    if opts.gopher_min_stop_words:
        present = len(set(opts.gopher_stop_words).intersection(words))
        if present < opts.gopher_min_stop_words:
            return Remove("gopher_enough_stop_words", measured(present, opts.gopher_min_stop_words))
    return None


class GopherQuality(SpacyStage):
    """--filters gopher_quality (the module docstring)."""

    name = "gopher_quality"
    Options = GopherQualityOptions

    def apply(self, doc: Doc) -> Remove | None:
        """Removed with the first rule it fails."""
        return gopher_quality_removal(doc.text, thread_words().words(doc.text), self.options)
