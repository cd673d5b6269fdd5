"""``gitmem purge ID``: make the vault forget one memory completely, history included.

Deleting a memory (even ``hard``) keeps every version in git history, which is
the point of gitmem, except when something must truly be forgotten (a secret,
personal data someone asked to have erased).  :func:`purge`:

1. finds every path the memory ever had (the catalog's memory -> commits
   table, caught up with history first) and every title it had;
2. rewrites every commit reachable from any ref (branches, remote-tracking
   refs, tags), oldest first, with dulwich, building the new objects in
   memory.  From each tree it removes every file that holds the memory: a
   version carrying its id (wherever it is), a version without an id at one of
   its paths, any file byte-identical to a removed version, and every **sync
   conflict copy** of it (a file whose ``conflict_of`` names a purged id, or a
   conflict copy whose body is the body of a removed version; a copy's own
   copies go too).  Their lines are removed from each version of ``MEMORY.md``;
   titles, paths, ids and ``Memory-Id:`` trailers are scrubbed from commit and
   tag messages; a commit left with no change of its own is dropped; all other
   commits keep their author, committer, dates and message (signatures are
   dropped: they would no longer verify).  The rewritten head commit gets a
   **regenerated** ``MEMORY.md`` (rendered from the catalog without the removed
   files), so its counts and lists are right;
3. rewrites every ``refs/notes/*`` history: a note that holds purged text (an
   id, title or path, or 16 consecutive characters of a removed version's
   body), or that annotates a dropped commit or a removed blob, is dropped;
   a note on a rewritten commit moves to the new commit (same fanout); a notes
   ref left with no note at all is deleted;
4. moves the refs, updates the working tree and rebuilds ``.git/index`` from
   the new HEAD (before pruning: an index entry must never name a pruned
   blob), deletes the reflogs (they still name the old commits) and prunes
   every unreachable object and repacks (``dulwich.gc``), so
   ``git log --all``, ``git rev-list --objects --all`` and ``git cat-file``
   no longer find the content;
5. rebuilds the catalog's history table and the search index, and vacuums the
   catalog, so no cache in ``.git/gitmem`` keeps a copy either.

**Crash safety.**  Step 2 writes nothing.  Then a journal
(``.git/gitmem/purge-journal``: the ref moves, the working-tree changes, the
old commits, and the step reached) is written by rename, the new objects are
stored as one pack (which appears whole), and each later step is recorded in
the journal before it runs.  Every step is idempotent: refs move only from
their old value (a ref already at its new value is skipped), files are written
only where the disk still shows the old or new content, the index is rebuilt
from HEAD, gc and the cache rebuild can simply run again.  A purge killed at
any point is therefore **finished** by the next process that takes the vault
lock (:func:`recover_purge`, called by the vault each time it takes the lock)
or, when it was killed before its objects were all stored, **rolled back**
(partial pack files are removed; no ref had moved).  The journal also marks
``.git/index`` dirty first, so merely opening the vault takes the lock.

Remotes and other clones keep the old history until they are rewritten too
(force-push the branch, then re-clone or reset every other copy); the CLI
says so.  Runs under the vault lock; other writers wait.
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
from typing import TYPE_CHECKING, Any, cast

from dulwich.object_store import iter_tree_contents
from dulwich.objects import Blob, Commit, ObjectID, Tag, Tree
from dulwich.refs import Ref

from .. import safefs
from ..errors import NotFound, StorageError, UnsafePath
from ..memory.markdown import decode, parse_text
from ..memory.paths import MEMORY_MD
from ..search.vectors import forget_removed
from ..store.catalog import id_from_blob
from ..store.git import blob_id
from ..store.purged import PURGE_JOURNAL, record_purged
from ..store.recovery import PendingObjects, needs_recovery, recover
from ..write.memory_md import render_memory_md

if TYPE_CHECKING:  # pragma: no cover
    from dulwich.pack import ObjectContainer

    from ..services import Services

__all__ = ["PurgeReport", "purge", "recover_purge", "REMOTE_WARNING",
           "JOURNAL"]

REMOTE_WARNING = ("Remotes and other clones still hold the old history: force-push this branch "
                  "(git push --force) to every remote, then re-clone or hard-reset every other copy, "
                  "or the memory comes back with the next sync.")
JOURNAL = PURGE_JOURNAL
# The steps after the (in-memory) rewrite, in order; the journal names the one reached.
STEPS = ("objects", "refs", "worktree", "gc", "caches")
_NOTES = b"refs/notes/"
_EMPTY_TREE = Tree().id
_CONFLICT_OF = re.compile(rb"(?m)^conflict_of:[ \t]*['\"]?([^'\"\s]+)")
# A note sharing this many consecutive characters with a removed version holds its text;
# shorter runs are too often common words.
_FRAGMENT = 16


@dataclass
class PurgeReport:
    """What :func:`purge` did."""

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

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (with the remote warning)."""
        return {"id": self.id, "paths": self.paths, "commits_rewritten": self.commits_rewritten,
                "commits_dropped": self.commits_dropped, "refs_updated": self.refs_updated,
                "objects_pruned": self.objects_pruned, "old_head": self.old_head,
                "new_head": self.new_head, "conflict_copies": self.conflict_copies,
                "notes_dropped": self.notes_dropped,
                "memory_index_regenerated": self.memory_index_regenerated,
                "warning": REMOTE_WARNING}


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


