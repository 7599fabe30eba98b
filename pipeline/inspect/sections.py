"""The report's sections, each from one run's data or two side by side (`Run`s, pipeline/inspect/report.py).

With two runs every count has a column per run and one for the difference (the second minus the
first), and every figure draws both: what changing an option did.
"""

from __future__ import annotations

import json

from pipeline.inspect import counts, figures
from pipeline.inspect.counts import Cell
from pipeline.inspect.page import delta, document, esc, figure, note, number, table, text_cell
from pipeline.inspect.removed import OWN_KEYS
from pipeline.inspect.scan import LENGTH_EDGES
from pipeline.stages import registry

# Recorded options shown in the overview: the stages' own, and these of dedup and the job.
OPTION_PREFIXES = ("filters", "dedup", "minhash_", "decontam", "subsets", "exclude_subsets", "max_line_mb",
                   "split_by")


def _cells(cells: list) -> str:
    """A row's number cells: one per run (and the difference with two)."""
    out = "".join(number(c, k) for k, c in enumerate(cells))
    return out + (delta(cells[0], cells[1]) if len(cells) == 2 else "")


def _number_header(runs, what: str) -> list[str]:
    if len(runs) == 1:
        return [what]
    return [f"{what} ({run.label})" for run in runs] + ["difference"]


def overview(runs) -> tuple[str, str, str]:
    """What each run was: where, who wrote it, its stages and their options (differences marked)."""
    stage_keys = set(registry.option_names())
    keys = sorted({k for run in runs for k in run.output.config
                   if k in stage_keys or k.startswith(OPTION_PREFIXES)})
    rows = []
    for key in keys:
        values = [json.dumps(run.output.config.get(key), ensure_ascii=False, sort_keys=True) for run in runs]
        differs = len(runs) == 2 and values[0] != values[1]
        rows.append(f"<td><code>{esc(key)}</code></td>" + "".join(text_cell(v) for v in values)
                    + ("<td>differs</td>" if differs else "<td></td>" if len(runs) == 2 else ""))
    facts = [("output", [run.output.shown for run in runs]), ("run id", [run.output.manifest.get("run_id", "")
                                                                          for run in runs]),
             ("written by", [run.output.manifest.get("created_by", "") for run in runs]),
             ("inputs read back", [run.inputs_note for run in runs])]
    fact_rows = [f"<td>{esc(name)}</td>" + "".join(text_cell(v) for v in values) for name, values in facts]
    header = [""] + [run.label for run in runs]
    body = table(header, fact_rows)
    body += table(["option"] + [run.label for run in runs] + ([""] if len(runs) == 2 else []), rows,
                  "the options of the stages and of dedup the manifests record")
    return "overview", "The run" + ("s" if len(runs) > 1 else ""), body


def funnel(runs) -> tuple[str, str, str]:
    """The funnel: input -> dead letters -> filtered -> each stage -> dedup -> kept (documents, tokens)."""
    steps = list(dict.fromkeys(row.step for run in runs for row in run.funnel))
    by_step = [{row.step: row for row in run.funnel} for run in runs]
    rows = []
    for step in steps:
        rows.append(text_cell(step) + "".join(_cells([_get(by, step, field) for by in by_step])
                                              for field in ("documents", "tokens", "left")))
    header = (["step"] + _number_header(runs, "documents") + _number_header(runs, "tokens")
              + _number_header(runs, "documents left"))
    body = table(header, rows, "documents each step removed (the first row: every input line; the last: kept) "
                 "and the tokens they would have had")
    body += figure(figures.funnel([(run.label, run.funnel) for run in runs]), "documents left after each step")
    return "funnel", "From input to kept", body


def _get(rows: dict, step: str, field: str):
    row = rows.get(step)
    return getattr(row, field) if row is not None else None


