"""`--output_format megatron`: the job's documents written as Megatron's indexed dataset, in shards.

Reading, validation, dead letters, subset selection, epochs, BOS/EOS and the tokenizer backends are
every format's (pipeline/beam/read.py reads the chunks, chunk_documents.ChunkDocumentsFn tokenizes
them); instead of packing, every kept document becomes one sequence `[BOS] ids EOS`
(pipeline/format/megatron.py has the format).

Order: within a group of shards (the whole output, or one subset with --per_subset), documents are
in input order: epoch copy, input file (sorted paths), line. Copy 0 is exactly what Megatron's
`preprocess_data.py --append-eod` writes for the input files in that order; `GPTDataset` shuffles
documents and samples at train time with its own seed, so a shuffle here would add nothing (and
would lose that equality). The order depends on nothing but the input and the config: the same
bytes on every runner and any number of workers.

Element shapes:
  Chunk                          -> TokenizeDocumentsFn -> (source, Documents)
                                                          + counts {group: [k, 3] (source key, documents, bytes)}
                                                          + dead letters ((file, chunk), dict) + stats
                                                          + with --provenance: (key, documents, spans)
  (file, [(key, documents, spans)]) -> WriteProvenanceFn -> provenance file info dict (pipeline/format/provenance.py)
  (source, Documents) + layout   -> AssignShardsFn      -> ((group, slot), (first, Documents)) + (group, slot)
  ((group, slot), [(first, Documents)]) + names -> WriteShardFn -> shard info dict
source = (group, copy, file_index, chunk_index); group: the subset's name with --per_subset, else "".
Documents: the documents' token bytes back to back, one element for many documents: a
FramedRecords (pipeline/format/framing.py: any byte strings back to back) or, through a sink that
stores them, a SpilledRecords reference to the same bytes (pipeline/io/record_files.py).
first: the group-wide index of the block's first document. slot: where in the group's byte stream
a document starts, // shard bytes; `names` gives the slots that hold documents dense shard names.
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
from pipeline.beam.preflight import Job
from pipeline.beam.read import STATS, chunk_stage, counter, reporter
from pipeline.beam.removed import REMOVED, removed_files
from pipeline.beam.tfrecord.output import WriteProvenanceFn
from pipeline.beam.tfrecord.pack import PROVENANCE
from pipeline.config.job import PipelineConfig
from pipeline.core.stats import JobStats, merge_stats, sorted_dict
from pipeline.format import megatron as fmt
from pipeline.format import provenance as provenance_files
from pipeline.format.framing import FramedRecords
from pipeline.io.outputs import LATEST_NAME, commit_output, latest_run, run_path
from pipeline.io.publish import publish
from pipeline.io.record_files import SpilledRecords, load
from pipeline.process.megatron import DocumentSequences

LOG = logging.getLogger(__name__)
USED = "used"
COPY_BYTES = 8 << 20  # read size when copying a shard out of its spool


def _sizes(block: FramedRecords | SpilledRecords) -> np.ndarray:
    """Byte size of each document of a block."""
    if isinstance(block, SpilledRecords):
        return block.ends - block.starts
    return np.diff(block.ends, prepend=0)


class TokenizeDocumentsFn(ChunkDocumentsFn):
    """Chunk -> the kept documents' tokens, one block per (group, epoch copy); see the module docstring."""

    writer = DocumentSequences

    def _blocks_out(self, result):
        counts: dict[str, list] = {}
        for block in result.blocks:
            group, *key = block.source
            yield block.source, emitted(self._sink, block.records, block.source)
            if block.spans is not None:  # each document's input line (pipeline/format/provenance.py)
                yield beam.pvalue.TaggedOutput(PROVENANCE, ((provenance_files.group_key(group), *key),
                                                            len(block.records), block.spans))
            n = len(block.records)
            counts.setdefault(group, []).append((fmt.source_key(*key), n,
                                                 len(block.records.data) + fmt.INDEX_BYTES_PER_DOCUMENT * n))
        if counts:
            yield beam.pvalue.TaggedOutput(COUNTS, {g: np.array(c, np.int64) for g, c in counts.items()})


