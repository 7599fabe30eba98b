r"""Train a SentencePiece tokenizer on a deterministic, subset-stratified sample of the pipeline's inputs.

    python -m pipeline.train_tokenizer --input 'train/*.jsonl.zst' --model_prefix tokenizers/pile32k/pile32k

writes PREFIX.model, PREFIX.vocab and PREFIX.card.json (the arguments, the trainer settings, the
sample's sha256 and per-subset sample sizes). Every flag this module does not know goes to Beam's
`PipelineOptions`, as for `pipeline.run`, so the sample is drawn on any runner.

Sampling (Beam; the same reader, parser and dead-letter reasons as `pipeline.run`):

    (file_index, path) -> ReadChunks -> Chunk -> FanOut (Reshuffle)
    Chunk              -> KeyDocuments -> (stratum, SampleDoc) + stats      bad lines counted, skipped
    (stratum, docs)    -> SmallestKeys  -> (stratum, [SampleDoc])            per stratum, bounded memory
    [(stratum, docs)]  -> WriteSample   -> sample.jsonl (key order) + sample_stats.json

Every document gets a key: the first 8 bytes of blake2b("tokenizer-sample:{seed}:{file}:{line}").
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

import argparse
import dataclasses
import hashlib
import importlib.metadata
import io
import json
import logging
import os
import posixpath
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator

import apache_beam as beam
import fsspec
import sentencepiece as spm
from apache_beam.metrics import Metrics

from pipeline import read
from pipeline.config import parse_subsets
from pipeline.run import parse_bool, pipeline_options
from pipeline.stats import merge_stats, sorted_dict
from pipeline.subsets import PILE_PAPER_EPOCHS, PILE_SUBSETS, check_subset_names
from pipeline.tokenizer import file_sha256

LOG = logging.getLogger("pipeline.train_tokenizer")
NAMESPACE = "tokenizer_sample"
STATS = "stats"
SAMPLE_FILE = "sample.jsonl"
SAMPLE_STATS_FILE = "sample_stats.json"
CARD_FORMAT = "pile-tokenizer-card"
CARD_FORMAT_VERSION = 1
NATURAL_STRATUM = "*"  # the one stratum of `--weights natural`

# Gao et al. 2020, Table 1: raw size of each subset in GiB. Times PILE_PAPER_EPOCHS this gives the
# "effective size" the paper trained on (825.18 GiB raw -> 1254.20 GiB effective).
PILE_RAW_GIB: dict[str, float] = {
    "Pile-CC": 227.12,
    "PubMed Central": 90.27,
    "Books3": 100.96,
    "OpenWebText2": 62.77,
    "ArXiv": 56.21,
    "Github": 95.16,
    "FreeLaw": 51.15,
    "StackExchange": 32.20,
    "USPTO Backgrounds": 22.90,
    "PubMed Abstracts": 19.26,
    "Gutenberg (PG-19)": 10.88,
    "OpenSubtitles": 12.98,
    "Wikipedia (en)": 6.38,
    "DM Mathematics": 7.75,
    "Ubuntu IRC": 5.52,
    "BookCorpus2": 6.30,
    "EuroParl": 4.59,
    "HackerNews": 3.90,
    "YoutubeSubtitles": 3.73,
    "PhilPapers": 2.38,
    "NIH ExPorter": 1.89,
    "Enron Emails": 0.88,
}
WEIGHT_PRESETS = ("pile", "natural", "uniform")


def pile_mix_weights() -> dict[str, float]:
    """The Pile's effective mix: raw GiB x paper epochs per subset (not normalized)."""
    return {name: PILE_RAW_GIB[name] * PILE_PAPER_EPOCHS[name] for name in PILE_SUBSETS}


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


