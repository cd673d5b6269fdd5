"""``.git/index``: git's staging file, kept in line with the commits gitmem makes.

gitmem builds its commits from the object store (:mod:`gitmem.store.git`), never
through ``.git/index``, but a person's ``git status`` and ``git commit`` read that
file: it must name what HEAD holds, or the shell shows phantom changes and a
``git commit`` would undo a write.

Every move of the branch happens while gitmem holds git's own ``.git/index.lock``,
as git's commands do (:meth:`GitIndex.locked`): the new index is written (and
synced) before the branch moves, and replaces ``.git/index`` while gitmem holds the
branch's own lock, just before the branch moves (:mod:`gitmem.store.branch`).  A
``git commit`` in a shell therefore never reads an index that lags HEAD: it either
ran before (the write then builds on its commit) or fails, cleanly, on a lock or
on the branch having moved.  The new index keeps git's cached trees true
(:mod:`gitmem.store.cache_tree`): a ``git commit`` that read the index just before a
write then has nothing to write back over it.

The new index is the old file's bytes cut and joined around the entries a write
changed (:func:`spliced`, a few milliseconds at 10k files), or, for an index that
cannot be spliced (version 4, a merge conflict), read and written whole by dulwich.
Entries a process could not write (git kept the lock) stay pending in memory and
marked on disk, for :meth:`GitIndex.flush` or the next process (:meth:`GitIndex.repair`).
"""

from __future__ import annotations

import bisect
import hashlib
import io
import os
import stat
import struct
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from dulwich.errors import ChecksumMismatch
from dulwich.file import FileLocked, GitFile
from dulwich.index import (
    Index,
    IndexChecksumReader,
    IndexChecksumWriter,
    IndexEntry,
    UnsupportedIndexFormat,
    index_entry_from_stat,
    read_index_dict_with_version,
    write_index_dict,
)
from dulwich.objects import Blob, ObjectID, Tree

from .. import safefs
from ..errors import GitmemError, LockTimeout, StorageError
from . import cache_tree
from .changes import FileChange
from .recovery import (
    NEXT_INDEX,
    JournaledStore,
    index_lock_marked,
    index_writing,
    mark_index_writing,
    unmark_index_writing,
)

__all__ = ["GitIndex", "IndexLayout", "IndexSource", "HeldIndex", "Entries", "INDEX_UNREADABLE",
           "FILE_MODE", "INDEX_LOCK_TIMEOUT", "TreesUpdate", "splice_index", "spliced", "cached_trees_of",
           "prime_cached_trees", "rewritten", "read_index_file",
           "lstat_or_none", "without_times"]

FILE_MODE = 0o100644
# A write waits this long (by default) for a git command to release .git/index.lock:
# git holds it for milliseconds, except `git commit` waiting for its message.
INDEX_LOCK_TIMEOUT = 30.0
DIRTY_MARK = "index-dirty"
INDEX_LAYOUT = "index-layout"     # where the entries of .git/index start (IndexLayout.save)
# Past this many entries a flush reads HEAD's tree once and writes the index whole.
MANY_ENTRIES = 256

#: What dulwich raises for a ``.git/index`` it cannot read (a torn or foreign file:
#: a bad header or checksum, an unknown version, a truncated entry).  Such an index
#: is left to the repair (``gitmem doctor --repair`` rebuilds it from HEAD).
INDEX_UNREADABLE: tuple[type[BaseException], ...] = (
    AssertionError,      # dulwich's check of the header and of extended flags
    ValueError, struct.error, ChecksumMismatch, UnsupportedIndexFormat)
#: Why an update of ``.git/index`` may fail and be retried later: git holds
#: ``index.lock`` (an IDE polling ``git status``), the disk is full, or the index
#: cannot be read.  Anything else is a bug, and raises.
_RETRY_LATER: tuple[type[BaseException], ...] = (FileLocked, OSError, *INDEX_UNREADABLE)
_REPLACE_ANYWAY: tuple[type[BaseException], ...] = (OSError, *INDEX_UNREADABLE)

#: ``.git/index`` entries a write sets: path -> (blob sha, stat), or None to remove it.
Entries = Mapping[bytes, tuple[bytes, os.stat_result] | None]


