"""Crash recovery: finishing what a writer killed mid-write (SIGKILL, power cut, OOM) left.

A gitmem write (:meth:`GitStore.commit_files`) stores its objects, writes the
working-tree files, then moves the branch ref; the ref move is the commit
point and nothing is acknowledged before it.  A process killed between those
steps leaves, without recovery:

* files on disk that HEAD does not have (``git status`` dirty, and a watcher
  would commit them as a person's edit);
* dulwich's ``refs/heads/main.lock`` (killed inside ``set_if_equals``), which
  makes every later commit fail, gitmem's and the git CLI's alike;
* ``.git/index.lock`` (killed inside an index write), which breaks ``git add``,
  ``git commit`` and the next ``.git/index`` sync;
* ``.<name>.gitmem-tmp-<pid>`` temp files of an interrupted atomic write.

So every write first records a small **journal** (``.git/gitmem/write-journal``:
parent, new commit, each path with its old on-disk and new blob id) after its
objects are stored and before it touches the working tree, and removes it once
the ref has moved.  While gitmem holds ``.git/index.lock`` (every write does, from
before its ref move until ``.git/index`` follows) ``.git/gitmem/index-writing`` exists:
it is made just after the lock is taken, so a lock a waiting gitmem process never
got (a git command's) is never taken for gitmem's.
The vault lock (an ``flock``, released by the kernel when its holder dies) is
the only writer's permission, so whoever takes the lock and still finds a
journal or marker knows its writer is dead.  :func:`recover` then **rolls the
write forward**: the commit object is complete, so the files are written (only
where the disk still shows the state before or after the write, never over a
later edit by a person) and the ref is moved, exactly as if the writer had
lived a moment longer; like every move of the branch, under git's
``index.lock``, with ``.git/index`` brought in line before the lock is let go.
The write was not acknowledged, so completing it is as correct as dropping it,
and it leaves no dangling commit behind.

A lock file is removed only when it is provably the dead writer's: the ref
lock when it holds nothing or the journal's commit id, ``index.lock`` when the
index marker says a gitmem process was writing the index.  (A git CLI command
that took ``index.lock`` in the instant after a gitmem writer died is the one
case this cannot tell apart; git would report it as a stale lock anyway.)
The journal is not fsynced: SIGKILL keeps the page cache, and after a power
cut the worst case is an uncommitted file, never a lost acknowledged write.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dulwich.objects import Blob

from .. import safefs
from ..errors import GitmemError

if TYPE_CHECKING:  # pragma: no cover
    from .changes import FileChange


class JournaledStore(Protocol):
    """What recovery needs of the vault's git store (:class:`gitmem.store.git.GitStore`)."""

    root: Path
    repo: Any

    @property
    def git_dir(self) -> Path: ...

    def blob(self, sha: bytes) -> bytes: ...

    def mark_index_dirty(self) -> None: ...

    def index_locked(self) -> Any: ...

    def repair_index(self) -> list[str]: ...


__all__ = ["Recovery", "PendingObjects", "begin_write", "end_write", "index_writing", "mark_index_writing",
           "unmark_index_writing", "index_lock_marked", "needs_recovery", "recover",
           "TEMP_MARK", "NEXT_INDEX", "drop_objects", "log_recovery"]

JOURNAL = "write-journal"
INDEX_MARKER = "index-writing"
#: The index a write stages beside ``.git/index`` (in ``.git/``) while it holds
#: ``index.lock``, renamed over ``.git/index`` as the branch moves.
NEXT_INDEX = "index.gitmem-next"
TEMP_MARK = safefs.TEMP_MARK


@dataclass
class Recovery:
    """What :func:`recover` did (empty when nothing needed doing)."""

    actions: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # working-tree files written or removed

    def __bool__(self) -> bool:
        return bool(self.actions)


def _state(store: JournaledStore) -> Path:
    return store.git_dir / "gitmem"


def _blob_id_of(root: Path, rel: str) -> str | None:
    data = safefs.read_or_none(root, rel)
    return None if data is None else Blob.from_string(data).id.decode()


