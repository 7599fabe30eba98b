"""`--decontaminate` eval sets are read through before the job, as the inputs are: a malformed line is
exit status 2 and one line naming the file and the line, and an eval set without a single n-gram
(empty, or every text shorter than --decontam_ngram words) is refused rather than decontaminating
nothing. Before, the first failed mid-job with a Beam traceback and the second was accepted.
"""

from __future__ import annotations

import gzip
import json
import os

import pytest
from corpus_helpers import FAST_BEAM
from fault_helpers import MODEL, small_corpus

from pipeline.cli import run

GOOD = json.dumps({"text": "the quick brown fox jumps over the lazy dog " * 3}).encode()


def _refused(tmp_path, caplog, eval_file, *flags) -> str:
    out = tmp_path / "out"
    code = run.cli(["--input", small_corpus(tmp_path / "in", files=1, docs=5), "--output_dir", str(out),
                    "--tokenizer_model", MODEL, "--seq_len", "32", "--decontaminate", str(eval_file), *flags,
                    *FAST_BEAM])
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert code == 2, caplog.text[-3000:]
    assert len(errors) == 1 and not errors[0].exc_info, caplog.text[-3000:]
    assert not out.exists() or not os.listdir(out)
    return errors[0].getMessage()


@pytest.mark.parametrize("bad,why", [
    (b'{"text": "broken', "line 2: not JSON"),
    (json.dumps({"question": "where is the text"}).encode(), "line 2: no 'text' (--decontam_text_key); its keys: "
                                                            "question"),
    (b'{"text": "caf\xe9 au lait"}', "line 2: not valid UTF-8"),
    (b'["text", "a list"]', "line 2: a JSON list, not an object with a 'text'"),
    (b'{"text": 5}', "line 2: 'text' holds int, not a string"),
])
def test_a_malformed_eval_line_is_refused_naming_the_file_and_line(tmp_path, caplog, bad, why):
    path = tmp_path / "eval.jsonl"
    path.write_bytes(GOOD + b"\n" + bad + b"\n" + GOOD + b"\n")
    line = _refused(tmp_path, caplog, path)
    assert line.startswith(f"--decontaminate: {path} {why}"), line


def test_a_malformed_line_in_a_compressed_eval_set_is_named_too(tmp_path, caplog):
    path = tmp_path / "eval.jsonl.gz"
    path.write_bytes(gzip.compress(GOOD + b"\n\n" + b"{oops\n"))
    assert f"{path} line 3: not JSON" in _refused(tmp_path, caplog, path)
    damaged = tmp_path / "damaged.jsonl.gz"
    damaged.write_bytes(gzip.compress(GOOD * 50)[:-30])
    caplog.clear()
    assert f"{damaged}: cannot be read" in _refused(tmp_path, caplog, damaged)


@pytest.mark.parametrize("content,what", [(b"", "no text"), (b"\n\n", "no text"),
                                          (json.dumps({"text": "too short"}).encode() + b"\n",
                                           "1 text(s), the longest 2 word(s)")])
def test_an_eval_set_without_an_ngram_is_refused(tmp_path, caplog, content, what):
    path = tmp_path / "eval.jsonl"
    path.write_bytes(content)
    line = _refused(tmp_path, caplog, path)
    assert f"{path}: no 13-word n-gram to decontaminate with ({what})" in line, line


def test_another_text_key_is_read_and_a_txt_eval_set_is_one_text(tmp_path, caplog):
    path = tmp_path / "eval.jsonl"
    path.write_bytes(GOOD + b"\n")
    assert "no 'question' (--decontam_text_key)" in _refused(tmp_path, caplog, path, "--decontam_text_key",
                                                              "question")
    short = tmp_path / "eval.txt"
    short.write_text("only five words in it")
    caplog.clear()
    assert "no 13-word n-gram" in _refused(tmp_path, caplog, short)
    caplog.clear()
    assert "no 6-word n-gram" in _refused(tmp_path, caplog, short, "--decontam_ngram", "6")
