"""Writes into a full disk: a small tmpfs holds the vault and is filled up, then given
a little room at a time, so the disk runs out at every step of a write in turn (git
objects, the crash journal, the working tree, the branch, the catalog, the search
index, ``.git/index``).

What a caller must see: a write either succeeds (and is in HEAD) or fails with
``storage_error`` (and is not in HEAD); never a raw ``OSError``, an SQLite error,
"cannot rollback - no transaction is active" or an ``internal_error``, from the API,
the CLI or an agent tool.  Once space returns: every acknowledged write is in HEAD,
``git fsck --full`` is clean, no lock or temporary file is left that makes ``git
add`` fail, and writing works again.

Needs root (``mount -t tmpfs``); skipped with a message otherwise.
"""

from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any, Iterator

import pytest

from gitmem import Vault
from gitmem.agents.registry import Toolbox
from gitmem.errors import GitmemError

from .conftest import git

SIZE = "2m"

# dulwich's GitFile neither closes its file nor removes its lock file when writing its
# buffered bytes fails as it is closed (a full disk); its finaliser does both later, with
# a ResourceWarning (and, while the disk is still full, an error it cannot raise).  gitmem
# removes at once the one such lock file that would block later writes: the branch's.
pytestmark = [pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning"),
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs, unmounted afterwards."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        # The GitFiles dulwich could not close are finalised here, under this module's
        # warning filters: collected later, they would fail whichever test runs then.
        gc.collect()
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path, chunk: int = 16 * 1024) -> list[Path]:
    """Fill the disk with files of ``chunk`` bytes (the last one partial); they are
    removed one by one to give writes a little room."""
    fillers: list[Path] = []
    n = 0
    while True:
        path = folder / f"filler-{n}"
        n += 1
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            os.write(fd, b"\0" * chunk)
        except OSError:
            path.unlink()
            return fillers
        finally:
            os.close(fd)
        fillers.append(path)


def _cli(root: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run([sys.executable, "-m", "gitmem", "--vault", str(root), *args, "--json"],
                          capture_output=True, text=True)
    try:
        out = json.loads(done.stdout) if done.stdout.strip() else {}
    except json.JSONDecodeError:
        out = {"unparsed": done.stdout}
    return done.returncode, out, done.stderr


def test_writes_into_a_full_disk_fail_cleanly_and_lose_nothing(disk: Path) -> None:
    root = disk / "vault"
    rng = random.Random(9)
    acked: dict[str, str] = {}        # commit -> memory id, of every acknowledged write
    refused: list[str] = []           # titles of writes that failed with storage_error
    wrong: list[str] = []             # any other failure
    with Vault.init(root, author="tester") as vault:
        vault.add("first", "A memory written while there is room.")
        box = Toolbox(vault, "gitmem", agent="disk-agent")
        fillers = _fill(disk / ".")
        assert fillers, "the tmpfs was full before the test began"
        live: list[str] = []
        for i in range(160):
            for _ in range(rng.randint(0, 3)):   # a little room, often too little for a write
                if fillers:
                    fillers.pop(rng.randrange(len(fillers))).unlink()
            title, body = f"note {i}", f"body {i} " + "".join(rng.choice("abcdefgh ") for _ in range(rng.randint(200, 20000)))
            how = rng.choice(["api", "api", "tool"] + (["update"] if live else []))
            try:
                if how == "tool":
                    result = box.call("memory_add", {"content": body, "title": title})
                    if "error" in result:
                        (refused if result["error"]["code"] == "storage_error" else wrong).append(
                            f"{title}: {result['error']}")
                        continue
                    memory_id, commit = result["id"], result["commit"]
                elif how == "update":
                    m = vault.update(rng.choice(live), append=f"more {i} " + body[:2000])
                    memory_id, commit = m.id, m.commit
                else:
                    m = vault.add(title, body)
                    memory_id, commit = m.id, m.commit
            except GitmemError as exc:
                (refused if exc.code == "storage_error" else wrong).append(f"{title}: {exc.code}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - what the test is about
                where = traceback.extract_tb(exc.__traceback__)[-3:]
                wrong.append(f"{title}: {type(exc).__name__}: {exc} at {traceback.format_list(where)}")
                continue
            acked[commit] = memory_id
            live.append(memory_id)
        # The command line, on a disk with no room at all: storage_error, exit code 1.
        _fill(disk / ".", chunk=512)
        for args in (("add", "cli note", "cli body " * 300), ("edit", live[0] if live else "first", "--append", "x " * 300)):
            code, out, err = _cli(root, *args)
            if code != 0:
                error = out.get("error", {})
                (refused if error.get("code") == "storage_error" and code == 1 else wrong).append(
                    f"cli {args[0]}: exit {code}: {out} {err[-500:]}")
            assert "Traceback" not in err and "cannot rollback" not in err + json.dumps(out), err
            if code == 0:
                acked[out["commit"]] = out["id"]
    assert wrong == [], "\n".join(wrong[:5])
    assert refused, "the disk never filled up"

    # Space returns.
    subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
    for filler in disk.glob("filler-*"):
        filler.unlink()
    leftovers = [p.relative_to(root).as_posix() for p in (root / ".git").rglob("*.lock")
                 if "objects" not in p.parts]   # (a loose object's lock blocks nothing)
    assert leftovers == []
    history = git(root, "log", "--format=%H%x00%(trailers:key=Memory-Id,valueonly,separator=%x2c)")
    in_head = {sha: ids.split(",") for sha, ids in (line.split("\x00") for line in history.splitlines())}
    for commit, memory_id in acked.items():
        assert memory_id in in_head.get(commit, []), f"acknowledged write {commit} lost"
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    (root / "scratch.txt").write_text("a person's own file\n")
    git(root, "add", "scratch.txt")          # .git/index is usable again
    git(root, "rm", "--cached", "-q", "scratch.txt")
    (root / "scratch.txt").unlink()
    with Vault.open(root) as vault:
        added = vault.add("after", "Written once there was space again.")
        assert [h.id for h in vault.search('"there was space again"').hits] == [added.id]
