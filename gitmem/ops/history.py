"""History of one memory: its versions, a memory as of a commit or date, diffs, restore.

:class:`History` answers these from git and the catalog.  The list of commits that
touched a memory comes from the catalog's ``touches`` table, filled at write time and,
for commits made outside gitmem (git CLI, a pull, the watcher), by
:meth:`History.sync_history`, which reads only the commits that are new since the last time.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..errors import InvalidInput, NotFound, RevisionNotFound
from ..memory.markdown import decode, parse_text
from ..memory.provenance import claimed_origin
from ..memory.schema import Memory, iso_now, normalize_timestamp
from ..memory.similarity import rename_pairs
from ..store.catalog import Touch, id_from_blob
from ..store.git import FileChange, blob_id

if TYPE_CHECKING:  # pragma: no cover
    from ..store.reader import Reader
    from ..store.storage import Storage
    from ..write.pipeline import WritePipeline

__all__ = ["History", "Version", "Lineage"]

_OP_TRAILER = re.compile(r"^Op: *(\S+)", re.MULTILINE)
_ORIGIN_TRAILER = re.compile(r"^Origin: *(.+)$", re.MULTILINE)
# Relations by which a memory names a memory it was derived from (or that one names it).
_FROM_RELATIONS = ("derived_from", "supersedes")
_INTO_FIELDS = ("merged_into", "archived_into", "superseded_by")


@dataclass(frozen=True)
class Lineage:
    """Where a memory came from (``gitmem why``): its origin as the file states it and as
    this clone trusts it, the memories it was derived from, and every commit of its life
    with its author and the origin that commit recorded."""

    memory: Memory
    origin: str
    trusted_as: str
    in_force: bool | None      # for goals, rules and constraints: an instruction or a proposal
    sources: list[dict[str, Any]]
    versions: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.memory.id, "title": self.memory.title, "path": self.memory.path,
                "type": self.memory.type, "origin": self.origin, "trusted_as": self.trusted_as,
                "in_force": self.in_force, "sources": self.sources, "versions": self.versions}


@dataclass(frozen=True)
class Version:
    """One commit in a memory's life."""

    commit: str
    date: str
    author: str
    subject: str
    op: str
    path: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "date": self.date, "author": self.author,
                "subject": self.subject, "op": self.op, "path": self.path}


