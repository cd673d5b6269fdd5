"""Vault-core benchmark: write/read latency of gitmem's git layer at a given vault size.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/core.py [--scale 10000] [--keep DIR] [--samples 200] [--cli-samples 50]
                         [--min-commits 5000] [--populate init|add|bulk] [--profile] [--out FILE]

``--scale N`` is the number of memories (default 10,000; ``--sizes 1000,10000``
runs several sizes in one go).  The vault is made as a user would, by default
(``--populate init``): a Zipf-like corpus of Markdown notes imported with
``gitmem init --from`` in a child process, search index included; ``--keep DIR``
keeps it for later runs, which work on a copy.  (``--populate add`` adds the
memories one ``vault.add`` at a time; ``--populate bulk`` commits them at once
through ``GitStore.commit_files``; in both the search index is built by the first
search, before any timing.)  From 50,000 memories ``--samples`` defaults to 100.

It then measures on that vault:

* create latency, the whole operation a user waits for: ``vault.add`` with the
  search index open (commit, index, MEMORY.md, ``.git/index``) and ``vault.flush()``
  (with an older gitmem, the ``.git/index`` update), wall and CPU time, add and flush
  also apart; the git CLI doing the same create (write the file, ``git add``,
  ``git commit``, plainly and with ``core.fsync=committed``) in a ``cp -a`` copy of
  the vault, interleaved create by create (``sync`` before each, not timed), and
  the ratios; bytes added to ``.git`` per create;
* update latency (``vault.update(id, append=...)``);
* ``history(id)`` (cold and warm) against ``git log --follow``, once the
  repository holds ``--min-commits`` commits.

Once per run: ``import gitmem`` / ``import gitmem.vault`` time and ``gitmem --help``
wall time.  The load average is reported before and after each size.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
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

from _common import (Generator, add_scale_options, bench_vault, copy_tree, loadavg, log,  # noqa: E402
                     machine_info, populate_bulk, summary_ms, timed, timed_create)
from _common import report as emit_report  # noqa: E402
from gitmem.store.housekeeping import REPACK_LOCK  # noqa: E402
from gitmem.store.locking import try_flock  # noqa: E402
from gitmem.memory.paths import memory_relpath, slugify  # noqa: E402
from gitmem.config import VaultConfig  # noqa: E402
from gitmem.memory.schema import new_id  # noqa: E402
from gitmem.vault import Vault  # noqa: E402

AUTHOR = "bench-agent <bench@gitmem.local>"
PROTECTED = {"goal", "rule", "constraint"}
LARGE = 50_000  # from this size on, fewer samples by default
TARGETS = {"create_p50_ms": 40.0, "history_ms": 50.0, "import_gitmem_ms": 150.0}
GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@gitmem.local",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@gitmem.local"}


def objects_bytes(git_dir: Path) -> tuple[int, int, int]:
    """(apparent bytes, allocated bytes, file count) of everything under ``.git/objects``."""
    apparent = allocated = count = 0
    for folder, _, files in os.walk(git_dir / "objects"):
        for name in files:
            try:
                st = os.stat(os.path.join(folder, name))
            except FileNotFoundError:   # packed meanwhile by gitmem's background housekeeping
                continue
            apparent, allocated, count = apparent + st.st_size, allocated + st.st_blocks * 512, count + 1
    return apparent, allocated, count


def git(root: Path, *args: str) -> str:
    """Run a git CLI command in ``root`` (auto-gc off, fixed identity); return stdout."""
    return subprocess.run(["git", "-c", "gc.auto=0", *args], cwd=root, env={**os.environ, **GIT_ENV},
                          check=True, capture_output=True, text=True).stdout


def populate_add(vault: Vault, gen: Generator, n: int) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """N memories through ``vault.add`` (one commit each); returns ([(id, type)], stats)."""
    ids: list[tuple[str, str]] = []
    lat: list[float] = []
    sizes: list[int] = []
    start = time.perf_counter()
    for i in range(n):
        spec = gen.spec()
        dt, mem = timed(lambda: vault.add(**spec))
        lat.append(dt)
        ids.append((mem.id, spec["type"]))
        sizes.append((vault.root / mem.path).stat().st_size)
        if (i + 1) % 1000 == 0:
            log(f"  populated {i + 1}/{n} ({(i + 1) / (time.perf_counter() - start):.0f}/s)")
    seconds = time.perf_counter() - start
    last = lat[-max(1, n // 10):]
    return ids, {"mode": "add (one commit per memory)", "seconds": round(seconds, 2),
                 "memories_per_s": round(n / seconds, 1), "avg_file_bytes": round(statistics.fmean(sizes)),
                 "add_latency_all": summary_ms(lat), "add_latency_last_10pct": summary_ms(last)}


def bench_create(vault: Vault, gen: Generator, samples: int, cli: "GitCli", cli_samples: int) -> dict[str, Any]:
    """Create latency, the whole operation: ``vault.add`` with the search index open
    (commit, index, MEMORY.md) then ``vault.flush()`` (the ``.git/index`` update,
    otherwise deferred to an idle timer), and the bytes each adds under .git/objects.
    The git CLI's creates (``cli``) are interleaved with them, one of each in turn."""
    vault.search("warm up")  # the search index open (when the vault has one), as in a running agent
    vault.flush()  # sync .git/index now so the lazy flush never fires mid-measurement
    for variant in GitCli.VARIANTS:  # warm-up, not timed
        for _ in range(3):
            cli.create(variant, gen.spec())
    before = objects_bytes(vault.services.store.git.git_dir)
    total, cpus, adds, flushes, sizes = [], [], [], [], []
    theirs: dict[str, list[float]] = {variant: [] for variant in GitCli.VARIANTS}
    for i in range(samples):
        order = ["gitmem", *(GitCli.VARIANTS if i < cli_samples else ())]
        for what in order[i % len(order):] + order[:i % len(order)]:
            spec = gen.spec()
            os.sync()  # (not timed) no create pays for writing back another's dirty pages
            if what != "gitmem":
                theirs[what].append(cli.create(what, spec))
                continue
            mem, whole, cpu, add, flush = timed_create(vault, spec)
            cpus.append(cpu)
            total.append(whole)
            adds.append(add)
            flushes.append(flush)
            sizes.append((vault.root / mem.path).stat().st_size)
    after = objects_bytes(vault.services.store.git.git_dir)
    avg_file = statistics.fmean(sizes)
    per_apparent = (after[0] - before[0]) / samples
    indexed = (vault.services.store.state_dir / "index").exists()
    latency = summary_ms(total)
    cli_out: dict[str, Any] = {"setup": cli.setup, **{variant: summary_ms(v) for variant, v in theirs.items()}}
    for variant in GitCli.VARIANTS:
        cli_out[f"ratio_gitmem_create_p50_over_git_cli_{variant}_p50"] = round(
            latency["p50_ms"] / cli_out[variant]["p50_ms"], 3)
    return {"latency": latency, "cpu": summary_ms(cpus), "add_only": summary_ms(adds),
            "flush_only": summary_ms(flushes),
            "note": "vault.add + vault.flush(): file write, commit, catalog, MEMORY.md, "
                    + ("search index (open), " if indexed else "no search index in this vault, ")
                    + ".git/index update; git CLI creates interleaved",
            "git_bytes": {"objects_bytes_per_create": round(per_apparent),
                          "objects_disk_bytes_per_create": round((after[1] - before[1]) / samples),
                          "avg_memory_file_bytes": round(avg_file),
                          "ratio_objects_to_file": round(per_apparent / avg_file, 2)},
            "git_cli_create": cli_out}


