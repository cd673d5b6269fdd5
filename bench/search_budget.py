"""What an agent pays in characters for a useful search hit: ``memory_search`` of the
``gitmem`` tool profile in its default form and compact (``{id, title, snippet}`` hits
within a character budget), on LoCoMo's dev questions.

Usage (prints JSON)::

    python bench/search_budget.py [DATASET] [--conversations N] [--questions N]
                                  [--budget 2000] [--limit 10] [--lexical]

DATASET is a file in LoCoMo's JSON format (default ``../shared/eval/locomo_dev.json``
relative to the repository root; CC BY-NC: read it from there, never copy it here).  Each
conversation becomes one vault, built as ``bench/retrieval.py --backend vault`` builds it
(its loader and ingestion are imported from there: one memory per dialog turn, the turn id
in a frontmatter field the index does not read, each turn following the one before it in its session).  With the ``embed`` extra
the vault is embedded first, so search is hybrid as an agent would find it (``--lexical``:
words only).  Each question of categories 1-4 is asked through ``Toolbox.call_text``, the
text a model receives, once by default and once with ``compact`` (same ``limit``).

A hit is useful when it is one of the question's evidence turns.  Reported for both forms:
characters returned per call and per useful hit (all characters over all useful hits),
hits returned per call, useful hits per call, hit@5 (an evidence turn among the first five
hits returned), and for compact the hits left out to fit the budget.  ``same_ranking``
counts the questions whose compact hits are not the first hits of the default result (0:
the same ranking).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from retrieval import DEFAULT_DATA, VaultBackend, load  # noqa: E402

from gitmem import Toolbox  # noqa: E402
from gitmem.search.embedding import available as embedding_available  # noqa: E402


def _dia_of(vault) -> dict[str, str]:
    """memory id -> dialog turn id (from the ``turn`` field the ingestion gives each turn)."""
    return {m.id: str(m.meta["turn"]) for m in vault.list(status=None, limit=None) if m.meta.get("turn")}


def _form(rows: list[dict]) -> dict:
    calls = len(rows) or 1
    chars = sum(r["chars"] for r in rows)
    useful = sum(r["useful"] for r in rows)
    out = {"calls": len(rows), "chars_per_call": round(chars / calls),
           "hits_per_call": round(sum(r["hits"] for r in rows) / calls, 2),
           "useful_hits_per_call": round(useful / calls, 3),
           "chars_per_useful_hit": round(chars / useful) if useful else None,
           "hit@5": round(sum(1 for r in rows if r["rank"] and r["rank"] <= 5) / calls, 3),
           "hit@returned": round(sum(1 for r in rows if r["rank"]) / calls, 3)}
    if rows and "left_out" in rows[0]:
        out["left_out_per_call"] = round(sum(r["left_out"] for r in rows) / calls, 2)
        out["calls_with_left_out"] = sum(1 for r in rows if r["left_out"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", nargs="?", default=str(DEFAULT_DATA))
    ap.add_argument("--conversations", type=int, default=0, help="only the first N conversations (0: all)")
    ap.add_argument("--questions", type=int, default=0, help="only the first N questions of each (0: all)")
    ap.add_argument("--budget", type=int, default=2000, help="budget_chars of the compact form")
    ap.add_argument("--limit", type=int, default=10, help="hits asked for, in both forms")
    ap.add_argument("--lexical", action="store_true", help="do not embed: search by words only")
    args = ap.parse_args(argv)

    convs = load(Path(args.dataset))
    if args.conversations:
        convs = convs[:args.conversations]
    hybrid = embedding_available() and not args.lexical
    rows: dict[str, list[dict]] = {"default": [], "compact": []}
    mismatched, turns, build_s, modes = 0, 0, 0.0, set()
    for conv in convs:
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
            t0 = time.perf_counter()
            backend = VaultBackend(Path(tmp), None, "speaker-words")
            backend.ingest(conv["turns"])
            vault = backend.vault
            if hybrid:
                vault.embed()
            build_s += time.perf_counter() - t0
            turns += len(conv["turns"])
            dia = _dia_of(vault)
            box = Toolbox(vault, "gitmem", agent="Bench <bench@example.com>")
            questions = conv["questions"][:args.questions] if args.questions else conv["questions"]
            for q in questions:
                ranked_ids: dict[str, list[str]] = {}
                for form, extra in (("default", {}), ("compact", {"compact": True, "budget_chars": args.budget})):
                    text, is_error = box.call_text("memory_search", {"query": q["q"], "limit": args.limit, **extra})
                    if is_error:
                        raise SystemExit(f"memory_search failed: {text}")
                    result = json.loads(text)
                    modes.add(result["mode"])
                    ids = [h["id"] for h in result["hits"]]
                    ranked_ids[form] = ids
                    found = [dia.get(i) for i in ids]
                    row = {"chars": len(text), "hits": len(ids),
                           "useful": sum(1 for d in found if d in q["evidence"]),
                           "rank": next((n + 1 for n, d in enumerate(found) if d in q["evidence"]), None)}
                    if form == "compact":
                        row["left_out"] = result["left_out"]
                    rows[form].append(row)
                if ranked_ids["compact"] != ranked_ids["default"][:len(ranked_ids["compact"])]:
                    mismatched += 1
            backend.close()
    default, compact = _form(rows["default"]), _form(rows["compact"])
    report = {
        "dataset": Path(args.dataset).name, "conversations": len(convs), "turns": turns,
        "questions": len(rows["default"]), "search": "hybrid" if hybrid else "lexical",
        "modes_seen": sorted(modes), "limit": args.limit, "budget_chars": args.budget,
        "build_s": round(build_s, 1), "default": default, "compact": compact,
        "same_ranking": {"questions_differing": mismatched},
        "chars_per_useful_hit_ratio": (round(compact["chars_per_useful_hit"] / default["chars_per_useful_hit"], 3)
                                       if compact["chars_per_useful_hit"] and default["chars_per_useful_hit"]
                                       else None),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
