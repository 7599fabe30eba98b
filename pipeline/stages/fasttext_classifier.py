r"""fasttext_classifier: a supervised fastText model of the user's scores every document; keep or remove labels.

As datatrove's `FastTextClassifierFilter` on whole documents (its default `filter_mode`): the model
predicts every label (`k=-1`) for the document's text stripped, with each "\n" replaced by
--fasttext_newline_replacement (datatrove's default: nothing). Then, with --fasttext_keep_labels
`L:MIN,...` a document is kept when at least one of those labels scores at least its MIN; with
--fasttext_remove_labels it is removed when any of those scores at least its MIN; with neither,
every document is kept and only scored. A label the model did not return scores -9e9 (never kept).

A removal is listed in removed/ with rule `keep_labels_below_min` or `remove_label_at_min`, the
deciding `label`, its `score` and `threshold`, and every label's score (`scores`), rounded to
SCORE_DIGITS digits. A kept document is labelled `fasttext.<label>` = the lower edge of its score's
bin (--fasttext_score_bins bins of [0, 1]): the manifest counts documents and tokens per subset and
bin, a histogram of the scores of what was kept, and a later split can bucket by them.

The model is any supervised fastText `.bin` or `.ftz` (`train-classifier` makes one); it is read
by fasttext-predict (fastText's own C++ prediction code, as datatrove's `fasttext` package runs it),
loaded once per worker.
"""

from __future__ import annotations

import dataclasses
import os

from pipeline.core.options import option
from pipeline.stages.base import Doc, DocumentStage, Keep, Remove
from pipeline.stages.fasttext_file import read_header
from pipeline.stages.ranges import Range, check_ranges

KEEP_BELOW = "keep_labels_below_min"
REMOVE_AT = "remove_label_at_min"
SCORE_DIGITS = 6  # recorded scores: fastText's are float32, ~7 significant digits
MISSING = -9e9  # datatrove's score of a label the model did not return


def parse_label_scores(value) -> tuple[tuple[str, float], ...]:
    """Parse "hq:0.5,math:0.9" (or a TOML list of such) -> (("hq", 0.5), ("math", 0.9)), in the order given."""
    items = [value] if isinstance(value, str) else list(value)
    pairs = []
    for item in items:
        for part in str(item).split(","):
            if not part.strip():
                continue
            label, sep, score = part.strip().removeprefix("__label__").rpartition(":")
            if not sep or not label:
                raise ValueError(f"{part.strip()!r}: give LABEL:MIN_SCORE (hq:0.5)")
            pairs.append((label, float(score)))
    names = [label for label, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"{','.join(names)}: a label named twice")
    return tuple(pairs)


def parse_replacement(value) -> str:
    r"""The string every "\n" becomes before the model sees the text (no newline in it: fastText reads one line)."""
    text = str(value)
    if "\n" in text:
        raise ValueError("the replacement may not hold a newline (fastText predicts one line)")
    return text


BINS = Range(1, 1000, meaning="histogram bins: 1 to 1000")
PROBABILITY = Range(0, 1, meaning="a label's probability: 0 to 1")


def check_label_scores(options, names: tuple[str, ...]) -> None:
    """Refuse a LABEL:MIN whose MIN is not a probability (no document could reach it, or every one does)."""
    for name in names:
        for label, low in getattr(options, name):
            problem = PROBABILITY.problem(f"--{name} {label}:", low)
            if problem:
                raise ValueError(problem)


def parse_bins(value) -> int:
    """A number of histogram bins in [1, 1000]."""
    bins = int(value)
    if not 1 <= bins <= 1000:
        raise ValueError(f"a number of bins in [1, 1000], got {value}")
    return bins


@dataclasses.dataclass(frozen=True)
class FastTextClassifierOptions:
    """--fasttext_model and what to keep (datatrove's FastTextClassifierFilter's arguments)."""

    fasttext_model: str = option("", metavar="PATH", help="a supervised fastText model file (.bin or .ftz), "
                                 "at this local path on every worker")
    fasttext_keep_labels: tuple = option((), parse=parse_label_scores, metavar="LABEL:MIN,...",
                                         help="keep a document only if one of these labels scores at least its MIN")
    fasttext_remove_labels: tuple = option((), parse=parse_label_scores, metavar="LABEL:MIN,...",
                                           help="remove a document if any of these labels scores at least its MIN")
    fasttext_newline_replacement: str = option("", parse=parse_replacement, metavar="TEXT", shown_default="''",
                                               help="what each newline of the text becomes before the model sees it "
                                               "(datatrove's default: nothing; ' ' keeps the words apart)")
    fasttext_score_bins: int = option(20, parse=parse_bins, metavar="N",
                                      help="bins of [0, 1] of the kept documents' score histogram (the manifest's "
                                      "labels fasttext.<label>)")

    def __post_init__(self):
        if self.fasttext_keep_labels and self.fasttext_remove_labels:
            raise ValueError("--fasttext_keep_labels and --fasttext_remove_labels: give one of them "
                             "(two stages can be chained)")
        check_ranges(self, {"fasttext_score_bins": BINS})
        check_label_scores(self, ("fasttext_keep_labels", "fasttext_remove_labels"))


