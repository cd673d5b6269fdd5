"""Writing the search index: commits under Whoosh's write lock, segments merged by size
tier (and small ones when idle), rebuilds and large upserts through gitmem's in-memory
posting pool (:class:`gitmem.search.whoosh.codec.MemoryPool`), half of a large one
written by a child process as a segment of its own.

Only what is expected is caught (the write lock held elsewhere, files replaced by
another process's commit, a damaged cache: :data:`gitmem.search.whoosh.storage.READ_ERRORS`);
anything else surfaces, so a merge can never stop quietly.
"""

from __future__ import annotations

import functools
import gc
import os
import pickle
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import whoosh.index
from whoosh.reading import SegmentReader
from whoosh.writing import OPTIMIZE, SegmentWriter

from ...errors import StorageError
from ..documents import IndexDoc, index_fields
from ..rank import SearchConfig
from .codec import CODEC, MemoryPool
from .schema import Analysis
from .storage import READ_ERRORS

__all__ = ["SegmentWriting", "merge_group", "other_threads", "cores", "collector_paused"]


def other_threads() -> bool:
    """Whether threads other than this one run in the process."""
    return threading.active_count() > 1


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """Millions of postings are held at once in a large write: the cyclic garbage
    collector would scan them over and over (they hold no cycles), so it waits."""
    collecting = pause and gc.isenabled()
    if collecting:
        gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()



def merge_group(sizes: list[int], tier_factor: int, min_group: int, max_docs: int | None = None,
                 max_segments: int | None = None) -> set[int]:
    """Which segments (indexes into ``sizes``, their document counts) a commit merges.

    Segments fall in size tiers (1 to ``tier_factor - 1`` documents, then up to
    ``tier_factor**2 - 1``, ...); the smallest tier holding ``min_group`` segments (and at
    least two) is merged, so each document is copied about once per tier.  With
    ``max_docs``, only the smallest segments of a tier that hold at most that many
    documents together (and, with ``max_segments``, at most that many segments) are
    merged; larger ones wait for the commits that fill their tier."""
    tiers: dict[int, list[int]] = {}
    for i, n in enumerate(sizes):
        tier = 0
        while n >= tier_factor:
            n, tier = n // tier_factor, tier + 1
        tiers.setdefault(tier, []).append(i)
    for tier in sorted(tiers):
        members = tiers[tier]
        if max_docs is not None:
            taken: list[int] = []
            total = 0
            for i in sorted(members, key=sizes.__getitem__):
                if total + sizes[i] > max_docs or len(taken) == max_segments:
                    break
                taken.append(i)
                total += sizes[i]
            members = taken
        if len(members) >= min_group and len(members) > 1:
            return set(members)
    return set()


