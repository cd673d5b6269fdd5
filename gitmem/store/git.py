"""Everything gitmem does to git, with dulwich (no git binary needed).

One write = one commit (after a pure-rename commit when it moves files and
changes their text, see :meth:`GitStore.commit_files`), built straight from the
object store (blob -> ``commit_tree_changes`` -> commit -> compare-and-swap of
the branch ref), which costs a few milliseconds whatever the vault size, instead
of ``porcelain.add`` which re-reads and re-writes the whole ``.git/index``.

Order of a write, all under the vault lock and git's own ``.git/index.lock``
(taken first, as git's commands do; a write waits while a git command holds it):

1. objects (blobs, trees, commit) are written and fsynced
   (``core.fsyncObjectFiles=true``);
2. working-tree files are replaced atomically (temp file + fsync + rename);
3. the new ``.git/index`` is written into ``index.lock`` (only the entries the
   write changed, spliced into the old bytes);
4. the branch ref is moved with compare-and-swap.  This is the commit point;
5. ``index.lock`` is renamed over ``.git/index``.

If step 2, 3 or 4 fails, every file touched in step 2 is put back as it was, so
the working tree never shows half a write.  ``.git/index`` never lags HEAD
where a user's ``git commit`` could read it: such a commit either ran first
(the write then builds on it) or finds ``index.lock`` taken and stops, as when
any two git commands meet.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
from array import array
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol

from dulwich.diff_tree import tree_changes
from dulwich.errors import NotGitRepository
from dulwich.index import index_entry_from_stat
from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo

from .. import safefs
from ..config import Identity
from ..errors import Conflict, GitmemError, LockTimeout, NotAVault, RevisionNotFound, StorageError
from .changes import FileChange
from .housekeeping import EXIT_THRESHOLD, LOOSE_THRESHOLD, Housekeeper, HousekeepingReport, run_in_child
from .recovery import (
    PendingObjects,
    begin_write,
    drop_objects,
    end_write,
    index_lock_marked,
    index_writing,
    mark_index_writing,
    unmark_index_writing,
)

__all__ = ["GitStore", "FileChange", "CommitInfo", "PathChange", "ChangeChecks", "Origin", "blob_id",
           "RENAME_OP_TRAILER"]

#: Who made the content of a commit: the checks differ (an agent's secret is refused,
#: a person's edit is committed as theirs, a remote's files are checked as they arrive).
Origin = Literal["agent", "person", "remote", "generated"]


class ChangeChecks(Protocol):
    """What the store runs on every commit and fast-forward before any object is
    stored (the vault's write checks, :class:`gitmem.write.checks.WriteChecks`)."""

    def prepare(self, changes: Sequence[FileChange], generated: Collection[str]) -> list[FileChange]:
        """The changes as they will be stored (a ``redact`` policy rewrites secrets)."""

    def __call__(self, store: GitStore, changes: Sequence[FileChange], origin: Origin,
                 parent: bytes | None, generated: Collection[str]) -> None:
        """Raise if a change may not be stored."""

    def refusals(self, store: GitStore, changes: Sequence[FileChange], origin: Origin,
                 parent: bytes | None, generated: Collection[str] = ()) -> dict[str, Any]:
        """The changes that would be refused (path -> the error), without raising."""

FILE_MODE = 0o100644
BRANCH = b"refs/heads/main"
# A write waits this long (by default) for a git command to release .git/index.lock:
# git holds it for milliseconds, except `git commit` waiting for its message.
INDEX_LOCK_TIMEOUT = 30.0
# A write of this many files or more syncs the working tree once, after all of them.
SYNC_ONCE_ABOVE = 64


@dataclass(frozen=True)
class CommitInfo:
    """What ``git log`` shows of one commit."""

    sha: str
    author: str
    time: int  # seconds since the epoch, UTC
    message: str

    @property
    def subject(self) -> str:
        return self.message.split("\n", 1)[0]

    def to_dict(self) -> dict[str, object]:
        from datetime import datetime

        from ..memory.schema import iso_now
        return {"commit": self.sha, "author": self.author, "subject": self.subject,
                "date": iso_now(datetime.fromtimestamp(self.time, UTC))}


@dataclass(frozen=True)
class PathChange:
    """One file changed by a commit: old and new blob sha (None when absent)."""

    old_path: str | None
    new_path: str | None
    old_sha: bytes | None
    new_sha: bytes | None


def blob_id(data: bytes) -> str:
    """The git blob id (hex) of ``data``, as ``git hash-object`` prints it."""
    return Blob.from_string(data).id.decode()


def _look_twice(store: Any) -> None:
    """Make ``store`` look for a missing object a second time before giving up.

    An object read looks in the packs (and for new packs), then among the loose
    objects. Background packing (or a user's ``git gc``) may move an object into a
    new pack and delete its loose copy between those two looks; git then looks in
    the packs again, and so does this (the second look finds the new pack)."""
    first = store.get_raw

    def get_raw(name: Any) -> Any:
        try:
            return first(name)
        except KeyError:
            return first(name)

    store.get_raw = get_raw


class GitStore:
    """The vault's git repository: reading trees and blobs, making commits."""

    def __init__(self, root: Path, checks: ChangeChecks | None = None) -> None:
        self.root = root
        # Run on every commit and fast-forward before any object is stored (gitmem.write.checks);
        # the path gate itself (safefs) applies even without them.
        self.checks = checks
        try:
            self.repo = Repo(str(root))
        except NotGitRepository:
            raise NotAVault(f"{root} is not a git repository") from None
        if self.repo.bare:
            raise NotAVault(f"{root} is a bare repository; a vault needs a working tree")
        # Durable loose objects, the effect of core.fsyncObjectFiles=true, set here
        # rather than in .git/config: git >= 2.36 prints a deprecation warning on
        # every command when that key is present.
        if hasattr(self.repo.object_store, "fsync_object_files"):
            self.repo.object_store.fsync_object_files = True
        _look_twice(self.repo.object_store)
        self._trees: dict[bytes, Tree] = {}  # parsed trees by sha (see _tree)
        self._commit_trees: dict[bytes, bytes] = {}  # commit sha -> its tree sha
        # path -> (blob sha, stat) written by us and not yet in .git/index
        self._pending_index: dict[bytes, tuple[bytes, os.stat_result] | None] = {}
        self._index_layout: IndexLayout | None = None   # of the .git/index this process last wrote
        self._held: _HeldIndex | None = None   # .git/index.lock, while a write holds it (index_locked)
        # Seconds a write waits for a git command to release .git/index.lock.
        self.index_lock_timeout = INDEX_LOCK_TIMEOUT
        self._housekeeping = threading.Lock()  # one housekeeping run per process at a time

    @classmethod
    def init(cls, root: Path) -> GitStore:
        """Create a repository (branch ``main``) with durable object writes."""
        root.mkdir(parents=True, exist_ok=True)
        if not (root / ".git").exists():
            Repo.init(str(root), default_branch=b"main")
        return cls(root)

    @property
    def git_dir(self) -> Path:
        return Path(self.repo.controldir())

    def close(self) -> None:
        self.flush_index()
        self.repo.close()

    # ----------------------------------------------------------------- reading
    def head(self) -> bytes | None:
        """The sha of HEAD's commit, or None on an unborn branch."""
        try:
            return self.repo.refs[b"HEAD"]
        except KeyError:
            return None

    def head_ref(self) -> bytes:
        """The branch HEAD points at (``refs/heads/main`` usually)."""
        chain, _ = self.repo.refs.follow(b"HEAD")
        return chain[-1] if chain and chain[-1] != b"HEAD" else BRANCH

    def commit(self, sha: bytes) -> Commit:
        try:
            obj = self.repo[sha]
        except KeyError:
            raise RevisionNotFound(f"no commit {sha.decode(errors='replace')}") from None
        if not isinstance(obj, Commit):
            raise RevisionNotFound(f"{sha.decode(errors='replace')} is not a commit")
        return obj

    def info(self, sha: bytes) -> CommitInfo:
        c = self.commit(sha)
        return CommitInfo(sha.decode(), c.author.decode("utf-8", "replace"), c.author_time,
                          c.message.decode("utf-8", "replace"))

    def resolve(self, rev: str) -> bytes:
        """A commit sha from a full or abbreviated hex sha (>= 4 chars) or ``HEAD``."""
        text = rev.strip()
        if text.upper() == "HEAD":
            head = self.head()
            if head is None:
                raise RevisionNotFound("the vault has no commits yet")
            return head
        if not (4 <= len(text) <= 40) or any(c not in "0123456789abcdef" for c in text.lower()):
            raise RevisionNotFound(f"{rev!r} is not a commit id")
        if len(text) == 40 and text.encode() in self.repo.object_store:
            return text.lower().encode()
        matches = [s for s in self._iter_prefix(text.lower())]
        if not matches:
            raise RevisionNotFound(f"no commit matches {rev!r}")
        if len(matches) > 1:
            raise Conflict(f"commit prefix {rev!r} is ambiguous", code="ambiguous_reference")
        return matches[0]

    def _iter_prefix(self, prefix: str) -> Iterator[bytes]:
        store = self.repo.object_store
        if hasattr(store, "iter_prefix"):
            for sha in store.iter_prefix(prefix.encode()):
                if isinstance(self.repo[sha], Commit):
                    yield sha
            return
        for sha in store:  # pragma: no cover - older dulwich
            if sha.startswith(prefix.encode()) and isinstance(self.repo[sha], Commit):
                yield sha

    def tree_of(self, commit_sha: bytes | None) -> bytes | None:
        """The tree of a commit (None for None)."""
        if commit_sha is None:
            return None
        tree = self._commit_trees.get(commit_sha)
        if tree is None:
            if len(self._commit_trees) > 512:
                self._commit_trees.clear()
            tree = self._commit_trees[commit_sha] = self.commit(commit_sha).tree
        return tree

    def _tree(self, sha: bytes) -> Tree | None:
        """The tree ``sha`` (None for another kind of object), parsed once: a write looks
        up the same few trees several times (its checks, the person-edit guard), and a
        git object never changes.  Callers must not modify what they get."""
        tree = self._trees.get(sha)
        if tree is None:
            obj = self.repo.object_store[sha]
            if not isinstance(obj, Tree):
                return None
            if len(self._trees) > 512:
                self._trees.clear()
            tree = self._trees[sha] = obj
        return tree

    def _subtree(self, commit_sha: bytes | None, parts: Sequence[bytes]) -> Tree | None:
        tree_sha = self.tree_of(commit_sha)
        tree = self._tree(tree_sha) if tree_sha is not None else None
        for part in parts:
            if tree is None or part not in tree:
                return None
            mode, sha = tree[part]
            tree = self._tree(sha) if stat.S_ISDIR(mode) else None
        return tree

    def blob_sha_at(self, commit_sha: bytes | None, path: str) -> bytes | None:
        """The blob sha of ``path`` in a commit, or None if absent."""
        *folders, name = path.encode("utf-8").split(b"/")
        tree = self._subtree(commit_sha, folders)
        if tree is None or name not in tree:
            return None
        mode, sha = tree[name]
        return None if stat.S_ISDIR(mode) else sha

    def read_at(self, commit_sha: bytes | None, path: str) -> bytes | None:
        """File bytes of ``path`` at a commit, or None."""
        sha = self.blob_sha_at(commit_sha, path)
        return None if sha is None else self.repo[sha].as_raw_string()

    def blob(self, sha: bytes) -> bytes:
        return self.repo[sha].as_raw_string()

    def list_tree(self, commit_sha: bytes | None) -> dict[str, bytes]:
        """All file paths of a commit -> blob sha."""
        tree = self.tree_of(commit_sha)
        if tree is None:
            return {}
        return {entry.path.decode("utf-8", "surrogateescape"): entry.sha
                for entry in self.repo.object_store.iter_tree_contents(tree)
                if stat.S_ISREG(entry.mode)}

    def changes_between(self, old_commit: bytes | None, new_commit: bytes) -> list[PathChange]:
        """Files that differ between two commits (first-parent view for merges)."""
        out = []
        for change in tree_changes(self.repo.object_store, self.tree_of(old_commit),
                                   self.tree_of(new_commit)):
            old, new = change.old, change.new
            out.append(PathChange(
                old.path.decode("utf-8", "surrogateescape") if old and old.path else None,
                new.path.decode("utf-8", "surrogateescape") if new and new.path else None,
                old.sha if old and old.sha else None, new.sha if new and new.sha else None))
        return out

    def walk_new(self, old_tip: bytes | None, new_tip: bytes) -> list[bytes]:
        """Commits reachable from ``new_tip`` but not ``old_tip``, oldest first."""
        walker = self.repo.get_walker(include=[new_tip], exclude=[old_tip] if old_tip else None,
                                      order="topo")
        return [entry.commit.id for entry in walker][::-1]

    def is_ancestor(self, ancestor: bytes, descendant: bytes) -> bool:
        """True when ``ancestor`` is reachable from ``descendant``."""
        if ancestor not in self.repo.object_store:
            return False
        from dulwich.graph import can_fast_forward
        return bool(can_fast_forward(self.repo, ancestor, descendant))

    # ----------------------------------------------------------------- writing
    def commit_files(self, changes: Sequence[FileChange], message: str, author: Identity,
                     when: float | None = None, committer: Identity | None = None,
                     write_worktree: bool = True, merge_parents: Sequence[bytes] = (),
                     generated: Collection[str] = (), origin: Origin = "agent",
                     expected: Mapping[str, str | None] | None = None) -> bytes:
        """Write ``changes`` to the working tree and commit them as one commit (a change
        with ``moved_from`` whose text differs is first committed as a pure rename on
        its own, see :meth:`_rename_commit`; the branch moves once, to the second).

        With ``write_worktree=False`` the files are committed as they are on
        disk already (outside edits) and are not touched, except the
        ``generated`` paths (MEMORY.md), which are always written.  ``merge_parents``
        makes a merge commit (sync): HEAD stays the first parent.

        ``origin`` says who made the content (``agent``: gitmem's own writes;
        ``person``: files edited outside gitmem; ``remote``: a sync) for the write
        checks (:mod:`gitmem.write.checks`), which run before any object is stored.

        ``expected`` maps paths to the blob id (hex; None: absent) the working
        tree must still hold when the file is replaced: a file someone changed
        since is never overwritten (:class:`Conflict` with code
        ``changed_on_disk``, nothing written).

        Caller holds the vault lock.  Returns the new commit sha, with ``.git/index``
        already holding the commit's files (see :meth:`index_locked`).  On any
        failure the working tree is restored and the error re-raised as
        :class:`StorageError` (or :class:`Conflict` if HEAD moved under us, or
        :class:`LockTimeout` if a git command kept ``.git/index.lock``).
        """
        with self.index_locked():
            return self._commit_locked(changes, message, author, when, committer, write_worktree, merge_parents,
                                       generated, origin, expected)

    def _commit_locked(self, changes: Sequence[FileChange], message: str, author: Identity,
                       when: float | None, committer: Identity | None, write_worktree: bool,
                       merge_parents: Sequence[bytes], generated: Collection[str], origin: Origin,
                       expected: Mapping[str, str | None] | None) -> bytes:
        """:meth:`commit_files`, holding ``.git/index.lock`` (so HEAD read here is the parent
        the branch still has when it moves, unless a process ignoring git's lock moved it)."""
        repo = self.repo
        if expected:
            self._check_unchanged(expected)
        parent = self.head()
        if self.checks is not None:
            changes = self.checks.prepare(changes, generated)
        self._check(changes, origin, parent, generated)
        store = repo.object_store
        pending = PendingObjects(store)  # stored only once the journal names them (recovery.py)
        tree_changes_list: list[tuple[bytes, int | None, bytes | None]] = []
        for change in changes:
            path_b = change.path.encode("utf-8")
            if change.data is None:
                tree_changes_list.append((path_b, None, None))
            else:
                blob = Blob.from_string(change.data)
                pending.add_object(blob)
                tree_changes_list.append((path_b, FILE_MODE, blob.id))
        blob_ids = [sha for _, _, sha in tree_changes_list]
        when = time.time() if when is None else when
        first = parent
        renamed = self._rename_commit(pending, parent, changes, message, author, committer, when) \
            if parent is not None and not merge_parents else None
        if renamed is not None:
            first = renamed
        base_tree: bytes | Tree | None = self.tree_of(parent)
        if base_tree is None:
            base_tree = Tree()  # not stored: it would be a dangling object
        new_tree = _apply_tree_changes(pending, base_tree, tree_changes_list)
        commit = _new_commit(new_tree, ([first] if first else []) + list(merge_parents), message,
                             author, committer, when)
        pending.add_object(commit)

        writes = [write_worktree or c.path in generated for c in changes]
        ref = self.head_ref()
        # Journal first: a writer killed from here on is rolled forward by the
        # next lock holder (gitmem.store.recovery), so no half-write stays visible.
        new_ids = pending.new_ids()
        begin_write(self, ref, parent, commit.id, changes, writes, new_ids)
        pending.write()  # blobs, trees, then the commit: a stored commit means all are stored
        for obj in pending.objects.values():  # the next write starts from these trees
            if isinstance(obj, Tree) and len(self._trees) < 512:
                self._trees[obj.id] = obj
        try:
            applied = iter(self._apply_to_worktree([c for c, w in zip(changes, writes) if w], generated,
                                                   expected or {}))
        except (StorageError, Conflict):  # the files were put back: this write did not happen
            # Objects first, then the journal: housekeeping leaves the objects the
            # journal names loose, so none of these can end up in a pack.
            drop_objects(self, new_ids)  # stored for nothing: no ref will ever reach them
            end_write(self)
            raise
        # One (path, old bytes, new stat) per change, in order (_index_entries zips them).
        backups = [next(applied) if w else
                   (c.path, None, _lstat_or_none(self.root, c.path) if c.data is not None else None)
                   for c, w in zip(changes, writes)]
        try:
            # The new .git/index goes into index.lock first (a full disk stops the write here).
            self._stage_index(self._index_entries(changes, blob_ids, backups, writes))
            reflog = f"commit: {message.splitlines()[0]}".encode()
            if parent is None:
                ok = repo.refs.add_if_new(ref, commit.id, message=reflog)
            else:
                ok = repo.refs.set_if_equals(ref, parent, commit.id, message=reflog)
            if not ok:
                raise Conflict("the vault's branch moved during the write (another git process?)",
                               hint="Retry; nothing was changed.")
        except BaseException as exc:
            self._drop_staged()
            self._restore_worktree([b for b, w in zip(backups, writes) if w])
            end_write(self)
            if isinstance(exc, Conflict):
                raise
            if isinstance(exc, OSError):
                # dulwich leaves the branch's lock file behind when writing it fails as it is
                # closed (a full disk): every later commit, gitmem's or git's, would then
                # fail on it.  It is this write's own (git's would have raised FileLocked).
                (self.git_dir / (ref.decode("utf-8") + ".lock")).unlink(missing_ok=True)
                raise StorageError(f"could not update the branch or .git/index: {exc}") from exc
            raise
        self._keep_staged()
        end_write(self)
        return commit.id

    def _rename_commit(self, pending: PendingObjects, parent: bytes, changes: Sequence[FileChange],
                       message: str, author: Identity, committer: Identity | None, when: float) -> bytes | None:
        """For a write that moves files: a commit holding only the renames (the old
        contents at the new paths), so git sees a 100% rename however much the
        move's own commit then changes the text.  Returns its sha, or None."""
        moves = [(c.moved_from, c.path, Blob.from_string(c.data).id) for c in changes
                 if c.moved_from and c.data is not None]
        tree_changes_list: list[tuple[bytes, int | None, bytes | None]] = []
        for src, dst, new_sha in moves:
            old_sha = self.blob_sha_at(parent, src) if src else None
            # A move that keeps the text is a 100% rename already: no extra commit for it.
            if old_sha is not None and src != dst and old_sha != new_sha:
                tree_changes_list += [(src.encode("utf-8"), None, None), (dst.encode("utf-8"), FILE_MODE, old_sha)]
        if not tree_changes_list:
            return None
        tree = _apply_tree_changes(pending, self.tree_of(parent) or Tree(), tree_changes_list)
        subject, _, rest = message.partition("\n")
        # No Memory-Id trailer: the rename half is not a version of its own (the write's
        # commit that follows is), so `git log --grep Memory-Id:` lists each write once.
        trailers = [line for line in rest.splitlines() if line.startswith("Agent:")]
        listing = "\n".join(f"{src} -> {dst}" for src, dst, _ in moves if src)
        text = (f"rename: {subject} (the next commit updates the text)\n\n{listing}\n\n"
                + "\n".join([*trailers, RENAME_OP_TRAILER]) + "\n")
        commit = _new_commit(tree, [parent], text, author, committer, when)
        pending.add_object(commit)
        return commit.id

    def fast_forward(self, old: bytes, new: bytes, changes: Sequence[FileChange], reason: str) -> None:
        """Move the branch from ``old`` to its descendant ``new`` (sync).

        ``changes`` are the files that differ between the two commits; they pass
        the write checks (origin ``remote``), are written to the working tree and
        put back if the ref moved meanwhile.  Caller holds the vault lock.
        """
        with self.index_locked():
            self._fast_forward_locked(old, new, changes, reason)

    def _fast_forward_locked(self, old: bytes, new: bytes, changes: Sequence[FileChange], reason: str) -> None:
        self._check(changes, "remote", old, ())
        # Journaled like a commit: a writer killed between the files and the ref move
        # is rolled forward by the next lock holder (see recovery.py).
        begin_write(self, self.head_ref(), old, new, changes, [True] * len(changes))
        try:
            backups = self._apply_to_worktree(changes)
        except BaseException:
            end_write(self)
            raise
        blob_ids = [None if c.data is None else Blob.from_string(c.data).id for c in changes]
        try:
            self._stage_index(self._index_entries(changes, blob_ids, backups, [True] * len(changes)))
            if not self.repo.refs.set_if_equals(self.head_ref(), old, new, message=reason.encode("utf-8")):
                raise Conflict("the vault's branch moved during the sync (another git process?)",
                               hint="Sync again; nothing was changed.")
        except BaseException as exc:
            self._drop_staged()
            self._restore_worktree(backups)
            end_write(self)
            if isinstance(exc, OSError):
                raise StorageError(f"could not update the branch or .git/index: {exc}") from exc
            raise
        self._keep_staged()
        end_write(self)

    def _check(self, changes: Sequence[FileChange], origin: Origin, parent: bytes | None,
               generated: Collection[str]) -> None:
        """The path gate on every change, then the vault's write checks."""
        for change in changes:
            safefs.split_checked(change.path)
        if self.checks is not None:
            self.checks(self, changes, origin, parent, generated)

    def has_blob_of(self, data: bytes) -> bool:
        """True if the repository already stores a blob with exactly ``data``."""
        return Blob.from_string(data).id in self.repo.object_store

    def names_in(self, commit_sha: bytes | None, folder: str) -> list[str]:
        """The entry names of ``folder`` (vault-relative, "" for the root) at a commit."""
        tree = self._subtree(commit_sha, [p.encode("utf-8") for p in folder.split("/") if p])
        return [] if tree is None else [entry.path.decode("utf-8", "replace") for entry in tree.iteritems()]

    def _check_unchanged(self, expected: Mapping[str, str | None]) -> None:
        """Raise ``changed_on_disk`` if a file no longer holds the blob ``expected`` says."""
        for path, want in expected.items():
            _changed_since(path, safefs.read_or_none(self.root, path), want)

    def _apply_to_worktree(self, changes: Sequence[FileChange], generated: Collection[str] = (),
                           expected: Mapping[str, str | None] | None = None
                           ) -> list[tuple[str, bytes | None, os.stat_result | None]]:
        """Write files (never through a link: a link in place of a ``generated`` file is
        replaced by the file); return (path, old bytes or None, new stat) for rollback.
        A file not holding what ``expected`` says is not replaced (``changed_on_disk``)."""
        done: list[tuple[str, bytes | None, os.stat_result | None]] = []
        # Many files (an import) are synced together once written: the branch moves
        # only after that, as it does after each file's own sync for a small write.
        durable = len(changes) < SYNC_ONCE_ABOVE
        try:
            for change in changes:
                old = safefs.read_or_none(self.root, change.path)
                want = expected.get(change.path, _ANY) if expected else _ANY
                if want is not _ANY:
                    _changed_since(change.path, old, want)   # (a removal is checked here only)
                if change.data is None:
                    safefs.remove(self.root, change.path)
                    done.append((change.path, old, None))
                    continue
                try:
                    # The replace itself checks the file still holds what gitmem based its
                    # change on: a person's save at any moment is kept, never overwritten.
                    st = safefs.write_bytes(self.root, change.path, change.data,
                                            replace_link=change.path in generated,
                                            expect=None if want is _ANY else _holds(want), durable=durable)
                except safefs.ReplacedWrongFile:
                    raise _changed_on_disk(change.path) from None
                done.append((change.path, old, st))
            if not durable:
                safefs.sync_all()
        except OSError as exc:
            self._restore_worktree(done)
            raise StorageError(f"could not write {exc.filename or 'a file'}: {exc.strerror}") from exc
        except BaseException:
            self._restore_worktree(done)
            raise
        return done

    def _restore_worktree(self, backups: list[tuple[str, bytes | None, os.stat_result | None]]) -> None:
        for rel, old, _ in reversed(backups):
            try:
                if old is None:
                    safefs.remove(self.root, rel)
                else:
                    safefs.write_bytes(self.root, rel, old)
            except (OSError, GitmemError):  # pragma: no cover - best effort; doctor --repair fixes
                pass

    # ------------------------------------------------------------ .git/index
    # Every move of the branch happens while gitmem holds git's own .git/index.lock, as
    # git's commands do: the new index is written into the lock file before the branch
    # moves and renamed over .git/index right after, before the write returns.  A
    # `git commit` in a shell therefore never reads an index that lags HEAD: it either
    # ran before (the write then builds on its commit) or fails on the lock, cleanly.
    @contextmanager
    def index_locked(self) -> Iterator[None]:
        """Hold ``.git/index.lock`` for a ``with`` block (re-entrant): every commit and
        fast-forward made inside writes its entries into the lock file, which replaces
        ``.git/index`` when the outermost block ends.  Waits while a git command holds
        the lock, for up to :attr:`index_lock_timeout` seconds (then
        :class:`LockTimeout`, nothing changed).  Caller holds the vault lock."""
        held = self._held
        if held is not None:
            held.depth += 1
            try:
                yield
            finally:
                held.depth -= 1
            return
        held = self._take_index_lock()
        self._held = held
        try:
            yield
        finally:
            self._held = None
            self._release_index_lock(held)

    def index_lock_is_gitmems(self) -> bool:
        """True while a gitmem process (this one or another) holds ``.git/index.lock`` for a
        write, rather than a git command."""
        return index_lock_marked(self)

    def _take_index_lock(self) -> _HeldIndex:
        path = Path(self.repo.index_path())
        lock = path.with_name(path.name + ".lock")
        deadline = time.monotonic() + self.index_lock_timeout
        pause = 0.001
        while True:
            # Marked before the lock file is made, so a process killed the instant after
            # making it leaves a lock recovery knows for gitmem's (recovery.py); unmarked
            # again while a git command holds it.
            mark_index_writing(self)
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
                break
            except FileExistsError:
                unmark_index_writing(self)
                if time.monotonic() + pause > deadline:
                    raise LockTimeout(
                        f"a git command has held {lock} for over {self.index_lock_timeout:.0f}s",
                        hint="Retry once the git command ends (a `git commit` may be waiting for its "
                             "message). If no git command runs, remove the file; `gitmem doctor "
                             "--repair` removes one older than a minute.") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.02)
            except OSError as exc:
                unmark_index_writing(self)
                raise StorageError(f"could not create {lock}: {exc.strerror}") from exc
        return _HeldIndex(path, lock, os.fdopen(fd, "r+b"))

    def _stage_index(self, entries: Mapping[bytes, tuple[bytes, os.stat_result] | None]) -> None:
        """Write the index this write leads to into the held ``index.lock`` (and sync it),
        before the branch moves: a full disk stops the write here, with nothing moved.
        Kept by :meth:`_keep_staged` once the branch has moved."""
        held = self._held
        assert held is not None, "a commit moves the branch only inside index_locked()"
        data = held.current()
        spliced = _spliced(data, entries, held.layout or self._index_layout,
                           self.git_dir / "gitmem" / INDEX_LAYOUT)
        pieces: list[bytes | memoryview]
        if spliced is None:
            pieces, layout = [_rewritten(data, entries)], None
        else:
            pieces, layout = spliced
        held.write(pieces)
        held.staged = (pieces, layout, dict(entries))

    def _keep_staged(self) -> None:
        """The branch moved: what :meth:`_stage_index` wrote is the index from now on."""
        held = self._held
        if held is not None and held.staged is not None:
            held.keep()

    def _drop_staged(self) -> None:
        """The branch did not move: the lock file goes back to the index as it was."""
        held = self._held
        if held is not None and held.staged is not None:
            held.staged = None
            if held.kept is not None:
                try:
                    held.write(held.kept[0])
                except OSError:
                    held.broken = True   # the release then leaves it to the repair (below)

    def _release_index_lock(self, held: _HeldIndex) -> None:
        """Rename the lock file over ``.git/index`` when a commit of this hold moved the
        branch; else remove it.  Should the rename fail, the entries are left pending
        (and the index marked) for :meth:`flush_index` or the next process."""
        try:
            if held.kept is None:
                held.abort()
                return
            pieces, layout, entries = held.kept
            try:
                if held.broken:
                    raise OSError("the lock file could not be put back")
                held.commit()
            except OSError:
                held.abort()
                self._queue_index(entries)
                return
            self._index_layout = layout
            if layout is not None:
                layout.save(self.git_dir / "gitmem" / INDEX_LAYOUT)
            for path in entries:   # written now: a lazy update must not put an older value back
                self._pending_index.pop(path, None)
        finally:
            unmark_index_writing(self)

    def _index_entries(self, changes: Sequence[FileChange], blob_ids: Sequence[bytes | None],
                       done: Sequence[tuple[str, bytes | None, os.stat_result | None]],
                       written: Sequence[bool]) -> dict[bytes, tuple[bytes, os.stat_result] | None]:
        """The ``.git/index`` entries of a commit's files.  A file gitmem wrote gets the
        stat of what it wrote; one committed as it is on disk (a person's edit) gets its
        stat only while it still holds the committed bytes, else a stat git does not
        trust (``git status`` then compares the content, and shows a later save)."""
        out: dict[bytes, tuple[bytes, os.stat_result] | None] = {}
        for change, sha, (_, _, st), wrote in zip(changes, blob_ids, done, written):
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
        st = _lstat_or_none(self.root, rel)
        if st is None or not stat.S_ISREG(st.st_mode):
            return None
        data = safefs.read_or_none(self.root, rel)
        if data is None or Blob.from_string(data).id != sha:
            st = _without_times(st)
        return sha, st

    def _queue_index(self, entries: Mapping[bytes, tuple[bytes, os.stat_result] | None]) -> None:
        """Leave entries for :meth:`flush_index` (and mark them, for the next process)."""
        self._pending_index.update(entries)
        marker = self._own_dirty_marker()
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()

    # .git/index markers.  Each process marks its own pending entries (index-dirty.<pid>)
    # and clears only its own mark once they are written: with one shared mark, a
    # process that flushed its entries cleared the mark of another that then gave up
    # (git kept taking index.lock), and nobody repaired that one's entries.  The bare
    # ``index-dirty`` is set by recovery and purge, and by nobody alive.
    def _own_dirty_marker(self) -> Path:
        # one per GitStore object: two Vaults in one process keep their own marks
        return self.git_dir / "gitmem" / f"{DIRTY_MARK}.{os.getpid()}.{id(self)}"

    def index_dirty(self) -> bool:
        """True if ``.git/index`` may lag HEAD because of a process that is gone (it
        died, or gave up while git held ``index.lock``) or of recovery: repair it."""
        for marker in (self.git_dir / "gitmem").glob(f"{DIRTY_MARK}*"):
            if marker.name == DIRTY_MARK or not _alive(marker.name.split(".")[1]):
                return True
        return False

    def mark_index_dirty(self) -> None:
        """Leave ``.git/index`` to be repaired by the next process that opens the vault."""
        marker = self.git_dir / "gitmem" / DIRTY_MARK
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()

    def _clear_dirty(self) -> None:
        """After a repair from HEAD: the marks of gone processes (and this one's) are done."""
        own = self._own_dirty_marker().name
        for marker in (self.git_dir / "gitmem").glob(f"{DIRTY_MARK}*"):
            if marker.name in (DIRTY_MARK, own) or not _alive(marker.name.split(".")[1]):
                marker.unlink(missing_ok=True)

    @property
    def index_pending(self) -> int:
        return len(self._pending_index)

    def flush_index(self) -> bool:
        """Bring ``.git/index`` in line with what this process committed.

        Returns True when nothing is left pending; False when the write failed
        (git holds ``index.lock``): the entries stay pending and the
        ``index-dirty`` marker stays, so a retry, or the next process, repairs it.
        """
        if not self._pending_index:
            self._own_dirty_marker().unlink(missing_ok=True)  # nothing of ours is pending
            return True
        # The entries stay pending (and counted by index_pending) until they are written
        # and the marker is gone: a reader never sees "nothing pending" mid-write.
        pending = dict(self._pending_index)
        try:
            head = self.head()
            # Many entries (a bulk import): read HEAD's tree once rather than walk it per path.
            files = self.list_tree(head) if head and len(pending) > 256 else None
            final = {path: self._still_current(head, path, value, files) for path, value in pending.items()}
            with index_writing(self):
                # A few entries into a plain index: spliced into its bytes (a few ms at
                # 10k files, where reading and writing every entry as objects takes 0.2 s).
                layout = None if len(final) > 256 else _splice_index(
                    Path(self.repo.index_path()), final, self._index_layout,
                    self.git_dir / "gitmem" / INDEX_LAYOUT)
                self._index_layout = layout
                if layout is None:
                    index = self.repo.open_index()
                    for path, value in final.items():
                        if value is None:
                            if path in index:
                                del index[path]
                        else:
                            sha, st = value
                            index[path] = index_entry_from_stat(st, sha, FILE_MODE)
                    index.write()
        except Exception:  # noqa: BLE001 - git may hold index.lock; retry later
            return False
        # An entry queued again meanwhile (a newer value) stays for the next flush.
        written = [path for path, value in pending.items()
                   if path in self._pending_index and self._pending_index[path] is value]
        if len(written) == len(self._pending_index):  # a write queued meanwhile keeps the marker
            self._own_dirty_marker().unlink(missing_ok=True)
        for path in written:
            del self._pending_index[path]
        return not self._pending_index

    def _still_current(self, head: bytes | None, path: bytes,
                       value: tuple[bytes, os.stat_result] | None,
                       files: Mapping[str, bytes] | None = None) -> tuple[bytes, os.stat_result] | None:
        """A pending index entry, corrected if another process has committed the path
        since (MEMORY.md is rewritten by every writer): HEAD's blob, with the file's
        stat only when the file holds exactly that blob (else git re-reads it).
        ``files`` is HEAD's tree as :meth:`list_tree` gives it, when already read."""
        if files is not None:
            current = files.get(path.decode("utf-8", "surrogateescape"))
        else:
            current = self.blob_sha_at(head, path.decode("utf-8")) if head else None
        if current == (value[0] if value else None):
            return value
        if current is None:
            return None
        rel = path.decode("utf-8")
        st = _lstat_or_none(self.root, rel)
        if st is None or not stat.S_ISREG(st.st_mode):
            return None
        data = safefs.read_or_none(self.root, rel)
        same = data is not None and Blob.from_string(data).id == current
        if not same:   # a stat git cannot trust, so `git status` compares the content
            st = _without_times(st)
        return current, st

    def loose_objects_estimate(self) -> int:
        """Roughly how many loose objects there are (git's own gc.auto estimate:
        the count in ``objects/17`` times 256)."""
        try:
            return len(os.listdir(self.git_dir / "objects" / "17")) * 256
        except OSError:
            return 0

    def housekeep(self, *, threshold: int = LOOSE_THRESHOLD, force: bool = False,
                  closing: bool = False, separate_process: bool = False) -> HousekeepingReport | None:
        """Pack loose objects with deltas and merge packs, when there is enough to do
        (see :mod:`gitmem.store.housekeeping`); None when there was nothing to do.
        ``closing``: the process is done with the vault, pack from fewer loose objects.
        ``separate_process``: run it in a child process (writes in this process then
        do not wait for it to release the interpreter lock).

        Runs in the calling thread WITHOUT the vault lock, which it takes only for
        milliseconds to move a finished pack in: the caller must not hold it.  Other
        threads of this process wait for a run under way instead of starting their own.
        """
        if closing:
            threshold = min(threshold, EXIT_THRESHOLD)
        keeper = Housekeeper(self.git_dir, threshold=threshold)
        with self._housekeeping:
            if not force and not keeper.needed():
                return None
            if separate_process:
                return run_in_child(self.git_dir, threshold=threshold, force=force)
            return keeper.run(force=force)

    def pack_if_needed(self, threshold: int = LOOSE_THRESHOLD) -> int:
        """Pack loose objects once there are ``threshold`` of them (any, with 0): each
        commit adds ~6 of 4 KiB of disk each, and git's ``gc.auto`` would otherwise start
        a gc in the user's shell.  Returns how many were packed.  Caller must not hold
        the vault lock (see :meth:`housekeep`)."""
        report = self.housekeep(threshold=threshold, force=threshold <= 0)
        return report.packed if report is not None else 0

    def repair_index(self) -> list[str]:
        """Make ``.git/index`` match HEAD for every file whose content matches HEAD.

        Returns the paths fixed.  Files the user changed stay reported as
        modified by ``git status`` (their index entry keeps HEAD's sha).
        """
        head_files = self.list_tree(self.head())
        index = self.repo.open_index()
        fixed: list[str] = []
        for path_b in list(index):
            path = path_b.decode("utf-8", "surrogateescape")
            if path not in head_files and _lstat_or_none(self.root, path) is None:
                del index[path_b]
                fixed.append(path)
        for path, sha in head_files.items():
            key = path.encode("utf-8")
            current = index[key].sha if key in index else None
            st = _lstat_or_none(self.root, path)
            if st is None or not stat.S_ISREG(st.st_mode):
                continue
            if current == sha and index[key].size == st.st_size and _same_mtime(index[key], st):
                continue
            data = safefs.read_or_none(self.root, path)
            if data is not None and Blob.from_string(data).id == sha:
                index[key] = index_entry_from_stat(st, sha, FILE_MODE)
                fixed.append(path)
        if fixed:
            self._write_index_object(index)
        self._clear_dirty()
        return fixed

    def _write_index_object(self, index: Any) -> None:
        """Write a dulwich ``Index`` as ``.git/index``: through the held ``index.lock``
        inside :meth:`index_locked` (recovery), else under its own."""
        held = self._held
        if held is None:
            with index_writing(self):
                index.write()
            return
        import io

        from dulwich.index import IndexChecksumWriter, write_index_dict
        out = io.BytesIO()
        writer = IndexChecksumWriter(out)
        write_index_dict(writer, dict(index.items()))
        writer.write_checksum()
        held.write([out.getvalue()])
        held.staged = ([out.getvalue()], None, {})
        held.keep()

    def rebuild_index_from_head(self) -> list[str]:
        """Write a new ``.git/index`` holding exactly HEAD's files; return the paths whose
        entry changed (added, removed, or naming another blob or mode).

        For an index :meth:`repair_index` cannot fix, because it keeps entries:
        one naming blobs that no longer exist (a purge or prune killed part-way),
        which ``git fsck`` reports as missing and ``git status`` shows as ``AD``.
        Each entry gets the working-tree file's stat when the file holds exactly
        HEAD's content (so ``git status`` trusts it), else a stat with no times,
        which makes git compare the content.  Staged changes not in HEAD are
        dropped from the index (the files on disk stay).  Caller holds the vault lock.
        """
        from dulwich.index import Index
        try:
            old = {path: (entry.sha, entry.mode) for path, entry in self.repo.open_index().iteritems()
                   if hasattr(entry, "sha")}
        except Exception:  # noqa: BLE001 - an unreadable index is replaced all the same
            old = {}
        index = Index(self.repo.index_path(), read=False)
        tree = self.tree_of(self.head())
        entries = [] if tree is None else list(self.repo.object_store.iter_tree_contents(tree))
        for entry in entries:
            if not (stat.S_ISREG(entry.mode) or stat.S_ISLNK(entry.mode)):
                continue  # submodules (gitlinks) are not vault content
            rel = entry.path.decode("utf-8", "surrogateescape")
            try:  # through the path gate: a link on the way is never followed
                st: os.stat_result | None = safefs.lstat(self.root, rel)
            except (OSError, GitmemError):
                st = None
            same = False
            if st is not None:
                try:
                    data = (os.readlink(self.root / rel).encode("utf-8", "surrogateescape")
                            if stat.S_ISLNK(st.st_mode) else safefs.read_bytes(self.root, rel))
                    same = Blob.from_string(data).id == entry.sha
                except (OSError, GitmemError):
                    same = False
            if st is None or not same:  # no times: git re-reads the file instead of trusting it
                st = os.stat_result((entry.mode, 0, 0, 0, 0, 0, st.st_size if st else 0, 0, 0, 0))
            index[entry.path] = index_entry_from_stat(st, entry.sha, entry.mode)
        new = {path: (e.sha, e.mode) for path, e in index.iteritems()}
        changed = sorted(p.decode("utf-8", "surrogateescape") for p in set(old) | set(new)
                         if old.get(p) != new.get(p))
        self._write_index_object(index)
        self._pending_index.clear()  # what this process committed is in HEAD, hence in the index
        self._clear_dirty()
        return changed


