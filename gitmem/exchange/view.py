"""``gitmem view``: the vault's history as one self-contained HTML page.

The page (:func:`write_view`, :func:`render_view`) shows the tiers and memories,
a timeline of commits, and for each memory its versions with line diffs and its
moves between tiers.  It needs no network: the CSS and JavaScript are inline
(``view_page.*``, shipped with the package) and a Content-Security-Policy forbids
every fetch and every script but the page's own, so it works opened from
``file://`` and a hostile memory cannot run script in it.

How the history is read, once for the whole vault (:class:`HistoryWalk`; never
``history(ref)`` memory by memory):

* the catalog's touches (:meth:`History.touch_log`) say which memories each
  commit touched and how;
* one tree comparison per commit (:func:`changed_files`, each tree object parsed
  once) gives the blob of each touched version (and the paths the pure-rename
  half of a move carried, which records no touch);
* the versions' text is read memory by memory and embedded as edit scripts of
  the version before (lines kept, skipped, inserted), which the page turns back
  into texts and diffs when a memory is opened.  ``bench/view.py`` measures this
  against unified diffs rendered here and embedded as text: about the same time,
  and a smaller page, since a script holds no context lines and the page can
  still show any version whole.

Vault values (titles, bodies, author names, tags, commit messages) only ever
enter the page as JSON inside ``<script type="application/json">`` with ``<``,
``>`` and ``&`` escaped; the page's script shows them as text nodes, never markup.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import io
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dulwich.objects import ObjectID

from ..errors import NotFound, StorageError
from ..memory.markdown import parse_text

if TYPE_CHECKING:  # pragma: no cover
    from dulwich.objects import Commit

    from ..services import Services
    from ..store.catalog import Touch

__all__ = ["ViewData", "ViewCommit", "ViewMemory", "ViewReport", "HistoryWalk", "gather", "changed_files",
           "version_texts", "version_chains", "edit_script", "page_chunks", "render_view", "write_view",
           "to_json", "MAX_TEXT_CHARS", "DEFAULT_PAGE"]

#: Characters of one version shown in the page; the rest is cut (a memory file may hold
#: megabytes, and every version of it would be embedded).
MAX_TEXT_CHARS = 256 * 1024
# The commit trailer gitmem writes (Op: add, Op: move ...); commits made with git have none.
OP_TRAILER = re.compile(r"^Op: *(\S+)", re.MULTILINE)
#: The page's file name in ``.git/gitmem/`` when no path is given.
DEFAULT_PAGE = "view.html"
#: Parsed trees kept while history is read: those of the last few hundred commits, all a
#: walk needs (the parent side of each comparison is the commit read just before).
TREE_CACHE = 2048
JSON_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


@dataclass
class ViewCommit:
    """One commit of the timeline; ``touches`` are (memory index, op)."""

    sha: str
    time: int
    author: int  # index into ViewData.authors
    op: str
    subject: str
    touches: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class ViewMemory:
    """One memory: its current (or, once removed, last) metadata and its versions,
    each (commit index, op, path or None when removed, blob sha or None)."""

    id: str
    meta: dict[str, Any]
    path: str | None
    gone: bool = False
    versions: list[tuple[int, str, str | None, bytes | None]] = field(default_factory=list)


@dataclass
class ViewData:
    """Everything the page shows but the versions' text."""

    vault: str
    head: str | None
    generated: str
    tiers: list[str]
    authors: list[tuple[str, str]]  # (name, email)
    commits: list[ViewCommit]
    memories: list[ViewMemory]

    @property
    def version_count(self) -> int:
        return sum(len(m.versions) for m in self.memories)

    @property
    def removed_count(self) -> int:
        """The memories listed whose file is gone (hard deletes): counted in ``memories``,
        which is every memory the page lists."""
        return sum(1 for m in self.memories if m.gone)


@dataclass(frozen=True)
class ViewReport:
    """What :func:`write_view` wrote: ``memories`` is every memory the page lists,
    ``removed`` of them included (memories whose file is gone, listed with their history)."""

    path: str
    memories: int
    commits: int
    versions: int
    bytes: int
    seconds: float
    removed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "memories": self.memories, "removed": self.removed, "commits": self.commits,
                "versions": self.versions, "bytes": self.bytes, "seconds": self.seconds}


