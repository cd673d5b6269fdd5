"""Long-lived processes follow outside edits: :class:`Follower`.

A ``gitmem mcp`` server (or any Vault kept open for a long time) answers from
its search index and catalog.  People change the files behind its back
(Obsidian, vim, ``git pull``, ``git checkout``), so without help the index goes
stale until the process restarts.  A :class:`Follower` keeps them current, in
one of three modes:

``"watch"`` (the default)
    An embedded :class:`~gitmem.outside.watcher.Watcher` (inotify through watchdog)
    re-indexes each changed file ~0.35 s after it is saved, in a background
    thread.  Idle it costs nothing but one full rescan every
    ``rescan_interval`` seconds (a stat per file, like ``git status``).  It
    only indexes: it commits outside edits only when ``.gitmem.yaml`` says
    ``auto_commit: true`` explicitly (see :func:`follow_auto_commit`).
``"poll"``
    No thread: :meth:`Follower.before_call` (run before every tool call)
    re-checks the whole vault (a stat per file) when the last check is older
    than ``poll_interval`` seconds (with auto-commit it commits what it found,
    and every ``rescan_interval`` seconds whatever differs from HEAD).  Used
    when the watcher cannot start (the inotify limits are exhausted); costs a
    few ms per call at 1k memories, ~0.1 s at 10k.
``"off"``
    Nothing is followed (the old behaviour: a restart, ``gitmem watch`` or the
    git hooks bring the index up to date).

Use::

    from gitmem import Vault
    from gitmem.outside.follow import follow

    with Vault.open("my-vault") as vault, follow(vault):
        ...   # vault.search() sees edits made in the folder meanwhile

A Follower never raises out of :meth:`before_call` and never stops the
process: problems are logged (stderr by default) and the next rescan catches up.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, InvalidMetadata, StorageError
from ..search.vectors import EmbedWorker
from .watcher import Watcher, auto_commit_setting

if TYPE_CHECKING:  # pragma: no cover
    from ..vault import Vault

__all__ = ["Follower", "follow", "follow_auto_commit", "MODES"]

MODES = ("watch", "poll", "off")

LogSink = Callable[[str], None]


def follow_auto_commit(vault: Vault) -> bool:
    """Whether a following process also commits outside edits.

    Only when ``.gitmem.yaml`` sets ``auto_commit: true`` explicitly: unlike
    ``gitmem watch`` (which a person starts to get commits, on when unset), a
    server follows edits to answer searches and commits nothing by default.
    """
    if "auto_commit" not in vault.config.extra:
        return False
    return auto_commit_setting(vault)


class Follower:
    """Keep ``vault``'s search index and catalog current with its folder.

    ``mode``: ``"watch"``, ``"poll"`` or ``"off"`` (module docstring).
    ``auto_commit``: None follows :func:`follow_auto_commit`.  ``debounce``,
    ``rescan_interval``: as for :class:`~gitmem.outside.watcher.Watcher`.
    ``poll_interval``: seconds between whole-vault checks in poll mode.
    ``log``: one line per problem (default stderr, prefixed ``gitmem: ``).

    :meth:`start` (``background=True`` returns at once and starts the watcher
    in a thread), :meth:`before_call` before each read or search,
    :meth:`stop` at the end (or a ``with`` block).  The vault stays open.
    """

    def __init__(self, vault: Vault, mode: str = "watch", *, auto_commit: bool | None = None,
                 debounce: float = 0.3, rescan_interval: float = 60.0, poll_interval: float = 1.0,
                 log: LogSink | None = None) -> None:
        if mode not in MODES:
            raise InvalidInput(f"follow mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.vault = vault
        self.requested = mode
        self.mode = "off" if mode == "off" else "starting"
        self._sink: LogSink = log or _stderr
        if auto_commit is None:
            try:
                auto_commit = follow_auto_commit(vault)
            except InvalidMetadata as exc:   # a typo in .gitmem.yaml must not stop a server
                self._log(f"{exc.message}; outside edits are indexed, not committed")
                auto_commit = False
        self.auto_commit = bool(auto_commit)
        self.debounce = debounce
        self.rescan_interval = rescan_interval
        self.poll_interval = float(poll_interval)
        self.watcher: Watcher | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._last_poll = 0.0
        self._last_sweep = time.monotonic()
        self._stopped = False
        self.embedder: EmbedWorker | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self, *, background: bool = False) -> Follower:
        """Begin following.  ``background``: start the watcher (which first
        rescans the vault and opens the search index) in a thread and return
        at once, so a server can answer its first request meanwhile.  With the
        ``embed`` extra installed, new memories' vectors are also computed in a
        background thread (:class:`~gitmem.search.vectors.EmbedWorker`)."""
        if self.requested == "off":
            return self
        self.embedder = self.vault.start_embedding(self._log)
        if self.requested == "poll":
            self.mode = "poll"
            return self
        if background:
            self._thread = threading.Thread(target=self._start_watcher, name="gitmem-follow-start",
                                            daemon=True)
            self._thread.start()
        else:
            self._start_watcher()
        return self

    def _start_watcher(self) -> None:
        try:
            watcher = Watcher(self.vault, auto_commit=self.auto_commit, debounce=self.debounce,
                              rescan_interval=self.rescan_interval, log=self._log, quiet=True)
        except Exception as exc:  # noqa: BLE001 - a bad setting must not stop the server
            self._fall_back(exc)
            return
        with self._lock:
            if self._stopped:
                return
            self.watcher = watcher
        try:
            watcher.start()
        except StorageError as exc:   # no inotify watch left: check before each call instead
            self._fall_back(exc)
            return
        except Exception as exc:  # noqa: BLE001
            self._fall_back(exc)
            return
        self.mode = "watch"

    def _fall_back(self, exc: BaseException) -> None:
        with self._lock:
            self.watcher = None
        self.mode = "poll"
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        hint = getattr(exc, "hint", None)
        self._log(f"cannot watch the vault for outside edits ({message}{'; ' + hint if hint else ''}); "
                  f"checking the files before each call instead")

    def stop(self) -> None:
        """Stop following (indexing what is pending).  Idempotent."""
        with self._lock:
            self._stopped = True
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            watcher, self.watcher = self.watcher, None
        if watcher is not None:
            watcher.stop()
        if self.embedder is not None:
            self.embedder.stop()
            self.embedder = None
        if self.mode != "off":
            self.mode = "stopped"

    def __enter__(self) -> Follower:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()

    # ---------------------------------------------------------------- calls
    def before_call(self) -> None:
        """Call before answering a read or search: in poll mode, bring the
        index up to date when the last check is older than ``poll_interval``.
        Never raises."""
        if self.mode != "poll":
            return
        now = time.monotonic()
        if now - self._last_poll < self.poll_interval:
            return
        try:
            # Never waits for the vault lock: while another process holds it, the
            # read is answered as the index is, and the next call checks again.
            report = self.vault.refresh(None, wait=False)
            if report.busy:
                return
            # Another process following the vault may have indexed an edit first (this
            # refresh then finds nothing): every rescan_interval seconds the commit
            # compares the whole vault with HEAD anyway.
            sweep = bool(self.rescan_interval) and now - self._last_sweep >= self.rescan_interval
            if self.auto_commit and (report.indexed or report.removed or sweep):
                self._last_sweep = now
                self.vault.commit_outside_edits(None)
        except Exception as exc:  # noqa: BLE001 - the call itself goes on
            self._log(f"error: checking for outside edits failed: {type(exc).__name__}: {exc}")
        self._last_poll = time.monotonic()

    def _log(self, line: str) -> None:
        try:
            self._sink(line)
        except Exception:  # noqa: BLE001 - a broken sink must not stop anything
            pass


def follow(vault: Vault, mode: str = "watch", **kwargs: Any) -> Follower:
    """A :class:`Follower` for ``vault`` (use it in a ``with`` block, or call ``start()``)."""
    return Follower(vault, mode, **kwargs)


def _stderr(line: str) -> None:
    print(f"gitmem: {line}", file=sys.stderr, flush=True)
