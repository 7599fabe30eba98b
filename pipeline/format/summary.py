"""The end-of-run summary, from the manifest (so it shows exactly what readers will see).

Every number in it is a manifest field or a sum of them (tests/test_summary.py checks that they
agree); only the rates divide by the run's wall time. In the subset table a line's document is
kept, filtered (a column per reason) or removed (every removal reason summed): docs is their sum.
"""

from __future__ import annotations

import posixpath

from pipeline.core.tables import format_table
from pipeline.format.manifest import run_dir

NOT_SELECTED = "subset_not_selected"
EMPTY_TEXT = "empty_text"
# Dead letters that mean "this corpus is not in the Pile's layout", and what to pass then.
_LAYOUT_REASONS = {
    "subset_unknown": "--subset_names any",
    "meta_missing": "--subset_key KEY or --default_subset NAME",
    "subset_missing": "--subset_key KEY or --default_subset NAME",
    "text_missing": "--text_key KEY",
}


def _filter_columns(subsets: dict) -> list[tuple[str, str]]:
    """(reason, column title): not selected and empty always, then any other reason seen."""
    others = sorted({r for s in subsets.values() for r in s.get("filtered", {})} - {NOT_SELECTED, EMPTY_TEXT})
    return [(NOT_SELECTED, "not selected"), (EMPTY_TEXT, "empty")] + [(r, r) for r in others]


def subset_rows(manifest: dict) -> list[tuple[str, ...]]:
    """The per-subset table, a header and a total row included (all cells are manifest counts)."""
    subsets = manifest["subsets"]
    columns = _filter_columns(subsets)
    removing = has_removals(manifest)
    # best_fit's own counts (pipeline/core/best_fit.py), only for its outputs.
    packed = [("padding_labels", "padding"), ("documents_cut", "cut")] if _best_fit(manifest) else []
    header = ("subset", "docs", "kept", *(title for _, title in columns), *(["removed"] if removing else []),
              "tokens", "tok x epochs", *(title for _, title in packed), "text MB")
    rows = [header]
    total = [0] * (len(header) - 1)
    for name, s in subsets.items():
        cells = [s.get("documents", 0), s.get("kept", 0), *(s.get("filtered", {}).get(r, 0) for r, _ in columns),
                 *([removed_documents(s)] if removing else []),
                 s.get("tokens", 0), s.get("tokens_with_epochs", 0), *(s.get(key, 0) for key, _ in packed),
                 s.get("text_bytes", 0)]
        total = [a + b for a, b in zip(total, cells, strict=True)]
        rows.append((name, *map(str, cells[:-1]), f"{cells[-1] / 1e6:.2f}"))
    rows.append(("total", *map(str, total[:-1]), f"{total[-1] / 1e6:.2f}"))
    return rows


def has_removals(manifest: dict) -> bool:
    """Whether a stage that removes documents ran (its counts: `removed` in the manifest and its subsets)."""
    return "removed" in manifest or any("removed" in s for s in manifest["subsets"].values())


def removed_documents(subset: dict) -> int:
    """A subset's documents removed for any reason (dedup, decontamination, and any later stage's)."""
    return sum(subset.get("removed", {}).values())


def reader_snippet(output_dir: str) -> str:
    """The lines that read an output (or a mixture.json) in training code."""
    return (f'from pipeline.tfdata import make_dataset\n'
            f'ds = make_dataset("{output_dir}", batch_size=8, dp_rank=0, dp_size=1, seed=0)')


def reader_lines(output_dir: str) -> list[str]:
    """The summary's last lines: how to read the output in training."""
    return ["read it in training:", *(f"  {line}" for line in reader_snippet(output_dir).splitlines())]


