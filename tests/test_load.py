"""Many actors on one vault at once: writers through the Python API, the ``gitmem``
command and an MCP stdio client (the official SDK against ``gitmem mcp``), a reader
running ``gitmem search``/``ls``/``show`` in a loop, a person saving files the way an
editor does (a temporary file renamed over the note), and ``git status`` in a loop.

Every writer carries on past errors and prints one line per attempt
(``tests/stress_worker.py``, the ``load-*`` modes).  What is checked afterwards:

* no ``internal_error`` (nor any other unexpected error) anywhere, readers included;
* no write reported as failed was committed (an agent that retries would make a
  duplicate): each writer's commits in HEAD are exactly its acknowledged writes;
* ``vault_busy`` only after the caller's own lock timeout (30 s) has passed;
* every acknowledged write is in HEAD, the person's last saves are on disk, and
  ``git fsck --full`` is clean.

``test_load_16_by_50`` is the full size; ``test_load_small`` runs the same actors at
4 x 10 (about 16 s on two cores, so both are in the slow lane; the catalog's part is
covered in the fast lane by ``tests/test_catalog.py``).  ``GITMEM_LOAD_REPORT=FILE`` writes the
figures (errors by kind, commands, wall time) as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gitmem import Vault

from .conftest import RENAME, git

pytest.importorskip("mcp", reason="the MCP SDK is an optional extra: pip install gitmem-vault[mcp]")

WORKER = Path(__file__).with_name("stress_worker.py")
LOCK_TIMEOUT = 30.0   # the vault lock timeout of every front door used here
# Errors a caller can meet under load without anything being wrong: the vault busy past
# its own lock timeout, or a person's save landing in the same file at the same moment.
EXPECTED_CODES = {"vault_busy", "changed_on_disk", "conflict", "branch_moved"}


def _spawn(mode: str, root: Path, name: str, count: int, seed: int, env: dict[str, str] | None = None
           ) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), mode, str(root), name, str(count), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _commits_by_agent(root: Path) -> dict[str, list[tuple[str, list[str], str]]]:
    """Agent -> [(sha, Memory-Id trailers, subject)] of HEAD's history, pure-rename halves left out."""
    log = git(root, "log", "--format=%H%x00%s%x00%(trailers:key=Memory-Id,valueonly,separator=%x2c)"
                           "%x00%(trailers:key=Agent,valueonly,separator=%x2c)%x1e")
    out: dict[str, list[tuple[str, list[str], str]]] = {}
    for line in log.split("\x1e"):
        if not line.strip():
            continue
        sha, subject, ids, agent = line.strip("\n").split("\x00")
        if not subject.startswith(RENAME):
            out.setdefault(agent.strip(), []).append((sha, [i for i in ids.split(",") if i], subject))
    return out


