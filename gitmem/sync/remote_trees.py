"""Checking what a git remote sends before any of it is written.

:func:`check_incoming_trees` walks the trees of incoming commits (each against
its parents, so the cost follows what arrives) through the path gate
(:mod:`gitmem.safefs`): unsafe names, symbolic links, submodules and malformed
objects raise :class:`~gitmem.errors.UnsafeRemoteTree` naming the entry.
"""

from __future__ import annotations

import stat
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..errors import InvalidPath, UnsafePath, UnsafeRemoteTree

if TYPE_CHECKING:  # pragma: no cover
    from dulwich.repo import Repo

__all__ = ["check_incoming_trees", "all_commits", "object_of", "short", "MAX_TREE_PATH_BYTES"]

# Longest path gitmem writes from a remote's tree (deep nesting would fail later, half-way).
MAX_TREE_PATH_BYTES = 4096


def check_incoming_trees(repo: Repo, commits: list[bytes]) -> dict[bytes, tuple[str, bytes]]:
    """Check every tree entry ``commits`` add or change, before any is written.

    Each commit's tree is compared with its parents' trees; an entry equal to
    the same entry of a parent was checked with that parent (which arrived with
    it, or is already ours), so only what changed is read.  Each name must pass
    :func:`safefs.check_component` (per entry, so a ``/`` inside one name is
    seen), each file :func:`safefs.check_tree_entry` (no symbolic link, no
    submodule) and be a regular file holding a blob.  Returns each new blob:
    {blob sha: (path, commit that brought it)}.  Raises :class:`UnsafeRemoteTree`.
    """
    from dulwich.objects import Blob, Commit, ObjectID, Tree
    store = repo.object_store
    blobs: dict[bytes, tuple[str, bytes]] = {}
    for commit_id in commits:
        commit = object_of(store, commit_id, Commit, commit_id, "commit")
        parents = []
        for parent in commit.parents:
            try:
                parents.append(object_of(store, parent, Commit, commit_id, "commit").tree)
            except UnsafeRemoteTree:
                continue  # a shallow or incomplete parent: check this tree in full
        stack: list[tuple[bytes, bytes, list[bytes]]] = [(b"", commit.tree, parents)]
        while stack:
            prefix, tree_id, old_ids = stack.pop()
            tree = object_of(store, tree_id, Tree, commit_id, prefix.decode("utf-8", "backslashreplace") or "/")
            olds = [t for t in (store[ObjectID(o)] for o in old_ids) if isinstance(t, Tree)]
            for entry in tree.iteritems():
                name, mode, sha = entry.path, entry.mode, entry.sha
                if any(name in old and old[name] == (mode, sha) for old in olds):
                    continue
                full = prefix + name
                shown = full.decode("utf-8", "backslashreplace")
                try:
                    safefs.check_component(name, path=shown)
                    if len(full) > MAX_TREE_PATH_BYTES:
                        raise InvalidPath(f"path {shown[:80]!r}... is longer than {MAX_TREE_PATH_BYTES} bytes")
                    if not stat.S_ISDIR(mode):
                        safefs.check_tree_entry(full, mode)
                        if not stat.S_ISREG(mode):
                            raise UnsafePath(f"{shown!r} has mode {mode:o}, which is not a plain file")
                except InvalidPath as exc:
                    raise UnsafeRemoteTree(
                        f"the remote's commit {commit_id.decode()[:7]} holds {short(shown)!r}, which gitmem "
                        f"will not write into a vault: {exc.message}",
                        entry=shown, reason=exc.message, commit=commit_id.decode()) from None
                if stat.S_ISDIR(mode):
                    subs = [old[name][1] for old in olds if name in old and stat.S_ISDIR(old[name][0])]
                    stack.append((full + b"/", sha, [s for s in subs if isinstance(store[ObjectID(s)], Tree)]))
                else:
                    object_of(store, sha, Blob, commit_id, shown)
                    blobs.setdefault(sha, (shown, commit_id))
    return blobs


def object_of(store: Any, sha: bytes, kind: type, commit_id: bytes, what: str) -> Any:
    """The object ``sha`` of type ``kind``, or :class:`UnsafeRemoteTree` (missing, or
    another type than its tree entry says)."""
    try:
        obj = store[sha]
    except KeyError:
        obj = None
    if not isinstance(obj, kind):
        shown = short(what)
        raise UnsafeRemoteTree(
            f"the remote's commit {commit_id.decode()[:7]} is malformed at {shown!r}: "
            f"{'missing object' if obj is None else 'wrong object type'} {sha.decode()[:12]}",
            entry=shown, reason="malformed", commit=commit_id.decode())
    return obj


def short(text: str) -> str:
    """``text`` cut to at most 120 characters for a message."""
    return text if len(text) <= 120 else text[:117] + "..."


def all_commits(repo: Repo) -> list[bytes]:
    """Every commit reachable from any ref of a fresh clone (tags peeled)."""
    from dulwich.objects import Commit, Tag
    heads = set()
    for sha in repo.get_refs().values():
        try:
            obj = repo[sha]
            while isinstance(obj, Tag):
                obj = repo[obj.object[1]]
        except KeyError:
            continue
        if isinstance(obj, Commit):
            heads.add(obj.id)
    if not heads:
        return []
    return [entry.commit.id for entry in repo.get_walker(include=sorted(heads))]
