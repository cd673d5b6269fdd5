"""Background packing (gitmem.store.housekeeping): small growth of ``.git``, short vault-lock
holds, nothing lost or left dangling, whatever runs at the same time or gets killed."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dulwich.object_store import DiskObjectStore
from dulwich.objects import Blob

from gitmem import Vault
from gitmem.store.git import FileChange
from gitmem.store.housekeeping import PLACING, REPACK_LOCK, TEMP_PREFIX, loose_object_count
from gitmem.store.locking import try_flock
from gitmem.memory.paths import memory_relpath
from gitmem.store.recovery import PendingObjects, begin_write
from gitmem.memory.schema import new_id

from .conftest import FakeClock, git

REPO = Path(__file__).resolve().parent.parent
WORDS = ("deploy pipeline cache index backup server roadmap sprint customer invoice meeting review "
         "release cluster query token budget report dashboard editor theme shortcut").split()


def sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def filled_vault(root: Path, clock: FakeClock, memories: int, seed: int = 1) -> Vault:
    """A vault whose MEMORY.md is full (200 lines): ``memories`` in one bulk commit."""
    rng = random.Random(seed)
    vault = Vault.init(root, author="tester", clock=clock)
    changes = []
    for i in range(memories):
        mid = new_id()
        text = (f"---\nid: {mid}\ntitle: Note {i} {rng.choice(WORDS)}\ntype: fact\ntier: short_term\n"
                f"tags: [{rng.choice(WORDS)}]\n---\n\n{sentence(rng, 30)}\n")
        changes.append(FileChange(memory_relpath("short_term", mid, f"note-{i}", layout="hashed"), text.encode()))
    with vault.services.store.lock.hold():
        vault.services.store.git.commit_files(changes, "bulk: notes", vault.author)
    vault.scan()
    vault.services.history.sync_history()
    return vault


def write_some(vault: Vault, rng: random.Random, count: int, ids: list[str]) -> None:
    """``count`` writes of ~300-byte memories: 60% new, 40% appended to earlier ones."""
    for _ in range(count):
        if ids and rng.random() < 0.4:
            vault.update(rng.choice(ids), append=sentence(rng, 8))
        else:
            ids.append(vault.add(f"Fact {len(ids)} {rng.choice(WORDS)}", sentence(rng, 25)).id)


def objects_bytes(git_dir: Path) -> int:
    """Disk blocks under ``.git/objects`` (files and folders), as ``du`` counts them."""
    total = 0
    for folder, dirs, names in os.walk(git_dir / "objects"):
        for name in [*dirs, *names]:
            total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def assert_repo_whole(root: Path) -> None:
    """fsck accepts it, nothing dangles, and every object history reaches can be read."""
    fsck = subprocess.run(["git", "fsck", "--full", "--strict"], cwd=root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert "dangling" not in fsck.stdout + fsck.stderr
    listed = "".join(line.split()[0] + "\n" for line in git(root, "rev-list", "--objects", "--all").splitlines())
    check = subprocess.run(["git", "cat-file", "--batch-check"], cwd=root, input=listed,
                           capture_output=True, text=True)
    assert "missing" not in check.stdout and check.returncode == 0


def no_leftovers(root: Path) -> None:
    pack_dir = root / ".git" / "objects" / "pack"
    assert not [n for n in os.listdir(pack_dir) if n.startswith(TEMP_PREFIX)]
    assert not (root / ".git" / "gitmem" / PLACING).exists()
    counts = dict(line.split(": ") for line in git(root, "count-objects", "-v").splitlines())
    assert counts["garbage"] == "0" and counts["prune-packable"] == "0", counts


def wait_idle_work_done(timeout: float = 120.0) -> None:
    """Until no idle-time timer of an open vault is waiting or running (``Vault.flush``
    cancels the waiting ones; one already running ends after its housekeeping run)."""
    deadline = time.monotonic() + timeout
    while any(isinstance(t, threading.Timer) and t.is_alive() for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the idle-time work never ended"
        time.sleep(0.02)


# ------------------------------------------------------------------ growth
@pytest.mark.slow
def test_growth_per_write_is_small_and_deltas_do_it(tmp_path: Path, clock: FakeClock) -> None:
    vault = filled_vault(tmp_path / "v", clock, 300)
    vault.services.store.git.housekeep(force=True)
    before = objects_bytes(vault.services.store.git.git_dir)
    rng, ids = random.Random(2), []
    writes = 200
    # No packing when idle meanwhile (a slow write leaves the idle timer time to fire): every
    # object of the writes stays loose for the copy below, and nothing packs during the copy.
    with try_flock(vault.services.store.git.git_dir / "gitmem" / REPACK_LOCK, 1):
        write_some(vault, rng, writes, ids)
        vault.flush()
        wait_idle_work_done()
    assert len((tmp_path / "v" / "MEMORY.md").read_bytes()) > 15_000   # rewritten in every commit
    # The same loose objects packed the way gitmem did before (no deltas), in a copy.
    shutil.copytree(tmp_path / "v" / ".git", tmp_path / "plain.git")
    plain = DiskObjectStore(str(tmp_path / "plain.git" / "objects"))
    plain.pack_loose_objects()
    plain.close()
    vault.close()   # runs gitmem's housekeeping: fewer loose objects than its threshold stay
    assert loose_object_count(vault.services.store.git.git_dir / "objects") < 256
    vault.services.store.git.housekeep(force=True)   # those too, as a later run packs them
    per_write = (objects_bytes(vault.services.store.git.git_dir) - before) / writes
    plain_per_write = (objects_bytes(tmp_path / "plain.git") - before) / writes
    listing = sorted((p.name, p.stat().st_size) for p in (vault.services.store.git.git_dir / "objects").rglob("*"))
    assert per_write <= 4096, (per_write, listing)
    assert per_write * 4 < plain_per_write, (per_write, plain_per_write, listing)
    assert_repo_whole(tmp_path / "v")
    with Vault.open(tmp_path / "v") as again:   # every version still reads back
        assert len(again.history(ids[0])) >= 1
        assert again.get(ids[-1]).body


@pytest.mark.slow
def test_packs_are_merged_geometrically_and_git_gc_agrees(tmp_path: Path, clock: FakeClock) -> None:
    vault = filled_vault(tmp_path / "v", clock, 120)
    rng, ids = random.Random(3), []
    sizes = []
    for _ in range(6):
        write_some(vault, rng, 30, ids)
        vault.services.store.git.housekeep(force=True)
        retired = json.loads((vault.services.store.state_dir / "retired-packs.json").read_text()) \
            if (vault.services.store.state_dir / "retired-packs.json").exists() else {}
        packs = vault.services.store.git.git_dir / "objects" / "pack"
        live = [p for p in packs.glob("*.idx") if p.stem not in retired]
        sizes.append(len(live))
    assert max(sizes) <= 4, sizes   # six runs, yet never more than a few packs in use
    assert retired   # the packs a merge replaced stay on disk for a while (a reader may open them)
    head = git(vault.root, "rev-parse", "HEAD")
    pack_dir = vault.services.store.git.git_dir / "objects" / "pack"
    waiting = sum(p.stat().st_size for p in pack_dir.iterdir() if p.name.split(".")[0] in retired)
    ours = objects_bytes(vault.services.store.git.git_dir) - waiting   # what stays once retired packs go
    listing = sorted((str(p.relative_to(vault.services.store.git.git_dir)), p.stat().st_size)
                     for p in (vault.services.store.git.git_dir / "objects").rglob("*"))
    vault.close()
    assert_repo_whole(vault.root)
    no_leftovers(vault.root)
    git(vault.root, "gc", "--quiet")
    assert git(vault.root, "rev-parse", "HEAD") == head
    assert_repo_whole(vault.root)
    gc_made = objects_bytes(vault.services.store.git.git_dir)
    assert ours < 2 * gc_made, (ours, gc_made, listing)   # the same order as what git's own gc makes
    with Vault.open(vault.root) as again:
        again.add("After gc", "Still writable.")
    assert_repo_whole(vault.root)


# ------------------------------------------------------------------ the vault lock
PROBE = r"""
import json, sys, time
from pathlib import Path
from gitmem import Vault
from gitmem.errors import LockTimeout
root, stop = Path(sys.argv[1]), Path(sys.argv[2])
v = Vault.open(root, author="prober", lock_timeout=30)
waits, got, written, busy = [], [], [], 0
print("ready", flush=True)
n = 0
while not stop.exists():
    start = time.monotonic()
    try:
        with v.services.store.lock.hold():
            got.append(time.monotonic())   # CLOCK_MONOTONIC: the same clock in every process
            waits.append(got[-1] - start)
        if n % 5 == 0:
            written.append(v.add(f"probe {n}", "written while housekeeping runs").id)
    except LockTimeout:
        busy += 1
    n += 1
    time.sleep(0.003)
