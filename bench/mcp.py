"""MCP stdio server benchmark: cold start to ``initialize`` answered (wall and CPU),
``tools/list``, ``memory_add`` and ``memory_search`` round trips, for gitmem's
built-in stdio server and, as the baseline, the MCP SDK's (``GITMEM_MCP_STDIO=sdk``).

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/mcp.py [--scale 10000] [--keep DIR] [--starts 7] [--calls 20] [--profile gitmem]
                        [--out FILE]

A vault of ``--scale`` memories (default 10,000; ``--memories`` is the old name)
is made as a user would: a Zipf-like corpus of Markdown notes imported with
``gitmem init --from`` (search index included), in a temporary folder;
``--keep DIR`` keeps it for later runs, which work on a copy.  Each server is
``python -m gitmem mcp --vault V`` spoken to with raw newline-delimited JSON-RPC
over pipes (no client library in the measurement), as Claude Desktop or Cursor
would.

* start-up: spawn -> the ``initialize`` answer line read; wall time, and the
  server's CPU time (user + system, its waited-for children included) read
  from ``/proc/<pid>/stat`` the moment the answer arrives.  The two servers
  are started alternately, ``--starts`` times each.  Clients give a server
  about 5 s; the target is <= 0.5 s of CPU.
* round trips: both servers run at once and the calls alternate between them
  (so load changes hit both alike): ``tools/list``, then ``memory_add`` and
  ``memory_search``; the first ``tools/list`` of a server (it builds the tools'
  schemas) and its first search (it opens the search index) are reported on
  their own.  The searches take turns: plain words, a quoted phrase, words, a
  prefix (``memory_search_by_kind``), as an agent sends them.
* memory: the peak RSS (``VmHWM``) of each server process, read at the
  ``initialize`` answer of each start-up and, for the two long-running
  servers, after all their round trips (target <= 200 MiB).
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

from bench._common import (NOUN, add_scale_options, bench_vault, loadavg, log, machine_info,  # noqa: E402
                           proc_cpu_seconds, proc_peak_rss_mib, report, summary_ms)

# The searches an agent sends, in turn: plain words, a quoted phrase, words, a prefix
# (phrases and prefixes load the array code, so the peak RSS counts it).
SEARCH_KINDS = ("words", "phrase", "words", "prefix")

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}}
MODES = {"builtin": {}, "sdk": {"GITMEM_MCP_STDIO": "sdk"}}
TARGET_RSS_MIB = 200.0


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
        cpu = proc_cpu_seconds(self.proc.pid, children=True)
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
    add_scale_options(parser, 10_000)
    parser.add_argument("--memories", type=int, dest="scale", help="the old name of --scale")
    parser.add_argument("--starts", type=int, default=7, help="start-ups of each server to time")
    parser.add_argument("--calls", type=int, default=20, help="round trips of each kind to time")
    parser.add_argument("--profile", default="gitmem")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gitmem-bench-mcp-") as tmp:
        root = Path(tmp) / "vault"
        populated = bench_vault(args.scale, root, args.keep)  # search index built by the import
        log(f"vault of {args.scale} memories ready")
        load_before = loadavg()

        startup: dict[str, dict[str, list[float]]] = {m: {"wall": [], "cpu": [], "rss": []} for m in MODES}
        for i in range(args.starts):
            for mode in MODES:
                server = Server(root, args.profile, mode)
                wall, cpu = server.initialize()
                startup[mode]["rss"].append(proc_peak_rss_mib(server.proc.pid))
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
        for i in range(args.calls + 1):
            for mode, server in servers.items():
                took, reply = server.request("tools/list")
                if i == 0:
                    timings[mode]["first_tools_list"] = took  # builds the tools' schemas
                else:
                    timings[mode]["tools_list"].append(took)
                tool_count[mode] = len(reply["result"]["tools"])
        for i in range(args.calls + 1):
            query = f"{NOUN[i % len(NOUN)]} {NOUN[(i * 7 + 3) % len(NOUN)]}"
            kind = SEARCH_KINDS[i % len(SEARCH_KINDS)] if i else "words"
            asked = {"words": query, "phrase": f'"{query}"', "prefix": f"{query[:3]}*"}[kind]
            for mode, server in servers.items():
                took, reply = server.request("tools/call", {"name": "memory_search", "arguments": {"query": asked}})
                assert not reply["result"]["isError"], reply
                if i == 0:
                    timings[mode]["first_memory_search"] = took  # opens the search index
                else:
                    timings[mode]["memory_search"].append(took)
                    timings[mode].setdefault(f"memory_search_{kind}", []).append(took)
            if i == 0:
                continue
            for mode, server in servers.items():
                took, reply = server.request("tools/call", {"name": "memory_add", "arguments": {
                    "content": f"Benchmark note {i} from {mode}: the {query} window moved to Tuesday {i}.",
                    "tags": ["bench"]}})
                assert not reply["result"]["isError"], reply
                timings[mode]["memory_add"].append(took)
        peak_rss = {mode: proc_peak_rss_mib(server.proc.pid) for mode, server in servers.items()}
        for server in servers.values():
            server.close()
        log(f"{args.calls} tools/list, memory_add and memory_search round trips per server done")

    def p50(values: list[float]) -> float:
        return summary_ms(values)["p50_ms"]  # type: ignore[return-value]

    result: dict[str, Any] = {
        "benchmark": "mcp", "machine": machine_info(), "profile": args.profile,
        "starts": args.starts, "calls": args.calls,
        "vault": {"memories": args.scale, "populate": populated},
        "load_average_1_5_15_before": load_before,
        "load_average_1_5_15_after": loadavg(),
        "servers": {},
    }
    for mode in MODES:
        t = timings[mode]
        result["servers"][mode] = {
            "tools": tool_count[mode],
            "initialize_wall": summary_ms(startup[mode]["wall"]),
            "initialize_cpu": summary_ms(startup[mode]["cpu"]),
            "first_tools_list_ms": round(t["first_tools_list"] * 1000, 1),
            "tools_list": summary_ms(t["tools_list"]),
            "first_memory_search_ms": round(t["first_memory_search"] * 1000, 1),
            "memory_search": summary_ms(t["memory_search"]),
            "memory_search_by_kind": {k: summary_ms(t[f"memory_search_{k}"]) for k in SEARCH_KINDS
                                      if t.get(f"memory_search_{k}")},
            "memory_add": summary_ms(t["memory_add"]),
            "peak_rss_mib_at_initialize_max": max(startup[mode]["rss"]),
            "peak_rss_mib_after_calls": peak_rss[mode],
            "rss_le_200mib": max(peak_rss[mode], *startup[mode]["rss"]) <= TARGET_RSS_MIB,
        }
    result["summary_p50_ms"] = {mode: {"initialize_wall": p50(startup[mode]["wall"]),
                                       "initialize_cpu": p50(startup[mode]["cpu"]),
                                       "tools_list": p50(timings[mode]["tools_list"]),
                                       "memory_add": p50(timings[mode]["memory_add"]),
                                       "memory_search": p50(timings[mode]["memory_search"]),
                                       "peak_rss_mib": peak_rss[mode]}
                                for mode in MODES}
    report(result, args.out)


if __name__ == "__main__":
    main()
