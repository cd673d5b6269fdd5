"""A writer process for the concurrency and crash tests and benchmarks (run as a script).

Each mode prints one JSON line per *acknowledged* write (flushed right after
the write returned), so the parent knows exactly which writes gitmem promised:

* ``mixed ROOT NAME N SEED``: N mixed writes (add / update / move / soft and
  hard delete) of this worker's own memories through the Python API, with a
  search every few writes;
* ``cli ROOT NAME N SEED``: the same through the ``gitmem`` command line;
* ``person ROOT NAME N SEED``: N edits made the way a person's editor makes
  them (atomic save, in-place save, new file) straight into the working tree,
  for ``gitmem watch`` to commit;
* ``crash ROOT NAME SEED``: writes until killed (the crash test SIGKILLs it);
* ``bench ROOT NAME N SEED``: N updates-or-adds, then prints when it started and ended.

Memories carry their worker's name in the title so workers never touch each
other's memories: every memory's history is then fully known to one worker.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TIERS = ("short_term", "mid_term", "long_term")


def say(**record: Any) -> None:
    """One acknowledged write (or other event) as a flushed JSON line."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _pick_op(rng: random.Random, live: list[str]) -> str:
    if len(live) < 3:
        return "add"
    roll = rng.random()
    return ("add" if roll < 0.35 else "update" if roll < 0.65 else "move" if roll < 0.8
            else "soft_delete" if roll < 0.9 else "hard_delete")


def mixed(root: str, name: str, count: int, seed: int) -> None:
    """``count`` mixed writes through the Python API, a search every 5th write."""
    from gitmem import Vault
    rng = random.Random(seed)
    live: list[str] = []
    with Vault.open(root, author=f"{name} <{name}@test>") as vault:
        for i in range(count):
            op = _pick_op(rng, live)
            if op == "add":
                m = vault.add(f"{name} note {i}", f"{name} wrote body {i} about pelican{i % 7}\n",
                              tier=rng.choice(TIERS), tags=[name])
                live.append(m.id)
            elif op == "update":
                m = vault.update(rng.choice(live), append=f"{name} update {i}")
            elif op == "move":
                mid = rng.choice(live)
                current = vault.get(mid).tier
                m = vault.move(mid, rng.choice([t for t in TIERS if t != current]))
            elif op == "soft_delete":
                mid = live.pop(rng.randrange(len(live)))
                m = vault.delete(mid)
            else:
                mid = live.pop(rng.randrange(len(live)))
                m = vault.delete(mid, hard=True)
            say(op=op, id=m.id, commit=m.commit, worker=name)
            if i % 5 == 4:
                page = vault.search(f"{name} pelican{i % 7}", limit=5)
                assert page.total >= 0