class SegmentWriting:
    """The writing half of :class:`gitmem.search.whoosh.index.SearchIndex`: commits under
    Whoosh's write lock, segments merged by size tier, rebuilds and large upserts through
    the in-memory posting pool, half of a large one in a child process."""

    WRITE_TIMEOUT = 10.0      # seconds to wait for the index write lock
    MERGE_FACTOR = 20         # a commit merges a size tier once it holds this many segments
    REBUILD_SEGMENT_DOCS = 25_000  # documents per segment a rebuild writes (bounds its memory)
    BULK_DOCS = 500           # an upsert of this many documents holds its postings in memory
    PARALLEL_DOCS = 2_000     # a rebuild of this many documents uses a second process
    # ... which indexes this share of each round: this process also reads every document
    # (about a seventh of what indexing one costs), so the two finish together.
    CHILD_SHARE = 0.53
    # The idle merge (merge_small) runs under the vault lock: one merge takes at most
    # this many segments (a few ms each to open and copy) of at most this many documents
    # together (0.3-0.8 ms each for 2 KB memories on a 2-core machine), so a merge holds
    # the lock well under 100 ms; larger segments merge as commits fill their size tier
    # (MERGE_FACTOR), never on an idle timer.
    IDLE_MERGE_DOCS = 60
    IDLE_MERGE_SEGMENTS = 6
    IN_MEMORY_POSTINGS = True  # False: rebuilds and large upserts use Whoosh's own posting pool

    # Set by the index (SearchIndex.__init__).
    cfg: SearchConfig
    needs_rebuild: bool
    _ix: Any                  # the open whoosh.index.FileIndex (over an IndexStorage)
    _an: Analysis
    _lock: threading.RLock

    def _writer(self, limitmb: int, small: bool) -> Any:
        deadline = time.monotonic() + self.WRITE_TIMEOUT
        storage = self._ix.storage
        while True:
            try:
                # Scratch files in memory for small writes.  (Segments stay compound: a
                # reader opens a compound segment's one file at once, separate files only
                # when first used, which fails once a concurrent merge has deleted them.)
                storage.small_writes = small
                return self._ix.writer(timeout=min(1.0, self.WRITE_TIMEOUT), limitmb=limitmb,
                                       codec=CODEC)
            except whoosh.index.LockError:
                if time.monotonic() >= deadline:
                    raise StorageError("index busy: another process holds the search index "
                                       "write lock", hint="retry in a moment") from None
            except READ_ERRORS as exc:    # (opening a writer reads the table of contents)
                raise StorageError(f"cannot write the search index: {exc}",
                                   hint="run 'gitmem reindex'") from exc
            finally:
                storage.small_writes = False

    def _commit(self, work: Callable[[Any], None], limitmb: int = 64, small: bool = True,
                **commit_kw: Any) -> None:
        with self._lock:
            w = self._writer(limitmb, small)
            try:
                work(w)
                w.commit(**commit_kw)
            except BaseException as exc:
                try:
                    w.cancel()
                except OSError:   # (its scratch files already gone: nothing left to undo)
                    pass
                if isinstance(exc, READ_ERRORS):    # a full disk, a segment a merge could not read
                    raise StorageError(f"search index write failed: {exc}",
                                       hint="run 'gitmem reindex'") from exc
                raise
            # No eager searcher reopen (~15 ms at 10k docs): the next search sees
            # that the index changed (up_to_date) and reopens then.

    def _segment_count(self) -> int:
        """How many segments the index has now (0 when its files cannot be read)."""
        try:
            return len(self._ix._segments())
        except READ_ERRORS:   # its files replaced or removed meanwhile
            return 0

    def _in_memory(self, w: Any) -> bool:
        return self.IN_MEMORY_POSTINGS and MemoryPool.fits(w.schema)

    def upsert(self, docs: Sequence[IndexDoc], *, new: Collection[str] = ()) -> None:
        """Add or replace documents (keyed by ``path``) in one commit; the last copy of a
        path in ``docs`` wins.  Paths listed in ``new`` are known not to be indexed yet
        (a file just created) and skip the replace step, which has to open every
        segment's term index (~5-10 ms at 10k documents)."""
        latest = {d.path: d for d in docs}
        elsewhere: list[Any] = []   # a segment a child process wrote

        def work(w: Any) -> None:
            if len(latest) >= self.BULK_DOCS and self._in_memory(w):
                # A large batch (an import): postings in memory, as a rebuild does, and
                # for a very large one half of them in a child process (see rebuild).
                batch = list(latest.values())
                for d in batch:
                    if d.path not in new:
                        w.delete_by_term("path", d.path)   # (what update_document does first)
                half = len(batch) // 2 if len(batch) >= self.PARALLEL_DOCS else 0
                elsewhere[:] = self._index_split(w, batch[:half], lambda: batch[half:])[0]
                return
            for d in latest.values():
                (w.add_document if d.path in new else w.update_document)(**index_fields(d, self._an, self.cfg))

        if latest:
            policy = self._merge_policy(self.MERGE_FACTOR)
            with collector_paused(len(latest) >= self.BULK_DOCS):
                self._commit(work, mergetype=lambda w, segments: [*policy(w, segments), *elsewhere])

    def delete(self, paths: Sequence[str]) -> None:
        """Remove documents by path (unknown paths are ignored)."""
        def work(w: Any) -> None:
            for p in set(paths):
                w.delete_by_term("path", p)

        if paths:
            self._commit(work, mergetype=self._merge_policy(self.MERGE_FACTOR))

    def _merge_policy(self, factor: int, max_docs: int | None = None,
                      max_segments: int | None = None) -> Callable[[Any, list], list]:
        """A Whoosh merge policy: segments are grouped in size tiers (1-19 documents,
        20-399, 400-7,999, ... for MERGE_FACTOR 20); the smallest tier holding ``factor``
        segments is merged into the segment being written.  Each document is thus copied
        about once per tier, a merge costs about as much as the small segments it takes,
        and only one commit in 20 merges (each extra segment costs a query ~20 µs).
        (Whoosh's MERGE_SMALL re-copied the growing segment every 5th commit.)"""
        def policy(writer: Any, segments: list) -> list:
            group = merge_group([seg.doc_count_all() for seg in segments], self.MERGE_FACTOR, factor,
                                 max_docs, max_segments)
            for i in group:
                reader = SegmentReader(writer.storage, writer.schema, segments[i])
                writer.add_reader(reader)
                reader.close()
            return [seg for i, seg in enumerate(segments) if i not in group]
        return policy

    def merge_small(self, rounds: int | None = None) -> bool:
        """Merge small segments left by recent commits, as long as some size tier of at
        most :attr:`IDLE_MERGE_DOCS` documents holds two or more, at most
        :attr:`IDLE_MERGE_SEGMENTS` of them per merge (call when idle: a burst
        of commits leaves up to ``MERGE_FACTOR - 1`` segments per tier, and each segment
        costs every query a little).  ``rounds`` caps the merges (one tier each); returns
        True when there may be more to merge."""
        done = 0
        while self._idle_merge_group():
            self._commit(lambda w: None, mergetype=self._merge_policy(2, self.IDLE_MERGE_DOCS,
                                                                      self.IDLE_MERGE_SEGMENTS))
            done += 1
            if rounds is not None and done >= rounds:
                return True
        return False

    def _idle_merge_group(self) -> bool:
        """Whether :meth:`merge_small` has segments to merge (without opening a writer,
        which would write a new table of contents even for nothing)."""
        try:
            sizes = [seg.doc_count_all() for seg in self._ix._segments()]
        except READ_ERRORS:   # files replaced or removed meanwhile, or damaged: nothing to merge here
            return False
        return bool(merge_group(sizes, self.MERGE_FACTOR, 2, self.IDLE_MERGE_DOCS, self.IDLE_MERGE_SEGMENTS))

    def rebuild(self, docs: Iterable[IndexDoc],
                progress: Callable[[int], None] | None = None, *, total: int | None = None) -> int:
        """Replace the whole index with ``docs`` and return how many were indexed (a
        repeated path keeps its first copy).  Up to :attr:`REBUILD_SEGMENT_DOCS` documents
        this is one commit and readers see the old index until it; a larger rebuild
        commits one segment of that many documents at a time.  ``progress(n)`` is called
        every 500 documents and at the end.

        ``total`` (about how many ``docs`` there are) lets a large rebuild use a second
        process: the first half of each round (a little more: :attr:`CHILD_SHARE`) is handed
        to a child process, which writes it as a segment of its own while this one reads
        and indexes the rest."""
        count, seen = 0, set()
        pending = iter(docs)
        more = True
        elsewhere: list[Any] = []   # segments of this round built by a child process

        def take(n: int) -> list[IndexDoc]:
            nonlocal more
            out: list[IndexDoc] = []
            if n <= 0:
                return out
            for d in pending:
                if d.path not in seen:
                    seen.add(d.path)
                    out.append(d)
                    if len(out) >= n:
                        return out
            more = False
            return out

        def work(w: Any) -> None:
            nonlocal count
            elsewhere.clear()
            if not self._in_memory(w):
                for d in take(self.REBUILD_SEGMENT_DOCS):
                    w.add_document(**index_fields(d, self._an, self.cfg))
                    count += 1
                    if progress and count % 500 == 0:
                        progress(count)
                return
            size = self.REBUILD_SEGMENT_DOCS
            left = size if total is None else min(size, total - count)
            first = take(int(left * self.CHILD_SHARE)) if left >= self.PARALLEL_DOCS else []
            base = count
            segments, added = self._index_split(w, first, lambda: take(size - len(first)),
                                                (lambda n: progress(base + n)) if progress else None)
            elsewhere.extend(segments)
            count += added

        # The first segment replaces the index; a large vault's further segments are
        # added to it (each holds at most REBUILD_SEGMENT_DOCS documents, which bounds
        # the memory a rebuild takes).
        with collector_paused():
            self._commit(work, limitmb=256, small=False, mergetype=lambda w, segments: [*elsewhere])
            while more:
                self._commit(work, limitmb=256, small=False,
                             mergetype=lambda w, segments: [*segments, *elsewhere])
        self.needs_rebuild = False
        if progress:
            progress(count)
        return count

    def _index_split(self, w: Any, first: list[IndexDoc], rest: Callable[[], list[IndexDoc]],
                     every_500: Callable[[int], None] | None = None) -> tuple[list[Any], int]:
        """Index ``first`` and then ``rest()`` into writer ``w``'s in-memory pool, handing
        ``first`` to a child process where one can be had (see :meth:`_build_in_child`):
        it writes them as a segment of its own while this process gets and indexes
        ``rest()``, also as a segment of its own, written before waiting for the child
        (not by ``w``'s commit, after it).  Returns the segments (the child's first, so
        documents keep their order) to be listed before ``w``'s own, and how many
        documents were indexed.  ``every_500(n)`` is told about how many are done (both
        processes go at about the same pace)."""
        child = self._build_in_child(first) if first else None
        if child is None:
            mine = first + rest()
            self._add_to_pool(w, mine, every_500)
            return [], len(mine)
        mine = rest()
        own = [self._write_segment(mine, (lambda n: every_500(n * 2)) if every_500 else None)] if mine else []
        # (the child failed: this process writes the segment it would have written)
        return [child() or self._write_segment(first), *own], len(first) + len(mine)

    def _add_to_pool(self, w: Any, docs: Sequence[IndexDoc],
                     every_500: Callable[[int], None] | None = None) -> None:
        """Index ``docs`` into a new in-memory pool of writer ``w`` (see :class:`MemoryPool`);
        ``every_500(n)`` is called after each 500th."""
        w.pool.cleanup()
        w.pool = MemoryPool()
        add = functools.partial(w.pool.add_document, w)
        for n, d in enumerate(docs, 1):
            add(index_fields(d, self._an, self.cfg))
            if every_500 is not None and n % 500 == 0:
                every_500(n)

    def _write_segment(self, docs: Sequence[IndexDoc], every_500: Callable[[int], None] | None = None) -> Any:
        """Write ``docs`` as a new segment of this index, not listed in it yet (the caller
        holds the write lock and lists it in its commit); ``every_500`` as for
        :meth:`_add_to_pool`."""
        storage = self._ix.storage
        storage.small_writes = True   # scratch space in memory, apart from the main writer's folder
        try:
            w = SegmentWriter(self._ix, _lk=False, codec=CODEC, limitmb=256)
        finally:
            storage.small_writes = False
        self._add_to_pool(w, docs, every_500)
        return w._finalize_segment()

    def _build_in_child(self, docs: Sequence[IndexDoc]) -> Callable[[], Any] | None:
        """Start a child process writing ``docs`` as a new segment of this index (not yet
        listed in it); returns a function that waits for it and gives the segment, or None
        if the child failed.  None at once where a child cannot be had safely: one core, no
        ``fork``, or other threads in this process (a forked child gets only this thread,
        and a lock another thread held would stay locked in it)."""
        if not hasattr(os, "fork") or cores() < 2 or other_threads():
            return None
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return None
        if pid == 0:  # the child: never returns into the caller's code
            status = 1
            try:
                os.close(read_end)
                segment = self._write_segment(docs)
                with os.fdopen(write_end, "wb") as out:
                    out.write(pickle.dumps(segment))
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)

        def finish() -> Any:
            with os.fdopen(read_end, "rb") as result:
                payload = result.read()
            _, status = os.waitpid(pid, 0)
            if status != 0 or not payload:
                return None
            return pickle.loads(payload)  # noqa: S301 - written by this process's own child
        return finish

    def optimize(self) -> None:
        """Merge all segments into one.  Slow (about 1 s per 1,000 documents): call it only
        when idle; commits already merge small segments, so this is rarely needed."""
        if self._segment_count() > 1:
            self._commit(lambda w: None, small=False, mergetype=OPTIMIZE)

