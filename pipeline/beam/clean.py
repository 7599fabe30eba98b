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
input dict} for a removal, reason "<stage>_cut" for a kept document whose text a stage cut. A
stage must decide from the document alone, so the result is the same on any runner.
"""

from __future__ import annotations

import apache_beam as beam

from pipeline.stages.base import Doc, DocumentStage, Keep, Remove

REMOVED_TAG = "removed"


def _get(document: dict, path: str):
    value = document
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


class _CleanFn(beam.DoFn):
    def __init__(self, stages: tuple[DocumentStage, ...], text_key: str, subset_key: str):
        self._stages, self._text_key, self._subset_key = stages, text_key, subset_key

    def setup(self):
        for stage in self._stages:
            stage.setup()

    def process(self, document: dict):
        text, subset = _get(document, self._text_key), _get(document, self._subset_key)
        if not isinstance(text, str):
            raise ValueError(f"CleanDocuments: a document without a text string at {self._text_key!r}")
        cuts, labels = [], {}
        for stage in self._stages:
            verdict = stage.apply(Doc(text, str(subset), 0, 0))
            if isinstance(verdict, Remove):
                yield beam.pvalue.TaggedOutput(REMOVED_TAG, {"reason": stage.name, "rule": verdict.rule,
                                                             "subset": subset, **verdict.fields,
                                                             "document": document})
                return
            if isinstance(verdict, Keep):
                if verdict.cut_rule is not None:
                    cuts.append({"reason": stage.cut_reason, "rule": verdict.cut_rule, "subset": subset,
                                 **verdict.fields, "document": document})
                if verdict.text is not None:
                    text = verdict.text
                labels.update(verdict.labels)
        for cut in cuts:
            yield beam.pvalue.TaggedOutput(REMOVED_TAG, cut)
        kept = dict(document)
        if text is not _get(document, self._text_key):
            kept = _with(kept, self._text_key, text)
        if labels:
            kept["labels"] = {**kept.get("labels", {}), **labels}
        yield kept


def _with(document: dict, path: str, value) -> dict:
    """A copy of the document with the value at a dotted path replaced (the dicts on the way copied)."""
    head, _, rest = path.partition(".")
    out = dict(document)
    out[head] = _with(out.get(head) or {}, rest, value) if rest else value
    return out


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
        return documents | "Clean" >> beam.ParDo(_CleanFn(self._stages, self._text_key, self._subset_key)).with_outputs(
            REMOVED_TAG, main="kept")
