"""Follow benchmark: a running ``gitmem mcp`` keeps up with outside edits by itself.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/follow.py [--memories 1000 10000] [--modes watch poll off] [--edits 20]
                           [--idle 65] [--searches 30] [--out FILE]

For each vault size a vault of generated memories (bench/_common.py's
Generator, one bulk commit, search index built) is created in a temporary
folder, and for each ``--follow`` mode a ``python -m gitmem mcp`` server is
started on it and spoken to with raw JSON-RPC over pipes (bench/mcp.py's
``Server``), as a client would.  Per server:

* ``initialize``: wall and CPU seconds from spawn (the follower starts only
  after this answer, so it must not change);
* settle: the first search, then wait until the server's CPU stops moving
  (the watcher's start-up rescan runs in the background);
* idle CPU: the server's CPU seconds (user + system, from /proc) over
  ``--idle`` seconds with nothing happening (>= 60 s so that the watcher's
  once-a-minute rescan falls inside; 10 s for poll and off, which run no
  thread), reported per minute;
* search cost: ``--searches`` ``memory_search`` round trips back to back, no
  edits (in poll mode the first of them pays for the whole-vault check, the
  rest fall inside the 1 s window), and the same spaced 1.1 s apart, so every
  one pays for the check (poll mode only);
* edit -> searchable: ``--edits`` editor saves (temp file renamed over a
  random memory, one new unique word each, ~0.3-0.5 s apart), each timed until
  ``memory_search`` from the server finds the word (polled every 10 ms).

Also, in process: the cost of one whole-vault check (``Vault.refresh()``,
what poll mode runs before a call), and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Generator, log, machine_info, populate_bulk, report, summary_ms  # noqa: E402
from bench.mcp import Server, cpu_seconds  # noqa: E402
from gitmem.vault import Vault  # noqa: E402

TARGET_P95_MS = 1500.0


class FollowServer(Server):
    """bench/mcp.py's Server with ``GITMEM_MCP_FOLLOW`` set."""

    def __init__(self, vault: Path, mode: str) -> None:
        old = os.environ.get("GITMEM_MCP_FOLLOW")
        os.environ["GITMEM_MCP_FOLLOW"] = mode
        try:
            super().__init__(vault, "gitmem", "builtin")
        finally:
            if old is None:
                os.environ.pop("GITMEM_MCP_FOLLOW", None)
            else:
                os.environ["GITMEM_MCP_FOLLOW"] = old

    def search(self, query: str) -> tuple[float, int]:
        seconds, reply = self.request("tools/call", {"name": "memory_search",
                                                     "arguments": {"query": query, "limit": 5}})
        result = reply["result"]
        assert not result["isError"], result
        return seconds, int(result["structuredContent"]["total"])


def settle(server: Server, quiet_for: float = 2.0, limit: float = 300.0) -> float:
    """Wait until the server's CPU time stops growing; the seconds waited."""
    start = time.perf_counter()
    last = cpu_seconds(server.proc.pid)
    quiet_since = time.perf_counter()
    while time.perf_counter() - start < limit:
        time.sleep(0.5)
        now = cpu_seconds(server.proc.pid)
        if now - last > 0.02:
            quiet_since = time.perf_counter()
        last = now
        if time.perf_counter() - quiet_since >= quiet_for:
            break
    return time.perf_counter() - start


def atomic_save(path: Path, data: bytes) -> None:
    tmp = path.parent / f".{path.name}.bench-tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)


