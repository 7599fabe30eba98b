"""Every registered stage takes time linear in a document's length, on every adversarial shape.

For each stage of the registry (a stage registered later is covered without a change here) and
each shape of tests/adversarial_shapes.py, CPU seconds of one `apply`, spaCy's words from a cold
table (as a worker's first document):

  - at 64,000 characters, at most RATIO times a normal document of the same size (this machine's
    prose, code and mail from the sample corpus) plus SLACK: a quadratic step takes minutes there;
  - from 16,000 to 64,000 characters, at most GROWTH times longer plus SLACK (linear: about 4;
    quadratic: 16).

CPU seconds, not wall seconds, and a bound missed is measured once more before it fails: the test
holds on a loaded machine. A stage that needs options to do anything (a language to keep, a kind
of PII, lists of URLs and words) takes them from OPTIONS; one that cannot be made without arguments,
from MAKE. Each document's line carries the text as its `url` too, for a stage that reads the line.
"""

from __future__ import annotations

import functools
import json
import os
import random
import tempfile
import time

import orjson
import pytest
from adversarial_shapes import SHAPES, shape_text
from sample_corpus import compose_lines

from pipeline.core.documents import Line
from pipeline.stages import registry
from pipeline.stages.base import Doc, Remove
from pipeline.stages.language import LanguageOptions
from pipeline.stages.pii import PiiOptions
from pipeline.stages.rules import SubsetSelection
from pipeline.stages.words import thread_words

pytestmark = pytest.mark.slow

SMALL, SIZE = 16_000, 64_000
RATIO, GROWTH, SLACK = 40, 8, 0.05
OPTIONS = {"language": LanguageOptions(languages=("en",)), "pii": PiiOptions(pii=("email", "ip"))}


@functools.cache
def _models() -> str:
    """A folder with a small fastText model (train-classifier's recipe) and a tiny FineWeb-Edu-like classifier."""
    import classifier_models

    from pipeline.stages import classifier_training as recipe

    folder = tempfile.mkdtemp(prefix="stage_timing_models_")
    texts = [json.loads(line)["text"] for line in compose_lines(random.Random(1), 200)]
    recipe.train(texts[:100], texts[100:], os.path.join(folder, "ft.bin"),
                 recipe.FastTextSettings(dim=8, epoch=2, lr=0.5), 0.1)
    classifier_models.write_fineweb_edu_like(os.path.join(folder, "edu"), texts)
    return folder


def _fasttext():
    from pipeline.stages.fasttext_classifier import FastTextClassifier, FastTextClassifierOptions

    return FastTextClassifier(FastTextClassifierOptions(fasttext_model=os.path.join(_models(), "ft.bin"),
                                                        fasttext_keep_labels=(("hq", 0.5),)))


def _hf():
    from pipeline.stages.hf_classifier import HfClassifier, HfClassifierOptions

    return HfClassifier(HfClassifierOptions(hf_model=os.path.join(_models(), "edu"), hf_min_int_score=3))


def _url_filter():
    from pipeline.stages.url_filter import UrlFilter, UrlFilterOptions

    folder = tempfile.mkdtemp(prefix="stage_timing_lists_")
    lists = {"domains": "example.com\nbad.org\n", "urls": "http://example.com/a\n", "words": "porn\nsex\nxxx\n",
             "subwords": "casino\nbet365\n", "soft": "free\nwin\nprize\n"}
    for name, entries in lists.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(entries)
    return UrlFilter(UrlFilterOptions(**{f"url_{flag}": os.path.join(folder, name) for flag, name in (
        ("blocked_domains", "domains"), ("blocked_urls", "urls"), ("banned_words", "words"),
        ("banned_subwords", "subwords"), ("soft_banned_words", "soft"))}))


MAKE = {SubsetSelection.name: lambda: SubsetSelection({"Pile-CC"}), "fasttext_classifier": _fasttext,
        "hf_classifier": _hf, "url_filter": _url_filter}


def _stage(name: str):
    cls = registry.STAGES[name]
    try:
        stage = MAKE[name]() if name in MAKE else cls(OPTIONS[name]) if name in OPTIONS else cls()
        stage.setup()
    except Exception as e:  # noqa: BLE001 -- named in the failure, with what to do
        pytest.fail(f"stage {name} cannot run with its default options ({type(e).__name__}: {e}): give it what it "
                    "needs (a model, its options) in OPTIONS or MAKE of tests/test_stage_timing.py")
    return stage


@functools.cache
def _normal(size: int) -> str:
    texts = [json.loads(line)["text"] for line in compose_lines(random.Random(0), 100)]
    text = "\n\n".join(texts)
    return (text * (1 + size // len(text)))[:size]


def _doc(text: str) -> Doc:
    """The document, its line holding the text as its URL too (url_filter's shapes are the same)."""
    return Doc(text, "Pile-CC", 0, 1, Line(1, 0, orjson.dumps({"text": text, "url": text})))


def _cpu(stage, text: str) -> float:
    doc = _doc(text)
    thread_words().forget()
    start = time.process_time()
    stage.apply(doc)
    return time.process_time() - start


def _within(stage, text: str, bound: float) -> tuple[bool, float]:
    seconds = _cpu(stage, text)
    if seconds > bound:  # once more: a neighbour's burst, a collection
        seconds = min(seconds, _cpu(stage, text))
    return seconds <= bound, seconds


@pytest.mark.parametrize("name", sorted(registry.STAGES))
def test_every_stage_is_linear_on_every_shape(name):
    stage = _stage(name)
    normal = _normal(SIZE)
    baseline = min(_cpu(stage, normal) for _ in range(3))
    slow = []
    for shape in SHAPES:
        big, small = shape_text(shape, SIZE), shape_text(shape, SMALL)
        ok, seconds = _within(stage, big, RATIO * baseline + SLACK)
        if not ok:
            slow.append(f"{shape}: {seconds:.3f} s against {baseline:.4f} s for a normal document")
            continue
        if seconds <= SLACK:  # within the bound below whatever the smaller text takes
            continue
        small_seconds = min(_cpu(stage, small) for _ in range(2))
        ok, seconds = _within(stage, big, GROWTH * small_seconds + SLACK)
        if not ok:
            slow.append(f"{shape}: {seconds:.3f} s at {SIZE:,} characters, {small_seconds:.3f} s at {SMALL:,}")
    assert not slow, f"{name} is not linear: {slow}"


def test_the_shapes_reach_every_stage_and_their_size():
    assert {"gopher_quality", "gopher_repetition", "c4_quality", "fineweb_quality", "language", "pii"} <= set(
        registry.choices())
    for shape in SHAPES:
        assert 0.9 * SIZE <= len(shape_text(shape, SIZE)) <= 1.1 * SIZE + 16, shape


def test_the_url_filter_is_timed_on_the_shapes_as_urls():
    """url_filter decides on each shape as a URL (never `no_url`), and removes a listed one."""
    stage = _stage("url_filter")
    for shape in SHAPES:
        verdict = stage.apply(_doc(shape_text(shape, SMALL)))
        assert not (isinstance(verdict, Remove) and verdict.rule == "no_url"), shape
    assert stage.apply(_doc("http://www.example.com/" + "a:" * 100)) == Remove("domain", {"domain": "example.com"})
