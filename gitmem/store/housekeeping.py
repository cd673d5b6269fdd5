"""Packing the vault's git objects in the background, without making writers wait.

Every gitmem write adds about six loose objects; ``MEMORY.md`` alone is
rewritten whole in each commit.  Left loose, or packed without deltas, that is
16-19 KB of ``.git`` per write.  Housekeeping packs them the way ``git gc``
does: versions of the same path are stored as deltas against each other (the
newest version whole, so reading HEAD stays fast), and small packs are merged
geometrically (a pack is merged once the packs smaller than it add up to half
its size), so the number of packs stays near the logarithm of the history.

It runs without the vault lock; writers go on while it works:

* Git objects never change, so a new pack is written (to a temporary file,
  fsynced) while writers add new loose objects.  A loose object is deleted
  only once it is in a pack whose data and index are fully written, fsynced
  and in place; a pack is deleted only once every object in it is in such a
  pack.  A reader that misses an object rescans the packs (dulwich and git do).
* The objects of a write still under way (named by its journal, see
  :mod:`gitmem.store.recovery`) are left loose: if that write fails, it removes them,
  and they must not live on in a pack.
* The vault lock is taken only to move a finished pack into place and to
  delete the packs it replaces: a few renames and unlinks, milliseconds.  A
  ``gitmem purge`` (which holds the vault lock) that ran meanwhile makes the
  new pack be thrown away, so purged content never comes back.
* Two housekeeping runs never overlap: ``.git/gitmem/repack.lock`` is taken
  without waiting, and a run that finds it taken does nothing.
* A run killed at any point leaves only a temporary file or a pack without its
  index (``.git/gitmem/repack-placing`` names it); the next run removes them
  and deletes what is left to delete.  A ``git gc`` at the same time loses
  nothing either: each side only deletes what its own new pack holds.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dulwich.errors import ObjectFormatException
from dulwich.object_format import DEFAULT_OBJECT_FORMAT
from dulwich.object_store import DiskObjectStore
from dulwich.objects import Commit, ObjectID, ShaFile, Tree, hex_to_sha
from dulwich.pack import (
    OFS_DELTA,
    REF_DELTA,
    Pack,
    UnpackedObject,
    apply_delta,
    create_delta,
    write_pack_data,
    write_pack_index,
)

from .locking import try_flock
from .purged import purge_stamp

__all__ = ["Housekeeper", "HousekeepingReport", "loose_object_count", "LOOSE_THRESHOLD",
           "EXIT_THRESHOLD", "MAX_PER_RUN", "REPACK_LOCK", "PLACING", "TEMP_PREFIX", "run_in_child",
           "main"]

# Loose objects that make a run pack them: about 40 writes.  Small enough that
# loose files (4 KiB of disk each) never add up to much (1 MiB); a run this size
# takes a fraction of a second.
LOOSE_THRESHOLD = 256
# At most this many loose objects go into one pack (~700 writes): after a long burst
# of writes with no idle moment, the backlog is packed over several runs, each short
# and of bounded memory.
MAX_PER_RUN = 4096
# A process that closes its vault packs from this many: its writes are not left loose
# for whoever comes next (a run of this size costs well under 0.1 s).
EXIT_THRESHOLD = 64
REPACK_LOCK = "repack.lock"
VAULT_LOCK = "lock"            # the same file as the Vault's lock (.git/gitmem/lock)
PLACING = "repack-placing"     # names the pack being moved in / the packs being dropped
RETIRED = "retired-packs.json"  # packs a merge replaced -> when (kept RETIRED_GRACE seconds)
# A pack a merge replaced stays on disk this long: another process may have listed it
# and open it only now (a sync building a pack, a reader that has not looked again).
RETIRED_GRACE = 900.0
WRITE_JOURNAL = "write-journal"    # gitmem.store.recovery's journal of the write under way
PURGE_JOURNAL = "purge-journal"    # gitmem.upkeep.purge's journal and record of rewritten history
TEMP_PREFIX = "tmp_gitmem_"
# Delta search: each object is compared with the previous version of its path among
# the previous WINDOW objects (sorted by type, path, newest first); chains stay at
# most MAX_DEPTH long.
WINDOW = 10
MAX_DEPTH = 50
# How long a run waits for the vault lock to move a pack in before giving up
# (the pack is thrown away; the next run writes it again).
LOCK_WAIT = 10.0
GEOMETRIC_FACTOR = 2
FOLDER_BUDGET = 0.03   # seconds of removing empty folders per vault-lock hold
HEX = frozenset("0123456789abcdef")
SIDE_FILES = (".keep", ".bitmap", ".rev", ".mtimes", ".promisor")


@dataclass
class HousekeepingReport:
    """What one run did and what it cost."""

    packed: int = 0              # loose objects written into a new pack
    deltas: int = 0              # of them, stored as deltas
    pruned: int = 0              # loose copies deleted (their objects are in a pack)
    merged_packs: int = 0        # packs merged into one
    merged_objects: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0     # of the thread that ran it
    lock_holds: list[float] = field(default_factory=list)   # each vault-lock hold, seconds
    cleaned: list[str] = field(default_factory=list)        # leftovers of a killed run removed
    skipped: str | None = None

    @property
    def max_lock_hold(self) -> float:
        """The longest time this run held the vault lock, in seconds."""
        return max(self.lock_holds, default=0.0)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready summary."""
        return {"packed": self.packed, "deltas": self.deltas, "pruned": self.pruned,
                "merged_packs": self.merged_packs, "merged_objects": self.merged_objects,
                "seconds": round(self.seconds, 3), "cpu_seconds": round(self.cpu_seconds, 3),
                "lock_holds_ms": [round(hold * 1000, 2) for hold in self.lock_holds],
                "max_lock_hold_ms": round(self.max_lock_hold * 1000, 2),
                "cleaned": list(self.cleaned), "skipped": self.skipped}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HousekeepingReport:
        """The report :meth:`to_dict` made (from a run in another process)."""
        return cls(packed=int(data.get("packed", 0)), deltas=int(data.get("deltas", 0)),
                   pruned=int(data.get("pruned", 0)), merged_packs=int(data.get("merged_packs", 0)),
                   merged_objects=int(data.get("merged_objects", 0)),
                   seconds=float(data.get("seconds", 0.0)), cpu_seconds=float(data.get("cpu_seconds", 0.0)),
                   lock_holds=[float(ms) / 1000 for ms in data.get("lock_holds_ms", [])],
                   cleaned=list(data.get("cleaned", [])), skipped=data.get("skipped"))


