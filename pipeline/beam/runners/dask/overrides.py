"""Beam's DaskRunner with the job's graph kept free of side inputs, whoever wrote the step.

DaskRunner computes a side input inside every task that reads it, from the start of its branch
(profile.py): a step that reads one computes again everything the side input depends on. The job's
own steps take another shape on Dask (pipeline/beam/graph.py), but Beam's `CombineGlobally` (and
`combiners.ToList`, `combiners.Count.Globally`, ... built on it) reads one to give an empty input
its default value: on Dask a global combine after the tokenizing stage ran that stage again, inside
the task that read the combined value (a Megatron job's document counts and stats: twice the
workers' CPU). `DaskRunner` here replaces each such combine before translation with the same
combine without defaults, whose value (or the default, when there is none) is then found by a
GroupByKey with a seed element on one key: the same one value, and no side input.

`side_input_steps` lists the steps of a pipeline that still read one (the tests check every
output format's graph has none on Dask, as Beam runs it: rebuilt from its proto).
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.pipeline import PipelineVisitor, PTransformOverride
from apache_beam.runners.dask.dask_runner import DaskRunner as BeamDaskRunner


def _keyed(value, present: bool):
    return None, (present, value)


def _one_value(element, combine):
    """The combined value, or the combine's default when its input was empty."""
    _, values = element
    found = [value for present, value in values if present]
    if found:
        return found[0]
    return combine.default()


class _Default:
    """What `CombineGlobally` gives an empty input, computed where it is needed (picklable)."""

    def __init__(self, fn: beam.CombineFn, args, kwargs):
        self._fn, self._args, self._kwargs = fn, args, kwargs

    def default(self):
        self._fn.setup(*self._args, **self._kwargs)
        try:
            return self._fn.apply([], *self._args, **self._kwargs)
        finally:
            self._fn.teardown(*self._args, **self._kwargs)


class _CombineWithDefaultByKey(beam.PTransform):
    """`CombineGlobally` with its default, as the combine without defaults and a seed grouped on one key."""

    def __init__(self, combine: beam.CombinePerKey):
        super().__init__()
        args, kwargs = list(combine.args or ()), dict(combine.kwargs or {})
        self._combine = beam.CombineGlobally(combine.fn, *args, **kwargs).without_defaults()
        self._default = _Default(combine.fn, args, kwargs)

    def expand(self, pcoll):
        combined = pcoll | "CombineWithoutDefault" >> self._combine  # 0 or 1 element
        seed = pcoll.pipeline | "Seed" >> beam.Create([None])
        return ((combined | "KeyValue" >> beam.Map(_keyed, True), seed | "KeySeed" >> beam.Map(_keyed, False))
                | "Flatten" >> beam.Flatten()
                | "Group" >> beam.GroupByKey()
                | "OneValue" >> beam.Map(_one_value, self._default))


# The parts of CombineGlobally's expansion with a default (Beam's transforms/core.py), the last reading
# the combined value as a side input. Beam runs a DaskRunner's pipeline as rebuilt from its proto,
# where such a combine is a composite of these parts, not a CombineGlobally any more.
DEFAULT_PARTS = ("KeyWithVoid", "CombinePerKey", "UnKey", "DoOnce", "InjectDefault")


def _combine_with_default(applied_ptransform):
    """The CombinePerKey of a global combine that injects a default through a side input; else None."""
    parts = {part.full_label.rsplit("/", 1)[-1]: part for part in applied_ptransform.parts}
    if tuple(parts) != DEFAULT_PARTS or not parts["InjectDefault"].side_inputs:
        return None
    combine = parts["CombinePerKey"].transform
    return combine if isinstance(combine, beam.CombinePerKey) else None


class _CombineGloballyWithDefaults(PTransformOverride):
    def matches(self, applied_ptransform) -> bool:
        return _combine_with_default(applied_ptransform) is not None

    def get_replacement_transform_for_applied_ptransform(self, applied_ptransform):
        return _CombineWithDefaultByKey(_combine_with_default(applied_ptransform))


OVERRIDES = (_CombineGloballyWithDefaults(),)


class DaskRunner(BeamDaskRunner):
    """Beam's DaskRunner, the pipeline's global combines replaced first (see the module docstring)."""

    def run_pipeline(self, pipeline, options):
        """Replace, then run as Beam's DaskRunner does."""
        pipeline.replace_all(OVERRIDES)
        return super().run_pipeline(pipeline, options)


def side_input_steps(pipeline: beam.Pipeline) -> list[str]:
    """The full labels of the steps of `pipeline` that read a side input."""
    found = []

    class _Visitor(PipelineVisitor):
        def visit_transform(self, node):
            if node.side_inputs:
                found.append(node.full_label)

    pipeline.visit(_Visitor())
    return found