def document_key(seed: int, file_index: int, line: int) -> int:
    """The document's sampling key: a hash of (seed, file, line), the same on every run and worker."""
    digest = hashlib.blake2b(f"tokenizer-sample:{seed}:{file_index}:{line}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


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
class SampleConfig:
    """What decides the sample's bytes (plus where it goes); recorded in the card."""

    inputs: tuple[str, ...]  # globs or fsspec URLs, as for pipeline.run
    sample_bytes: int  # total budget; strata get their weight's share
    weights: str = "pile"  # 'pile' | 'uniform' | 'natural' | 'Name=w,...'
    subsets: tuple[str, ...] = PILE_SUBSETS  # others are counted as not selected
    seed: int = 0
    max_doc_chars: int = 100_000  # documents are cut to this many characters first
    chunk_mb: float = 4.0  # unit of work after the fan-out
    max_line_mb: float = 64.0  # longer input lines are counted as bad and skipped
    on_corrupt_file: str = "fail"  # or "skip": keep what was read before the damage

    def __post_init__(self):
        if not self.inputs:
            raise ValueError("No --input given: pass one or more globs or URLs of .jsonl[.zst|.gz] files")
        if self.sample_bytes <= 0:
            raise ValueError("--sample_mb must be > 0")
        if self.max_doc_chars <= 0:
            raise ValueError("--max_doc_chars must be > 0")
        if self.chunk_mb <= 0 or self.max_line_mb <= 0:
            raise ValueError("--chunk_mb and --max_line_mb must be > 0")
        if self.on_corrupt_file not in ("fail", "skip"):
            raise ValueError("--on_corrupt_file must be 'fail' or 'skip'")
        check_subset_names(self.subsets, "--subsets")
        if not self.subsets:
            raise ValueError("The subset selection is empty: check --subsets and --exclude_subsets")
        self.normalized_weights()  # validates --weights

    @property
    def chunk_bytes(self) -> int:
        """Decompressed bytes per chunk."""
        return int(self.chunk_mb * (1 << 20))

    @property
    def max_line_bytes(self) -> int:
        """Longest input line accepted, in bytes."""
        return int(self.max_line_mb * (1 << 20))

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

    def to_json(self) -> dict:
        """JSON form for the card."""
        out = dataclasses.asdict(self)
        out["inputs"] = list(self.inputs)
        out["subsets"] = list(self.subsets)
        return out


# ----------------------------------------------------------------------------------------------------
# Beam stages: each DoFn delegates to the pure functions above and to pipeline.read.


def _counter(name: str):
    return Metrics.counter(NAMESPACE, name)


class ReadChunksFn(beam.DoFn):
    """(file_index, path) -> Chunk, streaming the file; file stats go to the STATS output."""

    def __init__(self, config: SampleConfig):
        self._config = config

    def process(self, element):
        """Stream one input file as chunks; a damaged file fails the job or is recorded."""
        file_index, path = element
        shown = read.redact_url(path)
        stats: dict = {"path": shown, "lines": 0, "decompressed_bytes": 0}
        try:
            for chunk in read.iter_chunks(path, file_index, self._config.chunk_bytes, self._config.max_line_bytes):
                stats["lines"] += len(chunk.lines)
                stats["decompressed_bytes"] += chunk.num_bytes
                yield chunk
        except read.CorruptInputError as e:
            if self._config.on_corrupt_file == "fail":
                raise read.CorruptInputError(
                    f"{e} -- sampling stops (pass --on_corrupt_file skip to keep the lines read before "
                    "the damage)"
                ) from None
            LOG.error("damaged input, keeping the %d lines read before the damage: %s", stats["lines"], e)
            _counter("files_damaged").inc()
            stats["damaged"] = str(e)
        _counter("files_read").inc()
        yield beam.pvalue.TaggedOutput(STATS, {"inputs": {f"{file_index:05d}": stats}})


class KeyDocumentsFn(beam.DoFn):
    """Chunk -> (stratum, SampleDoc) for each selected, non-empty document; the rest is counted."""

    def __init__(self, config: SampleConfig):
        self._config = config
        self._budgets = config.budgets()
        self._selected = frozenset(config.subsets)
        self._natural = config.is_natural

    def process(self, chunk: read.Chunk):
        """Parse, select, cut and key each document of a chunk."""
        cfg = self._config
        subsets: dict = {}
        dead: dict[str, int] = {}
        for line in chunk.lines:
            try:
                text, subset = read.parse_line(line, cfg.max_line_bytes)
            except read.BadRecord as bad:
                dead[bad.reason] = dead.get(bad.reason, 0) + 1
                continue
            s = subsets.setdefault(subset, {"documents": 0, "bytes": 0, "cut": 0, "filtered": {}})
            stratum = NATURAL_STRATUM if self._natural else subset
            reason = None
            if subset not in self._selected or stratum not in self._budgets:
                reason = "not_selected"
            elif not text.strip():
                reason = "empty_text"
            if reason:
                s["filtered"][reason] = s["filtered"].get(reason, 0) + 1
                continue
            if len(text) > cfg.max_doc_chars:
                text = text[: cfg.max_doc_chars]
                s["cut"] += 1
            size = len(text.encode("utf-8"))
            s["documents"] += 1
            s["bytes"] += size
            key = document_key(cfg.seed, chunk.file_index, line.number)
            yield stratum, (key, chunk.file_index, line.number, size, subset, text)
        _counter("lines").inc(len(chunk.lines))
        _counter("bad_lines").inc(sum(dead.values()))
        yield beam.pvalue.TaggedOutput(STATS, {"subsets": subsets, "dead_letters": dead, "lines": len(chunk.lines)})


class SmallestKeysFn(beam.CombineFn):
    """Per stratum: the documents with the smallest keys up to the stratum's byte budget.

    The accumulator is [bytes held, docs]; it is cut back to the budget whenever it holds more than
    twice the budget, so memory stays near 2x the budget per stratum and worker. A CombineFn is not
    told its key, so the budget is looked up from a document's subset.
    """

    def __init__(self, budgets: dict[str, int], natural: bool):
        self._budgets = dict(budgets)
        self._natural = natural

    def _budget(self, doc: SampleDoc) -> int:
        return self._budgets[NATURAL_STRATUM if self._natural else doc[4]]

    def _compact(self, acc):
        size, docs = acc
        if docs and size > 2 * self._budget(docs[0]):
            docs = take_smallest(docs, self._budget(docs[0]))
            size = sum(d[3] for d in docs)
        return [size, docs]

    def create_accumulator(self):
        """No documents yet."""
        return [0, []]

    def add_input(self, mutable_accumulator, element):
        """Add one document."""
        mutable_accumulator[0] += element[3]
        mutable_accumulator[1].append(element)
        return self._compact(mutable_accumulator)

    def merge_accumulators(self, accumulators):
        """Pool partial results and cut back to the budget."""
        size, docs = 0, []
        for part_size, part_docs in accumulators:
            size += part_size
            docs.extend(part_docs)
        return self._compact([size, docs])

    def compact(self, accumulator):
        """Cut back to the budget before the accumulator is shipped."""
        return self._compact(accumulator)

    def extract_output(self, accumulator):
        """The stratum's sample, in key order."""
        docs = accumulator[1]
        return take_smallest(docs, self._budget(docs[0])) if docs else []


def build_sample_pipeline(p, config: SampleConfig, input_files: list[str], work_dir: str) -> None:
    """Add the sampler to `p`; it writes WORK_DIR/sample.jsonl and WORK_DIR/sample_stats.json."""
    read_out = (
        p
        | "ListInputs" >> beam.Create(list(enumerate(input_files)))  # (file_index, path)
        | "ReadChunks" >> beam.ParDo(ReadChunksFn(config)).with_outputs(STATS, main="chunks")
    )
    keyed = (
        read_out.chunks
        # A .zst file cannot be split: fan its chunks out so that 30 files do not cap parallelism.
        | "FanOut" >> beam.Reshuffle()
        | "KeyDocuments" >> beam.ParDo(KeyDocumentsFn(config)).with_outputs(STATS, main="docs")
    )
    stats = (
        (read_out[STATS], keyed[STATS])
        | "AllStats" >> beam.Flatten()
        | "SumStats" >> beam.CombineGlobally(merge_stats)
    )
    _ = (
        keyed.docs  # (stratum, SampleDoc)
        | "SmallestKeys" >> beam.CombinePerKey(SmallestKeysFn(config.budgets(), config.is_natural))
        | "GatherStrata" >> beam.combiners.ToList()  # one element: [(stratum, [SampleDoc])]
        | "WriteSample" >> beam.Map(write_sample, config, work_dir, stats=beam.pvalue.AsSingleton(stats))
    )


def _atomic_open_write(path: str):
    fs, fs_path = fsspec.core.url_to_fs(path)
    fs.makedirs(posixpath.dirname(fs_path) or ".", exist_ok=True)
    tmp = posixpath.join(posixpath.dirname(fs_path), f".{posixpath.basename(fs_path)}.tmp-{uuid.uuid4().hex}")
    return fs, fs_path, tmp


def write_sample(strata: list, config: SampleConfig, work_dir: str, stats: dict) -> dict:
    """Write the sampled documents in key order (one JSON object a line) and their statistics.

    Both files go under temporary names first, then move into place (a DoFn may run twice).
    Returns the sample statistics (also written as sample_stats.json).
    """
    docs = sorted(doc for _, stratum_docs in strata for doc in stratum_docs)
    fs, fs_path, tmp = _atomic_open_write(posixpath.join(work_dir, SAMPLE_FILE))
    digest = hashlib.sha256()
    per_subset: dict[str, dict] = {}
    with fs.open(tmp, "wb") as f:
        for _, _, _, size, subset, text in docs:
            line = json.dumps({"subset": subset, "text": text}, ensure_ascii=False).encode("utf-8") + b"\n"
            digest.update(line)
            f.write(line)
            s = per_subset.setdefault(subset, {"documents": 0, "bytes": 0})
            s["documents"] += 1
            s["bytes"] += size
    fs.mv(tmp, fs_path)
    sample_stats = sample_statistics(config, stats, per_subset, digest.hexdigest())
    fs, fs_path, tmp = _atomic_open_write(posixpath.join(work_dir, SAMPLE_STATS_FILE))
    with fs.open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(sample_stats, indent=1, sort_keys=True) + "\n")
    fs.mv(tmp, fs_path)
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


