"""What users arrive with: TFDS loads a TFRecord output, Megatron's --data-path survives reruns, habits' flags.

- `tfds.builder_from_directory(OUT).as_dataset(split=...)` yields every record of the output, in
  shard order, with the same tokens as the shards hold (read here with plain TFRecord parsing).
- A Megatron output's `data-path` line names `OUT/latest/...`, the same on a rerun, and the link
  follows the committed run; an interrupted --overwrite leaves nothing that blocks the next one.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from corpus_helpers import FAST_BEAM
from sample_corpus import write_sample_corpus

from pipeline.cli import data_path as data_path_cli
from pipeline.cli import main as main_module
from pipeline.cli import run
from pipeline.core.options import UsageError
from pipeline.format import megatron as fmt
from pipeline.format import records
from pipeline.format import tfds as tfds_meta
from pipeline.io.outputs import LATEST_NAME

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("pile")
    write_sample_corpus(str(root), train_files=2, docs_per_file=6)
    return str(root / "train" / "*.jsonl.zst")


def _run(corpus, out, model, *extra):
    return run.main(["--input", corpus, "--output_dir", str(out), "--tokenizer_model", model, "--seq_len", "256",
                     "--shard_size_mb", "0.03", *extra, *FAST_BEAM])


def _records_in_shard_order(out: Path, manifest: dict) -> list[dict]:
    """Each record's features as numpy, from the shard files alone."""
    import tensorflow as tf

    dtype = np.dtype("<u2") if manifest["features"]["tokens"]["dtype"] == "uint16" else np.dtype("<i4")
    got = []
    for shard in manifest["shards"]:
        for raw in tf.data.TFRecordDataset(str(out / shard["path"])).as_numpy_iterator():
            example = tf.train.Example.FromString(raw).features.feature
            got.append({key: np.frombuffer(example[key].bytes_list.value[0], dtype)
                        for key in (records.TOKENS, records.SEGMENT_IDS, records.POSITIONS) if key in example}
                       | {"valid_labels": list(example[records.VALID_LABELS].int64_list.value)})
    return got


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--document_boundaries"]], ids=["plain", "boundaries"])
def test_tfds_loads_the_output_with_its_own_reader(corpus, tiny_model, tmp_path, extra):
    import tensorflow_datasets as tfds

    out = tmp_path / "out"
    manifest = _run(corpus, out, tiny_model, *extra)
    assert len(manifest["shards"]) > 1
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.splits["train"].num_examples == manifest["totals"]["records"]
    assert builder.info.splits["train"].num_shards == len(manifest["shards"])
    in_order = tfds.ReadConfig(interleave_cycle_length=1)  # one shard after the other
    loaded = list(builder.as_dataset(split="train", shuffle_files=False, read_config=in_order).as_numpy_iterator())
    want = _records_in_shard_order(out, manifest)
    assert len(loaded) == len(want) == manifest["totals"]["records"]
    for got, expected in zip(loaded, want, strict=True):
        assert got["tokens"].dtype == np.uint16 and got["tokens"].shape == (257,)
        for key in ("tokens", "segment_ids", "positions"):
            assert (key in got) == (key in expected)
            if key in got:
                assert np.array_equal(got[key], expected[key]), key
        # Absent in all but the padded record: TFDS fills an optional int64 with its minimum.
        assert int(got["valid_labels"]) == (expected["valid_labels"] or [np.iinfo(np.int64).min])[0]
    padded = sum(int(r["valid_labels"]) != np.iinfo(np.int64).min for r in loaded)
    assert padded == manifest["packing"]["padded_records"]


