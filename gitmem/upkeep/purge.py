"""``gitmem purge ID``: make the vault forget one memory completely, history included,
here and, through the next syncs, on every remote and clone.

Deleting a memory (even ``hard``) keeps every version in git history, which is
the point of gitmem, except when something must truly be forgotten (a secret,
personal data someone asked to have erased).  :func:`purge`:

1. finds every path the memory ever had (the catalog's memory -> commits
   table, caught up with history first) and every title it had;
2. rewrites every commit reachable from any ref (branches, remote-tracking
   refs, tags, notes) without the memory, its conflict copies and the notes
   holding its text, and regenerates the new head's ``MEMORY.md``
   (:class:`gitmem.sync.rewrite.Rewriter`: what is removed and what is kept);
3. leaves a **tombstone** (:mod:`gitmem.sync.forget`): the memory's ids, the
   blob ids of every removed version and the map of old to new commits, never
   its text, committed on ``refs/gitmem/purged``, which every sync fetches and
   pushes;
4. moves the refs, updates the working tree and ``.git/index``, deletes the
   reflogs, prunes every unreachable object and rebuilds every cache
   (catalog, search index, as-of index, vectors) and drops a session note an
   agent's hook left waiting for the memory (:mod:`gitmem.store.spool`), all crash-safe through one
   journal (:func:`gitmem.sync.rewrite.execute`; a killed purge is finished
   by the next process that takes the vault lock, :func:`recover_purge`).

The next ``gitmem sync`` rewrites each remote's branch, but only while it is
still exactly where this clone last saw it (a compare-and-swap, never a blind
force), and every other clone applies the tombstone to its own history when it
syncs.  Runs under the vault lock; other writers wait.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import NotFound
from ..store.spool import drop_spooled
from ..sync.forget import add_tombstone, remote_status
from ..sync.rewrite import JOURNAL, PurgeReport, Rewriter, execute, history_of, plan, recover_purge

if TYPE_CHECKING:  # pragma: no cover
    from ..services import Services

__all__ = ["PurgeReport", "purge", "purge_status", "recover_purge", "JOURNAL"]


def purge(services: Services, ref: str) -> PurgeReport:
    """Remove the memory ``ref`` names (id, path, title; also a deleted one), its
    conflict copies and the notes holding it from all history, and leave the
    tombstone that makes remotes and other clones forget it too (see the module doc)."""
    with services.store.lock.hold():  # taking the lock first finishes an earlier purge that was killed
        memory_id = services.history.memory_id(ref)  # resolves deleted memories too
        services.history.sync_history()
        paths, titles, sources = history_of(services, memory_id)
        if not paths:
            raise NotFound(f"no file of memory {memory_id} was ever committed")
        report = PurgeReport(memory_id, sorted(paths))
        services.pipeline.background.flush(10.0)
        rewriter = Rewriter(services, memory_id, paths, titles)
        record = plan(services, rewriter, report)  # in memory only: a kill here changes nothing
        report.paths = sorted(set(report.paths) | rewriter.removed_paths)
        report.tombstone = add_tombstone(services, rewriter, record)
        report.objects_pruned = execute(services, rewriter, record)
        drop_spooled(services.store.state_dir, sources)   # a session's note waiting to be committed
    return report


def purge_status(services: Services) -> dict[str, Any]:
    """Which remotes have the rewritten history: see :func:`gitmem.sync.forget.remote_status`."""
    return remote_status(services.syncer)