class PendingObjects:
    """The new objects of one write, kept in memory until the journal lists them.

    Looks like an object store to tree-building code (reads fall through to
    the real store).  :meth:`write` stores them in insertion order: blobs,
    trees, the commit last, so a stored commit means a complete write.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self.objects: dict[bytes, Any] = {}

    def add_object(self, obj: Any) -> None:
        self.objects.setdefault(obj.id, obj)

    def __getitem__(self, sha: bytes) -> Any:
        found = self.objects.get(sha)
        return found if found is not None else self.store[sha]

    def __contains__(self, sha: bytes) -> bool:
        return sha in self.objects or sha in self.store

    def new_ids(self) -> list[str]:
        """Ids not in the store yet (the ones an interrupted write may leave behind)."""
        return [sha.decode() for sha in self.objects if sha not in self.store]

    # Past this many objects (a compress, merge or reflect of many memories) they go
    # into one pack: one file and one fsync instead of one per object.  A pack
    # appears whole (written, then renamed into place), so "commit stored means a
    # complete write" still holds.
    PACK_ABOVE = 64

    def write(self) -> None:
        fresh = [obj for obj in self.objects.values() if obj.id not in self.store]
        if len(fresh) > self.PACK_ABOVE:
            self.store.add_objects([(obj, None) for obj in fresh])
            return
        for obj in fresh:
            self.store.add_object(obj)


def begin_write(store: JournaledStore, ref: bytes, parent: bytes | None, commit: bytes,
                changes: Sequence[FileChange], writes: Sequence[bool],
                new_objects: Sequence[str] = ()) -> None:
    """Record an about-to-happen write (before its objects, files and ref are written)."""
    files = []
    for change, written in zip(changes, writes, strict=True):
        new = None if change.data is None else Blob.from_string(change.data).id.decode()
        old = _blob_id_of(store.root, change.path) if written else new
        files.append({"path": change.path, "old": old, "new": new, "write": bool(written)})
    record = {"pid": os.getpid(), "ref": ref.decode(), "parent": parent.decode() if parent else None,
              "commit": commit.decode(), "files": files, "objects": list(new_objects)}
    target = _state(store) / JOURNAL
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{JOURNAL}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, target)


def end_write(store: JournaledStore) -> None:
    """The write finished (or was cleanly undone): forget its journal."""
    (_state(store) / JOURNAL).unlink(missing_ok=True)


@contextmanager
def index_writing(store: JournaledStore) -> Iterator[None]:
    """Bracket a ``.git/index`` write so a dead writer's ``index.lock`` can be recognised."""
    mark_index_writing(store)
    try:
        yield
    finally:
        unmark_index_writing(store)


def mark_index_writing(store: JournaledStore) -> None:
    """A gitmem process holds (or is about to take) ``.git/index.lock``."""
    marker = _state(store) / INDEX_MARKER
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def unmark_index_writing(store: JournaledStore) -> None:
    """It let ``.git/index.lock`` go."""
    (_state(store) / INDEX_MARKER).unlink(missing_ok=True)


def index_lock_marked(store: JournaledStore) -> bool:
    """True while a gitmem process says it holds ``.git/index.lock``."""
    return (_state(store) / INDEX_MARKER).exists()


def needs_recovery(store: JournaledStore) -> bool:
    """True when a dead writer left a journal or an index marker (two stats)."""
    state = _state(store)
    return (state / JOURNAL).exists() or (state / INDEX_MARKER).exists()


def recover(store: JournaledStore) -> Recovery:
    """Finish or clean up after a writer that died.  Caller holds the vault lock."""
    report = Recovery()
    state = _state(store)
    marker = state / INDEX_MARKER
    if marker.exists():
        lock = store.git_dir / "index.lock"
        if lock.exists():
            lock.unlink(missing_ok=True)
            report.actions.append("removed .git/index.lock left by a killed gitmem process")
        (store.git_dir / NEXT_INDEX).unlink(missing_ok=True)
        marker.unlink(missing_ok=True)
        store.mark_index_dirty()  # the index write did not finish: redo it
    journal = state / JOURNAL
    if journal.exists():
        # The branch moves only with .git/index following, holding git's index.lock (as a
        # write does): a user's `git commit` never reads an index that lags the finished write.
        with store.index_locked():
            try:
                record = json.loads(journal.read_text())
            except (OSError, ValueError):
                record = None  # written via rename, so this should not happen; nothing to finish
            if record is not None:
                _finish(store, record, report)
            journal.unlink(missing_ok=True)
            try:
                store.repair_index()
            except Exception:  # noqa: BLE001 - an unreadable index: the next open rebuilds it
                store.mark_index_dirty()
    return report