def run_in_child(git_dir: Path, *, threshold: int = LOOSE_THRESHOLD, force: bool = False) -> HousekeepingReport:
    """One run in a separate Python process, waited for.  A run is mostly Python code:
    in a thread of a process that writes, it would take turns with the writes for the
    interpreter lock and slow each of them down several times over."""
    import subprocess
    import sys
    package_parent = str(Path(__file__).resolve().parent.parent)   # this gitmem, not another one
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (package_parent, os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, "-m", "gitmem.store.housekeeping", str(git_dir), str(threshold),
                           *(["--force"] if force else [])],
                          capture_output=True, text=True, env=env, check=False)
    try:
        return HousekeepingReport.from_dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError, AttributeError):
        return HousekeepingReport(skipped=f"the packing process failed: {proc.stderr.strip()[-300:]}")


class Aborted(Exception):
    """The run stopped before changing anything (a purge ran meanwhile, the lock stayed busy)."""


def loose_object_count(objects_dir: Path) -> int:
    """The exact number of loose objects (256 directory listings, ~1-2 ms)."""
    return sum(1 for _ in _loose_files(objects_dir))


def _oldest(files: list[tuple[str, str]], limit: int) -> list[tuple[str, str]]:
    """The ``limit`` loose objects written first: the objects of one write, and the
    versions of a file that follow each other, stay together (their deltas are small)."""
    if len(files) <= limit:
        return files
    def written(item: tuple[str, str]) -> int:
        try:
            return os.stat(item[1]).st_mtime_ns
        except OSError:
            return 0
    return sorted(files, key=written)[:limit]


