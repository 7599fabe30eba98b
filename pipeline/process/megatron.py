"""The Megatron output's writing: every kept document one sequence `[BOS] ids EOS`, one block per (group, copy).

    Documents -> DocumentSequences.write -> blocks (group, copy, file, chunk) of the documents' token bytes

group: the subset's name with --per_subset, else "". A block's records are its documents' tokens
back to back (a FramedRecords of byte strings); its spans, with --provenance, each document's input
line. The shard layout and the files are pipeline/beam/megatron.py's and pipeline/format/megatron.py's.
"""

from __future__ import annotations

import numpy as np

from pipeline.core import packing, provenance
from pipeline.format import megatron as fmt
from pipeline.format.framing import FramedRecords
from pipeline.process.documents import Documents
from pipeline.process.result import Block
from pipeline.process.writer import Writer, Written

NO_TOKENS = "no_tokens"  # filter reason: text that encodes to no ids (preprocess_data.py writes nothing for it)


class DocumentSequences(Writer):
    """Documents -> one block of sequences per (group, epoch copy); a document of no ids is left out."""

    name = "megatron"

    @staticmethod
    def token_dtype(vocab_size: int) -> np.dtype:
        """Megatron's token dtype for the vocabulary."""
        return fmt.token_dtype(vocab_size)

    def write(self, docs: Documents) -> Written:
        """The blocks, by group then copy (source (group, copy, file, chunk))."""
        cfg, chunk, copies = self.config, docs.chunk, docs.copies
        for i in np.flatnonzero((np.diff(docs.offsets) == 0) & (copies >= 0)).tolist():
            filtered = docs.unkeep(i).filtered
            filtered[NO_TOKENS] = filtered.get(NO_TOKENS, 0) + 1
        groups = np.array([subset if cfg.per_subset else "" for subset in docs.subsets], object)
        out = Written()
        for group in sorted(set(groups[copies > 0].tolist())):
            in_group = groups == group
            for copy in range(int(copies[in_group].max())):
                chosen = in_group & (copies > copy)
                stream = packing.build_stream_flat(docs.ids, docs.offsets, chosen, **self.stream_ids())
                nbytes = docs.sizes[chosen].astype(np.int64) * self.dtype.itemsize
                block = FramedRecords(stream.labels.astype(self.dtype).tobytes(), np.cumsum(nbytes))
                spans = None
                if cfg.provenance:  # each document's input line (pipeline/format/provenance.py)
                    numbers = np.array([line.number for line in docs.lines], np.int64)[chosen]
                    spans = provenance.document_spans(chunk.file_index, numbers, docs.sizes[chosen])
                out.blocks.append(Block((group, copy, chunk.file_index, chunk.chunk_index), block, spans))
        return out