def bench_update(vault: Vault, gen: Generator, ids: list[str], samples: int) -> dict[str, Any]:
    """``vault.update(id, append=...)`` latency on random memories."""
    vault.flush()  # sync .git/index now so the lazy flush never fires mid-measurement
    before = objects_bytes(vault.services.store.git.git_dir)[0]
    lat = []
    for mid in gen.rng.sample(ids, min(samples, len(ids))):
        text = gen.sentence()
        dt, _ = timed(lambda: vault.update(mid, append=text))
        lat.append(dt)
    return {"latency": summary_ms(lat),
            "objects_bytes_per_update": round((objects_bytes(vault.services.store.git.git_dir)[0] - before) / len(lat))}


def grow_history(vault: Vault, gen: Generator, ids: list[str], target: str, min_commits: int) -> dict[str, Any]:
    """Touch ``target`` 10 times (two tier moves) among filler updates until HEAD has ``min_commits``."""
    have = int(git(vault.root, "rev-list", "--count", "HEAD"))
    fillers = max(0, min_commits - have - 10)
    plan = ["update"] * 3 + ["move:mid_term"] + ["update"] * 3 + ["move:long_term"] + ["update"] * 2
    total = fillers + len(plan)
    pool = [mid for mid in ids if mid != target]
    slots = {int((k + 0.5) * total / len(plan)): action for k, action in enumerate(plan)}
    start = time.perf_counter()
    for i in range(total):
        action = slots.get(i)
        if action is None:
            vault.update(gen.rng.choice(pool), append=gen.sentence())
        elif action.startswith("move:"):
            vault.move(target, action.split(":", 1)[1])
        else:
            vault.update(target, append=gen.sentence())
        if (i + 1) % 1000 == 0:
            log(f"  history filler {i + 1}/{total}")
    commits = int(git(vault.root, "rev-list", "--count", "HEAD"))
    return {"filler_updates": fillers, "filler_seconds": round(time.perf_counter() - start, 2),
            "commits_in_repo": commits}