def to_json(value: Any) -> str:
    """Compact JSON that is safe inside an HTML ``<script>`` element: ``<``, ``>`` and
    ``&`` are written as ``\\u003c`` ... so no ``</script>`` or ``<!--`` can end it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).translate(JSON_ESCAPES)


def _author_of(raw: bytes) -> tuple[str, str]:
    text = raw.decode("utf-8", "replace")
    name, sep, email = text.partition(" <")
    return (name.strip() or text, email.rstrip(">") if sep else "")


def gather(services: Services) -> ViewData:
    """Read the vault's memories and its whole history (see the module doc for how)."""
    services.reader.scan()
    walk = HistoryWalk(services, services.history.touch_log())  # touch_log catches up with outside commits first
    head = services.store.git.head()
    if head is not None:
        # Oldest first: reversed topological order puts every parent before its children.
        for entry in reversed(list(services.store.git.repo.get_walker(include=[ObjectID(head)], order="topo"))):
            walk.read(entry.commit)
    memories, commits = walk.finish()
    return ViewData(services.store.root.name, head.decode() if head else None, services.store.now(),
                    list(services.store.config.tiers), list(walk.authors), commits, memories)


class HistoryWalk:
    """One pass over the vault's history, oldest commit first (:meth:`read` each)."""

    def __init__(self, services: Services, touches: list[tuple[str, Touch]]) -> None:
        self.services = services
        self.recorded: dict[str, list[tuple[str, str | None, str]]] = {}
        for memory_id, touch in touches:
            self.recorded.setdefault(touch.commit, []).append((memory_id, touch.path, touch.op))
        self.memories: list[ViewMemory] = []
        self.index: dict[str, int] = {}
        for row in services.store.catalog.all_rows():
            if row.id not in self.index:  # two files with one id (a conflict copy): the first is shown
                self.index[row.id] = len(self.memories)
                self.memories.append(ViewMemory(row.id, row.meta, row.path))
        self.authors: dict[tuple[str, str], int] = {}
        self.commits: list[ViewCommit] = []
        # Memory path -> id and back, as of the commit being read: the rename half of a
        # move records no touch, so its memory is found by the path it moved from.
        self.path_ids: dict[str, str] = {}
        self.id_paths: dict[str, str] = {}
        self.trees: dict[bytes, bytes] = {}  # commit -> its tree: the parent's side of each comparison
        self.cache: dict[bytes, dict[bytes, tuple[int, bytes]]] = {}
        self.tiers = {t.encode("utf-8") for t in services.store.config.tiers}

    def read(self, commit: Commit) -> None:
        """Add one commit (its parents were read before it)."""
        number = len(self.commits)
        message = commit.message.decode("utf-8", "replace")
        self.trees[commit.id] = commit.tree
        parent = None
        if commit.parents:
            parent = self.trees.get(commit.parents[0]) or self.services.store.git.tree_of(commit.parents[0])
        store = self.services.store.git.repo.object_store
        changes = list(changed_files(store, parent, commit.tree, self.cache, self.tiers))
        blobs = {path: new for path, _, new in changes if new is not None}
        entry = ViewCommit(commit.id.decode(), commit.author_time,
                           self.authors.setdefault(_author_of(commit.author), len(self.authors)),
                           "", message.split("\n", 1)[0])
        done = self.recorded.get(entry.sha, [])
        for memory_id, path, op in done:
            at = self._memory(memory_id)
            blob = None if path is None else blobs.get(path) or self.services.store.git.blob_sha_at(commit.id, path)
            self.memories[at].versions.append((number, op, path, blob))
            entry.touches.append((at, op))
            self._follow(memory_id, path)
        if not done:
            for memory_id, path in self._renamed(changes):
                entry.touches.append((self._memory(memory_id), "rename"))
                self._follow(memory_id, path)
        trailer = OP_TRAILER.search(message)
        ops = {op for _, op in entry.touches}
        entry.op = trailer.group(1) if trailer else (ops.pop() if len(ops) == 1 else "commit")
        self.commits.append(entry)

    def finish(self) -> tuple[list[ViewMemory], list[ViewCommit]]:
        """The memories (recent activity first) and the commits (oldest first)."""
        for memory in self.memories:
            if memory.gone:
                memory.meta = _last_meta(self.services, memory)
        # Memories not committed yet (no versions) lead.  The commits' touches name
        # memories by position, so they follow the new order.
        last = len(self.commits)
        order = sorted(range(len(self.memories)),
                       key=lambda k: -(self.memories[k].versions[-1][0] if self.memories[k].versions else last))
        moved = {old: new for new, old in enumerate(order)}
        for entry in self.commits:
            entry.touches = [(moved[at], op) for at, op in entry.touches]
        return [self.memories[k] for k in order], self.commits

    def _memory(self, memory_id: str) -> int:
        """The position of a memory, added as removed when no file has its id now."""
        at = self.index.get(memory_id)
        if at is None:
            at = self.index[memory_id] = len(self.memories)
            self.memories.append(ViewMemory(memory_id, {}, None, gone=True))
        return at

    def _follow(self, memory_id: str, path: str | None) -> None:
        """Record that ``memory_id`` is now at ``path`` (None: removed)."""
        old = self.id_paths.pop(memory_id, None)
        if old is not None and self.path_ids.get(old) == memory_id:
            del self.path_ids[old]
        if path is not None:
            self.path_ids[path] = memory_id
            self.id_paths[memory_id] = path

    def _renamed(self, changes: list[tuple[str, bytes | None, bytes | None]]) -> list[tuple[str, str]]:
        """(memory id, new path) of the memory files a commit renamed without a recorded
        touch (the rename half of a move): same blob, removed at a known path, added elsewhere."""
        gone = {old: self.path_ids[path] for path, old, new in changes
                if new is None and old and path in self.path_ids}
        if not gone:
            return []
        return [(gone[new], path) for path, old, new in changes
                if old is None and new in gone and self.services.store.is_memory_path(path)]


