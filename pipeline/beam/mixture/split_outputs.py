"""A `--split_by` job's outputs: each bucket's manifest, OUT/buckets.json, OUT/mixture.json; the directory; the summary.

`write_outputs` is the job's last step (pipeline/beam/mixture/split_by.py gathers its inputs). In order:

1. The run's record (buckets.json's content) from the run's counts: every document read, kept,
   filtered or removed, the dead letters and removed/ files in OUT/run-<id>/. An output nobody
   should use (no records in any bucket, more dead letters than --max_dead_letter_fraction) is
   refused here, before any manifest is written, as a single output's is.
2. The accounting: for every subset the buckets' kept documents and tokens add up to the run's
   (a document is in exactly one bucket); anything else fails the job.
3. Each bucket's manifest, committed in OUT/<label>=<value>/ as a single output's: its documents'
   counts (a bucket's subsets count only its kept documents: `documents` = `kept`), its packing,
   its shards, the inputs' facts, and `bucket` {label, value, run: "../buckets.json"}. Its
   `dead_letters` are empty and it has no `removed`: those are the run's. A bucket whose documents
   made no record (--remainder drop) gets no manifest; buckets.json still counts it.
4. buckets.json, then mixture.json: the buckets with a manifest, in `buckets.ordered` order, each
   weighted by its label tokens (as the reader's `tokens` preset). Written last: a reader given
   mixture.json finds every bucket complete.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import posixpath

import fsspec

from pipeline.beam.manifest import shared_entries
from pipeline.beam.mixture.directory import entries_to_replace
from pipeline.beam.preflight import Job
from pipeline.beam.tfrecord.output import build_manifest
from pipeline.beam.tfrecord.shards import plan_shards
from pipeline.config.job import PipelineConfig
from pipeline.core.sources import SourceOffsets
from pipeline.core.stats import JobStats, sorted_dict
from pipeline.format import buckets
from pipeline.format import manifest as manifest_lib
from pipeline.format import mixture as mixture_lib
from pipeline.format.summary import reader_lines
from pipeline.io.outputs import RUN_DIR, check_output, commit_output, prepare_output_dir
from pipeline.io.publish import publish_text
from pipeline.io.urls import redact_url

LOG = logging.getLogger(__name__)
MIXTURE_NAME = manifest_lib.MIXTURE_NAME


def mixture_path(output_dir: str) -> str:
    """OUT/mixture.json."""
    return posixpath.join(output_dir.rstrip("/"), MIXTURE_NAME)


def bucket_config(config: PipelineConfig, bucket: str) -> PipelineConfig:
    """The config of a bucket's output: OUT/<label>=<value>, all else the run's.

    A copy, not a new config: its stages were resolved in the driver, and a worker's registry may
    not hold one registered at run time (pipeline/config/stages.py).
    """
    out = copy.copy(config)
    object.__setattr__(out, "output_dir", posixpath.join(config.output_dir.rstrip("/"),
                                                         buckets.directory(config.split_by, bucket)))
    return out


def _run_record(job: Job, run: JobStats, dead_letters: list[dict]) -> dict:
    """buckets.json without its buckets: the run's entries every manifest has, and its split."""
    record = shared_entries(job.config, job.run_id, run, dead_letters)
    record.update({"format": buckets.FORMAT, "format_version": buckets.FORMAT_VERSION,
                   "split_by": job.config.split_by, "config": job.config.to_json()})
    return record


def _accounting(run: JobStats, by_bucket: dict[str, JobStats]) -> None:
    """Every subset's kept documents and tokens: the buckets' sum is the run's (RuntimeError otherwise)."""
    for name, s in run.subsets.items():
        for field in ("kept", "tokens", "tokens_with_epochs"):
            held = sum(getattr(b.subsets[name], field) or 0 for b in by_bucket.values() if name in b.subsets)
            if held != (getattr(s, field) or 0):
                raise RuntimeError(f"--split_by: the buckets hold {held} {field} of subset {name}, the run "
                                   f"{getattr(s, field) or 0}: no mixture was written")


def _bucket_manifest(job: Job, bucket: str, stats: JobStats, run: JobStats, counts: list, shards: list,
                     provenance: list, size: int) -> dict:
    """A bucket's manifest: build_manifest's over its counts, the run's inputs and lines, its `bucket` entry."""
    stats.inputs, stats.lines = run.inputs, run.lines  # the inputs' facts are every bucket's
    plan = plan_shards(SourceOffsets.from_counts([(tuple(s[1:]), n) for s, n in counts]), job.config.shard_bytes,
                       size)
    bucket_job = dataclasses.replace(job, config=bucket_config(job.config, bucket))
    manifest = build_manifest(bucket_job, shards, stats, [], plan.num_shards, provenance)
    manifest.pop("removed", None)  # the run's removals: buckets.json lists them
    manifest["bucket"] = {"label": job.config.split_by, "value": bucket, "run": f"../{buckets.BUCKETS_NAME}"}
    return sorted_dict(manifest)


