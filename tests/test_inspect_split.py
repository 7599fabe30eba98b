"""`removed` and `report` on a --split_by output (through buckets.json) and on a --per_subset output.

The job runs the inspection corpus's stages, dedup and decontamination (tests/inspect_corpus.py)
and the tests' labelling stage (tests/split_helpers.py), once split by its label and once not: the
split output's OUT shows the run's removed documents, the same as the unsplit run's, and its report
has a number for each bucket, every number on the page evaluated against buckets.json
(tests/report_page.py). A bucket's directory and a --per_subset output's OUT are refused in one
line naming what to pass (by `show` too, given buckets.json); a --per_subset output's subset directory
is an output of its own.
"""

from __future__ import annotations

import json

import browser
import inspect_corpus
import pytest
from corpus_helpers import FAST_BEAM
from report_page import check_numbers, number, render
from split_helpers import ShelfStage

from pipeline.cli import removed as removed_cli
from pipeline.cli import report as report_cli
from pipeline.cli import run, show
from pipeline.stages import registry

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shelves():
    """The labelling stage in the registry (the job's, and the one `removed` decides again with)."""
    registry.register(ShelfStage)
    yield ShelfStage.name
    registry.unregister(ShelfStage.name)


def _flags(root) -> list[str]:
    flags = inspect_corpus.flags(root)
    flags[flags.index("--filters") + 1] += f",{ShelfStage.name}"
    return flags


@pytest.fixture(scope="module")
def outputs(shelves, tiny_model, tmp_path_factory):
    """(corpus root, {"split": OUT, "plain": OUT, "per_subset": OUT}) of the same job, written three ways."""
    root = tmp_path_factory.mktemp("split_inspect_corpus")
    inspect_corpus.write(root)
    inputs = [str(root / name) for name in inspect_corpus.FILES]
    outs = {}
    for name, more in (("split", ["--split_by", "shelf"]), ("plain", []),
                       ("per_subset", ["--per_subset", "--subsets", "Pile-CC,ArXiv"])):
        outs[name] = tmp_path_factory.mktemp(f"split_inspect_{name}") / "out"
        run.main(["--input", *inputs, "--output_dir", str(outs[name]), "--tokenizer_model", tiny_model,
                  "--seq_len", "64", "--chunk_mb", "0.004", *_flags(root), *more, *FAST_BEAM])
    return root, outs


