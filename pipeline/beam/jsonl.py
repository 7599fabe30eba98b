"""`--output_format jsonl`: the kept documents' cleaned text as zstd-compressed JSON lines, in shards.

Reading, validation, dead letters, subset selection, the stages, dedup and removed/ are every
format's (pipeline/beam/read.py reads the chunks, chunk_documents.ChunkDocumentsFn runs the
engine); instead of tokens, every kept document becomes one JSON line of the text a tokenizing run
would tokenize (pipeline/format/jsonl.py has the line and the files). With --tokenizer_model the
documents are tokenized too, only to count their tokens; without, nothing is tokenized.

Order: documents in input order (input file, line), cut into shards by the Megatron output's
layout (pipeline/beam/megatron.py's AssignShardsFn with no per-document overhead: a shard holds at
most --shard_size_mb of JSON lines plus one). The order and the bytes depend on nothing but the
input and the config: the same on every runner, any number of workers and any --chunk_mb.

Element shapes:
  Chunk                        -> CleanTextFn   -> (source, Lines) + counts {"": [k, 3] (source key, documents,
                                                   bytes)} + dead letters + stats + removed/ records
  (source, Lines) + layout     -> AssignShardsFn -> (("", slot), (first, Lines)) + ("", slot)
  (("", slot), [(first, Lines)]) + names -> WriteShardFn -> shard info dict
source = ("", 0, file_index, chunk_index). Lines: the block's JSON lines back to back, a FramedRecords
(pipeline/format/framing.py) or, through a sink that stores them, a SpilledRecords reference.
first: the output-wide index of the block's first document. slot: where in the output's byte stream a
line starts, // shard bytes; `names` gives the used slots dense shard names.
"""

from __future__ import annotations

import logging
import posixpath
import tempfile

import apache_beam as beam
import numpy as np

from pipeline.beam.chunk_documents import COUNTS, DEAD_LETTERS, ChunkDocumentsFn, WriteDeadLetters, emitted
from pipeline.beam.execution import Workspace
from pipeline.beam.graph import gather, join_each, multi_output
from pipeline.beam.manifest import shared_entries, tokenizer_json
from pipeline.beam.megatron import USED, AssignJoinedFn, AssignShardsFn, source_offsets, summed_stats, write_shards
from pipeline.beam.preflight import Job
from pipeline.beam.read import STATS, chunk_stage, counter, reporter
from pipeline.beam.removed import REMOVED
from pipeline.config.job import PipelineConfig
from pipeline.core.stats import JobStats, sorted_dict
from pipeline.format import jsonl as fmt
from pipeline.format import megatron as layout_fmt
from pipeline.io.outputs import LATEST_NAME, commit_output, latest_run, run_path
from pipeline.io.publish import publish
from pipeline.io.record_files import load
from pipeline.process.documents import tokenizes
from pipeline.process.jsonl import JsonLines

LOG = logging.getLogger(__name__)
COPY_BYTES = 8 << 20  # read size when copying a shard's lines out of its spool


class CleanTextFn(ChunkDocumentsFn):
    """Chunk -> its kept documents' JSON lines, one block; see the module docstring."""

    writer = JsonLines

    def _blocks_out(self, result):
        rows = []
        for block in result.blocks:
            _, *key = block.source
            yield block.source, emitted(self._sink, block.records, block.source)
            rows.append((layout_fmt.source_key(*key), len(block.records), len(block.records.data)))
        if rows:
            yield beam.pvalue.TaggedOutput(COUNTS, {"": np.array(rows, np.int64)})


class WriteShardFn(beam.DoFn):
    """(("", slot), [(first, Lines)]) + names -> one .jsonl.zst (temp file + rename); its info.

    The runner hands the blocks over in any order: each goes once to a local temporary file as it
    arrives, and the shard is compressed from it in document order. The writer holds one block and
    the blocks' places, whatever the shard's size.
    """

    def __init__(self, config: PipelineConfig, run_id: str):
        self._config = config
        self._run_id = run_id

    def process(self, element, names):
        (group, slot), blocks = element
        with tempfile.TemporaryFile(prefix="pile-pipeline-shard-") as spool:
            places = []  # (first document, offset in the spool, bytes, documents)
            for first, block in blocks:
                lines = load(block)
                places.append((first, spool.tell(), len(lines.data), len(lines)))
                spool.write(lines.data)
            places.sort(key=lambda p: p[0])
            expected = places[0][0]
            for first, _, _, documents in places:  # the shard's documents follow each other, no gap, no repeat
                if first != expected:
                    raise RuntimeError(f"shard {slot}: documents {expected}..{first} are missing or repeated")
                expected = first + documents
            total = sum(size for _, _, size, _ in places)

            def parts():
                for _, offset, size, _ in places:
                    spool.seek(offset)
                    while size:
                        data = spool.read(min(size, COPY_BYTES))
                        size -= len(data)
                        yield data

            name = run_path(self._run_id, fmt.shard_file(names[(group, slot)]))
            size, sha = publish(posixpath.join(self._config.output_dir, name), fmt.compressed(parts(), total))
        counter("shards_written").inc()
        documents = expected - places[0][0]
        LOG.info("wrote %s: %d documents, %.1f MB (%.1f MB of JSON lines)", name, documents, size / 1e6, total / 1e6)
        yield {"path": name, "documents": documents, "bytes": size, "uncompressed_bytes": total, "sha256": sha}


