"""MCP server benchmark: start-up (spawn -> ``initialize`` answered), ``tools/list``,
and tool-call latency over stdio, against the same calls made in-process.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/mcp.py [--starts 5] [--calls 30] [--profile gitmem] [--out FILE]

A vault is created from ``sample-vault/`` in a temporary folder.  The server is
``python -m gitmem mcp --vault V`` spoken to with raw newline-delimited
JSON-RPC over pipes (no client library in the measurement), as Claude Desktop
or Cursor would.  Clients give a server 5-10 s to answer ``initialize``; the
target is < 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import log, machine_info, report, summary_ms  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}}


class Server:
    """A ``gitmem mcp`` child process spoken to line by line."""

    def __init__(self, vault: Path, profile: str) -> None:
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "gitmem", "mcp", "--vault", str(vault),
                                      "--profile", profile, "--agent", "bench"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)
        self.next_id = 1

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        assert self.proc.stdout is not None
        while True:
            reply = json.loads(self.proc.stdout.readline())
            if reply.get("id") == self.next_id:
                return reply

    def initialize(self) -> float:
        """Seconds from spawn to the ``initialize`` answer."""
        self.send(INIT)
        assert self.proc.stdout is not None
        reply = json.loads(self.proc.stdout.readline())
        took = time.perf_counter() - self.started
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return took

    def close(self) -> float:
        """Stop the server (stdin closed, as clients do); returns its CPU seconds (user + sys)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=5, help="server start-ups to time")
    parser.add_argument("--calls", type=int, default=30, help="tool calls of each kind to time")
    parser.add_argument("--profile", default="gitmem")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()

    from gitmem import Toolbox, Vault
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "vault"
        Vault.init(root, from_dir=REPO / "sample-vault").close()
        starts, cpu = [], []
        for i in range(args.starts):
            server = Server(root, args.profile)
            starts.append(server.initialize())
            cpu.append(server.close())
            log(f"start {i + 1}/{args.starts}: {starts[-1] * 1000:.0f} ms wall, {cpu[-1] * 1000:.0f} ms CPU")

        server = Server(root, args.profile)
        server.initialize()
        listed: list[float] = []
        for _ in range(5):
            t = time.perf_counter()
            tools = server.request("tools/list")["result"]["tools"]
            listed.append(time.perf_counter() - t)
        writes, searches = [], []
        for i in range(args.calls):
            t = time.perf_counter()
            reply = server.request("tools/call", {"name": "memory_add", "arguments": {
                "content": f"Benchmark note {i}: the deploy window moved to Tuesday {i}.", "tags": ["bench"]}})
            writes.append(time.perf_counter() - t)
            assert not reply["result"].get("isError"), reply
            t = time.perf_counter()
            server.request("tools/call", {"name": "memory_search", "arguments": {"query": "deploy window"}})
            searches.append(time.perf_counter() - t)
        server.close()
        log(f"{args.calls} writes and searches over MCP done")

        in_writes, in_searches = [], []
        with Toolbox(root, args.profile, agent="bench") as box:
            for i in range(args.calls):
                t = time.perf_counter()
                box.call("memory_add", {"content": f"In-process note {i}: standup at {i} o'clock.",
                                        "tags": ["bench"]})
                in_writes.append(time.perf_counter() - t)
                t = time.perf_counter()
                box.call("memory_search", {"query": "standup"})
                in_searches.append(time.perf_counter() - t)

    result = {
        "benchmark": "mcp", "machine": machine_info(), "profile": args.profile, "tools": len(tools),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "startup_to_initialize": summary_ms(starts),
        # CPU time of a whole server life (start, initialize, exit): independent of other load.
        "startup_cpu_start_to_exit": summary_ms(cpu),
        "tools_list": summary_ms(listed),
        "mcp_write_memory_add": summary_ms(writes), "mcp_search": summary_ms(searches),
        "inprocess_write_memory_add": summary_ms(in_writes), "inprocess_search": summary_ms(in_searches),
    }
    report(result, args.out)


if __name__ == "__main__":
    main()