def format_summary(manifest: dict, seconds: float | None = None, output_dir: str | None = None) -> str:
    """A plain-text summary: per-subset counts, throughput, records, packing, dead letters, where it all is."""
    subsets = manifest["subsets"]
    rows = subset_rows(manifest)
    lines = [format_table(rows, rules_before=(len(rows) - 1,))]
    totals, dead = manifest["totals"], manifest["dead_letters"]
    tokens = sum(s.get("tokens", 0) for s in subsets.values())
    text_bytes = sum(f.get("decompressed_bytes", 0) for f in manifest.get("inputs", []))
    lines.append("")
    if seconds:
        lines.append(f"tokens: {tokens:,} in {seconds:.1f} s: {tokens / seconds:,.0f} tokens/s, "
                     f"{text_bytes / 1e6 / seconds:.2f} MB/s of input ({text_bytes / 1e6:.2f} MB)")
    else:
        lines.append(f"tokens: {tokens:,} from {text_bytes / 1e6:.2f} MB of input")
    lines += [
        f"records {totals['records']} x {manifest['seq_len'] + 1} tokens in {len(manifest['shards'])} shard(s), "
        f"{totals['bytes'] / 1e6:.1f} MB; label tokens {totals['label_tokens']}",
        _packing_line(manifest),
        f"dead letters: {dead['records']} {dict(sorted(dead['by_reason'].items()))}",
    ]
    if dead["records"] and output_dir:
        # In the directory of the run that wrote the manifest (older outputs: at the top).
        where = posixpath.join(output_dir.rstrip("/"), *([run_dir(manifest["run_id"])] if "run_id" in manifest else []),
                               "dead_letters")
        lines[-1] += f" in {where}/ ({len(dead['files'])} files)"
    lines += cleaning_lines(manifest, output_dir)
    layout = sum(dead["by_reason"].get(reason, 0) for reason in _LAYOUT_REASONS)
    hints = sorted({hint for reason, hint in _LAYOUT_REASONS.items() if dead["by_reason"].get(reason)})
    if hints and layout >= 0.01 * max(totals.get("lines", 0), 1):  # a pattern, not a stray broken line
        lines.append(f"hint: lines not in the expected layout were dead-lettered; see {', '.join(hints)}")
    unseen = _selected_but_unseen(manifest)
    if unseen:
        lines.append(f"note: --subsets names found in no line: {', '.join(map(repr, unseen))}")
    if output_dir:
        lines += [f"output: {output_dir} (manifest.json lists every shard)", *reader_lines(output_dir)]
    return "\n".join(lines)


def _best_fit(manifest: dict) -> bool:
    return manifest.get("packing", {}).get("mode") == "best_fit"


def _packing_line(manifest: dict) -> str:
    packing = manifest["packing"]
    if _best_fit(manifest):
        labels = manifest["totals"]["records"] * manifest["seq_len"]
        padding = packing.get("padding_labels", 0)
        return (f"packing: best_fit, window {packing['window']}: {padding} padding label positions "
                f"({100 * padding / max(labels, 1):.2f}%), {packing.get('documents_cut', 0)} documents cut "
                f"(longer than seq_len)")
    return (f"packing: {packing.get('records_from_tails', 0)} records from joined tails, remainder policy "
            f"{packing['remainder_policy']}: {packing.get('padding_labels', 0)} padding, "
            f"{packing.get('dropped_labels', 0)} dropped label tokens")


def label_lines(manifest: dict) -> list[str]:
    """One line per label a stage counted (the language stage's): documents and tokens written per value.

    A job that tokenized nothing counts no tokens: its lines give documents alone.
    """
    totals: dict[str, dict[str, list[int]]] = {}
    tokenized = True
    for s in manifest["subsets"].values():
        for key, values in s.get("labels", {}).items():
            for value, counts in values.items():
                total = totals.setdefault(key, {}).setdefault(value, [0, 0])
                total[0] += counts["documents"]
                total[1] += counts.get("tokens", 0)
                tokenized = tokenized and "tokens" in counts
    shown = "{value} {d:,} documents {t:,} tokens" if tokenized else "{value} {d:,} documents"
    most = 1 if tokenized else 0  # by tokens, else by documents
    return [f"{key}: " + ", ".join(shown.format(value=value, d=d, t=t)
                                   for value, (d, t) in sorted(values.items(), key=lambda kv: (-kv[1][most], kv[0])))
            for key, values in sorted(totals.items())]


