"""What the job's graph may ask of a runner (`Runtime`), and the two shapes of the steps that differ.

A runner's profile (pipeline/beam/runners/) declares its Runtime; where one of these is missing
(Beam's DaskRunner lacks all three: pipeline/beam/runners/dask/profile.py says why), the graph
takes the other shape of the same step, with the same bytes out:

- **Tagged outputs** (`multi_output`): where a ParDo's tagged outputs are not separate collections,
  the outputs are carried in the element itself, as (tag, value), and each consumer takes its own
  with a filter.
- **Side inputs computed once**: where a side input would be computed again for each reader, a
  value every element needs is joined to the elements by key instead (`join_each`); what one step
  needs from many (the manifest) is gathered by a CoGroupByKey (`gather`), on every runner.
- **Outputs of `finish_bundle`**: where what a DoFn emits there is dropped, the DoFns of the job
  emit in `process` only (batch limits of 0), and `multi_output` fails the job if one emits there anyway.

Shared by every runner.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

MAIN = "main"


@dataclasses.dataclass(frozen=True)
class Runtime:
    """What the graph may use where it runs.

    tagged_outputs: a ParDo's tagged outputs are separate collections; side_inputs: a side input is
    computed once; finish_bundle_outputs: what a DoFn emits in `finish_bundle` is kept.
    """

    tagged_outputs: bool = True
    side_inputs: bool = True
    finish_bundle_outputs: bool = True


EVERY_FEATURE = Runtime()


class _InBand(beam.DoFn):
    """A DoFn whose outputs, tagged or not, come out as (tag, value) in its main output."""

    def __init__(self, fn: beam.DoFn, main: str, finish_outputs: bool):
        self._fn, self._main, self._finish_outputs = fn, main, finish_outputs

    def setup(self):
        self._fn.setup()

    def start_bundle(self):
        self._fn.start_bundle()

    def process(self, element, *args, **kwargs):
        for out in self._fn.process(element, *args, **kwargs) or ():
            yield self._tagged(out)

    def finish_bundle(self):
        outs = list(self._fn.finish_bundle() or ())
        if outs and not self._finish_outputs:
            raise RuntimeError(f"{type(self._fn).__name__} emitted {len(outs)} element(s) as its bundle finished, "
                               "which this runner drops")
        for out in outs:
            tag, value = (out.tag, out.value) if isinstance(out, beam.pvalue.TaggedOutput) else (self._main, out)
            if isinstance(value, WindowedValue):
                value = value.value
            yield GlobalWindows.windowed_value((tag, value))

    def teardown(self):
        self._fn.teardown()

    def _tagged(self, out):
        if isinstance(out, beam.pvalue.TaggedOutput):
            return out.tag, out.value
        return self._main, out


def _select(element, tag: str):
    if element[0] == tag:
        yield element[1]


class Outputs:
    """A multi-output ParDo's outputs: `outputs[TAG]`, `outputs.main` (or the main output's name)."""

    def __init__(self, label: str, tagged, main: str, tags: tuple[str, ...]):
        self._label, self._tagged, self._main, self._tags = label, tagged, main, tags
        self._made: dict = {}

    def __getitem__(self, tag: str):
        if tag not in (*self._tags, self._main):
            raise KeyError(tag)
        if tag not in self._made:
            self._made[tag] = self._tagged | f"{self._label}[{tag}]" >> beam.FlatMap(_select, tag)
        return self._made[tag]

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def select(self, *tags: str):
        """The outputs of several tags as one collection (one filter, not one per tag)."""
        key = tuple(sorted(tags))
        if key not in self._made:
            self._made[key] = self._tagged | f"{self._label}[{','.join(key)}]" >> beam.FlatMap(_select_any, key)
        return self._made[key]


def _select_any(element, tags: tuple[str, ...]):
    if element[0] in tags:
        yield element[1]


def outputs_of(outputs, *tags: str) -> list:
    """The collections of a multi-output step's `tags`, to flatten: one where they travel in the element."""
    if isinstance(outputs, Outputs):
        return [outputs.select(*tags)]
    return [outputs[tag] for tag in tags]


def multi_output(pcoll, label: str, fn: beam.DoFn, *tags: str, main: str = MAIN, runtime: Runtime = EVERY_FEATURE,
                 args: tuple = (), main_type=None):
    """`pcoll | label >> ParDo(fn, *args).with_outputs(*tags, main=main)`, on any runner.

    Where tagged outputs are not separate collections the DoFn's outputs travel as (tag, value)
    and each consumer's filter takes its own; the result is indexed the same way either way.
    `main_type`: the main output's type (its coder), where it is a collection of its own.
    """
    if runtime.tagged_outputs:
        pardo = beam.ParDo(fn, *args)
        if main_type is not None:
            pardo = pardo.with_output_types(main_type)
        return pcoll | label >> pardo.with_outputs(*tags, main=main)
    tagged = pcoll | label >> beam.ParDo(_InBand(fn, main, runtime.finish_bundle_outputs), *args)
    return Outputs(label, tagged, main, tags)


def _keyed(value, tag):
    return None, (tag, value)


def _gathered(element, tags):
    _, values = element
    out = {tag: [] for tag in tags}
    for tag, value in values:
        out[tag].append(value)
    return out


def gather(label: str, **pcolls):
    """The elements of several collections as one element, {name: [its elements]}, once all are done.

    What a side input would hand one step, by a GroupByKey on one key: the step runs once every
    collection is complete, and on every runner it is fed by its inputs (a runner may compute only
    what the last step depends on, as Dask does). An empty collection gives an empty list; the
    element exists when at least one of them has one.
    """
    names = tuple(pcolls)
    keyed = [pcoll | f"{label}/Key[{name}]" >> beam.Map(_keyed, name) for name, pcoll in pcolls.items()]
    return (keyed
            | f"{label}/Flatten" >> beam.Flatten()
            | f"{label}/Group" >> beam.GroupByKey()
            | f"{label}/Gathered" >> beam.Map(_gathered, names))


def _tag(element, tag):
    key, value = element
    return key, (tag, value)


def _joined(element):
    key, values = element
    items, given = [], []
    for tag, value in values:
        (items if tag == "item" else given).append(value)
    if len(given) != 1:
        raise RuntimeError(f"key {key!r}: {len(given)} values to join to its {len(items)} element(s), not 1")
    return key, items, given[0]


def join_each(label: str, items, values):
    """(key, item) and (key, value), one value a key -> (key, [items], value): a side input's value, by key.

    Where a side input would be computed again for each reader, the value every element needs
    is sent to the elements' keys instead (the producer of `values` knows them all).
    """
    return ((items | f"{label}/TagItems" >> beam.Map(_tag, "item"),
             values | f"{label}/TagValues" >> beam.Map(_tag, "value"))
            | f"{label}/Flatten" >> beam.Flatten()
            | f"{label}/Group" >> beam.GroupByKey()
            | f"{label}/Joined" >> beam.Map(_joined))