def cli(root: str, name: str, count: int, seed: int) -> None:
    """The same kind of writes through the ``gitmem`` command (one process per write)."""
    rng = random.Random(seed)
    exe = [sys.executable, "-m", "gitmem", "--vault", root, "--author", f"{name} <{name}@test>"]
    live: list[str] = []

    def run(*args: str) -> dict[str, Any]:
        done = subprocess.run([*exe, *args, "--json"], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.stderr.write(f"gitmem {' '.join(args)} failed ({done.returncode}): {done.stderr}{done.stdout}\n")
            raise SystemExit(1)
        return json.loads(done.stdout)

    for i in range(count):
        op = _pick_op(rng, live)
        if op == "soft_delete":
            op = "move"  # keep the CLI worker's mix simple: rm is hard below
        if op == "add":
            out = run("add", f"{name} note {i}", f"{name} cli body {i}", "--tier", rng.choice(TIERS))
            live.append(out["id"])
        elif op == "update":
            out = run("update", rng.choice(live), "--append", f"{name} update {i}")
        elif op == "move":
            mid = rng.choice(live)
            out = run("mv", mid, "archive" if rng.random() < 0.2 else rng.choice(TIERS))
            if out.get("commit") is None:
                continue  # already in that tier: no commit, nothing acknowledged
        else:
            mid = live.pop(rng.randrange(len(live)))
            out = run("rm", mid, "--hard")
        say(op=op, id=out["id"], commit=out.get("commit"), worker=name)
        if i % 10 == 9:
            run("search", f"{name} cli", "--limit", "3")


def person(root: str, name: str, count: int, seed: int) -> None:
    """Edits made straight in the working tree, as Obsidian or vim would save them."""
    rng = random.Random(seed)
    folder = Path(root) / "short_term" / name
    folder.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    for i in range(count):
        if len(files) < 3 or rng.random() < 0.4:
            target = folder / f"{name}-page-{i}.md"
            files.append(target)
        else:
            target = rng.choice(files)
        text = f"---\ntitle: {name} page {target.stem} v{i}\ntype: memory\n---\n{name} wrote version {i}\n"
        if rng.random() < 0.5:  # atomic save: temp file + rename (most editors)
            tmp = folder / f".{target.name}.swp"
            tmp.write_text(text)
            os.replace(tmp, target)
        else:
            target.write_text(text)
        say(op="person_edit", path=target.relative_to(root).as_posix(), version=i, worker=name)
        time.sleep(rng.uniform(0.01, 0.08))


def crash(root: str, name: str, seed: int) -> None:
    """Write until killed; each returned write is printed before the next starts."""
    from gitmem import Vault
    rng = random.Random(seed)
    with Vault.open(root, author=f"{name} <{name}@test>") as vault:
        live = [m.id for m in vault.list() if m.title.startswith(f"{name} ")]
        i = 0
        while True:
            i += 1
            op = _pick_op(rng, live)
            if op == "add":
                m = vault.add(f"{name} note {seed}-{i}", f"{name} body {seed}-{i}\n",
                              tier=rng.choice(TIERS), tags=[name])
                live.append(m.id)
            elif op == "update":
                m = vault.update(rng.choice(live), body=f"{name} body {seed}-{i} rewritten\n")
            elif op == "move":
                mid = rng.choice(live)
                current = vault.get(mid).tier
                m = vault.move(mid, rng.choice([t for t in TIERS if t != current]))
            else:
                mid = live.pop(rng.randrange(len(live)))
                m = vault.delete(mid, hard=op == "hard_delete")
            path = None if op == "hard_delete" else m.path
            body = None if op == "hard_delete" else m.body
            say(op=op, id=m.id, commit=m.commit, path=path, body=body, worker=name)


def bench(root: str, name: str, count: int, seed: int) -> None:
    """``count`` writes (60% add, 40% update of an earlier one); prints start and end times.

    Prints ``{"ready": true}`` once the vault and its index are open, then waits
    for the file named by ``$GITMEM_BENCH_GO`` (if set) so all writers start together.
    """
    from gitmem import Vault
    rng = random.Random(seed)
    with Vault.open(root, author=f"{name} <{name}@test>") as vault:
        vault.index  # noqa: B018 - open (and catch up) the index before timing
        live: list[str] = []
        say(ready=True)
        go = os.environ.get("GITMEM_BENCH_GO")
        while go and not os.path.exists(go):
            time.sleep(0.001)
        started = time.time()
        start = time.perf_counter()
        for i in range(count):
            if not live or rng.random() < 0.6:
                live.append(vault.add(f"{name} bench note {i}", f"{name} bench body {i}\n",
                                      tier=rng.choice(TIERS)).id)
            else:
                vault.update(rng.choice(live), append=f"{name} bench update {i}")
        elapsed = time.perf_counter() - start
        ended = time.time()
    say(worker=name, writes=count, seconds=elapsed, start=started, end=ended)


def main(argv: list[str]) -> None:
    mode, root, name = argv[0], argv[1], argv[2]
    if mode == "crash":
        crash(root, name, int(argv[3]))
        return
    count, seed = int(argv[3]), int(argv[4])
    {"mixed": mixed, "cli": cli, "person": person, "bench": bench}[mode](root, name, count, seed)


if __name__ == "__main__":
    main(sys.argv[1:])
