"""The tokenizing stage tokenizes several chunks per call, with the same outputs as one chunk per call."""

import dataclasses
import random

import pytest
from apache_beam.utils.windowed_value import WindowedValue
from corpus_helpers import write_lines
from sample_corpus import compose_lines

from pipeline.beam import chunk_documents
from pipeline.beam.tfrecord.pack import ProcessChunkFn
from pipeline.config.job import PipelineConfig
from pipeline.io import inputs
from pipeline.tokenize.model import BackendChoice, TokenizerModel


@pytest.fixture(scope="module")
def chunks(tmp_path_factory):
    lines = [line if isinstance(line, bytes) else line.encode() for line in compose_lines(random.Random(3), 300)]
    lines[17] = b'{"text": 5}'  # a dead letter in the middle of a batch
    path = write_lines(str(tmp_path_factory.mktemp("chunks") / "a.jsonl.zst"), lines)
    return list(inputs.iter_chunks(path, 0, 16 << 10, 1 << 20))


def _run(fn, elements):
    """(outputs of each process() call, outputs of finish_bundle) of one bundle, values unwrapped."""
    fn.setup()
    fn.start_bundle()
    during = [list(fn.process(e)) for e in elements]
    after = [out for out in fn.finish_bundle()]
    fn.teardown()
    return during, after


def _value(out):
    value = out.value if hasattr(out, "tag") else out
    return value.value if isinstance(value, WindowedValue) else value


def _comparable(outs):
    """Outputs as comparable values: record blocks by their bytes."""
    got = []
    for out in outs:
        tag, value = (getattr(out, "tag", None), _value(out))
        if tag is None:
            value = (value[0], bytes(value[1].data))
        got.append((tag, repr(value)))
    return got


def _fn(tiny_model, tmp_path, calls, batch_bytes=64 << 10, backend="gigatoken"):
    config = PipelineConfig(inputs=("x",), output_dir=str(tmp_path), tokenizer_model=tiny_model, seq_len=64)
    model = TokenizerModel.load(tiny_model)
    spec = model.spec(BackendChoice(backend, "", {}), model.special_ids(add_bos=False, add_eos=True))
    fn = ProcessChunkFn(config, spec, encode_batch_bytes=batch_bytes)
    encoder = fn._engine.documents.encoder
    encode = encoder.encode_verified

    def counted(texts):
        calls.append(len(texts))
        return encode(texts)

    encoder.encode_verified = counted
    return fn


def test_chunks_are_tokenized_together_with_the_outputs_of_one_call_each(chunks, tiny_model, tmp_path):
    assert len(chunks) > 6
    per_chunk, batched = [], []
    during, after = _run(_fn(tiny_model, tmp_path, per_chunk, batch_bytes=0), chunks)
    alone = [out for outs in during for out in outs] + after
    assert len(per_chunk) == len(chunks) and not after
    during, after = _run(_fn(tiny_model, tmp_path, batched, batch_bytes=3 * (16 << 10)), chunks)
    together = [out for outs in during for out in outs] + after
    assert len(chunks) / 4 <= len(batched) < len(chunks) / 2
    assert sum(batched) == sum(per_chunk)
    # The last batch goes out as the bundle finishes, in the global window.
    assert after and all(isinstance(o.value if hasattr(o, "tag") else o, WindowedValue) for o in after)
    assert _comparable(together) == _comparable(alone)
    dead = [_value(o) for o in together if getattr(o, "tag", None) == chunk_documents.DEAD_LETTERS]
    assert len(dead) == 1 and b'"line": 18' in dead[0][1][1]


def test_a_chunk_to_tokenize_now_goes_with_those_waiting_before_the_next_is_read(chunks, tiny_model, tmp_path):
    calls = []
    elements = [chunks[0], dataclasses.replace(chunks[1], tokenize_now=True), chunks[2]]
    during, after = _run(_fn(tiny_model, tmp_path, calls), elements)
    # It goes out with the one waiting before it; the one after it waits for its batch.
    assert not during[0] and during[1] and not during[2] and after
    assert len(calls) == 2


def test_an_engine_that_gains_nothing_from_larger_calls_tokenizes_a_chunk_per_call(chunks, tiny_model, tmp_path):
    calls = []
    during, after = _run(_fn(tiny_model, tmp_path, calls, backend="sentencepiece"), chunks)
    assert len(calls) == len(chunks) and all(during) and not after
