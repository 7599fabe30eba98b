r"""c4_quality: C4's line and page rules (Raffel et al. 2020), as datatrove 0.10.1's `C4QualityFilter`.

Each line of `text.splitlines()`, stripped, in order (datatrove's default split_paragraph=True):
  1. dropped if one of its words (`line.split()`) is longer than max_word_length;
  2. citations `[12]`, `[edit]`, `[citation needed]` removed (remove_citations; the line is not
     stripped again);
  3. dropped unless it ends with . ? ! " ' and not with "..." (filter_no_terminal_punct);
  4. dropped with fewer than min_words_per_line words (counted before step 2);
  5. "lorem ipsum" anywhere in it (any case): the whole text is removed, rule `lorem_ipsum`;
  6. dropped if it mentions "javascript" (any case);
  7. a "{" in it: the whole text is removed, rule `curly_bracket`;
  8. dropped if it holds "terms of use", "privacy policy", "cookie policy", "uses cookies",
     "use of cookies" or "use cookies" (any case);
  9. kept: its sentences (spaCy's sentencizer on its blank-English tokens) are counted.
With fewer than min_num_sentences sentences kept in all, the text is removed, rule
`too_few_sentences` (its record: `value`, the sentences counted, and `threshold`). Otherwise it is
kept with the kept lines joined by "\n", stripped: when that differs from the text, the document
is a cut (reason `c4_quality_cut`, rule `c4_lines_removed`; its record: `lines_removed` of `lines`).
-1 turns a count rule off, as in datatrove; a text whose lines are all dropped with
min_num_sentences -1 is kept empty, as datatrove keeps it.
"""

from __future__ import annotations

import dataclasses
import re

from pipeline.core.options import option, parse_bool
from pipeline.stages.base import Doc, Keep, Remove, measured
from pipeline.stages.ranges import C4_COUNT, Range, check_ranges
from pipeline.stages.spacy_stage import SpacyStage
from pipeline.stages.words import thread_words

CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
END_PUNCTUATION = (".", "?", "!", '"', "'")
ELLIPSIS = "..."
POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
CUT_RULE = "c4_lines_removed"


@dataclasses.dataclass(frozen=True)
class C4QualityOptions:
    """The rules of c4_quality (datatrove's defaults; -1 turns a count rule off)."""

    c4_min_num_sentences: int = option(
        5, help="c4_quality: fewest sentences in the kept lines (too_few_sentences; -1: off)")
    c4_min_words_per_line: int = option(3, help="c4_quality: a line with fewer words is dropped (-1: off)")
    c4_max_word_length: int = option(1000, help="c4_quality: a line with a longer word is dropped (-1: off)")
    c4_remove_citations: bool = option(True, parse=parse_bool, help="c4_quality: remove [1], [edit], [citation needed]")
    c4_filter_no_terminal_punct: bool = option(
        True, parse=parse_bool, help="c4_quality: drop lines not ending with . ? ! \" ' (or ending with ...)")
    c4_filter_lorem_ipsum: bool = option(True, parse=parse_bool, help="c4_quality: remove texts with 'lorem ipsum'")
    c4_filter_javascript: bool = option(True, parse=parse_bool, help="c4_quality: drop lines mentioning 'javascript'")
    c4_filter_curly_bracket: bool = option(
        True, parse=parse_bool, help="c4_quality: remove texts with '{' in a kept line")
    c4_filter_policy: bool = option(True, parse=parse_bool,
                                    help="c4_quality: drop lines about terms of use, privacy or cookies")

    def __post_init__(self):
        check_ranges(self, {"c4_min_num_sentences": C4_COUNT, "c4_min_words_per_line": C4_COUNT,
                            "c4_max_word_length": Range(1, off=-1, meaning="a length: 1 or more")})


def c4_quality(text: str, opts: C4QualityOptions, sentence_count) -> Remove | Keep | None:
    """The verdict: Remove (rule, value), Keep (the kept lines, a cut record) or None (kept unchanged).

    sentence_count(line) -> int: spaCy's sentencizer's count.
    """
    num_sentences = 0
    kept = []
    lines = text.splitlines()
    for line in lines:
        line = line.strip()
        words = line.split()
        if opts.c4_max_word_length != -1 and any(len(word) > opts.c4_max_word_length for word in words):
            continue
        if opts.c4_remove_citations:
            line = CITATION.sub("", line)
        if opts.c4_filter_no_terminal_punct and (not line.endswith(END_PUNCTUATION) or line.endswith(ELLIPSIS)):
            continue
        if len(words) < opts.c4_min_words_per_line:
            continue
        lower = line.lower()
        if opts.c4_filter_lorem_ipsum and "lorem ipsum" in lower:
            return Remove("lorem_ipsum")
        if opts.c4_filter_javascript and "javascript" in lower:
            continue
        if opts.c4_filter_curly_bracket and "{" in line:
            return Remove("curly_bracket")
        if opts.c4_filter_policy and any(p in lower for p in POLICY_SUBSTRINGS):
            continue
        if opts.c4_min_num_sentences != -1:
            num_sentences += sentence_count(line)
        kept.append(line)
    if num_sentences < opts.c4_min_num_sentences:
        return Remove("too_few_sentences", measured(num_sentences, opts.c4_min_num_sentences))
    new = "\n".join(kept).strip()
    if new == text:
        return None
    return Keep(text=new, cut_rule=CUT_RULE, fields={"lines_removed": len(lines) - len(kept), "lines": len(lines)})


class C4Quality(SpacyStage):
    """--filters c4_quality (the module docstring): removes documents, or keeps them with lines cut."""

    name = "c4_quality"
    Options = C4QualityOptions

    def apply(self, doc: Doc) -> Remove | Keep | None:
        """Removed with its rule; kept with datatrove's modified text, a cut when it changed."""
        return c4_quality(doc.text, self.options, thread_words().sentence_count)
