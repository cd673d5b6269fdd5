"""A person, the git CLI and an always-on agent on one vault, at the same time.

A real ``gitmem mcp`` server (the official SDK client writes and searches), a
"person" saving the same memories as editors do (temp file renamed over, in
place, vim's backup dance), and a ``git status`` loop (an IDE polling, taking
``.git/index.lock``) run together.  At the end: every acknowledged agent write
is in history under the agent's name; no agent commit carries the person's
text; the person's last text is in the file and, committed, in history under
the person's name; the running server finds the person's last edits; ``git
status`` is clean and ``git fsck --full`` finds nothing.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gitmem import Vault

from .conftest import git, mcp_params

mcp = pytest.importorskip("mcp", reason="the MCP SDK is an optional extra: pip install gitmem-vault[mcp]")
anyio = pytest.importorskip("anyio")


def atomic_save(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def in_place_save(path: Path, text: str) -> None:
    with open(path, "r+", encoding="utf-8") as handle:
        handle.write(text)
        handle.truncate()


def vim_save(path: Path, text: str) -> None:
    probe = path.with_name("4913")            # vim checks it may create files here
    probe.write_text("")
    probe.unlink()
    backup = path.with_name(path.name + "~")
    os.replace(path, backup)                  # the old file becomes the backup ...
    path.write_text(text)                     # ... the new one is written ...
    backup.unlink()                           # ... and the backup removed


SAVES = (atomic_save, in_place_save, vim_save)


@pytest.mark.slow
def test_person_git_and_agent_together(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="setup") as vault:
        notes = [vault.add(f"Project {name}", f"Status of {name}: planning.\n\nOwner: Maya.\n", tier="long_term")
                 for name in ("Atlas", "Borealis", "Cirrus")]
    paths = [root / n.path for n in notes]
    stop = threading.Event()
    last: dict[Path, str] = {}
    saves = 0

    def save(n: int) -> None:
        nonlocal saves
        path = paths[n % len(paths)]
        try:
            text = path.read_text()
        except FileNotFoundError:
            return
        first, _, rest = text.partition("Status of ")
        name, _, tail = rest.partition(":")
        tail = tail.split("\n", 1)[1] if "\n" in tail else ""
        marker = f"Status of {name}: person edit {n}."
        SAVES[n % 3](path, f"{first}{marker}\n{tail}")
        last[path] = marker
        saves += 1

    def person() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            save(n)
            stop.wait(0.15)
        # Once the agent has stopped writing, one more save of each note: none of the
        # agent's writes reads these, only the server following the files finds them.
        for _ in paths:
            n += 1
            save(n)

    status_stop = tmp_path / "stop-status"
    status_loop = subprocess.Popen(
        ["sh", "-c", f'while [ ! -e "{status_stop}" ]; do git status >/dev/null 2>&1; sleep 0.02; done'],
        cwd=root)
    acked: list[str] = []

    async def agent() -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}   # marker -> the paths search gave for it
        async with mcp.Client(mcp_params(root, "gitmem", "claude-desktop")) as client:
            for i in range(24):
                note = notes[i % len(notes)]
                result = await client.call_tool("memory_update", {"ref": note.id, "append": f"Agent note {i}."})
                if not result.is_error:
                    acked.append(result.structured_content["commit"])
                else:
                    assert result.structured_content["error"]["code"] in ("conflict", "changed_on_disk", "branch_moved"), result
                added = await client.call_tool("memory_add", {"content": f"Agent fact {i}: the build is green."})
                assert not added.is_error, added
                acked.append(added.structured_content["commit"])
                await anyio.sleep(0.05)
            # A refused write leaves the index to catch up with the files at the next search:
            # that search comes now, before the person's last saves, which only following finds.
            await client.call_tool("memory_search", {"query": "planning"})
            stop.set()
            await anyio.to_thread.run_sync(worker.join)   # the person's last saves are done
            # the server follows the person's last edits by itself
            deadline = time.monotonic() + 30
            for path, marker in last.items():
                words = marker.split(": ", 1)[1].rstrip(".")
                while True:
                    hits = (await client.call_tool("memory_search", {"query": f'"{words}"'})).structured_content
                    found[marker] = [h["path"] for h in hits["hits"]]
                    if str(path.relative_to(root)) in found[marker] or time.monotonic() > deadline:
                        break
                    await anyio.sleep(0.2)
        return found

    worker = threading.Thread(target=person)
    worker.start()
    try:
        found = anyio.run(agent)
    finally:
        stop.set()
        worker.join()
        status_stop.touch()
        status_loop.wait(timeout=30)

    assert saves > 10 and acked
    assert len(found) == len(last) == len(paths)
    for path, marker in last.items():
        assert str(path.relative_to(root)) in found[marker], f"the running server's search for {marker!r}"

    # The person's last saves are on disk, then committed as the person's.
    for path, marker in last.items():
        assert marker in path.read_text()
    with Vault.open(root) as vault:
        vault.commit_outside_edits()
    for path, marker in last.items():
        rel = str(path.relative_to(root))
        assert marker in git(root, "show", f"HEAD:{rel}")
        authors = git(root, "log", "--format=%an", "-S", marker, "--", rel).splitlines()
        # Committed by the running server (its MCP client passes it a few variables only,
        # and HOME holds no git config: the default name) or by commit_outside_edits here
        # (GIT_AUTHOR_NAME names the person): never an agent.
        assert authors and set(authors) <= {"git user", "vault user"}, authors

    # Every acknowledged agent write is in history, under the agent's name; none carries the person's text.
    log = dict(line.split(" ", 1) for line in git(root, "log", "--format=%H %an").splitlines())
    for sha in acked:
        assert log.get(sha) == "claude-desktop", sha
    for sha, author in log.items():
        if author == "claude-desktop":
            added = [l for l in git(root, "show", sha, "--format=", "--", ":!MEMORY.md").splitlines()
                     if l.startswith("+") and not l.startswith("+++")]
            assert not any("person edit" in l for l in added), (sha, added)

    assert git(root, "status", "--porcelain") == ""
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=root, capture_output=True, text=True)
    assert fsck.returncode == 0 and "dangling" not in fsck.stdout + fsck.stderr, fsck.stdout + fsck.stderr
