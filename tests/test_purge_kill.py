"""``gitmem purge`` killed with SIGKILL at random moments: the next process to open the
vault finishes it or rolls it back, and the git CLI finds a clean, consistent repository
with the memory either fully purged or fully present, never half of each."""

from __future__ import annotations

import collections
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from gitmem import Vault

from .conftest import FakeClock, git

SECRET = "the-launch-code-" + "7781-alpha-zulu"
KILLS = 25
JOURNAL = Path(".git") / "gitmem" / "purge-journal"


def build_vault(root: Path, clock: FakeClock, memories: int = 120) -> tuple[str, str]:
    """A vault of a realistic size: the doomed memory's versions spread through a
    few hundred commits, a note holding its text, objects partly packed."""
    rng = random.Random(7)
    with Vault.init(root, author="tester", clock=clock) as v:
        ids: list[str] = []
        doomed = keep = None
        for i in range(memories):
            clock.tick()
            m = v.add(f"Memory number {i}", f"ordinary body {i} " + "lorem ipsum " * rng.randint(5, 40) + "\n",
                      tags=[f"t{i % 7}"])
            ids.append(m.id)
            if i == memories // 3:
                doomed = v.add("Launch code notes", f"first version {SECRET}\n")
                keep = m
            if i % 5 == 0:
                v.update(rng.choice(ids), append=f"more text {i}")
            if doomed is not None and i % 30 == 0:
                v.update(doomed.id, append=f"again {SECRET} {i}")
        v.services.store.git.pack_if_needed(threshold=0)  # what gitmem does once loose objects pile up
    assert doomed is not None and keep is not None
    git(root, "notes", "add", "-m", f"reviewed: {SECRET}", "HEAD")
    git(root, "notes", "add", "-m", "a harmless review note", git(root, "rev-list", "--max-parents=0", "HEAD").strip())
    return doomed.id, keep.id


def gitmem(root: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "gitmem", "--vault", str(root), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def state(root: Path) -> dict[str, object]:
    """Everything a user would look at, through the git CLI."""
    fsck = subprocess.run(["git", "fsck", "--full", "--strict"], cwd=root, capture_output=True, text=True)
    stored = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=root,
                            capture_output=True, check=True).stdout.decode("utf-8", "replace")
    return {"fsck": (fsck.returncode, (fsck.stdout + fsck.stderr).strip()),
            "status": git(root, "status", "--porcelain"),
            # The tombstone's commit carries the time of its purge: compared by presence only.
            "refs": "".join(line for line in git(root, "for-each-ref", "--format=%(refname) %(objectname)")
                            .splitlines(keepends=True) if not line.startswith("refs/gitmem/")),
            "tombstone": bool(git(root, "for-each-ref", "refs/gitmem/").strip()),
            "secret_stored": SECRET in stored,
            "index": git(root, "show", "HEAD:MEMORY.md")}


@pytest.mark.slow
@pytest.mark.slow
def test_purge_killed_at_random_points_is_finished_or_rolled_back(
        tmp_path: Path, clock: FakeClock, record_property: Callable[[str, object], None]) -> None:
    prepared = tmp_path / "prepared"
    doomed, keep = build_vault(prepared, clock)
    before = state(prepared)
    assert before["secret_stored"] and "Launch code notes" in str(before["index"])

    # One uninterrupted purge: what a finished one looks like, and how long one takes
    # (only to spread the kills over its whole run; nothing is asserted about time).
    reference = tmp_path / "reference"
    shutil.copytree(prepared, reference, symlinks=True)
    started = time.monotonic()
    done = gitmem(reference, "purge", doomed, "--yes")
    _, err = done.communicate()
    assert done.returncode == 0, err.decode()
    span = time.monotonic() - started
    purged = state(reference)
    assert purged["fsck"] == (0, "") and purged["status"] == "" and not purged["secret_stored"]
    shutil.rmtree(reference)

    rng = random.Random(20261101)
    outcomes: collections.Counter[str] = collections.Counter()
    for n in range(KILLS):
        work = tmp_path / f"kill-{n}"
        shutil.copytree(prepared, work, symlinks=True)
        proc = gitmem(work, "purge", doomed, "--yes")
        try:
            # Past the interpreter's start-up (nothing to interrupt there), to just after the end.
            proc.wait(timeout=rng.uniform(min(0.2, span / 4), span * 1.05))
            stage = "completed before the kill"
        except subprocess.TimeoutExpired:
            proc.kill()  # SIGKILL: no handler, no cleanup
            proc.wait()
            journal = work / JOURNAL
            if journal.exists():
                stage = "killed during " + json.loads(journal.read_text())["step"]
            elif git(work, "for-each-ref", "--format=%(refname) %(objectname)") == before["refs"]:
                stage = "killed before its journal"
            else:
                stage = "killed as it exited"  # done: the journal was already removed
        proc.communicate()

        opener = gitmem(work, "ls", "--json")  # the next process: recovers, then reads
        out, err = opener.communicate()
        assert opener.returncode == 0, err.decode()
        listed = {m["id"] for m in json.loads(out)}
        assert not (work / JOURNAL).exists()
        after = state(work)
        assert after["fsck"] == (0, ""), (stage, after["fsck"])
        assert after["status"] == "", (stage, after["status"])
        assert keep in listed
        if doomed in listed:  # fully present: exactly the history it had
            assert after == before, stage
            outcome = "present"
        else:  # fully purged: nothing anywhere, and the same result as an uninterrupted purge
            assert not after["secret_stored"] and "Launch code notes" not in str(after["index"]), stage
            assert after["index"] == purged["index"] and after["refs"] == purged["refs"], stage
            assert not list(work.rglob("launch-code-notes.md"))
            outcome = "purged"
        outcomes[f"{stage} -> {outcome}"] += 1
        shutil.rmtree(work)

    assert sum(outcomes.values()) == KILLS
    record_property("purge_kills", dict(outcomes))
    print(f"\n{KILLS} kills over a {span:.2f}s purge:", dict(sorted(outcomes.items())))
