"""Language identification: accurate on this machine's labelled text, the codes and rules of --languages."""

from __future__ import annotations

import collections

import pytest
from language_docs import MIN_CHARS, documents

from pipeline.stages.base import Doc
from pipeline.stages.language import (
    BELOW_MIN,
    LABELS,
    NOT_LISTED,
    Language,
    LanguageIdentifier,
    LanguageOptions,
    language_rule,
    parse_languages,
    parse_score,
)


@pytest.fixture(scope="module")
def identifier() -> LanguageIdentifier:
    return LanguageIdentifier()


@pytest.mark.slow
def test_at_least_95_percent_right_on_real_translations(identifier):
    docs = documents(60)
    per_language = collections.Counter(code for code, _ in docs)
    assert len(per_language) >= 10 and min(per_language.values()) >= 40, per_language
    assert all(len(text) >= MIN_CHARS for _, text in docs)
    right = collections.Counter(code for code, text in docs if identifier.identify(text)[0] == code)
    accuracy = sum(right.values()) / len(docs)
    assert accuracy >= 0.95, (accuracy, {code: f"{right[code]}/{n}" for code, n in per_language.items()})
    assert right["pt"] / per_language["pt"] >= 0.9 and right["zh"] / per_language["zh"] >= 0.9  # pt_BR, zh_TW


def test_the_model_answers_only_labels_it_is_known_for(identifier):
    labels, scores = identifier._model.predict("Ein kurzer Satz, und noch einer.", k=-1)
    assert {label.removeprefix("__label__") for label in labels} <= LABELS
    code, score = identifier.identify("Ein kurzer Satz.\nUnd noch einer, auf Deutsch.")
    assert code == "de" and 0.5 < score <= 1.0


def test_codes_are_checked_and_normalized():
    assert parse_languages("en,de") == ("de", "en")
    assert parse_languages("pt-BR,zh_TW,zh-Hans,PT") == ("pt", "zh")
    assert parse_languages(["en", "fr"]) == ("en", "fr")
    with pytest.raises(ValueError, match="'xx' is not a language"):
        parse_languages("en,xx")
    assert parse_score("0.65") == 0.65
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        parse_score("1.5")


def test_rules():
    opts = LanguageOptions(languages=("en", "de"), language_min_score=0.5)
    assert language_rule("en", 0.9, opts) is None
    assert language_rule("en", 0.5, opts) is None
    assert language_rule("en", 0.49, opts) == BELOW_MIN
    assert language_rule("fr", 0.99, opts) == NOT_LISTED


def test_a_removal_carries_the_language_its_score_and_the_threshold():
    stage = Language(LanguageOptions(languages=("en",), language_min_score=1.0))
    stage.setup()
    below = stage.apply(Doc("This is a plain sentence about the weather of the day.", "Pile-CC", 0, 1))
    assert below.rule == BELOW_MIN and below.fields["language"] == "en"
    assert below.fields["threshold"] == 1.0 and 0 < below.fields["language_score"] <= 1
    other = stage.apply(Doc("Ein kurzer Satz, und noch einer auf Deutsch.", "Pile-CC", 0, 2))
    assert other.rule == NOT_LISTED and set(other.fields) == {"language", "language_score"}


def test_options_made_in_code_are_checked_as_flags_are():
    with pytest.raises(ValueError, match="--language_min_score 1.5 is above 1"):
        LanguageOptions(languages=("en",), language_min_score=1.5)
    with pytest.raises(ValueError, match="--languages: 'xx' is not a language"):
        LanguageOptions(languages=("xx",))
    with pytest.raises(ValueError, match="--languages pt-BR: give the model's codes"):
        LanguageOptions(languages=("pt-BR",))
    assert LanguageOptions(languages=("en", "de")).languages == ("en", "de")
