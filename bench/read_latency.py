"""Read latency while another process holds the vault lock, against an idle vault.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/read_latency.py [--scale 1000] [--keep DIR] [--runs 10] [--out FILE]

On a vault of ``--scale`` memories (made with ``gitmem init --from``, see
``bench/_common.py``), the same reads are timed in three situations:

* ``idle``: nothing else runs;
* ``held``: another process holds the vault lock the whole time (as a long write,
  a sync or a purge would), taken exactly as gitmem takes it;
* ``writing``: another process writes memories back to back (``vault.add``).

The reads, each as a user sees it: ``gitmem search WORD`` and ``gitmem ls`` as whole
processes (wall time, the child's CPU time, and the exit codes: any that is not 0 is
counted as an error), and in one process the API: ``Vault.open`` + ``search`` +
``close``, and ``search`` on a Vault kept open.  Reads take no lock, so the three
situations should differ only by the CPU the other process takes from a shared
machine.  Reported: p50/p95/max of each, CPU beside wall time, and the load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import add_scale_options, bench_vault, loadavg, log, machine_info, report, summary_ms  # noqa: E402

HOLDER = """
import sys, time
from pathlib import Path
from gitmem.store.locking import VaultLock
with VaultLock(Path(sys.argv[1]) / ".git" / "gitmem" / "lock", timeout=60).hold():
    print("ready", flush=True)
    sys.stdin.read()          # until the benchmark closes our stdin
"""

WRITER = """
import sys
from gitmem.vault import Vault
vault = Vault.open(sys.argv[1])
print("ready", flush=True)
i = 0
import select
while not select.select([sys.stdin], [], [], 0)[0]:
    vault.add(f"background writer note {i} about the quarterly review", tier="short_term")
    i += 1
vault.close()
print(i, flush=True)
"""

WORDS = ["review", "plan", "deploy", "quick", "meeting", "notes", "budget", "design", "release", "test"]


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli_reads(root: Path, runs: int) -> dict[str, Any]:
    """``gitmem search WORD`` and ``gitmem ls``, each ``runs`` times, as whole processes."""
    out: dict[str, Any] = {}
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    for name, argv in (("cli_search", lambda i: ["search", WORDS[i % len(WORDS)]]),
                       ("cli_ls", lambda i: ["ls", "--limit", "20"])):
        walls, cpus, errors = [], [], 0
        for i in range(runs):
            cpu, start = child_cpu(), time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "gitmem", "--vault", str(root), *argv(i)],
                                  capture_output=True, text=True, env=env, timeout=600)
            walls.append(time.perf_counter() - start)
            cpus.append(child_cpu() - cpu)
            errors += done.returncode != 0
        out[name] = {**summary_ms(walls), "cpu": summary_ms(cpus), "errors": errors}
    return out


def api_reads(root: Path, runs: int) -> dict[str, Any]:
    """In this process: open + search + close, and searches on a Vault kept open."""
    from gitmem.vault import Vault

    from gitmem.errors import GitmemError

    def measure(func: Callable[[int], Any]) -> dict[str, Any]:
        walls, cpus, errors = [], [], 0
        for i in range(runs):
            start, cpu = time.perf_counter(), time.process_time()
            try:
                func(i)
            except GitmemError:   # vault_busy: the read waited for the lock and gave up
                errors += 1
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
        return {**summary_ms(walls), "cpu": summary_ms(cpus), "errors": errors}

    def open_search_close(i: int) -> None:
        with Vault.open(root, lock_timeout=5) as vault:
            vault.search(WORDS[i % len(WORDS)])
    kept = Vault.open(root, lock_timeout=5)
    result: dict[str, Any] = {}
    try:
        result = {"api_open_search_close": measure(open_search_close),
                  "api_search": measure(lambda i: kept.search(WORDS[(i + 3) % len(WORDS)]))}
    finally:
        try:
            kept.close()
        except GitmemError:
            result.setdefault("close_errors", 1)
    return result


def situation(root: Path, runs: int, other: str | None) -> dict[str, Any]:
    """The reads, with ``other`` (a script: HOLDER, WRITER or None) running beside them."""
    proc = None
    if other is not None:
        proc = subprocess.Popen([sys.executable, "-c", other, str(root)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    started, load = time.perf_counter(), loadavg()
    out = ""
    try:
        result = {**cli_reads(root, runs), **api_reads(root, runs)}
    finally:
        if proc is not None:
            out, _ = proc.communicate(input="stop\n", timeout=600)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["loadavg_start"] = load
    if other is WRITER and out.strip():
        result["background_writes"] = int(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_scale_options(parser, 1000)
    parser.add_argument("--runs", type=int, default=10, help="times each read is timed in each situation")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    result: dict[str, Any] = {"benchmark": "read_latency", "scale": args.scale, "runs": args.runs,
                              "machine": machine_info(tempfile.gettempdir()), "loadavg_before": loadavg()}
    with tempfile.TemporaryDirectory(prefix="gitmem-readlat-") as tmp:
        root = Path(tmp) / "vault"
        result["vault"] = bench_vault(args.scale, root, args.keep)
        for name, other in (("idle", None), ("held", HOLDER), ("writing", WRITER)):
            log(f"reads, {name}")
            result[name] = situation(root, args.runs, other)
    result["loadavg_after"] = loadavg()
    report(result, args.out)


if __name__ == "__main__":
    main()
