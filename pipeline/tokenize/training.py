r"""Train a SentencePiece tokenizer on a deterministic, subset-stratified sample of the pipeline's inputs.

    pile-pipeline train-tokenizer --input 'train/*.jsonl.zst' --model_prefix tokenizers/pile32k/pile32k

writes PREFIX.model, PREFIX.vocab and PREFIX.card.json (the arguments, the trainer settings, the
sample's sha256 and per-subset sample sizes). This module holds the sample's rules, the trainer and
the card; the sampling job is pipeline/beam/sample.py, the command pipeline/cli/train_tokenizer.py.

Sampling (Beam; the same reader, parser and dead-letter reasons as `pipeline.run`):

    (file_index, path) -> ReadChunks -> Chunk -> FanOut (Reshuffle)
    Chunk              -> KeyDocuments -> (stratum, SampleDoc) + stats      bad lines counted, skipped
    (stratum, docs)    -> SmallestKeys  -> (stratum, [SampleDoc])            per stratum, bounded memory
    [(stratum, docs)]  -> WriteSample   -> sample.jsonl (key order) + sample_stats.json

Every document gets a key: `stable_hash("tokenizer-sample", seed, file, line)` (pipeline/core/hashing.py).
A stratum (a subset; everything at once for `--weights natural`) keeps its documents with the
smallest keys until their bytes reach its budget: `sample_bytes * weight / sum(weights)`. Worked
example, budget 10 bytes, documents as (key, bytes): (7, 4) (2, 5) (9, 1) (4, 6) -> by key
(2, 5) (4, 6) | (7, 4) (9, 1): the first two are kept (5 < 10 before the second; 11 >= 10 after it),
so a stratum overshoots its budget by less than one document. The kept set depends only on the keys,
never on how the runner split or ordered the work, so the sample is byte-identical on every run,
runner and worker count; the accumulators merge associatively and hold at most ~2x the budget.

A stratum with less text than its budget contributes everything it has; the shortfall is not handed
to other subsets (the card marks it `short`). Documents are cut to `--max_doc_chars` before they are
counted, so one 50 MB book cannot fill a subset's budget.

Training (in the driver): each sampled document becomes trainer "sentences", one per line, split on
"\n" (newlines are learned through byte fallback, as in Llama-2), empty lines dropped, longer lines
cut at a space to at most `--max_sentence_length` bytes (SentencePiece would skip them). The
trainer uses all of them in sample order (`input_sentence_size=0`, no shuffling) and seeds its
random generator from `--seed`. The model's bytes also depend on `--num_threads` (measured with
SentencePiece 0.2.x: 1 and 2 threads give different merges), so the card records it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import posixpath
import tempfile
import time
from collections.abc import Iterable, Iterator

import fsspec
import sentencepiece as spm

from pipeline.core.hashing import stable_hash
from pipeline.core.options import option, recorded
from pipeline.core.stats import sorted_dict
from pipeline.core.subsets import PILE_SUBSETS, check_subset_names, parse_exclude, parse_subsets, pile_mix_weights
from pipeline.core.versions import created_by
from pipeline.io.files import sha256_of
from pipeline.io.inputs import ChunkSizes
from pipeline.io.publish import publish, publish_copy, publish_text

LOG = logging.getLogger(__name__)
SAMPLE_FILE = "sample.jsonl"
SAMPLE_STATS_FILE = "sample_stats.json"
CARD_FORMAT = "pile-tokenizer-card"
CARD_FORMAT_VERSION = 1
NATURAL_STRATUM = "*"  # the one stratum of `--weights natural`
WEIGHT_PRESETS = ("pile", "natural", "uniform")


def parse_weights(value: str | None, subsets: Iterable[str]) -> dict[str, float] | None:
    """`--weights`: 'pile' (default), 'uniform', 'natural' (None: one stratum) or 'Name=w,Other=w'.

    Returns the normalized weight of each selected subset (summing to 1). In an explicit list, the
    selected subsets that are not named get weight 0 (left out of the sample).
    """
    chosen = list(subsets)
    value = (value or "pile").strip()
    if value == "natural":
        return None
    if value == "pile":
        raw = {name: pile_mix_weights()[name] for name in chosen}
    elif value == "uniform":
        raw = dict.fromkeys(chosen, 1.0)
    else:
        raw = dict.fromkeys(chosen, 0.0)
        for item in value.split(","):
            name, sep, number = item.rpartition("=")
            if not sep:
                raise ValueError(
                    f"--weights: {item!r} is not NAME=WEIGHT (or use a preset: {', '.join(WEIGHT_PRESETS)})"
                )
            name = name.strip()
            check_subset_names([name], "--weights")
            if name not in raw:
                raise ValueError(f"--weights: {name!r} is not among the selected subsets (see --subsets)")
            try:
                raw[name] = float(number)
            except ValueError:
                raise ValueError(f"--weights: {item!r}: {number!r} is not a number") from None
            if raw[name] < 0:
                raise ValueError(f"--weights: {name}={raw[name]} must be >= 0")
    total = sum(raw.values())
    if total <= 0:
        raise ValueError("--weights: every selected subset has weight 0; nothing would be sampled")
    return {name: w / total for name, w in raw.items()}


def parse_megabytes(value) -> int:
    """`--sample_mb 0.5` -> 500000 bytes."""
    try:
        return int(float(value) * 1e6)
    except ValueError:
        raise ValueError(f"{value!r} is not a number of MB") from None


def document_key(seed: int, file_index: int, line: int) -> int:
    """The document's sampling key: a hash of (seed, file, line), the same on every run and worker."""
    return stable_hash("tokenizer-sample", seed, file_index, line)


