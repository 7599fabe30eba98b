"""A tokenizer that the job could not use is refused when it is loaded: exit status 2, one line naming
the file, no traceback, nothing written; every file the loader opens is bounded as the path given is.

Ids past int32 (which every record and engine holds), a tiktoken ranks file without a rank for some
single byte (tiktoken's engine panics on text holding it), a tokenizer.json nested past Python's
recursion limit, and a tokenizer file or companion that is a symlink to /dev/zero or a FIFO.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from corpus_helpers import FAST_BEAM, pile_line, write_lines
from fault_helpers import command, problem_lines

from pipeline.cli import run
from pipeline.tokenize.kinds import tiktoken_bpe

SEQ = ["--seq_len", "32"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A small tokenizer.json directory, its tiktoken ranks file, and a corpus with "café" in it."""
    from kind_fixtures import train_byte_level_bpe, write_hf_directory, write_ranks

    root = tmp_path_factory.mktemp("tokenizer_files")
    bpe = train_byte_level_bpe(400)
    hf = write_hf_directory(bpe, root / "hf")
    (root / "ranks").mkdir()
    ranks = write_ranks(bpe, root / "ranks" / "bpe.tiktoken")
    corpus = write_lines(str(root / "in.jsonl.zst"), [pile_line(f"un café {i}, s'il vous plaît " * 4)
                                                      for i in range(20)])
    return {"root": root, "hf": hf, "ranks": ranks, "corpus": corpus}


def _refused(files, tmp_path, caplog, model: str, *flags: str) -> str:
    """The command's one error line, once it has exited 2 and written nothing."""
    out = tmp_path / "out"
    code = run.cli(["--input", files["corpus"], "--output_dir", str(out), "--tokenizer_model", model, *SEQ, *flags,
                    *FAST_BEAM])
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert code == 2, caplog.text[-3000:]
    assert len(errors) == 1 and not errors[0].exc_info, caplog.text[-3000:]
    assert not out.exists() or not os.listdir(out)
    return errors[0].getMessage()


def _copy_hf(files, tmp_path, edit) -> Path:
    spec = json.loads((files["hf"] / "tokenizer.json").read_text())
    edit(spec)
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    (folder / "tokenizer_config.json").write_text((files["hf"] / "tokenizer_config.json").read_text())
    return folder


def _copy_ranks(files, tmp_path, keep=lambda token, rank: (token, rank), specials=None) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir()
    lines = []
    for line in files["ranks"].read_text().splitlines():
        token, rank = line.split()
        kept = keep(base64.b64decode(token), int(rank))
        if kept is not None:
            lines.append(f"{base64.b64encode(kept[0]).decode()} {kept[1]}")
    path = folder / "bpe.tiktoken"
    path.write_text("\n".join(lines) + "\n")
    spec = json.loads(Path(tiktoken_bpe.spec_path(str(files["ranks"]))).read_text())
    if specials is not None:
        spec["special_tokens"] = specials
    Path(tiktoken_bpe.spec_path(str(path))).write_text(json.dumps(spec))
    return path


def test_a_tokenizer_json_vocabulary_entry_past_int32_is_refused(files, tmp_path, caplog):
    folder = _copy_hf(files, tmp_path, lambda spec: spec["model"]["vocab"].update({"Ġzzzz": 3_000_000_000}))
    line = _refused(files, tmp_path, caplog, str(folder))
    assert f"--tokenizer_model '{folder}'" in line and "3,000,000,000" in line and "int32" in line


def test_a_tokenizer_json_added_token_past_int32_is_refused(files, tmp_path, caplog):
    def edit(spec):
        spec["added_tokens"].append({"id": 2**31, "content": "<|big|>", "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": True})

    line = _refused(files, tmp_path, caplog, str(_copy_hf(files, tmp_path, edit)))
    assert "'<|big|>' has id 2,147,483,648" in line and "int32" in line


def test_an_added_token_whose_id_tokenizers_does_not_keep_is_refused(files, tmp_path, caplog):
    """`tokenizers` gives an added token the next free id whatever the file says: the manifest's would be wrong."""
    def edit(spec):
        spec["added_tokens"].append({"id": 5000, "content": "<|far|>", "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": True})

    line = _refused(files, tmp_path, caplog, str(_copy_hf(files, tmp_path, edit)))
    assert "added token '<|far|>' has id 5000 in the file, but 400 once `tokenizers` loads it" in line


def test_a_tiktoken_special_id_past_int32_is_refused(files, tmp_path, caplog):
    path = _copy_ranks(files, tmp_path, specials={"<|endoftext|>": 2**31})
    line = _refused(files, tmp_path, caplog, str(path))
    assert "bpe.tiktoken.json" in line and "2,147,483,648" in line and "int32" in line


def test_tiktoken_ranks_that_jump_past_int32_are_refused(files, tmp_path, caplog):
    path = _copy_ranks(files, tmp_path, keep=lambda token, rank: (token, rank if rank < 300 else rank + 3 * 10**9),
                       specials={"<|endoftext|>": 5})
    line = _refused(files, tmp_path, caplog, str(path))
    assert f"--tokenizer_model '{path}'" in line and "int32" in line


def test_a_ranks_file_missing_single_bytes_is_refused(files, tmp_path, caplog):
    """0x80-0xBF dropped: tiktoken's Rust engine panicked (`no entry found for key`) on "café" mid-job."""
    path = _copy_ranks(files, tmp_path, keep=lambda token, rank: None if len(token) == 1 and 0x80 <= token[0] <= 0xBF
                       else (token, rank))
    line = _refused(files, tmp_path, caplog, str(path))
    assert f"--tokenizer_model '{path}'" in line and "64 single byte(s) have no rank (0x80, 0x81" in line


def test_a_tokenizer_json_nested_100000_deep_is_refused(files, tmp_path, caplog):
    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "tokenizer.json").write_text('{"model": ' + "[" * 100_000 + "]" * 100_000 + "}")
    line = _refused(files, tmp_path, caplog, str(folder))
    assert "tokenizer.json: JSON nested too deeply" in line
    config = _copy_hf(files, tmp_path, lambda spec: None)
    (config / "tokenizer_config.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    caplog.clear()
    assert "tokenizer_config.json is not valid JSON" in _refused(files, tmp_path, caplog, str(config))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                  "bpe.tiktoken.json"])
@pytest.mark.parametrize("what", ["dev_zero", "fifo"])
def test_every_file_the_loader_opens_is_bounded(files, tmp_path, name, what):
    """Only the path given was checked: a companion linked to /dev/zero filled memory, a FIFO hung forever."""
    if name == "bpe.tiktoken.json":
        folder = _copy_ranks(files, tmp_path).parent
        model = folder / "bpe.tiktoken"
    else:
        folder = _copy_hf(files, tmp_path, lambda spec: None)
        model = folder
    target = folder / name
    target.unlink(missing_ok=True)
    if what == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    out = tmp_path / "out"
    proc = command("--input", files["corpus"], "--output_dir", str(out), "--tokenizer_model", str(model), *SEQ,
                   *FAST_BEAM, timeout=180)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = problem_lines(proc.stderr)
    assert f"{target}: is not a regular file" in line, line
    assert not out.exists() or not os.listdir(out)