def _loose_files(objects_dir: Path) -> Iterator[tuple[str, str]]:
    for n in range(256):
        folder = objects_dir / f"{n:02x}"
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if len(name) == 38 and HEX.issuperset(name):
                yield f"{n:02x}{name}", str(folder / name)


class Housekeeper:
    """Background packing for the repository whose ``.git`` folder is ``git_dir``.

    ``threshold`` is the number of loose objects that makes :meth:`run` pack
    them.
    """

    def __init__(self, git_dir: Path, *, threshold: int = LOOSE_THRESHOLD) -> None:
        self.git_dir = git_dir
        self.objects = git_dir / "objects"
        self.pack_dir = self.objects / "pack"
        self.state = git_dir / "gitmem"
        self.threshold = threshold

    # ------------------------------------------------------------ deciding
    def needed(self) -> bool:
        """True when a run would do something: enough loose objects, packs to merge,
        or the leftovers of a killed run."""
        if (self.state / PLACING).exists() or self._estimate() >= self.threshold:
            return True
        return len(self._merge_candidates(self._pack_sizes())) > 1

    def _estimate(self) -> int:
        # exact, not git's 1/256 sample: at this threshold the sample is mostly noise
        return loose_object_count(self.objects)

    def _pack_sizes(self) -> dict[str, int]:
        """Object count of each pack (from its index's fan-out), packs with a ``.keep`` left out."""
        sizes: dict[str, int] = {}
        try:
            names = set(os.listdir(self.pack_dir))
        except OSError:
            return sizes
        retired = self._retired()
        for name in names:
            if not (name.startswith("pack-") and name.endswith(".idx")):
                continue
            base = name[:-4]
            if base + ".pack" not in names or base + ".keep" in names or base in retired:
                continue
            try:
                with open(self.pack_dir / name, "rb") as handle:
                    head = handle.read(8 + 256 * 4)
            except OSError:
                continue
            if head[:4] == b"\377tOc":       # index v2/v3: the fan-out follows the header
                count = int.from_bytes(head[8 + 255 * 4:8 + 256 * 4], "big")
            else:                           # index v1: the fan-out comes first
                count = int.from_bytes(head[255 * 4:256 * 4], "big")
            sizes[base] = count
        return sizes

    @staticmethod
    def _merge_candidates(sizes: dict[str, int]) -> list[str]:
        """The packs to merge so that each pack is at least twice the size of all the
        smaller ones together (like ``git repack --geometric=2``)."""
        ordered = sorted(sizes.items(), key=lambda item: (item[1], item[0]))
        # the largest pack that is less than twice the next smaller one: it and
        # every smaller pack are merged
        split = next((i for i in range(len(ordered) - 1, 0, -1)
                      if ordered[i][1] < GEOMETRIC_FACTOR * ordered[i - 1][1]), 0)
        if split == 0:
            return []
        chosen = ordered[:split + 1]
        total = sum(n for _, n in chosen)
        for name, n in ordered[split + 1:]:   # the merged pack may now be too big for the next
            if n >= GEOMETRIC_FACTOR * total:
                break
            chosen.append((name, n))
            total += n
        return [name for name, _ in chosen] if len(chosen) > 1 else []

    # ------------------------------------------------------------ running
    def run(self, *, force: bool = False) -> HousekeepingReport:
        """Pack loose objects (when there are ``threshold`` of them, or any with
        ``force``) and merge packs; never more than one run at a time."""
        report = HousekeepingReport()
        started, cpu = time.perf_counter(), time.thread_time()
        with try_flock(self.state / REPACK_LOCK, 0) as got:
            if not got:
                report.skipped = "another housekeeping run is under way"
                return report
            store = DiskObjectStore(str(self.objects))
            try:
                self._finish_interrupted(report)
                self._drop_retired()
                stamp = self._purge_stamp()
                self._prune_packed(store, report)
                # a backlog goes into several packs of at most MAX_PER_RUN objects
                while self._estimate() >= (1 if force else max(1, self.threshold)):
                    if not self._pack_loose(store, stamp, report):
                        break
                candidates = self._merge_candidates(self._pack_sizes())
                if len(candidates) > 1:
                    self._merge(candidates, stamp, report)
            except Aborted as why:
                report.skipped = str(why)
            except OSError as exc:   # a full disk, say: nothing was deleted that is not packed
                report.skipped = f"stopped: {exc}"
            finally:
                self._remove_temp_files()
                store.close()
        report.seconds = time.perf_counter() - started
        report.cpu_seconds = time.thread_time() - cpu
        return report

    def _purge_stamp(self) -> tuple[bool, tuple[int, int, int] | None]:
        """Changes whenever a purge runs: its journal exists meanwhile, and it rewrites
        ``purged.json`` when done.  A pack built across a purge may hold purged content."""
        return purge_stamp(self.state)

    # ------------------------------------------------------------ loose objects
    def _in_flight(self) -> set[str]:
        """Objects of the write under way (or of a killed one not yet recovered)."""
        try:
            record = json.loads((self.state / WRITE_JOURNAL).read_text())
        except (OSError, ValueError):
            return set()
        objects = record.get("objects") if isinstance(record, dict) else None
        return {str(sha) for sha in objects} if isinstance(objects, list) else set()

    def _prune_packed(self, store: DiskObjectStore, report: HousekeepingReport) -> None:
        """Delete loose copies of objects already in a pack (a run killed while deleting
        them, or a pack written by a bulk write or by git)."""
        packed = [(sha, path) for sha, path in _loose_files(self.objects)
                  if store.contains_packed(ObjectID(sha.encode()))]
        _unlink_all(path for _, path in packed)
        report.pruned += len(packed)

    def _pack_loose(self, store: DiskObjectStore, stamp: object, report: HousekeepingReport) -> bool:
        """Pack up to MAX_PER_RUN loose objects; False when there was nothing to pack."""
        files = _oldest(list(_loose_files(self.objects)), MAX_PER_RUN)
        objects: dict[bytes, ShaFile] = {}
        for sha, path in files:
            try:
                obj = ShaFile.from_path(path)
            except (OSError, ObjectFormatException, ValueError):
                continue   # packed and deleted by a concurrent git gc, or not ours to judge
            if obj.id == sha.encode():
                objects[obj.id] = obj
        # Read after the objects: a write whose objects were listed had its journal
        # written before them, and a failing write removes its objects before its journal.
        for sha in self._in_flight():
            objects.pop(sha.encode(), None)
        paths = dict(files)
        objects = {sha: obj for sha, obj in objects.items() if os.path.exists(paths[sha.decode()])}
        if not objects:
            return False
        ordered = _delta_order(objects)
        records = list(_deltify(ordered, report))
        self._place(self._write_pack(records), [], stamp, report)
        report.packed += len(records)
        # every one of them is in the pack just placed
        _unlink_all(paths[sha.decode()] for sha in objects)
        report.pruned += len(objects)
        self._remove_empty_folders(report)
        return True

    # ------------------------------------------------------------ merging packs
    def _merge(self, names: list[str], stamp: object, report: HousekeepingReport) -> None:
        packs: list[Pack] = []
        try:
            for pack_name in names:   # one by one: each opened is closed below, whatever fails
                packs.append(Pack(str(self.pack_dir / pack_name), object_format=DEFAULT_OBJECT_FORMAT))
            packs.sort(key=len, reverse=True)  # the big pack first: its deltas stay offset deltas
            wanted: set[bytes] = set()
            for pack in packs:
                wanted.update(sha for sha, _, _ in pack.index.iterentries())
            records = _copy_records(packs)
            name = self._write_pack(records, count=len(wanted))
        except Aborted:
            raise
        except (OSError, ValueError, KeyError, AssertionError) as exc:
            # A pack vanished under us (a concurrent git gc): nothing was changed.
            raise Aborted(f"merge skipped: {exc}") from None
        finally:
            for pack in packs:
                pack.close()
        self._place(name, names, stamp, report)
        report.merged_packs += len(names)
        report.merged_objects += len(wanted)

    # ------------------------------------------------------------ writing and placing
    def _write_pack(self, records: Iterable[UnpackedObject], count: int | None = None) -> tuple[str, str]:
        """Write a pack and its index to temporary files, fsynced; return the temporary
        files' stem and the pack's name."""
        records = records if count is not None else list(records)
        count = count if count is not None else len(records)  # type: ignore[arg-type]
        tag = f"{TEMP_PREFIX}{os.getpid()}_{time.monotonic_ns()}"
        # Not named *.pack / *.idx: dulwich and git take any such pair for a pack, and
        # would read this one while it is being written.
        tmp_pack, tmp_idx = self.pack_dir / f"{tag}-pack.tmp", self.pack_dir / f"{tag}-idx.tmp"
        self.pack_dir.mkdir(parents=True, exist_ok=True)
        with open(tmp_pack, "wb") as handle:
            entries, checksum = write_pack_data(handle.write, iter(records), num_records=count,
                                                object_format=DEFAULT_OBJECT_FORMAT)
            handle.flush()
            os.fsync(handle.fileno())
        with open(tmp_idx, "wb") as handle:
            write_pack_index(handle, sorted((sha, off, crc) for sha, (off, crc) in entries.items()),
                             checksum, version=2)
            handle.flush()
            os.fsync(handle.fileno())
        return tag, "pack-" + checksum.hex()

    def _place(self, name: tuple[str, str], replaced: list[str], stamp: object,
               report: HousekeepingReport) -> None:
        """Move the new pack in (pack, then index: git's order) and delete the packs it
        replaces, holding the vault lock for just that."""
        tag, final = name
        with self._vault_lock(report):
            if self._purge_stamp() != stamp:
                raise Aborted("a purge ran meanwhile; its packs are left as they are")
            marker = self.state / PLACING
            _write_marker(marker, {"pack": final, "drop": replaced})
            if not (self.pack_dir / f"{final}.idx").exists():
                try:
                    os.replace(self.pack_dir / f"{tag}-pack.tmp", self.pack_dir / f"{final}.pack")
                    os.replace(self.pack_dir / f"{tag}-idx.tmp", self.pack_dir / f"{final}.idx")
                except FileNotFoundError:   # removed by a purge's clean-up: nothing was replaced
                    (self.pack_dir / f"{final}.pack").unlink(missing_ok=True)
                    marker.unlink(missing_ok=True)
                    raise Aborted("the new pack's files were removed meanwhile") from None
                _fsync_dir(self.pack_dir)
            self._retire([old for old in replaced if old != final])
            marker.unlink(missing_ok=True)

    def _retired(self) -> dict[str, float]:
        """Packs a merge replaced, not deleted yet -> when they were replaced."""
        try:
            data = json.loads((self.state / RETIRED).read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _retire(self, names: list[str]) -> None:
        """Leave replaced packs on disk for RETIRED_GRACE seconds (their objects are in
        the new pack too: a duplicate is harmless, a pack vanishing under a reader is not)."""
        retired = self._retired()
        now = time.time()
        retired.update((name, retired.get(name, now)) for name in names)
        _write_marker(self.state / RETIRED, retired)

    def _drop_retired(self) -> None:
        """Delete the retired packs whose grace time is over."""
        retired = self._retired()
        over = [name for name, when in retired.items() if time.time() - when >= RETIRED_GRACE]
        if not over:
            return
        for name in over:
            _drop_pack(self.pack_dir, name)
            del retired[name]
        _write_marker(self.state / RETIRED, retired)

    @contextmanager
    def _vault_lock(self, report: HousekeepingReport) -> Iterator[None]:
        """The vault lock for one short step; how long it was held goes in the report."""
        with try_flock(self.state / VAULT_LOCK, LOCK_WAIT) as got:
            if not got:
                raise Aborted("the vault lock stayed busy; the work is done again next time")
            held = time.perf_counter()
            try:
                yield
            finally:
                report.lock_holds.append(time.perf_counter() - held)

    def _remove_empty_folders(self, report: HousekeepingReport) -> None:
        """Remove the loose-object folders left empty (up to 256 of 4 KiB each).  Under the
        vault lock: a gitmem writer creates the folder, then the object in it, and must not
        see the folder vanish in between (git retries by itself)."""
        todo = [self.objects / f"{n:02x}" for n in range(256)]
        while todo:
            with self._vault_lock(report):
                start = time.perf_counter()
                # a few at a time, letting writers in between: the lock is never held for long
                while todo and time.perf_counter() - start < FOLDER_BUDGET:
                    try:
                        os.rmdir(todo.pop())
                    except OSError:
                        continue   # not empty, or not there

    def _finish_interrupted(self, report: HousekeepingReport) -> None:
        """Leftovers of a run that was killed: a pack moved in without its index is
        removed (its loose objects were not deleted yet), replaced packs are deleted."""
        marker = self.state / PLACING
        try:
            record = json.loads(marker.read_text())
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict):
            final = str(record.get("pack", ""))
            pack, idx = self.pack_dir / f"{final}.pack", self.pack_dir / f"{final}.idx"
            if final and pack.exists() and not idx.exists():
                pack.unlink(missing_ok=True)
                report.cleaned.append(pack.name)
            elif final and idx.exists():  # the new pack is whole: the old ones are retired
                self._retire([str(old) for old in record.get("drop", []) if old != final])
        marker.unlink(missing_ok=True)
        report.cleaned += self._remove_temp_files()

    def _remove_temp_files(self) -> list[str]:
        """Temporary pack files of this or a killed run (only one run at a time holds the lock)."""
        removed: list[str] = []
        try:
            names = os.listdir(self.pack_dir)
        except OSError:
            return removed
        for name in names:
            if name.startswith(TEMP_PREFIX):
                _unlink(str(self.pack_dir / name))
                removed.append(name)
        return removed


