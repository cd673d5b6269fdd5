"""``gitmem view`` benchmark: generating the history viewer of a 10k-memory, 5k-commit vault.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/view.py [--memories 10000] [--commits 5000] [--reps 3]
                         [--workdir DIR] [--fresh] [--no-browser] [--out FILE]

The vault is built once and reused (under ``--workdir``, default a folder in the
system temp dir; ``--fresh`` rebuilds it): ``Vault.init(from_dir=...)`` of N
generated notes (one commit), then updates, tier moves, tag edits, soft deletes,
adds and a few outside edits committed with the git CLI, by several authors, until
HEAD has the wanted number of commits.

Measured, interleaved in the same run (``--reps`` times each, medians reported):

* ``gitmem view --json --out FILE`` in a fresh process: wall time, CPU time (user +
  sys of the child), peak RSS, HTML size;
* the baseline ``git log -p --stat`` on the same repository (output discarded): the
  git CLI reading the same history with diffs, in a fresh process;

then, once: what the alternative design (unified diffs rendered in Python with
difflib and embedded as text) would cost in time and bytes against what gitmem
embeds (each version as an edit script of the one before, which the page turns
back into texts and diffs itself); and, when Chromium and selenium are installed,
the page in headless Chromium: time to the first timeline page, and to a memory's
diff after a click.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import LIVE_TIERS, Generator, log, machine_info  # noqa: E402
from _common import report as emit_report  # noqa: E402
from gitmem.memory.markdown import render  # noqa: E402
from gitmem.memory.paths import memory_relpath, slugify  # noqa: E402
from gitmem.memory.schema import new_id  # noqa: E402
from gitmem.vault import Vault  # noqa: E402

AUTHORS = ("planner-agent <planner@agents.local>", "atlas <atlas@agents.local>",
           "scribe-agent <scribe@agents.local>", "Maya Lindqvist <maya@example.com>")
PROTECTED = {"goal", "rule", "constraint"}
RECIPE = "view-bench-1"  # bump when the vault recipe changes: a reused vault is rebuilt
TARGETS = {"generation_wall_s": 10.0}
GIT_ENV = {"GIT_AUTHOR_NAME": "Maya Lindqvist", "GIT_AUTHOR_EMAIL": "maya@example.com",
           "GIT_COMMITTER_NAME": "Maya Lindqvist", "GIT_COMMITTER_EMAIL": "maya@example.com"}


class StepClock:
    """The vault's clock: ten minutes later at every write, so history spans weeks."""

    def __init__(self) -> None:
        self.now = datetime(2026, 6, 1, 8, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def step(self) -> None:
        self.now += timedelta(minutes=10)


def git(root: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True,
                          env=env).stdout


def write_notes(src: Path, gen: Generator, n: int) -> None:
    """N Markdown notes with gitmem frontmatter in tier folders (the import source)."""
    stamp = "2026-06-01T08:00:00Z"
    for i in range(n):
        spec = gen.spec()
        mid = new_id()
        meta = {"id": mid, "title": spec["title"], "type": spec["type"], "tier": spec["tier"],
                "status": "active", "tags": spec["tags"], "created": stamp, "updated": stamp,
                "agent": AUTHORS[i % len(AUTHORS)].split(" <")[0]}
        path = src / memory_relpath(spec["tier"], mid, f"{slugify(spec['title'])}-{i}", layout="hashed")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(meta, spec["body"]), encoding="utf-8")


