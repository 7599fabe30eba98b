"""Which documents were in step k: spans recorded by the pipeline (`--provenance`), looked up by
`pile-pipeline provenance`, re-tokenized and compared with the tokens the reader gives at that step.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import sentencepiece as spm
from corpus_helpers import FAST_BEAM, run_free

from pipeline.cli import main as cli_main
from pipeline.cli import provenance as command
from pipeline.cli import run
from pipeline.core import packing, provenance
from pipeline.format.manifest import ManifestError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(REPO, "tokenizers", "sample", "sample.model")
SUBSETS = ["Pile-CC", "Wikipedia (en)", "Github", "ArXiv"]
SEQ_LEN, GLOBAL, SEED = 16, 8, 23


def _corpus(root) -> list[str]:
    paths = []
    for f in range(2):
        path = root / f"part{f}.jsonl"
        with open(path, "w", encoding="utf-8") as out:
            for i in range(45):
                words = " ".join(f"the river {j * i + f} meets {SUBSETS[i % 4].lower()}" for j in range(i % 7 + 1))
                out.write(json.dumps({"text": f"Doc {f}.{i}: {words}.", "meta": {"pile_set_name": SUBSETS[i % 4]}}))
                out.write("\n")
        paths.append(str(path))
    return paths


def _run(paths, out, *extra):
    args = ["--input", *paths, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", str(SEQ_LEN),
            "--shard_size_mb", "0.004", "--document_boundaries", "--add_bos", "--epochs", "Pile-CC=2",
            "--chunk_mb", "0.002", *FAST_BEAM, *extra]
    return run.main(args)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("provenance")
    paths = _corpus(root)
    with_spans = _run(paths, root / "with", "--provenance")
    without = _run(paths, root / "without")
    return root / "with", with_spans, without


def _reader_step(out, step: int, dp_size: int) -> dict:
    """Global batch `step` as the reader gives it, put together from `dp_size` ranks."""
    from pipeline import tfdata

    parts = []
    for rank in range(dp_size):
        ds = tfdata.make_dataset(str(out), global_batch_size=GLOBAL, dp_rank=rank, dp_size=dp_size, seed=SEED,
                                 num_epochs=None)
        parts.append(next(iter(ds.skip(step))))
    return {k: np.concatenate([p[k].numpy() for p in parts]) for k in ("labels", "loss_mask")}


@pytest.mark.slow
def test_the_shards_are_the_same_bytes_with_or_without_provenance(written):
    _, with_spans, without = written
    assert run_free(with_spans["shards"]) == run_free(without["shards"])
    assert "provenance" not in without
    files = with_spans["provenance"]["files"]
    assert [run_free(f["path"]) for f in files] == ["provenance/train-00000.npz", "provenance/train-00001.npz",
                                                    "provenance/train-final.npz"]
    # Several chunks per file, tails joined per file and across files: every kind of record block.
    assert with_spans["packing"]["records_from_tails"] > 0 and with_spans["packing"]["padded_records"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("step,dp_size", [(0, 1), (5, 2), (11, 4), (30, 2)])
def test_the_documents_of_step_k_retokenized_are_the_steps_tokens(written, step, dp_size):
    from pipeline import tfdata

    out, manifest, _ = written
    sp = spm.SentencePieceProcessor(model_file=MODEL)
    bos, eos = manifest["tokenizer"]["bos_id"], manifest["tokenizer"]["eos_id"]
    assert step < 2 * tfdata.steps_per_epoch(str(out), GLOBAL)  # step 30 is in the second epoch
    batch = _reader_step(out, step, dp_size)
    sources = command.step_documents(str(out), step, GLOBAL, SEED)
    assert [r.position for r in sources] == list(range(GLOBAL))
    for row, source in enumerate(sources):
        tokens = []
        for piece in source.pieces:
            document = [bos] + sp.encode(piece.text) + [eos]
            assert piece.first_token + piece.tokens <= len(document)
            assert piece.subset in SUBSETS and piece.file.endswith(".jsonl")
            tokens += document[piece.first_token : piece.first_token + piece.tokens]
        real = batch["loss_mask"][row] > 0
        assert tokens == batch["labels"][row][real].tolist(), (step, row)


@pytest.mark.slow
def test_the_command_prints_the_documents(written, capsys):
    out, _, _ = written
    assert cli_main.main(["provenance", str(out), "--step", "3", "--global_batch_size", str(GLOBAL),
                          "--seed", str(SEED)]) == 0
    text = capsys.readouterr().out
    assert text.count("part0.jsonl:") + text.count("part1.jsonl:") >= GLOBAL
    assert "Doc " in text and "tokens " in text and any(s in text for s in SUBSETS)


@pytest.mark.slow
def test_an_output_without_provenance_is_refused_clearly(written, capsys):
    out = written[0].parent / "without"
    with pytest.raises(ManifestError, match="--provenance"):
        command.step_documents(str(out), 0, GLOBAL, SEED)
    assert cli_main.main(["provenance", str(out), "--step", "0", "--global_batch_size", "8", "--seed", "1"]) == 2
    assert "--provenance" in capsys.readouterr().err


def test_spans_follow_the_labels_through_packing():
    docs = [np.arange(1, 8), np.arange(10, 13), np.arange(20, 30)]
    stream = packing.build_stream(docs, separator_id=0)
    stream.spans = provenance.document_spans(4, [3, 5, 9], [len(d) for d in docs])
    records, _, rest = packing.pack(stream, 6)  # 20 labels: 3 records of 6, 2 left over
    head = provenance.split_spans(stream.spans, 18)[0]
    for j, record in enumerate(records):
        spans = provenance.cut(head, 6 * j, 6 * (j + 1))
        rebuilt = [t for f, line, first, n in spans.tolist() for t in docs[[3, 5, 9].index(line)][first : first + n]]
        assert rebuilt == record[1:].tolist()
    assert rest.spans.tolist() == [[4, 9, 8, 2]]
    joined = packing.concat_pieces([rest, rest], separator_id=0)
    assert joined.spans.tolist() == [[4, 9, 8, 2], [4, 9, 8, 2]]
    assert packing.concat_pieces([rest, packing.Piece(0, np.ones(2, np.int32), np.ones(2, bool))], 0).spans is None


def _tampered_copy(out, tmp_path, change, manifest_follows: bool) -> str:
    """A copy of an output whose first provenance file's spans are changed (and its manifest entry with them)."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy, symlinks=True)
    manifest = json.loads((copy / "manifest.json").read_text())
    entry = manifest["provenance"]["files"][0]
    path = copy / entry["path"]
    with np.load(path) as z:
        arrays = {k: z[k].copy() for k in z.files}
    change(arrays["spans"])
    np.savez_compressed(path, **arrays)
    if manifest_follows:  # as if the manifest had been edited to match
        import hashlib

        entry["bytes"], entry["sha256"] = path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()
        (copy / "manifest.json").write_text(json.dumps(manifest))
    return str(copy)


