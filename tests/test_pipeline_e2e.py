"""End to end: corpora written here -> pipeline.run.main -> shards read back with plain tf.data."""

import hashlib
import json
import logging
import os
from collections import Counter

import numpy as np
import pytest
import sentencepiece as spm
from corpus_helpers import FAST_BEAM, file_digest, pile_line, run_free, write_lines

from pipeline.cli import run
from pipeline.core.shuffle import Permutation
from pipeline.core.subsets import PILE_SUBSETS
from pipeline.format.manifest import load_manifest

pytestmark = pytest.mark.slow

SEQ = 64


def _run(inputs, out, model, *extra, beam=FAST_BEAM):
    argv = [a for p in inputs for a in ("--input", p)]
    argv += ["--output_dir", str(out), "--tokenizer_model", model, "--seq_len", str(SEQ), *extra, *beam]
    return run.main(argv)


def _read_records(out):
    """Every record of every shard, in manifest order, with plain tf.data (no project reader)."""
    import tensorflow as tf

    manifest = load_manifest(str(out))
    dtype = {"uint16": tf.uint16, "int32": tf.int32}[manifest["features"]["tokens"]["dtype"]]
    spec = {"tokens": tf.io.FixedLenFeature([], tf.string),
            "valid_labels": tf.io.FixedLenFeature([], tf.int64, default_value=manifest["seq_len"])}
    for name in ("segment_ids", "positions"):
        if name in manifest["features"]:
            spec[name] = tf.io.FixedLenFeature([], tf.string)
    files = [os.path.join(out, s["path"]) for s in manifest["shards"]]
    rows = []
    for batch in tf.data.TFRecordDataset(files).batch(256).map(lambda x: tf.io.parse_example(x, spec)):
        tokens = tf.io.decode_raw(batch["tokens"], dtype).numpy().astype(np.int64)
        for i in range(len(tokens)):
            row = {"tokens": tokens[i], "valid": int(batch["valid_labels"][i])}
            for name in ("segment_ids", "positions"):
                if name in batch:
                    row[name] = tf.io.decode_raw(batch[name][i], dtype).numpy().astype(np.int64)
            rows.append(row)
    return manifest, rows


def _texts(n, rng):
    pool = ["plain words here", "code:\n\tdef f(x):\n\t    return x**2  # ünïcödé", "数据模型 日本語 🚀✨",
            "digits 1234567890 and 3.14159", "  leading and trailing spaces  ", "a"]
    return [" ".join(rng.choice(pool) for _ in range(int(rng.integers(1, 40)))) for _ in range(n)]


def test_single_file_round_trips_to_the_original_text(tmp_path, tiny_model):
    """Un-shuffling the records with the manifest's permutation gives back every document, in order."""
    rng = np.random.default_rng(0)
    texts = _texts(120, rng) + ["x" * 5000]  # a document spanning many records
    subsets = [PILE_SUBSETS[i % 22] for i in range(len(texts))]
    lines = [pile_line(t, s) for t, s in zip(texts, subsets, strict=True)]
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), lines)
    manifest = _run([path], tmp_path / "out", tiny_model, "--shard_size_mb", "0.01", "--seed", "5")
    manifest, rows = _read_records(tmp_path / "out")
    assert len(manifest["shards"]) > 3
    # Shards hold consecutive permuted positions; invert the permutation to restore stream order.
    n = len(rows)
    positions = Permutation(n, 5)(np.arange(n))
    stream_order = [rows[p] for p in positions]
    labels = np.concatenate([r["tokens"][1 : r["valid"] + 1] for r in stream_order])
    assert stream_order[0]["tokens"][0] == 2  # the stream starts with the EOS separator as context
    docs = np.split(labels, np.flatnonzero(labels == 2)[:-1] + 1)
    sp = spm.SentencePieceProcessor(model_file=tiny_model)
    assert [sp.decode(d[:-1].tolist()) for d in docs] == texts
    assert manifest["totals"]["label_tokens"] == len(labels)
    assert sum(s["tokens"] for s in manifest["subsets"].values()) == len(labels)
    assert manifest["packing"]["padding_labels"] == n * SEQ - len(labels)