def buckets(runs) -> tuple[str, str, str]:
    """A --split_by run's buckets: each one's kept documents and tokens, its output's records and label tokens."""
    values = list(dict.fromkeys(row.value for run in runs for row in run.buckets or ()))
    by = [{row.value: row for row in run.buckets or ()} for run in runs]
    width = len(counts.BUCKET_COLUMNS)
    rows = []
    for value in values:
        directory = next(b[value].directory for b in by if value in b)
        cells = [(b[value].cells if value in b else [None] * width) for b in by]
        rows.append(text_cell(value) + text_cell(directory)
                    + "".join(_cells([c[i] for c in cells]) for i in range(width)))
    header = ["value", "directory"] + [h for c in counts.BUCKET_COLUMNS for h in _number_header(runs, c)]
    labels = ", ".join(sorted({run.output.manifest.get("split_by", "") for run in runs if run.buckets is not None}))
    body = note(f"--split_by {labels}: every kept document is in the bucket of its value (none: without one), each "
                "bucket an output of its own; the dead letters and removed documents are the run's, in no bucket.")
    body += table(header, rows, "a bucket without records has no output (records and label tokens: —)")
    chart = [(run.label, {row.value: row.cells[0].value for row in run.buckets or ()}) for run in runs]
    body += figure(figures.bars(chart, f"kept documents by bucket of {labels}", labels, "documents"),
                   "kept documents by bucket")
    return "buckets", "Buckets (--split_by)", body


def subsets(runs) -> tuple[str, str, str]:
    """Per subset: documents, kept, filtered, removed, cut, tokens."""
    names = sorted({name for run in runs for name, _ in run.subset_rows})
    tables = [{name: cells for name, cells in run.subset_rows} for run in runs]
    rows = []
    width = len(counts.SUBSET_COLUMNS)
    for name in names:
        rows.append(text_cell(name) + "".join(_cells([(t.get(name) or [None] * width)[i] for t in tables])
                                              for i in range(width)))
    header = ["subset"] + [h for c in counts.SUBSET_COLUMNS for h in _number_header(runs, c)]
    body = table(header, rows)
    body += figure(figures.subsets([(run.label, run.output.manifest) for run in runs]),
                   "documents kept, removed by reason and filtered, per subset")
    return "subsets", "Per subset", body


def rules(runs) -> tuple[str, str, str]:
    """Each rule's removals and cuts, in all and in each subset (which rules fire where)."""
    keys = list(dict.fromkeys((row.reason, row.rule, row.cut) for run in runs for row in run.rules))
    by_key = [{(row.reason, row.rule, row.cut): row for row in run.rules} for run in runs]
    rows = []
    for key in keys:
        row = text_cell(key[0]) + text_cell(key[1] or "—") + text_cell("cut" if key[2] else "removed")
        rows.append(row + "".join(_cells([_get(by, key, field) for by in by_key]) for field in ("documents", "tokens")))
    header = ["reason", "rule", "kind"] + _number_header(runs, "documents") + _number_header(runs, "tokens")
    where = ("the manifest's per-rule counts" if all(run.rules_from_manifest for run in runs)
             else "counted from removed/ (this manifest has no per-rule counts; tokens per rule unknown)")
    body = table(header, rows, where) if rows else note("No document was removed or cut by a rule.")
    subset_names = sorted({s for run in runs for row in run.rules for s in row.by_subset})
    for run in runs:
        if len(runs) > 1:
            body += f"<h3>{esc(run.label)}</h3>"
        grid = [text_cell(f"{row.reason} / {row.rule or '—'}" + (" (cut)" if row.cut else ""))
                + "".join(number(row.by_subset.get(s), runs.index(run)) for s in subset_names) for row in run.rules]
        if grid and len(subset_names) <= 40:
            body += table(["rule"] + subset_names, grid, "documents per subset")
        body += figure(figures.rules_by_subset(run.rules), "documents each rule removed or cut, per subset")
    return "rules", "Rules, and the subsets they fire on", body


