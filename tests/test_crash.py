"""SIGKILL writers at random points, many times; then nothing acknowledged is lost.

Each writer (``stress_worker.py crash``) prints a line after every write that
returned.  The test kills writers at random moments (two at a time, so one is
often waiting for the lock while the other is mid-commit), starts new ones,
and at the end opens the vault and checks what the issue promises:

* every acknowledged write is in HEAD (its commit, with its ``Memory-Id``);
* the last acknowledged state of every memory is what HEAD holds, unless a
  later (committed but unacknowledged) write changed it again;
* ``git fsck`` is clean and ``git status`` is clean (no half-written or
  uncommitted file, no temp file, ``.git/index`` right);
* no stale lock blocks the next writer; the search index catches up.

``GITMEM_CRASH_KILLS`` sets the number of kills (default 70, ~30 s on 2 cores;
``bench/crash.py`` runs hundreds).
"""

from __future__ import annotations

import pytest

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gitmem import Vault
from gitmem.memory.markdown import decode, parse_text
from gitmem.search.whoosh import SearchIndex

from .conftest import assert_clean, git

WORKER = Path(__file__).with_name("stress_worker.py")
KILLS = int(os.environ.get("GITMEM_CRASH_KILLS", "70"))


def run_kill_loop(root: Path, kills: int, seed: int = 1, slots: int = 2,
                  budget_s: float = 120.0) -> tuple[list[dict[str, Any]], int]:
    """Start writers and SIGKILL them at random times until ``kills`` kills; return the acks."""
    rng = random.Random(seed)
    # Kill anywhere from start-up to mid-run, on this machine as loaded as it is now: the
    # window (0.15-1.0 s when Python + gitmem start in ~0.25 s) stretches with start-up.
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", "import gitmem.vault"], check=True)
    stretch = max(1.0, (time.monotonic() - began) / 0.25)
    acks: list[dict[str, Any]] = []
    running: dict[int, tuple[subprocess.Popen[bytes], float, Path]] = {}
    done = 0
    started = 0
    deadline = time.monotonic() + budget_s * stretch
    while done < kills and time.monotonic() < deadline:
        for slot in range(slots):
            if slot not in running:
                out = root.parent / f"out-{started}.jsonl"
                handle = open(out, "wb")
                proc = subprocess.Popen([sys.executable, str(WORKER), "crash", str(root), f"w{slot}",
                                         str(seed * 100_000 + started)], stdout=handle,
                                        stderr=subprocess.PIPE)
                handle.close()
                running[slot] = (proc, time.monotonic() + stretch * rng.uniform(0.15, 1.0), out)
                started += 1
        time.sleep(0.005)
        for slot, (proc, when, out) in list(running.items()):
            if proc.poll() is not None:  # died on its own: that is a failure
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise AssertionError(f"writer exited {proc.returncode} before being killed:\n{err}")
            if time.monotonic() >= when:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                if proc.stderr:
                    proc.stderr.close()
                done += 1
                del running[slot]
                acks += [json.loads(line) for line in out.read_text().splitlines()
                         if line.endswith("}")]  # a line cut by the kill was never acknowledged
    for proc, _, out in running.values():
        proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()
        acks += [json.loads(line) for line in out.read_text().splitlines() if line.endswith("}")]
    return acks, done


def check_after_crashes(root: Path, acks: list[dict[str, Any]]) -> dict[str, int]:
    """Everything the crash test promises; returns counts for reports."""
    # Opening recovers (interrupted write, .git/index); a short lock timeout
    # proves no stale lock is left: a dead holder's flock is gone.
    with Vault.open(root, lock_timeout=5) as vault:
        vault.add("after the crashes", "the next writer is not blocked\n")
        vault.services.store.lock.timeout = 120  # closing may wait for packing thousands of loose objects
        vault.services.searcher.index  # noqa: B018 - opening the index catches up with the files
        vault.scan()
        on_disk = vault.services.store.catalog.hashes()
    raw = SearchIndex(root / ".git" / "gitmem" / "index")
    try:
        assert raw.indexed() == on_disk, "search index did not catch up"
    finally:
        raw.close()

    log = git(root, "log", "--format=%H%x00%(trailers:key=Memory-Id,valueonly,separator=%x2c)")
    order: list[str] = []
    ids: dict[str, set[str]] = {}
    for line in log.splitlines():
        sha, _, mids = line.partition("\x00")
        order.append(sha)
        ids[sha] = {m for m in mids.split(",") if m}
    position = {sha: n for n, sha in enumerate(reversed(order))}  # 0 = oldest
    last: dict[str, dict[str, Any]] = {}
    for ack in acks:
        assert ack["commit"] in ids, f"acknowledged write lost: {ack}"
        assert ack["id"] in ids[ack["commit"]]
        if ack["id"] not in last or position[ack["commit"]] > position[last[ack["id"]]["commit"]]:
            last[ack["id"]] = ack
    for mid, ack in last.items():
        later = [sha for sha in order if position[sha] > position[ack["commit"]] and mid in ids[sha]]
        if later:
            continue  # a later write committed but was killed before it could say so
        if ack["path"] is None:
            assert git(root, "grep", "-l", f"id: {mid}", "HEAD", check=False) == "", f"{mid} came back"
            continue
        text = git(root, "show", f"HEAD:{ack['path']}")
        assert parse_text(text).body == ack["body"], f"{mid}: HEAD differs from the last acknowledged write"

    # No half-written file, no temp file, every memory file parses.
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            assert ".gitmem-tmp-" not in name, f"temp file left: {folder}/{name}"
            if name.endswith(".md") and Path(folder) != root:  # memories, not MEMORY.md
                parsed = parse_text(decode((Path(folder) / name).read_bytes()))
                assert parsed.problem is None and parsed.has_frontmatter, f"{folder}/{name}"
    assert_clean(root)
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    return {"acknowledged": len(acks), "memories": len(last), "commits": len(order)}


