"""Any JSON-lines corpus: the bundled notes corpus (not the Pile's layout) end to end, through the reader.

The run uses every option for other corpora at once: --text_key and a dotted --subset_key, any
subset names, a default subset for lines without one, a preset that still applies to the Pile name
in the data (--epochs pile_paper: Wikipedia (en) x3), and a selection by the corpus's own names.
What the reader yields is compared token by token with the corpus encoded independently, and the
end-of-run summary is compared number by number with the manifest.
"""

import contextlib
import gzip
import io
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
from corpus_helpers import FAST_BEAM
from sample_corpus import write_notes_corpus, write_sample_corpus

from pipeline.cli import run
from pipeline.format.summary import format_summary, subset_rows

REPO = Path(__file__).resolve().parents[1]
NOTES = REPO / "sample_data" / "notes"
EXTRA = [
    b'{"id": "x1", "body": "kept, a key repeated off the read path", "source": {"name": "forum", "u": 1, "u": 2}}',
    b'{"id": "x2", "body": "not json',
    *(b'{"id": "x%d", "text": "a line in the Pile layout", "meta": {"pile_set_name": "Github"}}' % i
      for i in range(3, 6)),
]


def _read(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def test_the_bundled_corpus_is_what_the_generator_writes(tmp_path):
    written = [Path(p) for p in write_notes_corpus(str(tmp_path))]
    assert [p.name for p in written] == sorted(p.name for p in NOTES.iterdir())
    for path in written:
        assert _read(path) == _read(NOTES / path.name)


@pytest.mark.slow
def test_the_bundled_pile_sample_is_what_the_generator_writes(tmp_path):
    pile = REPO / "sample_data" / "pile"
    written = [Path(p) for p in write_sample_corpus(str(tmp_path))]
    assert sorted(p.relative_to(tmp_path) for p in written) == sorted(
        p.relative_to(pile) for p in pile.rglob("*") if p.is_file())
    for path in written:
        assert path.read_bytes() == (pile / path.relative_to(tmp_path)).read_bytes(), path


def _expected(files: list[Path]) -> tuple[dict, list[dict]]:
    """Per-subset stats and the kept documents, computed from the files without the pipeline."""
    stats, kept = {}, []
    for path in files:
        for raw in _read(path).splitlines():
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if "body" not in line:
                continue
            subset = (line.get("source") or {}).get("name") or "misc"
            s = stats.setdefault(subset, {"documents": 0, "kept": 0, "filtered": {}})
            s["documents"] += 1
            if subset == "recipes":
                s["filtered"]["subset_not_selected"] = s["filtered"].get("subset_not_selected", 0) + 1
            elif not line["body"].strip():
                s["filtered"]["empty_text"] = s["filtered"].get("empty_text", 0) + 1
            else:
                s["kept"] += 1
                kept.append({"text": line["body"], "subset": subset})
    return stats, kept


@pytest.fixture(scope="module")
def notes_run(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("notes")
    extra = root / "extra.jsonl"
    extra.write_bytes(b"\n".join(EXTRA) + b"\n")
    out = root / "out"
    argv = ["--input", str(NOTES / "*"), str(extra), "--output_dir", str(out), "--tokenizer_model", tiny_model,
            "--text_key", "body", "--subset_key", "source.name", "--subset_names", "any",
            "--default_subset", "misc", "--epochs", "pile_paper", "--exclude_subsets", "recipes",
            "--seq_len", "64", *FAST_BEAM]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        manifest = run.main(argv)
    files = sorted(NOTES.iterdir()) + [extra]
    return out, manifest, printed.getvalue(), files


@pytest.mark.slow
def test_per_subset_statistics_selection_and_epochs_work_for_any_names(notes_run):
    out, manifest, _, files = notes_run
    stats, _ = _expected(files)
    got = {name: {k: s[k] for k in ("documents", "kept", "filtered")} for name, s in manifest["subsets"].items()}
    assert got == stats
    assert set(stats) == {"forum", "manuals", "recipes", "Wikipedia (en)", "misc"}
    assert {n: s["selected"] for n, s in manifest["subsets"].items()} == {
        "forum": True, "manuals": True, "recipes": False, "Wikipedia (en)": True, "misc": True}
    assert {n: s["epochs"] for n, s in manifest["subsets"].items()} == {
        "forum": 1.0, "manuals": 1.0, "recipes": 1.0, "Wikipedia (en)": 3.0, "misc": 1.0}
    wiki = manifest["subsets"]["Wikipedia (en)"]
    assert wiki["tokens_with_epochs"] == 3 * wiki["tokens"] > 0
    config = manifest["config"]
    assert (config["text_key"], config["subset_key"], config["subset_names"], config["default_subset"]) == (
        "body", "source.name", "any", "misc")
    assert config["subsets"] == ["*"] and config["exclude_subsets"] == ["recipes"]
    assert manifest["dead_letters"]["by_reason"] == {"invalid_json": 1, "text_missing": 3}
    extra = [f for f in manifest["inputs"] if f["path"].endswith("extra.jsonl")][0]
    assert extra["duplicate_keys"] == {"ambiguous": 0, "elsewhere": 1}


@pytest.mark.slow
def test_the_reader_yields_every_token_of_every_kept_document_once_per_epoch(notes_run, tiny_model):
    from pipeline.tfdata import make_dataset

    out, manifest, _, files = notes_run
    _, kept = _expected(files)
    sp = spm.SentencePieceProcessor(model_file=tiny_model)
    eos = manifest["tokenizer"]["eos_id"]
    want = Counter()
    for doc in kept:
        copies = 3 if doc["subset"] == "Wikipedia (en)" else 1
        for token in sp.encode(doc["text"]) + [eos]:
            want[token] += copies
    got = Counter()
    for batch in make_dataset(str(out), batch_size=1, seed=0, num_epochs=1):
        labels, mask = batch["labels"].numpy()[0], batch["loss_mask"].numpy()[0]
        got.update(labels[mask > 0].tolist())
    assert got == want
    assert sum(want.values()) == manifest["totals"]["label_tokens"]


def _cells(summary: str) -> dict[str, list[str]]:
    rows = {}
    for line in summary.splitlines():
        parts = re.split(r"\s{2,}", line.strip())
        if len(parts) >= 8 and not line.startswith("-"):
            rows[parts[0]] = parts[1:]
    return rows


@pytest.mark.slow
def test_the_summary_and_the_manifest_agree(notes_run):
    out, manifest, summary, _ = notes_run
    rows = _cells(summary)
    header = rows.pop("subset")
    assert header == ["docs", "kept", "not selected", "empty", "tokens", "tok x epochs", "text MB"]
    subsets = manifest["subsets"]
    for name, s in subsets.items():
        assert rows[name] == [str(s["documents"]), str(s["kept"]),
                              str(s["filtered"].get("subset_not_selected", 0)), str(s["filtered"].get("empty_text", 0)),
                              str(s.get("tokens", 0)), str(s.get("tokens_with_epochs", 0)),
                              f"{s['text_bytes'] / 1e6:.2f}"]
        assert s["documents"] == s["kept"] + sum(s["filtered"].values())
    total = [sum(int(rows[n][i]) for n in subsets) for i in range(6)]
    assert rows["total"][:6] == [str(t) for t in total]
    assert subset_rows(manifest)[-1][1:7] == tuple(rows["total"][:6])
    tokens = sum(s.get("tokens", 0) for s in subsets.values())
    text_mb = sum(f["decompressed_bytes"] for f in manifest["inputs"]) / 1e6
    assert re.search(rf"^tokens: {tokens:,} in [\d.]+ s: [\d,]+ tokens/s, [\d.]+ MB/s of input \({text_mb:.2f} MB\)$",
                     summary, re.M)
    totals = manifest["totals"]
    assert f"records {totals['records']} x {manifest['seq_len'] + 1} tokens in {len(manifest['shards'])} shard(s)" \
        in summary
    assert f"label tokens {totals['label_tokens']}" in summary
    dead = manifest["dead_letters"]
    assert (f"dead letters: {dead['records']} {dict(sorted(dead['by_reason'].items()))} in "
            f"{out}/run-{manifest['run_id']}/dead_letters/ "
            f"({len(dead['files'])} files)") in summary
    hint = "hint: lines not in the expected layout were dead-lettered; see --text_key KEY"
    assert hint in summary
    # One stray line of another layout among many is no pattern: no hint.
    many = {**manifest, "totals": {**manifest["totals"], "lines": 1000 * manifest["totals"]["lines"]}}
    assert hint not in format_summary(many)
    assert f"output: {out} (manifest.json lists every shard)" in summary
    assert f'ds = make_dataset("{out}", batch_size=8' in summary


@pytest.mark.slow
def test_a_misspelled_name_with_any_names_is_noted_in_the_summary(tmp_path, tiny_model, capsys):
    # Without --default_subset the lines with no subset name are dead letters (~10% here): accept them.
    manifest = run.main(["--input", str(NOTES / "part-00.jsonl"), "--output_dir", str(tmp_path / "out"),
                         "--tokenizer_model", tiny_model, "--text_key", "body", "--subset_key", "source.name",
                         "--subset_names", "any", "--subsets", "forum,manulas", "--seq_len", "64",
                         "--max_dead_letter_fraction", "1", *FAST_BEAM])
    assert manifest["subsets"]["manuals"]["selected"] is False
    assert "note: --subsets names found in no line: 'manulas'" in capsys.readouterr().out
    assert np.all([s["selected"] == (n == "forum") for n, s in manifest["subsets"].items()])
