"""The classifier stages' rules on hand-made inputs: options, refusals, records, bins, the model file's header.

The comparisons with datatrove and transformers on real text: tests/test_classifier_parity.py.
"""

from __future__ import annotations

import json
import pickle
import struct

import pytest

from pipeline.core.documents import Line
from pipeline.stages import classifier_training as recipe
from pipeline.stages import external, registry
from pipeline.stages.base import Doc, Keep, Remove
from pipeline.stages.fasttext_classifier import (
    FastTextClassifier,
    FastTextClassifierOptions,
    decide,
    parse_label_scores,
    score_bin,
)
from pipeline.stages.fasttext_file import read_header
from pipeline.stages.hf_classifier import HfClassifierOptions, int_score
from pipeline.stages.url_filter import UrlFilter, UrlFilterOptions, read_list

HQ = ["the study of science and the method of research", "a careful analysis of the data and the results"]
CC = ["buy cheap now click here for a free offer", "win money casino best discount sale today"]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    """A small hq/cc model, trained as train-classifier trains (one thread, seed 0)."""
    path = str(tmp_path_factory.mktemp("ft") / "m.bin")
    positive = [f"{HQ[i % 2]} {i % 7}" for i in range(200)]
    negative = [f"{CC[i % 2]} {i % 5}" for i in range(200)]
    recipe.train(positive, negative, path, recipe.FastTextSettings(dim=8, epoch=10, lr=0.5), 0.1)
    return path


def test_label_scores_parse_in_order_and_refuse_mistakes():
    assert parse_label_scores("hq:0.5, __label__math:0.9") == (("hq", 0.5), ("math", 0.9))
    assert parse_label_scores(["a:b:0.1"]) == (("a:b", 0.1),)
    for bad in ("hq", "hq:x", "hq:0.1,hq:0.2", ":0.3"):
        with pytest.raises(ValueError):
            parse_label_scores(bad)
    with pytest.raises(ValueError, match="give one of them"):
        FastTextClassifierOptions(fasttext_keep_labels=(("a", 0.1),), fasttext_remove_labels=(("b", 0.1),))


def test_decide_is_datatroves_rule():
    keep, remove = (("hq", 0.5), ("x", 0.9)), (("cc", 0.8),)
    assert decide({"hq": 0.5, "cc": 0.5}, keep, ()) is None  # at the threshold: kept (>=)
    assert decide({"hq": 0.4, "x": 0.85}, keep, ()) == ("keep_labels_below_min", "x", 0.9)  # the closest
    assert decide({"cc": 0.7}, (), (("hq", 0.1),)) is None  # a label the model did not give scores -9e9
    assert decide({}, keep, ()) == ("keep_labels_below_min", "hq", 0.5)
    assert decide({"cc": 0.8}, (), remove) == ("remove_label_at_min", "cc", 0.8)
    assert decide({"cc": 0.79}, (), remove) is None and decide({"cc": 1.0}, (), ()) is None


def test_score_bins():
    assert [score_bin(s, 20) for s in (0.0, 0.049, 0.05, 0.999, 1.00001)] == ["0.00", "0.00", "0.05", "0.95", "0.95"]
    assert score_bin(0.005, 200) == "0.005" and score_bin(0.5, 1) == "0.00" and score_bin(0.5, 3) == "0.33"


def test_the_header_names_the_labels_and_refuses_other_files(model, tmp_path):
    header = read_header(model)
    assert sorted(header.labels) == ["cc", "hq"] and header.dim == 8 and header.word_ngrams == 2
    (tmp_path / "x.bin").write_bytes(b"not a model" * 20)
    with pytest.raises(ValueError, match="no fastText magic"):
        read_header(str(tmp_path / "x.bin"))
    data = bytearray(open(model, "rb").read())
    struct.pack_into("<i", data, 8 + 7 * 4, 1)  # Args.model: cbow
    (tmp_path / "cbow.bin").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="not a supervised classifier"):
        read_header(str(tmp_path / "cbow.bin"))
    (tmp_path / "cut.bin").write_bytes(open(model, "rb").read()[:100])
    with pytest.raises(ValueError, match="cut short"):
        read_header(str(tmp_path / "cut.bin"))


