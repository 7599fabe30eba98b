"""A newcomer's first commands: each runs, or ends with one line that says what to do.

A missing optional package names the extra that installs it; lines holding only a text run with the
one flag the first error names; a `DatasetDict` folder, a `--per_subset` output read as one output
and `TokenShards` refusing an output directory each say what to pass instead; `show` reads Megatron
outputs and finds the tokenizer from any directory; `tokenizer-report` without matplotlib keeps its
numbers; the summary's subset table adds up when documents were removed. Every job here is the
command in its own process; the packages are made missing by `sys.modules[name] = None`, which
makes Python's import raise exactly what a missing package raises.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from corpus_helpers import pile_line, write_lines
from fault_helpers import IN_MEMORY, MODEL, REPO, command, command_env, problem_lines

pytestmark = pytest.mark.slow


def _pile(cmd: str, *argv: str, missing: tuple[str, ...] = (), cwd: Path = REPO):
    """`pile-pipeline CMD ARGV` in its own process, with the `missing` packages not importable."""
    code = (f"import sys\nfor name in {list(missing)!r}:\n    sys.modules[name] = None\n"
            f"from pipeline.cli.main import main\nsys.exit(main({[cmd, *argv]!r}))")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=command_env(), capture_output=True, text=True,
                          timeout=300)


def _one_line(proc) -> str:
    """The one line a refused command printed on stderr (no traceback)."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if "ERROR" in line or line.startswith("pile-pipeline")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


