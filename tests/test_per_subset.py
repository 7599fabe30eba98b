"""`--output_format tfrecord --per_subset`: one output per subset, each as its own run writes it, and a mixture.json."""

import json

import numpy as np
import pytest
from corpus_helpers import FAST_BEAM, output_digests, pile_line, write_lines

from pipeline.cli import run, show
from pipeline.core.options import UsageError
from pipeline.format.manifest import load_manifest
from pipeline.format.mixture import load_mixture

CHOSEN = ["Pile-CC", "ArXiv", "Gutenberg (PG-19)", "Enron Emails"]  # no Enron Emails in the corpus
SLUGS = {"Pile-CC": "Pile_CC", "ArXiv": "ArXiv", "Gutenberg (PG-19)": "Gutenberg_PG_19"}
BASE = ["--seq_len", "16", "--shard_size_mb", "0.002", "--chunk_mb", "0.002", "--seed", "3"]
TWO_WORKERS = ["--runner", "DirectRunner", "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("per_subset")
    subsets = ["Pile-CC", "ArXiv", "Gutenberg (PG-19)", "Github"]
    for f in range(2):
        lines = [pile_line(f"document {f}-{i} of {subsets[i % 4]}: " + "words and more words " * (1 + i % 7),
                           subsets[i % 4]) for i in range(60)]
        write_lines(str(root / f"{f:02d}.jsonl.zst"), lines)
    return str(root / "*.jsonl.zst")


def _run(corpus, out, model, *extra, beam_args=FAST_BEAM):
    return run.main(["--input", corpus, "--output_dir", str(out), "--tokenizer_model", model, *BASE, *extra,
                     *beam_args])


@pytest.fixture(scope="module")
def per_subset_out(corpus, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "mix"
    result = _run(corpus, out, tiny_model, "--per_subset", "--subsets", ",".join(CHOSEN), "--epochs", "ArXiv=2.5")
    return out, result


@pytest.mark.slow
def test_each_subset_is_the_output_of_its_own_run(per_subset_out, corpus, tiny_model, tmp_path):
    out, result = per_subset_out
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted(
        [*SLUGS.values(), "mixture.json"])
    for name, slug in SLUGS.items():
        alone = tmp_path / slug
        _run(corpus, alone, tiny_model, "--subsets", name)
        assert output_digests(out / slug) == output_digests(alone), name
        manifest = load_manifest(str(out / slug))
        assert [k for k, v in manifest["subsets"].items() if v.get("tokens")] == [name]
    assert set(result["outputs"]) == set(SLUGS)


@pytest.mark.slow
def test_the_mixture_weighs_label_tokens_by_epochs_and_the_reader_takes_it(per_subset_out):
    from pipeline import tfdata

    out, _ = per_subset_out
    written = json.loads((out / "mixture.json").read_text())
    assert [s["name"] for s in written["sources"]] == ["Pile-CC", "ArXiv", "Gutenberg (PG-19)"]  # selection order
    mixture = load_mixture(str(out / "mixture.json"))
    for source in mixture.sources:
        tokens = load_manifest(source.manifest)["totals"]["label_tokens"]
        assert source.weight == tokens * (2.5 if source.name == "ArXiv" else 1.0)
    ds = tfdata.make_dataset(str(out / "mixture.json"), 4, seed=0)
    batch = next(iter(ds))
    assert batch["inputs"].shape == (4, 16) and np.all(batch["inputs"].numpy() >= 0)
    state = tfdata.mixture_state(str(out / "mixture.json"), 4, 3, seed=0)
    resumed = next(iter(tfdata.make_dataset(str(out / "mixture.json"), 4, seed=0, state=state)))
    fourth = list(ds.take(4))[3]
    assert np.array_equal(resumed["inputs"].numpy(), fourth["inputs"].numpy())


@pytest.mark.slow
def test_two_workers_write_the_same_bytes(per_subset_out, corpus, tiny_model, tmp_path):
    out, _ = per_subset_out
    two = tmp_path / "two"
    _run(corpus, two, tiny_model, "--per_subset", "--subsets", ",".join(CHOSEN), "--epochs", "ArXiv=2.5",
         beam_args=TWO_WORKERS)
    assert output_digests(two) == output_digests(out)
    assert (two / "mixture.json").read_bytes() == (out / "mixture.json").read_bytes()


@pytest.mark.slow
def test_show_prints_the_mixture(per_subset_out):
    out, _ = per_subset_out
    text = show.show(str(out))
    assert "3 sources" in text and "Gutenberg (PG-19)" in text and "Enron" not in text
    assert show.show(str(out / "mixture.json")) == text


@pytest.mark.slow
def test_rerun_needs_overwrite_and_overwrite_replaces(corpus, tiny_model, tmp_path):
    out = tmp_path / "again"
    flags = ("--per_subset", "--subsets", "Pile-CC,ArXiv")
    _run(corpus, out, tiny_model, *flags)
    before = output_digests(out)
    with pytest.raises(FileExistsError, match="not empty"):
        _run(corpus, out, tiny_model, *flags)
    _run(corpus, out, tiny_model, *flags, "--overwrite")
    assert output_digests(out) == before
    (out / "stray.txt").write_text("not ours")
    with pytest.raises(FileExistsError, match="stray.txt"):
        _run(corpus, out, tiny_model, *flags, "--overwrite")


def test_any_names_need_the_subsets_named(tiny_model):
    with pytest.raises(UsageError, match="--per_subset"):
        run.parse_args(["--input", "x", "--output_dir", "y", "--tokenizer_model", tiny_model, "--per_subset",
                        "--subset_names", "any"])
