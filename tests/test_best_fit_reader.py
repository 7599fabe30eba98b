"""The reader's batches of a best_fit output, and the provenance of its records (written as the job writes them)."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from manifest_shape import assert_job_shaped
from synthetic_output import tokenizer_entry
from test_best_fit import EOS, PAD, _random_docs, _stream

from pipeline.core import best_fit
from pipeline.format import framing, records


def _write_best_fit_output(out_dir, seq_len=16, window=4, shards=2, docs=None, features=None):
    """A best_fit output written as the job writes one: packed, serialized, framed, manifest last."""
    import hashlib

    from pipeline.format import manifest as manifest_lib
    from pipeline.io import outputs

    rng = np.random.default_rng(11)
    docs = docs if docs is not None else _random_docs(rng, 40, seq_len)
    stream, sizes = _stream(docs)
    out, _ = best_fit.pack_documents(stream, sizes, seq_len, window, PAD, final=True)
    block = framing.serialize_packed(out.tokens, out.segment_ids, out.positions, dtype=records.UINT16)
    bounds = np.linspace(0, len(out), shards + 1).astype(int)
    listed = []
    os.makedirs(out_dir, exist_ok=True)
    for s in range(shards):
        name = f"train-{s:05d}-of-{shards:05d}.tfrecord"
        data = b"".join(block.parts(range(bounds[s], bounds[s + 1])))
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
        listed.append({"path": name, "records": int(bounds[s + 1] - bounds[s]), "bytes": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {
        "format": manifest_lib.FORMAT, "format_version": manifest_lib.FORMAT_VERSION,
        "created_by": "tests/test_best_fit.py", "split": "train", "seq_len": seq_len,
        "features": features or records.feature_spec(seq_len, records.UINT16, False, records.BEST_FIT),
        "tokenizer": tokenizer_entry(vocab_size=65536, eos_id=EOS, pad_id=PAD),
        "shards": listed,
        "totals": {"records": len(out), "label_tokens": len(out) * seq_len - out.padding,
                   "bytes": sum(s["bytes"] for s in listed), "documents_kept": len(docs), "lines": len(docs)},
        "packing": {"mode": records.BEST_FIT, "window": window, "records_from_chunks": len(out),
                    "records_from_tails": 0, "padding_labels": out.padding, "documents_cut": out.documents_cut},
        "shuffle": {"num_shards": shards},
    }
    # `features` given: a manifest damaged on purpose (the reader must refuse it); else the job's shape.
    outputs.write_manifest(out_dir, manifest if features else assert_job_shaped(manifest))
    return out


def _rows(batches, *names):
    return {name: np.concatenate([np.asarray(b[name]) for b in batches]) for name in names}


def test_reader_batches_carry_boundaries_and_mask_padding(tmp_path):
    from pipeline import tfdata

    out = _write_best_fit_output(str(tmp_path))
    assert out.padding > 0
    ds = tfdata.make_dataset(str(tmp_path), batch_size=len(out) // 2, shuffle=False)
    got = _rows(list(ds.as_numpy_iterator()), "inputs", "labels", "loss_mask", "segment_ids", "positions")
    assert set(got["inputs"].shape) <= {len(out) // 2 * 2, 16}
    # Each batch row is one packed record: inputs/labels are its tokens, the mask its segment ids > 0.
    expected = {tuple(t.tolist()): (s, p) for t, s, p in zip(out.tokens, out.segment_ids, out.positions, strict=True)}
    for inputs, labels, mask, seg, pos in zip(*got.values(), strict=True):
        tokens = tuple([*inputs.tolist(), int(labels[-1])])
        assert labels[:-1].tolist() == inputs[1:].tolist()
        want_seg, want_pos = expected[tokens]
        assert seg.tolist() == want_seg.tolist() and pos.tolist() == want_pos.tolist()
        assert mask.tolist() == (want_seg > 0).astype(np.float32).tolist()
    assert int((got["loss_mask"] == 0).sum()) <= out.padding


def test_reader_masks_padding_without_returning_segment_ids(tmp_path):
    from pipeline import tfdata

    out = _write_best_fit_output(str(tmp_path), shards=1)
    ds = tfdata.make_dataset(str(tmp_path), batch_size=len(out), shuffle=False, features=())
    (batch,) = list(ds.as_numpy_iterator())
    assert set(batch) == {"inputs", "labels", "loss_mask"}
    assert int((batch["loss_mask"] == 0).sum()) == out.padding
    assert float(batch["loss_mask"].sum()) == len(out) * 16 - out.padding


def test_reader_keras_form_gives_zero_sample_weight_on_padding(tmp_path):
    from pipeline import tfdata

    out = _write_best_fit_output(str(tmp_path), shards=1)
    ds = tfdata.make_dataset(str(tmp_path), batch_size=len(out), shuffle=False, keras=True)
    ((x, y, weight),) = list(ds.as_numpy_iterator())
    assert set(x) == {"inputs", records.SEGMENT_IDS, records.POSITIONS}
    assert weight.tolist() == (x[records.SEGMENT_IDS] > 0).astype(np.float32).tolist()
    assert int((weight == 0).sum()) == out.padding
    assert y.shape == x["inputs"].shape


def test_reader_refuses_a_best_fit_output_without_segment_ids(tmp_path):
    from pipeline import tfdata
    from pipeline.format.manifest import ManifestError

    _write_best_fit_output(str(tmp_path), shards=1,
                           features={records.TOKENS: {"kind": "bytes", "dtype": "uint16", "shape": [17]}})
    with pytest.raises(ManifestError, match="segment_ids"):
        tfdata.make_dataset(str(tmp_path), batch_size=2, shuffle=False)


def test_provenance_lookup_of_a_best_fit_record_names_its_documents_only(tmp_path):
    from pipeline.core import documents
    from pipeline.core.shuffle import Permutation
    from pipeline.format import provenance as provenance_files
    from pipeline.format.manifest import manifest_path

    rng = np.random.default_rng(5)
    docs = _random_docs(rng, 30, 16)
    out = _write_best_fit_output(str(tmp_path), shards=1, docs=docs)
    name = provenance_files.file_name("train", 0)
    os.makedirs(tmp_path / "provenance")
    data = provenance_files.encode([((0, 0, 0, 0), len(out), out.spans)])
    (tmp_path / name).write_bytes(data)
    # The entry the job writes for a provenance file (pipeline/beam/tfrecord/output.py WriteProvenanceFn).
    entry = {"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    # One input file's validation counts, as the job lists every input (pipeline/beam/manifest.py).
    manifest = {"seq_len": 16, "totals": {"records": len(out)}, "shuffle": {"seed": 3, "num_shards": 1},
                "provenance": {"files": [entry]}, "inputs": [documents.file_stats()]}
    index = provenance_files.ProvenanceIndex(manifest_path(str(tmp_path)), manifest)
    perm = Permutation(len(out), 3)
    for g in range(len(out)):
        (spans,) = index.spans([0], [int(perm(np.array([g]))[0])])
        assert (spans[:, 0] >= 0).all()
        text = [docs[line - 1][first:first + n] for _, line, first, n in spans.tolist()]
        assert np.concatenate(text).tolist() == out.tokens[g, 1:][out.segment_ids[g] > 0].tolist()