def score_bin(score: float, bins: int) -> str:
    """The lower edge of a score's bin ("0.85" of 20 bins); a score past 1 (fastText adds 1e-5) is in the last."""
    index = min(max(int(score * bins), 0), bins - 1)
    return f"{index / bins:.{max(2, len(str(bins)))}f}"


def decide(scores: dict[str, float], keep_labels: tuple, remove_labels: tuple) -> tuple[str, str, float] | None:
    """(rule, deciding label, its threshold) of a removal, or None when kept; `scores` by label, no prefix.

    keep labels: removed when none reaches its threshold (the deciding label: the one closest to it);
    remove labels: removed by the first that reaches its threshold, in the order given.
    """
    if keep_labels:
        if any(scores.get(label, MISSING) >= low for label, low in keep_labels):
            return None
        label, low = max(keep_labels, key=lambda pair: scores.get(pair[0], MISSING) - pair[1])
        return KEEP_BELOW, label, low
    for label, low in remove_labels:
        if scores.get(label, MISSING) >= low:
            return REMOVE_AT, label, low
    return None


class FastTextClassifier(DocumentStage):
    """--filters fasttext_classifier (the module docstring)."""

    name = "fasttext_classifier"
    Options = FastTextClassifierOptions

    def __init__(self, options=None):
        super().__init__(options)
        self._model = None
        bins = self.options.fasttext_score_bins
        self._bins = [score_bin((i + 0.5) / bins, bins) for i in range(bins)]  # each bin's name, made once

    def __getstate__(self):
        return {**self.__dict__, "_model": None}  # the model loads on the workers (setup)

    def check(self) -> None:
        """The model a supervised fastText file holding every label named; fasttext-predict installed."""
        opts = self.options
        if not opts.fasttext_model:
            raise ValueError("--fasttext_model: give the supervised fastText model file (.bin or .ftz)")
        if "://" in opts.fasttext_model:
            raise ValueError(f"--fasttext_model {opts.fasttext_model}: a local path (copy the model to every worker)")
        if not os.path.isfile(opts.fasttext_model):
            raise ValueError(f"--fasttext_model {opts.fasttext_model}: no such file")
        try:
            labels = read_header(opts.fasttext_model).labels
        except ValueError as e:
            raise ValueError(f"--fasttext_model: {e}") from None
        for flag, pairs in (("--fasttext_keep_labels", opts.fasttext_keep_labels),
                            ("--fasttext_remove_labels", opts.fasttext_remove_labels)):
            unknown = [label for label, _ in pairs if label not in labels]
            if unknown:
                raise ValueError(f"{flag}: the model has no label {', '.join(unknown)} "
                                 f"(its labels: {', '.join(labels)})")
        try:
            import fasttext  # noqa: F401
        except ImportError as e:
            raise ValueError(f"--filters {self.name} needs fasttext-predict: pip install 'pile-pipeline[filters]' "
                             f"({e})") from None

    def labels(self) -> dict[str, tuple[str, ...]]:
        """`fasttext.<label>` of each of the model's labels, valued by the bins' names (after `check`)."""
        return {f"fasttext.{label}": tuple(self._bins) for label in read_header(self.options.fasttext_model).labels}

    def setup(self) -> None:
        """The model, once per worker."""
        if self._model is None:
            import fasttext

            self._model = fasttext.load_model(self.options.fasttext_model)

    def scores(self, texts: list[str]) -> list[dict[str, float]]:
        """Every label's score (no `__label__` prefix) of each text, as datatrove's filter computes them."""
        if self._model is None:
            self.setup()
        new = self.options.fasttext_newline_replacement
        # fastText's own predict of one line (what the wrapper's predict calls once its "\n" is appended);
        # fasttext-predict's list form returns no probabilities.
        predict = self._model.f.predict
        return [{label[9:] if label.startswith("__label__") else label: p
                 for p, label in predict(text.strip().replace("\n", new) + "\n", -1, 0.0, "strict")}
                for text in texts]

    def apply(self, doc: Doc) -> Remove | Keep:
        """One document's verdict."""
        return self.apply_many([doc])[0]

    def apply_many(self, docs: list[Doc]) -> list[Remove | Keep]:
        """A chunk's documents, scored together."""
        opts, bins, names = self.options, self.options.fasttext_score_bins, self._bins
        keep, remove, last = opts.fasttext_keep_labels, opts.fasttext_remove_labels, len(self._bins) - 1
        keys: dict[str, str] = {}
        out = []
        for scores in self.scores([doc.text for doc in docs]):
            verdict = decide(scores, keep, remove)
            if verdict is None:
                labels = {}
                for label, s in scores.items():
                    key = keys.get(label) or keys.setdefault(label, "fasttext." + label)
                    labels[key] = names[min(max(int(s * bins), 0), last)]  # score_bin's, by table
                out.append(Keep(labels=labels))
                continue
            rule, label, low = verdict
            out.append(Remove(rule, {"label": label, "score": round(scores.get(label, MISSING), SCORE_DIGITS),
                                     "threshold": low,
                                     "scores": {k: round(v, SCORE_DIGITS) for k, v in scores.items()}}))
        return out
