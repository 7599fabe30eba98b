"""Compose a corpus of real text in the Pile's line format from text on this machine, for benchmarks.

    python scripts/bench/real_text_corpus.py OUT_DIR [--max_mb 200] [--train_files 8] [--seed 0] [--model]
        [--shape base|pile22|many_small|kinds]

Writes OUT_DIR/train/NN.jsonl.zst (one zstd frame each, as the Pile's files) and prints what it
wrote; with --model, also OUT_DIR/real32k.model: a Llama-2-style 32k BPE SentencePiece model
trained on every 4th document (identity normalization, whitespace kept, byte fallback, split
digits, BOS 1, EOS 2). Nothing is downloaded and nothing large is committed: the same machine and seed give the
same corpus.

The text is real; only the cuts into documents are drawn. Five sources, each a stream of its files
(ordered by a hash of their path, so that no directory dominates the start):

  subset          source                                                         document chars, median (sigma)
  Github          Python sources (stdlib, site-packages) and C headers              3,500 (1.2)
  Pile-CC         /usr/share/doc (READMEs, changelogs, copyright; .gz opened),      2,000 (1.2)
                  site-packages' .md/.rst/.txt
  StackExchange   English manual page sources (troff)                               2,500 (1.0)
  EuroParl        non-ASCII text: the translations in /usr/share/locale's message   5,000 (1.0)
                  catalogs (.mo, ~100 languages) and the translated manual pages
  Books3          book-length documents cut from the Pile-CC and man page streams   600,000 (0.9), at most 6 M

Each document draws its subset (by the shares in SHARES) and its size (log-normal) from a seeded
generator and takes that many characters from the subset's stream, cut at the next newline. The
result has the Pile's shape: a mean document of ~9 KB, a median of ~3 KB, and multi-MB documents
(the Pile: 5.9 KiB mean; Books3 averages 538 KiB). Lines are written as the Pile's are
(`json.dumps` with its default ASCII escapes: non-ASCII text arrives as \\uXXXX), and the documents
are dealt in order into --train_files files of about equal size, so corpora written with different
--train_files hold the same documents in the same order.

Shapes (--shape; a plan tuned to one corpus shape is tuned to nothing):

  base        the above, --train_files files of equal size
  pile22      all 22 of the Pile's subsets interleaved (each drawing from the stream of its kind of text),
              smaller documents (median ~2 KB) with the multi-MB books, one document in ten carrying a
              line of astral-plane characters (real lines of this machine's emoji and math-symbol tables,
              written as \\ud83d\\ude00-style surrogate-pair escapes, as the Pile's writer does), and two
              files of unequal size (48% and 52% of the bytes), their zstd frames without a content size
  many_small  the base documents in 64 files of log-normal sizes (the largest ~10x the median)
  kinds       small documents (median ~1.5 KB, none over 60 KB) of six kinds of text, the subset
              naming the kind (run the job with --subset_names any): prose (READMEs, docs), code,
              manpages (troff sources), lists (changelogs: bulleted lines), subtitles (short lines:
              the English messages of the .mo catalogs) and non-English (their translations and the
              translated manual pages): the corpus the cleaning stages are compared on with datatrove
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import struct
import sysconfig
from collections import deque
from collections.abc import Iterator

import numpy as np
import zstandard

MB = 1 << 20
SURROGATE = re.compile(rb"\\ud[89ab][0-9a-f]{2}\\ud[c-f]")
MAX_FILE_BYTES = 16 * MB
CODE = (".py", ".c", ".h")
SKIP = (".html", ".htm", ".png", ".jpg", ".gif", ".svg", ".pdf", ".pyc", ".so", ".bz2", ".xz", ".zip", ".mo",
        ".whl", ".gz.sig")
# subset: (share of documents, median characters, sigma of log size)
SHARES = {
    "Github": (0.25, 3_500, 1.2),
    "Pile-CC": (0.45, 2_000, 1.2),
    "StackExchange": (0.15, 2_500, 1.0),
    "EuroParl": (0.148, 5_000, 1.0),
    "Books3": (0.002, 600_000, 0.9),
}
MAX_DOC_CHARS = 6_000_000
# The Pile's 22 subsets, each drawing from the stream of the text most like its own:
# subset: (stream, share of documents, median characters, sigma of log size)
PILE22 = {
    "Pile-CC": ("Pile-CC", 0.20, 1_800, 1.1),
    "PubMed Central": ("Pile-CC", 0.04, 6_000, 0.9),
    "Books3": ("Books3", 0.0004, 600_000, 0.9),
    "OpenWebText2": ("Pile-CC", 0.12, 1_500, 1.1),
    "ArXiv": ("Pile-CC", 0.03, 8_000, 0.9),
    "Github": ("Github", 0.12, 2_000, 1.2),
    "FreeLaw": ("Pile-CC", 0.03, 4_000, 1.0),
    "StackExchange": ("StackExchange", 0.12, 1_500, 1.0),
    "USPTO Backgrounds": ("Pile-CC", 0.04, 2_500, 0.8),
    "PubMed Abstracts": ("StackExchange", 0.10, 1_200, 0.6),
    "Gutenberg (PG-19)": ("Books3", 0.0003, 400_000, 0.8),
    "OpenSubtitles": ("EuroParl", 0.01, 6_000, 0.9),
    "Wikipedia (en)": ("Pile-CC", 0.06, 2_000, 1.0),
    "DM Mathematics": ("Github", 0.01, 4_000, 0.5),
    "Ubuntu IRC": ("StackExchange", 0.005, 8_000, 1.0),
    "BookCorpus2": ("Books3", 0.0003, 300_000, 0.7),
    "EuroParl": ("EuroParl", 0.01, 8_000, 1.0),
    "HackerNews": ("StackExchange", 0.02, 2_500, 1.1),
    "YoutubeSubtitles": ("EuroParl", 0.02, 5_000, 0.9),
    "PhilPapers": ("Pile-CC", 0.003, 10_000, 0.9),
    "NIH ExPorter": ("StackExchange", 0.02, 1_800, 0.5),
    "Enron Emails": ("Pile-CC", 0.02, 1_200, 1.0),
}
ASTRAL_SHARE = 0.1
SHAPES = ("base", "pile22", "many_small", "kinds")
# kind: (stream, share of documents, median characters, sigma of log size)
KINDS = {
    "prose": ("Pile-CC", 0.30, 1_500, 1.0),
    "code": ("Github", 0.15, 1_500, 1.0),
    "manpages": ("StackExchange", 0.10, 1_500, 0.8),
    "lists": ("lists", 0.15, 1_200, 0.9),
    "subtitles": ("subtitles", 0.15, 1_200, 0.8),
    "non-English": ("EuroParl", 0.15, 1_500, 0.9),
}
KIND_MAX_CHARS = 60_000


def _hashed(paths: list[str]) -> list[str]:
    return sorted(paths, key=lambda p: hashlib.sha256(p.encode()).digest())


def _walk(root: str, keep) -> list[str]:
    out = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames.sort()
        for name in sorted(names):
            path = os.path.join(dirpath, name)
            if keep(path) and not os.path.islink(path) and os.path.isfile(path):
                out.append(path)
    return _hashed(out)


def read_text(path: str) -> str | None:
    """A file's text (a .gz opened), or None when it is not UTF-8 text of at least 200 characters."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES)
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None
    return text if len(text) >= 200 and "\x00" not in text else None


