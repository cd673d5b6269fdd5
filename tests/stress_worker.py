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
* ``bench ROOT NAME N SEED``: N updates-or-adds, then prints when it started and ended;
* ``load-api``, ``load-cli``, ``load-mcp`` ``ROOT NAME N SEED``: N mixed writes (and a
  read every few writes) through the Python API, the ``gitmem`` command or an MCP
  stdio client (the official SDK against ``gitmem mcp``) that carry on past errors:
  one JSON line per *attempt* (``ok``, ``code`` and ``seconds`` for each), for the
  load test to tell acknowledged writes, refused ones and errors apart;
* ``load-read ROOT NAME 0 SEED``: ``gitmem search``/``ls``/``show`` in a loop until
  the file named by ``$GITMEM_LOAD_STOP`` appears, one line per read.

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
        vault.services.searcher.index  # noqa: B018 - open (and catch up) the index before timing
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


# ------------------------------------------------------------------ load
# The load modes never stop at an error: each attempt is one line, so the test can
# count errors by code and check that no write reported as failed was committed.

def attempt(worker: str, kind: str, op: str, started: float, **fields: Any) -> None:
    """One attempt (a write or a read): ``ok`` or its error ``code``, and how long it took."""
    say(worker=worker, kind=kind, op=op, seconds=round(time.monotonic() - started, 3), **fields)


def _error_fields(exc: BaseException) -> dict[str, Any]:
    from gitmem.errors import GitmemError
    if isinstance(exc, GitmemError):
        return {"ok": False, "code": exc.code, "message": exc.message}
    return {"ok": False, "code": "exception", "message": f"{type(exc).__name__}: {exc}"}


class _LoadPlan:
    """The next write of one load worker (its own memories only) and what it knows."""

    def __init__(self, name: str, seed: int) -> None:
        self.name, self.rng, self.live = name, random.Random(seed), []  # type: list[str]

    def next(self, i: int) -> tuple[str, dict[str, Any]]:
        op = _pick_op(self.rng, self.live)
        if op == "add":
            return op, {"title": f"{self.name} note {i}", "body": f"{self.name} load body {i} about heron{i % 7}",
                        "tier": self.rng.choice(TIERS)}
        if op == "update":
            return op, {"id": self.rng.choice(self.live), "append": f"{self.name} update {i}"}
        if op == "move":
            return op, {"id": self.rng.choice(self.live), "tier": self.rng.choice(TIERS)}
        return op, {"id": self.live.pop(self.rng.randrange(len(self.live)))}  # deleted: never touched again

    def done(self, op: str, memory_id: str | None) -> None:
        if op == "add" and memory_id:
            self.live.append(memory_id)


def load_api(root: str, name: str, count: int, seed: int) -> None:
    """``count`` writes through the Python API; a search and a get every 5th write."""
    from gitmem import Vault
    plan = _LoadPlan(name, seed)
    vault = Vault.open(root, author=f"{name} <{name}@test>")
    try:
        _load_api_writes(vault, name, count, plan)
    finally:
        started = time.monotonic()
        try:   # closing brings .git/index up to date under the vault lock: it may wait too
            vault.close()
        except Exception as exc:  # noqa: BLE001 - counted by the test
            attempt(name, "close", "close", started, **_error_fields(exc))


def _load_api_writes(vault: Any, name: str, count: int, plan: "_LoadPlan") -> None:
    """The writes (and reads) of :func:`load_api`, on an open vault."""
    for i in range(count):
        op, args = plan.next(i)
        started = time.monotonic()
        try:
            if op == "add":
                m = vault.add(args["title"], args["body"], tier=args["tier"], tags=[name])
            elif op == "update":
                m = vault.update(args["id"], append=args["append"])
            elif op == "move":
                m = vault.move(args["id"], args["tier"])
            else:
                m = vault.delete(args["id"], hard=op == "hard_delete")
        except Exception as exc:  # noqa: BLE001 - counted by the test
            attempt(name, "write", op, started, **args, **_error_fields(exc))
            continue
        plan.done(op, m.id)
        attempt(name, "write", op, started, ok=True, id=m.id, commit=m.commit, title=args.get("title"))
        if i % 5 == 4 and plan.live:
            started = time.monotonic()
            try:
                vault.search(f"{name} heron{i % 7}", limit=5)
                vault.get(plan.rng.choice(plan.live))
            except Exception as exc:  # noqa: BLE001 - counted by the test
                attempt(name, "read", "search+get", started, **_error_fields(exc))
            else:
                attempt(name, "read", "search+get", started, ok=True)


