"""The vault's repository and its commits: reading trees and blobs, and making the
commit of every write and the fast-forward of every sync, with dulwich (no git
binary needed).

It is not the only module that uses dulwich: ``.git/index`` has its own
(:mod:`gitmem.store.git_index`), and so do crash recovery, packing
(``housekeeping.py``), remotes and sync, purge and the history view; others
only catch dulwich's ``FileLocked`` (git holding a lock).

A write is one commit (after a pure-rename commit when it moves files and
changes their text, see :meth:`GitStore.commit_files`), built straight from the
object store (blob -> tree changes -> commit -> compare-and-swap of the branch
ref), which costs a few milliseconds whatever the vault size, instead of
``porcelain.add`` which re-reads and re-writes the whole ``.git/index``.

Order of a write, all under the vault lock and git's own ``.git/index.lock``
(taken first, as git's commands do; a write waits while a git command holds it):

1. objects (blobs, trees, commit) are written and fsynced
   (``core.fsyncObjectFiles=true``);
2. working-tree files are replaced atomically (temp file + fsync + rename);
3. the new ``.git/index`` is written into ``index.lock`` (only the entries the
   write changed, spliced into the old bytes: :mod:`gitmem.store.git_index`);
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
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any, Literal, Protocol

from dulwich.diff_tree import tree_changes
from dulwich.errors import MissingCommitError, NotGitRepository
from dulwich.file import FileLocked
from dulwich.objects import Blob, Commit, ObjectID, Tree
from dulwich.refs import Ref
from dulwich.repo import Repo, get_user_identity

from .. import safefs
from ..config import Identity
from ..errors import BranchMoved, Conflict, GitmemError, NotAVault, RevisionNotFound, StorageError
from .branch import REF_LOCK_TIMEOUT, move_branch
from .changes import FileChange
from .git_index import FILE_MODE, GitIndex, lstat_or_none
from .housekeeping import EXIT_THRESHOLD, LOOSE_THRESHOLD, Housekeeper, HousekeepingReport, run_in_child
from .recovery import PendingObjects, begin_write, drop_objects, end_write

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

    def identity(self, author: Identity, committer: Identity | None) -> None:
        """Raise if a commit may not carry this author or committer."""


BRANCH = Ref(b"refs/heads/main")
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
        self._commit_trees: dict[bytes, ObjectID] = {}  # commit sha -> its tree sha
        # .git/index: the lock every write holds, the entries it stages (git_index.py)
        self.git_index = GitIndex(self)
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
    def person(self) -> Identity | None:
        """The person using this machine, as git names them: ``GIT_AUTHOR_NAME`` (and
        ``GIT_AUTHOR_EMAIL``), else ``user.name`` and ``user.email`` from the repository's
        and the user's git config; None when neither names anyone (or the name is not one
        a commit can hold)."""
        config = self.repo.get_config_stack()

        def configured(key: bytes) -> str:
            try:
                return config.get((b"user",), key).decode("utf-8", "replace").strip()
            except KeyError:
                return ""
        name = os.environ.get("GIT_AUTHOR_NAME", "").strip() or configured(b"name")
        if not name:
            return None
        email = os.environ.get("GIT_AUTHOR_EMAIL", "").strip() or configured(b"email") or "user@localhost"
        try:
            return Identity.checked(name, email, "git's user")
        except GitmemError:
            return None

    def head(self) -> bytes | None:
        """The sha of HEAD's commit, or None on an unborn branch."""
        try:
            return self.repo.refs[Ref(b"HEAD")]
        except KeyError:
            return None

    def head_ref(self) -> Ref:
        """The branch HEAD points at (``refs/heads/main`` usually)."""
        chain, _ = self.repo.refs.follow(Ref(b"HEAD"))
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
        if len(text) == 40 and ObjectID(text.encode()) in self.repo.object_store:
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

    def tree_of(self, commit_sha: bytes | None) -> ObjectID | None:
        """The tree of a commit (None for None)."""
        if commit_sha is None:
            return None
        tree = self._commit_trees.get(commit_sha)
        if tree is None:
            if len(self._commit_trees) > 512:
                self._commit_trees.clear()
            tree = self._commit_trees[commit_sha] = self.commit(commit_sha).tree
        return tree

    def tree_object(self, sha: bytes) -> Tree | None:
        """The tree ``sha`` (None for another kind of object), parsed once: a write looks
        up the same few trees several times (its checks, the person-edit guard), and a
        git object never changes.  Callers must not modify what they get."""
        tree = self._trees.get(sha)
        if tree is None:
            obj = self.repo.object_store[ObjectID(sha)]
            if not isinstance(obj, Tree):
                return None
            if len(self._trees) > 512:
                self._trees.clear()
            tree = self._trees[sha] = obj
        return tree

    def _subtree(self, commit_sha: bytes | None, parts: Sequence[bytes]) -> Tree | None:
        tree_sha = self.tree_of(commit_sha)
        tree = self.tree_object(tree_sha) if tree_sha is not None else None
        for part in parts:
            if tree is None or part not in tree:
                return None
            mode, sha = tree[part]
            tree = self.tree_object(sha) if stat.S_ISDIR(mode) else None
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
        """Commits reachable from ``new_tip`` but not ``old_tip``, oldest first.  Raises
        :class:`KeyError` when either is a commit this clone does not have (a ref left
        pointing at history a purge removed)."""
        try:
            walker = self.repo.get_walker(include=[ObjectID(new_tip)],
                                          exclude=[ObjectID(old_tip)] if old_tip else None, order="topo")
            commits: list[bytes] = [entry.commit.id for entry in walker]
        except MissingCommitError as exc:
            raise KeyError(str(exc)) from None
        return commits[::-1]

    def is_ancestor(self, ancestor: bytes, descendant: bytes) -> bool:
        """True when ``ancestor`` is reachable from ``descendant``."""
        if ObjectID(ancestor) not in self.repo.object_store:
            return False
        from dulwich.graph import can_fast_forward
        return bool(can_fast_forward(self.repo, ObjectID(ancestor), ObjectID(descendant)))

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
            self.checks.identity(author, committer)
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
            applied = iter(self._apply_to_worktree([c for c, w in zip(changes, writes, strict=True) if w], generated,
                                                   expected or {}))
        except (StorageError, Conflict):  # the files were put back: this write did not happen
            # Objects first, then the journal: housekeeping leaves the objects the
            # journal names loose, so none of these can end up in a pack.
            drop_objects(self, new_ids)  # stored for nothing: no ref will ever reach them
            end_write(self)
            raise
        # One (path, old bytes, new stat) per change, in order (_index_entries zips them).
        backups = [next(applied) if w else
                   (c.path, None, lstat_or_none(self.root, c.path) if c.data is not None else None)
                   for c, w in zip(changes, writes, strict=True)]
        try:
            # The new .git/index goes into index.lock first (a full disk stops the write here).
            self.git_index.stage(self.git_index.entries_of(changes, blob_ids, backups, writes),
                                 before=self.tree_of(parent), after=new_tree)
            ok = self._move_branch(ref, parent, commit.id, f"commit: {message.splitlines()[0]}".encode(),
                                   commit.committer, commit.commit_time, commit.commit_timezone)
            if not ok:
                raise BranchMoved("the vault's branch moved during the write (another git process?)")
        except BaseException as exc:
            self.git_index.drop_staged()
            self._restore_worktree([b for b, w in zip(backups, writes, strict=True) if w])
            end_write(self)
            if isinstance(exc, Conflict):
                raise
            if isinstance(exc, OSError):   # (the branch's lock file is gone: move_branch)
                raise StorageError(f"could not update the branch or .git/index: {exc}") from exc
            raise
        self.git_index.keep_staged()
        end_write(self)
        return commit.id

    def _move_branch(self, ref: bytes, old: bytes | None, new: bytes, message: bytes, who: bytes,
                     when: int, tz: int) -> bool:
        """Move the branch, publishing the staged ``.git/index`` inside git's lock on it
        (:mod:`gitmem.store.branch`).  False when the branch no longer holds ``old``."""
        try:
            return move_branch(self.repo, ref, old, new, message=message, who=who, when=when, tz=tz,
                               publish=self.git_index.publish_staged)
        except FileLocked:
            raise BranchMoved(f"another git command held the lock on {ref.decode()} for over "
                              f"{REF_LOCK_TIMEOUT:.0f}s") from None

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
            self.git_index.stage(self.git_index.entries_of(changes, blob_ids, backups, [True] * len(changes)),
                                 before=self.tree_of(old), after=self.tree_of(new))
            who = get_user_identity(self.repo.get_config_stack())
            if not self._move_branch(self.head_ref(), old, new, reason.encode("utf-8"), who, int(time.time()), 0):
                raise BranchMoved("the vault's branch moved during the sync (another git process?)",
                                  hint="Sync again; nothing was changed.")
        except BaseException as exc:
            self.git_index.drop_staged()
            self._restore_worktree(backups)
            end_write(self)
            if isinstance(exc, OSError):
                raise StorageError(f"could not update the branch or .git/index: {exc}") from exc
            raise
        self.git_index.keep_staged()
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
                checked = expected is not None and change.path in expected
                want = expected[change.path] if expected is not None and checked else None
                if checked:
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
                                            expect=_holds(want) if checked else None, durable=durable)
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
    # Kept in line with every commit by :class:`~gitmem.store.git_index.GitIndex`
    # (``self.git_index``); these are the parts the vault, recovery and doctor use.
    def index_locked(self) -> AbstractContextManager[None]:
        """Hold ``.git/index.lock`` for a ``with`` block (re-entrant; see
        :meth:`GitIndex.locked <gitmem.store.git_index.GitIndex.locked>`).  Caller holds
        the vault lock."""
        return self.git_index.locked()

    @property
    def index_lock_timeout(self) -> float:
        """Seconds a write waits for a git command to release ``.git/index.lock``."""
        return self.git_index.lock_timeout

    @index_lock_timeout.setter
    def index_lock_timeout(self, seconds: float) -> None:
        self.git_index.lock_timeout = seconds

    def index_lock_is_gitmems(self) -> bool:
        """True while a gitmem process holds ``.git/index.lock`` for a write, rather than
        a git command."""
        return self.git_index.lock_is_gitmems()

    @property
    def index_pending(self) -> int:
        """How many ``.git/index`` entries this process committed and has not written yet."""
        return len(self.git_index.pending)

    def flush_index(self) -> bool:
        """Write the pending ``.git/index`` entries; True when none is left
        (:meth:`GitIndex.flush <gitmem.store.git_index.GitIndex.flush>`)."""
        return self.git_index.flush()

    def index_dirty(self) -> bool:
        """True if ``.git/index`` may lag HEAD because of a process that is gone."""
        return self.git_index.dirty()

    def mark_index_dirty(self) -> None:
        """Leave ``.git/index`` to be repaired by the next process that opens the vault."""
        self.git_index.mark_dirty()

    def repair_index(self) -> list[str]:
        """Make ``.git/index`` match HEAD for every file whose content matches HEAD; the
        paths fixed (:meth:`GitIndex.repair <gitmem.store.git_index.GitIndex.repair>`)."""
        return self.git_index.repair()

    def rebuild_index_from_head(self) -> list[str]:
        """Write a new ``.git/index`` holding exactly HEAD's files; the paths whose entry
        changed (:meth:`GitIndex.rebuild_from_head
        <gitmem.store.git_index.GitIndex.rebuild_from_head>`).  Caller holds the vault lock."""
        return self.git_index.rebuild_from_head()

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