def catalog_text(path: str, original: bool = False) -> str | None:
    """The translated messages of a gettext .mo catalog, one a line (the header entry left out).

    original=True: the catalog's original (English) messages instead.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES)
        order = {0x950412DE: "<", 0xDE120495: ">"}.get(struct.unpack("<I", data[:4])[0])
        if order is None:
            return None
        _, count, originals, table = struct.unpack(order + "4I", data[4:20])
        table = originals if original else table
        messages = []
        for i in range(count):
            length, offset = struct.unpack(order + "2I", data[table + 8 * i : table + 8 * i + 8])
            message = data[offset : offset + length].decode("utf-8")
            if message and not message.startswith("Project-Id-Version"):
                messages.append(message.replace("\x00", "\n"))
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    text = "\n".join(messages)
    return text if len(text) >= 200 else None


def _texts(paths: list[str], reader=read_text) -> Iterator[str]:
    for path in paths:
        text = reader(path)
        if text is not None:
            yield text


def _interleave(*streams: Iterator[str]) -> Iterator[str]:
    queues = deque(streams)
    while queues:
        stream = queues.popleft()
        text = next(stream, None)
        if text is not None:
            yield text
            queues.append(stream)


def sources() -> dict[str, Iterator[str]]:
    """Each subset's stream of texts (see the module docstring); Books3 shares Pile-CC's and the man pages'."""
    stdlib, site = sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]
    code = _interleave(_texts(_walk(stdlib, lambda p: p.endswith(".py"))),
                       _texts(_walk(site, lambda p: p.endswith(".py"))),
                       _texts(_walk("/usr/include", lambda p: p.endswith((".h", ".c")))))
    docs = _interleave(_texts(_walk("/usr/share/doc", lambda p: not p.lower().endswith(SKIP))),
                       _texts(_walk(site, lambda p: p.endswith((".md", ".rst", ".txt")))))
    man = "/usr/share/man"
    english = _walk(man, lambda p: os.path.relpath(p, man).startswith("man"))
    translated = _walk(man, lambda p: not os.path.relpath(p, man).startswith("man"))
    catalogs = _walk("/usr/share/locale", lambda p: p.endswith(".mo"))
    books = _interleave(_texts(_walk("/usr/share/doc", lambda p: p.lower().endswith(("changelog.gz", "news.gz")))),
                        _texts(_walk(os.path.join(man, "man3"), lambda p: True)))
    return {
        "Github": code,
        "Pile-CC": docs,
        "StackExchange": _texts(english),
        "EuroParl": _interleave(_texts(catalogs, catalog_text), _texts(translated)),
        "Books3": books,
    }


