"""Wire the stages into one Beam pipeline; `build_pipeline(p, job)` is what tests and `run` call."""

from __future__ import annotations

import dataclasses
import logging

import apache_beam as beam
import numpy as np

from pipeline.beam import megatron, transforms
from pipeline.beam.execution import READ_SHARE, READ_SHARE_FAST, Execution, balance, file_sizes, share_files
from pipeline.beam.manifest import shared_entries
from pipeline.beam.progress import Reporter
from pipeline.config.job import PipelineConfig
from pipeline.core.shuffle import ShardPlan
from pipeline.core.stats import sorted_dict
from pipeline.format import framing, records
from pipeline.format import manifest as manifest_lib
from pipeline.io.files import sha256_of
from pipeline.io.frames import Stripe, read_units
from pipeline.io.outputs import commit_output, new_run_id
from pipeline.io.urls import redact_url
from pipeline.tokenize.model import SpecialIds
from pipeline.tokenize.self_check import BackendChoice, choose_backend

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Job:
    """What the driver resolved before building: the config, the expanded inputs, the model facts.

    run_id names the directory this run writes its files into (pipeline/io/outputs.py).
    """

    config: PipelineConfig
    input_files: tuple[str, ...]
    special: SpecialIds
    tokenizer_sha256: str
    backend: BackendChoice
    execution: Execution = Execution()
    run_id: str = ""

    @property
    def token_dtype(self) -> np.dtype:
        """Token dtype of the records."""
        return records.token_dtype_for(self.special.vocab_size)

    @property
    def record_bytes(self) -> int:
        """Framed size of every full record (they all have the same size)."""
        return framing.record_bytes(self.config.seq_len, self.token_dtype, self.config.document_boundaries)


def resolve_job(config: PipelineConfig, input_files: list[str], special: SpecialIds,
                execution: Execution | None = None, run_id: str | None = None,
                backend: BackendChoice | None = None) -> Job:
    """Bundle what the pipeline needs to know up front (including the tokenizer backend check).

    `backend`: the check's result when it was made already for these inputs (`EarlyChoice`).
    """
    if backend is None:
        backend = choose_backend(config.tokenizer_backend, config.tokenizer_model, input_files,
                                 schema=config.schema)
    return Job(config, tuple(input_files), special, sha256_of(config.tokenizer_model), backend,
               execution or Execution(), run_id or new_run_id())


def tokenizer_json(job: Job) -> dict:
    """The manifest's `tokenizer`: the model file, its hash, special ids and policy, the backend."""
    special = job.special
    return {
        "model": job.config.tokenizer_model.rsplit("/", 1)[-1],
        "sha256": job.tokenizer_sha256,
        "vocab_size": special.vocab_size,
        "bos_id": special.bos_id,
        "eos_id": special.eos_id,
        "pad_id": special.pad_id,
        "unk_id": special.unk_id,
        "add_bos": special.add_bos,
        "add_eos": special.add_eos,
        "separator_id": special.separator_id,
        "padding_id": special.padding_id,
        "backend": job.backend.to_json(),
    }


def build_manifest(job: Job, shards: list[dict], stats: dict, dead_letters: list[dict], num_shards: int,
                   provenance: list[dict] | None = None) -> dict:
    """The manifest's content (pure, so tests can check it without Beam)."""
    cfg = job.config
    shards = sorted(shards, key=lambda s: s["path"])
    packing_stats = stats.get("packing", {})
    num_records = sum(s["records"] for s in shards)
    manifest = shared_entries(cfg, job.run_id, stats, dead_letters)
    manifest["totals"].update(
        records=num_records,
        label_tokens=num_records * cfg.seq_len - packing_stats.get("padding_labels", 0),
        bytes=sum(s["bytes"] for s in shards),
    )
    manifest.update({
        "format": manifest_lib.FORMAT,
        "format_version": manifest_lib.FORMAT_VERSION,
        "seq_len": cfg.seq_len,
        "features": records.feature_spec(cfg.seq_len, job.token_dtype, cfg.document_boundaries),
        "tokenizer": tokenizer_json(job),
        "shards": shards,
        "packing": {
            "remainder_policy": cfg.remainder,
            "records_from_chunks": num_records
            - packing_stats.get("records_from_tails", 0)
            - packing_stats.get("padded_records", 0),
            **packing_stats,
        },
        "shuffle": {"method": "feistel permutation of global record index", "seed": cfg.seed,
                    "num_shards": num_shards},
        "config": cfg.to_json(),
        # Only with --provenance, so that the default output stays the same bytes.
        **({"provenance": {"files": sorted(provenance, key=lambda f: f["path"])}} if cfg.provenance else {}),
    })
    return sorted_dict(manifest)