class _Rewriter:
    """Rewrites trees, blobs, commits and notes for one memory; caches per object id.

    New objects go to ``self.pending`` (in memory) until the journal is written.
    """

    def __init__(self, services: Services, memory_id: str, paths: set[str], titles: set[str]) -> None:
        self.services = services
        self.pending = PendingObjects(services.store.git.repo.object_store)
        self.id = memory_id
        self.ids = {memory_id}            # grows with the conflict copies found
        self.copies: set[str] = set()
        self.paths = set(paths)           # the memory's known paths (id-less versions there go)
        self.removed_paths: set[str] = set()
        self.stems = {p.rsplit("/", 1)[-1][:-3] for p in paths if p.endswith(".md")}
        self.titles = {t for t in titles if len(t) >= 3}
        self.purged_blobs: set[bytes] = set()
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
        self._store_tree(tree)
        self.rewritten += 1
        return self._copy_commit(old, tree, parents, message)

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


def _history_of(services: Services, memory_id: str) -> tuple[set[str], set[str]]:
    """Every path and title the memory had, from the catalog's history table."""
    paths: set[str] = set()
    titles: set[str] = set()
    for touch in services.store.catalog.touches(memory_id):
        if not touch.path:
            continue
        paths.add(touch.path)
        data = services.store.git.read_at(touch.commit.encode(), touch.path)
        if data is not None:
            try:
                title = parse_text(decode(data)).meta.get("title")
            except Exception:  # noqa: BLE001 - any unreadable version still has its path purged
                title = None
            if isinstance(title, str) and title.strip():
                titles.add(title.strip())
    row_paths = [row.path for row in services.store.catalog.by_id(memory_id)]
    paths.update(row_paths)
    for path in row_paths:
        row = services.store.catalog.row(path)
        title = row.meta.get("title") if row else None
        if isinstance(title, str) and title.strip():
            titles.add(title.strip())
    return paths, titles


def _files(store: Any, commit: bytes | None) -> dict[str, bytes]:
    """Regular files of a commit (path -> blob id); reads through the pending objects."""
    if commit is None:
        return {}
    return {e.path.decode("utf-8", "surrogateescape"): e.sha
            for e in iter_tree_contents(store, store[commit].tree) if stat.S_ISREG(e.mode)}


def _render_without(services: Services, removed: set[str], ids: set[str]) -> bytes:
    """``MEMORY.md`` for the vault without the removed files (catalog changes rolled back)."""
    services.memory_md.render()  # brings the catalog up to date with the files first
    for memory_id in ids:  # an uncommitted copy of a purged memory is removed from disk too
        removed |= {row.path for row in services.store.catalog.by_id(memory_id)}
    with services.store.catalog.what_if():
        services.store.catalog.drop(sorted(removed))
        return render_memory_md(services.store.catalog, services.store.config).encode("utf-8")


def _plan(services: Services, rewriter: _Rewriter, report: PurgeReport) -> dict[str, Any]:
    """Rewrite everything in memory; return the journal record of what to apply."""
    repo = services.store.git.repo
    store = rewriter.pending
    symrefs = set(repo.refs.get_symrefs())
    refs = {name: sha for name, sha in repo.refs.as_dict().items()
            if name != b"HEAD" and name not in symrefs}
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
            "old_commits": sorted(sha.decode() for sha in moved)}


def purge(services: Services, ref: str) -> PurgeReport:
    """Remove the memory ``ref`` names (id, path, title; also a deleted one), its
    conflict copies and the notes holding it from all history (see module docstring)."""
    with services.store.lock.hold():  # taking the lock first finishes an earlier purge that was killed
        memory_id = services.history.memory_id(ref)  # resolves deleted memories too
        services.history.sync_history()
        paths, titles = _history_of(services, memory_id)
        if not paths:
            raise NotFound(f"no file of memory {memory_id} was ever committed")
        report = PurgeReport(memory_id, sorted(paths))
        services.pipeline.background.flush(10.0)
        rewriter = _Rewriter(services, memory_id, paths, titles)
        record = _plan(services, rewriter, report)  # in memory only: a kill here changes nothing
        report.paths = sorted(set(report.paths) | rewriter.removed_paths)
        # Index dirty first, so even a reader that opens the vault takes the lock (and recovers).
        services.store.git.mark_index_dirty()
        _write_journal(services, record)
        _store_objects(rewriter.pending)
        report.objects_pruned = _run(services, record, "refs")
    return report


