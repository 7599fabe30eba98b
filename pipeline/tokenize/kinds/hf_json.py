"""A Hugging Face `tokenizer.json` (with its `tokenizer_config.json` / `special_tokens_map.json`) as a `Tokenizer`.

The reference ids are `tokenizers.Tokenizer`'s own: `encode(text, add_special_tokens=False)` (run
through `encode_batch`, which calls it per text without holding the GIL) with
`encode_special_tokens = True`, so that a special token's string inside a document ("<|endoftext|>",
"<s>") is encoded as text; truncation and padding set in the file are turned off (they would cut or
pad documents silently). Special ids, in order of precedence: `tokenizer_config.json`'s
`bos_token`/`eos_token`/`pad_token`/`unk_token`, then `special_tokens_map.json`'s, then the
post-processor's template (the special token before the sequence is BOS, the one after it EOS), then
the model's `unk_token`.

The kind (`HuggingFaceTokenizer`): a JSON object with a model and the pipeline around it, or a
directory holding `tokenizer.json`; its fast engines the library's own batch encode and gigatoken
(`gigatoken_json`: the file without its special added tokens); cuts of long texts as every
byte-level BPE's (kinds/byte_level.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re

import numpy as np

from pipeline.core import versions
from pipeline.tokenize.kinds import byte_level
from pipeline.tokenize.kinds.base import (
    HUGGINGFACE,
    Tokenizer,
    TokenizerFileError,
    TokenizerFiles,
    check_ids_fit,
    flatten,
)

TOKENIZER_JSON = "tokenizer.json"
CONFIG_JSON = "tokenizer_config.json"
SPECIAL_MAP_JSON = "special_tokens_map.json"
COMPANIONS = (CONFIG_JSON, SPECIAL_MAP_JSON)
_ROLES = ("bos", "eos", "pad", "unk")


def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the character standing for each byte in a byte-level vocabulary."""
    visible = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in visible:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _types(node) -> list[dict]:
    """Every component of a normalizer / pre-tokenizer / processor (Sequence flattened)."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        inner = node.get("normalizers") or node.get("pretokenizers") or node.get("processors") or []
        return [t for part in inner for t in _types(part)]
    return [node]


def _token_name(value) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def template_specials(post_processor: dict | None) -> dict[str, str]:
    """BOS/EOS token strings a post-processor adds around a single sequence.

    Read from TemplateProcessing (the special token before the sequence, the one after it),
    RobertaProcessing and BertProcessing (cls, sep).
    """
    found: dict[str, str] = {}
    for part in _types(post_processor):
        kind = part.get("type")
        if kind == "TemplateProcessing":
            items = part.get("single") or []
            seq = next((k for k, item in enumerate(items) if "Sequence" in item), None)
            for k, item in enumerate(items):
                if "SpecialToken" in item and seq is not None:
                    found.setdefault("bos" if k < seq else "eos", item["SpecialToken"]["id"])
        elif kind in ("RobertaProcessing", "BertProcessing"):
            if part.get("cls"):
                found.setdefault("bos", part["cls"][0])
            if part.get("sep"):
                found.setdefault("eos", part["sep"][0])
    return found


class HuggingFaceTokenizer(Tokenizer):
    """A tokenizer.json and its companions (name -> bytes, read from beside it)."""

    kind = HUGGINGFACE
    described = "a Hugging Face tokenizer.json (or a directory holding one)"
    label = "tokenizer.json"
    directory_file = TOKENIZER_JSON
    reference = "tokenizers"
    reference_name = "tokenizers"
    package = "tokenizers"
    # gigatoken's per-call word cache makes it many times `tokenizers`' encode per core on real text, the
    # library's batch encode a little faster (scripts/bench/bench_tokenizer_kinds.py).
    fast = ("tokenizers_batch", "gigatoken")
    auto = ("gigatoken", "tokenizers_batch")
    cuts = byte_level.CUT_RULES
    specials_looked_for = ("{role}_token in tokenizer_config.json / special_tokens_map.json, the post-processor's "
                           "template")

    def __init__(self, path: str, data: bytes, companions: dict[str, bytes] | None = None):
        from tokenizers import Tokenizer as HFTokenizer

        self.path = path
        self.data = data
        companions = companions or {}
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.files = {TOKENIZER_JSON: self.sha256, **{n: hashlib.sha256(b).hexdigest() for n, b in companions.items()}}
        try:
            self.spec = json.loads(data)
            self._tok = HFTokenizer.from_str(data.decode("utf-8"))
        except Exception as e:  # tokenizers raises its own Exception type
            raise TokenizerFileError(f"{path}: not a Hugging Face tokenizer.json that `tokenizers` loads: "
                                     f"{e}") from None
        self.library_version = versions.package_version("tokenizers")
        tok = self._tok
        tok.no_truncation()
        tok.no_padding()
        tok.encode_special_tokens = True
        vocab = tok.get_vocab(with_added_tokens=True)
        check_ids_fit(path, vocab)
        self.vocab_size = max(vocab.values()) + 1
        added = self.spec.get("added_tokens") or []
        declared = {t.get("content"): t.get("id") for t in added}
        check_ids_fit(path, declared)
        # `tokenizers` gives an added token the next free id, whatever the file says.
        for token, token_id in declared.items():
            if tok.token_to_id(token) != token_id:
                raise TokenizerFileError(f"{path}: added token {token!r} has id {token_id} in the file, but "
                                         f"{tok.token_to_id(token)} once `tokenizers` loads it")
        self.special_tokens = {t["content"]: t["id"] for t in added if t.get("special")}
        self._added_text = [t["content"] for t in added if not t.get("special")]
        self._configs = {}
        for name, raw in companions.items():
            try:
                self._configs[name] = json.loads(raw)
            except (ValueError, RecursionError) as e:
                raise TokenizerFileError(f"{path}: {name} is not valid JSON: {e}") from None
        self.special_sources = {}
        template = template_specials(self.spec.get("post_processor"))
        unk = (self.spec.get("model") or {}).get("unk_token")
        for role in _ROLES:
            token, source = None, None
            for name in COMPANIONS:
                token = _token_name((self._configs.get(name) or {}).get(f"{role}_token"))
                if token is not None:
                    source = name
                    break
            if token is None and role in template:
                token, source = template[role], "tokenizer.json post_processor"
            if token is None and role == "unk" and isinstance(unk, str):
                token, source = unk, "tokenizer.json model.unk_token"
            if token is None:
                continue
            token_id = tok.token_to_id(token)
            if token_id is None:
                raise TokenizerFileError(f"{path}: {source} names {role}_token {token!r}, which tokenizer.json "
                                         "does not have")
            setattr(self, f"{role}_id", token_id)
            self.special_sources[role] = f"{source} ({token!r})"

    @classmethod
    def looks_like(cls, data: bytes, parsed: dict | None) -> bool:
        """Whether the bytes are a tokenizer.json: a JSON object with a model and the pipeline around it."""
        return isinstance(parsed, dict) and isinstance(parsed.get("model"), dict) and (
            "added_tokens" in parsed or "pre_tokenizer" in parsed or "normalizer" in parsed)

    @classmethod
    def load(cls, files: TokenizerFiles, *, tiktoken_name: str | None = None) -> HuggingFaceTokenizer:
        """The tokenizer.json with the companions found beside it."""
        cls.refuse_encoding_name(files, tiktoken_name)
        companions = {name: raw for name in COMPANIONS if (raw := files.beside(name)) is not None}
        return cls(files.shown, files.data, companions)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The reference (ids, offsets) of the texts.

        `encode_batch` runs `encode`'s own code on each text (the same Encoding, offsets included) but
        releases the GIL, so worker threads tokenize in parallel; it spreads a batch over the library's
        thread pool unless TOKENIZERS_PARALLELISM=false.
        """
        if not texts:
            return flatten([])
        return flatten([e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)])

    def decode(self, ids) -> str:
        """The text of some ids."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def versions(self) -> dict[str, str]:
        """The owning library and its version."""
        return {"tokenizers": self.library_version or "unknown"}

    @property
    def library(self):
        """The loaded `tokenizers.Tokenizer` (special tokens encoded as text, no truncation or padding)."""
        return self._tok

    def single_thread(self) -> None:
        """`tokenizers`' batches on the calling thread, for the whole process (the library reads this at every call)."""
        os.environ["TOKENIZERS_PARALLELISM"] = "false"

    def gigatoken_json(self) -> str:
        """The tokenizer.json gigatoken loads: without truncation, padding and special added tokens.

        gigatoken matches added tokens in the text: a special one's string in a document would become its id.
        """
        spec = json.loads(self.data)
        spec["added_tokens"] = [t for t in spec.get("added_tokens") or [] if not t.get("special")]
        spec["truncation"] = spec["padding"] = None
        return json.dumps(spec, ensure_ascii=False)

    def byte_level(self) -> bool:
        """Whether the vocabulary is GPT-2's byte-level alphabet (a ByteLevel pre-tokenizer or decoder)."""
        parts = _types(self.spec.get("pre_tokenizer")) + _types(self.spec.get("decoder"))
        return any(p.get("type") == "ByteLevel" for p in parts)

    def token_bytes(self) -> list[bytes]:
        """The bytes of every token producible from text (special tokens excluded)."""
        model = self.spec.get("model") or {}
        vocab = model.get("vocab")
        if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            pieces = [p[0] for p in vocab]
        elif isinstance(vocab, dict):
            pieces = list(vocab)
        else:
            pieces = []
        specials = set(self.special_tokens)
        out = []
        if self.byte_level():
            table = byte_decoder()
            for piece in pieces:
                if piece in specials:
                    continue
                if all(c in table for c in piece):
                    out.append(bytes(table[c] for c in piece))
                else:
                    out.append(piece.encode("utf-8"))
        else:
            for piece in pieces:
                if piece in specials:
                    continue
                if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", piece):
                    out.append(bytes([int(piece[3:5], 16)]))
                else:
                    out.append(piece.replace("▁", " ").encode("utf-8"))
        return out + [t.encode("utf-8") for t in self._added_text]

    def piece_cut_problems(self) -> list[str]:
        """Why long texts cannot be cut for this tokenizer (none: the cuts are checked further)."""
        spec = self.spec
        problems = []
        model = (spec.get("model") or {}).get("type")
        if model not in ("BPE", "Unigram"):
            problems.append(f"model {model!r} (only BPE and Unigram models are cut)")
        for part in _types(spec.get("normalizer")):
            if part.get("type") not in ("NFC", "NFD", "NFKC", "NFKD", "Lowercase"):
                problems.append(f"normalizer {part.get('type')!r} may depend on where a text starts")
        for part in _types(spec.get("pre_tokenizer")):
            kind = part.get("type")
            if kind == "ByteLevel" and part.get("add_prefix_space"):
                problems.append("ByteLevel add_prefix_space=true adds a space at the start of every text")
            elif kind == "Split":
                pattern = part.get("pattern") or {}
                if re.search(r"\(\?<[=!]", pattern.get("Regex", "")):
                    problems.append("a Split pattern looks behind")
            elif kind not in ("ByteLevel", "Digits", "Punctuation", "Whitespace", "WhitespaceSplit"):
                problems.append(f"pre-tokenizer {kind!r} may depend on where a text starts")
        return problems
