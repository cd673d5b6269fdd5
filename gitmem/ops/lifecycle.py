"""Memory lifecycle: dedup on write, protected context, compress, archive, merge, links.

:class:`Lifecycle` puts together the jobs the Vault offers, each in its own module:

* :mod:`gitmem.ops.dedup`: an agent's add that returns the memory already there
  instead of a duplicate (:meth:`DedupWriter.write`);
* :mod:`gitmem.ops.consolidate`: archive, unarchive and merge, and the
  consolidation step compress and reflect share (one commit each);
* :mod:`gitmem.ops.compress`: a tier's old memories become one summary;
* :mod:`gitmem.ops.links`: links and backlinks, and the protected context.

Consolidation is where memory systems lose data, so here every step is one write a
person can read, diff and revert: archiving and compressing are tracked renames
into ``archive/`` (a pure-rename commit precedes the step's commit, so ``git log
--follow`` shows a file's whole life), merged and compressed sources stay readable
with ``merged_into`` / ``archived_into`` pointing at what replaced them, and
protected types (goal, rule, constraint by default) are never touched without ``force``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .compress import CompressBatch, Compressor, Summarizer, extractive_summary
from .consolidate import Consolidator, MergeResult
from .dedup import DedupWriter, WriteResult, title_from_content
from .links import Links, ProtectedContext, links, protected_context

if TYPE_CHECKING:  # pragma: no cover
    from ..store.reader import Reader
    from ..store.storage import Storage
    from ..write.pipeline import WritePipeline
    from .memories import Memories

__all__ = ["Lifecycle", "WriteResult", "ProtectedContext", "CompressBatch", "MergeResult",
           "Links", "Summarizer", "extractive_summary", "title_from_content"]


class Lifecycle:
    """Dedup on write, protected context, compress, archive, merge and links: the
    lifecycle jobs of one open vault (module docstring)."""

    def __init__(self, store: Storage, reader: Reader, pipeline: WritePipeline,
                 memories: Memories) -> None:
        self.store = store
        self.reader = reader
        self.dedup = DedupWriter(store, reader, pipeline, memories)
        self.consolidator = Consolidator(store, reader, pipeline, memories)
        self.compressor = Compressor(store, reader, self.consolidator)
        # Each entry point is its job's own method, so its signature and docstring are
        # written once, where the work is.
        self.write = self.dedup.write
        self.most_similar = self.dedup.most_similar
        self.compress_tier = self.compressor.batch
        self.compress = self.compressor.compress
        self.archive = self.consolidator.archive
        self.unarchive = self.consolidator.unarchive
        self.merge = self.consolidator.merge
        self.merge_changes = self.consolidator.merge_changes

    def protected_context(self) -> ProtectedContext:
        """All active protected memories, as data and as one Markdown block to put in a
        prompt (:func:`gitmem.ops.links.protected_context`)."""
        return protected_context(self.store, self.reader)

    def links(self, ref: str) -> Links:
        """Outgoing links of a memory and its backlinks (:func:`gitmem.ops.links.links`)."""
        return links(self.store, self.reader, ref)
