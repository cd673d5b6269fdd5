"""gitmem's built-in stdio MCP server (gitmem/mcp_stdio.py): protocol edge cases
in process (version negotiation, ping, the init gate, unknown methods, bad
params, tool error shape), a raw session over pipes (a malformed line, a
notification, a batch, answers in order, exit 0 when stdin closes), the same
answers as the SDK's own server, and the cheap whoosh distribution check."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from gitmem import Vault
from gitmem.errors import SearchEngineUnsupported
from gitmem.agents.mcp_stdio import HANDSHAKE_PROTOCOL_VERSIONS, INSTRUCTIONS, LATEST_HANDSHAKE_VERSION, StdioServer
from gitmem.agents.registry import Toolbox

from .conftest import assert_clean, git


@pytest.fixture
def server(vault: Vault) -> Iterator[StdioServer]:
    yield StdioServer(Toolbox(vault, "gitmem", agent="stdio-test"))


def init_message(version: str = "2025-06-18", request_id: Any = 0) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def request(request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def initialized(server: StdioServer) -> StdioServer:
    assert "result" in server.handle(init_message())  # type: ignore[operator]
    assert server.handle({"jsonrpc": "2.0", "method": "notifications/initialized"}) is None
    return server


# ------------------------------------------------------------ in process
def test_initialize_echoes_a_supported_version_and_counters_others_with_the_latest(server: StdioServer) -> None:
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        reply = server.handle(init_message(version, request_id=version))
        assert reply is not None and reply["id"] == version
        assert reply["result"]["protocolVersion"] == version
    for version in ("2099-01-01", "2026-07-28", "1.0", ""):  # unknown, modern-only, nonsense
        reply = server.handle(init_message(version))
        assert reply is not None and reply["result"]["protocolVersion"] == LATEST_HANDSHAKE_VERSION == "2025-11-25"
    result = reply["result"]
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "gitmem-gitmem" and result["serverInfo"]["title"] == "gitmem (gitmem tools)"
    assert result["serverInfo"]["version"] and result["instructions"] == INSTRUCTIONS
    bad = server.handle(request(1, "initialize", {"capabilities": {}}))  # no protocolVersion
    assert bad is not None and bad["error"]["code"] == -32602 and bad["id"] == 1


def test_handshake_versions_are_the_sdks() -> None:
    version = pytest.importorskip("mcp_types.version", reason="the MCP SDK is an optional extra")
    assert HANDSHAKE_PROTOCOL_VERSIONS == tuple(version.HANDSHAKE_PROTOCOL_VERSIONS)
    assert LATEST_HANDSHAKE_VERSION == version.LATEST_HANDSHAKE_VERSION


def test_ping_any_time_but_tools_only_after_initialize(server: StdioServer) -> None:
    assert server.handle(request(1, "ping")) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    early = server.handle(request(2, "tools/list"))
    assert early is not None and early["error"]["code"] == -32602 and early["id"] == 2
    initialized(server)
    assert server.handle(request("p", "ping", {})) == {"jsonrpc": "2.0", "id": "p", "result": {}}
    tools = server.handle(request(3, "tools/list", {"cursor": "ignored"}))
    assert tools is not None
    listed = {t["name"]: t for t in tools["result"]["tools"]}
    assert {"memory_add", "memory_search", "memory_delete"} <= set(listed)
    for t in listed.values():
        assert set(t) == {"name", "title", "description", "inputSchema", "annotations"}
        assert t["inputSchema"]["type"] == "object" and t["title"] == t["annotations"]["title"]
        assert set(t["annotations"]) == {"title", "readOnlyHint", "destructiveHint", "idempotentHint",
                                         "openWorldHint"}
    assert listed["memory_search"]["annotations"]["readOnlyHint"] is True
    assert listed["memory_delete"]["annotations"]["destructiveHint"] is True


def test_unknown_methods_and_the_discover_probe_are_method_not_found(server: StdioServer) -> None:
    for method in ("nope/x", "server/discover", "resources/list"):  # before and after initialize alike
        reply = server.handle(request(7, method, {}))
        assert reply == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "Method not found",
                                                              "data": method}}
    initialized(server)
    reply = server.handle(request(8, "prompts/list"))
    assert reply is not None and reply["error"]["code"] == -32601


def test_tool_results_and_errors_have_the_mcp_shape(server: StdioServer, vault: Vault) -> None:
    initialized(server)
    added = server.handle(request(1, "tools/call", {"name": "memory_add",
                                                   "arguments": {"content": "Maya prefers dark mode."}}))
    assert added is not None
    result = added["result"]
    assert result["isError"] is False and result["structuredContent"]["status"] == "created"
    assert result["content"] == [{"type": "text", "text": json.dumps(result["structuredContent"],
                                                                       ensure_ascii=False)}]
    for name, arguments, code in (("memory_read", {"ref": "../../etc/passwd"}, "invalid_path"),
                                  ("nope", {}, "unknown_tool"),
                                  ("memory_add", {"content": 5}, "invalid_arguments")):
        reply = server.handle(request(2, "tools/call", {"name": name, "arguments": arguments}))
        assert reply is not None
        failed = reply["result"]  # a tool's failure is a result, not a protocol error
        assert failed["isError"] is True and failed["structuredContent"]["error"]["code"] == code
        assert json.loads(failed["content"][0]["text"]) == failed["structuredContent"]
    for params in ({"arguments": {}}, {"name": "memory_search", "arguments": "x"}, {"name": 3}):
        reply = server.handle(request(3, "tools/call", params))
        assert reply is not None and reply["error"]["code"] == -32602, params
    reply = server.handle({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": ["memory_add"]})
    assert reply is not None and reply["error"]["code"] == -32602
    vault.close()
    assert_clean(vault.root)


def test_text_results_carry_no_structured_content(vault: Vault) -> None:
    server = initialized(StdioServer(Toolbox(vault, "claude", agent="stdio-test")))
    reply = server.handle(request(1, "tools/call", {"name": "memory", "arguments": {"command": "view",
                                                                                    "path": "/memories"}}))
    assert reply is not None
    assert set(reply["result"]) == {"content", "isError"} and reply["result"]["isError"] is False
    assert reply["result"]["content"][0]["text"].startswith("Here're the files")


def test_malformed_and_odd_messages(server: StdioServer) -> None:
    for line in (b"this is not json", b"{\"jsonrpc\": ", b"\xff\xfe{}"):
        reply = server.handle_line(line)
        assert reply is not None and reply["id"] is None and reply["error"]["code"] == -32700, line
    assert server.handle_line(b"   \n") is None  # a blank line is nothing
    for message in ([request(1, "ping")], 5, "ping"):
        reply = server.handle(message)
        assert reply is not None and reply["id"] is None and reply["error"]["code"] == -32600
    for message, answer_id in (({"jsonrpc": "2.0", "id": 9}, 9), ({"id": 10, "method": "ping"}, 10),
                               ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None),
                               ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None),
                               ({"jsonrpc": "2.0", "id": 11, "method": 5}, 11)):
        reply = server.handle(message)
        assert reply is not None and reply["error"]["code"] == -32600 and reply["id"] == answer_id, message
    # Notifications (known or not, before initialize or after) and responses get no answer.
    assert server.handle({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}) is None
    assert server.handle({"jsonrpc": "2.0", "method": "tools/list"}) is None
    assert server.handle({"jsonrpc": "2.0", "id": 5, "result": {}}) is None
    assert server.handle({"jsonrpc": "2.0", "id": 6, "error": {"code": 1, "message": "x"}}) is None
    assert not server.initialized


def test_a_lone_surrogate_still_goes_out_as_json(server: StdioServer) -> None:
    reply = server.handle_line(b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "nope"}')
    assert reply is not None
    line = StdioServer.encode(reply)
    assert line.endswith(b"\n") and json.loads(line)["id"] == "\ud800"


# ------------------------------------------------------------ over pipes
def run_server(root: Path, lines: list[str], env: dict[str, str] | None = None, profile: str = "gitmem",
               wait_for: int = 0) -> tuple[list[dict[str, Any]], subprocess.CompletedProcess[bytes]]:
    """Start ``gitmem mcp``, write ``lines``, read ``wait_for`` answers, close stdin; the answers
    and the finished process.  (Closing stdin at once tests that every request is still answered.)"""
    proc = subprocess.Popen([sys.executable, "-m", "gitmem", "mcp", "--vault", str(root), "--profile", profile,
                             "--agent", "pipe"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    assert proc.stdin is not None and proc.stdout is not None
    guard = threading.Timer(120, proc.kill)  # a hung server fails the test instead of hanging it
    guard.start()
    try:
        proc.stdin.write("".join(line + "\n" for line in lines).encode())
        proc.stdin.flush()
        first = b"".join(proc.stdout.readline() for _ in range(wait_for))
        stdout, stderr = proc.communicate()
    finally:
        guard.cancel()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, first + stdout, stderr)
    return [json.loads(line) for line in done.stdout.splitlines()], done


def test_a_session_over_pipes_answers_in_order_and_exits_0_when_stdin_closes(vault: Vault,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITMEM_MCP_STDIO", raising=False)
    root = vault.root
    vault.close()
    lines = [json.dumps(init_message()),
             json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
             "{not json",
             json.dumps(request(1, "ping")),
             json.dumps([request(2, "ping")]),
             json.dumps(request(3, "tools/call", {"name": "memory_add", "arguments": {"content": "First note."}})),
             json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}),
             json.dumps(request(4, "tools/call", {"name": "memory_search", "arguments": {"query": "first note"}})),
             json.dumps(request(5, "no/such")),
             json.dumps(request(6, "tools/call", {"name": "memory_read", "arguments": {"ref": "../x"}}))]
    replies, done = run_server(root, lines)
    assert done.returncode == 0, done.stderr
    assert [r["id"] for r in replies] == [0, None, 1, None, 3, 4, 5, 6]  # one answer per request, in order
    assert replies[1]["error"]["code"] == -32700 and replies[3]["error"]["code"] == -32600
    added = replies[4]["result"]["structuredContent"]
    assert [h["id"] for h in replies[5]["result"]["structuredContent"]["hits"]] == [added["id"]]
    assert replies[6]["error"]["code"] == -32601 and replies[7]["result"]["isError"] is True
    assert git(root, "log", "-1", "--format=%an").strip() == "pipe"
    assert_clean(root)
    # Nothing at all on stdin: a clean exit, nothing written.
    replies, done = run_server(root, [])
    assert done.returncode == 0 and replies == [] and done.stdout == b""


@pytest.mark.slow
def test_the_same_answers_as_the_sdk_server(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK is an optional extra: pip install gitmem-vault[mcp]")
    monkeypatch.delenv("GITMEM_MCP_STDIO", raising=False)
    vault.add("Editor theme", "Maya prefers dark mode in every editor.")
    root = vault.root
    vault.close()
    for profile, calls in (("gitmem", [("memory_search", {"query": "dark mode"}),
                                       ("memory_read", {"ref": "../../etc/passwd"}), ("nope", {}),
                                       ("memory_add", {"content": 5})]),
                           ("claude", [("memory", {"command": "view", "path": "/memories"}),
                                       ("memory", {"command": "view", "path": "/etc"})])):
        lines = [json.dumps(init_message("2025-03-26")),
                 json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                 json.dumps(request("ping", "ping")), json.dumps(request("list", "tools/list")),
                 json.dumps(request("unknown", "resources/list")),
                 *(json.dumps(request(f"call-{i}", "tools/call", {"name": n, "arguments": a}))
                   for i, (n, a) in enumerate(calls))]
        ours, done = run_server(root, lines, profile=profile, wait_for=len(lines) - 1)
        assert done.returncode == 0, done.stderr
        # (The SDK's server drops requests still in flight when stdin closes, so wait for every answer.)
        theirs, done = run_server(root, lines, env={"GITMEM_MCP_STDIO": "sdk"}, profile=profile,
                                  wait_for=len(lines) - 1)
        assert done.returncode == 0, done.stderr
        # The SDK runs tool calls concurrently, so its answers may come in another order.
        assert sorted(ours, key=lambda r: str(r["id"])) == sorted(theirs, key=lambda r: str(r["id"]))
        assert len(ours) == len(lines) - 1
    assert_clean(root)


def test_serve_keeps_the_protocol_stream_clean_of_stray_prints(vault: Vault, tmp_path: Path) -> None:
    """serve() moves descriptor 1 to stderr; run in a child so this process's descriptors stay."""
    root = vault.root
    vault.close()
    script = ("import sys\nfrom gitmem.agents.registry import Toolbox\nfrom gitmem.agents import mcp_stdio\n"
              "box = Toolbox(sys.argv[1], 'gitmem')\n"
              "orig = box.call\n"
              "def noisy(*a, **k):\n"
              "    print('stray print'); import os; os.write(1, b'stray write\\n')\n"
              "    return orig(*a, **k)\n"
              "box.call = noisy\nmcp_stdio.serve(box)\n")
    lines = [json.dumps(init_message()), json.dumps(request(1, "tools/call", {"name": "memory_list",
                                                                              "arguments": {}}))]
    done = subprocess.run([sys.executable, "-c", script, str(root)], input="".join(f"{x}\n" for x in lines).encode(),
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in replies] == [0, 1] and replies[1]["result"]["isError"] is False
    assert b"stray print" in done.stderr and b"stray write" in done.stderr


