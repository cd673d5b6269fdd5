"""What keeping ``.git/index`` (and MEMORY.md) true to HEAD costs per write, against a baseline.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/git_index.py [--sizes 1000,10000,100000] [--keep DIR] [--rounds 4]
                              [--per-round 8] [--baseline /path/to/other/gitmem] [--out FILE]
    python bench/git_index.py --index-only [--sizes ...]   # the .git/index update alone

For each size, a vault made as a user would (``gitmem init --from``; ``--keep`` reuses a
kept one, see ``bench/_common.py``) is copied twice: one copy for the gitmem checked
out here, one for the gitmem at ``--baseline`` (another checkout, e.g. a clone of an
earlier commit).  Each side runs in its own long-lived worker process with the vault
open; the parent asks them in turn, round by round, for ``--per-round`` creates, so
both meet the same machine load.  A create is what a user waits for: ``vault.add``
then ``vault.flush()``: with the baseline, ``.git/index`` is updated there (otherwise
0.25 s later, by a timer); here, inside the add, before it returns.  Reported per side:
wall and CPU time of the whole create, of the add and of the flush, the time spent on
``.git/index`` itself (the update, or taking git's ``index.lock``, staging the new index
and renaming it), the time MEMORY.md spends finding files that differ from the commit's
tree, and ``git status --porcelain`` right after each create (how often it showed
something).  Each round also makes a burst of ``--per-round`` creates back to back
and one flush (where the baseline's deferred update writes ``.git/index`` once for
all of them): wall, CPU and ``.git/index`` time per create, the median over rounds.
The load average is reported before and after each size.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


# ----------------------------------------------------------------- worker side
def _instrument(totals: dict[str, float]) -> None:
    """Add the seconds spent in the ``.git/index`` work (and MEMORY.md's tree comparison)
    to ``totals``, whichever gitmem this worker imported."""
    from gitmem.store import git as git_module
    from gitmem.write import memory_md

    def timing(owner: Any, name: str, key: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                totals[key] = totals.get(key, 0.0) + time.perf_counter() - start
        setattr(owner, name, wrapped)
    try:    # .git/index maintenance has its own module in newer gitmem
        from gitmem.store.git_index import GitIndex
    except ImportError:
        for name in ("flush_index", "_take_index_lock", "_stage_index", "_release_index_lock"):
            timing(git_module.GitStore, name, "index")
    else:
        for name in ("flush", "_take_lock", "stage", "_release"):
            timing(GitIndex, name, "index")
    timing(memory_md.MemoryMd, "_committed_versions", "memory_md_tree")


def worker(vault_path: str) -> None:
    """Serve ``run N`` lines on stdin: N creates, one JSON line of timings each round."""
    sys.path.insert(0, str(HERE))
    from _common import Generator
    from gitmem.vault import Vault
    totals: dict[str, float] = {}
    _instrument(totals)
    gen = Generator(11)
    vault = Vault.open(vault_path, author="bench-agent <bench@gitmem.local>")
    for _ in range(2):      # warm-up: the search index opens, the catalog is scanned
        vault.add(**gen.spec())
        vault.flush()
    print(json.dumps({"ready": True, "gitmem": str(Path(sys.modules["gitmem"].__file__).parent)}), flush=True)
    for line in sys.stdin:
        mode, count = line.split()[0], int(line.split()[1])
        if mode == "burst":     # back-to-back creates, then one flush: the baseline batches here
            totals.clear()
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(count):
                vault.add(**gen.spec())
            vault.flush()
            wall, used = time.perf_counter() - start, time.process_time() - cpu
            print(json.dumps([{"burst_per_write": wall / count, "burst_per_write_cpu": used / count,
                               "burst_index_per_write": totals.get("index", 0.0) / count}]), flush=True)
            time.sleep(0.3)
            continue
        rows = []
        for _ in range(count):
            spec = gen.spec()
            totals.clear()
            start, cpu = time.perf_counter(), time.process_time()
            vault.add(**spec)
            mid, mid_cpu = time.perf_counter(), time.process_time()
            index_in_add = totals.get("index", 0.0)
            vault.flush()
            end, end_cpu = time.perf_counter(), time.process_time()
            status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=vault_path,
                                    capture_output=True, text=True).stdout
            rows.append({"whole": end - start, "whole_cpu": end_cpu - cpu, "add": mid - start,
                         "add_cpu": mid_cpu - cpu, "flush": end - mid, "flush_cpu": end_cpu - mid_cpu,
                         "index": totals.get("index", 0.0), "index_in_add": index_in_add,
                         "memory_md_tree": totals.get("memory_md_tree", 0.0), "status_dirty": bool(status)})
            time.sleep(0.3)     # past the baseline's deferred-update timer: each create starts idle
        print(json.dumps(rows), flush=True)
    vault.close()


# ----------------------------------------------------------------- the update alone
def index_only(size: int, writes: int) -> dict[str, Any]:
    """The ``.git/index`` update of one write (a new file and MEMORY.md) on an index of
    ``size`` entries made by git, done both ways in one process, alternating: as the
    deferred update does it (``splice_index``: its own ``index.lock``, write, sync,
    rename) and as a write now does it (``index_locked`` around ``GitIndex.stage``).  The
    work is the same; what differs is that it is paid by every write instead of once
    per burst.  Needs no vault, so it runs at sizes whose vault takes long to make."""
    from _common import summary_ms
    from gitmem.store.git import GitStore
    from gitmem.store.git_index import splice_index
    work = Path(tempfile.mkdtemp(prefix=f"gitmem-bench-index-only-{size}-"))
    try:
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], input=b"x\n", cwd=work,
                              capture_output=True, check=True).stdout.decode().strip()
        lines = "".join(f"100644 {blob}\tshort_term/{i % 997:03d}/note-{i:07d}.md\n" for i in range(size))
        subprocess.run(["git", "update-index", "--add", "--index-info"], input=lines.encode(), cwd=work, check=True)
        (work / "MEMORY.md").write_text("x\n")
        store = GitStore(work)
        index = work / ".git" / "index"
        shared = work / ".git" / "gitmem" / "index-layout"
        shared.parent.mkdir(parents=True, exist_ok=True)
        times: dict[str, list[float]] = {"deferred": [], "deferred_cpu": [], "in_write": [], "in_write_cpu": []}
        layout = None
        for n in range(writes):
            st = os.stat(work / "MEMORY.md")
            entries = {f"short_term/{n % 997:03d}/new-{n:05d}.md".encode(): (blob.encode(), st),
                       b"MEMORY.md": (blob.encode(), st)}
            start, cpu = time.perf_counter(), time.process_time()
            layout = splice_index(index, entries, layout, shared)
            times["deferred"].append(time.perf_counter() - start)
            times["deferred_cpu"].append(time.process_time() - cpu)
            entries = {f"short_term/{n % 997:03d}/newer-{n:05d}.md".encode(): (blob.encode(), st),
                       b"MEMORY.md": (blob.encode(), st)}
            start, cpu = time.perf_counter(), time.process_time()
            with store.index_locked():
                store.git_index.stage(entries)  # the step a commit takes, timed alone
                store.git_index.keep_staged()
            times["in_write"].append(time.perf_counter() - start)
            times["in_write_cpu"].append(time.process_time() - cpu)
        store.repo.close()
        listed = subprocess.run(["git", "ls-files"], cwd=work, capture_output=True, text=True, check=True).stdout
        assert len(listed.splitlines()) == size + 2 * writes + 1, "git does not read the index back"
        return {"entries": size, "index_bytes": index.stat().st_size,
                **{k: {m: summary_ms(v)[m] for m in ("p50_ms", "p95_ms")} for k, v in times.items()}}
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------- parent side
def _start(code_root: Path, vault: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(code_root), "GITMEM_AUTHOR": "bench <bench@gitmem.local>"}
    proc = subprocess.Popen([sys.executable, str(HERE / "git_index.py"), "--worker", str(vault)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=str(code_root))
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline())
    if Path(ready["gitmem"]).resolve() != (code_root / "gitmem").resolve():
        raise RuntimeError(f"worker imported {ready['gitmem']}, not {code_root / 'gitmem'}")
    return proc


def _ask(proc: subprocess.Popen[str], count: int, mode: str = "run") -> list[dict[str, Any]]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{mode} {count}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from _common import summary_ms
    out: dict[str, Any] = {}
    for key in ("whole", "whole_cpu", "add", "add_cpu", "flush", "index", "index_in_add", "memory_md_tree"):
        stats = summary_ms([r[key] for r in rows])
        out[key] = {k: stats[k] for k in ("p50_ms", "p95_ms", "mean_ms")}
    out["status_dirty_after_write"] = f"{sum(r['status_dirty'] for r in rows)} of {len(rows)}"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--keep", type=Path, help="folder of kept vaults (see bench/_common.py)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-round", type=int, default=8)
    parser.add_argument("--baseline", type=Path, required=False,
                        help="root of the gitmem checkout to compare with (default: none, this code only)")
    parser.add_argument("--index-only", action="store_true",
                        help="time only the .git/index update of a write, on indexes made by git")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    sys.path.insert(0, str(HERE))
    if args.index_only:
        from _common import loadavg, machine_info
        from _common import report as emit
        before = loadavg()
        sizes = {size: index_only(int(size), 20) for size in args.sizes.split(",")}
        emit({"benchmark": "git_index --index-only", "machine": machine_info(tempfile.gettempdir()),
              "loadavg_before": before, "loadavg_after": loadavg(), "sizes": sizes}, args.out)
        return
    from _common import bench_vault, copy_tree, loadavg, log, machine_info, summary_ms
    from _common import report as emit
    sides = {"current": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    result: dict[str, Any] = {"benchmark": "git_index", "machine": machine_info(tempfile.gettempdir()),
                              "code": {k: str(v) for k, v in sides.items()}, "sizes": {}}
    for size in [int(s) for s in args.sizes.split(",")]:
        work = Path(tempfile.mkdtemp(prefix=f"gitmem-bench-index-{size}-"))
        try:
            made = bench_vault(size, work / "made", keep=args.keep)
            procs = {}
            for side in sides:
                copy_tree(work / "made", work / side)
                log(f"{size}: opening the {side} worker")
                procs[side] = _start(sides[side], work / side)
            entry: dict[str, Any] = {"vault": made, "loadavg_before": loadavg()}
            rows: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
            bursts: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
            for n in range(args.rounds):
                order = list(sides) if n % 2 == 0 else list(reversed(sides))
                for side in order:
                    rows[side] += _ask(procs[side], args.per_round)
                    bursts[side] += _ask(procs[side], args.per_round, "burst")
                log(f"{size}: round {n + 1}/{args.rounds} done")
            for proc in procs.values():
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(timeout=600)
            entry["loadavg_after"] = loadavg()
            entry.update({side: _summary(r) for side, r in rows.items()})
            for side, found in bursts.items():
                for key in ("burst_per_write", "burst_per_write_cpu", "burst_index_per_write"):
                    entry[side][key] = summary_ms([b[key] for b in found])["p50_ms"]
            if "baseline" in rows:
                cur, base = entry["current"], entry["baseline"]
                entry["whole_p50_change_ms"] = round(cur["whole"]["p50_ms"] - base["whole"]["p50_ms"], 2)
                entry["whole_cpu_p50_change_ms"] = round(cur["whole_cpu"]["p50_ms"] - base["whole_cpu"]["p50_ms"], 2)
            result["sizes"][str(size)] = entry
        finally:
            shutil.rmtree(work, ignore_errors=True)
    emit(result, args.out)


if __name__ == "__main__":
    main()
