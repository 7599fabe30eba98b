"""Document stages without Beam: the registry, the policy's order and verdicts, their options as flags, --id_key.

The whole job with a stage of a test's own is tests/test_stages_pipeline.py.
"""

import dataclasses
import json

import pytest
from corpus_helpers import pile_line

from pipeline.beam.sample import KeyDocumentsFn
from pipeline.cli import run, train_tokenizer
from pipeline.config.job import PipelineConfig
from pipeline.config.tokenizer import SampleConfig
from pipeline.core import documents
from pipeline.core.options import UsageError, option
from pipeline.io.inputs import Chunk
from pipeline.stages import registry
from pipeline.stages.base import FILTERED, Doc, DocumentStage, Keep, Remove, measured
from pipeline.stages.policy import DocumentPolicy, count
from pipeline.stages.ranges import AT_LEAST_0, check_ranges


@dataclasses.dataclass(frozen=True)
class WordOptions:
    word_banned: str = option("banana", help="a document holding this word is removed")
    word_min_words: int = option(0, help="fewer words: removed")

    def __post_init__(self):
        if self.word_min_words < 0:
            raise ValueError("--word_min_words must be >= 0")


class WordStage(DocumentStage):
    """Removes documents with a banned word; cuts a leading 'CUT ' and tallies it."""

    name = "word"
    Options = WordOptions

    def __init__(self, options=None):
        super().__init__(options)
        self.setups = 0

    def setup(self):
        self.setups += 1

    def apply(self, doc):
        words = doc.text.split()
        if self.options.word_banned in words:
            return Remove("banned_word", {"word": self.options.word_banned})
        if len(words) < self.options.word_min_words:
            return Remove("few_words")
        if doc.text.startswith("CUT "):
            return Keep(text=doc.text[4:], cut_rule="cut_prefix", fields={"chars": 4}, tally={"cuts": 1})
        return None


@dataclasses.dataclass(frozen=True)
class ShoutOptions:
    shout_languages: tuple[str, ...] = option((), parse=lambda v: tuple(v.split(",")), help="switches it on")


class ShoutStage(DocumentStage):
    """Upper-cases every text and labels it; switched on by its own option."""

    name = "shout"
    Options = ShoutOptions

    @classmethod
    def switched_on(cls, options):
        return bool(options.shout_languages)

    def apply_many(self, docs):
        return [Keep(text=d.text.upper(), labels={"lang": "en"}) if "quiet" not in d.text
                else Remove("quiet") for d in docs]

    def apply(self, doc):
        raise AssertionError("the policy calls apply_many")


@pytest.fixture
def stages():
    for cls in (WordStage, ShoutStage):
        registry.register(cls)
    yield
    for name in ("word", "shout"):
        registry.unregister(name)


def _chunk(texts, subset="Pile-CC", file_index=3):
    lines = tuple(documents.Line(i + 1, i * 100, pile_line(t, subset) if t is not None else b"{bad")
                  for i, t in enumerate(texts))
    return Chunk(file_index, 0, "/data/in.jsonl", lines)


def _policy(*stages, selected=frozenset({"Pile-CC"}), id_key=None):
    policy = DocumentPolicy(documents.Schema(id_key=id_key), 1 << 20, selected, stages)
    policy.setup()
    return policy


def test_the_rules_then_the_stages_in_order_each_on_the_text_left(stages):
    policy = _policy(WordStage(), ShoutStage())
    outcomes = policy.decide(_chunk(["a banana", "CUT keep me", "quiet one", "  ", "plain", None, "CUT quiet"]))
    got = [(o.reason, o.counts_as, o.text) if o.bad is None else o.bad.reason for o in outcomes]
    assert got == [("word", "removed", "a banana"), (None, None, "KEEP ME"), ("shout", "removed", "quiet one"),
                   ("empty_text", FILTERED, "  "), (None, None, "PLAIN"), "invalid_json",
                   ("shout", "removed", "quiet")]
    removal, cut, quiet = outcomes[0].records, outcomes[1].records, outcomes[2].records
    assert removal == ({"file": "/data/in.jsonl", "file_index": 3, "line": 1, "subset": "Pile-CC", "reason": "word",
                        "rule": "banned_word", "word": "banana"},)
    assert [r["reason"] for r in cut] == ["word_cut"] and cut[0]["rule"] == "cut_prefix" and cut[0]["chars"] == 4
    assert quiet[0]["rule"] == "quiet"
    # A document cut by one stage and removed by a later one is listed once, by its removal.
    assert [r["reason"] for r in outcomes[6].records] == ["shout"]
    assert outcomes[1].tally == {"word": {"cuts": 1}} and outcomes[1].labels == {"lang": "en"}