v.close()
print(json.dumps({"waits": waits, "got": got, "busy": busy, "written": written}))
"""


@pytest.mark.slow
def test_housekeeping_holds_the_vault_lock_only_briefly(tmp_path: Path, clock: FakeClock) -> None:
    # Measured against the run itself, not in seconds, so a loaded machine changes nothing:
    # bench/lockhold.py and bench/growth.py report the lock holds in milliseconds.
    vault = filled_vault(tmp_path / "v", clock, 200)
    rng, ids = random.Random(4), []
    write_some(vault, rng, 250, ids)
    vault.services.store.git.housekeep(force=True)
    stop = tmp_path / "stop"
    with try_flock(vault.services.store.git.git_dir / "gitmem" / REPACK_LOCK, 1):   # no packing when idle meanwhile
        write_some(vault, rng, 250, ids)   # ~1,500 loose objects, then a pack as big to merge with
        vault.flush()
        wait_idle_work_done()   # an idle run that started meanwhile skips packing: the lock is ours
        probe = subprocess.Popen([sys.executable, "-c", PROBE, str(vault.root), str(stop)],
                                 stdout=subprocess.PIPE, text=True, cwd=REPO)
        assert probe.stdout is not None and probe.stdout.readline().strip() == "ready"
    start = time.monotonic()
    report = vault.services.store.git.housekeep(force=True, separate_process=True)   # as the idle timer runs it
    end = time.monotonic()
    stop.touch()
    out, _ = probe.communicate(timeout=120)
    seen = json.loads(out.strip().splitlines()[-1])
    assert report is not None and report.packed >= 1000 and report.merged_packs >= 2
    # Each hold is a small part of the run: packing and merging happen outside the lock.
    assert report.lock_holds and report.max_lock_hold <= report.seconds / 4, (report.seconds, report.lock_holds)
    # The other writer got the lock again and again while the run went on, never waiting long.
    during = [t for t in seen["got"] if start <= t <= end]
    gaps = [b - a for a, b in zip([start, *during], [*during, end], strict=True)]
    assert len(during) >= 10, (len(during), end - start)
    assert max(gaps) <= (end - start) / 4, (max(gaps), end - start)
    assert seen["busy"] == 0 and max(seen["waits"]) <= (end - start) / 4, (max(seen["waits"]), end - start)
    vault.close()
    log = git(vault.root, "log", "--format=%B")
    assert all(log.count(f"Memory-Id: {mid}") == 1 for mid in seen["written"])
    assert_repo_whole(vault.root)


def test_one_run_at_a_time(tmp_path: Path, clock: FakeClock) -> None:
    vault = filled_vault(tmp_path / "v", clock, 20)
    write_some(vault, random.Random(5), 10, [])
    vault.flush()
    wait_idle_work_done()   # an idle run of its own would take the repack lock or pack meanwhile
    loose = loose_object_count(vault.services.store.git.git_dir / "objects")
    with try_flock(vault.services.store.git.git_dir / "gitmem" / REPACK_LOCK, 1) as got:
        assert got
        report = vault.services.store.git.housekeep(force=True)
    assert report is not None and report.skipped and report.packed == 0
    assert loose_object_count(vault.services.store.git.git_dir / "objects") == loose
    report = vault.services.store.git.housekeep(force=True)
    assert report is not None and report.packed >= loose - 1 and not report.skipped
    vault.close()
    assert_repo_whole(vault.root)


def test_objects_of_a_write_under_way_stay_loose(tmp_path: Path, clock: FakeClock) -> None:
    """A write that fails removes its objects: they must never be copied into a pack."""
    vault = filled_vault(tmp_path / "v", clock, 20)
    write_some(vault, random.Random(6), 10, [])
    # No idle-time work from here on: its next hold of the vault lock would recover the write
    # below (dropping its objects) before housekeeping had a chance to pack them.
    vault.flush()
    wait_idle_work_done()
    store = vault.services.store.git
    pending = PendingObjects(store.repo.object_store)
    blob = Blob.from_string(b"a memory whose write was killed half-way\n")
    pending.add_object(blob)
    with vault.services.store.lock.hold():
        head = store.head()
        assert head is not None
        begin_write(store, store.head_ref(), head, b"0" * 40, [], [], pending.new_ids())
        pending.write()
    loose_file = store.git_dir / "objects" / blob.id[:2].decode() / blob.id[2:].decode()
    assert loose_file.exists()
    report = store.housekeep(force=True)
    assert report is not None and report.packed > 0
    assert loose_file.exists() and not store.repo.object_store.contains_packed(blob.id)
    vault.close()
    with Vault.open(vault.root):  # the next lock holder drops the dead write's objects
        pass
    assert not loose_file.exists()
    assert_repo_whole(vault.root)


@pytest.mark.slow
def test_git_gc_at_the_same_time_loses_nothing(tmp_path: Path, clock: FakeClock) -> None:
    vault = filled_vault(tmp_path / "v", clock, 150)
    rng, ids = random.Random(7), []
    for _ in range(3):
        write_some(vault, rng, 40, ids)
        vault.services.store.git.flush_index()
        gc = subprocess.Popen(["git", "gc", "--quiet"], cwd=vault.root)
        vault.services.store.git.housekeep(force=True)
        assert gc.wait(timeout=120) == 0
    vault.close()
    assert_repo_whole(vault.root)
    with Vault.open(vault.root) as again:
        assert all(again.get(mid).body for mid in ids)


# ------------------------------------------------------------------ killed
CHILD = r"""
import random, sys
from pathlib import Path
from gitmem import Vault
root = Path(sys.argv[1]); rng = random.Random(int(sys.argv[2]))
v = Vault.open(root, author="worker")
n = 0
while True:
    for _ in range(rng.randint(5, 40)):
        v.add(f"kill test {sys.argv[2]} {n}", "words " * rng.randint(10, 60)); n += 1
    print("packing", flush=True)
    v.services.store.git.housekeep(force=True)
    print("packed", flush=True)
