"""Compare tokenizers of any kind on the Pile's subsets before committing a day of compute to one.

    pile-pipeline tokenizer-report --input 'val.jsonl.zst' --tokenizer_model a.model \
        --tokenizer_model b.model --out report.png [--json report.json]

draws a deterministic sample with the tokenizer trainer's sampler (pipeline/beam/sample.py: the
same inputs, parser and runner flags as the pipeline), with the same byte budget for every subset
(`--sample_mb_per_subset`), then measures for each model and subset:

  tokens/byte   tokens per UTF-8 byte of text (lower is better: fewer tokens for the same text;
                its inverse, bytes/token, is in the JSON). BOS/EOS are not counted.
  byte fallback share of tokens that are byte pieces (<0x..>): text the vocabulary does not cover.
                With Llama-2-style models every newline and tab is a byte piece, so prose with
                many line breaks shows a floor here even when its words are all covered.
  unk           share of tokens that are the unknown id (0 with byte fallback, unless the text
                holds characters that the model's normalizer cannot map).

Two summary rows: "all sampled" (the sample's totals, every subset counted by its sampled bytes)
and "Pile mix" (each subset weighted by its share of the Pile's effective size, raw GiB x paper
epochs, over the subsets present: what one byte of the Pile's training mix costs). It prints a table
and writes a PNG bar chart (and optionally JSON). Use held-out files (val/test) so that a model is
not measured on the text it was trained on; the default seed (1) differs from the trainer's (0).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable

import numpy as np

from pipeline.core.subsets import pile_mix_weights
from pipeline.core.tables import format_table
from pipeline.tokenize.kinds.detect import load_tokenizer

LOG = logging.getLogger("pipeline.tokenizer_report")
ALL_ROW = "all sampled"
MIX_ROW = "Pile mix"
_BATCH_DOCS = 256


@dataclasses.dataclass
class Counts:
    """Raw counts of one (model, subset); rates are derived from them."""

    documents: int = 0
    bytes: int = 0
    tokens: int = 0
    unk: int = 0
    byte_pieces: int = 0

    def add(self, other: Counts) -> None:
        """Add another count in place."""
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def metrics(self) -> dict:
        """Counts plus tokens/byte, bytes/token, unk and byte-fallback rates."""
        return {
            **dataclasses.asdict(self),
            "tokens_per_byte": self.tokens / self.bytes if self.bytes else 0.0,
            "bytes_per_token": self.bytes / self.tokens if self.tokens else 0.0,
            "unk_rate": self.unk / self.tokens if self.tokens else 0.0,
            "byte_fallback_rate": self.byte_pieces / self.tokens if self.tokens else 0.0,
        }


def measure(model_path: str, docs: Iterable[tuple[str, str]]) -> dict[str, Counts]:
    """Count bytes, tokens, unknown and byte pieces per subset for (subset, text) documents.

    Any kind of tokenizer (kinds/detect.py), encoded with its reference: a SentencePiece model's
    byte-fallback pieces are counted (a byte-level vocabulary's tokens are not fallbacks: they count 0).
    """
    tok = load_tokenizer(model_path)
    is_byte = tok.byte_pieces()
    unk_id = tok.unk_id

    def encode(texts):
        ids, offsets = tok.encode(texts)
        return [ids[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]

    counts: dict[str, Counts] = {}

    def flush(batch):
        encoded = encode([text for _, text in batch])
        for (subset, text), ids in zip(batch, encoded, strict=True):
            arr = np.asarray(ids, dtype=np.int64)
            c = counts.setdefault(subset, Counts())
            c.documents += 1
            c.bytes += len(text.encode("utf-8"))
            c.tokens += len(arr)
            c.unk += int(np.count_nonzero(arr == unk_id))
            c.byte_pieces += int(np.count_nonzero(is_byte[arr])) if len(arr) else 0

    batch: list[tuple[str, str]] = []
    for doc in docs:
        batch.append(doc)
        if len(batch) >= _BATCH_DOCS:
            flush(batch)
            batch = []
    if batch:
        flush(batch)
    return counts


def summarize(counts: dict[str, Counts]) -> dict[str, dict]:
    """Per-subset metrics (subsets by name, as a reader looks one up) plus the "all sampled" and "Pile mix" rows."""
    rows = {name: counts[name].metrics() for name in sorted(counts, key=lambda n: (n.casefold(), n))}
    total = Counts()
    for c in counts.values():
        total.add(c)
    rows[ALL_ROW] = total.metrics()
    weights = {name: w for name, w in pile_mix_weights().items() if name in counts and counts[name].bytes}
    norm = sum(weights.values())
    if norm:
        # Per byte of the mix: each subset's per-byte costs weighted by its share of the bytes.
        tokens = sum(w / norm * counts[n].tokens / counts[n].bytes for n, w in weights.items())
        unk = sum(w / norm * counts[n].unk / counts[n].bytes for n, w in weights.items())
        byte_pieces = sum(w / norm * counts[n].byte_pieces / counts[n].bytes for n, w in weights.items())
        rows[MIX_ROW] = {
            "tokens_per_byte": tokens,
            "bytes_per_token": 1 / tokens if tokens else 0.0,
            "unk_rate": unk / tokens if tokens else 0.0,
            "byte_fallback_rate": byte_pieces / tokens if tokens else 0.0,
            "weights": {n: round(w / norm, 6) for n, w in weights.items()},
        }
    return rows


def model_labels(paths: list[str], labels: list[str] | None = None) -> list[str]:
    """Short, distinct names for the models: --label values, else file stems (with folder if needed)."""
    if labels:
        if len(labels) != len(paths):
            raise ValueError(f"--label given {len(labels)} times for {len(paths)} --tokenizer_model")
        names = list(labels)
    else:
        names = [os.path.splitext(os.path.basename(p))[0] for p in paths]
        if len(set(names)) != len(names):
            names = [os.path.join(os.path.basename(os.path.dirname(p)), n) for p, n in zip(paths, names, strict=True)]
    if len(set(names)) != len(names):
        names = [f"{i}:{n}" for i, n in enumerate(names)]
    return names


def results_table(results: dict[str, dict[str, dict]]) -> str:
    """A plain-text table: one row per subset; per model bytes/token, tokens/byte, byte-fallback %, unk %.

    Bytes per token is the usual measure (higher: fewer tokens for the same text); every column is
    named with its model.
    """
    labels = list(results)
    first = results[labels[0]]
    header = ["subset", "docs", "MB"]
    for label in labels:
        header += [f"{label} B/tok", f"{label} tok/B", f"{label} bytefb%", f"{label} unk%"]
    rows = [header]
    for name in first:
        base = first[name]
        row = [name, str(base.get("documents", "")), f"{base['bytes'] / 1e6:.2f}" if "bytes" in base else ""]
        for label in labels:
            m = results[label].get(name)
            if m is None:
                row += ["-", "-", "-", "-"]
                continue
            row += [f"{m['bytes_per_token']:.3f}", f"{m['tokens_per_byte']:.4f}",
                    f"{100 * m['byte_fallback_rate']:.3f}", f"{100 * m['unk_rate']:.3f}"]
        rows.append(row)
    return format_table(rows, rules_before=(len(rows) - (2 if MIX_ROW in first else 1),))


PANELS = (("bytes_per_token", "bytes per token (higher is better)", 1.0, 3.0),
          ("byte_fallback_rate", "byte-fallback pieces, % of tokens", 100.0, 2.0),
          ("unk_rate", "<unk>, % of tokens", 100.0, 1.5))  # (key, title, scale, relative width)


def chart_panels(results: dict[str, dict[str, dict]]) -> list[tuple[str, str, float, float]]:
    """The panels worth drawing: those with a non-zero value for some model and row."""
    return [panel for panel in PANELS
            if any(m.get(panel[0], 0.0) for rows in results.values() for m in rows.values())]


def row_labels(results: dict[str, dict[str, dict]]) -> list[str]:
    """Each row's name with the sample it was measured on (documents, size); the mix row has none."""
    first = results[next(iter(results))]
    labels = []
    for name, m in first.items():
        if "documents" in m:
            size = f"{m['bytes'] / 1e6:.2f} MB" if m["bytes"] >= 100_000 else f"{m['bytes'] / 1e3:.1f} kB"
            labels.append(f"{name}  (n={m['documents']:,}, {size})")
        else:
            labels.append(name)
    return labels


def value_label(key: str, value: float) -> str:
    """The number written at the end of a bar: bytes/token to 2 decimals, percentages to 3."""
    return f" {value:.2f}" if key == "bytes_per_token" else f" {value:.3f}%"


def plot(results: dict[str, dict[str, dict]], out_path: str, title: str) -> dict[str, list[str]]:
    """Grouped horizontal bars per subset, one color per model; returns {panel drawn: its value labels}.

    Panels: bytes/token, byte-fallback % and unk %, each only when some value is non-zero; each bar
    carries its value, each row its sample size (documents, MB).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(results)
    rows = list(results[labels[0]])
    panels = chart_panels(results) or list(PANELS[:1])
    height = 0.8 / len(labels)
    y = np.arange(len(rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 + 5 * len(panels),
                                                      1.2 + 0.34 * len(rows) * max(1, len(labels) / 2)),
                             sharey=True, constrained_layout=True, squeeze=False,
                             gridspec_kw={"width_ratios": [p[3] for p in panels]})
    axes = axes[0]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn: dict[str, list[str]] = {}
    for ax, (key, name, scale, _) in zip(axes, panels, strict=True):
        drawn[key] = []
        for i, label in enumerate(labels):
            values = [scale * results[label].get(r, {}).get(key, 0.0) for r in rows]
            offset = (i - (len(labels) - 1) / 2) * height
            ax.barh(y + offset, values, height=height, label=label, color=colors[i % len(colors)])
            for yy, v in zip(y + offset, values, strict=True):
                drawn[key].append(value_label(key, v))
                ax.text(v, yy, drawn[key][-1], va="center", fontsize=7)
        ax.set_title(name, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        ax.margins(x=0.15)
        ax.set_xlim(left=0)
        if rows[-1] in (ALL_ROW, MIX_ROW):
            ax.axhline(len([r for r in rows if r not in (ALL_ROW, MIX_ROW)]) - 0.5, color="gray", lw=0.8)
    axes[0].set_yticks(y, row_labels(results))
    axes[0].invert_yaxis()
    for tick, row in zip(axes[0].get_yticklabels(), rows, strict=True):
        if row in (ALL_ROW, MIX_ROW):
            tick.set_fontweight("bold")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return drawn