def changed_files(store: Any, old: bytes | None, new: bytes | None,
                  cache: dict[bytes, dict[bytes, tuple[int, bytes]]], roots: set[bytes] | None = None,
                  prefix: bytes = b"") -> Iterator[tuple[str, bytes | None, bytes | None]]:
    """(path, old blob, new blob) of the regular files that differ between two trees
    (None: absent), looking only into the top-level folders ``roots`` when given.

    Like dulwich's ``tree_changes``, but every tree parsed is kept in ``cache``
    (bounded) for the next call: in a walk over history the old side of a commit is the
    new side of the one before, so each tree object is read once, not twice or more."""
    if old == new:
        return
    before, after = _entries(store, old, cache), _entries(store, new, cache)
    for name in before.keys() | after.keys():
        was, now = before.get(name), after.get(name)
        if was == now or (roots is not None and name not in roots):
            continue
        path = prefix + name
        was_dir = was is not None and stat.S_ISDIR(was[0])
        now_dir = now is not None and stat.S_ISDIR(now[0])
        if was_dir or now_dir:
            yield from changed_files(store, was[1] if was is not None and was_dir else None,
                                     now[1] if now is not None and now_dir else None, cache, None, path + b"/")
        old_blob = was[1] if was is not None and stat.S_ISREG(was[0]) else None
        new_blob = now[1] if now is not None and stat.S_ISREG(now[0]) else None
        if old_blob != new_blob:
            yield path.decode("utf-8", "surrogateescape"), old_blob, new_blob


def _entries(store: Any, sha: bytes | None, cache: dict[bytes, dict[bytes, tuple[int, bytes]]]
             ) -> dict[bytes, tuple[int, bytes]]:
    if sha is None:
        return {}
    found = cache.get(sha)
    if found is None:
        if len(cache) >= TREE_CACHE:
            cache.clear()
        found = cache[sha] = {e.path: (e.mode, e.sha) for e in store[sha].iteritems()}
    return found


def _last_meta(services: Services, memory: ViewMemory) -> dict[str, Any]:
    """Frontmatter of the last version a removed memory had (title, type, tags ...)."""
    for _, _, path, blob in reversed(memory.versions):
        if blob is not None and path is not None:
            meta = dict(parse_text(_text(services.store.git.blob(blob))).meta)
            meta.setdefault("title", path.rsplit("/", 1)[-1].removesuffix(".md"))
            meta["tier"] = path.split("/", 1)[0]
            return meta
    return {"title": memory.id}


def _text(data: bytes) -> str:
    """A version's text as the page shows it (undecodable bytes replaced, cut when huge)."""
    text = data.decode("utf-8", "replace")
    if len(text) > MAX_TEXT_CHARS:
        text = (text[:MAX_TEXT_CHARS] + f"\n\u2026 (cut: gitmem view shows the first {MAX_TEXT_CHARS:,} "
                f"of {len(text):,} characters of a version)\n")
    return text


def version_texts(services: Services, data: ViewData) -> Iterator[list[str | None]]:
    """Per memory (in ``data.memories`` order), the text of each version (None: removed)."""
    for memory in data.memories:
        texts: list[str | None] = []
        cache: dict[bytes, str] = {}
        for _, _, _, blob in memory.versions:
            if blob is None:
                texts.append(None)
                continue
            if blob not in cache:
                cache[blob] = _text(services.store.git.blob(blob))
            texts.append(cache[blob])
        yield texts


def version_chains(services: Services, data: ViewData) -> Iterator[list[Any]]:
    """Per memory, its versions as the page embeds them: the first text whole, each
    later one as an edit script of the version before it with text (whole again when
    the script is not much smaller), None when removed.

    A script is a list of steps over the earlier version's lines (split at newlines): a
    positive n keeps the next n lines, a negative n skips n lines, a list of strings
    inserts those lines.  The page rebuilds each text from it and diffs two texts
    itself, so the script only has to be exact, not minimal."""
    for texts in version_texts(services, data):
        chain: list[Any] = []
        before: list[str] | None = None
        for text in texts:
            if text is None:
                chain.append(None)
                continue
            lines = text.split("\n")
            script = edit_script(before, lines) if before is not None else None
            chain.append(script if script is not None else text)
            before = lines
        yield chain