"""


@pytest.mark.slow
def test_a_killed_run_loses_nothing(tmp_path: Path, clock: FakeClock) -> None:
    vault = filled_vault(tmp_path / "v", clock, 150)
    write_some(vault, random.Random(8), 150, [])
    vault.close()
    root = vault.root
    rng = random.Random(9)
    mid_pack = leftovers = 0
    for round_no in range(60):   # 24 kills, more if too few of them landed inside packing
        if round_no >= 24 and mid_pack >= 4:
            break
        heads_before = git(root, "rev-list", "--count", "HEAD")
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(round_no)],
                                 stdout=subprocess.PIPE, text=True, cwd=REPO)
        assert child.stdout is not None
        line = child.stdout.readline()   # started: at least one write batch done
        assert line.strip() == "packing"
        time.sleep(rng.uniform(0.0, 1.5))
        child.send_signal(signal.SIGKILL)
        child.wait()
        last = ([line] + child.stdout.read().split())[-1].strip()
        child.stdout.close()
        mid_pack += last == "packing"   # killed while packing, not while writing
        leftovers += any(n.startswith(TEMP_PREFIX) for n in os.listdir(root / ".git" / "objects" / "pack"))
        with Vault.open(root):   # recovery of a killed write, if the kill hit one
            pass
        assert int(git(root, "rev-list", "--count", "HEAD")) > int(heads_before)
        assert_repo_whole(root)
    assert mid_pack >= 4, mid_pack   # the kills did land inside housekeeping
    with Vault.open(root) as again:
        again.services.store.git.housekeep(force=True)
    assert_repo_whole(root)
    no_leftovers(root)
    print(f"{mid_pack} kills inside housekeeping, {leftovers} left a temporary pack")
    assert loose_object_count(root / ".git" / "objects") < 16