# ------------------------------------------------------------ the whoosh distribution check
@pytest.fixture
def fresh_check() -> Iterator[Any]:
    from gitmem.search.whoosh import internals as search_doc
    search_doc.whoosh_version.cache_clear()
    yield search_doc
    search_doc.whoosh_version.cache_clear()


def test_whoosh_check_passes_with_whoosh_reloaded_alone(fresh_check: Any) -> None:
    import importlib.metadata
    assert fresh_check.whoosh_version() == importlib.metadata.version("whoosh-reloaded")


def test_whoosh_check_refuses_a_second_distribution_of_whoosh(fresh_check: Any, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "site" / "Whoosh-2.7.4.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: Whoosh\nVersion: 2.7.4\n")
    (info / "RECORD").write_text("whoosh/__init__.py,,\nWhoosh-2.7.4.dist-info/METADATA,,\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(SearchEngineUnsupported, match=r"\['whoosh', 'whoosh-reloaded'\]"):
        fresh_check.whoosh_version()


def test_whoosh_check_refuses_files_whoosh_reloaded_did_not_install(fresh_check: Any, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata
    import importlib.util
    installed = next(f for f in importlib.metadata.distribution("whoosh-reloaded").files or ()
                     if f.as_posix() == "whoosh/__init__.py")
    if installed.hash is None:
        pytest.skip("whoosh-reloaded's RECORD has no hashes here")
    real_find_spec = importlib.util.find_spec
    elsewhere = tmp_path / "whoosh" / "__init__.py"
    elsewhere.parent.mkdir()
    elsewhere.write_text("__version__ = (2, 7, 4)\n")

    def find_spec(name: str, *args: Any) -> Any:
        if name == "whoosh":
            return importlib.machinery.ModuleSpec("whoosh", None, origin=str(spec_origin))
        return real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    spec_origin = elsewhere  # imported from another folder
    with pytest.raises(SearchEngineUnsupported, match="not from whoosh-reloaded"):
        fresh_check.whoosh_version()
    fresh_check.whoosh_version.cache_clear()
    monkeypatch.setattr(Path, "read_bytes", lambda self: b"overwritten by another package\n")
    spec_origin = Path(installed.locate())  # the right place, other bytes
    with pytest.raises(SearchEngineUnsupported, match="another package overwrote it"):
        fresh_check.whoosh_version()