def test_tfds_metadata_is_a_function_of_the_manifest_and_refuses_unnamed_shards():
    manifest = {"split": "train", "created_by": "pile-pipeline 0.1.0", "run_id": "0123456789abcdef",
                "format_version": 1, "features": records.feature_spec(8, np.dtype("<u2"), False),
                "shards": [{"path": f"run-0123456789abcdef/train-{i:05d}-of-00002.tfrecord", "records": 3 + i,
                            "bytes": 100} for i in range(2)]}
    files = tfds_meta.metadata(manifest)
    info = json.loads(files["dataset_info.json"])
    assert info["splits"] == [{"filepathTemplate": "run-0123456789abcdef/{SPLIT}-{SHARD_X_OF_Y}.tfrecord",
                               "name": "train", "numBytes": "200", "shardLengths": ["3", "4"]}]
    assert files == tfds_meta.metadata(json.loads(json.dumps(manifest)))
    manifest["shards"][1]["path"] = "run-0123456789abcdef/train-00005-of-00002.tfrecord"
    with pytest.raises(ValueError, match="is not shard 1 of 2"):
        tfds_meta.metadata(manifest)


@pytest.mark.slow
def test_overwrite_removes_tfds_metadata_even_without_a_manifest(corpus, tiny_model, tmp_path):
    import tensorflow_datasets as tfds

    out = tmp_path / "out"
    _run(corpus, out, tiny_model)
    assert {"dataset_info.json", "features.json"} <= set(os.listdir(out))
    (out / "manifest.json").unlink()  # an --overwrite interrupted right after removing the manifest
    manifest = _run(corpus, out, tiny_model, "--overwrite")
    assert tfds.builder_from_directory(str(out)).info.splits["train"].num_examples == manifest["totals"]["records"]


@pytest.mark.slow
def test_megatron_data_path_names_the_latest_link_and_a_rerun_moves_it(corpus, tiny_model, tmp_path):
    out = tmp_path / "meg"
    first = _run(corpus, out, tiny_model, "--output_format", "megatron")
    assert os.readlink(out / LATEST_NAME) == f"run-{first['run_id']}"
    line = data_path_cli.data_path_line(str(out))
    prefixes = line.split()[1::2]
    assert prefixes and all(p.startswith(f"{out}/{LATEST_NAME}/train-") for p in prefixes)
    assert all(os.path.exists(p + ".bin") and os.path.exists(p + ".idx") for p in prefixes)
    assert f"{out}/{LATEST_NAME}/train-" in fmt.format_summary(first, root=str(out), link=LATEST_NAME) or len(
        first["shards"]) > 16
    second = _run(corpus, out, tiny_model, "--output_format", "megatron", "--overwrite")
    assert second["run_id"] != first["run_id"]
    assert os.readlink(out / LATEST_NAME) == f"run-{second['run_id']}"
    assert data_path_cli.data_path_line(str(out)) == line
    assert not [n for n in os.listdir(out) if ".tmp-" in n]
    # An output whose link is gone (or never there: an object store) names its run directory.
    (out / LATEST_NAME).unlink()
    assert f"{out}/run-{second['run_id']}/train-" in data_path_cli.data_path_line(str(out))
    # A leftover link without its manifest does not block --overwrite.
    os.symlink(f"run-{second['run_id']}", out / LATEST_NAME)
    (out / "manifest.json").unlink()
    third = _run(corpus, out, tiny_model, "--output_format", "megatron", "--overwrite")
    assert os.readlink(out / LATEST_NAME) == f"run-{third['run_id']}"


@pytest.mark.slow
def test_version_and_megatron_habits():
    result = subprocess.run([sys.executable, "-m", "pipeline.cli.main", "--version"], cwd=REPO,
                            capture_output=True, text=True, check=True)
    assert result.stdout.startswith("pile-pipeline ") and "Python 3." in result.stdout
    assert "--version" in main_module.usage()
    for flag, ours in [("--json-keys", "--text_key"), ("--output-prefix", "--output_dir")]:
        with pytest.raises(UsageError, match=f"unknown flag {flag} \\(did you mean {ours}\\?"):
            run.parse_args(["--input", "x.jsonl", "--output_dir", "o", "--tokenizer_model", "m", flag, "text"])