def test_counts_add_up_per_subset(stages):
    policy = _policy(WordStage(), selected=frozenset({"Pile-CC"}))
    outcomes = policy.decide(_chunk(["a banana", "CUT x", "", "ok"])) + policy.decide(_chunk(["other"], "Github"))
    subsets = {}
    for o in outcomes:
        count(subsets.setdefault(o.subset, {"documents": 0, "kept": 0, "filtered": {}}), o)
    assert subsets["Pile-CC"] == {"documents": 4, "kept": 2, "filtered": {"empty_text": 1}, "removed": {"word": 1},
                                  "cut": 1, "cut_by_reason": {"word_cut": 1}, "tallies": {"word": {"cuts": 1}}}
    assert subsets["Github"] == {"documents": 1, "kept": 0, "filtered": {"subset_not_selected": 1}}


def test_replayed_verdicts_decide_what_running_the_stages_decides(stages):
    chunk = _chunk(["a banana", "CUT keep me", "quiet one", "plain", "CUT banana"])
    direct = _policy(WordStage(), ShoutStage()).decide(chunk)
    verdicts = {o.line.number: o.verdict for o in direct if o.verdict is not None}
    replaying = DocumentPolicy(documents.Schema(), 1 << 20, frozenset({"Pile-CC"}), (WordStage(), ShoutStage()))
    replayed = replaying.decide(chunk, verdicts=verdicts)  # never set up: the stages do not run
    fields = ("subset", "text", "reason", "counts_as", "records", "tally", "labels")
    assert ([[getattr(o, f) for f in fields] for o in replayed] == [[getattr(o, f) for f in fields] for o in direct])
    with pytest.raises(RuntimeError, match="setup"):
        replaying.decide(chunk)


def test_dedup_records_come_last_and_pass_on_as_they_are():
    policy = _policy()
    dup = {"file_index": 3, "line": 2, "reason": "duplicate_exact", "chunk": 0, "subset": "Pile-CC"}
    cut = {"file_index": 3, "line": 3, "reason": "contaminated_cut", "spans": [[0, 5]], "subset": "Pile-CC"}
    outcomes = policy.decide(_chunk(["one", "two", "hello world"]), removed={2: dup, 3: cut})
    assert [o.reason for o in outcomes] == [None, "duplicate_exact", None]
    assert outcomes[1].records == (dup,) and outcomes[1].removed
    assert outcomes[2].text == " world" and outcomes[2].records == (cut,) and outcomes[2].cut_reasons() == [
        "contaminated_cut"]


def test_the_stages_see_the_document_and_its_place(stages):
    seen = []

    class Spy(WordStage):
        def apply(self, doc):
            seen.append(doc)

    _policy(Spy()).decide(_chunk(["x y"], file_index=5))
    assert seen == [Doc("x y", "Pile-CC", 5, 1)]


def test_a_stage_that_returns_something_else_is_named():
    class Broken(WordStage):
        name = "broken"

        def apply(self, doc):
            return "remove it"

    with pytest.raises(TypeError, match="stage broken"):
        _policy(Broken()).decide(_chunk(["x"]))


