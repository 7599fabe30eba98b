"""What the Dask profile adds to Beam's DaskRunner: workers made ready once per process, a graph without side inputs.

(On a real cluster: tests/test_dask_runner.py, the plugin registered for the job's length and
global combines with their defaults, and the job's bytes.)
"""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.runners.dask.overrides import dask_overrides

from pipeline.beam.job import build_pipeline
from pipeline.beam.options import pipeline_options
from pipeline.beam.preflight import prepare
from pipeline.beam.runners.dask.overrides import OVERRIDES, side_input_steps
from pipeline.beam.runners.registry import profile_for
from pipeline.cli import run

REPO = Path(__file__).resolve().parents[1]
SAMPLE = str(REPO / "sample_data" / "pile" / "train" / "00.jsonl.zst")
MODEL = str(REPO / "tokenizers" / "sample" / "sample.model")

_WARM = """
import gc, json, pickle, sys
from pipeline.beam.runners.dask import warm
from pipeline.tokenize import encoder
derived = pickle.load(open({derived!r}, "rb")) if {derived!r} else None
kept = warm.warm(backend="sentencepiece", derived=derived)
print(json.dumps({{"kept": kept, "frozen": gc.get_freeze_count() > 0, "enabled": gc.isenabled(),
                  "job": "pipeline.beam.job" in sys.modules, "beam": "apache_beam" in sys.modules,
                  "adopted": sorted(k for k, v in encoder.derived().items() if v)}}))
"""


def _warm_in_a_worker(env: dict, derived: str = "") -> dict:
    """`warm()` in a fresh process with `env` (a Dask worker's, as its nanny starts it); `derived`: a pickle's path."""
    code = _WARM.format(derived=derived)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", **env})
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_worker_is_made_ready_once_over_dasks_own_malloc_setting_but_not_a_users():
    dask_default = _warm_in_a_worker({"MALLOC_TRIM_THRESHOLD_": "65536"})
    assert dask_default == {"kept": True, "frozen": True, "enabled": True, "job": True, "beam": True,
                            "adopted": []}
    assert _warm_in_a_worker({"MALLOC_TRIM_THRESHOLD_": "12345"})["kept"] is False  # the user's own stands


@pytest.mark.slow
def test_a_worker_takes_what_the_driver_derived_from_the_tokenizer(tmp_path):
    """The driver's converted model and safe cuts, handed over: the worker derives nothing itself."""
    from pipeline.tokenize import encoder
    from pipeline.tokenize.model import TokenizerModel

    model = TokenizerModel.load(MODEL)
    encoder.Encoder(model.path, "sentencepiece", threads=1).load(model.tokenizer)
    derived = encoder.derived()
    assert any(derived.values())
    (tmp_path / "derived.pkl").write_bytes(pickle.dumps(derived))
    assert _warm_in_a_worker({}, str(tmp_path / "derived.pkl"))["adopted"] == sorted(k for k, v in derived.items() if v)


def test_beams_local_cluster_gets_the_warm_up_as_a_preload_for_the_jobs_length():
    import dask

    from pipeline.beam.runners.dask import warm

    before = list(dask.config.get("distributed.worker.preload", []))
    with warm.warmed(None):
        assert dask.config.get("distributed.worker.preload") == [*before, "pipeline.beam.runners.dask.warm"]
    assert dask.config.get("distributed.worker.preload", []) == before


@pytest.mark.slow
def test_the_workers_of_a_local_cluster_started_meanwhile_are_made_ready():
    """As Beam's DaskRunner starts its local cluster (no scheduler given): the preload runs in each worker."""
    from distributed import Client

    from pipeline.beam.runners.dask import warm

    def ready():
        import gc

        return gc.get_freeze_count() > 0 and "pipeline.beam.job" in sys.modules

    with warm.warmed(None), Client(n_workers=1, threads_per_worker=1, dashboard_address=":0") as client:
        assert list(client.run(ready).values()) == [True]


@pytest.mark.slow
@pytest.mark.parametrize("flags", [
    ["--output_format", "megatron"],
    ["--output_format", "megatron", "--per_subset", "--dedup", "exact"],
    ["--dedup", "near"],
    # Two subsets: each subset's branch is the same steps; all 22 only make a graph ten times as long to build.
    ["--per_subset", "--decontaminate", "EVALS", "--subsets", "Pile-CC,Github"],
])
def test_no_step_reads_a_side_input_as_beam_runs_the_graph_on_dask(flags, tmp_path):
    """A side input is computed again in every task that reads it on Dask: none is left, whichever step made it."""
    evals = tmp_path / "evals.jsonl"
    evals.write_text(json.dumps({"text": "an eval set's text of some words, enough of them to make n-grams"}) + "\n")
    argv = ["--input", SAMPLE, "--output_dir", str(tmp_path / "out"), "--tokenizer_model", MODEL,
            "--runner", "DaskRunner", "--dask_npartitions", "2", *[str(evals) if f == "EVALS" else f for f in flags]]
    config, beam_args = run.parse_args(argv)
    options = pipeline_options(beam_args)
    job = prepare(config, options)
    profile = profile_for(options)
    with profile.workspace(job, options, beam_args, translate_only=True) as workspace:
        p = beam.Pipeline(runner=profile.runner_object(options), options=options)
        build_pipeline(p, job, workspace)
    # As Beam runs it: rebuilt from its proto, then the runner's replacements.
    rebuilt = beam.Pipeline.from_runner_api(p.to_runner_api(use_fake_coders=True), p.runner, options)
    rebuilt.replace_all(OVERRIDES)
    rebuilt.replace_all(dask_overrides())
    assert side_input_steps(rebuilt) == []