# A sampled document: (key, file_index, line, utf8_bytes, subset, text). Tuples sort by key; the
# (file_index, line) pair that follows makes the order total even in the (2^-64) event of a key tie.
SampleDoc = tuple[int, int, int, int, str, str]


def take_smallest(docs: Iterable[SampleDoc], budget: int) -> list[SampleDoc]:
    """The documents with the smallest keys, in key order, until their bytes reach `budget`.

    A document is kept when the bytes kept before it are below the budget, so the result exceeds
    the budget by less than one document. For any split of the input into parts,
    `take_smallest(concat(take_smallest(part) for part in parts))` equals `take_smallest(all)`:
    that is what lets Beam combine partial results in any order.
    """
    kept: list[SampleDoc] = []
    size = 0
    for doc in sorted(docs):
        if size >= budget:
            break
        kept.append(doc)
        size += doc[3]
    return kept


@dataclasses.dataclass(frozen=True)
class SampleConfig(ChunkSizes):
    """What decides the sample's bytes; recorded in the card. Every field is a flag of the command."""

    inputs: tuple[str, ...] = option(
        help="globs or fsspec URLs of .jsonl.zst/.jsonl.gz/.jsonl files; several after one --input, or "
        "--input repeated", many=True, metavar="PATTERN", flag="--input")
    sample_bytes: int = option(256_000_000, flag="--sample_mb", parse=parse_megabytes, metavar="MB",
                               shown_default="256", help="text to sample, in MB (1e6 bytes) of UTF-8")
    weights: str = option("pile", help="'pile' (raw size x paper epochs), 'uniform', 'natural' (no strata), "
                          "or 'Name=w,Other=w' (unnamed subsets get 0)")
    subsets: tuple[str, ...] = option(PILE_SUBSETS, parse=parse_subsets, metavar="SUBSETS", shown_default="all",
                                      help="'all', 'uncopyrighted', or a comma list; others are not sampled")
    exclude_subsets: tuple[str, ...] = option((), parse=parse_exclude, metavar="SUBSETS", recorded=False,
                                              help="comma list of subsets to leave out")
    seed: int = option(0, help="sampling and trainer seed")
    max_doc_chars: int = option(100_000, help="documents are cut to this many characters before sampling")
    chunk_mb: float = option(4.0, help="decompressed MiB per unit of work after the fan-out")
    max_line_mb: float = option(64.0, help="longer input lines are counted as bad and skipped")
    on_corrupt_file: str = option("fail", choices=("fail", "skip"),
                                  help="fail on a damaged input file, or keep what was read before the damage")

    def __post_init__(self):
        if not self.inputs:
            raise ValueError("No --input given: pass one or more globs or URLs of .jsonl[.zst|.gz] files")
        if self.sample_bytes <= 0:
            raise ValueError("--sample_mb must be > 0")
        if self.max_doc_chars <= 0:
            raise ValueError("--max_doc_chars must be > 0")
        self.check_chunk_sizes()
        if self.on_corrupt_file not in ("fail", "skip"):
            raise ValueError("--on_corrupt_file must be 'fail' or 'skip'")
        check_subset_names(self.subsets, "--subsets")
        if self.exclude_subsets:
            chosen = set(self.subsets) - set(self.exclude_subsets)
            object.__setattr__(self, "subsets", tuple(s for s in PILE_SUBSETS if s in chosen))
            object.__setattr__(self, "exclude_subsets", ())
        if not self.subsets:
            raise ValueError("The subset selection is empty: check --subsets and --exclude_subsets")
        self.normalized_weights()  # validates --weights

    def normalized_weights(self) -> dict[str, float] | None:
        """Weight share of each selected subset; None for `natural` (one stratum)."""
        return parse_weights(self.weights, self.subsets)

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

    def selected(self) -> frozenset[str]:
        """The subsets a document may be sampled from (selected, with a positive weight)."""
        budgets = self.budgets()
        return frozenset(s for s in self.subsets if self.is_natural or s in budgets)

    def to_json(self) -> dict:
        """JSON form for the card."""
        out = recorded(self)
        out["inputs"] = list(self.inputs)
        out["subsets"] = list(self.subsets)
        return out


