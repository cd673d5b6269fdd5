"""`gitmem mcp` as a real subprocess, driven by the MCP SDK's own client: stdio
(list tools with annotations, write, search, read back, the commit exists),
two clients writing concurrently to one vault, and the HTTP transport's
bearer-token rule."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gitmem import Vault

from .conftest import assert_clean, git, mcp_params

mcp = pytest.importorskip("mcp", reason="the MCP SDK is an optional extra: pip install gitmem-vault[mcp]")
anyio = pytest.importorskip("anyio")


params = mcp_params


def test_stdio_server_with_the_sdk_client(vault: Vault) -> None:
    root = vault.root
    vault.close()

    async def session() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with mcp.Client(params(root, "gitmem", "claude-desktop")) as client:
            out["server"] = client.server_info.name
            out["tools"] = {t.name: t for t in (await client.list_tools()).tools}
            added = await client.call_tool("memory_add", {"content": "Maya prefers dark mode.",
                                                          "type": "preference"})
            out["added"] = added
            out["search"] = await client.call_tool("memory_search", {"query": "dark mode"})
            out["read"] = await client.call_tool("memory_read", {"ref": added.structured_content["id"]})
            out["bad"] = await client.call_tool("memory_read", {"ref": "../../etc/passwd"})
            out["unknown"] = await client.call_tool("nope", {})
        return out

    out = anyio.run(session)
    assert out["server"] == "gitmem-gitmem"
    tools = out["tools"]
    assert {"memory_add", "memory_search", "memory_read", "memory_compress", "memory_links"} <= set(tools)
    for t in tools.values():  # annotations on every tool
        assert t.annotations is not None and t.annotations.read_only_hint is not None
        assert t.annotations.destructive_hint is not None and t.annotations.idempotent_hint is not None
    assert tools["memory_search"].annotations.read_only_hint is True
    assert tools["memory_delete"].annotations.destructive_hint is True
    added = out["added"]
    assert not added.is_error and added.structured_content["status"] == "created"
    assert json.loads(added.content[0].text) == added.structured_content
    memory_id = added.structured_content["id"]
    assert [h["id"] for h in out["search"].structured_content["hits"]] == [memory_id]
    assert out["read"].structured_content["body"].startswith("Maya prefers dark mode.")
    assert out["bad"].is_error and out["bad"].structured_content["error"]["code"] == "invalid_path"
    assert out["unknown"].is_error and out["unknown"].structured_content["error"]["code"] == "unknown_tool"
    log = git(root, "log", "-1", "--format=%an|%s|%b")
    assert log.startswith("claude-desktop|add: Maya prefers dark mode.|") and f"Memory-Id: {memory_id}" in log
    assert_clean(root)


def test_two_mcp_clients_write_concurrently(vault: Vault) -> None:
    root = vault.root
    vault.close()
    per_client = 6

    async def client(name: str, results: list[Any]) -> None:
        async with mcp.Client(params(root, "files", name)) as c:
            for i in range(per_client):
                results.append(await c.call_tool("memory_write", {"path": f"{name}/note-{i}.md",
                                                                  "content": f"# {name} {i}\n"}))
            results.append(await c.call_tool("memory_write", {"path": "shared.md", "content": f"last: {name}\n"}))

    async def both() -> list[Any]:
        results: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(client, "alpha", results)
            tg.start_soon(client, "beta", results)
        return results

    results = anyio.run(both)
    assert len(results) == 2 * (per_client + 1) and not any(r.is_error for r in results)
    files = git(root, "ls-tree", "-r", "--name-only", "HEAD").split()
    for name in ("alpha", "beta"):
        assert all(f"long_term/{name}/note-{i}.md" in files for i in range(per_client))
        assert len(git(root, "log", f"--author={name}", "--format=%s").splitlines()) in (per_client + 1,
                                                                                       per_client)
    assert (root / "long_term/shared.md").read_text() in ("last: alpha\n", "last: beta\n")
    assert len(git(root, "log", "--format=%s").splitlines()) >= 2 * per_client + 2
    assert_clean(root)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, body: dict[str, Any], token: str | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback only
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.slow
def test_http_transport_needs_a_token_off_loopback_and_checks_it(vault: Vault) -> None:
    root = vault.root
    refused = subprocess.run([sys.executable, "-m", "gitmem", "mcp", "--vault", str(root), "--http",
                              "--host", "0.0.0.0"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "GITMEM_MCP_TOKEN": ""})
    assert refused.returncode == 2 and "without a bearer token" in refused.stderr
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "gitmem", "mcp", "--vault", str(root), "--http",
                               "--port", str(port), "--token", "s3cret"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "test", "version": "1"}}}
        deadline = time.monotonic() + 30
        while True:
            try:
                status, _ = _post(url, init)
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
        assert status == 401
        assert _post(url, init, "wrong")[0] == 401
        status, text = _post(url, init, "s3cret")
        assert status == 200 and "gitmem-gitmem" in text
    finally:
        server.terminate()
        server.wait(timeout=10)
        assert server.stderr is not None
        server.stderr.close()