class IndexSource(JournaledStore, Protocol):
    """What :class:`GitIndex` needs of the git store (:class:`gitmem.store.git.GitStore`)."""

    def head(self) -> bytes | None: ...

    def blob_sha_at(self, commit_sha: bytes | None, path: str) -> bytes | None: ...

    def list_tree(self, commit_sha: bytes | None) -> dict[str, bytes]: ...

    def tree_of(self, commit_sha: bytes | None) -> bytes | None: ...

    def tree_object(self, sha: bytes) -> Tree | None: ...


class GitIndex:
    """The ``.git/index`` of one open vault: the lock a write holds, the entries it
    stages, the ones left pending, and the repair of what another process left."""

    def __init__(self, store: IndexSource) -> None:
        self.store = store
        # path -> (blob sha, stat) committed by this process and not yet in .git/index
        self.pending: dict[bytes, tuple[bytes, os.stat_result] | None] = {}
        self.layout: IndexLayout | None = None   # of the .git/index this process last wrote
        self.held: HeldIndex | None = None       # .git/index.lock, while a write holds it
        # Seconds a write waits for a git command to release .git/index.lock.
        self.lock_timeout = INDEX_LOCK_TIMEOUT

    @property
    def path(self) -> Path:
        return Path(self.store.repo.index_path())

    @property
    def _state(self) -> Path:
        return self.store.git_dir / "gitmem"

    # ------------------------------------------------------------ the lock
    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold ``.git/index.lock`` for a ``with`` block (re-entrant): every commit and
        fast-forward made inside stages its index (:meth:`stage`) and publishes it as the
        branch moves (:meth:`publish_staged`); the lock goes when the outermost block
        ends.  Waits while a git command holds
        the lock, for up to :attr:`lock_timeout` seconds (then :class:`LockTimeout`,
        nothing changed).  Caller holds the vault lock."""
        held = self.held
        if held is not None:
            held.depth += 1
            try:
                yield
            finally:
                held.depth -= 1
            return
        held = self._take_lock()
        self.held = held
        try:
            yield
        finally:
            self.held = None
            self._release(held)

    def lock_is_gitmems(self) -> bool:
        """True while a gitmem process (this one or another) holds ``.git/index.lock`` for a
        write, rather than a git command."""
        return index_lock_marked(self.store)

    def _take_lock(self) -> HeldIndex:
        path = self.path
        lock = path.with_name(path.name + ".lock")
        deadline = time.monotonic() + self.lock_timeout
        pause = 0.001
        while True:
            # Marked before the lock file is made, so a process killed the instant after
            # making it leaves a lock recovery knows for gitmem's (recovery.py); unmarked
            # again while a git command holds it.
            mark_index_writing(self.store)
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
                break
            except FileExistsError:
                unmark_index_writing(self.store)
                if time.monotonic() + pause > deadline:
                    raise LockTimeout(
                        f"a git command has held {lock} for over {self.lock_timeout:.0f}s",
                        hint="Retry once the git command ends (a `git commit` may be waiting for its "
                             "message). If no git command runs, remove the file; `gitmem doctor "
                             "--repair` removes one older than a minute.") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.02)
            except OSError as exc:
                unmark_index_writing(self.store)
                raise StorageError(f"could not create {lock}: {exc.strerror}") from exc
        os.close(fd)   # held by existing: git never reads it, and gitmem writes the index beside it
        return HeldIndex(path, lock)

    def stage(self, entries: Entries, *, before: bytes | None, after: bytes | None) -> None:
        """Write the index a write leads to beside ``.git/index`` (and sync it), before
        the branch moves: a full disk stops the write here, with nothing moved.
        ``before`` and ``after`` are the trees of the commit the branch moves from and to,
        for the cached trees (:mod:`gitmem.store.cache_tree`).  Kept by
        :meth:`keep_staged` once the branch has moved."""
        held = self.held
        assert held is not None, "a commit moves the branch only inside GitIndex.locked()"
        data = held.current()

        def trees(old: cache_tree.CachedTree | None, index_was_empty: bool) -> cache_tree.CachedTree | None:
            return cache_tree.updated(old, entries, before, after, self.store.tree_object,
                                      index_was_empty=index_was_empty)
        result = spliced(data, entries, held.layout or self.layout, self._state / INDEX_LAYOUT, trees)
        pieces: list[bytes | memoryview]
        layout: IndexLayout | None
        if result is None:
            pieces, layout = [rewritten(data, entries)], None
        else:
            pieces, layout = result
        held.write(pieces)
        held.staged = (pieces, layout, dict(entries))
        held.previous = data

    def publish_staged(self) -> None:
        """Replace ``.git/index`` with what :meth:`stage` wrote: called while the branch's
        lock is held, just before the branch moves (:func:`gitmem.store.branch.move_branch`)."""
        held = self.held
        if held is not None and held.staged is not None:
            held.publish()

    def keep_staged(self) -> None:
        """The branch moved: what :meth:`stage` wrote is the index from now on."""
        held = self.held
        if held is not None and held.staged is not None:
            held.keep()

    def drop_staged(self) -> None:
        """The branch did not move: ``.git/index`` goes back to what it was, if it was
        published already (the branch's update failed after)."""
        held = self.held
        if held is not None and held.staged is not None:
            held.staged = None
            if held.published:
                try:
                    held.put_back()
                except OSError:
                    self.mark_dirty()   # it may name the commit that did not land: repaired at next open

    def _release(self, held: HeldIndex) -> None:
        """Let ``.git/index.lock`` go, and note the layout of the index this hold wrote."""
        try:
            held.release()
            if held.kept is None:
                return
            _, layout, entries = held.kept
            self.layout = layout
            if layout is not None:
                layout.save(self._state / INDEX_LAYOUT)
            for path in entries:   # written now: a lazy update must not put an older value back
                self.pending.pop(path, None)
        finally:
            unmark_index_writing(self.store)

    # ------------------------------------------------------------ entries
    def entries_of(self, changes: Sequence[FileChange], blob_ids: Sequence[bytes | None],
                   done: Sequence[tuple[str, bytes | None, os.stat_result | None]],
                   written: Sequence[bool]) -> dict[bytes, tuple[bytes, os.stat_result] | None]:
        """The ``.git/index`` entries of a commit's files.  A file gitmem wrote gets the
        stat of what it wrote; one committed as it is on disk (a person's edit) gets its
        stat only while it still holds the committed bytes, else a stat git does not
        trust (``git status`` then compares the content, and shows a later save)."""
        out: dict[bytes, tuple[bytes, os.stat_result] | None] = {}
        for change, sha, (_, _, st), wrote in zip(changes, blob_ids, done, written, strict=True):
            key = change.path.encode("utf-8")
            if sha is None or st is None:
                out[key] = None
            elif wrote:
                out[key] = (sha, st)
            else:
                out[key] = self._trusted_entry(change.path, sha)
        return out

    def _trusted_entry(self, rel: str, sha: bytes) -> tuple[bytes, os.stat_result] | None:
        """``(sha, stat)`` for the index entry of a file committed as ``sha``: the file's
        stat when it holds exactly that blob (stat first, then the bytes, so a save in
        between shows as a change), else a stat with no times; None without a file."""
        root = self.store.root
        st = lstat_or_none(root, rel)
        if st is None or not stat.S_ISREG(st.st_mode):
            return None
        data = safefs.read_or_none(root, rel)
        if data is None or Blob.from_string(data).id != sha:
            st = without_times(st)
        return sha, st

    def _queue(self, entries: Entries) -> None:
        """Leave entries for :meth:`flush` (and mark them, for the next process)."""
        self.pending.update(entries)
        marker = self._own_dirty_marker()
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()

    # ------------------------------------------------------------ markers
    # Each process marks its own pending entries (index-dirty.<pid>) and clears only
    # its own mark once they are written: with one shared mark, a process that flushed
    # its entries cleared the mark of another that then gave up (git kept taking
    # index.lock), and nobody repaired that one's entries.  The bare ``index-dirty`` is
    # set by recovery and purge, and by nobody alive.
    def _own_dirty_marker(self) -> Path:
        # one per GitIndex object: two Vaults in one process keep their own marks
        return self._state / f"{DIRTY_MARK}.{os.getpid()}.{id(self)}"

    def dirty(self) -> bool:
        """True if ``.git/index`` may lag HEAD because of a process that is gone (it
        died, or gave up while git held ``index.lock``) or of recovery: repair it."""
        for marker in self._state.glob(f"{DIRTY_MARK}*"):
            if marker.name == DIRTY_MARK or not _alive(marker.name.split(".")[1]):
                return True
        return False

    def mark_dirty(self) -> None:
        """Leave ``.git/index`` to be repaired by the next process that opens the vault."""
        marker = self._state / DIRTY_MARK
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()

    def _clear_dirty(self) -> None:
        """After a repair from HEAD: the marks of gone processes (and this one's) are done."""
        own = self._own_dirty_marker().name
        for marker in self._state.glob(f"{DIRTY_MARK}*"):
            if marker.name in (DIRTY_MARK, own) or not _alive(marker.name.split(".")[1]):
                marker.unlink(missing_ok=True)

    # ------------------------------------------------------------ catching up
    def flush(self) -> bool:
        """Bring ``.git/index`` in line with what this process committed.

        Returns True when nothing is left pending; False when the write failed
        (git holds ``index.lock``, the disk is full, the index cannot be read): the
        entries stay pending and the ``index-dirty`` marker stays, so a retry, or
        the next process, repairs it.
        """
        if not self.pending:
            self._own_dirty_marker().unlink(missing_ok=True)  # nothing of ours is pending
            return True
        # The entries stay pending until they are written and the marker is gone: a
        # reader never sees "nothing pending" mid-write.
        pending = dict(self.pending)
        try:
            head = self.store.head()
            # Many entries (a bulk import): read HEAD's tree once rather than walk it per path.
            files = self.store.list_tree(head) if head and len(pending) > MANY_ENTRIES else None
            final = {path: self._still_current(head, path, value, files) for path, value in pending.items()}
            with index_writing(self.store):
                # A few entries into a plain index: spliced into its bytes (a few ms at
                # 10k files, where reading and writing every entry as objects takes 0.2 s).
                layout = None if len(final) > MANY_ENTRIES else splice_index(
                    self.path, final, self.layout, self._state / INDEX_LAYOUT)
                self.layout = layout
                if layout is None:
                    index = self.store.repo.open_index()
                    for path, value in final.items():
                        if value is None:
                            if path in index:
                                del index[path]
                        else:
                            sha, st = value
                            index[path] = index_entry_from_stat(st, ObjectID(sha), FILE_MODE)
                    index.write()
        except _RETRY_LATER:  # git holds index.lock (or see _RETRY_LATER): retried later
            return False
        # An entry queued again meanwhile (a newer value) stays for the next flush.
        written = [path for path, value in pending.items()
                   if path in self.pending and self.pending[path] is value]
        if len(written) == len(self.pending):  # a write queued meanwhile keeps the marker
            self._own_dirty_marker().unlink(missing_ok=True)
        for path in written:
            del self.pending[path]
        return not self.pending

    def _still_current(self, head: bytes | None, path: bytes,
                       value: tuple[bytes, os.stat_result] | None,
                       files: Mapping[str, bytes] | None = None) -> tuple[bytes, os.stat_result] | None:
        """A pending index entry, corrected if another process has committed the path
        since (MEMORY.md is rewritten by every writer): HEAD's blob, with the file's
        stat only when the file holds exactly that blob (else git re-reads it).
        ``files`` is HEAD's tree as ``list_tree`` gives it, when already read."""
        if files is not None:
            current = files.get(path.decode("utf-8", "surrogateescape"))
        else:
            current = self.store.blob_sha_at(head, path.decode("utf-8")) if head else None
        if current == (value[0] if value else None):
            return value
        if current is None:
            return None
        return self._trusted_entry(path.decode("utf-8"), current)

    def repair(self) -> list[str]:
        """Make ``.git/index`` match HEAD for every file whose content matches HEAD.

        Returns the paths fixed.  Files the user changed stay reported as
        modified by ``git status`` (their index entry keeps HEAD's sha).
        """
        root = self.store.root
        head_files = self.store.list_tree(self.store.head())
        index = self.store.repo.open_index()
        fixed: list[str] = []
        for path_b in list(index):
            path = path_b.decode("utf-8", "surrogateescape")
            if path not in head_files and lstat_or_none(root, path) is None:
                del index[path_b]
                fixed.append(path)
        for path, sha in head_files.items():
            key = path.encode("utf-8")
            entry = index[key] if key in index else None
            st = lstat_or_none(root, path)
            if st is None or not stat.S_ISREG(st.st_mode):
                continue
            if (isinstance(entry, IndexEntry) and entry.sha == sha and entry.size == st.st_size
                    and _same_mtime(entry, st)):
                continue
            data = safefs.read_or_none(root, path)
            if data is not None and Blob.from_string(data).id == sha:
                index[key] = index_entry_from_stat(st, ObjectID(sha), FILE_MODE)
                fixed.append(path)
        if fixed:
            self._write_index_object(index)
        self._clear_dirty()
        return fixed

    def _write_index_object(self, index: Index, trees: cache_tree.CachedTree | None = None) -> None:
        """Write a dulwich ``Index`` (with these cached trees) as ``.git/index``: through the
        held ``index.lock`` inside :meth:`locked` (recovery), else under its own."""
        out = io.BytesIO()
        writer = IndexChecksumWriter(out)
        write_index_dict(writer, dict(index.items()))
        writer.write(cache_tree.extension(trees))
        writer.write_checksum()
        data = out.getvalue()
        held = self.held
        if held is None:
            with index_writing(self.store), GitFile(str(self.path), "wb") as f:
                f.write(data)
            return
        held.write([data])
        held.staged = ([data], None, {})
        held.publish()
        held.keep()

    def rebuild_from_head(self) -> list[str]:
        """Write a new ``.git/index`` holding exactly HEAD's files; return the paths whose
        entry changed (added, removed, or naming another blob or mode).

        For an index :meth:`repair` cannot fix, because it keeps entries:
        one naming blobs that no longer exist (a purge or prune killed part-way),
        which ``git fsck`` reports as missing and ``git status`` shows as ``AD``.
        Each entry gets the working-tree file's stat when the file holds exactly
        HEAD's content (so ``git status`` trusts it), else a stat with no times,
        which makes git compare the content.  Staged changes not in HEAD are
        dropped from the index (the files on disk stay).  Caller holds the vault lock.
        """
        repo, root = self.store.repo, self.store.root
        try:
            old = {path: (entry.sha, entry.mode) for path, entry in repo.open_index().iteritems()
                   if isinstance(entry, IndexEntry)}
        except _REPLACE_ANYWAY:   # an unreadable index is replaced all the same
            old = {}
        index = Index(repo.index_path(), read=False)
        tree = self.store.tree_of(self.store.head())
        entries = [] if tree is None else list(repo.object_store.iter_tree_contents(ObjectID(tree)))
        complete = True   # the index will hold exactly HEAD's files: its cached trees are HEAD's
        for entry in entries:
            if not (stat.S_ISREG(entry.mode) or stat.S_ISLNK(entry.mode)):
                complete = False
                continue  # submodules (gitlinks) are not vault content
            rel = entry.path.decode("utf-8", "surrogateescape")
            st = lstat_or_none(root, rel)   # through the path gate: a link on the way is never followed
            same = False
            if st is not None:
                try:
                    data = (os.readlink(root / rel).encode("utf-8", "surrogateescape")
                            if stat.S_ISLNK(st.st_mode) else safefs.read_bytes(root, rel))
                    same = Blob.from_string(data).id == entry.sha
                except (OSError, GitmemError):
                    same = False
            if st is None or not same:  # no times: git re-reads the file instead of trusting it
                st = os.stat_result((entry.mode, 0, 0, 0, 0, 0, st.st_size if st else 0, 0, 0, 0))
            index[entry.path] = index_entry_from_stat(st, entry.sha, entry.mode)
        new = {path: (e.sha, e.mode) for path, e in index.iteritems() if isinstance(e, IndexEntry)}
        changed = sorted(p.decode("utf-8", "surrogateescape") for p in set(old) | set(new)
                         if old.get(p) != new.get(p))
        trees = cache_tree.from_tree(tree, self.store.tree_object) if tree is not None and complete else None
        self._write_index_object(index, trees)
        self.pending.clear()  # what this process committed is in HEAD, hence in the index
        self._clear_dirty()
        return changed


class HeldIndex:
    """``.git/index.lock`` while a write holds it (:meth:`GitIndex.locked`): the index as
    it stands for the branch's current commit, and what the write in progress staged.

    The lock file itself stays empty: holding it is what keeps git's commands off the
    index.  The new index is written to a file beside it (:data:`NEXT_INDEX`) and
    renamed over ``.git/index`` as the branch moves (:meth:`publish`), so the index is
    replaced while the lock is still held."""

    def __init__(self, path: Path, lock: Path) -> None:
        self.path, self.lock = path, lock
        self.next = path.with_name(NEXT_INDEX)
        self.depth = 1
        self.layout: IndexLayout | None = None
        self.staged: tuple[list[bytes | memoryview], IndexLayout | None, dict[bytes, Any]] | None = None
        self.kept: tuple[list[bytes | memoryview], IndexLayout | None, dict[bytes, Any]] | None = None
        self.previous: bytes | None = None   # the index before the staged write, to put back
        self.published = False               # the staged index is .git/index already

    def current(self) -> bytes:
        """The index as it stands for the branch's commit (read at the first commit)."""
        if self.kept is None:
            return read_index_file(self.path)
        pieces = self.kept[0]
        return pieces[0] if len(pieces) == 1 and isinstance(pieces[0], bytes) else b"".join(pieces)

    def write(self, pieces: Sequence[bytes | memoryview]) -> None:
        self.published = False
        with open(self.next, "wb") as handle:
            handle.writelines(pieces)
            handle.flush()
            os.fsync(handle.fileno())

    def publish(self) -> None:
        os.replace(self.next, self.path)
        self.published = True

    def put_back(self) -> None:
        """Make ``.git/index`` what it was before the staged write again."""
        if self.previous is not None:
            self.write([self.previous])
            os.replace(self.next, self.path)
        self.published = False

    def keep(self) -> None:
        assert self.staged is not None
        pieces, layout, entries = self.staged
        if self.kept is not None:    # a second commit in one hold (a person's edit, then the write)
            entries = {**self.kept[2], **entries}
        self.kept, self.staged = (pieces, layout, entries), None
        self.layout = layout
        self.published = False

    def release(self) -> None:
        """Remove the lock file (and a staged index nobody published)."""
        try:
            self.next.unlink(missing_ok=True)
        finally:
            self.lock.unlink(missing_ok=True)


_LAYOUT_MAGIC = b"gitmem-index-layout-1\n"


class IndexLayout(NamedTuple):
    """Where the entries of a ``.git/index`` file start, as the last splice wrote it."""
    trailer: bytes          # the file's SHA-1 trailer, which names its contents exactly
    starts: array[int]      # offset of each entry, in file (name) order (typecode "q")
    entries_end: int        # offset just past the last entry
    # the file's cached trees, parsed (in memory only: not saved for other processes)
    trees: cache_tree.CachedTree | None = None

    def save(self, path: Path) -> None:
        """Leave the layout for the next process that updates this ``.git/index`` (best
        effort: a cache, checked against the index's trailer when read)."""
        starts = self.starts
        if sys.byteorder == "big":      # (a copy only there: stored little-endian)
            starts = array("q", starts)
            starts.byteswap()
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(_LAYOUT_MAGIC + self.trailer + self.entries_end.to_bytes(8, "little")
                            + starts.tobytes())
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path) -> IndexLayout | None:
        """The layout :meth:`save` left at ``path``, or None."""
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        head = len(_LAYOUT_MAGIC) + 28
        if not raw.startswith(_LAYOUT_MAGIC) or len(raw) < head or (len(raw) - head) % 8:
            return None
        starts = array("q")
        starts.frombytes(raw[head:])
        if sys.byteorder == "big":
            starts.byteswap()
        trailer, end = raw[head - 28:head - 8], int.from_bytes(raw[head - 8:head], "little")
        return cls(trailer, starts, end)

    def fits(self, data: bytes, count: int) -> bool:
        """Whether this is the layout of the index file ``data`` (of ``count`` entries)."""
        return (self.trailer == data[-20:] and len(self.starts) == count
                and (not count or (self.starts[0] == 12 and self.starts[-1] < self.entries_end))
                and self.entries_end <= len(data) - 20)