def write_sample(strata: list, config: SampleConfig, work_dir: str, stats: dict) -> dict:
    """Write the sampled documents in key order (one JSON object a line) and their statistics.

    Both files are published complete or not at all (pipeline/io/publish.py; a DoFn may run twice).
    Returns the sample statistics (also written as sample_stats.json).
    """
    docs = sorted(doc for _, stratum_docs in strata for doc in stratum_docs)
    per_subset: dict[str, dict] = {}

    def lines():
        for _, _, _, size, subset, text in docs:
            s = per_subset.setdefault(subset, {"documents": 0, "bytes": 0})
            s["documents"] += 1
            s["bytes"] += size
            yield json.dumps({"subset": subset, "text": text}, ensure_ascii=False).encode("utf-8") + b"\n"

    _, sha = publish(posixpath.join(work_dir, SAMPLE_FILE), lines())
    sample_stats = sample_statistics(config, stats, per_subset, sha)
    publish_text(posixpath.join(work_dir, SAMPLE_STATS_FILE), json.dumps(sample_stats, indent=1, sort_keys=True) + "\n")
    LOG.info("wrote the sample: %d documents, %.1f MB", sample_stats["documents"], sample_stats["bytes"] / 1e6)
    return sample_stats


def sample_statistics(config: SampleConfig, stats: dict, sampled: dict[str, dict], sha256: str) -> dict:
    """The sample's description for the card: what was available, targeted and taken per subset."""
    weights = config.normalized_weights()
    budgets = config.budgets()
    available = stats.get("subsets", {})
    subsets = {}
    for name in sorted(set(available) | set(sampled)):
        seen = available.get(name, {})
        took = sampled.get(name, {"documents": 0, "bytes": 0})
        entry = {
            "documents_available": seen.get("documents", 0),
            "bytes_available": seen.get("bytes", 0),
            "documents_cut": seen.get("cut", 0),
            "filtered": seen.get("filtered", {}),
            "documents": took["documents"],
            "bytes": took["bytes"],
        }
        if weights is not None:
            entry["weight"] = round(weights.get(name, 0.0), 8)
            entry["target_bytes"] = budgets.get(name, 0)
            entry["short"] = entry["bytes"] < entry["target_bytes"]
        subsets[name] = entry
    inputs = stats.get("inputs", {})
    return sorted_dict({
        "sha256": sha256,
        "documents": sum(s["documents"] for s in sampled.values()),
        "bytes": sum(s["bytes"] for s in sampled.values()),
        "target_bytes": config.sample_bytes,
        "subsets": subsets,
        "dead_letters": stats.get("dead_letters", {}),
        "lines": stats.get("lines", 0),
        "damaged_files": [inputs[k]["path"] for k in sorted(inputs) if "damaged" in inputs[k]],
        "config": config.to_json(),
    })


def load_sample_stats(work_dir: str) -> dict:
    """Read WORK_DIR/sample_stats.json and check that sample.jsonl beside it is the one it describes."""
    stats_path = posixpath.join(work_dir, SAMPLE_STATS_FILE)
    sample_path = posixpath.join(work_dir, SAMPLE_FILE)
    fs, fs_path = fsspec.core.url_to_fs(stats_path)
    if not fs.exists(fs_path):
        raise FileNotFoundError(f"No {SAMPLE_STATS_FILE} in {work_dir}: draw the sample first (--sample_only)")
    with fs.open(fs_path, "r", encoding="utf-8") as f:
        stats = json.load(f)
    actual = sha256_of(sample_path)
    if actual != stats["sha256"]:
        raise ValueError(
            f"{sample_path}: sha256 {actual} does not match {SAMPLE_STATS_FILE} ({stats['sha256']}); "
            "the sample was changed or cut short. Draw it again."
        )
    return stats


def iter_sample(work_dir: str) -> Iterator[tuple[str, str]]:
    """(subset, text) of each sampled document, in the sample's order."""
    with fsspec.open(posixpath.join(work_dir, SAMPLE_FILE), "rb") as f:
        for line in f:
            obj = json.loads(line)
            yield obj["subset"], obj["text"]