def _store_objects(pending: PendingObjects) -> None:
    """All new objects as one pack: it appears whole (renamed into place) or not at all."""
    fresh = [obj for obj in pending.objects.values() if obj.id not in pending.store]
    if fresh:
        pending.store.add_objects([(obj, None) for obj in fresh])


def _write_journal(services: Services, record: dict[str, Any]) -> None:
    target = services.store.state_dir / JOURNAL
    tmp = target.with_name(JOURNAL + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, target)


def _run(services: Services, record: dict[str, Any], start: str) -> int:
    """Apply the journaled purge from step ``start`` on; returns the objects pruned."""
    pruned = 0
    for step in STEPS[STEPS.index(start):]:
        if step == "objects":
            continue
        record["step"] = step
        _write_journal(services, record)  # before the step: a kill re-runs it (each is idempotent)
        if step == "refs":
            record_purged(services.store.state_dir, record["id"], [c.encode() for c in record["old_commits"]])
            _move_refs(services, record)
        elif step == "worktree":
            _update_worktree(services, record)
            services.store.git.rebuild_index_from_head()  # before gc: no entry may name a pruned blob
        elif step == "gc":
            pruned = _forget_old_objects(services)
        elif step == "caches":
            _rebuild_caches(services)
    (services.store.state_dir / JOURNAL).unlink(missing_ok=True)
    return pruned


def _move_refs(services: Services, record: dict[str, Any]) -> None:
    """Move each ref from its old to its new value; a ref already moved is left alone."""
    repo = services.store.git.repo
    for name, old, new in record["refs"]:
        key = name.encode()
        try:
            current: bytes | None = repo.refs[key]
        except KeyError:
            current = None
        want = new.encode() if new else None
        if current == want or current != old.encode():
            continue  # done already, or moved by someone else since (a git command): theirs stays
        if want is None:
            ok = repo.refs.remove_if_equals(key, old.encode(), message=b"gitmem purge")
        else:
            ok = repo.refs.set_if_equals(key, old.encode(), want, message=b"gitmem purge")
        if not ok:
            raise StorageError(f"could not move {name} during the purge (a git command?)",
                               hint="Run any gitmem command: the purge is finished from its journal.")


def _update_worktree(services: Services, record: dict[str, Any]) -> None:
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



def _forget_old_objects(services: Services) -> int:
    """Delete the reflogs and prune every unreachable object (repacking the rest)."""
    from dulwich.gc import garbage_collect
    logs = services.store.git.git_dir / "logs"
    if logs.exists():
        shutil.rmtree(logs)
    stats = garbage_collect(services.store.git.repo, prune=True, grace_period=None)
    return len(stats.pruned_objects)


def _remove_partial_packs(services: Services) -> list[str]:
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


def _rebuild_caches(services: Services) -> None:
    """History table, file rows and search index from scratch; no old page left in SQLite."""
    services.store.catalog.reset_touches()
    services.reader.scan()
    services.history.sync_history()
    services.store.catalog.compact()
    services.searcher.reindex()
    forget_removed(services.store)   # vectors of the purged memory's text
    services.searcher.as_of_search.drop()   # the history it indexed holds the purged text
    from ..exchange.view import DEFAULT_PAGE
    (services.store.state_dir / DEFAULT_PAGE).unlink(missing_ok=True)   # so does the default view page
    if services.searcher.open_index is not None:  # compact: no deleted document kept on disk
        services.searcher.open_index.optimize()


def recover_purge(services: Services) -> list[str]:
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
        _run(services, record, "refs" if step == "objects" else step)
        actions.append(f"finished a purge of {record['id']} killed during its {step} step")
    _log(services, actions)
    return actions


def _objects_stored(services: Services, record: dict[str, Any]) -> bool:
    store = services.store.git.repo.object_store
    wanted = [new for _, _, new in record["refs"] if new] + [new for _, _, new in record["worktree"] if new]
    return all(sha.encode() in store for sha in wanted)


def _remove_stale_ref_locks(services: Services, record: dict[str, Any]) -> None:
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


def _log(services: Services, actions: list[str]) -> None:
    if not actions:
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        with open(services.store.state_dir / "recovery.log", "a", encoding="utf-8") as handle:
            handle.writelines(f"{stamp} {action}\n" for action in actions)
    except OSError:
        pass
