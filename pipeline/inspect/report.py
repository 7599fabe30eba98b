"""`pile-pipeline report`: one self-contained HTML page of what a run did, or of two runs side by side.

    output(s) -> manifest (a --split_by output's: buckets.json), removed/'s records (one pass), the inputs
              (one pass each: lengths, examples)
              -> counts with their sources (counts.py), figures (figures.py) -> sections (sections.py)
              -> one page (page.py)

The counts are the manifest's; per-rule counts are the manifest's `rules` / `cut_rules` where the
job wrote them, else counted from removed/. Reading the inputs back (for length distributions and
examples) checks that they are the inputs the run read (pipeline/inspect/readback.py) and can be
left out (`read_inputs=False`) where they are out of reach.
"""

from __future__ import annotations

import dataclasses

from pipeline.inspect import counts, sections
from pipeline.inspect.fates import Fates, fates, same_inputs, wanted_lines
from pipeline.inspect.output import Output
from pipeline.inspect.page import page
from pipeline.inspect.scan import InputStats, RecordStats, read_inputs, read_records


@dataclasses.dataclass
class Run:
    """One output as the report sees it."""

    label: str
    output: Output
    records: RecordStats
    inputs: InputStats | None
    inputs_note: str

    def __post_init__(self):
        self.align([])

    def align(self, others: list[Run]) -> None:
        """Its rows, with every step, subset and rule the `others` have too (counted 0 here where it has none)."""
        manifest = self.output.manifest
        every = [self, *others]
        reasons = tuple(r for run in every for r in counts.stage_order(run.output.manifest))
        self.funnel = counts.funnel(manifest, reasons)
        self.subset_rows = counts.subset_rows(manifest, tuple(s for run in every
                                                               for s in run.output.manifest.get("subsets", {})))
        keys = sorted({k for run in every for k in counts.rule_keys(run.output.manifest, run.records.counts)})
        self.rules = counts.rule_rows(manifest, self.records.counts, keys)
        removed = manifest.get("removed") or {}
        self.rules_from_manifest = "rules" in removed or "cut_rules" in removed
        self.packing = counts.packing_rows(manifest)
        self.buckets = counts.bucket_rows(manifest) if self.output.buckets is not None else None
        self.labels = counts.label_rows(manifest)


def collect(locations: list[str], labels: list[str], examples: int = 3, seed: int = 0,
            inputs: bool = True) -> tuple[list[Run], Comparison | None]:
    """Read one output, or two (with the documents whose fate differs): manifests, records, inputs."""
    outputs = [Output.open(location) for location in locations]
    records = [read_records(output, examples if inputs else 0, seed) for output in outputs]
    comparison = None
    if len(outputs) == 2:
        why = same_inputs(*outputs)
        comparison = Comparison(why, fates(*outputs, examples if inputs else 0, seed) if why is None else None)
    runs = []
    for k, (output, stats, label) in enumerate(zip(outputs, records, labels, strict=True)):
        if not inputs:
            runs.append(Run(label, output, stats, None, "left out: --no_inputs"))
            continue
        texts = wanted_lines(comparison.fates) if k == 0 and comparison and comparison.fates else None
        read = read_inputs(output, stats, texts)
        note = f"yes: {len(output.inputs)} input file(s), unchanged since the run"
        runs.append(Run(label, output, stats, read, note))
    return runs, comparison


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two runs' documents side by side: their fates where the inputs are the same (`why_not` otherwise)."""

    why_not: str | None
    fates: Fates | None


def build(runs: list[Run], chars: int = 2000, comparison: Comparison | None = None) -> str:
    """The page for one run, or two side by side (`comparison`: their documents' fates)."""
    title = ("What the run did: " + runs[0].output.shown if len(runs) == 1
             else f"{runs[0].output.shown} and {runs[1].output.shown}, side by side")
    for run in runs:
        run.align([other for other in runs if other is not run])
    parts = [sections.overview(runs), sections.funnel(runs), sections.subsets(runs), sections.rules(runs),
             sections.lengths(runs), sections.values(runs), sections.labels(runs), sections.dedup(runs),
             sections.packing(runs), sections.examples(runs, chars)]
    if comparison is not None:
        parts.insert(4, sections.fates(runs, comparison, chars))
    if any(run.buckets is not None for run in runs):  # --split_by: the kept documents, bucket by bucket
        parts.insert(2, sections.buckets(runs))
    return page(title, parts)
