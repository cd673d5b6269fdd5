"""Background sync for long-running processes: ``gitmem mcp --sync`` and ``gitmem watch --sync``.

A :class:`BackgroundSync` runs one thread beside the process's work and calls
:meth:`Syncer.sync <gitmem.sync.syncer.Syncer.sync>` (fetch without the vault
lock, integrate under it, push without it), the same sync as ``gitmem sync``
with the same checks on everything that arrives:

* **on start, then every** ``interval`` seconds: fetch and integrate what
  other machines pushed (and push what is new here);
* **shortly after a write**: each commit this process makes (an agent's write,
  a person's edit the watcher commits) tells the thread (the write pipeline's
  ``on_commit``: setting a flag, so the write never waits for it); once
  ``push_delay`` seconds (2) pass without another commit, or ``max_push_wait``
  seconds (30) of steady writing, it syncs, which pushes;
* **backing off** while a sync fails (the remote unreachable, a refused login,
  anything else): the next attempt waits ``interval`` x 2^(failures-1), at most
  ``interval`` x 8 and at most 10 minutes (never less than ``interval``), with
  random jitter (x 0.5 to 1) so a fleet of clones does not retry in step.
  Writes go on meanwhile (they are local commits) and are pushed by the first
  sync that succeeds.  :meth:`request` (an agent's "sync now") skips the wait.

A write made while a sync runs waits at most for the sync's integrate step
(under the vault lock, like any other write); network I/O never holds the lock.
What each sync did and the background state (remote, interval, process, next
attempt while backing off) go to ``.git/gitmem/sync-state.json``
(:mod:`gitmem.sync.state`), which ``gitmem status`` and the ``memory_sync``
agent tool read.  Log lines (one per sync that changed something; always one per
conflict copy and per failure) go to ``log``.

:meth:`stop` (the process's shutdown path) pushes what is left unpushed, when
the remote was reachable, waits for the thread at most ``timeout`` seconds and
records that the background sync stopped.  Use::

    with Vault.open("my-vault") as vault, BackgroundSync(vault.services.syncer, "origin", 60):
        ...   # writes are pushed within seconds; other machines' memories arrive
"""

from __future__ import annotations

import logging
import math
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..config import SYNC_INTERVAL_DEFAULT, SYNC_INTERVAL_MAX, remote_setting
from ..errors import GitmemError, InvalidInput, InvalidMetadata, NotFound, VaultClosed
from ..memory.schema import iso_now

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Identity, VaultConfig
    from .syncer import Syncer, SyncReport

__all__ = ["BackgroundSync", "choose_settings", "start_background_sync", "PUSH_DELAY", "MAX_PUSH_WAIT",
           "BACKOFF_CAP", "STOP_TIMEOUT"]

_log = logging.getLogger(__name__)

LogSink = Callable[[str], None]

# Seconds of quiet after the last commit before it is pushed, and the longest a steady
# writer's commits wait.
PUSH_DELAY = 2.0
MAX_PUSH_WAIT = 30.0
# Backoff: at most this many intervals, and at most this many seconds (never below one interval).
BACKOFF_INTERVALS = 8
BACKOFF_CAP = 600.0
# How long stopping waits for the last push.
STOP_TIMEOUT = 15.0


