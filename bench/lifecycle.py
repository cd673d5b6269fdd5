"""Lifecycle benchmark at 10k memories: dedup cost per write, compress of a 200-memory
tier, reflect (plan and apply), MEMORY.md regeneration.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/lifecycle.py [--size 10000] [--writes 100] [--out FILE]

A vault is bulk-populated with N generated memories (bench/_common.py: Zipf words,
0.3-5 KB Markdown) dated 60 days ago, so reflect has real work (short_term memories
decay below the prune threshold).  Baselines in the same run: a write without dedup
(the dedup check's cost is the difference) and a plain ``vault.add``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Generator, log, machine_info, populate_bulk, report, summary_ms, timed  # noqa: E402
from gitmem.vault import Vault  # noqa: E402

TARGETS = {"dedup_check_p50_ms": 20.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--writes", type=int, default=100)
    parser.add_argument("--out", help="Also write the JSON here.")
    args = parser.parse_args()
    gen = Generator(seed=4)
    result: dict[str, Any] = {"benchmark": "lifecycle", "size": args.size}
    with tempfile.TemporaryDirectory(prefix="gitmem-bench-") as tmp:
        result["machine"] = machine_info(tmp)
        past = datetime.now(timezone.utc) - timedelta(days=60)
        vault = Vault.init(Path(tmp) / "v", author="bench-agent", clock=lambda: past)
        log(f"populating {args.size} memories")
        _, result["populate"] = populate_bulk(vault, gen, args.size)
        vault.close()
        vault = Vault.open(Path(tmp) / "v", author="bench-agent")
        vault.scan()
        vault.services.searcher.index  # noqa: B018 - open (and build) the search index outside the timings

        t, text = timed(vault.render_memory_md)
        result["memory_index"] = {"render_ms": round(t * 1000, 2), "lines": text.count(b"\n")}

        log("writes: plain add, write without dedup, write with dedup")
        for name, call in (("add", lambda s: vault.add(**s)),
                           ("write_no_dedup", lambda s: vault.write(s["body"], title=s["title"],
                                                                     type=s["type"], tags=s["tags"])),
                           ("write_dedup", lambda s: vault.write(s["body"], title=s["title"],
                                                                  type=s["type"], tags=s["tags"],
                                                                  dedup=True))):
            lat = [timed(lambda: call(gen.spec()))[0] for _ in range(args.writes)]
            result[name] = summary_ms(lat)
        checks = []
        for _ in range(args.writes):
            s = gen.spec()
            checks.append(timed(lambda: vault.services.lifecycle.most_similar(s["body"], s["title"], s["type"], None))[0])
        result["dedup_check"] = summary_ms(checks)
        result["dedup_overhead_p50_ms"] = round(result["write_dedup"]["p50_ms"]
                                                - result["write_no_dedup"]["p50_ms"], 2)

        log("compress: 200 memories tagged 'batch'")
        for _ in range(200):
            s = gen.spec()
            vault.add(s["title"], s["body"], tags=["batch"], tier="short_term")
        t_batch, batch = timed(lambda: vault.compress_tier("short_term", tag="batch"))
        t_compress, summary = timed(lambda: vault.compress("short_term", files=batch.files,
                                                           title="Batch summary"))
        result["compress_200"] = {"compress_tier_ms": round(t_batch * 1000, 1),
                                  "compress_ms": round(t_compress * 1000, 1),
                                  "files": len(batch.files), "content_chars": len(batch.content)}

        log("reflect")
        for n in range(100):   # retrievals that reflect folds in
            vault.search(gen.word())
        t_plan, plan = timed(lambda: vault.reflect(dry_run=True))
        t_apply, applied = timed(vault.reflect)
        result["reflect"] = {"plan_ms": round(t_plan * 1000, 1), "apply_ms": round(t_apply * 1000, 1),
                             "counts": {k: v for k, v in applied.to_dict().items()
                                        if k in ("pruned", "merged", "promoted", "expired", "reinforced")}}
        t_idle, _ = timed(vault.reflect)
        result["reflect"]["second_run_ms"] = round(t_idle * 1000, 1)
        vault.close()
    result["targets"] = {"dedup_check_p50_ms": {"target": TARGETS["dedup_check_p50_ms"],
                                                "measured": result["dedup_check"]["p50_ms"],
                                                "met": result["dedup_check"]["p50_ms"] <= TARGETS["dedup_check_p50_ms"]}}
    report(result, args.out)


if __name__ == "__main__":
    main()
