"""url_filter: documents removed by their URL (--url_key), as datatrove's `URLFilter` decides.

In datatrove's order, the first rule that matches gives the rule (datatrove's reason string):

  domain               the URL's registered domain (tldextract: domain + public suffix) is a listed domain
  subdomain            its full host name (tldextract's fqdn) is a listed domain
  url                  the URL, exactly as written, is a listed URL
  hard_blacklisted     a banned word is one of the URL's words (the URL split on runs of characters
                       other than ASCII letters and digits, case kept; the list's words lower-cased,
                       reduced to letters and digits)
  soft_blacklisted     at least --url_soft_word_threshold soft-banned words are among the URL's words
  blacklisted_subword  a banned subword occurs in the URL lower-cased and reduced to letters and digits

The lists are files of one entry a line (a line starting with `#` is left out; a blank line is an
entry, as datatrove reads it): the user's own, or those datatrove's package ships
(`datatrove/assets/banned_words.txt`, `banned_subwords.txt`, `soft_banned_words.txt`, and the
`domains` and `urls` of `assets/url_filterblacklistsv0_3_0.tar.gz`, extracted). Host names are cut
by tldextract with the Public Suffix List snapshot its package ships: nothing is downloaded, and no
cache is written. A document whose line has no string at --url_key is removed as `no_url`
(datatrove stops on it). The URL is read from the input line: a JSON line's key, or a Parquet,
Arrow or `save_to_disk` input's column (read only when this stage is on: `line_keys`; a file
without that column is refused before the job, naming --url_key and its columns).

A removal's record carries the deciding value: `domain` (the listed name), `word` (the first banned
word or subword in sorted order), or for soft_blacklisted `score` (soft words found) and `threshold`.
"""

from __future__ import annotations

import dataclasses
import os
import re

from pipeline.core.documents import line_field
from pipeline.core.options import option
from pipeline.stages.base import Doc, DocumentStage, Remove
from pipeline.stages.ranges import Range, check_ranges

NORMALIZER = re.compile(r"[^a-zA-Z0-9]+")
NO_URL = "no_url"
LIST_FLAGS = ("url_blocked_domains", "url_blocked_urls", "url_banned_words", "url_banned_subwords",
              "url_soft_banned_words")


def normalize(text: str) -> str:
    """Datatrove's normalization: only ASCII letters and digits, lower-cased."""
    return NORMALIZER.sub("", text).lower()


def read_list(path: str, normalized: bool) -> frozenset[str]:
    """A list file's entries, as datatrove's `parse_list` reads them (stripped, or normalized)."""
    if not path:
        return frozenset()
    with open(path, encoding="utf-8") as f:
        return frozenset(normalize(line) if normalized else line.strip() for line in f if line[0] != "#")


def parse_key(value) -> str:
    """A key or dotted path of keys (meta.url)."""
    key = str(value)
    if not key or any(not part for part in key.split(".")):
        raise ValueError(f"{key!r}: give a key, or a dotted path of keys (meta.url)")
    return key


@dataclasses.dataclass(frozen=True)
class UrlFilterOptions:
    """--url_key, the list files and the soft threshold (datatrove URLFilter's arguments)."""

    url_key: str = option("url", parse=parse_key, metavar="KEY", help="the URL's key in each JSON line, or its "
                          "column in Parquet and Arrow rows (a dotted path: metadata.url)")
    url_blocked_domains: str = option("", metavar="FILE", shown_default="none",
                                      help="domains (one a line): a URL whose registered domain or host is one is "
                                      "removed")
    url_blocked_urls: str = option("", metavar="FILE", shown_default="none", help="URLs removed as written")
    url_banned_words: str = option("", metavar="FILE", shown_default="none",
                                   help="words: a URL holding one as a word is removed")
    url_banned_subwords: str = option("", metavar="FILE", shown_default="none",
                                      help="subwords: a URL holding one anywhere (letters and digits only) is removed")
    url_soft_banned_words: str = option("", metavar="FILE", shown_default="none",
                                        help="words of which --url_soft_word_threshold in a URL remove it")
    url_soft_word_threshold: int = option(2, metavar="N", help="soft-banned words that remove a URL")

    def __post_init__(self):
        # 0 would remove every URL (any URL holds at least 0 of the words); past a URL's length, none.
        check_ranges(self, {"url_soft_word_threshold": Range(1, 1 << 16, meaning="words: 1 to 65536")})


