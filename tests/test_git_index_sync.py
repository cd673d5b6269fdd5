"""Every commit gitmem makes leaves ``.git/index`` and ``MEMORY.md`` true to it, at once.

A person's editor, IDE or git GUI commits at any moment.  A ``git commit`` (or
``git commit -a``) run the instant an agent's write returns must never commit a
deletion of that write's memory, so ``.git/index`` holds the write's files before the
write returns (gitmem takes git's own ``index.lock`` around the move of the branch).
And ``MEMORY.md`` in each commit lists that commit's memories: not a person's notes
that are still uncommitted in the working folder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from gitmem import Vault

from .conftest import git

AGENT_PATH = re.compile(r"^(short_term|mid_term|long_term)/.*\.md$")


def memory_files(root: Path, commit: str = "HEAD") -> list[str]:
    return [p for p in git(root, "ls-tree", "-r", "--name-only", commit).splitlines() if AGENT_PATH.match(p)]


def deleted_ever(root: Path) -> list[str]:
    """Every memory file any commit on the branch deleted."""
    out = git(root, "log", "--diff-filter=D", "--name-only", "--format=")
    return [p for p in out.splitlines() if AGENT_PATH.match(p)]


class McpSession:
    """``gitmem mcp`` over stdio, one request answered at a time."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "gitmem", "mcp", "--vault", str(root), "--agent", "race"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, "GITMEM_AUTHOR": "agent <agent@example.com>"})
        self.guard = threading.Timer(120, self.proc.kill)   # a hung server fails the test instead of hanging it
        self.guard.start()
        self.next_id = 0
        self.send({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "t", "version": "1"}}})
        assert "result" in self.read()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments}})
        reply = self.read()
        assert "result" in reply and not reply["result"].get("isError"), reply
        return reply

    def close(self) -> None:
        self.proc.communicate(timeout=60)   # closes stdin: the server exits
        self.guard.cancel()


@pytest.mark.parametrize("all_files", [False, True], ids=["commit", "commit-a"])
def test_a_git_commit_right_after_each_mcp_write_never_deletes_the_agents_memory(tmp_path: Path,
                                                                                 all_files: bool) -> None:
    root = tmp_path / "vault"
    Vault.init(root, author="tester").close()
    session = McpSession(root)
    try:
        for i in range(5):
            session.call("memory_add", {"content": f"Race note {i}: written just before a git commit."})
            # Right after the write returns, git sees nothing of the agent's: no staged
            # deletion of the new file, no MEMORY.md differing from HEAD.
            assert git(root, "status", "--porcelain") == ""
            git(root, "commit", "-q", *(["-a"] if all_files else []), "-m", f"person commit {i}", check=False)
            assert len(memory_files(root)) == i + 1
    finally:
        session.close()
    assert deleted_ever(root) == []
    assert git(root, "status", "--porcelain") == ""


def test_a_git_commit_right_after_each_api_write_never_deletes_the_agents_memory(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="tester") as vault:
        for i in range(5):
            vault.add(f"API note {i}", "Written just before a git commit.")
            assert git(root, "status", "--porcelain") == ""
            git(root, "commit", "-q", "-m", f"person commit {i}", check=False)
            vault.update(f"API note {i}", append="An update.")
            assert git(root, "status", "--porcelain") == ""
            git(root, "commit", "-q", "-a", "-m", f"person commit -a {i}", check=False)
        assert len(memory_files(root)) == 5
        assert all(b"An update." in (root / p).read_bytes() for p in memory_files(root))
    assert deleted_ever(root) == []
    # No commit of the person's undid a write: each of theirs that landed changed nothing.
    for sha in git(root, "log", "--author=git user", "--format=%H").splitlines():
        assert git(root, "diff-tree", "--no-commit-id", "-r", sha) == ""


def writes_beside_a_commit_loop(root: Path, writes: int) -> list[int]:
    """A new vault at ``root`` takes ``writes`` adds while a person's IDE runs ``git commit``
    and ``git commit -a`` in a loop, as fast as it can; the loop's exit codes."""
    stop = threading.Event()
    outcomes: list[int] = []

    def person() -> None:
        n = 0
        while not stop.is_set():
            args = ["commit", "-q", "-a", "-m", f"loop {n}"] if n % 2 else ["commit", "-q", "-m", f"loop {n}"]
            outcomes.append(subprocess.run(["git", *args], cwd=root, capture_output=True).returncode)
            n += 1

    with Vault.init(root, author="tester") as vault:
        loop = threading.Thread(target=person)
        loop.start()
        try:
            for i in range(writes):
                vault.add(f"Looped note {i}", "Written while git commits in a loop.")
        finally:
            stop.set()
            loop.join(timeout=60)
    return outcomes


