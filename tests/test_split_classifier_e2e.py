"""Scores as data, end to end: `train-classifier` -> the fastText stage -> `--split_by` its score's buckets -> a
mixture of the buckets read by `make_dataset`; the same bytes on DirectRunner with one worker and two
processes and on a real dask.distributed cluster (tests/dask_cluster.py).

The text is real (scripts/bench/real_text_corpus.py's kinds: prose, code, man pages, ... of this
machine): the classifier learns prose (hq) against every other kind from half of the documents and
scores the other half, which the job splits into the score's quarters.
"""

import importlib.util
import json
from pathlib import Path

import pytest
from corpus_helpers import FAST_BEAM, output_digests, run_free, write_lines
from dask_cluster import dask_cluster

from pipeline.cli import run, train_classifier
from pipeline.format import buckets
from pipeline.format.manifest import load_manifest
from pipeline.format.mixture import Mixture, load_mixture

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CORPUS_BYTES = 3_000_000
TWO_PROCESSES = ["--runner", "DirectRunner", "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
BINS = ["0.00", "0.25", "0.50", "0.75"]


def _kinds() -> list[dict]:
    spec = importlib.util.spec_from_file_location("real_text_corpus", REPO / "scripts/bench/real_text_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [json.loads(line) for line in module.compose(CORPUS_BYTES, seed=3, shape="kinds")]


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> dict:
    """The classifier trained by the command on the even documents; the odd ones, the job's input (two files)."""
    root = tmp_path_factory.mktemp("scores")
    docs = _kinds()
    train, job = docs[0::2], docs[1::2]
    (root / "pos.jsonl").write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in train
                                            if d["meta"]["pile_set_name"] == "prose"))
    (root / "neg.jsonl").write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in train
                                            if d["meta"]["pile_set_name"] != "prose"))
    card = train_classifier.main(["--positive", str(root / "pos.jsonl"), "--negative", str(root / "neg.jsonl"),
                                  "--model", str(root / "hq.bin"), "--dim", "16", "--epoch", "25", "--lr", "0.5"])
    half = len(job) // 2
    for f, part in enumerate((job[:half], job[half:])):
        write_lines(str(root / "in" / f"{f:02d}.jsonl.zst"), [json.dumps(d).encode() for d in part])
    return {"root": root, "model": str(root / "hq.bin"), "card": card, "docs": job}


def _argv(scored: dict, out: Path, model: str) -> list[str]:
    return ["--input", str(scored["root"] / "in" / "*.jsonl.zst"), "--output_dir", str(out),
            "--tokenizer_model", model, "--subset_names", "any", "--seq_len", "64", "--chunk_mb", "0.05",
            "--shard_size_mb", "0.05", "--filters", "fasttext_classifier", "--fasttext_model", scored["model"],
            "--fasttext_score_bins", "4", "--split_by", "fasttext.hq"]


def _digests(out: Path) -> dict:
    digests = output_digests(out)
    digests[buckets.BUCKETS_NAME] = json.dumps(run_free(json.loads((out / buckets.BUCKETS_NAME).read_text())),
                                               sort_keys=True)
    return digests


@pytest.fixture(scope="module")
def one_worker(scored, tiny_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one") / "out"
    run.main(_argv(scored, out, tiny_model) + FAST_BEAM)
    return out


def test_the_classifier_s_buckets_hold_every_kept_document_once_by_score(scored, one_worker):
    assert scored["card"]["documents"]["positive"] > 20 and scored["card"]["documents"]["negative"] > 20
    record = json.loads((one_worker / "buckets.json").read_text())
    assert [b["value"] for b in record["buckets"]] == BINS  # every quarter of the scores is used
    assert sum(b["documents"] for b in record["buckets"]) == record["totals"]["documents_kept"] == len(
        scored["docs"])
    share = {}
    for b in record["buckets"]:
        subsets = load_manifest(str(one_worker / b["directory"]))["subsets"]
        prose = subsets.get("prose", {}).get("kept", 0)
        share[b["value"]] = prose / b["documents"]
        histogram = {v: c["documents"] for s in subsets.values() for v, c in s["labels"]["fasttext.hq"].items()}
        assert set(histogram) == {b["value"]}  # a bucket holds its bin's documents only
    assert share["0.75"] > 0.5 > share["0.00"]  # the classifier learned prose


def test_the_same_bytes_on_two_processes_and_on_a_dask_cluster(scored, one_worker, tiny_model, tmp_path):
    expected = _digests(one_worker)
    assert sum(name.endswith(".tfrecord") for name in expected) >= 2 * len(BINS)
    run.main(_argv(scored, tmp_path / "two", tiny_model) + TWO_PROCESSES)
    assert _digests(tmp_path / "two") == expected
    with dask_cluster(tmp_path / "cluster", workers=2) as cluster:
        run.main(_argv(scored, tmp_path / "dask", tiny_model)
                 + ["--runner", "DaskRunner", "--dask_client_address", cluster.address])
    assert _digests(tmp_path / "dask") == expected


def test_a_mixture_of_the_buckets_read_by_make_dataset_keeps_and_upsamples(one_worker):
    from pipeline import tfdata

    def records(name):
        ds = tfdata.make_dataset(str(one_worker / name), 1, shuffle=False, num_epochs=1)
        return [tuple(b["inputs"].numpy()[0].tolist()) for b in ds]

    every = {v: records(f"fasttext.hq={v}") for v in BINS}
    written = load_mixture(str(one_worker / "mixture.json"))
    assert written.names == tuple(f"fasttext.hq={v}" for v in BINS)
    # "keep >= 0.5" (the lower quarters weigh 0) and "upsample 0.75 x5" (its tokens times 5)
    tokens = {v: load_manifest(str(one_worker / f"fasttext.hq={v}"))["totals"]["label_tokens"] for v in BINS}
    mix = Mixture.of([(f"fasttext.hq={v}", str(one_worker / f"fasttext.hq={v}"),
                       {"0.00": 0, "0.25": 0, "0.50": tokens["0.50"], "0.75": 5 * tokens["0.75"]}[v]) for v in BINS])
    rows = [tuple(r) for b in tfdata.make_dataset(mix, 16, seed=2, num_epochs=None).take(12)
            for r in b["inputs"].numpy().tolist()]
    high, top = set(every["0.50"]) | set(every["0.75"]), set(every["0.75"])
    assert set(rows) <= high
    drawn_top = sum(r in top for r in rows) / len(rows)
    expected = 5 * tokens["0.75"] / (5 * tokens["0.75"] + tokens["0.50"])
    assert abs(drawn_top - expected) < 0.1, (drawn_top, expected)
    batch = next(iter(tfdata.make_dataset(str(one_worker / "mixture.json"), 8, seed=0)))
    assert batch["inputs"].shape == (8, 64)
