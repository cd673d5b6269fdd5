"""A person's saves are never lost to an agent's write, nor attributed to the agent.

Before gitmem replaces a file it compares what is on disk with what HEAD holds
and with what gitmem read when it computed the change (its *base*):

* a file the person changed (on disk, not committed) is first committed as the
  person's own commit (``edit: <title> (outside edit)``, authored by the vault's
  user), so the
  agent's commit holds only the agent's change;
* if the person changed it *after* gitmem read it, the agent's change is merged
  into the person's text (fields and body, three ways, as sync merges); when
  the two cannot be merged the write is refused with ``conflict`` and the
  person's text stays (committed);
* right before each file is replaced, it is checked once more
  (:meth:`GitStore.commit_files` ``expected``): a save in those last moments
  stops the write (``changed_on_disk``) and the vault retries from the top.

A person's edits are committed whole (:func:`outside_paths`, :func:`pair_moves`): a
commit of some of the files a person moved (one side of a folder move, the file
an agent is about to write) also holds the other side, so a memory never stands
at two paths in HEAD, and a memory whose id is found at a new path is committed
as a rename.

:class:`OutsideEdits` makes those commits (``edit: <title> (outside edit)``),
through the one write pipeline, whether the guard above, the watcher, a git
hook or a sync asks for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from .. import safefs
from ..errors import Conflict, UnsafePath
from ..memory.paths import MEMORY_MD, is_hidden_part
from ..memory.similarity import rename_pairs
from ..store.catalog import id_from_blob
from ..store.git import FileChange, blob_id
from .merge import merge_memory

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Identity
    from ..store.reader import Reader
    from ..store.storage import Storage
    from .checks import Origin

__all__ = ["guard_person_edits", "outside_paths", "pair_moves", "OutsideEdits", "Touched", "CommitFn"]

#: (memory id, its path after the commit or None when removed, op) for each memory a commit touches.
Touched = tuple[str, str | None, str]


class CommitMade(Protocol):
    """What a commit returns that the outside edits use: its id."""

    @property
    def sha(self) -> str: ...


class CommitFn(Protocol):
    """:meth:`WritePipeline.commit <gitmem.write.pipeline.WritePipeline.commit>`, as the
    outside edits call it."""

    def __call__(self, changes: Sequence[FileChange], subject: str, op: str,
                 touched: Sequence[Touched], *, author: Identity | None = None,
                 body: str = "", write_worktree: bool = True, origin: Origin = "agent") -> CommitMade: ...


def guard_person_edits(store: Storage, changes: Sequence[FileChange], bases: Mapping[str, bytes],
                       generated: Sequence[str], commit_edits: Callable[[list[str]], Mapping[str, str]]
                       ) -> tuple[list[FileChange], dict[str, str | None]]:
    """Commit a person's pending edits of the files ``changes`` replace, merge the
    agent's change into edits made since gitmem read them (``bases``: path -> bytes
    read), and return (changes to commit, what each file must still hold).
    ``commit_edits(paths)`` commits those files as the person's and returns the ones
    the write checks refused (path -> why).  Lock held."""
    head = store.git.head()
    paths = list(dict.fromkeys(p for c in changes for p in (c.moved_from, c.path)
                               if p and p not in generated))
    disk = {p: safefs.read_or_none(store.root, p) for p in paths}
    committed = {p: store.git.blob_sha_at(head, p) for p in paths}
    # (a file on disk that HEAD lacks counts too: a person's new note is committed first)
    edited = [p for p in paths if store.is_memory_path(p) and (data := disk[p]) is not None
              and blob_id(data).encode() != committed[p]]
    if edited:
        refusals = commit_edits(edited)
        refused = [p for p in edited if p in refusals]
        if refused:
            raise Conflict(f"{refused[0]} holds a person's unsaved-to-history edit that cannot be committed "
                           f"({refusals[refused[0]]}); gitmem will not overwrite it",
                           hint="Fix the file (gitmem doctor names the problem), then retry.")
    # What the person's commit holds is "theirs", and what every file must still hold
    # when it is replaced: a save after that commit stops the write (and it retries).
    now_head = store.git.head()
    out: list[FileChange] = []
    for change in changes:
        source = change.moved_from or change.path
        if change.data is not None and source in edited and store.is_memory_path(change.path):
            base = bases.get(source)
            if base is None:
                base = store.git.read_at(head, source)
            mine = store.git.read_at(now_head, source)
            if base is not None and mine is not None and blob_id(base) != blob_id(mine):
                merged = merge_memory(base, change.data, mine, tier=change.path.split("/", 1)[0],
                                      tiers=tuple(store.config.tiers))
                if merged is None:
                    raise Conflict(f"{source} was changed by a person while gitmem was writing it, and the "
                                   "two changes cannot be merged; the person's text was kept and committed",
                                   hint="Read the memory again and redo the change.", path=source)
                change = FileChange(change.path, merged, change.moved_from)
        out.append(change)
    expected: dict[str, str | None] = {}
    for path in paths:
        sha = store.git.blob_sha_at(now_head, path)
        expected[path] = None if sha is None else sha.decode()
    return out, expected


def outside_paths(store: Storage, reader: Reader, paths: Iterable[str]) -> set[str]:
    """The memory files a commit of the outside edits of ``paths`` must compare with
    HEAD, each scanned into the catalog from disk.  Lock held.

    A path naming a folder under a tier stands for every memory file under it, in
    HEAD and on disk (a folder moved or deleted: what HEAD held there is found
    whatever another process has indexed meanwhile).  The other side of a move is
    added: for a file HEAD lacks, the path HEAD holds its memory at when that file
    is gone from disk; for a file gone from disk, the path its memory is on disk at
    now when HEAD lacks that one."""
    head = store.git.head()
    wanted: set[str] = set()
    for path in paths:
        path = path.strip("/")
        if store.is_memory_path(path):
            wanted.add(path)
        elif _is_folder_in_tier(store, path):
            wanted.update(_head_files_under(store, head, path))
            wanted.update(rel for rel, _ in safefs.walk_files(store.root, path, skip_dir=is_hidden_part)
                          if store.is_memory_path(rel))
    reader.scan_paths(sorted(wanted))
    partners: set[str] = set()
    for path in wanted:
        partners.update(_other_side(store, reader, head, path))
    partners -= wanted
    if partners:
        reader.scan_paths(sorted(partners))
    return wanted | partners


def pair_moves(store: Storage, changes: Sequence[FileChange], refused: Iterable[str] = ()
               ) -> list[FileChange]:
    """``changes`` (outside edits) without the ``refused`` paths (the write checks'
    refusals), each file that appeared holding the ``id:`` of a file that vanished
    marked as moved from it (``FileChange.moved_from``: git sees a rename, also when
    the text changed too).  When the new side of a move is refused the old side is
    held back as well: the memory stays where HEAD has it until the new file can be
    committed.  Lock held."""
    refused = set(refused)
    head = store.git.head()
    gone: dict[str, str] = {}
    for change in changes:
        if change.data is None and change.path not in refused:
            prior = store.git.read_at(head, change.path)
            memory_id = id_from_blob(prior) if prior is not None else None
            if memory_id:
                gone.setdefault(memory_id, change.path)
    moves: dict[str, str] = {}   # new path -> old path
    for change in changes:
        if gone and change.data is not None and store.git.blob_sha_at(head, change.path) is None:
            old = gone.pop(id_from_blob(change.data) or "", None)
            if old is not None:
                moves[change.path] = old
    held = refused | {old for new, old in moves.items() if new in refused}
    return [FileChange(c.path, c.data, moves.get(c.path, c.moved_from)) for c in changes if c.path not in held]


def _is_folder_in_tier(store: Storage, path: str) -> bool:
    parts = path.split("/")
    return bool(path) and parts[0] in store.config.tiers and not any(
        not p or p == ".." or is_hidden_part(p) for p in parts)


def _head_files_under(store: Storage, head: bytes | None, folder: str) -> set[str]:
    """The memory files under ``folder`` in commit ``head`` (only that part of the tree is read)."""
    found: set[str] = set()
    stack = [folder]
    while stack:
        current = stack.pop()
        for name in store.git.names_in(head, current):
            rel = f"{current}/{name}"
            if store.git.blob_sha_at(head, rel) is not None:
                if store.is_memory_path(rel):
                    found.add(rel)
            elif not is_hidden_part(name):
                stack.append(rel)
    return found


def _other_side(store: Storage, reader: Reader, head: bytes | None, path: str) -> list[str]:
    """The other path of a move ``path`` is one side of (scanned files; see :func:`outside_paths`)."""
    catalog = store.catalog
    row = catalog.row(path)
    committed = store.git.blob_sha_at(head, path)
    if row is not None and committed is None:
        # Appeared: where did HEAD keep this memory?  (The history table records each
        # memory's last path; HEAD must still hold it there, and the disk must not.)
        old = catalog.last_path(row.id)
        if old and old != path and _absent(store, old):
            before = store.git.read_at(head, old)
            if before is not None and (id_from_blob(before) or reader.plain_id(old)) == row.id:
                return [old]
        return []
    if row is None and committed is not None and _absent(store, path):
        # Vanished: is this memory on disk under a path HEAD lacks?
        memory_id = id_from_blob(store.git.blob(committed))
        if memory_id:
            return [r.path for r in catalog.by_id(memory_id)
                    if r.path != path and store.git.blob_sha_at(head, r.path) is None]
    return []


def _absent(store: Storage, path: str) -> bool:
    """True when nothing is at ``path`` (a link on the way counts as something: never followed)."""
    try:
        return safefs.lstat(store.root, path) is None
    except UnsafePath:
        return False


class OutsideEdits:
    """Commits of memory files a person changed outside gitmem (an editor, Obsidian, a
    shell), authored by the vault's ``user`` (from ``.gitmem.yaml``), through the
    write pipeline's ``commit``; the files themselves are never touched."""

    def __init__(self, store: Storage, reader: Reader, commit: CommitFn) -> None:
        self.store = store
        self.reader = reader
        self._commit = commit
        # Outside edits the write checks refused at the last commit (path -> why).
        self.refused: dict[str, str] = {}

    def commit_pending(self, paths: list[str]) -> Mapping[str, str]:
        """Commit a person's pending edits of ``paths``; the refused ones (path -> why).
        The ``commit_edits`` of :func:`guard_person_edits`."""
        self.commit(paths, reason="outside edit")
        return self.refused

    def changes(self, paths: Iterable[str] | None = None) -> list[FileChange]:
        """Memory files whose content differs from HEAD (edited outside gitmem)."""
        git = self.store.git
        if paths is None:
            self.reader.scan()
            head_files = self._head_memory_files()
            candidates = set(head_files) | set(self.store.catalog.hashes())
        else:
            # Folders stand for their files, and both sides of a move are taken (outside_paths).
            candidates = outside_paths(self.store, self.reader, paths)
            head = git.head()
            head_files = {}
            for p in candidates:
                sha = git.blob_sha_at(head, p)
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

    def commit(self, paths: Iterable[str] | None = None, author: str | Identity | None = None,
               reason: str | None = None) -> str | None:
        """Commit memory files edited outside gitmem, as one commit authored by
        the vault's ``user`` (from ``.gitmem.yaml``); the files are not touched.
        ``reason`` is added to the subject in parentheses (``edit: <title> (outside edit)``).
        ``paths`` (None: the whole vault) may name folders, which stand for every memory
        file under them in HEAD and on disk; a memory moved to a new path is committed as
        a rename, with its old path, whichever side ``paths`` names (:func:`outside_paths`).

        Returns the commit id, or None when nothing differs from HEAD.
        """
        git = self.store.git
        with self.store.lock.hold():
            changes = self.changes(paths)
            # A file the write checks refuse (a secret, a name clash) stays on disk
            # uncommitted and is reported; the others are committed.
            refused = git.checks.refusals(git, changes, "person", git.head()) if git.checks is not None else {}
            self.refused = {path: exc.message for path, exc in refused.items()}
            changes = pair_moves(self.store, changes, refused)   # the refused left out
            if not changes:
                return None
            head = git.head()
            renamed = self._renames(changes, head)
            # new path -> old path of every move (a memory's id found at a new path too)
            moves = {**{c.path: c.moved_from for c in changes if c.moved_from},
                     **{new: old for new, (old, _) in renamed.items()}}
            renamed_from = set(moves.values())
            touched: list[Touched] = []
            for change in changes:
                if change.path in renamed_from:
                    continue  # the memory lives on under its new name (below)
                if change.data is None:
                    prior = git.read_at(head, change.path) or b""
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
                 f"{'D' if c.data is None else ('M' if git.blob_sha_at(head, c.path) else 'A')} {c.path}")
                for c in changes if c.path not in renamed_from)
            who = self.store.author_of(author) if author else self.store.person()
            try:
                done = self._commit(changes, subject, "edit", touched, author=who, body=listing,
                                    write_worktree=False, origin="person")
            except BaseException:
                for new_path, (_, before) in renamed.items():   # the rename is not recorded
                    self.store.catalog.set_inherited_id(new_path, before)
                raise
            # What the person wrote is theirs (store/trust.py); a file they only moved keeps
            # the trust it had, so renaming an agent's note never makes it the person's.
            had = {sha.decode() for p in [*(c.path for c in changes), *moves.values()]
                   if (sha := git.blob_sha_at(head, p)) is not None}
            self.store.trust.person_saved(
                saved for c in changes if c.data is not None and self.store.is_memory_path(c.path)
                and (saved := blob_id(c.data)) not in had)
        return done.sha

    def _renames(self, changes: Sequence[FileChange], head: bytes | None) -> dict[str, tuple[str, str | None]]:
        """Files without an ``id:`` that a person renamed (Obsidian renames a note by
        renaming its file): new path -> (old path, the id it inherited before).  The new
        path is recorded as the old one's memory, so it keeps its id and history; the
        file itself is not touched.  Pairs are found as git finds renames."""
        git = self.store.git
        gone: dict[str, bytes] = {}
        added: dict[str, bytes] = {}
        for change in changes:
            if change.data is None:
                prior = git.read_at(head, change.path) if head else None
                if prior is not None and id_from_blob(prior) is None:
                    gone[change.path] = prior
            elif id_from_blob(change.data) is None and (head is None or git.blob_sha_at(head, change.path) is None):
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
        user = self.store.person()
        return git.commit_files([FileChange(MEMORY_MD, on_disk)],
                                f"edit: {MEMORY_MD} (outside edit, {reason})\n\nOp: edit\nAgent: {user.name}\n",
                                user, when=self.store.clock().timestamp(), write_worktree=False,
                                origin="person").decode()
