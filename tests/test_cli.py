"""The command line refuses mistakes with exit status 2 and one line naming the flag; nothing is written."""

import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import main as main_module
from pipeline.cli import run
from pipeline.core.options import UsageError
from pipeline.core.subsets import COPYRIGHTED_SUBSETS, PILE_SUBSETS

REPO = Path(__file__).resolve().parents[1]
MODEL = str(REPO / "tokenizers" / "sample" / "sample.model")
TRAIN = REPO / "sample_data" / "pile" / "train"


def _args(out, *extra):
    return ["--input", str(TRAIN / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model", MODEL, *extra]


@pytest.mark.parametrize("extra,message", [
    (["--seq_lenn", "128"], r"unknown flag --seq_lenn \(did you mean --seq_len\?\)"),
    (["--runer", "DirectRunner"], r"unknown flag --runer \(did you mean --runner\?\)"),
    (["--seq_len", "abc"], r"--seq_len"),
    (["--epochs", "Books3=abc"], r"--epochs: 'abc' is not a number"),
    (["--subsets", "Books4"], r"--subsets: unknown Pile subset"),
    (["--remainder", "keep"], r"--remainder"),
    (["--add_eos", "maybe"], r"--add_eos: expected true or false"),
])
def test_a_bad_flag_is_refused_naming_it(tmp_path, extra, message):
    with pytest.raises(UsageError, match=message):
        run.parse_args(_args(tmp_path / "out", *extra))


def test_all_missing_required_flags_are_reported_at_once():
    with pytest.raises(UsageError, match="missing required flags: --input, --output_dir$"):
        run.parse_args([])
    with pytest.raises(UsageError, match="--tokenizer_model is required for --output_format tfrecord"):
        run.parse_args(["--input", "x", "--output_dir", "y"])


def test_a_shell_expanded_glob_is_taken_whole_after_one_input(tmp_path):
    files = sorted(str(p) for p in TRAIN.glob("*.jsonl.zst"))
    config, _ = run.parse_args(["--input", *files, "--output_dir", str(tmp_path), "--tokenizer_model", MODEL])
    assert list(config.inputs) == files


def test_a_stray_argument_is_refused_with_a_hint_to_quote_the_glob(tmp_path):
    with pytest.raises(UsageError, match="unexpected argument .*quote glob patterns"):
        run.parse_args(_args(tmp_path, "--tokenizer_model", MODEL, "tokenizers/sample/sample.vocab"))


def test_config_file_keys_are_checked_like_flags(tmp_path):
    config = tmp_path / "job.toml"
    config.write_text('[pipeline]\nseq_lenn = 128\n')
    with pytest.raises(UsageError, match=r"no option 'seq_lenn' \(did you mean --seq_len\?\)"):
        run.parse_args(["--config", str(config), *_args(tmp_path / "out")])
    config.write_text('[beam]\nrunerr = "DirectRunner"\n')
    with pytest.raises(UsageError, match="unknown flag --runerr"):
        run.parse_args(["--config", str(config), *_args(tmp_path / "out")])
    config.write_text('[pipeline]\nseq_len = 96\nadd_bos = true\n[beam]\ndirect_num_workers = 1\n')
    parsed, beam_args = run.parse_args(["--config", str(config), *_args(tmp_path / "out"), "--seq_len", "64"])
    assert parsed.seq_len == 64 and parsed.add_bos and beam_args == ["--direct_num_workers=1"]


@pytest.mark.slow
def test_the_command_exits_2_with_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "pipeline.run", *_args(out, "--seq_lenn", "128")],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line or "Traceback" in line]
    assert len(errors) == 1 and "did you mean --seq_len" in errors[0]
    assert not out.exists()


