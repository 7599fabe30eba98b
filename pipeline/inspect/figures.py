"""The report's figures: matplotlib drawn to PNG bytes, once, when the page is made.

matplotlib (the `report` extra, which tokenizer-report already uses) renders static images on
the machine that makes the report, so the page needs no script and no network to be viewed: an
interactive library (Plotly, Bokeh, Altair) would put megabytes of JavaScript in the page and run
it. Figures are made with the object API (`Figure`, no pyplot state); every label from the data is
cut short, its control characters made visible and its `$` escaped (a `$` in a subset's name is a
character, never the start of TeX math).

Each function takes one run's data or two (`runs`: [(name, data)], the second drawn dashed or
beside the first) and returns PNG bytes, or None when there is nothing to draw.
"""

from __future__ import annotations

import io
import re

import numpy as np

from pipeline.inspect.text import visible

LABEL_CHARS = 48
MAX_GROUPS = 8  # length distributions: the kept documents and the rules removing most


def _label(text) -> str:
    text = str(text)
    text = text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"
    return visible(text).replace("$", r"\$")


def _leading_number(key) -> float | None:
    """The number a category starts with (a score bucket's lower bound), or None."""
    if isinstance(key, int | float):
        return float(key)
    match = re.match(r"\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?", str(key))
    return float(match.group()) if match else None


def _png(fig) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=96, metadata={"Software": None})
    return out.getvalue()


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def funnel(runs: list[tuple[str, list]]) -> bytes | None:
    """Documents left after each step of the funnel (pipeline/inspect/counts.py `funnel`), per run."""
    steps = list(dict.fromkeys(row.step for _, rows in runs for row in rows))
    fig = _figure(8, 1 + 0.35 * len(steps) * len(runs))
    ax = fig.add_subplot()
    height = 0.8 / len(runs)
    for k, (name, rows) in enumerate(runs):
        left = {row.step: row.left.value for row in rows}
        y = np.arange(len(steps)) + k * height
        ax.barh(y, [left.get(s, 0) for s in steps], height=height, label=_label(name))
    ax.set_yticks(np.arange(len(steps)) + height * (len(runs) - 1) / 2, [_label(s) for s in steps])
    ax.invert_yaxis()
    ax.set_xlabel("documents left after the step")
    if len(runs) > 1:
        ax.legend()
    return _png(fig)


def subsets(runs: list[tuple[str, dict]]) -> bytes | None:
    """Per subset: documents kept, removed by each reason, filtered; one panel per run."""
    names = sorted({s for _, manifest in runs for s in manifest.get("subsets", {})})
    if not names:
        return None
    fig = _figure(6 * len(runs) + 2, 2.2 + 0.3 * len(names))
    axes = fig.subplots(1, len(runs), sharey=True, squeeze=False)[0]
    for ax, (name, manifest) in zip(axes, runs, strict=True):
        table = manifest.get("subsets", {})
        reasons = sorted({r for s in table.values() for r in (s.get("removed") or {})})
        parts = [("kept", [table.get(n, {}).get("kept", 0) for n in names])]
        parts += [(r, [(table.get(n, {}).get("removed") or {}).get(r, 0) for n in names]) for r in reasons]
        parts.append(("filtered", [sum((table.get(n, {}).get("filtered") or {}).values()) for n in names]))
        left = np.zeros(len(names))
        for label, values in parts:
            ax.barh(np.arange(len(names)), values, left=left, label=_label(label))
            left += np.array(values, dtype=float)
        ax.set_title(_label(name))
        ax.set_xlabel("documents")
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4)
    axes[0].set_yticks(np.arange(len(names)), [_label(n) for n in names])
    axes[0].invert_yaxis()
    return _png(fig)


def rules_by_subset(rows: list) -> bytes | None:
    """A heat map: documents each rule removed (or cut) in each subset (counts.py `RuleRow`s)."""
    subsets = sorted({s for row in rows for s in row.by_subset})
    if not rows or not subsets:
        return None
    grid = np.array([[row.by_subset[s].value if s in row.by_subset else 0 for s in subsets] for row in rows], float)
    fig = _figure(max(7.0, 4 + 0.45 * len(subsets)), 2 + 0.3 * len(rows))
    ax = fig.add_subplot()
    image = ax.imshow(np.log10(1 + grid), aspect="auto", cmap="viridis")
    ax.set_xticks(np.arange(len(subsets)), [_label(s) for s in subsets], rotation=60, ha="right")
    labels = [_label(f"{row.reason} / {row.rule or '-'}") for row in rows]
    ax.set_yticks(np.arange(len(rows)), labels)
    fig.colorbar(image, ax=ax, label="log10(1 + documents)")
    return _png(fig)


