"""Background sync in long-running processes (gitmem/sync/background.py): ``gitmem mcp
--sync`` and ``gitmem watch --sync`` as real processes against a bare remote and a
second clone (a write reaches the remote within seconds, another clone's commit arrives
and is searchable, an unreachable remote never fails a write and the sync recovers, a
person's edit is pushed and a conflict is logged), the state in ``gitmem status``,
``gitmem doctor``, ``MEMORY.md`` and the ``memory_sync`` agent tool, the ``sync:``
settings, the backoff, and that the network is never talked to under the vault lock."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitmem import Vault
from gitmem.agents.registry import Toolbox
from gitmem.config import SyncSettings, VaultConfig
from gitmem.errors import InvalidInput, NotFound
from gitmem.sync.background import BackgroundSync, choose_settings

from .conftest import git

TIMEOUT = 30.0


# ------------------------------------------------------------------ helpers
def wait_for(check: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    """Poll ``check`` until it returns something true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def remote_subjects(shared: Path) -> list[str]:
    """Commit subjects on the bare remote's main branch, newest first ([] if it has none)."""
    result = subprocess.run(["git", "--git-dir", str(shared), "log", "--format=%s", "main"],
                            capture_output=True, text=True, check=False)
    return result.stdout.splitlines() if result.returncode == 0 else []


def gitmem(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitmem", "-C", str(root), *args], capture_output=True,
                          text=True, check=False, timeout=120)


