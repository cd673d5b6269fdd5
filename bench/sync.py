"""Sync benchmark: time for ``vault.sync()`` to take in N incoming commits, against
``git pull`` (git CLI) of the same commits in the same run.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/sync.py [--commits 100 1000] [--memories 300] [--out FILE]

For each N, in a temporary folder: vault A (``--memories`` memories) is pushed
to a bare remote and cloned twice: vault B (gitmem) and a plain git clone G.
A then makes N commits (a mix of adds, body edits, tag edits and tier moves)
and pushes them.  Two scenarios, each measured for gitmem and git:

* **fast_forward**: B has nothing new.  gitmem: ``B.sync()`` (fetch,
  fast-forward of the branch, working tree and ``.git/index``, then catalog,
  history and search index catch-up; the index was opened before, so its
  update is included).  git: ``git pull --ff-only`` in G.
* **merge**: B (and G) first made one local commit to a different memory.
  gitmem: ``B.sync()`` (fetch, memory-by-memory merge commit, catch-up,
  push).  git: ``git pull --no-rebase --no-edit`` + ``git push`` in G.

``ratio`` = gitmem time / git time.  git's pull does not update a search
index or a memory catalog, so a ratio above 1 is expected.
"""

from __future__ import annotations

import argparse
import random
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

from _common import log, machine_info, report  # noqa: E402
from gitmem import Vault  # noqa: E402


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _timed_git(cwd: Path, *commands: list[str]) -> float:
    start = time.perf_counter()
    for args in commands:
        _git(cwd, *args)
    return time.perf_counter() - start


def _writer_commits(vault: Vault, ids: list[str], n: int, rng: random.Random) -> str:
    """N commits through the public API, like a busy agent on another machine;
    returns the last word written into a body."""
    last = ""
    for i in range(n):
        roll = rng.random()
        ref = rng.choice(ids)
        if roll < 0.75:
            last = f"word{i}"
        if roll < 0.35:
            ids.append(vault.add(f"Incoming note {i}", f"Arrived word{i} from the other machine.\n",
                                 tags=["incoming"]).id)
        elif roll < 0.75:
            vault.update(ref, append=f"Edit {i}: more detail word{i}.")
        elif roll < 0.9:
            vault.update(ref, add_tags=[f"t{i % 7}"])
        else:
            current = vault.get(ref).tier
            vault.move(ref, "mid_term" if current != "mid_term" else "long_term")
    return last


def run_size(n: int, memories: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="gitmem-bench-sync-"))
    env_git = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    try:
        remote = work / "remote.git"
        _git(work, "init", "-q", "--bare", "-b", "main", str(remote))
        a = Vault.init(work / "a", author="writer")
        a.add_remote("origin", str(remote))
        ids = [a.add(f"Base memory {i}", f"Base text {i} about topic{i % 40}.\n", tags=["base"]).id
               for i in range(memories)]
        a.sync()
        results: dict[str, Any] = {"incoming_commits": n, "memories": memories}
        for scenario in ("fast_forward", "merge"):
            b = Vault.clone(str(remote), work / f"b-{scenario}", author="reader")
            g = work / f"g-{scenario}"
            _git(work, "clone", "-q", str(remote), str(g))
            b.search("base")  # open the index: its catch-up is part of the sync cost
            if scenario == "merge":
                local_ref = ids[0]
                b.update(local_ref, meta={"importance": 5})
                target = g / b.get(local_ref).path
                target.write_text(target.read_text(encoding="utf-8").replace("Base text", "Base text (local)"),
                                  encoding="utf-8")
                _git(g, *env_git, "commit", "-q", "-am", "local edit")
            log(f"N={n} {scenario}: writing {n} commits on A")
            word = _writer_commits(a, ids[1:] if scenario == "merge" else ids, n, rng)
            a.sync()
            start = time.perf_counter()
            report = b.sync()
            gitmem_s = time.perf_counter() - start
            if scenario == "fast_forward":
                git_s = _timed_git(g, ["pull", "-q", "--ff-only"])
            else:
                git_s = _timed_git(g, [*env_git, "pull", "-q", "--no-rebase", "--no-edit"], ["push", "-q"])
            hits = b.search(word, include_inactive=True).total
            results[scenario] = {
                "gitmem_sync_s": round(gitmem_s, 3), "git_cli_s": round(git_s, 3),
                "ratio": round(gitmem_s / git_s, 2) if git_s else None,
                "action": report.action, "arrived": report.arrived, "files_changed": len(report.changed),
                "conflicts": len(report.conflicts), "pushed": report.pushed,
                "last_word_searchable": hits > 0, "gitmem_timings_ms": report.timings_ms,
            }
            log(f"N={n} {scenario}: gitmem {gitmem_s:.3f}s, git {git_s:.3f}s")
            b.close()
        a.close()
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, nargs="+", default=[100, 1000],
                        help="Incoming commit counts to measure (default: 100 1000).")
    parser.add_argument("--memories", type=int, default=300, help="Memories in the vault before (default 300).")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", help="Also write the JSON here.")
    args = parser.parse_args()
    out = {"benchmark": "sync", "machine": machine_info(),
           "sizes": [run_size(n, args.memories, args.seed) for n in args.commits]}
    report(out, args.out)


if __name__ == "__main__":
    main()
