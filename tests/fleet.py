"""A fleet of gitmem replicas sharing one vault through real servers, under faults.

Used by ``tests/test_fleet.py`` (small) and ``bench/fleet.py`` (large).

One bare repository is served three ways, as one machine serves a real fleet:
by its path, over smart HTTP (``git http-backend`` behind basic auth) and over
ssh (a throw-away ``sshd``), see :mod:`tests.servers`.  Each replica is its own
process (``python -m tests.fleet worker``) holding a clone of the vault, a
:class:`gitmem.Vault` (the API) and a ``gitmem mcp`` stdio server (the agent;
with ``--sync`` when background sync is on); in some replicas a person saves
memory files the way editors do (a temporary file renamed over it, or
rewritten in place).  The driver (:func:`run_fleet`) sends each replica a batch
of random operations per round (seeded: ``FLEET_SEED`` overrides the seed),
all replicas at once, and at random moments stops a server and starts it again
later (the path: the repository renamed away; http: the server stopped; ssh:
sshd stopped).  Canary memories are planted and later purged from other
replicas.  After the faults stop, replicas sync until they agree, and
:func:`check_fleet` lists what is wrong: trees that differ, acknowledged writes
that cannot be found, conflict markers, canaries anywhere, non-fast-forward
updates on the server, ``git fsck`` failures.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
USER, PASSWORD = "fleet-user", "fleet-token-7"
TIERS = ("short_term", "mid_term", "long_term")
TRANSPORTS = ("path", "http", "ssh")
ZERO = "0" * 40


# ====================================================================== the replica process
class ToolFailed(Exception):
    """An MCP tool answered with isError (its error code in ``code``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class McpStdio:
    """A ``gitmem mcp`` stdio server in a child process, spoken to in JSON-RPC lines."""

    def __init__(self, root: Path, agent: str, extra: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "gitmem", "mcp", "--vault", str(root),
                                      "--profile", "gitmem", "--agent", agent, *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env)
        self.next_id = 0
        init = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "fleet", "version": "1"}})
        assert "protocolVersion" in init, init
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        guard = threading.Timer(timeout, self.proc.kill)   # a hung server fails instead of hanging
        guard.start()
        try:
            assert self.proc.stdout is not None
            while True:
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"gitmem mcp exited ({self.proc.poll()}) during {method}")
                reply = json.loads(line)
                if reply.get("id") == ident:
                    break
        finally:
            guard.cancel()
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return dict(reply["result"])

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        content = result.get("structuredContent") or {}
        if result.get("isError"):
            error = content.get("error", {})
            raise ToolFailed(str(error.get("code")), str(error.get("message")))
        return dict(content)

    def close(self) -> int:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()
        return code


