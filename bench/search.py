"""Search benchmark: gitmem's Whoosh index against SQLite FTS5, same corpus, same run.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/search.py [--sizes 1000,10000] [--queries 50] [--creates 100] [--out FILE]

For each size N: a vault of N generated memories (0.3-5 KB Markdown, one bulk
commit), then

* full reindex throughput (``vault.reindex()``) vs. FTS5 bulk insert;
* create latency *including* indexing (``vault.add`` with the index open), and the
  word-query latency with the index segments those creates left, before and after the
  idle merge;
* query latency p50/p95 by kind (word, phrase, boolean, prefix, filtered),
  gitmem (``vault.search``, limit 10) vs. FTS5 (``MATCH ... ORDER BY rank
  LIMIT 10``, porter tokenizer, filters as SQL ``WHERE``) returning the same
  result fields (title, tags, tier, type, a highlighted snippet), and the ratio;
  also FTS5 returning row ids only, and that ratio;
* catch-up after 100 files edited outside gitmem while nothing ran: the time
  a freshly opened vault needs before its first search (scan + re-index of
  what changed), compared with a full reindex.
"""

from __future__ import annotations

import argparse
import os
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

from _common import Generator, log, machine_info, populate_bulk, report, summary_ms, timed  # noqa: E402
from gitmem.vault import Vault  # noqa: E402

TARGETS = {"create_p50_ms": 30.0, "word_p50_ms": 10.0, "any_p95_ms": 50.0, "fts5_ratio": 5.0}
# FTS5 returns what gitmem's search returns for each hit (title, tags, tier, type, a
# highlighted snippet of about 200 characters, in rank order); "fts5_ids_only" is the same
# query returning row ids only (no result a caller could show), reported alongside.
FTS5_RESULT = "rowid, title, tags, tier, type, rank, snippet(m, 1, '**', '**', '\u2026', 32)"