def bench_history(vault: Vault, target: str, cold_reps: int = 20, warm_reps: int = 50) -> dict[str, Any]:
    """``history(id)`` cold (fresh Vault object each time) and warm, and ``git log --follow``."""
    vault.flush()  # sync .git/index now so the lazy flush never fires mid-measurement
    opens, cold, both = [], [], []
    for _ in range(cold_reps):
        t0 = time.perf_counter()
        fresh = Vault.open(vault.root, author=AUTHOR)
        t1 = time.perf_counter()
        versions = fresh.history(target)
        t2 = time.perf_counter()
        fresh.close()
        opens.append(t1 - t0)
        cold.append(t2 - t1)
        both.append(t2 - t0)
    scans = []
    for _ in range(5):  # what dominates a cold query: the first full scan of the working tree
        fresh = Vault.open(vault.root, author=AUTHOR)
        scans.append(timed(fresh.scan)[0])
        fresh.close()
    warm = [timed(lambda: vault.history(target))[0] for _ in range(warm_reps)]
    path = vault.get(target).path
    git_runs, git_out = [], ""
    for _ in range(5):
        dt, git_out = timed(lambda: git(vault.root, "log", "--follow", "--format=%H", "--", path))
        git_runs.append(dt)
    return {"versions": len(versions), "ops": [v.op for v in versions],
            "cold_open": summary_ms(opens), "cold_history": summary_ms(cold),
            "cold_open_plus_history": summary_ms(both), "cold_first_scan_only": summary_ms(scans),
            "warm": summary_ms(warm),
            "git_cli_log_follow": {**summary_ms(git_runs), "commits_listed": len(git_out.split())},
            "note": "cold = fresh Vault.open() per query (OS page cache warm); "
                    "cold_history excludes the open, which is reported separately"}


class GitCli:
    """The git CLI doing creates in a ``cp -a`` copy of the vault: write the file,
    ``git add``, ``git commit`` (auto-gc off), plainly or with fsync of what is committed."""

    VARIANTS = {"default": [], "fsync_committed": ["-c", "core.fsync=committed", "-c", "core.fsyncMethod=fsync"]}

    def __init__(self, root: Path, workdir: Path) -> None:
        self.clone = workdir / "cli-copy"
        copy_tree(root, self.clone)
        dt_refresh, _ = timed(lambda: git(self.clone, "update-index", "-q", "--refresh"))
        dirty = git(self.clone, "status", "--porcelain")
        self.setup = {"copy": "cp -a", "index_refresh_s": round(dt_refresh, 3),
                      "git_status_clean_after_gitmem": dirty.strip() == "", "auto_gc": "disabled (-c gc.auto=0)"}
        self.count = 0
        self.layout = VaultConfig.load(root).layout  # files go where gitmem puts them

    def create(self, variant: str, spec: dict[str, Any]) -> float:
        """One create; its wall seconds."""
        cfg = self.VARIANTS[variant]
        self.count += 1
        mid = new_id()
        rel = memory_relpath(spec["tier"], mid, f"{slugify(spec['title'])}-cli-{self.count}", layout=self.layout)
        text = (f"---\nid: {mid}\ntitle: {spec['title']}\ntype: {spec['type']}\ntier: {spec['tier']}\n"
                f"tags: [{', '.join(spec['tags'])}]\n---\n\n{spec['body']}")

        def create() -> None:
            target = self.clone / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            git(self.clone, *cfg, "add", rel)
            git(self.clone, *cfg, "commit", "-q", "-m", f"add: {spec['title']}")
        return timed(create)[0]

    def close(self) -> None:
        shutil.rmtree(self.clone)


