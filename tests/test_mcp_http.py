"""`gitmem mcp --http` as a real process, probed with raw HTTP (http.client) and
the MCP SDK's own streamable-HTTP client: DNS-rebinding protection (Host and
Origin checks) on every bind address, the token rule (only 127.0.0.1, ::1 and
localhost go without one), the bearer scheme in any case, the banner only
after binding, a taken port, IPv6 URLs and ``--json`` usage errors.

Every server binds 127.0.0.0/8 or ::1 only."""

from __future__ import annotations

import http.client
import json
import os
import queue
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from gitmem import Vault
from gitmem.errors import InvalidInput

from .conftest import assert_clean, git

mcp = pytest.importorskip("mcp", reason="the MCP SDK is an optional extra: pip install gitmem-vault[mcp]")
anyio = pytest.importorskip("anyio")

from gitmem.agents.mcp_server import http_url  # noqa: E402
from gitmem.localhttp import allowed_hosts_and_origins, is_loopback_host  # noqa: E402

TOKEN = "s3cret-token"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}}
# Generous hang guards, never assertions about speed: a server that never
# starts fails the test instead of blocking the suite.
START_GUARD = 120


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GITMEM_MCP_TOKEN", None)
    return env


def _gitmem(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitmem", *args], capture_output=True, text=True,
                          timeout=START_GUARD, env=env or _env())


def _free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ipv6_loopback() -> bool:
    try:
        _free_port("::1")
    except OSError:
        return False
    return True


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Server:
    """A running ``gitmem mcp --http`` and what it printed."""

    def __init__(self, root: Path, host: str, port: int, *extra: str) -> None:
        self.host, self.port = host, port
        self.proc = subprocess.Popen([sys.executable, "-m", "gitmem", "mcp", "--vault", str(root), "--http",
                                      "--host", host, "--port", str(port), *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env())
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        # Drain stderr all along: the SDK logs each refused request there, and a full pipe would stall the server.
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        while True:
            line = self.lines.get(timeout=START_GUARD)
            if line is None:
                self.stop()
                pytest.fail(f"server exited with {self.proc.returncode}: {''.join(self.stderr)}")
            if " on http://" in line:
                self.banner = line.strip()
                return

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def request(self, headers: dict[str, str | None] | None = None, body: Any = INIT,
                method: str = "POST") -> tuple[int, str]:
        """Send one raw request to /mcp; ``headers`` override the defaults (None drops one)."""
        data = json.dumps(body).encode()
        sent: dict[str, str | None] = {"Host": _authority(self.host, self.port),
                                       "Content-Type": "application/json",
                                       "Accept": "application/json, text/event-stream",
                                       "Content-Length": str(len(data))}
        sent.update(headers or {})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=START_GUARD)
        try:
            conn.putrequest(method, "/mcp", skip_host=True, skip_accept_encoding=True)
            for name, value in sent.items():
                if value is not None:
                    conn.putheader(name, value)
            conn.endheaders(data)
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=START_GUARD)
        self._reader.join(timeout=START_GUARD)
        assert self.proc.stderr is not None
        self.proc.stderr.close()


@pytest.fixture
def root(vault: Vault) -> Path:
    vault.close()  # the server opens the vault itself
    return vault.root


@pytest.fixture
def serve(root: Path) -> Iterator[Any]:
    started: list[Server] = []

    def start(host: str, *extra: str) -> Server:
        server = Server(root, host, _free_port(host), *extra)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


# -- pure rules ---------------------------------------------------------------------------------