class _HeldIndex:
    """``.git/index.lock`` while a write holds it (:meth:`GitStore.index_locked`): the
    open lock file, the index as it stands for the branch's current commit, and what
    the write in progress staged into the lock file."""

    def __init__(self, path: Path, lock: Path, file: Any) -> None:
        self.path, self.lock, self.file = path, lock, file
        self.depth = 1
        self.layout: IndexLayout | None = None
        self.staged: tuple[list[bytes | memoryview], IndexLayout | None, dict[bytes, Any]] | None = None
        self.kept: tuple[list[bytes | memoryview], IndexLayout | None, dict[bytes, Any]] | None = None
        self.broken = False

    def current(self) -> bytes:
        """The index as it stands for the branch's commit (read at the first commit)."""
        if self.kept is None:
            return _read_index_file(self.path)
        pieces = self.kept[0]
        return pieces[0] if len(pieces) == 1 and isinstance(pieces[0], bytes) else b"".join(pieces)

    def write(self, pieces: Sequence[bytes | memoryview]) -> None:
        self.file.seek(0)
        self.file.truncate()
        self.file.writelines(pieces)
        self.file.flush()
        os.fsync(self.file.fileno())

    def keep(self) -> None:
        assert self.staged is not None
        pieces, layout, entries = self.staged
        if self.kept is not None:    # a second commit in one hold (a person's edit, then the write)
            entries = {**self.kept[2], **entries}
        self.kept, self.staged = (pieces, layout, entries), None
        self.layout = layout

    def commit(self) -> None:
        self.file.close()
        os.replace(self.lock, self.path)

    def abort(self) -> None:
        try:
            if not self.file.closed:
                self.file.close()   # (raises again when bytes it holds cannot be written: a full disk)
        except OSError:
            pass                    # closed all the same: the lock file must not outlive the write
        finally:
            self.lock.unlink(missing_ok=True)