def kind_sources() -> dict[str, Iterator[str]]:
    """The streams of the kinds shape: sources() plus bulleted changelogs and English catalog messages."""
    streams = sources()
    del streams["Books3"]
    changelogs = _walk("/usr/share/doc", lambda p: os.path.basename(p).lower().startswith(("changelog", "news")))
    domains: dict[str, str] = {}  # each catalog's English messages once, not once per language
    for path in _walk("/usr/share/locale", lambda p: p.endswith(".mo")):
        domains.setdefault(os.path.basename(path), path)
    streams["lists"] = _texts(changelogs)
    streams["subtitles"] = _texts(list(domains.values()), lambda p: catalog_text(p, original=True))
    return streams


class Stream:
    """Takes documents of about n characters from a stream of texts, cut at a newline."""

    def __init__(self, texts: Iterator[str]):
        self._texts = texts
        self._pending: deque[str] = deque()
        self._size = 0

    def take(self, n: int) -> str | None:
        """About n characters (to the next newline), or None when the stream has run dry."""
        while self._size < n:
            text = next(self._texts, None)
            if text is None:
                break
            self._pending.append(text + "\n\n")
            self._size += len(text) + 2
        if not self._pending:
            return None
        parts, size = [], 0
        while self._pending and size + len(self._pending[0]) <= n:
            parts.append(self._pending.popleft())
            size += len(parts[-1])
        if self._pending and size < n:  # cut the next text at a newline past n
            text = self._pending.popleft()
            cut = text.find("\n", n - size)
            cut = len(text) if cut < 0 else cut + 1
            parts.append(text[:cut])
            if text[cut:].strip():
                self._pending.appendleft(text[cut:])
            size += len(text[:cut])
        self._size = sum(len(t) for t in self._pending)
        doc = "".join(parts).strip("\n")
        return doc or None


def astral_lines() -> list[str]:
    """Lines of real text with astral-plane characters: this machine's emoji and math-symbol tables."""
    astral = re.compile("[\U00010000-\U0010FFFF]")
    lines: list[str] = []
    purelib = sysconfig.get_paths()["purelib"]
    for path in _walk(purelib, lambda p: p.endswith(("_emoji_codes.py", "latex_symbols.py", "uts46data.py"))):
        text = read_text(path)
        lines.extend(line.strip() for line in (text or "").splitlines() if astral.search(line))
    if not lines:
        raise SystemExit(f"no text with astral-plane characters under {purelib} (rich's emoji table, say)")
    return lines


def compose(max_bytes: int, seed: int = 0, shape: str = "base") -> list[bytes]:
    """The corpus' JSON lines (without newlines), about `max_bytes` in all, of the given shape (SHAPES)."""
    rng = np.random.default_rng(seed)
    streams = {name: Stream(texts) for name, texts in (kind_sources() if shape == "kinds" else sources()).items()}
    table = {"pile22": PILE22, "kinds": KINDS}.get(shape) or {name: (name, *spec) for name, spec in SHARES.items()}
    max_chars = KIND_MAX_CHARS if shape == "kinds" else MAX_DOC_CHARS
    astral = astral_lines() if shape == "pile22" else []
    names = list(table)
    shares = np.array([table[n][1] for n in names])
    lines: list[bytes] = []
    size = 0
    while size < max_bytes and streams:
        name = names[rng.choice(len(names), p=shares / shares.sum())]
        stream, _, median, sigma = table[name]
        chars = int(min(max_chars, max(200, rng.lognormal(np.log(median), sigma))))
        if stream not in streams:
            continue
        text = streams[stream].take(chars)
        if text is None:
            del streams[stream]
            continue
        if astral and rng.random() < ASTRAL_SHARE:
            cut = text.find("\n", int(rng.integers(len(text))))
            cut = len(text) if cut < 0 else cut
            text = text[:cut] + "\n" + astral[int(rng.integers(len(astral)))] + text[cut:]
        line = json.dumps({"text": text, "meta": {"pile_set_name": name}}).encode()
        lines.append(line)
        size += len(line) + 1
    return lines


