"""The run's document policy rebuilt from its manifest, and documents read back decided again by it.

A cut record says that a document was kept with a changed text (C4's dropped lines, PII, a
decontamination's spans); the text kept is not stored anywhere but the shards' tokens. It is made
again here by the job's own code: the stages the manifest's config names, with the options it
records (pipeline/config/stages.py), run by `DocumentPolicy` (pipeline/stages/policy.py) with the
document's dedup records applied as the job applies them. Nothing of a stage is copied here.

Deciding again is also the check that a document read back is the one the run decided: the records
it gives must be the records the run wrote (same reasons, rules and the fields both have), else the
input (or the stage's code) changed since the run, and the text shown would not be what was removed.
"""

from __future__ import annotations

import argparse
import dataclasses

from pipeline.config.stages import StageChoice
from pipeline.core.documents import BadRecord, Line, parse_document
from pipeline.core.options import options_from, options_of
from pipeline.core.versions import created_by
from pipeline.inspect.readback import InputChanged, max_line_bytes, schema_of
from pipeline.io.inputs import Chunk
from pipeline.io.urls import redact_url
from pipeline.stages import registry
from pipeline.stages.policy import DocumentPolicy
from pipeline.stages.rules import DEDUP_REASONS

_NOT_COMPARED = frozenset({"file"})  # the path as shown: the manifest's, whatever the location read now


class _Every:
    """Every subset is selected: a document listed in removed/ was in a selected subset."""

    def __contains__(self, subset) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class Decided:
    """A document read back and decided again: its records (as the run wrote them) and its texts.

    input_text: the line's text. text: for a removal, the text the removing step saw (the input's, or
    what the stages before it left); for a cut, the text the job kept.
    """

    file_index: int
    line: int
    subset: str
    records: tuple[dict, ...]
    input_text: str
    text: str
    cut: bool


def stage_choice(config: dict) -> StageChoice:
    """The stages the run had on, each with the options its manifest records (the registry's classes)."""
    names = tuple(config.get("filters") or ())
    options = []
    for cls in registry.STAGES.values():
        if cls.Options is None:
            continue
        given = {f.name: config[f.name] for f, _ in options_of(cls.Options, cli=True) if f.name in config}
        if given:
            options.append(options_from(cls.Options, argparse.Namespace(**given)))
    choice = StageChoice(filters=names, stage_options=tuple(options))
    try:
        choice.check_stages()
    except ValueError as e:
        raise ValueError(f"the run's stages cannot be made again here ({e}): a stage of a package of your own must "
                         "be registered (imported) in this process too") from None
    return choice


class Replay:
    """The run's policy, set up once: `decide` documents of one input file again."""

    def __init__(self, manifest: dict):
        config = manifest.get("config", {})
        self._choice = stage_choice(config)
        self._policy = DocumentPolicy(schema_of(config), max_line_bytes(config), _Every(),
                                      self._choice.configured_stages())
        self._set_up = False
        self._version = manifest.get("created_by", "another version")

    @property
    def stage_names(self) -> tuple[str, ...]:
        """The run's stages, in the order they ran."""
        return self._choice.stage_names()

    def decide(self, file_index: int, path: str, lines: dict[int, Line],
               records: dict[int, list[dict]]) -> list[Decided]:
        """Each line (number -> Line) decided again, checked against its records (number -> the run's records).

        Raises InputChanged naming the file and line when the decision is not the run's.
        """
        if not self._set_up:
            self._policy.setup()
            self._set_up = True
        numbers = sorted(lines)
        chunk = Chunk(file_index, 0, path, tuple(lines[n] for n in numbers))
        dedup = {n: r for n in numbers for r in records[n] if r["reason"] in DEDUP_REASONS}
        out = []
        for outcome in self._policy.decide(chunk, removed=dedup):
            number = outcome.line.number
            recorded = tuple(records[number])
            now = () if outcome.bad is not None else tuple(outcome.records)
            problem = _difference(recorded, now)
            if problem:
                raise InputChanged(
                    f"{redact_url(path)} line {number}: {problem}. The input changed since the run, or the stages did "
                    f"(the output was written by {self._version}; this is {created_by()})")
            try:
                input_text = parse_document(outcome.line, self._policy.max_line_bytes, self._policy.schema).text
            except BadRecord:  # not reached: a bad line has no records, which _difference refused
                input_text = ""
            out.append(Decided(file_index, number, outcome.subset or "", recorded, input_text, outcome.text or "",
                               outcome.kept))
        return out


def _difference(recorded: tuple[dict, ...], now: tuple[dict, ...]) -> str | None:
    """Why the records decided now are not the run's (None when they agree)."""
    def key(record):
        return record["reason"], record.get("rule", "")

    if sorted(map(key, recorded)) != sorted(map(key, now)):
        then = ", ".join("/".join(filter(None, key(r))) for r in recorded)
        return f"the run recorded {then or 'nothing'}; deciding it again gives " + (
            ", ".join("/".join(filter(None, key(r))) for r in now) or "no removal or cut")
    for old, new in zip(sorted(recorded, key=key), sorted(now, key=key), strict=True):
        for field in (set(old) & set(new)) - _NOT_COMPARED:
            if old[field] != new[field]:
                return f"its {old['reason']} record has {field} {old[field]!r}; deciding it again gives {new[field]!r}"
    return None
