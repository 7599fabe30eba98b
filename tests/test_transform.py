"""`TokenShards` in a user's own pipeline: beam.Create of documents -> the transform -> a manifest for the reader."""

import json

import apache_beam as beam
import pytest
import sentencepiece as spm
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.beam.transform import TokenShards
from pipeline.config.job import PipelineConfig
from pipeline.format.manifest import load_manifest
from pipeline.tfdata import make_dataset

pytestmark = pytest.mark.slow

DOCS = [{"text": f"document number {i} " * (i % 7 + 1), "meta": {"pile_set_name": "Pile-CC" if i % 2 else "Github"}}
        for i in range(40)]
BAD = [{"text": None, "meta": {"pile_set_name": "Github"}}, '{"text": 5}']


def _run(tmp_path, name, documents, model):
    config = PipelineConfig(inputs=("my-documents",), output_dir=str(tmp_path / name), tokenizer_model=model,
                            seq_len=32, max_dead_letter_fraction=1.0)
    options = PipelineOptions(["--runner", "DirectRunner", "--direct_num_workers", "1",
                               "--direct_running_mode", "in_memory"])
    seen = tmp_path / f"{name}.path"
    with beam.Pipeline(options=options) as p:
        manifest = p | "MyDocuments" >> beam.Create(documents) | TokenShards(config, options, buckets=4)
        _ = manifest | "Seen" >> beam.Map(lambda path: seen.write_text(path))  # the user's next step
    return tmp_path / name, [seen.read_text()]


def test_token_shards_in_a_users_pipeline_writes_a_manifest_the_reader_reads(tmp_path, tiny_model):
    lines = [json.dumps(d) for d in DOCS[::2]] + DOCS[1::2]  # JSON lines and dicts alike
    out, paths = _run(tmp_path, "out", lines + BAD, tiny_model)
    manifest = load_manifest(str(out))
    assert len(paths) == 1 and paths[0].endswith("manifest.json")
    assert manifest["subsets"]["Github"]["kept"] == 20 and manifest["subsets"]["Pile-CC"]["kept"] == 20
    assert manifest["dead_letters"]["by_reason"] == {"text_not_string": 2}
    sp = spm.SentencePieceProcessor(model_file=tiny_model)
    want = sum(len(sp.encode(d["text"])) + 1 for d in DOCS)
    got = 0
    for batch in make_dataset(str(out), batch_size=1, seed=0, num_epochs=1):
        got += int(batch["loss_mask"].numpy().sum())
    assert got == want == manifest["totals"]["label_tokens"]


def test_the_same_documents_in_another_order_give_the_same_shards(tmp_path, tiny_model):
    one, _ = _run(tmp_path, "one", DOCS, tiny_model)
    two, _ = _run(tmp_path, "two", DOCS[::-1], tiny_model)
    shards = [{p.name: p.read_bytes() for p in out.rglob("*.tfrecord")} for out in (one, two)]
    assert shards[0] and shards[0] == shards[1]


@pytest.mark.slow
def test_dedup_over_a_pcollection_tells_documents_of_different_buckets_apart(tmp_path, tiny_model):
    # Every bucket numbers its own documents; two documents of different buckets must never share
    # the (file, line) that dedup keys them by, or one's removal lands on the other.
    unique = [{"text": f"unique text {i} " * 3 + "x" * i, "meta": {"pile_set_name": "Github"}} for i in range(60)]
    docs = unique + unique[:30]  # 30 exact copies
    config = PipelineConfig(inputs=("my-documents",), output_dir=str(tmp_path / "dd"), tokenizer_model=tiny_model,
                            seq_len=32, dedup="exact")
    options = PipelineOptions(["--runner", "DirectRunner", "--direct_num_workers", "1",
                               "--direct_running_mode", "in_memory"])
    with beam.Pipeline(options=options) as p:
        _ = p | beam.Create(docs) | TokenShards(config, options, buckets=4)
    manifest = load_manifest(str(tmp_path / "dd"))
    github = manifest["subsets"]["Github"]
    assert github["documents"] == 90 and github["kept"] == 60 and sum(github["removed"].values()) == 30
    removed = [json.loads(line) for path in (tmp_path / "dd").rglob("removed/*") for line in path.open()]
    assert len({(r["file_index"], r["line"]) for r in removed}) == 30


def test_a_bucket_that_would_take_the_next_buckets_chunk_numbers_is_refused():
    from pipeline.beam.transform import BUCKET_CHUNKS, TooManyChunks, _BucketChunksFn

    items = [(i.to_bytes(4, "big"), b'{"text": "a"}', None) for i in range(BUCKET_CHUNKS + 1)]
    chunks = _BucketChunksFn(1, "docs").process((2, items))  # one line per chunk
    with pytest.raises(TooManyChunks, match="buckets=N"):
        list(chunks)
