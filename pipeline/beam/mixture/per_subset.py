"""`--output_format tfrecord --per_subset`: one complete TFRecord output per subset, and a mixture.json.

    OUT/mixture.json     the subsets as one mixture for tfdata.make_dataset (pipeline/format/mixture.py)
    OUT/<slug>/          what `--subsets NAME --output_dir OUT/<slug>` (no --epochs) writes there:
                         manifest.json, the run's shards, dead letters, TFDS metadata

One Beam pipeline: the inputs are read once (pipeline/beam/read.py); each selected subset is a branch
of the TFRecord stages (pipeline/beam/tfrecord/output.py) whose config selects that subset alone, under its
own labels (`Subset[Pile-CC]/...`). So each subset's output is the same bytes as its own run, and
as deterministic. `--epochs` are not written as copies: they become the mixture's weights (weight =
the subset's label tokens x its epochs), which a mixture.json edited later, or a `schedule`, changes
at train time without running the job again. A selected subset without documents in the input gets
no output and no source in the mixture. mixture.json is written last, from the subsets' manifests.

Cost: the inputs are read and decompressed once, every branch validates (parses) every line and
tokenizes only its subset's documents. Progress lines come from the first subset's branch: the
input bytes are counted once, the documents and tokens shown are that subset's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import posixpath

import apache_beam as beam
import fsspec

from pipeline.beam.execution import Workspace
from pipeline.beam.graph import gather
from pipeline.beam.mixture.directory import entries_to_replace
from pipeline.beam.preflight import Job
from pipeline.beam.tfrecord import output as tfrecord
from pipeline.config.job import PipelineConfig, per_subset_outputs
from pipeline.format import manifest as manifest_lib
from pipeline.format import mixture as mixture_lib
from pipeline.format.summary import reader_lines
from pipeline.io.outputs import OutputRejectedError, prepare_output_dir
from pipeline.io.publish import publish_text
from pipeline.io.urls import redact_url

LOG = logging.getLogger(__name__)
MIXTURE_NAME = manifest_lib.MIXTURE_NAME


def mixture_path(output_dir: str) -> str:
    """OUT/mixture.json."""
    return posixpath.join(output_dir.rstrip("/"), MIXTURE_NAME)


def subset_config(config: PipelineConfig, name: str, slug: str) -> PipelineConfig:
    """The config of one subset's branch: that subset alone, no epoch copies, into OUT/<slug>."""
    return dataclasses.replace(config, subsets=(name,), exclude_subsets=(), epochs=(), per_subset=False,
                               output_dir=posixpath.join(config.output_dir.rstrip("/"), slug))


class _SubsetOutput(beam.PTransform):
    """The TFRecord stages for one subset, on the read chunks -> (name, its manifest's path or "")."""

    def __init__(self, job: Job, name: str, workspace: Workspace, chunks, read_stats):
        super().__init__()
        self._job, self._name, self._workspace = job, name, workspace
        self._chunks, self._read_stats = chunks, read_stats

    def expand(self, pbegin):
        written = tfrecord.build_output(pbegin.pipeline, self._job, self._chunks, self._read_stats, self._workspace,
                                        skip_empty=True)
        return written | "Name" >> beam.Map(lambda path, name=self._name: (name, path))


def build(p: beam.Pipeline, job: Job, chunks, read_stats, workspace: Workspace) -> None:
    """Add one TFRecord branch per subset to `p`, then the step writing mixture.json from their manifests."""
    cfg = job.config
    written = []
    for i, (name, slug) in enumerate(per_subset_outputs(cfg)):
        branch = dataclasses.replace(job, config=subset_config(cfg, name, slug))
        # Every branch sees every chunk: one reports progress, so that the input is counted once.
        space = dataclasses.replace(workspace, sink=workspace.sink.within(slug),
                                    progress=workspace.progress if i == 0 else None)
        written.append(p | f"Subset[{name}]" >> _SubsetOutput(branch, name, space, chunks, read_stats))
    manifests = tuple(written) | "AllSubsetManifests" >> beam.Flatten()
    _ = gather("Subsets", manifests=manifests) | "WriteMixture" >> beam.Map(_write_mixture, cfg)


def mixture_json(config: PipelineConfig, manifests: dict[str, dict]) -> dict:
    """mixture.json's content from the subsets' manifests (name -> manifest), in the selection's order."""
    sources = []
    for name, slug in per_subset_outputs(config):
        if name in manifests:
            tokens = int(manifests[name]["totals"]["label_tokens"])
            sources.append({"name": name, "manifest": slug, "weight": tokens * config.epochs_of(name)})
    return {"format": mixture_lib.FORMAT, "format_version": mixture_lib.FORMAT_VERSION, "sources": sources}


def _write_mixture(written: dict, config: PipelineConfig) -> str:
    found = {name: manifest_lib.load_manifest(path) for name, path in written["manifests"] if path}
    if not found:
        raise OutputRejectedError("the job wrote no records in any subset: no mixture.json was written")
    text = json.dumps(mixture_json(config, found), indent=2, sort_keys=True) + "\n"
    path = mixture_path(config.output_dir)
    publish_text(path, text)
    LOG.info("wrote %s: %d subsets", path, len(found))
    return path


def prepare(config: PipelineConfig) -> None:
    """Check OUT (locked) and each OUT/<slug> as `prepare_output_dir` does; refuse anything else in OUT.

    With --overwrite, mixture.json goes first (a reader stops trusting the old mixture at once), then
    each subset's output as a single output's would.
    """
    slugs = {slug for _, slug in per_subset_outputs(config)} | {MIXTURE_NAME}
    found = entries_to_replace(config.output_dir, config.overwrite, slugs.__contains__,
                               "subset of this --per_subset job")
    if found is None:
        return
    fs, root, entries = found
    if MIXTURE_NAME in entries:
        fs.rm_file(posixpath.join(root, MIXTURE_NAME))
    for _, slug in per_subset_outputs(config):
        prepare_output_dir(posixpath.join(config.output_dir.rstrip("/"), slug), config.overwrite)


def parts(config: PipelineConfig) -> list[str]:
    """The subsets' directories in OUT: each an output of its own, with its run directory."""
    return [slug for _, slug in per_subset_outputs(config)]


def summary(config: PipelineConfig, seconds: float) -> tuple[dict, str]:
    """mixture.json's content, each subset's manifest under `outputs`, and the lines printed after the run."""
    path = mixture_path(config.output_dir)
    mixture = mixture_lib.load_mixture(path)  # also checks that the reader accepts it
    outputs = {s.name: manifest_lib.load_manifest(s.manifest) for s in mixture.sources}
    with fsspec.open(path, "r", encoding="utf-8") as f:
        written = json.load(f)
    text = "\n".join([mixture_lib.format_mixture(mixture, outputs, redact_url(path)), f"{seconds:.1f} s; a subset's "
                      f"summary: pile-pipeline show {redact_url(config.output_dir).rstrip('/')}/<subset>",
                      *reader_lines(redact_url(path))])
    return {**written, "outputs": outputs}, text
