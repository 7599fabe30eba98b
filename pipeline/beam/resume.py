"""A run's work folder, in the driver: checked before a resumed run starts, taken up or made, removed after success.

Every run that `pile-pipeline run` starts commits its finished work items into OUT/.resume/
(pipeline/io/workfolder.py; what is committed: pipeline/process/commit.py), with what decides the
output's bytes (pipeline/process/fingerprint.py) in its job.json. With --resume the run takes up
that folder: refused, naming the first difference, when anything that decides the bytes differs;
run from the start, saying so, when there is none (the same command serves the first try and every
retry). A run that writes its manifest removes the folder; one that fails or is killed leaves it.
"""

from __future__ import annotations

import dataclasses
import json
import logging

from pipeline.beam.preflight import Job
from pipeline.core.options import UsageError
from pipeline.io.urls import redact_url
from pipeline.io.workfolder import WorkFolder, WorkFolderError, read_job, remove_work_folder, work_url, write_job
from pipeline.process.fingerprint import digest, job_facts, what_differs

LOG = logging.getLogger("pipeline")


@dataclasses.dataclass(frozen=True)
class Work:
    """A run's work folder: the job's facts and their digest, the runs before this one that used it."""

    output_dir: str
    facts: dict
    key: str
    runs: tuple[str, ...]

    def start(self, job: Job) -> tuple[Job, WorkFolder]:
        """Record this run in the folder's job.json: (the job with its count of resumes, where its workers commit)."""
        runs = [*self.runs, job.run_id]
        write_job(self.output_dir, {"digest": self.key, "facts": self.facts, "runs": runs})
        return dataclasses.replace(job, resumes=len(self.runs)), WorkFolder(self.output_dir, self.key, job.run_id)


def check_work(job: Job) -> Work:
    """What this run finds of the work of runs before (only with --resume): a UsageError when it must not take it up."""
    config = job.config
    facts = json.loads(json.dumps(job_facts(config, job.snapshots, job.eval_files, job.tokenizer)))  # as read back
    key = digest(facts)
    found = None
    if config.resume:
        try:
            found = read_job(config.output_dir)
        except WorkFolderError as e:
            raise UsageError(f"--resume: {e}") from None
        if found is None:
            LOG.warning("--resume: %s holds no work of a run before (no %s): the job runs from the start",
                        redact_url(config.output_dir), redact_url(work_url(config.output_dir)))
        else:
            differs = what_differs(found.get("facts", {}), facts)
            if differs:
                raise UsageError(f"--resume refused: {differs}. A resumed run must have the inputs and the "
                                 "options that decide the output of the run it takes up; pass --overwrite to "
                                 "start again")
            LOG.info("--resume: taking up the work of run(s) %s", ", ".join(found["runs"]) or "none")
    return Work(config.output_dir, facts, key, tuple(found["runs"]) if found else ())


def log_work(result) -> None:
    """One line of the work a run did and took from the runs before, where the runner has metrics (not Dask's)."""
    try:
        counters = {(r.key.metric.namespace, r.key.metric.name): r.committed
                    for r in result.metrics().query()["counters"]}
    except (AttributeError, NotImplementedError, KeyError, TypeError):
        return
    dedup = ((counters.get(("dedup", "chunks_signed"), 0), counters.get(("dedup", "chunks_reused"), 0))
             if ("dedup", "chunks_signed") in counters or ("dedup", "chunks_reused") in counters else None)
    reused = counters.get(("pile", "chunks_reused"), 0)
    if reused or (dedup and dedup[1]):
        LOG.info("resume: %d chunk(s) reused from the runs before%s", reused,
                 f"; dedup's input: {dedup[0]} chunk(s) signed, {dedup[1]} reused" if dedup else "")


def finish_work(output_dir: str) -> None:
    """The output is committed: its work folder goes."""
    remove_work_folder(output_dir)