def _reporter(job: Job) -> Reporter:
    return Reporter(job.execution.progress, job.execution.input_bytes)


def _chunks(p: beam.Pipeline, job: Job):
    """Read the inputs into chunks on the workers: (chunks, read stats).

    Fanned out (distributed runners), any worker tokenizes any chunk. On DirectRunner each worker
    reads and tokenizes its own work items, balanced by size (pipeline/beam/execution.py).
    """
    cfg, execution = job.config, job.execution
    files = list(enumerate(job.input_files))  # (file_index, path)
    read_chunks = transforms.ReadChunksFn(cfg.chunk_bytes, cfg.max_line_bytes, cfg.on_corrupt_file,
                                          _reporter(job), dict(execution.snapshots))
    # An indexed input (pipeline/io/frames.py) is read one frame per work item, on any worker.
    frames_of = {i: read_units(path, cfg.chunk_bytes, cfg.max_line_bytes) for i, path in files}
    if execution.fan_out:
        units = [(i, path, unit) for i, path in files for unit in frames_of[i]]
        read_out = p | "ListInputs" >> beam.Create(units) | "ReadChunks" >> beam.ParDo(read_chunks).with_outputs(
            transforms.STATS, main="chunks")
        # A .zst file cannot be split: fan its chunks out so that 30 files do not cap parallelism.
        return read_out.chunks | "FanOut" >> beam.Reshuffle(), read_out[transforms.STATS]
    units, costs = _work_items(job, files, frames_of)
    slot_of = balance(costs, execution.workers)
    by_slot = sorted(zip(slot_of, units, strict=True), key=lambda item: (item[0], item[1][0]))
    read_out = (
        p
        | "ListInputs" >> beam.Create(by_slot, reshuffle=False)
        # One group per worker: DirectRunner hands each worker whole groups.
        | "GroupFilesByWorker" >> beam.GroupByKey()
        | "FilesOfWorker" >> beam.FlatMap(lambda kv: sorted(kv[1], key=lambda unit: unit[:2]))
        | "ReadChunks" >> beam.ParDo(read_chunks).with_outputs(transforms.STATS, main="chunks")
    )
    return read_out.chunks, read_out[transforms.STATS]


def _work_items(job: Job, files: list[tuple[int, str]], frames_of: dict) -> tuple[list[tuple], list[float]]:
    """DirectRunner's work items ((file_index, path, Frame | Stripe | None)) and their estimated costs."""
    sizes = file_sizes([path for _, path in files])
    indexed = {i for i, _ in files if frames_of[i] != [None]}
    read_share = READ_SHARE.get(job.backend.name, READ_SHARE_FAST)
    whole = [j for j, (i, _) in enumerate(files) if i not in indexed]
    stripes = dict.fromkeys(range(len(files)), 1)
    if job.execution.share:
        stripes.update(zip(whole, share_files([sizes[j] for j in whole], job.execution.workers, read_share),
                           strict=True))
    units, costs = [], []
    for j, (i, path) in enumerate(files):
        if i in indexed:
            units += [(i, path, frame) for frame in frames_of[i]]
            costs += [sizes[j] * frame.size / sum(f.size for f in frames_of[i]) for frame in frames_of[i]]
        elif stripes[j] == 1:
            units.append((i, path, None))
            costs.append(sizes[j] * (1 + read_share))
        else:
            units += [(i, path, Stripe(k, stripes[j])) for k in range(stripes[j])]
            costs += [sizes[j] * (read_share + 1 / stripes[j])] * stripes[j]
    shared = {files[j][1]: k for j, k in stripes.items() if k > 1}
    if shared:
        LOG.info("files read in stripes by several workers: %s", ", ".join(
            f"{redact_url(path)} ({k})" for path, k in sorted(shared.items())))
    return units, costs


