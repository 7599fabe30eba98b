"""`--packing best_fit` through the whole job: invariants on the written shards, runners, reader, provenance.

The job's best_fit output is checked against the documents themselves, re-tokenized here: every
token of every document copy is a label exactly once, with its own value; no document that fits
in `seq_len` is cut; the padding the manifest counts is the loss mask's zeros; and the bytes are
the same on 1 and 2 workers and on PortableRunner.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import zstandard
from corpus_helpers import FAST_BEAM, output_digests, run_free
from sample_corpus import write_sample_corpus

from pipeline.cli import provenance as provenance_cli
from pipeline.cli import run
from pipeline.format import records

REPO = Path(__file__).resolve().parents[1]
SEQ_LEN = 128
EPOCHS = "Pile-CC=2,Github=0.5,Wikipedia (en)=3"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pile_bf")
    write_sample_corpus(str(root), train_files=3, docs_per_file=40)
    return root


def _argv(corpus: Path, out: Path, model: str, *more: str) -> list[str]:
    return ["--input", str(corpus / "train" / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model", model,
            "--seq_len", str(SEQ_LEN), "--chunk_mb", "0.05", "--shard_size_mb", "0.1", "--packing", "best_fit",
            "--packing_window", "8", "--epochs", EPOCHS, "--provenance", "--tokenizer_backend", "auto",
            "--overwrite", *more]


def _digests(out: Path) -> dict:
    """Every file's sha256; the manifest without what names the engine (its self-check's timing differs)."""
    digests = output_digests(out)
    manifest = run_free(json.loads((out / "manifest.json").read_text()))
    del manifest["tokenizer"]["backend"], manifest["config"]["tokenizer_backend"], manifest["created_by"]
    digests["manifest.json"] = manifest
    return digests


@pytest.fixture(scope="module")
def best_fit_run(corpus, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("bf_out")
    argv = _argv(corpus, out, tiny_model)
    manifest = run.main(argv + FAST_BEAM)
    return argv, out, manifest, _digests(out)


def _shard_records(out: Path, manifest: dict) -> list[dict]:
    """Every record of every shard, in shard order: tokens, segment ids, positions (numpy)."""
    import tensorflow as tf

    dtype = np.dtype(manifest["features"][records.TOKENS]["dtype"]).newbyteorder("<")
    rows = []
    for shard in manifest["shards"]:
        for raw in tf.data.TFRecordDataset(str(out / shard["path"])).as_numpy_iterator():
            feature = tf.train.Example.FromString(raw).features.feature
            rows.append({key: np.frombuffer(feature[key].bytes_list.value[0], dtype).astype(np.int64)
                         for key in (records.TOKENS, records.SEGMENT_IDS, records.POSITIONS)})
    return rows


def _documents(manifest: dict, model: str) -> dict:
    """(input path, line number) -> the document's tokens as packed (EOS after it), re-tokenized here."""
    sp = spm.SentencePieceProcessor(model_file=model)
    eos = manifest["tokenizer"]["eos_id"]
    docs = {}
    for entry in manifest["inputs"]:
        data = zstandard.ZstdDecompressor().stream_reader(open(entry["path"], "rb")).read()
        for number, line in enumerate(data.splitlines(), start=1):
            text = json.loads(line)["text"]
            if text:
                docs[entry["path"], number] = [*sp.encode(text), eos]
    return docs


