"""Forgetting across machines: the tombstones a purge leaves, and what a sync does with them.

**Where tombstones live.**  A purge (:mod:`gitmem.upkeep.purge`) commits a
tombstone on ``refs/gitmem/purged``, a ref of its own beside the branch, which
every sync fetches and pushes.  A tombstone names what was purged, never its
text: the memory's ids (with its conflict copies'), the blob ids of every
removed version, and the map of old commits to the commits they became.  One
file per tombstone (``<memory id>-<random>.json``) in a flat tree, so two
clones' tombstone histories merge as a union and never conflict.  A ref rather
than a file on the branch because a branch file would be merged like any other
(a clash keeps ours, so a tombstone made elsewhere could be lost), could be
edited or deleted in the working tree, and would have to be part of the very
rewrite it describes; the ref is append-only, is never rewritten by a purge,
and is read before the branch it speaks about is integrated.

**What a sync does** (:class:`Forgetting`, one per attempt, under the vault lock):

1. before integrating, it reads the tombstones (ours and the remote's), and
   refuses (``purged_content``) only when a memory to forget holds
   uncommitted edits here, saying what to do; it notes whether what arrived
   still holds purged content (old commits a tombstone maps, or a purged file
   version);
2. the branch is integrated as usual (every check applies); then the
   remote's tombstones join ours and every tombstone not yet applied here (or
   purged content that just arrived) is applied to this clone's whole history:
   its own unpushed commits lose the memory and keep everything else, commits
   another clone already rewrote become exactly those commits, the objects are
   pruned and the caches rebuilt (:mod:`gitmem.sync.rewrite`);
3. the tombstones are pushed first, then the branch, with the usual
   compare-and-swap: a branch that still holds the old history is replaced
   only while the remote is exactly where it was fetched; if someone pushed in
   between, the sync fetches again, rewrites what arrived and retries.  A sync
   never forces anything else.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dulwich.objects import Blob, Commit, ObjectID, Tree
from dulwich.refs import Ref

from .. import safefs
from ..errors import InvalidPath, SyncError
from ..store.catalog import id_from_blob
from ..store.git import blob_id
from ..store.purged import applied_tombstones, purged_in, record_purged
from ..store.spool import drop_spooled
from .rewrite import TOMBSTONE_REF, PurgeReport, Rewriter, execute, forget_old_objects, history_of, plan
from .transport import RemoteMoved, client_for, close_client, remote_errors

if TYPE_CHECKING:  # pragma: no cover
    from dulwich.client import GitClient

    from ..store.storage import Storage
    from .quarantine import Quarantine
    from .rewrite import Parts

__all__ = ["Tombstone", "Forgetting", "add_tombstone", "read_tombstones", "fetch_tombstones",
           "push_tombstones", "remote_status", "tombstones_ahead", "without_purged", "purge_line", "TOMBSTONE_REF",
           "PENDING"]

#: Under ``.git/gitmem/``: purged content arrived (or tombstones did) and is not yet
#: forgotten here; the next sync applies the tombstones even if nothing new arrives.
PENDING = "forget-pending"
_ZERO = b"0" * 40
_REF = Ref(TOMBSTONE_REF)


@dataclass
class Tombstone:
    """What one purge removed: ids and object ids, never text."""

    name: str
    id: str
    ids: list[str]
    blobs: list[str]
    map: dict[str, str | None] = field(default_factory=dict)
    purged_at: str = ""

    def to_json(self) -> bytes:
        return json.dumps({"version": 1, "id": self.id, "ids": self.ids, "blobs": self.blobs,
                           "map": self.map, "purged_at": self.purged_at}, indent=1, sort_keys=True).encode()

    @classmethod
    def parse(cls, name: str, data: bytes) -> Tombstone | None:
        """The tombstone in ``data`` (None: not one; a malformed file is ignored, never trusted)."""
        try:
            raw = json.loads(data)
        except ValueError:
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            return None
        ids = [i for i in raw.get("ids") or [] if isinstance(i, str) and i]
        blobs = [b for b in raw.get("blobs") or [] if isinstance(b, str) and len(b) == 40]
        mapping = raw.get("map")
        if not isinstance(mapping, dict):
            mapping = {}
        known = {k: v for k, v in mapping.items() if isinstance(k, str) and len(k) == 40
                 and (v is None or (isinstance(v, str) and len(v) == 40))}
        return cls(name, raw["id"], sorted({raw["id"], *ids}), blobs, known, str(raw.get("purged_at", "")))


def _local_tip(store: Storage) -> ObjectID | None:
    try:
        return store.git.repo.refs[_REF]
    except KeyError:
        return None


def read_tombstones(store: Storage, tip: bytes | None) -> dict[str, Tombstone]:
    """The tombstones in the tree of tombstone commit ``tip`` ({} for None)."""
    if tip is None:
        return {}
    objects = store.git.repo.object_store
    out: dict[str, Tombstone] = {}
    if ObjectID(tip) not in objects:
        return {}   # a remote that advertised it but did not send it: nothing to trust
    commit = objects[ObjectID(tip)]
    if not isinstance(commit, Commit):
        return {}
    tree = objects[commit.tree]
    if not isinstance(tree, Tree):
        return {}
    for entry in tree.iteritems():
        name = entry.path.decode("utf-8", "replace")
        if not name.endswith(".json"):
            continue
        blob = objects[entry.sha]
        if isinstance(blob, Blob):
            found = Tombstone.parse(name[:-5], blob.as_raw_string())
            if found is not None:
                out[found.name] = found
    return out


def _commit_tombstones(store: Storage, parents: list[ObjectID], tombstones: Iterable[Tombstone],
                       message: str, add: Any) -> ObjectID:
    """A tombstone commit holding ``tombstones`` on ``parents``; objects handed to ``add``."""
    who = store.author_of(None)  # screened for secrets before anything is built
    tree = Tree()
    for stone in sorted(tombstones, key=lambda t: t.name):
        blob = Blob.from_string(stone.to_json())
        add(blob)
        tree.add(f"{stone.name}.json".encode(), 0o100644, blob.id)
    add(tree)
    commit = Commit()
    commit.tree, commit.parents = tree.id, parents
    commit.author = commit.committer = who.as_bytes()
    commit.author_time = commit.commit_time = int(store.clock().timestamp())
    commit.author_timezone = commit.commit_timezone = 0
    commit.message = message.encode()
    add(commit)
    return commit.id


def add_tombstone(parts: Parts, rewriter: Rewriter, record: dict[str, Any]) -> str:
    """Add the tombstone of the purge ``record`` describes: its objects join the
    rewrite's pending objects, the ref move joins the record (so the journal moves
    it with the branches, all or nothing).  Returns the tombstone's name."""
    store = parts.store
    local = _local_tip(store)
    stones = read_tombstones(store, local)
    stone = Tombstone(f"{rewriter.id}-{uuid.uuid4().hex[:8]}", rewriter.id, sorted(rewriter.ids),
                      sorted(sha.decode() for sha in rewriter.purged_blobs), dict(record.get("map", {})),
                      store.now())
    stones[stone.name] = stone
    new = _commit_tombstones(store, [local] if local else [], stones.values(),
                             f"purge: tombstone {stone.name}\n", rewriter.pending.add_object)
    record["refs"].append([TOMBSTONE_REF.decode(), local.decode() if local else None, new.decode()])
    record["tombstones"] = sorted(set(record.get("tombstones", [])) | {stone.name})
    return stone.name


