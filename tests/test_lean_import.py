"""Beam imported for a DirectRunner job without its cloud connectors (pipeline/startup/lean_import.py).

Whether a job runs in the command's process is its runner's row in pipeline/beam/runners/registry.py.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("flags, expected", [
    ([], True),
    (["--direct_num_workers", "2"], True),
    (["--runner", "DirectRunner"], True),
    (["--runner=direct"], True),
    (["--runner", "DataflowRunner", "--project", "p"], False),
    (["--runner=PortableRunner"], False),
    (["--run", "FlinkRunner"], False),  # argparse's abbreviation of --runner
    (["--requirements_file", "r.txt"], True),
    (["--runner", "apache_beam.runners.direct.direct_runner.DirectRunner"], True),
    (["--runner", "DaskRunner"], True),  # its driver only translates the job
])
def test_lean_beam_for_the_runners_that_never_use_its_connectors(flags, expected):
    from pipeline.beam.runners.registry import row_of
    from pipeline.core.options import runner_flag

    assert row_of(runner_flag(flags)).lean_beam is expected


def _after_import(flags, connectors=None, one_command=True) -> dict:
    """What a fresh interpreter has in sys.modules after `import_beam(flags)`."""
    code = f"""
import json, sys
import pipeline.startup.lean_import as lean
from pipeline.beam.runners.registry import row_of
from pipeline.core.options import runner_flag
connectors = {connectors!r}
if connectors is not None:
    lean.CONNECTORS = connectors
lean.import_beam(lean={one_command!r} and row_of(runner_flag({flags!r})).lean_beam)
import apache_beam, apache_beam.io.filesystems as fs, apache_beam.runners.dataflow.dataflow_runner as df
def supported(url):
    try:
        fs.FileSystems.get_filesystem(url)
        return True
    except ValueError:
        return False
state = {{"beam": "apache_beam.pipeline" in sys.modules,
          "loaded": sorted(n for n in lean.CONNECTORS if sys.modules.get(n) is not None),
          "none_left": sorted(n for n in lean.CONNECTORS if n in sys.modules and sys.modules[n] is None),
          "schemes": [s for s, url in (("gs", "gs://b/k"), ("s3", "s3://b/k"), ("local", "/tmp/k")) if supported(url)],
          "dataflow_client": df.dataflow_api is not None}}
import pandas, google.cloud.storage  # later imports load as usual
state["pandas_after"] = pandas.__name__
print(json.dumps(state))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr == "", out.stderr  # no warning from Beam about what it left out
    return json.loads(out.stdout)


@pytest.mark.slow
def test_direct_runner_gets_beam_without_connectors():
    state = _after_import([])
    assert state["beam"]
    assert state["loaded"] == []
    assert state["none_left"] == []
    assert state["schemes"] == ["local"]  # our I/O is fsspec's: Beam's file systems are never used
    assert not state["dataflow_client"]
    assert state["pandas_after"] == "pandas"


@pytest.mark.slow
def test_other_runners_get_beam_whole():
    state = _after_import(["--runner", "DataflowRunner"])
    assert {"gs", "s3"} <= set(state["schemes"])
    assert state["dataflow_client"]
    assert set(state["loaded"]) >= {"apache_beam.io.gcp.bigquery", "apache_beam.io.gcp.gcsfilesystem", "pandas"}


@pytest.mark.slow
def test_a_connector_beam_needs_after_all_means_beam_whole():
    from pipeline.startup.lean_import import CONNECTORS

    # apache_beam.coders is imported unconditionally: left out, Beam's import fails, and Beam is
    # then imported again with nothing left out.
    state = _after_import([], connectors=("apache_beam.coders", *CONNECTORS))
    assert state["beam"]
    assert state["none_left"] == []
    assert {"gs", "s3"} <= set(state["schemes"])


@pytest.mark.slow
def test_a_program_that_runs_jobs_itself_gets_beam_whole():
    # `pipeline.cli.run.main` called from a program that may run a Dataflow job next.
    state = _after_import([], one_command=False)
    assert {"gs", "s3"} <= set(state["schemes"]) and state["dataflow_client"]


@pytest.mark.slow
@pytest.mark.parametrize("entry", [
    ["-m", "pipeline.run"],
    ["-c", "import sys; from pipeline.cli.main import console; sys.argv[1:1] = ['run']; sys.exit(console())"],
])
def test_the_commands_import_beam_without_the_connectors(entry, tmp_path):
    sample = REPO / "sample_data" / "pile" / "train" / "00.jsonl.zst"
    cmd = [sys.executable, "-X", "importtime", *entry, "--input", str(sample), "--output_dir", str(tmp_path / "o"),
           "--tokenizer_model", str(REPO / "tokenizers" / "sample" / "sample.model"), "--seq_len", "128"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={"TF_CPP_MIN_LOG_LEVEL": "3",
                                                                             "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "apache_beam.pipeline" in imported
    # (-X importtime lists the attempts at what was left out too, each taking microseconds: so what they import.)
    assert not imported & {"apache_beam.io.gcp.gcsio", "google.cloud.dataflow_v1beta3", "pandas.core.api",
                           "apitools.base.py.base_api", "apache_beam.io.gcp.pubsub"}
    assert (tmp_path / "o" / "manifest.json").exists()