def test_fasttext_stage_records_and_labels(model):
    stage = FastTextClassifier(FastTextClassifierOptions(fasttext_model=model, fasttext_keep_labels=(("hq", 0.5),)))
    stage.check()
    good, bad = stage.apply_many([Doc(HQ[0] + "\n" + HQ[1], "s", 0, 1), Doc(CC[0], "s", 0, 2)])
    assert isinstance(good, Keep) and set(good.labels) == {"fasttext.hq", "fasttext.cc"}
    (scores,) = stage.scores([HQ[0] + "\n" + HQ[1]])
    assert good.labels == {f"fasttext.{k}": score_bin(v, 20) for k, v in scores.items()}
    assert isinstance(bad, Remove) and bad.rule == "keep_labels_below_min"
    assert bad.fields["label"] == "hq" and bad.fields["threshold"] == 0.5 and bad.fields["score"] < 0.5
    assert set(bad.fields["scores"]) == {"hq", "cc"} and json.dumps(bad.fields)  # rounded, JSON-ready
    assert all(len(repr(v).split(".")[1]) <= 6 for v in bad.fields["scores"].values())
    again = pickle.loads(pickle.dumps(stage))  # the model is not pickled; loaded again on use
    assert again._model is None and again.apply(Doc(CC[0], "s", 0, 2)) == bad


def test_fasttext_check_refuses_what_every_worker_would_fail_on(model, tmp_path):
    def check(**kw):
        FastTextClassifier(FastTextClassifierOptions(**kw)).check()

    with pytest.raises(ValueError, match="--fasttext_model: give"):
        check()
    with pytest.raises(ValueError, match="no such file"):
        check(fasttext_model=str(tmp_path / "none.bin"))
    with pytest.raises(ValueError, match="a local path"):
        check(fasttext_model="s3://b/m.bin")
    with pytest.raises(ValueError, match="has no label math .its labels: "):
        check(fasttext_model=model, fasttext_remove_labels=(("math", 0.5),))


def test_training_is_deterministic_on_one_thread(tmp_path):
    positive, negative = [f"{HQ[i % 2]} {i}" for i in range(100)], [f"{CC[i % 2]} {i}" for i in range(100)]
    settings = recipe.FastTextSettings(dim=8, epoch=3)
    digests = []
    for name in ("a.bin", "b.bin"):
        measures, counts = recipe.train(positive, negative, str(tmp_path / name), settings, 0.2)
        card = recipe.write_card(str(tmp_path / name), {}, settings, counts, measures)
        digests.append(card["sha256"])
        assert card["deterministic"] and (tmp_path / name.replace(".bin", ".card.json")).exists()
    assert digests[0] == digests[1]
    assert measures.auc == 1.0 and counts["held_out"]["hq"] + counts["train"] + counts["held_out"]["cc"] == 200


def test_auc_and_the_split():
    assert recipe.auc([0.9, 0.8], [0.1, 0.2]) == 1.0 and recipe.auc([0.1], [0.9]) == 0.0
    assert recipe.auc([0.5, 0.5], [0.5]) == 0.5  # ties count half
    held = [recipe.held_out(0, "hq", i, 0.1) for i in range(10_000)]
    assert 900 < sum(held) < 1100 and held == [recipe.held_out(0, "hq", i, 0.1) for i in range(10_000)]
    assert recipe.fasttext_line("hq", " a\nb\t c ") == "__label__hq a b c"


def test_int_score_is_fineweb_edus():
    assert [int_score(s) for s in (-1.0, 0.49, 0.5, 1.5, 2.5, 2.51, 4.9, 7.0)] == [0, 0, 0, 2, 2, 3, 5, 5]
    with pytest.raises(ValueError):
        HfClassifierOptions(hf_keep_labels=(("a", 0.1),), hf_remove_labels=(("b", 0.1),))


def test_url_lists_read_as_datatrove_reads_them(tmp_path):
    path = tmp_path / "words.txt"
    path.write_text("# comment\nHot-Dog\n\n  padded  \r\n#x\n")
    assert read_list(str(path), True) == frozenset({"hotdog", "", "padded"})
    assert read_list(str(path), False) == frozenset({"Hot-Dog", "", "padded"})


