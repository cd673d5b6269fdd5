"""Cold command-line benchmark: each ``gitmem`` command a whole new process, as a user
runs it in a shell, at a vault of 10k memories, against the git CLI doing the same.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/cli.py [--vault DIR] [--size 10000] [--runs 7] [--query "quick worker"]
                        [--base PYTHONPATH] [--out FILE]

Without ``--vault`` a vault of ``--size`` generated memories is built in a temporary
folder (one bulk commit, as ``bench/core.py --populate bulk``).  Timed, interleaved in
each round (median of ``--runs`` rounds; wall time, the child's CPU time (user + sys,
from ``os.wait4``) and its peak RSS):

* ``gitmem search QUERY`` (and ``python -c pass``, the interpreter's own start-up);
* ``gitmem show PATH`` against ``git show HEAD:PATH``;
* ``gitmem history PATH`` against ``git log --follow -- PATH``;
* ``gitmem add TITLE BODY`` against writing the file and ``git add`` + ``git commit``
  (in a copy of the vault, so gitmem's vault never sees a commit made outside).

Reads are timed with nothing changed in the vault since the last gitmem process (a
warm-up process runs first).  ``--base`` also times the same gitmem commands with
another gitmem source tree on ``PYTHONPATH`` (e.g. a checkout of an older commit),
interleaved in the same rounds.  Load averages are recorded before and after.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Generator, log, machine_info, populate_bulk  # noqa: E402
from _common import report as emit_report  # noqa: E402


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict[str, float]:
    """Run one process to its end: wall seconds, CPU seconds (user + sys) and peak RSS (MiB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else b""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err.decode(errors='replace')}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


def median_of(samples: list[dict[str, float]]) -> dict[str, float]:
    return {"wall_s": round(statistics.median(s["wall"] for s in samples), 4),
            "cpu_s": round(statistics.median(s["cpu"] for s in samples), 4),
            "peak_rss_mib": round(max(s["rss_mib"] for s in samples), 1),
            "wall_s_all": [round(s["wall"], 4) for s in samples]}


def build_vault(size: int, workdir: Path) -> Path:
    from gitmem.vault import Vault
    root = workdir / f"vault-{size}"
    log(f"building a vault of {size} memories in {root}")
    vault = Vault.init(root, author="bench")
    populate_bulk(vault, Generator(seed=size), size)
    vault.close()
    return root


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vault", type=Path, help="an existing vault to use (it gets --runs new memories)")
    parser.add_argument("--size", type=int, default=10_000, help="memories in the vault built without --vault")
    parser.add_argument("--runs", type=int, default=7, help="rounds (the median is reported)")
    parser.add_argument("--query", default="quick worker", help="what gitmem search looks for")
    parser.add_argument("--base", help="PYTHONPATH of another gitmem tree, timed in the same rounds")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="gitmem-bench-cli-"))
    try:
        root = args.vault.resolve() if args.vault else build_vault(args.size, workdir)
        files = subprocess.run(["git", "ls-files", "long_term"], cwd=root, capture_output=True, text=True,
                               check=True).stdout.split()
        count = int(subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                                   check=True).stdout.count("\n"))
        ref = files[len(files) // 2]
        log(f"vault {root}: {count} files; show/history of {ref}")
        log("copying the vault for the git CLI's commits")
        copy = workdir / "git-copy"
        shutil.copytree(root, copy, symlinks=True)

        # Byte-code is cached as an installed package has it (the warm-up writes it).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        envs = {"gitmem": {**env, "PYTHONPATH": str(ROOT)}}
        if args.base:
            envs["base"] = {**env, "PYTHONPATH": args.base}
        py = [sys.executable, "-m", "gitmem", "-C", str(root)]
        reads: dict[str, list[str]] = {"search": [*py, "search", args.query],
                                       "show": [*py, "show", ref],
                                       "history": [*py, "history", ref]}
        baselines = {"search": [sys.executable, "-c", "pass"],
                     "show": ["git", "show", f"HEAD:{ref}"],
                     "history": ["git", "log", "--follow", "--", ref]}
        baseline_names = {"search": "python -c pass", "show": "git show HEAD:path",
                          "history": "git log --follow -- path"}
        for name, env in envs.items():   # the first process after a change catches up
            for cmd in reads.values():
                run(cmd, root, env)
        samples: dict[str, list[dict[str, float]]] = {}
        load_before = list(os.getloadavg())
        log(f"reads: {args.runs} rounds")
        for _ in range(args.runs):
            for kind, cmd in reads.items():
                for name, env in envs.items():
                    samples.setdefault(f"{kind}:{name}", []).append(run(cmd, root, env))
                samples.setdefault(f"{kind}:baseline", []).append(run(baselines[kind], root))
        load_mid = list(os.getloadavg())
        log(f"adds: {args.runs} rounds")
        for i in range(args.runs):
            for name, env in envs.items():
                samples.setdefault(f"add:{name}", []).append(
                    run([*py, "add", f"Bench note {name} {i} {time.time_ns()}",
                         "The bench adds this note to time one write."], root, env))
            note = copy / "long_term" / f"bench-git-{i}-{time.time_ns()}.md"
            note.write_text(f"---\ntitle: Bench note git {i}\n---\nThe bench adds this note.\n",
                            encoding="utf-8")
            rel = note.relative_to(copy).as_posix()
            samples.setdefault("add:baseline", []).append(
                run(["sh", "-c", f"git add -- '{rel}' && git commit -q -m 'bench: add {i}'"], copy))
        load_after = list(os.getloadavg())

        results: dict[str, Any] = {}
        for kind in ("search", "show", "history", "add"):
            entry: dict[str, Any] = {}
            for name in envs:
                entry[name] = median_of(samples[f"{kind}:{name}"])
            entry["baseline"] = {"command": baseline_names.get(kind, "git add + git commit"),
                                 **median_of(samples[f"{kind}:baseline"])}
            base_wall = entry["baseline"]["wall_s"]
            entry["ratio_to_baseline"] = round(entry["gitmem"]["wall_s"] / base_wall, 2) if base_wall else None
            if "base" in entry:
                entry["ratio_to_base"] = round(entry["gitmem"]["wall_s"] / entry["base"]["wall_s"], 2)
            results[kind] = entry
        return {"benchmark": "cli", "vault": str(root), "files": count, "runs": args.runs,
                "query": args.query, "ref": ref, "base": args.base,
                "loadavg_before": [round(x, 2) for x in load_before],
                "loadavg_between": [round(x, 2) for x in load_mid],
                "loadavg_after": [round(x, 2) for x in load_after],
                "machine": machine_info(root), "results": results}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    args_out = None
    if "--out" in sys.argv:
        args_out = sys.argv[sys.argv.index("--out") + 1]
    emit_report(main(), args_out)