class UrlLists:
    """The lists, read once per worker, and the host-name splitter."""

    def __init__(self, opts: UrlFilterOptions):
        from tldextract import TLDExtract

        self.domains = read_list(opts.url_blocked_domains, False)
        self.urls = read_list(opts.url_blocked_urls, False)
        self.banned_words = read_list(opts.url_banned_words, True)
        self.banned_subwords = read_list(opts.url_banned_subwords, True)
        self.subwords = sorted(word for word in self.banned_subwords if word)  # "" matches nothing (Aho-Corasick)
        self.soft_words = read_list(opts.url_soft_banned_words, True)
        self.threshold = opts.url_soft_word_threshold
        self.extract = TLDExtract(cache_dir=None, suffix_list_urls=())  # the bundled snapshot: no network, no disk

    def decide(self, url: str) -> tuple[str, dict] | None:
        """(rule, the record's deciding fields) of a URL datatrove removes, or None when it keeps it."""
        info = self.extract(url)
        if info.top_domain_under_public_suffix in self.domains:
            return "domain", {"domain": info.top_domain_under_public_suffix}
        if info.fqdn in self.domains:
            return "subdomain", {"domain": info.fqdn}
        if url in self.urls:
            return "url", {}
        words = set(NORMALIZER.split(url))
        hard = sorted(words & self.banned_words)
        if hard:
            return "hard_blacklisted", {"word": hard[0]}
        soft = len(words & self.soft_words)
        if soft >= self.threshold:
            return "soft_blacklisted", {"score": soft, "threshold": self.threshold}
        if self.subwords:
            text = normalize(url)
            for word in self.subwords:
                if word in text:
                    return "blacklisted_subword", {"word": word}
        return None


class UrlFilter(DocumentStage):
    """--filters url_filter (the module docstring)."""

    name = "url_filter"
    Options = UrlFilterOptions

    def __init__(self, options=None):
        super().__init__(options)
        self._lists: UrlLists | None = None
        self._path = tuple(self.options.url_key.split("."))

    def __getstate__(self):
        return {**self.__dict__, "_lists": None}  # the lists load on the workers (setup)

    def check(self) -> None:
        """Each list file given exists; tldextract installed (ValueError naming the flag)."""
        opts = self.options
        for name in LIST_FLAGS:
            path = getattr(opts, name)
            if path and not os.path.isfile(path):
                raise ValueError(f"--{name} {path}: no such file")
        if not any(getattr(opts, name) for name in LIST_FLAGS):
            raise ValueError("--filters url_filter: give at least one list (--url_blocked_domains, "
                             "--url_banned_words, ...)")
        try:
            import tldextract  # noqa: F401
        except ImportError as e:
            raise ValueError(f"--filters url_filter needs tldextract: pip install 'pile-pipeline[classifiers]' "
                             f"({e})") from None

    def line_keys(self) -> tuple[tuple[str, str], ...]:
        """The URL's key: a columnar input's rows carry that column too."""
        return (("--url_key", self.options.url_key),)

    def setup(self) -> None:
        """The lists, once per worker."""
        if self._lists is None:
            self._lists = UrlLists(self.options)

    def apply(self, doc: Doc) -> Remove | None:
        """Removed by the first rule its URL matches, or kept."""
        if self._lists is None:
            self.setup()
        url = line_field(doc.raw, self._path) if doc.raw is not None else None
        if not isinstance(url, str) or not url:
            return Remove(NO_URL, {"url_key": self.options.url_key})
        verdict = self._lists.decide(url)
        return None if verdict is None else Remove(*verdict)