def test_url_stage_rules_and_records(tmp_path):
    (tmp_path / "domains").write_text("bad.com\nsub.ok.org\n")
    (tmp_path / "words").write_text("porn\n")
    (tmp_path / "soft").write_text("sex\nxxx\n")
    (tmp_path / "sub").write_text("auto erotic\n")
    stage = UrlFilter(UrlFilterOptions(url_key="meta.url", url_blocked_domains=str(tmp_path / "domains"),
                                       url_banned_words=str(tmp_path / "words"),
                                       url_soft_banned_words=str(tmp_path / "soft"),
                                       url_banned_subwords=str(tmp_path / "sub")))
    stage.check()

    def verdict(url):
        line = json.dumps({"text": "t", "meta": {"url": url}}).encode()
        return stage.apply(Doc("t", "s", 0, 1, Line(1, 0, line)))

    assert verdict("https://www.bad.com/x") == Remove("domain", {"domain": "bad.com"})
    assert verdict("http://sub.ok.org:80/") == Remove("subdomain", {"domain": "sub.ok.org"})
    assert verdict("http://ok.org/porn/") == Remove("hard_blacklisted", {"word": "porn"})
    assert verdict("http://ok.org/PORN/") is None  # the URL's words keep their case, as datatrove's
    assert verdict("http://ok.org/sex/xxx") == Remove("soft_blacklisted", {"score": 2, "threshold": 2})
    assert verdict("http://ok.org/Auto-Erotic") == Remove("blacklisted_subword", {"word": "autoerotic"})
    assert stage.apply(Doc("t", "s", 0, 1, Line(1, 0, b'{"text": "t"}'))).rule == "no_url"
    assert stage.apply(Doc("t", "s", 0, 1, None)).rule == "no_url"
    with pytest.raises(ValueError, match="--url_banned_words .*: no such file"):
        UrlFilter(UrlFilterOptions(url_banned_words=str(tmp_path / "none"))).check()


def test_an_external_stage_travels_by_name(tmp_path, monkeypatch):
    (tmp_path / "extstage_mod.py").write_text(
        "import dataclasses\nfrom pipeline.core.options import option\n"
        "from pipeline.stages.base import DocumentStage, Remove\n"
        "@dataclasses.dataclass(frozen=True)\nclass ExtOptions:\n    ext_word: str = option('x', help='w')\n"
        "class Ext(DocumentStage):\n    name = 'ext_stage'\n    Options = ExtOptions\n"
        "    def apply(self, doc):\n        return Remove('has') if self.options.ext_word in doc.text else None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert external.load_module("extstage_mod") == ["ext_stage"]
        cls = registry.STAGES["ext_stage"]
        stage = external.instance(cls, cls.Options("y"))
        carried = pickle.dumps(stage)
        assert b"extstage_mod" in carried and b"ExtOptions" not in carried
        again = pickle.loads(carried)
        assert again.apply(Doc("a y b", "s", 0, 1)) == Remove("has") and again.name == "ext_stage"
        assert external.restore(external.carry(cls.Options("z"))) == cls.Options("z")
        lost = external.ExternalStage(external.Carried("no_such_mod", "Ext", "ext_stage", "removed"), None)
        with pytest.raises(external.StageModuleMissing, match="cannot import its module no_such_mod .* every worker"):
            lost.setup()
    finally:
        registry.unregister("ext_stage")
        external.EXTERNAL.pop("ext_stage", None)


def test_the_url_filter_reads_the_url_of_a_document_cleaned_without_a_line(tmp_path):
    """The Cleaner (CleanDocuments' engine) hands a stage the whole document, so the URL filter sees its URL."""
    from pipeline.process.clean import Cleaner
    from pipeline.stages.url_filter import UrlFilter, UrlFilterOptions

    blocked = tmp_path / "domains.txt"
    blocked.write_text("blocked.com\n")
    stage = UrlFilter(UrlFilterOptions(url_blocked_domains=str(blocked)))
    cleaner = Cleaner((stage,))
    cleaner.setup()
    text = "A document of several words."
    kept = cleaner.clean({"text": text, "url": "https://fine.com/page", "meta": {"pile_set_name": "Pile-CC"}})
    removed = cleaner.clean({"text": text, "url": "https://www.blocked.com/x", "meta": {"pile_set_name": "Pile-CC"}})
    assert kept.kept is not None and not kept.records
    assert removed.kept is None
    assert [(r["reason"], r["rule"]) for r in removed.records] == [("url_filter", "domain")]