def edit_script(before: list[str], after: list[str]) -> list[Any] | None:
    """The steps turning ``before`` into ``after``; None when inserting would take more
    than half of ``after``'s text (the whole text is then as small and simpler)."""
    steps: list[Any] = []
    inserted = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after).get_opcodes():
        if tag == "equal":
            if steps and isinstance(steps[-1], int) and steps[-1] > 0:
                steps[-1] += i2 - i1
            else:
                steps.append(i2 - i1)
            continue
        if i2 > i1:
            steps.append(i1 - i2)
        if j2 > j1:
            steps.append(after[j1:j2])
            inserted += sum(len(line) + 1 for line in after[j1:j2])
    if inserted * 2 > sum(len(line) + 1 for line in after):
        return None
    return steps


def _data_json(data: ViewData) -> str:
    """The page's index (all but the versions' text) as compact JSON."""
    commits = [[c.sha, c.time, c.author, c.op, c.subject, [t for pair in c.touches for t in pair]]
               for c in data.commits]
    memories = []
    for m in data.memories:
        meta = m.meta
        tags = meta.get("tags")
        memories.append([
            m.id, str(meta.get("title") or m.id), str(meta.get("type") or "memory"),
            m.path.split("/", 1)[0] if m.path else str(meta.get("tier") or ""),
            "removed" if m.gone else str(meta.get("status") or "active"),
            str(meta.get("agent") or ""), [str(t) for t in tags] if isinstance(tags, list) else [],
            m.path, [[n, op, path] for n, op, path, _ in m.versions]])
    return to_json({"vault": data.vault, "head": data.head, "generated": data.generated,
                    "tiers": data.tiers, "authors": [list(a) for a in data.authors],
                    "commits": commits, "memories": memories})


def _asset(name: str) -> str:
    try:
        return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    except OSError as exc:  # pragma: no cover - a broken installation
        raise StorageError(f"gitmem's page template {name} is missing: {exc}",
                           hint="Reinstall gitmem (pip install --force-reinstall gitmem-vault).") from None


def page_chunks(services: Services, data: ViewData) -> Iterator[str]:
    """The page as pieces of text, in order: versions are read and written one memory
    at a time, so memory use stays flat however long the history is."""
    template, style, script = _asset("view_page.html"), _asset("view_page.css"), _asset("view_page.js")
    # Only the page's own script and style apply (by their hashes); nothing may be fetched or sent.
    csp = (f"default-src 'none'; script-src '{_sha256(script)}'; style-src '{_sha256(style)}'; "
           "base-uri 'none'; form-action 'none'")
    pieces = re.split(r"(\{\{[a-z]+\}\})", template)
    for piece in pieces:
        if piece == "{{csp}}":
            yield csp
        elif piece == "{{style}}":
            yield style
        elif piece == "{{data}}":
            yield _data_json(data)
        elif piece == "{{script}}":
            yield script
        elif piece == "{{versions}}":
            yield "["
            for n, chain in enumerate(version_chains(services, data)):
                yield ("," if n else "") + to_json(chain)
            yield "]"
        else:
            yield piece


def _sha256(text: str) -> str:
    """A Content-Security-Policy hash source for an inline element holding ``text``."""
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def render_view(services: Services) -> str:
    """The whole page as one string (:func:`write_view` streams it to a file instead)."""
    out = io.StringIO()
    for chunk in page_chunks(services, gather(services)):
        out.write(chunk)
    return out.getvalue()


def write_view(services: Services, path: str | os.PathLike[str] | None = None) -> ViewReport:
    """Write the page to ``path`` (replaced atomically: a browser never reads half a page).

    The default, ``.git/gitmem/view.html``, keeps it out of the vault's tracked files (a
    page in the work tree would show in ``git status`` and could be committed)."""
    start = time.perf_counter()
    target = Path(path).expanduser().absolute() if path is not None else services.store.state_dir / DEFAULT_PAGE
    if not target.parent.is_dir():
        raise NotFound(f"cannot write {target}: the folder {target.parent} does not exist",
                       hint="Create the folder first, or choose another file.")
    data = gather(services)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise StorageError(f"cannot write {target}: {exc.strerror or exc}") from None
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in page_chunks(services, data):
                blob = chunk.encode("utf-8", "replace")
                size += len(blob)
                out.write(blob)
        # Kept as mkstemp made it, readable by its owner only: the page holds every
        # version of every memory.
        os.replace(temp, target)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise StorageError(f"cannot write {target}: {exc.strerror or exc}") from None
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return ViewReport(str(target), len(data.memories), len(data.commits), data.version_count, size,
                      round(time.perf_counter() - start, 3), data.removed_count)
