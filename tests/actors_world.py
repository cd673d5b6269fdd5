"""Many actors on one vault, and a model of what they may expect: the machinery of the
model-checked soak in ``tests/test_actors.py``.

A :class:`World` is one vault with everything that works on it at once: a ``gitmem mcp``
stdio server driven by the MCP SDK's client (:class:`McpAgent`), ``gitmem watch`` as a
subprocess, CLI writes and reads in their own processes, a person saving files the way
editors do (temp file + rename, in place, vim's backup + ``4913`` probe), moving and
deleting folders, committing and stashing with the git CLI, and Claude Code's hooks.

A run is a list of :class:`Step`: each names one action (or two run at the same time)
with its arguments.  Arguments never hold a memory id: an agent memory is named by the
order in which it was acknowledged (``a3``), so a step list can be replayed, cut down
and printed.  After every step the world waits for the followers to settle (HEAD and
``git status`` unchanged for a quiet spell) and then runs the invariant checks, each a
function ``check_*`` returning violations.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .conftest import mcp_params

TIERS = ("short_term", "mid_term", "long_term")
FOLDERS = ("Projects", "Ideas", "People", "Reading")
NOTES = ("alpha", "beta", "gamma", "delta", "plan", "todo")
# Seconds any read may take, whatever other processes hold (a busy machine may need more).
READ_BOUND = float(os.environ.get("GITMEM_SOAK_READ_BOUND") or 5.0)
HOOK_BOUNDS = {"session-start": 5.0, "pre-compact": 20.0, "session-end": 20.0}
# A debounce longer than the MCP server's own follower's (0.3 s): the server often sees a
# change first, which is the order that exposes disagreements between the two.
WATCH_ARGS = ("--debounce", "1.0", "--commit-delay", "0.5", "--rescan-interval", "10")
QUIET_WATCHING = 1.5      # seconds HEAD and git status must stay unchanged to count as settled
QUIET_IDLE = 0.8
SETTLE_DEADLINE = 40.0
TAG = "soak"
PERSON_COMMIT = "person commit"   # subject of the person's own git commits


# ------------------------------------------------------------------ small helpers
@dataclass
class Ran:
    """A finished command: exit code, output, and how long it took."""
    args: list[str]
    rc: int
    out: str
    err: str
    seconds: float

    def brief(self) -> str:
        return f"{' '.join(self.args)[:120]} -> rc {self.rc}: {(self.err or self.out).strip()[-400:]}"


def run(args: list[str], cwd: Path, stdin: str | None = None, timeout: float = 120) -> Ran:
    start = time.monotonic()
    try:
        done = subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = -999, str(exc.stdout or ""), f"timed out after {timeout}s"
    return Ran(args, rc, out, err, time.monotonic() - start)


def gitmem_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "gitmem", *args]


def git(root: Path, *args: str) -> Ran:
    return run(["git", *args], root)


def status_entries(root: Path) -> list[tuple[str, str]]:
    """``git status`` as (XY, path) pairs, untracked files one by one, renames as both paths."""
    raw = subprocess.run(["git", "status", "--porcelain=v1", "-z", "-uall"], cwd=root, capture_output=True,
                         check=True).stdout.decode("utf-8", "surrogateescape")
    parts = raw.split("\0")
    entries: list[tuple[str, str]] = []
    i = 0
    while i < len(parts):
        item = parts[i]
        i += 1
        if not item:
            continue
        xy, path = item[:2], item[3:]
        entries.append((xy, path))
        if xy[0] in "RC":  # the next field is the rename's origin
            entries.append((xy, parts[i]))
            i += 1
    return entries


def read_tree(root: Path, rev: str = "HEAD") -> dict[str, bytes]:
    """Every file of ``rev``'s tree with its bytes (one ``git cat-file --batch``)."""
    listing = subprocess.run(["git", "ls-tree", "-r", "-z", rev], cwd=root, capture_output=True,
                             check=True).stdout.decode("utf-8", "surrogateescape")
    entries = []
    for item in listing.split("\0"):
        if item:
            meta, path = item.split("\t", 1)
            entries.append((path, meta.split()[2]))
    if not entries:
        return {}
    batch = subprocess.run(["git", "cat-file", "--batch"], cwd=root, capture_output=True, check=True,
                           input="".join(f"{sha}\n" for _, sha in entries).encode()).stdout
    files, pos = {}, 0
    for path, _sha in entries:
        header_end = batch.index(b"\n", pos)
        size = int(batch[pos:header_end].split()[2])
        files[path] = batch[header_end + 1:header_end + 1 + size]
        pos = header_end + 1 + size + 1
    return files


FRONT_ID = re.compile(rb"\A---\r?\n(?:.*\r?\n)*?id:\s*['\"]?([0-9a-fA-F-]{36})", re.MULTILINE)


def memory_id(data: bytes) -> str | None:
    """The ``id:`` of a file's frontmatter, if it has one."""
    head = data[:4000]
    if not head.startswith(b"---"):
        return None
    end = head.find(b"\n---", 3)
    match = FRONT_ID.match(head[:end] if end > 0 else head)
    return match.group(1).decode().lower() if match else None


def is_note(path: str) -> bool:
    return path.endswith(".md") and path.split("/", 1)[0] in (*TIERS, "archive")


