"""The tokenizer sample as a Beam job: read -> key -> keep the smallest keys per stratum -> write.

    (file_index, path) -> ReadChunks    -> Chunk -> FanOut (Reshuffle)
    Chunk              -> KeyDocuments  -> (stratum, SampleDoc) + stats      bad lines counted, skipped
    (stratum, docs)    -> SmallestKeys  -> (stratum, [SampleDoc])            per stratum, bounded memory
    [(stratum, docs)]  -> WriteSample   -> sample.jsonl (key order) + sample_stats.json

The rules (keys, budgets, what is kept) are pipeline/tokenize/sample.py's, the options
pipeline/config/tokenizer.py's; reading is the pipeline's own (`ReadChunksFn`), and so is what a
document must pass to be sampled: the document policy (pipeline/stages/policy.py: validation,
subset selection, the configured stages, which run here on every document and may change its text).
"""

from __future__ import annotations

import json
import logging
import posixpath
import time

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline.beam.options import pipeline_options, runner_object
from pipeline.beam.read import STATS, ReadChunksFn
from pipeline.config.tokenizer import SampleConfig
from pipeline.core.stats import sorted_dict
from pipeline.io import columnar, inputs
from pipeline.io.publish import publish, publish_text
from pipeline.io.urls import refuse_credentials
from pipeline.process.sample import SampleKeys, SampleStats, SampleSubsetStats, merge_sample_stats
from pipeline.tokenize.sample import (
    NATURAL_STRATUM,
    SAMPLE_FILE,
    SAMPLE_STATS_FILE,
    SampleDoc,
    load_sample_stats,
    take_smallest,
)

LOG = logging.getLogger(__name__)
NAMESPACE = "tokenizer_sample"


def _counter(name: str):
    return Metrics.counter(NAMESPACE, name)


class KeyDocumentsFn(beam.DoFn):
    """Chunk -> (stratum, SampleDoc) of each document the policy keeps, the rest counted: process/sample.py's."""

    def __init__(self, config: SampleConfig):
        self._keys = SampleKeys(config)

    def setup(self):
        self._keys.setup()  # the stages' heavy state, once per worker

    def process(self, chunk: inputs.Chunk):
        """Validate, select, apply the stages, cut and key each document of a chunk."""
        keyed = self._keys.process(chunk)
        yield from keyed.docs
        _counter("lines").inc(len(chunk.lines))
        _counter("bad_lines").inc(sum(keyed.stats.dead_letters.values()))
        yield beam.pvalue.TaggedOutput(STATS, keyed.stats)


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
        | "ReadChunks" >> beam.ParDo(ReadChunksFn(config.chunk_bytes, config.max_line_bytes, config.on_corrupt_file,
                                                 schema=config.schema))
        .with_outputs(STATS, main="chunks")
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
        | "SumStats" >> beam.CombineGlobally(merge_sample_stats)
    )
    _ = (
        keyed.docs  # (stratum, SampleDoc)
        | "SmallestKeys" >> beam.CombinePerKey(SmallestKeysFn(config.budgets(), config.is_natural))
        | "GatherStrata" >> beam.combiners.ToList()  # one element: [(stratum, [SampleDoc])]
        | "WriteSample" >> beam.Map(write_sample, config, work_dir, stats=beam.pvalue.AsSingleton(stats))
    )


def draw_sample(config: SampleConfig, work_dir: str, beam_args: list[str]) -> dict:
    """Run the sampler on Beam; returns the sample statistics (WORK_DIR/sample_stats.json)."""
    refuse_credentials([("--input", url) for url in config.inputs] + [("--work_dir", work_dir)])
    input_files = inputs.expand_inputs(list(config.inputs))  # fails fast on a pattern matching nothing
    for path in input_files:  # a Parquet or Arrow input without the columns named: refused here
        if columnar.is_columnar(path):
            columnar.check_columns(path, config.schema)
    config.check_stages_ready()
    options = pipeline_options(beam_args)
    LOG.info("sampling %.1f MB (%s weights) from %d input files", config.sample_bytes / 1e6, config.weights,
             len(input_files))
    start = time.monotonic()
    with beam.Pipeline(runner=runner_object(options), options=options) as p:
        build_sample_pipeline(p, config, input_files, work_dir)
    LOG.info("sample drawn in %.1f s", time.monotonic() - start)
    return load_sample_stats(work_dir)


def write_sample(strata: list, config: SampleConfig, work_dir: str, stats: SampleStats) -> dict:
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


def sample_statistics(config: SampleConfig, stats: SampleStats, sampled: dict[str, dict], sha256: str) -> dict:
    """The sample's description for the card: what was available, targeted and taken per subset."""
    weights = config.normalized_weights()
    budgets = config.budgets()
    available = stats.subsets
    subsets = {}
    for name in sorted(set(available) | set(sampled)):
        seen = available.get(name, SampleSubsetStats())
        took = sampled.get(name, {"documents": 0, "bytes": 0})
        entry = {
            "documents_available": seen.documents,
            "bytes_available": seen.bytes,
            "documents_cut": seen.cut,
            "filtered": dict(seen.filtered),
            "documents": took["documents"],
            "bytes": took["bytes"],
        }
        if weights is not None:
            entry["weight"] = round(weights.get(name, 0.0), 8)
            entry["target_bytes"] = budgets.get(name, 0)
            entry["short"] = entry["bytes"] < entry["target_bytes"]
        subsets[name] = entry
    inputs = stats.inputs
    return sorted_dict({
        "sha256": sha256,
        "documents": sum(s["documents"] for s in sampled.values()),
        "bytes": sum(s["bytes"] for s in sampled.values()),
        "target_bytes": config.sample_bytes,
        "subsets": subsets,
        "dead_letters": dict(stats.dead_letters),
        "lines": stats.lines,
        "damaged_files": [inputs[k]["path"] for k in sorted(inputs) if "damaged" in inputs[k]],
        "config": config.to_json(),
    })