RENAME_OP_TRAILER = "Op: rename"


def _new_commit(tree: bytes, parents: list[bytes], message: str, author: Identity,
                committer: Identity | None, when: float) -> Commit:
    commit = Commit()
    commit.tree = ObjectID(tree)
    commit.parents = [ObjectID(p) for p in parents]
    commit.author = author.as_bytes()
    commit.committer = (committer or author).as_bytes()
    commit.author_time = commit.commit_time = int(when)
    commit.author_timezone = commit.commit_timezone = 0
    commit.encoding = b"UTF-8"
    commit.message = message.encode("utf-8")
    return commit


def _holds(want: str | None) -> Callable[[bytes | None], bool]:
    return lambda data: (None if data is None else Blob.from_string(data).id.decode()) == want


def _changed_on_disk(path: str) -> Conflict:
    return Conflict(f"{path} changed on disk while gitmem was writing it; it was not overwritten",
                    code="changed_on_disk", hint="Retry: the new text is committed first.", path=path)


def _changed_since(path: str, data: bytes | None, want: str | None) -> None:
    if not _holds(want)(data):
        raise _changed_on_disk(path)


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
                assert mode is not None, "a file set by a change has a mode"
                tree_obj[head] = (mode, ObjectID(sha))
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
            tree_obj[name] = (stat.S_IFDIR, ObjectID(child_id))
    if len(tree_obj) == 0:
        return _EMPTY_TREE
    store.add_object(tree_obj)  # type: ignore[attr-defined]
    return tree_obj.id


_EMPTY_TREE = Tree().id

