"""Speed of the hybrid-search embedding model: numpy (what gitmem runs) vs ONNX Runtime.

Usage (prints JSON)::

    python bench/embed_speed.py [--docs 512]

Runs the same all-MiniLM-L6-v2 network both ways gitmem can (``gitmem.search.embedding``): in
numpy, and as an ONNX graph in ONNX Runtime (when installed).  Reports query latency (one
short question at a time), bulk throughput (documents per second, batches of 32), the
largest difference between the two backends' vectors, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gitmem.search.embedding import Embedder  # noqa: E402

QUESTIONS = ["When did Caroline go to the LGBTQ support group?",
             "What fields would Caroline be likely to pursue in her education?",
             "How long has Melanie been practising art?"]
DOC = ("I went to a LGBTQ support group yesterday and it was so powerful, everyone was "
       "so welcoming and shared their stories. [image: a photo of a group of people]")


def measure(embed, n_docs: int) -> dict:
    for q in QUESTIONS:
        embed([q])
    lat = []
    for i in range(60):
        t0 = time.perf_counter()
        embed([QUESTIONS[i % 3]])
        lat.append(time.perf_counter() - t0)
    lat.sort()
    t0 = time.perf_counter()
    embed([DOC] * n_docs)
    return {"query_p50_ms": round(lat[30] * 1000, 2), "query_p95_ms": round(lat[57] * 1000, 2),
            "docs_per_s": round(n_docs / (time.perf_counter() - t0))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=512)
    args = ap.parse_args(argv)
    e = Embedder(backend="numpy")
    report = {"load_avg": os.getloadavg()[0], "numpy": measure(e.embed, args.docs)}
    try:
        fast = Embedder(backend="onnx")
    except ImportError as exc:
        report["onnxruntime"] = f"not measured: {exc}"
    else:
        report["onnxruntime"] = measure(fast.embed, args.docs)
        a, b = e.embed(QUESTIONS + [DOC]), fast.embed(QUESTIONS + [DOC])
        report["max_abs_difference"] = float(abs(a - b).max())
    report["load_avg_after"] = os.getloadavg()[0]
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
