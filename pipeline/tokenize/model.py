"""The tokenizer from the flag to the workers: read once in the driver (`TokenizerModel`), carried as a `TokenizerSpec`.

The file is the single source of truth. The driver reads it once (`TokenizerModel.load`): its kind
(from its bytes), the loaded `Tokenizer` of that kind (pipeline/tokenize/kinds/), its sha256 and ids;
every check (the special ids, the backend self-check) comes from it. What the job carries to the
workers is a `TokenizerSpec`, always set and of any kind: where the tokenizer is, its kind and
sha256, the backend the driver chose (`BackendChoice`), the resolved `SpecialIds` and the
manifest's description; each worker turns it into its `Encoder` (pipeline/tokenize/encoder.py) in
`setup()`, never receiving a loaded tokenizer.
"""

from __future__ import annotations

import dataclasses

from pipeline.tokenize.encoder import Encoder
from pipeline.tokenize.kinds.base import SpecialIds, Tokenizer
from pipeline.tokenize.kinds.detect import load_tokenizer


@dataclasses.dataclass(frozen=True)
class BackendChoice:
    """What the driver decided, recorded in the manifest's `tokenizer.backend`."""

    name: str  # the backend the workers use
    version: str  # its package version
    parity: dict  # how the choice was checked: result, documents, mismatches, reasons ({} for the reference)

    def to_json(self) -> dict:
        """Manifest form."""
        return {"name": self.name, "version": self.version, "parity": self.parity}


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """The checked tokenizer as the job carries it to every worker (small; pickles as it is)."""

    path: str  # where the workers load it from (as given)
    kind: str
    sha256: str  # a worker refuses a tokenizer whose sha256 is not this one
    backend: BackendChoice
    special: SpecialIds
    tiktoken_name: str | None = None  # the built-in pattern and specials of a tiktoken ranks file
    facts: dict | None = None  # the manifest's description beyond the ids (the kind's `manifest_facts`)

    def encoder(self, *, verify: bool = False, threads: int | None = None) -> Encoder:
        """The workers' batch encoder of the chosen backend (loaded in `setup()`: `Encoder.load`)."""
        return Encoder(self.path, self.backend.name, sha256=self.sha256, tiktoken_name=self.tiktoken_name,
                       verify=verify, threads=threads)


@dataclasses.dataclass(frozen=True)
class TokenizerModel:
    """A tokenizer read once by the driver: where it is, and the loaded `Tokenizer` of its kind."""

    path: str  # as given: where the workers load it from
    tokenizer: Tokenizer = dataclasses.field(repr=False, compare=False)
    tiktoken_name: str | None = None  # the built-in pattern and specials of a tiktoken ranks file

    @property
    def kind(self) -> str:
        """The kind of the file (its row in kinds/registry.py)."""
        return self.tokenizer.kind

    @property
    def sha256(self) -> str:
        """The sha256 of the main file (.model, tokenizer.json, ranks file)."""
        return self.tokenizer.sha256

    @classmethod
    def load(cls, path: str, *, tiktoken_name: str | None = None) -> TokenizerModel:
        """Read the tokenizer at a local path or fsspec URL, of whichever kind its bytes say.

        FileNotFoundError when there is none; TokenizerFileError (a ValueError naming the file) when it
        is of no known kind or cannot be used.
        """
        return cls(path, load_tokenizer(path, tiktoken_name=tiktoken_name), tiktoken_name)

    def special_ids(self, *, add_bos: bool, add_eos: bool, bos_id: int | None = None,
                    eos_id: int | None = None, pad_id: int | None = None, allow_text: bool = False) -> SpecialIds:
        """The tokenizer's special ids with the BOS/EOS policy applied (flags win over its own ids).

        A --bos_id/--eos_id that is an ordinary token of the tokenizer is refused unless `allow_text`.
        """
        return self.tokenizer.special_ids(add_bos=add_bos, add_eos=add_eos, bos_id=bos_id, eos_id=eos_id,
                                          pad_id=pad_id, allow_text=allow_text)

    def facts(self) -> dict | None:
        """The tokenizer's description for the manifest (its kind's `manifest_facts`; None for SentencePiece)."""
        out = self.tokenizer.manifest_facts()
        if out is not None and self.tiktoken_name is not None:
            out["tiktoken_encoding"] = self.tiktoken_name
        return out

    def spec(self, backend: BackendChoice, special: SpecialIds) -> TokenizerSpec:
        """What the job carries to the workers, once the backend is chosen and the special ids resolved."""
        return TokenizerSpec(self.path, self.kind, self.sha256, backend, special, self.tiktoken_name, self.facts())


def as_model(model: TokenizerModel | str) -> TokenizerModel:
    """`model` itself, or the model read from that path."""
    return model if isinstance(model, TokenizerModel) else TokenizerModel.load(model)
