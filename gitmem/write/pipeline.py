"""The one write pipeline: every change to a vault becomes a commit here.

:class:`WritePipeline` is the only place that turns intended file changes into a
commit.  In order, under the vault lock:

1. a person's pending edits of the files being replaced are committed first, as
   theirs (:mod:`gitmem.write.person_edits`);
2. each memory file is parsed once; ``MEMORY.md`` is regenerated for the memories
   of the commit's tree, a person's uncommitted files left out
   (:mod:`gitmem.write.memory_md`);
3. the git store runs the write checks (path gate, content, secrets:
   :mod:`gitmem.write.checks`) and writes objects, the crash journal, the working
   tree and the branch (:mod:`gitmem.store.git`);
4. the catalog, the history table and the search index take the commit's files.

Steps 1 to 3 hold git's ``.git/index.lock`` (:meth:`GitStore.index_locked`), so
``.git/index`` holds the commit's files before that lock is let go and no
``git commit`` run meanwhile can commit from an index that lags HEAD.

Content is rendered and screened (secrets policy, size limit) by :meth:`WritePipeline.render`
before any of this.  Edits made outside gitmem enter through
:meth:`WritePipeline.commit_outside_edits`, the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dulwich.file import FileLocked

from .. import safefs
from ..errors import Conflict, ContentTooLarge, InvalidContent, InvalidFrontmatter, InvalidPath, NotFound, Protected
from ..memory.markdown import ParsedFile, render
from ..memory.paths import MEMORY_MD
from ..memory.secrets import policy_of as secrets_policy
from ..memory.secrets import screen as screen_secrets
from ..memory.similarity import rename_pairs
from ..store.catalog import id_from_blob
from ..store.git import FileChange, blob_id
from ..store.reader import row_fields
from .person_edits import guard_person_edits, outside_paths, pair_moves

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Identity
    from ..memory.schema import Memory
    from ..search.service import SearchService
    from ..store.reader import Reader
    from ..store.storage import Storage
    from .checks import Origin
    from .memory_md import MemoryMd

__all__ = ["Committed", "WritePipeline"]

# Seconds of quiet before the idle work: merging small search-index segments, packing,
# and the repair of .git/index entries another process left (each write brings its own
# entries into .git/index before it returns).
INDEX_FLUSH_DELAY = 0.25
# When git holds .git/index.lock (an IDE polling `git status`), that repair is retried:
# first after 0.05 s, doubling up to 0.25 s apart (git holds the lock for
# milliseconds, so frequent tries get through), for 60 s; then it stays marked
# (index-dirty) for the next write or the next process to repair.
INDEX_RETRY_FIRST = 0.05
INDEX_RETRY_MAX = 0.25
INDEX_RETRY_FOR = 60.0
# A commit writing this many memories (an import) leaves the search index built; a
# smaller vault's index is built on first use.
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
        # Outside edits the write checks refused at the last commit_outside_edits (path -> why).
        self.outside_refused: dict[str, str] = {}
        self._flush_timer: threading.Timer | None = None
        self.closed = False

    # ------------------------------------------------------------ content
    def protected(self, memory: Memory) -> bool:
        return memory.type in self.store.config.protected_types and memory.status == "active"

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
        if memory.problems or parsed.problem:
            raise InvalidFrontmatter(
                f"{path} has frontmatter gitmem cannot parse: {'; '.join(memory.problems)}",
                hint="Fix the file by hand (gitmem doctor lists such files); gitmem will not overwrite it.")
        return memory, parsed

    # ------------------------------------------------------------ commit
    @staticmethod
    def written(done: Committed, path: str) -> Memory:
        """The memory a write produced (parsed once, in :meth:`_after_commit`)."""
        memory = done.memories[path]
        memory.commit = done.sha
        return memory

    def commit(self, changes: Sequence[FileChange], subject: str, op: str,
                touched: Sequence[tuple[str, str | None, str]], *, author: Identity | None = None,
                forced: bool = False, body: str = "", write_worktree: bool = True,
                origin: Origin = "agent") -> Committed:
        """Make one commit of ``changes`` and update the caches. Lock must be held.

        ``origin`` says who made the content (see :mod:`gitmem.write.checks`): the
        write checks run on every change before any git object is stored."""
        who = author or self.store.author
        if forced:
            subject += " (forced)"

        def message_for(touched: Sequence[tuple[str, str | None, str]]) -> str:
            trailers = [f"Memory-Id: {mid}" for mid in dict.fromkeys(t[0] for t in touched)]
            trailers += [f"Op: {op}", f"Agent: {who.name}"] + (["Forced: true"] if forced else [])
            return f"{subject}\n\n" + (f"{body.rstrip()}\n\n" if body else "") + "\n".join(trailers) + "\n"
        with self.store.lock.hold():
            if len(changes) >= BULK_MEMORIES and self.searcher.open_index is None and self.store.git.head():
                # A bulk write (an import) opens the index first, while it still matches the
                # files: it then takes the batch from this write's own parse, instead of
                # finding thousands of new files at its first use and reading them all again.
                self.searcher.index  # noqa: B018
            bases, self.bases = self.bases, {}
            # git's index.lock from here until .git/index holds the commit: a `git commit` in
            # a shell cannot slip in between the HEAD this write reads and its own commit.
            with self.store.git.index_locked():
                for attempt in range(3):
                    todo, expected = list(changes), None
                    if origin == "agent" and write_worktree:
                        # A person's save is committed first, as theirs, never overwritten (person_edits.py).
                        todo, expected = guard_person_edits(self.store, changes, bases, (MEMORY_MD,),
                                                            self._commit_person_edits)
                    written, removed = self.parse_changes(todo)
                    # An empty id in ``touched`` is the id of the memory written at that path.
                    touched = [(t[0] or written[t[1]][0].id, *t[1:]) if not t[0] and t[1] in written else t
                               for t in touched]
                    message = message_for(touched)
                    index_change = self.memory_md_change(todo, written, removed)
                    if index_change is not None:
                        todo = [*todo, index_change]
                    parent = self.store.git.head()
                    when = self.store.clock().timestamp()
                    try:
                        sha = self.store.git.commit_files(todo, message, who, when=when,
                                                          write_worktree=write_worktree, generated=(MEMORY_MD,),
                                                          origin=origin, expected=expected)
                    except Conflict as exc:
                        if exc.code != "changed_on_disk" or attempt == 2:
                            raise
                        continue  # a save landed in the last moments: commit it, then try again
                    break
            memories = self.after_commit(parent, sha, written, removed, touched, int(when))
        return Committed(sha.decode(), memories)

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
            self.keep_memory_md_edit("kept before regenerating")
            committed = on_disk
        return None if text == committed and on_disk == committed else FileChange(MEMORY_MD, text)

    def keep_memory_md_edit(self, reason: str, *, tracked_only: bool = False) -> str | None:
        """Commit a person's edit of ``MEMORY.md`` (the file differs from HEAD) as theirs,
        before gitmem replaces it; the commit id, or None when there is no such edit.
        ``tracked_only``: only when HEAD has the file (an untracked one is left alone)."""
        git = self.store.git
        head = git.head()
        on_disk = safefs.read_or_none(self.store.root, MEMORY_MD)  # a link there is never followed
        committed = git.read_at(head, MEMORY_MD) if head else None
        if on_disk is None or on_disk == committed or (tracked_only and committed is None):
            return None
        user = self.store.config.user
        return git.commit_files([FileChange(MEMORY_MD, on_disk)],
                                f"edit: {MEMORY_MD} (outside edit, {reason})\n\nOp: edit\nAgent: {user.name}\n",
                                user, when=self.store.clock().timestamp(), write_worktree=False,
                                origin="person").decode()

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
                      touched: Sequence[tuple[str, str | None, str]], when: int) -> dict[str, Memory]:
        """Update caches for a commit this Vault made (lock held).

        Each written memory file was parsed and hashed once (:meth:`_parse_changes`);
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
        self.schedule_index_flush()
        return {path: memory for path, (memory, _) in written.items()}

    def _caches_take(self, parent: bytes | None, sha: bytes, written: Mapping[str, tuple[Memory, str]],
                     removed: Sequence[str], touched: Sequence[tuple[str, str | None, str]], when: int) -> None:
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

    # ------------------------------------------------------- .git/index
    def schedule_index_flush(self, delay: float = INDEX_FLUSH_DELAY, *, retry: float = 0.0,
                              deadline: float | None = None) -> None:
        """(Re)start the deferred ``.git/index`` update (lock held, or from its timer).

        ``retry`` is the wait before the next retry should this one fail, and
        ``deadline`` when retries stop (both set by :meth:`_flush_quietly`)."""
        if self._flush_timer:
            self._flush_timer.cancel()
        if deadline is None:
            deadline = time.monotonic() + INDEX_RETRY_FOR
        timer = threading.Timer(delay, self._flush_quietly,
                                kwargs={"retry": retry or INDEX_RETRY_FIRST, "deadline": deadline})
        timer.daemon = True
        self._flush_timer = timer
        timer.start()

    def _merge_when_idle(self) -> None:
        """Merge the search index's small segments (timer thread), one merge per hold of
        the vault lock, so a writer never waits for more than one; stops as soon as a
        write scheduled a newer timer (it merges after that write instead)."""
        index = self.searcher.open_index
        more = index is not None
        while more:
            with self.store.lock.hold():
                if self.closed or self._flush_timer is not threading.current_thread():
                    return
                more = index.merge_small(rounds=1)

    def _flush_quietly(self, retry: float = INDEX_RETRY_FIRST, deadline: float = 0.0) -> None:
        """The timer's body: update ``.git/index``; while git holds ``index.lock``, try
        again (``retry`` seconds later, doubling up to 2 s) until ``deadline``.  Past it,
        the ``index-dirty`` marker stays for the next write or the next process."""
        if self.closed:
            return
        done = False
        try:
            with self.store.lock.hold():
                # A write made while this timer waited for the lock scheduled a newer
                # timer: leave the work to it, so a busy writer is not slowed by merges.
                if self._flush_timer is not None and self._flush_timer is not threading.current_thread():
                    return
                done = self.store.git.flush_index()
                if done and self.store.git.index_dirty():
                    try:  # another process gave up on its entries (or died): repair them too
                        self.store.git.repair_index()
                    except FileLocked:
                        done = False
                if not done and not self.closed and time.monotonic() + retry <= deadline:
                    self.schedule_index_flush(retry, retry=min(retry * 2, INDEX_RETRY_MAX),
                                               deadline=deadline)
                    return
        except Exception:  # noqa: BLE001 - best effort in a timer thread; retried below
            pass
        if done and not self.closed:
            try:
                self._merge_when_idle()
            except Exception:  # noqa: BLE001 - best effort; the next idle moment tries again
                pass
            try:  # packing runs outside the vault lock, in its own process: writers go on meanwhile
                self.store.git.housekeep(separate_process=True)
            except Exception:  # noqa: BLE001 - best effort; the next idle moment tries again
                pass
        if not done and not self.closed and time.monotonic() + retry <= deadline:
            # (the lock was not had: a write racing this check at worst has its own
            # timer replaced by this one, which flushes its entries too)
            if self._flush_timer is threading.current_thread():
                self.schedule_index_flush(retry, retry=min(retry * 2, INDEX_RETRY_MAX),
                                           deadline=deadline)


    def flush(self, timeout: float) -> bool:
        """Bring ``.git/index`` in line with HEAD now, retrying for up to ``timeout`` s
        while git holds ``index.lock``; True once nothing is pending."""
        if self._flush_timer:
            self._flush_timer.cancel()
        return self.flush_retrying(timeout)

    def flush_retrying(self, timeout: float) -> bool:
        """Flush ``.git/index``, retrying with backoff for up to ``timeout`` seconds;
        True once nothing is pending.  The vault lock is taken per attempt only."""
        deadline = time.monotonic() + timeout
        delay = INDEX_RETRY_FIRST
        while True:
            # Never longer than ``timeout`` for the vault lock either: a busy writer in
            # another process leaves the work to the next writer (the index stays marked).
            with self.store.lock.try_hold(max(deadline - time.monotonic(), 0.001)) as held:
                if not held:
                    return False
                if self.store.git.flush_index():
                    if not self.store.git.index_dirty():
                        return True
                    try:  # left dirty by a process that gave up (or an open that met the lock)
                        self.store.git.repair_index()
                        return True
                    except FileLocked:
                        pass
            if time.monotonic() + delay > deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, INDEX_RETRY_MAX)


    # ------------------------------------------------------- outside edits
    def _commit_person_edits(self, paths: list[str]) -> Mapping[str, str]:
        """Commit a person's pending edits of ``paths``; the refused ones (path -> why)."""
        self.commit_outside_edits(paths, reason="outside edit")
        return self.outside_refused

    def outside_changes(self, paths: Iterable[str] | None = None) -> list[FileChange]:
        """Memory files whose content differs from HEAD (edited outside gitmem)."""
        if paths is None:
            self.reader.scan()
            head_files = self._head_memory_files()
            candidates = set(head_files) | set(self.store.catalog.hashes())
        else:
            # Folders stand for their files, and both sides of a move are taken (person_edits.py).
            candidates = outside_paths(self.store, self.reader, paths)
            head = self.store.git.head()
            head_files = {}
            for p in candidates:
                sha = self.store.git.blob_sha_at(head, p)
                if sha is not None:
                    head_files[p] = sha.decode()
        hashes = self.store.catalog.hashes()
        changes = []
        for path in sorted(candidates):
            if path in hashes and hashes[path] != head_files.get(path):
                data = safefs.read_or_none(self.store.root, path)
                if data is not None:
                    changes.append(FileChange(path, data))
                elif not safefs.is_symlink_on_the_way(self.store.root, path):
                    changes.append(FileChange(path, None))
            elif (path not in hashes and path in head_files
                  and not safefs.is_symlink_on_the_way(self.store.root, path)
                  and safefs.lstat(self.store.root, path) is None):
                changes.append(FileChange(path, None))
        return changes

    def uncommitted_paths(self) -> set[str]:
        """Memory files whose content in the working folder, as last scanned into the
        catalog, differs from HEAD's (changed, added or removed and not committed).
        Takes no lock and reads no memory file: a follower compares after each full
        rescan, so a change whose file event it missed, and which another process
        indexed first, is still committed."""
        head_files = self._head_memory_files()
        hashes = self.store.catalog.hashes()
        return {path for path in head_files.keys() | hashes.keys() if head_files.get(path) != hashes.get(path)}

    def _head_memory_files(self) -> dict[str, str]:
        return {p: s.decode() for p, s in self.store.git.list_tree(self.store.git.head()).items()
                if self.store.is_memory_path(p)}

    def commit_outside_edits(self, paths: Iterable[str] | None = None,
                             author: Any = None, reason: str | None = None) -> str | None:
        """Commit memory files edited outside gitmem, as one commit authored by
        the vault's ``user`` (from ``.gitmem.yaml``); the files are not touched.
        ``reason`` is added to the subject in parentheses (``edit: <title> (outside edit)``).
        ``paths`` (None: the whole vault) may name folders, which stand for every memory
        file under them in HEAD and on disk; a memory moved to a new path is committed as
        a rename, with its old path, whichever side ``paths`` names
        (:func:`~gitmem.write.person_edits.outside_paths`).

        Returns the commit id, or None when nothing differs from HEAD.
        """
        with self.store.lock.hold():
            changes = self.outside_changes(paths)
            # A file the write checks refuse (a secret, a name clash) stays on disk
            # uncommitted and is reported; the others are committed.
            refused = self.store.git.checks.refusals(self.store.git, changes, "person", self.store.git.head()) \
                if self.store.git.checks is not None else {}
            self.outside_refused = {path: exc.message for path, exc in refused.items()}
            changes = pair_moves(self.store, changes, refused)   # the refused left out
            if not changes:
                return None
            head = self.store.git.head()
            renamed = self._outside_renames(changes, head)
            # new path -> old path of every move (a memory's id found at a new path too)
            moves = {**{c.path: c.moved_from for c in changes if c.moved_from},
                     **{new: old for new, (old, _) in renamed.items()}}
            renamed_from = set(moves.values())
            touched = []
            for change in changes:
                if change.path in renamed_from:
                    continue  # the memory lives on under its new name (below)
                if change.data is None:
                    prior = self.store.git.read_at(head, change.path) or b""
                    touched.append((id_from_blob(prior) or self.reader.plain_id(change.path), None, "edit"))
                else:
                    touched.append((self.reader.read_file(change.path, change.data).id, change.path, "edit"))
            if len(changes) == 1:
                only = changes[0]
                what = self.reader.read_file(only.path, only.data).title if only.data is not None else only.path
                subject = f"edit: {what}" + (" (removed)" if only.data is None else "")
            elif len(changes) == 2 and len(moves) == 1:
                new_path, old_path = next(iter(moves.items()))
                subject = f"edit: {self.reader.read_file(new_path, changes[0].data or changes[1].data).title}" \
                    f" (renamed from {old_path.rsplit('/', 1)[-1]})"
            else:
                subject = f"edit: {len(changes) - len(renamed_from)} memories changed outside gitmem"
            if reason:
                subject += f" ({reason})"
            listing = "\n".join(
                (f"R {moves[c.path]} -> {c.path}" if c.path in moves else
                 f"{'D' if c.data is None else ('M' if self.store.git.blob_sha_at(head, c.path) else 'A')} {c.path}")
                for c in changes if c.path not in renamed_from)
            who = self.store.author_of(author) if author else self.store.config.user
            try:
                done = self.commit(changes, subject, "edit", touched, author=who, body=listing,
                                    write_worktree=False, origin="person")
            except BaseException:
                for new_path, (_, before) in renamed.items():   # the rename is not recorded
                    self.store.catalog.set_inherited_id(new_path, before)
                raise
        return done.sha

    def _outside_renames(self, changes: Sequence[FileChange], head: bytes | None
                         ) -> dict[str, tuple[str, str | None]]:
        """Files without an ``id:`` that a person renamed (Obsidian renames a note by
        renaming its file): new path -> (old path, the id it inherited before).  The new
        path is recorded as the old one's memory, so it keeps its id and history; the
        file itself is not touched.  Pairs are found as git finds renames."""
        gone: dict[str, bytes] = {}
        added: dict[str, bytes] = {}
        for change in changes:
            if change.data is None:
                prior = self.store.git.read_at(head, change.path) if head else None
                if prior is not None and id_from_blob(prior) is None:
                    gone[change.path] = prior
            elif id_from_blob(change.data) is None and (head is None or
                                                         self.store.git.blob_sha_at(head, change.path) is None):
                added[change.path] = change.data
        if not gone or not added:
            return {}
        out: dict[str, tuple[str, str | None]] = {}
        with self.store.catalog.transaction():
            for old, new in rename_pairs(gone, added):
                memory_id = self.reader.plain_id(old)
                out[new] = (old, self.store.catalog.inherited_id(new))
                self.store.catalog.set_inherited_id(new, memory_id)
        return out


