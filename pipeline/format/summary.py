"""The end-of-run summary table, from the manifest (so it shows exactly what readers will see)."""

from __future__ import annotations

from pipeline.core.tables import format_table


def format_summary(manifest: dict, seconds: float | None = None) -> str:
    """A plain-text table of per-subset counts, packing and shards."""
    rows = [("subset", "docs", "kept", "filtered", "tokens", "tok x epochs", "text MB")]
    for name, s in manifest["subsets"].items():
        rows.append((
            name,
            str(s.get("documents", 0)),
            str(s.get("kept", 0)),
            str(sum(s.get("filtered", {}).values())),
            str(s.get("tokens", 0)),
            str(s.get("tokens_with_epochs", 0)),
            f"{s.get('text_bytes', 0) / 1e6:.2f}",
        ))
    lines = [format_table(rows)]
    totals, packing, dead = manifest["totals"], manifest["packing"], manifest["dead_letters"]
    lines += [
        "",
        f"records {totals['records']} x {manifest['seq_len'] + 1} tokens in {len(manifest['shards'])} shard(s), "
        f"{totals['bytes'] / 1e6:.1f} MB; label tokens {totals['label_tokens']}",
        f"packing: {packing.get('records_from_tails', 0)} records from joined tails, remainder policy "
        f"{packing['remainder_policy']}: {packing.get('padding_labels', 0)} padding, "
        f"{packing.get('dropped_labels', 0)} dropped label tokens",
        f"dead letters: {dead['records']} {dict(sorted(dead['by_reason'].items()))}",
    ]
    if seconds is not None:
        lines.append(f"time: {seconds:.1f} s")
    return "\n".join(lines)