class Replica:
    """What runs inside one replica's process: its Vault, its MCP server, its person."""

    def __init__(self, root: Path, url: str, name: str, mcp_args: list[str]) -> None:
        from gitmem import Vault
        self.root, self.name = root, name
        self.vault = Vault.clone(url, root, author=name)
        self.mcp = McpStdio(root, f"{name}-agent", mcp_args, dict(os.environ), root.parent / "mcp.log")

    def close(self) -> dict[str, Any]:
        code = self.mcp.close()
        self.vault.close()
        return {"ok": True, "mcp_exit": code}

    def run(self, op: dict[str, Any]) -> dict[str, Any]:
        from gitmem.errors import GitmemError
        kind = op["op"]
        started = time.perf_counter()
        try:
            out = getattr(self, "op_" + kind)(op)
            result = {"ok": True, **(out or {})}
        except ToolFailed as exc:
            result = {"ok": False, "code": exc.code, "message": str(exc)[:300]}
        except GitmemError as exc:
            result = {"ok": False, "code": exc.code, "message": str(exc)[:300]}
        except OSError as exc:   # a person's save that found no file (moved meanwhile)
            result = {"ok": False, "code": "os_error", "message": str(exc)[:300]}
        except Exception as exc:  # noqa: BLE001 - a raw exception is a finding, reported to the driver
            result = {"ok": False, "code": "raw_exception", "message": traceback.format_exc()[-1500:],
                      "type": type(exc).__name__}
        result["op"] = kind
        result["s"] = round(time.perf_counter() - started, 4)
        return result

    # ---- the agent, through MCP
    def op_mcp_add(self, op: dict[str, Any]) -> dict[str, Any]:
        out = self.mcp.call("memory_add", {"content": f"Fleet note {op['token']} from {self.name}.",
                                           "title": op["title"], "tags": ["fleet"]})
        return {"id": out["id"]}

    def op_mcp_append(self, op: dict[str, Any]) -> dict[str, Any]:
        self.mcp.call("memory_update", {"ref": op["ref"], "append": f"Agent {self.name} adds {op['token']}."})
        return {}

    def op_mcp_move(self, op: dict[str, Any]) -> dict[str, Any]:
        self.mcp.call("memory_move", {"ref": op["ref"], "tier": op["tier"]})
        return {}

    def op_mcp_sync(self, op: dict[str, Any]) -> dict[str, Any]:
        """The agent asks for a sync now (the background sync's ``memory_sync`` tool)."""
        return {"state": self.mcp.call("memory_sync", {})}

    # ---- the API
    def op_api_add(self, op: dict[str, Any]) -> dict[str, Any]:
        memory = self.vault.add(op["title"], f"Written by the API of {self.name}: {op['token']}.\n",
                                tags=["fleet"])
        return {"id": memory.id}

    def op_api_append(self, op: dict[str, Any]) -> dict[str, Any]:
        self.vault.update(op["ref"], append=f"{self.name} notes {op['token']}.")
        return {}

    def op_api_move(self, op: dict[str, Any]) -> dict[str, Any]:
        self.vault.move(op["ref"], op["tier"])
        return {}

    def op_api_delete(self, op: dict[str, Any]) -> dict[str, Any]:
        self.vault.delete(op["ref"], hard=bool(op.get("hard")))
        return {}

    def op_api_merge(self, op: dict[str, Any]) -> dict[str, Any]:
        result = self.vault.merge(op["refs"])
        return {"id": result.memory.id}

    def op_sync(self, op: dict[str, Any]) -> dict[str, Any]:
        report = self.vault.sync()
        return {"action": report.action, "arrived": report.arrived, "conflicts": len(report.conflicts),
                "pushed": report.pushed, "ms": report.duration_ms}

    def op_head(self, op: dict[str, Any]) -> dict[str, Any]:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=self.root, capture_output=True, text=True)
        return {"head": head.stdout.strip()}

    # ---- a person, in an editor
    def _file_of(self, ref: str) -> Path:
        return self.root / self.vault.get(ref).path

    def op_person_rename(self, op: dict[str, Any]) -> dict[str, Any]:
        """Save the way vim/VS Code do: write a temporary file, rename it over the memory."""
        path = self._file_of(op["ref"])
        text = path.read_text(encoding="utf-8")
        tmp = path.with_name(f".{path.name}.swp")
        tmp.write_text(text.rstrip("\n") + f"\n\nA person adds {op['token']}.\n", encoding="utf-8")
        if not path.exists():
            tmp.unlink()
            raise FileNotFoundError(path)
        os.replace(tmp, path)
        return {}

    def op_person_inplace(self, op: dict[str, Any]) -> dict[str, Any]:
        """Save the way nano/Obsidian do: rewrite the file in place."""
        path = self._file_of(op["ref"])
        with path.open("r+", encoding="utf-8") as f:
            text = f.read()
            f.seek(0)
            f.write(text.rstrip("\n") + f"\n\nA person writes {op['token']}.\n")
            f.truncate()
        return {}

    def op_purge(self, op: dict[str, Any]) -> dict[str, Any]:
        """A person forgets a memory: ``gitmem purge ID --yes``; the next sync takes it everywhere."""
        done = subprocess.run([sys.executable, "-m", "gitmem", "-C", str(self.root), "purge", op["ref"],
                               "--yes", "--json"], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            try:
                error = json.loads(done.stdout)["error"]
            except (ValueError, KeyError, TypeError):
                error = {"code": "purge_failed", "message": done.stderr[-500:]}
            return {"purged": False, "code": error.get("code"), "message": str(error.get("message"))[:300]}
        return {"purged": True, "receipt": json.loads(done.stdout)}


def worker_main(argv: list[str]) -> None:
    """``python -m tests.fleet worker ROOT URL NAME MCP_ARGS_JSON``: one replica.

    Reads one JSON command per line on stdin ({"ops": [...]} or {"quit": true}) and
    answers one JSON line per command on its original stdout (anything else the
    process prints goes to stderr)."""
    root, url, name, mcp_args = Path(argv[0]), argv[1], argv[2], json.loads(argv[3])
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    replica = Replica(root, url, name, mcp_args)
    out.write(json.dumps({"ready": True, "mcp_pid": replica.mcp.pid}) + "\n")
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("quit"):
            break
        out.write(json.dumps([replica.run(op) for op in command["ops"]]) + "\n")
    out.write(json.dumps(replica.close()) + "\n")
    out.close()


# ====================================================================== the driver
@dataclass
class FleetConfig:
    """How big, how long, how hostile."""

    work: Path
    replicas: int = 5
    rounds: int = 8
    ops_per_round: int = 4
    seed: int = 0
    hot: int = 6                          # memories every replica edits (concurrent edits of the same ones)
    people: tuple[int, ...] = (1, 2)      # replicas where a person also saves files in an editor
    canaries: int = 3                     # planted, then purged from another replica (needs purge_syncs)
    purge_syncs: bool = False             # gitmem can take a purge to every clone
    background_sync: bool = False         # gitmem mcp --sync is available
    sync_interval: float = 2.0
    fault_rate: float = 0.5               # chance per round that a server goes down at a random moment
    converge_timeout: float = 120.0
    log: Callable[[str], None] = lambda line: None
    # Called once the fleet has converged, before the replicas stop (a benchmark measures there).
    after: Callable[[FleetRun, list[Worker], dict[str, Any]], None] | None = None


@dataclass
class FleetRun:
    """What a run did and saw: the input of :func:`check_fleet`."""

    config: FleetConfig
    bare: Path
    roots: list[Path]
    transports: list[str]
    acked: dict[str, str] = field(default_factory=dict)            # token -> memory id it was written into
    canary_ids: dict[str, str] = field(default_factory=dict)       # canary token -> memory id
    canary_tokens: set[str] = field(default_factory=set)           # every text written into a canary
    purged: dict[str, str] = field(default_factory=dict)           # canary token -> replica that purged it
    hard_deleted: set[str] = field(default_factory=set)
    raw_errors: list[dict[str, Any]] = field(default_factory=list)
    codes: dict[str, int] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    sync_reports: list[dict[str, Any]] = field(default_factory=list)
    last_heal: float = 0.0
    converge_s: float | None = None
    background_converge_s: float | None = None   # agreement reached by background sync alone
    converge_passes: int = 0
    mcp_exits: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def git(cwd: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} in {cwd}: {done.stderr}")
    return done.stdout


def _git_env(home: Path) -> dict[str, str]:
    """The environment every process of the fleet runs in: no user settings leak in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITMEM_", "GIT_"))}
    env.update({"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "fleet",
                "GIT_AUTHOR_EMAIL": "fleet@example.com", "GIT_COMMITTER_NAME": "fleet",
                "GIT_COMMITTER_EMAIL": "fleet@example.com",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
    return env


class Worker:
    """The driver's handle on one replica process."""

    def __init__(self, index: int, root: Path, url: str, transport: str, env: dict[str, str],
                 mcp_args: list[str]) -> None:
        self.index, self.root, self.transport = index, root, transport
        root.parent.mkdir(parents=True, exist_ok=True)
        self.stderr = (root.parent / "worker.log").open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fleet", "worker", str(root), url,
                                      f"replica{index}", json.dumps(mcp_args)],
                                     cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True)
        self.mcp_pid = 0

    def wait_ready(self) -> None:
        """Wait for the clone and the MCP server to be up."""
        self.mcp_pid = int(self._read(300)["mcp_pid"])

    def _read(self, timeout: float) -> Any:
        assert self.proc.stdout is not None
        guard = threading.Timer(timeout, self.proc.kill)
        guard.start()
        try:
            line = self.proc.stdout.readline()
        finally:
            guard.cancel()
        if not line:
            tail = (self.root.parent / "worker.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"replica {self.index} exited ({self.proc.poll()}):\n{tail}")
        return json.loads(line)

    def send(self, ops: list[dict[str, Any]]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"ops": ops}) + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = 600) -> list[dict[str, Any]]:
        return list(self._read(timeout))

    def do(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.send(ops)
        return self.answer()

    def quit(self) -> dict[str, Any]:
        if self.proc.poll() is not None:
            return {"ok": False, "exit": self.proc.returncode}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
        self.proc.stdin.flush()
        try:
            closed = dict(self._read(120))
        finally:
            self.proc.stdin.close()
            self.proc.wait(60)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.stderr.close()
        return closed

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self.stderr.close()


@contextmanager
def fleet_servers(work: Path, log: Callable[[str], None]) -> Iterator[dict[str, Any]]:
    """One bare repository (reflog on for every update) served by path, http and ssh."""
    from .servers import HttpServer, PathServer, SshServer
    srv = work / "srv"
    srv.mkdir(parents=True)
    bare = srv / "fleet.git"
    git(work, "init", "-q", "--bare", "-b", "main", str(bare))
    git(bare, "config", "core.logAllRefUpdates", "always")
    with ExitStack() as stack:
        http = stack.enter_context(HttpServer(srv, (USER, PASSWORD)))
        ssh = SshServer(work / "ssh")
        ssh.start()
        stack.callback(ssh.stop)
        yield {"bare": bare, "path": PathServer(bare), "http": http, "ssh": ssh,
               "urls": {"path": str(bare), "http": http.url("fleet.git"), "ssh": f"{ssh.prefix}{bare}"}}
        log("stopping the servers")


def _seed_vault(work: Path, bare: Path, hot: int, env: dict[str, str]) -> list[str]:
    """The vault everyone clones: ``hot`` memories, pushed to the server."""
    code = ("import sys, json\nfrom gitmem import Vault\n"
            "v = Vault.init(sys.argv[1], author='founder')\nv.add_remote('origin', sys.argv[2])\n"
            "ids = [v.add(f'Shared topic {i}', f'Shared topic {i}: the fleet edits this one.\\n',"
            " tags=['hot']).id for i in range(int(sys.argv[3]))]\n"
            "v.sync()\nv.close()\nprint(json.dumps(ids))\n")
    done = subprocess.run([sys.executable, "-c", code, str(work / "founder"), str(bare), str(hot)],
                          capture_output=True, text=True, env=env, cwd=REPO, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    shutil.rmtree(work / "founder")
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


class Plan:
    """The seeded random choices of a run (ops, targets, fault moments)."""

    def __init__(self, run: FleetRun, hot_ids: list[str]) -> None:
        self.run = run
        self.rng = random.Random(run.config.seed)
        self.hot = list(hot_ids)
        self.pool = list(hot_ids)   # memories somebody made (a replica may not have them yet)
        self.counter = 0

    def token(self) -> str:
        self.counter += 1
        return f"zt{self.counter:06d}q"

    def ref(self, hot_bias: float = 0.6) -> str:
        return self.rng.choice(self.hot if self.rng.random() < hot_bias else self.pool)

    def ops_for(self, replica: int) -> list[dict[str, Any]]:
        rng, cfg = self.rng, self.run.config
        choices: list[tuple[str, float]] = [
            ("mcp_add", 2), ("api_add", 1), ("mcp_append", 2.5), ("api_append", 2), ("mcp_move", 0.7),
            ("api_move", 0.5), ("api_delete", 0.4), ("api_delete_hard", 0.2), ("api_merge", 0.3)]
        if replica in cfg.people:
            choices += [("person_rename", 1.5), ("person_inplace", 1.0)]
        names, weights = zip(*choices, strict=True)
        ops: list[dict[str, Any]] = []
        for _ in range(cfg.ops_per_round):
            kind = rng.choices(names, weights)[0]
            op: dict[str, Any] = {"op": kind}
            if kind in ("mcp_add", "api_add"):
                op["token"] = self.token()
                op["title"] = f"Fleet {op['token']}"
            elif kind in ("mcp_append", "api_append", "person_rename", "person_inplace"):
                op["ref"], op["token"] = self.ref(), self.token()
            elif kind in ("mcp_move", "api_move"):
                op["ref"], op["tier"] = self.ref(0.5), rng.choice(TIERS)
            elif kind == "api_delete":
                op["ref"] = self.ref(0.2)
            elif kind == "api_delete_hard":
                op = {"op": "api_delete", "hard": True, "ref": rng.choice(self.pool[cfg.hot:] or self.pool)}
            elif kind == "api_merge":
                op["refs"] = rng.sample(self.pool, 2)
            ops.append(op)
        if rng.random() < 0.85:   # a sync at a random place in the batch (or the agent asks for one)
            sync = "mcp_sync" if cfg.background_sync and rng.random() < 0.3 else "sync"
            ops.insert(rng.randrange(len(ops) + 1), {"op": sync})
        return ops

    def record(self, ops: list[dict[str, Any]], results: list[dict[str, Any]], replica: int) -> None:
        run = self.run
        for op, result in zip(ops, results, strict=True):
            code = "ok" if result.get("ok") else str(result.get("code"))
            key = f"{op['op']}:{code}"
            run.codes[key] = run.codes.get(key, 0) + 1
            if result.get("code") == "raw_exception":
                run.raw_errors.append({"replica": replica, "op": op, "result": result})
            if not result.get("ok"):
                continue
            token = op.get("token")
            if op.get("canary"):
                continue   # never a target of random operations (a merge would copy its text on)
            if op["op"] in ("mcp_add", "api_add"):
                self.pool.append(result["id"])
                assert token is not None
                run.acked[token] = result["id"]
            elif token is not None:
                if op["ref"] in run.canary_ids.values():
                    run.canary_tokens.add(token)
                else:
                    run.acked[token] = op["ref"]
            if op["op"] == "api_merge":
                self.pool.append(result["id"])
            if op["op"] == "api_delete" and op.get("hard"):
                run.hard_deleted.add(op["ref"])
            if op["op"] == "sync":
                run.sync_reports.append({"replica": replica, **result})
        for op, result in zip(ops, results, strict=True):
            if op["op"] == "sync" and result.get("code") not in (None, "remote_unreachable"):
                run.notes.append(f"sync in replica{replica}: {result.get('code')}: {result.get('message')}")


def run_fleet(cfg: FleetConfig) -> FleetRun:
    """Start the servers and the replicas, run the rounds with faults, heal, converge.

    Returns what happened; the caller checks it with :func:`check_fleet` (the
    servers and processes are stopped when this returns)."""
    log = cfg.log
    cfg.work.mkdir(parents=True, exist_ok=True)
    home = cfg.work / "home"
    home.mkdir(exist_ok=True)
    env = _git_env(home)
    with fleet_servers(cfg.work, log) as servers, ExitStack() as stack:
        bare: Path = servers["bare"]
        transports = [TRANSPORTS[i % 3] for i in range(cfg.replicas)]
        roots = [cfg.work / f"r{i}" / "vault" for i in range(cfg.replicas)]
        run = FleetRun(cfg, bare, roots, transports)
        hot_ids = _seed_vault(cfg.work, bare, cfg.hot, env)
        mcp_args = ["--sync", "origin", "--sync-interval", f"{cfg.sync_interval:g}"] if cfg.background_sync else []
        workers: list[Worker] = []

        def stop_all() -> None:
            for w in workers:
                w.kill()
        stack.callback(stop_all)
        for i, (root, transport) in enumerate(zip(roots, transports, strict=True)):
            wenv = dict(env)
            if transport == "http":
                wenv.update(GITMEM_GIT_USERNAME=USER, GITMEM_GIT_PASSWORD=PASSWORD)
            if transport == "ssh":
                wenv["GIT_SSH_COMMAND"] = servers["ssh"].command()
            workers.append(Worker(i, root, servers["urls"][transport], transport, wenv, mcp_args))
        for w in workers:
            w.wait_ready()
        log(f"{cfg.replicas} replicas up ({', '.join(transports)}); seed {cfg.seed}")
        plan = Plan(run, hot_ids)
        down: dict[str, int] = {}   # server -> the round it comes back

        def fault(name: str, up: bool) -> None:
            server = servers[name]
            (server.start if up else server.stop)()
            run.faults.append(f"{'start' if up else 'stop'} {name}")
            if up:
                run.last_heal = time.monotonic()

        canary_rounds = _canary_schedule(cfg, plan.rng)
        for rnd in range(cfg.rounds):
            batches = [plan.ops_for(i) for i in range(cfg.replicas)]
            for planter, purger, k in canary_rounds:
                _canary_ops(run, plan, batches, rnd, planter, purger, k)
            for w, ops in zip(workers, batches, strict=True):
                w.send(ops)
            # Faults at a random moment while the replicas work.
            actions = [(name, True) for name, back in down.items() if back <= rnd]
            unhit = {"path", "http", "ssh"} - {f.split()[1] for f in run.faults if f.startswith("stop")}
            force = 0 < cfg.rounds - 1 - rnd <= len(unhit)   # every kind of server goes down at least once
            if (force or plan.rng.random() < cfg.fault_rate) and rnd < cfg.rounds - 1:
                up_now = [n for n in ("path", "http", "ssh") if n not in down]
                if up_now:
                    name = plan.rng.choice([n for n in up_now if n in unhit] or up_now)
                    actions.append((name, False))
                    down[name] = rnd + plan.rng.randint(1, 2)
            for name, up in actions:
                if up:
                    down.pop(name, None)
            def strike(acts: list[tuple[str, bool]] = actions) -> None:
                for name, up in acts:
                    fault(name, up)
            timer = threading.Timer(plan.rng.uniform(0.05, 0.8), strike)
            timer.start()
            for i, (w, ops) in enumerate(zip(workers, batches, strict=True)):
                results = w.answer()
                plan.record(ops, results, i)
                _canary_record(run, ops, results, i)
            timer.join()
            log(f"round {rnd + 1}/{cfg.rounds}: {sum(run.codes.values())} ops, faults: {run.faults[-2:]}")
        for name in ("path", "http", "ssh"):   # the faults stop
            if not servers[name].running:
                fault(name, True)
        _finish_purges(run, workers, canary_rounds)
        run.last_heal = time.monotonic()
        _converge(run, workers, plan.rng)
        if cfg.after is not None:
            cfg.after(run, workers, servers)
        for w in workers:
            closed = w.quit()
            run.mcp_exits.append(int(closed.get("mcp_exit", -1)))
        workers.clear()
    return run


def _canary_schedule(cfg: FleetConfig, rng: random.Random) -> list[tuple[int, int, int]]:
    """(planter, purger, k) per canary: planted in round k, purged from another replica later."""
    if not cfg.purge_syncs:
        return []
    out: list[tuple[int, int, int]] = []
    for k in range(cfg.canaries):
        planter = k % cfg.replicas
        others = [i for i in range(cfg.replicas) if i != planter and i not in {p for _, p, _ in out}]
        purger = rng.choice(others or [i for i in range(cfg.replicas) if i != planter])
        out.append((planter, purger, k))
    return out


def _canary_ops(run: FleetRun, plan: Plan, batches: list[list[dict[str, Any]]], rnd: int,
                planter: int, purger: int, k: int) -> None:
    cfg = run.config
    token = f"canary{k}x{plan.rng.randrange(16**8):08x}"
    if rnd == k:   # planted, synced
        batches[planter][:0] = [{"op": "api_add", "title": f"Canary {token}", "token": token, "canary": True},
                                {"op": "sync"}]
        return
    planted = [t for t, _ in run.canary_ids.items() if t.startswith(f"canary{k}x")]
    if not planted or any(t in run.purged for t in planted):
        return
    ref = run.canary_ids[planted[0]]
    purge_round = max(k + 2, cfg.rounds // 2 + k - 1)
    if rnd == purge_round - 1:   # a replica edits the canary and keeps it unpushed for a while
        editor = (purger + 1) % cfg.replicas
        batches[editor].insert(0, {"op": "api_append", "ref": ref, "token": plan.token()})
    if rnd >= purge_round:
        batches[purger] = [{"op": "sync"}, {"op": "purge", "ref": ref, "canary": planted[0]},
                           {"op": "sync"}] + batches[purger]


def _finish_purges(run: FleetRun, workers: list[Worker], schedule: list[tuple[int, int, int]]) -> None:
    """A purge the partitions kept from happening during the rounds happens now (the
    planter pushes its canary, the purger fetches it and purges)."""
    for planter, purger, k in schedule:
        for _ in range(3):
            planted = [t for t in run.canary_ids if t.startswith(f"canary{k}x")]
            if not planted or planted[0] in run.purged:
                break
            workers[planter].do([{"op": "sync"}])
            ops = [{"op": "sync"}, {"op": "purge", "ref": run.canary_ids[planted[0]], "canary": planted[0]},
                   {"op": "sync"}]
            _canary_record(run, ops, workers[purger].do(ops), purger)


def _canary_record(run: FleetRun, ops: list[dict[str, Any]], results: list[dict[str, Any]], replica: int) -> None:
    for op, result in zip(ops, results, strict=True):
        if op.get("canary") and op["op"] == "api_add" and result.get("ok"):
            run.canary_ids[op["token"]] = result["id"]
            run.canary_tokens.add(op["token"])
            run.acked.pop(op["token"], None)
        if op["op"] == "purge" and result.get("ok") and result.get("purged"):
            run.purged[op["canary"]] = f"replica{replica}"
        elif op["op"] == "purge":
            run.notes.append(f"purge from replica{replica}: {result}")


def _heads(run: FleetRun, workers: list[Worker]) -> set[str]:
    heads = {str(w.do([{"op": "head"}])[0].get("head")) for w in workers}
    heads.add(git(run.bare, "rev-parse", "main").strip())
    return heads


def _converge_in_background(run: FleetRun, workers: list[Worker]) -> None:
    """Wait, without any explicit sync, until the agents' background syncs make everyone agree."""
    cfg = run.config
    # A replica that kept failing during the partitions backs off up to 8 intervals.
    deadline = time.monotonic() + 10 * cfg.sync_interval + 20
    while time.monotonic() < deadline:
        if len(_heads(run, workers)) == 1:
            time.sleep(cfg.sync_interval + 1)   # and they stay agreed for a whole interval
            if len(_heads(run, workers)) == 1:
                run.background_converge_s = round(time.monotonic() - run.last_heal, 2)
                cfg.log(f"agreed by background sync in {run.background_converge_s} s")
                return
        time.sleep(0.5)
    run.notes.append("background sync alone did not bring the replicas together")


def _converge(run: FleetRun, workers: list[Worker], rng: random.Random) -> None:
    """Sync every replica, in random order, until all and the server agree twice in a row."""
    cfg, log = run.config, run.config.log
    if cfg.background_sync:
        _converge_in_background(run, workers)
    deadline = time.monotonic() + cfg.converge_timeout
    agreed = 0
    while time.monotonic() < deadline:
        order = list(range(len(workers)))
        rng.shuffle(order)
        for i in order:
            result = workers[i].do([{"op": "sync"}])[0]
            run.sync_reports.append({"replica": i, "final": True, **result})
            if result.get("code") == "raw_exception":
                run.raw_errors.append({"replica": i, "op": {"op": "sync"}, "result": result})
        run.converge_passes += 1
        heads = _heads(run, workers)
        agreed = agreed + 1 if len(heads) == 1 else 0
        log(f"converge pass {run.converge_passes}: {len(heads)} distinct head(s)")
        if agreed == 2:
            run.converge_s = round(time.monotonic() - run.last_heal, 2)
            return
    last = {r["replica"]: r for r in run.sync_reports if r.get("final")}
    failing = {f"replica{i}": f"{r.get('code')}: {str(r.get('message'))[:200]}" for i, r in sorted(last.items())
               if not r.get("ok")}
    run.notes.append(f"did not converge within {cfg.converge_timeout:g} s; last sync errors: {failing}")


# ====================================================================== the checks
def _all_objects(repo: Path, reachable_only: bool = False) -> bytes:
    """Every object of ``repo`` as ``git cat-file --batch`` prints it (content decompressed)."""
    if reachable_only:
        listing = subprocess.run(["git", "rev-list", "--objects", "--all"], cwd=repo, capture_output=True,
                                 check=True).stdout
        names = b"\n".join(line.split(b" ", 1)[0] for line in listing.splitlines()) + b"\n"
        return subprocess.run(["git", "cat-file", "--batch"], cwd=repo, input=names, capture_output=True,
                              check=True).stdout
    return subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo,
                          capture_output=True, check=True).stdout


def _files_bytes(root: Path, skip_objects: bool = True) -> dict[str, bytes]:
    """Every file under ``root`` (work tree and ``.git``, packed/loose objects aside)."""
    out = {}
    for folder, dirs, names in os.walk(root):
        if skip_objects and (Path(folder) == root or Path(folder).name == ".git"):
            dirs[:] = [d for d in dirs if d != "objects"]   # read decompressed by _all_objects
        for name in names:
            full = Path(folder) / name
            try:
                out[full.relative_to(root).as_posix()] = full.read_bytes()
            except OSError:
                continue
    return out


def _tree_texts(root: Path) -> dict[str, str]:
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            full = Path(folder) / name
            out[full.relative_to(root).as_posix()] = full.read_text(encoding="utf-8", errors="replace")
    return out


def _non_fast_forward(bare: Path) -> list[str]:
    """Updates of the server's main (its reflog) that did not fast-forward."""
    log = bare / "logs" / "refs" / "heads" / "main"
    if not log.exists():
        return ["no reflog on the server (core.logAllRefUpdates)"]
    out = []
    for line in log.read_text().splitlines():
        old, new = line.split(" ", 2)[:2]
        if old == ZERO:
            continue
        rc = subprocess.run(["git", "merge-base", "--is-ancestor", old, new], cwd=bare,
                            capture_output=True).returncode
        if rc != 0:
            out.append(f"{old[:10]} -> {new[:10]} ({'not an ancestor' if rc == 1 else 'unknown commit'})")
    return out


def check_fleet(run: FleetRun) -> dict[str, list[str]]:
    """Every property the fleet must have, as {check: [problems]} (empty lists: all good)."""
    from gitmem import Vault
    problems: dict[str, list[str]] = {k: [] for k in (
        "raw_errors", "converged", "same_tree", "acknowledged", "search", "conflict_markers", "canaries",
        "server_reflog", "fsck", "mcp_exit")}
    problems["raw_errors"] = [json.dumps(e)[:1500] for e in run.raw_errors]
    if run.converge_s is None:
        problems["converged"] = run.notes[-1:] or ["did not converge"]
    problems["mcp_exit"] = [f"replica{i}: gitmem mcp exited {c}" for i, c in enumerate(run.mcp_exits) if c != 0]
    server_tree = git(run.bare, "rev-parse", "main^{tree}").strip()
    for i, root in enumerate(run.roots):
        tree = git(root, "rev-parse", "HEAD^{tree}").strip()
        if tree != server_tree:
            problems["same_tree"].append(f"replica{i}: HEAD tree {tree[:10]} != server {server_tree[:10]}")
        status = git(root, "status", "--porcelain")
        if status:
            problems["same_tree"].append(f"replica{i}: uncommitted: {status[:300]}")
    canaries = sorted(run.canary_tokens)
    for i, root in enumerate(run.roots):
        texts = _tree_texts(root)
        everything = "\n".join(texts.values())
        history: str | None = None
        for token, memory in sorted(run.acked.items()):
            if token in everything:
                continue
            if memory in run.hard_deleted:
                if history is None:
                    history = _all_objects(root).decode("utf-8", "replace")
                if token in history:
                    continue
            problems["acknowledged"].append(f"replica{i}: {token} (written into {memory}) not found")
        for path, text in texts.items():
            if "<<<<<<<" in text or "\n>>>>>>> " in text:
                problems["conflict_markers"].append(f"replica{i}: {path}")
        files = _files_bytes(root)
        objects = _all_objects(root)
        for token in canaries:
            raw = token.encode()
            where = [p for p, data in files.items() if raw in data]
            if raw in objects:
                where.append("git objects (loose or packed)")
            if where:
                problems["canaries"].append(f"replica{i}: {token} in {', '.join(where[:5])}")
        fsck = subprocess.run(["git", "fsck", "--full"], cwd=root, capture_output=True, text=True)
        if fsck.returncode != 0:
            problems["fsck"].append(f"replica{i}: {fsck.stderr[-500:]}")
    # Search, as an agent would look (a sample, to keep it quick), in each replica.
    rng = random.Random(run.config.seed)
    present = [t for t, m in run.acked.items() if m not in run.hard_deleted]
    sample = rng.sample(present, min(12, len(present)))
    for i, root in enumerate(run.roots):
        vault = Vault.open(root, author="checker")
        try:
            for token in sample:
                if vault.search(token, include_inactive=True).total == 0:
                    problems["search"].append(f"replica{i}: search finds no {token}")
            for token in canaries:
                if vault.search(token, include_inactive=True).total:
                    problems["canaries"].append(f"replica{i}: search finds {token}")
        finally:
            vault.close()
    # The server: its reflog first (it keeps the old tips), then what it holds.
    non_ff = _non_fast_forward(run.bare)
    allowed = len(run.purged)
    if len(non_ff) > allowed:
        problems["server_reflog"] = [f"{len(non_ff)} non-fast-forward update(s), {allowed} purge(s): "
                                     + "; ".join(non_ff)]
    reachable = _all_objects(run.bare, reachable_only=True)
    for token in canaries:
        if token.encode() in reachable:
            problems["canaries"].append(f"server: {token} reachable from a ref")
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=run.bare, capture_output=True, text=True)
    if fsck.returncode != 0:
        problems["fsck"].append(f"server: {fsck.stderr[-500:]}")
    # A server keeps unreachable objects (and its reflog) until its operator's gc; after it, none.
    git(run.bare, "reflog", "expire", "--expire=now", "--all")
    git(run.bare, "gc", "-q", "--prune=now")
    objects = _all_objects(run.bare)
    files = _files_bytes(run.bare)
    for token in canaries:
        where = [p for p, data in files.items() if token.encode() in data]
        if token.encode() in objects:
            where.append("objects after gc")
        if where:
            problems["canaries"].append(f"server: {token} in {', '.join(where)}")
    return problems


def summary(run: FleetRun) -> dict[str, Any]:
    """What a run did, for a failure message or a benchmark's JSON."""
    syncs = [r for r in run.sync_reports if r.get("ok")]
    return {"seed": run.config.seed, "replicas": run.config.replicas, "transports": run.transports,
            "rounds": run.config.rounds, "acked_writes": len(run.acked), "canaries": len(run.canary_ids),
            "purged": run.purged, "hard_deleted": len(run.hard_deleted), "faults": run.faults,
            "op_results": dict(sorted(run.codes.items())),
            "syncs_ok": len(syncs), "sync_conflict_copies": sum(int(r.get("conflicts", 0)) for r in syncs),
            "converge_s": run.converge_s, "converge_passes": run.converge_passes, "notes": run.notes,
            "background_sync": run.config.background_sync, "purge_syncs": run.config.purge_syncs}


def features() -> dict[str, bool]:
    """Which fleet features this gitmem has: background sync in ``gitmem mcp``, purges that travel."""
    def helps(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "gitmem", *args, "--help"], capture_output=True, text=True,
                              cwd=REPO)
        return done.stdout
    return {"background_sync": "--sync-interval" in helps("mcp"),
            "purge_syncs": "--status" in helps("purge")}


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker_main(sys.argv[2:])
