"""A stage of a package outside the repository: found by --stage_module or an entry point, run from the command
line and on a real Dask cluster, the same bytes on both; a Dask worker without the module fails the job with
one line naming it and the fix.

The package is written by the test into a temporary folder that only the processes given it on their
PYTHONPATH can import (the command, and the Dask workers started with it); the entry point is a
`.dist-info` folder with an `entry_points.txt` beside it, as pip installs one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from corpus_helpers import FAST_BEAM, output_digests, pile_line, write_lines
from dask_cluster import REPO, dask_cluster

pytestmark = pytest.mark.slow

STAGE = '''"""A stage of a package outside pile-pipeline."""
import dataclasses

from pipeline.core.options import option
from pipeline.stages.base import DocumentStage, Keep, Remove


@dataclasses.dataclass(frozen=True)
class {cls}Options:
    {prefix}_min_words: int = option(50, help="documents with fewer words are removed")


class {cls}(DocumentStage):
    name = "{name}"
    Options = {cls}Options

    def apply(self, doc):
        n = len(doc.text.split())
        if n < self.options.{prefix}_min_words:
            return Remove("too_few_words", {{"score": n, "threshold": self.options.{prefix}_min_words}})
        return Keep(labels={{"long": str(n >= 100)}})
'''


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """ownstages.shortdocs (for --stage_module) and ownstages.entry with its entry point, in a folder of their own."""
    root = tmp_path_factory.mktemp("site")
    (root / "ownstages").mkdir()
    (root / "ownstages" / "__init__.py").write_text("")
    (root / "ownstages" / "shortdocs.py").write_text(STAGE.format(cls="ShortDocs", name="short_docs", prefix="short"))
    (root / "ownstages" / "entry.py").write_text(STAGE.format(cls="EntryDocs", name="entry_docs", prefix="entry"))
    dist = root / "ownstages-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ownstages\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[pile_pipeline.stages]\nentry_docs = ownstages.entry:EntryDocs\n")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("own_corpus")
    for f in range(2):
        lines = [pile_line(" ".join(f"w{(i * 31 + k) % 97}" for k in range(20 + (i * 37) % 160)), "Pile-CC")
                 for i in range(f * 40, f * 40 + 40)]
        write_lines(str(root / f"{f}.jsonl.zst"), lines)
    return root


def _argv(corpus: Path, out: Path, model: str, *more: str) -> list[str]:
    return ["run", "--input", str(corpus / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model", model,
            "--seq_len", "64", "--chunk_mb", "0.002", *more]


def _command(argv: list[str], site: Path | None, log: Path) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([str(site)] if site else []))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with open(log, "wb") as f:
        code = subprocess.run([sys.executable, "-m", "pipeline.cli.main", *argv], env=env, stdout=f,
                              stderr=subprocess.STDOUT, cwd=REPO, timeout=600).returncode
    return code, log.read_text(errors="replace")


def _removed(out: Path) -> list[dict]:
    manifest = json.loads((out / "manifest.json").read_text())
    return [json.loads(line) for entry in manifest["removed"]["files"]
            for line in (out / entry["path"]).read_text().splitlines()]


def test_without_the_module_the_stage_is_unknown(package, corpus, tiny_model, tmp_path):
    code, text = _command(_argv(corpus, tmp_path / "out", tiny_model, "--filters", "short_docs"), None,
                          tmp_path / "log")
    assert code == 2 and "no stage named 'short_docs'" in text, text[-2000:]


def test_stage_module_from_the_command_line(package, corpus, tiny_model, tmp_path):
    out = tmp_path / "out"
    code, text = _command(_argv(corpus, out, tiny_model, "--stage_module", "ownstages.shortdocs", "--filters",
                                "short_docs", "--short_min_words", "90", *FAST_BEAM), package, tmp_path / "log")
    assert code == 0, text[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["stage_module"] == ["ownstages.shortdocs"]
    assert manifest["config"]["short_min_words"] == 90 and manifest["config"]["filters"] == ["short_docs"]
    removed = _removed(out)
    assert removed and all(r["reason"] == "short_docs" and r["rule"] == "too_few_words" and r["score"] < 90
                           and r["threshold"] == 90 for r in removed)
    s = manifest["subsets"]["Pile-CC"]
    assert s["removed"] == {"short_docs": len(removed)} and s["kept"] + len(removed) == s["documents"] == 80
    code, text = _command(["run", "--stage_module", "ownstages.shortdocs", "--help"], package, tmp_path / "help")
    assert code == 0 and "--short_min_words" in text and "stage short_docs" in text


def test_a_module_that_does_not_import_is_one_line(corpus, tiny_model, tmp_path):
    code, text = _command(_argv(corpus, tmp_path / "out", tiny_model, "--stage_module", "nosuch.stages"), None,
                          tmp_path / "log")
    assert code == 2 and "--stage_module nosuch.stages: cannot import it" in text, text[-2000:]
    assert "Traceback" not in text


def test_entry_point_found_without_a_flag(package, corpus, tiny_model, tmp_path):
    out = tmp_path / "out"
    code, text = _command(_argv(corpus, out, tiny_model, "--filters", "entry_docs", "--entry_min_words", "120",
                                "--runner", "DirectRunner", "--direct_running_mode", "multi_processing",
                                "--direct_num_workers", "2"), package, tmp_path / "log")
    assert code == 0, text[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["entry_min_words"] == 120 and "stage_module" not in manifest["config"]
    assert {r["reason"] for r in _removed(out)} == {"entry_docs"}


def test_on_dask_the_same_bytes_and_a_worker_without_the_module_is_one_line(package, corpus, tiny_model, tmp_path):
    stage = ["--stage_module", "ownstages.shortdocs", "--filters", "short_docs", "--short_min_words", "90"]
    code, text = _command(_argv(corpus, tmp_path / "direct", tiny_model, *stage, *FAST_BEAM), package,
                          tmp_path / "direct.log")
    assert code == 0, text[-3000:]
    with dask_cluster(tmp_path / "with", workers=2, env={"PYTHONPATH": f"{REPO}{os.pathsep}{package}"}) as cluster:
        code, text = _command(_argv(corpus, tmp_path / "dask", tiny_model, *stage, "--runner", "DaskRunner",
                                    "--dask_client_address", cluster.address), package, tmp_path / "dask.log")
    assert code == 0, text[-3000:]
    assert output_digests(tmp_path / "dask") == output_digests(tmp_path / "direct")
    with dask_cluster(tmp_path / "without", workers=1, env={"PYTHONPATH": str(REPO)}) as cluster:
        code, text = _command(_argv(corpus, tmp_path / "lacking", tiny_model, *stage, "--runner", "DaskRunner",
                                    "--dask_client_address", cluster.address), package, tmp_path / "lacking.log")
    errors = [line for line in text.splitlines() if " ERROR " in line or line.startswith("Traceback")]
    assert code != 0, text[-3000:]
    assert len(errors) == 1, text[-3000:]
    assert "cannot import its module ownstages.shortdocs" in errors[0] and "on every worker" in errors[0], errors
    assert not (tmp_path / "lacking" / "manifest.json").exists()
