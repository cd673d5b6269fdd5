"""Fleet benchmark: many replicas of one vault, each its own process with an agent
(``gitmem mcp``, with ``--sync`` where gitmem has background sync), the Python
API and people editing files, syncing through one server reached by path, smart
HTTP and ssh, with the server stopped and started at random moments; the same
harness as ``tests/test_fleet.py`` (:mod:`tests.fleet`), at a larger size.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/fleet.py [--replicas 8] [--writes 1000] [--small] [--idle-seconds 60] [--out FILE]

(``--writes`` counts operations across the whole fleet: adds, appends, moves,
deletes, merges, people's saves.)

Reports:

* ``converge_s``: seconds from the moment the last partition healed until every
  replica and the server hold the same commit (by background sync alone when
  gitmem has it: ``background_converge_s``; then with explicit syncs in random
  order: ``converge_s``);
* ``sync_cost``: a fresh gitmem clone and a plain git clone catch up on the
  same incoming commits, measured in alternating order in the same run:
  ``vault.sync()`` against ``git fetch`` + ``git merge``, per incoming commit;
* ``idle_mcp``: CPU used by the replicas' idle ``gitmem mcp`` processes over
  ``--idle-seconds`` (from ``/proc/<pid>/stat``), with the load average;
* ``checks``: the fleet's invariants (same tree everywhere, every
  acknowledged write found, no conflict markers, purged canaries nowhere,
  the server's history only moved forward, ``git fsck``), as problem counts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import loadavg, log, machine_info, proc_cpu_seconds, report  # noqa: E402

from tests.fleet import FleetConfig, FleetRun, Worker, check_fleet, features, run_fleet, summary  # noqa: E402


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def sync_cost(run: FleetRun, workers: list[Worker], servers: dict[str, Any], rounds: int,
              writes: int) -> dict[str, Any]:
    """gitmem sync against git fetch + git merge, catching up on the same commits, interleaved."""
    from gitmem import Vault
    work = run.config.work / "cost"
    work.mkdir()
    url = servers["urls"]["path"]
    vault = Vault.clone(url, work / "gitmem", author="catch-up")
    plain = work / "git"
    _git(work, "clone", "-q", url, str(plain))
    env_git = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    rows = []
    try:
        vault.search("fleet")   # the search index is open: its catch-up is part of the cost
        for r in range(rounds):
            for i, w in enumerate(workers[:3]):   # others write and push
                ops: list[dict[str, Any]] = [{"op": "api_add", "title": f"Cost {r} {i} {n}",
                                              "token": f"cost{r}x{i}x{n}"} for n in range(writes)]
                w.do([*ops, {"op": "sync"}])
            order = ("gitmem", "git") if r % 2 == 0 else ("git", "gitmem")
            row: dict[str, Any] = {"order": order}
            for who in order:
                if who == "gitmem":
                    start = time.perf_counter()
                    rep = vault.sync()
                    row["gitmem_s"] = time.perf_counter() - start
                    row["gitmem_commits"] = rep.arrived
                else:
                    start = time.perf_counter()
                    _git(plain, "fetch", "-q", "origin")
                    fetched = time.perf_counter()
                    count = int(_git(plain, "rev-list", "--count", "HEAD..origin/main").strip())
                    between = time.perf_counter()
                    _git(plain, *env_git, "merge", "-q", "--no-edit", "origin/main")
                    row["git_s"] = (fetched - start) + (time.perf_counter() - between)
                    row["git_commits"] = count
            rows.append(row)
    finally:
        vault.close()
    per_gitmem = [r["gitmem_s"] / r["gitmem_commits"] for r in rows if r["gitmem_commits"]]
    per_git = [r["git_s"] / r["git_commits"] for r in rows if r["git_commits"]]
    mean_gitmem = sum(per_gitmem) / len(per_gitmem) if per_gitmem else None
    mean_git = sum(per_git) / len(per_git) if per_git else None
    return {"scenario": "a clone with nothing new catches up (fast-forward) on commits 3 replicas pushed",
            "rounds": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows],
            "gitmem_ms_per_commit": round(mean_gitmem * 1000, 2) if mean_gitmem else None,
            "git_fetch_merge_ms_per_commit": round(mean_git * 1000, 2) if mean_git else None,
            "ratio": round(mean_gitmem / mean_git, 2) if mean_gitmem and mean_git else None}


def idle_cpu(workers: list[Worker], seconds: float) -> dict[str, Any]:
    """CPU seconds the replicas' ``gitmem mcp`` processes use while nobody writes."""
    pids = [w.mcp_pid for w in workers]
    before = {pid: proc_cpu_seconds(pid) for pid in pids}
    load_before = loadavg()
    start = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - start
    used = [proc_cpu_seconds(pid) - before[pid] for pid in pids]
    return {"processes": len(pids), "seconds": round(wall, 1),
            "cpu_s_per_process": [round(u, 3) for u in used],
            "cpu_percent_mean": round(100 * sum(used) / len(used) / wall, 3) if used else None,
            "loadavg_before": load_before, "loadavg_after": loadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--writes", type=int, default=1000,
                        help="Operations across the whole fleet (default 1000), in rounds of --ops-per-round "
                             "per replica.")
    parser.add_argument("--ops-per-round", type=int, default=10)
    parser.add_argument("--small", action="store_true",
                        help="A quick run: 5 replicas, 100 operations, 10 s idle, 2 cost rounds.")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sync-interval", type=float, default=5.0)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--cost-rounds", type=int, default=4)
    parser.add_argument("--cost-writes", type=int, default=20, help="Commits each of 3 replicas pushes per round.")
    parser.add_argument("--keep", action="store_true", help="Keep the work folder (printed).")
    parser.add_argument("--out", help="Also write the JSON here.")
    args = parser.parse_args()
    if args.small:
        args.replicas, args.writes, args.idle_seconds, args.cost_rounds, args.ops_per_round = 5, 100, 10.0, 2, 5
    have = features()
    work = Path(tempfile.mkdtemp(prefix="gitmem-bench-fleet-"))
    rounds = max(2, args.writes // (args.replicas * args.ops_per_round))
    measured: dict[str, Any] = {}
    problems: dict[str, list[str]] = {}

    def after(run: FleetRun, workers: list[Worker], servers: dict[str, Any]) -> None:
        log(f"idle gitmem mcp for {args.idle_seconds:g} s")
        measured["idle_mcp"] = idle_cpu(workers, args.idle_seconds)
        log("sync cost against git fetch + git merge")
        measured["sync_cost"] = sync_cost(run, workers, servers, args.cost_rounds, args.cost_writes)
        # The cost rounds wrote and pushed from 3 replicas: bring every replica up to the
        # server again, so the fleet's checks compare converged replicas.
        for _ in range(2):
            for w in workers:
                w.do([{"op": "sync"}])

    old_home = os.environ.get("HOME")
    os.environ["HOME"] = str(work / "home")   # no user settings leak in (the replicas get their own too)
    try:
        cfg = FleetConfig(work=work / "run", replicas=args.replicas, rounds=rounds, ops_per_round=args.ops_per_round,
                          seed=args.seed, people=tuple(range(1, args.replicas, 3)),
                          background_sync=have["background_sync"], purge_syncs=have["purge_syncs"],
                          sync_interval=args.sync_interval, converge_timeout=600.0, log=log, after=after)
        started = time.perf_counter()
        run = run_fleet(cfg)
        wall = time.perf_counter() - started
        log("checking")
        problems = check_fleet(run)
    except BaseException:
        args.keep = True   # what went wrong stays there to look at
        raise
    finally:
        if old_home is not None:
            os.environ["HOME"] = old_home
        if args.keep or any(problems.values()):
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report({"benchmark": "fleet", "machine": machine_info(), "features": have,
            "size": {"replicas": args.replicas, "rounds": rounds, "ops_per_round": args.ops_per_round},
            "wall_s": round(wall, 1),
            "background_converge_s": run.background_converge_s, "converge_s": run.converge_s,
            **measured, "checks": {k: len(v) for k, v in problems.items()},
            "problems": {k: v[:5] for k, v in problems.items() if v}, "run": summary(run)}, args.out)


if __name__ == "__main__":
    main()
