"""``gitmem purge ID``: make the vault forget one memory completely, history included.

Deleting a memory (even ``hard``) keeps every version in git history, which is
the point of gitmem, except when something must truly be forgotten (a secret,
personal data someone asked to have erased).  :func:`purge`:

1. finds every path the memory ever had (the catalog's memory -> commits
   table, caught up with history first) and every title it had;
2. rewrites every commit reachable from any ref (branches, remote-tracking
   refs, tags), oldest first, with dulwich: the memory's files are removed
   from each tree where the blob there carries its id, its line is removed
   from each version of ``MEMORY.md``, its titles and paths are scrubbed from
   commit messages along with its ``Memory-Id:`` trailer; a commit left with
   no change of its own is dropped; all other commits keep their author,
   committer, dates and message (signatures are dropped: they would no longer
   verify);
3. moves the refs to the rewritten commits, updates the working tree and
   ``.git/index``, deletes the reflogs (they still name the old commits) and
   prunes every unreachable object and repacks (``dulwich.gc``), so
   ``git log --all``, ``git rev-list --objects --all`` and ``git cat-file``
   no longer find the content;
4. rebuilds the catalog's history table and the search index, and vacuums the
   catalog, so no cache in ``.git/gitmem`` keeps a copy either.

Remotes and other clones keep the old history until they are rewritten too
(force-push the branch, then re-clone or reset every other copy); the CLI
says so.  Runs under the vault lock; other writers wait.
"""

from __future__ import annotations

import json

import re
import shutil
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from dulwich.objects import Blob, Commit, Tag, Tree

from .catalog import id_from_blob
from .errors import NotFound
from .gitstore import FILE_MODE, FileChange, _apply_tree_changes
from .markdown import decode, parse_text

if TYPE_CHECKING:  # pragma: no cover
    from .vault import Vault

__all__ = ["PurgeReport", "purge", "REMOTE_WARNING"]

REMOTE_WARNING = ("Remotes and other clones still hold the old history: force-push this branch "
                  "(git push --force) to every remote, then re-clone or hard-reset every other copy, "
                  "or the memory comes back with the next sync.")
_MEMORY_INDEX = "MEMORY.md"


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

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "paths": self.paths, "commits_rewritten": self.commits_rewritten,
                "commits_dropped": self.commits_dropped, "refs_updated": self.refs_updated,
                "objects_pruned": self.objects_pruned, "old_head": self.old_head,
                "new_head": self.new_head, "warning": REMOTE_WARNING}


