"""The report's numbers, each with where it comes from: the manifest (an expression over its keys) or removed/.

Every number the page prints is a `Cell`: its value and its source, which the page writes beside it
(`data-m`, `data-r`), so that a test can check each one against the manifest it names. A manifest
expression is a list of `[sign, path]` terms, a path a list of keys where null means every key at
that level (summed) and an integer the item of a list (a --split_by output's buckets):
`[[1, ["totals", "lines"]], [-1, ["dead_letters", "records"]]]`. A count of
records is `{"reason", "rule", "subset", "cut"}` (absent: any), counted over removed/ (used where the
manifest does not count by rule: it counts `rules` and `cut_rules` per subset when the job writes them).

    >>> value({"a": {"x": {"n": 2}, "y": {"n": 3}}, "b": 1}, [[1, ["a", None, "n"]], [-1, ["b"]]])
    4
"""

from __future__ import annotations

import dataclasses

from pipeline.stages.rules import DEDUP_REASONS, EMPTY_TEXT, NOT_SELECTED


@dataclasses.dataclass(frozen=True)
class Cell:
    """A number on the page and its source.

    m: a manifest expression; r: a count of removed/ records; f: documents of two runs by their fates
    (pipeline/inspect/fates.py: {"a": [reason, rule] or None for kept, "b": ...}).
    """

    value: int | float | None
    m: tuple | None = None
    r: dict | None = None
    f: dict | None = None


def _walk(obj, path: list) -> list:
    if not path:
        return [obj]
    head, rest = path[0], path[1:]
    if isinstance(obj, list) and isinstance(head, int) and not isinstance(head, bool):  # buckets.json's list
        return _walk(obj[head], rest) if 0 <= head < len(obj) else []
    if not isinstance(obj, dict):
        return []
    if head is None:
        return [v for key in sorted(obj) for v in _walk(obj[key], rest)]
    return _walk(obj[head], rest) if head in obj else []


def value(manifest: dict, expression) -> int | float:
    """The expression's value: each term's numbers summed (absent keys count 0), signed."""
    total = 0
    for sign, path in expression:
        total += sign * sum(v for v in _walk(manifest, list(path)) if isinstance(v, int | float)
                            and not isinstance(v, bool))
    return total


def m(manifest: dict, *terms) -> Cell:
    """A Cell of a manifest expression: `m(manifest, ["totals", "lines"], (-1, ["dead_letters", "records"]))`."""
    expression = tuple((t[0], tuple(t[1])) if isinstance(t, tuple) else (1, tuple(t)) for t in terms)
    return Cell(value(manifest, expression), m=expression)


def has(manifest: dict, *path) -> bool:
    """Whether the manifest holds this path (every key present)."""
    return bool(_walk(manifest, list(path)))


def stage_order(manifest: dict, also: tuple = ()) -> list[str]:
    """The removal reasons (and `also`'s) in the order the job applies them: --filters' stages, the others, dedup's."""
    removed = manifest.get("removed") or {}
    reasons = set(removed.get("by_reason", {})) | set(also)
    named = [n for n in manifest.get("config", {}).get("filters") or () if n in reasons]
    dedup = [r for r in DEDUP_REASONS if r in reasons]
    return named + sorted(reasons - set(named) - set(dedup)) + dedup


@dataclasses.dataclass(frozen=True)
class FunnelRow:
    """One step of the funnel: documents (and tokens) it removed, and documents left after it."""

    step: str
    documents: Cell
    tokens: Cell | None
    left: Cell


def funnel(manifest: dict, also: tuple = ()) -> list[FunnelRow]:
    """The steps: input lines -> dead letters -> filtered -> each stage -> dedup -> kept (documents, tokens).

    also: reasons of another run shown beside this one (0 here when this run has none of them).
    """
    left_terms: list = [(1, ["totals", "lines"])]
    rows = [FunnelRow("input lines", m(manifest, ["totals", "lines"]), None, m(manifest, *left_terms))]

    def step(name: str, doc_path: list, token_path: list | None):
        left_terms.append((-1, doc_path))
        tokens = m(manifest, token_path) if token_path else None
        rows.append(FunnelRow(name, m(manifest, doc_path), tokens, m(manifest, *left_terms)))

    step("dead letters", ["dead_letters", "records"], None)
    for reason in (NOT_SELECTED, EMPTY_TEXT):
        if has(manifest, "subsets", None, "filtered", reason):
            step(reason, ["subsets", None, "filtered", reason], None)
    for reason in stage_order(manifest, also):
        step(reason, ["removed", "by_reason", reason], ["removed", "tokens_by_reason", reason])
    rows.append(FunnelRow("kept", m(manifest, ["totals", "documents_kept"]), m(manifest, ["subsets", None, "tokens"]),
                          m(manifest, ["totals", "documents_kept"])))
    return rows


SUBSET_COLUMNS = ("documents", "kept", "filtered", "removed", "cut", "tokens", "removed tokens")