class AssignShardsFn(beam.DoFn):
    """(source, Documents) + layout -> ((group, slot), (first, Documents)) per shard touched, + (group, slot).

    per_document: the bytes a document adds to a shard beside its own (its .idx entry; 0 for JSON lines).
    """

    def __init__(self, shard_bytes: int, per_document: int = fmt.INDEX_BYTES_PER_DOCUMENT):
        self._shard_bytes = shard_bytes
        self._per_document = per_document

    def process(self, element, layout: fmt.Layout):
        source, block = element
        first_document, first_byte = layout.offsets(source[0], fmt.source_key(*source[1:]))
        slots = fmt.shard_slots(first_byte, _sizes(block) + self._per_document, self._shard_bytes)
        for slot in np.unique(slots).tolist():
            members = np.flatnonzero(slots == slot)  # consecutive: slots never decrease
            part = block if len(members) == len(block) else block.take(members.tolist())
            yield (source[0], slot), (first_document + int(members[0]), part)
            yield beam.pvalue.TaggedOutput(USED, (source[0], slot))


class WriteShardFn(beam.DoFn):
    """((group, slot), [(first, Documents)]) + names -> P.bin, then P.idx (each temp file + rename); info.

    The runner hands the blocks over in any order, and on a distributed runner a group is the whole
    shard: each block goes once to a local temporary file as it arrives, and the .bin is copied out
    of it in document order. The writer holds one block, the blocks' places and the shard's sequence
    lengths (8 bytes per document), whatever the shard's size.
    """

    def __init__(self, config: PipelineConfig, dtype: np.dtype, run_id: str):
        self._config = config
        self._dtype = np.dtype(dtype)
        self._run_id = run_id

    def process(self, element, names):
        (group, slot), blocks = element
        with tempfile.TemporaryFile(prefix="pile-pipeline-shard-") as spool:
            places = []  # (first document, offset in the spool, bytes, per-document bytes)
            for first, block in blocks:
                records = load(block)
                places.append((first, spool.tell(), len(records.data), np.diff(records.ends, prepend=0)))
                spool.write(records.data)
            places.sort(key=lambda p: p[0])
            expected = places[0][0]
            for first, _, _, sizes in places:  # the shard's documents follow each other, no gap, no repeat
                if first != expected:
                    raise RuntimeError(
                        f"shard ({group}, {slot}): documents {expected}..{first} are missing or repeated")
                expected = first + len(sizes)
            lengths = np.concatenate([sizes for *_, sizes in places]) // self._dtype.itemsize
            prefix = run_path(self._run_id, names[(group, slot)])  # in the run's own directory

            def parts():
                for _, offset, size, _ in places:
                    spool.seek(offset)
                    while size:
                        data = spool.read(min(size, COPY_BYTES))
                        size -= len(data)
                        yield data

            root = self._config.output_dir
            bin_bytes, bin_sha = publish(posixpath.join(root, f"{prefix}.bin"), parts())
        idx_bytes, idx_sha = publish(posixpath.join(root, f"{prefix}.idx"), fmt.index_parts(lengths, self._dtype))
        counter("shards_written").inc()
        LOG.info("wrote %s.bin/.idx: %d documents, %.1f MB", prefix, len(lengths), bin_bytes / 1e6)
        yield {"path": prefix, "subset": group or None, "documents": len(lengths), "tokens": int(lengths.sum()),
               "bin": {"path": f"{prefix}.bin", "bytes": bin_bytes, "sha256": bin_sha},
               "idx": {"path": f"{prefix}.idx", "bytes": idx_bytes, "sha256": idx_sha}}