def test_multi_file_corpus_accounts_for_every_token(tmp_path, tiny_model):
    rng = np.random.default_rng(1)
    sp = spm.SentencePieceProcessor(model_file=tiny_model)
    expected = Counter()
    inputs = []
    for f in range(3):
        texts = _texts(80, rng)
        for t in texts:
            expected.update(sp.encode(t) + [2])
        inputs.append(write_lines(str(tmp_path / "in" / f"{f:02d}.jsonl.zst"), [pile_line(t) for t in texts]))
    # Small chunks so that several chunk tails per file are joined and packed again.
    _run([str(tmp_path / "in" / "*.jsonl.zst")], tmp_path / "out", tiny_model, "--chunk_mb", "0.002",
         "--document_boundaries")
    manifest, rows = _read_records(tmp_path / "out")
    got = Counter()
    for r in rows:
        got.update(r["tokens"][1 : r["valid"] + 1].tolist())
        # Padding (segment id 0) exactly where valid_labels says.
        assert (r["segment_ids"][r["valid"]:] == 0).all() and (r["segment_ids"][: r["valid"]] > 0).all()
    assert got == expected
    assert manifest["packing"]["records_from_tails"] > 0
    assert sum(1 for r in rows if r["valid"] < SEQ) <= 1  # one partial record per job at most


def test_bad_input_is_dead_lettered_and_counts_add_up(tmp_path, tiny_model):
    good = [pile_line(f"good document {i}", "Github") for i in range(30)]
    bad = [
        (b"{not json", "invalid_json"),
        (b'{"text": "caf\xe9", "meta": {"pile_set_name": "Pile-CC"}}', "invalid_utf8"),
        (b'{"meta": {"pile_set_name": "Pile-CC"}}', "text_missing"),
        (b'{"text": null, "meta": {"pile_set_name": "Pile-CC"}}', "text_not_string"),
        (b'{"text": 7, "meta": {"pile_set_name": "Pile-CC"}}', "text_not_string"),
        (b'{"text": "x"}', "meta_missing"),
        (b'{"text": "x", "meta": {}}', "subset_missing"),
        (b'{"text": "x", "meta": {"pile_set_name": "CommonCrawl"}}', "subset_unknown"),
        (pile_line("y" * 3_000_000), "line_too_long"),
    ]
    filtered = [pile_line("", "ArXiv"), pile_line(" \n\t ", "ArXiv")]
    lines = []
    for i, g in enumerate(good):
        lines.append(g)
        if i < len(bad):
            lines.append(bad[i][0])
    lines += filtered
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), lines)
    manifest = _run([path], tmp_path / "out", tiny_model, "--max_line_mb", "1", "--max_dead_letter_fraction", "1")
    dead = manifest["dead_letters"]
    assert dead["records"] == len(bad)
    assert dead["by_reason"] == dict(Counter(reason for _, reason in bad))
    assert manifest["subsets"]["Github"]["kept"] == 30
    assert manifest["subsets"]["ArXiv"]["filtered"] == {"empty_text": 2}
    # Every line is a kept, filtered or dead-lettered document.
    s = manifest["subsets"]
    assert manifest["totals"]["lines"] == len(lines) == sum(v["documents"] for v in s.values()) + dead["records"]
    assert all(v["documents"] == v["kept"] + sum(v["filtered"].values()) for v in s.values())
    (dl_file,) = dead["files"]
    records = [json.loads(line) for line in open(tmp_path / "out" / dl_file["path"], encoding="utf-8")]
    assert [r["reason"] for r in records] == [reason for _, reason in bad]
    first = records[0]
    assert first["line"] == 2 and first["offset"] == len(good[0]) + 1 and first["prefix"] == "{not json"
    assert first["file"].endswith("00.jsonl.zst")
    assert records[-1]["prefix"].startswith('{"text": "yyy') and len(records[-1]["prefix"]) <= 120
    data = open(tmp_path / "out" / dl_file["path"], "rb").read()
    assert hashlib.sha256(data).hexdigest() == dl_file["sha256"]