class BackgroundSync:
    """Sync one vault with ``remote`` from a background thread (module docstring).

    ``syncer``: the vault's (``vault.services.syncer``).  ``interval``: seconds
    between fetches.  ``author``: who the merge commits name (default: the
    vault's author).  ``log``: one line per message (default: stderr, prefixed
    ``gitmem: ``); ``quiet`` keeps only conflicts and failures.  ``rng``: the
    jitter's random source (tests)."""

    def __init__(self, syncer: Syncer, remote: str, interval: float = SYNC_INTERVAL_DEFAULT, *,
                 push_delay: float = PUSH_DELAY, max_push_wait: float = MAX_PUSH_WAIT,
                 author: str | Identity | None = None, log: LogSink | None = None, quiet: bool = False,
                 rng: random.Random | None = None) -> None:
        for name, value in (("interval", interval), ("push_delay", push_delay), ("max_push_wait", max_push_wait)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
                    or not 0 <= value <= SYNC_INTERVAL_MAX or (name == "interval" and value <= 0):
                raise InvalidInput(f"{name} must be a number of seconds from 0 to {SYNC_INTERVAL_MAX:g}, "
                                   f"got {value!r}")
        self.syncer = syncer
        self.remote = remote
        self.interval = float(interval)
        self.push_delay = float(push_delay)
        self.max_push_wait = max(float(max_push_wait), self.push_delay)
        self.author = author
        self.quiet = quiet
        self._sink: LogSink = log or _stderr
        self._rng = rng or random.Random()
        self.failures = 0                     # failed syncs in a row
        self.rounds = 0                       # syncs tried
        self.last_report: SyncReport | None = None
        self.last_error: dict[str, str] | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._requested = False
        self._dirty_at: float | None = None   # first commit not yet pushed
        self._last_commit = 0.0
        self._next_fetch = 0.0                # 0: at once (a fetch on start)
        self._backoff_until = 0.0

    # ------------------------------------------------------------ lifecycle
    def start(self) -> BackgroundSync:
        """Start the thread (the first sync runs at once).  Raises ``remote_not_found``
        if ``remote`` is not configured in this clone."""
        if self._thread is not None:
            raise InvalidInput("this background sync was already started")
        names = [r.name for r in self.syncer.remotes()]
        if self.remote not in names:
            raise NotFound(f"no remote named {self.remote!r}", code="remote_not_found",
                           hint=f"Add one: gitmem remote add {self.remote} URL" + (
                               f" (configured: {', '.join(names)})" if names else ""))
        self.syncer.pipeline.on_commit.append(self.notify)
        self.syncer.state.background(self.remote, running=True, pid=os.getpid(), interval=self.interval,
                                     since=self.syncer.store.now(), next_attempt=None, failures=0)
        self._thread = threading.Thread(target=self._run, name="gitmem-sync", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Push what is left (when the remote was reachable), stop the thread, waiting at
        most ``timeout`` seconds, and record that the background sync stopped.  Idempotent."""
        thread = self._thread
        if thread is None:
            return
        try:
            self.syncer.pipeline.on_commit.remove(self.notify)
        except ValueError:
            pass
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify_all()
        thread.join(timeout)
        self.syncer.state.background(self.remote, running=False, next_attempt=None)

    def __enter__(self) -> BackgroundSync:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """True while the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    # -------------------------------------------------------------- signals
    def notify(self) -> None:
        """A local commit was made: push it soon (called by the write pipeline after each
        commit; returns at once)."""
        with self._cond:
            now = time.monotonic()
            self._last_commit = now
            if self._dirty_at is None:
                self._dirty_at = now
            self._cond.notify_all()

    def request(self) -> None:
        """Sync as soon as possible, backoff or not (returns at once)."""
        with self._cond:
            self._requested = True
            self._cond.notify_all()

    def backoff(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failed syncs in a row (module docstring)."""
        cap = max(self.interval, min(self.interval * BACKOFF_INTERVALS, BACKOFF_CAP))
        base = min(self.interval * 2.0 ** min(max(failures, 1) - 1, 30), cap)
        return base * self._rng.uniform(0.5, 1.0)

    # --------------------------------------------------------------- thread
    def _due(self, now: float) -> str | None:
        """Why a sync should run now (``now``, ``fetch``, ``push``), or None."""
        if self._requested:
            return "now"
        if now < self._backoff_until:
            return None
        if now >= self._next_fetch:
            return "fetch"
        if self._dirty_at is not None and (now - self._last_commit >= self.push_delay
                                           or now - self._dirty_at >= self.max_push_wait):
            return "push"
        return None

    def _wake(self) -> float:
        """When :meth:`_due` can next say yes (monotonic time)."""
        at = self._next_fetch
        if self._dirty_at is not None:
            at = min(at, self._last_commit + self.push_delay, self._dirty_at + self.max_push_wait)
        return max(at, self._backoff_until)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        # A last push of what is committed here, unless the remote is failing.
                        reason = "final" if self._dirty_at is not None and self.failures == 0 else None
                        break
                    now = time.monotonic()
                    reason = self._due(now)
                    if reason is not None:
                        break
                    self._cond.wait(max(0.01, self._wake() - now))
                self._requested = False
                self._dirty_at = None   # this sync pushes it; a commit made meanwhile sets it again
            if reason is None:
                return
            if reason == "push" and self._nothing_to_push():
                continue
            self._round()
            if reason == "final":
                return

    def _nothing_to_push(self) -> bool:
        try:
            ahead, _ = self.syncer.state.ahead_behind(self.remote)
        except Exception:  # noqa: BLE001 - unknown: let the sync find out
            return False
        return ahead == 0

    def _round(self) -> None:
        self.rounds += 1
        try:
            report = self.syncer.sync(self.remote, author=self.author)
        except VaultClosed:
            with self._cond:
                self._stopping = True   # the process is shutting down
            return
        except GitmemError as exc:
            self._failed(exc.code, exc.message)
        except Exception as exc:  # noqa: BLE001 - a thread has no caller: log it, back off, retry
            if self._stopping:
                return
            _log.exception("gitmem: background sync with %s failed", self.remote)
            self._failed("sync_error", f"{type(exc).__name__}: {exc}")
        else:
            self._succeeded(report)

    def _succeeded(self, report: SyncReport) -> None:
        recovered = self.failures
        with self._cond:
            self.failures = 0
            self._backoff_until = 0.0
            self._next_fetch = time.monotonic() + self.interval
        self.last_report, self.last_error = report, None
        self.syncer.state.background(self.remote, running=not self._stopping, failures=0, next_attempt=None)
        if recovered:
            self._log(f"sync {self.remote}: working again after {recovered} failed attempt(s)", always=True)
        if report.action != "up_to_date":
            self._log(f"sync {self.remote}: {describe(report)}", always=bool(report.conflicts))
        for c in report.conflicts:
            self._log(f"sync {self.remote}: conflict {c['id'][:8]}: theirs kept as {c['copy_path']} "
                      "(review with: gitmem conflicts)", always=True)
        for warning in report.warnings:
            self._log(f"sync {self.remote}: warning: {warning}", always=True)

    def _failed(self, code: str, message: str) -> None:
        with self._cond:
            self.failures += 1
            delay = self.backoff(self.failures)
            self._next_fetch = self._backoff_until = time.monotonic() + delay
        self.last_error = {"code": code, "message": message}
        store = self.syncer.store
        self.syncer.state.background(self.remote, failures=self.failures,
                                     next_attempt=iso_now(store.clock() + timedelta(seconds=delay)))
        if not self._stopping:
            self._log(f"sync {self.remote} failed ({code}): {message} (attempt {self.failures}; "
                      f"next in {delay:.0f}s)", always=True)

    def _log(self, line: str, *, always: bool = False) -> None:
        if self.quiet and not always:
            return
        try:
            self._sink(line)
        except Exception:  # noqa: BLE001 - a broken log sink must not stop the sync
            pass


def describe(report: SyncReport) -> str:
    """One line for a log: what a sync did."""
    what = {"up_to_date": "up to date", "pushed": "pushed", "fast_forward": "fast-forward",
            "merge": "merged"}.get(report.action, report.action)
    parts = [what]
    if report.arrived:
        parts.append(f"{report.arrived} commit(s) arrived, {len(report.changed)} file(s) changed")
    if report.action != "pushed" and report.pushed:
        parts.append("pushed")
    if report.conflicts:
        parts.append(f"{len(report.conflicts)} conflict copy(ies)")
    return ", ".join(parts)


def choose_settings(config: VaultConfig, remote: str | None = None,
                    interval: float | None = None) -> tuple[str | None, float]:
    """The (remote, interval) a process syncs with: a given ``remote`` (a flag; ``off``
    or ``none`` turns the sync off) or ``interval`` wins over ``sync:`` in the config.
    (None, ...) means no background sync."""
    if remote is not None:
        try:
            chosen = remote_setting(remote, "--sync")
        except InvalidMetadata:
            raise InvalidInput(f"--sync: invalid remote name {remote!r}",
                               hint="Name a configured remote (gitmem remote list), or off.") from None
    else:
        chosen = config.sync.remote
    if interval is not None and chosen is None and remote is None:
        raise InvalidInput("--sync-interval needs a remote to sync with",
                           hint="Add --sync REMOTE, or set sync: {remote: origin} in .gitmem.yaml.")
    return chosen, float(interval if interval is not None else config.sync.interval)


def start_background_sync(syncer: Syncer, config: VaultConfig, *, remote: str | None = None,
                          interval: float | None = None, author: str | Identity | None = None,
                          log: LogSink | None = None, quiet: bool = False) -> BackgroundSync | None:
    """Start the background sync that the flags (``remote``, ``interval``; None: not
    given) or ``sync:`` in the config ask for; None when neither does.

    A remote named by a flag must be configured (``remote_not_found`` otherwise); one
    named only by the config file (which travels with sync) and not configured in
    this clone is reported on ``log`` and left off."""
    chosen, seconds = choose_settings(config, remote, interval)
    if chosen is None:
        return None
    background = BackgroundSync(syncer, chosen, seconds, author=author, log=log, quiet=quiet)
    try:
        return background.start()
    except NotFound as exc:
        if remote is not None:
            raise
        (log or _stderr)(f"sync: {exc.message} (sync.remote in .gitmem.yaml); background sync is off. "
                         f"{exc.hint or ''}".rstrip())
        return None


def _stderr(line: str) -> None:
    print(f"gitmem: {line}", file=sys.stderr, flush=True)