def build_manifest(config: PipelineConfig, tokenizer: dict, dtype: np.dtype, shards: list[dict], stats: JobStats,
                   dead_letters: list[dict], run_id: str, provenance: list[dict] | None = None,
                   resumes: int = 0) -> dict:
    """The manifest of a Megatron output (pure, so tests can check it without Beam)."""
    shards = sorted(shards, key=lambda s: s["path"])
    manifest = shared_entries(config, run_id, stats, dead_letters, resumes)
    manifest["totals"].update(
        documents=sum(s["documents"] for s in shards),
        tokens=sum(s["tokens"] for s in shards),
        bytes=sum(s["bin"]["bytes"] + s["idx"]["bytes"] for s in shards),
    )
    manifest.update({
        "format": fmt.FORMAT,
        "format_version": fmt.FORMAT_VERSION,
        "megatron": {
            "dtype": np.dtype(dtype).name,
            "dtype_code": fmt.dtype_code(dtype),
            "per_subset": config.per_subset,
            "order": "input order within each group of shards: epoch copy, input file, line",
        },
        "tokenizer": tokenizer,
        "shards": shards,
        "config": config.to_json(),  # what decides a Megatron output: its option groups say (pipeline/config/)
    })
    if config.provenance:  # only then, so that the default output stays the same bytes
        manifest["provenance"] = {"files": sorted(provenance or [], key=lambda f: f["path"])}
    # Relative prefixes: usable from the output directory; `pile-pipeline data-path` gives full ones.
    manifest["megatron"]["data_path"] = fmt.data_path(fmt.blend(manifest))
    return sorted_dict(manifest)


def build(p: beam.Pipeline, job: Job, chunks, read_stats, workspace: Workspace) -> beam.PCollection:
    """Add the Megatron writer to `p`: chunks -> documents -> shards of .bin/.idx -> manifest.

    `chunks` and `read_stats` are the read stage's outputs (pipeline/beam/read.py). Returns the
    manifest's path (one element, once it is written).
    """
    cfg, sink, runtime = job.config, workspace.sink, workspace.runtime
    tokenizer, progress = tokenizer_json(job), reporter(job, workspace)
    dtype = fmt.token_dtype(job.tokenizer.special.vocab_size)
    docs = chunk_stage(
        chunks, "TokenizeDocuments",
        TokenizeDocumentsFn(cfg, job.tokenizer, job.execution.encode_threads, sink, progress,
                            encode_batch_bytes=job.execution.encode_batch_bytes, work=workspace.work),
        DEAD_LETTERS, STATS, COUNTS, REMOVED, PROVENANCE, main="documents", runtime=runtime)
    layout = (
        docs[COUNTS]
        | "CollectCounts" >> beam.combiners.ToList()
        | "PlanLayout" >> beam.Map(fmt.Layout.from_counts)
    )
    if runtime.side_inputs:
        assigned = docs.documents | "AssignShards" >> beam.ParDo(
            AssignShardsFn(cfg.shard_bytes), beam.pvalue.AsSingleton(layout)).with_outputs(USED, main="documents")
    else:  # each source's offsets joined to its block
        keyed = docs.documents | "KeySources" >> beam.Map(lambda sb: ((sb[0][0], fmt.source_key(*sb[0][1:])), sb))
        offsets = layout | "SourceOffsets" >> beam.FlatMap(source_offsets)
        assigned = multi_output(join_each("JoinLayout", keyed, offsets), "AssignShards",
                                AssignJoinedFn(cfg.shard_bytes), USED, main="documents", runtime=runtime)
    names = (
        assigned[USED]
        | "UsedSlots" >> beam.Distinct()
        | "CollectSlots" >> beam.combiners.ToList()
        | "NameShards" >> beam.Map(fmt.shard_names, cfg.split)
    )
    # ((group, slot), [(first, Documents)]): with a spill_dir, references only
    shards = write_shards(assigned.documents, names, WriteShardFn(cfg, dtype, job.run_id), runtime)
    dead = docs[DEAD_LETTERS] | "WriteDeadLetters" >> WriteDeadLetters(cfg, job.run_id)
    stats = summed_stats(job, read_stats, docs)
    written = {"shards": shards, "stats": stats, "dead_letters": dead}
    if cfg.provenance:  # one file per input file: (file_index, [(key, documents, spans)])
        written["provenance"] = (
            docs[PROVENANCE]
            | "KeyProvenanceByFile" >> beam.Map(lambda block: (block[0][2], block))
            | "GroupProvenance" >> beam.GroupByKey()
            | "WriteProvenance" >> beam.ParDo(WriteProvenanceFn(cfg, job.run_id))
        )
    # The manifest is written last, once every shard has been written.
    return gather("Written", **written) | "WriteManifest" >> beam.Map(_write_manifest, cfg, tokenizer, dtype,
                                                                      job.run_id, job.resumes)


