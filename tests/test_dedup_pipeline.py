"""--dedup and --decontaminate through the whole job: removals, survivors, removed/ files, counts, runners, formats."""

import json
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
from corpus_helpers import (
    FAST_BEAM,
    edit_word,
    megatron_sequences,
    output_digests,
    pile_line,
    random_words,
    rss_growth,
    run_free,
    write_lines,
)

from pipeline.cli import run

TWO_WORKERS = ["--runner", "DirectRunner", "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
PORTABLE = ["--runner", "PortableRunner", "--job_endpoint", "embed", "--environment_type", "LOOPBACK"]
EVAL_TEXTS = [
    "the quick brown fox jumps over the lazy dog while the farmer sleeps under an old oak tree by the river",
    "in which year did the treaty of westphalia end the thirty years war across central europe and who signed it",
]
# (file, line) -> (twin (file, line), reason): what near dedup and decontamination must remove.
NEAR = {(1, 3): ((0, 7), "duplicate_near"), (1, 7): ((0, 1), "duplicate_exact"),
        (1, 8): ((0, 2), "duplicate_near"), (1, 9): ((0, 1), "duplicate_exact"),
        (1, 10): ((0, 3), "duplicate_near"), (1, 11): ((0, 3), "duplicate_near")}
EXACT = {k: v for k, v in NEAR.items() if v[1] == "duplicate_exact"}
CONTAMINATED = {(0, 9): 0, (1, 12): 1}  # (file, line) -> eval text
BAD_LINE = (0, 8)




@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two files with planted exact, near and eval-overlapping documents, a bad line; (root, texts by (file, line))."""
    root = tmp_path_factory.mktemp("dedup_corpus")
    rng = np.random.default_rng(11)
    base = [random_words(rng, 300) for _ in range(12)]
    docs = {}
    for i in range(6):
        docs[(0, i + 1)] = (base[i], "Pile-CC")
        docs[(1, i + 1)] = (base[6 + i], "Github")
    docs[(0, 7)] = (edit_word(base[8], 299, "edited"), "Pile-CC")  # near copy of (1, 3), first in input order
    docs[(0, 9)] = (random_words(rng, 40) + " " + EVAL_TEXTS[0].upper() + ". " + random_words(rng, 40), "Pile-CC")
    # 12 words of an eval text: no match
    docs[(0, 10)] = (" ".join(EVAL_TEXTS[1].split()[:12]) + " " + random_words(rng, 50), "Pile-CC")
    docs[(1, 7)] = ("  " + base[0].replace(" ", "   ", 3) + "\n", "Github")  # exact copy of (0, 1), normalized
    docs[(1, 8)] = (edit_word(base[1], 150, "edited"), "Github")
    docs[(1, 9)] = (base[0], "Github")
    chain = edit_word(base[2], 10, "edited")
    docs[(1, 10)] = (chain, "Github")
    docs[(1, 11)] = (edit_word(chain, 200, "edited"), "Github")  # near the chain's copy: the same cluster, twin (0, 3)
    docs[(1, 12)] = (random_words(rng, 30) + ", " + ", ".join(EVAL_TEXTS[1].split()[3:16]) + "! "
                     + random_words(rng, 30), "Github")
    for f, name in enumerate(("a", "b")):
        lines = []
        for line in range(1, max(k[1] for k in docs if k[0] == f) + 1):
            if (f, line) == BAD_LINE:
                lines.append(b"{not json")
            else:
                text, subset = docs[(f, line)]
                lines.append(pile_line(text, subset))
        write_lines(str(root / "train" / f"{name}.jsonl.zst"), lines)
    evals = root / "evals"
    evals.mkdir()
    (evals / "qa.jsonl").write_text(json.dumps({"question": EVAL_TEXTS[1]}) + "\n")
    (evals / "story.txt").write_text(EVAL_TEXTS[0] + "\n")
    return root, {k: text for k, (text, _) in docs.items()}


def _argv(root: Path, out: Path, model: str, *more: str) -> list[str]:
    return ["--input", str(root / "train" / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model", model,
            "--seq_len", "64", "--chunk_mb", "0.004", "--max_dead_letter_fraction", "1", *more]


def _removed(out: Path, manifest: dict) -> dict:
    records = {}
    for entry in manifest["removed"]["files"]:
        for line in (out / entry["path"]).read_text().splitlines():
            r = json.loads(line)
            records[(r["file_index"], r["line"])] = r
    return records


@pytest.fixture(scope="module")
def near_run(corpus, tiny_model, tmp_path_factory):
    root, _ = corpus
    out = tmp_path_factory.mktemp("near") / "out"
    argv = _argv(root, out, tiny_model, "--dedup", "near", "--decontaminate", str(root / "evals" / "*"),
                 "--decontam_text_key", "question")
    return argv, out, run.main(argv + FAST_BEAM)


@pytest.mark.slow
def test_duplicates_and_contamination_removed_with_their_twins(corpus, near_run):
    root, texts = corpus
    _, out, manifest = near_run
    removed = _removed(out, manifest)
    assert set(removed) == set(NEAR) | set(CONTAMINATED)
    names = [str(root / "train" / "a.jsonl.zst"), str(root / "train" / "b.jsonl.zst")]
    for key, (twin, reason) in NEAR.items():  # every survivor the first in input order
        r = removed[key]
        assert (r["reason"], (r["twin_file_index"], r["twin_line"])) == (reason, twin)
        assert r["file"] == names[key[0]] and r["twin_file"] == names[twin[0]]
        assert r["subset"] == "Github" and 0.8 < r["similarity"] <= 1.0
    for key, which in CONTAMINATED.items():
        r = removed[key]
        assert r["reason"] == "contaminated" and r["ngram"] in EVAL_TEXTS[which]
        assert len(r["ngram"].split()) == 13
        assert r["eval_file"].endswith("story.txt" if which == 0 else "qa.jsonl")
    assert manifest["removed"]["by_reason"] == {"duplicate_exact": 2, "duplicate_near": 4, "contaminated": 2}
    assert manifest["subsets"]["Github"]["removed"] == {"duplicate_exact": 2, "duplicate_near": 4, "contaminated": 1}
    assert manifest["removed"]["records"] == len(removed)
    assert manifest["config"]["dedup"] == "near" and manifest["config"]["decontam_ngram"] == 13


@pytest.mark.slow
def test_counts_add_up(corpus, near_run):
    _, texts = corpus
    _, _, manifest = near_run
    subsets = manifest["subsets"]
    read = manifest["totals"]["lines"]
    kept = sum(s["kept"] for s in subsets.values())
    removed = sum(sum(s["removed"].values()) for s in subsets.values())
    filtered = sum(sum(s["filtered"].values()) for s in subsets.values())
    assert kept + removed + filtered + manifest["dead_letters"]["records"] == read == len(texts) + 1
    assert kept == len(texts) - len(NEAR) - len(CONTAMINATED) == manifest["totals"]["documents_kept"]
    for s in subsets.values():
        assert s["kept"] + sum(s["removed"].values()) + sum(s["filtered"].values()) == s["documents"]
        assert set(s["removed_tokens"]) == set(s["removed"]) and all(n > 0 for n in s["removed_tokens"].values())


@pytest.mark.slow
def test_summary_shows_removed(near_run):
    from pipeline.format.summary import format_summary

    _, out, manifest = near_run
    text = format_summary(manifest, 1.0, output_dir=str(out))
    (line,) = [line for line in text.splitlines() if line.startswith("removed: ")]
    assert line.startswith("removed: 8 documents") and "duplicate_near" in line and line.endswith("/removed/ (2 files)")
    (dead,) = [line for line in text.splitlines() if line.startswith("dead letters:")]
    assert dead.endswith("/dead_letters/ (1 files)")


@pytest.mark.slow
def test_same_bytes_on_two_workers_and_the_portable_runner(near_run):
    argv, out, manifest = near_run
    digests = output_digests(out)
    assert any("removed/" in path for path in digests)
    again = run.main(argv + ["--overwrite"] + TWO_WORKERS)
    assert output_digests(out) == digests and run_free(again) == run_free(manifest)
    again = run.main(argv + ["--overwrite"] + PORTABLE)
    assert output_digests(out) == digests and run_free(again) == run_free(manifest)


def test_the_driver_loads_the_dedup_kernels_only_for_its_own_worker_threads(corpus, tiny_model, tmp_path):
    from pipeline.beam.options import pipeline_options
    from pipeline.beam.runners.direct.runner import warms_dedup_kernels

    root, _ = corpus

    def warms(*more):
        config, beam_args = run.parse_args(_argv(root, tmp_path / "out", tiny_model, *more))
        return warms_dedup_kernels(config, pipeline_options(beam_args), beam_args)

    assert warms("--dedup", "near", "--direct_num_workers", "2") and warms("--dedup", "exact", *FAST_BEAM)
    assert not warms("--dedup", "near", *TWO_WORKERS)  # worker processes sign, each loads its own
    assert not warms("--dedup", "near", "--direct_num_workers", "8")  # processes: the mode the job would pick
    assert not warms("--dedup", "near", *PORTABLE) and not warms("--direct_num_workers", "2")
    assert not warms("--decontaminate", str(root / "evals" / "*"), "--direct_num_workers", "2")  # no signatures


@pytest.mark.slow
def test_exact_only_removes_exact_copies(corpus, tiny_model, tmp_path):
    root, _ = corpus
    out = tmp_path / "out"
    manifest = run.main(_argv(root, out, tiny_model, "--dedup", "exact") + FAST_BEAM)
    removed = _removed(out, manifest)
    assert {k: ((r["twin_file_index"], r["twin_line"]), r["reason"]) for k, r in removed.items()} == EXACT


@pytest.mark.slow
def test_decontamination_alone_removes_exactly_the_planted_overlaps(corpus, tiny_model, tmp_path):
    root, _ = corpus
    out = tmp_path / "out"
    manifest = run.main(_argv(root, out, tiny_model, "--decontaminate", str(root / "evals" / "*"),
                              "--decontam_text_key", "question") + FAST_BEAM)
    assert set(_removed(out, manifest)) == set(CONTAMINATED)
    assert manifest["config"]["dedup"] == "none"


def _megatron_documents(out: Path, manifest: dict, model: str) -> list[str]:
    sp = spm.SentencePieceProcessor(model_file=model)
    return [sp.decode(seq[:-1].astype(int).tolist()) for seq in megatron_sequences(out, manifest)]  # without the EOS


@pytest.mark.slow
def test_megatron_output_holds_the_survivors_in_input_order_and_the_cut_text(corpus, tiny_model, tmp_path):
    root, texts = corpus
    out = tmp_path / "out"
    manifest = run.main(_argv(root, out, tiny_model, "--output_format", "megatron", "--dedup", "near",
                              "--decontaminate", str(root / "evals" / "story.txt"), "--decontam_cut")
                        + FAST_BEAM)
    removed = _removed(out, manifest)
    cut = (0, 9)
    assert set(removed) == set(NEAR) | {cut} and removed[cut]["reason"] == "contaminated_cut"
    assert manifest["removed"]["cut"] == 1 and manifest["subsets"]["Pile-CC"]["cut"] == 1
    expected = [texts[k] for k in sorted(texts) if k not in NEAR]
    got = _megatron_documents(out, manifest, tiny_model)
    at = sorted(k for k in texts if k not in NEAR).index(cut)
    assert got[:at] == expected[:at] and got[at + 1:] == expected[at + 1:]
    assert EVAL_TEXTS[0].upper() in texts[cut] and "FOX" not in got[at] and got[at].startswith(texts[cut][:20])


@pytest.mark.slow
def test_megatron_per_subset_with_dedup(corpus, tiny_model, tmp_path):
    root, texts = corpus
    out = tmp_path / "out"
    manifest = run.main(_argv(root, out, tiny_model, "--output_format", "megatron", "--per_subset",
                              "--dedup", "exact") + FAST_BEAM)
    documents = {}
    for shard in manifest["shards"]:
        documents[shard["subset"]] = documents.get(shard["subset"], 0) + shard["documents"]
    assert documents == {"Pile-CC": 9, "Github": 12 - len(EXACT)}


@pytest.mark.slow
def test_tfrecord_per_subset_with_dedup_lists_each_subset_s_removals_in_its_own_output(corpus, tiny_model, tmp_path):
    root, _ = corpus
    out = tmp_path / "out"
    run.main(_argv(root, out, tiny_model, "--per_subset", "--subsets", "Pile-CC,Github", "--dedup", "exact")
             + FAST_BEAM)
    pile_cc = json.loads((out / "Pile_CC" / "manifest.json").read_text())
    github = json.loads((out / "Github" / "manifest.json").read_text())
    assert pile_cc["removed"]["records"] == 0 and pile_cc["removed"]["files"] == []
    assert set(_removed(out / "Github", github)) == set(EXACT)
    assert github["removed"]["by_reason"] == {"duplicate_exact": len(EXACT)}


@pytest.mark.slow
def test_provenance_with_dedup_names_no_removed_line(corpus, tiny_model, tmp_path):
    root, texts = corpus
    out = tmp_path / "out"
    manifest = run.main(_argv(root, out, tiny_model, "--dedup", "near", "--provenance") + FAST_BEAM)
    lines = set()
    for entry in manifest["provenance"]["files"]:
        with np.load(out / entry["path"]) as z:
            lines.update((f, line) for f, line in z["spans"][:, :2].tolist() if f >= 0)
    assert lines == set(texts) - set(NEAR)


@pytest.mark.slow
def test_default_run_has_no_dedup_entries(corpus, tiny_model, tmp_path):
    root, _ = corpus
    out = tmp_path / "out"
    manifest = run.main(_argv(root, out, tiny_model) + FAST_BEAM)
    assert "removed" not in manifest and "dedup" not in manifest["config"]
    assert not (out / f"run-{manifest['run_id']}" / "removed").exists()


def test_bad_flags_are_refused(corpus, tiny_model, tmp_path):
    root, _ = corpus
    assert run.cli(_argv(root, tmp_path / "o", tiny_model, "--decontaminate", str(root / "nothing*.jsonl"))
                   + FAST_BEAM) == 2
    assert run.cli(_argv(root, tmp_path / "o", tiny_model, "--dedup", "near", "--minhash_bands", "9") + FAST_BEAM) == 2
    assert run.cli(_argv(root, tmp_path / "o", tiny_model, "--decontam_cut") + FAST_BEAM) == 2


@pytest.mark.slow
def test_removed_files_are_listed_and_checked_at_commit(near_run):
    from pipeline.io import outputs

    _, out, _ = near_run
    manifest = json.loads((out / "manifest.json").read_text())  # the latest run's: others may have run since
    listed = outputs.listed_files(manifest)
    paths = [f["path"] for f in manifest["removed"]["files"]]
    assert paths and all(outputs.is_run_file(p) and listed[p] == (out / p).stat().st_size for p in paths)
    assert paths == [f"run-{manifest['run_id']}/removed/train-0000{f}-00000.jsonl" for f in (0, 1)]


@pytest.mark.slow
def test_any_json_lines_corpus(tiny_model, tmp_path):
    rng = np.random.default_rng(5)
    a, b = random_words(rng, 300), random_words(rng, 300)
    lines = [json.dumps({"doc": {"body": text}, "src": src}).encode()
             for text, src in ((a, "web"), (b, "code"), (a, "code"), (edit_word(b, 100, "edited"), "web"))]
    write_lines(str(tmp_path / "in" / "x.jsonl"), lines, compression="none")
    out = tmp_path / "out"
    manifest = run.main(["--input", str(tmp_path / "in" / "x.jsonl"), "--output_dir", str(out), "--tokenizer_model",
                         tiny_model, "--seq_len", "64", "--text_key", "doc.body", "--subset_key", "src",
                         "--subset_names", "any", "--dedup", "near"] + FAST_BEAM)
    removed = _removed(out, manifest)
    assert {k: (r["reason"], r["twin_line"], r["subset"]) for k, r in removed.items()} == {
        (0, 3): ("duplicate_exact", 1, "code"), (0, 4): ("duplicate_near", 2, "web")}
    assert manifest["subsets"]["web"]["kept"] == 1 and manifest["subsets"]["code"]["kept"] == 1


HOT_COPIES = 40_000  # all pairs would be 8e8 edges: far past HOT_BOUND
HOT_BOUND = 2 << 30  # bytes of RSS growth allowed for the whole in-memory DirectRunner job


def _hot_copy(words: list[str], i: int) -> str:
    """The boilerplate with copy i's number in its punctuation: distinct texts (no exact twin), the same shingles."""
    return "".join(w + (", " if i >> b & 1 else " ") for b, w in enumerate(words)).strip(" ,")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_hot_cluster_of_40000_copies_through_the_job(tiny_model, tmp_path):
    """40,000 near copies of one boilerplate document through `run --dedup near`: one kept, memory bounded.

    The copies differ only in punctuation, so exact dedup keeps all of them and each of the 7 band
    buckets holds all 40,000 (every pair: 8e8 edges); the job keeps the first copy, lists every
    other in removed/ with it as the twin, and its process grows by less than HOT_BOUND.
    """
    words = [f"boiler{i % 7}plate{i}" for i in range(HOT_COPIES.bit_length() + 1)]  # the last has no separator
    write_lines(str(tmp_path / "train" / "hot.jsonl.zst"), [pile_line(_hot_copy(words, i)) for i in range(HOT_COPIES)])
    out = tmp_path / "out"
    with rss_growth() as grown:
        manifest = run.main(["--input", str(tmp_path / "train" / "*.jsonl.zst"), "--output_dir", str(out),
                             "--tokenizer_model", tiny_model, "--seq_len", "64", "--dedup", "near", *FAST_BEAM])
    assert manifest["removed"]["by_reason"] == {"duplicate_near": HOT_COPIES - 1}
    assert manifest["totals"]["documents_kept"] == 1 and manifest["totals"]["lines"] == HOT_COPIES
    twins: dict[tuple, int] = {}
    for entry in manifest["removed"]["files"]:
        for line in (out / entry["path"]).read_text().splitlines():
            r = json.loads(line)
            twins[(r["twin_file_index"], r["twin_line"], r["reason"])] = twins.get(
                (r["twin_file_index"], r["twin_line"], r["reason"]), 0) + 1
    assert twins == {(0, 1, "duplicate_near"): HOT_COPIES - 1}
    assert grown[0] < HOT_BOUND, f"RSS grew by {grown[0] >> 20} MiB"
