"""Search benchmark: gitmem's Whoosh index against SQLite FTS5, same corpus, same run,
on the index as users have it (fragmented by many separate writes).

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/search.py [--scale 10000] [--keep DIR] [--optimized] [--writes 300]
                           [--idle-every 0] [--queries 50] [--creates 100]
                           [--text-queries 10000] [--out FILE]

``--scale N`` is the number of memories (default 10,000; ``--sizes 1000,10000``
runs several sizes in one go).  The vault is made as a user would: a Zipf-like
corpus of Markdown notes imported with ``gitmem init --from`` (a child process);
``--keep DIR`` keeps it for later runs, which work on a copy.  From 50,000
memories the defaults are ``--queries 30 --creates 50`` (the JSON says so).
Then, for each size:

* full reindex throughput (``vault.reindex()``) vs. FTS5 bulk insert of the same
  parsed files, wall and CPU time;
* the **fragmented index**: ``--writes`` memories added one at a time, each from a
  freshly opened ``Vault`` that is closed right after (as ``gitmem add`` processes
  or short MCP sessions do; close() does not run the idle merge); with
  ``--idle-every K``, every K-th writer (the first, the K+1-th, ...) stays open
  idle for 1 s before closing, so its idle merge runs (as a long-lived server's
  would).  Open, add and close are timed;
  the number of index segments is reported after the import, after the writes
  and, with ``--optimized``, on an optimized copy (``vault.services.searcher.index.optimize()``);
* query latency p50/p95 by kind (word, phrase, boolean, prefix, filtered), wall
  and CPU time (``time.process_time``): gitmem (``vault.search``, limit 10) on
  the fragmented index, vs. FTS5 (``MATCH ... ORDER BY rank LIMIT 10``, porter
  tokenizer, filters as SQL ``WHERE``) returning the same result fields (title,
  tags, tier, type, a highlighted snippet) and FTS5 returning row ids only, and
  with ``--optimized`` gitmem on the optimized copy; all interleaved query by
  query (rotating order), ratios to FTS5 reported;
* ``--text-queries`` random plain-language strings (``bench/query_text.py``'s: words,
  stray syntax, other scripts) searched on the fragmented vault: queries that raised are
  counted (the target is none);
* create latency, the whole operation a user waits for: ``vault.add`` with the
  index open (commit, search index, MEMORY.md) plus ``vault.flush()`` (the
  ``.git/index`` update otherwise deferred), on the fragmented vault after the
  queries; add and flush also reported apart; then the idle merge
  (``vault.services.searcher.index.merge_small()``) those creates would trigger;
* catch-up after 100 files edited outside gitmem while nothing ran: the time
  a freshly opened vault needs before its first search (scan + re-index of
  what changed), compared with a full reindex.

The load average is reported before and after the run and around the queries.
"""

from __future__ import annotations

import argparse
import random
import re
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (Generator, add_scale_options, bench_vault, copy_tree, cpu_timed,  # noqa: E402
                     index_segments, loadavg, log, machine_info, report, summary_ms, timed, timed_create)
from query_text import random_query  # noqa: E402
from gitmem.vault import Vault  # noqa: E402

TARGETS = {"create_p50_ms": 40.0, "word_p50_ms": 10.0, "any_p95_ms": 100.0, "fts5_ratio": 5.0}
LARGE = 50_000       # from this size on, fewer queries and creates by default
# FTS5 returns what gitmem's search returns for each hit (title, tags, tier, type, a
# highlighted snippet of about 200 characters, in rank order); "fts5_ids_only" is the same
# query returning row ids only (no result a caller could show), reported alongside.
FTS5_RESULT = "rowid, title, tags, tier, type, rank, snippet(m, 1, '**', '**', '\u2026', 32)"
Query = tuple[str, str, dict[str, str]]   # (gitmem query, FTS5 MATCH expression, filters)


def fts5_rows(vault: Vault) -> list[tuple[str, str, str, str, str]]:
    """(title, body, tags, tier, type) of every memory, parsed from its file as gitmem
    indexes it."""
    rows = []
    for listed in vault.list(status=None):
        m = vault.services.reader.memory_from_bytes(listed.path, (vault.root / listed.path).read_bytes())
        rows.append((m.title, m.body, " ".join(m.tags), m.tier, m.type))
    return rows