RENAME_OP_TRAILER = "Op: rename"
DIRTY_MARK = "index-dirty"
INDEX_LAYOUT = "index-layout"     # where the entries of .git/index start (IndexLayout.save)


class IndexLayout(NamedTuple):
    """Where the entries of a ``.git/index`` file start, as the last splice wrote it."""
    trailer: bytes          # the file's SHA-1 trailer, which names its contents exactly
    starts: array           # offset of each entry, in file (name) order (typecode "q")
    entries_end: int        # offset just past the last entry

    _MAGIC = b"gitmem-index-layout-1\n"

    def save(self, path: Path) -> None:
        """Leave the layout for the next process that updates this ``.git/index`` (best
        effort: a cache, checked against the index's trailer when read)."""
        starts = self.starts
        if sys.byteorder == "big":      # (a copy only there: stored little-endian)
            starts = array("q", starts)
            starts.byteswap()
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(self._MAGIC + self.trailer + self.entries_end.to_bytes(8, "little")
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
        head = len(cls._MAGIC) + 28
        if not raw.startswith(cls._MAGIC) or len(raw) < head or (len(raw) - head) % 8:
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


def _splice_index(path: Path, entries: Mapping[bytes, tuple[bytes, os.stat_result] | None],
                  layout: IndexLayout | None = None,
                  shared: Path | None = None) -> IndexLayout | None:
    """Set (or, for None, remove) these entries of the ``.git/index`` at ``path`` by
    rewriting its bytes around them (:func:`_spliced`), under git's ``index.lock``; the
    new file's layout, or None (nothing written) for an index that does not handle.
    The new layout is saved at ``shared``."""
    from dulwich.file import GitFile
    data = _read_index_file(path)
    spliced = _spliced(data, entries, layout, shared)
    if spliced is None:
        return None
    pieces, done = spliced
    with GitFile(str(path), "wb") as f:   # index.lock, renamed over the index when complete
        f.writelines(pieces)
    if shared is not None:
        done.save(shared)
    return done


def _spliced(data: bytes, entries: Mapping[bytes, tuple[bytes, os.stat_result] | None],
             layout: IndexLayout | None = None, shared: Path | None = None
             ) -> tuple[list[bytes | memoryview], IndexLayout] | None:
    """The bytes of the ``.git/index`` file ``data`` with these entries set (or, for None,
    removed), as pieces to write one after the other (the last is the SHA-1 trailer), and
    the new file's layout; None for an index this does not handle: not version 2 or 3,
    an entry with extended flags or a merge stage, or an extension git requires (split
    index).  Optional extensions describing the entries (the cached trees, the untracked
    cache ...) are left out, as git allows; git rebuilds them.

    The entries' offsets are taken from ``layout`` when the file is still the one it
    describes (same SHA-1 trailer: nobody, git included, rewrote it since), else from
    the layout saved at ``shared`` by the last gitmem process that spliced it, else
    read (one step per entry, ~60 ms at 100k files).  The names looked for are found by
    binary search (git keeps entries sorted by name), and the new file is the old bytes
    cut and joined around them, without copying them."""
    import bisect
    import hashlib
    import struct
    if len(data) < 32 or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack_from(">LL", data, 4)
    if version not in (2, 3):
        return None
    if (layout is None or not layout.fits(data, count)) and shared is not None:
        layout = IndexLayout.load(shared)
    if layout is not None and layout.fits(data, count):
        starts, entries_end = layout.starts, layout.entries_end
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
    digest = hashlib.sha1()
    for piece in pieces:
        digest.update(piece)
    trailer = digest.digest()
    return [*pieces, trailer], IndexLayout(trailer, new_starts, entries_end + shift)


def _read_index_file(path: Path) -> bytes:
    """The bytes of the ``.git/index`` at ``path``; an empty index's when there is none."""
    import hashlib
    import struct
    try:
        return path.read_bytes()
    except FileNotFoundError:
        data = b"DIRC" + struct.pack(">LL", 2, 0)
        return data + hashlib.sha1(data).digest()


def _rewritten(data: bytes, entries: Mapping[bytes, tuple[bytes, os.stat_result] | None]) -> bytes:
    """The ``.git/index`` file ``data`` with these entries set (None: removed), read and
    written whole by dulwich: for an index :func:`_spliced` does not handle (version 4,
    extended flags, a merge conflict).  A path set here loses its conflict stages, as
    ``git add`` of a resolved file does; optional extensions are left out."""
    import io

    from dulwich.index import IndexChecksumReader, IndexChecksumWriter, read_index_dict_with_version, write_index_dict
    old, version, _ = read_index_dict_with_version(IndexChecksumReader(io.BytesIO(data)))
    for path, value in entries.items():
        if value is None:
            old.pop(path, None)
        else:
            old[path] = index_entry_from_stat(value[1], value[0], FILE_MODE)
    out = io.BytesIO()
    writer = IndexChecksumWriter(out)
    write_index_dict(writer, old, version=version)
    writer.write_checksum()
    return out.getvalue()


def _read_layout(data: bytes, count: int) -> tuple[array, int] | None:
    """(offset of each entry, offset past the last entry) of a version 2 or 3 index's
    bytes, or None when :func:`_splice_index` does not handle it."""
    import struct
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


def _new_commit(tree: bytes, parents: list[bytes], message: str, author: Identity,
                committer: Identity | None, when: float) -> Commit:
    commit = Commit()
    commit.tree = tree
    commit.parents = parents
    commit.author = author.as_bytes()
    commit.committer = (committer or author).as_bytes()
    commit.author_time = commit.commit_time = int(when)
    commit.author_timezone = commit.commit_timezone = 0
    commit.encoding = b"UTF-8"
    commit.message = message.encode("utf-8")
    return commit


_ANY = object()


def _holds(want: str | None) -> Callable[[bytes | None], bool]:
    return lambda data: (None if data is None else Blob.from_string(data).id.decode()) == want


def _changed_on_disk(path: str) -> Conflict:
    return Conflict(f"{path} changed on disk while gitmem was writing it; it was not overwritten",
                    code="changed_on_disk", hint="Retry: the new text is committed first.", path=path)


def _changed_since(path: str, data: bytes | None, want: str | None) -> None:
    if not _holds(want)(data):
        raise _changed_on_disk(path)


def _without_times(st: os.stat_result) -> os.stat_result:
    """``st`` with every time zero: git does not trust such an index entry's stat and
    compares the file's content instead."""
    return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid,
                           st.st_size, 0, 0, 0, 0.0, 0.0, 0.0, 0, 0, 0))


