"""Indexed inputs (pipeline/io/frames.py): same content, read a frame per work item, same output bytes."""

import json
import os

import pytest
import zstandard
from corpus_helpers import FAST_BEAM, output_digests, pile_line, run_free, write_lines

from pipeline.cli import run
from pipeline.io import frames
from pipeline.io.inputs import CorruptInputError, iter_chunks

CHUNK_MB, MAX_LINE_MB = 0.01, 0.004
CHUNK, MAX_LINE = int(CHUNK_MB * (1 << 20)), int(MAX_LINE_MB * (1 << 20))


def _lines(seed: int, n: int) -> list[bytes]:
    out = []
    for i in range(n):
        if i % 37 == 5:
            out.append(b"not json")  # dead letters, with their line numbers and offsets
        elif i % 91 == 7:
            out.append(pile_line("long " * 1500))  # over --max_line_mb: offsets count its full length
        else:
            out.append(pile_line(f"doc {seed}-{i} " + "text and more words " * (i % 13 + 1), "Github"))
    return out


def _corpus(root) -> list[str]:
    a = write_lines(str(root / "00.jsonl.zst"), _lines(0, 700))
    b = write_lines(str(root / "01.jsonl.zst"), _lines(1, 300))
    with open(b, "rb") as f:  # the last line without its newline
        content = zstandard.ZstdDecompressor().stream_reader(f).read()
    with open(b, "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(content[:-1]))
    return [a, b]


def _content(path) -> bytes:
    with open(path, "rb") as f:
        return zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()


@pytest.mark.slow
def test_a_reframed_input_gives_every_output_byte_of_the_original(tmp_path, tiny_model):
    files = _corpus(tmp_path / "in")
    argv = ["--input", str(tmp_path / "in" / "*.jsonl.zst"), "--output_dir", str(tmp_path / "out"),
            "--tokenizer_model", tiny_model, "--seq_len", "64", "--chunk_mb", str(CHUNK_MB),
            "--max_line_mb", str(MAX_LINE_MB), "--shard_size_mb", "0.2", "--fan_out", "yes", "--overwrite", *FAST_BEAM]
    original = run.main(argv)
    before = output_digests(tmp_path / "out")
    contents = [_content(f) for f in files]
    for path in files:  # in place, several frames per file
        written = frames.reframe(path, path, CHUNK, MAX_LINE, frame_bytes=15_000)
        assert len(written) > 2
    assert [_content(f) for f in files] == contents  # any zstd reader: the same content
    units = [frames.read_units(f, CHUNK, MAX_LINE) for f in files]
    assert all(len(u) > 2 and None not in u for u in units)

    read = []
    real_iter = frames.iter_unit_chunks

    def recording(path, file_index, unit, *args):
        read.append(unit)
        return real_iter(path, file_index, unit, *args)

    frames.iter_unit_chunks = recording
    try:
        reframed = run.main(argv)
    finally:
        frames.iter_unit_chunks = real_iter
    assert sorted(read, key=lambda u: (u.first_chunk, u.offset)) == sorted(
        [u for us in units for u in us], key=lambda u: (u.first_chunk, u.offset))  # one work item per frame
    assert output_digests(tmp_path / "out") == before
    assert run_free(reframed) == run_free(original) and original["dead_letters"]["records"] > 10
    # DirectRunner's own plan (work items on the workers, no fan-out) reads the frames too.
    on_workers = run.main(["auto" if a == "yes" else a for a in argv])
    assert output_digests(tmp_path / "out") == before and run_free(on_workers) == run_free(original)


def test_frames_are_the_files_chunks_numbered_as_in_the_whole_file(tmp_path):
    (path,) = _corpus(tmp_path)[:1]
    whole = list(iter_chunks(path, 3, CHUNK, MAX_LINE))
    framed = str(tmp_path / "framed.jsonl.zst")
    frames.reframe(path, framed, CHUNK, MAX_LINE, frame_bytes=25_000)
    parts = [c for unit in frames.read_units(framed, CHUNK, MAX_LINE)
             for c in frames.iter_unit_chunks(framed, 3, unit, CHUNK, MAX_LINE)]
    def key(chunk):  # (input_end, for progress, is a position in the compressed file: it differs)
        return chunk.chunk_index, [(x.number, x.offset, x.data, x.oversized) for x in chunk.lines]

    assert [key(c) for c in parts] == [key(c) for c in whole]
    assert {c.path for c in parts} == {framed}
    # Another --chunk_mb: the index is not used, the file is read from its start.
    assert frames.read_units(framed, CHUNK * 2, MAX_LINE) == [None]
    assert frames.read_units(path, CHUNK, MAX_LINE) == [None]  # no index


def test_an_index_that_does_not_match_its_frames_is_an_error(tmp_path):
    (path,) = _corpus(tmp_path)[:1]
    framed = str(tmp_path / "framed.jsonl.zst")
    frames.reframe(path, framed, CHUNK, MAX_LINE, frame_bytes=25_000)
    data = open(framed, "rb").read()
    length = int.from_bytes(data[-12:-8], "little")
    index = json.loads(data[-12 - length : -12])
    index["frames"][1]["lines"] += 1
    payload = json.dumps(index, sort_keys=True).encode()
    payload = payload.ljust(length)  # same length: the file stays well formed
    with open(framed, "wb") as f:
        f.write(data[: -12 - length] + payload + data[-12:])
    unit = frames.read_units(framed, CHUNK, MAX_LINE)[1]
    with pytest.raises(CorruptInputError, match="does not match its index"):
        list(frames.iter_unit_chunks(framed, 0, unit, CHUNK, MAX_LINE))
    with open(framed, "wb") as f:  # frames that do not tile the file
        f.write(data[:100] + data[101:])
    with pytest.raises(CorruptInputError, match="does not fit"):
        frames.read_units(framed, CHUNK, MAX_LINE)


def test_the_reframe_command_rewrites_in_place_and_refuses_other_inputs(tmp_path, capsys):
    from pipeline.cli import main

    files = _corpus(tmp_path)
    contents = [_content(f) for f in files]
    assert main.main(["reframe", str(tmp_path / "*.jsonl.zst"), "--chunk_mb", str(CHUNK_MB), "--max_line_mb",
                      str(MAX_LINE_MB), "--frame_mb", "0.03"]) == 0
    assert [_content(f) for f in files] == contents
    assert all(len(frames.read_units(f, CHUNK, MAX_LINE)) > 1 for f in files)
    assert sorted(os.listdir(tmp_path)) == ["00.jsonl.zst", "01.jsonl.zst"]  # no temp files left
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(b"{}\n")
    with pytest.raises(ValueError, match=".zst"):
        frames.reframe(str(plain), str(plain), CHUNK, MAX_LINE)
    empty = tmp_path / "empty.jsonl.zst"
    empty.write_bytes(zstandard.ZstdCompressor().compress(b""))
    with pytest.raises(ValueError, match="no lines"):
        frames.reframe(str(empty), str(empty), CHUNK, MAX_LINE)
    capsys.readouterr()
    for argv in ([str(plain)], [str(empty)], [str(tmp_path / "none-*.zst")], [str(empty), "--level", "x"]):
        assert main.main(["reframe", *argv]) == 2, argv
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("pile-pipeline reframe: "), line
    assert _content(empty) == b"" and plain.read_bytes() == b"{}\n"
