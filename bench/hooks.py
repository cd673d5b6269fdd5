"""Git hooks benchmark: what gitmem's hooks add to a person's ``git commit``.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/hooks.py [--memories 1000] [--commits 10] [--out FILE]

A vault of ``--memories`` memories (one bulk commit, search index built) gets
gitmem's hooks installed.  Then, ``--commits`` times, one memory file is edited
and committed with ``git commit -a -m ...`` as a whole process, once with the
hooks and once without (``core.hooksPath`` pointing at an empty folder), the two
interleaved so both see the same machine load.  For each commit: wall time, and
the CPU time (user + system) of git and everything it ran (the hook scripts and
their Python), from ``resource.getrusage(RUSAGE_CHILDREN)`` deltas.  The
"hooks cost" is the difference of the medians.  The post-* hooks leave the search
index to catch up in the next gitmem process, so that process is timed too
(``next_gitmem_process``: a ``gitmem search`` after the commits, then another).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Generator, log, machine_info, populate_bulk, report, summary_ms  # noqa: E402
from gitmem.outside.hooks import install_hooks  # noqa: E402
from gitmem.vault import Vault  # noqa: E402

TARGET_CPU_MS = 200.0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _commit(root: Path, message: str, extra: list[str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one ``git commit -a`` process."""
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    subprocess.run(["git", *extra, "commit", "-q", "-a", "-m", message], cwd=root, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - wall0, _children_cpu() - cpu0


def _edit(root: Path, rel: str, line: str) -> None:
    path = root / rel
    path.write_text(path.read_text(encoding="utf-8").rstrip("\n") + f"\n\n{line}\n", encoding="utf-8")


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    root = workdir / "vault"
    load_before = [round(x, 2) for x in os.getloadavg()]
    vault = Vault.init(root, author="bench <bench@example.com>")
    log(f"populating {args.memories} memories")
    _, populate = populate_bulk(vault, Generator(7), args.memories)
    vault.reindex()                     # a vault in use has its search index
    install_hooks(vault)
    paths = sorted(m.path for m in vault.list(status=None))
    vault.close()
    empty_hooks = workdir / "no-hooks"
    empty_hooks.mkdir()
    plain = ["-c", f"core.hooksPath={empty_hooks}"]
    runs: dict[str, list[tuple[float, float]]] = {"hooks": [], "plain": []}
    _edit(root, paths[0], "warm-up")     # first commit pays cold caches: not timed
    _commit(root, "warm-up", [])
    for i in range(args.commits):
        for mode, extra in (("hooks", []), ("plain", plain)) if i % 2 == 0 else \
                (("plain", plain), ("hooks", [])):
            rel = paths[(2 * i + (mode == "plain")) % len(paths) + 1 if len(paths) > 1 else 0]
            _edit(root, rel, f"edit {i} {mode}")
            runs[mode].append(_commit(root, f"edit {i} ({mode})", extra))
    # The post-* hooks leave the caches to the next gitmem process: what that costs it.
    catch_up = {}
    for label in ("first_search_after_commits", "second_search"):
        cpu0, wall0 = _children_cpu(), time.perf_counter()
        subprocess.run([sys.executable, "-m", "gitmem", "search", "edit", "--limit", "1"], cwd=root,
                       check=True, stdout=subprocess.DEVNULL)
        catch_up[label] = {"wall_ms": round((time.perf_counter() - wall0) * 1000, 1),
                           "cpu_ms": round((_children_cpu() - cpu0) * 1000, 1)}
    log("done")
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True,
                            check=True).stdout

    def stats(mode: str) -> dict[str, Any]:
        walls, cpus = [w for w, _ in runs[mode]], [c for _, c in runs[mode]]
        return {"wall": summary_ms(walls), "cpu": summary_ms(cpus)}

    result = {name: stats(name) for name in runs}
    hooks_cpu = statistics.median(c for _, c in runs["hooks"]) - statistics.median(c for _, c in runs["plain"])
    hooks_wall = statistics.median(w for w, _ in runs["hooks"]) - statistics.median(w for w, _ in runs["plain"])
    return {
        "benchmark": "git commit with gitmem hooks",
        "memories": args.memories, "commits": args.commits, "populate": populate,
        "git_commit": result,
        "hooks_cost": {"cpu_ms": round(hooks_cpu * 1000, 1), "wall_ms": round(hooks_wall * 1000, 1),
                       "cpu_with_hooks_p50_ms": result["hooks"]["cpu"]["p50_ms"],
                       "target_cpu_ms": TARGET_CPU_MS,
                       "meets_target": result["hooks"]["cpu"]["p50_ms"] <= TARGET_CPU_MS},
        # `gitmem search` processes after the timed commits: the first catches the index up
        # with the 2 x --commits files committed by hand, the second has nothing to do.
        "next_gitmem_process": catch_up,
        "git_status_clean": status == "",
        "loadavg_before": load_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "machine": machine_info(workdir),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=1000, help="vault size")
    parser.add_argument("--commits", type=int, default=10, help="timed commits per mode")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gitmem-bench-hooks-") as tmp:
        result = run(args, Path(tmp))
    report(result, args.out)


if __name__ == "__main__":
    main()
