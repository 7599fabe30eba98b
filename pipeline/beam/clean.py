"""`CleanDocuments`: the document stages as a Beam PTransform, for a pipeline of your own.

    stages = (GopherQuality(), C4Quality(), Language(LanguageOptions(languages=("en",))))
    cleaned = docs | CleanDocuments(stages)     # docs: dicts in the Pile's layout
    cleaned.kept | TokenShards(config)          # the documents kept, with the text the stages left
    cleaned.removed | beam.Map(json.dumps) | beam.io.WriteToText(...)   # one record per removal or cut

The stages run in the order given, each on the text the one before left, the first that removes a
document giving the reason, exactly as `pile-pipeline run --filters ...` runs them (the same
classes, pipeline/stages/); each worker sets them up once. A kept document is the input dict with
its text replaced when a stage changed it (and, when a stage labelled it, `labels` added:
{"language": "en"}). A record is {"reason": stage, "rule", "subset", its fields, "document": the
input dict} for a removal, reason "<stage>_cut" for a kept document whose text a stage cut (with
the pii stage among them, redacted). A stage must decide from the document alone, so the result is
the same on any runner. The work is pipeline/process/clean.py's.
"""

from __future__ import annotations

import apache_beam as beam

from pipeline.process.clean import Cleaner
from pipeline.stages.base import DocumentStage

REMOVED_TAG = "removed"


class _CleanFn(beam.DoFn):
    def __init__(self, cleaner: Cleaner):
        self._cleaner = cleaner

    def setup(self):
        self._cleaner.setup()

    def process(self, document: dict):
        cleaned = self._cleaner.clean(document)
        for record in cleaned.records:
            yield beam.pvalue.TaggedOutput(REMOVED_TAG, record)
        if cleaned.kept is not None:
            yield cleaned.kept


class CleanDocuments(beam.PTransform):
    """Documents (dicts) in; `.kept` (cleaned) and `.removed` (records) out. See the module docstring.

    stages: DocumentStage instances (their options given), in order. text_key, subset_key: dotted
    paths of the text and the subset name in each document (as --text_key, --subset_key).
    """

    def __init__(self, stages, text_key: str = "text", subset_key: str = "meta.pile_set_name"):
        super().__init__()
        self._stages = tuple(stages)
        if not self._stages or not all(isinstance(s, DocumentStage) for s in self._stages):
            raise ValueError("CleanDocuments takes DocumentStage instances (pipeline/stages/), at least one")
        for stage in self._stages:
            stage.check()
        self._text_key, self._subset_key = text_key, subset_key

    def expand(self, documents):
        cleaner = Cleaner(self._stages, self._text_key, self._subset_key)
        return documents | "Clean" >> beam.ParDo(_CleanFn(cleaner)).with_outputs(REMOVED_TAG, main="kept")
