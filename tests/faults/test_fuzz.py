"""Fuzzing (Hypothesis) of the two parsers of untrusted bytes: the line validator and the manifest
loader. Whatever they are given, the validator returns a document or raises BadRecord, and the
loader returns a manifest or raises ManifestError; no other exception escapes. Bounded in time:
a fixed number of examples, derandomized (the same examples every run), a deadline per example.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.core.documents import BadRecord, Document, Line, Schema, file_stats, parse_document, validate
from pipeline.format.manifest import FORMAT, FORMAT_VERSION, ManifestError, load_manifest, parse_manifest
from pipeline.io.outputs import own_listing

BOUNDED = settings(max_examples=400, deadline=5000, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MAX_LINE = 1 << 12

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
SUBSETS = ["Pile-CC", "Wikipedia (en)", "other", "", "\ud800", "x" * 300]
SCHEMAS = [Schema(), Schema("body", "source.name", None, True), Schema("a.b.c", "meta.pile_set_name", "Pile-CC"),
           Schema("text", "s", "other", True)]


def pile_like():
    """JSON objects near the Pile's layout: the keys the validator looks for, with any values."""
    meta = st.dictionaries(st.sampled_from(["pile_set_name", "name", "x"]), json_values | st.sampled_from(SUBSETS),
                           max_size=3)
    return st.fixed_dictionaries({}, optional={"text": json_values | st.text(), "meta": meta | json_values,
                                               "body": st.text(), "source": meta})


def encodings(obj) -> st.SearchStrategy[bytes]:
    text = json.dumps(obj, ensure_ascii=False, allow_nan=True)
    return st.sampled_from([text.encode("utf-8", "surrogatepass"), json.dumps(obj).encode(),
                            b"\xef\xbb\xbf" + json.dumps(obj).encode(), json.dumps(obj).encode() + b"\r"])


lines = st.one_of(
    st.binary(max_size=600),
    json_values.map(lambda v: json.dumps(v).encode()),
    pile_like().flatmap(encodings),
    st.builds(lambda a, b: a + b, pile_like().map(lambda o: json.dumps(o).encode()), st.binary(max_size=20)),
)


def _check_line(data: bytes, schema: Schema, oversized: int) -> None:
    line = Line(1, 0, data, oversized)
    try:
        doc = parse_document(line, MAX_LINE, schema)
    except BadRecord as bad:
        assert bad.reason and isinstance(bad.reason, str)
        return
    assert isinstance(doc, Document) and isinstance(doc.text, str) and isinstance(doc.subset, str)
    doc.text.encode("utf-8")  # a document's text is always writable as UTF-8
    assert not oversized


@pytest.mark.slow
@BOUNDED
@given(data=lines, schema=st.sampled_from(SCHEMAS), oversized=st.sampled_from([0, 0, 0, MAX_LINE + 1]))
def test_the_line_validator_returns_a_document_or_a_bad_record(data, schema, oversized):
    _check_line(data, schema, oversized)
    stats = file_stats()
    try:
        validate(Line(1, 0, data, oversized), MAX_LINE, schema, stats)
    except BadRecord:
        pass
    assert stats["byte_order_mark"] in (0, 1)


def _valid_manifest() -> dict:
    run = "0123456789abcdef"
    shard = {"path": f"run-{run}/train-00000-of-00001.tfrecord", "records": 3, "bytes": 300, "sha256": "ab" * 32}
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "run_id": run, "split": "train", "seq_len": 8,
        "features": {"tokens": {"dtype": "uint16", "shape": [9]}},
        "tokenizer": {"model": "m.model", "sha256": "cd" * 32, "eos_id": 2, "bos_id": 1},
        "shards": [shard], "totals": {"records": 3, "lines": 10, "bytes": 300, "documents_kept": 9},
        "subsets": {"Pile-CC": {"documents": 10, "kept": 9, "filtered": {"empty_text": 1}}},
        "dead_letters": {"by_reason": {}, "records": 0, "files": []},
        "packing": {"remainder_policy": "pad"}, "shuffle": {"seed": 0, "num_shards": 1, "method": "feistel"},
        "inputs": [{"path": "in/00.jsonl.zst", "lines": 10}], "config": {"max_line_mb": 64.0, "tokenizer_model": "m"},
        "provenance": {"files": [{"path": f"run-{run}/provenance/train-00000.npz", "bytes": 10, "sha256": "ef" * 32}]},
    }


def test_the_valid_manifest_of_the_fuzz_loads():
    assert parse_manifest(json.dumps(_valid_manifest()).encode(), "m.json") == _valid_manifest()


@st.composite
def mutated_manifests(draw):
    """The valid manifest with one value somewhere (top level or one level down) replaced or removed."""
    manifest = copy.deepcopy(_valid_manifest())
    key = draw(st.sampled_from(sorted(manifest)))
    target = manifest
    value = manifest[key]
    if isinstance(value, dict) and value and draw(st.booleans()):
        target, key = value, draw(st.sampled_from(sorted(value)))
    elif isinstance(value, list) and value and draw(st.booleans()):
        target, key = value, 0
        if isinstance(value[0], dict) and draw(st.booleans()):
            target, key = value[0], draw(st.sampled_from(sorted(value[0])))
    if draw(st.integers(0, 4)) == 0 and isinstance(target, dict):
        del target[key]
    else:
        target[key] = draw(json_values | st.sampled_from(["../x", "/etc/passwd", "run-0123456789abcdef/../x", None]))
    return manifest


manifest_bytes = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated_manifests().map(lambda m: json.dumps(m).encode()),
)


@BOUNDED
@given(data=manifest_bytes)
def test_the_manifest_loader_returns_a_manifest_or_a_manifest_error(data):
    try:
        manifest = parse_manifest(data, "out/manifest.json")
    except ManifestError:
        return
    assert isinstance(manifest, dict) and isinstance(manifest["shards"], list)
    for shard in manifest["shards"]:
        assert not shard["path"].startswith("/") and ".." not in shard["path"].split("/")
    try:
        own_listing(manifest)  # what --overwrite would remove: never widened by what it holds
    except ValueError:
        pass


@settings(max_examples=40, deadline=5000, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=manifest_bytes)
def test_load_manifest_from_disk_raises_only_manifest_errors(tmp_path, data):
    (tmp_path / "manifest.json").write_bytes(data)
    try:
        load_manifest(str(tmp_path))
    except ManifestError:
        pass
