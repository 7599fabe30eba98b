"""hf_classifier: a local Hugging Face sequence classifier scores every document (FineWeb-Edu's shape, or labels).

The model is a directory `AutoModelForSequenceClassification.from_pretrained` loads, with its
tokenizer (nothing is downloaded). Each text is tokenized by the model's own tokenizer with its
truncation (at --hf_max_length, by default the tokenizer's `model_max_length` capped by the
model's positions), as FineWeb-Edu's classifier card does: `tokenizer(text, truncation=True)`.

- A regression head (one output, FineWeb-Edu's): the score is the logit; the int score is
  `int(round(max(0, min(score, 5))))` (Python's rounding, as FineWeb-Edu's code). A document is
  removed (rule `score_below_min`) when --hf_min_score is given and the score is below it, or
  (`int_score_below_min`) when --hf_min_int_score is given and the int score is below it
  (FineWeb-Edu keeps int scores of 3 and more). Kept documents are labelled `hf.int_score`.
- A classification head (several outputs): each label's score is its softmax probability (sigmoid
  for `problem_type` multi_label_classification), and --hf_keep_labels / --hf_remove_labels
  `LABEL:MIN,...` decide as the fastText stage's do (its `decide`: rules `keep_labels_below_min`,
  `remove_label_at_min`). Kept documents are labelled `hf.label` = the top label.

Removal records carry `score` and `threshold` (and `int_score`, or the deciding `label` and every
label's `scores`), rounded to SCORE_DIGITS digits. A chunk's documents are tokenized together,
sorted by token count and run in batches of --hf_batch_size (padding only to the batch's longest),
their verdicts put back in input order. --hf_device cpu (default: the same bytes on every worker)
or cuda; --hf_threads sets torch's CPU threads per worker.
"""

from __future__ import annotations

import dataclasses
import os

from pipeline.core.options import option
from pipeline.stages.base import Doc, DocumentStage, Keep, Remove
from pipeline.stages.fasttext_classifier import check_label_scores, decide, parse_label_scores
from pipeline.stages.ranges import Range, check_ranges

SCORE_DIGITS = 4
# The files a tokenizer is loaded from (fast, WordPiece, BPE, SentencePiece), one of which must be there.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")
SCORE_BELOW, INT_SCORE_BELOW = "score_below_min", "int_score_below_min"


def int_score(score: float) -> int:
    """FineWeb-Edu's int score: the score clamped to [0, 5], rounded (Python's round: halves to even)."""
    return int(round(max(0, min(score, 5))))


# Sizes a worker can hold: a batch of documents, a model's input, torch's threads.
RANGES = {"hf_batch_size": Range(1, 1 << 16, meaning="documents per forward pass: 1 to 65536"),
          "hf_max_length": Range(0, 1 << 20, meaning="tokens: 0 (the tokenizer's limit) to 1048576"),
          "hf_threads": Range(0, 1024, meaning="threads: 0 (torch's default) to 1024")}