def lengths(runs) -> tuple[str, str, str]:
    """Length distributions of kept documents and of each rule's removals."""
    read = [run for run in runs if run.inputs is not None]
    if not read:
        return "lengths", "Document lengths", note("Not drawn: the inputs were not read (" + runs[0].inputs_note + ").")
    png = figures.lengths([(run.label, run.inputs.lengths) for run in read], LENGTH_EDGES)
    body = note("Each group's documents by length of their input text (characters, log scale), as a share of the "
                "group: the kept documents, and those each rule removed.")
    return "lengths", "Document lengths", body + figure(png, "length distributions, kept and removed by rule")


def values(runs) -> tuple[str, str, str]:
    """The deciding values of each rule's removals (numeric fields of the records), thresholds drawn."""
    keys = sorted({key for run in runs for key in run.records.values})
    parts = []
    for reason, rule, field in keys:
        drawn = []
        for run in runs:
            found = run.records.values.get((reason, rule, field))
            thresholds = sorted(t for (r, u, f), c in run.records.thresholds.items()
                                if (r, u) == (reason, rule) and _pairs(f, field, run, reason, rule) for t in c)[:3]
            drawn.append((run.label, found.array() if found else [], thresholds))
        caption = "; ".join(f"{', '.join(f'{t:g}' for t in ts)}" + (f" ({label})" if len(runs) > 1 else "")
                            for label, _, ts in drawn if ts)
        parts.append(figure(figures.values(drawn, f"{reason} / {rule or '-'}: {field}"),
                            f"{field} of the documents {reason} / {rule} removed",
                            f"thresholds drawn: {caption}" if caption else ""))
    if not parts:
        return "values", "Deciding values", note(
            "The removed/ records of this run carry no numeric field besides their own keys (no deciding value "
            "or score was recorded).")
    body = note("Each rule's removed documents by the value their record carries; a line is a threshold the records "
                "carry (a sample of values where a rule removed very many).")
    return "values", "Deciding values", body + '<div class="grid">' + "".join(parts) + "</div>"


def _pairs(threshold: str, field: str, run, reason: str, rule: str) -> bool:
    """Whether a threshold field belongs to a value field: by name, or as the rule's only value."""
    fields = [f for (r, u, f) in run.records.values if (r, u) == (reason, rule)]
    stem = threshold.replace("threshold", "").replace("min_", "").replace("max_", "").strip("_")
    return len(fields) == 1 or stem == field or (stem == "" and field == "value")


def labels(runs) -> tuple[str, str, str]:
    """Kept documents by label (language, a classifier's scores): the manifest's counts."""
    keys = sorted({k for run in runs for k in run.labels})
    if not keys:
        return "labels", "Labels and scores", note("No stage labelled the kept documents (no language or "
                                                   "classifier stage ran).")
    body = ""
    for key in keys:
        values = list(dict.fromkeys(v for run in runs for v, _, _ in run.labels.get(key, [])))
        by = [{v: (d, t) for v, d, t in run.labels.get(key, [])} for run in runs]
        rows = [text_cell(v) + "".join(_cells([b.get(v, (None, None))[i] for b in by]) for i in (0, 1))
                for v in values]
        body += f"<h3>{esc(key)}</h3>" + table([key] + _number_header(runs, "documents")
                                               + _number_header(runs, "tokens"), rows)
        chart = [(run.label, {v: by[k][v][0].value for v in by[k]}) for k, run in enumerate(runs)]
        body += figure(figures.bars(chart, f"kept documents by {key}", key, "documents"), f"kept documents by {key}")
    return "labels", "Labels and scores", body


def dedup(runs) -> tuple[str, str, str]:
    """Dedup's clusters: how many documents each kept document stood for."""
    reasons = sorted({r for run in runs for r in run.records.twins})
    if not reasons:
        return "dedup", "Duplicate clusters", note("No document was removed as a duplicate.")
    body = note("A cluster is a kept document and the documents removed as its duplicates (records naming it as "
                "their twin).")
    for reason in reasons:
        chart = [(run.label, dict(run.records.cluster_sizes(reason))) for run in runs]
        body += figure(figures.bars(chart, f"{reason}: cluster sizes", "documents in the cluster", "clusters",
                                    log=True), f"{reason} cluster sizes")
    return "dedup", "Duplicate clusters", body


