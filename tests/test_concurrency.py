"""Many writers on one vault: processes (API, CLI, a person's editor + ``gitmem watch``) and threads.

What is checked afterwards, as a user would: every acknowledged write is in
HEAD exactly once (the ``Memory-Id:`` trailers of ``git log``), ``git fsck``
and ``git status`` are clean, the search index holds exactly the files, and
no process printed a traceback.

Sizes: 8 API processes x 50 writes is the issue's bar and the default here;
``GITMEM_STRESS_WRITES`` lowers the per-process count if a slow CI needs it
(``bench/concurrency.py`` measures throughput at the full size).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gitmem import Vault
from gitmem.errors import GitmemError
from gitmem.search.whoosh import SearchIndex

from .conftest import assert_clean, git, RENAME

WORKER = Path(__file__).with_name("stress_worker.py")
WRITES = int(os.environ.get("GITMEM_STRESS_WRITES", "50"))
API_PROCESSES = 8


def spawn(mode: str, root: Path, name: str, count: int, seed: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), mode, str(root), name, str(count), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def acknowledged(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def trailer_ids(root: Path) -> dict[str, list[str]]:
    """commit sha -> the Memory-Id trailers of that commit, for all of HEAD's history."""
    log = git(root, "log", "--format=%H%x00%s%x00%(trailers:key=Memory-Id,valueonly,separator=%x2c)")
    out = {}
    for line in log.splitlines():
        sha, subject, ids = line.split("\x00")
        if not subject.startswith(RENAME):  # a move's pure-rename half is not a write of its own
            out[sha] = [i for i in ids.split(",") if i]
    return out


def index_matches_files(root: Path) -> None:
    """The on-disk search index (as the writers left it, before any catch-up) holds the files."""
    with Vault.open(root) as vault:
        vault.scan()
        on_disk = vault.services.store.catalog.hashes()
    raw = SearchIndex(root / ".git" / "gitmem" / "index")
    try:
        assert raw.indexed() == on_disk
    finally:
        raw.close()


@pytest.mark.slow
def test_processes_api_cli_watch_and_a_person_lose_nothing(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    Vault.init(root, author="setup").close()
    (root / "short_term" / "person").mkdir()
    watcher = subprocess.Popen(
        [sys.executable, "-m", "gitmem", "--vault", str(root), "watch", "--commit", "--debounce", "0.05",
         "--commit-delay", "0.2", "--rescan-interval", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs: dict[str, subprocess.Popen[str]] = {}
    try:   # a failure leaves no process behind (it would fail a later test with a ResourceWarning)
        assert watcher.stderr is not None
        started = []   # it is watching before the first edits
        while not (started and started[-1].startswith("watching ")):
            line = watcher.stderr.readline()
            assert line, "the watcher exited before watching:\n" + "".join(started)
            started.append(line)
        procs.update({f"api{n}": spawn("mixed", root, f"api{n}", WRITES, n) for n in range(API_PROCESSES)})
        procs["cli0"] = spawn("cli", root, "cli0", max(10, WRITES // 2), 99)
        procs["person"] = spawn("person", root, "person", 30, 7)
        results = {name: p.communicate(timeout=300) for name, p in procs.items()}
        for name, p in procs.items():
            out, err = results[name]
            assert p.returncode == 0, f"{name} failed:\n{err}"
            assert "Traceback" not in err and "error" not in err.lower(), f"{name}:\n{err}"

        # The person's last saves must be committed by the watcher before it stops.
        deadline = time.time() + 30
        while time.time() < deadline and git(root, "status", "--porcelain", "--untracked-files=all"):
            time.sleep(0.2)
        watcher.send_signal(signal.SIGTERM)
        w_out, w_err = watcher.communicate(timeout=30)
    finally:
        for proc in [watcher, *procs.values()]:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    w_err = "".join(started) + w_err
    assert watcher.returncode == 0, w_err
    assert "Traceback" not in w_err

    commits = trailer_ids(root)
    per_id: Counter[str] = Counter(mid for ids in commits.values() for mid in ids)
    acked: Counter[str] = Counter()
    for name, (out, _) in results.items():
        if name == "person":
            continue
        records = acknowledged(out)
        assert len(records) >= (WRITES if name.startswith("api") else 5)
        for rec in records:
            assert rec["id"] in commits.get(rec["commit"], []), f"{name}: {rec} not in HEAD"
            acked[rec["id"]] += 1
    # Each memory is written by one worker only, so its commits are exactly its acknowledged writes.
    for mid, count in acked.items():
        assert per_id[mid] == count, f"{mid}: {per_id[mid]} commits for {count} acknowledged writes"
    assert len(set(commits)) == len(commits)

    # The person's files: their last saved version is what HEAD holds.
    last: dict[str, int] = {}
    for rec in acknowledged(results["person"][0]):
        last[rec["path"]] = rec["version"]
    for path, version in last.items():
        assert f"wrote version {version}\n" in git(root, "show", f"HEAD:{path}")

    assert_clean(root)
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    index_matches_files(root)
    with Vault.open(root) as vault:
        bad = [f.to_dict() for f in vault.doctor() if not f.ok]
        assert bad == []


@pytest.mark.slow
def test_threads_share_one_vault_safely(vault: Vault) -> None:
    """Several threads on one Vault: mixed writes and searches, nothing lost or doubled."""
    errors: list[BaseException] = []
    acked: list[tuple[str, str]] = []
    guard = threading.Lock()

    def work(n: int) -> None:
        try:
            mine = []
            for i in range(12):
                if len(mine) < 2 or i % 3 == 0:
                    m = vault.add(f"thread {n} note {i}", f"thread body {n} {i}\n")
                    mine.append(m.id)
                elif i % 3 == 1:
                    m = vault.update(mine[-1], append=f"more {i}")
                else:
                    m = vault.move(mine.pop(0), "long_term")
                with guard:
                    acked.append((m.id, m.commit or ""))
                vault.search(f"thread body {n}")
                vault.list()  # reads re-scan changed files while other threads commit
                vault.get(m.id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    root = vault.root
    vault.close()
    commits = trailer_ids(root)
    for mid, sha in acked:
        assert mid in commits[sha]
    assert len(commits) == len(acked) + 1  # + the init commit
    assert_clean(root)
    index_matches_files(root)


def test_a_closed_vault_refuses_writes_clearly(vault: Vault) -> None:
    # Another thread may still hold the object after close(): a clear error, not sqlite's.
    vault.close()
    with pytest.raises(GitmemError) as info:
        vault.add("after close", "x")
    assert info.value.code == "vault_closed"
