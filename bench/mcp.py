"""MCP stdio server benchmark: cold start to ``initialize`` answered (wall and CPU),
``tools/list``, ``memory_add`` and ``memory_search`` round trips, for gitmem's
built-in stdio server and, as the baseline, the MCP SDK's (``GITMEM_MCP_STDIO=sdk``).

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/mcp.py [--memories 1000] [--starts 7] [--calls 20] [--profile gitmem] [--out FILE]

A vault of ``--memories`` generated memories (bench/_common.py's Generator,
one bulk commit, search index built before timing) is created in a temporary
folder.  Each server is ``python -m gitmem mcp --vault V`` spoken to with raw
newline-delimited JSON-RPC over pipes (no client library in the measurement),
as Claude Desktop or Cursor would.

* start-up: spawn -> the ``initialize`` answer line read; wall time, and the
  server's CPU time (user + system, its waited-for children included) read
  from ``/proc/<pid>/stat`` the moment the answer arrives.  The two servers
  are started alternately, ``--starts`` times each.  Clients give a server
  about 5 s; the target is <= 0.5 s of CPU.
* round trips: both servers run at once and the calls alternate between them
  (so load changes hit both alike): ``tools/list``, then ``memory_add`` and
  ``memory_search``; the first search of a server (it opens the search index)
  is reported on its own.
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

from bench._common import NOUN, Generator, log, machine_info, populate_bulk, report, summary_ms  # noqa: E402

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}}
MODES = {"builtin": {}, "sdk": {"GITMEM_MCP_STDIO": "sdk"}}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid`` so far: user + system, plus its waited-for children's."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / CLOCK_TICKS


class Server:
    """A ``gitmem mcp`` child process spoken to line by line."""

    def __init__(self, vault: Path, profile: str, mode: str) -> None:
        env = {**os.environ, **MODES[mode]}
        if mode == "builtin":
            env.pop("GITMEM_MCP_STDIO", None)
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "gitmem", "mcp", "--vault", str(vault),
                                      "--profile", profile, "--agent", f"bench-{mode}"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env)
        self.next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the server closed stdout")
        return json.loads(line)

    def request(self, method: str, params: dict[str, Any] | None = None) -> tuple[float, dict[str, Any]]:
        """(seconds to the answer, the answer)."""
        self.next_id += 1
        start = time.perf_counter()
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        while True:
            reply = self.receive()
            if reply.get("id") == self.next_id:
                return time.perf_counter() - start, reply

    def initialize(self) -> tuple[float, float]:
        """(wall seconds from spawn to the ``initialize`` answer, the server's CPU seconds then)."""
        self.send(INIT)
        reply = self.receive()
        wall = time.perf_counter() - self.started
        cpu = cpu_seconds(self.proc.pid)
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return wall, cpu

    def close(self) -> int:
        """Close stdin (as clients do) and wait; the exit status."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.stdout.read()
        self.proc.stdout.close()
        return self.proc.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=1000, help="generated memories in the vault")
    parser.add_argument("--starts", type=int, default=7, help="start-ups of each server to time")
    parser.add_argument("--calls", type=int, default=20, help="round trips of each kind to time")
    parser.add_argument("--profile", default="gitmem")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()

    from gitmem import Vault
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "vault"
        vault = Vault.init(root)
        _, populated = populate_bulk(vault, Generator(seed=7), args.memories)
        vault.search("deploy pipeline")  # builds the search index, so no server pays for it
        vault.close()
        log(f"vault of {args.memories} memories ready ({populated['seconds']} s)")
        load_before = os.getloadavg()

        startup: dict[str, dict[str, list[float]]] = {m: {"wall": [], "cpu": []} for m in MODES}
        for i in range(args.starts):
            for mode in MODES:
                server = Server(root, args.profile, mode)
                wall, cpu = server.initialize()
                status = server.close()
                assert status == 0, (mode, status)
                startup[mode]["wall"].append(wall)
                startup[mode]["cpu"].append(cpu)
                log(f"start {i + 1}/{args.starts} {mode}: {wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms CPU")

        servers = {mode: Server(root, args.profile, mode) for mode in MODES}
        timings: dict[str, dict[str, Any]] = {m: {"tools_list": [], "memory_add": [], "memory_search": []}
                                              for m in MODES}
        for server in servers.values():
            server.initialize()
        tool_count = {}
        for _ in range(args.calls):
            for mode, server in servers.items():
                took, reply = server.request("tools/list")
                timings[mode]["tools_list"].append(took)
                tool_count[mode] = len(reply["result"]["tools"])
        for i in range(args.calls + 1):
            query = f"{NOUN[i % len(NOUN)]} {NOUN[(i * 7 + 3) % len(NOUN)]}"
            for mode, server in servers.items():
                took, reply = server.request("tools/call", {"name": "memory_search", "arguments": {"query": query}})
                assert not reply["result"]["isError"], reply
                if i == 0:
                    timings[mode]["first_memory_search"] = took  # opens the search index
                else:
                    timings[mode]["memory_search"].append(took)
            if i == 0:
                continue
            for mode, server in servers.items():
                took, reply = server.request("tools/call", {"name": "memory_add", "arguments": {
                    "content": f"Benchmark note {i} from {mode}: the {query} window moved to Tuesday {i}.",
                    "tags": ["bench"]}})
                assert not reply["result"]["isError"], reply
                timings[mode]["memory_add"].append(took)
        for server in servers.values():
            server.close()
        log(f"{args.calls} tools/list, memory_add and memory_search round trips per server done")

    def p50(values: list[float]) -> float:
        return summary_ms(values)["p50_ms"]  # type: ignore[return-value]

    result: dict[str, Any] = {
        "benchmark": "mcp", "machine": machine_info(), "profile": args.profile,
        "vault": {"memories": args.memories, "populate": populated},
        "load_average_1_5_15_before": [round(x, 2) for x in load_before],
        "load_average_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "servers": {},
    }
    for mode in MODES:
        t = timings[mode]
        result["servers"][mode] = {
            "tools": tool_count[mode],
            "initialize_wall": summary_ms(startup[mode]["wall"]),
            "initialize_cpu": summary_ms(startup[mode]["cpu"]),
            "tools_list": summary_ms(t["tools_list"]),
            "first_memory_search_ms": round(t["first_memory_search"] * 1000, 1),
            "memory_search": summary_ms(t["memory_search"]),
            "memory_add": summary_ms(t["memory_add"]),
        }
    result["summary_p50_ms"] = {mode: {"initialize_wall": p50(startup[mode]["wall"]),
                                       "initialize_cpu": p50(startup[mode]["cpu"]),
                                       "tools_list": p50(timings[mode]["tools_list"]),
                                       "memory_add": p50(timings[mode]["memory_add"]),
                                       "memory_search": p50(timings[mode]["memory_search"])}
                                for mode in MODES}
    report(result, args.out)


if __name__ == "__main__":
    main()