def write_outputs(written: dict, job: Job, size: int) -> str:
    """The last step: each bucket's manifest, buckets.json, mixture.json (the module docstring); mixture.json's path."""
    cfg = job.config
    ((run, by_bucket, counts),) = written["totals"]
    record = _run_record(job, run, written["dead_letters"])
    per_bucket: dict[str, dict] = {b: {"counts": [], "shards": [], "provenance": []} for b in by_bucket}
    for source, n in counts:
        per_bucket[source[0]]["counts"].append((source, n))
    for key in ("shards", "provenance"):
        for bucket, info in written.get(key, []):
            per_bucket[bucket][key].append(info)
    record["totals"]["records"] = sum(info["records"] for b in per_bucket.values() for info in b["shards"])
    check_output(record, cfg.max_dead_letter_fraction, cfg.output_dir)
    _accounting(run, by_bucket)
    order = buckets.ordered(by_bucket)
    names = buckets.directories(cfg.split_by, order)
    entries, sources = [], []
    for bucket in order:
        stats, parts = by_bucket[bucket], per_bucket[bucket]
        entry = {"value": bucket, "directory": names[bucket],
                 "documents": sum(s.kept for s in stats.subsets.values()),
                 "tokens": sum(s.tokens or 0 for s in stats.subsets.values()), "manifest": None}
        if parts["shards"] and sum(info["records"] for info in parts["shards"]):
            manifest = _bucket_manifest(job, bucket, stats, run, parts["counts"], parts["shards"],
                                        parts["provenance"], size)
            commit_output(posixpath.join(cfg.output_dir.rstrip("/"), names[bucket]), manifest, 1.0)
            entry.update(manifest=f"{names[bucket]}/{manifest_lib.MANIFEST_NAME}",
                         records=manifest["totals"]["records"], label_tokens=manifest["totals"]["label_tokens"])
            sources.append({"name": names[bucket], "manifest": names[bucket],
                            "weight": manifest["totals"]["label_tokens"]})
        entries.append(entry)
    record["buckets"] = entries
    publish_text(buckets.buckets_path(cfg.output_dir), manifest_lib.serialize(sorted_dict(record)))
    mixture = {"format": mixture_lib.FORMAT, "format_version": mixture_lib.FORMAT_VERSION, "sources": sources}
    path = mixture_path(cfg.output_dir)
    publish_text(path, json.dumps(mixture, indent=2, sort_keys=True) + "\n")
    LOG.info("wrote %s: %d buckets of %s", redact_url(path), len(sources), cfg.split_by)
    return path


def prepare(config: PipelineConfig) -> None:
    """Check OUT (locked): empty, or with --overwrite a split output of ours, replaced; anything else refused.

    Ours: mixture.json and buckets.json (removed first: readers stop trusting the old output at
    once), bucket directories (each replaced as a single output is), run directories of the run's
    dead letters and removed/ (replaced as a single output's files are), our temporary names.
    """
    records = (MIXTURE_NAME, buckets.BUCKETS_NAME)
    found = entries_to_replace(config.output_dir, config.overwrite,
                               lambda e: e in records or buckets.is_bucket_dir(e) or bool(RUN_DIR.match(e)),
                               "--split_by job")
    if found is None:
        return
    fs, root, entries = found
    for name in records:
        if name in entries:
            fs.rm_file(posixpath.join(root, name))
    for name in entries:
        if buckets.is_bucket_dir(name):
            prepare_output_dir(posixpath.join(config.output_dir.rstrip("/"), name), True)
            _remove_empty(fs, posixpath.join(root, name))
    prepare_output_dir(config.output_dir, True)  # the run directories: what no manifest lists is a past run's


def _remove_empty(fs, folder: str) -> None:
    """A bucket directory left empty (a local one: an object store has no empty folders)."""
    try:
        if fs.exists(folder) and not fs.ls(folder, detail=False, refresh=True):
            fs.rmdir(folder)
    except OSError:
        pass  # not ours to insist on: the next run writes beside it


def parts(config: PipelineConfig) -> list[str]:
    """The bucket directories in OUT now: each an output of its own, with its run directory.

    Listed, not derived: the values may be found only as the documents are labelled.
    """
    fs, root = fsspec.core.url_to_fs(config.output_dir)
    if not fs.isdir(root):
        return []
    names = (posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False, refresh=True))
    return sorted(name for name in names if buckets.is_bucket_dir(name))


def summary(config: PipelineConfig, seconds: float) -> tuple[dict, str]:
    """mixture.json's content, each bucket's manifest under `outputs`, buckets.json under `buckets`; the lines."""
    path = mixture_path(config.output_dir)
    mixture = mixture_lib.load_mixture(path)  # also checks that the reader accepts it
    outputs = {s.name: manifest_lib.load_manifest(s.manifest) for s in mixture.sources}
    record = buckets.load_buckets(buckets.buckets_path(config.output_dir))
    with fsspec.open(path, "r", encoding="utf-8") as f:
        written = json.load(f)
    kept = record["totals"]["documents_kept"]
    counts = ", ".join(f"{b['value']}: {b['documents']:,}" for b in record["buckets"])
    text = "\n".join([
        mixture_lib.format_mixture(mixture, outputs, redact_url(path)),
        f"--split_by {config.split_by}: {kept:,} documents kept, in {len(record['buckets'])} buckets ({counts}); "
        f"the run's dead letters and removed/: {redact_url(buckets.buckets_path(config.output_dir))}",
        f"{seconds:.1f} s; a bucket's summary: pile-pipeline show {redact_url(config.output_dir).rstrip('/')}/<bucket>",
        *reader_lines(redact_url(path))])
    return {**written, "outputs": outputs, "buckets": record}, text