def build_vault(root: Path, memories: int, commits: int) -> dict[str, Any]:
    """The benchmark vault: an import commit, then writes until HEAD has ``commits``."""
    start = time.perf_counter()
    gen = Generator(seed=memories)
    src = root.parent / "notes"
    shutil.rmtree(src, ignore_errors=True)
    write_notes(src, gen, memories)
    log(f"importing {memories} notes")
    clock = StepClock()
    vault = Vault.init(root, from_dir=src, author=AUTHORS[0], clock=clock)
    shutil.rmtree(src)
    rows = [(m.id, m.type, m.tier) for m in vault.list()]
    editable = [mid for mid, kind, _ in rows if kind not in PROTECTED]
    tiers = dict((mid, tier) for mid, _, tier in rows)
    rng = random.Random(7)
    count = int(git(root, "rev-list", "--count", "HEAD"))
    kinds: dict[str, int] = {}
    while count < commits:
        clock.step()
        who = rng.choice(AUTHORS)
        mid = rng.choice(editable)
        roll = rng.random()
        if roll < 0.55:
            kind = "update"
            vault.update(mid, append=gen.sentence(), author=who)
        elif roll < 0.75:
            kind = "move"
            tier = rng.choice([t for t in LIVE_TIERS if t != tiers[mid]])
            vault.move(mid, tier, author=who)
            tiers[mid] = tier
        elif roll < 0.85:
            kind = "tag"
            vault.update(mid, add_tags=[rng.choice(["followup", "review", "idea", "todo"])], author=who)
        elif roll < 0.90:
            kind = "delete"
            vault.delete(mid, author=who)
            editable.remove(mid)
        elif roll < 0.99:
            kind = "add"
            spec = gen.spec()
            m = vault.add(spec["title"], spec["body"], type=spec["type"], tier=spec["tier"],
                          tags=spec["tags"], author=who)
            if m.type not in PROTECTED:
                editable.append(m.id)
            tiers[m.id] = m.tier
        else:
            kind = "outside edit"
            vault.flush()
            path = root / vault.get(mid).path
            with path.open("a", encoding="utf-8") as handle:
                handle.write(f"\n{gen.sentence()}\n")
            git(root, "commit", "-q", "-am", "Fix a note by hand")
        kinds[kind] = kinds.get(kind, 0) + 1
        count += 2 if kind in ("move", "delete") else 1  # a move is a rename commit + the move
        if sum(kinds.values()) % 500 == 0:
            log(f"  {count}/{commits} commits")
    vault.close()
    return {"seconds": round(time.perf_counter() - start, 1), "writes": kinds,
            "commits": int(git(root, "rev-list", "--count", "HEAD"))}


