"""How long gitmem's background work holds the vault lock, and whether a writer in
another process ever waits long enough to be refused (``vault_busy``).

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/lockhold.py [--scale 10000] [--keep DIR] [--writes 300] [--out FILE]

On a vault of ``--scale`` memories (made with ``gitmem init --from``, see
``bench/_common.py``), one process makes ``--writes`` writes (``vault.add``) with
pauses of 0 to 1.2 s between them, so the work gitmem does when a process is idle
runs between writes as it does for a user: the deferred ``.git/index`` update, the
merge of small index segments, and packing loose git objects (also run at close).
Every time a thread of that process takes the vault lock, how long it kept it is
recorded, split into the writes themselves (the main thread) and background work
(timer threads, housekeeping), and the background holds also by the work done in
them (``.git/index`` update or repair, index merge, packing).  Meanwhile a second
process makes a write every 0.2 s with a lock timeout of 1 s and counts how often it
was refused and the longest it waited.  Reported: p50/p95/max of each kind of hold, the refusals, CPU beside
wall time, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import add_scale_options, bench_vault, loadavg, log, machine_info, report, summary_ms  # noqa: E402

OTHER_WRITER = """
import json, sys, time
from gitmem.errors import LockTimeout
from gitmem.vault import Vault
vault = Vault.open(sys.argv[1])
vault.services.store.lock.timeout = 1.0
stop, waits, refused = float(sys.argv[2]), [], 0
print("ready", flush=True)
i = 0
while time.time() < stop:
    start = time.perf_counter()
    try:
        vault.add(f"other writer note {i} about the lock", tier="short_term")
    except LockTimeout:
        refused += 1
    waits.append(time.perf_counter() - start)
    i += 1
    time.sleep(0.2)
vault.close()
print(json.dumps({"writes": i, "refused": refused, "longest_s": max(waits, default=0.0)}))
"""


#: Background work told apart in the report: (class path, method) -> label.
WORK = {("gitmem.store.git", "GitStore", "flush_index"): "git_index_update",
        ("gitmem.store.git", "GitStore", "repair_index"): "git_index_repair",
        ("gitmem.search.whoosh", "SearchIndex", "merge_small"): "index_merge",
        ("gitmem.store.git", "GitStore", "housekeep"): "git_pack"}


def instrument(holds: dict[str, list[float]], work: dict[str, list[float]]) -> None:
    """Record how long each outermost hold of the vault lock lasts, by kind of thread,
    and for background holds also by the work done while holding it (``WORK``)."""
    import functools
    import importlib

    from gitmem.store.locking import VaultLock
    original = VaultLock.hold
    main = threading.main_thread()
    seen = threading.local()

    def labelled(method: Any, label: str) -> Any:
        @functools.wraps(method)
        def run(*args: Any, **kwargs: Any) -> Any:
            getattr(seen, "labels", set()).add(label)
            return method(*args, **kwargs)
        return run
    for (module, cls, name), label in WORK.items():
        owner = getattr(importlib.import_module(module), cls)
        setattr(owner, name, labelled(getattr(owner, name), label))

    @contextmanager
    def hold(self: VaultLock) -> Iterator[None]:
        outer = not self.held
        with original(self):
            start = time.perf_counter()
            if outer:
                seen.labels = set()
            try:
                yield
            finally:
                if outer:
                    took = time.perf_counter() - start
                    kind = "write" if threading.current_thread() is main else "background"
                    holds[kind].append(took)
                    if kind == "background":
                        work.setdefault("+".join(sorted(seen.labels)) or "other", []).append(took)
    VaultLock.hold = hold  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_scale_options(parser, 10_000)
    parser.add_argument("--writes", type=int, default=300, help="writes with idle pauses between them")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    result: dict[str, Any] = {"benchmark": "lockhold", "scale": args.scale, "writes": args.writes,
                              "machine": machine_info(tempfile.gettempdir()), "loadavg_before": loadavg()}
    holds: dict[str, list[float]] = {"write": [], "background": []}
    work: dict[str, list[float]] = {}
    instrument(holds, work)
    from gitmem.vault import Vault
    rng = random.Random(5)
    with tempfile.TemporaryDirectory(prefix="gitmem-lockhold-") as tmp:
        root = Path(tmp) / "vault"
        result["vault"] = bench_vault(args.scale, root, args.keep)
        vault = Vault.open(root)
        vault.search("warm up the index")
        duration = args.writes * 0.75 + 30
        other = subprocess.Popen([sys.executable, "-c", OTHER_WRITER, str(root), str(time.time() + duration)],
                                 stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
        assert other.stdout is not None and other.stdout.readline().strip() == "ready"
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(args.writes):
            vault.add(f"lock hold note {i}: the quick review of plan {rng.randrange(10**6)}", tier="short_term")
            time.sleep(rng.uniform(0.0, 1.2))
            if (i + 1) % 50 == 0:
                log(f"{i + 1}/{args.writes} writes")
        vault.close()   # packs what the session left loose
        result["session_wall_s"] = round(time.perf_counter() - start, 1)
        result["session_cpu_s"] = round(time.process_time() - cpu, 1)
        out, _ = other.communicate(timeout=duration + 120)
        result["other_writer"] = json.loads(out.strip().splitlines()[-1])
    result["holds"] = {kind: summary_ms(values) for kind, values in holds.items()}
    result["background_over_100ms"] = sum(1 for s in holds["background"] if s > 0.1)
    result["background_by_work"] = {label: {**summary_ms(values), "over_100ms": sum(s > 0.1 for s in values)}
                                     for label, values in sorted(work.items())}
    result["loadavg_after"] = loadavg()
    report(result, args.out)


if __name__ == "__main__":
    main()