def test_the_registry_refuses_clashes(stages):
    class Again(WordStage):
        pass

    with pytest.raises(ValueError, match="taken"):
        registry.register(Again)
    for name in ("subset_not_selected", "duplicate_near", "word_cut", "Bad-Name"):
        with pytest.raises(ValueError):
            registry.register(type("S", (WordStage,), {"name": name}))

    @dataclasses.dataclass(frozen=True)
    class Clashing:
        word_banned: str = option("x", help="taken by the word stage")

    with pytest.raises(ValueError, match="word_banned"):
        registry.register(type("S", (WordStage,), {"name": "other", "Options": Clashing}))

    @dataclasses.dataclass(frozen=True)
    class Required:
        needed: str = option(help="no default")

    with pytest.raises(ValueError, match="default"):
        registry.register(type("S", (WordStage,), {"name": "other", "Options": Required}))
    with pytest.raises(ValueError, match="built-in"):
        registry.unregister("empty_text")
    assert "other" not in registry.STAGES


def test_remove_and_keep_refuse_the_records_own_keys():
    with pytest.raises(ValueError, match="reason"):
        Remove("r", {"reason": "x"})
    with pytest.raises(ValueError, match="cut_rule"):
        Keep(fields={"n": 1})


ARGS = ["--input", "x.jsonl", "--output_dir", "out", "--tokenizer_model", "m.model"]


def test_flags_come_from_each_stage_s_options(stages, tmp_path):
    config, _ = run.parse_args([*ARGS, "--filters", "word", "--word_banned", "kiwi", "--word_min_words", "3"])
    assert config.stage_names() == ("word",) and config.options_of_stage("word") == WordOptions("kiwi", 3)
    assert config.to_json()["word_banned"] == "kiwi" and config.to_json()["filters"] == ["word"]
    # Switched on by its own option, after the named ones; in a --config file's [pipeline] table too.
    (tmp_path / "c.toml").write_text('[pipeline]\nfilters = ["word"]\nshout_languages = "en,de"\n')
    config, _ = run.parse_args([*ARGS, "--config", str(tmp_path / "c.toml")])
    assert config.stage_names() == ("word", "shout")
    assert config.to_json()["shout_languages"] == ["en", "de"]
    assert [type(s) for s in config.configured_stages()] == [WordStage, ShoutStage]
    help_text = run.build_parser().format_help()
    assert "stage word" in help_text and "--word_banned" in help_text


@pytest.mark.parametrize(("flags", "message"), [
    (["--filters", "nope"], "no stage named 'nope'"),
    (["--filters", "empty_text"], "no stage named 'empty_text'"),
    (["--filters", "word,word"], "named twice"),
    (["--word_banned", "kiwi"], "--word_banned is an option of the word stage, which is not on"),
    (["--filters", "word", "--word_min_words", "-1"], "--word_min_words must be >= 0"),
])
def test_bad_stage_flags_are_refused_naming_the_flag(stages, flags, message):
    with pytest.raises(UsageError, match=message):
        run.parse_args([*ARGS, *flags])


def test_no_stage_records_nothing(stages):
    plain = PipelineConfig(inputs=("x",), output_dir="o", tokenizer_model="m")
    assert "filters" not in plain.to_json() and "word_banned" not in plain.to_json() and "id_key" not in plain.to_json()
    assert not plain.lists_removed and plain.document_policy().stages == ()
    assert PipelineConfig(inputs=("x",), output_dir="o", tokenizer_model="m", filters=("word",)).lists_removed


def test_the_tokenizer_sample_takes_the_same_stages(stages, tmp_path):
    command, sample, _, _ = train_tokenizer.parse_args(
        ["--input", "x", "--model_prefix", str(tmp_path / "m"), "--filters", "word", "--word_banned", "kiwi"])
    assert sample.stage_names() == ("word",) and sample.to_json()["word_banned"] == "kiwi"
    with pytest.raises(UsageError, match="--from_sample"):
        train_tokenizer.parse_args(["--from_sample", str(tmp_path), "--model_prefix", "m", "--filters", "word"])
    config = SampleConfig(inputs=("x",), filters=("word",), weights="natural")
    fn = KeyDocumentsFn(config)
    fn.setup()
    out = list(fn.process(_chunk(["a banana", "CUT kept", "fine", ""])))
    texts = [value[1][5] for value in out if not hasattr(value, "tag")]
    (stats,) = [value.value for value in out if hasattr(value, "tag")]
    assert texts == ["kept", "fine"]
    assert stats.subsets["Pile-CC"].filtered == {"word": 1, "empty_text": 1}