def file_shares(shape: str, files: int, seed: int = 0) -> np.ndarray:
    """Each file's share of the bytes for a shape: equal; 48/52 for two pile22 files; log-normal many_small."""
    if shape == "pile22" and files == 2:
        return np.array([0.482, 0.518])
    if shape == "many_small":
        sizes = np.random.default_rng(seed + 1).lognormal(0.0, 0.8, files)
        return sizes / sizes.sum()
    return np.full(files, 1.0 / files)


def write_files(lines: list[bytes], train_dir: str, files: int, shares: np.ndarray | None = None,
                content_size: bool = True) -> list[str]:
    """Deal the lines, in order, into `files` .jsonl.zst files (of the byte `shares`, else equal); their paths.

    content_size=False writes frames without their size in the header, as a streaming writer does.
    """
    os.makedirs(train_dir, exist_ok=True)
    shares = np.full(files, 1.0 / files) if shares is None else np.asarray(shares)
    sizes = np.cumsum([len(line) + 1 for line in lines])
    bounds = [0, *np.searchsorted(sizes, sizes[-1] * np.cumsum(shares)[:-1]).tolist(), len(lines)]
    paths = []
    for i in range(files):
        path = os.path.join(train_dir, f"{i:02d}.jsonl.zst")
        content = b"".join(line + b"\n" for line in lines[bounds[i] : bounds[i + 1]])
        with open(path, "wb") as f:
            f.write(zstandard.ZstdCompressor(level=3, write_content_size=content_size).compress(content))
        paths.append(path)
    return paths


def train_model(lines: list[bytes], prefix: str) -> str:
    """A Llama-2-style 32k BPE model trained on the lines of every 4th document; returns its path."""
    import sentencepiece as spm

    def sentences():
        for line in lines[::4]:
            yield from (s for s in json.loads(line)["text"].split("\n") if s.strip())

    spm.SentencePieceTrainer.train(
        sentence_iterator=sentences(), model_prefix=prefix, vocab_size=32000, model_type="bpe",
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        split_digits=True, byte_fallback=True, character_coverage=0.99995, input_sentence_size=400_000,
        shuffle_input_sentence=True, max_sentence_length=4192, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        num_threads=os.cpu_count() or 1, minloglevel=2, seed_sentencepiece_size=400_000,
    )
    return prefix + ".model"


def describe(lines: list[bytes]) -> str:
    """Documents, bytes, sizes and subsets of a corpus, in one line."""
    sizes = np.array([len(line) for line in lines])
    subsets: dict[str, int] = {}
    for line in lines:
        name = json.loads(line)["meta"]["pile_set_name"]
        subsets[name] = subsets.get(name, 0) + 1
    escaped = sum(line.count(b"\\u") for line in lines)
    astral = sum(1 for line in lines if SURROGATE.search(line))
    return (f"{len(lines):,} documents, {sizes.sum() / 1e6:.1f} MB of JSON lines; line bytes mean "
            f"{sizes.mean() / 1e3:.1f} K, median {np.median(sizes) / 1e3:.1f} K, p99 "
            f"{np.percentile(sizes, 99) / 1e3:.0f} K, max {sizes.max() / 1e6:.2f} M, "
            f"{int((sizes > 1e6).sum())} over 1 MB, {int((sizes > 2e6).sum())} over 2 MB; {escaped:,} \\u escapes, "
            f"{astral:,} documents with surrogate pairs; {len(subsets)} subsets: {subsets}")


def main(argv: list[str] | None = None) -> None:
    """Write the corpus."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--max_mb", type=float, default=200.0, help="MB (1e6 bytes) of JSON lines")
    parser.add_argument("--train_files", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", action="store_true", help="also train OUT_DIR/real32k.model on the corpus")
    parser.add_argument("--shape", choices=SHAPES, default="base", help="see the module docstring")
    args = parser.parse_args(argv)
    lines = compose(int(args.max_mb * 1e6), args.seed, args.shape)
    write_files(lines, os.path.join(args.out_dir, "train"), args.train_files,
                file_shares(args.shape, args.train_files, args.seed), content_size=args.shape != "pile22")
    print(describe(lines))
    if args.model:
        print(train_model(lines, os.path.join(args.out_dir, "real32k")))


if __name__ == "__main__":
    main()
