import gzip
import json
import os
import random

import pytest
import zstandard
from corpus_helpers import pile_line, write_lines

from pipeline.core import documents
from pipeline.io import decompress, inputs, urls


def _lines(path, max_line_bytes=1 << 20):
    return list(inputs.iter_lines(str(path), max_line_bytes))


def test_zstd_gzip_and_plain_give_the_same_lines(tmp_path):
    lines = [pile_line(f"doc {i}") for i in range(100)]
    for compression, name in (("zst", "a.jsonl.zst"), ("gz", "a.jsonl.gz"), ("plain", "a.jsonl")):
        path = write_lines(str(tmp_path / name), lines, compression)
        got = _lines(path)
        assert [line.data for line in got] == lines
        assert [line.number for line in got] == list(range(1, 101))
    offsets = [line.offset for line in got]
    assert offsets[1] == len(lines[0]) + 1


def test_concatenated_zstd_frames_are_read_to_the_end(tmp_path):
    data = b"".join(pile_line(f"doc {i}") + b"\n" for i in range(50))
    path = tmp_path / "frames.jsonl.zst"
    path.write_bytes(b"".join(zstandard.ZstdCompressor().compress(data[i : i + 97]) for i in range(0, len(data), 97)))
    assert len(_lines(path)) == 50


def test_zstd_blocks_start_small_and_grow_to_the_largest(tmp_path):
    # A look at a file's first lines (the layout check, the self-check's sample) decompresses only
    # the first block; the blocks joined are the whole content, none over OUT_BLOCK.
    rng = random.Random(0)
    lines = [pile_line(rng.randbytes(500).hex()) for _ in range(4000)]  # compresses about 2:1
    path = write_lines(str(tmp_path / "a.jsonl.zst"), lines)
    with open(path, "rb") as raw:
        blocks = list(decompress.zstd_blocks(raw, path, 1 << 27))
    assert len(blocks[0]) == decompress.FIRST_OUT_BLOCK < decompress.OUT_BLOCK
    assert [len(b) for b in blocks[:5]] == [decompress.FIRST_OUT_BLOCK << k for k in range(5)]
    assert max(len(b) for b in blocks) == decompress.OUT_BLOCK
    assert b"".join(blocks) == b"".join(line + b"\n" for line in lines)
    # The compressed bytes read keep pace with the small first blocks: a line's place in the stored
    # file (progress) is not that of a whole first read of 1 MB (half of this file).
    size = os.path.getsize(path)
    ends = [line.input_end for line in inputs.iter_lines(path, 1 << 20)]
    assert ends[40] < 0.1 * size and ends == sorted(ends) and ends[-1] == size


def test_truncated_zstd_fails_naming_the_file(tmp_path):
    path = write_lines(str(tmp_path / "cut.jsonl.zst"), [pile_line("x" * 1000) for _ in range(100)])
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(inputs.CorruptInputError, match=r"cut\.jsonl\.zst.*truncated"):
        _lines(path)


def test_empty_and_non_zstd_files_fail_naming_the_file(tmp_path):
    empty = tmp_path / "empty.jsonl.zst"
    empty.write_bytes(b"")
    with pytest.raises(inputs.CorruptInputError, match="empty.jsonl.zst.*0 bytes"):
        _lines(empty)
    text = tmp_path / "text.jsonl.zst"
    text.write_bytes(b'{"text": "not compressed"}\n' * 10)
    with pytest.raises(inputs.CorruptInputError, match="text.jsonl.zst.*not valid zstd"):
        _lines(text)


def test_truncated_gzip_fails_naming_the_file(tmp_path):
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(pile_line("y" * 500) + b"\n" for _ in range(200)))[:300])
    with pytest.raises(inputs.CorruptInputError, match="cut.jsonl.gz"):
        _lines(path)


def test_line_split_is_on_newline_bytes_only(tmp_path):
    # U+2028, U+0085 and \r inside JSON strings must not split a document.
    text = "a\u2028b\u0085c\rd"
    path = write_lines(str(tmp_path / "u.jsonl"), [pile_line(text)], "plain")
    (line,) = _lines(path)
    assert documents.parse_line(line, 1 << 20)[0] == text