class _Rewriter:
    """Rewrites trees, blobs and commits for one memory; caches per object id."""

    def __init__(self, vault: "Vault", memory_id: str, paths: set[str], titles: set[str]) -> None:
        self.vault = vault
        self.store = vault.git.repo.object_store
        self.id = memory_id
        self.paths = paths
        self.stems = {p.rsplit("/", 1)[-1][:-3] for p in paths if p.endswith(".md")}
        self.titles = {t for t in titles if len(t) >= 3}
        self.trees: dict[bytes, bytes] = {}
        self.blobs: dict[bytes, bool] = {}
        self.commits: dict[bytes, bytes | None] = {}
        self.rewritten = self.dropped = 0

    def _is_ours(self, blob_sha: bytes, path: str) -> bool:
        if blob_sha not in self.blobs:
            data = self.store[blob_sha].as_raw_string()
            found = id_from_blob(data)
            self.blobs[blob_sha] = found == self.id or (found is None and path in self.paths)
        return self.blobs[blob_sha]

    def _lookup(self, tree: Tree, path: str) -> bytes | None:
        obj: Any = tree
        for part in path.encode("utf-8").split(b"/"):
            if not isinstance(obj, Tree) or part not in obj:
                return None
            mode, sha = obj[part]
            obj = self.store[sha] if stat.S_ISDIR(mode) else sha
        return obj if isinstance(obj, bytes) else None

    def _index_text(self, data: bytes) -> bytes:
        lines = data.decode("utf-8", "replace").splitlines(keepends=True)
        keep = [line for line in lines
                if not any(line.startswith((f"- [[{stem}|", f"- [[{stem}]]")) for stem in self.stems)]
        return "".join(keep).encode("utf-8")

    def tree(self, tree_id: bytes) -> bytes:
        if tree_id in self.trees:
            return self.trees[tree_id]
        tree = self.store[tree_id]
        changes: list[tuple[bytes, int | None, bytes | None]] = []
        for path in sorted(self.paths):
            sha = self._lookup(tree, path)
            if sha is not None and self._is_ours(sha, path):
                changes.append((path.encode("utf-8"), None, None))
        index_sha = self._lookup(tree, _MEMORY_INDEX)
        if index_sha is not None and self.stems:
            old = self.store[index_sha].as_raw_string()
            new = self._index_text(old)
            if new != old:
                blob = Blob.from_string(new)
                self.store.add_object(blob)
                changes.append((_MEMORY_INDEX.encode(), FILE_MODE, blob.id))
        new_id = _apply_tree_changes(self.store, tree_id, changes) if changes else tree_id
        self.trees[tree_id] = new_id
        return new_id

    def _same_files(self, a: bytes, b: bytes) -> bool:
        """Trees equal apart from the generated MEMORY.md."""
        if a == b:
            return True
        if b == _EMPTY_TREE:
            return False
        rest = [[e for e in self.store[t].items() if e.path != _MEMORY_INDEX.encode()] for t in (a, b)]
        return rest[0] == rest[1]

    def message(self, text: bytes) -> bytes:
        msg = text.decode("utf-8", "replace")
        msg = re.sub(rf"(?m)^Memory-Id: {re.escape(self.id)}\n?", "", msg)
        for path in sorted(self.paths, key=len, reverse=True):
            msg = msg.replace(path, "[purged path]")
        for title in sorted(self.titles, key=len, reverse=True):
            msg = msg.replace(title, "[purged]")
        return msg.encode("utf-8")

    def commit(self, sha: bytes) -> bytes | None:
        """The rewritten commit for ``sha`` (None: dropped, with no parent to stand for it)."""
        old: Commit = self.store[sha]
        parents: list[bytes] = []
        for parent in old.parents:
            mapped = self.commits.get(parent, parent)
            if mapped is not None and mapped not in parents:
                parents.append(mapped)
        tree = self.tree(old.tree)
        old_parent_tree = self.store[old.parents[0]].tree if old.parents else None
        new_parent_tree = self.store[parents[0]].tree if parents else None
        if (len(old.parents) <= 1 and tree != old.tree and old_parent_tree != old.tree
                and self._same_files(tree, new_parent_tree or _EMPTY_TREE)):
            self.dropped += 1  # its only change was the purged memory (and MEMORY.md's count line)
            return parents[0] if parents else None
        message = self.message(old.message)
        if tree == old.tree and parents == list(old.parents) and message == old.message:
            return sha
        new = Commit()
        new.tree, new.parents = tree, parents
        new.author, new.committer = old.author, old.committer
        new.author_time, new.commit_time = old.author_time, old.commit_time
        new.author_timezone, new.commit_timezone = old.author_timezone, old.commit_timezone
        new.encoding = old.encoding
        new.message = message
        self.store.add_object(new)
        self.rewritten += 1
        return new.id


_EMPTY_TREE = Tree().id


def _history_of(vault: "Vault", memory_id: str) -> tuple[set[str], set[str]]:
    """Every path and title the memory had, from the catalog's history table."""
    paths: set[str] = set()
    titles: set[str] = set()
    for touch in vault.catalog.touches(memory_id):
        if not touch.path:
            continue
        paths.add(touch.path)
        data = vault.git.read_at(touch.commit.encode(), touch.path)
        if data is not None:
            try:
                title = parse_text(decode(data)).meta.get("title")
            except Exception:  # noqa: BLE001 - any unreadable version still has its path purged
                title = None
            if isinstance(title, str) and title.strip():
                titles.add(title.strip())
    row_paths = [row.path for row in vault.catalog.by_id(memory_id)]
    paths.update(row_paths)
    for path in row_paths:
        title = vault.catalog.row(path).meta.get("title") if vault.catalog.row(path) else None
        if isinstance(title, str) and title.strip():
            titles.add(title.strip())
    return paths, titles