def build_manifest(config: PipelineConfig, tokenizer: dict | None, shards: list[dict], stats: JobStats,
                   dead_letters: list[dict], run_id: str, resumes: int = 0) -> dict:
    """The manifest of a JSON-lines output (pure, so tests can check it without Beam).

    `tokenizer`: the manifest's `tokenizer` entry, None for a job without one (no token counts then).
    `resumes`: how many runs before this one worked on the output (--resume).
    """
    shards = sorted(shards, key=lambda s: s["path"])
    manifest = shared_entries(config, run_id, stats, dead_letters, resumes)
    totals = manifest["totals"]
    totals.update(documents=sum(s["documents"] for s in shards), bytes=sum(s["bytes"] for s in shards),
                  uncompressed_bytes=sum(s["uncompressed_bytes"] for s in shards))
    if totals["documents"] != totals["documents_kept"]:  # every kept document is exactly one line
        raise RuntimeError(f"the shards hold {totals['documents']} documents, the job kept {totals['documents_kept']}")
    if tokenizer is not None:
        totals["tokens"] = sum(s.tokens or 0 for s in stats.subsets.values())
        manifest["tokenizer"] = tokenizer
    manifest.update({
        "format": fmt.FORMAT,
        "format_version": fmt.FORMAT_VERSION,
        "jsonl": {"compression": fmt.compression_entry(), "order": fmt.ORDER,
                  "keys": ["text", *(["id"] if config.id_key else []), "metadata"], "tokenized": tokenizer is not None},
        "shards": shards,
        "config": config.to_json(),  # what decides a JSON-lines output: its option groups say (pipeline/config/)
    })
    return sorted_dict(manifest)


def build(p: beam.Pipeline, job: Job, chunks, read_stats, workspace: Workspace) -> beam.PCollection:
    """Add the JSON-lines writer to `p`: chunks -> lines -> shards of .jsonl.zst -> manifest.

    `chunks` and `read_stats` are the read stage's outputs (pipeline/beam/read.py). Returns the
    manifest's path (one element, once it is written).
    """
    cfg, sink, runtime = job.config, workspace.sink, workspace.runtime
    tokenizer = tokenizer_json(job) if tokenizes(job.tokenizer) else None
    docs = chunk_stage(
        chunks, "CleanText",
        CleanTextFn(cfg, job.tokenizer, job.execution.encode_threads, sink, reporter(job, workspace),
                    encode_batch_bytes=job.execution.encode_batch_bytes, work=workspace.work),
        DEAD_LETTERS, STATS, COUNTS, REMOVED, main="documents", runtime=runtime)
    layout = (
        docs[COUNTS]
        | "CollectCounts" >> beam.combiners.ToList()
        | "PlanLayout" >> beam.Map(layout_fmt.Layout.from_counts)
    )
    if runtime.side_inputs:
        assigned = docs.documents | "AssignShards" >> beam.ParDo(
            AssignShardsFn(cfg.shard_bytes, per_document=0), beam.pvalue.AsSingleton(layout)).with_outputs(
            USED, main="documents")
    else:  # each source's offsets joined to its block
        keyed = docs.documents | "KeySources" >> beam.Map(
            lambda sb: ((sb[0][0], layout_fmt.source_key(*sb[0][1:])), sb))
        offsets = layout | "SourceOffsets" >> beam.FlatMap(source_offsets)
        assigned = multi_output(join_each("JoinLayout", keyed, offsets), "AssignShards",
                                AssignJoinedFn(cfg.shard_bytes, per_document=0), USED, main="documents",
                                runtime=runtime)
    names = (
        assigned[USED]
        | "UsedSlots" >> beam.Distinct()
        | "CollectSlots" >> beam.combiners.ToList()
        | "NameShards" >> beam.Map(layout_fmt.shard_names, cfg.split)
    )
    # (("", slot), [(first, Lines)]): with a spill_dir, references
    shards = write_shards(assigned.documents, names, WriteShardFn(cfg, job.run_id), runtime)
    dead = docs[DEAD_LETTERS] | "WriteDeadLetters" >> WriteDeadLetters(cfg, job.run_id)
    stats = summed_stats(job, read_stats, docs)
    # The manifest is written last, once every shard has been written.
    return (gather("Written", shards=shards, stats=stats, dead_letters=dead)
            | "WriteManifest" >> beam.Map(_write_manifest, cfg, tokenizer, job.run_id, job.resumes))


def _write_manifest(written: dict, config: PipelineConfig, tokenizer: dict | None, run_id: str,
                    resumes: int = 0) -> str:
    (stats,) = written["stats"]
    manifest = build_manifest(config, tokenizer, written["shards"], stats, written["dead_letters"], run_id, resumes)
    path = commit_output(config.output_dir, manifest, config.max_dead_letter_fraction)
    LOG.info("wrote %s: %d .jsonl.zst shards, %d documents", path, len(manifest["shards"]),
             manifest["totals"]["documents"])
    return path


def summary(config: PipelineConfig, seconds: float) -> tuple[dict, str]:
    """The manifest the job wrote and the lines printed after the run."""
    manifest = fmt.load_manifest(config.output_dir)
    link = LATEST_NAME if latest_run(config.output_dir) == manifest["run_id"] else None
    return manifest, fmt.format_summary(manifest, seconds, layout_fmt.prefix_root(config.output_dir), link)