def build_pipeline(p: beam.Pipeline, job: Job) -> None:
    """Add the whole job to `p`: read -> fan out -> tokenize/pack -> shuffle into shards -> manifest."""
    cfg, spill_dir = job.config, job.execution.spill_dir
    chunks, read_stats = _chunks(p, job)
    if cfg.output_format == "megatron":
        # Megatron's indexed dataset: documents, not packed records (pipeline/beam/megatron.py).
        megatron.build_megatron(p, job, chunks, read_stats, tokenizer_json(job), _reporter(job))
        return
    processed = chunks | "TokenizeAndPack" >> beam.ParDo(
        transforms.ProcessChunkFn(cfg, job.special, job.backend.name, job.execution.encode_threads, spill_dir,
                                  _reporter(job))
    ).with_outputs(transforms.TAILS, transforms.DEAD_LETTERS, transforms.STATS, transforms.COUNTS,
                   transforms.PROVENANCE, main="records")
    file_tails = (
        processed[transforms.TAILS]
        | "GroupTailsByFile" >> beam.GroupByKey()  # ((copy, file), [(chunk, Piece)])
        | "PackTails" >> beam.ParDo(transforms.PackTailsFn(cfg, job.special, spill_dir)).with_outputs(
            transforms.TAILS, transforms.STATS, transforms.COUNTS, transforms.PROVENANCE, main="records"
        )
    )
    final = (
        file_tails[transforms.TAILS]
        | "GroupLastTails" >> beam.GroupByKey()  # (None, [((copy, file), Piece)]): one small group
        | "PackFinal" >> beam.ParDo(transforms.PackFinalFn(cfg, job.special, spill_dir)).with_outputs(
            transforms.STATS, transforms.COUNTS, transforms.PROVENANCE, main="records"
        )
    )
    all_records = (processed.records, file_tails.records, final.records) | "AllRecords" >> beam.Flatten()
    # One global combine for the stats and the record counts (every step of a DirectRunner job runs
    # after the other, ~20 ms each). Record counts come from the producers themselves: counting
    # `all_records` would be one more pass of every record through the driver on DirectRunner. Never
    # empty (every work item read reports its file's stats), so no default value is needed.
    totals = (
        (read_stats, processed[transforms.STATS], file_tails[transforms.STATS], final[transforms.STATS],
         processed[transforms.COUNTS], file_tails[transforms.COUNTS], final[transforms.COUNTS])
        | "AllStats" >> beam.Flatten()
        | "SumStats" >> beam.CombineGlobally(transforms.TotalsFn()).without_defaults()
    )
    stats = totals | "Stats" >> beam.Map(transforms.totals_stats)
    offsets = totals | "IndexSources" >> beam.Map(transforms.totals_offsets)
    # Each step gets only what it needs: the source offsets (~16 bytes per chunk) go to AssignShards,
    # the plan (two numbers) to the writers and the manifest.
    plan = beam.pvalue.AsSingleton(offsets | "PlanShards" >> beam.Map(
        transforms.plan_shards, cfg.shard_bytes, job.record_bytes))
    shards = (
        all_records
        | "AssignShards" >> beam.ParDo(transforms.AssignShardsFn(cfg.seed), beam.pvalue.AsSingleton(offsets), plan)
        | "GroupByShard" >> beam.GroupByKey()  # (shard, [(positions, records)]): references only, with a spill_dir
        | "WriteShards" >> beam.ParDo(transforms.WriteShardFn(cfg, job.record_bytes, job.run_id), plan)
    )
    dead = processed[transforms.DEAD_LETTERS] | "WriteDeadLetters" >> transforms.WriteDeadLetters(cfg, job.run_id)
    provenance = []  # without --provenance: no step (each costs ~20 ms on DirectRunner, even empty)
    if cfg.provenance:
        provenance = beam.pvalue.AsList(
            (processed[transforms.PROVENANCE], file_tails[transforms.PROVENANCE], final[transforms.PROVENANCE])
            | "AllProvenance" >> beam.Flatten()
            # One file per input file, one for the job's last records: (file_index or -1, block)
            | "KeyProvenanceByFile" >> beam.Map(lambda block: (block[0][2] if block[0][0] < 2 else -1, block))
            | "GroupProvenance" >> beam.GroupByKey()
            | "WriteProvenance" >> beam.ParDo(transforms.WriteProvenanceFn(cfg, job.run_id))
        )
    # The manifest is written last: its side inputs exist only once every shard has been written.
    # An output that must not be used (no records, too many dead letters) gets no manifest.
    _ = (
        p
        | "ManifestTrigger" >> beam.Create([None])
        | "WriteManifest"
        >> beam.Map(
            _write_manifest,
            job,
            shards=beam.pvalue.AsList(shards),
            stats=beam.pvalue.AsSingleton(stats),
            dead_letters=beam.pvalue.AsList(dead),
            plan=plan,
            provenance=provenance,
        )
    )


def _write_manifest(_, job: Job, shards, stats, dead_letters, plan: ShardPlan, provenance) -> str:
    manifest = build_manifest(job, list(shards), stats, list(dead_letters), plan.num_shards, list(provenance))
    path = commit_output(job.config.output_dir, manifest, job.config.max_dead_letter_fraction)
    LOG.info("wrote %s: %d shards, %d records", path, len(manifest["shards"]), manifest["totals"]["records"])
    return path
