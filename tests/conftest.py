"""Shared fixtures: real vaults in tmp_path, an injected clock, the git CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

from gitmem import Vault

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample-vault"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No user settings leak in: git and gitmem see only what a test sets."""
    for name in ("GITMEM_VAULT", "GITMEM_AUTHOR", "GITMEM_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "git user")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "git@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "git user")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "git@example.com")


class FakeClock:
    """A clock that moves only when told to (1 minute per tick by default)."""

    def __init__(self, start: datetime = datetime(2026, 11, 1, 9, 0, tzinfo=timezone.utc)) -> None:
        self.current = start

    def __call__(self) -> datetime:
        return self.current

    def tick(self, **delta: float) -> datetime:
        self.current += timedelta(**(delta or {"minutes": 1}))
        return self.current


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def vault(tmp_path: Path, clock: FakeClock) -> Iterator[Vault]:
    v = Vault.init(tmp_path / "vault", author="tester", clock=clock)
    yield v
    v.close()


@pytest.fixture
def sample_vault(tmp_path: Path, clock: FakeClock) -> Iterator[Vault]:
    v = Vault.init(tmp_path / "sample", from_dir=SAMPLE, author="tester", clock=clock)
    yield v
    v.close()


def git(root: Path, *args: str, check: bool = True) -> str:
    """Run the real git CLI in ``root`` and return stdout."""
    result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def snapshot(root: Path) -> tuple[str, dict[str, bytes]]:
    """HEAD and every working-tree file outside .git: to assert 'nothing changed'."""
    head = git(root, "rev-parse", "HEAD").strip()
    files = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            full = Path(folder) / name
            files[full.relative_to(root).as_posix()] = full.read_bytes()
    return head, files


def assert_clean(root: Path) -> None:
    """What a user would check in a shell: nothing pending, repository valid."""
    assert git(root, "status", "--porcelain") == ""
    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    assert "dangling" not in fsck.stdout + fsck.stderr


def mcp_params(root: Path, profile: str, agent: str) -> Any:
    """How an MCP client starts ``gitmem mcp`` on ``root`` (stdio, the official SDK's parameters)."""
    import sys
    import mcp
    return mcp.StdioServerParameters(command=sys.executable,
                                     args=["-m", "gitmem", "mcp", "--vault", str(root), "--profile", profile,
                                           "--agent", agent],
                                     env={"GIT_CONFIG_NOSYSTEM": "1"})


RENAME = "rename: "  # subject prefix of the pure-rename commit that precedes a move's commit


def commits_since(root: Path, since: str) -> list[str]:
    """Subjects of the commits made after ``since`` (newest first)."""
    return git(root, "log", "--format=%s", f"{since}..HEAD").splitlines()


def assert_one_write(root: Path, since: str, *, moves: bool | None = None) -> None:
    """What a write leaves in history: exactly one commit, preceded by one pure-rename
    commit when it moves files (``moves``: True must, False must not, None either)."""
    new = commits_since(root, since)
    assert new and not new[0].startswith(RENAME), new
    assert len(new) in (1, 2), new
    if len(new) == 2:
        assert new[1].startswith(RENAME) and moves is not False, new
        status = git(root, "show", "--name-status", "--format=", "-M100%", "HEAD~1").splitlines()
        assert status and all(line.startswith("R100") for line in status), status  # renames only
    else:
        assert moves is not True, new


def documentation() -> str:
    """The README and every page under docs/, as one text (what a user can read)."""
    return "\n".join(f.read_text() for f in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])


LOCK_HOLDER = """\
import sys, time
from pathlib import Path
from gitmem.store.locking import VaultLock
with VaultLock(Path(sys.argv[1]) / ".git" / "gitmem" / "lock", timeout=60).hold():
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@contextmanager
def holding_the_lock(root: Path, seconds: float = 600) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the vault lock (as gitmem takes it) until the block ends."""
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(root), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
