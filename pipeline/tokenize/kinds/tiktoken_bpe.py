r"""A tiktoken BPE ranks file (one `base64(token) rank` a line) as a `Tokenizer`.

The ranks are always read from the user's file; the split pattern and the special tokens come
either from a small JSON beside it, `<ranks file>.json`:

    {"pattern": "<regex>", "special_tokens": {"<|endoftext|>": 100257},
     "bos_token": null, "eos_token": "<|endoftext|>", "pad_token": null}

or `{"name": "cl100k_base"}` (optionally with its own bos/eos/pad tokens), or from a built-in name
given when loading (BUILTINS: r50k_base/gpt2, cl100k_base, o200k_base, llama3; the constants
below, as tiktoken and Meta's Llama 3 code define them). Nothing is downloaded. A built-in's special
ids follow its ranks, so its ranks file must hold exactly its number of ranks.

The reference ids are tiktoken's `encode_ordinary`: special-token strings in a text are text. The
kind (`TiktokenTokenizer`): a file whose first line is `base64 rank`; its fast engine tiktoken's
own batch encode; cuts of long texts as every byte-level BPE's (kinds/byte_level.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import posixpath
import re

import numpy as np

from pipeline.core import versions
from pipeline.tokenize.kinds import byte_level
from pipeline.tokenize.kinds.base import (
    TIKTOKEN,
    Tokenizer,
    TokenizerFileError,
    TokenizerFiles,
    check_ids_fit,
    flatten,
    json_object,
)

ENDOFTEXT = "<|endoftext|>"
R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
                  r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                  r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
_LLAMA3_SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|reserved_special_token_2|>", "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|reserved_special_token_4|>", "<|eot_id|>", *[f"<|reserved_special_token_{i}|>" for i in range(5, 251)],
]


BUILTINS = {
    # name: (pattern, number of ranks, special tokens, bos token, eos token)
    "r50k_base": (R50K_PATTERN, 50256, {ENDOFTEXT: 50256}, None, ENDOFTEXT),
    "cl100k_base": (CL100K_PATTERN, 100256, {ENDOFTEXT: 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                                             "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}, None, ENDOFTEXT),
    "o200k_base": (O200K_PATTERN, 199998, {ENDOFTEXT: 199999, "<|endofprompt|>": 200018}, None, ENDOFTEXT),
    "llama3": (LLAMA3_PATTERN, 128000, {t: 128000 + i for i, t in enumerate(_LLAMA3_SPECIALS)},
               "<|begin_of_text|>", "<|end_of_text|>"),
}
BUILTINS["gpt2"] = BUILTINS["r50k_base"]
_LINE = re.compile(rb"[A-Za-z0-9+/]+={0,2} [0-9]+")


def spec_path(path: str) -> str:
    """Where the JSON naming a ranks file's pattern and special tokens is looked for."""
    return path + ".json"


def parse_ranks(path: str, data: bytes) -> dict[bytes, int]:
    """The ranks of a ranks file; a bad line, a repeated token or rank is an error naming the line."""
    ranks: dict[bytes, int] = {}
    seen: set[int] = set()
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        if not _LINE.fullmatch(line.strip()):
            raise TokenizerFileError(f"{path}: line {number} is not `base64-token rank`")
        token, rank = line.split()
        try:
            piece = base64.b64decode(token, validate=True)
        except binascii.Error:
            raise TokenizerFileError(f"{path}: line {number}: invalid base64") from None
        value = int(rank)
        if piece in ranks or value in seen:
            raise TokenizerFileError(f"{path}: line {number}: token or rank {value} appears twice")
        ranks[piece] = value
        seen.add(value)
    if not ranks:
        raise TokenizerFileError(f"{path}: no ranks")
    return ranks


def resolve_spec(path: str, ranks: dict[bytes, int], name: str | None, spec: dict | None) -> dict:
    """{name, pattern, special_tokens, bos_token, eos_token, pad_token} from a built-in name and/or a JSON spec."""
    spec = dict(spec or {})
    name = name or spec.get("name")
    if name is not None:
        if name not in BUILTINS:
            raise TokenizerFileError(f"{path}: unknown tiktoken encoding {name!r}; built-in: {sorted(BUILTINS)}")
        pattern, count, specials, bos, eos = BUILTINS[name]
        if len(ranks) != count:
            raise TokenizerFileError(f"{path}: {name} has {count} ranks, this file {len(ranks)}: its special ids "
                                     "would not follow them; name the pattern and special tokens in a JSON instead")
        out = {"name": name, "pattern": pattern, "special_tokens": dict(specials),
               "bos_token": bos, "eos_token": eos, "pad_token": None}
        for key in ("bos_token", "eos_token", "pad_token"):
            if key in spec:
                out[key] = spec[key]
        return out
    if not isinstance(spec.get("pattern"), str):
        raise TokenizerFileError(
            f"{path}: a tiktoken ranks file needs its split pattern and special tokens: put "
            f"{spec_path(path).rsplit('/', 1)[-1]} beside it ({{\"pattern\": ..., \"special_tokens\": {{...}}, "
            f"\"eos_token\": ...}} or {{\"name\": \"cl100k_base\"}}), or name a built-in "
            f"({', '.join(sorted(BUILTINS))})")
    specials = spec.get("special_tokens") or {}
    if not isinstance(specials, dict) or not all(isinstance(v, int) for v in specials.values()):
        raise TokenizerFileError(f"{path}: special_tokens must map strings to ids")
    return {"name": spec.get("encoding_name", "custom"), "pattern": spec["pattern"], "special_tokens": dict(specials),
            **{key: spec.get(key) for key in ("bos_token", "eos_token", "pad_token")}}


