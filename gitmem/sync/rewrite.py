"""Rewriting history without some memories: the engine of ``gitmem purge`` and of
the tombstones a sync applies (:mod:`gitmem.sync.forget`).

:class:`Rewriter` rewrites every commit reachable from the refs, oldest first,
building the new objects in memory.  From each tree it removes every file that
holds a purged memory: a version carrying its id (wherever it is), a version
without an id at one of its paths, any file byte-identical to a removed version
(``blobs``: the blob ids a tombstone names), and every **sync conflict copy** of
it (a file whose ``conflict_of`` names a purged id, or a conflict copy whose body
is the body of a removed version; a copy's own copies go too).  Their lines are
removed from each version of ``MEMORY.md``; titles, paths, ids and ``Memory-Id:``
trailers are scrubbed from commit and tag messages; a commit left with no change
of its own is dropped, and so is a merge left joining a commit to one of its own
ancestors (what a sync's merge of the old history becomes); all other commits
keep their author, committer, dates and message (signatures are dropped: they
would no longer verify).  A commit a tombstone already maps (``known``: old
commit -> the commit another clone rewrote it to) becomes that commit when it
is here and holds the same files as our own rewrite would, so every clone
ends on the same commits.  ``refs/notes/*`` histories are rewritten too: a note
holding purged text (an id, title or path, or 16 consecutive characters of a
removed version's body) or annotating a dropped commit or a removed blob is
dropped; a note on a rewritten commit follows it.

:func:`plan` turns the rewrite into a journal record (ref moves, working-tree
changes, old commits); :func:`execute` stores the new objects as one pack and
runs the steps, each recorded in the journal (``.git/gitmem/purge-journal``)
before it runs and each idempotent: move the refs (only from their old value),
update the working tree (never over a person's later edit) and rebuild
``.git/index`` from HEAD, delete the reflogs and prune every unreachable object
(``dulwich.gc``), rebuild the catalog, search index, as-of index and vectors.  A
process killed at any point is finished by the next one that takes the vault
lock (:func:`recover_purge`), or rolled back when it was killed before its
objects were all stored (no ref had moved).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from dulwich.object_store import iter_tree_contents
from dulwich.objects import Blob, Commit, ObjectID, Tag, Tree
from dulwich.refs import Ref

from .. import safefs
from ..errors import StorageError, UnsafePath
from ..memory.markdown import decode, parse_text
from ..memory.paths import MEMORY_MD
from ..search.vectors import forget_removed
from ..store.catalog import id_from_blob
from ..store.git import blob_id
from ..store.housekeeping import LOCK_WAIT, REPACK_LOCK
from ..store.locking import try_flock
from ..store.purged import PURGE_JOURNAL, record_purged
from ..store.recovery import PendingObjects, needs_recovery, recover
from ..write.memory_md import render_memory_md

if TYPE_CHECKING:  # pragma: no cover
    from dulwich.pack import ObjectContainer

    from ..ops.history import History
    from ..search.service import SearchService
    from ..store.reader import Reader
    from ..store.storage import Storage
    from ..write.memory_md import MemoryMd
    from ..write.pipeline import WritePipeline

__all__ = ["Parts", "PurgeReport", "Rewriter", "history_of", "plan", "execute", "recover_purge",
           "forget_old_objects", "forget_in_state", "JOURNAL", "TOMBSTONE_REF", "NEXT_SYNC",
           "VIEW_PAGE"]

JOURNAL = PURGE_JOURNAL
#: Where the tombstones live (never rewritten by a purge; see :mod:`gitmem.sync.forget`).
TOMBSTONE_REF = b"refs/gitmem/purged"
# The steps after the (in-memory) rewrite, in order; the journal names the one reached.
STEPS = ("objects", "refs", "worktree", "gc", "caches")
#: The HTML history view's default page in ``.git/gitmem`` (``gitmem.exchange.view.DEFAULT_PAGE``,
#: a layer above this one): it shows old versions, so a rewrite deletes it.
VIEW_PAGE = "view.html"
_NOTES = b"refs/notes/"
_GITMEM_REFS = b"refs/gitmem/"
_EMPTY_TREE = Tree().id
_CONFLICT_OF = re.compile(rb"(?m)^conflict_of:[ \t]*['\"]?([^'\"\s]+)")
# A note sharing this many consecutive characters with a removed version holds its text;
# shorter runs are too often common words.
_FRAGMENT = 16


class Parts(Protocol):
    """The services a rewrite uses (a vault's ``Services`` and a ``Syncer`` both have them)."""

    store: Storage
    reader: Reader
    pipeline: WritePipeline
    memory_md: MemoryMd
    searcher: SearchService
    history: History


@dataclass
class PurgeReport:
    """What a purge did (its receipt): the rewritten range, the objects removed,
    and the tombstone that carries it to remotes and other clones."""

    id: str
    paths: list[str]
    commits_rewritten: int = 0
    commits_dropped: int = 0
    refs_updated: list[str] = field(default_factory=list)
    objects_pruned: int = 0
    old_head: str | None = None
    new_head: str | None = None
    conflict_copies: list[str] = field(default_factory=list)
    notes_dropped: int = 0
    memory_index_regenerated: bool = False
    tombstone: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {"id": self.id, "paths": self.paths, "commits_rewritten": self.commits_rewritten,
                "commits_dropped": self.commits_dropped, "refs_updated": self.refs_updated,
                "objects_pruned": self.objects_pruned, "old_head": self.old_head,
                "new_head": self.new_head, "conflict_copies": self.conflict_copies,
                "notes_dropped": self.notes_dropped,
                "memory_index_regenerated": self.memory_index_regenerated,
                "tombstone": self.tombstone,
                "next_sync": NEXT_SYNC}


#: What happens next, for the receipt.
NEXT_SYNC = ("The next gitmem sync rewrites each remote's branch (only if it is still where this "
             "clone last saw it) and every other clone forgets the memory when it syncs.")


def _body(data: bytes) -> str:
    """A memory file's text after its frontmatter, stripped (what a conflict copy keeps)."""
    text = data.decode("utf-8", "replace")
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            newline = text.find("\n", end + 4)
            text = text[newline + 1:] if newline != -1 else ""
    return text.strip()


def _pieces(text: str) -> set[str]:
    """Every run of ``_FRAGMENT`` characters of ``text``, whitespace collapsed."""
    flat = " ".join(text.split())
    return {flat[i:i + _FRAGMENT] for i in range(max(0, len(flat) - _FRAGMENT + 1))}


def _frontmatter_field(pattern: re.Pattern[bytes], data: bytes) -> str | None:
    if not data.startswith(b"---"):
        return None
    end = data.find(b"\n---", 3)
    match = pattern.search(data[: end if end != -1 else 4096])
    return match.group(1).decode("utf-8", "replace").strip() if match else None


class Rewriter:
    """Rewrites trees, blobs, commits and notes without some memories; caches per object id.

    ``memory_id`` (and ``also``: more ids, e.g. every tombstone a sync applies),
    their known ``paths`` and ``titles``; ``blobs``: file versions to remove
    wherever they are; ``known``: old commit -> the commit another clone
    rewrote it to (None: dropped).  New objects go to ``self.pending`` (in
    memory) until the journal is written.
    """

    def __init__(self, services: Parts, memory_id: str, paths: set[str], titles: set[str], *,
                 also: Iterable[str] = (), blobs: Iterable[bytes] = (),
                 known: dict[bytes, bytes | None] | None = None) -> None:
        self.services = services
        self.pending = PendingObjects(services.store.git.repo.object_store)
        self.id = memory_id
        self.ids = {memory_id, *also}     # grows with the conflict copies found
        self.known = dict(known or {})
        self.seeded_blobs = set(blobs)
        self.copies: set[str] = set()
        self.paths = set(paths)           # the memory's known paths (id-less versions there go)
        self.removed_paths: set[str] = set()
        self.stems = {p.rsplit("/", 1)[-1][:-3] for p in paths if p.endswith(".md")}
        self.titles = {t for t in titles if len(t) >= 3}
        self.purged_blobs: set[bytes] = set(self.seeded_blobs)
        self.bodies: set[str] = set()     # stripped bodies of removed versions
        self.blob_info: dict[bytes, tuple[str | None, str | None, str]] = {}
        self.trees: dict[tuple[bytes, str], ObjectID] = {}
        self.index_blobs: dict[tuple[bytes, int], ObjectID] = {}
        self.new_trees: dict[bytes, ObjectID] = {}
        self.commits: dict[ObjectID, ObjectID | None] = {}
        self.dropped_commits: set[bytes] = set()
        self.notes_trees: dict[bytes, ObjectID] = {}
        self.note_verdicts: dict[bytes, bool] = {}
        self.fragments: set[str] | None = None  # of the removed bodies, once all are known
        self.notes_dropped: set[tuple[bytes, bytes]] = set()  # (annotated object, note blob)
        self.rewritten = self.dropped = 0

    # ------------------------------------------------------------- blobs
    def _info(self, sha: bytes) -> tuple[str | None, str | None, str]:
        """(id, conflict_of, body) of a blob, read once."""
        info = self.blob_info.get(sha)
        if info is None:
            data = self.pending[sha].as_raw_string()
            info = (id_from_blob(data), _frontmatter_field(_CONFLICT_OF, data), _body(data))
            self.blob_info[sha] = info
        return info

    def is_purged(self, sha: bytes, path: str) -> bool:
        """True when the file ``path`` holding blob ``sha`` must leave history."""
        if sha in self.purged_blobs:
            return True
        found, conflict_of, body = self._info(sha)
        if found is not None and found in self.ids:
            purged = True
        elif found is None:
            purged = path in self.paths
        else:  # another memory: only a sync conflict copy of a purged one goes
            purged = conflict_of is not None and (conflict_of in self.ids or (bool(body) and body in self.bodies))
            if purged:
                self.ids.add(found)
                self.copies.add(found)
        if purged:
            self.purged_blobs.add(sha)
            self.removed_paths.add(path)
            if body:
                self.bodies.add(body)
            if path.endswith(".md"):
                self.stems.add(path.rsplit("/", 1)[-1][:-3])
        return purged

    def _index_blob(self, sha: ObjectID) -> ObjectID:
        """``MEMORY.md`` without the lines of removed files (cached per version and stem count)."""
        key = (sha, len(self.stems))
        if key not in self.index_blobs:
            old = self.pending[sha].as_raw_string()
            lines = old.decode("utf-8", "replace").splitlines(keepends=True)
            keep = [line for line in lines
                    if not any(line.startswith((f"- [[{stem}|", f"- [[{stem}]]")) for stem in self.stems)]
            new = "".join(keep).encode("utf-8")
            if new == old:
                self.index_blobs[key] = sha
            else:
                blob = Blob.from_string(new)
                self.pending.add_object(blob)
                self.index_blobs[key] = blob.id
        return self.index_blobs[key]

    # ------------------------------------------------------------- trees
    def tree(self, tree_id: ObjectID, prefix: str = "") -> ObjectID:
        """The tree without the purged files (``_EMPTY_TREE`` when nothing is left)."""
        key = (tree_id, prefix)
        if key in self.trees:
            return self.trees[key]
        old: Tree = self.pending[tree_id]
        entries = list(old.iteritems())
        # MEMORY.md last: the files beside it may reveal conflict copies whose lines it lists.
        entries.sort(key=lambda e: not prefix and e.path == MEMORY_MD.encode())
        new = Tree()
        changed = False
        for entry in entries:
            name, mode, sha = entry.path, entry.mode, entry.sha
            path = prefix + name.decode("utf-8", "surrogateescape")
            if stat.S_ISDIR(mode):
                sub = self.tree(sha, path + "/")
                if sub != sha:
                    changed = True
                    if sub == _EMPTY_TREE:
                        continue  # a folder emptied by the purge goes, as git would have it
                new.add(name, mode, sub)
            elif stat.S_ISREG(mode) and not prefix and path == MEMORY_MD:
                sub = self._index_blob(sha)
                changed = changed or sub != sha
                new.add(name, mode, sub)
            elif stat.S_ISREG(mode) and self.is_purged(sha, path):
                changed = True
            else:
                new.add(name, mode, sha)
        if not changed:
            result = tree_id
        elif len(new) == 0:
            result = _EMPTY_TREE
        else:
            self.pending.add_object(new)
            result = new.id
        self.trees[key] = result
        return result

    def _same_files(self, a: bytes, b: bytes) -> bool:
        """Trees equal apart from the generated MEMORY.md."""
        if a == b:
            return True
        if b == _EMPTY_TREE or a == _EMPTY_TREE:
            return False
        rest = [[e for e in self.pending[t].items() if e.path != MEMORY_MD.encode()] for t in (a, b)]
        return rest[0] == rest[1]

    # ------------------------------------------------------------- commits
    def message(self, text: bytes) -> bytes:
        """A commit or tag message without the purged ids, paths and titles."""
        msg = text.decode("utf-8", "replace")
        for memory_id in sorted(self.ids):
            msg = re.sub(rf"(?m)^Memory-Id: {re.escape(memory_id)}\n?", "", msg)
        for path in sorted(self.paths | self.removed_paths, key=len, reverse=True):
            msg = msg.replace(path, "[purged path]")
        for title in sorted(self.titles, key=len, reverse=True):
            msg = msg.replace(title, "[purged]")
        for memory_id in sorted(self.ids, key=len, reverse=True):
            msg = msg.replace(memory_id, "[purged id]")
        return msg.encode("utf-8")

    def _store_tree(self, tree: bytes) -> None:
        if tree == _EMPTY_TREE and tree not in self.pending:
            self.pending.add_object(Tree())  # a commit needs its (empty) tree stored

    def commit(self, sha: ObjectID) -> ObjectID | None:
        """The rewritten commit for ``sha`` (None: dropped, with no parent to stand for it)."""
        old: Commit = self.pending[sha]
        if sha in self.known:  # rewritten by another clone already: the same commit, if it checks out
            target = self.known[sha]
            if target is None:
                self.dropped_commits.add(sha)
                return None
            target = ObjectID(target)
            if target in self.pending and isinstance(self.pending[target], Commit) \
                    and self._same_files(self.new_trees[sha], self.pending[target].tree):
                if target != sha:
                    self.rewritten += 1
                return target
        parents: list[ObjectID] = []
        for parent in old.parents:
            mapped = self.commits.get(parent, parent)
            if mapped is not None and mapped not in parents:
                parents.append(mapped)
        tree = self.new_trees[sha]
        old_parent_tree = self.pending[old.parents[0]].tree if old.parents else None
        new_parent_tree = self.pending[parents[0]].tree if parents else None
        if (len(old.parents) <= 1 and tree != old.tree and old_parent_tree != old.tree
                and self._same_files(tree, new_parent_tree or _EMPTY_TREE)):
            self.dropped += 1  # its only change was the purged memory (and MEMORY.md's count line)
            self.dropped_commits.add(sha)
            return parents[0] if parents else None
        message = self.message(old.message)
        if tree == old.tree and parents == list(old.parents) and message == old.message:
            return sha
        if len(old.parents) > 1 and parents != list(old.parents):
            for parent in parents:  # a merge now joining a commit to its own ancestor: nothing of its own left
                if self._same_files(tree, self.pending[parent].tree) and all(
                        p == parent or self._reaches(parent, p) for p in parents):
                    self.dropped += 1
                    self.dropped_commits.add(sha)
                    return parent
        self._store_tree(tree)
        self.rewritten += 1
        return self._copy_commit(old, tree, parents, message)

    def _reaches(self, descendant: bytes, ancestor: bytes) -> bool:
        """True when ``ancestor`` is reachable from ``descendant`` (through the pending objects)."""
        seen: set[bytes] = set()
        todo = [descendant]
        while todo:
            sha = todo.pop()
            if sha == ancestor:
                return True
            if sha in seen:
                continue
            seen.add(sha)
            todo.extend(self.pending[sha].parents)
        return False

    def _copy_commit(self, old: Commit, tree: ObjectID, parents: list[ObjectID], message: bytes) -> ObjectID:
        new = Commit()
        new.tree, new.parents = tree, parents
        new.author, new.committer = old.author, old.committer
        new.author_time, new.commit_time = old.author_time, old.commit_time
        new.author_timezone, new.commit_timezone = old.author_timezone, old.commit_timezone
        new.encoding = old.encoding
        new.message = message
        self.pending.add_object(new)
        return new.id

    def rewrite_history(self, tips: Iterable[ObjectID]) -> None:
        """Map every commit reachable from ``tips`` (oldest first).  All trees are
        rewritten before any commit, so every message is scrubbed of every copy found."""
        repo = self.services.store.git.repo
        tips = list(set(tips))
        if not tips:
            return
        order = [entry.commit.id for entry in repo.get_walker(include=tips, order="topo")][::-1]
        for sha in order:
            self.new_trees[sha] = self.tree(self.pending[sha].tree)
        for sha in order:
            self.commits[sha] = self.commit(sha)

    def replace_memory_index(self, sha: ObjectID, text: bytes) -> ObjectID:
        """A copy of commit ``sha`` whose ``MEMORY.md`` is ``text`` (``sha`` if it already is)."""
        old: Commit = self.pending[sha]
        root: Tree = self.pending[old.tree]
        name = MEMORY_MD.encode()
        if name not in root:
            return sha
        mode, current = root[name]
        blob = Blob.from_string(text)
        if current == blob.id:
            return sha
        self.pending.add_object(blob)
        tree = Tree()
        for entry in root.iteritems():
            tree.add(entry.path, entry.mode, entry.sha)
        tree.add(name, mode, blob.id)
        self.pending.add_object(tree)
        return self._copy_commit(old, tree.id, list(old.parents), old.message)

    # ------------------------------------------------------------- notes
    def _note_holds_purged(self, sha: bytes) -> bool:
        """A note holds purged text when it names a purged id, title or path, or shares
        ``_FRAGMENT`` consecutive characters (whitespace collapsed) with a removed
        version's body: a quoted secret, a pasted line, a piece of either."""
        if sha not in self.note_verdicts:
            text = self.pending[sha].as_raw_string().decode("utf-8", "replace")
            words = self.ids | self.titles | self.paths | self.removed_paths
            found = any(w in text for w in words)
            if not found:
                if self.fragments is None:
                    self.fragments = {piece for body in self.bodies for piece in _pieces(body)}
                found = not self.fragments.isdisjoint(_pieces(text))
            self.note_verdicts[sha] = found
        return self.note_verdicts[sha]

    def _notes_tree(self, tree_id: ObjectID, moved: dict[ObjectID, ObjectID | None]) -> ObjectID:
        if tree_id in self.notes_trees:
            return self.notes_trees[tree_id]
        files: dict[bytes, tuple[int, ObjectID]] = {}
        changed = False
        # iter_tree_contents only reads trees by sha, all the pending objects offer.
        for entry in iter_tree_contents(cast("ObjectContainer", self.pending), tree_id):
            path = entry.path
            key = path.replace(b"/", b"")
            if len(key) == 40 and re.fullmatch(rb"[0-9a-f]{40}", key):
                target = moved.get(ObjectID(key), key)
                if (target is None or key in self.purged_blobs or key in self.dropped_commits
                        or self._note_holds_purged(entry.sha)):
                    changed = True
                    self.notes_dropped.add((key, entry.sha))
                    continue
                if target != key:  # the note follows its commit, in the same fanout
                    parts, at = [], 0
                    for segment in path.split(b"/"):
                        parts.append(target[at:at + len(segment)])
                        at += len(segment)
                    path = b"/".join(parts)
                    changed = True
            files[path] = (entry.mode, entry.sha)
        result = self._build_tree(files) if changed else tree_id
        self.notes_trees[tree_id] = result
        return result

    def _build_tree(self, files: dict[bytes, tuple[int, ObjectID]]) -> ObjectID:
        root: dict[bytes, Any] = {}
        for path, value in files.items():
            node = root
            parts = path.split(b"/")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value

        def write(node: dict[bytes, Any]) -> ObjectID:
            tree = Tree()
            for name, value in node.items():
                if isinstance(value, dict):
                    tree.add(name, stat.S_IFDIR, write(value))
                else:
                    tree.add(name, value[0], value[1])
            self.pending.add_object(tree)
            return tree.id
        return write(root)

    def rewrite_notes(self, tip: ObjectID, moved: dict[ObjectID, ObjectID | None]) -> ObjectID | None:
        """The new tip of a notes ref (None: no note left, delete the ref)."""
        repo = self.services.store.git.repo
        order = [entry.commit.id for entry in repo.get_walker(include=[tip], order="topo")][::-1]
        mapped: dict[bytes, ObjectID] = {}
        for sha in order:
            old: Commit = self.pending[sha]
            tree = self._notes_tree(old.tree, moved)
            parents = [mapped.get(p, p) for p in old.parents]
            message = self.message(old.message)
            if tree == old.tree and parents == list(old.parents) and message == old.message:
                mapped[sha] = sha
            else:
                mapped[sha] = self._copy_commit(old, tree, parents, message)
        new_tip = mapped[tip]
        return None if self.pending[self.pending[new_tip].tree].items() == [] else new_tip


def history_of(services: Parts, memory_id: str) -> tuple[set[str], set[str], set[str]]:
    """Every path, title and ``source`` the memory had, from the catalog's history table."""
    paths: set[str] = set()
    titles: set[str] = set()
    sources: set[str] = set()
    for touch in services.store.catalog.touches(memory_id):
        if not touch.path:
            continue
        paths.add(touch.path)
        data = services.store.git.read_at(touch.commit.encode(), touch.path)
        if data is not None:
            try:
                meta = parse_text(decode(data)).meta
            except Exception:  # noqa: BLE001 - any unreadable version still has its path purged
                meta = {}
            title, source = meta.get("title"), meta.get("source")
            if isinstance(title, str) and title.strip():
                titles.add(title.strip())
            if isinstance(source, str):
                sources.add(source)
    row_paths = [row.path for row in services.store.catalog.by_id(memory_id)]
    paths.update(row_paths)
    for path in row_paths:
        row = services.store.catalog.row(path)
        title = row.meta.get("title") if row else None
        if isinstance(title, str) and title.strip():
            titles.add(title.strip())
        source = row.meta.get("source") if row else None
        if isinstance(source, str):
            sources.add(source)
    return paths, titles, sources


def _files(store: Any, commit: bytes | None) -> dict[str, bytes]:
    """Regular files of a commit (path -> blob id); reads through the pending objects."""
    if commit is None:
        return {}
    return {e.path.decode("utf-8", "surrogateescape"): e.sha
            for e in iter_tree_contents(store, store[commit].tree) if stat.S_ISREG(e.mode)}


def _render_without(services: Parts, removed: set[str], ids: set[str]) -> bytes:
    """``MEMORY.md`` for the vault without the removed files (catalog changes rolled back)."""
    services.memory_md.render()  # brings the catalog up to date with the files first
    for memory_id in ids:  # an uncommitted copy of a purged memory is removed from disk too
        removed |= {row.path for row in services.store.catalog.by_id(memory_id)}
    with services.store.catalog.what_if():
        services.store.catalog.drop(sorted(removed))
        return render_memory_md(services.store.catalog, services.store.config,
                                services.memory_md.in_force).encode("utf-8")


def plan(services: Parts, rewriter: Rewriter, report: PurgeReport) -> dict[str, Any]:
    """Rewrite everything in memory; return the journal record of what to apply."""
    repo = services.store.git.repo
    store = rewriter.pending
    symrefs = set(repo.refs.get_symrefs())
    # The tombstones are never rewritten: they name what was purged, not its text.
    refs = {name: sha for name, sha in repo.refs.as_dict().items()
            if name != b"HEAD" and name not in symrefs and not name.startswith(_GITMEM_REFS)}
    tips: dict[Ref, tuple[ObjectID, ObjectID, Tag | None]] = {}
    notes: dict[Ref, ObjectID] = {}
    for name, sha in refs.items():
        obj = store[sha]
        target = obj.object[1] if isinstance(obj, Tag) else sha
        if not isinstance(store[target], Commit):
            continue
        if name.startswith(_NOTES):
            notes[name] = sha
        else:
            tips[name] = (sha, target, obj if isinstance(obj, Tag) else None)
    rewriter.rewrite_history(t for _, t, _ in tips.values())
    report.commits_rewritten, report.commits_dropped = rewriter.rewritten, rewriter.dropped
    report.conflict_copies = sorted(rewriter.copies)

    head_ref = Ref(services.store.git.head_ref())
    old_head = tips[head_ref][1] if head_ref in tips else None
    new_head = rewriter.commits.get(old_head, old_head) if old_head is not None else None
    regenerated: dict[ObjectID, ObjectID] = {}
    if (old_head is not None and new_head is not None and new_head != old_head
            and services.store.config.memory_index):
        removed = set(_files(store, old_head)) - set(_files(store, new_head))
        text = _render_without(services, removed, rewriter.ids)
        regen = rewriter.replace_memory_index(new_head, text)
        if regen != new_head:
            regenerated[new_head] = regen
            report.memory_index_regenerated = True

    def final(old: ObjectID) -> ObjectID | None:
        mapped = rewriter.commits.get(old, old)
        return None if mapped is None else regenerated.get(mapped, mapped)

    moves: list[list[str | None]] = []
    for name, (sha, target, tag) in sorted(tips.items()):
        new_target = final(target)
        if new_target is None or new_target == target:
            continue
        new_sha = new_target
        if tag is not None:  # an annotated tag: a new tag object on the new commit
            new_tag = Tag()
            new_tag.name, new_tag.tagger, new_tag.tag_time = tag.name, tag.tagger, tag.tag_time
            new_tag.tag_timezone, new_tag.message = tag.tag_timezone, rewriter.message(tag.message)
            new_tag.object = (Commit, new_target)
            store.add_object(new_tag)
            new_sha = new_tag.id
        moves.append([name.decode(), sha.decode(), new_sha.decode()])
    moved = {old: final(old) for old in rewriter.commits}
    moved = {old: new for old, new in moved.items() if new != old}
    for name, sha in sorted(notes.items()):
        new_notes = rewriter.rewrite_notes(sha, moved)
        if new_notes != sha:
            moves.append([name.decode(), sha.decode(), new_notes.decode() if new_notes else None])
    report.notes_dropped = len(rewriter.notes_dropped)

    final_head = final(old_head) if old_head is not None else None
    before, after = _files(store, old_head), _files(store, final_head)
    worktree = [[path, before[path].decode() if path in before else None,
                 after[path].decode() if path in after else None]
                for path in sorted(set(before) | set(after)) if before.get(path) != after.get(path)]
    report.old_head = old_head.decode() if old_head else None
    shown = final_head or old_head
    report.new_head = shown.decode() if shown else None
    report.refs_updated = [m[0] for m in moves if m[0] is not None]
    return {"pid": os.getpid(), "id": rewriter.id, "step": "objects", "ids": sorted(rewriter.ids),
            "paths": sorted(rewriter.paths | rewriter.removed_paths), "refs": moves,
            "worktree": worktree, "new_head": report.new_head,
            "old_commits": sorted(sha.decode() for sha in moved),
            "map": {old.decode(): new.decode() if new else None for old, new in sorted(moved.items())}}


def execute(services: Parts, rewriter: Rewriter, record: dict[str, Any]) -> int:
    """Apply a :func:`plan` record (caller holds the vault lock): journal, objects, then
    every step; returns the number of objects pruned."""
    # Index dirty first, so even a reader that opens the vault takes the lock (and recovers).
    services.store.git.mark_index_dirty()
    write_journal(services, record)
    store_objects(rewriter.pending)
    return run_steps(services, record, "refs")


def store_objects(pending: PendingObjects) -> None:
    """All new objects as one pack: it appears whole (renamed into place) or not at all."""
    fresh = [obj for obj in pending.objects.values() if obj.id not in pending.store]
    if fresh:
        pending.store.add_objects([(obj, None) for obj in fresh])


def write_journal(services: Parts, record: dict[str, Any]) -> None:
    target = services.store.state_dir / JOURNAL
    tmp = target.with_name(JOURNAL + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, target)


def run_steps(services: Parts, record: dict[str, Any], start: str) -> int:
    """Apply the journaled purge from step ``start`` on; returns the objects pruned."""
    pruned = 0
    for step in STEPS[STEPS.index(start):]:
        if step == "objects":
            continue
        record["step"] = step
        write_journal(services, record)  # before the step: a kill re-runs it (each is idempotent)
        if step == "refs":
            record_purged(services.store.state_dir, record["id"], [c.encode() for c in record["old_commits"]],
                          applied=record.get("tombstones", []))
            _move_refs(services, record)
        elif step == "worktree":
            _update_worktree(services, record)
            services.store.git.rebuild_index_from_head()  # before gc: no entry may name a pruned blob
        elif step == "gc":
            pruned = forget_old_objects(services)
        elif step == "caches":
            rebuild_caches(services)
            forget_in_state(services, record)
    (services.store.state_dir / JOURNAL).unlink(missing_ok=True)
    return pruned


def _move_refs(services: Parts, record: dict[str, Any]) -> None:
    """Move each ref from its old to its new value; a ref already moved is left alone."""
    repo = services.store.git.repo
    for name, old, new in record["refs"]:
        key = name.encode()
        try:
            current: bytes | None = repo.refs[key]
        except KeyError:
            current = None
        want = new.encode() if new else None
        if current == want or current != (old.encode() if old else None):
            continue  # done already, or moved by someone else since (a git command): theirs stays
        if old is None:  # a new ref (the first tombstone)
            ok = want is not None and repo.refs.add_if_new(key, want, message=b"gitmem purge")
        elif want is None:
            ok = repo.refs.remove_if_equals(key, old.encode(), message=b"gitmem purge")
        else:
            ok = repo.refs.set_if_equals(key, old.encode(), want, message=b"gitmem purge")
        if not ok:
            raise StorageError(f"could not move {name} during the purge (a git command?)",
                               hint="Run any gitmem command: the purge is finished from its journal.")


def _update_worktree(services: Parts, record: dict[str, Any]) -> None:
    """Bring the working tree to the new HEAD, never over a person's later edit
    (all through the path gate, :mod:`gitmem.safefs`: no link is followed)."""
    root = services.store.root
    ids = set(record["ids"])
    for path, old, new in record["worktree"]:
        data = _disk(root, path)
        current = None if data is None else blob_id(data)
        if current == new:
            continue
        ours = current in (old, None) or (new is None and data is not None and id_from_blob(data) in ids)
        if not ours or (data is None and safefs.is_symlink_on_the_way(root, path)):
            continue  # changed since by someone else (or a link): git status shows it, nothing is lost
        if new is None:
            safefs.remove(root, path)
        else:
            safefs.write_bytes(root, path, services.store.git.blob(new.encode()), replace_link=path == MEMORY_MD)
    head = services.store.git.head()
    for path in record["paths"]:  # an uncommitted copy of a purged memory goes too
        data = _disk(root, path)
        if (data is not None and services.store.git.blob_sha_at(head, path) is None
                and id_from_blob(data) in ids | {None}):
            safefs.remove(root, path)


def _disk(root: Path, path: str) -> bytes | None:
    """The regular file at ``path`` (None: absent, a folder, a link, or a link on the way)."""
    try:
        return safefs.read_or_none(root, path)
    except (OSError, UnsafePath):
        return None



def forget_old_objects(services: Parts) -> int:
    """Delete the reflogs and prune every unreachable object (repacking the rest).

    Then check what is left on disk, every pack listed afresh: an object no ref
    reaches that is still there (in a pack this process had not listed yet, say
    one a sync moved in from its quarantine) is removed by a second repack, so no
    old version survives, packed or loose."""
    from dulwich.gc import find_reachable_objects, garbage_collect
    git_dir, repo = services.store.git.git_dir, services.store.git.repo
    logs = git_dir / "logs"
    if logs.exists():
        shutil.rmtree(logs)
    # Packing deletes packed loose objects without the vault lock: not while gc reads them.
    with try_flock(git_dir / "gitmem" / REPACK_LOCK, LOCK_WAIT + 5.0):
        for attempt in range(3):
            try:
                stats = garbage_collect(repo, prune=True, grace_period=None)
                break
            except FileNotFoundError:   # a loose object moved into a pack meanwhile
                repo.object_store.close()
                if attempt == 2:
                    raise
        pruned = set(stats.pruned_objects)
        store = repo.object_store
        store.close()   # forget the cached pack list: the next look lists the pack folder again
        reachable = find_reachable_objects(store, repo.refs, include_reflogs=False)
        left = {sha for sha in _objects_on_disk(services) if sha not in reachable}
        if left:
            store.repack(exclude=left)
            pruned |= left
    return len(pruned)


def _objects_on_disk(services: Parts) -> set[ObjectID]:
    """Every object in the vault's own store (packs and loose; no alternate)."""
    store = services.store.git.repo.object_store
    found: set[ObjectID] = set()
    for pack in store.packs:
        found.update(ObjectID(sha) for sha in pack)
    objects = services.store.git.git_dir / "objects"
    for folder in objects.iterdir():
        if len(folder.name) == 2 and folder.is_dir():
            found.update(ObjectID((folder.name + item.name).encode()) for item in folder.iterdir()
                         if len(item.name) == 38)
    return found


def _remove_partial_packs(services: Parts) -> list[str]:
    """Pack files a killed pack write or repack left: a pack without its index (or
    the reverse), a temp pack, an index lock.  Only called when recovering a killed
    purge: these are its own writes (a normal purge leaves none)."""
    pack_dir = services.store.git.git_dir / "objects" / "pack"
    try:
        names = set(os.listdir(pack_dir))
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        stem, dot, ext = name.rpartition(".")
        orphan = (name.startswith("tmp") or name.endswith(".lock")
                  or (bool(dot) and ext == "pack" and f"{stem}.idx" not in names)
                  or (bool(dot) and ext == "idx" and f"{stem}.pack" not in names))
        if orphan:
            (pack_dir / name).unlink(missing_ok=True)
            removed.append(name)
    for leftover in (services.store.git.git_dir / "objects").glob("tmp_pack_*"):
        leftover.unlink(missing_ok=True)
        removed.append(leftover.name)
    return removed


def rebuild_caches(services: Parts) -> None:
    """History table, file rows and search index from scratch; no old page left in SQLite."""
    services.store.catalog.reset_touches()
    services.reader.scan()
    services.history.sync_history()
    services.store.catalog.compact()
    services.searcher.reindex()
    forget_removed(services.store)   # vectors of the purged memory's text
    services.searcher.as_of_search.drop()   # the history it indexed holds the purged text
    (services.store.state_dir / VIEW_PAGE).unlink(missing_ok=True)   # so does the default view page
    if services.searcher.open_index is not None:  # compact: no deleted document kept on disk
        services.searcher.open_index.optimize()


def forget_in_state(services: Parts, record: dict[str, Any]) -> None:
    """Drop the purged memories' ids, paths and file names from this clone's sync
    state (the conflict copies a sync listed, an error quoting a path)."""
    from .state import SyncState
    paths = [p for p in record.get("paths", []) if isinstance(p, str)]
    words = [*record.get("ids", []), *paths, *(p.rsplit("/", 1)[-1].removesuffix(".md") for p in paths)]
    SyncState(services.store).forget(w for w in words if isinstance(w, str))


def recover_purge(services: Parts) -> list[str]:
    """Finish, or roll back, a purge whose process was killed (caller holds the vault lock).

    One stat when there is no journal.  Killed before all its objects were
    stored (no ref had moved yet): the partial pack is removed and the purge is
    forgotten, the memory stays.  Killed later: the remaining steps run from the
    one the journal names.  Returns what was done (also appended to
    ``.git/gitmem/recovery.log``, which ``gitmem doctor`` shows).
    """
    journal = services.store.state_dir / JOURNAL
    if not journal.exists():
        return []
    if needs_recovery(services.store.git):
        recover(services.store.git)  # an index.lock the killed purge left would block the index rebuild
    try:
        record = json.loads(journal.read_text())
    except (OSError, ValueError):
        record = None  # written by rename, so never half; unreadable means nothing to apply
    actions: list[str] = []
    removed = _remove_partial_packs(services)
    if removed:
        actions.append(f"removed {len(removed)} partial pack file(s) of a killed purge")
    step = record.get("step") if isinstance(record, dict) else None
    if step not in STEPS:
        journal.unlink(missing_ok=True)
        actions.append("dropped an unreadable purge journal")
    elif step == "objects" and not _objects_stored(services, record):
        journal.unlink(missing_ok=True)
        actions.append(f"rolled back a purge of {record['id']} killed before its objects were "
                       "stored (nothing had changed; the memory is still there)")
    else:
        _remove_stale_ref_locks(services, record)
        run_steps(services, record, "refs" if step == "objects" else step)
        actions.append(f"finished a purge of {record['id']} killed during its {step} step")
    _log(services, actions)
    return actions


def _objects_stored(services: Parts, record: dict[str, Any]) -> bool:
    store = services.store.git.repo.object_store
    wanted = [new for _, _, new in record["refs"] if new] + [new for _, _, new in record["worktree"] if new]
    return all(sha.encode() in store for sha in wanted)


def _remove_stale_ref_locks(services: Parts, record: dict[str, Any]) -> None:
    """Lock files dulwich left when the purge was killed inside a ref update or gc's
    ``pack_refs``: they would make every later ref update fail."""
    git_dir = services.store.git.git_dir
    for name, _, new in record["refs"]:
        lock = git_dir / f"{name}.lock"
        try:
            content = lock.read_bytes().strip()
        except OSError:
            continue
        if content in (b"", (new or "").encode()):
            lock.unlink(missing_ok=True)
    if record.get("step") in ("refs", "gc"):  # the steps that rewrite packed-refs
        (git_dir / "packed-refs.lock").unlink(missing_ok=True)


def _log(services: Parts, actions: list[str]) -> None:
    if not actions:
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        with open(services.store.state_dir / "recovery.log", "a", encoding="utf-8") as handle:
            handle.writelines(f"{stamp} {action}\n" for action in actions)
    except OSError:
        pass
