"""Every tool on the bundled non-Pile corpus (sample_data/notes: `body`, `source.name`), with the same flags.

train-tokenizer draws its sample and trains on it, tokenizer-report measures that model, run writes
TFRecord (with provenance) and Megatron outputs with it, and show, provenance, data-path and
Megatron's own reader (tests/megatron_check.py with --text_key/--subset_key) read them back.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
from corpus_helpers import FAST_BEAM

from pipeline.cli import main as cli_main
from pipeline.cli import run, tokenizer_report, train_tokenizer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
NOTES = REPO / "sample_data" / "notes"
LAYOUT = ["--text_key", "body", "--subset_key", "source.name", "--subset_names", "any", "--default_subset", "other"]
NAMES = {"forum", "manuals", "recipes", "Wikipedia (en)", "other"}
MEGATRON = Path(os.environ.get("MEGATRON_VENV", REPO / ".venv-megatron")) / "bin" / "python"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("notes-tools")
    card = train_tokenizer.main(["--input", str(NOTES / "*"), *LAYOUT, "--sample_mb", "1", "--model_prefix",
                                 str(root / "notes"), "--vocab_size", "400", "--num_threads", "1", "--work_dir",
                                 str(root / "work"), *FAST_BEAM])
    return root, card


def test_train_tokenizer_samples_every_name_of_the_corpus(trained):
    root, card = trained
    stats = json.loads((root / "work" / "sample_stats.json").read_text())
    assert set(stats["subsets"]) == NAMES
    assert stats["documents"] >= 100 and stats["dead_letters"] == {}
    assert (root / "notes.model").stat().st_size > 0
    assert json.dumps(card).count("source.name") >= 1


def test_tokenizer_report_measures_every_name(trained, capsys):
    root, _ = trained
    report = tokenizer_report.main(["--input", str(NOTES / "*"), *LAYOUT, "--tokenizer_model",
                                    str(root / "notes.model"), "--out", str(root / "report.png"), *FAST_BEAM])
    assert NAMES <= set(report["results"]["notes"])
    assert report["sample"]["documents"] >= 10
    assert "forum" in capsys.readouterr().out


def test_run_show_provenance_data_path_and_megatron_read_the_corpus(trained, tmp_path, capsys):
    root, _ = trained
    model = str(root / "notes.model")
    out = tmp_path / "tfrecord"
    manifest = run.main(["--input", str(NOTES / "*"), "--output_dir", str(out), "--tokenizer_model", model, *LAYOUT,
                         "--seq_len", "64", "--provenance", *FAST_BEAM])
    assert set(manifest["subsets"]) == NAMES and manifest["dead_letters"]["by_reason"] == {}
    assert cli_main.main(["show", str(out)]) == 0
    assert "sequence 0 detokenized" in capsys.readouterr().out
    assert cli_main.main(["provenance", str(out), "--step", "0", "--global_batch_size", "4", "--seed", "0"]) == 0
    printed = capsys.readouterr().out
    assert "part-0" in printed and any(name in printed for name in NAMES)
    meg = tmp_path / "megatron"
    run.main(["--input", str(NOTES / "*"), "--output_dir", str(meg), "--tokenizer_model", model, *LAYOUT,
              "--output_format", "megatron", *FAST_BEAM])
    capsys.readouterr()
    assert cli_main.main(["data-path", str(meg)]) == 0
    assert str(meg) in capsys.readouterr().out
    if not MEGATRON.exists():
        pytest.fail(f"the Megatron environment is missing at {MEGATRON}: bash scripts/setup_megatron_env.sh")
    proc = subprocess.run([str(MEGATRON), str(REPO / "tests" / "megatron_check.py"), str(meg), "--input",
                           *sorted(map(str, NOTES.iterdir())), "--tokenizer_model", model, "--text_key", "body",
                           "--subset_key", "source.name", "--seq_length", "32", "--samples", "200"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["documents"] >= 100