def profile_creates(vault: Vault, gen: Generator, count: int = 30) -> list[str]:
    """Top 10 cumulative entries of cProfile over ``count`` creates."""
    vault.flush()  # sync .git/index now so the lazy flush never fires mid-measurement
    specs = [gen.spec() for _ in range(count)]
    prof = cProfile.Profile()
    prof.enable()
    for spec in specs:
        vault.add(**spec)
        vault.flush()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(10)
    lines = buf.getvalue().splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().startswith("ncalls"))
    return [" ".join(line.split()) for line in lines[head:head + 11] if line.strip()]


def populate_init(root: Path, n: int, args: argparse.Namespace) -> tuple[Vault, list[tuple[str, str]], dict[str, Any]]:
    """A vault of ``n`` memories made by ``gitmem init --from`` (or copied from ``--keep``)."""
    made = bench_vault(n, root, args.keep)
    vault = Vault.open(root, author=AUTHOR)
    ids = [(m.id, m.type) for m in vault.list(status=None)]
    return vault, ids, {"mode": "init --from (make_corpus + gitmem init --from, a child process)", **made}


def run_size(n: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Every per-size measurement on one vault of ``n`` memories."""
    gen = Generator(seed=n)
    root = workdir / f"vault-{n}"
    log(f"N={n}: populating ({args.populate})")
    if args.populate == "init":
        vault, ids, pop = populate_init(root, n, args)
    else:
        vault = Vault.init(root, author=AUTHOR)
        ids, pop = (populate_add if args.populate == "add" else populate_bulk)(vault, gen, n)
    pop["commits_after"] = int(git(root, "rev-list", "--count", "HEAD"))
    editable = [mid for mid, kind in ids if kind not in PROTECTED]
    target = next(mid for mid, kind in ids[: max(1, n // 10)] if kind not in PROTECTED
                  and vault.get(mid).tier == "short_term")
    log(f"N={n}: git CLI copy")
    cli = GitCli(root, workdir)
    log(f"N={n}: {args.samples} creates, {min(args.samples, args.cli_samples)} git CLI creates per variant interleaved")
    # Background packing is paused while creates and updates are measured (a run holds
    # this lock; the others skip): their bytes are then what a write adds, as loose objects.
    result: dict[str, Any] = {"memories": n, "populate": pop, "loadavg_before": loadavg()}
    with try_flock(vault.services.store.git.git_dir / "gitmem" / REPACK_LOCK, 60):
        result["create"] = bench_create(vault, gen, args.samples, cli, args.cli_samples)
        cli.close()
        if args.profile or result["create"]["latency"]["p50_ms"] > TARGETS["create_p50_ms"]:
            result["create"]["profile_top10_cumulative"] = profile_creates(vault, gen)
        log(f"N={n}: {args.samples} updates")
        result["update"] = bench_update(vault, gen, editable, args.samples)
    log(f"N={n}: growing history to >= {args.min_commits} commits")
    result["history_setup"] = grow_history(vault, gen, editable, target, args.min_commits)
    log(f"N={n}: history queries")
    result["history"] = bench_history(vault, target)
    size, disk, files = objects_bytes(vault.services.store.git.git_dir)
    result["repo_after_run"] = {"objects_files": files, "objects_mb": round(size / 2**20, 1),
                                "objects_disk_mb": round(disk / 2**20, 1),
                                "note": "objects under .git/objects after the run; gitmem packs loose objects (with deltas) when idle once 256 have piled up, without holding the vault lock (git's own gc.auto is 6,700)"}
    vault.close()
    result["loadavg_after"] = loadavg()
    shutil.rmtree(root)
    return result


def subprocess_times(cmds: dict[str, list[str]], runs: int) -> dict[str, tuple[float, float]]:
    """(median, min) wall time in ms of each command; runs interleaved to spread out noise."""
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            dt, proc = timed(lambda: subprocess.run(cmd, capture_output=True, cwd=ROOT))
            if proc.returncode != 0:
                raise RuntimeError(f"{cmd} failed: {proc.stderr.decode(errors='replace')[-500:]}")
            times[name].append(dt * 1000)
    return {name: (statistics.median(values), min(values)) for name, values in times.items()}


def bench_imports(runs: int = 10) -> dict[str, Any]:
    """``import gitmem`` and ``import gitmem.vault`` in fresh interpreters, minus bare startup."""
    py = sys.executable
    t = subprocess_times({"pass": [py, "-c", "pass"], "gitmem": [py, "-c", "import gitmem"],
                          "vault": [py, "-c", "import gitmem.vault"]}, runs)
    trace = subprocess.run([py, "-X", "importtime", "-c", "import gitmem.vault"], capture_output=True,
                           text=True, cwd=ROOT).stderr
    top: list[tuple[int, str]] = []
    for line in trace.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].strip()
            if name not in ("site", "gitmem.vault") and not name.startswith(("encodings", "__editable")):
                top.append((int(parts[1]), name))
    return {"python_startup_ms": round(t["pass"][0], 1),
            "import_gitmem_ms": round(t["gitmem"][0] - t["pass"][0], 1),
            "import_gitmem_vault_ms": round(t["vault"][0] - t["pass"][0], 1),
            "min_of_runs": {"import_gitmem_ms": round(t["gitmem"][1] - t["pass"][1], 1),
                            "import_gitmem_vault_ms": round(t["vault"][1] - t["pass"][1], 1)},
            "gitmem_vault_import_top10_cumulative_ms": {n: round(us / 1000, 1) for us, n in sorted(top)[-10:][::-1]},
            "method": f"median of {runs} fresh `python -c` runs minus `python -c pass`"}


def bench_help(runs: int = 10) -> dict[str, Any]:
    """Wall time of the ``gitmem --help`` console script."""
    script = Path(sys.executable).parent / "gitmem"
    try:
        median, fastest = subprocess_times({"help": [str(script), "--help"]}, runs)["help"]
    except (RuntimeError, OSError) as exc:
        return {"error": str(exc)}
    return {"median_ms": round(median, 1), "min_ms": round(fastest, 1), "runs": runs, "script": str(script)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_scale_options(parser, 10_000)
    parser.add_argument("--sizes", help="comma-separated vault sizes, instead of --scale")
    parser.add_argument("--samples", type=int,
                        help=f"creates and updates timed per size (default 200; 100 from {LARGE:,})")
    parser.add_argument("--cli-samples", type=int, default=50, help="git CLI creates per variant")
    parser.add_argument("--min-commits", type=int, default=5000, help="commits in the repo before history()")
    parser.add_argument("--populate", choices=("init", "add", "bulk"), default="init",
                        help="init: gitmem init --from (default); add: vault.add each; bulk: one commit")
    parser.add_argument("--profile", action="store_true", help="always cProfile a few creates")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()] if args.sizes else [args.scale]
    fewer = args.samples is None and max(sizes) >= LARGE
    if args.samples is None:
        args.samples = 100 if fewer else 200
    started, load_start = time.perf_counter(), round(os.getloadavg()[0], 2)
    report: dict[str, Any] = {"benchmark": "gitmem vault-core", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "machine": machine_info(tempfile.gettempdir()),
                              "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "sizes": {}}
    if fewer:
        report["fewer_samples_at_scale"] = {"samples": args.samples}
    with tempfile.TemporaryDirectory(prefix="gitmem-bench-core-") as tmp:
        for n in sizes:
            report["sizes"][str(n)] = run_size(n, args, Path(tmp))
    log("import and CLI start-up timings")
    report["import"] = bench_imports()
    report["cli_help"] = bench_help()
    big = report["sizes"][str(max(sizes))]
    hist = big["history"]
    checks = {"create_p50_le_40ms": (big["create"]["latency"]["p50_ms"], TARGETS["create_p50_ms"]),
              "history_warm_p50_le_50ms": (hist["warm"]["p50_ms"], TARGETS["history_ms"]),
              "history_cold_p50_le_50ms": (hist["cold_history"]["p50_ms"], TARGETS["history_ms"]),
              "import_gitmem_le_150ms": (report["import"]["import_gitmem_ms"], TARGETS["import_gitmem_ms"])}
    report["targets"] = {"at_size": max(sizes), "commits_at_history": big["history_setup"]["commits_in_repo"],
                         **{name: {"value_ms": value, "limit_ms": limit, "pass": value <= limit}
                            for name, (value, limit) in checks.items()}}
    report["machine"]["loadavg_1m_start_end"] = [load_start, round(os.getloadavg()[0], 2)]
    report["total_seconds"] = round(time.perf_counter() - started, 1)
    emit_report(report, args.out)
    return report


if __name__ == "__main__":
    main()
