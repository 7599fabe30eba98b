"""A labelled multilingual set from this machine's text: (ISO 639-1 code, document), the language known from the path.

Two sources, both translations made by people:
  - gettext catalogs, /usr/share/locale/<locale>/LC_MESSAGES/*.mo: the translated messages (msgstr)
    of each catalog, in order, gathered into documents of about DOC_CHARS characters (at most
    PER_CATALOG documents from one catalog);
  - translated manual pages, /usr/share/man/<locale>/man*/*: the troff source with its requests
    (lines starting "." or "'") and font escapes taken out.
The locale's language is the label (pt_BR -> pt, zh_CN and zh_TW -> zh, sr@latin -> sr). What is
known to be untranslated is left out, without asking any detector: a message equal to its English
original, a line of a manual page that its English page (/usr/share/man/manN/) also has (many
pages translate only their NAME section), and the ISO code lists' catalogs (iso_3166 and the like:
names of places, languages and currencies, mostly spelled as in English). Every document has at
least MIN_CHARS characters. Nothing is downloaded; the same machine gives the same set.

    python scripts/datagen/language_docs.py [--per_language 60]   # prints the counts per language
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import re
import struct

MIN_CHARS = 200
DOC_CHARS = 600  # a catalog's messages are cut into documents of about this size
PER_CATALOG = 2  # documents taken from one catalog (then the next: many programs, not one)
# The languages of the set: each has catalogs and most have manual pages on a Debian machine.
LANGUAGES = ("cs", "da", "de", "es", "fi", "fr", "hu", "id", "it", "ja", "ko", "nl", "pl", "pt", "ro", "ru",
             "sv", "tr", "uk", "zh", "el", "ca", "vi")
_TROFF_ESCAPE = re.compile(r"\\f(?:\[[^]]*]|\(..|.)|\\\*(?:\(..|\[[^]]*]|.)|\\[&|^%:]|\\s[-+]?\d")


def label(locale: str) -> str:
    """A locale directory's ISO 639-1 code: pt_BR -> pt, zh_TW -> zh, sr@latin -> sr."""
    return re.split(r"[_@.]", locale)[0]


def _ordered(paths: list[str]) -> list[str]:
    return sorted(paths, key=lambda p: hashlib.sha256(p.encode()).digest())


def catalog_messages(path: str) -> list[str]:
    """The translated messages of a .mo catalog that differ from their original (the header left out)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        order = {0x950412DE: "<", 0xDE120495: ">"}.get(struct.unpack("<I", data[:4])[0])
        if order is None:
            return []
        _, count, originals, table = struct.unpack(order + "4I", data[4:20])
        out = []
        for i in range(count):
            length, offset = struct.unpack(order + "2I", data[table + 8 * i : table + 8 * i + 8])
            message = data[offset : offset + length].decode("utf-8")
            length, offset = struct.unpack(order + "2I", data[originals + 8 * i : originals + 8 * i + 8])
            original = data[offset : offset + length].decode("utf-8")
            if message and original and message != original:
                out.append(message.replace("\x00", "\n"))
        return out
    except (OSError, struct.error, UnicodeDecodeError):
        return []


def man_lines(path: str) -> list[str]:
    """A manual page's lines of text: troff requests and font escapes taken out."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return []
    lines = [line for line in text.splitlines() if not line.startswith((".", "'"))]
    text = _TROFF_ESCAPE.sub("", "\n".join(lines)).replace("\\-", "-").replace("\\ ", " ").replace("\\e", "\\")
    return [line.strip() for line in text.splitlines() if line.strip()]


def man_text(path: str, man_root: str) -> str:
    """A translated manual page's text, without the lines its English page has."""
    parts = os.path.relpath(path, man_root).split(os.sep)  # <locale>/manN/page
    english = set(man_lines(os.path.join(man_root, *parts[1:])))
    return "\n".join(line for line in man_lines(path) if line not in english)


def documents(per_language: int = 60, languages: tuple[str, ...] = LANGUAGES) -> list[tuple[str, str]]:
    """(code, text) pairs: for each language up to per_language documents, manual pages first, then catalogs."""
    by_language: dict[str, list[str]] = {code: [] for code in languages}
    man, locale = "/usr/share/man", "/usr/share/locale"
    for root, kind in ((man, "man"), (locale, "mo")):
        if not os.path.isdir(root):
            continue
        for entry in sorted(os.listdir(root)):
            code = label(entry)
            if code not in by_language or (kind == "man" and entry.startswith("man")):
                continue
            paths = []
            for dirpath, _, names in os.walk(os.path.join(root, entry)):
                paths.extend(os.path.join(dirpath, n) for n in names
                             if kind == "man" or (n.endswith(".mo") and not n.startswith("iso_")))
            for path in _ordered(paths):
                docs = by_language[code]
                if len(docs) >= per_language:
                    break
                if kind == "man":
                    text = man_text(path, man).strip()
                    if len(text) >= MIN_CHARS:
                        docs.append(text[: 4 * DOC_CHARS])
                    continue
                chunk: list[str] = []
                taken = 0
                for message in catalog_messages(path):
                    chunk.append(message)
                    if sum(map(len, chunk)) >= DOC_CHARS:
                        docs.append("\n".join(chunk))
                        chunk, taken = [], taken + 1
                        if len(docs) >= per_language or taken == PER_CATALOG:
                            break
    return [(code, text) for code in languages for text in by_language[code]]


def main() -> None:
    """Print the set's size per language."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per_language", type=int, default=60)
    args = parser.parse_args()
    docs = documents(args.per_language)
    counts: dict[str, int] = {}
    for code, _ in docs:
        counts[code] = counts.get(code, 0) + 1
    print(f"{len(docs)} documents, {len(counts)} languages: {counts}")


if __name__ == "__main__":
    main()