def subset_rows(manifest: dict, also: tuple = ()) -> list[tuple[str, list[Cell]]]:
    """Per subset (and `also`'s, 0 here): documents, kept, filtered, removed, cut, kept tokens, removed tokens."""
    out = []
    for name in sorted(set(manifest.get("subsets", {})) | set(also)):
        s = ["subsets", name]
        out.append((name, [m(manifest, [*s, "documents"]), m(manifest, [*s, "kept"]),
                           m(manifest, [*s, "filtered", None]), m(manifest, [*s, "removed", None]),
                           m(manifest, [*s, "cut"]), m(manifest, [*s, "tokens"]),
                           m(manifest, [*s, "removed_tokens", None])]))
    return out


@dataclasses.dataclass(frozen=True)
class RuleRow:
    """A rule's removals (or cuts), in all and per subset."""

    reason: str
    rule: str
    cut: bool
    documents: Cell
    tokens: Cell | None
    by_subset: dict  # subset -> Cell


def rule_keys(manifest: dict, record_counts: dict) -> list[tuple[str, str, bool]]:
    """Every (reason, rule, is a cut) of a run: the manifest's where it counts rules, else removed/'s."""
    removed = manifest.get("removed") or {}
    if "rules" in removed or "cut_rules" in removed:
        return sorted((reason, rule, block == "cut_rules") for block in ("rules", "cut_rules")
                      for reason, rules in removed.get(block, {}).items() for rule in rules)
    cuts = set(removed.get("cut_by_reason", {}))
    return sorted({(reason, rule, reason in cuts) for reason, rule, _ in record_counts})


def rule_rows(manifest: dict, record_counts: dict, keys: list | None = None) -> list[RuleRow]:
    """Every (reason, rule): the manifest's counts where it has them (`rules`, `cut_rules`), else removed/'s.

    record_counts: {(reason, rule, subset): records} from removed/ (pipeline/inspect/scan.py). keys:
    the (reason, rule, cut) to show (`rule_keys`; another run's too, counted 0 here when absent).
    """
    removed = manifest.get("removed") or {}
    keys = rule_keys(manifest, record_counts) if keys is None else keys
    out = []
    if "rules" in removed or "cut_rules" in removed:
        for reason, rule, cut in keys:
            block = "cut_rules" if cut else "rules"
            top = ["removed", block, reason, rule]
            tokens = m(manifest, [*top, "tokens"]) if not cut else None
            subsets = {s: m(manifest, ["subsets", s, block, reason, rule, "documents"])
                       for s in sorted(manifest.get("subsets", {})) if has(manifest, "subsets", s, block, reason, rule)}
            out.append(RuleRow(reason, rule, cut, m(manifest, [*top, "documents"]), tokens, subsets))
        return out
    for reason, rule, cut in keys:
        subsets = {s: Cell(n, r={"reason": reason, "rule": rule, "subset": s})
                   for (r_, u, s), n in sorted(record_counts.items()) if (r_, u) == (reason, rule)}
        total = sum(c.value for c in subsets.values())
        out.append(RuleRow(reason, rule, cut, Cell(total, r={"reason": reason, "rule": rule}), None, subsets))
    return out


def packing_rows(manifest: dict) -> list[tuple[str, Cell]]:
    """The manifest's packing counts (padding, documents cut, records of tails, ...), where it has them."""
    packing = manifest.get("packing") or {}
    return [(key, m(manifest, ["packing", key])) for key in sorted(packing)
            if isinstance(packing[key], int) and not isinstance(packing[key], bool)]


def label_rows(manifest: dict) -> dict[str, list[tuple[str, Cell, Cell]]]:
    """Per label key (language, a classifier's score bucket): each value's kept documents and tokens, all subsets."""
    keys: dict[str, set] = {}
    for s in manifest.get("subsets", {}).values():
        for key, values in (s.get("labels") or {}).items():
            keys.setdefault(key, set()).update(values)
    return {key: [(v, m(manifest, ["subsets", None, "labels", key, v, "documents"]),
                   m(manifest, ["subsets", None, "labels", key, v, "tokens"])) for v in sorted(values)]
            for key, values in sorted(keys.items())}


BUCKET_COLUMNS = ("documents", "tokens", "records", "label tokens")


@dataclasses.dataclass(frozen=True)
class BucketRow:
    """A --split_by bucket of buckets.json: its value, its directory, its counts (records: None without an output)."""

    value: str
    directory: str
    cells: list  # Cells, one per BUCKET_COLUMNS


def bucket_rows(record: dict) -> list[BucketRow]:
    """Each bucket's kept documents and tokens, and its output's records and label tokens (where it has one)."""
    out = []
    for i, bucket in enumerate(record.get("buckets") or []):
        written = bucket.get("manifest") is not None
        cells = [m(record, ["buckets", i, "documents"]), m(record, ["buckets", i, "tokens"])]
        cells += [m(record, ["buckets", i, key]) if written else None for key in ("records", "label_tokens")]
        out.append(BucketRow(bucket["value"], bucket["directory"], cells))
    return out