@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("::1", True), ("[::1]", True), ("0:0:0:0:0:0:0:1", True), ("localhost", True),
    ("127.0.0.2", False), ("127.1.2.3", False), ("0.0.0.0", False), ("::", False), ("192.168.1.5", False),
    ("::ffff:127.0.0.1", False), ("my.box.lan", False), ("localhost.evil.com", False),
])
def test_only_three_names_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_allowed_hosts_name_the_bind_address_and_loopback_only_for_loopback() -> None:
    hosts, origins = allowed_hosts_and_origins("::1", 8765)
    assert {"[::1]:8765", "[::1]", "127.0.0.1:8765", "localhost:8765", "localhost"} <= set(hosts)
    assert {"http://[::1]:8765", "http://127.0.0.1:8765", "http://localhost:8765"} == set(origins)
    hosts, origins = allowed_hosts_and_origins("127.0.0.2", 9000, ["box.lan"])
    assert set(hosts) == {"127.0.0.2:9000", "127.0.0.2", "box.lan:9000", "box.lan"}
    assert set(origins) == {"http://127.0.0.2:9000", "http://box.lan:9000"}
    assert not any("*" in h for h in hosts + origins)
    assert http_url("::1", 8765) == "http://[::1]:8765/mcp"
    for malformed in ("box.lan:8765", "box.lan:*", "*", "http://box.lan", "box lan"):
        with pytest.raises(InvalidInput):
            allowed_hosts_and_origins("127.0.0.2", 9000, [malformed])


# -- the token rule -----------------------------------------------------------------------------

def test_other_loopback_address_without_token_exits_2_before_binding(root: Path) -> None:
    port = _free_port("127.0.0.2")
    # Hold the port: a server that bound before checking the token would fail with port_in_use
    # (exit 5) instead of the token error.
    with socket.socket() as holder:
        holder.bind(("127.0.0.2", port))
        holder.listen()
        args = ("mcp", "--vault", str(root), "--http", "--host", "127.0.0.2", "--port", str(port))
        text = _gitmem(*args)
        empty_env = _gitmem(*args, env={**_env(), "GITMEM_MCP_TOKEN": "  "})
        as_json = _gitmem(*args, "--json")
    for refused in (text, empty_env):
        assert refused.returncode == 2, refused.stderr
        assert "refusing to serve on 127.0.0.2 without a bearer token" in refused.stderr
        assert "--token" in refused.stderr and "Traceback" not in refused.stderr
        assert " on http://" not in refused.stderr
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout)["error"]["code"] == "invalid_input"


# -- DNS-rebinding protection -------------------------------------------------------------------

@pytest.mark.slow
def test_loopback_server_refuses_foreign_host_and_origin(serve: Any) -> None:
    server = serve("127.0.0.1")
    port = server.port
    status, text = server.request()
    assert status == 200 and "gitmem-gitmem" in text  # no Origin header: a plain client
    assert server.request({"Host": "evil.example"})[0] == 421
    assert server.request({"Host": f"evil.example:{port}"})[0] == 421
    assert server.request({"Origin": "http://evil.example"})[0] == 403
    assert server.request({"Origin": f"http://evil.example:{port}"})[0] == 403
    assert server.request({"Origin": "null"})[0] == 403
    for host in (f"localhost:{port}", f"[::1]:{port}", "127.0.0.1"):
        assert server.request({"Host": host})[0] == 200, host
    for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
        assert server.request({"Origin": origin})[0] == 200, origin


@pytest.mark.slow
def test_other_loopback_address_with_token_checks_host_and_origin(serve: Any) -> None:
    """127.0.0.2 is where the SDK's own defaults turned the checks off."""
    server = serve("127.0.0.2", "--token", TOKEN, "--allow-host", "memory.test")
    port, auth = server.port, f"Bearer {TOKEN}"
    assert server.request({"Authorization": auth})[0] == 200
    assert server.request({"Authorization": auth, "Host": "evil.example"})[0] == 421
    assert server.request({"Authorization": auth, "Origin": "http://evil.example"})[0] == 403
    # Loopback spellings are not this server's names.
    assert server.request({"Authorization": auth, "Host": f"localhost:{port}"})[0] == 421
    assert server.request({"Authorization": auth, "Origin": f"http://127.0.0.1:{port}"})[0] == 403
    assert server.request({"Authorization": auth, "Origin": f"http://127.0.0.2:{port}"})[0] == 200
    assert server.request({"Authorization": auth, "Host": f"memory.test:{port}",
                           "Origin": f"http://memory.test:{port}"})[0] == 200