def removed_line(manifest: dict, output_dir: str | None = None) -> str:
    """The summary's line of the documents --dedup / --decontaminate removed (both formats)."""
    removed = manifest["removed"]
    tokens = removed.get("tokens_by_reason")  # absent where the job tokenized nothing
    line = (f"removed: {sum(removed['by_reason'].values())} documents {dict(sorted(removed['by_reason'].items()))}"
            + (f", {sum(tokens.values()):,} tokens {dict(sorted(tokens.items()))}" if tokens is not None else "")
            + (f", {removed['cut']} cut" if removed.get("cut") else ""))
    if removed["records"] and output_dir:
        where = posixpath.join(output_dir.rstrip("/"), run_dir(manifest["run_id"]), "removed")
        line += f" in {where}/ ({len(removed['files'])} files)"
    return line


def cleaning_lines(manifest: dict, output_dir: str | None = None) -> list[str]:
    """What the cleaning did (every format's summary): removals, their rules, the stages' tallies, labels."""
    lines = [removed_line(manifest, output_dir)] if "removed" in manifest else []
    return lines + rule_lines(manifest) + tally_lines(manifest) + label_lines(manifest)


def _summed(manifest: dict, key: str) -> dict:
    """The subsets' `key` ({reason: {rule: counts}}) summed, with each (reason, rule)'s documents by subset."""
    out: dict = {}
    for name, s in manifest["subsets"].items():
        for reason, rules in s.get(key, {}).items():
            for rule, counts in rules.items():
                entry = out.setdefault((reason, rule), {"documents": 0, "tokens": 0, "subsets": {}, "tokenized": True})
                entry["documents"] += counts["documents"]
                entry["tokens"] += counts.get("tokens", 0)
                entry["tokenized"] = entry["tokenized"] and "tokens" in counts
                entry["subsets"][name] = counts["documents"]
    return out


def _by_subset(subsets: dict, shown: int = 3) -> str:
    top = sorted(subsets.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{name} {n:,}" for name, n in top[:shown])
    return text + (f", {len(top) - shown} more" if len(top) > shown else "")


def rule_lines(manifest: dict) -> list[str]:
    """A table of the documents removed (with the tokens they held) and cut, by reason and rule, and by subset."""
    rows = [("removed or cut (reason / rule)", "docs", "tokens", "subsets (most first)")]
    for key in ("rules", "cut_rules"):  # a cut's reason says so (`<stage>_cut`); it removed no tokens
        for (reason, rule), entry in sorted(_summed(manifest, key).items()):
            tokens = f"{entry['tokens']:,}" if key == "rules" and entry["tokenized"] else "-"
            rows.append((f"{reason} / {rule}", f"{entry['documents']:,}", tokens, _by_subset(entry["subsets"])))
    return [format_table(rows)] if len(rows) > 1 else []


def tally_lines(manifest: dict) -> list[str]:
    """One line per stage that tallied (the pii stage's replacements): its counts over every subset."""
    totals: dict[str, dict[str, int]] = {}
    for s in manifest["subsets"].values():
        for stage, counts in s.get("tallies", {}).items():
            for key, n in counts.items():
                totals.setdefault(stage, {})[key] = totals.get(stage, {}).get(key, 0) + n
    return [f"{stage}: " + ", ".join(f"{key} {n:,}" for key, n in sorted(counts.items()))
            for stage, counts in sorted(totals.items())]


def _selected_but_unseen(manifest: dict) -> list[str]:
    # With any subset names a misspelled name selects nothing and raises no error: say so here.
    config = manifest.get("config", {})
    if config.get("subset_names") != "any":
        return []
    return [name for name in config.get("subsets", []) if name != "*" and name not in manifest["subsets"]]
