"""History of one memory: its versions, a memory as of a commit or date, diffs, restore.

Part of the :class:`~gitmem.vault.Vault` (a mixin, kept in its own module for
size).  The list of commits that touched a memory comes from the catalog's
``touches`` table, filled at write time and, for commits made outside gitmem
(git CLI, a pull, the watcher), by :meth:`HistoryMixin.sync_history`, which
reads only the commits that are new since the last time.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping

from ..store.catalog import Touch, id_from_blob
from ..errors import InvalidInput, NotFound, RevisionNotFound
from ..store import safefs
from ..store.git import FileChange
from ..memory.markdown import decode, parse_text
from ..memory.schema import Memory, iso_now, normalize_timestamp, path_id

if TYPE_CHECKING:  # pragma: no cover
    from ..vault import Vault

__all__ = ["HistoryMixin", "Version", "rename_pairs"]

_OP_TRAILER = re.compile(r"^Op: *(\S+)", re.MULTILINE)
#: How alike a removed and an added file must be to count as one renamed file (git's default).
RENAME_SIMILARITY = 0.5
#: Removed x added files compared at most in one commit (git's diff.renameLimit is similar).
_RENAME_PAIRS_LIMIT = 250_000


def _line_similarity(a: "Counter[bytes]", size_a: int, b: "Counter[bytes]", size_b: int) -> float:
    """Bytes of the lines two files share / bytes of the larger one (like git's score)."""
    if len(a) > len(b):
        a, b = b, a
    shared = sum(min(n, b[line]) * len(line) for line, n in a.items() if line in b)
    return shared / max(size_a, size_b, 1)


def rename_pairs(removed: Mapping[str, bytes], added: Mapping[str, bytes]) -> list[tuple[str, str]]:
    """(old path, new path) of the removed files an added file renames, as git finds
    them: identical content first, then the most similar pairs with at least
    :data:`RENAME_SIMILARITY` of their lines alike.  Empty files are never paired."""
    olds = {p: d for p, d in removed.items() if d}
    news = {p: d for p, d in added.items() if d}
    pairs: list[tuple[str, str]] = []
    by_content: dict[bytes, list[str]] = {}
    for path in sorted(olds):
        by_content.setdefault(olds[path], []).append(path)
    for path in sorted(news):
        same = by_content.get(news[path])
        if same:
            pairs.append((same.pop(0), path))
    done_old, done_new = {p for p, _ in pairs}, {p for _, p in pairs}
    rest_old = sorted(p for p in olds if p not in done_old)
    rest_new = sorted(p for p in news if p not in done_new)
    if not rest_old or not rest_new or len(rest_old) * len(rest_new) > _RENAME_PAIRS_LIMIT:
        return pairs
    lines = {p: (Counter(d.splitlines(keepends=True)), len(d)) for p, d in
             [*((p, olds[p]) for p in rest_old), *((p, news[p]) for p in rest_new)]}
    scored = sorted(((-_line_similarity(*lines[o], *lines[n]), o, n) for o in rest_old for n in rest_new))
    for score, old, new in scored:
        if -score < RENAME_SIMILARITY:
            break
        if old not in done_old and new not in done_new:
            pairs.append((old, new))
            done_old.add(old)
            done_new.add(new)
    return pairs


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


class HistoryMixin:
    """History methods of the Vault."""

    # ------------------------------------------------------------ catch-up
    def sync_history(self: "Vault") -> int:
        """Record the memories touched by commits made since the last sync.

        Cost grows with the number of new commits, not the size of history.
        A rewritten history (rebase, purge) triggers a full rebuild.  Returns
        the number of commits read.
        """
        with self.lock.hold():
            head = self.git.head()
            tip = self.catalog.get("history_tip")
            if head is None or (tip is not None and tip.encode() == head):
                return 0
            old = tip.encode() if tip else None
            if old is not None and not self.git.is_ancestor(old, head):
                self.catalog.reset_touches()
                old = None
            commits = self.git.walk_new(old, head)
            with self.catalog.transaction():
                for sha in commits:
                    commit = self.git.commit(sha)
                    parent = commit.parents[0] if commit.parents else None
                    self.catalog.add_touches(sha.decode(), commit.author_time,
                                             self._touches_of(parent, sha, commit.message))
                self.catalog.set("history_tip", head.decode())
            return len(commits)

    def _touches_of(self: "Vault", parent: bytes | None, sha: bytes,
                    message: bytes) -> list[tuple[str, str | None, str]]:
        trailer = _OP_TRAILER.search(message.decode("utf-8", "replace"))
        if trailer and trailer.group(1) == "rename":
            return []  # the rename half of a move: its version is the commit that follows
        removed: dict[str, str] = {}
        present: dict[str, tuple[str, bool]] = {}  # id -> (path, existed before)
        gone_plain: dict[str, bytes] = {}   # removed files without an id: line, path -> content
        new_plain: dict[str, bytes] = {}    # added files without an id
        for change in self.git.changes_between(parent, sha):
            if change.old_path and self.is_memory_path(change.old_path) and change.new_sha is None:
                data = self.git.blob(change.old_sha) if change.old_sha else b""
                mid = id_from_blob(data)
                if mid is None:
                    gone_plain[change.old_path] = data
                    mid = self._plain_id(change.old_path)
                removed[mid] = change.old_path
            if change.new_path and self.is_memory_path(change.new_path) and change.new_sha:
                data = self.git.blob(change.new_sha)
                mid = id_from_blob(data)
                if mid is None:
                    if change.old_sha is None:
                        new_plain[change.new_path] = data
                    mid = self._plain_id(change.new_path)
                present[mid] = (change.new_path, change.old_sha is not None)
        # A file without an id that a person renamed keeps the id of its former name.
        for old, new in rename_pairs(gone_plain, new_plain):
            inherited = self._plain_id(old)
            present.pop(self._plain_id(new), None)
            self.catalog.set_inherited_id(new, inherited)
            present[inherited] = (new, False)
        out: list[tuple[str, str | None, str]] = []
        for mid, (path, existed) in present.items():
            op = "move" if mid in removed else ("update" if existed else "add")
            out.append((mid, path, trailer.group(1) if trailer else op))
        for mid, path in removed.items():
            if mid not in present:
                out.append((mid, None, trailer.group(1) if trailer else "delete"))
        return out

    def _plain_id(self: "Vault", path: str) -> str:
        """The id of a file at ``path`` with no ``id:`` in its frontmatter."""
        return self.catalog.inherited_id(path) or path_id(path)

    # ------------------------------------------------------------- queries
    def _memory_id(self: "Vault", ref: str) -> str:
        """The id ``ref`` names, also for memories that no longer have a file."""
        self.sync_history()   # renames it records decide the id of a file without one
        try:
            return self.get(ref).id
        except NotFound:
            self.sync_history()
            if self.catalog.touches(ref.strip()):
                return ref.strip()
            ids = self.catalog.touched_ids_with_prefix(ref.strip().lower()) if len(ref.strip()) >= 4 else []
            if len(ids) == 1:
                return ids[0]
            raise

    def touch_log(self: "Vault") -> list[tuple[str, Touch]]:
        """Every (memory id, :class:`Touch`) recorded, in the order the commits were made:
        the whole vault's history in one indexed read (``history`` reads one memory's)."""
        self.sync_history()
        # One scan of the touches table, not one query per memory (10k at 10k memories).
        rows = self.catalog.db.execute("SELECT id, commit_sha, path, op, time FROM touches ORDER BY seq")
        return [(r[0], Touch(*r[1:])) for r in rows]

    def history(self: "Vault", ref: str) -> list[Version]:
        """Every commit that touched the memory, oldest first, across moves."""
        memory_id = self._memory_id(ref)
        self.sync_history()
        versions = []
        with self.lock.hold():
            for touch in self.catalog.touches(memory_id):
                info = self.git.info(touch.commit.encode())
                versions.append(Version(
                    touch.commit, iso_now(datetime.fromtimestamp(info.time, timezone.utc)),
                    info.author, info.subject, touch.op, touch.path))
        if not versions:
            raise NotFound(f"no committed history for {ref!r} yet")
        return versions

    def _pick(self: "Vault", memory_id: str, rev: str | int) -> Touch:
        """The touch ``rev`` selects: ``~N``/int N (N versions back), a commit, or a date."""
        touches = self.catalog.touches(memory_id)
        if not touches:
            raise RevisionNotFound(f"memory {memory_id} has no committed versions")
        text = str(rev).strip()
        if isinstance(rev, int) or re.fullmatch(r"~?\d{1,3}", text):
            back = int(text.lstrip("~"))
            if back >= len(touches):
                raise RevisionNotFound(f"the memory has only {len(touches)} versions")
            return touches[-1 - back]
        if re.fullmatch(r"[0-9a-fA-F]{4,40}", text) and not re.fullmatch(r"\d{4}-\d{2}-\d{2}.*", text):
            sha = self.git.resolve(text).decode()
            for touch in reversed(touches):
                if touch.commit == sha:
                    return touch
            cutoff = self.git.info(sha.encode()).time
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

    def show_at(self: "Vault", ref: str, rev: str | int) -> Memory:
        """The memory as it was at ``rev`` (``~N``, a commit id, or an ISO date)."""
        memory_id = self._memory_id(ref)
        self.sync_history()
        with self.lock.hold():
            touch = self._pick(memory_id, rev)
            if touch.path is None:
                raise RevisionNotFound(f"the memory was deleted in {touch.commit[:8]}; pick an earlier version")
            data = self.git.read_at(touch.commit.encode(), touch.path)
        if data is None:  # pragma: no cover - touches and git disagree
            raise RevisionNotFound(f"{touch.path} is missing from commit {touch.commit[:8]}")
        memory = self._read_file(touch.path, data)
        memory.commit = touch.commit
        return memory

    def diff(self: "Vault", ref: str, old: str | int | None = None, new: str | int | None = None) -> str:
        """Unified diff of a memory between two versions.

        Defaults: ``old`` = the version before the last commit (``~1``), ``new``
        = the file as it is now in the working tree.  Empty string if equal.
        """
        memory_id = self._memory_id(ref)
        self.sync_history()
        if new is None:
            try:
                current = self.get(memory_id)
                new_path, new_text = current.path, decode(safefs.read_bytes(self.root, current.path))
            except (NotFound, FileNotFoundError):
                new_path, new_text = "/dev/null", ""
        else:
            later = self.show_at(memory_id, new)
            new_path, new_text = later.path, decode(self.git.read_at(later.commit.encode(), later.path) or b"")
        if old is None:
            old = 1 if len(self.catalog.touches(memory_id)) > 1 else 0
        earlier = self.show_at(memory_id, old)
        old_text = decode(self.git.read_at(earlier.commit.encode(), earlier.path) or b"")
        lines = difflib.unified_diff(old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                     f"a/{earlier.path}", f"b/{new_path}" if new_path != "/dev/null" else new_path)
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

    def restore(self: "Vault", ref: str, rev: str | int, *, force: bool = False,
                author: Any = None) -> Memory:
        """Bring a memory back to an earlier version, as a new commit.

        The content and location (tier) of version ``rev`` come back; the
        ``updated`` time is now.  Works for soft- and hard-deleted memories.
        """
        who = self._author(author)
        memory_id = self._memory_id(ref)
        with self.lock.hold():
            old = self.show_at(memory_id, rev)
            current: Memory | None
            try:
                current = self.get(memory_id)
            except NotFound:
                current = None
            if current is not None:
                self._guard(current, force, "overwrite")
            target = old.path
            if (current is None or current.path != target) and safefs.lstat(self.root, target) is not None:
                raise RevisionNotFound(f"cannot restore to {target}: another file is there now")
            raw = self.git.read_at(old.commit.encode(), old.path) or b""
            parsed = parse_text(decode(raw))
            meta = dict(old.meta, updated=self.now())
            data = self._render(meta, parsed.body if parsed.has_frontmatter else old.body,
                                parsed.raw_blocks)
            changes = [FileChange(target, data, moved_from=current.path if current is not None
                                  and current.path != target else None)]
            if current is not None and current.path != target:
                changes.insert(0, FileChange(current.path, None))
            done = self._commit(changes, f"restore: {old.title} to {old.commit[:8]}", "restore",
                               [(memory_id, target, "restore")], author=who,
                               forced=bool(force and current and self._protected(current)))
        return self._written(done, target)
