"""The classifier stages decide as their references do, run for real, side by side, on real text.

- fasttext_classifier vs datatrove 0.10.1's FastTextClassifierFilter (in .venv-datatrove, through
  scripts/bench/datatrove_classifiers.py): the same decisions and every label's score equal (==) on
  the kinds corpus (scripts/bench/real_text_corpus.py, > 2,000 documents of six kinds of this
  machine's text), with a model that `train-classifier` trains in the test (prose vs the rest).
- url_filter vs datatrove's URLFilter: the same decisions and reasons on > 2,500 URLs (this
  machine's documentation's real URLs and crafted hard cases, scripts/datagen/url_cases.py), with
  datatrove's own word lists and a sample of its shipped domain and URL lists.
- hf_classifier vs transformers' own forward pass, one text at a time as FineWeb-Edu's classifier
  card runs it: scores within 1e-4, int scores identical, on a FineWeb-Edu-shaped model made in
  the test (scripts/datagen/classifier_models.py).
In CI (CI=true) a missing datatrove environment is a failure, elsewhere a skip.
"""

from __future__ import annotations

import collections
import glob
import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest
import url_cases

from pipeline.core.documents import Line
from pipeline.stages.base import Doc, Keep, Remove

REPO = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("DATATROVE_VENV", REPO / ".venv-datatrove"))
PYTHON = VENV / "bin" / "python"
SCRIPT = REPO / "scripts" / "bench" / "datatrove_classifiers.py"
CORPUS_BYTES = 6_000_000  # ~2,250 documents of the kinds shape

pytestmark = pytest.mark.slow


def _datatrove_env() -> None:
    if not PYTHON.exists():
        reason = f"datatrove environment not found at {VENV}: build it with `bash scripts/setup_datatrove_env.sh`"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)