# ---------------------------------------------------------------- helpers
def _delta_order(objects: dict[bytes, ShaFile]) -> list[tuple[ShaFile, bytes]]:
    """Objects in the order deltas are searched: by type, then path, newest first.

    Paths come from walking the new commits (newest first) down their new
    trees; an object no new commit reaches sorts by size alone."""
    path_of: dict[bytes, tuple[bytes, int]] = {}
    commits = _newest_first([o for o in objects.values() if isinstance(o, Commit)])
    for rank, commit in enumerate(commits):
        path_of.setdefault(commit.id, (b"", rank))
        todo = [(commit.tree, b"")]
        while todo:
            sha, path = todo.pop()
            tree = objects.get(sha)
            if not isinstance(tree, Tree) or (sha in path_of and path_of[sha][1] < rank):
                continue
            path_of.setdefault(sha, (path, rank))
            for entry in tree.iteritems():
                child = path + b"/" + entry.path if path else entry.path
                if entry.sha in objects:
                    if isinstance(objects[entry.sha], Tree):
                        todo.append((entry.sha, child))
                    else:
                        path_of.setdefault(entry.sha, (child, rank))
    never = len(commits)
    keyed = sorted(objects.values(), key=lambda o: (o.type_num, path_of.get(o.id, (b"\xff", never))[0],
                                                    path_of.get(o.id, (b"", never))[1], -o.raw_length()))
    return [(o, path_of.get(o.id, (b"", never))[0]) for o in keyed]