def fts5_build(vault: Vault) -> tuple[sqlite3.Connection, float]:
    """An FTS5 table (porter) of the vault's memories, built from the same files."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE m USING fts5(title, body, tags, tier UNINDEXED, type UNINDEXED, "
               "tokenize='porter unicode61')")
    rows = []
    for row in vault.catalog.all_rows():
        memory = vault.services.reader.read_file(row.path)  # the same parse gitmem indexes
        rows.append((memory.title, memory.body, " ".join(memory.tags), memory.tier, memory.type))
    start = time.perf_counter()
    with db:
        db.executemany("INSERT INTO m VALUES (?, ?, ?, ?, ?)", rows)
    return db, time.perf_counter() - start


def queries(rng: random.Random, n: int, gen: Generator,
            bodies: list[str]) -> dict[str, list[tuple[str, str, dict[str, str]]]]:
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

    out: dict[str, list[tuple[str, str, dict[str, str]]]] = {k: [] for k in
                                                             ("word", "phrase", "boolean", "prefix", "filtered")}
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


def time_queries(run: Callable[[str, str, dict[str, str]], Any],
                 items: list[tuple[str, str, dict[str, str]]]) -> dict[str, Any]:
    run(*items[0])  # warm-up
    return summary_ms([timed(lambda q=q: run(*q))[0] for q in items])


def segment_effect(vault: Vault, items: list[tuple[str, str, dict[str, str]]]) -> dict[str, Any]:
    """Word-query latency with the segments a burst of creates left, the idle merge
    (what the vault's flush timer runs after 0.25 s without writes), and after it."""
    index = vault.index
    before = index._segment_count()  # noqa: SLF001
    piled = time_queries(lambda q, _m, f: vault.search(q, limit=10, **f), items)
    seconds, _ = timed(index.merge_small)
    merged = time_queries(lambda q, _m, f: vault.search(q, limit=10, **f), items)
    return {"segments": before, "word_p50_ms": piled["p50_ms"],
            "idle_merge_ms": round(seconds * 1000, 1),
            "segments_after_idle_merge": index._segment_count(),  # noqa: SLF001
            "word_p50_ms_after_idle_merge": merged["p50_ms"]}


def run_size(n: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Every measurement for a vault of ``n`` memories."""
    gen = Generator(seed=n)
    root = workdir / f"vault-{n}"
    out: dict[str, Any] = {"memories": n}
    with Vault.init(root, author="bench-agent") as vault:
        log(f"populating {n} memories (one bulk commit)")
        populate_bulk(vault, gen, n)
        log("full reindex")
        seconds, count = timed(vault.reindex)
        fts, fts_seconds = fts5_build(vault)
        out["reindex"] = {"docs": count, "seconds": round(seconds, 2), "docs_per_s": round(count / seconds),
                          "fts5_seconds": round(fts_seconds, 3), "fts5_docs_per_s": round(count / fts_seconds),
                          "ratio_to_fts5": round(seconds / fts_seconds, 1)}
        log(f"{args.creates} creates with indexing")
        lat = [timed(lambda: vault.add(**gen.spec()))[0] for _ in range(args.creates)]
        out["create_with_index"] = summary_ms(lat)
        bodies = [vault.services.reader.read_file(r.path).body for r in list(vault.catalog.all_rows())[:500]]
        sets = queries(random.Random(n), args.queries, gen, bodies)
        out["segments_after_creates"] = segment_effect(vault, sets["word"])
        vault.index.optimize()
        log("queries")
        out["queries"] = {}

        def fts_query(columns: str) -> Callable[[str, str, dict[str, str]], list[Any]]:
            def run(_: str, match: str, filters: dict[str, str]) -> list[Any]:
                sql, params = f"SELECT {columns} FROM m WHERE m MATCH ?", [match]
                for key, value in filters.items():
                    sql += f" AND {key} = ?"
                    params.append(value)
                return fts.execute(sql + " ORDER BY rank LIMIT 10", params).fetchall()
            return run

        for kind, items in sets.items():
            ours = time_queries(lambda q, _m, f: vault.search(q, limit=10, **f), items)
            theirs = time_queries(fts_query(FTS5_RESULT), items)
            ids = time_queries(fts_query("rowid"), items)
            out["queries"][kind] = {
                "gitmem": ours, "fts5": theirs, "fts5_ids_only": ids,
                "ratio_p50": round(ours["p50_ms"] / max(theirs["p50_ms"], 1e-3), 1),
                "ratio_p95": round(ours["p95_ms"] / max(theirs["p95_ms"], 1e-3), 1),
                "ratio_p50_ids_only": round(ours["p50_ms"] / max(ids["p50_ms"], 1e-3), 1),
                "example": items[0][0]}
        paths = [row.path for row in vault.catalog.all_rows()]
    log("catch-up after 100 outside edits")
    for path in random.Random(1).sample(paths, min(100, len(paths))):
        file = root / path
        file.write_text(file.read_text() + "\nEdited outside gitmem: zanzibar.\n")
    start = time.perf_counter()
    with Vault.open(root) as vault:
        vault.index  # noqa: B018 - the first use catches up
        catch_up = time.perf_counter() - start
        found = vault.search("zanzibar", limit=1).total
    out["catch_up_100_edits"] = {"seconds": round(catch_up, 3), "found_after": found,
                                 "vs_full_reindex": round(catch_up / out["reindex"]["seconds"], 3)}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--queries", type=int, default=50, help="queries per kind")
    parser.add_argument("--creates", type=int, default=100)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"benchmark": "gitmem search vs SQLite FTS5",
                              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="gitmem-bench-") as tmp:
        result["machine"] = machine_info(tmp)
        for n in (int(s) for s in args.sizes.split(",")):
            result["sizes"][str(n)] = run_size(n, args, Path(tmp))
    result["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    largest = result["sizes"][max(result["sizes"], key=int)]
    q = largest["queries"]
    result["targets"] = {
        "at_size": largest["memories"],
        "create_with_index_p50_le_30ms": largest["create_with_index"]["p50_ms"] <= TARGETS["create_p50_ms"],
        "word_p50_le_10ms": q["word"]["gitmem"]["p50_ms"] <= TARGETS["word_p50_ms"],
        "every_kind_p95_le_50ms": all(v["gitmem"]["p95_ms"] <= TARGETS["any_p95_ms"] for v in q.values()),
        "within_5x_fts5_non_prefix_p50": all(v["ratio_p50"] <= TARGETS["fts5_ratio"]
                                             for k, v in q.items() if k != "prefix"),
        "within_5x_fts5_ids_only_non_prefix_p50": {
            k: v["ratio_p50_ids_only"] <= TARGETS["fts5_ratio"] for k, v in q.items() if k != "prefix"},
    }
    report(result, args.out)
    return result


if __name__ == "__main__":
    main()
