"""``gitmem watch``: keep the search index (and git history) in step with outside edits.

Obsidian, vim, VS Code and scripts change memory files behind gitmem's back.
A :class:`Watcher` listens to file-system events (watchdog, inotify on Linux)
and, per changed file:

1. **debounces** it (default 0.3 s of quiet for that path), then calls
   :meth:`Vault.refresh` for the batch of ready paths, so the change is
   searchable well under a second after the save;
2. **auto-commits** (unless turned off) once the whole vault has been quiet
   for ``commit_delay`` seconds (default 2): one
   :meth:`Vault.commit_outside_edits` call for every path refreshed since the
   last commit, authored by the vault's ``user``.  A burst of saves in several
   files becomes one commit; a file saved every second for a long time is
   still committed at least every ``max_commit_wait`` seconds.

What it watches: the vault root (not recursively: tier folders appearing or
vanishing) and each tier folder recursively.  ``.git/`` and other top-level
folders are not watched at all (one inotify watch per folder is the cost).
Ignored: hidden path parts (``.obsidian/``, ``.trash/``, ``.#note.md`` locks,
``.note.md.swp``, gitmem's ``.*.gitmem-tmp-*`` files) and anything that is
not a ``.md`` file under a tier folder (``note.md~``, vim's ``4913`` probe).

Editors save atomically (``tmp -> note.md`` arrives as a *move*), so both
sides of every move are refreshed: the destination as a change, the source as
a removal.  A folder moved in is walked; a folder deleted or moved out makes
the next refresh cover the whole vault (cheap: a stat per file).  Files gitmem
itself wrote (from any process) produce events too, but refresh and commit
compare content hashes, so they cost a few stats and never an extra commit.

What a commit covers comes from the events, not from what this process's
refresh changed: another process following the same vault (a ``gitmem mcp``
server) shares the catalog and may index a change first.  The paths of the
events go into the commit, and so do the folders that appeared or vanished
(:meth:`Vault.commit_outside_edits` compares everything HEAD and the disk hold
under them, and commits both sides of a move together, as renames).

Lost events are repaired by full rescans: at start, every ``rescan_interval``
seconds, and right after an inotify queue overflow.  watchdog 7.1 does not
deliver overflows to event handlers; it rebuilds its watches and logs
``"Inotify queue overflowed ..."`` on the ``watchdog.observers.inotify_c``
logger, so the watcher listens for that log record.

The watcher never writes a memory file and never stops because one event
failed: errors are logged and the next rescan catches up.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from .. import safefs
from ..errors import GitmemError, InvalidInput, InvalidMetadata, LockTimeout, StorageError
from ..memory.paths import is_hidden_part

if TYPE_CHECKING:  # pragma: no cover
    from watchdog.events import FileSystemEvent, FileSystemEventHandler
    from watchdog.observers.api import BaseObserver, ObservedWatch

    from ..search.service import RefreshReport
    from ..vault import Vault

__all__ = ["Watcher", "auto_commit_setting"]

# watchdog 7.1 reports a kernel queue overflow only as a log record on this logger.
_OVERFLOW_LOGGER = "watchdog.observers.inotify_c"
_RETRY_DELAY = 5.0        # seconds before a failed refresh is retried by a rescan
_COMMIT_ATTEMPTS = 3      # failed commits of one batch before it is left to the next rescan

# Files git keeps while an operation is half done: no auto-commit then.
_GIT_BUSY = (("MERGE_HEAD", "a merge"), ("rebase-merge", "a rebase"), ("rebase-apply", "a rebase"),
             ("CHERRY_PICK_HEAD", "a cherry-pick"), ("REVERT_HEAD", "a revert"),
             ("BISECT_LOG", "a bisect"), ("index.lock", "a git command"))

LogSink = Callable[[str], None]


def auto_commit_setting(vault: Vault) -> bool:
    """The vault's ``auto_commit`` setting from ``.gitmem.yaml`` (default true)."""
    value = vault.config.extra.get("auto_commit", True)
    if not isinstance(value, bool):
        raise InvalidMetadata(f".gitmem.yaml: auto_commit must be true or false, got {value!r}")
    return value


