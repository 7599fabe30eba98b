"""CleanDocuments: the stages as a PTransform in a pipeline of one's own, beside TokenShards."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.beam.clean import CleanDocuments
from pipeline.stages.c4_quality import C4Quality
from pipeline.stages.gopher_quality import GopherQuality
from pipeline.stages.language import Language, LanguageOptions
from pipeline.stages.pii import Pii, PiiOptions

pytestmark = pytest.mark.slow

PROSE = "\n".join(f"Line {i} of the report and the notes of the day were filed in order by the clerk."
                  for i in range(8))
DOCS = [
    {"text": PROSE, "meta": {"pile_set_name": "Pile-CC"}},
    {"text": PROSE + "\nMail ann@example.net today.\nno punctuation here", "meta": {"pile_set_name": "Github"}},
    {"text": "Too short.", "meta": {"pile_set_name": "Pile-CC"}},
    {"text": "\n".join(["Der Bericht des Tages wurde von dem Schreiber in Ordnung abgelegt, und die "
                        "Notizen auch."] * 2 + [PROSE[:200]]), "meta": {"pile_set_name": "ArXiv"}},
]


def test_kept_and_removed_are_what_the_stages_decide():
    stages = [GopherQuality(), C4Quality(), Language(LanguageOptions(languages=("en",))),
              Pii(PiiOptions(pii=("email",)))]
    with TestPipeline() as p:
        cleaned = p | beam.Create(DOCS) | CleanDocuments(stages)
        assert_that(cleaned.kept | beam.Map(lambda d: (d["meta"]["pile_set_name"], d["text"], d["labels"])),
                    equal_to([("Pile-CC", PROSE, {"language": "en"}),
                              ("Github", PROSE + "\nMail email@example.com today.", {"language": "en"})]),
                    label="kept")
        assert_that(cleaned.removed | beam.Map(lambda r: (r["document"]["meta"]["pile_set_name"], r["reason"],
                                                          r["rule"])),
                    equal_to([("Pile-CC", "gopher_quality", "gopher_short_doc"),
                              ("Github", "c4_quality_cut", "c4_lines_removed"),
                              ("ArXiv", "c4_quality", "too_few_sentences")]),
                    label="removed")


def test_refuses_what_is_not_a_stage():
    with pytest.raises(ValueError, match="DocumentStage instances"):
        CleanDocuments([lambda doc: None])
    with pytest.raises(ValueError, match="--languages"):
        CleanDocuments([Language()])