def _finish(store: JournaledStore, record: dict[str, Any], report: Recovery) -> None:
    ref = record["ref"].encode()
    commit = record["commit"].encode()
    parent = record["parent"].encode() if record["parent"] else None
    lock = store.git_dir / (record["ref"] + ".lock")
    if lock.exists():
        try:
            content = lock.read_bytes().strip()
        except OSError:
            content = b"?"
        if content in (b"", commit):
            lock.unlink(missing_ok=True)
            report.actions.append(f"removed {record['ref']}.lock left by a killed gitmem process")
    try:
        head = store.repo.refs[ref]
    except KeyError:
        head = None
    files = record.get("files", [])
    if commit not in store.repo.object_store:
        # Killed while storing objects: nothing else happened yet.  Remove the
        # partial objects (and dulwich's per-object .lock files, which would make
        # writing the same object again fail) so no dangling object stays.
        if head == parent:
            removed = drop_objects(store, record.get("objects", []))
            report.actions.append(f"removed {removed} object(s) of a write killed before it began")
        return
    if head == parent:
        for entry in files:
            if entry.get("write"):
                _roll_file(store, entry, report)
        ok = (store.repo.refs.add_if_new(ref, commit, message=b"gitmem: finish interrupted write")
              if parent is None else
              store.repo.refs.set_if_equals(ref, parent, commit, message=b"gitmem: finish interrupted write"))
        if ok:
            report.actions.append(f"finished an interrupted write (commit {commit.decode()[:7]})")
    elif head == commit:
        for entry in files:  # the ref moved: the files were written before it
            if entry.get("write"):
                _roll_file(store, entry, report)
        report.actions.append(f"cleaned up after write {commit.decode()[:7]} (its writer died after committing)")
    else:
        report.actions.append(f"dropped the journal of write {commit.decode()[:7]}: the branch moved on")
    for entry in files:
        _remove_temp_files(store.root, entry["path"], report)


def drop_objects(store: JournaledStore, ids: Sequence[str]) -> int:
    """Remove the loose objects ``ids`` a write stored and then abandoned; returns how many."""
    removed = 0
    objects = store.git_dir / "objects"
    for sha in ids:
        loose = objects / sha[:2] / sha[2:]
        for path in (loose, loose.with_name(loose.name + ".lock")):
            if path.exists():
                path.unlink(missing_ok=True)
                removed += path == loose
    return removed


def _roll_file(store: JournaledStore, entry: dict[str, Any], report: Recovery) -> None:
    """Bring one path to the write's new state, unless someone changed it since."""
    rel = entry["path"]
    try:
        current = _blob_id_of(store.root, rel)
        if current == entry["new"] or current not in (entry["old"], None):
            return  # done already, or a later edit (a person's) that must not be overwritten
        if entry["new"] is None:
            safefs.remove(store.root, rel)
        else:
            safefs.write_bytes(store.root, rel, store.blob(entry["new"].encode()))
    except (OSError, GitmemError):  # a link planted on the way is never followed
        return
    report.paths.append(entry["path"])


def _remove_temp_files(root: Path, rel: str, report: Recovery) -> None:
    folder, _, name = rel.rpartition("/")
    prefix = safefs.temp_prefix(name)
    for other in safefs.listdir(root, folder):  # never through a link
        if other.startswith(prefix):
            try:
                safefs.remove(root, f"{folder}/{other}" if folder else other, prune=False)
            except (OSError, GitmemError):
                continue
            report.actions.append(f"removed temp file {folder}/{other}")


def log_recovery(store: JournaledStore, actions: list[str]) -> None:
    """Append what recovery did to ``.git/gitmem/recovery.log`` (``gitmem doctor`` shows it)."""
    import time
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        with open(_state(store) / "recovery.log", "a", encoding="utf-8") as handle:
            handle.writelines(f"{stamp} {action}\n" for action in actions)
    except OSError:
        pass
