r"""Stages of the user's own package, found without editing ours: an entry point, or --stage_module PKG.MODULE.

    # the user's pyproject.toml                         # or, without installing a package:
    [project.entry-points."pile_pipeline.stages"]       pile-pipeline run --stage_module mypkg.stages \\
    short_docs = "mypkg.stages:ShortDocs"                   --filters short_docs --short_min_words 30

An entry point of the group `pile_pipeline.stages` names a `DocumentStage` class; a --stage_module
is imported and every `DocumentStage` subclass defined in it (with a `name`) is registered. Each is
registered as the built-in stages are (its flags, its checks), and marked external.

On the workers an external stage travels as an `ExternalStage`: its module's name, its class's
name and its options as plain values, never the class itself (a worker that cannot import the
module would fail while unpickling the job, before any of our code runs, and Dask's scheduler,
which unpickles the graph too, drops the whole job). `setup()` imports the module on the worker
and rebuilds the stage; a worker without it fails the job with `StageModuleMissing`, one line
naming the module and the fix. The config the job carries holds the stage's class and options the
same way (`carry` / `restore`, in `StageChoice`'s pickling).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from importlib import metadata

from pipeline.core.errors import JobError
from pipeline.stages import registry
from pipeline.stages.base import Doc, DocumentStage, Keep, Remove

GROUP = "pile_pipeline.stages"
EXTERNAL: dict[str, str] = {}  # stage name -> its module, for every stage registered from outside
_LOADED: set[str] = set()  # modules and entry points already registered


class StageModuleMissing(JobError):
    """A worker cannot import the module of a stage the job runs."""


def load_entry_points() -> None:
    """Register the stage of every `pile_pipeline.stages` entry point installed (once per process)."""
    if GROUP in _LOADED:  # the installed distributions are scanned once (~40 ms)
        return
    _LOADED.add(GROUP)
    for point in metadata.entry_points(group=GROUP):
        key = f"entry point {point.name} = {point.value}"
        if key in _LOADED:
            continue
        _LOADED.add(key)
        try:
            cls = point.load()
        except Exception as e:  # a broken plugin names itself, whatever it raised
            raise ValueError(f"the {GROUP} {key} does not load: {type(e).__name__}: {e}") from None
        if not (inspect.isclass(cls) and issubclass(cls, DocumentStage)):
            raise ValueError(f"the {GROUP} {key} is not a DocumentStage class")
        _register(cls)


def load_module(module_name: str) -> list[str]:
    """Import --stage_module's module and register its stages; their names (ValueError naming the flag)."""
    if module_name in _LOADED:
        return [name for name, module in EXTERNAL.items() if module == module_name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"--stage_module {module_name}: cannot import it ({e}); install its package or put its "
                         "folder on PYTHONPATH") from None
    classes = [cls for _, cls in inspect.getmembers(module, inspect.isclass)
               if issubclass(cls, DocumentStage) and cls.__module__ == module.__name__
               and not inspect.isabstract(cls) and isinstance(getattr(cls, "name", None), str)]
    if not classes:
        raise ValueError(f"--stage_module {module_name}: defines no DocumentStage class with a name")
    _LOADED.add(module_name)
    for cls in classes:
        _register(cls)
    return [cls.name for cls in classes]


def _register(cls: type[DocumentStage]) -> None:
    if registry.STAGES.get(cls.name) is cls:
        return
    registry.register(cls)
    EXTERNAL[cls.name] = cls.__module__


@dataclasses.dataclass(frozen=True)
class Carried:
    """An external stage's class (values None) or options instance (its field values), by name."""

    module: str
    qualname: str
    name: str
    counts_as: str
    values: tuple | None = None


def _is_external(cls) -> bool:
    return isinstance(cls, type) and cls.__module__ in EXTERNAL.values()


def carry(item):
    """An external stage's class or options as a `Carried`; anything else as it is."""
    if _is_external(item) and issubclass(item, DocumentStage):
        return Carried(item.__module__, item.__qualname__, item.name, item.counts_as)
    if _is_external(type(item)) and dataclasses.is_dataclass(item):
        owner = next(c for c in registry.STAGES.values() if c.Options is type(item))
        return Carried(type(item).__module__, type(item).__qualname__, owner.name, owner.counts_as,
                       tuple((f.name, getattr(item, f.name)) for f in dataclasses.fields(item)))
    return item


def restore(item):
    """A `Carried` as its class or options again where its module imports; else the `Carried` itself."""
    if not isinstance(item, Carried):
        return item
    try:
        cls = _resolve(item.module, item.qualname)
    except ImportError:
        return item
    return cls if item.values is None else cls(**dict(item.values))


def _resolve(module_name: str, qualname: str):
    found = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def instance(cls, options) -> DocumentStage:
    """The stage the job carries: an `ExternalStage` for a stage from outside (or a `Carried`), else `cls(options)`."""
    if isinstance(cls, Carried) or _is_external(cls):
        return ExternalStage(carry(cls), carry(options))
    return cls(options)


class ExternalStage(DocumentStage):
    """A stage of the user's module, carried by name and rebuilt on each worker (the module docstring)."""

    def __init__(self, cls: Carried, options: Carried | None):
        super().__init__(None)
        self.name, self.counts_as = cls.name, cls.counts_as
        self.module, self.qualname = cls.module, cls.qualname
        self.values = None if options is None else dict(options.values)
        self._stage: DocumentStage | None = None

    def __getstate__(self):
        return {**self.__dict__, "_stage": None}

    def _build(self) -> DocumentStage:
        try:
            cls = _resolve(self.module, self.qualname)
        except ImportError as e:
            raise StageModuleMissing(
                f"stage {self.name}: this worker cannot import its module {self.module} ({e}): install the package "
                f"that holds it on every worker (or put its folder on the workers' PYTHONPATH)") from None
        return cls(None if self.values is None else cls.Options(**self.values))

    def check(self) -> None:
        """The stage's own check (in the driver)."""
        self._stage = self._stage or self._build()
        self._stage.check()

    def line_keys(self) -> tuple[tuple[str, str], ...]:
        """The stage's own."""
        self._stage = self._stage or self._build()
        return self._stage.line_keys()

    def labels(self) -> dict[str, tuple[str, ...] | None]:
        """The stage's own (in the driver)."""
        self._stage = self._stage or self._build()
        return self._stage.labels()

    def setup(self) -> None:
        """Import the module (StageModuleMissing without it), rebuild the stage, its own setup."""
        if self._stage is None:
            self._stage = self._build()
        self._stage.setup()

    def apply(self, doc: Doc) -> Remove | Keep | None:
        """The stage's verdict."""
        return self.apply_many([doc])[0]

    def apply_many(self, docs: list[Doc]) -> list[Remove | Keep | None]:
        """The stage's verdicts."""
        if self._stage is None:
            self.setup()
        return self._stage.apply_many(docs)