# ------------------------------------------------------------------ the MCP agent
class McpAgent:
    """``gitmem mcp`` over stdio, driven by the official MCP SDK client from a background
    event loop, with a blocking :meth:`call` for the soak's threads."""

    def __init__(self, root: Path, agent: str = "soak-mcp") -> None:
        import mcp
        self._mcp = mcp
        self.params = mcp_params(root, "gitmem", agent)
        # The server sees this process's environment (HOME, git's settings, PYTHONPATH), not the SDK's few names.
        self.params.env = {**os.environ, **(self.params.env or {})}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-client", daemon=True)
        self._thread.start()
        self._ready = threading.Event()
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._main = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)
        if not self._ready.wait(90):
            self.close()
            raise RuntimeError("gitmem mcp did not start within 90 s")

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with self._mcp.Client(self.params) as client:
                self._client = client
                self._ready.set()
                await self._stop.wait()
        finally:
            self._ready.set()

    def call(self, name: str, arguments: dict[str, Any], timeout: float = 120) -> tuple[bool, dict[str, Any], float]:
        """Call tool ``name``: (is_error, structured result, seconds)."""
        if self._client is None:
            raise RuntimeError("the MCP client is not connected")
        start = time.monotonic()
        result = asyncio.run_coroutine_threadsafe(self._client.call_tool(name, arguments),
                                                  self._loop).result(timeout)
        seconds = time.monotonic() - start
        data = result.structured_content
        if data is None:
            data = {"text": " ".join(getattr(c, "text", "") for c in result.content)}
        return bool(result.is_error), data, seconds

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        try:
            self._main.result(60)
        except Exception:  # noqa: BLE001 - closing: the server may already be gone
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()


# ------------------------------------------------------------------ the model
@dataclass
class AgentMemory:
    """What an agent was told about one of its writes."""
    key: str                 # a0, a1, ... (order of acknowledgement)
    id: str
    token: str               # the text the memory's body must hold now
    by: str                  # mcp | cli
    deleted: bool = False


@dataclass
class Model:
    """What the actors were told and did: the truth the vault must match."""
    agents: dict[str, AgentMemory] = field(default_factory=dict)     # key -> memory
    sessions: set[str] = field(default_factory=set)                  # acknowledged session-note ids
    person: dict[str, bytes] = field(default_factory=dict)           # path -> last saved content
    person_history: dict[str, set[bytes]] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)                   # every path the person changed
    counter: int = 0

    def next(self) -> int:
        self.counter += 1
        return self.counter

    def live_agents(self) -> list[AgentMemory]:
        return [m for m in self.agents.values() if not m.deleted]

    def person_folders(self) -> list[str]:
        return sorted({p.rsplit("/", 1)[0] for p in self.person})

    def saved(self, path: str, data: bytes) -> None:
        self.person[path] = data
        self.person_history.setdefault(path, set()).add(data)
        self.touched.add(path)

    def removed(self, path: str) -> None:
        self.person.pop(path, None)
        self.touched.add(path)


@dataclass
class Step:
    """One step: an action name and its arguments (or several run at once)."""
    action: str
    args: dict[str, Any] = field(default_factory=dict)
    together: list["Step"] = field(default_factory=list)

    def __str__(self) -> str:
        if self.action == "then":
            return " ; then ".join(str(s) for s in self.together)
        if self.together:
            return "at once: " + " || ".join(str(s) for s in self.together)
        inner = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"{self.action}({inner})"


@dataclass
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.detail}"


# ------------------------------------------------------------------ the world
class World:
    """One vault, its long-lived processes, the person's folder, and the model."""

    def __init__(self, base: Path, *, watcher: bool = True, watch_args: tuple[str, ...] = WATCH_ARGS) -> None:
        from gitmem import Vault
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.root = base / "vault"
        Vault.init(self.root, author="soak-setup").close()
        self.project = base / "project"        # an ordinary code repository, not a vault
        self.project.mkdir()
        git(self.project, "init", "-q")
        (self.project / "README.md").write_text("# app\n")
        git(self.project, "add", "README.md")
        git(self.project, "commit", "-q", "-m", "start")
        self.model = Model()
        self.violations: list[Violation] = []
        self.timings: list[tuple[str, float, float]] = []   # (what, seconds, bound)
        self.stats: dict[str, int] = {}                       # things worth telling that break nothing
        self.watch: subprocess.Popen[bytes] | None = None
        self.watch_log = base / "watch.log"
        self.watch_args = watch_args
        # Settled: nothing changed for longer than the watcher waits before it commits.
        def arg(name: str, default: float) -> float:
            return float(watch_args[watch_args.index(name) + 1]) if name in watch_args else default
        self.quiet_watching = max(QUIET_WATCHING, arg("--debounce", 0.3) + arg("--commit-delay", 2.0) + 1.0)
        self._watch_err: Any = None
        self.mcp = McpAgent(self.root)
        try:
            self.mcp.call("memory_list", {})  # an agent's session begins: the server now follows the folder
        except BaseException:
            self.mcp.close()
            raise
        self.checked_commits: set[str] = set()
        self._lock = threading.Lock()
        if watcher:
            self.start_watch()

    # ---------------------------------------------------------------- lifecycle
    def start_watch(self) -> None:
        if self.watch is not None:
            return
        self._watch_err = open(self.watch_log, "ab")
        offset = self.watch_log.stat().st_size
        self.watch = subprocess.Popen(gitmem_argv("-C", str(self.root), "watch", *self.watch_args), cwd=self.root,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._watch_err)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open(self.watch_log, "rb") as f:
                f.seek(offset)
                if b"watching" in f.read():
                    return
            if self.watch.poll() is not None:
                break
            time.sleep(0.1)
        self.violate("front_doors_answer", f"gitmem watch did not start (rc {self.watch.poll()})")

    def stop_watch(self) -> None:
        if self.watch is None:
            return
        proc, self.watch = self.watch, None
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
            self.violate("front_doors_answer", "gitmem watch did not stop within 60 s of SIGTERM")
        if rc != 0:
            self.violate("front_doors_answer", f"gitmem watch exited {rc}: {self.watch_tail()}")
        self._watch_err.close()

    def watch_tail(self) -> str:
        """The watcher's last error lines (else the end of its log)."""
        try:
            lines = self.watch_log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        errors = [line for line in lines if line.startswith(("error", "Traceback", "problem"))]
        return " | ".join((errors or lines)[-3:])[-600:]

    def close(self) -> None:
        self.stop_watch()
        self.mcp.close()

    # ---------------------------------------------------------------- recording
    def violate(self, invariant: str, detail: str) -> None:
        with self._lock:
            self.violations.append(Violation(invariant, detail))

    def timed(self, what: str, seconds: float, bound: float) -> None:
        with self._lock:
            self.timings.append((what, seconds, bound))

    def expect_ok(self, ran: Ran, what: str) -> bool:
        if ran.rc != 0:
            self.violate("front_doors_answer", f"{what}: {ran.brief()}")
            return False
        return True

    def agent(self, key: str) -> AgentMemory | None:
        return self.model.agents.get(key)

    # ---------------------------------------------------------------- settling
    def observe(self) -> tuple[str, str]:
        head = git(self.root, "rev-parse", "HEAD").out.strip()
        status = git(self.root, "status", "--porcelain", "-uall").out
        return head, status

    def settle(self) -> None:
        """Wait until HEAD and ``git status`` have not changed for a quiet spell."""
        quiet = self.quiet_watching if self.watch is not None else QUIET_IDLE
        deadline = time.monotonic() + SETTLE_DEADLINE
        last, since = self.observe(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.2)
            now = self.observe()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
        self.violate("vault_settles", f"HEAD or git status still changing after {SETTLE_DEADLINE:.0f} s")

    # ---------------------------------------------------------------- stepping
    def do(self, step: Step) -> None:
        """Run ``step``; an exception in an action is a violation, not the end of the run."""
        try:
            self._do(step)
        except Exception as exc:  # noqa: BLE001 - reported with the step that raised it
            self.violate("front_doors_answer", f"{step} raised {type(exc).__name__}: {exc}")

    def _do(self, step: Step) -> None:
        if step.action == "then":  # one after the other, without settling in between
            for s in step.together:
                self._do(s)
        elif step.together:
            errors: list[BaseException] = []

            def one(s: Step) -> None:
                try:
                    ACTIONS[s.action](self, **s.args)
                except BaseException as exc:  # noqa: BLE001 - re-raised below
                    errors.append(exc)
            threads = [threading.Thread(target=one, args=(s,)) for s in step.together]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        else:
            ACTIONS[step.action](self, **step.args)