def prepare(workdir: Path, memories: int, commits: int, fresh: bool) -> tuple[Path, dict[str, Any]]:
    """The vault to measure: reused when its recipe and size match, else built."""
    root = workdir / f"vault-{memories}-{commits}"
    marker = workdir / f"vault-{memories}-{commits}.json"
    if not fresh and marker.is_file() and (root / ".git").is_dir():
        built = json.loads(marker.read_text())
        if built.get("recipe") == RECIPE:
            log(f"reusing {root}")
            return root, {**built, "reused": True}
    shutil.rmtree(root, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    built = {"recipe": RECIPE, **build_vault(root, memories, commits)}
    marker.write_text(json.dumps(built))
    return root, {**built, "reused": False}


def run_child(cmd: list[str], cwd: Path, stdout: Any = subprocess.DEVNULL) -> dict[str, float]:
    """Run ``cmd``; its wall time, CPU time (user + sys) and peak RSS, from wait4."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=stdout, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_mb": usage.ru_maxrss / 1024}


def median(rows: list[dict[str, float]], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 3)


def measure_generation(root: Path, out: Path, reps: int) -> dict[str, Any]:
    """``gitmem view`` and ``git log -p --stat``, interleaved."""
    views, logs = [], []
    view_cmd = [sys.executable, "-m", "gitmem", "-C", str(root), "view", "--json", "--out", str(out)]
    for rep in range(reps):
        load = os.getloadavg()
        with tempfile.TemporaryFile() as captured:
            row = run_child(view_cmd, root, stdout=captured)
            captured.seek(0)
            row["report"] = json.loads(captured.read())
        row["loadavg_1m_before"] = load[0]
        views.append(row)
        logs.append(run_child(["git", "log", "-p", "--stat"], root))
        log(f"  rep {rep + 1}/{reps}: view {row['wall_s']:.2f} s, git log -p --stat {logs[-1]['wall_s']:.2f} s")
    report = views[-1]["report"]
    wall, base = median(views, "wall_s"), median(logs, "wall_s")
    return {
        "gitmem_view": {"wall_s": wall, "cpu_s": median(views, "cpu_s"),
                        "max_rss_mb": round(max(r["max_rss_mb"] for r in views), 1),
                        "wall_s_each": [round(r["wall_s"], 3) for r in views],
                        "loadavg_1m_before_each": [round(r["loadavg_1m_before"], 2) for r in views],
                        "html_mb": round(report["bytes"] / 2**20, 2), "memories": report["memories"],
                        "commits": report["commits"], "versions": report["versions"],
                        "within_target": wall <= TARGETS["generation_wall_s"]},
        "git_log_p_stat": {"wall_s": base, "cpu_s": median(logs, "cpu_s"),
                           "wall_s_each": [round(r["wall_s"], 3) for r in logs]},
        "ratio_view_over_git_log_wall": round(wall / base, 3) if base else None,
    }


def measure_designs(root: Path) -> dict[str, Any]:
    """Edit scripts diffed in the page (what gitmem does) against unified diffs rendered
    in Python with difflib and embedded as text: generation time and bytes of each
    (both include reading every version from git)."""
    from gitmem.exchange import view
    with Vault.open(root) as vault:
        data = view.gather(vault)
        start = time.perf_counter()
        script_bytes = sum(len(view.to_json(chain)) for chain in view.version_chains(vault, data))
        script_s = time.perf_counter() - start
        start = time.perf_counter()
        diff_bytes = 0
        for texts in view.version_texts(vault, data):
            before: list[str] = []
            for text in texts:
                after = text.splitlines(keepends=True) if text is not None else []
                diff_bytes += len(view.to_json("".join(difflib.unified_diff(before, after, n=3))))
                before = after
        difflib_s = time.perf_counter() - start
    return {"edit_scripts_diffed_in_page": {"seconds": round(script_s, 2), "mb": round(script_bytes / 2**20, 2)},
            "difflib_prerendered": {"seconds": round(difflib_s, 2), "mb": round(diff_bytes / 2**20, 2)},
            "note": "versions as edit scripts (the page rebuilds each version and diffs it when a "
                    "memory is opened) vs every unified diff rendered at generation time"}


def measure_browser(page: Path) -> dict[str, Any]:
    """The page in headless Chromium: first timeline page, then a click to a diff."""
    chromium, driver_bin = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        return {"skipped": "selenium is not installed (pip install selenium)"}
    if not chromium or not driver_bin:
        return {"skipped": "chromium is not installed (apt-get install chromium chromium-driver)"}
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(driver_bin))
    try:
        start = time.perf_counter()
        driver.get(page.as_uri())
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline .commit"))
        loaded = time.perf_counter() - start
        rows = len(driver.find_elements(By.CSS_SELECTOR, "#timeline .commit"))
        driver.find_element(By.CSS_SELECTOR, "#tab-memories").click()
        link = WebDriverWait(driver, 30).until(lambda d: d.find_element(By.CSS_SELECTOR, "#memories .mem-link"))
        start = time.perf_counter()
        link.click()
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#detail .diff-line"))
        opened = time.perf_counter() - start
        nodes = driver.execute_script("return document.getElementsByTagName('*').length")
    finally:
        driver.quit()
    return {"load_to_timeline_s": round(loaded, 2), "timeline_rows_in_dom": rows,
            "click_to_diff_s": round(opened, 2), "dom_elements": nodes}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--commits", type=int, default=5_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "gitmem-bench-view")
    parser.add_argument("--fresh", action="store_true", help="Rebuild the vault even if one is there.")
    parser.add_argument("--build-only", action="store_true", help="Build (or check) the vault and stop.")
    parser.add_argument("--no-browser", action="store_true", help="Skip the headless Chromium step.")
    parser.add_argument("--out", help="Also save the JSON result to this file.")
    args = parser.parse_args(argv)
    root, built = prepare(args.workdir, args.memories, args.commits, args.fresh)
    result: dict[str, Any] = {"benchmark": "gitmem view", "machine": machine_info(args.workdir),
                              "vault": {"memories": args.memories, **built}}
    if args.build_only:
        emit_report(result, args.out)
        return result
    page = args.workdir / "view.html"
    log(f"generating the view {args.reps} times, interleaved with git log -p --stat")
    result["generation"] = measure_generation(root, page, args.reps)
    log("measuring both diff designs")
    result["designs"] = measure_designs(root)
    if not args.no_browser:
        log("opening the page in headless Chromium")
        result["browser"] = measure_browser(page)
    result["loadavg_1_5_15_after"] = [round(x, 2) for x in os.getloadavg()]
    emit_report(result, args.out)
    return result


if __name__ == "__main__":
    main()