TEXTS = [f"document {i}: the river flows past the old mill and the children play by the water " * (1 + i % 4)
         for i in range(40)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("corpus")
    return write_lines(str(folder / "00.jsonl.zst"), [pile_line(t, "Wikipedia (en)") for t in TEXTS])


@pytest.fixture(scope="module")
def kinds(tmp_path_factory) -> dict[str, str]:
    """A Hugging Face tokenizer directory and a tiktoken ranks file, trained here."""
    from kind_fixtures import train_byte_level_bpe, write_hf_directory, write_ranks

    folder = tmp_path_factory.mktemp("kinds")
    tok = train_byte_level_bpe(600)
    return {"hf": str(write_hf_directory(tok, folder / "neox")),
            "tiktoken": str(write_ranks(tok, folder / "r.tiktoken"))}


@pytest.fixture(scope="module")
def deduped(tmp_path_factory, corpus) -> Path:
    """A TFRecord output of two copies of one file under --dedup exact, its tokenizer given as a relative path."""
    root = tmp_path_factory.mktemp("deduped")
    shutil.copy(corpus, root / "a.jsonl.zst")
    shutil.copy(corpus, root / "b.jsonl.zst")
    (root / "models").mkdir()
    shutil.copy(MODEL, root / "models" / "m.model")
    proc = subprocess.run([sys.executable, "-m", "pipeline.run", "--input", "*.jsonl.zst", "--output_dir", "out",
                           "--tokenizer_model", "models/m.model", "--seq_len", "32", "--dedup", "exact", *IN_MEMORY],
                          cwd=root, env=command_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "out"


# Item 12: a missing optional package is one line naming the extra, exit status 2.
@pytest.mark.parametrize("missing, argv, extra", [
    (("tokenizers",), ["run", "--tokenizer_model", "{hf}"], "tokenizers"),
    (("tiktoken",), ["run", "--tokenizer_model", "{tiktoken}"], "tokenizers"),
    (("s3fs",), ["run", "--input", "s3://bucket/x.jsonl"], "cloud"),
    (("gcsfs",), ["run", "--output_dir", "gs://bucket/out"], "cloud"),
    (("kitoken",), ["run", "--tokenizer_backend", "kitoken"], "fast"),
    (("apache_beam",), ["run"], "pipeline"),
    (("pyarrow",), ["run"], "pipeline"),
    (("tokenizers",), ["train-tokenizer", "--kind", "bpe", "--vocab_size", "400", "--model_prefix", "{tmp}/bpe"],
     "tokenizers"),
    (("tensorflow",), ["show", "{deduped}"], "reader"),
])
def test_a_missing_optional_package_is_one_line_naming_its_extra(tmp_path, corpus, kinds, deduped, missing, argv,
                                                                  extra):
    values = {**kinds, "tmp": str(tmp_path), "deduped": str(deduped)}
    argv = [a.format(**values) for a in argv]
    defaults = {"--input": corpus, "--output_dir": str(tmp_path / "out"), "--tokenizer_model": MODEL}
    if argv[0] == "run":
        argv += [x for flag, value in defaults.items() if flag not in argv for x in (flag, value)] + IN_MEMORY
    elif argv[0] == "train-tokenizer":
        argv += ["--input", corpus, *IN_MEMORY]
    proc = _pile(argv[0], *argv[1:], missing=missing)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = _one_line(proc)
    assert missing[0] in line and f"pip install 'pile-pipeline[{extra}]'" in line, line
    assert not (tmp_path / "out").exists() and not (tmp_path / "bpe").exists()
    assert "sample:" not in proc.stdout  # train-tokenizer says so before drawing its sample


def test_tokenizer_report_without_matplotlib_writes_its_numbers_and_says_the_chart_needs_the_report_extra(
        tmp_path, corpus):
    png, numbers = tmp_path / "r.png", tmp_path / "r.json"
    proc = _pile("tokenizer-report", "--input", corpus, "--tokenizer_model", MODEL, "--out", str(png), "--json",
                 str(numbers), *IN_MEMORY, missing=("matplotlib",))
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = _one_line(proc)
    assert "matplotlib" in line and "pip install 'pile-pipeline[report]'" in line and str(numbers) in line
    assert json.loads(numbers.read_text())["results"] and not png.exists()


# Item 13: lines of {"text": ...} alone run with the one flag the first error names.
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_lines_of_a_text_alone_run_with_the_one_flag_the_first_error_names(tmp_path, kind):
    data = tmp_path / f"plain.{kind}"
    if kind == "jsonl":
        data.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": TEXTS}), data)
    argv = ["--input", str(data), "--output_dir", str(tmp_path / "out"), "--tokenizer_model", MODEL, *IN_MEMORY]
    first = command(*argv)
    assert first.returncode == 2
    (line,) = problem_lines(first.stderr)
    assert "keys: text" in line or "columns: text" in line, line
    (flag,) = re.findall(r"pass (--\w+ \S+)", line)
    second = command(*argv, *flag.split())
    assert second.returncode == 0, second.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["subsets"][flag.split()[1]]["kept"] == len(TEXTS)
    assert manifest["config"]["subset_names"] == "any" and manifest["dead_letters"]["records"] == 0


@pytest.mark.parametrize("subset, words", [
    (None, ["holds null", "--default_subset other"]),
    ("web", ["name no subset of the Pile ('web'", "--subset_names any"]),
])
def test_a_subset_key_holding_null_or_other_names_says_so(tmp_path, subset, words):
    data = tmp_path / "x.jsonl"
    data.write_text("".join(json.dumps({"text": t, "meta": {"pile_set_name": subset}}) + "\n" for t in TEXTS))
    proc = command("--input", str(data), "--output_dir", str(tmp_path / "out"), "--tokenizer_model", MODEL,
                   *IN_MEMORY)
    assert proc.returncode == 2
    (line,) = problem_lines(proc.stderr)
    assert all(w in line for w in words) and "source.name" not in line, line


# Item 14: a DatasetDict folder names its splits and the folder to give.
def test_a_dataset_dict_folder_names_its_splits_and_one_splits_folder_runs(tmp_path):
    import datasets  # the real library writes the folders (the test extra installs it)

    folder = tmp_path / "dd"
    split = {"text": TEXTS, "meta": [{"pile_set_name": "Github"}] * len(TEXTS)}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(split),
                          "test": datasets.Dataset.from_dict(split)}).save_to_disk(str(folder))
    argv = ["--output_dir", str(tmp_path / "out"), "--tokenizer_model", MODEL, "--seq_len", "32", *IN_MEMORY]
    refused = command("--input", str(folder), *argv)
    assert refused.returncode == 2
    (line,) = problem_lines(refused.stderr)
    assert "DatasetDict" in line and "train, test" in line and f"--input {folder}/train" in line, line
    ran = command("--input", f"{folder}/train", *argv)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["subsets"]["Github"]["kept"] == len(TEXTS)