@dataclasses.dataclass(frozen=True)
class HfClassifierOptions:
    """--hf_model and what to keep."""

    hf_model: str = option("", metavar="DIR", help="a local AutoModelForSequenceClassification directory with "
                           "its tokenizer (save_pretrained's), at this path on every worker")
    hf_min_score: float | None = option(None, parse=float, metavar="X", shown_default="none",
                                        help="regression head: remove documents scoring below X")
    hf_min_int_score: int | None = option(None, parse=int, metavar="N", shown_default="none",
                                          help="regression head: remove documents whose int score (FineWeb-Edu's, "
                                          "0-5) is below N (FineWeb-Edu: 3)")
    hf_keep_labels: tuple = option((), parse=parse_label_scores, metavar="LABEL:MIN,...",
                                   help="classification head: keep a document only if one of these labels' "
                                   "probability is at least its MIN")
    hf_remove_labels: tuple = option((), parse=parse_label_scores, metavar="LABEL:MIN,...",
                                     help="classification head: remove a document if any of these labels' "
                                     "probability is at least its MIN")
    hf_batch_size: int = option(32, metavar="N", help="documents per forward pass (sorted by length in a chunk)")
    hf_max_length: int = option(0, metavar="TOKENS", shown_default="0: the tokenizer's model_max_length",
                                help="tokens of each document the model sees (the rest is truncated)")
    hf_device: str = option("cpu", choices=("cpu", "cuda"), help="where the model runs")
    hf_threads: int = option(1, metavar="N", help="torch's CPU threads per worker (0: torch's default)")

    def __post_init__(self):
        if self.hf_keep_labels and self.hf_remove_labels:
            raise ValueError("--hf_keep_labels and --hf_remove_labels: give one of them")
        check_ranges(self, RANGES)
        if self.hf_min_score is not None:
            check_ranges(self, {"hf_min_score": Range(meaning="a regression head's score: a finite number")})
        if self.hf_min_int_score is not None:
            check_ranges(self, {"hf_min_int_score": Range(0, 5, meaning="FineWeb-Edu's int score: 0 to 5")})
        check_label_scores(self, ("hf_keep_labels", "hf_remove_labels"))


