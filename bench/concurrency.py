"""Write throughput with 1, 2, 4 and 8 concurrent writer processes on a 10k-memory vault.

    /tmp/venv/bin/python bench/concurrency.py [--memories 10000] [--writes 50]

Each writer (``tests/stress_worker.py bench``) opens the vault and its search
index, says it is ready, waits for a common start signal, then makes
``--writes`` writes (60% add, 40% update of one of its own earlier memories;
each one commit, indexed).  Throughput = all writes / (last end - first
start).  The baseline is the same number of writes made by ONE process in the
same run, so ``ratio`` shows what concurrency costs or gains (writes are
serialised by the vault lock; processes overlap only their Python work).
Prints JSON on stdout; progress on stderr.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import Generator, log, machine_info, populate_bulk  # noqa: E402

from gitmem import Vault  # noqa: E402

WORKER = HERE.parent / "tests" / "stress_worker.py"


def run_writers(root: Path, count: int, writes: int, tag: str) -> dict[str, float]:
    """``count`` writer processes, released together; returns the throughput numbers."""
    go = root.parent / f"go-{tag}"
    env = dict(os.environ, GITMEM_BENCH_GO=str(go))
    procs = [subprocess.Popen([sys.executable, str(WORKER), "bench", str(root), f"{tag}w{n}", str(writes),
                               str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for n in range(count)]
    for proc in procs:  # wait until every writer has the vault and index open
        line = proc.stdout.readline() if proc.stdout else ""
        if '"ready"' not in line:
            raise SystemExit(f"writer failed to start: {proc.stderr.read() if proc.stderr else ''}")
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"writer failed:\n{err}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    total = sum(r["writes"] for r in results)
    return {"writers": count, "writes": total, "seconds": round(span, 2),
            "writes_per_s": round(total / span, 1),
            "per_writer_ms_per_write": round(1000 * sum(r["seconds"] / r["writes"] for r in results) / count, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--writes", type=int, default=50, help="writes per writer process")
    parser.add_argument("--writers", default="1,2,4,8")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gitmem-bench-conc-") as tmp:
        root = Path(tmp) / "vault"
        start = time.perf_counter()
        with Vault.init(root, author="bench") as vault:
            _, populate = populate_bulk(vault, Generator(7), args.memories)
            log(f"populated {args.memories} memories in {populate['seconds']} s; building the index")
            vault.reindex()
        log(f"vault ready in {time.perf_counter() - start:.1f} s")
        rows = []
        for count in [int(x) for x in args.writers.split(",")]:
            concurrent = run_writers(root, count, args.writes, f"c{count}")
            single = run_writers(root, 1, args.writes * count, f"s{count}")
            row = {**concurrent, "single_process_writes_per_s": single["writes_per_s"],
                   "ratio_vs_single_process": round(concurrent["writes_per_s"] / single["writes_per_s"], 2)}
            log(json.dumps(row))
            rows.append(row)
        with Vault.open(root) as vault:
            memories = vault.services.store.catalog.count()
    print(json.dumps({"benchmark": "concurrent writers", "vault_memories_at_start": args.memories,
                      "vault_memories_at_end": memories, "writes_per_writer": args.writes,
                      "write_mix": "60% add, 40% update (each one commit, indexed)",
                      "results": rows, "machine": machine_info(tempfile.gettempdir())}, indent=2))


if __name__ == "__main__":
    main()