def packing(runs) -> tuple[str, str, str]:
    """The manifest's packing counts: padding, documents cut, tails."""
    keys = list(dict.fromkeys(k for run in runs for k, _ in run.packing))
    by = [dict(run.packing) for run in runs]
    rows = [text_cell(k) + _cells([b.get(k) for b in by]) for k in keys]
    if rows:
        body = table(["packing"] + _number_header(runs, "count"), rows)
    elif any(run.buckets is not None for run in runs):
        body = note("A --split_by output records each bucket's packing in that bucket's manifest.")
    else:
        body = note("The output records no packing.")
    return "packing", "Packing", body


def examples(runs, chars: int) -> tuple[str, str, str]:
    """A few removed (and cut) documents of each rule, their text escaped and cut short."""
    body = ""
    for run in runs:
        if len(runs) > 1:
            body += f"<h3>{esc(run.label)}</h3>"
        if run.inputs is None:
            body += note(f"Not shown: the inputs were not read ({run.inputs_note}).")
            continue
        for item in sorted(run.inputs.examples, key=lambda s: (s.record["reason"], s.record.get("rule", ""),
                                                                 s.record["file_index"], s.record["line"])):
            doc, record = item.document, item.record
            fields = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(item.fields.items()))
            head = (f"{'cut' if item.is_cut else 'removed'}: {record['reason']} / {record.get('rule') or '-'}"
                    f" — {record['subset']} — {item.path}:{record['line']}" + (f" — {fields}" if fields else ""))
            body += f"<h4>{esc(head, 400)}</h4>"
            if item.is_cut:
                body += "<p>before</p>" + document(doc.input_text, chars) + "<p>after</p>" + document(doc.text, chars)
            else:
                body += document(doc.text, chars)
    if not body:
        body = note("No document was removed or cut.")
    return "examples", "Removed documents, a few of each rule", body


def _fate(fate) -> str:
    return "kept" if fate is None else " / ".join(filter(None, fate)) if fate[1] else fate[0]


def fates(runs, comparison, chars: int) -> tuple[str, str, str]:
    """Documents removed by one run and not by the other (or by another rule): counts, and a few of each."""
    title = "Documents whose fate changed"
    if comparison.why_not:
        return "fates", title, note(f"Not compared: {comparison.why_not}.")
    found = comparison.fates
    if not found.counts:
        return "fates", title, note("Every document has the same fate in both runs.")
    pairs = sorted(found.counts, key=lambda p: (-found.counts[p], _fate(p[0]), _fate(p[1])))
    rows = [text_cell(_fate(a)) + text_cell(_fate(b)) + number(Cell(found.counts[a, b], f={"a": a, "b": b}))
            for a, b in pairs]
    body = table([f"fate in {runs[0].label}", f"fate in {runs[1].label}", "documents"], rows,
                 "documents removed by a rule in one run and kept, or removed by another rule, in the other")
    texts = runs[0].inputs.texts if runs[0].inputs is not None else {}
    for a, b in pairs:
        for file_index, line, record_a, record_b in found.examples.get((a, b), []):
            path = runs[0].output.inputs[file_index]["path"]
            fields = [f"{run.label}: {_fate(fate)}" + _fields(record) for run, fate, record
                      in ((runs[0], a, record_a), (runs[1], b, record_b))]
            body += f"<h4>{esc(f'{path}:{line} — ' + ' — '.join(fields), 600)}</h4>"
            if (file_index, line) in texts:
                body += document(texts[file_index, line], chars)
    return "fates", title, body


def _fields(record: dict | None) -> str:
    if record is None:
        return ""
    extra = {k: v for k, v in record.items() if k not in OWN_KEYS}
    return (" (" + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(extra.items())) + ")"
            if extra else "")
