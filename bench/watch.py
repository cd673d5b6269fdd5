"""Watcher benchmark: edit-to-searchable and edit-to-commit latency of ``gitmem watch``.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/watch.py [--scale 10000] [--keep DIR] [--edits 30] [--files 10] [--idle 30]
                          [--debounce 0.3] [--commit-delay 2.0] [--out FILE]

A vault of ``--scale`` memories (default 10,000; ``--memories`` is the old name)
is made in a temporary folder as a user would: a Zipf-like corpus of Markdown
notes imported with ``gitmem init --from`` (search index included); ``--keep
DIR`` keeps it for later runs, which work on a copy.  A watcher runs in a child
process (as ``gitmem watch`` would).  The benchmark process then saves
``--files`` of the memory files in turn the way editors do (write a temp file,
rename it over the note), one unique word per edit, and measures for each edit:

* **edit -> searchable**: until a search for the word finds the memory.  Each
  poll opens a fresh reader of the index (a new process would see the same);
* **edit -> committed**: until ``HEAD`` holds the new content.

Also reported: the watcher's peak RSS (``VmHWM``, target <= 200 MiB) and its CPU
time, busy and idle, and the load average before and after.

Edits go to the files in turn, ~0.25-0.45 s apart: the vault is never quiet
for the commit delay until the last edit, so the commit latency shows the
batching (one commit for the whole burst), not the cost of a commit.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (add_scale_options, bench_vault, loadavg, log, machine_info,  # noqa: E402
                     proc_cpu_seconds, proc_peak_rss_mib, report, summary_ms)
from gitmem.store.git import blob_id  # noqa: E402
from gitmem.search.whoosh import SearchIndex  # noqa: E402
from gitmem.vault import Vault  # noqa: E402

TARGET_P95_MS = 1500.0
TARGET_RSS_MIB = 200.0
CHILD = """\
import sys
from gitmem import Vault
from gitmem.outside.watcher import Watcher
vault = Vault.open(sys.argv[1])
watcher = Watcher(vault, debounce=float(sys.argv[2]), commit_delay=float(sys.argv[3]), quiet=True)
watcher.run_forever(on_ready=lambda: print("ready", flush=True))
vault.close()
"""


def search_total(index_dir: Path, word: str) -> int:
    index = SearchIndex(index_dir)
    try:
        return index.search(word).total
    finally:
        index.close()


def head_blob(root: Path, rel: str) -> str | None:
    out = subprocess.run(["git", "rev-parse", f"HEAD:{rel}"], cwd=root, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def collect_commits(root: Path, pending: list[tuple[str, str, float]],
                    committed: list[float]) -> list[tuple[str, str, float]]:
    """Record the latency of edits whose content HEAD now holds; return the others."""
    still = []
    for rel, blob, start in pending:
        if head_blob(root, rel) == blob:
            committed.append(time.perf_counter() - start)
        else:
            still.append((rel, blob, start))
    return still


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    root = workdir / "vault"
    made = bench_vault(args.scale, root, args.keep)  # search index built by the import
    with Vault.open(root) as vault:
        paths = sorted(m.path for m in vault.list(status=None))
    total = len(paths)
    files = sorted(random.Random(args.scale).sample(paths, min(args.files, total)))
    index_dir = root / ".git" / "gitmem" / "index"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(args.debounce), str(args.commit_delay)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        log(f"watcher ready; {args.edits} edits over {len(files)} files of a vault of {total} memories")
        cpu_ready = proc_cpu_seconds(child.pid)
        rng = random.Random(7)
        searchable: list[float] = []
        pending_commits: list[tuple[str, str, float]] = []
        committed: list[float] = []
        superseded = 0   # edits overwritten by a later edit of the same file before any commit
        for i in range(args.edits):
            rel = files[i % len(files)]
            note = root / rel
            word = f"benchword{i:04d}"
            data = note.read_bytes().rstrip(b"\n") + f"\n\nEdit {i}: {word}\n".encode()
            tmp = note.parent / f".{note.name}.bench-tmp"
            tmp.write_bytes(data)
            start = time.perf_counter()
            os.replace(tmp, note)
            superseded += sum(1 for entry in pending_commits if entry[0] == rel)
            pending_commits = [entry for entry in pending_commits if entry[0] != rel]
            pending_commits.append((rel, blob_id(data), start))
            while search_total(index_dir, word) < 1:
                if time.perf_counter() - start > 30:
                    raise RuntimeError(f"edit {i} never became searchable")
                time.sleep(0.005)
            searchable.append(time.perf_counter() - start)
            pending_commits = collect_commits(root, pending_commits, committed)
            time.sleep(max(0.0, rng.uniform(0.25, 0.45) - searchable[-1]))
        deadline = time.perf_counter() + 30
        while pending_commits and time.perf_counter() < deadline:
            pending_commits = collect_commits(root, pending_commits, committed)
            time.sleep(0.02)
        commits = int(subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=root,
                                     capture_output=True, text=True, check=True).stdout) - 1
        cpu_busy = proc_cpu_seconds(child.pid) - cpu_ready
        time.sleep(args.idle)
        cpu_idle = proc_cpu_seconds(child.pid) - cpu_ready - cpu_busy
        peak_rss_mib = proc_peak_rss_mib(child.pid)
    finally:
        child.terminate()
        child.wait(timeout=30)
    return {
        "memories": total, "vault": made,
        "edits": args.edits, "files": len(files), "debounce_s": args.debounce, "commit_delay_s": args.commit_delay,
        "edit_to_searchable": summary_ms(searchable),
        "edit_to_committed": summary_ms(committed),
        "commits_made": commits, "superseded_before_commit": superseded,
        "uncommitted_edits": len(pending_commits),
        "target_p95_ms": TARGET_P95_MS,
        "meets_target": summary_ms(searchable).get("p95_ms", 1e9) <= TARGET_P95_MS,
        "watcher_peak_rss_mib": peak_rss_mib,
        "rss_le_200mib": peak_rss_mib <= TARGET_RSS_MIB,
        "watcher_cpu_s_during_edits": round(cpu_busy, 2),
        "watcher_cpu_s_idle": round(cpu_idle, 2), "idle_s": args.idle,
        "watcher_exit_code": child.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_scale_options(parser, 10_000)
    parser.add_argument("--memories", type=int, dest="scale", help="the old name of --scale")
    parser.add_argument("--files", type=int, default=10, help="memory files edited in turn")
    parser.add_argument("--edits", type=int, default=30, help="number of timed edits")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle CPU to measure after the edits")
    parser.add_argument("--debounce", type=float, default=0.3, help="watcher debounce (seconds)")
    parser.add_argument("--commit-delay", type=float, default=2.0, help="watcher commit delay (seconds)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gitmem-bench-watch-") as tmp:
        load_before = loadavg()
        result = {"benchmark": "watch", "machine": machine_info(tmp), **run(args, Path(tmp)),
                  "load_before": load_before, "load_after": loadavg()}
    report(result, args.out)


if __name__ == "__main__":
    main()
