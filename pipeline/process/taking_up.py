"""A tokenizing step's side of the work folder: each chunk's committed result taken up, or its new one committed.

Beam-free, so the step that runs the engine (pipeline/beam/chunk_documents.py) only routes what
this gives. Without a work folder every chunk is processed and nothing is committed. A result a
run before committed counts as reused; one this run committed and takes back (a task run again:
a worker lost, Dask computing a branch twice) counts as processed, as in a run without it.
"""

from __future__ import annotations

from pipeline.io.inputs import Chunk
from pipeline.io.record_files import load_chunk
from pipeline.io.snapshot import InputChangedError
from pipeline.io.urls import redact_url
from pipeline.io.workfolder import WorkFolder
from pipeline.process import commit
from pipeline.process.commit import Committed, ReadInfo
from pipeline.process.result import ChunkResult


class TakingUp:
    """Per step: `take` each chunk as it comes, `drain` the digests of those to process, `commit` their results."""

    def __init__(self, work: WorkFolder | None, config):
        self.work, self._config = work, config
        self._part = commit.part_of(config)  # the step's items: a digest of its config
        self._pending: list[str | None] = []

    def take(self, chunk, removed: dict | None, verdicts: dict | None
             ) -> tuple[ChunkResult | None, Chunk | Committed, dict | None]:
        """(a committed result that goes on as it is, else None; the chunk; read counts to emit, else None).

        A `Committed` marker whose result is gone or torn is read again from its work item (and its
        reading counted); a chunk read again must hold what its committed result was made from.
        """
        if self.work is None:
            return None, chunk, None
        digest = commit.verdicts_digest(removed, verdicts)
        found = commit.fetch_result(self.work, self._part, chunk.file_index, chunk.chunk_index, digest)
        if found is not None:
            result, info, run = found
            read = None
            if isinstance(chunk, Committed):
                read = info.stats(chunk.file_index)  # the read counts of a chunk not read
            elif ReadInfo.of(load_chunk(chunk)) != info:
                raise InputChangedError(
                    f"{redact_url(chunk.path)} changed since the run this one resumes: chunk {chunk.chunk_index} "
                    "does not hold what its committed result was made from. Run the job again with --overwrite")
            result.stats.work = {"processed": 1} if run == self.work.run_id else {"reused": 1}
            return result, chunk, read
        read = None
        if isinstance(chunk, Committed):
            chunk = commit.read_again(chunk, self._config)
            read = ReadInfo.of(chunk).stats(chunk.file_index)
        self._pending.append(digest)
        return None, chunk, read

    def drain(self) -> list[str | None]:
        """The digests of the chunks taken to process since the last drain, in their order."""
        pending, self._pending = self._pending, []
        return pending

    def commit(self, result: ChunkResult, chunk: Chunk, digest: str | None) -> None:
        """Commit a processed chunk's result before anything of it goes on; it counts as processed."""
        if self.work is not None:
            commit.commit_result(self.work, self._part, result, ReadInfo.of(chunk), digest)
        result.stats.work = {"processed": 1}