# ------------------------------------------------------------ transport
def fetch_tombstones(client: GitClient, path: str | bytes, url: str, quarantine: Quarantine) -> ObjectID | None:
    """Fetch the remote's tombstone ref into ``quarantine``; its tip (None: it has none)."""
    store = quarantine.main
    seen: list[ObjectID | None] = []

    def wants(refs: Mapping[Ref, ObjectID], depth: int | None = None) -> list[ObjectID]:
        sha = refs.get(_REF)
        seen.append(None if sha in (None, _ZERO) else sha)
        return [sha] if sha and sha != _ZERO and sha not in store else []

    with remote_errors(url), quarantine.fetching():
        client.fetch(path.encode() if isinstance(path, str) else path, quarantine.target, determine_wants=wants)
    return seen[-1] if seen else None


def push_tombstones(parts: Parts, client: GitClient, path: str | bytes, url: str,
                    remote_tip: bytes | None) -> bool:
    """Move the remote's tombstone ref from ``remote_tip`` to ours, if ours is ahead
    (never backwards, never over a tip we have not merged: :class:`RemoteMoved`).
    Returns True if something was pushed."""
    repo = parts.store.git.repo
    local = _local_tip(parts.store)
    if local is None or local == remote_tip:
        return False
    if remote_tip is not None and not parts.store.git.is_ancestor(remote_tip, local):
        return False  # theirs has tombstones we have not merged yet: the next fetch brings them
    moved: list[bool] = []

    def update_refs(refs: dict[Ref, ObjectID]) -> dict[Ref, ObjectID]:
        current = refs.get(_REF)
        if (None if current in (None, _ZERO) else current) != remote_tip:
            moved.append(True)
            return {}
        return {_REF: local}

    def pack(have: Any, want: Any, *, ofs_delta: bool = False, progress: Any = None) -> Any:
        return repo.generate_pack_data(set(have), set(want), progress=progress, ofs_delta=ofs_delta)

    with remote_errors(url):
        result = client.send_pack(path.encode() if isinstance(path, str) else path, update_refs, pack)
    status = (result.ref_status or {}).get(_REF)
    if moved or status is not None:
        raise RemoteMoved(busy=True)  # another clone's tombstones landed first: fetch, merge, retry
    return True