def status_of(root: Path) -> dict[str, Any]:
    done = gitmem(root, "status", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A bare remote holding a vault with one memory; ``tmp_path/a`` is its first clone."""
    remote = tmp_path / "shared.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    with Vault.init(tmp_path / "a", author="person-a") as a:
        a.add_remote("origin", str(remote))
        a.add("Seed", "The first memory.")
        a.sync()
    return remote


class McpServer:
    """``gitmem mcp`` over stdio as an MCP client drives it: one request line, one answer line."""

    def __init__(self, root: Path, *args: str, log: Path) -> None:
        self.log_path = log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "gitmem", "mcp", "--vault", str(root), "--agent",
                                      "agent-a", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log)
        self._guard = threading.Timer(240, self.proc.kill)   # a hung server fails the test, never hangs it
        self._guard.start()
        self._id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "test", "version": "1"}})
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdout is not None
        self._id += 1
        self._send({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params})
        line = self.proc.stdout.readline()
        assert line, f"the server ended: {self.log_path.read_text()}"
        answer = json.loads(line)
        assert answer["id"] == self._id and "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        structured: dict[str, Any] = result["structuredContent"]
        return structured

    def close(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=60)
        finally:
            self._guard.cancel()
            self.proc.stdout.close()
            self._log.close()
        return code


@pytest.fixture
def servers() -> Iterator[list[McpServer]]:
    """Servers a test starts are ended even when it fails."""
    started: list[McpServer] = []
    yield started
    for server in started:
        if server.proc.poll() is None:
            server.close()


# ---------------------------------------------------------- gitmem mcp --sync
@pytest.mark.slow
def test_a_write_through_the_mcp_server_reaches_the_remote_without_a_manual_sync(
        shared: Path, tmp_path: Path, servers: list[McpServer]) -> None:
    server = McpServer(tmp_path / "a", "--sync", "origin", "--sync-interval", "600", log=tmp_path / "mcp.log")
    servers.append(server)
    added = server.call("memory_add", {"content": "Deploys happen on Tuesday.", "title": "Deploy day"})
    assert added["status"] == "created"
    wait_for(lambda: "add: Deploy day" in remote_subjects(shared), "the write on the remote")
    assert git(tmp_path / "a", "rev-parse", "HEAD").strip() == git(shared, "rev-parse", "main").strip()
    state = server.call("memory_sync", {})["status"]
    assert state["remote"] == "origin" and state["last_error"] is None and state["last_success"]
    assert state["background"]["running"] and state["background"]["interval"] == 600
    assert server.close() == 0
    assert status_of(tmp_path / "a")["background"]["running"] is False   # stopped with the server


@pytest.mark.slow
def test_a_commit_pushed_by_another_clone_arrives_and_is_searchable(
        shared: Path, tmp_path: Path, servers: list[McpServer]) -> None:
    server = McpServer(tmp_path / "a", "--sync", "origin", "--sync-interval", "1", log=tmp_path / "mcp.log")
    servers.append(server)
    with Vault.clone(str(shared), tmp_path / "b", author="agent-b") as b:
        b.add("Standup time", "The standup is at 09:15 on weekdays.")
        assert b.sync().action == "pushed"

    def found() -> bool:
        hits = server.call("memory_search", {"query": "standup weekdays"})["hits"]
        return any(h["title"] == "Standup time" for h in hits)
    wait_for(found, "the other clone's memory in the server's search")
    assert "Standup time" in (tmp_path / "a" / "MEMORY.md").read_text()
    assert server.close() == 0
    assert git(tmp_path / "a", "status", "--porcelain") == ""


@pytest.mark.slow
def test_an_unreachable_remote_never_fails_a_write_and_the_sync_recovers(
        shared: Path, tmp_path: Path, servers: list[McpServer]) -> None:
    server = McpServer(tmp_path / "a", "--sync", "origin", "--sync-interval", "1", log=tmp_path / "mcp.log")
    servers.append(server)
    wait_for(lambda: server.call("memory_sync", {})["status"]["last_success"], "the first sync")
    away = tmp_path / "away.git"
    shared.rename(away)                                 # the server is gone (a path moved away)
    added = server.call("memory_add", {"content": "Written while offline.", "title": "Offline note"})
    assert added["status"] == "created" and added["commit"]

    def failing() -> dict[str, Any] | None:
        state: dict[str, Any] = server.call("memory_sync", {})["status"]
        failed = state["last_error"] and state["background"]["failures"] >= 2
        return state if failed and state["background"]["next_attempt"] else None
    state = wait_for(failing, "the failures to show")
    assert state["last_error"]["code"] == "remote_unreachable" and state["ahead"] >= 1
    now = server.call("memory_sync", {"action": "now"})   # an agent asking: the error, as a result
    assert now["error"]["code"] == "remote_unreachable"
    cli = status_of(tmp_path / "a")
    assert cli["last_error"]["code"] == "remote_unreachable" and cli["failures"] >= 2
    # between two attempts (not in the middle of one) the status says when the next one is
    text = wait_for(lambda: (t := gitmem(tmp_path / "a", "status").stdout) and "backing off, next attempt" in t and t,
                    "the backoff in gitmem status")
    assert "last error    remote_unreachable" in text
    log = (tmp_path / "mcp.log").read_text()
    assert "sync origin failed (remote_unreachable)" in log and "next in" in log

    away.rename(shared)                                 # back again: the write is pushed
    wait_for(lambda: "add: Offline note" in remote_subjects(shared), "the offline write on the remote",
             timeout=45)
    def recovered() -> dict[str, Any] | None:
        # the error, the failure count and the backoff's next attempt clear as the first sync that
        # succeeds is recorded: wait for all of them, not for the first to change
        state: dict[str, Any] = server.call("memory_sync", {})["status"]
        ok = state["last_error"] is None and state["failures"] == 0 and state["ahead"] == 0
        return state if ok and state["background"]["next_attempt"] is None else None
    wait_for(recovered, "the error and the backoff to clear")
    wait_for(lambda: "working again after" in (tmp_path / "mcp.log").read_text(), "the recovery in the log")
    assert server.close() == 0


def test_a_remote_named_by_the_flag_must_be_configured(shared: Path, tmp_path: Path) -> None:
    done = gitmem(tmp_path / "a", "mcp", "--sync", "nowhere")
    assert done.returncode == 3 and "no remote named 'nowhere'" in done.stderr
    done = gitmem(tmp_path / "a", "watch", "--sync-interval", "5")
    assert done.returncode == 2 and "--sync-interval needs a remote" in done.stderr


# -------------------------------------------------------- gitmem watch --sync
@pytest.mark.slow
def test_watch_sync_pushes_a_persons_edit_and_logs_a_conflict(shared: Path, tmp_path: Path) -> None:
    root = tmp_path / "a"
    log_path = tmp_path / "watch.log"
    with open(log_path, "wb") as log:
        watcher = subprocess.Popen([sys.executable, "-m", "gitmem", "-C", str(root), "watch", "--sync", "origin",
                                    "--sync-interval", "600", "--commit-delay", "0.3"],
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: status_of(root)["last_success"] and "watching" in log_path.read_text(),
                     "the watcher and its first sync")
            # A person saves a new note, editor style (a temp file renamed over the name).
            note = root / "short_term" / "lunch.md"
            tmp = root / "short_term" / ".lunch.md.swp"
            tmp.write_text("---\ntitle: Lunch\n---\nLunch is at noon.\n")
            tmp.rename(note)
            wait_for(lambda: any("Lunch" in s for s in remote_subjects(shared)), "the person's edit on the remote")
            # the log line is written once the push has returned: wait for it, not for the remote
            wait_for(lambda: "sync origin: pushed" in log_path.read_text(), "the push in the watcher's log")

            # Another machine changes the seed one way, the person here another way.
            with Vault.clone(str(shared), tmp_path / "b", author="agent-b") as b:
                b.update("Seed", body="The first memory, as b sees it.\n")
                b.sync()
            with Vault.open(root) as peek:
                seed = root / peek.resolve("Seed")
            text = seed.read_text()
            seed.write_text(text.replace("The first memory.", "The first memory, as a person here sees it."))
            wait_for(lambda: "conflict" in log_path.read_text(), "the conflict in the watcher's log")
            wait_for(lambda: status_of(root)["conflicts"], "the conflict in gitmem status")
            wait_for(lambda: remote_subjects(shared)[0].startswith("sync: merge"), "the merge on the remote")
        finally:
            watcher.terminate()
            watcher.wait(timeout=60)
    assert watcher.returncode == 0, log_path.read_text()
    logged = log_path.read_text()
    assert "theirs kept as" in logged and "review with: gitmem conflicts" in logged
    state = status_of(root)
    assert state["unresolved_conflicts"] == 1 and state["conflicts"][0]["copy_path"].endswith(".md")
    assert "sync conflict copy(ies) to resolve" in (root / "MEMORY.md").read_text()
    text = gitmem(root, "status").stdout
    assert "conflicts     1 unresolved (review with: gitmem conflicts)" in text
    assert state["conflicts"][0]["copy_path"] in text
    doctor = json.loads(gitmem(root, "doctor", "--json").stdout)
    line = next(f for f in doctor["findings"] if f["check"] == "sync")
    assert line["ok"] and "conflict" in line["summary"] and line["paths"] == [state["conflicts"][0]["copy_path"]]
    assert remote_subjects(shared)[0].startswith("sync: merge")   # the merge was pushed too
    assert git(root, "status", "--porcelain") == ""


# -------------------------------------------------------------- the state
@pytest.mark.slow
def test_status_before_and_after_syncs(shared: Path, tmp_path: Path) -> None:
    lonely = tmp_path / "lonely"
    Vault.init(lonely).close()
    assert "no remote configured" in gitmem(lonely, "status").stdout
    assert status_of(lonely)["remote"] is None
    doctor = json.loads(gitmem(lonely, "doctor", "--json").stdout)
    assert {"check": "sync", "ok": True, "summary": "no remote configured"} in doctor["findings"]

    root = tmp_path / "a"
    state = status_of(root)
    assert state["remote"] == "origin" and state["last_action"] == "pushed" and state["last_error"] is None
    assert (state["ahead"], state["behind"]) == (0, 0) and state["background"] is None
    with Vault.open(root) as a:
        a.add("Unpushed", "Not pushed yet.")
    assert status_of(root)["ahead"] == 1
    shared.rename(tmp_path / "away.git")
    failed = gitmem(root, "sync")
    assert failed.returncode != 0
    state = status_of(root)
    assert state["last_error"]["code"] == "remote_unreachable" and state["failures"] == 1
    text = gitmem(root, "status").stdout.splitlines()
    assert text[0].startswith("remote        origin  ") and text[0].endswith("shared.git")
    assert text[1].startswith("last sync     20") and text[1].endswith("(pushed)")
    assert text[2].startswith("last attempt  20")
    assert text[3] == "ahead/behind  1 to push, 0 to merge"
    assert text[4].startswith("last error    remote_unreachable: ") and "(1 failed attempt(s) in a row)" in text[4]
    assert text[5].startswith("background    not running")
    doctor = json.loads(gitmem(root, "doctor", "--json").stdout)
    line = next(f for f in doctor["findings"] if f["check"] == "sync")
    assert line["ok"] and "failed (remote_unreachable)" in line["summary"]
    (tmp_path / "away.git").rename(shared)
    assert gitmem(root, "sync").returncode == 0
    state = status_of(root)
    assert state["last_error"] is None and state["failures"] == 0 and state["ahead"] == 0


def test_the_agent_tool_syncs_now_and_shows_the_state(shared: Path, tmp_path: Path) -> None:
    with Vault.open(tmp_path / "a") as vault:
        box = Toolbox(vault, "gitmem", agent="agent-a")
        assert "memory_sync" in box.names()
        schema = box.tools["memory_sync"].schema
        assert schema["properties"]["action"]["enum"] == ["status", "now"]
        assert box.call("memory_sync", {"action": "later"})["error"]["code"] == "invalid_arguments"
        box.call("memory_add", {"content": "Pushed by the agent tool.", "title": "Tool push"})
        assert box.call("memory_sync", {})["status"]["ahead"] == 1
        result = box.call("memory_sync", {"action": "now"})
        assert result["sync"]["action"] == "pushed" and result["sync"]["pushed"]
        assert result["status"]["ahead"] == 0 and result["status"]["last_error"] is None
        assert remote_subjects(shared)[0] == "add: Tool push"
        missing = box.call("memory_sync", {"action": "now", "remote": "nowhere"})
        assert missing["error"]["code"] == "remote_not_found"


def test_lonely_vault_tool_status(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v") as vault:
        state = Toolbox(vault, "gitmem").call("memory_sync", {"action": "status"})["status"]
        assert state["remote"] is None and state["remotes"] == [] and state["background"] is None


# ------------------------------------------------------------ the settings
def test_sync_settings_are_checked_and_bad_values_held_back() -> None:
    good = VaultConfig.from_dict({"sync": {"remote": "origin", "interval": 30}})
    assert good.sync == SyncSettings("origin", 30.0) and not good.problems
    assert VaultConfig.from_dict({}).sync == SyncSettings(None, 60.0)
    assert VaultConfig.from_dict({"sync": False}).sync.remote is None            # sync: off
    assert VaultConfig.from_dict({"sync": {"remote": False}}).sync.remote is None  # remote: off
    for bad in ({"remote": "origin", "interval": 1}, {"remote": "origin", "interval": float("inf")},
                {"remote": "origin", "interval": 10**30}, {"remote": "origin", "interval": "soon"},
                {"remote": "../x"}, {"remote": 5}, {"remote": "origin", "every": 5}, "origin", [1]):
        config = VaultConfig.from_dict({"sync": bad})
        assert config.sync == SyncSettings() and config.problems, bad   # held back: no background sync
        assert "sync" in config.problems[0]


def test_flags_win_over_the_file() -> None:
    config = VaultConfig.from_dict({"sync": {"remote": "origin", "interval": 30}})
    assert choose_settings(config) == ("origin", 30.0)
    assert choose_settings(config, "backup") == ("backup", 30.0)
    assert choose_settings(config, None, 2) == ("origin", 2.0)
    assert choose_settings(config, "off")[0] is None and choose_settings(config, "none")[0] is None
    assert choose_settings(VaultConfig())[0] is None
    with pytest.raises(InvalidInput):
        choose_settings(VaultConfig(), None, 5)          # an interval, but nothing to sync with
    with pytest.raises(InvalidInput):
        choose_settings(config, "../x")


def test_backoff_grows_with_jitter_to_a_cap(vault: Vault) -> None:
    vault.add_remote("origin", "/nowhere")
    slow = BackgroundSync(vault.services.syncer, "origin", 60, rng=random.Random(7))
    waits = [slow.backoff(n) for n in range(1, 12)]
    for n, wait in enumerate(waits, 1):
        top = min(60 * 2 ** (n - 1), 480)
        assert top / 2 <= wait <= top
    assert max(waits) <= 480 and len({round(w, 3) for w in waits}) == len(waits)   # jittered
    fast = BackgroundSync(vault.services.syncer, "origin", 1, rng=random.Random(7))
    assert all(fast.backoff(n) <= 8 for n in range(1, 40))
    hourly = BackgroundSync(vault.services.syncer, "origin", 3600, rng=random.Random(7))
    assert all(1800 <= hourly.backoff(n) <= 3600 for n in range(1, 5))   # never more often than the interval
    with pytest.raises(NotFound):
        BackgroundSync(vault.services.syncer, "nowhere", 60).start()
    with pytest.raises(InvalidInput):
        BackgroundSync(vault.services.syncer, "origin", 0)


# --------------------------------------------- the network, never under the lock
@pytest.mark.slow
def test_a_write_during_a_slow_fetch_does_not_wait_for_the_network(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from .git_http_server import GitHttpServer, http_backend
    if http_backend() is None:
        pytest.skip("git http-backend is not installed")
    srv = tmp_path / "srv"
    srv.mkdir()
    git(srv, "init", "-q", "--bare", "-b", "main", str(srv / "vault.git"))
    monkeypatch.setenv("GITMEM_GIT_USERNAME", "u")
    monkeypatch.setenv("GITMEM_GIT_PASSWORD", "p")
    with GitHttpServer(srv, ("u", "p")) as server, Vault.init(tmp_path / "a", author="agent-a") as a:
        a.add_remote("origin", server.url("vault.git"))
        a.add("Seed", "The first memory.")
        a.sync()
        server.misbehave(delay=3.0)                      # every answer 3 s late
        asked = len(server.requests)
        syncing = BackgroundSync(a.services.syncer, "origin", 600, push_delay=0.2, log=lambda line: None)
        with syncing:
            wait_for(lambda: len(server.requests) > asked, "the background fetch to start")
            started = time.monotonic()
            a.add("During the fetch", "Written while the remote is slow.")
            # The fetch waits >= 6 s for the server (two requests, 3 s each) and holds no lock.
            assert time.monotonic() - started < 2.5
            server.misbehave(delay=0.0)
            wait_for(lambda: "add: During the fetch" in remote_subjects(srv / "vault.git"), "the push")
        assert not syncing.running and syncing.failures == 0
        assert syncing.last_report is not None
    assert not any(t.name == "gitmem-sync" and t.is_alive() for t in threading.enumerate())
    assert os.path.exists(tmp_path / "a" / ".git" / "gitmem" / "sync-state.json")
