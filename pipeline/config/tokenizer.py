"""The options of the tokenizer commands: the sample's, the trainer's, and each command's own.

`SampleConfig` decides the tokenizer sample's bytes (pipeline/tokenize/sample.py has its rules,
pipeline/beam/sample.py draws it); `TrainerConfig`, the SentencePiece trainer's
(pipeline/tokenize/trainer.py). `train-tokenizer` takes both; `tokenizer-report` draws a sample
with its own flags.
"""

from __future__ import annotations

import dataclasses

from pipeline.config.inputs import CHUNK_BOUNDS, CORRUPT_FILE_POLICIES, MAX_LINE_BOUNDS, DocumentLayout
from pipeline.config.selection import SEED_BOUNDS
from pipeline.config.stages import StageChoice
from pipeline.core.documents import Schema
from pipeline.core.option_groups import check_groups
from pipeline.core.options import Bounds, check_declared, option, recorded
from pipeline.core.subsets import (
    ALL_NAMES,
    Selection,
    parse_names,
    parse_selection,
    resolve_selection,
)
from pipeline.io.inputs import ChunkSizes
from pipeline.stages.policy import DocumentPolicy
from pipeline.tokenize.kinds.base import MAX_TOKEN_ID
from pipeline.tokenize.sample import NATURAL_STRATUM, parse_weights

DOC_CHARS_BOUNDS = Bounds(1, low_why="a document cut to no characters is empty")
_INT32 = "the job's records hold ids as int32"
_SPECIAL_ID = Bounds(-1, MAX_TOKEN_ID, why=_INT32, low_why="a token id is >= 0, or -1 for none")
_SPM_SEED = "SentencePiece's random generator takes a 32-bit unsigned seed"


def _spm_range(low, high) -> Bounds:
    """A range SentencePiece's trainer checks itself, after the sample is drawn: refused before it instead."""
    shown = [f"{v:g}" if isinstance(v, float) else str(v) for v in (low, high)]
    why = f"SentencePiece's trainer takes {shown[0]} to {shown[1]}"
    return Bounds(low, high, why=why, low_why=why)


def parse_megabytes(value) -> int:
    """`--sample_mb 0.5` -> 500000 bytes."""
    try:
        return int(float(value) * 1e6)
    except ValueError:
        raise ValueError(f"{value!r} is not a number of MB") from None



