"""Tokenizer training: the deterministic stratified sample (Beam), the trainer, the card, and the pipeline run."""

from __future__ import annotations

import hashlib
import json
import os
import random

import pytest
import sentencepiece as spm
from corpus_helpers import FAST_BEAM, pile_line, write_lines
from sample_corpus import compose_lines

from pipeline.cli import run
from pipeline.config import tokenizer as tconfig
from pipeline.core import subsets
from pipeline.core.subsets import PILE_SUBSETS
from pipeline.tokenize import sample as tsample
from pipeline.tokenize import trainer as ttrainer

BAD_LINES = [
    b"{not json",
    pile_line("some text", subset="CommonCrawl"),  # the paper code's name, not the data's
    b'{"text": "caf\xe9", "meta": {"pile_set_name": "Pile-CC"}}',  # invalid UTF-8
    b'{"meta": {"pile_set_name": "Github"}}',
]
KEY_0_3_17 = 0xAE39AD6E32D02E34
EXPECTED_DEAD = {"invalid_json": 1, "subset_unknown": 1, "invalid_utf8": 1, "text_missing": 1}


def sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two .jsonl.zst files and one plain .jsonl: all 22 subsets, code, CJK, emoji, bad lines."""
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(11)
    first = compose_lines(rng, 180)
    write_lines(str(root / "00.jsonl.zst"), first[:90] + BAD_LINES[:2] + first[90:])
    write_lines(str(root / "01.jsonl.zst"), compose_lines(rng, 150, long_doc_chars=60_000) + BAD_LINES[2:])
    write_lines(str(root / "02.jsonl"), compose_lines(rng, 60), compression="none")
    return str(root)


def inputs(corpus) -> list[str]:
    return ["--input", os.path.join(corpus, "*.jsonl.zst"), "--input", os.path.join(corpus, "*.jsonl")]


def sample_args(corpus, work_dir, *extra) -> list[str]:
    return [*inputs(corpus), "--work_dir", str(work_dir), "--sample_only", "--sample_mb", "0.3",
            "--max_doc_chars", "20000", *FAST_BEAM, *extra]


def read_sample(work_dir) -> list[dict]:
    with open(os.path.join(work_dir, tsample.SAMPLE_FILE), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# --- pure functions -----------------------------------------------------------------------------------


def test_pile_mix_weights_reproduce_the_papers_table():
    weights = subsets.pile_mix_weights()
    assert set(weights) == set(PILE_SUBSETS)
    assert sum(subsets.PILE_RAW_GIB.values()) == pytest.approx(825.18, abs=0.01)
    assert sum(weights.values()) == pytest.approx(1254.20, abs=0.05)
    shares = tsample.parse_weights("pile", PILE_SUBSETS)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["Pile-CC"] == pytest.approx(0.1811, abs=5e-5)  # the paper's "weight" column
    assert shares["Wikipedia (en)"] == pytest.approx(0.0153, abs=5e-5)
    assert shares["Enron Emails"] == pytest.approx(0.0014, abs=5e-5)


def test_parse_weights_presets_lists_and_errors():
    assert tsample.parse_weights("natural", PILE_SUBSETS) is None
    uniform = tsample.parse_weights("uniform", ["Github", "ArXiv"])
    assert uniform == {"Github": 0.5, "ArXiv": 0.5}
    explicit = tsample.parse_weights("Github=1, ArXiv=3", PILE_SUBSETS)
    assert explicit["Github"] == 0.25 and explicit["ArXiv"] == 0.75
    assert explicit["Pile-CC"] == 0.0  # not named: left out
    # The pile preset renormalizes over the selected subsets.
    assert sum(tsample.parse_weights("pile", ["Github", "ArXiv"]).values()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown Pile subset"):
        tsample.parse_weights("CommonCrawl=1", PILE_SUBSETS)
    with pytest.raises(ValueError, match="NAME=WEIGHT"):
        tsample.parse_weights("Github", PILE_SUBSETS)
    with pytest.raises(ValueError, match="nothing would be sampled"):
        tsample.parse_weights("Github=0", PILE_SUBSETS)
    with pytest.raises(ValueError, match="not among the selected"):
        tsample.parse_weights("ArXiv=1", ["Github"])
    with pytest.raises(ValueError, match=">= 0"):
        tsample.parse_weights("Github=-1", PILE_SUBSETS)


def test_take_smallest_worked_example():
    docs = [(7, 0, 1, 4, "Pile-CC", "a"), (2, 0, 2, 5, "Pile-CC", "b"), (9, 0, 3, 1, "Pile-CC", "c"),
            (4, 0, 4, 6, "Pile-CC", "d")]
    assert [d[0] for d in tsample.take_smallest(docs, 10)] == [2, 4]
    assert [d[0] for d in tsample.take_smallest(docs, 5)] == [2]
    assert [d[0] for d in tsample.take_smallest(docs, 100)] == [2, 4, 7, 9]


@pytest.mark.parametrize("seed", range(5))
def test_take_smallest_merges_in_any_order(seed):
    from pipeline.beam import sample

    rng = random.Random(seed)
    docs = [(rng.getrandbits(64), 0, i, rng.randint(1, 50), "Github", "") for i in range(300)]
    budget = rng.randint(10, 3000)
    expected = tsample.take_smallest(docs, budget)
    for _ in range(5):
        rng.shuffle(docs)
        cuts = sorted(rng.sample(range(1, len(docs)), 6))
        parts = [docs[a:b] for a, b in zip([0, *cuts], [*cuts, len(docs)], strict=True)]
        assert tsample.take_smallest([d for p in parts for d in tsample.take_smallest(p, budget)], budget) == expected
    # The Beam CombineFn, driven the way a runner may drive it, gives the same result.
    fn = sample.SmallestKeysFn({"Github": budget}, natural=False)
    accumulators = []
    for part in parts:
        acc = fn.create_accumulator()
        for doc in part:
            acc = fn.add_input(acc, doc)
        accumulators.append(fn.compact(acc))
    rng.shuffle(accumulators)
    merged = fn.merge_accumulators([fn.merge_accumulators(accumulators[:3]), *accumulators[3:]])
    assert fn.extract_output(merged) == expected
    assert sum(d[3] for d in expected) < budget + 50


def test_document_key_is_stable():
    assert tsample.document_key(0, 3, 17) == tsample.document_key(0, 3, 17)
    assert tsample.document_key(0, 3, 17) != tsample.document_key(1, 3, 17)
    assert tsample.document_key(0, 3, 17) != tsample.document_key(0, 4, 17)
    # Pinned: changing the key function changes every sample (and so every trained model).
    assert tsample.document_key(0, 3, 17) == KEY_0_3_17


@pytest.mark.parametrize("line", [
    "word " * 500,
    "x" * 5000,
    "数据模型" * 700,
    "🙂 🚀" * 900,
    "a" * 4095 + "é" * 10,
])
def test_split_sentence_keeps_every_character_within_the_limit(line):
    pieces = ttrainer.split_sentence(line, 4096)
    assert "".join(pieces) == line
    assert all(0 < len(p.encode("utf-8")) <= 4096 for p in pieces)
    if " " in line:
        assert all(p.startswith(" ") for p in pieces[1:])  # cut right before a space


def test_split_sentence_cuts_at_a_space():
    pieces = ttrainer.split_sentence("aaaa bbbb cccc dddd", 12)
    assert pieces == ["aaaa bbbb", " cccc dddd"]


def test_document_sentences_drop_blank_lines():
    text = "first line\n\n   \n\tsecond\nthird  "
    assert list(ttrainer.document_sentences(text, 100)) == ["first line", "\tsecond", "third  "]


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_vocab_file_matches_sentencepieces_own(model_type, tmp_path):
    texts = [json.loads(line)["text"] for line in compose_lines(random.Random(2), 60)]
    (tmp_path / "s.txt").write_text("\n".join(t.replace("\n", " ") for t in texts) + "\n", encoding="utf-8")
    config = tconfig.TrainerConfig(model_type=model_type, vocab_size=500, num_threads=1)
    proto = ttrainer.train_model(str(tmp_path / "s.txt"), config)
    spm.SentencePieceTrainer.train(input=str(tmp_path / "s.txt"), model_prefix=str(tmp_path / "ref"),
                                   minloglevel=2, **config.trainer_kwargs())
    assert ttrainer.vocab_text(proto) == (tmp_path / "ref.vocab").read_text(encoding="utf-8")
    assert str(tmp_path).encode() not in proto  # no path recorded: the same bytes wherever it runs


def test_trainer_config_validation():
    with pytest.raises(ValueError, match="byte pieces"):
        tconfig.TrainerConfig(vocab_size=200)
    with pytest.raises(ValueError, match="must differ"):
        tconfig.TrainerConfig(eos_id=1)
    with pytest.raises(ValueError, match="own flag, --vocab_size"):
        tconfig.TrainerConfig(extra=(("vocab_size", "10"),))
    with pytest.raises(ValueError, match="the command sets it"):
        tconfig.TrainerConfig(extra=(("input", "x.txt"),))
    nfkc = tconfig.TrainerConfig(extra=(("normalization_rule_name", "nmt_nfkc"), ("remove_extra_whitespaces", "true")))
    assert nfkc.trainer_kwargs()["normalization_rule_name"] == "nmt_nfkc"
    kwargs = tconfig.TrainerConfig().trainer_kwargs()
    # Llama-2's layout and settings by default.
    assert (kwargs["unk_id"], kwargs["bos_id"], kwargs["eos_id"], kwargs["pad_id"]) == (0, 1, 2, -1)
    assert kwargs["vocab_size"] == 32000 and kwargs["model_type"] == "bpe"
    assert kwargs["byte_fallback"] and kwargs["split_digits"] and kwargs["allow_whitespace_only_pieces"]
    assert kwargs["normalization_rule_name"] == "identity" and not kwargs["remove_extra_whitespaces"]


# --- the Beam sampler --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_dir(corpus, tmp_path_factory):
    from pipeline.cli import train_tokenizer as train_cli

    work = tmp_path_factory.mktemp("sample")
    assert train_cli.main(sample_args(corpus, work)) is None
    return str(work)


@pytest.mark.slow
def test_sample_accounts_for_every_line(corpus, sample_dir):
    stats = tsample.load_sample_stats(sample_dir)
    assert stats["dead_letters"] == EXPECTED_DEAD
    # compose_lines adds one whitespace-only document to each file (and one long book to the second).
    assert stats["lines"] == (180 + 1) + (150 + 2) + (60 + 1) + len(BAD_LINES)
    available = sum(s["documents_available"] for s in stats["subsets"].values())
    filtered = sum(sum(s["filtered"].values()) for s in stats["subsets"].values())
    assert available + filtered + sum(EXPECTED_DEAD.values()) == stats["lines"]
    assert set(stats["subsets"]) == set(PILE_SUBSETS)
    docs = read_sample(sample_dir)
    assert len(docs) == stats["documents"]
    assert sum(len(d["text"].encode()) for d in docs) == stats["bytes"]
    assert stats["sha256"] == sha256(os.path.join(sample_dir, tsample.SAMPLE_FILE))


@pytest.mark.slow
def test_sample_meets_each_subsets_budget(sample_dir):
    stats = tsample.load_sample_stats(sample_dir)
    longest = 20000 * 4  # --max_doc_chars, in bytes at most
    for name, s in stats["subsets"].items():
        assert s["target_bytes"] == round(300_000 * tsample.parse_weights("pile", PILE_SUBSETS)[name])
        if s["short"]:
            assert s["bytes"] == s["bytes_available"]  # a short subset gives all it has
        else:
            assert s["target_bytes"] <= s["bytes"] < s["target_bytes"] + longest
    assert stats["subsets"]["Books3"]["documents_cut"] >= 1  # the 60k-character book, at least
    assert max(len(d["text"]) for d in read_sample(sample_dir)) <= 20000


@pytest.mark.slow
def test_sample_is_the_same_on_other_runners_and_chunkings(corpus, sample_dir, tmp_path):
    from pipeline.cli import train_tokenizer as train_cli

    other = tmp_path / "other"
    train_cli.main(sample_args(corpus, other, "--chunk_mb", "0.01", "--direct_running_mode", "multi_threading",
                        "--direct_num_workers", "3"))
    first, second = tsample.load_sample_stats(sample_dir), tsample.load_sample_stats(str(other))
    assert first["sha256"] == second["sha256"]
    assert first["subsets"] == second["subsets"]
    # A different seed draws other documents.
    train_cli.main(sample_args(corpus, tmp_path / "seeded", "--seed", "5"))
    assert tsample.load_sample_stats(str(tmp_path / "seeded"))["sha256"] != first["sha256"]


@pytest.mark.slow
def test_sample_order_is_the_key_order(corpus, sample_dir):
    docs = read_sample(sample_dir)
    assert {d["subset"] for d in docs} == set(PILE_SUBSETS)
    # Stratified, not a prefix of the files: documents of every file are present.
    texts = {d["text"] for d in docs}
    per_file = []
    for name in ("00.jsonl.zst", "01.jsonl.zst", "02.jsonl"):
        from pipeline.core.documents import parse_line
        from pipeline.io.inputs import iter_lines
        found = 0
        for line in iter_lines(os.path.join(corpus, name), 1 << 24):
            try:
                text, _ = parse_line(line, 1 << 24)
            except ValueError:
                continue
            found += text in texts
        per_file.append(found)
    assert all(n > 0 for n in per_file)


@pytest.mark.slow
def test_natural_and_explicit_weights(corpus, tmp_path):
    from pipeline.cli import train_tokenizer as train_cli

    train_cli.main(sample_args(corpus, tmp_path / "gh", "--weights", "Github=1,DM Mathematics=1"))
    docs = read_sample(tmp_path / "gh")
    assert {d["subset"] for d in docs} == {"Github", "DM Mathematics"}
    stats = tsample.load_sample_stats(str(tmp_path / "gh"))
    assert stats["subsets"]["Pile-CC"]["filtered"]["subset_not_selected"] > 0
    train_cli.main(sample_args(corpus, tmp_path / "nat", "--weights", "natural", "--sample_mb", "100"))
    stats = tsample.load_sample_stats(str(tmp_path / "nat"))
    assert stats["documents"] == sum(s["documents_available"] for s in stats["subsets"].values())
    assert "target_bytes" not in stats["subsets"]["Github"]


@pytest.mark.slow
def test_a_changed_sample_is_refused(sample_dir, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in (tsample.SAMPLE_FILE, tsample.SAMPLE_STATS_FILE):
        data = open(os.path.join(sample_dir, name), "rb").read()
        (copy / name).write_bytes(data[:-200] + b"\n" if name == tsample.SAMPLE_FILE else data)
    with pytest.raises(ValueError, match="does not match"):
        tsample.load_sample_stats(str(copy))


def test_missing_input_fails_fast(tmp_path):
    from pipeline.cli import train_tokenizer as train_cli

    with pytest.raises(FileNotFoundError, match="No input files match"):
        train_cli.main(["--input", str(tmp_path / "nothing-*.jsonl.zst"), "--model_prefix", str(tmp_path / "m"),
                 *FAST_BEAM])


# --- training ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(sample_dir, tmp_path_factory):
    from pipeline.cli import train_tokenizer as train_cli

    out = tmp_path_factory.mktemp("model")
    card = train_cli.main(["--from_sample", sample_dir, "--model_prefix", str(out / "tiny"), "--vocab_size", "400",
                    "--num_threads", "2"])
    return str(out / "tiny"), card


@pytest.mark.slow
def test_training_writes_model_vocab_and_card(trained, sample_dir):
    prefix, card = trained
    with open(prefix + ".card.json", encoding="utf-8") as f:
        assert json.load(f) == card
    assert card["model"]["sha256"] == sha256(prefix + ".model")
    assert card["model"]["vocab_sha256"] == sha256(prefix + ".vocab")
    assert card["sample"]["sha256"] == sha256(os.path.join(sample_dir, tsample.SAMPLE_FILE))
    assert card["sample"]["subsets"]["Github"]["documents"] > 0
    assert card["trainer"]["vocab_size"] == 400 and card["trainer"]["num_threads"] == 2
    assert card["arguments"]["from_sample"] == sample_dir and "input" not in card["arguments"]
    assert card["trainer_input"]["sentences"] > 0
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    assert sp.get_piece_size() == 400
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)
    assert card["model"]["byte_pieces"] == 256
    # Identity normalization: text comes back exactly, whitespace runs and newlines included.
    text = "def f(x):\n    return  x  # 数据 🙂\n\n"
    assert sp.decode(sp.encode(text)) == text
    assert "<0x0A>" in sp.encode(text, out_type=str)  # newlines through byte fallback, as in Llama-2
    assert sp.encode("12345", out_type=str)[-5:] == ["1", "2", "3", "4", "5"]  # split digits


@pytest.mark.slow
def test_training_is_deterministic_and_refuses_to_overwrite(trained, sample_dir):
    from pipeline.cli import train_tokenizer as train_cli

    prefix, card = trained
    with pytest.raises(FileExistsError, match="--overwrite"):
        train_cli.main(["--from_sample", sample_dir, "--model_prefix", prefix, "--vocab_size", "400"])
    before = {ext: sha256(prefix + ext) for ext in (".model", ".vocab", ".card.json")}
    train_cli.main(["--from_sample", sample_dir, "--model_prefix", prefix, "--vocab_size", "400", "--num_threads", "2",
             "--overwrite"])
    assert {ext: sha256(prefix + ext) for ext in (".model", ".vocab", ".card.json")} == before


@pytest.mark.slow
def test_one_command_equals_sample_then_train(corpus, trained, tmp_path):
    from pipeline.cli import train_tokenizer as train_cli

    prefix, card = trained
    one = train_cli.main([*inputs(corpus), "--sample_mb", "0.3", "--max_doc_chars", "20000", "--model_prefix",
                   str(tmp_path / "one"), "--vocab_size", "400", "--num_threads", "2", *FAST_BEAM])
    assert one["model"]["sha256"] == card["model"]["sha256"]
    assert one["sample"] == card["sample"]
    assert one["arguments"]["input"] == [os.path.join(corpus, "*.jsonl.zst"), os.path.join(corpus, "*.jsonl")]
    assert not any(name.startswith("tokenizer-sample-") for name in os.listdir(tmp_path))


@pytest.mark.slow
def test_a_vocab_too_large_for_the_sample_says_so(tmp_path):
    from pipeline.cli import train_tokenizer as train_cli

    write_lines(str(tmp_path / "c" / "a.jsonl.zst"), [pile_line("tiny text only", "Github")] * 3)
    with pytest.raises(ValueError, match="too small for this --vocab_size"):
        train_cli.main(["--input", str(tmp_path / "c" / "*.jsonl.zst"), "--model_prefix", str(tmp_path / "m"),
                 "--vocab_size", "5000", *FAST_BEAM])


@pytest.mark.slow
def test_the_trained_model_drives_the_pipeline(trained, corpus, tmp_path):
    prefix, card = trained
    manifest = run.main([
        *inputs(corpus), "--output_dir", str(tmp_path / "out"), "--tokenizer_model", prefix + ".model",
        "--seq_len", "128", *FAST_BEAM,
    ])
    tok = manifest["tokenizer"]
    assert tok["sha256"] == card["model"]["sha256"]
    assert (tok["vocab_size"], tok["bos_id"], tok["eos_id"], tok["unk_id"], tok["pad_id"]) == (400, 1, 2, 0, -1)
    assert manifest["totals"]["records"] > 0
    assert manifest["dead_letters"]["by_reason"] == EXPECTED_DEAD


@pytest.mark.slow
def test_only_bad_lines_give_a_clear_error(tmp_path):
    from pipeline.cli import train_tokenizer as train_cli

    write_lines(str(tmp_path / "c" / "a.jsonl.zst"), BAD_LINES)
    with pytest.raises(ValueError, match="The sample is empty"):
        train_cli.main(["--input", str(tmp_path / "c" / "*.jsonl.zst"), "--model_prefix", str(tmp_path / "m"),
                 "--vocab_size", "400", *FAST_BEAM])
    assert not os.path.exists(tmp_path / "m.model")


@pytest.mark.slow
def test_a_corrupt_file_fails_unless_skipped(tmp_path):
    from pipeline.cli import train_tokenizer as train_cli

    good = write_lines(str(tmp_path / "c" / "a.jsonl.zst"), compose_lines(random.Random(1), 30))
    data = open(good, "rb").read()
    with open(tmp_path / "c" / "b.jsonl.zst", "wb") as f:
        f.write(data[: len(data) // 2])  # cut mid-frame
    args = ["--input", str(tmp_path / "c" / "*.jsonl.zst"), "--sample_only", "--sample_mb", "1", *FAST_BEAM]
    with pytest.raises(Exception, match="truncated"):
        train_cli.main([*args, "--work_dir", str(tmp_path / "w1")])
    train_cli.main([*args, "--work_dir", str(tmp_path / "w2"), "--on_corrupt_file", "skip"])
    stats = tsample.load_sample_stats(str(tmp_path / "w2"))
    assert stats["damaged_files"] == [str(tmp_path / "c" / "b.jsonl.zst")]
    assert stats["documents"] > 0