def fts5_build(rows: list[tuple[str, str, str, str, str]]) -> tuple[sqlite3.Connection, float, float]:
    """An FTS5 table (porter) of the rows; (db, wall s, CPU s) of the insert."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE m USING fts5(title, body, tags, tier UNINDEXED, type UNINDEXED, "
               "tokenize='porter unicode61')")

    def insert() -> None:
        with db:
            db.executemany("INSERT INTO m VALUES (?, ?, ?, ?, ?)", rows)
    wall, cpu, _ = cpu_timed(insert)
    return db, wall, cpu


def fts5_runner(db: sqlite3.Connection, columns: str) -> Callable[[Query], list[Any]]:
    def run(query: Query) -> list[Any]:
        _, match, filters = query
        sql, params = f"SELECT {columns} FROM m WHERE m MATCH ?", [match]
        for key, value in filters.items():
            sql += f" AND {key} = ?"
            params.append(value)
        return db.execute(sql + " ORDER BY rank LIMIT 10", params).fetchall()
    return run


def gitmem_runner(vault: Vault) -> Callable[[Query], Any]:
    return lambda query: vault.search(query[0], limit=10, **query[2])


def queries(rng: random.Random, n: int, gen: Generator, bodies: list[str]) -> dict[str, list[Query]]:
    """(gitmem query, FTS5 MATCH expression, filters) per kind.

    Query words are content words of middling frequency (vocabulary ranks
    30-3,000), as people search for; phrases are two adjacent words taken
    from a stored memory, so they exist.
    """
    def word() -> str:
        return gen.vocab[rng.randint(30, 3000)]

    def phrase() -> str:
        words = re.findall(r"[a-z]{3,}", rng.choice(bodies).lower())
        i = rng.randrange(len(words) - 1)
        return f'"{words[i]} {words[i + 1]}"'

    out: dict[str, list[Query]] = {k: [] for k in ("word", "phrase", "boolean", "prefix", "filtered")}
    for _ in range(n):
        w = word()
        out["word"].append((w, w, {}))
        p = phrase()
        out["phrase"].append((p, p, {}))
        x, y = word(), word()
        op = rng.choice(["AND", "OR", "NOT"])
        out["boolean"].append((f"{x} {op} {y}", f"{x} {op} {y}", {}))
        stem = word()[:3]
        out["prefix"].append((f"{stem}*", f"{stem}*", {}))
        tier, mtype = rng.choice(["short_term", "mid_term", "long_term"]), rng.choice(["fact", "episodic", "skill"])
        out["filtered"].append((w, w, {"tier": tier, "type": mtype}))
    return out


def wall_cpu(walls: list[float], cpus: list[float]) -> dict[str, Any]:
    return {"wall": summary_ms(walls), "cpu": summary_ms(cpus)}


def ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> float:
    return round(a["wall"][key] / max(b["wall"][key], 1e-3), 1)


def time_interleaved(runners: dict[str, Callable[[Query], Any]], items: list[Query]) -> dict[str, Any]:
    """Each query of ``items`` run once by every runner, the order rotating from one
    query to the next (after one warm-up each); wall and CPU time per runner."""
    names = list(runners)
    for name in names:
        runners[name](items[0])
    walls: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    for i, query in enumerate(items):
        for name in names[i % len(names):] + names[:i % len(names)]:
            wall, cpu, _ = cpu_timed(lambda: runners[name](query))
            walls[name].append(wall)
            cpus[name].append(cpu)
    return {name: wall_cpu(walls[name], cpus[name]) for name in names}


def fragment(root: Path, gen: Generator, writes: int, idle_every: int) -> dict[str, Any]:
    """``writes`` memories added each from a freshly opened Vault, closed right after
    (every ``idle_every``-th one, from the first, idles 1 s first, so its idle merge runs)."""
    opens, adds, adds_cpu, closes = [], [], [], []
    start = time.perf_counter()
    for i in range(writes):
        spec = gen.spec()
        dt, vault = timed(lambda: Vault.open(root))
        opens.append(dt)
        wall, cpu, _ = cpu_timed(lambda: vault.add(**spec))
        adds.append(wall)
        adds_cpu.append(cpu)
        if idle_every and i % idle_every == 0:
            time.sleep(1.0)
        closes.append(timed(vault.close)[0])
        if (i + 1) % 50 == 0:
            log(f"  {i + 1}/{writes} separate writes, {index_segments(root)} segments")
    return {"writes": writes, "idle_every": idle_every, "seconds": round(time.perf_counter() - start, 1),
            "open": summary_ms(opens), "add": wall_cpu(adds, adds_cpu), "close": summary_ms(closes),
            "note": "add from a freshly opened Vault: its first write opens the search index"}


def text_queries(vault: Vault, count: int) -> dict[str, Any]:
    """``count`` random plain-language strings (those of ``bench/query_text.py``: words,
    stray syntax, other scripts) searched on the vault; every query that raised is
    counted (the target is none)."""
    rng = random.Random(7)
    errors: dict[str, int] = {}
    examples: list[str] = []
    start = time.perf_counter()
    for _ in range(count):
        q = random_query(rng)
        try:
            vault.search(q, limit=10)
        except Exception as exc:  # noqa: BLE001 - counting every failure is the point
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            if len(examples) < 10:
                examples.append(q)
    return {"queries": count, "errors": sum(errors.values()), "by_kind": errors, "examples": examples,
            "seconds": round(time.perf_counter() - start, 1)}


def creates(vault: Vault, gen: Generator, count: int) -> dict[str, Any]:
    """``vault.add`` + ``vault.flush()`` (the whole create), timed together and apart."""
    total, total_cpu, adds, flushes = [], [], [], []
    for _ in range(count):
        _, whole, cpu, add, flush = timed_create(vault, gen.spec())
        total_cpu.append(cpu)
        total.append(whole)
        adds.append(add)
        flushes.append(flush)
    return {"create_with_index": wall_cpu(total, total_cpu), "add_only": summary_ms(adds),
            "flush_only": summary_ms(flushes),
            "note": "create = vault.add (commit, search index, MEMORY.md) + vault.flush() (.git/index)"}


def run_size(n: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Every measurement for a vault of ``n`` memories."""
    gen = Generator(seed=n)
    root = workdir / f"vault-{n}"
    out: dict[str, Any] = {"memories": n, "loadavg_before": loadavg(),
                           "vault": bench_vault(n, root, args.keep)}
    out["segments"] = {"after_import": index_segments(root)}
    with Vault.open(root) as vault:
        rows = fts5_rows(vault)
        log("full reindex vs. FTS5 bulk insert")
        wall, cpu, count = cpu_timed(vault.reindex)
        fts, fts_wall, fts_cpu = fts5_build(rows)
        out["reindex"] = {"docs": count, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                          "docs_per_s": round(count / wall),
                          "fts5_wall_s": round(fts_wall, 3), "fts5_cpu_s": round(fts_cpu, 3),
                          "fts5_docs_per_s": round(count / fts_wall), "ratio_to_fts5": round(wall / fts_wall, 1)}
        out["segments"]["after_reindex"] = index_segments(root)
    bodies = [row[1] for row in random.Random(n).sample(rows, min(500, len(rows)))]
    del rows
    log(f"{args.writes} separate writes (fresh Vault each)")
    out["separate_writes"] = fragment(root, gen, args.writes, args.idle_every)
    out["segments"]["fragmented"] = index_segments(root)
    vaults = {"gitmem": Vault.open(root)}
    if args.optimized:
        log("optimized copy")
        copy_tree(root, workdir / f"vault-{n}-optimized")
        vaults["gitmem_optimized"] = Vault.open(workdir / f"vault-{n}-optimized")
        wall, cpu, _ = cpu_timed(vaults["gitmem_optimized"].services.searcher.index.optimize)
        out["optimize"] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
        out["segments"]["optimized"] = index_segments(workdir / f"vault-{n}-optimized")
    try:
        sets = queries(random.Random(n), args.queries, gen, bodies)
        log("queries (interleaved)")
        runners = {name: gitmem_runner(v) for name, v in vaults.items()}
        runners.update(fts5=fts5_runner(fts, FTS5_RESULT), fts5_ids_only=fts5_runner(fts, "rowid"))
        out["queries"] = {"loadavg_before": loadavg(), "index": "fragmented (gitmem) and optimized copy"
                          if args.optimized else "fragmented"}
        for kind, items in sets.items():
            got = time_interleaved(runners, items)
            got["ratio_p50"] = ratio(got["gitmem"], got["fts5"], "p50_ms")
            got["ratio_p95"] = ratio(got["gitmem"], got["fts5"], "p95_ms")
            got["ratio_p50_ids_only"] = ratio(got["gitmem"], got["fts5_ids_only"], "p50_ms")
            if args.optimized:
                got["ratio_p50_fragmented_to_optimized"] = ratio(got["gitmem"], got["gitmem_optimized"], "p50_ms")
            got["example"] = items[0][0]
            out["queries"][kind] = got
        out["queries"]["loadavg_after"] = loadavg()
        vault = vaults["gitmem"]
        if args.text_queries:
            log(f"{args.text_queries} random plain-language queries")
            out["plain_text_queries"] = text_queries(vault, args.text_queries)
        log(f"{args.creates} creates (add + flush) on the fragmented vault")
        out["create"] = creates(vault, gen, args.creates)
        out["segments"]["after_creates"] = index_segments(root)
        wall, cpu, _ = cpu_timed(vault.services.searcher.index.merge_small)
        out["idle_merge_after_creates"] = {"wall_ms": round(wall * 1000, 1), "cpu_ms": round(cpu * 1000, 1),
                                           "segments_after": index_segments(root)}
        paths = [m.path for m in vault.list(status=None)]
    finally:
        for v in vaults.values():
            v.close()
    log("catch-up after 100 outside edits")
    for path in random.Random(1).sample(paths, min(100, len(paths))):
        file = root / path
        file.write_text(file.read_text() + "\nEdited outside gitmem: zanzibar.\n")
    start, cpu = time.perf_counter(), time.process_time()
    with Vault.open(root) as vault:
        vault.services.searcher.index  # noqa: B018 - the first use catches up
        catch_up, catch_up_cpu = time.perf_counter() - start, time.process_time() - cpu
        found = vault.search("zanzibar", limit=1).total
    out["catch_up_100_edits"] = {"seconds": round(catch_up, 3), "cpu_s": round(catch_up_cpu, 3), "found_after": found,
                                 "vs_full_reindex": round(catch_up / out["reindex"]["wall_s"], 3)}
    out["loadavg_after"] = loadavg()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_scale_options(parser, 10_000)
    parser.add_argument("--sizes", help="comma-separated sizes, instead of --scale")
    parser.add_argument("--optimized", action="store_true", help="also time queries on an optimized copy")
    parser.add_argument("--writes", type=int, default=300, help="separate writes that fragment the index")
    parser.add_argument("--idle-every", type=int, default=0, help="every K-th writer idles so its merge runs")
    parser.add_argument("--queries", type=int, help=f"queries per kind (default 50; 30 from {LARGE:,})")
    parser.add_argument("--creates", type=int, help=f"timed creates (default 100; 50 from {LARGE:,})")
    parser.add_argument("--text-queries", type=int, default=10_000,
                        help="random plain-language queries searched for errors (0: none)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [args.scale]
    large = max(sizes) >= LARGE
    defaults = {"queries": 30 if large else 50, "creates": 50 if large else 100}
    reduced = {k: v for k, v in defaults.items() if getattr(args, k) is None and large}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    result: dict[str, Any] = {"benchmark": "gitmem search vs SQLite FTS5",
                              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "sizes": {}}
    if reduced:
        result["fewer_samples_at_scale"] = reduced
    with tempfile.TemporaryDirectory(prefix="gitmem-bench-search-") as tmp:
        result["machine"] = machine_info(tmp)
        for n in sizes:
            result["sizes"][str(n)] = run_size(n, args, Path(tmp))
    result["machine"]["loadavg_at_end"] = loadavg()
    largest = result["sizes"][str(max(sizes))]
    q = {k: v for k, v in largest["queries"].items() if isinstance(v, dict) and "gitmem" in v}
    result["targets"] = {
        "at_size": largest["memories"], "index": "fragmented",
        "segments": largest["segments"]["fragmented"],
        "create_with_index_p50_le_40ms": largest["create"]["create_with_index"]["wall"]["p50_ms"]
        <= TARGETS["create_p50_ms"],
        "word_p50_le_10ms": q["word"]["gitmem"]["wall"]["p50_ms"] <= TARGETS["word_p50_ms"],
        "every_kind_p95_le_100ms": all(v["gitmem"]["wall"]["p95_ms"] <= TARGETS["any_p95_ms"] for v in q.values()),
        "within_5x_fts5_non_prefix_p50": all(v["ratio_p50"] <= TARGETS["fts5_ratio"]
                                             for k, v in q.items() if k != "prefix"),
        "no_errors_on_plain_text_queries": (largest["plain_text_queries"]["errors"] == 0
                                            if "plain_text_queries" in largest else None),
        "within_5x_fts5_ids_only_non_prefix_p50": {
            k: v["ratio_p50_ids_only"] <= TARGETS["fts5_ratio"] for k, v in q.items() if k != "prefix"},
    }
    report(result, args.out)
    return result


if __name__ == "__main__":
    main()
