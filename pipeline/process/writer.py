"""The writer interface: a work item's tokenized documents -> its blocks of records and tails.

    class JsonLines(Writer):
        name = "jsonl"                                   # the --output_format it writes
        def write(self, docs: Documents) -> Written:     # docs.texts, docs.ids, docs.copies, docs.stats ...
            ...
            return Written(blocks=[Block(source, FramedRecords.of(lines))])

A writer decides from the work item alone (never from another one), so that the result is the same
bytes whatever was processed beside it. It may leave a document out (`docs.unkeep(i)`, counted under
a reason in its subset's `filtered`) and add its own counts (`docs.stats`); the engine counts the
documents written after it (pipeline/process/engine.py). Writers are found by format name in
pipeline/process/formats.py.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

import numpy as np

from pipeline.config.job import PipelineConfig
from pipeline.process.documents import Documents
from pipeline.process.result import Block, Tail
from pipeline.tokenize.kinds.base import SpecialIds


@dataclasses.dataclass
class Written:
    """What a writer made of a work item: its blocks, in output order, and its tails (concat packing)."""

    blocks: list[Block] = dataclasses.field(default_factory=list)
    tails: list[Tail] = dataclasses.field(default_factory=list)


class Writer(abc.ABC):
    """One output format's writing of a work item's documents (see the module docstring)."""

    name: ClassVar[str]

    def __init__(self, config: PipelineConfig, special: SpecialIds):
        self.config = config
        self.special = special
        self.dtype = self.token_dtype(special.vocab_size)

    @staticmethod
    @abc.abstractmethod
    def token_dtype(vocab_size: int) -> np.dtype:
        """The format's token dtype."""

    @abc.abstractmethod
    def write(self, docs: Documents) -> Written:
        """The work item's blocks and tails."""

    def stream_ids(self) -> dict:
        """The BOS/EOS/separator arguments of `packing.build_stream_flat` for the job's special ids."""
        special = self.special
        return {"bos_id": special.bos_id if special.add_bos else None,
                "eos_id": special.eos_id if special.add_eos else None, "separator_id": special.separator_id}
