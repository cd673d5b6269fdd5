"""What each layout costs per write: the flat layout (``<tier>/<slug>.md``, new vaults)
against the hashed one (``<tier>/<h1>/<h2>/<slug>.md``, vaults made before layouts).

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/layout.py [--sizes 1000,10000,100000] [--writes 40] [--keep DIR] [--out FILE]

For each size, a vault of that many generated memories is made in the hashed layout
(``Vault.init``, then one bulk commit placing every memory in its hash folders, a scan
and the search index; ``--keep`` keeps it for later runs: 100,000 take long to make).
Two copies are opened in this process: one stays hashed, the other is converted with
``gitmem layout flat`` (one commit renaming every memory; its time is reported).  Then
``--writes`` creates are made in turn, one in each vault, so both meet the same machine
load.  A create is what a user waits for: ``vault.add`` then ``vault.flush()`` (commit,
catalog, search index, MEMORY.md, ``.git/index``).  Reported per layout: wall and CPU
time of the create (p50, p95), the bytes the write added under ``.git/objects`` (loose
objects: the new blob, the trees on the path to it, the commit) and the size of the
tier folder's tree object, and the ratio flat/hashed.  The load average is reported before and after each size.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import (Generator, copy_tree, loadavg, log, machine_info, percentile,  # noqa: E402
                     populate_bulk, report, timed_create)
from gitmem.vault import Vault  # noqa: E402

AUTHOR = "bench-agent <bench@gitmem.local>"


def objects_bytes(git_dir: Path) -> int:
    """Bytes of every file under ``.git/objects`` (loose objects and packs)."""
    total = 0
    for folder, _, files in os.walk(git_dir / "objects"):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass
    return total


def tree_size(root: Path, tier: str) -> int:
    """Bytes of the git tree object of ``tier`` at HEAD (what a write into it rewrites)."""
    out = subprocess.run(["git", "-C", str(root), "cat-file", "-s", f"HEAD:{tier}"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def base_vault(size: int, keep: Path, seed: int = 7) -> Path:
    """The hashed vault of ``size`` memories kept in ``keep`` (made when missing)."""
    path = keep / f"layout-base-{size}-seed{seed}"
    if not (path / ".gitmem.yaml").exists():
        shutil.rmtree(path, ignore_errors=True)
        log(f"{size}: making the hashed base vault in {path}")
        with Vault.init(path, author=AUTHOR) as vault:
            vault.convert_layout("hashed")
            populate_bulk(vault, Generator(seed), size)
            vault.flush()
        subprocess.run(["git", "-C", str(path), "config", "gc.auto", "0"], check=True)
    return path


def run_size(size: int, writes: int, workdir: Path, keep: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"memories": size, "load_before": loadavg()}
    base = base_vault(size, keep)
    vaults: dict[str, Vault] = {}
    for layout in ("hashed", "flat"):
        copy_tree(base, workdir / layout)
        vaults[layout] = Vault.open(workdir / layout, author=AUTHOR)
        out[layout] = {}
    start, cpu = time.perf_counter(), time.process_time()
    converted = vaults["flat"].convert_layout("flat")
    out["convert_hashed_to_flat"] = {"moved": len(converted.moved), "wall_s": round(time.perf_counter() - start, 2),
                                     "cpu_s": round(time.process_time() - cpu, 2)}
    rows: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": [], "grew": []} for k in vaults}
    gen = Generator(11)
    for i in range(writes):
        spec = gen.spec()
        for layout in (("flat", "hashed") if i % 2 == 0 else ("hashed", "flat")):
            vault = vaults[layout]
            before = objects_bytes(vault.root / ".git")
            _, wall, cpu, _, _ = timed_create(vault, dict(title=spec["title"], body=spec["body"],
                                                          tags=spec["tags"], type=spec["type"],
                                                          tier="long_term"))
            rows[layout]["wall"].append(wall)
            rows[layout]["cpu"].append(cpu)
            rows[layout]["grew"].append(objects_bytes(vault.root / ".git") - before)
    for layout, r in rows.items():
        out[layout].update({
            "create_p50_ms": round(percentile(r["wall"], 50) * 1000, 2),
            "create_p95_ms": round(percentile(r["wall"], 95) * 1000, 2),
            "create_cpu_p50_ms": round(percentile(r["cpu"], 50) * 1000, 2),
            "git_objects_bytes_per_write_median": int(statistics.median(r["grew"])),
            "long_term_tree_bytes": tree_size(vaults[layout].root, "long_term"),
            "writes": len(r["wall"])})
        vaults[layout].close()
    out["ratio_flat_to_hashed"] = {
        key: round(out["flat"][key] / out["hashed"][key], 2)
        for key in ("create_p50_ms", "create_p95_ms", "create_cpu_p50_ms", "git_objects_bytes_per_write_median")}
    out["load_after"] = loadavg()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--writes", type=int, default=40, help="creates per layout and size")
    ap.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "gitmem-layout-keep",
                    help="folder keeping the generated base vaults for later runs")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    args.keep.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"bench": "layout", "machine": machine_info(), "sizes": []}
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix=f"gitmem-layout-{size}-") as tmp:
            result["sizes"].append(run_size(size, args.writes, Path(tmp), args.keep))
    report(result, args.out)


if __name__ == "__main__":
    main()
