"""`TokenShards`: the whole job as one Beam PTransform, to compose into a pipeline of your own.

    with beam.Pipeline() as p:
        docs = p | beam.Create([{"text": "...", "meta": {"pile_set_name": "Pile-CC"}}, ...])
        manifest = docs | TokenShards(config)          # one element: the manifest's path

    p | TokenShards(config)                            # reads config.inputs: what `pile-pipeline run` does

Applied to a pipeline, it reads the config's inputs (the command's job, pipeline/beam/job.py).
Applied to a PCollection, its elements are the documents: dicts, or JSON lines as str or bytes, in
the config's layout (--text_key, --subset_key, ...), validated and dead-lettered as input lines
are. A PCollection has no order, so the documents are put in one: each goes to one of `buckets`
chunks by a hash of its bytes and is ordered within it by that hash; the same documents give the
same shards in any order, on any runner. Their line numbers (dead letters, removed/, provenance) are
places in that order: bucket b's documents are lines b * 2**28 + 1, b * 2**28 + 2, ..., so that no
two documents share one (dedup tells documents apart by it); the manifest's input is
`config.inputs[0]`, a name for them.

Either way the output is written in `config.output_dir` as by the command, the manifest last.
What the transform cannot do inside someone else's pipeline is hold the output directory's lock
for the run: `pile-pipeline run` (pipeline/beam/launch.py) takes it; a pipeline of your own must
not run two writers into one directory. The directory is checked and prepared (a previous output
refused unless `overwrite`) when the transform is applied, its refusals naming the config's fields.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

import apache_beam as beam
import orjson
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.beam.dedup.stage import apply_dedup
from pipeline.beam.execution import Workspace
from pipeline.beam.formats import output_format
from pipeline.beam.preflight import Job, expand_eval_files, load_model, prepare, tokenizer_job
from pipeline.beam.read import STATS, read_chunks
from pipeline.beam.runners.registry import profile_for
from pipeline.config.job import PipelineConfig
from pipeline.core.documents import Line
from pipeline.core.errors import JobError
from pipeline.io.inputs import MAX_CHUNK_LINES, Chunk
from pipeline.io.urls import refuse_credentials

BUCKET_CHUNKS = 1 << 12  # chunk numbers per bucket
BUCKET_LINES = BUCKET_CHUNKS * MAX_CHUNK_LINES  # line numbers per bucket: every line of its chunks


class TooManyChunks(JobError, ValueError):
    """A bucket of documents given as a PCollection fills more chunk numbers than it owns."""


class TokenShards(beam.PTransform):
    """Documents in (the config's inputs, or a PCollection of them), token shards and manifest out.

    config: the job's options (`PipelineConfig`, every `pile-pipeline run` flag); options: the
    pipeline's options (the runner decides how the work spreads, never the bytes); job, workspace:
    a Job already prepared by the command (pipeline/beam/preflight.py) and what its run made;
    buckets: how many chunks documents given as a PCollection are ordered into.
    The output PCollection holds one element, the manifest's path, once every shard is written.
    """

    def __init__(self, config: PipelineConfig | None = None, options: PipelineOptions | None = None, *,
                 job: Job | None = None, workspace: Workspace | None = None, buckets: int = 16):
        super().__init__()
        if (config is None) == (job is None):
            raise ValueError("TokenShards takes a config or a prepared job")
        if buckets < 1:
            raise ValueError("buckets must be >= 1")
        self._config = config if job is None else job.config
        self._options = options or PipelineOptions()
        # Without a workspace of the command's: what the graph may ask of the pipeline's runner.
        workspace = workspace or Workspace(runtime=profile_for(self._options).runtime)
        self._job, self._workspace, self._buckets = job, workspace, buckets

    def expand(self, pvalue):
        if isinstance(pvalue, beam.pvalue.PBegin):
            job = self._job or prepare(self._config, self._options)
            if self._job is None:
                _prepare_output(job.config)
            chunks, read_stats = read_chunks(pvalue.pipeline, job, self._workspace)
        else:
            job = self._job or _documents_job(self._config, self._options)
            if self._job is None:
                _prepare_output(job.config)
            read = (
                pvalue
                | "DocumentLines" >> beam.Map(_keyed_line, self._buckets)
                | "GroupByBucket" >> beam.GroupByKey()
                | "BucketChunks" >> beam.ParDo(_BucketChunksFn(job.config.chunk_bytes, job.config.inputs[0]))
                .with_outputs(STATS, main="chunks")
            )
            chunks, read_stats = read.chunks, read[STATS]
        if job.config.dedup_enabled:  # before tokenizing and epochs (pipeline/beam/dedup/stage.py)
            chunks, read_stats = apply_dedup(job, chunks, read_stats, self._workspace)
        return output_format(job.config).build(pvalue.pipeline, job, chunks, read_stats, self._workspace)


# The output directory's refusals name the command's flags; here they are the config's fields.
_FIELDS = re.compile(r"--(overwrite|output_dir)\b")


def _prepare_output(config: PipelineConfig) -> None:
    """Check and prepare the output directory as the command does, a refusal naming TokenShards' arguments."""
    try:
        output_format(config).prepare(config)
    except FileExistsError as e:
        named = _FIELDS.sub(lambda m: "PipelineConfig(overwrite=True)" if m.group(1) == "overwrite" else "output_dir",
                            str(e))
        raise FileExistsError(f"TokenShards: {named}") from None


def _documents_job(config: PipelineConfig, options: PipelineOptions) -> Job:
    """The Job of documents given as a PCollection: the checks of `prepare` that apply without input files."""
    refuse_credentials([("--output_dir", config.output_dir), ("--tokenizer_model", config.tokenizer_model)])
    config.check_stages_ready()
    model = load_model(config)
    execution = profile_for(options).plan(options, [], "yes", config.tokenizer_threads)
    job = tokenizer_job(config, model, [], execution, eval_files=tuple(expand_eval_files(config)))
    # The documents' name stands for their input file (dead letters, provenance, the manifest).
    return dataclasses.replace(job, input_files=(config.inputs[0],))


def _line_bytes(document) -> tuple[bytes, dict | None]:
    """A document's JSON line, and the document itself when JSON cannot hold one of its values."""
    if isinstance(document, bytes):
        return document.rstrip(b"\n"), None
    if isinstance(document, str):
        return document.rstrip("\n").encode("utf-8", errors="surrogatepass"), None
    if isinstance(document, dict):
        try:
            return orjson.dumps(document), None
        except TypeError:
            return orjson.dumps(document, default=repr), document
    return repr(document).encode("utf-8"), None  # not a document: a dead letter (invalid_json)


def _keyed_line(document, buckets: int):
    data, row = _line_bytes(document)
    digest = hashlib.blake2b(data, digest_size=16).digest()
    return int.from_bytes(digest[:8], "big") % buckets, (digest, data, row)


class _BucketChunksFn(beam.DoFn):
    """(bucket, [(digest, line, row)]) -> the bucket's chunks in hash order; its stats on STATS."""

    def __init__(self, chunk_bytes: int, name: str):
        self._chunk_bytes, self._name = chunk_bytes, name

    def process(self, element):
        bucket, items = element
        first = bucket * BUCKET_LINES  # the line before the bucket's first
        lines, size, k, number, total = [], 0, 0, 0, 0
        for _, data, row in sorted(items, key=lambda item: (item[0], item[1])):
            lines.append(Line(first + number + 1, first + number, data, row=row))
            number += 1
            size += len(data) + 1
            if size >= self._chunk_bytes or len(lines) >= MAX_CHUNK_LINES:
                yield self._chunk(bucket, k, lines)
                total, k, lines, size = total + size, k + 1, [], 0
        if lines:
            yield self._chunk(bucket, k, lines)
            total, k = total + size, k + 1
        yield beam.pvalue.TaggedOutput(STATS, {"inputs": {"00000": {
            "path": self._name, "lines": number, "decompressed_bytes": total, "chunks": k}}})

    def _chunk(self, bucket: int, k: int, lines: list[Line]) -> Chunk:
        if k >= BUCKET_CHUNKS:  # its number would be the next bucket's first
            raise TooManyChunks(f"TokenShards: a bucket of documents fills more than {BUCKET_CHUNKS} chunks "
                                f"of --chunk_mb: pass TokenShards(..., buckets=N) with a larger N")
        return Chunk(0, bucket * BUCKET_CHUNKS + k, self._name, tuple(lines))