class TiktokenTokenizer(Tokenizer):
    """A ranks file and its pattern and special tokens; `encode` is tiktoken's `encode_ordinary`."""

    kind = TIKTOKEN
    described = "a tiktoken BPE ranks file"
    label = "tiktoken"
    reference = "tiktoken"
    reference_name = "tiktoken"
    package = "tiktoken"
    fast = ("tiktoken_batch",)
    auto = ("tiktoken_batch",)
    cuts = byte_level.CUT_RULES
    specials_looked_for = "{role}_token in the ranks file's JSON or the built-in encoding"

    def __init__(self, path: str, data: bytes, *, name: str | None = None, spec: dict | None = None,
                 spec_bytes: bytes | None = None):
        import tiktoken

        self.path = path
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.files = {path.rstrip("/").rsplit("/", 1)[-1]: self.sha256}
        if spec_bytes is not None:
            self.files[spec_path(path).rsplit("/", 1)[-1]] = hashlib.sha256(spec_bytes).hexdigest()
        self.ranks = parse_ranks(path, data)
        check_ids_fit(path, self.ranks)
        missing = [b for b in range(256) if bytes([b]) not in self.ranks]
        if missing:  # tiktoken builds every piece from its bytes: one without a rank stops its engine
            shown = ", ".join(f"0x{b:02X}" for b in missing[:8]) + (", ..." if len(missing) > 8 else "")
            raise TokenizerFileError(f"{path}: {len(missing)} single byte(s) have no rank ({shown}): text holding "
                                     "them cannot be encoded (a byte-level ranks file ranks all 256)")
        self.spec = resolve_spec(path, self.ranks, name, spec)
        specials = self.spec["special_tokens"]
        check_ids_fit(spec_path(path), specials)
        taken = set(self.ranks.values())
        clash = sorted(t for t, i in specials.items() if i in taken)
        if clash:
            raise TokenizerFileError(f"{path}: special token(s) {clash[:3]} have ids of ranks in the file")
        try:
            self._enc = tiktoken.Encoding(self.spec["name"], pat_str=self.spec["pattern"], mergeable_ranks=self.ranks,
                                          special_tokens=specials)
        except Exception as e:  # tiktoken raises ValueError, or its Rust core's errors for a bad pattern
            raise TokenizerFileError(f"{path}: tiktoken refuses this ranks file and pattern: {e}") from None
        self.vocab_size = max([*taken, *specials.values()]) + 1
        self.special_tokens = dict(specials)
        self.special_sources = {}
        named = self.spec["name"] in BUILTINS
        origin = "built-in " + self.spec["name"] if named else spec_path(path).rsplit("/", 1)[-1]
        for role in ("bos", "eos", "pad"):
            token = self.spec.get(f"{role}_token")
            if token is None:
                continue
            if token not in specials:
                raise TokenizerFileError(f"{path}: {role}_token {token!r} is not one of its special tokens")
            setattr(self, f"{role}_id", specials[token])
            self.special_sources[role] = f"{origin} ({token!r})"
        self.library_version = versions.package_version("tiktoken") or tiktoken.__version__

    @classmethod
    def looks_like(cls, data: bytes, parsed: dict | None) -> bool:
        """Whether the bytes start like a ranks file: a `base64 rank` line."""
        first = data[:4096].split(b"\n", 1)[0].rstrip(b"\r")
        return parsed is None and bool(_LINE.fullmatch(first))

    @classmethod
    def load(cls, files: TokenizerFiles, *, tiktoken_name: str | None = None) -> TiktokenTokenizer:
        """The ranks file with its pattern and specials: `tiktoken_name`'s, and/or the JSON beside it."""
        spec_bytes = files.beside(spec_path(posixpath.basename(files.main)))
        spec = None
        if spec_bytes is not None:
            spec = json_object(spec_bytes, spec_path(files.shown))
            if not isinstance(spec, dict):
                raise TokenizerFileError(f"{spec_path(files.shown)}: not a JSON object")
        return cls(files.shown, files.data, name=tiktoken_name, spec=spec, spec_bytes=spec_bytes)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The reference (ids, offsets) of the texts."""
        enc = self._enc
        return flatten([enc.encode_ordinary(text) for text in texts])

    def decode(self, ids) -> str:
        """The text of some ids."""
        return self._enc.decode([int(i) for i in ids])

    def versions(self) -> dict[str, str]:
        """The owning library and its version."""
        return {"tiktoken": self.library_version}

    @property
    def library(self):
        """The `tiktoken.Encoding`."""
        return self._enc

    def token_bytes(self) -> list[bytes]:
        """The bytes of every token producible from text (special tokens excluded)."""
        return list(self.ranks)

    def piece_cut_problems(self) -> list[str]:
        """Why long texts cannot be cut for this tokenizer (none: the cuts are checked further)."""
        return ["the split pattern looks behind"] if re.search(r"\(\?<[=!]", self.spec["pattern"]) else []

    def to_json(self) -> dict:
        """The manifest's description, with the encoding name and pattern."""
        return {**super().to_json(), "encoding": self.spec["name"], "pattern": self.spec["pattern"],
                "special_tokens": len(self.special_tokens)}