def datatrove(kind: str, docs: Path, out: Path, *args: str) -> list:
    """datatrove's decisions (scripts/bench/datatrove_classifiers.py in .venv-datatrove)."""
    _datatrove_env()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HOME": str(out.parent / "hf")}
    subprocess.run([str(PYTHON), str(SCRIPT), kind, str(docs), str(out), *args], check=True, env=env,
                   capture_output=True)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def kinds() -> list[tuple[str, str]]:
    """(kind, text) of the kinds corpus."""
    spec = importlib.util.spec_from_file_location("real_text_corpus", REPO / "scripts/bench/real_text_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    docs = [json.loads(line) for line in module.compose(CORPUS_BYTES, seed=0, shape="kinds")]
    return [(d["meta"]["pile_set_name"], d["text"]) for d in docs]


@pytest.fixture(scope="module")
def fasttext_model(kinds, tmp_path_factory) -> Path:
    """hq (prose) vs cc (every other kind), trained by the command (JSON lines and Parquet inputs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.cli import train_classifier

    root = tmp_path_factory.mktemp("fasttext")
    (root / "pos.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for k, t in kinds if k == "prose"))
    pq.write_table(pa.table({"text": [t for k, t in kinds if k != "prose"]}), root / "neg.parquet")
    card = train_classifier.main(["--positive", str(root / "pos.jsonl"), "--negative", str(root / "neg.parquet"),
                                  "--model", str(root / "hq.bin"), "--epoch", "20", "--lr", "0.5"])
    counts = card["documents"]
    assert (counts["positive"], counts["negative"]) == (sum(k == "prose" for k, _ in kinds),
                                                        sum(k != "prose" for k, _ in kinds))
    assert counts["train"] + sum(counts["held_out"].values()) == len(kinds)
    return root / "hq.bin"


@pytest.mark.parametrize("decision", [("--keep", "hq:0.5", ""), ("--remove", "cc:0.8", " ")],
                         ids=["keep_hq_0.5", "remove_cc_0.8_newline_space"])
def test_fasttext_decisions_and_scores_are_datatroves(decision, kinds, fasttext_model, tmp_path):
    from pipeline.stages.fasttext_classifier import FastTextClassifier, FastTextClassifierOptions

    flag, labels, newline = decision
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": t}) + "\n" for _, t in kinds))
    theirs = datatrove("fasttext", docs, tmp_path / "out.json", "--model", str(fasttext_model), flag, labels,
                       "--newline", newline)
    pairs = tuple((label, float(score)) for label, score in [labels.split(":")])
    which = "fasttext_keep_labels" if flag == "--keep" else "fasttext_remove_labels"
    opts = FastTextClassifierOptions(fasttext_model=str(fasttext_model), fasttext_newline_replacement=newline,
                                     **{which: pairs})
    stage = FastTextClassifier(opts)
    stage.check()
    stage.setup()
    texts = [t for _, t in kinds]
    scores = stage.scores(texts)
    verdicts = stage.apply_many([Doc(t, "s", 0, i + 1) for i, t in enumerate(texts)])
    assert len(texts) >= 2000 and len(theirs) == len(texts)
    for (kept, their_scores), ours, verdict in zip(theirs, scores, verdicts, strict=True):
        assert {f"__label__{k}": v for k, v in ours.items()} == their_scores
        assert isinstance(verdict, Keep) == kept
    removed = sum(isinstance(v, Remove) for v in verdicts)
    assert 0.1 * len(texts) < removed < 0.9 * len(texts), removed  # the threshold cuts the corpus both ways


@pytest.fixture(scope="module")
def url_corpus(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """(the URLs' JSON lines, the lists' folder, the URLs): datatrove's word lists, a sample of its domains."""
    _datatrove_env()
    (assets,) = glob.glob(str(VENV / "lib" / "python3.*" / "site-packages" / "datatrove" / "assets"))
    banned = [w.strip() for w in open(os.path.join(assets, "banned_words.txt")) if w[0] != "#"]
    soft = [w.strip() for w in open(os.path.join(assets, "soft_banned_words.txt")) if w[0] != "#"]
    soft = [w for w in soft if w.isalpha() and w not in banned][:3]
    root = tmp_path_factory.mktemp("urls")
    real = url_cases.real_urls(2500)
    urls = real + url_cases.crafted(banned[0], tuple(soft))
    url_cases.write_lists(str(root / "lists"), real, assets)
    (root / "urls.jsonl").write_text("".join(json.dumps({"text": "x", "meta": {"url": u}}) + "\n" for u in urls))
    (root / "flat.jsonl").write_text("".join(json.dumps({"url": u}) + "\n" for u in urls))
    return root, root / "lists", urls


@pytest.mark.parametrize("threshold", [2, 1])
def test_url_decisions_and_reasons_are_datatroves(threshold, url_corpus, tmp_path):
    from pipeline.stages.url_filter import UrlFilter, UrlFilterOptions

    root, lists, urls = url_corpus
    theirs = datatrove("url", root / "flat.jsonl", tmp_path / "out.json", "--lists", str(lists),
                       "--soft_threshold", str(threshold))
    stage = UrlFilter(UrlFilterOptions(
        url_key="meta.url", url_blocked_domains=str(lists / "domains"), url_blocked_urls=str(lists / "urls"),
        url_banned_words=str(lists / "banned_words.txt"), url_banned_subwords=str(lists / "banned_subwords.txt"),
        url_soft_banned_words=str(lists / "soft_banned_words.txt"), url_soft_word_threshold=threshold))
    stage.check()
    stage.setup()
    rules = collections.Counter()
    for i, (line, (_, reason)) in enumerate(zip((root / "urls.jsonl").read_bytes().splitlines(), theirs,
                                                    strict=True)):
        verdict = stage.apply(Doc("x", "s", 0, i + 1, Line(i + 1, 0, line)))
        ours = None if verdict is None else verdict.rule
        assert ours == reason, urls[i]
        rules[ours] += 1
    assert len(urls) >= 2500
    assert set(rules) == {None, "domain", "subdomain", "url", "hard_blacklisted", "soft_blacklisted",
                          "blacklisted_subword"}, rules


def test_hf_scores_are_transformers_forward_pass(kinds, tmp_path):
    import classifier_models
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from pipeline.stages.hf_classifier import HfClassifier, HfClassifierOptions, int_score

    texts = [t for _, t in kinds][:1200]
    folder = classifier_models.write_fineweb_edu_like(str(tmp_path / "edu"), texts)
    stage = HfClassifier(HfClassifierOptions(hf_model=folder, hf_min_int_score=3, hf_batch_size=16))
    stage.check()
    ours = stage.scores(texts)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    reference = []
    with torch.no_grad():
        for text in texts:  # FineWeb-Edu's card: one text, padding="longest", truncation=True
            inputs = tokenizer(text, return_tensors="pt", padding="longest", truncation=True)
            reference.append(model(**inputs).logits.squeeze(-1).float().numpy().item())
    assert max(abs(a - b) for a, b in zip(ours, reference, strict=True)) <= 1e-4
    assert [int_score(s) for s in ours] == [int_score(s) for s in reference]
    assert len(set(int_score(s) for s in ours)) >= 5  # the head spreads the scores over FineWeb-Edu's range
    assert len(tokenizer) == 2000  # the vocabulary trained in the test, not an empty tokenizer
    assert any(len(tokenizer(t)["input_ids"]) > 512 for t in texts)  # truncation is exercised
    verdicts = stage.apply_many([Doc(t, "s", 0, i + 1) for i, t in enumerate(texts)])
    for score, verdict in zip(ours, verdicts, strict=True):
        assert isinstance(verdict, Remove) == (int_score(score) < 3)