def _gitmem(root: str, name: str, *args: str) -> tuple[dict[str, Any], float]:
    """Run one ``gitmem ... --json``: (its JSON, or the error it printed; seconds taken)."""
    exe = [sys.executable, "-m", "gitmem", "--vault", root, "--author", f"{name} <{name}@test>"]
    started = time.monotonic()
    done = subprocess.run([*exe, *args, "--json"], capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    try:
        out = json.loads(done.stdout) if done.stdout.strip() else {}
    except json.JSONDecodeError:
        out = {}
    if done.returncode != 0 or "Traceback" in done.stderr:
        error = out.get("error") if isinstance(out, dict) else None
        error = error or {"code": "exception", "message": (done.stderr or done.stdout)[-500:]}
        return {"error": {**error, "exit": done.returncode}}, seconds
    return out, seconds


def load_cli(root: str, name: str, count: int, seed: int) -> None:
    """``count`` writes, one ``gitmem`` process each; a search every 10th write."""
    plan = _LoadPlan(name, seed)
    for i in range(count):
        op, args = plan.next(i)
        started = time.monotonic()
        if op == "add":
            out, _ = _gitmem(root, name, "add", args["title"], args["body"], "--tier", args["tier"])
        elif op == "update":
            out, _ = _gitmem(root, name, "edit", args["id"], "--append", args["append"])
        elif op == "move":
            out, _ = _gitmem(root, name, "mv", args["id"], args["tier"])
        else:
            out, _ = _gitmem(root, name, "rm", args["id"], *(["--hard"] if op == "hard_delete" else []))
        if "error" in out:
            attempt(name, "write", op, started, ok=False, **args, **out["error"])
            continue
        plan.done(op, out.get("id"))
        attempt(name, "write", op, started, ok=True, id=out.get("id"), commit=out.get("commit"),
                title=args.get("title"))
        if i % 10 == 9:
            started = time.monotonic()
            out, _ = _gitmem(root, name, "search", f"{name} heron", "--limit", "3")
            attempt(name, "read", "search", started, ok="error" not in out, **out.get("error", {}))


def load_mcp(root: str, name: str, count: int, seed: int) -> None:
    """``count`` writes as an MCP client (the official SDK) of ``gitmem mcp`` over stdio;
    a search every 5th write."""
    import anyio
    import mcp

    params = mcp.StdioServerParameters(
        command=sys.executable, args=["-m", "gitmem", "mcp", "--vault", root, "--profile", "gitmem",
                                      "--agent", name],
        env={"GIT_CONFIG_NOSYSTEM": "1"})
    plan = _LoadPlan(name, seed)

    async def session() -> None:
        async with mcp.Client(params) as client:
            for i in range(count):
                op, args = plan.next(i)
                if op == "add":
                    call = ("memory_add", {"content": args["body"], "title": args["title"], "tier": args["tier"]})
                elif op == "update":
                    call = ("memory_update", {"ref": args["id"], "append": args["append"]})
                elif op == "move":
                    call = ("memory_move", {"ref": args["id"], "tier": args["tier"]})
                else:
                    call = ("memory_delete", {"ref": args["id"], "hard": op == "hard_delete"})
                started = time.monotonic()
                result = await client.call_tool(*call)
                out = result.structured_content or {}
                if result.is_error:
                    error = out.get("error") or {"code": "exception", "message": str(result.content)[:500]}
                    attempt(name, "write", op, started, ok=False, **args, **error)
                    continue
                plan.done(op, out.get("id"))
                attempt(name, "write", op, started, ok=True, id=out.get("id"), commit=out.get("commit"),
                        title=args.get("title"))
                if i % 5 == 4:
                    started = time.monotonic()
                    result = await client.call_tool("memory_search", {"query": f"{name} heron{i % 7}"})
                    error = (result.structured_content or {}).get("error", {}) if result.is_error else {}
                    attempt(name, "read", "search", started, ok=not result.is_error, **error)

    anyio.run(session)


def load_read(root: str, name: str, count: int, seed: int) -> None:
    """``gitmem search``, ``ls`` and ``show`` in turn until ``$GITMEM_LOAD_STOP`` exists
    (``count`` > 0: at most that many reads)."""
    rng = random.Random(seed)
    stop = os.environ["GITMEM_LOAD_STOP"]
    shown = os.environ.get("GITMEM_LOAD_SHOW", "")
    reads = 0
    while not os.path.exists(stop) and (count <= 0 or reads < count):
        kind = ("search", "ls", "show")[reads % 3]
        args = {"search": ["search", f"heron{rng.randrange(7)}", "--limit", "5"], "ls": ["ls", "--limit", "20"],
                "show": ["show", shown]}[kind]
        started = time.monotonic()
        out, _ = _gitmem(root, name, *args)
        error = out.get("error") if isinstance(out, dict) else None
        attempt(name, "read", kind, started, ok=error is None, **(error or {}))
        reads += 1


def main(argv: list[str]) -> None:
    mode, root, name = argv[0], argv[1], argv[2]
    if mode == "crash":
        crash(root, name, int(argv[3]))
        return
    count, seed = int(argv[3]), int(argv[4])
    {"mixed": mixed, "cli": cli, "person": person, "bench": bench, "load-api": load_api, "load-cli": load_cli,
     "load-mcp": load_mcp, "load-read": load_read}[mode](root, name, count, seed)


if __name__ == "__main__":
    main(sys.argv[1:])
