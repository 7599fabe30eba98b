"""What a fastText model file says about itself, read from its header (no fastText library, no model loaded).

A `.bin` or `.ftz` starts (fastText 0.9's `FastText::saveModel`) with

    int32 magic 793712314, int32 version 12
    Args: int32 dim, ws, epoch, minCount, neg, wordNgrams, loss, model (3 = supervised), bucket,
          minn, maxn, lrUpdateRate; float64 t
    Dictionary: int32 size, nwords, nlabels; int64 ntokens, pruneidx_size;
                `size` entries of (NUL-terminated UTF-8 string, int64 count, int8 type: 0 word, 1 label)

The labels are the dictionary's type-1 entries, in its order. The driver reads them to refuse a
--fasttext_keep_labels label the model does not have before any worker starts, without loading a
model that can be gigabytes (the dictionary is read as a stream; the matrices are never touched).
"""

from __future__ import annotations

import dataclasses
import struct

MAGIC = 793712314
VERSION = 12
SUPERVISED = 3
_ARGS = struct.Struct("<12id")
_DICT = struct.Struct("<3i2q")
_BLOCK = 1 << 20


@dataclasses.dataclass(frozen=True)
class FastTextFile:
    """A supervised model's settings and labels (without the `__label__` prefix)."""

    dim: int
    word_ngrams: int
    minn: int
    maxn: int
    words: int
    labels: tuple[str, ...]


def read_header(path: str) -> FastTextFile:
    """The header of a fastText model file; a ValueError says why it is not a supervised model."""
    with open(path, "rb") as f:
        head = f.read(8 + _ARGS.size + _DICT.size)
        if len(head) < 8 + _ARGS.size + _DICT.size:
            raise ValueError(f"{path}: too short for a fastText model ({len(head)} bytes)")
        magic, version = struct.unpack_from("<2i", head)
        if magic != MAGIC:
            raise ValueError(f"{path}: not a fastText model file (no fastText magic number)")
        if version > VERSION:
            raise ValueError(f"{path}: fastText file version {version}, newer than this reader's {VERSION}")
        args = _ARGS.unpack_from(head, 8)
        dim, word_ngrams, model, minn, maxn = args[0], args[5], args[7], args[9], args[10]
        if model != SUPERVISED:
            raise ValueError(f"{path}: a fastText {'cbow' if model == 1 else 'skipgram'} model (word vectors), "
                             "not a supervised classifier")
        size, nwords, nlabels, _, _ = _DICT.unpack_from(head, 8 + _ARGS.size)
        if not (0 <= nwords <= size and 0 <= nlabels and nwords + nlabels == size):
            raise ValueError(f"{path}: a damaged fastText dictionary ({size} entries, {nwords} words, "
                             f"{nlabels} labels)")
        labels = _labels(f, path, size)
    if len(labels) != nlabels:
        raise ValueError(f"{path}: the dictionary lists {len(labels)} labels, its header {nlabels}")
    return FastTextFile(dim, word_ngrams, minn, maxn, nwords, tuple(label.removeprefix("__label__")
                                                                   for label in labels))


def _labels(f, path: str, size: int) -> list[str]:
    """The type-1 entries of a dictionary of `size` entries, read from `f` block by block."""
    buffer, pos, labels = b"", 0, []
    for _ in range(size):
        while True:
            end = buffer.find(b"\0", pos)
            if end >= 0 and end + 10 <= len(buffer):
                break
            more = f.read(_BLOCK)
            if not more:
                raise ValueError(f"{path}: the fastText dictionary is cut short")
            buffer, pos = buffer[pos:] + more, 0
        if buffer[end + 9] == 1:
            labels.append(buffer[pos:end].decode("utf-8", errors="replace"))
        pos = end + 10
    return labels
