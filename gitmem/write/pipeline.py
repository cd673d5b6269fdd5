"""The one write pipeline: every change to a vault becomes a commit here.

:class:`WritePipeline` is the only place that turns intended file changes into a
commit.  In order, under the vault lock (:meth:`WritePipeline.commit`):

1. a person's pending edits of the files being replaced are committed first, as
   theirs (:mod:`gitmem.write.person_edits`);
2. each memory file is parsed once; ``MEMORY.md`` is regenerated for the memories
   of the commit's tree, a person's uncommitted files left out
   (:mod:`gitmem.write.memory_md`);
3. the git store runs the write checks (path gate, content, secrets:
   :mod:`gitmem.write.checks`) and writes objects, the crash journal, the working
   tree, ``.git/index`` and the branch (:mod:`gitmem.store.git`);
4. the catalog, the history table and the search index take the commit's files
   (:meth:`WritePipeline.after_commit`), and the idle-time work is scheduled
   (:mod:`gitmem.write.background`).

Steps 1 to 3 hold git's ``.git/index.lock`` (:meth:`GitStore.index_locked`), so
``.git/index`` holds the commit's files before that lock is let go and no
``git commit`` run meanwhile can commit from an index that lags HEAD.

Content is rendered and screened (secrets policy, size limit) by :meth:`WritePipeline.render`
before any of this.  Edits made outside gitmem enter through
:class:`~gitmem.write.person_edits.OutsideEdits` (``pipeline.outside``), the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..errors import (
    BranchMoved,
    Conflict,
    ContentTooLarge,
    InvalidContent,
    InvalidFrontmatter,
    InvalidPath,
    NotFound,
    Protected,
)
from ..memory.markdown import ParsedFile, render
from ..memory.paths import MEMORY_MD
from ..memory.provenance import PERSON, lowest
from ..memory.secrets import policy_of as secrets_policy
from ..memory.secrets import screen as screen_secrets
from ..store.git import FileChange, blob_id
from ..store.reader import row_fields
from .background import BackgroundWork
from .person_edits import OutsideEdits, Touched, guard_person_edits

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Identity
    from ..memory.schema import Memory
    from ..search.service import SearchService
    from ..store.reader import Reader
    from ..store.storage import Storage
    from .checks import Origin
    from .memory_md import MemoryMd

__all__ = ["Committed", "WritePipeline"]

# A commit writing this many memories (an import) leaves the search index built; a
# smaller vault's search index is built on first use.
BULK_MEMORIES = 200


@dataclass(frozen=True)
class Committed:
    """What :meth:`WritePipeline.commit` made: the commit id and the memories it wrote."""

    sha: str
    memories: dict[str, Memory]


class WritePipeline:
    """Turns file changes into one commit and brings every cache along (module docstring)."""

    def __init__(self, store: Storage, reader: Reader, searcher: SearchService,
                 memory_md: MemoryMd) -> None:
        self.store = store
        self.reader = reader
        self.searcher = searcher
        self.memory_md = memory_md
        # Bytes of the files the write in progress read (path -> bytes); see person_edits.py.
        self.bases: dict[str, bytes] = {}
        # Commits of a person's edits made outside gitmem, through self.commit.
        self.outside = OutsideEdits(store, reader, self.commit)
        # The .git/index catch-up, search segment merges and packing after a write.
        self.background = BackgroundWork(store, searcher)
        # Called after each commit this pipeline makes (a background sync's "push soon"):
        # each must return at once, the write never waits for what it starts.
        self.on_commit: list[Callable[[], None]] = []

    # ------------------------------------------------------------ content
    def protected(self, memory: Memory) -> bool:
        return memory.type in self.store.config.protected_types and memory.status == "active"

    def origin_of(self, memory: Memory) -> str:
        """The origin ``memory`` is trusted as on this clone (store/trust.py)."""
        blob = memory.blob
        if blob is None:
            row = self.store.catalog.row(memory.path)
            blob = row.hash if row is not None else None
        return self.store.trust.effective(memory.meta, blob)

    def derived_origin(self, who: Identity, inputs: Sequence[Memory], *, own_words: bool = False) -> str:
        """The origin of a memory ``who`` writes from ``inputs``: the lowest trust of the
        writer and every input, so deriving can never raise trust.  ``own_words``: the text
        is the writer's own (an edit, a new memory), and a person's own words are the person's."""
        writer = self.store.origin_of(who)
        if own_words and writer == PERSON:
            return PERSON
        return lowest([writer, *(self.origin_of(m) for m in inputs)])

    def guard(self, memory: Memory, force: bool, action: str) -> None:
        if self.protected(memory) and not force:
            raise Protected(f"{memory.title!r} is a protected {memory.type}; refusing to {action} it")

    def render(self, meta: Mapping[str, Any], body: str, raw: Mapping[str, str] | None = None) -> bytes:
        if not isinstance(body, str):
            raise InvalidContent(f"content must be text, got {type(body).__name__}")
        if "\x00" in body:
            raise InvalidContent("content contains NUL characters")
        meta, body = screen_secrets(meta, body, secrets_policy(self.store.config))  # refuse/redact (secrets.py)
        data = render(meta, body, raw).encode("utf-8", "surrogatepass")
        if len(data) > self.store.config.max_content_bytes:
            raise ContentTooLarge(f"memory is {len(data):,} bytes; the limit is "
                                  f"{self.store.config.max_content_bytes:,}")
        return data

    def current(self, ref: str) -> tuple[Memory, ParsedFile]:
        """The memory and its parsed file, refusing files gitmem cannot rewrite safely."""
        path = self.reader.resolve(ref)
        try:
            data = safefs.read_bytes(self.store.root, path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFound(f"{path} no longer exists", hint="It was moved or removed meanwhile; retry.") from None
        if self.store.lock.held:
            self.bases[path] = data  # what this write is based on (person_edits.py)
        memory, parsed = self.reader.read_parsed(path, data)
        memory.blob = blob_id(data)
        if memory.problems or parsed.problem:
            raise InvalidFrontmatter(
                f"{path} has frontmatter gitmem cannot parse: {'; '.join(memory.problems)}",
                hint="Fix the file by hand (gitmem doctor lists such files); gitmem will not overwrite it.")
        return memory, parsed

    # ------------------------------------------------------------ commit
    @staticmethod
    def written(done: Committed, path: str) -> Memory:
        """The memory a write produced (parsed once, in :meth:`commit`)."""
        memory = done.memories[path]
        memory.commit = done.sha
        return memory

    def commit(self, changes: Sequence[FileChange], subject: str, op: str,
               touched: Sequence[Touched], *, author: Identity | None = None,
               forced: bool = False, body: str = "", write_worktree: bool = True,
               origin: Origin = "agent") -> Committed:
        """Make one commit of ``changes`` and bring the caches along (module docstring).
        Takes the vault lock (re-entrant: a caller may already hold it).

        ``touched`` lists (memory id, path after the commit, op) for the commit's
        ``Memory-Id`` trailers and the history table; an empty id stands for the memory
        written at that path.  ``origin`` says who made the content (see
        :mod:`gitmem.write.checks`): the write checks run on every change before any
        git object is stored; the author is screened for secrets first, before a
        person's pending edit is committed on the way."""
        who = author or self.store.author
        self.store.check_author(who)
        if forced:
            subject += " (forced)"

        def message_for(touched: Sequence[Touched]) -> str:
            trailers = [f"Memory-Id: {mid}" for mid in dict.fromkeys(t[0] for t in touched)]
            trailers += [f"Op: {op}", f"Agent: {who.name}",
                         f"Origin: {PERSON if origin == 'person' else self.store.origin_of(who)}"]
            trailers += ["Forced: true"] if forced else []
            return f"{subject}\n\n" + (f"{body.rstrip()}\n\n" if body else "") + "\n".join(trailers) + "\n"
        git = self.store.git
        with self.store.lock.hold():
            self._open_search_index_before_bulk(changes)
            bases, self.bases = self.bases, {}
            # git's .git/index.lock from here until .git/index holds the commit: a `git commit`
            # in a shell cannot slip in between the HEAD this write reads and its own commit.
            with git.git_index.locked():
                for attempt in range(3):
                    todo, expected = list(changes), None
                    if origin == "agent" and write_worktree:
                        # A person's save is committed first, as theirs, never overwritten (person_edits.py).
                        todo, expected = guard_person_edits(self.store, changes, bases, (MEMORY_MD,),
                                                            self.outside.commit_pending)
                    written, removed = self.parse_changes(todo)
                    # An empty id in ``touched`` is the id of the memory written at that path.
                    touched = [(t[0] or written[t[1]][0].id, *t[1:]) if not t[0] and t[1] in written else t
                               for t in touched]
                    message = message_for(touched)
                    memory_md = self.memory_md_change(todo, written, removed)
                    if memory_md is not None:
                        todo = [*todo, memory_md]
                    parent = git.head()
                    when = self.store.clock().timestamp()
                    try:
                        sha = git.commit_files(todo, message, who, when=when, write_worktree=write_worktree,
                                               generated=(MEMORY_MD,), origin=origin, expected=expected)
                    except Conflict as exc:
                        if not (exc.code == "changed_on_disk" or isinstance(exc, BranchMoved)) or attempt == 2:
                            raise
                        continue  # a save (or a git commit) landed in the last moments: build on it
                    break
            memories = self.after_commit(parent, sha, written, removed, touched, int(when))
        return Committed(sha.decode(), memories)

    def _open_search_index_before_bulk(self, changes: Sequence[FileChange]) -> None:
        """A bulk write (an import) opens the search index first, while it still matches
        the files: it then takes the batch from this write's own parse, instead of
        finding thousands of new files at its first use and reading them all again."""
        if len(changes) >= BULK_MEMORIES and self.searcher.open_index is None and self.store.git.head():
            self.searcher.index  # noqa: B018 - opening it is the point

    def memory_md_change(self, changes: Sequence[FileChange], written: Mapping[str, tuple[Memory, str]],
                         removed: Sequence[str]) -> FileChange | None:
        """The regenerated ``MEMORY.md`` for a commit of ``changes`` (None if unchanged).
        A person's uncommitted edit of the file is committed first, so it stays in history."""
        git = self.store.git
        head = git.head()
        text = self.memory_md.render_for(changes, written, removed, head)
        if text is None:
            return None
        committed = git.read_at(head, MEMORY_MD) if head else None
        on_disk = safefs.read_or_none(self.store.root, MEMORY_MD)  # a link there is never followed
        if on_disk is not None and on_disk != committed and on_disk != text:
            self.outside.keep_memory_md_edit("kept before regenerating")
            committed = on_disk
        return None if text == committed and on_disk == committed else FileChange(MEMORY_MD, text)

    def commit_merge(self, changes: Sequence[FileChange], message: str, who: Identity,
                     merge_parent: bytes) -> bytes:
        """A sync's merge commit: ``changes`` on HEAD, with ``merge_parent`` (the remote
        tip) as second parent; the write checks run as for any commit.  Lock held; the
        caches take the arrived files afterwards (:meth:`take_arrived`)."""
        return self.store.git.commit_files(changes, message, who, when=self.store.clock().timestamp(),
                                           merge_parents=[merge_parent])

    def fast_forward(self, local: bytes, tip: bytes, changes: Sequence[FileChange], message: str) -> None:
        """Move the branch from ``local`` to the remote's ``tip`` (each arriving file is
        checked as it is written).  Lock held; then :meth:`take_arrived`."""
        self.store.git.fast_forward(local, tip, list(changes), message)

    def take_arrived(self, changes: Sequence[FileChange]) -> list[str]:
        """The catalog and the search index take the files a sync brought (lock held; the
        commit is in place).  Never raises: a failure (a hostile file, a full disk) is
        returned as a problem and the caches catch up at the next read."""
        try:
            written, removed = self.parse_changes(changes)
            with self.store.catalog.transaction():
                self.store.catalog.drop(removed)
                for path, (memory, blob_hash) in written.items():
                    try:
                        st = safefs.lstat(self.store.root, path)
                    except InvalidPath:
                        st = None
                    self.store.catalog.put(path, memory.id, st, *row_fields(memory), blob_hash)
            self.searcher.index_changes(written, removed)
        except Exception as exc:  # noqa: BLE001 - the commit stands; the caches catch up later
            self.reader.scanned = False  # the next read re-scans the files
            return [f"catalog and search index not updated ({type(exc).__name__}: {exc}); "
                    "they catch up on the next read, or run 'gitmem reindex'"]
        return []

    def parse_changes(self, changes: Sequence[FileChange]
                      ) -> tuple[dict[str, tuple[Memory, str]], list[str]]:
        """Each memory file a commit writes, parsed and hashed once; and the removed ones."""
        written: dict[str, tuple[Memory, str]] = {}
        removed: list[str] = []
        for change in changes:
            if not self.store.is_memory_path(change.path):
                continue
            if change.data is None:
                removed.append(change.path)
            else:
                written[change.path] = (self.reader.read_file(change.path, change.data), blob_id(change.data))
        return written, removed

    def after_commit(self, parent: bytes | None, sha: bytes,
                     written: Mapping[str, tuple[Memory, str]], removed: Sequence[str],
                     touched: Sequence[Touched], when: int) -> dict[str, Memory]:
        """Update caches for a commit this Vault made (lock held).

        Each written memory file was parsed and hashed once (:meth:`parse_changes`);
        the catalog, the search index and the caller's return value all use that parse.

        Never raises: the commit is made, so the write has happened whatever befalls the
        caches now (a full disk, the catalog busy past its timeout); they are rebuilt
        from the files and from git, and catch up at the next read.
        """
        try:
            self._caches_take(parent, sha, written, removed, touched, when)
        except Exception:  # noqa: BLE001 - reporting the write as failed would make a caller write it twice
            self.reader.scanned = False     # the next read compares the catalog with the files
            self.memory_md.forget()
            self.searcher.fall_behind()     # the next search catches the index up
        self._tell_of_proposals(written)
        self.background.schedule()   # .git/index catch-up, search segment merges, packing
        for listener in list(self.on_commit):
            try:
                listener()
            except Exception:  # noqa: BLE001 - the commit is made: a listener's failure is not the write's
                pass
        return {path: memory for path, (memory, _) in written.items()}

    def _tell_of_proposals(self, written: Mapping[str, tuple[Memory, str]]) -> None:
        """A goal, rule or constraint written without a person's authority is a proposal:
        say so to the writer (agent tools add it to their answer)."""
        config = self.store.config
        for memory, blob in written.values():
            if memory.type in config.protected_types and memory.status == "active" \
                    and not self.store.in_force(memory.meta, blob):
                self.store.notify(
                    f"{memory.title!r} ({memory.id}) is recorded as a proposed {memory.type}, not in force: "
                    f"sessions see it as a proposal until a person accepts it (gitmem accept {memory.id}).")

    def _caches_take(self, parent: bytes | None, sha: bytes, written: Mapping[str, tuple[Memory, str]],
                     removed: Sequence[str], touched: Sequence[Touched], when: int) -> None:
        """The catalog, the history table, ``MEMORY.md``'s comparison and the search index
        take a commit's files (:meth:`after_commit`)."""
        with self.store.catalog.transaction():
            self.store.catalog.drop(removed)
            self.store.catalog.put_many(
                (path, memory.id, st, *row_fields(memory), blob_hash) for path, (memory, blob_hash) in written.items()
                if (st := safefs.lstat(self.store.root, path)) is not None)
            tip = self.store.catalog.get("history_tip")
            if tip == (parent.decode() if parent else None) or (tip is None and parent is None):
                self.store.catalog.add_touches(sha.decode(), when, touched)
                self.store.catalog.set("history_tip", sha.decode())
        self.memory_md.took(written, removed)
        if parent is None and len(written) >= BULK_MEMORIES and self.searcher.open_index is None:
            self.searcher.build_from(written)
        else:
            self.searcher.index_changes(written, removed, new=[t[1] for t in touched if t[2] == "add" and t[1]])