def test_crlf_line_endings_are_accepted(tmp_path):
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(pile_line("one") + b"\r\n" + pile_line("two") + b"\r\n")
    assert [documents.parse_line(line, 100)[0] for line in _lines(path)] == ["one", "two"]


def test_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "nonl.jsonl"
    path.write_bytes(pile_line("one") + b"\n" + pile_line("two"))
    assert len(_lines(path)) == 2


def test_oversized_line_is_not_held_in_memory(tmp_path):
    big = pile_line("z" * 3_000_000)
    path = write_lines(str(tmp_path / "big.jsonl.zst"), [pile_line("small"), big, pile_line("after")])
    got = _lines(path, max_line_bytes=100_000)
    assert [line.oversized for line in got] == [0, len(big), 0]
    assert len(got[1].data) <= 4 * documents.PREFIX_CHARS
    assert got[1].data.startswith(b'{"text": "zzz')
    assert got[2].offset == len(pile_line("small")) + 1 + len(big) + 1
    with pytest.raises(documents.BadRecord) as e:
        documents.parse_line(got[1], 100_000)
    assert e.value.reason == "line_too_long"


@pytest.mark.parametrize(
    "raw,reason",
    [
        (b"{not json", "invalid_json"),
        (b'{"text": "caf\xe9", "meta": {"pile_set_name": "Pile-CC"}}', "invalid_utf8"),
        (b"[1, 2]", "not_an_object"),
        (b'{"meta": {"pile_set_name": "Pile-CC"}}', "text_missing"),
        (b'{"text": null, "meta": {"pile_set_name": "Pile-CC"}}', "text_not_string"),
        (b'{"text": 42, "meta": {"pile_set_name": "Pile-CC"}}', "text_not_string"),
        (b'{"text": "ok"}', "meta_missing"),
        (b'{"text": "ok", "meta": "Pile-CC"}', "meta_not_object"),
        (b'{"text": "ok", "meta": {}}', "subset_missing"),
        (b'{"text": "ok", "meta": {"pile_set_name": "CommonCrawl"}}', "subset_unknown"),
        (b'{"text": "\\ud800", "meta": {"pile_set_name": "Pile-CC"}}', "invalid_unicode"),
        (b"   ", "blank_line"),
    ],
)
def test_bad_lines_get_a_reason_code(raw, reason):
    with pytest.raises(documents.BadRecord) as e:
        documents.parse_line(documents.Line(1, 0, raw), 1 << 20)
    assert e.value.reason == reason


def test_all_22_subset_names_are_accepted():
    from pipeline.core.subsets import PILE_SUBSETS

    for name in PILE_SUBSETS:
        line = documents.Line(1, 0, json.dumps({"text": "t", "meta": {"pile_set_name": name}}).encode())
        assert documents.parse_line(line, 100) == ("t", name)


def test_chunks_cover_every_line_once_and_are_stable(tmp_path):
    lines = [pile_line("w" * (i % 50)) for i in range(500)]
    path = write_lines(str(tmp_path / "c.jsonl.zst"), lines)
    chunks = list(inputs.iter_chunks(path, 3, chunk_bytes=2000, max_line_bytes=1 << 20))
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert [line.data for c in chunks for line in c.lines] == lines
    assert all(c.file_index == 3 for c in chunks)
    assert [len(c.lines) for c in chunks] == [len(c.lines) for c in inputs.iter_chunks(path, 3, 2000, 1 << 20)]


def test_expand_inputs_sorts_and_fails_on_no_match(tmp_path):
    for name in ("b.jsonl", "a.jsonl"):
        (tmp_path / name).write_bytes(b"")
    assert [p.rsplit("/", 1)[-1] for p in inputs.expand_inputs([str(tmp_path / "*.jsonl")])] == ["a.jsonl", "b.jsonl"]
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        inputs.expand_inputs([str(tmp_path / "nothing-here*.zst")])


def test_redact_url_drops_credentials():
    # Where a secret ends cannot be known (it may hold "/" or "@"): nothing after the scheme is shown.
    assert urls.redact_url("s3://AKIA:sekrit@bucket/x") == "s3://<credentials removed>"
    assert urls.redact_url("/local/path") == "/local/path"