@pytest.mark.slow
def test_pile_pipeline_dispatches_to_each_command():
    result = subprocess.run([sys.executable, "-m", "pipeline.cli.main"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2 and "train-tokenizer" in result.stdout
    for command in ("run", "show", "train-tokenizer", "tokenizer-report"):
        result = subprocess.run([sys.executable, "-m", "pipeline.cli.main", command, "--help"], cwd=REPO,
                                capture_output=True, text=True)
        assert result.returncode == 0 and "usage: pile-pipeline" in result.stdout, command


# The mistakes of issue "refuse mistakes", each as a user would type it: exit 2, one line, nothing written.
LOCAL = ["--input", "sample_data/pile/train/*.jsonl.zst", "--tokenizer_model", "tokenizers/sample/sample.model"]
DATAFLOW = ["--runner", "DataflowRunner", "--project", "real-project", "--region", "us-central1",
            "--temp_location", "gs://real-bucket/tmp"]
REMOTE_PATHS = ["--input", "gs://real-bucket/pile/*.jsonl.zst", "--tokenizer_model", "gs://real-bucket/m.model",
                "--output_dir", "gs://real-bucket/out"]
MISTAKES = {
    "typo_in_our_flag": (["run", *LOCAL, "--output_dir", "{out}", "--seq_lenn", "128"],
                         r"unknown flag --seq_lenn \(did you mean --seq_len\?\)"),
    "typo_in_beam_flag": (["run", *LOCAL, "--output_dir", "{out}", "--direct_num_worker", "2"],
                          r"unknown flag --direct_num_worker \(did you mean --direct_num_workers\?\)"),
    "shell_expanded_glob_elsewhere": (["run", *LOCAL, "--output_dir", "{out}", "tokenizers/sample/sample.vocab"],
                                      r"unexpected argument 'tokenizers/sample/sample.vocab': quote glob patterns"),
    "missing_model": (["run", "--input", "sample_data/pile/train/*.jsonl.zst", "--output_dir", "{out}",
                       "--tokenizer_model", "tokenizers/none.model"],
                      r"--tokenizer_model: no such file tokenizers/none.model"),
    "epochs_not_a_number": (["run", *LOCAL, "--output_dir", "{out}", "--epochs", "Books3=abc"],
                            r"--epochs: 'abc' is not a number"),
    "all_required_missing": (["run"], r"missing required flags: --input, --output_dir$"),
    "subset_in_lower_case": (["run", *LOCAL, "--output_dir", "{out}", "--subsets", "github,wikipedia"],
                             r"--subsets: unknown Pile subset names 'github' \(did you mean 'Github'\?\), "
                             r"'wikipedia' \(did you mean 'Wikipedia \(en\)'\?\)"),
    "default_subset_unknown": (["run", *LOCAL, "--output_dir", "{out}", "--default_subset", "pile-cc"],
                               r"--default_subset: 'pile-cc' is not a Pile subset name \(did you mean 'Pile-CC'\?\)"),
    "local_paths_on_dataflow": (["run", *DATAFLOW, *LOCAL, "--output_dir", "{out}"],
                                r"--input sample_data/pile/train/\*.jsonl.zst, --output_dir .*, --tokenizer_model "
                                r"tokenizers/sample/sample.model: local paths, but DataflowRunner's workers are "
                                r"Google Cloud VMs"),
    "local_output_on_flink": (["run", "--runner", "FlinkRunner", "--flink_master", "10.0.0.5:8081",
                               *REMOTE_PATHS[:4], "--output_dir", "{out}"],
                              r"--output_dir .*: a local path, but FlinkRunner's workers run on the cluster at "
                              r"10.0.0.5:8081"),
    "local_paths_on_spark_jar": (["run", "--config", "beam_configs/spark_emr.toml", "--output_executable_path",
                                  "{out}.jar", *LOCAL, "--output_dir", "{out}"],
                                 r"local paths, but SparkRunner runs the jar .* on a cluster"),
    "config_placeholders": (["run", "--config", "beam_configs/dataflow.toml", *REMOTE_PATHS[:4], "--output_dir",
                             "gs://real-bucket/{out}"],
                            r"--config beam_configs/dataflow.toml: placeholder values left in the file: "
                            r"project = 'my-project', temp_location = 'gs://my-bucket/dataflow/tmp', "
                            r"staging_location = 'gs://my-bucket/dataflow/staging'; replace them in the file or "
                            r"pass --project \.\.\. --temp_location \.\.\. --staging_location \.\.\."),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_mistake_exits_2_with_one_line_and_writes_nothing(name, tmp_path):
    argv, message = MISTAKES[name]
    out = tmp_path / "out"
    argv = [a.replace("{out}", str(out)) for a in argv]
    result = subprocess.run([sys.executable, "-m", "pipeline.cli.main", *argv], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert re.search(message, lines[0]), lines[0]
    assert result.stdout == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_an_unquoted_glob_is_taken_whole_through_the_shell(tmp_path):
    """`--input sample_data/pile/train/*.jsonl.zst` unquoted: the shell expands it, every file is an input."""
    code = "import sys; from pipeline.cli.run import parse_args; print(len(parse_args(sys.argv[1:])[0].inputs))"
    command = (f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} --input sample_data/pile/train/*.jsonl.zst "
               f"--output_dir {shlex.quote(str(tmp_path / 'out'))} --tokenizer_model tokenizers/sample/sample.model")
    result = subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == len(list(TRAIN.glob("*.jsonl.zst"))) > 1


def test_subset_names_any_accepts_any_name_and_keeps_presets_for_pile_names(tmp_path):
    config, _ = run.parse_args([*_args(tmp_path), "--subset_names", "any", "--subsets", "uncopyrighted",
                                "--exclude_subsets", "junk", "--epochs", "pile_paper"])
    copyrighted = tuple(s for s in PILE_SUBSETS if s in COPYRIGHTED_SUBSETS)  # in the Pile's order
    assert config.subsets == ("*",) and config.exclude_subsets == (*copyrighted, "junk")
    selection = config.selection()
    assert "my own" in selection and "Github" in selection
    assert "Books3" not in selection and "junk" not in selection
    assert config.epochs_of("Wikipedia (en)") == 3.0 and config.epochs_of("my own") == 1.0
    config, _ = run.parse_args([*_args(tmp_path), "--subset_names", "any", "--subsets", "forum, Github,manuals",
                                "--exclude_subsets", "manuals"])
    assert config.subsets == ("Github", "forum") and config.exclude_subsets == ()
    with pytest.raises(UsageError, match="The subset selection is empty"):
        run.parse_args([*_args(tmp_path), "--subset_names", "any", "--subsets", "a", "--exclude_subsets", "a"])
    with pytest.raises(UsageError, match="--text_key 'a..b'"):
        run.parse_args([*_args(tmp_path), "--text_key", "a..b"])


def _help_actions(parser):
    return [a for a in parser._actions if a.option_strings and a.dest != "help"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "show", "train-tokenizer", "tokenizer-report", "reframe"])
def test_help_gives_every_flag_a_text_and_its_default_or_required_mark(command):
    module = importlib.import_module(main_module.COMMANDS[command][0])
    parser = module.build_parser()
    for action in _help_actions(parser):
        text = action.help or ""
        assert len(text) > 10, action.option_strings
        if action.dest == "config":
            continue
        assert "(required)" in text or "default:" in text, (action.option_strings, text)
    result = subprocess.run([sys.executable, "-m", "pipeline.cli.main", command, "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert all(flag in result.stdout for a in _help_actions(parser) for flag in a.option_strings)


def test_docs_cli_md_describes_every_flag_of_every_command():
    text = (REPO / "docs" / "cli.md").read_text()
    for name, (module_name, _) in main_module.COMMANDS.items():
        parser = importlib.import_module(module_name).build_parser()
        missing = [flag for a in _help_actions(parser) for flag in a.option_strings if f"`{flag}" not in text]
        assert missing == [], name


def test_a_placeholder_in_a_config_file_is_refused_unless_the_command_line_replaces_it(tmp_path):
    config = tmp_path / "job.toml"
    config.write_text('[pipeline]\ninput = ["s3://my-bucket/pile/*.jsonl.zst"]\nseq_len = 128\n'
                      '[beam]\nproject = "<your project>"\n')
    argv = ["--config", str(config), "--output_dir", str(tmp_path / "out"), "--tokenizer_model", MODEL]
    with pytest.raises(UsageError, match=r"placeholder values left in the file: input = "
                                         r"'s3://my-bucket/pile/\*.jsonl.zst', project = '<your project>'"):
        run.parse_args(argv)
    parsed, beam_args = run.parse_args([*argv, "--input", str(TRAIN / "*.jsonl.zst"), "--project", "p-1"])
    assert parsed.seq_len == 128 and beam_args[-2:] == ["--project", "p-1"]
