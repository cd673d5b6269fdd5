"""Reads never wait for the vault lock, in any front door.

Another process holds the vault lock (taken exactly as gitmem takes it, through
:class:`gitmem.store.locking.VaultLock`) for far longer than any read may take;
every read (CLI, MCP stdio, the Python API) still answers, exits 0 and prints
what it found.  Real processes, real files; no clock is mocked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from gitmem import Vault

from .conftest import holding_the_lock

# The holder keeps the lock far longer than the default lock timeout (30 s): a read that
# waits for it fails (exit 6, vault_busy) or hangs instead of answering.


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    with Vault.init(root, author="tester") as v:
        v.add("Deploy checklist", "Run the smoke tests before every deploy.", tags=["ops"])
        v.add("Coffee order", "Flat white, no sugar.", type="preference")
    return root


@pytest.fixture
def locked(root: Path) -> Iterator[subprocess.Popen[str]]:
    with holding_the_lock(root) as holder:
        yield holder


def gitmem(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitmem", "--vault", str(root), *args],
                          capture_output=True, text=True, timeout=120)


def memory_id(root: Path, title: str) -> str:
    with Vault.open(root) as v:
        return next(m.id for m in v.list() if m.title == title)


@pytest.mark.slow
@pytest.mark.parametrize("command", [("ls",), ("search", "smoke tests"), ("show", "Deploy checklist"),
                                     ("ls", "--json"), ("search", "coffee", "--json"),
                                     ("log", "Deploy checklist")])
def test_cli_reads_answer_while_another_process_holds_the_lock(root: Path, command: tuple[str, ...],
                                                               locked: subprocess.Popen[str]) -> None:
    result = gitmem(root, *command)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "vault_busy" not in result.stderr
    wanted = "Coffee order" if "coffee" in command else "Deploy checklist"
    assert wanted in result.stdout


@pytest.mark.slow
def test_a_search_while_locked_with_no_usable_index_searches_the_files(root: Path) -> None:
    assert gitmem(root, "search", "deploy").returncode == 0   # the index is built
    shutil.rmtree(root / ".git" / "gitmem" / "index")  # e.g. removed, or left by another version
    with holding_the_lock(root):
        result = gitmem(root, "search", "flat white", "--json")
    assert result.returncode == 0, result.stderr
    assert [h["title"] for h in json.loads(result.stdout)["hits"]] == ["Coffee order"]


def test_python_api_reads_and_close_never_wait_for_the_lock(root: Path,
                                                            locked: subprocess.Popen[str]) -> None:
    ref = memory_id(root, "Deploy checklist")
    # A lock timeout of one second: any wait for the holder would raise vault_busy.
    vault = Vault.open(root, lock_timeout=1)
    try:
        assert [h.title for h in vault.search("smoke tests").hits] == ["Deploy checklist"]
        assert {m.title for m in vault.list()} == {"Deploy checklist", "Coffee order"}
        assert vault.get(ref).body.startswith("Run the smoke tests")
        assert [v.op for v in vault.history(ref)] == ["add"]
        assert "Coffee order" in vault.protected_context().markdown + (vault.files.memory_md_text() or "")
    finally:
        vault.close()
    # A person's edit while the lock is held: the read still answers (from the files).
    note = next((root / "short_term").rglob("*.md"))
    note.write_text(note.read_text(encoding="utf-8") + "\nEdited by hand.\n", encoding="utf-8")
    with Vault.open(root, lock_timeout=1) as again:
        assert again.search("smoke tests").hits or again.search("flat white").hits
        assert len(again.list()) == 2


def test_a_vault_that_only_read_closes_without_taking_the_lock(root: Path) -> None:
    with Vault.open(root) as vault:
        vault.search("deploy")
        vault.list()
        vault.get(memory_id(root, "Coffee order"))
    assert vault.services.store.lock.taken is False
    with Vault.open(root) as writer:
        writer.add("A third", "x")
    assert writer.services.store.lock.taken is True


def mcp_session(root: Path, requests: list[dict[str, Any]]) -> tuple[list[dict[str, Any]],
                                                                     subprocess.CompletedProcess[bytes]]:
    """``gitmem mcp`` over pipes: initialize, the requests, then stdin closed."""
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"}, *requests]
    env = {k: v for k, v in os.environ.items() if k != "GITMEM_MCP_STDIO"}
    proc = subprocess.Popen([sys.executable, "-m", "gitmem", "mcp", "--vault", str(root), "--agent", "pipe"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    guard = threading.Timer(120, proc.kill)  # a hung server fails the test instead of hanging it
    guard.start()
    try:
        stdout, stderr = proc.communicate("".join(json.dumps(x) + "\n" for x in lines).encode())
    finally:
        guard.cancel()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return [json.loads(line) for line in stdout.splitlines()], done


@pytest.mark.slow
def test_mcp_reads_answer_while_another_process_holds_the_lock(root: Path,
                                                               locked: subprocess.Popen[str]) -> None:
    ref = memory_id(root, "Coffee order")
    calls = [("memory_search", {"query": "smoke tests"}), ("memory_read", {"ref": ref}),
             ("memory_list", {})]
    replies, done = mcp_session(root, [{"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                        "params": {"name": name, "arguments": args}}
                                       for i, (name, args) in enumerate(calls, 1)])
    assert done.returncode == 0, done.stderr
    by_id = {r.get("id"): r for r in replies}
    for i in range(1, len(calls) + 1):
        assert by_id[i]["result"].get("isError") is not True, by_id[i]
    assert [h["title"] for h in by_id[1]["result"]["structuredContent"]["hits"]] == ["Deploy checklist"]
    assert "Flat white" in json.dumps(by_id[2]["result"]["structuredContent"])
    assert b"Traceback" not in done.stderr


def test_a_read_does_not_wait_behind_a_thread_waiting_for_the_lock(root: Path) -> None:
    """One Vault shared by threads (an MCP server): a write in one thread waits for another
    process's lock; reads in other threads answer meanwhile, and the write lands after."""
    ref = memory_id(root, "Coffee order")
    with Vault.open(root, lock_timeout=60) as vault:
        vault.search("warm up")   # the index is open and caught up
        with holding_the_lock(root) as holder:
            wrote: list[Any] = []
            writer = threading.Thread(target=lambda: wrote.append(vault.add("Written later", "x")))
            writer.start()
            deadline = time.monotonic() + 30
            while not waiting_for_the_file_lock(writer) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert waiting_for_the_file_lock(writer)
            assert [h.title for h in vault.search("flat white").hits] == ["Coffee order"]
            assert len(vault.list()) == 2 and vault.get(ref).title == "Coffee order"
            assert writer.is_alive() and not wrote   # still waiting for the other process
            holder.kill()
            writer.join(60)
        assert [m.title for m in wrote] == ["Written later"]


def waiting_for_the_file_lock(thread: threading.Thread) -> bool:
    """True while ``thread`` waits for another process's vault lock."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name in ("_take_file_lock", "acquire") and "lock" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False