def purge(vault: "Vault", ref: str) -> PurgeReport:
    """Remove the memory ``ref`` names (id, path, title; also a deleted one) from all history."""
    repo = vault.git.repo
    with vault.lock.hold():
        memory_id = vault._memory_id(ref)  # noqa: SLF001 - resolves deleted memories too
        vault.sync_history()
        paths, titles = _history_of(vault, memory_id)
        if not paths:
            raise NotFound(f"no file of memory {memory_id} was ever committed")
        report = PurgeReport(memory_id, sorted(paths))
        old_head = vault.git.head()
        report.old_head = old_head.decode() if old_head else None
        vault.flush()
        rewriter = _Rewriter(vault, memory_id, paths, titles)

        refs = {name: sha for name, sha in repo.refs.as_dict().items() if name != b"HEAD"}
        tips = {}
        for name, sha in refs.items():
            obj = repo.object_store[sha]
            target = obj.object[1] if isinstance(obj, Tag) else sha
            if isinstance(repo.object_store[target], Commit):
                tips[name] = (sha, target, obj if isinstance(obj, Tag) else None)
        walker = repo.get_walker(include=list({t for _, t, _ in tips.values()}), order="topo")
        for entry in reversed(list(walker)):
            rewriter.commits[entry.commit.id] = rewriter.commit(entry.commit.id)
        report.commits_rewritten, report.commits_dropped = rewriter.rewritten, rewriter.dropped

        for name, (sha, target, tag) in tips.items():
            new_target = rewriter.commits.get(target, target)
            if new_target is None or new_target == target:
                continue
            new_sha = new_target
            if tag is not None:  # an annotated tag: a new tag object on the new commit
                new_tag = Tag()
                new_tag.name, new_tag.tagger, new_tag.tag_time = tag.name, tag.tagger, tag.tag_time
                new_tag.tag_timezone, new_tag.message = tag.tag_timezone, tag.message
                new_tag.object = (Commit, new_target)
                repo.object_store.add_object(new_tag)
                new_sha = new_tag.id
            repo.refs.set_if_equals(name, sha, new_sha, message=b"gitmem purge")
            report.refs_updated.append(name.decode("utf-8", "replace"))
        new_head = vault.git.head()
        report.new_head = new_head.decode() if new_head else None

        if old_head is not None and new_head is not None and new_head != old_head:
            changes = [FileChange(c.new_path or c.old_path or "",
                                  vault.git.blob(c.new_sha) if c.new_sha else None)
                       for c in vault.git.changes_between(old_head, new_head)]
            vault.git._apply_to_worktree(changes)  # noqa: SLF001 - same write path as commits
        for path in paths:  # an uncommitted copy of the memory goes too
            target = vault.root / path
            if target.is_file() and id_from_blob(target.read_bytes()) in (memory_id, None):
                target.unlink()
        record_purged(vault, memory_id, [old for old, new in rewriter.commits.items() if new != old])
        report.objects_pruned = _forget_old_objects(vault)
        vault.git.repair_index()
        _rebuild_caches(vault)
    return report


PURGED = "purged.json"


def record_purged(vault: "Vault", memory_id: str, old_commits: list[bytes]) -> None:
    """Remember the commits a purge rewrote (in ``.git/gitmem/purged.json``), so a sync
    can refuse a remote whose history still holds them instead of merging them back."""
    path = vault.state_dir / PURGED
    data = _purged(vault)
    data[memory_id] = sorted(set(data.get(memory_id, [])) | {c.decode() for c in old_commits})
    path.write_text(json.dumps(data, indent=1))


def _purged(vault: "Vault") -> dict[str, list[str]]:
    try:
        data = json.loads((vault.state_dir / PURGED).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def purged_in(vault: "Vault", commits: Iterable[bytes]) -> list[str]:
    """Ids of purged memories whose old (pre-purge) history is among ``commits``."""
    data = _purged(vault)
    if not data:
        return []
    incoming = {c.decode() for c in commits}
    return [mid for mid, old in data.items() if incoming.intersection(old)]


def _forget_old_objects(vault: "Vault") -> int:
    """Delete the reflogs and prune every unreachable object (repacking the rest)."""
    from dulwich.gc import garbage_collect
    logs = vault.git.git_dir / "logs"
    if logs.exists():
        shutil.rmtree(logs)
    stats = garbage_collect(vault.git.repo, prune=True, grace_period=None)
    return len(stats.pruned_objects)


def _rebuild_caches(vault: "Vault") -> None:
    """History table, file rows and search index from scratch; no old page left in SQLite."""
    vault.catalog.reset_touches()
    vault.scan()
    vault.sync_history()
    vault.catalog.db.execute("VACUUM")
    vault.catalog.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    vault.reindex()
    if vault._search_index is not None:  # noqa: SLF001 - compact: no deleted document kept on disk
        vault._search_index.optimize()  # noqa: SLF001