def _newest_first(commits: list[Commit]) -> list[Commit]:
    """Commits by descent, children before parents (commit times tie within a second)."""
    by_id = {c.id: c for c in commits}
    generation: dict[bytes, int] = {}
    for commit in commits:
        stack = [commit.id]
        while stack:
            sha = stack[-1]
            if sha in generation:
                stack.pop()
                continue
            parents = [p for p in by_id[sha].parents if p in by_id and p not in generation]
            if parents:
                stack.extend(parents)
                continue
            generation[sha] = 1 + max((generation[p] for p in by_id[sha].parents if p in by_id), default=0)
            stack.pop()
    return sorted(commits, key=lambda c: (generation[c.id], c.commit_time), reverse=True)


def _deltify(ordered: list[tuple[ShaFile, bytes]], report: HousekeepingReport) -> Iterator[UnpackedObject]:
    """Each object whole or as a delta against a nearby earlier object of its type
    (see :func:`_bases`), whichever is smaller.  Every delta is applied once and
    compared with the object before it is used."""
    window: deque[tuple[bytes, int, bytes, int, bytes]] = deque()  # sha, type, raw, depth, path
    for obj, path in ordered:
        raw = obj.as_raw_string()
        best: tuple[bytes, bytes, bytes, int] | None = None   # delta, base sha, base raw, depth
        for sha, base_raw, depth in _bases(window, obj.type_num, path):
            delta = b"".join(create_delta(base_raw, raw))
            if len(delta) < (len(best[0]) if best is not None else len(raw) // 2):
                best = (delta, sha, base_raw, depth)
        depth = 0
        if best is not None and b"".join(apply_delta(best[2], best[0])) == raw:
            depth = best[3] + 1
            report.deltas += 1
            yield UnpackedObject(REF_DELTA, delta_base=hex_to_sha(ObjectID(best[1])), decomp_chunks=[best[0]],
                                 sha=hex_to_sha(obj.id))
        else:
            yield UnpackedObject(obj.type_num, decomp_chunks=[raw], sha=hex_to_sha(obj.id))
        window.appendleft((obj.id, obj.type_num, raw, depth, path))
        if len(window) > WINDOW:
            window.pop()


def _bases(window: Iterable[tuple[bytes, int, bytes, int, bytes]], type_num: int,
           path: bytes) -> list[tuple[bytes, bytes, int]]:
    """The delta base worth trying: the previous version of the same file.  Another
    file (another memory, a tree of another folder, another commit) saved about 1% in
    measurements for three times the time.  A previous version at the end of a chain
    is not replaced by an older one (a delta across many versions is large): the
    object is then stored whole and starts a new chain."""
    if type_num == Commit.type_num:
        return []
    for sha, kind, raw, depth, base_path in window:
        if kind == type_num and base_path == path:
            return [(sha, raw, depth)] if depth < MAX_DEPTH else []
    return []


def _copy_records(packs: list[Pack]) -> Iterator[UnpackedObject]:
    """Every object of ``packs`` once, deltas kept as they are (offset deltas turned into
    reference deltas, which the writer turns back into offset deltas)."""
    seen: set[bytes] = set()
    for pack in packs:
        offsets = {offset: sha for sha, offset, _ in pack.index.iterentries()}
        for unpacked in pack.iter_unpacked():
            sha = unpacked.sha()
            if sha in seen:
                continue
            seen.add(sha)
            if unpacked.pack_type_num == OFS_DELTA:
                assert isinstance(unpacked.delta_base, int) and unpacked.offset is not None
                unpacked.delta_base = offsets[unpacked.offset - unpacked.delta_base]
                unpacked.pack_type_num = REF_DELTA
            unpacked.comp_chunks = None
            yield unpacked


def _drop_pack(pack_dir: Path, base: str) -> None:
    # The index first: once it is gone no reader finds the pack.
    for ext in (".idx", ".pack", *SIDE_FILES):
        _unlink(str(pack_dir / f"{base}{ext}"))


def _unlink_all(paths: Iterable[str]) -> None:
    """Delete many files at once: on ext4 a file that was fsynced takes ~3 ms to
    unlink one after the other, ~0.1 ms when many are unlinked in parallel."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=16) as pool:
        for _ in pool.map(_unlink, paths):
            pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _write_marker(path: Path, record: Mapping[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def _fsync_dir(folder: Path) -> None:
    """Make the renames into ``folder`` durable before loose copies are deleted."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> None:
    """``python -m gitmem.store.housekeeping GIT_DIR [THRESHOLD] [--force]``: one run; its
    report as one line of JSON on stdout (see :func:`run_in_child`)."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    force = "--force" in args
    args = [a for a in args if a != "--force"]
    keeper = Housekeeper(Path(args[0]), threshold=int(args[1]) if len(args) > 1 else LOOSE_THRESHOLD)
    print(json.dumps(keeper.run(force=force).to_dict()))


if __name__ == "__main__":
    main()

