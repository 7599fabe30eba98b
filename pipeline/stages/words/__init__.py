"""datatrove's words: spaCy's blank-English tokens, computed by our own tokenizer (no spaCy call per text).

datatrove's quality filters count `split_into_words(text)`: spaCy's blank English pipeline's tokens,
stripped, the whitespace ones dropped. This room gives the same tokens, faster and in time linear
in the text's length (spaCy's own tokenizer is not: docs/filters.md):

  spacy_words.py     SpacyWords: a text's tokens from its chunks (runs of non-whitespace), a bounded
                     table of the chunks seen, the special cases that straddle chunks; sentence counts
  chunk_tokens.py    one chunk's tokens: spaCy's affix loop and infix split, on indices
  special_cases.py   spaCy's document-wide special cases (its PhraseMatcher and span filter)
  spacy_patterns.py  what spaCy's affix patterns can match, read from their text

`thread_words()` is the one instance the stages of a thread share.
"""

from pipeline.stages.words.spacy_words import SpacyWords, thread_words

__all__ = ["SpacyWords", "thread_words"]