def test_corrupt_file_fails_the_job_by_default_and_is_recorded_with_skip(tmp_path, tiny_model):
    good = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), [pile_line(f"fine {i}") for i in range(20)])
    cut = write_lines(str(tmp_path / "in" / "01.jsonl.zst"), [pile_line("z" * 2000 + str(i)) for i in range(200)])
    data = open(cut, "rb").read()
    open(cut, "wb").write(data[: len(data) * 2 // 3])
    with pytest.raises(Exception, match=r"01\.jsonl\.zst.*truncated"):
        _run([str(tmp_path / "in" / "*.zst")], tmp_path / "out", tiny_model)
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert not [f for f in os.listdir(tmp_path / "out") if f.startswith(".spill")]  # removed on failure too
    manifest = _run([str(tmp_path / "in" / "*.zst")], tmp_path / "out", tiny_model, "--on_corrupt_file", "skip",
                    "--overwrite")
    damaged = [i for i in manifest["inputs"] if "damaged" in i]
    assert len(damaged) == 1 and damaged[0]["path"] == cut and "truncated" in damaged[0]["damaged"]
    assert manifest["subsets"]["Pile-CC"]["kept"] >= 20
    assert good


def test_determinism_across_workers_and_fan_out(tmp_path, tiny_model, caplog):
    """Same bytes on 1 and 2 workers (processes or threads), whole files, stripes of files or chunks fanned out.

    3 equal files on 2 workers: `auto` reads one of them in two stripes (pipeline/beam/runners/work_items.py),
    `no` reads each whole, `yes` fans chunks out through the shuffle. Without --direct_running_mode
    the job chooses: worker threads, with SentencePiece on 2 workers, which claim the chunks of the
    striped file as they get free (pipeline/beam/runners/direct/claims.py).
    """
    rng = np.random.default_rng(2)
    for f in range(3):
        lines = [pile_line(t) for t in _texts(150, rng)]
        lines[7] = b'{"text": "no meta"}'  # dead letters are part of the output too
        write_lines(str(tmp_path / "in" / f"{f:02d}.jsonl.zst"), lines)
    digests = []
    for workers, fan_out, mode in (("1", "auto", "multi_processing"), ("2", "auto", "multi_processing"),
                                   ("2", "no", "multi_processing"), ("2", "yes", "multi_processing"),
                                   ("2", "auto", None), ("2", "yes", None)):
        out = tmp_path / f"out{workers}-{fan_out}-{mode}"
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="pipeline"):
            _run([str(tmp_path / "in" / "*.zst")], out, tiny_model, "--chunk_mb", "0.01", "--shard_size_mb", "0.02",
                 "--fan_out", fan_out,
                 beam=["--runner", "DirectRunner", "--direct_num_workers", workers,
                       *(["--direct_running_mode", mode] if mode else [])])
        chosen = "execution: 2 DirectRunner worker threads in this process" in caplog.text
        assert chosen == (mode is None)
        # Threads share the files they stripe on a board (pipeline/beam/runners/direct/claims.py); processes cannot.
        if fan_out == "auto" and workers == "2":
            assert ("first worker free to claim it" in caplog.text) == (mode is None)
        files = sorted(p for p in out.rglob("*") if p.is_file())
        digests.append({run_free(str(f.relative_to(out))): file_digest(f)
                        for f in files if f.name != "manifest.json"})
        digests[-1]["manifest.json"] = run_free(json.loads((out / "manifest.json").read_text()))
    assert len(digests[0]) > 3 and any(name.startswith("dead_letters/") for name in digests[0])
    assert all(d == digests[0] for d in digests[1:])


def test_shards_respect_the_size_bound(tmp_path, tiny_model):
    rng = np.random.default_rng(3)
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), [pile_line(t) for t in _texts(300, rng)])
    limit_mb = 0.005
    manifest = _run([path], tmp_path / "out", tiny_model, "--shard_size_mb", str(limit_mb))
    record = max(s["bytes"] / s["records"] for s in manifest["shards"])
    sizes = [os.path.getsize(tmp_path / "out" / s["path"]) for s in manifest["shards"]]
    assert sizes == [s["bytes"] for s in manifest["shards"]]
    assert max(sizes) <= limit_mb * (1 << 20) + record
    assert len(sizes) > 1
    assert [s["path"] for s in manifest["shards"]] == [f"run-{manifest['run_id']}/train-{i:05d}-of-{len(sizes):05d}"
                                                       ".tfrecord" for i in range(len(sizes))]
    assert not [f for f in os.listdir(tmp_path / "out") if ".tmp-" in f]