# ------------------------------------------------------------ one sync attempt
class Forgetting:
    """What one sync attempt does with tombstones (see the module doc).  Create it
    under the vault lock with the quarantine exposed; call :meth:`before` before
    integrating, :meth:`after` once the branch is integrated and tracked."""

    def __init__(self, parts: Parts, remote_tip: bytes | None, quarantine: Quarantine) -> None:
        self.parts = parts
        self.store = parts.store
        self.remote_tip = None if remote_tip in (None, _ZERO) else remote_tip
        self.quarantine = quarantine
        self.local_tip = _local_tip(self.store)
        self.stones = read_tombstones(self.store, self.local_tip)
        if self.remote_tip is not None and self.remote_tip != self.local_tip:
            self.stones.update(read_tombstones(self.store, self.remote_tip))
        self.unapplied = sorted(set(self.stones) - applied_tombstones(self.store.state_dir))
        self.flagged = False
        self.applied: list[str] = []
        self.forgotten: set[str] = set()   # ids and paths a rewrite removed

    @property
    def ids(self) -> set[str]:
        return {i for stone in self.stones.values() for i in stone.ids}

    def before(self, tip: bytes | None) -> None:
        """Refuse when a memory to forget holds uncommitted edits; note whether what
        arrived holds purged content; mark the work as pending (a crash is finished
        by the next sync)."""
        if not self.stones:
            return
        if self.unapplied:
            self._refuse_uncommitted({i for n in self.unapplied for i in self.stones[n].ids})
        local = self.store.git.head()
        if tip is not None and tip != local and not (local and self.store.git.is_ancestor(tip, local)):
            self.flagged = self._holds_purged(local, tip)
        pending = self.store.state_dir / PENDING
        if self.unapplied or self.flagged:
            pending.write_text("\n".join(self.unapplied) + "\n")
        elif pending.exists():
            self.flagged = True   # an earlier sync was cut short between integrating and forgetting

    def rewritten(self, tip: bytes | None) -> bytes | None:
        """What to integrate for the fetched ``tip``: an old commit a tombstone maps
        becomes the commit another clone (or this one) rewrote it to, when that is
        here; so a remote not yet rewritten is never merged into the rewritten
        history (the push then replaces its old branch, leased on ``tip``)."""
        if tip is None:
            return None
        mapping = {old: new for stone in self.stones.values() for old, new in stone.map.items()}
        current, seen = tip.decode(), set()
        while current in mapping and current not in seen:   # purge after purge: follow the chain
            seen.add(current)
            target = mapping[current]
            if target is None:
                break
            current = target
        if current != tip.decode() and ObjectID(current.encode()) in self.store.git.repo.object_store:
            return current.encode()
        return tip

    def _holds_purged(self, local: bytes | None, tip: bytes) -> bool:
        """True when the commits from ``local`` to ``tip`` hold purged content: an old
        commit a purge rewrote, or a file version a tombstone names or carrying a purged id."""
        old = {k for stone in self.stones.values() for k in stone.map}
        incoming = self.store.git.walk_new(local, tip)
        if old.intersection(c.decode() for c in incoming) or purged_in(self.store.state_dir, incoming):
            return True
        blobs = {b for stone in self.stones.values() for b in stone.blobs}
        ids = self.ids
        for change in self.store.git.changes_between(local, tip):
            if change.new_sha is None:
                continue
            if change.new_sha.decode() in blobs:
                return True
            if change.new_path and self.store.is_memory_path(change.new_path) \
                    and id_from_blob(self.store.git.blob(change.new_sha)) in ids:
                return True
        return False

    def _refuse_uncommitted(self, ids: set[str]) -> None:
        root, git = self.store.root, self.store.git
        head = git.head()
        self.parts.reader.scan()
        edited = []
        for memory_id in sorted(ids):
            for row in self.store.catalog.by_id(memory_id):
                try:
                    data = safefs.read_or_none(root, row.path)
                except (OSError, InvalidPath):
                    continue
                committed = git.blob_sha_at(head, row.path)
                if data is not None and (committed is None or blob_id(data) != committed.decode()):
                    edited.append(row.path)
        if edited:
            shown = ", ".join(edited[:5])
            raise SyncError(
                f"memory {', '.join(sorted(ids))[:80]} was purged on another machine, and this vault "
                f"has uncommitted edits to it ({shown}); forgetting it would lose them",
                code="purged_content",
                hint=f"Copy what you still need into another memory, then delete {shown} "
                     "(or undo the edit) and sync again: the purge is applied then. Nothing was changed.")

    def after(self, report: Any) -> None:
        """Merge the remote's tombstones into ours and apply what is not applied yet
        (lock held, the branch integrated)."""
        self._merge_refs()
        pending = self.store.state_dir / PENDING
        if not (self.unapplied or self.flagged):
            if self._purged_objects_here():
                # A version a tombstone names reached the store without any commit holding it
                # (a pack a fetch completed with it): no ref reaches it, so pruning removes it.
                forget_old_objects(self.parts)
            return
        self.applied = self._apply()
        pending.unlink(missing_ok=True)
        if report is not None and self.applied:
            purged = getattr(report, "purged", None)
            if isinstance(purged, list):
                purged.extend(i for i in self.applied if i not in purged)
        conflicts = getattr(report, "conflicts", None)
        if self.forgotten and isinstance(conflicts, list):
            # Conflict copies of a forgotten memory this very sync made: gone with it, and
            # never recorded in the sync state.
            conflicts[:] = [c for c in conflicts
                            if not self.forgotten.intersection(str(v) for v in c.values())]

    def _purged_objects_here(self) -> bool:
        objects = self.store.git.repo.object_store   # its own packs and loose objects, no quarantine
        return any(objects.contains_packed(ObjectID(b.encode())) or objects.contains_loose(ObjectID(b.encode()))
                   for stone in self.stones.values() for b in stone.blobs)

    def _merge_refs(self) -> None:
        remote, local = self.remote_tip, self.local_tip
        if remote is None or remote == local:
            return
        if ObjectID(remote) in self.quarantine.store:
            self.quarantine.keep()   # only tombstone objects are left in it (see Syncer._sync_loop)
        git, refs = self.store.git, self.store.git.repo.refs
        if local is not None and git.is_ancestor(remote, local):
            return
        if local is None or git.is_ancestor(local, remote):
            new = ObjectID(remote)
        else:  # both sides have tombstones the other lacks: their union
            objects = self.store.git.repo.object_store
            new = _commit_tombstones(self.store, [local, ObjectID(remote)], self.stones.values(),
                                     "purge: merge tombstones\n", objects.add_object)
        if local is None:
            refs.add_if_new(_REF, new, message=b"gitmem sync: tombstones")
        else:
            refs.set_if_equals(_REF, local, new, message=b"gitmem sync: tombstones")
        self.local_tip = new

    def _apply(self) -> list[str]:
        """Rewrite this clone's history without everything the tombstones name; the ids
        forgotten ([] when no ref held any of it)."""
        parts = self.parts
        parts.history.sync_history()
        parts.pipeline.background.flush(10.0)   # as a purge does: no idle-time work racing the rewrite
        ids = sorted(self.ids)
        paths: set[str] = set()
        titles: set[str] = set()
        sources: set[str] = set()
        for memory_id in ids:
            found_paths, found_titles, found_sources = history_of(parts, memory_id)
            paths |= found_paths
            titles |= found_titles
            sources |= found_sources
        drop_spooled(self.store.state_dir, sources)   # a waiting session note would bring it back
        known: dict[bytes, bytes | None] = {}
        for stone in self.stones.values():
            known.update({k.encode(): v.encode() if v else None for k, v in stone.map.items()})
        blobs = {b.encode() for stone in self.stones.values() for b in stone.blobs}
        rewriter = Rewriter(parts, ids[0], paths, titles, also=ids, blobs=blobs, known=known)
        receipt = PurgeReport(ids[0], sorted(paths))
        record = plan(parts, rewriter, receipt)
        record["tombstones"] = sorted(self.stones)
        self.forgotten = set(record["ids"]) | set(record["paths"])
        moved = [m for m in record["refs"] if m[0] != TOMBSTONE_REF.decode()]
        if not moved:
            record_purged(self.store.state_dir, ids[0], [], applied=record["tombstones"])
            return []
        execute(parts, rewriter, record)
        # What this sync forgot: the memories of tombstones new here, and conflict copies found.
        new = {i for name in self.unapplied for i in self.stones[name].ids}
        return sorted(new | rewriter.copies)