@pytest.mark.slow
def test_every_token_is_a_label_exactly_once_and_no_fitting_document_is_cut(best_fit_run, tiny_model):
    _, out, manifest, _ = best_fit_run
    assert manifest["packing"]["mode"] == "best_fit" and manifest["packing"]["window"] == 8
    rows = _shard_records(out, manifest)
    assert len(rows) == manifest["totals"]["records"] > 0
    # The provenance command's view of one global batch holding every record, in shard order.
    sources = provenance_cli.step_documents(str(out), 0, len(rows), None, shuffle=False)
    assert len(sources) == len(rows)
    docs = _documents(manifest, tiny_model)
    covered: dict = {}  # (file, line) -> times each token was a label
    pieces_of: dict = {}  # (file, line) -> number of pieces over all records
    shard_rows = iter(rows)
    index = {(s["path"], i): next(shard_rows) for s in manifest["shards"] for i in range(s["records"])}
    for source in sources:
        row = index[source.shard, source.record]
        real = row[records.TOKENS][1:][row[records.SEGMENT_IDS] > 0]
        got = []
        for piece in source.pieces:
            tokens = docs[piece.file, piece.line]
            got += tokens[piece.first_token:piece.first_token + piece.tokens]
            seen = covered.setdefault((piece.file, piece.line), np.zeros(len(tokens), np.int64))
            seen[piece.first_token:piece.first_token + piece.tokens] += 1
            pieces_of[piece.file, piece.line] = pieces_of.get((piece.file, piece.line), 0) + 1
        assert real.tolist() == got, "a record's labels are not its documents' tokens"
        # Padding only at the end, with segment id 0 and position 0.
        seg = row[records.SEGMENT_IDS]
        assert (seg[len(real):] == 0).all() and (row[records.POSITIONS][len(real):] == 0).all()
    epochs = dict(part.split("=") for part in EPOCHS.split(","))
    subset_of = {}
    for entry in manifest["inputs"]:
        data = zstandard.ZstdDecompressor().stream_reader(open(entry["path"], "rb")).read()
        for number, line in enumerate(data.splitlines(), start=1):
            subset_of[entry["path"], number] = json.loads(line)["meta"]["pile_set_name"]
    cut = 0
    for key, tokens in docs.items():
        times = covered.get(key)
        copies = 0 if times is None else int(times[0])
        wanted = float(epochs.get(subset_of[key], 1))
        assert copies in (int(wanted), int(np.ceil(wanted))), key  # fractional epochs pick whole documents
        if copies:
            assert (times == copies).all(), f"{key}: a token is a label {set(times.tolist())} times"
            if len(tokens) <= SEQ_LEN:
                assert pieces_of[key] == copies, f"{key}: a document of {len(tokens)} tokens was cut"
            else:
                cut += copies
    assert cut > 0, "the corpus should hold documents longer than seq_len"
    assert manifest["packing"]["documents_cut"] == cut
    assert sum(s.get("documents_cut", 0) for s in manifest["subsets"].values()) == cut


@pytest.mark.slow
def test_padding_counted_is_the_loss_masks_zeros(best_fit_run):
    from pipeline import tfdata

    _, out, manifest, _ = best_fit_run
    padding = manifest["packing"]["padding_labels"]
    assert padding > 0
    assert sum(s.get("padding_labels", 0) for s in manifest["subsets"].values()) == padding
    assert manifest["totals"]["label_tokens"] == manifest["totals"]["records"] * SEQ_LEN - padding
    assert sum(s["tokens_with_epochs"] for s in manifest["subsets"].values()) == manifest["totals"]["label_tokens"]
    ds = tfdata.make_dataset(str(out), batch_size=1, shuffle=False, keras=True)  # batch 1: every record
    zeros = records_seen = 0
    for x, y, weight in ds.as_numpy_iterator():
        assert set(x) == {"inputs", records.SEGMENT_IDS, records.POSITIONS}
        assert weight.tolist() == (x[records.SEGMENT_IDS] > 0).astype(np.float32).tolist()
        assert y.shape == x["inputs"].shape
        zeros += int((weight == 0).sum())
        records_seen += len(weight)
    assert records_seen == manifest["totals"]["records"]
    assert zeros == padding


@pytest.mark.slow
def test_reader_batches_carry_document_boundaries(best_fit_run):
    from pipeline import tfdata

    _, out, manifest, _ = best_fit_run
    ds = tfdata.make_dataset(str(out), batch_size=4, shuffle=False)
    batch = next(iter(ds.as_numpy_iterator()))
    seg, pos = batch[records.SEGMENT_IDS], batch[records.POSITIONS]
    assert batch["labels"][:, :-1].tolist() == batch["inputs"][:, 1:].tolist()
    assert batch["loss_mask"].tolist() == (seg > 0).astype(np.float32).tolist()
    # Positions count from 0 at every new segment.
    starts = np.concatenate([np.ones((len(seg), 1), bool), seg[:, 1:] != seg[:, :-1]], axis=1) & (seg > 0)
    assert (pos[starts] == 0).all() and (pos[(seg > 0) & ~starts] > 0).all()


@pytest.mark.slow
def test_summary_shows_padding_and_documents_cut_per_subset(best_fit_run):
    from pipeline.format.summary import format_summary

    _, _, manifest, _ = best_fit_run
    text = format_summary(manifest, 1.0)
    header = text.splitlines()[0]
    assert "padding" in header and "cut" in header
    assert f"{manifest['packing']['documents_cut']} documents cut" in text
    assert "best_fit, window 8" in text