def draw_sample(config: SampleConfig, work_dir: str, beam_args: list[str]) -> dict:
    """Run the sampler on Beam; returns the sample statistics (WORK_DIR/sample_stats.json)."""
    for url in config.inputs + (work_dir,):
        if read.redact_url(url) != url:
            raise ValueError(f"{read.redact_url(url)!r}: credentials in URLs are refused; use the environment")
    input_files = read.expand_inputs(list(config.inputs))  # fails fast on a pattern matching nothing
    options = pipeline_options(beam_args)
    LOG.info("sampling %.1f MB (%s weights) from %d input files", config.sample_bytes / 1e6, config.weights,
             len(input_files))
    start = time.monotonic()
    with beam.Pipeline(options=options) as p:
        build_sample_pipeline(p, config, input_files, work_dir)
    LOG.info("sample drawn in %.1f s", time.monotonic() - start)
    return load_sample_stats(work_dir)


def load_sample_stats(work_dir: str) -> dict:
    """Read WORK_DIR/sample_stats.json and check that sample.jsonl beside it is the one it describes."""
    stats_path = posixpath.join(work_dir, SAMPLE_STATS_FILE)
    sample_path = posixpath.join(work_dir, SAMPLE_FILE)
    fs, fs_path = fsspec.core.url_to_fs(stats_path)
    if not fs.exists(fs_path):
        raise FileNotFoundError(f"No {SAMPLE_STATS_FILE} in {work_dir}: draw the sample first (--sample_only)")
    with fs.open(fs_path, "r", encoding="utf-8") as f:
        stats = json.load(f)
    actual = file_sha256(sample_path)
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

    model_type: str = "bpe"  # or "unigram"
    vocab_size: int = 32000
    character_coverage: float = 0.99995
    byte_fallback: bool = True  # unknown characters become <0x..> byte pieces instead of <unk>
    split_digits: bool = True  # every digit is its own piece
    unk_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = -1  # Llama-2 has no pad piece
    max_sentence_length: int = 4192  # bytes per trainer sentence (longer lines are cut first)
    max_sentencepiece_length: int = 16
    num_threads: int = 16  # fixed by default: the model's bytes depend on it
    seed: int = 0  # SentencePiece's random generator
    extra: tuple[tuple[str, str], ...] = ()  # --spm_arg KEY=VALUE, passed through

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


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def model_facts(model_path: str) -> dict:
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
        "created_by": f"pile-pipeline {_version('pile-pipeline')}, sentencepiece {spm.__version__}",
        "arguments": args,
        "model": model,
        "trainer": trainer.trainer_kwargs() | {"seed": trainer.seed},
        "trainer_input": trainer_input,
        "sample": sample_stats,
    })