def run_server(root: Path, files: list[str], mode: str, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    server = FollowServer(root, mode)
    out: dict[str, Any] = {}
    try:
        wall, cpu = server.initialize()
        out["initialize_ms"] = {"wall": round(wall * 1000, 1), "cpu": round(cpu * 1000, 1)}
        first, _ = server.search("warm up")
        out["first_search_ms"] = round(first * 1000, 1)
        out["settle_s"] = round(settle(server), 1)
        out["cpu_after_start_s"] = round(cpu_seconds(server.proc.pid), 2)

        # Only the watcher has a thread; poll and off are measured briefly to show they stay at 0.
        idle = args.idle if mode == "watch" else min(args.idle, 10.0)
        if idle > 0:
            before = cpu_seconds(server.proc.pid)
            time.sleep(idle)
            used = cpu_seconds(server.proc.pid) - before
            out["idle_seconds_measured"] = idle
            out["idle_cpu_s_per_min"] = round(used * 60.0 / idle, 3)
            out["idle_cpu_pct_of_a_core"] = round(used / idle * 100, 3)
            log(f"  {mode}: idle {used:.2f} s CPU in {idle:.0f} s")

        rng = random.Random(11)
        words = [f"quietword{i:04d}" for i in range(args.searches)]
        out["search_back_to_back"] = summary_ms([server.search(w)[0] for w in words])
        if mode == "poll":
            spaced = []
            for w in words[: max(5, args.searches // 4)]:
                time.sleep(1.1)
                spaced.append(server.search(w)[0])
            out["search_each_after_1s"] = summary_ms(spaced)

        latencies: list[float] = []
        missed = 0
        for i in range(args.edits):
            rel = rng.choice(files)
            note = root / rel
            word = f"{tag}{mode}edit{i:04d}"
            data = note.read_bytes().rstrip(b"\n") + f"\n\nEdit {i}: {word}\n".encode()
            start = time.perf_counter()
            atomic_save(note, data)
            while server.search(word)[1] < 1:
                if time.perf_counter() - start > args.give_up:
                    missed += 1
                    break
                time.sleep(0.01)
            else:
                latencies.append(time.perf_counter() - start)
            time.sleep(rng.uniform(0.3, 0.5))
        out["edit_to_searchable"] = summary_ms(latencies)
        out["edits_never_found"] = missed
        if latencies:
            out["meets_target"] = missed == 0 and out["edit_to_searchable"]["p95_ms"] <= TARGET_P95_MS
    finally:
        out["exit_code"] = server.close()
    return out


def run_size(n: int, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    root = workdir / f"vault-{n}"
    log(f"creating a vault of {n} memories")
    with Vault.init(root, author="bench") as vault:
        _, populated = populate_bulk(vault, Generator(seed=n), n)
        vault.search("warm up")   # build the index before the servers start
        files = sorted(m.path for m in vault.list(tier=["short_term", "mid_term", "long_term"]))
        checks = []
        for _ in range(5):
            start = time.perf_counter()
            vault.refresh(None)
            checks.append(time.perf_counter() - start)
    result: dict[str, Any] = {"memories": n, "populate": populated,
                              "whole_vault_check_in_process": summary_ms(checks), "modes": {}}
    head = _head(root)
    for mode in args.modes:
        log(f"{n} memories, --follow {mode}")
        result["modes"][mode] = run_server(root, files, mode, args, tag=f"n{n}")
    result["server_commits"] = 0 if _head(root) == head else "HEAD moved"
    return result


def _head(root: Path) -> str:
    import subprocess
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--modes", nargs="+", default=["watch", "poll", "off"], choices=["watch", "poll", "off"])
    parser.add_argument("--edits", type=int, default=20, help="timed edits per server")
    parser.add_argument("--idle", type=float, default=65.0, help="seconds of idle CPU measurement (0: skip)")
    parser.add_argument("--searches", type=int, default=30, help="timed searches without edits")
    parser.add_argument("--give-up", type=float, default=5.0,
                        help="seconds after which an edit counts as never found (--follow off never finds)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="gitmem-bench-follow-") as tmp:
        result: dict[str, Any] = {"benchmark": "follow", "machine": machine_info(tmp),
                                  "load_average_1_5_15_before": load_before,
                                  "target_p95_ms": TARGET_P95_MS, "sizes": []}
        for n in args.memories:
            result["sizes"].append(run_size(n, Path(tmp), args))
        result["load_average_1_5_15_after"] = [round(x, 2) for x in os.getloadavg()]
    report(result, args.out)


if __name__ == "__main__":
    main()
