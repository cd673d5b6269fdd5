"""A searcher of the index as it is now, reusing the segment readers of the one before."""

from __future__ import annotations

import time
from typing import Any

import whoosh.searching
from whoosh.reading import MultiReader, SegmentReader

__all__ = ["reopen", "open_reusing"]


def reopen(ix: Any, old: Any, weighting: Any) -> Any:
    """A searcher of the index as it is now, reusing the readers of ``old`` for the
    segments that did not change (same segment, same deletions): a write adds one
    small segment, and opening every segment again costs ~1 ms each.  The rest of
    ``old`` is closed.

    Not Whoosh's Searcher.refresh(): it reuses segment readers whose deletions changed
    (deleted documents come back), puts merged-away segments back, and fails on an
    empty index."""
    leaves = [leaf for leaf, _ in old.reader().leaf_readers()]
    kept: list[Any] = []
    try:
        for _ in range(9):
            try:    # (as Whoosh retries: a merge may delete a file just as it is opened)
                searcher, kept = open_reusing(ix, leaves, weighting)
                return searcher
            except OSError:
                time.sleep(0.05)
        searcher, kept = open_reusing(ix, leaves, weighting)
        return searcher
    finally:
        reused = set(map(id, kept))
        for leaf in leaves:             # the old searcher's readers nobody uses now
            if id(leaf) not in reused:
                leaf.close()


def open_reusing(ix: Any, leaves: list[Any], weighting: Any) -> tuple[Any, list[Any]]:
    """(a searcher of the index's current segments, the readers of ``leaves`` it uses)."""
    toc = ix._read_toc()
    if len(toc.segments) < 2:       # nothing worth reusing: opened as Whoosh opens it
        return ix.searcher(weighting=weighting), []
    reusable = {leaf.segment().segment_id(): leaf for leaf in leaves
                if isinstance(leaf, SegmentReader) and leaf.segment() is not None}
    readers, opened, kept = [], [], []
    try:
        for seg in toc.segments:
            leaf = reusable.pop(seg.segment_id(), None)
            if leaf is not None and set(leaf.segment().deleted_docs()) == set(seg.deleted_docs()):
                kept.append(leaf)
            else:
                leaf = SegmentReader(ix.storage, toc.schema, seg, generation=toc.generation)
                opened.append(leaf)
            readers.append(leaf)
    except BaseException:
        for leaf in opened:
            leaf.close()
        raise
    ix.storage.release_pages()    # as a reopen of every segment would
    return whoosh.searching.Searcher(MultiReader(readers, generation=toc.generation),
                                     weighting=weighting, fromindex=ix), kept