class HfClassifier(DocumentStage):
    """--filters hf_classifier (the module docstring)."""

    name = "hf_classifier"
    Options = HfClassifierOptions

    def __init__(self, options=None):
        super().__init__(options)
        self._model = self._tokenizer = None

    def __getstate__(self):
        return {**self.__dict__, "_model": None, "_tokenizer": None}  # loaded on the workers (setup)

    def check(self) -> None:
        """The directory a sequence classifier whose head fits the options; transformers installed."""
        opts = self.options
        if not opts.hf_model:
            raise ValueError("--hf_model: give the classifier's directory (its config.json, weights and tokenizer)")
        if not os.path.isfile(os.path.join(opts.hf_model, "config.json")):
            raise ValueError(f"--hf_model {opts.hf_model}: no config.json there (a save_pretrained directory)")
        try:
            from transformers import AutoConfig, AutoTokenizer
        except ImportError as e:
            raise ValueError(f"--filters {self.name} needs transformers and torch: "
                             f"pip install 'pile-pipeline[classifiers]' ({e})") from None
        config = AutoConfig.from_pretrained(opts.hf_model, local_files_only=True)
        # transformers makes an empty tokenizer (every word [UNK]) for a directory without one: refuse it.
        if not any(os.path.isfile(os.path.join(opts.hf_model, name)) for name in TOKENIZER_FILES):
            raise ValueError(f"--hf_model {opts.hf_model}: no tokenizer there ({', '.join(TOKENIZER_FILES)}); "
                             "save the model's tokenizer beside it (tokenizer.save_pretrained)")
        try:
            tokenizer = AutoTokenizer.from_pretrained(opts.hf_model, local_files_only=True)
        except (OSError, ValueError, TypeError) as e:
            raise ValueError(f"--hf_model {opts.hf_model}: its tokenizer does not load ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''})") from None
        if len(tokenizer) <= len(tokenizer.all_special_ids):
            raise ValueError(f"--hf_model {opts.hf_model}: its tokenizer has no vocabulary beyond its special tokens")
        regression = config.num_labels == 1
        if regression and (opts.hf_keep_labels or opts.hf_remove_labels):
            raise ValueError("--hf_keep_labels/--hf_remove_labels: the model has a regression head (one score); "
                             "use --hf_min_score or --hf_min_int_score")
        if not regression:
            if opts.hf_min_score is not None or opts.hf_min_int_score is not None:
                raise ValueError("--hf_min_score/--hf_min_int_score: the model has a classification head; use "
                                 "--hf_keep_labels or --hf_remove_labels")
            names = set(config.id2label.values())
            unknown = [label for label, _ in opts.hf_keep_labels + opts.hf_remove_labels if label not in names]
            if unknown:
                raise ValueError(f"--hf_keep_labels/--hf_remove_labels: the model has no label {', '.join(unknown)} "
                                 f"(its labels: {', '.join(sorted(names))})")
        if opts.hf_device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ValueError("--hf_device cuda: torch sees no GPU here")

    def labels(self) -> dict[str, tuple[str, ...]]:
        """`hf.int_score` (0 to 5) of a regression head, `hf.label` (its labels) of a classification head."""
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(self.options.hf_model, local_files_only=True)
        if config.num_labels == 1:
            return {"hf.int_score": tuple(str(score) for score in range(6))}
        return {"hf.label": tuple(config.id2label[i] for i in range(config.num_labels))}

    def setup(self) -> None:
        """The tokenizer and the model, once per worker (evaluation mode, on --hf_device)."""
        if self._model is not None:
            return
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # its weight-loading bars, once per worker, in the job's log
        opts = self.options
        if opts.hf_threads:
            torch.set_num_threads(opts.hf_threads)
        self._tokenizer = AutoTokenizer.from_pretrained(opts.hf_model, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(opts.hf_model, local_files_only=True)
        self._model = model.to(opts.hf_device).eval()
        positions = getattr(model.config, "max_position_embeddings", None) or 1 << 30
        limit = opts.hf_max_length or min(self._tokenizer.model_max_length, positions)
        self._max_length = min(limit, positions)

    def logits(self, texts: list[str]) -> list[list[float]]:
        """Each text's logits, batched by length (the batches in order of token count, the results in input order)."""
        import torch

        if self._model is None:
            self.setup()
        ids = self._tokenizer(texts, truncation=True, max_length=self._max_length)["input_ids"]
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
        out: list = [None] * len(texts)
        size = self.options.hf_batch_size
        with torch.inference_mode():
            for start in range(0, len(order), size):
                batch = order[start:start + size]
                padded = self._tokenizer.pad({"input_ids": [ids[i] for i in batch]}, return_tensors="pt")
                padded = {k: v.to(self.options.hf_device) for k, v in padded.items()}
                logits = self._model(**padded).logits.float().cpu().tolist()
                for i, row in zip(batch, logits, strict=True):
                    out[i] = row
        return out

    def scores(self, texts: list[str]) -> list[float | dict[str, float]]:
        """A regression head's score of each text, or a classification head's probability of each label."""
        logits = self.logits(texts)
        config = self._model.config
        if config.num_labels == 1:
            return [row[0] for row in logits]
        import torch

        tensor = torch.tensor(logits)
        probs = (tensor.sigmoid() if config.problem_type == "multi_label_classification"
                 else tensor.softmax(-1)).tolist()
        names = [config.id2label[i] for i in range(config.num_labels)]
        return [dict(zip(names, row, strict=True)) for row in probs]

    def apply(self, doc: Doc) -> Remove | Keep:
        """One document's verdict."""
        return self.apply_many([doc])[0]

    def apply_many(self, docs: list[Doc]) -> list[Remove | Keep]:
        """A chunk's documents, in batches by length."""
        return [self._verdict(score) for score in self.scores([doc.text for doc in docs])]

    def _verdict(self, score) -> Remove | Keep:
        opts = self.options
        if isinstance(score, float):
            whole = int_score(score)
            fields = {"score": round(score, SCORE_DIGITS), "int_score": whole}
            if opts.hf_min_score is not None and score < opts.hf_min_score:
                return Remove(SCORE_BELOW, {**fields, "threshold": opts.hf_min_score})
            if opts.hf_min_int_score is not None and whole < opts.hf_min_int_score:
                return Remove(INT_SCORE_BELOW, {**fields, "threshold": opts.hf_min_int_score})
            return Keep(labels={"hf.int_score": whole})
        decided = decide(score, opts.hf_keep_labels, opts.hf_remove_labels)
        if decided is None:
            return Keep(labels={"hf.label": max(score, key=score.get)})
        rule, label, low = decided
        return Remove(rule, {"label": label, "score": round(score[label], SCORE_DIGITS), "threshold": low,
                             "scores": {k: round(v, SCORE_DIGITS) for k, v in score.items()}})
