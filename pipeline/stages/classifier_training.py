r"""train-classifier's recipe (DCLM's shape): a supervised fastText model of positive vs negative documents.

    positive texts -> "__label__hq <text, \n made ' '>"     negative -> "__label__cc <...>"
    each document held out or not by a seeded hash of (seed, side, its index): the split is the
    same on every run; the training lines shuffled by the same seed; fastText supervised on them
    (word n-grams, dimension, epochs, learning rate), on ONE thread by default: then the model file
    is the same bytes on every run (fastText's threads race on shared weights, so more than one
    thread is not deterministic); the held-out documents scored: precision and recall of the
    positive label at 0.5, and the ROC AUC of its score.

Training is fasttext-new's (a port of fastText's trainer whose files fastText's own C++ reads and
predicts identically; `fasttext` and fasttext-predict, which the stages use, install the same
module name and cannot sit side by side). The model's card (`MODEL.card.json`) records the inputs,
the counts, the settings, the held-out measures, the versions and the file's sha256.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import tempfile
from collections.abc import Iterable, Iterator

from pipeline.core import hashing
from pipeline.core.documents import BadRecord, Schema, parse_document
from pipeline.core.versions import created_by, package_version
from pipeline.io import columnar, inputs

POSITIVE, NEGATIVE = "hq", "cc"


@dataclasses.dataclass(frozen=True)
class FastTextSettings:
    """fastText supervised's settings (its own names in the card)."""

    word_ngrams: int = 2
    dim: int = 100
    epoch: int = 5
    lr: float = 0.1
    min_count: int = 1
    threads: int = 1
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Measures:
    """The held-out split's measures of the positive label (precision and recall at a score of 0.5)."""

    documents: int
    positives: int
    precision: float
    recall: float
    auc: float


def read_texts(patterns: Iterable[str], schema: Schema, max_line_bytes: int, limit: int = 0) -> Iterator[str]:
    """The text of every valid document of the inputs (JSON lines, Parquet, Arrow), in input order.

    Lines that do not validate are skipped (counted by the caller as documents it did not get);
    `limit` > 0 stops after that many texts.
    """
    count = 0
    for path in inputs.expand_inputs(list(patterns)):
        lines = (columnar.iter_lines(path, schema) if columnar.is_columnar(path)
                 else inputs.iter_lines(path, max_line_bytes))
        for line in lines:
            try:
                text = parse_document(line, max_line_bytes, schema).text
            except BadRecord:
                continue
            if text.strip():
                yield text
                count += 1
                if count == limit:
                    return


def fasttext_line(label: str, text: str) -> str:
    """One training line: the label, then the text on one line (every whitespace run one space)."""
    return f"__label__{label} " + " ".join(text.split())


def held_out(seed: int, side: str, index: int, fraction: float) -> bool:
    """Whether a document is in the held-out split: a seeded hash of its side and index, so the same every run."""
    return hashing.unit_interval(seed, "classifier-split", side, index) < fraction


def auc(positive_scores: list[float], negative_scores: list[float]) -> float:
    """ROC AUC: the chance that a positive scores above a negative (ties count half); ranks, O(n log n)."""
    if not positive_scores or not negative_scores:
        return float("nan")
    scored = sorted([(s, 1) for s in positive_scores] + [(s, 0) for s in negative_scores])
    rank_sum, i = 0.0, 0
    while i < len(scored):
        j = i
        while j < len(scored) and scored[j][0] == scored[i][0]:
            j += 1
        mean_rank = (i + 1 + j) / 2  # 1-based ranks i+1..j share their mean
        rank_sum += mean_rank * sum(label for _, label in scored[i:j])
        i = j
    n_pos, n_neg = len(positive_scores), len(negative_scores)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def measure(positive_scores: list[float], negative_scores: list[float]) -> Measures:
    """Precision and recall at 0.5 and the AUC of the positive label's scores."""
    true_pos = sum(s >= 0.5 for s in positive_scores)
    false_pos = sum(s >= 0.5 for s in negative_scores)
    precision = true_pos / (true_pos + false_pos) if true_pos + false_pos else 0.0
    recall = true_pos / len(positive_scores) if positive_scores else 0.0
    return Measures(len(positive_scores) + len(negative_scores), len(positive_scores), round(precision, 6),
                    round(recall, 6), round(auc(positive_scores, negative_scores), 6))


def train(positive: list[str], negative: list[str], model_path: str, settings: FastTextSettings,
          held_out_fraction: float) -> tuple[Measures, dict]:
    """Split, train, save the model at `model_path`, score the held-out split; (measures, counts)."""
    import fasttext_new

    train_lines, test = [], {POSITIVE: [], NEGATIVE: []}
    for label, texts in ((POSITIVE, positive), (NEGATIVE, negative)):
        for i, text in enumerate(texts):
            if held_out(settings.seed, label, i, held_out_fraction):
                test[label].append(text)
            else:
                train_lines.append(fasttext_line(label, text))
    if not train_lines:
        raise ValueError("no training documents left after the held-out split")
    random.Random(settings.seed).shuffle(train_lines)
    directory = os.path.dirname(os.path.abspath(model_path))
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", dir=directory, delete=False) as f:
        f.write("\n".join(train_lines) + "\n")
    try:
        model = fasttext_new.train_supervised(
            input=f.name, wordNgrams=settings.word_ngrams, dim=settings.dim, epoch=settings.epoch, lr=settings.lr,
            minCount=settings.min_count, thread=settings.threads, seed=settings.seed, verbose=0)
    finally:
        os.unlink(f.name)
    partial = model_path + ".partial"
    model.save_model(partial)
    os.replace(partial, model_path)
    scores = {}
    for label, texts in test.items():
        lines = [" ".join(text.split()) for text in texts]
        labels, probs = model.predict(lines, k=-1) if lines else ([], [])
        scores[label] = [dict(zip(ls, ps, strict=True)).get(f"__label__{POSITIVE}", 0.0)
                         for ls, ps in zip(labels, probs, strict=True)]
    counts = {"train": len(train_lines), "held_out": {k: len(v) for k, v in test.items()},
              "positive": len(positive), "negative": len(negative)}
    return measure(scores[POSITIVE], scores[NEGATIVE]), counts


def write_card(model_path: str, arguments: dict, settings: FastTextSettings, counts: dict,
               measures: Measures) -> dict:
    """MODEL.card.json beside the model: what it was trained on, how, how well; returns the card."""
    card = {"model": os.path.basename(model_path), "sha256": _sha256(model_path),
            "kind": "fasttext_supervised", "labels": {"positive": POSITIVE, "negative": NEGATIVE},
            "arguments": arguments, "settings": dataclasses.asdict(settings), "deterministic": settings.threads == 1,
            "documents": counts, "held_out": dataclasses.asdict(measures),
            "created_by": created_by(), "trainer": f"fasttext-new {package_version('fasttext-new')}"}
    path = card_path(model_path)
    with open(path + ".partial", "w", encoding="utf-8") as f:
        json.dump(card, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".partial", path)
    return card


def card_path(model_path: str) -> str:
    """The card's path: the model's without its .bin/.ftz, + .card.json."""
    root, ext = os.path.splitext(model_path)
    return (root if ext in (".bin", ".ftz") else model_path) + ".card.json"


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashing.sha256_stream(f)