def test_id_key_reads_the_document_s_own_id():
    schema = documents.Schema(id_key="meta.id")
    line = documents.Line(1, 0, json.dumps({"text": "t", "meta": {"pile_set_name": "ArXiv", "id": "doc-7"}}).encode())
    assert documents.parse_document(line, 1 << 20, schema).id == "doc-7"
    for value, expected in ((12, 12), ("x" * 257, None), ([1], None), (True, None), (None, None)):
        data = json.dumps({"text": "t", "meta": {"pile_set_name": "ArXiv", "id": value}}).encode()
        assert documents.parse_document(documents.Line(1, 0, data), 1 << 20, schema).id == expected
    bad = documents.Line(2, 10, json.dumps({"text": 5, "meta": {"id": "doc-8"}}).encode())
    assert documents.line_id(bad, schema) == "doc-8" and documents.line_id(documents.Line(3, 0, b"{x"), schema) is None
    assert documents.parse_document(line, 1 << 20, documents.Schema()).id is None
    with pytest.raises(ValueError, match="--id_key"):
        documents.Schema(id_key="text")
    config = PipelineConfig(inputs=("x",), output_dir="o", tokenizer_model="m", id_key="meta.id")
    assert config.schema.id_key == "meta.id" and config.to_json()["id_key"] == "meta.id"


def test_removal_records_carry_the_id():
    policy = _policy(WordStage(), id_key="id")
    data = json.dumps({"text": "a banana", "id": 41, "meta": {"pile_set_name": "Pile-CC"}}).encode()
    (outcome,) = policy.decide(Chunk(0, 0, "f", (documents.Line(1, 0, data),)))
    assert outcome.records[0]["id"] == 41


@dataclasses.dataclass(frozen=True)
class ShortDocsOptions:
    short_min_words: int = option(50, help="documents with fewer words are removed")

    def __post_init__(self):
        check_ranges(self, {"short_min_words": AT_LEAST_0})


class ShortDocs(DocumentStage):
    """docs/extending.md's example stage, as written there."""

    name = "short_docs"
    Options = ShortDocsOptions

    def apply(self, doc):
        n = len(doc.text.split())
        if n < self.options.short_min_words:
            return Remove("too_few_words", measured(n, self.options.short_min_words))
        return None


def test_the_development_guide_s_stage_and_its_one_test():
    from pipeline.core.documents import Line, Schema

    policy = DocumentPolicy(Schema(), 1 << 20, {"Pile-CC"}, (ShortDocs(ShortDocsOptions(3)),))
    policy.setup()
    line = Line(1, 0, b'{"text": "two words", "meta": {"pile_set_name": "Pile-CC"}}')
    (outcome,) = policy.decide(Chunk(0, 0, "in.jsonl", (line,)))
    assert outcome.reason == "short_docs" and outcome.records[0]["rule"] == "too_few_words"
    assert (outcome.records[0]["value"], outcome.records[0]["threshold"]) == (2, 3)
    with pytest.raises(ValueError, match="--short_min_words -1 is below 0"):
        ShortDocsOptions(-1)


def test_a_stage_s_own_check_refuses_the_job_before_it_starts(stages, tmp_path, tiny_model, caplog):
    class Unready(WordStage):
        name = "unready"
        Options = None

        def check(self):
            raise ValueError("--filters unready: its package is not installed (pip install unready)")

    registry.register(Unready)
    try:
        path = tmp_path / "a.jsonl"
        path.write_text(pile_line("some text").decode() + "\n")
        assert run.cli(["--input", str(path), "--output_dir", str(tmp_path / "o"), "--tokenizer_model",
                        tiny_model, "--filters", "unready"]) == 2
        assert "its package is not installed" in caplog.text and not (tmp_path / "o").exists()
    finally:
        registry.unregister("unready")