# ------------------------------------------------------------------ agent actions
def probe_status_after_agent_write(world: World, paths: Iterable[str]) -> None:
    """Right after an acknowledged write (no settling): a user's ``git status`` must not
    show the agent's file or MEMORY.md, or their next ``git commit`` records it."""
    wanted = set(paths) | {"MEMORY.md"}
    shown = [f"{xy} {p}" for xy, p in status_entries(world.root) if p in wanted]
    if shown:
        world.violate("status_only_person_work", f"right after an agent write git status shows {shown}")


def ack(world: World, key: str, data: dict[str, Any], token: str, by: str) -> None:
    world.model.agents[key] = AgentMemory(key, data["id"], token, by)
    probe_status_after_agent_write(world, [data.get("path", "")])


def mcp_add(world: World, key: str) -> None:
    token = f"tok-{key}-0"
    bad, data, _ = world.mcp.call("memory_add", {"content": f"Agent memory {key} says {token}.",
                                                 "title": f"Agent memory {key}", "tags": [TAG]})
    if bad:
        world.violate("front_doors_answer", f"mcp memory_add {key}: {data}")
        return
    ack(world, key, data, token, "mcp")


def mcp_update(world: World, key: str, rev: int) -> None:
    memory = world.agent(key)
    if memory is None or memory.deleted:
        return
    token = f"tok-{key}-{rev}"
    bad, data, _ = world.mcp.call("memory_update", {"ref": memory.id, "content": f"Agent memory {key} now says {token}."})
    if bad:
        world.violate("front_doors_answer", f"mcp memory_update {key}: {data}")
        return
    memory.token = token
    probe_status_after_agent_write(world, [data.get("path", "")])


def mcp_delete(world: World, key: str) -> None:
    memory = world.agent(key)
    if memory is None or memory.deleted:
        return
    bad, data, _ = world.mcp.call("memory_delete", {"ref": memory.id})
    if bad:
        world.violate("front_doors_answer", f"mcp memory_delete {key}: {data}")
        return
    memory.deleted = True
    probe_status_after_agent_write(world, [data.get("path", "")])


def mcp_noop_update(world: World, key: str) -> None:
    """An update that changes nothing (a tag the memory already has) makes no commit."""
    memory = world.agent(key)
    if memory is None or memory.deleted:
        return
    before = git(world.root, "rev-parse", "HEAD").out
    bad, data, _ = world.mcp.call("memory_update", {"ref": memory.id, "add_tags": [TAG]})
    if bad:
        world.violate("front_doors_answer", f"mcp memory_update add_tags {key}: {data}")
    elif git(world.root, "rev-parse", "HEAD").out != before:
        world.violate("no_op_writes_commit_nothing", f"mcp memory_update add_tags=[{TAG!r}] on {key} made a commit")


def mcp_read(world: World, key: str) -> None:
    memory = world.agent(key)
    if memory is None:
        return
    bad, data, seconds = world.mcp.call("memory_read", {"ref": memory.id})
    world.timed(f"mcp memory_read {key}", seconds, READ_BOUND)
    if bad:
        world.violate("front_doors_answer", f"mcp memory_read {key}: {data}")
    elif memory.token not in data.get("body", ""):
        world.violate("reads_see_acknowledged_writes", f"mcp memory_read {key} lacks {memory.token!r}: "
                                                       f"{data.get('body', '')[:200]!r}")


def mcp_search(world: World, query: str) -> None:
    bad, data, seconds = world.mcp.call("memory_search", {"query": query})
    world.timed(f"mcp memory_search {query!r}", seconds, READ_BOUND)
    if bad:
        world.violate("front_doors_answer", f"mcp memory_search: {data}")


def cli_add(world: World, key: str) -> None:
    token = f"tok-{key}-0"
    ran = run(gitmem_argv("-C", str(world.root), "--author", "soak-cli", "add", f"Cli memory {key}",
                          f"Cli memory {key} says {token}.", "--tag", TAG, "--json"), world.root)
    if world.expect_ok(ran, f"gitmem add {key}"):
        ack(world, key, json.loads(ran.out), token, "cli")