def _copy_atomically(local_path: str, dest: str) -> None:
    fs, fs_path, tmp = _atomic_open_write(dest)
    fs.put_file(local_path, tmp)
    fs.mv(tmp, fs_path)


def build_parser() -> argparse.ArgumentParser:
    """Our flags (Beam's are left for PipelineOptions)."""
    p = argparse.ArgumentParser(prog="python -m pipeline.train_tokenizer", description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("sample")
    g.add_argument("--input", action="append", default=None,
                   help="glob or fsspec URL of .jsonl.zst/.jsonl.gz/.jsonl files; repeatable")
    g.add_argument("--sample_mb", type=float, default=256.0,
                   help="text to sample, in MB (1e6 bytes) of UTF-8 (default 256)")
    g.add_argument("--weights", default="pile",
                   help="'pile' (default: raw size x paper epochs), 'uniform', 'natural' (no strata), "
                        "or 'Name=w,Other=w' (unnamed subsets get 0)")
    g.add_argument("--subsets", default=None, help="'all' (default), 'uncopyrighted', or a comma list")
    g.add_argument("--exclude_subsets", default=None, help="comma list of subsets to leave out")
    g.add_argument("--seed", type=int, default=0, help="sampling and trainer seed (default 0)")
    g.add_argument("--max_doc_chars", type=int, default=100_000,
                   help="documents are cut to this many characters before sampling (default 100000)")
    g.add_argument("--chunk_mb", type=float, default=4.0, help="unit of work after the fan-out")
    g.add_argument("--max_line_mb", type=float, default=64.0, help="longer input lines are skipped, counted")
    g.add_argument("--on_corrupt_file", choices=("fail", "skip"), default="fail")
    g.add_argument("--work_dir", default=None,
                   help="where sample.jsonl and sample_stats.json go (local or s3://; a remote runner "
                        "needs a shared location). Default: a temporary directory, removed at the end")
    g.add_argument("--sample_only", type=parse_bool, nargs="?", const=True, default=False,
                   help="stop after drawing the sample into --work_dir")
    g.add_argument("--from_sample", default=None,
                   help="train from the sample already in this work dir instead of drawing one")
    t = p.add_argument_group("trainer (defaults: Llama-2's)")
    t.add_argument("--model_prefix", default=None,
                   help="writes PREFIX.model, PREFIX.vocab, PREFIX.card.json (local or fsspec URL)")
    t.add_argument("--model_type", choices=("bpe", "unigram"), default="bpe")
    t.add_argument("--vocab_size", type=int, default=32000)
    t.add_argument("--character_coverage", type=float, default=0.99995)
    t.add_argument("--byte_fallback", type=parse_bool, nargs="?", const=True, default=True)
    t.add_argument("--split_digits", type=parse_bool, nargs="?", const=True, default=True)
    t.add_argument("--unk_id", type=int, default=0)
    t.add_argument("--bos_id", type=int, default=1)
    t.add_argument("--eos_id", type=int, default=2)
    t.add_argument("--pad_id", type=int, default=-1)
    t.add_argument("--max_sentence_length", type=int, default=4192,
                   help="bytes per trainer sentence; longer lines are cut at a space")
    t.add_argument("--num_threads", type=int, default=16,
                   help="trainer threads (default 16; the model's bytes depend on it)")
    t.add_argument("--spm_arg", action="append", default=[], metavar="KEY=VALUE",
                   help="any other SentencePieceTrainer option, e.g. train_extremely_large_corpus=true")
    t.add_argument("--overwrite", type=parse_bool, nargs="?", const=True, default=False,
                   help="replace existing PREFIX.model/.vocab/.card.json")
    return p


_SAMPLE_FLAGS = ("input", "sample_mb", "weights", "subsets", "exclude_subsets", "max_doc_chars", "chunk_mb",
                 "max_line_mb", "on_corrupt_file")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, SampleConfig | None, TrainerConfig, list[str]]:
    """Split argv into our settings and Beam's flags (the sample config is None with --from_sample)."""
    parser = build_parser()
    args, beam_args = parser.parse_known_args(argv)
    if args.from_sample and (args.input or args.sample_only):
        parser.error("--from_sample trains from an existing sample: drop --input and --sample_only")
    if not args.input and not args.from_sample:
        parser.error("--input is required (or --from_sample WORK_DIR)")
    if not args.model_prefix and not args.sample_only:
        parser.error("--model_prefix is required (unless --sample_only)")
    if args.sample_only and not args.work_dir:
        parser.error("--sample_only needs --work_dir (where the sample is kept)")
    extra = []
    for item in args.spm_arg:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--spm_arg {item!r} is not KEY=VALUE")
        extra.append((key.strip(), value))
    sample_config = None
    if not args.from_sample:
        sample_config = SampleConfig(
            inputs=tuple(args.input),
            sample_bytes=int(args.sample_mb * 1e6),
            weights=args.weights,
            subsets=parse_subsets(args.subsets, args.exclude_subsets),
            seed=args.seed,
            max_doc_chars=args.max_doc_chars,
            chunk_mb=args.chunk_mb,
            max_line_mb=args.max_line_mb,
            on_corrupt_file=args.on_corrupt_file,
        )
    trainer = TrainerConfig(
        model_type=args.model_type,
        vocab_size=args.vocab_size,
        character_coverage=args.character_coverage,
        byte_fallback=args.byte_fallback,
        split_digits=args.split_digits,
        unk_id=args.unk_id,
        bos_id=args.bos_id,
        eos_id=args.eos_id,
        pad_id=args.pad_id,
        max_sentence_length=args.max_sentence_length,
        num_threads=args.num_threads,
        seed=args.seed,
        extra=tuple(extra),
    )
    return args, sample_config, trainer, beam_args