# ------------------------------------------------------------ purge --status
def remote_status(syncer: Any) -> dict[str, Any]:
    """Which configured remotes have the rewritten history: for each, whether its branch
    still holds an old (pre-purge) commit and whether it has every tombstone made or
    applied here.  Asks each remote for its refs (no objects are fetched)."""
    store: Storage = syncer.store
    local = _local_tip(store)
    stones = read_tombstones(store, local)
    old = {k for stone in stones.values() for k in stone.map}
    branch = Ref(store.git.head_ref())
    config = store.git.repo.get_config()
    out = []
    for remote in syncer.remotes():
        entry: dict[str, Any] = {"remote": remote.name, "url": remote.url}
        try:
            url = config.get((b"remote", remote.name.encode()), b"url").decode("utf-8")
            refs = _remote_refs(store, url)
        except SyncError as exc:
            entry.update(state="unreachable", error=exc.message)
            out.append(entry)
            continue
        tip, tombs = refs.get(branch), refs.get(_REF)
        holds_old = tip is not None and (tip.decode() in old or bool(purged_in(store.state_dir, [tip])))
        has_all = local is None or tombs == local or (
            tombs is not None and ObjectID(tombs) in store.git.repo.object_store
            and store.git.is_ancestor(local, tombs))
        entry.update(branch=tip.decode() if tip else None, holds_old_history=holds_old,
                     has_tombstones=has_all,
                     state="rewritten" if not holds_old and has_all else "not yet rewritten")
        out.append(entry)
    return {"tombstones": [{"name": s.name, "id": s.id, "purged_at": s.purged_at,
                            "commits_rewritten": len(s.map), "versions": len(s.blobs)}
                           for s in sorted(stones.values(), key=lambda s: s.purged_at)],
            "remotes": out}


