"""Dedup on real Beam runners: survivors by input order, records for every removal, counts, runners, decontamination."""

import json

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from corpus_helpers import edit_word, random_words, rss_growth

from pipeline.beam.dedup.sign import SignFn
from pipeline.beam.dedup.transform import Dedup

IN_MEMORY = ["--runner", "DirectRunner", "--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
TWO_WORKERS = ["--runner", "DirectRunner", "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
PORTABLE = ["--runner", "PortableRunner", "--job_endpoint", "embed", "--environment_type", "LOOPBACK"]
NAMES = ["a.jsonl.zst", "b.jsonl.zst"]




def run_dedup(docs, out, beam_args=IN_MEMORY, **kwargs):
    """Run Dedup over `docs`; (kept {(file, line): doc}, removed records by (file, line), counts)."""
    with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
        res = p | "Docs" >> beam.Create(docs) | Dedup(file_names=NAMES, **kwargs)
        for name in ("kept", "removed", "counts"):
            (res[name] | f"Json{name}" >> beam.Map(lambda e: json.dumps(e, sort_keys=True))
             | f"Write{name}" >> beam.io.WriteToText(str(out / name)))

    def read(name):
        return sorted(line for path in out.glob(f"{name}*") for line in path.read_text().splitlines())

    kept = {tuple(k): doc for k, doc in map(json.loads, read("kept"))}
    removed = {(r["file_index"], r["line"]): r for r in map(json.loads, read("removed"))}
    (counts,) = [json.loads(c) for c in read("counts")]
    return kept, removed, counts, (read("kept"), read("removed"), read("counts"))


@pytest.fixture(scope="module")
def planted():
    """Documents with planted exact and near copies; the expected removals: (file, line) -> (twin, reason)."""
    rng = np.random.default_rng(7)
    base = [random_words(rng, 400) for _ in range(12)]
    docs = {}
    for i in range(6):
        docs[(0, i + 1)] = (base[i], "Pile-CC")
        docs[(1, i + 1)] = (base[6 + i], "Github")
    docs[(0, 7)] = (edit_word(base[8], 399, "EDITED"), "Pile-CC")  # near copy of (1, 3), but first in input order
    docs[(1, 7)] = ("  " + base[0].replace(" ", "  ", 3) + "\n", "Github")  # exact copy of (0, 1) after normalization
    docs[(1, 8)] = (edit_word(base[1], 200, "EDITED"), "Github")  # near copy of (0, 2)
    docs[(1, 9)] = (base[0], "Github")  # exact copy of (0, 1)
    chain1 = edit_word(base[2], 10, "EDITED")
    docs[(1, 10)] = (chain1, "Github")  # near (0, 3)
    docs[(1, 11)] = (edit_word(chain1, 300, "EDITED"), "Github")  # near chain1: the same cluster, twin (0, 3)
    expected = {(1, 3): ((0, 7), "duplicate_near"), (1, 7): ((0, 1), "duplicate_exact"),
                (1, 8): ((0, 2), "duplicate_near"), (1, 9): ((0, 1), "duplicate_exact"),
                (1, 10): ((0, 3), "duplicate_near"), (1, 11): ((0, 3), "duplicate_near")}
    elements = [(key, {"text": text, "subset": subset, "chunk": key[1] // 4}) for key, (text, subset) in docs.items()]
    return elements, expected


@pytest.fixture(scope="module")
def in_memory(planted, tmp_path_factory):
    docs, _ = planted
    return run_dedup(docs, tmp_path_factory.mktemp("in_memory"))


@pytest.mark.slow
def test_duplicates_removed_survivors_by_input_order(planted, in_memory):
    docs, expected = planted
    kept, removed, _, _ = in_memory
    assert {k: ((r["twin_file_index"], r["twin_line"]), r["reason"]) for k, r in removed.items()} == expected
    assert set(kept) == {k for k, _ in docs} - set(expected)
    for key, rec in removed.items():  # every removal names its file, subset and kept twin
        assert rec["file"] == NAMES[key[0]] and rec["twin_file"] == NAMES[rec["twin_file_index"]]
        assert rec["subset"] == dict(docs)[key]["subset"] and rec["chunk"] == key[1] // 4
        assert (rec["twin_file_index"], rec["twin_line"]) in kept
        assert 0.8 < rec["similarity"] <= 1.0
        assert rec["similarity"] == 1.0 or rec["reason"] == "duplicate_near"


@pytest.mark.slow
def test_removed_only_gives_the_same_removed_records(planted, in_memory, tmp_path):
    docs, _ = planted
    with beam.Pipeline(options=PipelineOptions(IN_MEMORY)) as p:
        res = p | "Docs" >> beam.Create(docs) | Dedup(file_names=NAMES, keep_text=False, removed_only=True)
        assert set(res) == {"removed"}
        (res["removed"] | beam.Map(lambda e: json.dumps(e, sort_keys=True))
         | beam.io.WriteToText(str(tmp_path / "removed")))
    lines = sorted(line for path in tmp_path.glob("removed*") for line in path.read_text().splitlines())
    assert lines == in_memory[3][1]


@pytest.mark.slow
def test_counts_add_up(planted, in_memory):
    docs, _ = planted
    kept, removed, counts, _ = in_memory
    assert sum(c["documents"] for c in counts.values()) == len(docs)
    for subset, c in counts.items():
        assert c["kept"] == sum(d["subset"] == subset for d in kept.values())
        assert c["removed"] == {reason: sum(r["subset"] == subset and r["reason"] == reason for r in removed.values())
                                for reason in c["removed"]}
        assert c["kept"] + sum(c["removed"].values()) == c["documents"]


@pytest.mark.slow
def test_only_exact_or_only_near(planted, tmp_path):
    docs, expected = planted
    _, removed, _, _ = run_dedup(docs, tmp_path / "exact", near=False)
    assert set(removed) == {k for k, (_, reason) in expected.items() if reason == "duplicate_exact"}
    _, removed, _, _ = run_dedup(docs, tmp_path / "near", exact=False, normalization="none")
    # without exact dedup the exact copies are near copies of the same twin
    assert {k: (r["twin_file_index"], r["twin_line"]) for k, r in removed.items()} == {
        k: twin for k, (twin, _) in expected.items()}


@pytest.mark.slow
def test_same_output_on_two_workers_and_the_portable_runner(planted, in_memory, tmp_path):
    docs, _ = planted
    _, _, _, one = in_memory
    _, _, _, two = run_dedup(docs, tmp_path / "two", TWO_WORKERS)
    assert two == one
    _, _, _, portable = run_dedup(docs, tmp_path / "portable", PORTABLE)
    assert portable == one


@pytest.mark.slow
def test_true_jaccard_check_keeps_loose_candidates(tmp_path):
    rng = np.random.default_rng(3)
    a = random_words(rng, 400)
    half = " ".join(a.split()[:270] + random_words(rng, 130).split())  # Jaccard ~0.5 with a
    docs = [((0, 1), {"text": a, "subset": "X"}), ((0, 2), {"text": half, "subset": "X"}),
            ((0, 3), {"text": edit_word(a, 100, "EDITED"), "subset": "X"})]
    loose = {"bands": 16, "rows": 2}  # threshold ~0.25: the half copy collides
    _, removed, _, _ = run_dedup(docs, tmp_path / "loose", **loose)
    assert set(removed) == {(0, 2), (0, 3)}
    _, removed, _, _ = run_dedup(docs, tmp_path / "checked", jaccard_threshold=0.8, **loose)
    assert set(removed) == {(0, 3)} and removed[(0, 3)]["twin_line"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("batch_docs", [2, 2048])
def test_exact_copy_of_a_near_copy_keeps_its_exact_twin(tmp_path, monkeypatch, batch_docs):
    # exact and near share one group: the records are those of exact dedup, then near dedup on its
    # survivors, whatever the signing batches (flushed mid-bundle or as the bundle ends)
    monkeypatch.setattr(SignFn, "BATCH_DOCS", batch_docs)
    rng = np.random.default_rng(5)
    a, b = random_words(rng, 400), random_words(rng, 400)
    near = edit_word(a, 150, "EDITED")
    docs = [((0, 1), {"text": a, "subset": "X"}), ((0, 2), {"text": near, "subset": "X"}),
            ((0, 3), {"text": near + " ", "subset": "X"}), ((0, 4), {"text": b, "subset": "X"}),
            ((1, 1), {"text": b, "subset": "Y"}), ((1, 2), {"text": " ,. ", "subset": "Y"}),
            ((1, 3), {"text": ",.\n", "subset": "Y"})]
    want = {(0, 2): ((0, 1), "duplicate_near"), (0, 3): ((0, 2), "duplicate_exact"),
            (1, 1): ((0, 4), "duplicate_exact"), (1, 3): ((1, 2), "duplicate_exact")}
    for name, kwargs in (("plain", {}), ("checked", {"jaccard_threshold": 0.8})):
        kept, removed, counts, _ = run_dedup(docs, tmp_path / name, **kwargs)
        assert {k: ((r["twin_file_index"], r["twin_line"]), r["reason"]) for k, r in removed.items()} == want
        assert set(kept) == {k for k, _ in docs} - set(want)
        assert sum(c["kept"] + sum(c["removed"].values()) for c in counts.values()) == len(docs)


@pytest.mark.slow
@pytest.mark.parametrize("partitions", [1, 7])
def test_any_number_of_bucket_partitions_gives_the_same_records(planted, in_memory, tmp_path, monkeypatch, partitions):
    # a partition's pairs flushed mid-bundle too
    from pipeline.beam.dedup import near as dedup_near

    monkeypatch.setattr(dedup_near._BucketPairsFn, "BATCH_DOCS", 3)
    docs, _ = planted
    assert run_dedup(docs, tmp_path, partitions=partitions)[3] == in_memory[3]


def test_refuses_a_windowed_input():
    with pytest.raises(ValueError, match="global window"):
        with beam.Pipeline(options=PipelineOptions(IN_MEMORY)) as p:
            (p | beam.Create([((0, 1), {"text": "a b", "subset": "X"})])
             | beam.WindowInto(beam.window.FixedWindows(60)) | Dedup())


def test_refuses_bad_parameters():
    with pytest.raises(ValueError, match="bands \\* rows"):
        Dedup(bands=8, rows=18)
    with pytest.raises(ValueError, match="normalization"):
        Dedup(normalization="lower")
    with pytest.raises(ValueError, match="jaccard_threshold"):
        Dedup(jaccard_threshold=1.5)


def _decontamination_case(tmp_path):
    rng = np.random.default_rng(11)
    texts = [random_words(rng, 200) for _ in range(5)]
    x, y, z = (t.split() for t in texts[:3])
    evals = tmp_path / "evals.jsonl"
    evals.write_text("\n".join(json.dumps(e) for e in [
        {"question": "Q: " + " ".join(w.upper() for w in x[50:63]) + "?!"},  # 13 words of x, case and punctuation
        {"question": "intro words " + " ".join(y[120:140]) + " outro"},  # 20 words of y
        {"question": " ".join(z[10:22])},  # only 12 words of z: no 13-gram
        {"question": "short eval"},
    ]) + "\n")
    docs = [((0, i + 1), {"text": t, "subset": "S"}) for i, t in enumerate(texts)]
    return docs, evals, x, y


@pytest.mark.slow
def test_decontamination_removes_exactly_the_planted_overlaps(tmp_path):
    docs, evals, x, y = _decontamination_case(tmp_path)
    kept, removed, counts, _ = run_dedup(docs, tmp_path / "out", eval_files=[str(evals)], eval_text_key="question")
    assert set(removed) == {(0, 1), (0, 2)} and set(kept) == {(0, 3), (0, 4), (0, 5)}
    assert removed[(0, 1)]["ngram"] == " ".join(x[50:63]) and removed[(0, 1)]["eval_file"] == str(evals)
    assert removed[(0, 2)]["ngram"] in " ".join(y[120:140])
    assert {r["reason"] for r in removed.values()} == {"contaminated"}
    assert counts["S"]["removed"] == {"contaminated": 2} and counts["S"]["kept"] == 3


@pytest.mark.slow
def test_decontamination_cut_keeps_the_rest(tmp_path):
    docs, evals, x, _ = _decontamination_case(tmp_path)
    kept, removed, counts, _ = run_dedup(docs, tmp_path / "out", eval_files=[str(evals)], eval_text_key="question",
                                         cut=True)
    assert set(kept) == {(0, i) for i in range(1, 6)}
    assert kept[(0, 1)]["text"] == " ".join(x[:50]) + "  " + " ".join(x[63:])
    assert {r["reason"] for r in removed.values()} == {"contaminated_cut"}
    assert counts["S"]["cut"] == 2 and counts["S"]["kept"] == 5


@pytest.mark.slow
def test_eval_files_must_be_json_objects_with_the_key(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a b c"}\n{"other": 1}\n')
    with pytest.raises(Exception, match="bad.jsonl line 2"):
        run_dedup([((0, 1), {"text": "a b", "subset": "S"})], tmp_path / "out", eval_files=[str(bad)])


# 100,000 copies go through the whole job in tests/test_dedup_pipeline.py; here 20,000 are enough that
# every pair (2e8 edges) would take many times HOT_BOUND, while the stars carry 2e4.
HOT_COPIES = 20_000
HOT_BOUND = 1 << 30  # bytes of RSS growth allowed on DirectRunner (the runner buffers every element)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_hot_cluster_of_copies_stays_bounded(tmp_path):
    """HOT_COPIES copies of one boilerplate document (exact dedup off: all reach the near stage, one bucket per band).

    Every pair would be 2e8 edges; the bucket stars and star rounds carry 2e4. Our reducers' own memory
    is O(1) per group (tests/test_dedup.py); here the whole DirectRunner process grows by less than
    HOT_BOUND, and every copy names the first as its twin.
    """
    text = " ".join(f"boiler{i % 37} plate{i}" for i in range(40))
    with rss_growth() as grown, beam.Pipeline(options=PipelineOptions(IN_MEMORY)) as p:
        res = (p | beam.Create(range(HOT_COPIES))
               | beam.Map(lambda i: ((i // 10_000, i % 10_000 + 1), {"text": text, "subset": "S"}))
               | Dedup(exact=False, rounds=2))
        (res["removed"] | beam.Map(lambda r: (r["twin_file_index"], r["twin_line"], r["reason"]))
         | beam.combiners.Count.PerElement() | beam.Map(json.dumps) | beam.io.WriteToText(str(tmp_path / "twins")))
        res["counts"] | "C" >> beam.Map(json.dumps) | "WC" >> beam.io.WriteToText(str(tmp_path / "counts"))
    twins = [json.loads(line) for path in tmp_path.glob("twins*") for line in path.read_text().splitlines()]
    assert twins == [[[0, 1, "duplicate_near"], HOT_COPIES - 1]]
    (counts,) = [json.loads(line) for path in tmp_path.glob("counts*") for line in path.read_text().splitlines()]
    assert counts["S"]["kept"] == 1 and counts["S"]["removed"] == {"duplicate_near": HOT_COPIES - 1}
    assert grown[0] < HOT_BOUND, f"RSS grew by {grown[0] >> 20} MiB"