def test_git_commits_in_a_loop_while_gitmem_writes_never_revert_a_write(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    outcomes = writes_beside_a_commit_loop(root, 12)
    assert len(outcomes) > 5
    assert len(memory_files(root)) == 12
    assert deleted_ever(root) == []
    assert git(root, "status", "--porcelain") == ""


def listed_stems(memory_md: str) -> set[str]:
    return set(re.findall(r"\[\[([^|\]]+)", memory_md))


def test_memory_md_of_each_commit_lists_that_commits_memories_not_uncommitted_notes(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="tester") as vault:
        vault.add("Kept title", "A committed memory a person then edits without committing.", tier="mid_term")
        vault.add("Doomed note", "A committed memory a person then deletes without committing.")
    edited = next(p for p in memory_files(root) if "kept-title" in p)
    doomed = next(p for p in memory_files(root) if "doomed-note" in p)
    # The person's uncommitted work: a new note, a changed title, a removed file.
    (root / "short_term" / "person-draft.md").write_text("---\ntitle: Person draft\n---\nNot committed.\n")
    text = (root / edited).read_text().replace("title: Kept title", "title: Retitled by hand")
    (root / edited).write_text(text)
    (root / doomed).unlink()
    before = git(root, "rev-parse", "HEAD").strip()
    session = McpSession(root)   # no watcher runs
    try:
        session.call("memory_add", {"content": "Agent note written while the person has uncommitted work."})
        session.call("memory_add", {"content": "A second agent note."})
    finally:
        session.close()
    with Vault.open(root) as vault:
        vault.add("Third agent note", "Through the API.")
        commits = git(root, "rev-list", f"{before}..HEAD").split()
        assert len(commits) == 3
        for sha in commits:
            memory_md = git(root, "show", f"{sha}:MEMORY.md")
            stems = {Path(p).stem for p in memory_files(root, sha)}
            assert listed_stems(memory_md) == stems, sha
            assert "Person draft" not in memory_md and "person-draft" not in memory_md
            assert "Retitled by hand" not in memory_md and "Kept title" in memory_md
        # The person's work is still theirs, uncommitted, and all git shows.
        status = sorted(git(root, "status", "--porcelain").splitlines())
        assert status == sorted([f" D {doomed}", f" M {edited}", "?? short_term/person-draft.md"])
        # Once the person commits their draft with git, the next write's MEMORY.md lists it.
        git(root, "add", "short_term/person-draft.md")
        git(root, "commit", "-q", "-m", "my draft")
        vault.add("Fourth agent note", "After the person's own commit.")
    memory_md = git(root, "show", "HEAD:MEMORY.md")
    assert listed_stems(memory_md) == {Path(p).stem for p in memory_files(root)}
    assert "person-draft" in memory_md and "Retitled by hand" not in memory_md


def test_a_writer_killed_holding_index_lock_after_the_branch_moved_is_finished_by_the_next(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="tester") as vault:
        vault.add("Keeper", "The original body.")
    head = git(root, "rev-parse", "HEAD")
    # Dies right after the branch moved: the new index is in index.lock, not yet renamed.
    script = ("import os, sys\nfrom gitmem import Vault\nfrom gitmem.store.git_index import GitIndex\n"
              "GitIndex.keep_staged = lambda self: os._exit(9)\n"
              "v = Vault.open(sys.argv[1])\nv.add('Killed after the move', 'Its commit is in HEAD.')\n")
    done = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True)
    assert done.returncode == 9, done.stderr
    assert git(root, "rev-parse", "HEAD") != head
    assert (root / ".git" / "index.lock").exists()
    # Meanwhile a person's `git commit` cannot commit from the index that lags HEAD.
    refused = subprocess.run(["git", "commit", "-q", "-a", "-m", "person"], cwd=root, capture_output=True, text=True)
    assert refused.returncode != 0 and "index.lock" in refused.stderr
    with Vault.open(root) as vault:      # the next lock holder removes the lock and repairs the index
        assert {m.title for m in vault.list()} == {"Keeper", "Killed after the move"}
    assert not (root / ".git" / "index.lock").exists()
    assert git(root, "status", "--porcelain") == ""
    assert deleted_ever(root) == []