def cli_edit(world: World, key: str, rev: int) -> None:
    memory = world.agent(key)
    if memory is None or memory.deleted:
        return
    token = f"tok-{key}-{rev}"
    ran = run(gitmem_argv("-C", str(world.root), "--author", "soak-cli", "edit", memory.id,
                          "--body", f"Cli edit of {key}: {token}.", "--json"), world.root)
    if world.expect_ok(ran, f"gitmem edit {key}"):
        memory.token = token
        probe_status_after_agent_write(world, [json.loads(ran.out).get("path", "")])


def cli_noop_edit(world: World, key: str) -> None:
    memory = world.agent(key)
    if memory is None or memory.deleted:
        return
    before = git(world.root, "rev-parse", "HEAD").out
    for extra in ((), ("--tag", TAG)):
        ran = run(gitmem_argv("-C", str(world.root), "edit", memory.id, *extra), world.root)
        if ran.rc != 0 and ran.rc != 2:  # 2: "nothing to change" may be refused as invalid input
            world.expect_ok(ran, f"gitmem edit {key} {' '.join(extra)}")
        if git(world.root, "rev-parse", "HEAD").out != before:
            world.violate("no_op_writes_commit_nothing", f"gitmem edit {key} {' '.join(extra)} made a commit")
            return


def cli_read(world: World, kind: str, key: str = "") -> None:
    if kind == "ls":
        ran = run(gitmem_argv("-C", str(world.root), "ls"), world.root)
    elif kind == "search":
        ran = run(gitmem_argv("-C", str(world.root), "search", "memory"), world.root)
    else:
        memory = world.agent(key)
        if memory is None:
            return
        ran = run(gitmem_argv("-C", str(world.root), "show", memory.id), world.root)
    world.timed(f"gitmem {kind}", ran.seconds, READ_BOUND)
    world.expect_ok(ran, f"gitmem {kind}")


TRANSCRIPT_LINE = '{{"type": "{role}", "message": {{"role": "{role}", "content": {text}}}}}\n'


def hook(world: World, verb: str, session: str = "", *, where: str = "vault") -> None:
    """Claude Code calls a hook: JSON on stdin, answer within its bound, exit 0."""
    payload: dict[str, Any] = {"session_id": session or "soak-start", "hook_event_name": verb, "cwd": str(world.project)}
    if verb != "session-start":
        transcript = world.base / f"transcript-{session}.jsonl"
        transcript.write_text(TRANSCRIPT_LINE.format(role="user", text=json.dumps(f"Please do task {session}"))
                              + TRANSCRIPT_LINE.format(role="assistant", text=json.dumps(f"Done with {session}.")))
        payload["transcript_path"] = str(transcript)
    vault_args = ("--vault", str(world.root)) if where == "vault" else ()
    ran = run(gitmem_argv("agent", "hook", "claude-code", verb, *vault_args), world.project, stdin=json.dumps(payload))
    world.timed(f"hook {verb} {session}", ran.seconds, HOOK_BOUNDS[verb])
    if ran.rc != 0 or "Traceback" in ran.err:
        world.violate("hooks_exit_0", f"{verb}: {ran.brief()}")
        return
    if verb == "session-start":
        try:
            json.loads(ran.out)["hookSpecificOutput"]["additionalContext"]
        except (ValueError, KeyError, TypeError):
            world.violate("hooks_exit_0", f"session-start printed no context: {ran.out[:200]!r} {ran.err[:200]!r}")
    elif where == "vault" and not ran.err.strip():
        world.model.sessions.add(session)  # saved: nothing reported on stderr


