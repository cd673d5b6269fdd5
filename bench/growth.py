"""Growth of ``.git`` per write, and what gitmem's housekeeping costs, at 1k and 10k memories.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/growth.py [--sizes 1000,10000] [--writes 1000] [--baseline DIR] [--out FILE]

For each size N a fresh vault is filled with N generated memories (one bulk
commit), then ``--writes`` writes of ~300-byte memories go through
``Vault.add`` / ``Vault.update`` (60% / 40%), with a pause long enough for the
idle timer every 40 writes, as an agent's session has.  Measured: bytes added
under ``.git/objects`` (disk blocks, as ``du`` counts them, and apparent size)
per write once the vault was closed (gitmem's own housekeeping has run), the
longest time housekeeping held the vault lock (the ``.git/index`` update and
the packing, each timed around the call that holds it), and the wall and CPU
time of the packing.

``--baseline DIR`` names a checkout of gitmem to compare with (for example
``git worktree add /tmp/gitmem-base <commit>``): each size then runs in both,
one after the other, in alternating order, each in its own process.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
AUTHOR = "bench-agent <bench@gitmem.local>"
PAUSE_EVERY = 40
PAUSE = 0.4   # longer than the vault's idle delay (0.25 s)


def objects_usage(git_dir: Path) -> dict[str, int]:
    """Disk blocks (bytes), apparent bytes and file count of ``.git/objects``, folders included."""
    disk = apparent = files = 0
    for folder, dirs, names in os.walk(git_dir / "objects"):
        for name in [*dirs, *names]:
            st = os.lstat(os.path.join(folder, name))
            disk += st.st_blocks * 512
            apparent += st.st_size
            files += name in names
    return {"disk": disk, "apparent": apparent, "files": files}


def worker(code: Path, size: int, writes: int, seed: int) -> dict[str, Any]:
    """One vault, one code version (``code`` is put first on ``sys.path``)."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(code))
    from _common import Generator, populate_bulk
    from gitmem.vault import Vault
    gen = Generator(seed=seed)
    work = Path(tempfile.mkdtemp(prefix="gitmem-bench-growth-"))
    root = work / "vault"
    vault = Vault.init(root, author=AUTHOR)
    populate_bulk(vault, gen, size)
    vault.close()
    vault = Vault.open(root, author=AUTHOR)
    store = vault.services.store.git
    holds: dict[str, list[float]] = {"index_flush": [], "packing": []}
    runs: list[dict[str, Any]] = []
    new_code = hasattr(store, "housekeep")

    def timed_hold(name: str, func: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter(), time.thread_time()
            result = func(*args, **kwargs)
            seconds = time.perf_counter() - start
            if name == "index_flush":
                holds[name].append(seconds)
            elif new_code:
                if result is not None:
                    runs.append(result.to_dict())
                    holds[name].extend(result.lock_holds)
            elif result:     # the old packing ran with the vault lock held throughout
                holds[name].append(seconds)
                runs.append({"packed": result, "seconds": round(seconds, 3),
                             "cpu_seconds": round(time.thread_time() - cpu, 3)})
            return result
        return wrapper

    store.flush_index = timed_hold("index_flush", store.flush_index)  # type: ignore[method-assign]
    if new_code:
        store.housekeep = timed_hold("packing", store.housekeep)  # type: ignore[method-assign]
    else:
        store.pack_if_needed = timed_hold("packing", store.pack_if_needed)  # type: ignore[method-assign]
    before = objects_usage(store.git_dir)
    ids: list[str] = []
    sizes: list[int] = []
    started = time.perf_counter()
    for i in range(writes):
        if ids and gen.rng.random() < 0.4:
            vault.update(gen.rng.choice(ids), append=gen.sentence()[:80])
        else:
            body = " ".join(gen.sentence() for _ in range(2))[:220]
            memory = vault.add(gen.title()[:60], body, tags=gen.rng.sample(["work", "ops", "idea", "todo"], 1))
            ids.append(memory.id)
            sizes.append((root / memory.path).stat().st_size)
        if (i + 1) % PAUSE_EVERY == 0:
            time.sleep(PAUSE)   # an idle moment: the deferred index update and packing run
    write_seconds = time.perf_counter() - started
    vault.close()             # what every process does last: housekeeping runs if needed
    after = objects_usage(store.git_dir)
    count = subprocess.run(["git", "count-objects", "-v"], cwd=root, capture_output=True, text=True).stdout
    # The same history with no loose object left: what each write costs in the long run
    # (the loose objects left above are at most gitmem's packing threshold, whatever N).
    from gitmem.store.git import GitStore
    again = GitStore(root)
    if new_code:
        again.housekeep(force=True)
    else:
        with vault.services.store.lock.__class__(again.git_dir / "gitmem" / "lock").hold():
            again.pack_if_needed(threshold=0)
    again.repo.close()
    packed = objects_usage(store.git_dir)
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=root, capture_output=True, text=True)
    memory_md = (root / "MEMORY.md").stat().st_size
    subprocess.run(["rm", "-rf", str(work)], check=True)
    packing = [r for r in runs if r.get("packed") or r.get("merged_packs")]
    return {
        "memories": size, "writes": writes, "avg_memory_file_bytes": round(sum(sizes) / max(1, len(sizes))),
        "memory_md_bytes": memory_md, "write_seconds": round(write_seconds, 1),
        "growth_per_write_disk_bytes": round((after["disk"] - before["disk"]) / writes),
        "growth_per_write_apparent_bytes": round((after["apparent"] - before["apparent"]) / writes),
        "growth_per_write_all_packed_disk_bytes": round((packed["disk"] - before["disk"]) / writes),
        "objects_files_after": after["files"],
        "count_objects": dict(line.split(": ", 1) for line in count.splitlines() if ": " in line),
        "fsck_ok": fsck.returncode == 0 and not fsck.stdout.strip(),
        "longest_lock_hold_ms": {name: round(max(values, default=0.0) * 1000, 1) for name, values in holds.items()},
        "index_flushes": len(holds["index_flush"]),
        "packing_runs": len(packing),
        "packing_seconds_total": round(sum(r.get("seconds", 0.0) for r in packing), 2),
        "packing_cpu_seconds_total": round(sum(r.get("cpu_seconds", 0.0) for r in packing), 2),
        "packing_runs_detail": packing[-5:],
    }


