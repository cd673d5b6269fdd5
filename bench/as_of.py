"""As-of search benchmark: the vault as it was at a date, at 10k memories.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/as_of.py [--memories 10000] [--commits 1200] [--queries 40] [--out FILE]

Builds a vault of N generated memories (one bulk commit), then makes COMMITS real
writes through the Vault (adds, edits, moves, soft deletes; each one commit, indexed),
with a clock that moves a minute per reading.  Then:

* ``first_use``: the first as-of search, which indexes the whole history once
  (every version of every memory on the branch's line of commits);
* per query kind (word, phrase, boolean, prefix, filtered): ``Vault.search(q,
  as_of=DATE)`` for a random date within the last 1,000 commits, interleaved query by
  query with the same ``Vault.search(q)`` on today's vault (the baseline), p50/p95
  wall and CPU time and the ratio;
* ``after_a_write``: a write followed by an as-of search (the catch-up of one commit);
* ``cli``: whole ``gitmem search Q --as-of DATE`` processes against ``gitmem search Q``,
  interleaved;
* the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Generator, log, machine_info, populate_bulk, report, summary_ms  # noqa: E402
from search import queries  # noqa: E402
from gitmem.vault import Vault  # noqa: E402


class StepClock:
    """Moves one minute each time it is read: every commit gets its own time."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        self.now += timedelta(minutes=1)
        return self.now


def make_history(vault: Vault, gen: Generator, commits: int, rng: random.Random) -> dict[str, Any]:
    """``commits`` writes through the Vault: 30% adds, 50% edits, 10% moves, 10% deletes."""
    ids = [m.id for m in vault.list()]
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(commits):
        roll = rng.random()
        if roll < 0.3 or not ids:
            ids.append(vault.add(**gen.spec()).id)
        elif roll < 0.8:
            vault.update(rng.choice(ids), append=gen.sentence(), force=True)
        elif roll < 0.9:
            ref = rng.choice(ids)
            tier = rng.choice([t for t in ("short_term", "mid_term", "long_term")
                               if t != vault.get(ref).tier])
            vault.move(ref, tier, force=True)
        else:
            vault.delete(ids.pop(rng.randrange(len(ids))), force=True)
        if (i + 1) % 200 == 0:
            log(f"  {i + 1} commits")
    return {"commits": commits, "seconds": round(time.perf_counter() - start, 1),
            "cpu_seconds": round(time.process_time() - cpu, 1)}


def timed_pair(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--commits", type=int, default=1200)
    parser.add_argument("--queries", type=int, default=40, help="queries per kind")
    parser.add_argument("--cli-runs", type=int, default=8)
    parser.add_argument("--workdir", help="keep the vault here (default: a temporary folder)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    rng = random.Random(7)
    gen = Generator(seed=args.memories)
    out: dict[str, Any] = {"machine": machine_info(), "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp) / "vault"
        clock = StepClock()
        with Vault.init(root, author="bench-agent", clock=clock) as vault:
            log(f"populating {args.memories} memories (one bulk commit)")
            populate_bulk(vault, gen, args.memories)
            vault.services.searcher.index  # noqa: B018 - today's index, built as a user's first search would
            log(f"{args.commits} commits through the Vault")
            out["history"] = make_history(vault, gen, args.commits, rng)
            line = vault.services.store.git.walk_new(None, vault.services.store.git.head())
            times = [vault.services.store.git.info(c).time for c in line]
            log("first as-of search (indexes the history once)")
            wall, cpu = timed_pair(lambda: vault.search("plan", as_of="HEAD"))
            versions = vault.services.searcher.as_of_search.versions_indexed()
            out["first_use"] = {"seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
                                "versions_indexed": versions, "commits": len(line),
                                "versions_per_s": round(versions / wall)}
            bodies = [vault.get(m.id).body for m in vault.list(limit=300)]
            sets = queries(random.Random(3), args.queries, gen, bodies)
            recent = times[-1000:]

            def date() -> str:
                t = datetime.fromtimestamp(rng.choice(recent), timezone.utc)
                return t.strftime("%Y-%m-%dT%H:%M:%SZ")

            out["queries"] = {}
            for kind, items in sets.items():
                ours: list[tuple[float, float]] = []
                base: list[tuple[float, float]] = []
                vault.search(items[0][0], as_of=date(), **items[0][2])   # warm-up
                for q, _match, filters in items:
                    when = date()
                    ours.append(timed_pair(lambda: vault.search(q, as_of=when, **filters)))
                    base.append(timed_pair(lambda: vault.search(q, **filters)))
                o, b = summary_ms([w for w, _ in ours]), summary_ms([w for w, _ in base])
                out["queries"][kind] = {
                    "as_of": o, "as_of_cpu": summary_ms([c for _, c in ours]),
                    "today": b, "today_cpu": summary_ms([c for _, c in base]),
                    "ratio_p50": round(o["p50_ms"] / max(b["p50_ms"], 1e-3), 2),
                    "example": items[0][0]}
            log("a write, then an as-of search")
            after = []
            for _ in range(10):
                vault.add(**gen.spec())
                after.append(timed_pair(lambda: vault.search("plan", as_of=date()))[0])
            out["after_a_write"] = summary_ms(after)
        log("whole processes: gitmem search --as-of vs gitmem search")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        word = sets["word"][0][0]
        cmd = [sys.executable, "-m", "gitmem", "-C", str(root), "search", word]
        as_of, today = [], []
        for _ in range(args.cli_runs):
            as_of.append(timed_pair(lambda: subprocess.run(cmd + ["--as-of", date()], env=env,
                                                           capture_output=True, check=True))[0])
            today.append(timed_pair(lambda: subprocess.run(cmd, env=env, capture_output=True,
                                                           check=True))[0])
        a, t = summary_ms(as_of), summary_ms(today)
        out["cli"] = {"as_of": a, "today": t, "ratio_p50": round(a["p50_ms"] / t["p50_ms"], 2)}
    out["load_after"] = os.getloadavg()
    report(out, args.out)
    return out


if __name__ == "__main__":
    main()
