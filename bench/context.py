"""What ``follows`` costs a write: reading the followed memory for the new memory's
context, and re-indexing a memory's followers when it is edited.

Usage (prints JSON)::

    python bench/context.py [--memories 1000] [--samples 100]

A fresh vault gets ``--memories`` memories in conversations of 20 (each following the one
before it), then times, ``--samples`` times each: adding a memory that follows nothing,
adding one that follows another, updating a memory nobody follows (the last of a
conversation), and updating one that a memory follows (its follower is re-indexed too).
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

from _common import summary_ms  # noqa: E402

from gitmem import Vault  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=100)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        vault = Vault.init(Path(tmp) / "v")
        vault.services.searcher.index  # noqa: B018 - opened (and empty) before the writes
        chains: list[list[str]] = []
        for n in range(args.memories):
            if n % 20 == 0:
                chains.append([])
            prev = chains[-1][-1] if chains[-1] else None
            m = vault.add(f"Turn {n}", f"Message number {n} of conversation {len(chains)} about "
                          f"topic {n % 37} and the weather", follows=prev, source=f"c{len(chains)}")
            chains[-1].append(m.id)
        times: dict[str, list[float]] = {k: [] for k in ("add", "add_follows", "update_unfollowed",
                                                         "update_followed")}
        for i in range(args.samples):
            chain = chains[i % len(chains)]
            steps = [("add", lambda: vault.add(f"Plain {i}", f"A plain note {i}")),
                     ("add_follows", lambda: vault.add(f"Reply {i}", f"A reply {i}", follows=chain[-1])),
                     ("update_unfollowed", lambda: vault.update(chain[-1], append=f"edit {i}")),
                     ("update_followed", lambda: vault.update(chain[0], append=f"edit {i}"))]
            for name, step in steps:
                t0 = time.perf_counter()
                made = step()
                times[name].append(time.perf_counter() - t0)
                if name == "add_follows":
                    chain.append(made.id)
        vault.close()
    print(json.dumps({"memories": args.memories, "load_avg": os.getloadavg()[0],
                      **{k: summary_ms(v) for k, v in times.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