def _lstat_or_none(root: Path, rel: str) -> os.stat_result | None:
    try:
        return safefs.lstat(root, rel)
    except (OSError, GitmemError):
        return None


def _apply_tree_changes(store: object, tree: bytes | Tree,
                        changes: Sequence[tuple[bytes, int | None, bytes | None]]) -> bytes:
    """Apply (path, mode, sha|None) changes to a tree; store only the new trees.

    Like dulwich's ``commit_tree_changes``, but a folder emptied by the change
    is dropped without first being written as an (empty, dangling) tree, so
    ``git fsck`` stays silent.  Only trees on the changed paths are rewritten.
    """
    if isinstance(tree, Tree):
        tree_obj = tree
    else:
        # A copy: the loaded tree may be an object another step of this write already
        # holds (its pending trees, a store's cache); changing it in place would change
        # the tree that step stored under its old id.
        tree_obj = Tree.from_string(store[tree].as_raw_string())  # type: ignore[index]
    nested: dict[bytes, list[tuple[bytes, int | None, bytes | None]]] = {}
    for path, mode, sha in changes:
        head, sep, rest = path.partition(b"/")
        if not sep:
            if sha is None:
                if head in tree_obj:
                    del tree_obj[head]
            else:
                tree_obj[head] = (mode, sha)
        else:
            nested.setdefault(head, []).append((rest, mode, sha))
    for name, sub in nested.items():
        try:
            child: bytes | Tree = tree_obj[name][1]
        except KeyError:
            child = Tree()
        child_id = _apply_tree_changes(store, child, sub)
        if child_id == _EMPTY_TREE:
            if name in tree_obj:
                del tree_obj[name]
        else:
            tree_obj[name] = (stat.S_IFDIR, child_id)
    if len(tree_obj) == 0:
        return _EMPTY_TREE
    store.add_object(tree_obj)  # type: ignore[attr-defined]
    return tree_obj.id


_EMPTY_TREE = Tree().id


def _same_mtime(entry: object, st: os.stat_result) -> bool:
    mtime = getattr(entry, "mtime", None)
    if isinstance(mtime, tuple):
        return mtime[0] == int(st.st_mtime) and mtime[1] == st.st_mtime_ns % 1_000_000_000
    return mtime == st.st_mtime

