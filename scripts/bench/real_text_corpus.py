"""Compose a corpus of real text in the Pile's line format from text on this machine, for benchmarks.

    python scripts/bench/real_text_corpus.py OUT_DIR [--max_mb 200] [--train_files 8] [--seed 0] [--model]

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
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import struct
import sysconfig
from collections import deque
from collections.abc import Iterator

import numpy as np
import zstandard

MB = 1 << 20
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


def catalog_text(path: str) -> str | None:
    """The translated messages of a gettext .mo catalog, one a line (the header entry left out)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES)
        order = {0x950412DE: "<", 0xDE120495: ">"}.get(struct.unpack("<I", data[:4])[0])
        if order is None:
            return None
        _, count, _, table = struct.unpack(order + "4I", data[4:20])
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


def compose(max_bytes: int, seed: int = 0) -> list[bytes]:
    """The corpus' JSON lines (without newlines), about `max_bytes` in all."""
    rng = np.random.default_rng(seed)
    streams = {name: Stream(texts) for name, texts in sources().items()}
    names = list(SHARES)
    shares = np.array([SHARES[n][0] for n in names])
    lines: list[bytes] = []
    size = 0
    while size < max_bytes and streams:
        name = names[rng.choice(len(names), p=shares / shares.sum())]
        _, median, sigma = SHARES[name]
        chars = int(min(MAX_DOC_CHARS, max(200, rng.lognormal(np.log(median), sigma))))
        if name not in streams:
            continue
        text = streams[name].take(chars)
        if text is None:
            del streams[name]
            continue
        line = json.dumps({"text": text, "meta": {"pile_set_name": name}}).encode()
        lines.append(line)
        size += len(line) + 1
    return lines


def write_files(lines: list[bytes], train_dir: str, files: int) -> list[str]:
    """Deal the lines, in order, into `files` .jsonl.zst files of about equal size; returns their paths."""
    os.makedirs(train_dir, exist_ok=True)
    sizes = np.cumsum([len(line) + 1 for line in lines])
    bounds = [0, *np.searchsorted(sizes, sizes[-1] * np.arange(1, files) / files).tolist(), len(lines)]
    paths = []
    for i in range(files):
        path = os.path.join(train_dir, f"{i:02d}.jsonl.zst")
        content = b"".join(line + b"\n" for line in lines[bounds[i] : bounds[i + 1]])
        with open(path, "wb") as f:
            f.write(zstandard.ZstdCompressor(level=3).compress(content))
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
    return (f"{len(lines):,} documents, {sizes.sum() / 1e6:.1f} MB of JSON lines; line bytes mean "
            f"{sizes.mean() / 1e3:.1f} K, median {np.median(sizes) / 1e3:.1f} K, max {sizes.max() / 1e6:.2f} M, "
            f"{int((sizes > 1e6).sum())} over 1 MB; {escaped:,} \\u escapes; documents per subset {subsets}")


def main(argv: list[str] | None = None) -> None:
    """Write the corpus."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--max_mb", type=float, default=200.0, help="MB (1e6 bytes) of JSON lines")
    parser.add_argument("--train_files", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", action="store_true", help="also train OUT_DIR/real32k.model on the corpus")
    args = parser.parse_args(argv)
    lines = compose(int(args.max_mb * 1e6), args.seed)
    write_files(lines, os.path.join(args.out_dir, "train"), args.train_files)
    print(describe(lines))
    if args.model:
        print(train_model(lines, os.path.join(args.out_dir, "real32k")))


if __name__ == "__main__":
    main()