def source_offsets(layout: fmt.Layout):
    """((group, source key), (first document, first byte)) of every source of the layout."""
    for group, (keys, documents, first_bytes) in layout.groups.items():
        for key, document, first_byte in zip(keys.tolist(), documents.tolist(), first_bytes.tolist(), strict=True):
            yield (group, key), (document, first_byte)


class _OneSource:
    """The offsets of one source, where AssignShardsFn expects the layout's."""

    def __init__(self, offsets: tuple[int, int]):
        self._offsets = offsets

    def offsets(self, _group, _key) -> tuple[int, int]:
        return self._offsets


class AssignJoinedFn(beam.DoFn):
    """(source key, [(source, Documents)], offsets) -> AssignShardsFn's outputs, without a side input."""

    def __init__(self, shard_bytes: int, per_document: int = fmt.INDEX_BYTES_PER_DOCUMENT):
        self._assign = AssignShardsFn(shard_bytes, per_document)

    def process(self, element):
        _, blocks, offsets = element
        for block in blocks:
            yield from self._assign.process(block, _OneSource(offsets))


def write_shards(blocks, names, writer: beam.DoFn, runtime):
    """((group, slot), block) -> one shard per slot, written by `writer` with the slots' names; its infos.

    Grouped by slot with the names as a side input, or (a runner without side inputs) each name
    joined to its blocks.
    """
    if runtime.side_inputs:
        return (blocks
                | "GroupByShard" >> beam.GroupByKey()
                | "WriteShards" >> beam.ParDo(writer, beam.pvalue.AsSingleton(names)))
    named = names | "ShardNames" >> beam.FlatMap(lambda names: names.items())
    return (join_each("GroupByShard", blocks, named)
            | "WriteShards" >> beam.FlatMap(lambda j: writer.process((j[0], j[1]), {j[0]: j[2]})))


def summed_stats(job: Job, read_stats, docs):
    """The job's stats: the read stage's, the tokenizing step's and removed/'s files', merged into one."""
    parts = (read_stats, docs[STATS], *removed_files(job.config, job.run_id, docs))
    return (tuple(s for s in parts if s is not None)
            | "AllStats" >> beam.Flatten()
            | "SumStats" >> beam.CombineGlobally(merge_stats))


def _write_manifest(written: dict, config, tokenizer, dtype, run_id, resumes: int = 0) -> str:
    (stats,) = written["stats"]
    manifest = build_manifest(config, tokenizer, dtype, written["shards"], stats, written["dead_letters"], run_id,
                              written.get("provenance", []), resumes)
    path = commit_output(config.output_dir, manifest, config.max_dead_letter_fraction)
    LOG.info("wrote %s: %d .bin/.idx pairs, %d documents", path, len(manifest["shards"]),
             manifest["totals"]["documents"])
    return path


def summary(config: PipelineConfig, seconds: float) -> tuple[dict, str]:
    """The manifest the job wrote and the lines printed after the run."""
    manifest = fmt.load_manifest(config.output_dir)
    # The stable prefixes under the `latest` link, when it names this run's output.
    link = LATEST_NAME if latest_run(config.output_dir) == manifest["run_id"] else None
    return manifest, fmt.format_summary(manifest, seconds, fmt.prefix_root(config.output_dir), link)
