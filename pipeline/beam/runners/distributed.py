"""Dataflow, Flink, Spark and Beam's portable runners (and any runner no other profile names).

Their workers are SDK processes that Beam's runner starts on the cluster's machines, many per
machine, whose number changes while the job runs: chunks are fanned out through the runner's
shuffle (a few unsplittable 14 GB files would otherwise cap the parallelism), one chunk tokenized per
call with one thread (Dataflow starts one SDK process per vCPU, each running up to 12 bundles at
once, each of which would hold a batch), and record blocks cross the shuffle as they are (`KEEP`:
these shuffles are made for bulk data). A bundle may run twice, so the files a writer stopped
midway leaves are removed once the job ends.

Where the workers run (`workers`): Dataflow's VMs; Flink's or Spark's cluster, unless the master is
local ([local], [auto], local[N]) and the workers are not in Docker; a portable job server's
workers elsewhere, unless the job server is embedded and the workers are processes here. An
EXTERNAL or PROCESS environment runs the workers on the cluster's hosts (not in containers), which
then see a network filesystem mounted on every host. Prism and Beam's interactive runners run here.
"""

from __future__ import annotations

import logging

from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    PipelineOptions,
    PortableOptions,
    SparkRunnerOptions,
    StandardOptions,
)

from pipeline.beam.execution import Execution
from pipeline.beam.remote import Workers
from pipeline.beam.runners.base import RunnerProfile
from pipeline.beam.runners.registry import short_name
from pipeline.config.job import FAN_OUT_CHOICES

LOG = logging.getLogger("pipeline.beam.execution")
LOCAL_RUNNERS = ("prism", "interactive", "switching")  # runners whose workers run in this process
LOCAL_MASTERS = ("[local]", "[auto]")  # Flink's; Spark's is "local" or "local[N]"


class Distributed(RunnerProfile):
    """Dataflow, Flink, Spark, PortableRunner and the rest: the defaults of RunnerProfile, where the workers run."""

    family = "distributed"

    def workers(self, options: PipelineOptions) -> Workers:
        """Where the workers run (see the module docstring)."""
        runner = options.view_as(StandardOptions).runner
        name = short_name(runner)
        portable = options.view_as(PortableOptions)
        environment = (portable.environment_type or "").upper()
        if name in LOCAL_RUNNERS or environment == "LOOPBACK":
            return Workers(True)
        if name == "dataflow":
            return Workers(False, where="DataflowRunner's workers are Google Cloud VMs")
        hosts = environment in ("EXTERNAL", "PROCESS")  # workers on the cluster's hosts, not in containers
        if portable.output_executable_path:
            return Workers(False, hosts, f"{runner} runs the jar {portable.output_executable_path} on a cluster")
        if name == "flink":
            master = options.view_as(FlinkRunnerOptions).flink_master
            if master in LOCAL_MASTERS:
                return Workers(environment != "DOCKER", where="the workers run in Docker containers")
            return Workers(False, hosts, f"FlinkRunner's workers run on the cluster at {master}")
        if name == "spark":
            master = options.view_as(SparkRunnerOptions).spark_master_url or ""
            if master == "local" or master.startswith("local["):
                return Workers(environment != "DOCKER", where="the workers run in Docker containers")
            return Workers(False, hosts, f"SparkRunner's workers run on the cluster at {master}")
        if name == "portable":
            endpoint = portable.job_endpoint
            if endpoint in (None, "embed") and hosts:
                return Workers(True)
            if endpoint in (None, "embed"):
                return Workers(False, where="the workers run in Docker containers")
            return Workers(False, hosts, f"the job server at {endpoint} runs the workers elsewhere")
        return Workers(False, hosts, f"{runner}'s workers run elsewhere")

    def plan(self, options: PipelineOptions, input_files: list[str], fan_out: str = "auto",
             encode_threads: int | None = None, input_bytes: int = 0) -> Execution:
        """Chunks fanned out (unless --fan_out no), a chunk per tokenizer call, one thread (module docstring)."""
        if fan_out not in FAN_OUT_CHOICES:
            raise ValueError(f"--fan_out must be one of {FAN_OUT_CHOICES}, got {fan_out!r}")
        runner = options.view_as(StandardOptions).runner
        chosen = fan_out in ("auto", "yes")
        if not chosen:
            LOG.warning("--fan_out no on %s: each input file is read and tokenized by one worker", runner)
        threads = encode_threads or 1
        LOG.info("execution: %s, %d tokenizer thread(s) per worker", "chunks fanned out to workers" if chosen
                 else "work items on 1 worker(s): whole files", threads)
        return Execution(fan_out=chosen, workers=1, encode_threads=threads, input_bytes=input_bytes)


PROFILE = Distributed()
