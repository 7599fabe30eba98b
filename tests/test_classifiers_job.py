"""The URL filter and both classifiers in the whole job: removals listed with their deciding value, the
kept documents' scores counted per subset in the manifest (the histogram), counts that add up, and the
same bytes on one worker and on two worker processes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corpus_helpers import FAST_BEAM, output_digests, run_free, write_lines

from pipeline.cli import run
from pipeline.stages import classifier_training as recipe

pytestmark = pytest.mark.slow

TWO_PROCESSES = ["--runner", "DirectRunner", "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
GOOD = ["the study of science and the method of research in physics", "a careful analysis of data and results"]
SPAM = ["buy cheap now click here for a free offer", "win money casino best discount sale today"]


def _line(text: str, subset: str, url: str | None) -> bytes:
    doc = {"text": text, "meta": {"pile_set_name": subset}}
    if url is not None:
        doc["url"] = url
    return json.dumps(doc).encode()


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict:
    """The corpus (two files), a fastText model, a tiny FineWeb-Edu-shaped model and a banned-words list."""
    import classifier_models

    root = tmp_path_factory.mktemp("classifiers_job")
    for f, subset in enumerate(("Pile-CC", "Github")):
        lines = []
        for i in range(60):
            text = f"{(GOOD if i % 3 else SPAM)[i % 2]} {' '.join(f'w{(i * 13 + k) % 50}' for k in range(i % 40))}"
            url = None if i == 7 else f"https://site{i % 9}.example.org/{'porn' if i % 11 == 0 else 'page'}/{i}"
            lines.append(_line(text, subset, url))
        write_lines(str(root / f"{f}.jsonl.zst"), lines)
    positive = [f"{GOOD[i % 2]} {i}" for i in range(300)]
    negative = [f"{SPAM[i % 2]} {i}" for i in range(300)]
    recipe.train(positive, negative, str(root / "ft.bin"), recipe.FastTextSettings(dim=8, epoch=10, lr=0.5), 0.1)
    texts = positive[:40] + negative[:40]
    edu = classifier_models.write_fineweb_edu_like(str(root / "edu"), texts)
    (root / "banned.txt").write_text("porn\n")
    return {"root": root, "ft": str(root / "ft.bin"), "edu": edu, "banned": str(root / "banned.txt")}


def test_check_refuses_a_model_without_its_tokenizer_or_with_the_wrong_head(setup, tmp_path):
    import shutil

    from pipeline.stages.hf_classifier import HfClassifier, HfClassifierOptions

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(Path(setup["edu"]) / name, bare / name)
    with pytest.raises(ValueError, match="--hf_model .*bare: no tokenizer there"):
        HfClassifier(HfClassifierOptions(hf_model=str(bare))).check()
    with pytest.raises(ValueError, match="regression head"):
        HfClassifier(HfClassifierOptions(hf_model=setup["edu"], hf_keep_labels=(("a", 0.5),))).check()
    with pytest.raises(ValueError, match="no config.json"):
        HfClassifier(HfClassifierOptions(hf_model=str(tmp_path))).check()


def _argv(s: dict, out: Path, model: str, *more: str) -> list[str]:
    return ["--input", str(s["root"] / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model", model,
            "--seq_len", "32", "--chunk_mb", "0.002",
            "--filters", "url_filter,fasttext_classifier,hf_classifier",
            "--url_banned_words", s["banned"], "--fasttext_model", s["ft"], "--fasttext_keep_labels", "hq:0.5",
            "--hf_model", s["edu"], "--hf_min_int_score", "2", "--hf_batch_size", "4", *more]


def _removed(out: Path, manifest: dict) -> list[dict]:
    return [json.loads(line) for entry in manifest["removed"]["files"]
            for line in (out / entry["path"]).read_text().splitlines()]


def test_the_three_stages_in_the_job(setup, tiny_model, tmp_path):
    out = tmp_path / "out"
    manifest = run.main(_argv(setup, out, tiny_model) + TWO_PROCESSES)
    records = _removed(out, manifest)
    by = {}
    for r in records:
        by.setdefault((r["reason"], r["rule"]), []).append(r)
    assert set(by) >= {("url_filter", "hard_blacklisted"), ("url_filter", "no_url"),
                       ("fasttext_classifier", "keep_labels_below_min")}, set(by)
    assert all(r["word"] == "porn" for r in by[("url_filter", "hard_blacklisted")])
    for r in by[("fasttext_classifier", "keep_labels_below_min")]:
        assert r["label"] == "hq" and r["threshold"] == 0.5 and r["score"] < 0.5 and set(r["scores"]) == {"hq", "cc"}
    for r in by.get(("hf_classifier", "int_score_below_min"), []):
        assert r["int_score"] < 2 and r["threshold"] == 2 and isinstance(r["score"], float)
    assert len(by[("url_filter", "no_url")]) == 2  # line 8 of each file
    config = manifest["config"]
    assert config["filters"] == ["url_filter", "fasttext_classifier", "hf_classifier"]
    assert config["fasttext_keep_labels"] == [["hq", 0.5]] and config["hf_min_int_score"] == 2
    for name, s in manifest["subsets"].items():
        assert s["documents"] == 60 and s["kept"] + sum(s["removed"].values()) == 60, name
        histogram = s["labels"]["fasttext.hq"]
        assert sum(v["documents"] for v in histogram.values()) == s["kept"]
        assert all(float(b) >= 0.5 for b in histogram)  # only kept documents, all at hq >= 0.5
        assert sum(v["documents"] for v in s["labels"]["hf.int_score"].values()) == s["kept"]
        assert all(int(k) >= 2 for k in s["labels"]["hf.int_score"])
    again = run.main(_argv(setup, tmp_path / "one", tiny_model) + FAST_BEAM)
    assert output_digests(tmp_path / "one") == output_digests(out) and run_free(again) == run_free(manifest)


def test_train_classifier_from_an_output_kept_against_removed(setup, tiny_model, tmp_path):
    from pipeline.cli import train_classifier

    out = tmp_path / "out"
    manifest = run.main(["--input", str(setup["root"] / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model",
                         tiny_model, "--seq_len", "32", "--filters", "url_filter", "--url_banned_words",
                         setup["banned"], "--subsets", "Pile-CC"] + FAST_BEAM)
    card = train_classifier.main(["--from_output", str(out), "--model", str(tmp_path / "m.bin"), "--dim", "8"])
    kept = sum(s["kept"] for s in manifest["subsets"].values())
    assert card["documents"]["positive"] == kept == manifest["subsets"]["Pile-CC"]["kept"]  # Github not selected
    assert card["documents"]["negative"] == manifest["removed"]["by_reason"]["url_filter"] > 0
    assert card["arguments"]["from_output"] == str(out)
    assert train_classifier.cli(["--from_output", str(out), "--model", str(tmp_path / "n.bin"),
                                 "--removed_reason", "fasttext_classifier"]) == 2  # no document removed so
    assert train_classifier.cli(["--from_output", str(out), "--positive", "x", "--model",
                                 str(tmp_path / "n.bin")]) == 2
