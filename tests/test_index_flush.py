""".git/index stays in line with HEAD while git holds index.lock now and then.

An IDE polling ``git status`` takes ``.git/index.lock`` many times a second.
A gitmem write takes the same lock before it moves the branch (waiting while git
holds it) and writes ``.git/index`` before it returns, or a person's next plain
``git commit -a`` would commit a deletion of the memory gitmem just wrote.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gitmem import Vault

LOCK_LOOP = """\
import os, random, sys, time
lock, stop = sys.argv[1], sys.argv[2]
held = 0
while not os.path.exists(stop):
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        time.sleep(0.001)
        continue
    time.sleep(random.uniform(0.002, 0.008))   # held a few ms, like git's own refresh
    os.close(fd)
    os.unlink(lock)
    held += 1
    time.sleep(random.uniform(0.0005, 0.002))
print(held)
"""


def git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=check)


def wait_until(predicate, timeout: float = 90.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.slow
def test_index_is_synced_although_git_keeps_taking_index_lock(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    Vault.init(root, author="tester").close()
    stop = tmp_path / "stop"
    status_loop = subprocess.Popen(
        ["sh", "-c", f'while [ ! -e "{stop}" ]; do git status >/dev/null 2>&1; done'], cwd=root)
    lock_loop = subprocess.Popen([sys.executable, "-c", LOCK_LOOP, str(root / ".git" / "index.lock"),
                                  str(stop)], cwd=root, stdout=subprocess.PIPE, text=True)
    vault = Vault.open(root, author="agent")
    try:
        time.sleep(0.3)  # both loops are running
        cli = [subprocess.Popen([sys.executable, "-m", "gitmem", "--vault", str(root), "add",
                                 f"CLI memory {i}", f"Written by process {i}."],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(4)]
        for i in range(8):
            vault.add(f"In-process memory {i}", f"Body {i}.", tier="mid_term")
            time.sleep(0.1)
        for proc in cli:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            assert out.startswith("added ")
        # The last in-process write was just made: its deferred update meets the locks too.
        vault.add("Last in-process memory", "Written while git still polls.")
        time.sleep(0.5)
    finally:
        stop.touch()
        status_loop.wait(timeout=30)
        held = lock_loop.communicate(timeout=30)[0]
    assert int(held) > 50  # the lock really was taken over and over
    # No flush(), no close(): the deferred update alone must get through once git lets go.
    assert wait_until(lambda: vault.services.store.git.index_pending == 0)
    assert not list((root / ".git" / "gitmem").glob("index-dirty*"))
    assert git(root, "status", "--porcelain").stdout == ""
    result = git(root, "commit", "-am", "x", check=False)
    assert result.returncode == 1 and "nothing to commit" in result.stdout
    assert len(vault.list()) == 13
    vault.close()


def test_a_write_waits_while_git_holds_index_lock(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    lock = root / ".git" / "index.lock"
    with Vault.init(root, author="tester") as vault:
        vault.flush()
        head = git(root, "rev-parse", "HEAD").stdout
        lock.write_bytes(b"")   # git holds the lock ...
        timer = threading.Timer(0.6, lock.unlink)   # ... and lets go a bit later
        timer.start()
        vault.add("Held", "Written while index.lock is held.")   # waits for it, then writes
        timer.join()
        assert git(root, "rev-parse", "HEAD").stdout != head
        assert git(root, "status", "--porcelain").stdout == ""   # before close(): in step already
    assert not list((root / ".git" / "gitmem").glob("index-dirty*"))


def test_a_write_gives_up_on_a_stuck_lock_and_changes_nothing(tmp_path: Path) -> None:
    from gitmem.errors import LockTimeout
    root = tmp_path / "vault"
    lock = root / ".git" / "index.lock"
    with Vault.init(root, author="tester") as vault:
        vault.flush()
        vault.services.store.git.index_lock_timeout = 0.3
        head = git(root, "rev-parse", "HEAD").stdout
        lock.write_bytes(b"")   # a lock nobody will release (a crashed git)
        with pytest.raises(LockTimeout) as caught:
            vault.add("Stuck", "Written while index.lock is stuck.")
        assert caught.value.code == "vault_busy" and "index.lock" in caught.value.message
        assert git(root, "rev-parse", "HEAD").stdout == head   # HEAD never moves without the index
        assert lock.read_bytes() == b""                         # git's lock is left alone
        lock.unlink()
        assert git(root, "status", "--porcelain").stdout == ""  # no file of the refused write
        vault.add("Later", "Once the lock is gone.")
        assert git(root, "status", "--porcelain").stdout == ""
    assert not list((root / ".git" / "gitmem").glob("index-dirty*"))


def test_a_cli_write_waiting_for_index_lock_ends_cleanly_on_sigterm(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    Vault.init(root, author="tester").close()
    lock = root / ".git" / "index.lock"
    lock.write_bytes(b"")   # the write must wait for git ...
    head = git(root, "rev-parse", "HEAD").stdout
    proc = subprocess.Popen([sys.executable, "-m", "gitmem", "--vault", str(root), "add", "Term",
                             "Body."], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    from gitmem.store.locking import try_flock

    def writing() -> bool:   # the process holds the vault lock: it is in its write
        with try_flock(root / ".git" / "gitmem" / "lock", 0.0) as taken:
            return not taken

    assert wait_until(writing, 60)   # ... when SIGTERM comes
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    lock.unlink()
    assert git(root, "rev-parse", "HEAD").stdout == head
    with Vault.open(root):
        pass
    assert git(root, "status", "--porcelain").stdout == ""


@pytest.mark.parametrize("seed", range(12))
def test_spliced_index_matches_what_git_reads(tmp_path: Path, seed: int) -> None:
    """The in-place update of ``.git/index`` (entries found by binary search, the file cut
    and joined around them) leaves exactly the entries asked for, in an index git reads;
    so do later splices that take the entry offsets from the layout the previous one
    returned, and one given a layout git has made stale by rewriting the index."""
    import os
    import random

    from gitmem.store.git_index import IndexLayout, splice_index

    def run(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True,
                              check=True).stdout

    def write(name: str, text: str) -> tuple[bytes, os.stat_result]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
        return run("hash-object", "-w", name).strip().encode(), os.stat(tmp_path / name)

    def changes_to(names: list[str]) -> dict[bytes, tuple[bytes, os.stat_result] | None]:
        changes: dict[bytes, tuple[bytes, os.stat_result] | None] = {}
        for name in rng.sample(names, k=min(len(names), rng.randrange(0, 5))):
            changes[name.encode()] = None                                   # removed
        for name in rng.sample(names, k=min(len(names), rng.randrange(0, 4))):
            changes[name.encode()] = write(name, f"changed {rng.random()} {name}")  # replaced
        for _ in range(rng.randrange(0, 6)):
            name = f"t{rng.randrange(40)}/new{rng.randrange(10_000)}.md"
            changes[name.encode()] = write(name, "new " + name)             # inserted
        return changes

    def check(staged_before: dict[str, str], changes) -> dict[str, str]:
        expected = dict(staged_before)
        for name, value in changes.items():
            if value is None:
                expected.pop(name.decode(), None)
            else:
                expected[name.decode()] = value[0].decode()
        listed = run("ls-files", "-s").splitlines()
        staged = {line.split("\t")[1]: line.split()[1] for line in listed}
        assert len(listed) == len(staged)
        assert staged == expected
        assert run("diff-files", "--name-only") == ""   # each entry's stat matches its file
        return staged

    rng = random.Random(seed)
    run("init", "-q")
    names = sorted({f"t{rng.randrange(40)}/{'x' * rng.randrange(1, 30)}{rng.randrange(1000)}.md"
                    for _ in range(rng.randrange(0, 40))})
    for name in names:
        write(name, name)
    if names:
        run("add", "-A")
    staged = {name: run("hash-object", name).strip() for name in names}
    index, shared = tmp_path / ".git" / "index", tmp_path / "layout"
    layout = None
    for round_ in range(6):
        if round_ in (3, 5):
            # git rewrites the index, with as many entries as before but not in the same
            # places (one entry out, one with a longer name in): no layout fits any more
            name = f"a/{'long' * 9}-by-git{round_}.md"
            write(name, f"added by git {seed}")
            gone = sorted(staged)[:1]
            if gone:
                run("rm", "-q", "--cached", *gone)
                (tmp_path / gone[0]).unlink()
            run("add", name)
            staged = check({**{k: v for k, v in staged.items() if k not in gone},
                            name: run("hash-object", name).strip()}, {})
        changes = changes_to(sorted(staged))
        # odd rounds: this process's own layout; even ones: as a new process, the saved one
        layout = splice_index(index, changes, layout if round_ % 2 else None, shared)
        data = index.read_bytes()
        assert layout is not None and layout.fits(data, len(layout.starts))
        assert IndexLayout.load(shared) == layout
        staged = check(staged, changes)


def test_entries_stay_pending_while_git_index_cannot_be_read(tmp_path: Path) -> None:
    """A torn ``.git/index`` (garbage bytes) is an expected failure: the entries stay
    pending for a retry, and the repair from HEAD then writes a whole index."""
    with Vault.init(tmp_path / "v", author="tester") as vault:
        store = vault.services.store.git
        memory = vault.add("Pending", "Its entry waits for a readable index.")
        git_index = store.git_index
        index_file = vault.root / ".git" / "index"
        key = memory.path.encode()
        sha = store.blob_sha_at(store.head(), memory.path)
        assert sha is not None
        git_index.pending[key] = (sha, (vault.root / memory.path).stat())
        index_file.write_bytes(b"not an index at all")
        with vault.services.store.lock.hold():
            assert store.flush_index() is False
        assert store.index_pending == 1
        with vault.services.store.lock.hold():
            store.rebuild_index_from_head()
        assert store.index_pending == 0
    assert git(vault.root, "status", "--porcelain").stdout == ""


def test_a_bug_in_the_git_index_update_is_not_taken_for_a_busy_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the failures a retry can cure (git holds index.lock, a full disk, an unreadable
    index) make ``flush_index`` answer "try later"; anything else is a bug and raises."""
    from gitmem.store import git_index as module

    with Vault.init(tmp_path / "v", author="tester") as vault:
        store = vault.services.store.git
        memory = vault.add("Pending", "Its entry is written by the deferred update.")
        sha = store.blob_sha_at(store.head(), memory.path)
        assert sha is not None
        store.git_index.pending[memory.path.encode()] = (sha, (vault.root / memory.path).stat())

        def broken(*args: object, **kwargs: object) -> None:
            raise TypeError("a bug")
        monkeypatch.setattr(module, "splice_index", broken)
        with vault.services.store.lock.hold(), pytest.raises(TypeError):
            store.flush_index()
        monkeypatch.undo()
        with vault.services.store.lock.hold():
            assert store.flush_index() is True