@pytest.mark.slow
def test_bearer_scheme_is_case_insensitive_and_token_exact(serve: Any) -> None:
    server = serve("127.0.0.2", "--token", TOKEN)
    assert server.request()[0] == 401
    for wrong in (f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", TOKEN, f"Bearer{TOKEN}"):
        assert server.request({"Authorization": wrong})[0] == 401, wrong
    for scheme in ("Bearer", "bearer", "BEARER"):
        status, text = server.request({"Authorization": f"{scheme} {TOKEN}"})
        assert status == 200 and "gitmem-gitmem" in text, scheme


@pytest.mark.slow
@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_ipv6_loopback_url_in_brackets_and_host_checked(serve: Any) -> None:
    server = serve("::1")
    port = server.port
    assert server.banner.endswith(f"on http://[::1]:{port}/mcp")
    assert server.request()[0] == 200  # Host: [::1]:PORT
    assert server.request({"Host": f"127.0.0.1:{port}"})[0] == 200
    assert server.request({"Host": "evil.example"})[0] == 421
    assert server.request({"Origin": "http://evil.example"})[0] == 403


# -- binding ------------------------------------------------------------------------------------

def test_port_in_use_is_a_clear_error_and_no_banner(root: Path) -> None:
    port = _free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        args = ("mcp", "--vault", str(root), "--http", "--port", str(port))
        text = _gitmem(*args)
        as_json = _gitmem(*args, "--json")
    assert text.returncode == 5, text.stderr
    assert text.stderr.startswith(f"error: cannot serve on 127.0.0.1:{port}: the port is already in use")
    assert "Traceback" not in text.stderr and " on http://" not in text.stderr
    assert as_json.returncode == 5
    assert json.loads(as_json.stdout)["error"]["code"] == "port_in_use"


def test_usage_errors_honour_json(root: Path) -> None:
    bad_port = _gitmem("mcp", "--vault", str(root), "--http", "--port", "0", "--json")
    assert bad_port.returncode == 2
    error = json.loads(bad_port.stdout)["error"]
    assert error["code"] == "invalid_input" and "--port" in error["message"]
    unknown = _gitmem("mcp", "--json", "--no-such-option")
    assert unknown.returncode == 2 and json.loads(unknown.stdout)["error"]["code"] == "invalid_input"
    http_only = _gitmem("mcp", "--vault", str(root), "--json", "--host", "127.0.0.1")
    assert http_only.returncode == 2
    assert "--host" in json.loads(http_only.stdout)["error"]["message"]
    plain = _gitmem("mcp", "--vault", str(root), "--http", "--port", "0")  # without --json: click's text
    assert plain.returncode == 2 and plain.stdout == "" and "Invalid value for '--port'" in plain.stderr


# -- a whole session ----------------------------------------------------------------------------

@pytest.mark.slow
def test_sdk_client_session_with_token_writes_a_commit(serve: Any, root: Path) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    server = serve("127.0.0.2", "--token", TOKEN, "--agent", "http-agent")
    url = f"http://127.0.0.2:{server.port}/mcp"
    assert server.banner.endswith(f"on {url}")

    async def session() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with httpx2.AsyncClient(headers={"Authorization": f"bearer {TOKEN}"},
                                      timeout=START_GUARD) as http:
            async with mcp.Client(streamable_http_client(url, http_client=http)) as client:
                out["server"] = client.server_info.name
                out["tools"] = {t.name for t in (await client.list_tools()).tools}
                out["added"] = await client.call_tool("memory_add", {"content": "Maya prefers dark mode.",
                                                                     "type": "preference"})
                out["search"] = await client.call_tool("memory_search", {"query": "dark mode"})
        return out

    out = anyio.run(session)
    assert out["server"] == "gitmem-gitmem" and "memory_add" in out["tools"]
    added = out["added"]
    assert not added.is_error and added.structured_content["status"] == "created"
    memory_id = added.structured_content["id"]
    assert [h["id"] for h in out["search"].structured_content["hits"]] == [memory_id]
    log = git(root, "log", "-1", "--format=%an|%b")
    assert log.startswith("http-agent|") and f"Memory-Id: {memory_id}" in log
    server.stop()
    assert_clean(root)
