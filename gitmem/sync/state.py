"""What the syncs of one clone did, kept for ``gitmem status``: ``.git/gitmem/sync-state.json``.

Every sync (``gitmem sync``, ``vault.sync``, the agent tool, a background sync)
records, per remote: when it was last tried and when it last succeeded, what it
did, the error of the last failure (code and message; cleared by the next
success) and how many failures in a row, the ahead/behind counts it left, and
the conflict copies the latest syncs produced.  A background sync
(:mod:`gitmem.sync.background`) adds itself: remote, interval, process id and
the next attempt while it backs off.

The file is this clone's own state (never committed, never shared), replaced
atomically (temp file and rename) under a small lock file of its own, so the
writers of several processes (a ``gitmem mcp --sync`` and a ``gitmem sync`` in
a shell) do not lose each other's entries.  An unreadable file counts as empty:
recording never fails a sync.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import GitmemError
from ..store.locking import try_flock

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from ..store.storage import Storage

__all__ = ["SyncState", "SyncOutcome", "STATE_FILE", "KEPT_CONFLICTS"]

STATE_FILE = "sync-state.json"
_LOCK_FILE = "sync-state.lock"
# Conflict copies remembered per remote (the newest); `gitmem conflicts` lists all of them.
KEPT_CONFLICTS = 50
_MESSAGE_CHARS = 500


class SyncOutcome(Protocol):
    """What a sync reports that the state keeps (:class:`gitmem.sync.syncer.SyncReport`)."""

    remote: str
    url: str
    action: str
    arrived: int
    pushed: bool
    conflicts: list[dict[str, str]]


class SyncState:
    """The sync state file of one open vault (module docstring)."""

    def __init__(self, store: Storage) -> None:
        self.store = store

    @property
    def path(self) -> Path:
        """Where the state is kept."""
        return self.store.state_dir / STATE_FILE

    # ------------------------------------------------------------ reading
    def read(self) -> dict[str, Any]:
        """The whole file ({"remotes": {name: entry}, "background": {...} or absent}); {} if none."""
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def status(self, remote: str | None = None) -> dict[str, Any]:
        """The sync state of ``remote`` for a person or an agent to read.

        ``remote`` None: the remote a background sync uses (or used last), else
        ``origin`` if configured, else the first configured remote.  Returns
        {remote, url, remotes, last_attempt, last_success, last_action, last_error,
        failures, ahead, behind, conflicts, unresolved_conflicts, background}:
        ``ahead``/``behind`` count the commits between HEAD and what this clone last
        saw of the remote (None before the first fetch); ``conflicts`` are the
        conflict copies the latest syncs produced that still exist; ``background``
        is None when no background sync ran, else {running, pid, interval,
        next_attempt, failures}."""
        data = self.read()
        remotes = self._remote_names()
        background = data.get("background") if isinstance(data.get("background"), dict) else None
        if remote is None:
            chosen = background.get("remote") if background else None
            remote = chosen if isinstance(chosen, str) else "origin" if "origin" in remotes else \
                (remotes[0] if remotes else None)
        entries = data.get("remotes")
        found = entries.get(remote) if remote is not None and isinstance(entries, dict) else None
        entry: dict[str, Any] = found if isinstance(found, dict) else {}
        ahead, behind = self.ahead_behind(remote) if remote in remotes else (None, None)
        conflicts = [c for c in entry.get("conflicts") or [] if isinstance(c, dict) and self._unresolved(c)]
        out: dict[str, Any] = {
            "remote": remote, "url": entry.get("url"), "remotes": remotes,
            "configured": remote in remotes,
            "last_attempt": entry.get("last_attempt"), "last_success": entry.get("last_success"),
            "last_action": entry.get("last_action"), "last_error": entry.get("last_error"),
            "failures": int(entry.get("failures") or 0), "ahead": ahead, "behind": behind,
            "conflicts": conflicts, "unresolved_conflicts": self._conflict_count(),
            "background": None}
        if background is not None and background.get("remote") == remote:
            pid = background.get("pid")
            out["background"] = {"running": bool(background.get("running")) and _alive(pid), "pid": pid,
                                 "interval": background.get("interval"), "since": background.get("since"),
                                 "next_attempt": background.get("next_attempt"),
                                 "failures": int(background.get("failures") or 0)}
        return out

    def ahead_behind(self, remote: str | None) -> tuple[int | None, int | None]:
        """(commits HEAD has that the remote's tracking ref lacks, and the other way round);
        (None, None) before the first sync with ``remote``."""
        from dulwich.refs import Ref
        if remote is None:
            return None, None
        git = self.store.git
        branch = git.head_ref().rsplit(b"/", 1)[-1]
        try:
            seen: bytes | None = git.repo.refs[Ref(b"refs/remotes/" + remote.encode() + b"/" + branch)]
        except KeyError:
            seen = None
        head = git.head()
        if seen is None or head is None:
            return None, None
        try:
            return len(git.walk_new(seen, head)), len(git.walk_new(head, seen))
        except (KeyError, GitmemError):   # a ref to an object this clone no longer has
            return None, None

    def _remote_names(self) -> list[str]:
        config = self.store.git.repo.get_config()
        return sorted(section[1].decode("utf-8", "replace") for section in config.sections()
                      if len(section) == 2 and section[0] == b"remote")

    def _unresolved(self, conflict: dict[str, Any]) -> bool:
        copy_id = conflict.get("copy_id")
        if not isinstance(copy_id, str):
            return False
        return any(row.meta.get("status") == "conflict" for row in self.store.catalog.by_id(copy_id))

    def _conflict_count(self) -> int:
        return sum(n for (_tier, status), n in self.store.catalog.tier_counts().items() if status == "conflict")

    # ------------------------------------------------------------ writing
    @contextmanager
    def recording(self, report: SyncOutcome) -> Iterator[None]:
        """Around one sync: its outcome (``report`` once done, or the error it raised)
        is recorded when the block ends; the error is raised on as it was."""
        attempt = self.store.now()
        try:
            yield
        except BaseException as exc:
            self._quietly(self._failed, report.remote, report.url, attempt, exc)
            raise
        self._quietly(self._succeeded, report, attempt)

    def _succeeded(self, report: SyncOutcome, attempt: str) -> None:
        ahead, behind = self.ahead_behind(report.remote)
        with self._editing() as data:
            entry = _entry(data, report.remote)
            conflicts = [{**c, "at": attempt} for c in report.conflicts]
            entry.update(url=report.url, last_attempt=attempt, last_success=attempt,
                         last_action=report.action, last_error=None, failures=0, ahead=ahead, behind=behind,
                         arrived=report.arrived, pushed=report.pushed,
                         conflicts=(conflicts + list(entry.get("conflicts") or []))[:KEPT_CONFLICTS])

    def _failed(self, remote: str, url: str, attempt: str, exc: BaseException) -> None:
        if isinstance(exc, GitmemError):
            code, message = exc.code, exc.message
        elif isinstance(exc, Exception):
            code, message = "sync_error", f"{type(exc).__name__}: {exc}"
        else:
            return   # KeyboardInterrupt, SystemExit: the process is ending, not the sync failing
        with self._editing() as data:
            entry = _entry(data, remote)
            entry.update(url=url, last_attempt=attempt,
                         last_error={"code": code, "message": message[:_MESSAGE_CHARS], "at": attempt},
                         failures=int(entry.get("failures") or 0) + 1)

    def background(self, remote: str, **fields: Any) -> None:
        """Record the background sync's own state (``running``, ``pid``, ``interval``,
        ``since``, ``next_attempt``, ``failures``); never raises."""
        def update() -> None:
            with self._editing() as data:
                previous = data.get("background")
                entry = previous if isinstance(previous, dict) and previous.get("remote") == remote else {}
                entry.update(fields, remote=remote)
                data["background"] = entry
        self._quietly(update)

    def forget(self, words: Iterable[str]) -> None:
        """Drop every mention of purged memories (``words``: their ids, paths and
        file names): a conflict entry naming one goes, and so does an error message
        quoting one.  Called when a purge or an applied tombstone rewrites history;
        never raises."""
        needles = sorted({w for w in words if len(w) >= 6}, key=len, reverse=True)
        if not needles:
            return

        def mentions(value: Any) -> bool:
            text = json.dumps(value, ensure_ascii=False)
            return any(n in text for n in needles)

        def update() -> None:
            if not self.path.exists() or not mentions(self.read()):
                return
            with self._editing() as data:
                remotes = data.get("remotes")
                for entry in remotes.values() if isinstance(remotes, dict) else []:
                    if not isinstance(entry, dict):
                        continue
                    entry["conflicts"] = [c for c in entry.get("conflicts") or [] if not mentions(c)]
                    if mentions(entry.get("last_error")):
                        error = entry["last_error"]
                        entry["last_error"] = {**error, "message": "(names a purged memory)"} \
                            if isinstance(error, dict) else None
                for key in [k for k, v in data.items() if k != "remotes" and mentions(v)]:
                    del data[key]
        self._quietly(update)

    @contextmanager
    def _editing(self) -> Iterator[dict[str, Any]]:
        from .. import safefs
        folder = self.store.state_dir
        with try_flock(folder / _LOCK_FILE, 2.0):   # not had: written anyway (a status file)
            data = self.read()
            yield data
            text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)
            safefs.write_bytes(folder, STATE_FILE, text.encode("utf-8"), durable=False)

    @staticmethod
    def _quietly(job: Callable[..., None], *args: Any) -> None:
        try:
            job(*args)
        except Exception:  # noqa: BLE001 - a status file must never fail (or change the outcome of) a sync
            pass


def _entry(data: dict[str, Any], remote: str) -> dict[str, Any]:
    remotes = data.get("remotes")
    if not isinstance(remotes, dict):
        remotes = data["remotes"] = {}
    entry = remotes.get(remote)
    if not isinstance(entry, dict):
        entry = remotes[remote] = {}
    return entry


def _alive(pid: Any) -> bool:
    """True if process ``pid`` runs on this machine (the state file is this clone's own)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:   # PermissionError: it exists, owned by someone else
        return True
    return True