def _removed_json(capsys, *argv) -> list[dict]:
    assert removed_cli.cli([*map(str, argv), "--format", "json"]) == 0, capsys.readouterr().err
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _refused(capsys, cli, *argv) -> str:
    assert cli([*map(str, argv)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_removed_on_a_split_output_shows_the_run_s_records(outputs, capsys):
    _, outs = outputs
    plain = _removed_json(capsys, outs["plain"])
    assert len(plain) > 10
    for given in (outs["split"], outs["split"] / "mixture.json", outs["split"] / "buckets.json"):
        assert _removed_json(capsys, given) == plain  # the run's records, each with its document read back
    sample = _removed_json(capsys, outs["split"], "--sample", "1", "--per_rule", "--seed", "3")
    assert sample == _removed_json(capsys, outs["plain"], "--sample", "1", "--per_rule", "--seed", "3")


def test_report_on_a_split_output_counts_each_bucket_and_every_number_is_buckets_json(outputs, capsys, tmp_path):
    _, outs = outputs
    record = json.loads((outs["split"] / "buckets.json").read_text())
    page, text = render([outs["split"]], capsys, tmp_path)
    check_numbers(page, [(outs["split"], record)])
    rows = [row for row in page.rows["buckets"] if row]
    assert [(row[0], row[1]) for row in rows] == [(b["value"], b["directory"]) for b in record["buckets"]]
    assert len(rows) >= 2 and [number(row[2]) for row in rows] == [b["documents"] for b in record["buckets"]]
    assert sum(number(row[2]) for row in rows) == record["totals"]["documents_kept"]
    assert [number(row[4]) for row in rows] == [b["records"] for b in record["buckets"]]
    assert 'alt="kept documents by bucket"' in text
    plain = json.loads((outs["plain"] / "manifest.json").read_text())
    funnel = {row[0]: number(row[1]) for row in page.rows["funnel"] if row}
    assert funnel["kept"] == plain["totals"]["documents_kept"] and funnel["input lines"] == plain["totals"]["lines"]
    assert funnel["gopher_quality"] == plain["removed"]["by_reason"]["gopher_quality"]
    assert "<h4>removed: gopher_quality" in text  # the run's removed documents, read back
    seen = browser.open_page(tmp_path / "page.html", "report-split.png")
    assert seen["errors"] == [] and seen["scripts"] == 0 and "Buckets (--split_by)" in seen["text"]
    for image in seen["images"]:
        assert image["complete"] and min(image["natural"]) > 0 and min(image["drawn"]) > 0, image


def test_a_split_output_beside_an_unsplit_one(outputs, capsys, tmp_path):
    _, outs = outputs
    record = json.loads((outs["split"] / "buckets.json").read_text())
    plain = json.loads((outs["plain"] / "manifest.json").read_text())
    page, text = render([outs["plain"], "--compare", outs["split"]], capsys, tmp_path)
    check_numbers(page, [(outs["plain"], plain), (outs["split"], record)])
    funnel = [row for row in page.rows["funnel"] if row]
    assert all(number(row[3]) == 0 for row in funnel)  # the same documents kept and removed
    assert "Every document has the same fate in both runs." in text
    buckets = [row for row in page.rows["buckets"] if row]
    assert [row[2] for row in buckets] == ["—"] * len(buckets)  # the unsplit run has no bucket


def test_a_bucket_or_a_per_subset_output_is_refused_naming_what_to_pass(outputs, capsys, tmp_path):
    _, outs = outputs
    bucket = outs["split"] / "shelf=1"
    for cli, more in ((removed_cli.cli, []), (report_cli.cli, ["--html", tmp_path / "r.html"])):
        line = _refused(capsys, cli, bucket, *more)
        assert "one bucket of a --split_by output" in line and line.endswith(f"pass the output, {outs['split']}")
        line = _refused(capsys, cli, outs["per_subset"], *more)
        assert "is a --per_subset output" in line
        assert f"pass one of them ({outs['per_subset']}/ArXiv, {outs['per_subset']}/Pile_CC)" in line
    assert not (tmp_path / "r.html").exists()
    assert "sources" in show.show(str(outs["split"])) and "sources" in show.show(str(outs["per_subset"]))
    line = _refused(capsys, show.cli, outs["split"] / "buckets.json")
    assert "a --split_by run's record, not an output: pass " + str(outs["split"]) in line


def test_a_per_subset_output_s_subset_is_an_output_of_its_own(outputs, capsys, tmp_path):
    _, outs = outputs
    subset = outs["per_subset"] / "Pile_CC"
    shown = _removed_json(capsys, subset)
    assert shown and shown == [r for r in _removed_json(capsys, outs["plain"]) if r["subset"] == "Pile-CC"]
    manifest = json.loads((subset / "manifest.json").read_text())
    page, _ = render([subset, "--no_inputs"], capsys, tmp_path)
    check_numbers(page, [(subset, manifest)], least=20)


@pytest.mark.parametrize("edit, said", [
    (lambda r: r["buckets"][0].update(documents=-1), "buckets[0] is not a bucket's entry"),
    (lambda r: r["dead_letters"]["files"].append({"path": "../elsewhere.jsonl", "records": 1}), "escapes the output"),
    (lambda r: r["removed"]["files"][0].update(path="run-0000000000000000/removed/train-00000-00000.jsonl"),
     "is not a file of the run that wrote this manifest"),
    (lambda r: r.update(run_id=7), "`run_id` and `split_by` must be strings"),
], ids=["count", "dead_letters", "removed", "run_id"])
def test_a_buckets_json_edited_after_the_run_is_refused(outputs, capsys, tmp_path, edit, said):
    import shutil

    _, outs = outputs
    copy = tmp_path / "out"
    shutil.copytree(outs["split"], copy)
    record = json.loads((copy / "buckets.json").read_text())
    edit(record)
    (copy / "buckets.json").write_text(json.dumps(record))
    assert said in _refused(capsys, removed_cli.cli, copy)