@pytest.mark.slow
def test_two_workers_write_the_same_bytes(best_fit_run, tmp_path):
    argv, out, _, digests = best_fit_run
    run.main(argv + ["--runner", "DirectRunner", "--direct_running_mode", "multi_threading",
                     "--direct_num_workers", "2"])
    assert _digests(out) == digests


@pytest.mark.slow
def test_portable_runner_writes_the_same_bytes(best_fit_run, monkeypatch):
    from apache_beam.runners.portability import portable_runner

    argv, out, _, digests = best_fit_run
    submitted = []
    original = portable_runner.JobServiceHandle.submit
    monkeypatch.setattr(portable_runner.JobServiceHandle, "submit",
                        lambda self, *a, **k: submitted.append(1) or original(self, *a, **k))
    run.main(argv + ["--config", str(REPO / "beam_configs" / "portable_embed.toml")])
    assert submitted, "PortableRunner did not go through the job service"
    assert _digests(out) == digests


@pytest.mark.slow
def test_the_sentencepiece_engine_writes_the_same_bytes(best_fit_run):
    argv, out, _, digests = best_fit_run
    i = argv.index("--tokenizer_backend")
    run.main(argv[:i] + ["--tokenizer_backend", "sentencepiece"] + argv[i + 2:] + FAST_BEAM)
    assert _digests(out) == digests


def test_megatron_output_refuses_best_fit(corpus, tiny_model, tmp_path, caplog):
    argv = _argv(corpus, tmp_path / "meg", tiny_model, "--output_format", "megatron")
    assert run.cli(argv + FAST_BEAM) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "--packing best_fit" in errors[0] and "Megatron" in errors[0]
    assert not (tmp_path / "meg" / "manifest.json").exists()


def test_concat_manifest_records_no_packing_options(corpus, tiny_model, tmp_path):
    from pipeline.config.job import PipelineConfig

    config = PipelineConfig(inputs=("x",), output_dir=str(tmp_path), tokenizer_model=tiny_model)
    assert "packing" not in config.to_json() and "packing_window" not in config.to_json()
    best = PipelineConfig(inputs=("x",), output_dir=str(tmp_path), tokenizer_model=tiny_model, packing="best_fit")
    assert best.document_boundaries and best.to_json()["packing"] == "best_fit"
    with pytest.raises(ValueError, match="--packing_window"):
        PipelineConfig(inputs=("x",), output_dir=str(tmp_path), tokenizer_model=tiny_model, packing_window=0)


@pytest.mark.slow
def test_provenance_command_names_the_documents_of_a_shuffled_step(best_fit_run, tiny_model, capsys):
    from pipeline import tfdata

    _, out, manifest, _ = best_fit_run
    step, batch = 3, 4
    assert provenance_cli.cli([str(out), "--step", str(step), "--global_batch_size", str(batch), "--seed", "5"]) == 0
    printed = capsys.readouterr().out
    sources = provenance_cli.step_documents(str(out), step, batch, 5)
    assert len(sources) == batch and all(f"{p.file}:{p.line}" in printed for s in sources for p in s.pieces)
    # The reader's batch of that step, with that seed: its labels are those documents' tokens.
    got = list(tfdata.make_dataset(str(out), batch_size=batch, seed=5).take(step + 1).as_numpy_iterator())[step]
    docs = _documents(manifest, tiny_model)
    for source, labels, mask in zip(sources, got["labels"], got["loss_mask"], strict=True):
        want = [t for p in source.pieces for t in docs[p.file, p.line][p.first_token:p.first_token + p.tokens]]
        assert labels[mask > 0].tolist() == want


@pytest.mark.parametrize("flags", [[], ["--packing", "concat", "--document_boundaries"]])
def test_segment_ids_wider_than_uint16_records_are_refused(corpus, tiny_model, tmp_path, caplog, flags):
    """A small vocabulary's uint16 records cannot hold the positions of a sequence over 65,536 labels."""
    argv = _argv(corpus, tmp_path / "wide", tiny_model, "--seq_len", "70000", *flags)
    assert run.cli(argv + FAST_BEAM) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "--seq_len 70000" in errors[0] and "uint16" in errors[0]
    assert not (tmp_path / "wide" / "manifest.json").exists()
