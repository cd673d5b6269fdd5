"""Bulk import and reindex: ``gitmem init --from``, ``gitmem import markdown`` and
``Vault.reindex`` against ``git add -A && git commit`` and SQLite FTS5.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/bulk.py [--scale 10000] [--runs 3] [--baseline DIR] [--out FILE]

A Zipf-like corpus of ``--scale`` Markdown notes (frontmatter, ``[[links]]``, two
levels of folders) is generated once.  Then, alternating, each ``--runs`` times:

* ``git``: a fresh ``git init`` copy of the folder, timed ``git add -A && git commit``;
* ``init``: ``gitmem init --from CORPUS VAULT``, a whole process;
* ``import``: ``gitmem -C VAULT import markdown CORPUS`` into a vault made empty
  just before (not timed).

Each gitmem run counts only when the vault is searchable and ``git status
--porcelain`` is empty afterwards (both checked, not timed); when a command leaves
the search index to be built on first use, that first ``gitmem search`` is timed
and added to the command's figures.  Wall and CPU time
(user + system) and peak RSS are those of the child processes (``os.wait4``).
Then ``Vault.reindex()`` of the last vault is timed against SQLite FTS5 (porter
tokenizer) indexing the same bodies, both counting the files' read and parse.

``--baseline DIR`` names another checkout of gitmem (``git worktree add
/tmp/gitmem-base <commit>``): its ``init``/``import``/reindex run interleaved with
this one's, in the same way.  ``--scale 100000`` runs each step once.
"""

from __future__ import annotations

import argparse
import json
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
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import log, machine_info, make_corpus, report  # noqa: E402

REINDEX = """
import json, sys, time
from gitmem.vault import Vault
vault = Vault.open(sys.argv[1])
start, cpu = time.perf_counter(), time.process_time()
n = vault.reindex()
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
found = vault.search("roadmap").total
vault.close()
print(json.dumps({"memories": n, "wall_s": wall, "cpu_s": cpu, "found": found}))
"""

FTS5 = """
import json, os, sys, time, sqlite3
import yaml
root = sys.argv[1]
start, cpu = time.perf_counter(), time.process_time()
db = sqlite3.connect(":memory:")
db.execute("CREATE VIRTUAL TABLE notes USING fts5(path, title, body, tokenize='porter')")
rows = []
for top, dirs, files in os.walk(root):
    dirs[:] = [d for d in dirs if not d.startswith('.')]
    for name in files:
        if name.endswith('.md') and name != 'MEMORY.md':
            path = os.path.join(top, name)
            with open(path, encoding='utf-8') as f:
                text = f.read()
            meta, body = {}, text
            if text.startswith('---\\n'):
                head, _, body = text[4:].partition('\\n---\\n')
                meta = yaml.safe_load(head) or {}
            rows.append((path, str(meta.get('title', '')), body))
db.executemany("INSERT INTO notes VALUES (?, ?, ?)", rows)
db.commit()
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
found = db.execute("SELECT count(*) FROM notes WHERE notes MATCH 'roadmap'").fetchone()[0]
print(json.dumps({"memories": len(rows), "wall_s": wall, "cpu_s": cpu, "found": found}))
"""



def run(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
        stdout: Any = subprocess.DEVNULL) -> dict[str, Any]:
    """Run ``cmd``; its wall time, CPU time (user + system) and peak RSS (os.wait4)."""
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        start = time.perf_counter()
        # (never the checkout's folder: ``python -m`` puts the working folder first on
        # sys.path, which would shadow the PYTHONPATH naming the gitmem to measure)
        proc = subprocess.Popen(cmd, env=env, cwd=cwd or tempfile.gettempdir(), stdout=out_file if stdout is not subprocess.DEVNULL
                                else subprocess.DEVNULL, stderr=err_file, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out_file.seek(0)
        err_file.seek(0)
        out, err = out_file.read(), err_file.read()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err.decode()[-2000:]}")
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "stdout": out.decode()}


def git_baseline(corpus: Path, work: Path) -> dict[str, Any]:
    repo = work / "git"
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(corpus, repo)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for key, value in (("user.name", "bench"), ("user.email", "bench@gitmem.local")):
        subprocess.run(["git", "-C", str(repo), "config", key, value], check=True)
    out = run(["sh", "-c", "git add -A && git commit -q -m import"], cwd=repo)
    out.pop("stdout")
    shutil.rmtree(repo, ignore_errors=True)
    return out


def env_for(source: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(source), "GITMEM_AUTHOR": "bench <bench@gitmem.local>"}


def searchable(vault: Path, env: dict[str, str], out: dict[str, Any]) -> dict[str, Any]:
    """``out`` plus, when the command left the search index unbuilt (older gitmem builds
    it on first use), the first ``gitmem search`` that builds it: counted in the totals."""
    if index_commit(vault) != head_of(vault):
        first = run([sys.executable, "-m", "gitmem", "-C", str(vault), "search", "roadmap", "--json"], env=env)
        first.pop("stdout")
        out = {**out, "first_search": first, "wall_s": round(out["wall_s"] + first["wall_s"], 3),
               "cpu_s": round(out["cpu_s"] + first["cpu_s"], 3),
               "peak_rss_mb": max(out["peak_rss_mb"], first["peak_rss_mb"])}
    return out