@dataclasses.dataclass(frozen=True)
class SampleConfig(DocumentLayout, StageChoice, ChunkSizes):
    """What decides the sample's bytes; recorded in the card. Every field is a flag of the command.

    The document stages (--filters, the stages' options) are the job's: a tokenizer is trained on
    the documents the job with the same stages would keep.

    With --subset_names any and every name selected, the names are not known before the sample is
    drawn: --weights pile (the default) and natural draw one stratum, a NAME=W list draws those names.
    """

    inputs: tuple[str, ...] = option(
        help="globs or fsspec URLs of .jsonl[.zst|.gz], .parquet or .arrow files or datasets.save_to_disk "
        "folders; several after one --input, or --input repeated", many=True, metavar="PATTERN", flag="--input")
    sample_bytes: int = option(256_000_000, flag="--sample_mb", parse=parse_megabytes, metavar="MB",
                               shown_default="256", help="text to sample, in MB (1e6 bytes) of UTF-8")
    weights: str = option("pile", help="'pile' (raw size x paper epochs), 'uniform', 'natural' (no strata), "
                          "or 'Name=w,Other=w' (unnamed subsets get 0); with --subset_names any and all names, "
                          "pile is natural")
    subsets: tuple[str, ...] = option(("all",), parse=parse_selection, metavar="SUBSETS", shown_default="all",
                                      help="'all', 'uncopyrighted', or a comma list; others are not sampled")
    exclude_subsets: tuple[str, ...] = option((), parse=parse_names, metavar="SUBSETS", recorded=False,
                                              help="comma list of subsets to leave out")
    seed: int = option(0, bounds=SEED_BOUNDS, help="sampling and trainer seed")
    max_doc_chars: int = option(100_000, bounds=DOC_CHARS_BOUNDS,
                                help="documents are cut to this many characters before sampling")
    chunk_mb: float = option(4.0, bounds=CHUNK_BOUNDS, help="decompressed MiB per unit of work after the fan-out")
    max_line_mb: float = option(64.0, bounds=MAX_LINE_BOUNDS, help="longer input lines are counted as bad and skipped")
    on_corrupt_file: str = option("fail", choices=CORRUPT_FILE_POLICIES,
                                  help="fail on a damaged input file, or keep what was read before the damage")

    def __post_init__(self):
        check_groups(self)  # every option's choices and bounds; the layout's names resolved, its keys checked
        if not self.inputs:
            raise ValueError("No --input given: pass one or more globs or URLs of .jsonl[.zst|.gz] files")
        if self.sample_bytes <= 0:
            raise ValueError("--sample_mb must be > 0")
        subsets, exclude = resolve_selection(self.subsets, self.exclude_subsets, self.any_names)
        object.__setattr__(self, "subsets", subsets)
        object.__setattr__(self, "exclude_subsets", exclude)
        self.normalized_weights()  # validates --weights
        self.check_stages()
        self.schema  # noqa: B018 -- made here, in the driver, with the stages' line keys

    @property
    def schema(self) -> Schema:
        """The input layout, with the keys the stages on read from each line (a Parquet row's URL column)."""
        return self.with_stage_keys(DocumentLayout.schema.fget(self))

    @property
    def every_name(self) -> bool:
        """Every subset name the data holds is selected (--subset_names any, no list)."""
        return self.subsets == (ALL_NAMES,)

    def normalized_weights(self) -> dict[str, float] | None:
        """Weight share of each selected subset; None for `natural` (one stratum)."""
        if not self.every_name:
            return parse_weights(self.weights, self.subsets, self.any_names)
        if self.weights in ("pile", "natural"):
            return None
        if self.weights == "uniform":
            raise ValueError("--weights uniform needs the subsets' names: list them with --subsets")
        named = [item.rpartition("=")[0].strip() for item in self.weights.split(",")]
        return parse_weights(self.weights, [n for n in named if n not in self.exclude_subsets], True)

    def budgets(self) -> dict[str, int]:
        """Byte budget of each stratum with a positive weight (at least 1: one document or more)."""
        weights = self.normalized_weights()
        if weights is None:
            return {NATURAL_STRATUM: self.sample_bytes}
        return {name: max(1, round(self.sample_bytes * w)) for name, w in weights.items() if w > 0}

    @property
    def is_natural(self) -> bool:
        """One stratum for all subsets (`--weights natural`)."""
        return self.normalized_weights() is None

    def selected(self) -> frozenset[str] | Selection:
        """The subsets a document may be sampled from (selected, with a positive weight): `name in selected`."""
        budgets = self.budgets()
        if self.every_name:
            names = frozenset(() if self.is_natural else budgets)
            return Selection(names, self.is_natural, frozenset(self.exclude_subsets))
        return frozenset(s for s in self.subsets if self.is_natural or s in budgets)

    def to_json(self) -> dict:
        """JSON form for the card."""
        out = recorded(self)
        out["inputs"] = list(self.inputs)
        out["subsets"] = list(self.subsets)
        if self.exclude_subsets:
            out["exclude_subsets"] = list(self.exclude_subsets)
        out.update(self.stages_json())
        return out

    def document_policy(self) -> DocumentPolicy:
        """Validation, the sampled subsets and the configured stages (pipeline/stages/policy.py)."""
        return DocumentPolicy(self.schema, self.max_line_bytes, self.selected(), self.configured_stages())



