"""Tokenizers of every kind, trained here (no hub): byte-level BPE tokenizer.json, tiktoken ranks, > 65,536 ids."""

from __future__ import annotations

import base64
import inspect
import json
import random
from pathlib import Path

from sample_corpus import compose_lines

from pipeline.tokenize.bpe_trainer import ENDOFTEXT, PADDING, train_bpe
from pipeline.tokenize.kinds import hf_json, tiktoken_bpe

SHIFT = 70_000  # ids added to every merged token of the big tokenizers: text ids above 65,535


def real_documents() -> list[str]:
    """Real text, a few hundred KB: Python's documentation topics and some large stdlib modules."""
    import argparse
    import collections
    import email._header_value_parser as header_parser
    import typing

    docs = [inspect.getsource(m) for m in (argparse, typing, collections, header_parser)]
    try:
        from pydoc_data.topics import topics
    except ImportError:  # a stripped Python: the sources above are still real text
        topics = {}
    names = sorted(topics)
    docs += ["\n\n".join(topics[n] for n in names[i::3]) for i in range(3)]
    return docs


def training_texts() -> list[str]:
    texts = [json.loads(line)["text"] for line in compose_lines(random.Random(3), 200)]
    return texts + [p for doc in real_documents() for p in doc.split("\n\n")]


def train_byte_level_bpe(vocab_size: int = 2000):
    """GPT-NeoX-20B's recipe (train-tokenizer --kind bpe's own trainer) on the fixtures' texts."""
    return train_bpe(training_texts(), vocab_size)


def write_hf_directory(tok, out: Path, *, config: bool = True) -> Path:
    """A Hugging Face directory: tokenizer.json and (with `config`) the GPT-NeoX tokenizer_config.json."""
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    if config:
        (out / "tokenizer_config.json").write_text(json.dumps(
            {"bos_token": ENDOFTEXT, "eos_token": ENDOFTEXT, "unk_token": ENDOFTEXT, "add_prefix_space": False}))
    return out


def shifted_hf_json(tok) -> str:
    """The tokenizer's JSON with SHIFT unused vocabulary entries before its merged tokens: ids up to ~72,000."""
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    first_merged = 2 + 256
    shifted = {t: (i if i < first_merged else i + SHIFT) for t, i in vocab.items()}
    shifted.update({f"<unused_{k}>": first_merged + k for k in range(SHIFT)})
    spec["model"]["vocab"] = shifted
    return json.dumps(spec, ensure_ascii=False)


def write_ranks(tok, path: Path, *, shift: int = 0, pattern: str = tiktoken_bpe.CL100K_PATTERN) -> Path:
    """A tiktoken ranks file from a byte-level BPE trained here, and its JSON (pattern, <|endoftext|>)."""
    table = hf_json.byte_decoder()
    vocab = sorted((i, t) for t, i in tok.get_vocab(with_added_tokens=False).items() if t not in (ENDOFTEXT, PADDING))
    lines, rank = [], 0
    for k, (_, token) in enumerate(vocab):
        rank = k if k < 256 else k + shift
        lines.append(f"{base64.b64encode(bytes(table[c] for c in token)).decode()} {rank}")
    path.write_text("\n".join(lines) + "\n")
    eot = rank + 1
    Path(tiktoken_bpe.spec_path(str(path))).write_text(json.dumps(
        {"pattern": pattern, "special_tokens": {ENDOFTEXT: eot}, "eos_token": ENDOFTEXT}))
    return path


def write_llama3_shaped_ranks(tok, path: Path) -> Path:
    """A ranks file of exactly Llama 3's 128,000 ranks from a BPE trained here: its bytes, unused 4-byte
    tokens no merge reaches, then its merged tokens in their order (ids ~125,000-128,000), for
    `tiktoken_name="llama3"` (special ids 128,000-128,255)."""
    table = hf_json.byte_decoder()
    vocab = [t for _, t in sorted((i, t) for t, i in tok.get_vocab(with_added_tokens=False).items()
                                  if t not in (ENDOFTEXT, PADDING))]
    pieces = [bytes(table[c] for c in t) for t in vocab]
    fillers = [b"\x00" + k.to_bytes(3, "big") for k in range(128_000 - len(pieces))]
    ordered = pieces[:256] + fillers + pieces[256:]
    assert len(set(ordered)) == 128_000
    path.write_text("".join(f"{base64.b64encode(p).decode()} {rank}\n" for rank, p in enumerate(ordered)))
    return path