def hook_killed(world: World, session: str, after: float) -> None:
    """Claude Code kills a hook that runs past its timeout: SIGTERM ``after`` seconds in.
    No traceback, and nothing half-done left for ``git status`` or fsck (checked after)."""
    transcript = world.base / f"transcript-{session}.jsonl"
    transcript.write_text(TRANSCRIPT_LINE.format(role="user", text=json.dumps(f"Please do task {session}"))
                          + TRANSCRIPT_LINE.format(role="assistant", text=json.dumps(f"Done with {session}.")))
    payload = {"session_id": session, "hook_event_name": "SessionEnd", "transcript_path": str(transcript)}
    stdin = world.base / f"hook-{session}.json"
    stdin.write_text(json.dumps(payload))
    with open(stdin, "rb") as given:
        proc = subprocess.Popen(gitmem_argv("agent", "hook", "claude-code", "session-end", "--vault", str(world.root)),
                                cwd=world.project, stdin=given, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(after)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    if b"Traceback" in err:
        world.violate("hooks_exit_0", f"a killed session-end hook printed a traceback: {err.decode(errors='replace')[-400:]}")


def stray_writes(world: World) -> None:
    """gitmem run inside an ordinary code repository must not write into it."""
    before = (git(world.project, "rev-parse", "HEAD").out, git(world.project, "status", "--porcelain", "-uall").out)
    run(gitmem_argv("add", "oops", "not a vault"), world.project)
    hook(world, "session-end", f"stray{world.model.next()}", where="project")
    after = (git(world.project, "rev-parse", "HEAD").out, git(world.project, "status", "--porcelain", "-uall").out)
    if after != before:
        world.violate("non_vaults_untouched", f"the code repository changed: HEAD {before[0].strip()[:8]} -> "
                                              f"{after[0].strip()[:8]}, status {after[1].strip()!r}")


def hold_lock_and_read(world: World, seconds: float = 8.0) -> None:
    """Another process holds the vault lock: reads, started together while it is held,
    each answer within the bound, and so do the hooks (a write hook by doing less)."""
    script = ("import sys, time\nfrom gitmem.vault import Vault\nv = Vault.open(sys.argv[1])\n"
              "with v.services.store.lock.hold():\n    print('held', flush=True)\n    time.sleep(float(sys.argv[2]))\nv.close()\n")
    holder = subprocess.Popen([sys.executable, "-c", script, str(world.root), str(seconds)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        if holder.stdout.readline().strip() != b"held":
            world.violate("front_doors_answer", "the lock holder did not start")
            return
        keys = [m.key for m in world.model.agents.values()]
        reads: list[Callable[[], None]] = [lambda: cli_read(world, "ls"), lambda: cli_read(world, "search"),
                                           lambda: mcp_search(world, "memory"), lambda: hook(world, "session-start")]
        if keys:
            reads.append(lambda: mcp_read(world, keys[-1]))
        if seconds > HOOK_BOUNDS["session-end"]:
            reads.append(lambda: hook(world, "session-end", f"held{world.model.next()}"))
        if seconds > HOOK_BOUNDS["session-end"]:  # all at once, each must start while the lock is held
            threads = [threading.Thread(target=read) for read in reads]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:  # one by one, sparing the CPU: the first ones still start while the lock is held
            for read in reads:
                read()
    finally:
        _, err = holder.communicate(timeout=120)
        if holder.returncode != 0:
            world.violate("front_doors_answer", f"the lock holder failed: {err.decode(errors='replace')[-300:]}")


# ------------------------------------------------------------------ the person
def note_text(title: str, body: str, note_id: str | None) -> bytes:
    head = f"---\nid: {note_id}\ntitle: {title}\n---\n" if note_id else f"# {title}\n\n"
    return (head + body + "\n").encode()


def editor_save(world: World, path: str, data: bytes, style: str) -> None:
    """Save ``data`` at ``path`` the way an editor does."""
    full = world.root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    if style == "atomic" or not full.exists() and style == "vim":
        temp = full.parent / f".{full.name}.tmp{os.getpid()}"
        temp.write_bytes(data)
        os.replace(temp, full)
    elif style == "inplace":
        with open(full, "wb") as f:   # truncate, then two writes (a save seen half-done)
            f.write(data[: len(data) // 2])
            f.flush()
            f.write(data[len(data) // 2:])
    else:  # vim: probe the folder with 4913, keep a backup note.md~, write anew, drop the backup
        probe = full.parent / "4913"
        probe.write_bytes(b"")
        probe.unlink()
        backup = full.parent / (full.name + "~")
        os.replace(full, backup)
        full.write_bytes(data)
        backup.unlink()


def person_save(world: World, path: str, style: str, with_id: bool = False) -> None:
    n = world.model.next()
    title = path.rsplit("/", 1)[1][:-3].capitalize()
    old = world.model.person.get(path)
    note_id = None
    if old is not None:
        found = memory_id(old)
        note_id = found
    elif with_id:
        note_id = str(uuid.UUID(bytes=hashlib.sha256(f"soak:{path}:{n}".encode()).digest()[:16], version=4))
    data = note_text(title, f"Person's text, save {n} of {path}.", note_id)
    editor_save(world, path, data, style)
    world.model.saved(path, data)


def person_move_folder(world: World, folder: str, to_tier: str) -> None:
    src = world.root / folder
    dst = world.root / to_tier / folder.split("/", 1)[1]
    if not src.is_dir() or dst.exists():
        return
    os.rename(src, dst)
    for path in [p for p in world.model.person if p.startswith(folder + "/")]:
        data = world.model.person[path]
        world.model.removed(path)
        world.model.saved(f"{to_tier}/{folder.split('/', 1)[1]}{path[len(folder):]}", data)


def person_delete(world: World, path: str) -> None:
    """Delete a note, or a whole folder when ``path`` names one."""
    full = world.root / path
    if full.is_dir():
        shutil.rmtree(full)
        for p in [p for p in world.model.person if p.startswith(path + "/")]:
            world.model.removed(p)
    elif full.exists():
        full.unlink()
        world.model.removed(path)


def git_commit(world: World, mode: str) -> None:
    """The person commits with the git CLI: ``-a``, what is staged, or after ``git add`` of their files."""
    if mode == "add":
        mine = [p for p in world.model.touched if (world.root / p).exists()]
        if mine:
            git(world.root, "add", "--", *mine)
    args = ["commit", "-q", "-m", f"{PERSON_COMMIT} {world.model.next()}"] + (["-a"] if mode == "all" else [])
    for _ in range(10):
        ran = git(world.root, *args)
        if "index.lock" not in ran.err:
            break
        # Another process is writing .git/index, as a second git command would: a person
        # tries again a moment later.  Counted; only a lock that stays is a fault.
        world.stats["git commit met index.lock"] = world.stats.get("git commit met index.lock", 0) + 1
        time.sleep(0.3)
    if ran.rc != 0 and "nothing" not in ran.out + ran.err and "no changes" not in ran.out + ran.err:
        world.violate("git_cli_works", f"git {' '.join(args)}: {ran.brief()}")


def git_stash_cycle(world: World, key: str = "") -> None:
    """``git stash``, (an agent write meanwhile), ``git stash pop``: the person's work comes back."""
    before = len(git(world.root, "stash", "list").out.splitlines())
    ran = git(world.root, "stash")
    if ran.rc != 0:
        world.violate("git_cli_works", f"git stash: {ran.brief()}")
        return
    if key:
        cli_add(world, key)
    if len(git(world.root, "stash", "list").out.splitlines()) > before:
        pop = git(world.root, "stash", "pop")
        if pop.rc != 0:
            world.violate("git_cli_works", f"git stash pop: {pop.brief()}")


def agent_write_then_commit(world: World, key: str, mode: str) -> None:
    """An agent's write and, at once, a person's ``git commit`` (an IDE commits at any moment)."""
    mcp_add(world, key)
    git_commit(world, mode)


def watch_toggle(world: World, on: bool) -> None:
    world.start_watch() if on else world.stop_watch()


ACTIONS: dict[str, Callable[..., None]] = {
    "mcp_add": mcp_add, "mcp_update": mcp_update, "mcp_delete": mcp_delete, "mcp_noop_update": mcp_noop_update,
    "mcp_read": mcp_read, "mcp_search": mcp_search, "cli_add": cli_add, "cli_edit": cli_edit,
    "cli_noop_edit": cli_noop_edit, "cli_read": cli_read, "hook": hook, "stray_writes": stray_writes,
    "hold_lock_and_read": hold_lock_and_read, "person_save": person_save,
    "person_move_folder": person_move_folder, "person_delete": person_delete, "git_commit": git_commit,
    "git_stash_cycle": git_stash_cycle, "agent_write_then_commit": agent_write_then_commit,
    "watch_toggle": watch_toggle, "hook_killed": hook_killed,
}
# Actions that must run alone: they compare HEAD before and after, or hold the lock.
ALONE = {"mcp_noop_update", "cli_noop_edit", "hold_lock_and_read", "watch_toggle", "git_stash_cycle", "stray_writes"}
PERSON = {"person_save", "person_move_folder", "person_delete", "git_commit", "git_stash_cycle"}


# ------------------------------------------------------------------ planning
class Planner:
    """Chooses the next step from a seeded RNG and a shadow of the model (keys, paths)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.keys: list[str] = []
        self.deleted: set[str] = set()
        self.paths: set[str] = set()
        self.rev = 0
        self.watching = True

    def _key(self, live: bool = True) -> str | None:
        pool = [k for k in self.keys if not (live and k in self.deleted)]
        return self.rng.choice(pool) if pool else None

    def one(self, kinds: set[str] | None = None) -> Step:
        rng = self.rng
        weights = {"mcp_add": 8, "mcp_update": 5, "mcp_delete": 2, "mcp_noop_update": 1, "mcp_read": 4,
                   "mcp_search": 2, "cli_add": 5, "cli_edit": 3, "cli_noop_edit": 1, "cli_read": 3, "hook": 3,
                   "stray_writes": 1, "hold_lock_and_read": 1, "person_save": 10, "person_move_folder": 3,
                   "person_delete": 2, "git_commit": 4, "git_stash_cycle": 2, "agent_write_then_commit": 3,
                   "watch_toggle": 1, "hook_killed": 1}
        if kinds is not None:
            weights = {k: w for k, w in weights.items() if k in kinds}
        while True:
            action = rng.choices(list(weights), list(weights.values()))[0]
            step = self._args(action)
            if step is not None:
                return step

    def _new_key(self) -> str:
        key = f"a{len(self.keys)}"
        self.keys.append(key)
        return key

    def _args(self, action: str) -> Step | None:  # noqa: C901 - one branch per action
        rng = self.rng
        if action in ("mcp_add", "cli_add"):
            return Step(action, {"key": self._new_key()})
        if action in ("mcp_update", "cli_edit"):
            key = self._key()
            self.rev += 1
            return Step(action, {"key": key, "rev": self.rev}) if key else None
        if action in ("mcp_delete", "mcp_noop_update", "cli_noop_edit"):
            key = self._key()
            if key and action == "mcp_delete":
                self.deleted.add(key)
            return Step(action, {"key": key}) if key else None
        if action == "mcp_read":
            key = self._key(live=False)
            return Step(action, {"key": key}) if key else None
        if action == "mcp_search":
            return Step(action, {"query": rng.choice(["memory", "says", "person", "tok"])})
        if action == "cli_read":
            kind = rng.choice(["ls", "search", "show"])
            key = self._key(live=False) or ""
            return Step(action, {"kind": kind, "key": key} if kind == "show" else {"kind": kind})
        if action == "hook":
            verb = rng.choice(["session-start", "session-end", "pre-compact"])
            return Step(action, {"verb": verb} if verb == "session-start" else
                        {"verb": verb, "session": f"s{len(self.keys)}-{rng.randrange(10**6)}"})
        if action == "person_save":
            if self.paths and rng.random() < 0.5:
                path = rng.choice(sorted(self.paths))
            else:
                path = f"{rng.choice(TIERS)}/{rng.choice(FOLDERS)}/{rng.choice(NOTES)}.md"
            new = path not in self.paths
            self.paths.add(path)
            args: dict[str, Any] = {"path": path, "style": rng.choice(["atomic", "inplace", "vim"])}
            if new:
                args["with_id"] = rng.random() < 0.6
            return Step(action, args)
        if action == "person_move_folder":
            folders = sorted({p.rsplit("/", 1)[0] for p in self.paths})
            if not folders:
                return None
            folder = rng.choice(folders)
            tier = rng.choice([t for t in TIERS if t != folder.split("/")[0]])
            name = folder.split("/", 1)[1]
            if any(p.startswith(f"{tier}/{name}/") for p in self.paths):
                return None
            self.paths = {f"{tier}/{name}/{p[len(folder) + 1:]}" if p.startswith(folder + "/") else p
                          for p in self.paths}
            return Step(action, {"folder": folder, "to_tier": tier})
        if action == "person_delete":
            if not self.paths:
                return None
            path = rng.choice(sorted(self.paths))
            if rng.random() < 0.3:
                path = path.rsplit("/", 1)[0]
            self.paths = {p for p in self.paths if p != path and not p.startswith(path + "/")}
            return Step(action, {"path": path})
        if action == "git_commit":
            return Step(action, {"mode": rng.choice(["all", "staged", "add"])})
        if action == "git_stash_cycle":
            return Step(action, {"key": self._new_key() if rng.random() < 0.6 else ""})
        if action == "agent_write_then_commit":
            return Step(action, {"key": self._new_key(), "mode": rng.choice(["all", "staged"])})
        if action == "stray_writes":
            return Step(action)
        if action == "hook_killed":
            return Step(action, {"session": f"k{len(self.keys)}-{rng.randrange(10**6)}",
                                 "after": round(rng.uniform(0.2, 1.5), 2)})
        if action == "hold_lock_and_read":
            return Step(action)
        if action == "watch_toggle":
            self.watching = not self.watching
            return Step(action, {"on": self.watching})
        raise AssertionError(action)

    def step(self) -> Step:
        first = self.one()
        if first.action in ALONE or self.rng.random() > 0.4:
            return first
        # Two at once: one agent action beside one person or git action (never two on one model part).
        if first.action in PERSON:
            other = self.one({k for k in ACTIONS if k not in PERSON and k not in ALONE
                              and k != "agent_write_then_commit"})
        else:
            other = self.one({k for k in PERSON if k not in ALONE})
        # Run in two threads, or one right after the other with no settling between.
        return Step(self.rng.choice(["together", "then"]), together=[first, other])


# ------------------------------------------------------------------ invariants
@dataclass
class Snapshot:
    head: str
    tree: dict[str, bytes]
    status: list[tuple[str, str]]
    watching: bool


def take_snapshot(world: World) -> Snapshot:
    return Snapshot(git(world.root, "rev-parse", "HEAD").out.strip(), read_tree(world.root),
                    status_entries(world.root), world.watch is not None)


def ids_in(tree: dict[str, bytes]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path, data in tree.items():
        if is_note(path):
            note_id = memory_id(data)
            if note_id:
                found.setdefault(note_id, []).append(path)
    return found


def check_agent_writes_in_head_once(world: World, snap: Snapshot) -> list[Violation]:
    """Every acknowledged agent write is in HEAD, by id, exactly once, with its latest text."""
    out = []
    ids = ids_in(snap.tree)
    for memory in world.model.agents.values():
        paths = ids.get(memory.id, [])
        if len(paths) != 1:
            out.append(Violation("agent_writes_in_head_once", f"{memory.key} ({memory.by}, {memory.id[:8]}) is at "
                                                              f"{len(paths)} paths in HEAD: {paths}"))
        elif memory.token.encode() not in snap.tree[paths[0]]:
            out.append(Violation("agent_writes_in_head_once", f"{memory.key} in HEAD ({paths[0]}) lacks its "
                                                              f"latest text {memory.token!r}"))
    return out


def check_session_notes_in_head_once(world: World, snap: Snapshot) -> list[Violation]:
    """Every session note a hook saved (exit 0, nothing on stderr) is in HEAD exactly once."""
    out = []
    for session in world.model.sessions:
        needle = f"session {session}".encode()
        paths = [p for p, d in snap.tree.items() if is_note(p) and needle in d[:3000]]
        if len(paths) != 1:
            out.append(Violation("agent_writes_in_head_once", f"session note of {session} at {paths}"))
    return out


def check_no_id_at_two_paths(world: World, snap: Snapshot) -> list[Violation]:
    """No memory id appears at two paths of HEAD, unless the person's own ``git commit``
    put it there while nothing followed the vault (``git add`` of a moved note's new
    path stages no deletion of its old one: that is git's doing, and the old path's
    deletion stays the person's uncommitted work).  With ``gitmem watch`` running, the
    vault has settled, so the watcher must have committed the other half."""
    out = []
    for i, paths in ids_in(snap.tree).items():
        if len(paths) < 2:
            continue
        if not snap.watching and any(last_commit_is_persons(world, path) for path in paths):
            continue
        out.append(Violation("no_id_at_two_paths", f"id {i[:8]} at {paths}"))
    return out


def last_commit_is_persons(world: World, path: str) -> bool:
    """The last commit that touched ``path`` is one the person made with the git CLI."""
    subject = git(world.root, "log", "-1", "--format=%s", "--", path).out.strip()
    return subject.startswith(PERSON_COMMIT)


def check_person_saves_on_disk(world: World, snap: Snapshot) -> list[Violation]:
    """The person's last save of every note is on disk, byte for byte."""
    out = []
    for path, data in world.model.person.items():
        full = world.root / path
        now = full.read_bytes() if full.is_file() else None
        if now != data:
            out.append(Violation("person_saves_on_disk", f"{path}: disk has {now[:80] if now else now!r}, "
                                                         f"the person saved {data[:80]!r}"))
    for path in world.model.touched - set(world.model.person):
        if (world.root / path).exists():
            out.append(Violation("person_saves_on_disk", f"{path} came back after the person removed it"))
    return out


def check_head_holds_only_saved_text(world: World, snap: Snapshot) -> list[Violation]:
    """A person's note in HEAD holds text the person saved there (gitmem never rewrote it)."""
    out = []
    for path in world.model.touched:
        if path in snap.tree and path in world.model.person_history \
                and snap.tree[path] not in world.model.person_history[path]:
            out.append(Violation("person_saves_committed", f"HEAD's {path} is not a save of the person's: "
                                                           f"{snap.tree[path][:120]!r}"))
    return out


def check_status_only_person_work(world: World, snap: Snapshot) -> list[Violation]:
    """``git status`` shows only the person's uncommitted work, and, with ``gitmem watch``
    running, nothing once the vault has settled (the watcher committed it)."""
    out = []
    foreign = [f"{xy} {p}" for xy, p in snap.status if p not in world.model.touched]
    if foreign:
        out.append(Violation("status_only_person_work", f"git status shows what the person never touched: {foreign}"))
    if snap.watching and snap.status:
        out.append(Violation("person_saves_committed", f"gitmem watch runs, the vault settled, yet git status "
                                                       f"shows {[f'{xy} {p}' for xy, p in snap.status][:8]}"))
    return out


LINK = re.compile(r"\[\[([^\]|#]+)(?:[|#][^\]]*)?\]\]")


def check_memory_md_matches_tree(world: World, snap: Snapshot) -> list[Violation]:
    """MEMORY.md in every commit gitmem made lists only memories in that commit's tree.
    (A person's own ``git commit`` of a deletion keeps the MEMORY.md it had: git makes
    that commit, not gitmem.)"""
    out = []
    revs = [r for r in git(world.root, "rev-list", "HEAD").out.split() if r not in world.checked_commits]
    for rev in revs:
        world.checked_commits.add(rev)
        names = git(world.root, "ls-tree", "-r", "--name-only", rev).out.splitlines()
        if "MEMORY.md" not in names:
            continue
        if git(world.root, "log", "-1", "--format=%s", rev).out.startswith(PERSON_COMMIT):
            continue
        text = git(world.root, "show", f"{rev}:MEMORY.md").out
        stems = {"/".join(n[:-3].split("/")[i:]) for n in names if is_note(n) for i in range(n.count("/") + 1)}
        missing = sorted({t for t in LINK.findall(text) if t not in stems})
        if missing:
            subject = git(world.root, "log", "-1", "--format=%an: %s", rev).out.strip()
            out.append(Violation("memory_md_matches_commit", f"commit {rev[:8]} ({subject}) lists {missing} "
                                                             "which its tree does not hold"))
    return out


def check_fsck(world: World, snap: Snapshot) -> list[Violation]:
    """``git fsck --full`` is clean."""
    ran = git(world.root, "fsck", "--full", "--no-progress")
    bad = [line for line in (ran.out + ran.err).splitlines() if not line.startswith("dangling")]
    return [Violation("fsck_clean", f"git fsck: rc {ran.rc}: {bad[:5]}")] if ran.rc != 0 or bad else []


def check_bounds(world: World, snap: Snapshot) -> list[Violation]:
    """Reads (and hooks) answered within their bound."""
    with world._lock:
        timings, world.timings = world.timings, []
    load = os.getloadavg()[0]  # a busy machine slows everything: told beside the time
    return [Violation("reads_bounded", f"{what} took {seconds:.1f} s (bound {bound:.0f} s; load average {load:.1f})")
            for what, seconds, bound in timings if seconds > bound]


INVARIANTS = (check_agent_writes_in_head_once, check_session_notes_in_head_once, check_no_id_at_two_paths,
              check_person_saves_on_disk, check_head_holds_only_saved_text, check_status_only_person_work,
              check_memory_md_matches_tree, check_fsck, check_bounds)


def check_all(world: World) -> list[Violation]:
    """Every invariant, after the vault settled; plus what the actions recorded."""
    if world.watch is not None and world.watch.poll() is not None:
        world.violate("front_doors_answer", f"gitmem watch died (rc {world.watch.poll()}): {world.watch_tail()}")
        world.watch = None
        world._watch_err.close()
        world.start_watch()
    world.settle()
    snap = take_snapshot(world)
    found = []
    for check in INVARIANTS:
        found += check(world, snap)
    with world._lock:
        found += world.violations
        world.violations = []
    return found


# ------------------------------------------------------------------ running
@dataclass
class Outcome:
    steps: list[Step]
    failures: list[tuple[int, Violation]]     # (step index, violation)
    seconds: float
    stats: dict[str, int] = field(default_factory=dict)


def play(base: Path, steps: Iterable[Step], *, keep_going: bool = False, watcher: bool = True,
         watch_args: tuple[str, ...] = WATCH_ARGS, until: str | None = None,
         log: Callable[[str], None] | None = None) -> Outcome:
    """Run ``steps`` on a fresh world in ``base``, checking every invariant after each; stop
    at the first violation (``keep_going``: never; ``until``: at the first of that invariant)."""
    start = time.monotonic()
    done: list[Step] = []
    failures: list[tuple[int, Violation]] = []
    seen: set[str] = set()
    world = World(base, watcher=watcher, watch_args=watch_args)
    try:
        for index, step in enumerate(steps):
            world.do(step)
            done.append(step)
            found = [v for v in check_all(world) if str(v) not in seen]  # a lasting fault is told once
            seen.update(str(v) for v in found)
            if log:
                log(f"{index:4d} {step}" + "".join(f"\n       !! {v}" for v in found))
            failures += [(index, v) for v in found]
            if until is not None and any(v.invariant == until for v in found) or \
                    found and until is None and not keep_going:
                break
    finally:
        world.close()
    return Outcome(done, failures, time.monotonic() - start, world.stats)


def planned(seed: int, count: int) -> Iterable[Step]:
    planner = Planner(seed)
    for _ in range(count):
        yield planner.step()


def report(outcome: Outcome, seed: int | None, count: int) -> str:
    """A readable account of a failing run: seed, the steps, and what broke where."""
    lines = []
    if seed is not None:
        lines.append(f"soak seed {seed}, {count} steps planned, {len(outcome.steps)} run "
                     f"(replay: GITMEM_SOAK_SEED={seed} GITMEM_SOAK_STEPS={count})")
    failing = {i for i, _ in outcome.failures}
    first = min(failing, default=0)
    for index, step in enumerate(outcome.steps):
        if len(outcome.steps) > 60 and index not in failing and not first - 10 <= index <= first:
            continue  # a long run: the failing steps and the ten before the first of them
        lines.append(f"{'!!' if index in failing else '  '} {index:4d}  {step}")
        lines += [f"         {v}" for i, v in outcome.failures if i == index]
    by_invariant: dict[str, int] = {}
    for _, v in outcome.failures:
        by_invariant[v.invariant] = by_invariant.get(v.invariant, 0) + 1
    lines.append("violations by invariant: " + ", ".join(f"{k} x{n}" for k, n in sorted(by_invariant.items())))
    if outcome.stats:
        lines.append("also seen: " + ", ".join(f"{k} x{n}" for k, n in sorted(outcome.stats.items())))
    return "\n".join(lines)


def shrink(base: Path, steps: list[Step], invariant: str, *, watcher: bool = True,
           log: Callable[[str], None] | None = None) -> list[Step]:
    """Cut ``steps`` down to a shorter list that still breaks ``invariant``: drop one step at
    a time, keep the cut when a fresh replay still shows the violation.  Races make replays
    differ, so a cut that does not reproduce at once is simply kept out of the result."""
    current = list(steps)
    attempt = 0
    index = 0
    while index < len(current):
        candidate = current[:index] + current[index + 1:]
        attempt += 1
        outcome = play(base / f"shrink-{attempt}", candidate, watcher=watcher, until=invariant)
        if any(v.invariant == invariant for _, v in outcome.failures):
            current = outcome.steps  # also drops whatever followed the first failing step
            if log:
                log(f"shrink: {len(current)} steps still break {invariant}")
        else:
            index += 1
    return current
