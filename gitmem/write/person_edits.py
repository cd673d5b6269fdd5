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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from ..errors import Conflict
from .. import safefs
from ..store.git import FileChange, blob_id
from .merge import merge_memory

if TYPE_CHECKING:  # pragma: no cover
    from ..store.storage import Storage

__all__ = ["guard_person_edits"]


def guard_person_edits(store: "Storage", changes: Sequence[FileChange], bases: Mapping[str, bytes],
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
    edited = [p for p in paths if store.is_memory_path(p) and disk[p] is not None
              and blob_id(disk[p]).encode() != committed[p]]
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