@dataclass
class _Work:
    """What the worker thread does in one round (taken under the lock)."""

    watch_tiers: set[str] = field(default_factory=set)
    walk: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    full: bool = False
    rescan: bool = False
    commit: set[str] | None = None   # None: no commit this round
    commit_all: bool = False
    final: bool = False              # the watcher is stopping: no retries later

    def __bool__(self) -> bool:
        return bool(self.watch_tiers or self.walk or self.paths or self.full or self.rescan
                    or self.commit is not None)


class _OverflowListener(logging.Handler):
    """Turns watchdog's "queue overflowed" log record into an immediate rescan."""

    def __init__(self, watcher: Watcher) -> None:
        super().__init__(level=logging.WARNING)
        self.watcher = watcher

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if "overflow" in record.getMessage().lower():
                self.watcher.request_rescan("inotify queue overflowed; events were lost")
        except Exception:  # noqa: BLE001 - a logging handler must never raise
            pass


class Watcher:
    """Watch a vault and keep its index (and, by default, git history) current.

    ``auto_commit``: None reads ``auto_commit`` from ``.gitmem.yaml`` (default
    true).  ``debounce``: seconds a path must be quiet before it is re-indexed.
    ``commit_delay``: seconds the vault must be quiet before the batch is
    committed.  ``rescan_interval``: seconds between full rescans (0: only at
    start and after an overflow).  ``log`` receives one line per message
    (default: stderr); ``quiet`` keeps only problems and errors.

    Use :meth:`start` / :meth:`stop` (or a ``with`` block), or
    :meth:`run_forever` in a command-line process (stops on SIGINT/SIGTERM).
    The vault stays open; whoever opened it closes it.
    """

    def __init__(self, vault: Vault, *, auto_commit: bool | None = None, debounce: float = 0.3,
                 commit_delay: float = 2.0, rescan_interval: float = 60.0,
                 max_commit_wait: float = 60.0, log: LogSink | None = None, quiet: bool = False) -> None:
        for name, value in (("debounce", debounce), ("commit_delay", commit_delay),
                            ("rescan_interval", rescan_interval), ("max_commit_wait", max_commit_wait)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
                raise InvalidInput(f"{name} must be a number of seconds >= 0, got {value!r}")
        self.vault = vault
        self.root = str(vault.root)
        # The folders watched one by one: the tier folders and, in an adopted vault (notes
        # outside the tier folders are memories), every other folder at the root.
        self.adopted = vault.config.outside_notes is not None
        self.tiers = tuple(vault.services.reader.top_folders())
        self.auto_commit = auto_commit_setting(vault) if auto_commit is None else bool(auto_commit)
        self.debounce = float(debounce)
        self.commit_delay = float(commit_delay)
        self.rescan_interval = float(rescan_interval)
        self.max_commit_wait = max(float(max_commit_wait), self.commit_delay)
        self.quiet = quiet
        self._sink: LogSink = log or _stderr
        self.commits: list[str] = []        # shas of the commits this watcher made
        self.errors = 0                     # errors logged (for callers and tests)

        self._cond = threading.Condition()
        self._pending: dict[str, float] = {}     # path -> time of its last event
        self._full_at: float | None = None       # a folder vanished: refresh everything
        self._walk: list[str] = []               # folders that appeared: find their files
        self._tiers_changed: set[str] = set()    # tier folders to (re)watch
        self._batch: set[str] = set()            # refreshed, not yet committed
        self._batch_all = False                  # the next commit covers the whole vault
        self._batch_since: float | None = None
        self._last_event = 0.0
        self._commit_not_before = 0.0
        self._commit_failures = 0
        self._postponed = False
        self._rescan_at = math.inf
        self._busy = False
        self._stopping = False
        self._started = False
        self._observer: BaseObserver | None = None
        self._tier_watches: dict[str, ObservedWatch] = {}
        self._worker: threading.Thread | None = None
        self._overflow = _OverflowListener(self)

    # ------------------------------------------------------------ lifecycle
    def start(self) -> Watcher:
        """Start watching; returns once the vault has been rescanned (and
        outside edits made while nothing watched are committed)."""
        if self._started:
            raise InvalidInput("this watcher was already started")
        self._started = True
        _quiet_watchdog_races()
        from watchdog.observers import Observer
        self._observer = Observer()
        logging.getLogger(_OVERFLOW_LOGGER).addHandler(self._overflow)
        try:
            self._observer.schedule(_events_to(self), self.root, recursive=False,
                                    event_filter=_tier_filter() if self.adopted else _root_filter())
            for tier in self.tiers:
                self._watch_tier(tier)
            self._observer.start()
        except BaseException as exc:
            self._shutdown_observer()
            logging.getLogger(_OVERFLOW_LOGGER).removeHandler(self._overflow)
            if isinstance(exc, OSError):
                raise StorageError(
                    f"cannot watch {self.root}: {exc.strerror or exc}",
                    hint="On Linux, raise the inotify limits, e.g. sudo sysctl "
                         "fs.inotify.max_user_watches=524288 fs.inotify.max_user_instances=1024") from exc
            raise
        # Events that arrive while this scan runs are queued and handled after it.
        report = self._refresh(None, what="start")
        if self.auto_commit:
            if report is not None:
                self._commit(None)
            else:
                with self._cond:
                    self._batch_all = True   # commit whatever differs once a refresh works
                    self._batch_since = time.monotonic()
        with self._cond:
            if self.rescan_interval:
                self._rescan_at = min(self._rescan_at, time.monotonic() + self.rescan_interval)
        self._worker = threading.Thread(target=self._run, name="gitmem-watcher", daemon=True)
        self._worker.start()
        return self

    def stop(self) -> None:
        """Stop watching: handle every pending change now, commit it (when
        auto-commit is on), and stop the threads.  Idempotent."""
        if not self._started or self._stopping:
            return
        self._shutdown_observer()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._worker is not None:
            self._worker.join()
        logging.getLogger(_OVERFLOW_LOGGER).removeHandler(self._overflow)

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()

    def run_forever(self, on_ready: Callable[[], None] | None = None) -> None:
        """Start (unless started), run until SIGINT or SIGTERM, then stop cleanly.

        Signal handlers are installed only when called from the main thread.
        ``on_ready`` runs once watching has begun (e.g. to print a banner).
        """
        stop = threading.Event()
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, lambda *_: stop.set())
        try:
            if not self._started:
                self.start()
            if on_ready is not None:
                on_ready()
            while not stop.wait(0.5):
                if self._worker is not None and not self._worker.is_alive():
                    break  # pragma: no cover - the worker never exits on its own
        finally:
            self.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    @property
    def idle(self) -> bool:
        """True when no change is waiting to be indexed or committed."""
        with self._cond:
            return not (self._busy or self._pending or self._full_at is not None or self._walk
                        or self._tiers_changed or self._batch or self._batch_all)

    def request_rescan(self, reason: str | None = None) -> None:
        """Rescan the whole vault as soon as possible (thread-safe); with auto-commit,
        the next commit then compares the whole vault with HEAD, since events were lost
        and another process following the vault may have indexed those changes already."""
        if reason:
            self._log(reason, level="warn")
        with self._cond:
            self._rescan_at = 0.0
            if self.auto_commit:
                self._batch_all = True
                self._batch_since = self._batch_since or time.monotonic()
            self._cond.notify_all()

    # --------------------------------------------------------------- events
    def _rel(self, path: bytes | str) -> str | None:
        text = os.fsdecode(path) if path else ""
        if not text.startswith(self.root + os.sep):
            return None
        rel = text[len(self.root) + 1:]
        return rel.replace(os.sep, "/") if os.sep != "/" else rel

    def _in_tier(self, rel: str) -> bool:
        parts = rel.split("/")
        return (parts[0] in self.tiers or self.adopted) and not any(is_hidden_part(p) for p in parts)

    def on_event(self, event: FileSystemEvent) -> None:
        """Record one watchdog event (called on the observer thread; never raises)."""
        try:
            self._note(event)
        except Exception as exc:  # noqa: BLE001 - one bad event must not stop the watcher
            self._log(f"error: {type(exc).__name__}: {exc} (while handling {event.event_type} "
                      f"{os.fsdecode(event.src_path)})", level="error")

    def _note(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        src = self._rel(event.src_path)
        dest = self._rel(event.dest_path) if kind == "moved" else None
        now = time.monotonic()
        relevant = False
        with self._cond:
            if event.is_directory:
                gone = src if kind in ("deleted", "moved") else None
                came = dest if kind == "moved" else (src if kind == "created" else None)
                if gone is not None and self._in_tier(gone):
                    self._full_at = now
                    relevant = True
                    if "/" not in gone:
                        self._tiers_changed.add(gone)
                if came is not None and self._in_tier(came):
                    relevant = True
                    if "/" not in came:
                        self._tiers_changed.add(came)
                    else:
                        self._walk.append(came)
                folders = [f for f in (gone, came) if f is not None and self._in_tier(f)]
                if folders and self.auto_commit:
                    # The commit covers the folders themselves (both sides of a move):
                    # what HEAD holds under a folder that vanished is deleted whatever
                    # another process following the vault (`gitmem mcp`) indexed meanwhile.
                    self._batch.update(folders)
                    self._batch_since = self._batch_since or now
            else:
                for rel in (src, dest):
                    if rel is not None and self.vault.services.store.is_memory_path(rel):
                        self._pending[rel] = now
                        relevant = True
            if relevant:
                self._last_event = now
                self._cond.notify_all()

    # --------------------------------------------------------------- worker
    def _next_wake(self, now: float) -> float:
        times = [self._rescan_at]
        if self._pending:
            times.append(min(self._pending.values()) + self.debounce)
        if self._full_at is not None:
            times.append(self._full_at + self.debounce)
        if self._walk or self._tiers_changed:
            times.append(now)
        if self.auto_commit and (self._batch or self._batch_all):
            if self._pending or self._full_at is not None:
                quiet_at = math.inf
            else:
                quiet_at = self._last_event + self.commit_delay
            capped = (self._batch_since or now) + self.max_commit_wait
            times.append(max(min(quiet_at, capped), self._commit_not_before))
        return min(times)

    def _take(self, now: float, final: bool) -> _Work:
        work = _Work()
        work.watch_tiers, self._tiers_changed = self._tiers_changed, set()
        work.walk, self._walk = self._walk, []
        ready = [p for p, t in self._pending.items() if final or t + self.debounce <= now]
        for path in ready:
            del self._pending[path]
        work.paths = sorted(ready)
        if self._full_at is not None and (final or self._full_at + self.debounce <= now):
            work.full, self._full_at = True, None
        if now >= self._rescan_at:
            work.rescan = True
            self._rescan_at = now + self.rescan_interval if self.rescan_interval else math.inf
        if (not work and self.auto_commit and (self._batch or self._batch_all)
                and (final or now >= self._commit_not_before)):
            quiet = (not self._pending and self._full_at is None
                     and now - self._last_event >= self.commit_delay)
            overdue = self._batch_since is not None and now - self._batch_since >= self.max_commit_wait
            if final or quiet or overdue:
                work.commit, work.commit_all, work.final = set(self._batch), self._batch_all, final
                self._batch, self._batch_all, self._batch_since = set(), False, None
        self._busy = bool(work)
        return work

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    final = self._stopping
                    work = self._take(now, final)
                    if work or final:
                        break
                    self._cond.wait(timeout=max(0.0, min(self._next_wake(now) - now, 3600.0)))
            if not work:
                return  # stopping, and nothing is left to index or commit
            try:
                self._do(work)
            except Exception as exc:  # noqa: BLE001 - keep watching whatever happened
                self._log(f"error: {type(exc).__name__}: {exc}", level="error")
            finally:
                with self._cond:
                    self._busy = False

    def _do(self, work: _Work) -> None:
        for tier in sorted(work.watch_tiers):
            self._watch_tier(tier)
            work.walk.append(tier)
        if work.walk:
            found = self._walk_memory_files(work.walk)
            now = time.monotonic()
            with self._cond:
                for rel in found:
                    self._pending.setdefault(rel, now)
        if work.paths:
            self._refresh(work.paths)
        if work.full or work.rescan:
            self._refresh(None, what="rescan" if work.rescan and not work.full else None)
        if work.commit is not None:
            self._commit(None if work.commit_all else sorted(work.commit), final=work.final)

    # -------------------------------------------------------- vault calls
    def _refresh(self, paths: list[str] | None, what: str | None = None) -> RefreshReport | None:
        try:
            try:
                report = self.vault.refresh(paths)
            except GitmemError as exc:
                if isinstance(exc, LockTimeout):
                    raise
                report = self.vault.refresh(paths)  # once more: the index may have been mid-change
        except Exception as exc:  # noqa: BLE001 - log, retry with a rescan
            self._log(f"error: refresh failed: {_describe(exc)} (retrying in {_RETRY_DELAY:.0f}s)",
                      level="error")
            with self._cond:
                self._rescan_at = min(self._rescan_at, time.monotonic() + _RETRY_DELAY)
                if paths is not None and self.auto_commit:
                    self._batch.update(paths)   # committed once things work again
                    self._batch_since = self._batch_since or time.monotonic()
            return None
        for path in report.indexed:
            self._log(f"indexed {path}")
        for path in report.removed:
            self._log(f"removed {path}")
        for path, problem in sorted(report.problems.items()):
            self._log(f"problem {path}: {problem} (indexed as plain Markdown; file left as it is)",
                      level="warn")
        if what == "rescan" and (report.indexed or report.removed):
            self._log(f"rescan found {len(report.indexed) + len(report.removed)} change(s) "
                      "the file events missed")
        if self.auto_commit and what != "start":
            changed = set(paths or ()) | set(report.indexed) | set(report.removed)
            if what == "rescan":
                # Another follower (a gitmem mcp server) may have indexed a change whose
                # event this watcher missed: its refresh then reports nothing, so what
                # differs from HEAD is asked for (no lock, no file read).
                try:
                    changed |= self.vault.services.pipeline.outside.uncommitted_paths()
                except Exception as exc:  # noqa: BLE001 - the next rescan asks again
                    self._log(f"error: comparing with HEAD failed: {_describe(exc)}", level="error")
            with self._cond:
                if changed:
                    self._batch.update(changed)
                if what == "rescan" and self._commit_failures:
                    self._batch_all = True   # an earlier commit failed: sweep everything
                if (self._batch or self._batch_all) and self._batch_since is None:
                    self._batch_since = time.monotonic()
        return report

    def _git_busy(self) -> str | None:
        """What git operation is under way in the vault, if any.

        Committing in the middle of a merge, rebase or checkout would record
        half-done files (conflict markers) on the user's branch.
        """
        git_dir = self.vault.services.store.git.git_dir
        for name, what in _GIT_BUSY:
            if (git_dir / name).exists():
                if name == "index.lock" and self.vault.services.store.git.index_lock_is_gitmems():
                    continue    # a gitmem write (its commit waits for the vault lock, not git)
                return what
        return None

    def _postpone(self, paths: list[str] | None) -> None:
        with self._cond:
            if paths is None:
                self._batch_all = True
            else:
                self._batch.update(paths)
            self._batch_since = self._batch_since or time.monotonic()
            self._commit_not_before = time.monotonic() + max(self.commit_delay, 1.0)

    def _commit(self, paths: list[str] | None, final: bool = False) -> None:
        busy = self._git_busy()
        if busy is not None:
            if final:
                self._log(f"not committed: {busy} is in progress (the next 'gitmem watch' "
                          "commits the changes)", level="warn")
                return
            if not self._postponed:
                self._log(f"commit postponed: {busy} is in progress", level="warn")
            self._postponed = True
            self._postpone(paths)
            return
        self._postponed = False
        try:
            sha = self.vault.commit_outside_edits(paths)
        except Exception as exc:  # noqa: BLE001 - keep the batch, retry after a pause
            with self._cond:
                self._commit_failures += 1
                retry = self._commit_failures < _COMMIT_ATTEMPTS and not final
            if retry:
                self._postpone(paths)
            later = "will retry" if retry else "left for the next rescan"
            self._log(f"error: commit failed: {_describe(exc)} ({later})", level="error")
            return
        with self._cond:
            self._commit_failures = 0
        for _path, why in sorted(self.vault.outside_refused.items()):
            self._log(f"not committed: {why}", level="warn")
        if sha is None:
            return
        self.commits.append(sha)
        try:
            subject = self.vault.services.store.git.info(sha.encode()).subject
        except Exception:  # noqa: BLE001 - the commit is made; the log line is cosmetic
            subject = ""
        self._log(f"committed {sha[:7]} {subject}".rstrip())

    # ---------------------------------------------------------- observer
    def _watch_tier(self, tier: str) -> None:
        """(Re)start the recursive watch of one tier folder, if it exists."""
        observer = self._observer
        if observer is None:
            return
        old = self._tier_watches.pop(tier, None)
        if old is not None:
            try:
                observer.unschedule(old)
            except Exception:  # noqa: BLE001 - the emitter may have stopped by itself
                pass
        path = os.path.join(self.root, tier)
        if os.path.isdir(path) and not os.path.islink(path):
            self._tier_watches[tier] = observer.schedule(_events_to(self), path, recursive=True,
                                                         event_filter=_tier_filter())

    def _walk_memory_files(self, folders: Iterable[str]) -> set[str]:
        found: set[str] = set()
        for rel_folder in folders:
            for rel, _ in safefs.walk_files(self.vault.root, rel_folder, skip_dir=is_hidden_part):
                if self.vault.services.store.is_memory_path(rel):
                    found.add(rel)
        return found

    def _shutdown_observer(self) -> None:
        observer, self._observer = self._observer, None
        if observer is not None:
            try:
                observer.stop()          # also stops its inotify reader thread
            except KeyError:
                # watchdog's inotify bookkeeping can lose a folder that was removed and
                # made again just before the stop; its threads are daemons and this
                # process is done watching, so the stop must not fail the command.
                pass
            if observer.is_alive():
                observer.join(timeout=5.0)
        self._tier_watches.clear()

    # ---------------------------------------------------------------- log
    def _log(self, message: str, level: str = "info") -> None:
        if level == "error":
            self.errors += 1
        if self.quiet and level == "info":
            return
        try:
            self._sink(message)
        except Exception:  # noqa: BLE001 - a broken log sink must not stop the watcher
            pass


class _Handler:
    """watchdog event handler that forwards to a :class:`Watcher`."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def dispatch(self, event: FileSystemEvent) -> None:
        self.watcher.on_event(event)


def _events_to(watcher: Watcher) -> FileSystemEventHandler:
    """A handler forwarding watchdog's events to ``watcher``.  Typed as watchdog's handler
    class, of which the observer only calls ``dispatch`` (subclassing it would import
    watchdog whenever this module is imported)."""
    return cast("FileSystemEventHandler", _Handler(watcher))


def _tier_filter() -> list[type]:
    from watchdog.events import (
        DirCreatedEvent,
        DirDeletedEvent,
        DirMovedEvent,
        FileCreatedEvent,
        FileDeletedEvent,
        FileModifiedEvent,
        FileMovedEvent,
    )
    return [FileCreatedEvent, FileModifiedEvent, FileDeletedEvent, FileMovedEvent,
            DirCreatedEvent, DirDeletedEvent, DirMovedEvent]


def _root_filter() -> list[type]:
    from watchdog.events import DirCreatedEvent, DirDeletedEvent, DirMovedEvent
    return [DirCreatedEvent, DirDeletedEvent, DirMovedEvent]


def _quiet_watchdog_races() -> None:
    """Silence watchdog's RuntimeWarnings about benign watch races.

    watchdog 7.1 warns "Callback with id ... already exists for watch" when a
    folder tree appears faster than it adds watches (``mkdir -p a/b``, every
    new gitmem bucket folder), from its inotify reader thread.  Under
    ``-W error`` that warning kills the thread and with it every later event,
    so this ignores exactly those messages from watchdog's modules.
    """
    for text in (r"Callback with id .* already exists for watch",
                 r"Callback with id .* does not exist for watch"):
        warnings.filterwarnings("ignore", message=text, category=RuntimeWarning, module=r"watchdog\.")


def _describe(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    hint = getattr(exc, "hint", None)
    return f"{message} ({hint})" if hint else message


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