@pytest.mark.slow
def test_sigkill_at_random_points_loses_no_acknowledged_write(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    Vault.init(root, author="setup").close()
    acks, kills = run_kill_loop(root, KILLS)
    assert kills == KILLS
    assert len(acks) >= 10  # the writers got work done between kills
    check_after_crashes(root, acks)


# ------------------------------------------------- deterministic kill points
# A child process dies (os._exit, as abrupt as SIGKILL for the files) at one
# chosen point inside a write; the parent then checks what the next opener sees.
KILL_AT = {
    "objects": "from gitmem.store import recovery\n"
               "def half(self):\n"
               "    objs = list(self.objects.values())\n"
               "    for o in objs[: len(objs) // 2]: self.store.add_object(o)\n"
               "    lock = v.services.store.git.git_dir / 'objects' / objs[-1].id.decode()[:2] / (objs[-1].id.decode()[2:] + '.lock')\n"
               "    lock.parent.mkdir(exist_ok=True); lock.write_bytes(b'')\n"
               "    os._exit(9)\n"
               "recovery.PendingObjects.write = half\n",
    "worktree": "v.services.store.git._apply_to_worktree = lambda *args: os._exit(9)\n",
    # Killed inside the branch's move, holding git's lock on the branch: before the new
    # .git/index replaced the old one, and just after.
    "ref": "type(v.services.store.git.git_index).publish_staged = lambda self: os._exit(9)\n",
    "ref-published": "GitIndex = type(v.services.store.git.git_index)\n"
                     "publish = GitIndex.publish_staged\n"
                     "def dead(self):\n"
                     "    publish(self)\n"
                     "    os._exit(9)\n"
                     "GitIndex.publish_staged = dead\n",
    "index": "def dead(self):\n"
             "    from gitmem.store.recovery import index_writing\n"
             "    with index_writing(self):\n"
             "        (self.git_dir / 'index.lock').write_bytes(b'DIRC')\n"
             "        os._exit(9)\n"
             "type(v.services.store.git).flush_index = dead\n",
}


def die_during(root: Path, point: str, action: str) -> None:
    script = ("import os, sys\nfrom gitmem import Vault\nv = Vault.open(sys.argv[1])\n"
              "m = v.get('keeper')\n" + KILL_AT[point] + action + "\nv.flush()\nos._exit(0)\n")
    done = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True)
    assert done.returncode == 9, done.stderr


def fresh(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "vault"
    with Vault.init(root, author="setup") as v:
        head = v.add("keeper", "the original body\n").commit
    return root, head


def test_killed_while_storing_objects_leaves_nothing_behind(tmp_path: Path) -> None:
    root, head = fresh(tmp_path)
    die_during(root, "objects", "v.add('never acknowledged', 'body one\\n')")
    with Vault.open(root) as v:
        assert v.head == head
        assert [m.title for m in v.list()] == ["keeper"]
        v.add("same content again", "body one\n")  # the same blob: no stale object lock in the way
    assert_clean(root)
    fsck = subprocess.run(["git", "fsck"], cwd=root, capture_output=True, text=True)
    assert "dangling" not in fsck.stdout + fsck.stderr and "bad sha1" not in fsck.stderr


def test_killed_before_the_working_tree_is_written_is_rolled_forward(tmp_path: Path) -> None:
    root, head = fresh(tmp_path)
    die_during(root, "worktree", "v.update('keeper', body='changed but not acknowledged\\n')")
    assert git(root, "rev-parse", "HEAD").strip() == head
    with Vault.open(root) as v:  # opening finishes the write: its commit object is complete
        assert v.head != head
        assert v.get("keeper").body == "changed but not acknowledged\n"
        assert v.search("acknowledged").total == 1
    assert_clean(root)
    assert "finished an interrupted write" in (root / ".git/gitmem/recovery.log").read_text()


@pytest.mark.parametrize("point", ["ref", "ref-published"])
def test_killed_holding_the_ref_lock_does_not_block_the_next_writer(tmp_path: Path, point: str) -> None:
    root, head = fresh(tmp_path)
    die_during(root, point, "v.move('keeper', 'long_term')")
    assert (root / ".git/refs/heads/main.lock").exists()
    with Vault.open(root, lock_timeout=5) as v:
        assert not (root / ".git/refs/heads/main.lock").exists()
        assert v.get("keeper").tier == "long_term"
        v.add("next writer", "not blocked\n")
    assert_clean(root)
    git(root, "commit", "--allow-empty", "-m", "the git CLI is not blocked either")


def test_killed_writing_git_index_leaves_no_index_lock(tmp_path: Path) -> None:
    root, _ = fresh(tmp_path)
    die_during(root, "index", "v.add('indexed later', 'x\\n')")
    assert (root / ".git/index.lock").exists()
    Vault.open(root).close()
    assert not (root / ".git/index.lock").exists()
    assert_clean(root)


def test_a_person_edit_after_the_crash_is_never_overwritten(tmp_path: Path) -> None:
    root, _ = fresh(tmp_path)
    with Vault.open(root) as v:
        path = v.get("keeper").path
    die_during(root, "worktree", "v.update('keeper', body='agent version\\n')")
    (root / path).write_text("---\ntitle: keeper\n---\nthe person's version\n")
    with Vault.open(root) as v:
        assert v.get("keeper").body == "the person's version\n"  # left for the watcher to commit
        assert [c.path for c in v.services.pipeline.outside.changes()] == [path]