def lengths(runs: list[tuple[str, dict]], edges: np.ndarray) -> bytes | None:
    """Length distributions (characters, log scale) of kept documents and of each rule's removals."""
    groups: dict = {}
    for _, hist in runs:
        for group, counts in hist.items():
            groups[group] = groups.get(group, 0) + int(counts.sum())
    if not groups:
        return None
    kept = [g for g in groups if g[0] == "kept"]
    chosen = kept + sorted((g for g in groups if g[0] != "kept"), key=lambda g: -groups[g])[:MAX_GROUPS - len(kept)]
    fig = _figure(9, 4.5)
    ax = fig.add_subplot()
    centers = np.sqrt(np.maximum(edges, 0.5) * np.append(edges[1:], edges[-1] * 10 ** 0.1))
    colors = {g: f"C{i}" for i, g in enumerate(chosen)}
    for k, (name, hist) in enumerate(runs):
        for group in chosen:
            counts = hist.get(group)
            if counts is None or counts.sum() == 0:
                continue
            label = "kept" if group[0] == "kept" else f"{group[0]} / {group[1] or '-'}"
            label = f"{label} ({name})" if len(runs) > 1 else label
            ax.step(centers, counts / counts.sum(), where="mid", color=colors[group],
                    linestyle="-" if k == 0 else "--", label=_label(label))
    used = np.flatnonzero(sum(hist[g] for _, hist in runs for g in chosen if g in hist))
    ax.set_xscale("log")
    ax.set_xlim(max(centers[used[0]] / 2, 0.5), centers[used[-1]] * 2)
    ax.set_xlabel("document length, characters (input text)")
    ax.set_ylabel("share of the group's documents")
    ax.legend(fontsize="small")
    return _png(fig)


def values(runs: list[tuple[str, np.ndarray, list]], title: str) -> bytes | None:
    """One rule's deciding values (runs: [(name, values, thresholds)]), each run's thresholds drawn."""
    present = [(n, v, t) for n, v, t in runs if len(v)]
    if not present:
        return None
    every = np.concatenate([v for _, v, _ in present] + [np.array(t, dtype=float) for _, _, t in present])
    low, high = float(every.min()), float(every.max())
    if high - low < 1e-12:  # one value: a narrow window around it
        span = max(abs(low) * 0.05, 0.01)
        low, high = low - span, high + span
    bins = np.linspace(low, high, 41)
    fig = _figure(5, 3)
    ax = fig.add_subplot()
    for k, (name, vals, thresholds) in enumerate(present):
        ax.hist(vals, bins=bins, histtype="step" if k else "stepfilled", alpha=1 if k else 0.6,
                color=f"C{k}", label=_label(name) if len(runs) > 1 else None)
        for t in thresholds:
            ax.axvline(t, color=f"C{k + 2}", linestyle="--" if k else "-",
                       label=_label(f"threshold {t:g}" + (f" ({name})" if len(runs) > 1 else "")))
    ax.set_title(_label(title), fontsize="medium")
    ax.set_ylabel("removed documents")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return _png(fig)


def bars(runs: list[tuple[str, dict]], title: str, xlabel: str, ylabel: str, log: bool = False,
         top: int = 30) -> bytes | None:
    """Bar chart of {category: count} per run (label values, cluster sizes); the `top` largest categories."""
    totals: dict = {}
    for _, counts in runs:
        for key, n in counts.items():
            totals[key] = totals.get(key, 0) + n
    if not totals:
        return None
    numeric = all(isinstance(k, int | float) for k in totals)
    ordered = all(_leading_number(k) is not None for k in totals)  # score buckets ("0.8", "0.8-0.9"): in order
    keys = sorted(totals, key=lambda k: -totals[k])[:top]
    if numeric or ordered:
        keys = sorted(keys, key=lambda k: (_leading_number(k), str(k)))
    fig = _figure(max(5, 0.35 * len(keys) * len(runs) + 2), 3.5)
    ax = fig.add_subplot()
    width = 0.8 / len(runs)
    for k, (name, counts) in enumerate(runs):
        ax.bar(np.arange(len(keys)) + k * width, [counts.get(key, 0) for key in keys], width=width,
               label=_label(name) if len(runs) > 1 else None, log=log)
    ax.set_xticks(np.arange(len(keys)) + width * (len(runs) - 1) / 2, [_label(k) for k in keys],
                  rotation=0 if numeric else 60, ha="center" if numeric else "right")
    ax.set_title(_label(title), fontsize="medium")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if len(runs) > 1:
        ax.legend(fontsize="small")
    return _png(fig)