def run_worker(code: Path, size: int, writes: int, seed: int) -> dict[str, Any]:
    """:func:`worker` in a fresh interpreter, so the two code versions never mix."""
    load = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, __file__, "--worker", str(code), "--sizes", str(size),
                           "--writes", str(writes), "--seed", str(seed)],
                          capture_output=True, text=True, cwd=str(ROOT))
    if proc.returncode != 0:
        return {"error": proc.stderr[-3000:]}
    result = json.loads(proc.stdout)
    result["loadavg_1m_start_end"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--writes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--baseline", type=Path, help="a checkout of gitmem to compare with")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, int(args.sizes), args.writes, args.seed)))
        return {}
    sys.path.insert(0, str(HERE))
    from _common import log, machine_info, report
    result: dict[str, Any] = {"benchmark": "gitmem .git growth and housekeeping",
                              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "machine": machine_info(tempfile.gettempdir()),
                              "config": {"writes": args.writes, "pause_every": PAUSE_EVERY, "pause_s": PAUSE,
                                         "baseline": str(args.baseline) if args.baseline else None},
                              "sizes": {}}
    started = time.perf_counter()
    for turn, size in enumerate(int(s) for s in args.sizes.split(",") if s.strip()):
        variants = [("gitmem", ROOT)] + ([("baseline", args.baseline)] if args.baseline else [])
        if turn % 2:
            variants.reverse()   # interleaved: neither version always runs first
        entry: dict[str, Any] = {}
        for name, code in variants:
            log(f"N={size}: {args.writes} writes with {name}")
            entry[name] = run_worker(code, size, args.writes, args.seed)
        if "baseline" in entry and "error" not in entry["baseline"] and "error" not in entry["gitmem"]:
            entry["growth_ratio_gitmem_over_baseline"] = round(
                entry["gitmem"]["growth_per_write_disk_bytes"] / max(1, entry["baseline"]["growth_per_write_disk_bytes"]), 3)
        result["sizes"][str(size)] = entry
    result["machine"]["loadavg_1_5_15_end"] = [round(x, 2) for x in os.getloadavg()]
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    report(result, args.out)
    return result


if __name__ == "__main__":
    main()
