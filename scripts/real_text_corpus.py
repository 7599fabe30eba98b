"""Compose a corpus of real text in the Pile's layout from text files on this machine, for benchmarks.

    python scripts/real_text_corpus.py OUT_DIR [--max_mb 200] [--train_files 8] [--source DIR ...]

One document per file, as the Pile's Github and many of its other subsets are: by default Debian's
package documentation (/usr/share/doc: READMEs, changelogs, copyright files; gzipped ones
decompressed), the manual pages' sources (/usr/share/man) and this Python's standard library
sources. Files that are not UTF-8 text, HTML, or shorter than 200 bytes are skipped. Documents are
taken in equal shares from each source, shuffled by a hash of their path (the same files give the
same corpus) and dealt round-robin into
OUT_DIR/train/NN.jsonl.zst. `pile_set_name` is "Github" for source code and "Pile-CC" otherwise
(labels only: they change no throughput). Unlike scripts/sample_corpus.py's composed text, the
words and their frequencies are real, so tokens per byte and tokenizer speed are realistic.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sysconfig

import zstandard

DEFAULT_SOURCES = ("/usr/share/doc", "/usr/share/man", sysconfig.get_paths()["stdlib"])
CODE = (".py", ".c", ".h", ".sh", ".pl", ".rb", ".js", ".java")
SKIP = (".html", ".htm", ".png", ".jpg", ".gif", ".svg", ".pdf", ".pyc", ".so", ".bz2", ".xz", ".zip", ".mo")
MB = 1 << 20


def documents(sources: list[str]):
    """(path, text) of every usable file under the sources, in sorted order."""
    for source in sources:
        for root, dirs, files in os.walk(source):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                if name.lower().endswith(SKIP) or os.path.islink(path) or not os.path.isfile(path):
                    continue
                try:
                    with open(path, "rb") as f:
                        data = f.read(16 * MB)
                    if name.endswith(".gz"):
                        data = gzip.decompress(data)
                    text = data.decode("utf-8")
                except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
                    continue
                if len(text) >= 200 and "\x00" not in text:
                    yield path, text


def main(argv: list[str] | None = None) -> None:
    """Write the corpus."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--max_mb", type=float, default=200.0, help="stop after this much text (JSON lines)")
    parser.add_argument("--train_files", type=int, default=8)
    parser.add_argument("--source", action="append", help="directories to read (default: %(default)s)")
    args = parser.parse_args(argv)
    sources = args.source or list(DEFAULT_SOURCES)
    lines = []
    size = 0
    for source in sources:  # an equal share of the text from each source
        budget = args.max_mb * MB / len(sources)
        for path, text in documents([source]):
            subset = "Github" if path.endswith(CODE) else "Pile-CC"
            line = json.dumps({"text": text, "meta": {"pile_set_name": subset}}, ensure_ascii=False).encode()
            lines.append((hashlib.sha256(path.encode()).digest(), line))
            size += len(line) + 1
            budget -= len(line) + 1
            if budget <= 0:
                break
    lines.sort()
    os.makedirs(os.path.join(args.out_dir, "train"), exist_ok=True)
    for i in range(args.train_files):
        content = b"".join(line + b"\n" for _, line in lines[i :: args.train_files])
        with open(os.path.join(args.out_dir, "train", f"{i:02d}.jsonl.zst"), "wb") as f:
            f.write(zstandard.ZstdCompressor(level=3).compress(content))
    print(f"{len(lines)} documents, {size / MB:.1f} MiB of JSON lines in {args.train_files} files")


if __name__ == "__main__":
    main()