class _Person:
    """Saves notes the way an editor does (write a temporary file, rename it over the
    note) into a tier folder, until stopped; remembers each note's last save."""

    def __init__(self, root: Path) -> None:
        self.folder = root / "mid_term" / "person"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.last: dict[Path, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            target = self.folder / f"person-page-{n % 6}.md"
            text = f"---\ntitle: person page {n % 6}\n---\nThe person saved version {n} of this page.\n"
            tmp = self.folder / f".{target.name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, target)
            self.last[target] = text
            n += 1
            self.stop.wait(0.05)


def run_load(tmp_path: Path, *, api: int, cli: int, mcp: int, writes: int, reads_max: int = 0) -> dict[str, Any]:
    """Run the actors on one new vault; assert what the module docstring says; return the figures."""
    root = tmp_path / "vault"
    with Vault.init(root, author="setup") as vault:
        shown = vault.add("load anchor", "A memory no writer touches, for the reader to show.").id
    stop_file = tmp_path / "stop"
    env = {"GITMEM_LOAD_STOP": str(stop_file), "GITMEM_LOAD_SHOW": shown}
    started = time.monotonic()
    status_loop = subprocess.Popen(
        ["sh", "-c", f'while [ ! -e "{stop_file}" ]; do git status >/dev/null 2>&1; sleep 0.02; done'], cwd=root)
    person = _Person(root)
    person.thread.start()
    reader = _spawn("load-read", root, "reader", reads_max, 5, env)
    writers = {**{f"api{n}": _spawn("load-api", root, f"api{n}", writes, n) for n in range(api)},
               **{f"cli{n}": _spawn("load-cli", root, f"cli{n}", writes, 100 + n) for n in range(cli)},
               **{f"mcp{n}": _spawn("load-mcp", root, f"mcp{n}", writes, 200 + n) for n in range(mcp)}}
    try:
        results = {name: p.communicate(timeout=1800) for name, p in writers.items()}
    finally:
        person.stop.set()
        person.thread.join()
        stop_file.touch()
        status_loop.wait(timeout=60)
        reader_out, reader_err = reader.communicate(timeout=120)
    wall = time.monotonic() - started

    records: list[dict[str, Any]] = []
    for name, p in writers.items():
        out, err = results[name]
        assert p.returncode == 0, f"{name} stopped:\n{err[-3000:]}"
        assert "Traceback" not in err, f"{name}:\n{err[-3000:]}"
        records += [json.loads(line) for line in out.splitlines() if line.strip()]
    assert reader.returncode == 0 and "Traceback" not in reader_err, reader_err[-3000:]
    records += [json.loads(line) for line in reader_out.splitlines() if line.strip()]

    writes_done = [r for r in records if r["kind"] == "write"]
    reads_done = [r for r in records if r["kind"] == "read"]
    errors = Counter(f"{r['kind']}:{r['code']}" for r in records if not r["ok"])
    commits = _commits_by_agent(root)
    # A writer's commits are its own: each one must be a write it was told succeeded.
    committed_but_failed: list[str] = []
    acked_missing: list[str] = []
    for name in writers:
        mine = {sha: ids for sha, ids, _ in commits.get(name, [])}
        acked = {r["commit"]: r["id"] for r in writes_done if r["worker"] == name and r["ok"] and r.get("commit")}
        acked_missing += [f"{name}: {mid} @ {sha}" for sha, mid in acked.items() if mid not in mine.get(sha, [])]
        committed_but_failed += [f"{name}: {sha} {ids}" for sha, ids in mine.items() if sha not in acked]
    figures = {
        "writers": {"api": api, "cli": cli, "mcp": mcp, "writes_each": writes},
        "wall_seconds": round(wall, 1),
        "writes": len(writes_done), "writes_acknowledged": sum(1 for r in writes_done if r["ok"]),
        "cli_commands": sum(1 for r in records if r["worker"].startswith(("cli", "reader"))),
        "reads": len(reads_done), "reads_failed": sum(1 for r in reads_done if not r["ok"]),
        "errors": dict(sorted(errors.items())),
        "committed_but_reported_failed": len(committed_but_failed),
        "vault_busy_before_timeout": sum(1 for r in records if not r["ok"] and r["code"] == "vault_busy"
                                         and r["seconds"] < LOCK_TIMEOUT),
        "person_saves": len(person.last),
        "error_samples": {k: next(f"{r['worker']} {r['op']}: {r.get('message', '')}"[:300] for r in records
                                  if not r["ok"] and f"{r['kind']}:{r['code']}" == k) for k in errors},
    }
    report = os.environ.get("GITMEM_LOAD_REPORT")
    if report:
        Path(report).write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures))
    samples = [r for r in records if not r["ok"]][:5]

    assert errors.get("write:internal_error", 0) + errors.get("read:internal_error", 0) == 0, (figures, samples)
    unexpected = {k: n for k, n in errors.items() if k.split(":", 1)[1] not in EXPECTED_CODES}
    assert unexpected == {}, (figures, samples)
    assert committed_but_failed == [], (figures, committed_but_failed[:5])
    assert figures["vault_busy_before_timeout"] == 0, figures
    assert acked_missing == [], acked_missing[:5]
    assert figures["reads_failed"] == 0, figures
    # The person's saves are never lost: each note holds its last save.
    for path, text in person.last.items():
        assert path.read_text() == text
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    return figures


@pytest.mark.slow
def test_load_16_by_50(tmp_path: Path) -> None:
    run_load(tmp_path, api=10, cli=4, mcp=2, writes=50)


@pytest.mark.slow
def test_load_small(tmp_path: Path) -> None:
    run_load(tmp_path, api=2, cli=1, mcp=1, writes=10, reads_max=30)