def splice_index(path: Path, entries: Entries, layout: IndexLayout | None = None,
                 shared: Path | None = None) -> IndexLayout | None:
    """Set (or, for None, remove) these entries of the ``.git/index`` at ``path`` by
    rewriting its bytes around them (:func:`spliced`), under git's ``index.lock``; the
    new file's layout, or None (nothing written) for an index it does not handle.
    The new layout is saved at ``shared``.  Raises :class:`FileLocked` while git holds
    the lock, :class:`OSError` when the file cannot be written."""
    data = read_index_file(path)
    result = spliced(data, entries, layout, shared)
    if result is None:
        return None
    pieces, done = result
    with GitFile(str(path), "wb") as f:   # index.lock, renamed over the index when complete
        f.writelines(pieces)
    if shared is not None:
        done.save(shared)
    return done


#: Given the cached trees of the index being spliced (None: it has none) and whether it
#: had no entries, the cached trees of the new index (see :func:`spliced`).
TreesUpdate = Callable[[cache_tree.CachedTree | None, bool], cache_tree.CachedTree | None]


def spliced(data: bytes, entries: Entries, layout: IndexLayout | None = None, shared: Path | None = None,
            trees: TreesUpdate | None = None) -> tuple[list[bytes | memoryview], IndexLayout] | None:
    """The bytes of the ``.git/index`` file ``data`` with these entries set (or, for None,
    removed), as pieces to write one after the other (the last is the SHA-1 trailer), and
    the new file's layout; None for an index this does not handle: not version 2 or 3,
    an entry with extended flags or a merge stage, or an extension git requires (split
    index).  The cached trees are updated by ``trees`` (without it, the folders on the
    changed paths are marked unknown); the other optional extensions (the untracked
    cache ...) are left out, as git allows; git rebuilds them.

    The entries' offsets are taken from ``layout`` when the file is still the one it
    describes (same SHA-1 trailer: nobody, git included, rewrote it since), else from
    the layout saved at ``shared`` by the last gitmem process that spliced it, else
    read (one step per entry, ~60 ms at 100k files).  The names looked for are found by
    binary search (git keeps entries sorted by name), and the new file is the old bytes
    cut and joined around them, without copying them."""
    if len(data) < 32 or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack_from(">LL", data, 4)
    if version not in (2, 3):
        return None
    if (layout is None or not layout.fits(data, count)) and shared is not None:
        layout = IndexLayout.load(shared)
    old_trees: cache_tree.CachedTree | None = None
    if layout is not None and layout.fits(data, count):
        starts, entries_end = layout.starts, layout.entries_end
        old_trees = layout.trees   # the records this process wrote into exactly this file
    else:
        read = _read_layout(data, count)
        if read is None:
            return None
        starts, entries_end = read

    def name_at(i: int) -> bytes:
        at = starts[i] + 62
        return data[at:data.index(b"\0", at)]
    # (entry number, whether it is replaced or removed, start, end, new bytes) for each
    # entry replaced, removed or inserted, in file order
    cuts: list[tuple[int, bool, int, int, bytes]] = []
    old, total = len(starts), count
    for name in sorted(entries):
        value = entries[name]
        i = bisect.bisect_left(range(old), name, key=name_at)
        found = i < old and name_at(i) == name
        at = starts[i] if i < old else entries_end
        until = (starts[i + 1] if i + 1 < old else entries_end) if found else at
        new = b""
        if value is not None:
            sha, st = value
            packed = struct.pack(">LLLLLLLLLL20sH", int(st.st_ctime) & 0xFFFFFFFF, st.st_ctime_ns % 10**9,
                                 int(st.st_mtime) & 0xFFFFFFFF, st.st_mtime_ns % 10**9,
                                 st.st_dev & 0xFFFFFFFF, st.st_ino & 0xFFFFFFFF, FILE_MODE,
                                 st.st_uid & 0xFFFFFFFF, st.st_gid & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF,
                                 bytes.fromhex(sha.decode("ascii")), min(len(name), 0xFFF))
            new = packed + name
            new += b"\0" * ((62 + len(name) + 8) // 8 * 8 - len(new))
        if found or value is not None:
            cuts.append((i, found, at, until, new))
        total += (value is not None) - found
    view = memoryview(data)     # the old bytes' pieces are written as they are, not copied
    pieces: list[bytes | memoryview] = [b"DIRC", struct.pack(">LL", version, total)]
    last = 12
    # The new file's entry offsets: the old ones shifted by what the cuts before them
    # added or removed (C-level maps; no step per entry).
    new_starts = array("q")
    shift, copied = 0, 0
    for i, found, at, until, new in cuts:
        pieces += [view[last:at], new]
        last = until
        new_starts.extend(map(shift.__add__, starts[copied:i]) if shift else starts[copied:i])
        if new:
            new_starts.append(at + shift)
        copied = i + 1 if found else i
        shift += len(new) - (until - at)
    new_starts.extend(map(shift.__add__, starts[copied:]) if shift else starts[copied:])
    pieces.append(view[last:entries_end])
    if old_trees is None:
        old_trees = cache_tree.find_extension(view, entries_end)
    new_trees = trees(old_trees, count == 0) if trees is not None else cache_tree.invalidated(old_trees, entries)
    if new_trees is not None:
        pieces.append(cache_tree.extension(new_trees))
    digest = hashlib.sha1()
    for piece in pieces:
        digest.update(piece)
    trailer = digest.digest()
    return [*pieces, trailer], IndexLayout(trailer, new_starts, entries_end + shift, new_trees)


def read_index_file(path: Path) -> bytes:
    """The bytes of the ``.git/index`` at ``path``; an empty index's when there is none."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        data = b"DIRC" + struct.pack(">LL", 2, 0)
        return data + hashlib.sha1(data).digest()


def cached_trees_of(data: bytes) -> cache_tree.CachedTree | None:
    """The cached trees (git's ``TREE`` extension) of the ``.git/index`` file ``data``, or
    None when it has none (or is an index :func:`spliced` does not handle)."""
    if len(data) < 32 or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack_from(">LL", data, 4)
    read = _read_layout(data, count) if version in (2, 3) else None
    return None if read is None else cache_tree.find_extension(data, read[1])


def prime_cached_trees(path: Path, tree: bytes, load: cache_tree.TreeLoader) -> bool:
    """Give the ``.git/index`` at ``path``, just built to hold exactly the files of
    ``tree`` (a new clone's checkout), git's cached trees for it; False when the index is
    one :func:`spliced` does not handle (it is left as it is: git rebuilds them)."""
    data = read_index_file(path)
    version, count = struct.unpack_from(">LL", data, 4)
    read = _read_layout(data, count) if version in (2, 3) else None
    trees = cache_tree.from_tree(tree, load) if read is not None else None
    if read is None or trees is None:
        return False
    body = data[:read[1]] + cache_tree.extension(trees)
    with GitFile(str(path), "wb") as f:   # index.lock, renamed over the index when complete
        f.write(body + hashlib.sha1(body).digest())
    return True


def rewritten(data: bytes, entries: Entries) -> bytes:
    """The ``.git/index`` file ``data`` with these entries set (None: removed), read and
    written whole by dulwich: for an index :func:`spliced` does not handle (version 4,
    extended flags, a merge conflict).  A path set here loses its conflict stages, as
    ``git add`` of a resolved file does; optional extensions are left out."""
    old, version, _ = read_index_dict_with_version(IndexChecksumReader(io.BytesIO(data)))
    for path, value in entries.items():
        if value is None:
            old.pop(path, None)
        else:
            old[path] = index_entry_from_stat(value[1], ObjectID(value[0]), FILE_MODE)
    out = io.BytesIO()
    writer = IndexChecksumWriter(out)
    write_index_dict(writer, old, version=version)
    writer.write_checksum()
    return out.getvalue()


def _read_layout(data: bytes, count: int) -> tuple[array[int], int] | None:
    """(offset of each entry, offset past the last entry) of a version 2 or 3 index's
    bytes, or None when :func:`spliced` does not handle it."""
    starts = array("q")
    pos, end = 12, len(data) - 20
    for _ in range(count):
        if pos + 62 > end:
            return None
        flags = data[pos + 60] << 8 | data[pos + 61]
        if flags & 0x7000:          # extended flags, or a merge stage (a conflict)
            return None
        length = flags & 0xFFF
        if length == 0xFFF:         # a name of 4095 bytes or more: its end is its NUL
            stop = data.find(b"\0", pos + 62)
            if stop < 0:
                return None
            length = stop - pos - 62
        starts.append(pos)
        pos += (62 + length + 8) // 8 * 8
    entries_end = pos
    while pos < end:                 # extensions: signature, length, data
        if pos + 8 > end:
            return None
        sig, size = data[pos:pos + 4], struct.unpack_from(">L", data, pos + 4)[0]
        if not b"A" <= sig[:1] <= b"Z":   # one git requires (a split index): not handled
            return None
        pos += 8 + size
    return starts, entries_end


def _alive(pid_text: str) -> bool:
    """True if the process ``pid_text`` names still runs (unknown: assume it does)."""
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except (ValueError, PermissionError, OSError):
        return True
    return True


def without_times(st: os.stat_result) -> os.stat_result:
    """``st`` with every time zero: git does not trust such an index entry's stat and
    compares the file's content instead."""
    return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid,
                           st.st_size, 0, 0, 0, 0.0, 0.0, 0.0, 0, 0, 0))


def lstat_or_none(root: Path, rel: str) -> os.stat_result | None:
    """The stat of a vault file (never through a link on the way), or None."""
    try:
        return safefs.lstat(root, rel)
    except (OSError, GitmemError):
        return None


def _same_mtime(entry: IndexEntry, st: os.stat_result) -> bool:
    mtime: Any = entry.mtime
    if isinstance(mtime, tuple):
        return bool(mtime[0] == int(st.st_mtime) and mtime[1] == st.st_mtime_ns % 1_000_000_000)
    return bool(mtime == st.st_mtime)