def parse_spm_arg(item: str) -> tuple[str, str]:
    """`--spm_arg KEY=VALUE` -> (key, value)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--spm_arg {item!r} is not KEY=VALUE")
    return key.strip(), value



@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """SentencePiece settings; the defaults are Llama-2's (its tokenizer.model's trainer_spec)."""

    model_type: str = option("bpe", choices=("bpe", "unigram"), help="SentencePiece model type")
    vocab_size: int = option(32000, bounds=Bounds(8, MAX_TOKEN_ID, why="the job's records hold ids as int32",
                                                   low_why="the special pieces and learned ones need more"),
                             help="pieces in the vocabulary")
    character_coverage: float = option(0.99995, bounds=_spm_range(0.98, 1.0),
                                       help="share of characters covered by pieces")
    byte_fallback: bool = option(True, help="unknown characters become <0x..> byte pieces instead of <unk>")
    split_digits: bool = option(True, help="every digit is its own piece")
    unk_id: int = option(0, bounds=Bounds(0, MAX_TOKEN_ID, why=_INT32, low_why="SentencePiece requires an unknown "
                                          "piece"), help="id of <unk>")
    bos_id: int = option(1, bounds=_SPECIAL_ID, help="id of <s> (-1: none)")
    eos_id: int = option(2, bounds=_SPECIAL_ID, help="id of </s> (-1: none)")
    pad_id: int = option(-1, bounds=_SPECIAL_ID, help="id of <pad> (-1: none, as in Llama-2)")
    max_sentence_length: int = option(4192, bounds=_spm_range(10, 1 << 30),
                                      help="bytes per trainer sentence; longer lines are cut at a space")
    max_sentencepiece_length: int = option(16, bounds=_spm_range(1, 512), help="longest piece, in characters")
    num_threads: int = option(16, bounds=_spm_range(1, 1024),
                              help="trainer threads (the model's bytes depend on it)")
    seed: int = option(0, cli=False, bounds=Bounds(0, (1 << 32) - 1, why=_SPM_SEED, low_why=_SPM_SEED),
                       help="SentencePiece's random generator (the command's --seed)")
    extra: tuple[tuple[str, str], ...] = option(
        (), flag="--spm_arg", many=True, parse=lambda items: tuple(parse_spm_arg(i) for i in items),
        metavar="KEY=VALUE", help="any other SentencePieceTrainer option, e.g. train_extremely_large_corpus=true")

    def __post_init__(self):
        check_declared(self)  # every option's choices and bounds (the --flag named)
        minimum = (256 if self.byte_fallback else 0) + 4
        if self.vocab_size < minimum:
            raise ValueError(
                f"--vocab_size {self.vocab_size} is below {minimum}: with byte fallback 256 ids hold "
                "the byte pieces, plus the special pieces and at least one learned piece"
            )
        specials = [i for i in (self.unk_id, self.bos_id, self.eos_id, self.pad_id) if i >= 0]
        if len(set(specials)) != len(specials):
            raise ValueError("--unk_id, --bos_id, --eos_id and --pad_id must differ (use -1 for none)")
        if any(i >= self.vocab_size for i in specials):
            raise ValueError("special ids must be below --vocab_size")
        reserved = {f.name for f in dataclasses.fields(self)} - {"extra"}
        for key, _ in self.extra:
            if key in reserved:
                raise ValueError(f"--spm_arg {key}=...: set it with its own flag, --{key}")
            if key in _NOT_PASSABLE:
                raise ValueError(f"--spm_arg {key}=...: the command sets it (the sample is the input)")

    def trainer_kwargs(self) -> dict:
        """Arguments for SentencePieceTrainer.train (without input/model_prefix)."""
        kwargs = {
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "character_coverage": self.character_coverage,
            "byte_fallback": self.byte_fallback,
            "split_digits": self.split_digits,
            "unk_id": self.unk_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "pad_id": self.pad_id,
            "max_sentence_length": self.max_sentence_length,
            "max_sentencepiece_length": self.max_sentencepiece_length,
            "num_threads": self.num_threads,
            **_DEFAULT_TRAINER_ARGS,
        }
        kwargs.update(dict(self.extra))
        return kwargs


# Llama-2's settings that have no flag here: identity normalization (text is kept as is), a dummy
# prefix space, whitespace runs kept (and learnable as pieces), all sentences used in file order.
# `--spm_arg KEY=VALUE` overrides any of them (e.g. normalization_rule_name=nmt_nfkc).
_DEFAULT_TRAINER_ARGS = {
    "normalization_rule_name": "identity",
    "add_dummy_prefix": True,
    "remove_extra_whitespaces": False,
    "allow_whitespace_only_pieces": True,
    "split_by_unicode_script": True,
    "split_by_whitespace": True,
    "split_by_number": True,
    "input_sentence_size": 0,
    "shuffle_input_sentence": False,
    "hard_vocab_limit": True,
}
_NOT_PASSABLE = frozenset({"input", "model_prefix", "model_writer", "sentence_iterator", "minloglevel",
                           "input_format"})


@dataclasses.dataclass(frozen=True)
class TrainTokenizerCommand:
    """`train-tokenizer`'s own flags: where the sample and the model go; none of it decides the model's bytes."""

    model_prefix: str | None = option(
        None, metavar="PREFIX", shown_default="none; required unless --sample_only",
        help="writes PREFIX.model, PREFIX.vocab, PREFIX.card.json (local path or URL); with --kind bpe the "
        "directory PREFIX/ (tokenizer.json, tokenizer_config.json, card.json)")
    kind: str = option(
        "sentencepiece", choices=("sentencepiece", "bpe"),
        help="sentencepiece: a SentencePiece .model (the trainer flags below); bpe: a byte-level BPE tokenizer.json "
        "with Hugging Face tokenizers, GPT-NeoX-20B's recipe (<|endoftext|>, --vocab_size; the other trainer "
        "flags do not apply)")
    work_dir: str | None = option(
        None, metavar="DIR", help="keep sample.jsonl and sample_stats.json here (local or s3://; a remote runner "
        "needs a shared location); default: a temporary directory, removed at the end")
    sample_only: bool = option(False, help="stop after drawing the sample into --work_dir")
    from_sample: str | None = option(None, metavar="DIR", shown_default="none: draw a sample from --input",
                                     help="train from the sample already in this work dir instead of drawing one")
    overwrite: bool = option(False, help="replace existing PREFIX.model/.vocab/.card.json")


@dataclasses.dataclass(frozen=True)
class TokenizerReportCommand(DocumentLayout):
    """`tokenizer-report`'s flags."""

    tokenizer_model: tuple[str, ...] = option(
        help="a tokenizer of any kind (.model, tokenizer.json or its directory, tiktoken file with its JSON); repeat "
        "(or give several) to compare them on the same sample",
        many=True, required=True, metavar="FILE")
    out: str = option(help="PNG chart to write", metavar="PNG")
    inputs: tuple[str, ...] = option(
        (), flag="--input", many=True, metavar="PATTERN", shown_default="none; required unless --from_sample",
        help="globs or fsspec URLs of .jsonl[.zst|.gz], .parquet or .arrow files or datasets.save_to_disk "
        "folders (use held-out data)")
    label: tuple[str, ...] = option((), many=True, help="a name per --tokenizer_model, in order")
    json: str | None = option(None, metavar="FILE", shown_default="no JSON", help="also write the numbers as JSON here")
    sample_mb_per_subset: float = option(
        1.0, bounds=Bounds(0, above=True, low_why="a sample holds some text"),
        help="text sampled per subset, MB (a subset with less gives all it has); with --subset_names any "
        "and all names, in all, drawn in the corpus's own proportions")
    subsets: tuple[str, ...] = option(("all",), parse=parse_selection, metavar="SUBSETS", shown_default="all",
                                      help="'all', 'uncopyrighted', or a comma list")
    exclude_subsets: tuple[str, ...] = option((), parse=parse_names, metavar="SUBSETS",
                                              help="comma list of subsets to leave out")
    seed: int = option(1, bounds=SEED_BOUNDS,
                       help="sampling seed (the trainer's default is 0, so held-out text is not its sample)")
    max_doc_chars: int = option(100_000, bounds=DOC_CHARS_BOUNDS, help="documents are cut to this many characters")
    on_corrupt_file: str = option("fail", choices=("fail", "skip"),
                                  help="fail on a damaged input file, or keep what was read before the damage")
    work_dir: str | None = option(None, metavar="DIR", help="keep the sample here (default: a temporary directory)")
    from_sample: str | None = option(
        None, metavar="DIR", shown_default="none: draw a sample from --input",
        help="measure on a sample already drawn (a --work_dir of this command or the trainer's)")