class History:
    """How memories changed: versions, a memory as of a commit, diffs, restore."""

    def __init__(self, store: Storage, reader: Reader, pipeline: WritePipeline) -> None:
        self.store = store
        self.reader = reader
        self.pipeline = pipeline

    # ------------------------------------------------------------ catch-up
    def sync_history(self) -> int:
        """Record the memories touched by commits made since the last sync.

        Cost grows with the number of new commits, not the size of history.
        A rewritten history (rebase, purge) triggers a full rebuild.  Returns
        the number of commits read.
        """
        head = self.store.git.head()
        tip = self.store.catalog.get("history_tip")
        if head is None or (tip is not None and tip.encode() == head):
            return 0
        # A read records the history without the vault lock (it never waits for it): the
        # catalog's own write transaction keeps two processes from recording a commit twice,
        # and a writer records its commit only on top of the tip it finds (write/pipeline.py).
        with self.store.lock.threads(), self.store.catalog.transaction():
            head = self.store.git.head()
            tip = self.store.catalog.get("history_tip")
            if head is None or (tip is not None and tip.encode() == head):
                return 0
            old = tip.encode() if tip else None
            if old is not None and not self.store.git.is_ancestor(old, head):
                self.store.catalog.reset_touches()
                old = None
            commits = self.store.git.walk_new(old, head)
            for sha in commits:
                commit = self.store.git.commit(sha)
                parent = commit.parents[0] if commit.parents else None
                self.store.catalog.add_touches(sha.decode(), commit.author_time,
                                               self._touches_of(parent, sha, commit.message))
            self.store.catalog.set("history_tip", head.decode())
            return len(commits)

    def _touches_of(self, parent: bytes | None, sha: bytes,
                    message: bytes) -> list[tuple[str, str | None, str]]:
        trailer = _OP_TRAILER.search(message.decode("utf-8", "replace"))
        if trailer and trailer.group(1) == "rename":
            return []  # the rename half of a move: its version is the commit that follows
        removed: dict[str, str] = {}
        present: dict[str, tuple[str, bool]] = {}  # id -> (path, existed before)
        gone_plain: dict[str, bytes] = {}   # removed files without an id: line, path -> content
        new_plain: dict[str, bytes] = {}    # added files without an id
        for change in self.store.git.changes_between(parent, sha):
            if change.old_path and self.store.is_memory_path(change.old_path) and change.new_sha is None:
                data = self.store.git.blob(change.old_sha) if change.old_sha else b""
                mid = id_from_blob(data)
                if mid is None:
                    gone_plain[change.old_path] = data
                    mid = self.reader.plain_id(change.old_path)
                removed[mid] = change.old_path
            if change.new_path and self.store.is_memory_path(change.new_path) and change.new_sha:
                data = self.store.git.blob(change.new_sha)
                mid = id_from_blob(data)
                if mid is None:
                    if change.old_sha is None:
                        new_plain[change.new_path] = data
                    mid = self.reader.plain_id(change.new_path)
                present[mid] = (change.new_path, change.old_sha is not None)
        # A file without an id that a person renamed keeps the id of its former name.
        for old, new in rename_pairs(gone_plain, new_plain):
            inherited = self.reader.plain_id(old)
            present.pop(self.reader.plain_id(new), None)
            self.store.catalog.set_inherited_id(new, inherited)
            present[inherited] = (new, False)
        out: list[tuple[str, str | None, str]] = []
        for mid, (path, existed) in present.items():
            op = "move" if mid in removed else ("update" if existed else "add")
            out.append((mid, path, trailer.group(1) if trailer else op))
        for mid in removed:
            if mid not in present:
                out.append((mid, None, trailer.group(1) if trailer else "delete"))
        return out

    # ------------------------------------------------------------- queries
    def memory_id(self, ref: str) -> str:
        """The id ``ref`` names, also for memories that no longer have a file."""
        self.sync_history()   # renames it records decide the id of a file without one
        try:
            return self.reader.get(ref).id
        except NotFound:
            self.sync_history()
            if self.store.catalog.touches(ref.strip()):
                return ref.strip()
            ids = self.store.catalog.touched_ids_with_prefix(ref.strip().lower()) if len(ref.strip()) >= 4 else []
            if len(ids) == 1:
                return ids[0]
            raise

    def touch_log(self) -> list[tuple[str, Touch]]:
        """Every (memory id, :class:`Touch`) recorded, in the order the commits were made:
        the whole vault's history in one indexed read (``history`` reads one memory's)."""
        self.sync_history()
        # One scan of the touches table, not one query per memory (10k at 10k memories).
        return self.store.catalog.all_touches()

    def history(self, ref: str) -> list[Version]:
        """Every commit that touched the memory, oldest first, across moves."""
        memory_id = self.memory_id(ref)
        self.sync_history()
        versions = []
        with self.store.lock.threads():   # a read: never waits for another process's write
            for touch in self.store.catalog.touches(memory_id):
                info = self.store.git.info(touch.commit.encode())
                versions.append(Version(
                    touch.commit, iso_now(datetime.fromtimestamp(info.time, UTC)),
                    info.author, info.subject, touch.op, touch.path))
        if not versions:
            raise NotFound(f"no committed history for {ref!r} yet")
        return versions

    def why(self, ref: str) -> Lineage:
        """The memory's lineage, from its file and git history (:class:`Lineage`)."""
        memory = self.reader.get(ref)
        row = self.store.catalog.row(memory.path)
        blob = row.hash if row is not None else None
        trusted = self.store.trust.effective(memory.meta, blob)
        protected = memory.type in self.store.config.protected_types
        sources: list[dict[str, Any]] = []
        seen: set[str] = set()

        def source(memory_id: str, relation: str) -> None:
            if memory_id in seen or memory_id == memory.id:
                return
            seen.add(memory_id)
            rows = self.store.catalog.by_id(memory_id)
            found = rows[0] if rows else None
            sources.append({"id": memory_id, "relation": relation,
                            "title": found.meta.get("title") if found else None,
                            "path": found.path if found else None,
                            "origin": self.store.trust.effective(found.meta, found.hash) if found else None})
        for entry in memory.meta.get("related", []):
            if isinstance(entry, dict) and entry.get("relation") in _FROM_RELATIONS:
                source(str(entry["id"]), str(entry["relation"]))
        if memory.meta.get("supersedes"):
            source(str(memory.meta["supersedes"]), "supersedes")
        for other, _, relation in self.store.catalog.linking_to([memory.id]):
            if relation in _INTO_FIELDS:
                source(other.id, relation)
        versions: list[dict[str, Any]] = []
        try:
            touches = self.history(memory.id)
        except NotFound:   # not committed yet (a person's new note)
            touches = []
        for version in touches:
            message = self.store.git.info(version.commit.encode()).message
            found = _ORIGIN_TRAILER.search(message)
            versions.append({**version.to_dict(), "origin": found.group(1).strip() if found else None})
        return Lineage(memory, claimed_origin(memory.meta), trusted,
                       self.store.in_force(memory.meta, blob) if protected else None, sources, versions)

    def _pick(self, memory_id: str, rev: str | int) -> Touch:
        """The touch ``rev`` selects: ``~N``/int N (N versions back), a commit, or a date."""
        touches = self.store.catalog.touches(memory_id)
        if not touches:
            raise RevisionNotFound(f"memory {memory_id} has no committed versions")
        text = str(rev).strip()
        if isinstance(rev, int) or re.fullmatch(r"~?\d{1,3}", text):
            back = int(text.lstrip("~"))
            if back >= len(touches):
                raise RevisionNotFound(f"the memory has only {len(touches)} versions")
            return touches[-1 - back]
        if re.fullmatch(r"[0-9a-fA-F]{4,40}", text) and not re.fullmatch(r"\d{4}-\d{2}-\d{2}.*", text):
            sha = self.store.git.resolve(text).decode()
            for touch in reversed(touches):
                if touch.commit == sha:
                    return touch
            cutoff = self.store.git.info(sha.encode()).time
        else:
            try:
                stamp = normalize_timestamp(text, "revision")
            except InvalidInput:
                raise RevisionNotFound(f"{rev!r} is not a version (~N), commit id or date") from None
            cutoff = int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
                cutoff += 86399  # a bare date means "as of the end of that day"
        earlier = [t for t in touches if t.time <= cutoff]
        if not earlier:
            raise RevisionNotFound(f"the memory did not exist yet at {rev}")
        return earlier[-1]

    def show_at(self, ref: str, rev: str | int) -> Memory:
        """The memory as it was at ``rev`` (``~N``, a commit id, or an ISO date)."""
        memory_id = self.memory_id(ref)
        self.sync_history()
        with self.store.lock.threads():   # a read: never waits for another process's write
            touch = self._pick(memory_id, rev)
            if touch.path is None:
                raise RevisionNotFound(f"the memory was deleted in {touch.commit[:8]}; pick an earlier version")
            data = self.store.git.read_at(touch.commit.encode(), touch.path)
        if data is None:  # pragma: no cover - touches and git disagree
            raise RevisionNotFound(f"{touch.path} is missing from commit {touch.commit[:8]}")
        memory = self.reader.read_file(touch.path, data)
        memory.commit = touch.commit
        return memory

    def diff(self, ref: str, old: str | int | None = None, new: str | int | None = None) -> str:
        """Unified diff of a memory between two versions.

        Defaults: ``old`` = the version before the last commit (``~1``), ``new``
        = the file as it is now in the working tree.  Empty string if equal.
        """
        memory_id = self.memory_id(ref)
        self.sync_history()
        if new is None:
            try:
                current = self.reader.get(memory_id)
                new_path, new_text = current.path, decode(safefs.read_bytes(self.store.root, current.path))
            except (NotFound, FileNotFoundError):
                new_path, new_text = "/dev/null", ""
        else:
            later = self.show_at(memory_id, new)
            new_path, new_text = later.path, decode(self._bytes_of(later))
        if old is None:
            old = 1 if len(self.store.catalog.touches(memory_id)) > 1 else 0
        earlier = self.show_at(memory_id, old)
        old_text = decode(self._bytes_of(earlier))
        lines = difflib.unified_diff(old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                     f"a/{earlier.path}", f"b/{new_path}" if new_path != "/dev/null" else new_path)
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

    def _commit_of(self, version: Memory) -> str:
        """The commit a version from :meth:`show_at` was read at (show_at always names it)."""
        if version.commit is None:
            raise RevisionNotFound(f"no commit holds this version of {version.path}")
        return version.commit

    def _bytes_of(self, version: Memory) -> bytes:
        """The file bytes of a version from :meth:`show_at`, as its commit holds them."""
        return self.store.git.read_at(self._commit_of(version).encode(), version.path) or b""

    def restore(self, ref: str, rev: str | int, *, force: bool = False,
                author: Any = None) -> Memory:
        """Bring a memory back to an earlier version, as a new commit.

        The content and location (tier) of version ``rev`` come back; the
        ``updated`` time is now.  Works for soft- and hard-deleted memories.
        """
        who = self.store.author_of(author)
        memory_id = self.memory_id(ref)
        with self.store.lock.hold():
            old = self.show_at(memory_id, rev)
            current: Memory | None
            try:
                current = self.reader.get(memory_id)
            except NotFound:
                current = None
            if current is not None:
                self.pipeline.guard(current, force, "overwrite")
            target = old.path
            if (current is None or current.path != target) and safefs.lstat(self.store.root, target) is not None:
                raise RevisionNotFound(f"cannot restore to {target}: another file is there now")
            raw = self._bytes_of(old)
            parsed = parse_text(decode(raw))
            old.blob = blob_id(raw)
            # The old text comes back as it was trusted, never above the one restoring it.
            meta = dict(old.meta, updated=self.store.now(), origin=self.pipeline.derived_origin(who, [old]))
            data = self.pipeline.render(meta, parsed.body if parsed.has_frontmatter else old.body,
                                parsed.raw_blocks)
            changes = [FileChange(target, data, moved_from=current.path if current is not None
                                  and current.path != target else None)]
            if current is not None and current.path != target:
                changes.insert(0, FileChange(current.path, None))
            done = self.pipeline.commit(changes, f"restore: {old.title} to {self._commit_of(old)[:8]}", "restore",
                               [(memory_id, target, "restore")], author=who,
                               forced=bool(force and current and self.pipeline.protected(current)))
        return self.pipeline.written(done, target)
