"""Every runner family by name: the one place a `--runner` value is compared with a runner's name.

A row names the profile module of one family (pipeline/beam/runners/base.py `RunnerProfile`) and
the `--runner` values it takes. Beam takes a runner by its class name, its module path, or either
in lower case without the "Runner" suffix (`--runner dask`), so a value is looked up by that short
form (`short_name`). The last row takes every name no other row does: Dataflow, Flink, Spark, the
portable runners, and runners Beam has that this package does not name (JetRunner, SamzaRunner).

Importing this module imports neither Beam nor a profile: a command asks `row_of` before Beam is
imported (whether Beam may be imported lean, pipeline/cli/run.py), and `profile_of` imports the
one profile a job needs.
"""

from __future__ import annotations

import dataclasses
import importlib


@dataclasses.dataclass(frozen=True)
class Row:
    """One runner family.

    family: its name (a profile's `family`); module: its profile module, which defines `PROFILE`;
    names: the short names it takes (`short_name`), () for every name no other row takes;
    lean_beam: the command never uses Beam's cloud connectors (DirectRunner runs the job in its process, Dask's
    driver only translates it): Beam imported without them (pipeline/startup/lean_import.py).
    """

    family: str
    module: str
    names: tuple[str, ...] = ()
    lean_beam: bool = False


PROFILES = (
    Row("direct", "pipeline.beam.runners.direct.profile", ("direct",), lean_beam=True),
    Row("dask", "pipeline.beam.runners.dask.profile", ("dask",), lean_beam=True),
    Row("distributed", "pipeline.beam.runners.distributed", ()),
)


def short_name(runner: str | None) -> str:
    """A --runner value as Beam matches it: the class name of a module path, lower case, without "Runner".

    >>> short_name("apache_beam.runners.dask.dask_runner.DaskRunner"), short_name(None), short_name("flink")
    ('dask', 'direct', 'flink')
    """
    name = (runner or "DirectRunner").rsplit(".", 1)[-1].lower()
    return name.removesuffix("runner") or name


def row_of(runner: str | None) -> Row:
    """The row of the family a --runner value names (None: Beam's default, DirectRunner)."""
    name = short_name(runner)
    return next((row for row in PROFILES if name in row.names), next(row for row in PROFILES if not row.names))


def profile_of(runner: str | None):
    """The profile (a `RunnerProfile`) of the family a --runner value names; imports its module."""
    return importlib.import_module(row_of(runner).module).PROFILE


def profile_for(options):
    """The profile of a job with these PipelineOptions (its --runner)."""
    from apache_beam.options.pipeline_options import StandardOptions

    return profile_of(options.view_as(StandardOptions).runner)