def _line_shifted(spans):
    spans[:, 1] += 1


def _file_index(value):
    def change(spans):
        spans[spans[:, 0] >= 0, 0] = value
    return change


CHANGES = [(_line_shifted, False, "a sha256 other than the manifest's"),
           (_file_index(-1), False, "a sha256 other than the manifest's"),
           (_file_index(7), True, r"names no line of the 2 input files")]


@pytest.mark.slow
@pytest.mark.parametrize("change,manifest_follows,message", CHANGES)
def test_a_provenance_file_changed_since_the_job_is_refused_in_one_line(written, tmp_path, capsys, change,
                                                                         manifest_follows, message):
    out = _tampered_copy(written[0], tmp_path, change, manifest_follows)
    argv = ["provenance", out, "--step", "3", "--global_batch_size", str(GLOBAL), "--seed", str(SEED)]
    assert cli_main.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert re.search(message, err), err


@pytest.mark.slow
@pytest.mark.parametrize("change,manifest_follows,message", [(_file_index(-1), True, "names no line of the"),
                                                             (_file_index(10**6), True, "names no line of the"),
                                                             (_line_shifted, False, "other than the manifest's")])
def test_a_stores_provenance_file_is_checked_too(doc_stores, tmp_path, capsys, change, manifest_follows, message):
    out = _tampered_copy(doc_stores[0], tmp_path, change, manifest_follows)
    argv = ["provenance", out, "--step", "2", "--global_batch_size", "4", "--seed", "3", "--seq_len", "64"]
    assert cli_main.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err


@pytest.mark.slow
@pytest.mark.parametrize("flag,value", [("--step", "-1"), ("--global_batch_size", "0"), ("--epoch", "-2")])
def test_a_negative_step_or_an_empty_batch_is_refused_naming_the_flag(written, capsys, flag, value):
    argv = {"--step": "3", "--global_batch_size": str(GLOBAL), "--epoch": "0", flag: value}
    assert cli_main.main(["provenance", str(written[0]), "--seed", str(SEED),
                          *[x for k, v in argv.items() for x in (k, v)]]) == 2
    assert capsys.readouterr().err == f"error: {flag} {value}: must be >= {0 if flag != '--global_batch_size' else 1}\n"

