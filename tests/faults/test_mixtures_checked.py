"""A mixture reads outputs of one tokenizer, seq_len and token dtype, and a malformed mixture.json is
one `MixtureError`: outputs the job wrote with two tokenizers are refused, as are sources that differ in
any field the job records of its tokenizer, and every malformed description.
"""

from __future__ import annotations

import json

import pytest
from corpus_helpers import FAST_BEAM, pile_line, write_lines
from fault_helpers import MODEL
from synthetic_output import write_output

from pipeline import tfdata
from pipeline.core.subsets import PILE_PAPER_EPOCHS
from pipeline.format.mixture import MixtureError, load_mixture

SEQ_LEN = 8


def _job(tmp, name, model, subset):
    from pipeline.cli import run

    corpus = write_lines(str(tmp / f"{name}.jsonl.zst"),
                         [pile_line(f"document {i} of {subset}: " + "some words in it " * (3 + i % 7), subset)
                          for i in range(40)])
    out = tmp / name
    run.main(["--input", corpus, "--output_dir", str(out), "--tokenizer_model", model, "--seq_len", "16",
              *FAST_BEAM])
    return str(out)


@pytest.mark.slow
def test_outputs_the_job_wrote_with_two_tokenizers_are_refused(tmp_path, tiny_model):
    """Both sides' `tokenizer.model_sha256` (a key the job never wrote) were None: batches of mixed ids, silently."""
    first = _job(tmp_path, "a", MODEL, "ArXiv")
    same = _job(tmp_path, "b", MODEL, "Github")
    other = _job(tmp_path, "c", tiny_model, "Github")
    assert [s.name for s in tfdata.Mixture.of([("a", first, 1), ("b", same, 1)]).sources] == ["a", "b"]
    with pytest.raises(MixtureError, match=rf"{first}.* and {other}.* differ in tokenizer sha256"):
        tfdata.Mixture.of([("a", first, 1), ("c", other, 1)])
    spec = {"format": "pile-mixture", "format_version": 1, "weights": "tokens",
            "sources": [{"manifest": "a"}, {"manifest": "c"}]}
    (tmp_path / "mixture.json").write_text(json.dumps(spec))
    with pytest.raises(MixtureError, match="differ in tokenizer sha256"):
        tfdata.make_dataset(str(tmp_path / "mixture.json"), global_batch_size=4, seed=1)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixtures")
    write_output(str(root / "base"), [6, 5], seq_len=SEQ_LEN, subsets={"ArXiv": {"tokens": 88}})
    return root


@pytest.mark.parametrize("what,kw", [
    ("tokenizer sha256", {"tokenizer_sha256": "1" * 64}),
    ("tokenizer vocab_size", {"tokenizer": {"vocab_size": 32000}}),
    ("tokenizer bos_id", {"tokenizer": {"bos_id": 5}}),
    ("tokenizer eos_id", {"tokenizer": {"eos_id": 0}}),
    ("tokenizer pad_id", {"tokenizer": {"pad_id": -1}}),
    ("tokenizer unk_id", {"tokenizer": {"unk_id": 0}}),
    ("token dtype", {"dtype": "<i4"}),  # uint16 beside int32: the ids of one are not the other's
    ("seq_len", {"seq_len": 16}),
])
def test_a_source_differing_in_what_the_job_records_of_its_tokenizer_is_refused(base, tmp_path, what, kw):
    write_output(str(tmp_path / "other"), [4], **{"seq_len": SEQ_LEN, **kw})
    with pytest.raises(MixtureError, match=rf"base/manifest.json and .*other/manifest.json differ in {what} "):
        tfdata.Mixture.of([("base", str(base / "base"), 1), ("other", str(tmp_path / "other"), 1)])


