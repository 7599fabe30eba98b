"""Run statistics as plain nested dicts of counts, merged by summing (a Beam combine)."""

from __future__ import annotations

from collections.abc import Iterable


def merge_into(total: dict, part: dict) -> dict:
    """Add `part` into `total` recursively: numbers add, dicts merge, other values must agree."""
    for key, value in part.items():
        if isinstance(value, dict):
            merge_into(total.setdefault(key, {}), value)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            total.setdefault(key, value)
        else:
            total[key] = total.get(key, 0) + value
    return total


def merge_stats(parts: Iterable[dict]) -> dict:
    """Sum an iterable of stats dicts (usable as `beam.CombineGlobally(merge_stats)`)."""
    total: dict = {}
    for part in parts:
        merge_into(total, part)
    return total


def sorted_dict(value):
    """Sort dict keys recursively so that the manifest is byte-identical between runs."""
    if isinstance(value, dict):
        return {k: sorted_dict(value[k]) for k in sorted(value)}
    return value