# ----------------------------------------------------------------------------------------------------
# Training.


def parse_spm_arg(item: str) -> tuple[str, str]:
    """`--spm_arg KEY=VALUE` -> (key, value)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--spm_arg {item!r} is not KEY=VALUE")
    return key.strip(), value


def split_sentence(line: str, max_bytes: int) -> list[str]:
    """Cut one line into pieces of at most `max_bytes` UTF-8 bytes, at a space where one is near.

    A cut falls on the last space in the second half of the window, else on a character boundary.
    Pieces keep every character (spaces included), so joining them gives the line back.
    """
    data = line.encode("utf-8")
    if len(data) <= max_bytes:
        return [line]
    pieces = []
    start = 0
    while len(data) - start > max_bytes:
        end = start + max_bytes
        while end > start and (data[end] & 0xC0) == 0x80:  # never split a UTF-8 sequence
            end -= 1
        space = data.rfind(b" ", start + max_bytes // 2, end)
        if space > start:
            end = space
        pieces.append(data[start:end].decode("utf-8"))
        start = end
    pieces.append(data[start:].decode("utf-8"))
    return pieces


def document_sentences(text: str, max_bytes: int) -> Iterator[str]:
    """The trainer's sentences for one document: its non-blank lines, long ones cut."""
    for line in text.split("\n"):
        if line.strip():
            yield from split_sentence(line, max_bytes)


def write_trainer_input(docs: Iterable[tuple[str, str]], path: str, max_bytes: int) -> tuple[int, str]:
    """Write the trainer's input (one sentence a line); returns (sentences, sha256)."""
    digest = hashlib.sha256()
    count = 0
    with open(path, "wb") as f:
        for _, text in docs:
            for sentence in document_sentences(text, max_bytes):
                data = sentence.encode("utf-8") + b"\n"
                digest.update(data)
                f.write(data)
                count += 1
    return count, digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """SentencePiece settings; the defaults are Llama-2's (its tokenizer.model's trainer_spec)."""

    model_type: str = option("bpe", choices=("bpe", "unigram"), help="SentencePiece model type")
    vocab_size: int = option(32000, help="pieces in the vocabulary")
    character_coverage: float = option(0.99995, help="share of characters covered by pieces")
    byte_fallback: bool = option(True, help="unknown characters become <0x..> byte pieces instead of <unk>")
    split_digits: bool = option(True, help="every digit is its own piece")
    unk_id: int = option(0, help="id of <unk>")
    bos_id: int = option(1, help="id of <s> (-1: none)")
    eos_id: int = option(2, help="id of </s> (-1: none)")
    pad_id: int = option(-1, help="id of <pad> (-1: none, as in Llama-2)")
    max_sentence_length: int = option(4192, help="bytes per trainer sentence; longer lines are cut at a space")
    max_sentencepiece_length: int = option(16, help="longest piece, in characters")
    num_threads: int = option(16, help="trainer threads (the model's bytes depend on it)")
    seed: int = option(0, cli=False, help="SentencePiece's random generator (the command's --seed)")
    extra: tuple[tuple[str, str], ...] = option(
        (), flag="--spm_arg", many=True, parse=lambda items: tuple(parse_spm_arg(i) for i in items),
        metavar="KEY=VALUE", help="any other SentencePieceTrainer option, e.g. train_extremely_large_corpus=true")

    def __post_init__(self):
        if self.model_type not in ("bpe", "unigram"):
            raise ValueError("--model_type must be 'bpe' or 'unigram'")
        if self.vocab_size < 8:
            raise ValueError("--vocab_size is too small")
        minimum = (256 if self.byte_fallback else 0) + 4
        if self.vocab_size < minimum:
            raise ValueError(
                f"--vocab_size {self.vocab_size} is below {minimum}: with byte fallback 256 ids hold "
                "the byte pieces, plus the special pieces and at least one learned piece"
            )
        specials = [i for i in (self.unk_id, self.bos_id, self.eos_id, self.pad_id) if i >= 0]
        if self.unk_id < 0:
            raise ValueError("--unk_id must be >= 0: SentencePiece requires an unknown piece")
        if len(set(specials)) != len(specials):
            raise ValueError("--unk_id, --bos_id, --eos_id and --pad_id must differ (use -1 for none)")
        if any(i >= self.vocab_size for i in specials):
            raise ValueError("special ids must be below --vocab_size")
        if not 0 < self.character_coverage <= 1:
            raise ValueError("--character_coverage must be in (0, 1]")
        if self.num_threads < 1:
            raise ValueError("--num_threads must be >= 1")
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


