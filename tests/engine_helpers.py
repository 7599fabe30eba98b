"""What the engine's tests share: a stage of their own, configs, tokenizer specs, chunks of lines."""

from __future__ import annotations

import json

from pipeline.config.job import PipelineConfig
from pipeline.core.documents import Line
from pipeline.io.inputs import Chunk
from pipeline.stages.base import DocumentStage, Keep, Remove
from pipeline.tokenize.model import BackendChoice, TokenizerModel


class FruitStage(DocumentStage):
    """Removes a text holding "banana" (its first words as a field), cuts a leading "CUT ", labels "apple" texts."""

    name = "engine_fruit"

    def apply(self, doc):
        if "banana" in doc.text.split():
            return Remove("banana", {"first_words": doc.text[:60]})
        if doc.text.startswith("CUT "):
            return Keep(text=doc.text[4:], cut_rule="cut_prefix", fields={"chars": 4}, tally={"cuts": 1})
        if "apple" in doc.text.split():
            return Keep(labels={"fruit": "apple"})
        return None


def config(tmp_path, model: str, **kw) -> PipelineConfig:
    """A job's config for the engine (its inputs and output are never opened)."""
    return PipelineConfig(inputs=("x",), output_dir=str(tmp_path), tokenizer_model=model, seq_len=kw.pop("seq_len", 32),
                          **kw)


def spec(model: str, backend: str = "sentencepiece", add_bos: bool = False):
    """The tokenizer as a job carries it to the workers."""
    loaded = TokenizerModel.load(model)
    return loaded.spec(BackendChoice(backend, "", {}), loaded.special_ids(add_bos=add_bos, add_eos=True))


def line(number: int, obj) -> Line:
    """A line holding `obj` as JSON (bytes as they are)."""
    data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return Line(number, 1000 * number, data)


def doc(text: str, subset: str = "Pile-CC", **more) -> dict:
    """A document in the Pile's layout."""
    return {"text": text, "meta": {"pile_set_name": subset}, **more}


def chunk(lines: list, file_index: int = 0, chunk_index: int = 0, first: int = 1) -> Chunk:
    """A chunk of `lines` (JSON-able objects or bytes), numbered from `first`."""
    return Chunk(file_index, chunk_index, f"/data/in-{file_index}.jsonl",
                 tuple(line(first + i, obj) for i, obj in enumerate(lines)), input_bytes=100)