def _remote_refs(store: Storage, url: str) -> dict[Ref, ObjectID]:
    client, path = client_for(store.git, url)
    try:
        with remote_errors(url):
            result = client.get_refs(path.encode() if isinstance(path, str) else path)
    finally:
        close_client(client)
    refs: Mapping[Ref, ObjectID | None] = result.refs or {}
    return {Ref(k): v for k, v in refs.items() if v and v != _ZERO}


def tombstones_ahead(store: Storage, remote_tip: bytes | None) -> bool:
    """True when this clone has tombstones the remote lacks (and has all of the remote's)."""
    local = _local_tip(store)
    if local is None or local == remote_tip:
        return False
    return remote_tip is None or store.git.is_ancestor(remote_tip, local)


def without_purged(store: Storage, blobs: dict[bytes, Any]) -> dict[bytes, Any]:
    """``blobs`` without the file versions a tombstone here names (they are about to be
    forgotten, so a secret scan of a remote not yet rewritten does not stop the sync)."""
    stones = read_tombstones(store, _local_tip(store))
    if not stones:
        return blobs
    purged = {b.encode() for stone in stones.values() for b in stone.blobs}
    return {sha: where for sha, where in blobs.items() if sha not in purged}


def purge_line(store: Storage, remote: str | None, last_success: str | None) -> str | None:
    """One line for ``gitmem status`` from what this clone knows, without asking the
    remote: how many purges it made or applied, and whether ``remote`` has synced
    since the last one (a sync that succeeds leaves the remote with the rewritten
    history and every tombstone).  None when there was no purge."""
    stones = read_tombstones(store, _local_tip(store))
    if not stones:
        return None
    last = max(stone.purged_at for stone in stones.values())
    text = f"{len(stones)} made or applied here (last {last})"
    if remote is None:
        return text
    if last_success and last_success >= last:
        return f"{text}; {remote} has the rewritten history (synced since)"
    return f"{text}; {remote} not synced since: run gitmem sync {remote} (check: gitmem purge --status)"