def _read_sentences(path: str) -> Iterator[str]:
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            yield line[:-1] if line.endswith("\n") else line


def train_model(sentences_path: str, config: TrainerConfig) -> bytes:
    """Train SentencePiece on a sentences file (one a line); returns the serialized model.

    The sentences go in through an iterator and the model comes back through a writer, so that no
    file path is recorded in the model (SentencePiece stores `input` and `model_prefix` in it): the
    same sample and settings give the same bytes wherever they run.
    """
    spm.set_random_generator_seed(config.seed)
    out = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_read_sentences(sentences_path), model_writer=out, minloglevel=2,
            **config.trainer_kwargs(),
        )
    except RuntimeError as e:
        hint = ""
        if "too high" in str(e):
            hint = " (the sample is too small for this --vocab_size: lower it or draw a larger sample)"
        elif "required_chars" in str(e):
            hint = " (the characters to cover need more ids: raise --vocab_size or lower --character_coverage)"
        raise ValueError(f"SentencePiece training failed: {e}{hint}") from e
    return out.getvalue()


def vocab_text(model_proto: bytes) -> str:
    """The `.vocab` file SentencePiece writes beside a model: "piece<TAB>score" per id."""
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    # C++ streams print floats with 6 significant digits, as "%g" does.
    return "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))


def describe_model(model_path: str) -> dict:
    """Vocabulary size, special ids and byte pieces of a model (for the card and the report)."""
    sp = spm.SentencePieceProcessor(model_file=model_path)
    size = sp.get_piece_size()
    return {
        "vocab_size": size,
        "unk_id": sp.unk_id(),
        "bos_id": sp.bos_id(),
        "eos_id": sp.eos_id(),
        "pad_id": sp.pad_id(),
        "byte_pieces": sum(1 for i in range(size) if sp.is_byte(i)),
    }


def build_card(args: dict, trainer: TrainerConfig, sample_stats: dict, trainer_input: dict, model: dict) -> dict:
    """The model card (deterministic: no times or hosts, so the same command gives the same card)."""
    return sorted_dict({
        "format": CARD_FORMAT,
        "format_version": CARD_FORMAT_VERSION,
        "created_by": f"{created_by()}, sentencepiece {spm.__version__}",
        "arguments": args,
        "model": model,
        "trainer": trainer.trainer_kwargs() | {"seed": trainer.seed},
        "trainer_input": trainer_input,
        "sample": sample_stats,
    })


def train_from_sample(work_dir: str, model_prefix: str, trainer: TrainerConfig, args: dict) -> dict:
    """Train on the sample in `work_dir`, write PREFIX.model/.vocab/.card.json; returns the card."""
    sample_stats = load_sample_stats(work_dir)
    outputs = [model_prefix + ext for ext in (".model", ".vocab", ".card.json")]
    name = posixpath.basename(model_prefix)
    with tempfile.TemporaryDirectory(prefix="tokenizer-train-") as tmp:
        sentences_path = os.path.join(tmp, "sentences.txt")
        count, sha = write_trainer_input(iter_sample(work_dir), sentences_path, trainer.max_sentence_length)
        if count == 0:
            raise ValueError("The sample is empty: the inputs hold no selected document with text")
        LOG.info("training %s, vocab %d, on %d sentences", trainer.model_type, trainer.vocab_size, count)
        start = time.monotonic()
        proto = train_model(sentences_path, trainer)
        LOG.info("trained in %.1f s", time.monotonic() - start)
        model_path, vocab_path = os.path.join(tmp, name + ".model"), os.path.join(tmp, name + ".vocab")
        with open(model_path, "wb") as f:
            f.write(proto)
        with open(vocab_path, "w", encoding="utf-8", newline="\n") as f:
            f.write(vocab_text(proto))
        model = {
            "file": name + ".model",
            "sha256": sha256_of(model_path),
            "vocab_file": name + ".vocab",
            "vocab_sha256": sha256_of(vocab_path),
            "model_type": trainer.model_type,
            **describe_model(model_path),
        }
        card = build_card(args, trainer, sample_stats, {"sentences": count, "sha256": sha}, model)
        card_path = os.path.join(tmp, name + ".card.json")
        with open(card_path, "w", encoding="utf-8") as f:
            f.write(json.dumps(card, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        # The card goes last: a card beside a model says that the model and vocab are complete.
        for local, dest in zip((model_path, vocab_path, card_path), outputs, strict=True):
            publish_copy(local, dest)
    LOG.info("wrote %s (sha256 %s)", outputs[0], model["sha256"])
    return card