# Item 15: a --per_subset output read as one output points at its mixture.json; the summary prints the line.
def test_a_per_subset_output_points_the_reader_at_its_mixture(tmp_path):
    data = write_lines(str(tmp_path / "in" / "00.jsonl.zst"),
                       [pile_line(t, "Github" if i % 2 else "ArXiv") for i, t in enumerate(TEXTS)])
    out = tmp_path / "out"
    proc = command("--input", data, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
                   "--per_subset", "--subsets", "Github,ArXiv", *IN_MEMORY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (snippet,) = re.findall(r"ds = (make_dataset\(.*\))", proc.stdout)
    assert f'"{out}/mixture.json"' in snippet
    from pipeline import tfdata
    from pipeline.format.manifest import ManifestError

    with pytest.raises(ManifestError, match=rf"{out} is a --per_subset or --split_by output.*pass {out}/mixture.json"):
        tfdata.make_dataset(str(out), batch_size=2, seed=0)
    batch = next(iter(eval(snippet, {"make_dataset": tfdata.make_dataset})))  # noqa: S307 -- the printed line
    assert batch["inputs"].shape == (8, 32)


# Item 16.
def test_show_reads_a_megatron_output_and_its_first_document(tmp_path, corpus):
    out = tmp_path / "out"
    proc = command("--input", corpus, "--output_dir", str(out), "--tokenizer_model", MODEL, "--output_format",
                   "megatron", *IN_MEMORY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = _pile("show", str(out))
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "--data-path" in shown.stdout and "megatron indexed dataset: 40 documents" in shown.stdout
    assert "document 0 of train-00000-of-00001 detokenized" in shown.stdout
    assert TEXTS[0][:60] in shown.stdout


def test_show_finds_a_tokenizer_given_as_a_relative_path_from_another_directory(deduped, tmp_path):
    manifest = json.loads((deduped / "manifest.json").read_text())
    assert manifest["config"]["tokenizer_model"] == str(deduped.parent / "models" / "m.model")
    shown = _pile("show", str(deduped), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "from the manifest (sha256 matches)" in shown.stdout and "detokenized" in shown.stdout


@pytest.mark.parametrize("output_format", ["tfrecord", "megatron"])
def test_the_subset_table_adds_up_when_documents_were_removed(deduped, tmp_path, corpus, output_format):
    from pipeline.format import megatron
    from pipeline.format.summary import format_summary

    out = deduped
    if output_format == "megatron":
        out = tmp_path / "out"
        shutil.copy(corpus, tmp_path / "copy.jsonl.zst")
        proc = command("--input", corpus, str(tmp_path / "copy.jsonl.zst"), "--output_dir", str(out),
                       "--tokenizer_model", MODEL, "--output_format", "megatron", "--dedup", "exact", *IN_MEMORY)
        assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    summary = (format_summary if output_format == "tfrecord" else megatron.format_summary)(manifest)
    header, *rows = [line.split() for line in summary.split("\n\n")[0].splitlines() if not line.startswith("-")]
    header = [h for h in header if h not in ("x", "epochs", "MB", "selected")]  # the titles of two words
    assert "removed" in header
    counts = [h for h in header[3:header.index("tokens")]]
    for row in rows:
        cells = dict(zip(header, row[-len(header):], strict=True))
        assert int(cells["docs"]) == int(cells["kept"]) + sum(int(cells[c]) for c in counts), row
    assert rows[-1][header.index("removed") - len(header)] == str(len(TEXTS))


def test_token_shards_refusing_an_output_directory_names_its_config(tmp_path, corpus):
    import apache_beam as beam

    from pipeline.beam.transform import TokenShards
    from pipeline.config.job import PipelineConfig

    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    config = PipelineConfig(inputs=(corpus,), output_dir=str(out), tokenizer_model=MODEL, seq_len=32)
    for documents in (False, True):
        with pytest.raises(FileExistsError) as refused, beam.Pipeline() as p:
            source = p | beam.Create([{"text": "a document", "meta": {"pile_set_name": "Github"}}]) if documents else p
            _ = source | TokenShards(config)
        assert "PipelineConfig(overwrite=True)" in str(refused.value) and "--" not in str(refused.value)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_the_cli_docs_input_row_names_every_input_kind():
    from pipeline.io.inputs import COLUMNAR, COMPRESSIONS, JSON_LINES

    (row,) = [line for line in (REPO / "docs" / "cli.md").read_text().splitlines() if line.startswith("| `--input` |")]
    assert all(f"`{kind}`" in row for kind in JSON_LINES + COLUMNAR + COMPRESSIONS[1:]) and "save_to_disk" in row