def test_non_empty_output_is_refused_unless_overwrite(tmp_path, tiny_model):
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), [pile_line("hello world")])
    _run([path], tmp_path / "out", tiny_model)
    with pytest.raises(FileExistsError, match="--overwrite"):
        _run([path], tmp_path / "out", tiny_model)
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="notes.txt"):
        _run([path], tmp_path / "out", tiny_model, "--overwrite")
    assert (tmp_path / "out" / "notes.txt").exists()


def test_subset_selection_and_fractional_epochs(tmp_path, tiny_model):
    lines = [pile_line(f"doc {i} " * 5, subset) for i in range(200) for subset in ("Books3", "Wikipedia (en)")]
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), lines)
    m = _run([path], tmp_path / "a", tiny_model, "--subsets", "uncopyrighted", "--epochs", "Wikipedia (en)=2.5")
    books, wiki = m["subsets"]["Books3"], m["subsets"]["Wikipedia (en)"]
    assert books["kept"] == 0 and books["filtered"] == {"subset_not_selected": 200}
    ratio = wiki["tokens_with_epochs"] / wiki["tokens"]
    assert 2.35 < ratio < 2.65  # 2 copies of every document, a third copy for about half of them
    assert m["totals"]["label_tokens"] == wiki["tokens_with_epochs"]
    again = _run([path], tmp_path / "b", tiny_model, "--subsets", "uncopyrighted", "--epochs", "Wikipedia (en)=2.5")
    assert again["subsets"] == m["subsets"] and run_free(again["shards"]) == run_free(m["shards"])


def test_model_without_eos_gives_a_clear_error(tmp_path, no_eos_model):
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), [pile_line("hello")])
    with pytest.raises(ValueError, match="no EOS id.*--eos_id"):
        _run([path], tmp_path / "out", no_eos_model)
    with pytest.raises(ValueError, match="--eos_id 3: .* is an ordinary token .*--allow_text_eos"):
        _run([path], tmp_path / "out2", no_eos_model, "--eos_id", "3")
    m = _run([path], tmp_path / "out2", no_eos_model, "--eos_id", "3", "--allow_text_eos")
    assert m["tokenizer"]["eos_id"] == 3


def test_config_file_is_overridden_by_the_command_line(tmp_path, tiny_model):
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), [pile_line("hello world " * 50)])
    cfg = tmp_path / "job.toml"
    cfg.write_text(f'[pipeline]\ninput = ["{path}"]\nseq_len = 16\nsplit = "val"\n\n'
                   '[beam]\nrunner = "DirectRunner"\ndirect_running_mode = "in_memory"\ndirect_num_workers = 1\n')
    m = run.main(["--config", str(cfg), "--output_dir", str(tmp_path / "out"), "--tokenizer_model", tiny_model,
                  "--seq_len", "32"])
    assert m["seq_len"] == 32 and m["split"] == "val"
    assert run_free(m["shards"][0]["path"]).startswith("val-")