def _recorded_args(args: argparse.Namespace) -> dict:
    # What decides the model. Where the sample was kept and --overwrite do not; with --from_sample
    # the sampling flags of this command were not used (the card's sample.config has the real ones).
    skip = {"work_dir", "overwrite", "sample_only"} | (set(_SAMPLE_FLAGS) if args.from_sample else set())
    return {k: v for k, v in vars(args).items() if k not in skip}


def _fs_exists(path: str) -> bool:
    fs, fs_path = fsspec.core.url_to_fs(path)
    return fs.exists(fs_path)


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
            "sha256": file_sha256(model_path),
            "vocab_file": name + ".vocab",
            "vocab_sha256": file_sha256(vocab_path),
            "model_type": trainer.model_type,
            **model_facts(model_path),
        }
        card = build_card(args, trainer, sample_stats, {"sentences": count, "sha256": sha}, model)
        card_path = os.path.join(tmp, name + ".card.json")
        with open(card_path, "w", encoding="utf-8") as f:
            f.write(json.dumps(card, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        # The card goes last: a card beside a model says that the model and vocab are complete.
        for local, dest in zip((model_path, vocab_path, card_path), outputs, strict=True):
            _copy_atomically(local, dest)
    LOG.info("wrote %s (sha256 %s)", outputs[0], model["sha256"])
    return card


def main(argv: list[str] | None = None) -> dict | None:
    """Draw the sample and train; returns the card (None with --sample_only)."""
    argv = sys.argv[1:] if argv is None else argv
    args, sample_config, trainer, beam_args = parse_args(argv)
    if args.model_prefix:
        if read.redact_url(args.model_prefix) != args.model_prefix:
            raise ValueError("--model_prefix: credentials in URLs are refused; use the environment")
        existing = [args.model_prefix + ext for ext in (".model", ".vocab", ".card.json")
                    if _fs_exists(args.model_prefix + ext)]
        if existing and not args.overwrite:
            raise FileExistsError(f"{existing[0]} exists: pass --overwrite to replace the tokenizer")
    if args.from_sample:
        stats = load_sample_stats(args.from_sample)
        _print_sample(stats)
        return train_from_sample(args.from_sample, args.model_prefix, trainer, _recorded_args(args))
    own_work_dir = args.work_dir is None
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="tokenizer-sample-")
    try:
        stats = draw_sample(sample_config, work_dir, beam_args)
        _print_sample(stats)
        if args.sample_only:
            return None
        return train_from_sample(work_dir, args.model_prefix, trainer, _recorded_args(args))
    finally:
        if own_work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)


def _print_sample(stats: dict) -> None:
    rows = [("subset", "available MB", "target MB", "sampled MB", "docs")]
    order = {name: i for i, name in enumerate(PILE_SUBSETS)}
    for name, s in sorted(stats["subsets"].items(), key=lambda kv: order.get(kv[0], len(order))):
        target = s.get("target_bytes")
        rows.append((name, f"{s['bytes_available'] / 1e6:.2f}",
                     "-" if target is None else f"{target / 1e6:.2f}" + (" short" if s.get("short") else ""),
                     f"{s['bytes'] / 1e6:.2f}", str(s["documents"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths,
                                                                                                strict=True)))
                      for r in rows)
    print(table)
    print(f"sample: {stats['documents']} documents, {stats['bytes'] / 1e6:.2f} MB, sha256 {stats['sha256']}; "
          f"bad lines skipped: {sum(stats['dead_letters'].values())} {stats['dead_letters']}")


if __name__ == "__main__":
    from pipeline.run import configure_logging

    configure_logging()
    try:
        main()
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        LOG.error("%s", e)
        sys.exit(2)
