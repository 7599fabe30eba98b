"""`--split_by`: one TFRecord output per bucket of a stage's label, the stages once, buckets.json and mixture.json.

The stage is the tests' own (tests/split_helpers.py), labelling each document with a shelf or none.
Each bucket is the output of a run that kept only its documents, byte for byte; the buckets' counts
add up to the run's; the run's dead letters and removed/ are the run's; the same bytes on one worker
and two processes, with the values declared or found; reruns, clashes and refusals.
"""

import json
import os
import re
from pathlib import Path

import pytest
from corpus_helpers import FAST_BEAM, output_digests, pile_line, run_free, write_lines
from split_helpers import ShelfStage, shelf

from pipeline.cli import run, show
from pipeline.format import buckets
from pipeline.format.manifest import load_manifest
from pipeline.format.mixture import Mixture, load_mixture
from pipeline.stages import registry

pytestmark = pytest.mark.slow

TWO_PROCESSES = ["--runner", "DirectRunner", "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
SHELVES = ["0", "1", "2", buckets.NONE]


def _text(f: int, i: int) -> str:
    words = " ".join(f"w{(f * 131 + i * 17 + k) % 89}" for k in range(5 + (i * 7) % 23))
    if i % 9 == 4:
        return words + " loose"
    return ("CUT " if i % 11 == 3 else "") + words


def _lines(f: int) -> list[bytes]:
    lines = [pile_line(_text(f, i), ("Pile-CC", "ArXiv")[i % 2]) for i in range(70)]
    lines[12] = b"{not json"
    lines[20] = pile_line("   ")
    return lines


@pytest.fixture(scope="module")
def shelves():
    """The shelf stage in the registry; the workers import its module by name, as a user's would."""
    registry.register(ShelfStage)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
        yield ShelfStage.name
    registry.unregister(ShelfStage.name)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("split_corpus")
    for f in range(2):
        write_lines(str(root / f"{f:02d}.jsonl.zst"), _lines(f))
    return root


def _argv(corpus: Path, out: Path, model: str, *more: str) -> list[str]:
    return ["--input", str(corpus / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model", model,
            "--seq_len", "16", "--chunk_mb", "0.001", "--shard_size_mb", "0.002", "--seed", "5",
            "--filters", "split_shelf", "--max_dead_letter_fraction", "0.5", *more]


def _digests(out: Path) -> dict:
    """output_digests, buckets.json without its run id (the run's record, as a manifest)."""
    digests = output_digests(out)
    digests[buckets.BUCKETS_NAME] = json.dumps(run_free(json.loads((out / buckets.BUCKETS_NAME).read_text())),
                                               sort_keys=True)
    return digests


@pytest.fixture(scope="module")
def split(shelves, corpus, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("split") / "out"
    return out, run.main(_argv(corpus, out, tiny_model, "--split_by", "shelf") + FAST_BEAM)


def _kept(value: str) -> int:
    return sum(1 for f in range(2) for i in range(70) if i not in (12, 20)
               and (shelf(_text(f, i)) or buckets.NONE) == value)


def test_the_layout_a_bucket_per_value_and_the_run_s_record(split):
    out, result = split
    entries = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    run_dirs = [e for e in entries if e.startswith("run-")]
    assert entries == sorted([f"shelf={v}" for v in SHELVES] + ["buckets.json", "mixture.json", *run_dirs])
    assert len(run_dirs) == 1 and (out / run_dirs[0] / "dead_letters").is_dir()
    record = json.loads((out / "buckets.json").read_text())
    assert [b["value"] for b in record["buckets"]] == SHELVES and record["split_by"] == "shelf"
    assert [b["documents"] for b in record["buckets"]] == [_kept(v) for v in SHELVES]
    assert sum(b["documents"] for b in record["buckets"]) == record["totals"]["documents_kept"]
    assert record["dead_letters"]["by_reason"] == {"invalid_json": 2} and record["dead_letters"]["files"]
    assert all((out / f["path"]).is_file() for f in record["dead_letters"]["files"] + record["removed"]["files"])
    cut = sum(1 for f in range(2) for i in range(70) if i not in (12, 20) and _text(f, i).startswith("CUT "))
    assert record["removed"]["cut_by_reason"] == {"split_shelf_cut": cut} and cut > 0
    for entry in record["buckets"]:
        manifest = load_manifest(str(out / entry["directory"]))
        assert manifest["bucket"] == {"label": "shelf", "value": entry["value"], "run": "../buckets.json"}
        assert manifest["dead_letters"]["records"] == 0 and "removed" not in manifest
        assert manifest["totals"]["documents_kept"] == entry["documents"] == sum(
            s["kept"] for s in manifest["subsets"].values())
        assert manifest["config"]["split_by"] == "shelf" and manifest["totals"]["lines"] == 140
        assert all(s["documents"] == s["kept"] for s in manifest["subsets"].values())
    for name, s in record["subsets"].items():  # the run's counts: every document, as without --split_by
        buckets_kept = sum(load_manifest(str(out / b["directory"]))["subsets"].get(name, {}).get("kept", 0)
                           for b in record["buckets"])
        assert s["kept"] == buckets_kept and s["documents"] == s["kept"] + sum(s["filtered"].values())
    assert set(result["outputs"]) == {f"shelf={v}" for v in SHELVES}
    shown = show.show(str(out))  # OUT has no manifest: its mixture
    assert "4 sources" in shown and "shelf=none" in shown


@pytest.mark.parametrize("value", ["0", "2"])
def test_each_bucket_is_the_output_of_a_run_that_kept_only_its_documents(split, corpus, tiny_model, tmp_path,
                                                                         value):
    out, _ = split
    alone = tmp_path / "alone"
    manifest = run.main(_argv(corpus, alone, tiny_model, "--shelf_only", value) + FAST_BEAM)
    mine = load_manifest(str(out / f"shelf={value}"))
    shards = {k: v for k, v in _digests(out).items() if k.startswith(f"shelf={value}/") and k.endswith(".tfrecord")}
    assert len(shards) > 1 and shards == {
        f"shelf={value}/{k}": v for k, v in output_digests(alone).items() if k.endswith(".tfrecord")}
    assert run_free(mine["shards"]) == run_free(manifest["shards"])
    for name, s in mine["subsets"].items():
        theirs = manifest["subsets"][name]
        assert {k: s.get(k) for k in ("kept", "tokens", "text_bytes", "labels")} == {
            k: theirs.get(k) for k in ("kept", "tokens", "text_bytes", "labels")}
    assert mine["packing"] == manifest["packing"] and mine["shuffle"] == manifest["shuffle"]


def test_the_mixture_reads_the_buckets_and_weighs_them_at_train_time(split):
    from pipeline import tfdata

    out, _ = split
    mixture = load_mixture(str(out / "mixture.json"))
    assert mixture.names == tuple(f"shelf={v}" for v in SHELVES)
    for source in mixture.sources:
        assert source.weight == load_manifest(source.manifest)["totals"]["label_tokens"]

    def records(name):
        ds = tfdata.make_dataset(str(out / name), 1, shuffle=False, num_epochs=1)
        return {tuple(b["inputs"].numpy()[0].tolist()) for b in ds}

    allowed = records("shelf=1") | records("shelf=2")
    high = Mixture.of([(f"shelf={v}", str(out / f"shelf={v}"), w) for v, w in (("0", 0), ("1", 1.0), ("2", 5.0))])
    batches = list(tfdata.make_dataset(high, 8, seed=1).take(4))
    rows = [tuple(r) for b in batches for r in b["inputs"].numpy().tolist()]
    assert rows and set(rows) <= allowed  # "keep >= 1": shelf 0 weighs 0
    ds = tfdata.make_dataset(str(out / "mixture.json"), 4, seed=0)
    assert next(iter(ds))["inputs"].shape == (4, 16)
    kept = Mixture.of([{"manifest": str(out / f"shelf={v}")} for v in ("1", "2")], weights="tokens")
    assert kept.names == ("shelf=1", "shelf=2") and [s.weight for s in kept.sources] == [
        s.weight for s in mixture.sources[1:3]]


def test_sibling_buckets_mix_under_their_own_names_and_a_stranger_is_refused(split, tmp_path):
    import shutil

    from pipeline.format.mixture import MixtureError

    out, _ = split
    mixture = Mixture.of([{"manifest": str(out / f"shelf={v}"), "weight": 1.0} for v in SHELVES])
    assert mixture.names == tuple(f"shelf={v}" for v in SHELVES)  # the buckets' directories, not their subsets
    stranger = tmp_path / "shelf=1"
    shutil.copytree(out / "shelf=1", stranger)
    manifest = json.loads((stranger / "manifest.json").read_text())
    manifest["tokenizer"]["sha256"] = "0" * 64
    (stranger / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(MixtureError, match="differ in tokenizer sha256"):
        Mixture.of([{"manifest": str(out / "shelf=0"), "weight": 1.0}, {"manifest": str(stranger), "weight": 1.0}])


def test_two_processes_and_found_values_write_the_same_bytes(split, corpus, tiny_model, tmp_path):
    out, _ = split
    two = tmp_path / "two"
    run.main(_argv(corpus, two, tiny_model, "--split_by", "shelf") + TWO_PROCESSES)
    assert _digests(two) == _digests(out)
    found = tmp_path / "found"
    run.main(_argv(corpus, found, tiny_model, "--split_by", "shelf", "--shelf_declared", "false") + FAST_BEAM)

    def files(digests):  # the config records the stage's option: the manifests differ by it alone
        return {k: v for k, v in digests.items() if not k.endswith(("manifest.json", buckets.BUCKETS_NAME))}

    assert files(_digests(found)) == files(_digests(out)) and len(files(_digests(out))) > 10


def test_best_fit_and_provenance_per_bucket(shelves, corpus, tiny_model, tmp_path, capsys):
    from pipeline.cli import provenance

    out = tmp_path / "bf"
    run.main(_argv(corpus, out, tiny_model, "--split_by", "shelf", "--packing", "best_fit", "--provenance")
             + FAST_BEAM)
    manifest = load_manifest(str(out / "shelf=1"))
    assert manifest["packing"]["mode"] == "best_fit" and manifest["provenance"]["files"]
    capsys.readouterr()
    assert provenance.cli([str(out / "shelf=1"), "--step", "1", "--global_batch_size", "8", "--seed", "1"]) == 0
    shown = re.findall(r"(\d\d)\.jsonl\.zst:(\d+)", capsys.readouterr().out)
    ours = {(f, i + 1) for f in range(2) for i in range(70) if i not in (12, 20) and shelf(_text(f, i)) == "1"}
    assert len(shown) >= 8 and {(int(f), int(line)) for f, line in shown} <= ours


def test_rerun_needs_overwrite_and_overwrite_replaces(shelves, corpus, tiny_model, tmp_path):
    out = tmp_path / "again"
    argv = _argv(corpus, out, tiny_model, "--split_by", "shelf", "--subsets", "ArXiv") + FAST_BEAM
    run.main(argv)
    before = _digests(out)
    named = Mixture.of([{"manifest": str(out / f"shelf={v}"), "weight": 1.0} for v in SHELVES])
    assert named.names == tuple(f"shelf={v}" for v in SHELVES)  # one subset each: named by bucket, not subset
    with pytest.raises(FileExistsError, match="not empty"):
        run.main(argv)
    run.main(argv + ["--overwrite"])
    assert _digests(out) == before and len([p for p in out.iterdir() if p.name.startswith("run-")]) == 1
    (out / "stray.txt").write_text("not ours")
    with pytest.raises(FileExistsError, match="stray.txt"):
        run.main(argv + ["--overwrite"])
    assert (out / "mixture.json").exists()  # refused: nothing removed


def test_refusals_are_one_line_with_exit_2(shelves, corpus, tiny_model, tmp_path, caplog):
    for extra, said in ((["--split_by", "color"], "--split_by color: no stage on labels documents so"),
                        (["--split_by", "shelf", "--output_format", "megatron"], "--split_by is for TFRecord"),
                        (["--split_by", "shelf", "--per_subset", "--subsets", "ArXiv"],
                         "--split_by with --per_subset")):
        caplog.clear()
        assert run.cli(_argv(corpus, tmp_path / "o", tiny_model, *extra) + FAST_BEAM) == 2, extra
        assert said in caplog.text, (extra, caplog.text[-500:])
    assert not (tmp_path / "o").exists()


def test_values_sharing_a_directory_are_refused_before_the_job_or_before_any_shard(shelves, corpus, tiny_model,
                                                                                   tmp_path, caplog):
    clash = ["--split_by", "shelf", "--shelf_names", "a b,a_b,c"]
    assert run.cli(_argv(corpus, tmp_path / "declared", tiny_model, *clash) + FAST_BEAM) == 2
    assert "the values 'a b' and 'a_b' would share the bucket directory shelf=a_b" in caplog.text
    assert not (tmp_path / "declared").exists()
    caplog.clear()
    found = tmp_path / "found"
    assert run.cli(_argv(corpus, found, tiny_model, *clash, "--shelf_declared", "false") + FAST_BEAM) == 1
    assert "would share the bucket directory shelf=a_b" in caplog.text and "no shard was written" in caplog.text
    assert not [p for p in found.rglob("*") if p.is_file() and p.name.endswith((".tfrecord", ".json"))]


def test_a_bucket_without_records_is_counted_and_too_many_dead_letters_refuse_every_bucket(
        shelves, corpus, tiny_model, tmp_path, caplog):
    out = tmp_path / "drop"
    argv = _argv(corpus, out, tiny_model, "--split_by", "shelf", "--remainder", "drop")
    argv[argv.index("--seq_len") + 1] = "1024"
    run.main(argv + FAST_BEAM)
    record = json.loads((out / "buckets.json").read_text())
    by_value = {b["value"]: b for b in record["buckets"]}
    assert by_value["none"]["manifest"] is None and by_value["none"]["documents"] == _kept("none") > 0
    assert not (out / "shelf=none" / "manifest.json").exists()
    assert load_mixture(str(out / "mixture.json")).names == ("shelf=0", "shelf=1", "shelf=2")
    assert sum(b["documents"] for b in record["buckets"]) == record["totals"]["documents_kept"]
    strict = tmp_path / "strict"
    assert run.cli(_argv(corpus, strict, tiny_model, "--split_by", "shelf", "--max_dead_letter_fraction", "0.001")
                   + FAST_BEAM) == 1
    assert "more than --max_dead_letter_fraction" in caplog.text
    assert not list(strict.rglob("*.json"))  # no bucket manifest, no buckets.json, no mixture.json


def test_no_document_is_lost_whatever_the_buckets(split):
    out, _ = split
    record = json.loads((out / "buckets.json").read_text())
    tokens = sum(b["tokens"] for b in record["buckets"])
    assert tokens == sum(s["tokens"] for s in record["subsets"].values())
    labels = sum(b["label_tokens"] for b in record["buckets"])
    assert labels == tokens  # every kept token in one bucket's records, once
    assert record["totals"]["records"] == sum(b["records"] for b in record["buckets"])


def test_the_hugging_face_stage_declares_its_head_s_label(tmp_path):
    import classifier_models

    from pipeline.stages.hf_classifier import HfClassifier, HfClassifierOptions

    texts = [f"a text about topic {i} and more words" for i in range(40)]
    edu = classifier_models.write_fineweb_edu_like(str(tmp_path / "edu"), texts)
    assert HfClassifier(HfClassifierOptions(hf_model=edu)).labels() == {"hf.int_score": tuple("012345")}
    named = classifier_models.write_fineweb_edu_like(str(tmp_path / "named"), texts, labels=("low", "high"))
    assert HfClassifier(HfClassifierOptions(hf_model=named)).labels() == {"hf.label": ("low", "high")}
