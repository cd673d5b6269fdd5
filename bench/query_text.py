"""Plain-language queries never fail: count search errors on random text.

Usage (prints JSON)::

    python bench/query_text.py [--count 10000] [--seed 7]

Builds a small index, then searches it with ``--count`` random strings made of words,
question marks, colons (``CS:GO``, ``TODO:fix``, ``Status: done``), quotes, parentheses,
upper-case operators, stars, emoji, accents and other scripts, and counts every query
that raised (any exception).  The target is zero.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gitmem.search.whoosh import IndexDoc, SearchIndex  # noqa: E402

WORDS = ("what did Caroline say about the trip to Paris when was it besides CS:GO TODO:fix "
         "Status: done note: https://example.com tag: type: created: updated:yesterday "
         "created:2026-13-01 id: AND OR NOT and or not ( ) \" ' * ab*cd* deploy* ? ! , . ; - "
         "café naïve 日本語 Ελληνικά русский 😀 — “quoted” ‘x’ C++ e.g. i.e. 3.5 10:30 "
         "foo:bar (a b) \"half tier:mid_term tag:#kegs source:").split(" ")


def random_query(rng: random.Random) -> str:
    """A random plain-language string: words, punctuation and stray syntax."""
    parts = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.7:
            parts.append(rng.choice(WORDS))
        elif r < 0.9:
            parts.append("".join(rng.choice("abcXYZ:\"()*?!#-_.'’/\\") for _ in range(rng.randint(1, 6))))
        else:
            parts.append("".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(1, 5))))
    sep = rng.choice([" ", " ", "", "  ", "\t"])
    return sep.join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    errors: dict[str, int] = {}
    examples: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        ix = SearchIndex(Path(tmp) / "ix")
        ix.rebuild(IndexDoc(path=f"m{i}.md", id=f"m{i}", title=f"note {i}", hash="",
                            body=" ".join(rng.choice(WORDS) for _ in range(30)),
                            tags=["kegs"], source=f"s{i % 7}", created="2026-05-01T10:00:00Z")
                   for i in range(300))
        t0 = time.perf_counter()
        for _ in range(args.count):
            q = random_query(rng)
            try:
                ix.search(q, limit=10)
            except Exception as exc:  # noqa: BLE001 - counting every failure is the point
                name = type(exc).__name__
                errors[name] = errors.get(name, 0) + 1
                if len(examples) < 10:
                    examples.append(q)
        elapsed = time.perf_counter() - t0
        ix.close()
    print(json.dumps({"queries": args.count, "errors": sum(errors.values()),
                      "by_kind": errors, "examples": examples,
                      "seconds": round(elapsed, 2)}, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