def head_of(vault: Path) -> str:
    return subprocess.run(["git", "-C", str(vault), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def index_commit(vault: Path) -> str | None:
    state = vault / ".git" / "gitmem" / "index" / "gitmem-state.json"
    return json.loads(state.read_text()).get("commit") if state.exists() else None


def check_vault(vault: Path, env: dict[str, str], n: int) -> None:
    status = subprocess.run(["git", "-C", str(vault), "status", "--porcelain"], capture_output=True,
                            text=True, check=True).stdout
    if status:
        raise RuntimeError(f"git status is not empty after the import:\n{status[:2000]}")
    head, indexed = head_of(vault), index_commit(vault)
    if indexed != head:
        raise RuntimeError(f"the search index is not built for HEAD after the import ({indexed} != {head})")


def gitmem_init(source: Path, corpus: Path, work: Path, n: int) -> dict[str, Any]:
    vault = work / "vault-init"
    shutil.rmtree(vault, ignore_errors=True)
    env = env_for(source)
    out = run([sys.executable, "-m", "gitmem", "init", "--from", str(corpus), str(vault), "--json"], env=env,
              stdout=subprocess.PIPE)
    made = json.loads(out.pop("stdout"))
    if made["memories"] != n:
        raise RuntimeError(f"init imported {made['memories']} of {n} notes")
    out = searchable(vault, env, out)
    check_vault(vault, env, n)
    return out


def gitmem_import(source: Path, corpus: Path, work: Path, n: int) -> dict[str, Any]:
    vault = work / "vault-import"
    shutil.rmtree(vault, ignore_errors=True)
    env = env_for(source)
    run([sys.executable, "-m", "gitmem", "init", str(vault)], env=env)
    out = run([sys.executable, "-m", "gitmem", "-C", str(vault), "import", "markdown", str(corpus), "--json"],
              env=env, stdout=subprocess.PIPE)
    made = json.loads(out.pop("stdout"))
    if made["counts"]["created"] != n:
        raise RuntimeError(f"import created {made['counts']['created']} of {n} notes")
    out = searchable(vault, env, out)
    check_vault(vault, env, n)
    return out


def reindex(source: Path, vault: Path) -> dict[str, Any]:
    out = run([sys.executable, "-c", REINDEX, str(vault)], env=env_for(source), stdout=subprocess.PIPE)
    inner = json.loads(out.pop("stdout"))
    return {**out, **{k: round(v, 3) if isinstance(v, float) else v for k, v in inner.items()},
            "per_s": round(inner["memories"] / inner["wall_s"], 1)}


def fts5(vault: Path) -> dict[str, Any]:
    out = run([sys.executable, "-c", FTS5, str(vault)], stdout=subprocess.PIPE)
    inner = json.loads(out.pop("stdout"))
    return {**out, **{k: round(v, 3) if isinstance(v, float) else v for k, v in inner.items()},
            "per_s": round(inner["memories"] / inner["wall_s"], 1)}


def summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": samples}
    for key in ("wall_s", "cpu_s", "peak_rss_mb"):
        values = [s[key] for s in samples if key in s]
        if values:
            out[f"median_{key}"] = round(statistics.median(values), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=10_000, help="notes in the corpus")
    parser.add_argument("--runs", type=int, default=None, help="runs of each step (default 3; 1 from 50,000)")
    parser.add_argument("--baseline", type=Path, help="another gitmem checkout to compare with, interleaved")
    parser.add_argument("--steps", default="init,import,reindex", help="comma-separated: init,import,reindex")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    runs = args.runs or (1 if args.scale >= 50_000 else 3)
    steps = set(args.steps.split(","))
    sources = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    result: dict[str, Any] = {"benchmark": "bulk", "scale": args.scale, "runs": runs,
                              "machine": machine_info(tempfile.gettempdir()),
                              "loadavg_before": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="gitmem-bulk-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus"
        log(f"generating {args.scale} notes")
        result["corpus"] = make_corpus(corpus, args.scale)
        samples: dict[str, list[dict[str, Any]]] = {}
        for i in range(runs):
            order = ["git", *(f"{step}:{name}" for step in ("init", "import") if step in steps
                              for name in sources)]
            if i % 2:
                order.reverse()
            for what in order:
                log(f"run {i + 1}/{runs}: {what}")
                if what == "git":
                    sample = git_baseline(corpus, work)
                else:
                    step, name = what.split(":")
                    sample = (gitmem_init if step == "init" else gitmem_import)(sources[name], corpus,
                                                                               work / name, args.scale)
                log(f"  {sample}")
                samples.setdefault(what, []).append(sample)
        result["steps"] = {what: summary(s) for what, s in samples.items()}
        git_wall = result["steps"]["git"]["median_wall_s"]
        git_cpu = result["steps"]["git"]["median_cpu_s"]
        result["ratios_to_git"] = {
            what: {"wall": round(s["median_wall_s"] / git_wall, 1), "cpu": round(s["median_cpu_s"] / git_cpu, 1)}
            for what, s in result["steps"].items() if what != "git"}
        if "reindex" in steps:
            vault = work / "this" / ("vault-init" if "init" in steps else "vault-import")
            reindexed: dict[str, list[dict[str, Any]]] = {}
            for i in range(runs):
                order = ["fts5", *sources]
                if i % 2:
                    order.reverse()
                for what in order:
                    log(f"reindex run {i + 1}/{runs}: {what}")
                    sample = fts5(vault) if what == "fts5" else reindex(sources[what], vault)
                    log(f"  {sample}")
                    reindexed.setdefault(what, []).append(sample)
            result["reindex"] = {what: {**summary(s), "median_per_s": statistics.median(x["per_s"] for x in s)}
                                 for what, s in reindexed.items()}
            fts = result["reindex"]["fts5"]["median_wall_s"]
            result["reindex_ratio_to_fts5"] = {what: round(r["median_wall_s"] / fts, 1)
                                               for what, r in result["reindex"].items() if what != "fts5"}
    result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    report(result, args.out)


if __name__ == "__main__":
    main()