def test_a_source_that_records_no_tokenizer_sha256_is_refused(base, tmp_path):
    manifest = write_output(str(tmp_path / "other"), [4], seq_len=SEQ_LEN)
    del manifest["tokenizer"]["sha256"]
    (tmp_path / "other" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(MixtureError, match="records no tokenizer sha256"):
        tfdata.Mixture.of([("base", str(base / "base"), 1), ("other", str(tmp_path / "other"), 1)])


def _spec(base, **over):
    spec = {"format": "pile-mixture", "format_version": 1,
            "sources": [{"name": "a", "manifest": str(base / "base"), "weight": 1}]}
    spec.update(over)
    return {k: v for k, v in spec.items() if v is not None}


@pytest.mark.parametrize("change,message", [
    ({"format": "pile-token-shards"}, "not a mixture description"),
    ({"format": None}, "not a mixture description"),
    ({"format_version": 2}, "format_version 2"),
    ({"sources": None}, "`sources` must be a non-empty list"),
    ({"sources": []}, "`sources` must be a non-empty list"),
    ({"sources": {"a": "base"}}, "`sources` must be a non-empty list"),
    ({"sources": ["base"]}, "source 0 must be an object with a `manifest`"),
    ({"sources": [{"name": "a", "weight": 1}]}, "source 0 must be an object with a `manifest`"),
    ({"sources": [{"name": "a", "manifest": 5, "weight": 1}]}, "source 0: `manifest` must be"),
    ({"sources": [{"name": "a", "manifest": "", "weight": 1}]}, "source 0: `manifest` must be"),
    ({"sources": [{"name": "", "manifest": "<base>", "weight": 1}]}, "source 0: the name must be a non-empty"),
    ({"sources": [{"name": "  ", "manifest": "<base>", "weight": 1}]}, "source 0: the name must be a non-empty"),
    ({"sources": [{"name": 5, "manifest": "<base>", "weight": 1}]}, "source 0: the name must be a non-empty"),
    ({"sources": [{"name": None, "manifest": "<base>", "weight": 1}]}, "source 0: the name must be a non-empty"),
    ({"sources": [{"name": "a", "manifest": "<base>", "weight": 1, "x": 1}]}, r"unknown keys \['x'\]"),
    ({"schedule": 5}, "`schedule` must be a list"),
    ({"schedule": "abc"}, "`schedule` must be a list"),
    ({"schedule": [{"step": 0, "weights": {"a": 1}}]}, "step 0 must be an integer >= 1"),
    ({"schedule": [{"step": True, "weights": {"a": 1}}]}, "must be an integer >= 1"),
    ({"schedule": [{"step": 4, "weights": {"a": 1}}, {"step": 4, "weights": {"a": 2}}]},
     r"schedule steps \[4, 4\] must be > 0 and increasing"),
    ({"schedule": [{"step": 5, "weights": {"a": 1}}, {"step": 4, "weights": {"a": 2}}]}, "increasing"),
    ({"weights": "epochs"}, "weights preset 'epochs'"),
    ({"extra": 1}, r"unknown keys \['extra'\]"),
])
def test_a_malformed_mixture_json_is_one_mixture_error(base, tmp_path, change, message):
    spec = _spec(base, **change)
    for source in spec.get("sources") if isinstance(spec.get("sources"), list) else []:
        if isinstance(source, dict) and source.get("manifest") == "<base>":
            source["manifest"] = str(base / "base")
    if change.get("weights"):
        for source in spec["sources"]:
            source.pop("weight")
    path = tmp_path / "mixture.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(MixtureError, match=message):
        load_mixture(str(path))


@pytest.mark.parametrize("data", [b"[]", b"[1, 2]", b"5", b"null", b'"mixture"', b"{", b"\xff\xfe"])
def test_a_mixture_json_that_is_not_an_object_is_one_mixture_error(tmp_path, data):
    path = tmp_path / "mixture.json"
    path.write_bytes(data)
    with pytest.raises(MixtureError, match="mixture.json"):
        load_mixture(str(path))


def test_the_lowest_schedule_step_is_1(base):
    mix = load_mixture(_spec(base, schedule=[{"step": 1, "weights": {"a": 2}}]))
    assert mix.schedule == ((0, (1.0,)), (1, (2.0,)))


def test_pile_paper_weights_need_per_subset_token_counts(base, tmp_path):
    assert load_mixture(_spec(base, weights="pile_paper", sources=[{"manifest": str(base / "base")}])
                        ).sources[0].weight == 88 * PILE_PAPER_EPOCHS["ArXiv"]
    write_output(str(tmp_path / "bare"), [4], seq_len=SEQ_LEN)  # no per-subset counts
    with pytest.raises(MixtureError, match="no per-subset token counts in the manifest, which `pile_paper` weighs"):
        load_mixture(_spec(base, weights="pile_paper", sources=[{"manifest": str(tmp_path / "bare")}]))
    with pytest.raises(MixtureError, match="no per-subset token counts"):
        load_mixture(_spec(base, schedule=[{"step": 3, "weights": "pile_paper"}],
                           sources=[{"name": "a", "manifest": str(tmp_path / "bare"), "weight": 1}]))
