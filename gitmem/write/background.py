"""The work a write leaves for a quiet moment, on one timer per open vault.

Each commit (re)starts the timer (:meth:`BackgroundWork.schedule`); a quarter of a
second without a new write, the timer thread takes the vault lock and:

1. writes the ``.git/index`` entries left pending (each write brings its own
   entries into ``.git/index`` before it returns; only a failed rename of
   ``index.lock`` leaves some), and repairs those another process left
   (:class:`gitmem.store.git_index.GitIndex`);
2. merges the search index's small segments, one merge per hold of the vault lock;
3. packs loose git objects, in a separate process and outside the vault lock
   (:mod:`gitmem.store.housekeeping`).

While git holds ``.git/index.lock`` step 1 is retried, first after 0.05 s and then
twice as long each time up to 0.25 s apart, for a minute; past that ``.git/index`` stays
marked (``index-dirty``) for the next write or the next process to repair.  A write
that comes in meanwhile replaces the timer, so a busy writer never waits for this.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dulwich.file import FileLocked

from ..errors import GitmemError

if TYPE_CHECKING:  # pragma: no cover
    from ..search.service import SearchService
    from ..store.storage import Storage

__all__ = ["BackgroundWork", "IDLE_DELAY"]

_log = logging.getLogger(__name__)

# What a quiet moment's work can meet and leave for the next one: another process holding
# the vault lock past its timeout, git holding ``index.lock``, a full or failing disk, the
# vault closing meanwhile.  Anything else is a defect and is logged with its traceback
# (it is still not raised: the timer thread has no caller to raise to).
_EXPECTED = (GitmemError, FileLocked, OSError)

# Seconds of quiet before the idle work.
IDLE_DELAY = 0.25
# While git holds .git/index.lock (an IDE polling `git status`), the .git/index update
# is retried: first after 0.05 s, doubling up to 0.25 s apart (git holds the lock for
# milliseconds, so frequent tries get through), for 60 s.
GIT_INDEX_RETRY_FIRST = 0.05
GIT_INDEX_RETRY_MAX = 0.25
GIT_INDEX_RETRY_FOR = 60.0
# Seconds the quiet-moment work waits for the vault lock another process holds.
BUSY_WAIT = 2.0


class _Busy(Exception):
    """The vault lock stayed busy for :data:`BUSY_WAIT`: the work waits for a later moment."""


class BackgroundWork:
    """The idle-time timer of one open vault (module docstring)."""

    def __init__(self, store: Storage, searcher: SearchService) -> None:
        self.store = store
        self.searcher = searcher
        self._timer: threading.Timer | None = None
        # Set when the vault closes: a timer that fires afterwards does nothing.
        self.closed = False

    def schedule(self, delay: float = IDLE_DELAY, *, retry: float = 0.0,
                 deadline: float | None = None) -> None:
        """(Re)start the timer (lock held, or from the timer itself).

        ``retry`` is the wait before the next retry should this run's ``.git/index``
        update fail, and ``deadline`` when retries stop (both set by :meth:`_run`)."""
        if self._timer:
            self._timer.cancel()
        if deadline is None:
            deadline = time.monotonic() + GIT_INDEX_RETRY_FOR
        timer = threading.Timer(delay, self._run,
                                kwargs={"retry": retry or GIT_INDEX_RETRY_FIRST, "deadline": deadline})
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _is_current(self) -> bool:
        """True in the thread of the latest timer (a write since has not replaced it)."""
        return self._timer is threading.current_thread()

    def _merge_search_segments(self) -> None:
        """Merge the search index's small segments (timer thread), one merge per hold of
        the vault lock, so a writer never waits for more than one; stops as soon as a
        write scheduled a newer timer (it merges after that write instead)."""
        search_index = self.searcher.open_index
        if search_index is None:
            return
        more = True
        while more:
            with self.store.lock.try_hold(BUSY_WAIT) as held:
                if not held or self.closed or not self._is_current():
                    return   # busy: the next quiet moment merges
                more = search_index.merge_small(rounds=1)

    def _quietly(self, what: str, job: Callable[[], object]) -> None:
        """Run one step of the idle work: a condition the next idle moment can outlast
        (:data:`_EXPECTED`) passes quietly; anything else is logged with its traceback."""
        try:
            job()
        except _EXPECTED:
            pass
        except Exception:  # noqa: BLE001 - a timer thread has no caller: log loudly
            _log.exception("gitmem: %s in the background failed", what)

    def _run(self, retry: float = GIT_INDEX_RETRY_FIRST, deadline: float = 0.0) -> None:
        """The timer's body: update ``.git/index``; while git holds ``index.lock``, try
        again (``retry`` seconds later, doubling up to :data:`GIT_INDEX_RETRY_MAX`) until
        ``deadline``.  Past it, the ``index-dirty`` marker stays for the next write or
        the next process.  Then the search segments and packing (module docstring)."""
        if self.closed:
            return
        git = self.store.git
        done = False
        try:
            # Waiting only briefly: while this thread waits for another process's lock, a
            # write in this process would wait behind it.  Busy: retried below, or left
            # to the next quiet moment (.git/index stays marked meanwhile).
            with self.store.lock.try_hold(BUSY_WAIT) as held:
                if not held:
                    raise _Busy
                # A write made while this timer waited for the lock scheduled a newer
                # timer: leave the work to it, so a busy writer is not slowed by merges.
                if self._timer is not None and not self._is_current():
                    return
                done = git.flush_index()
                if done and git.index_dirty():
                    try:  # another process gave up on its entries (or died): repair them too
                        git.repair_index()
                    except FileLocked:
                        done = False
                if not done and not self.closed and time.monotonic() + retry <= deadline:
                    self.schedule(retry, retry=min(retry * 2, GIT_INDEX_RETRY_MAX), deadline=deadline)
                    return
        except (_Busy, *_EXPECTED):
            pass  # retried below, or by the next write's timer
        except Exception:  # noqa: BLE001 - a timer thread has no caller: log loudly, retry below
            _log.exception("gitmem: updating .git/index in the background failed")
        if done and not self.closed:
            self._quietly("merging the search index's small segments", self._merge_search_segments)
            # packing runs outside the vault lock, in its own process: writers go on meanwhile
            self._quietly("packing git objects", lambda: git.housekeep(separate_process=True))
        if not done and not self.closed and time.monotonic() + retry <= deadline:
            # (the lock was not had: a write racing this check at worst has its own
            # timer replaced by this one, which flushes its entries too)
            if self._is_current():
                self.schedule(retry, retry=min(retry * 2, GIT_INDEX_RETRY_MAX), deadline=deadline)

    def flush(self, timeout: float) -> bool:
        """Bring ``.git/index`` in line with HEAD now (the timer's first step, without
        waiting for it), retrying for up to ``timeout`` s while git holds ``index.lock``;
        True once nothing is pending."""
        if self._timer:
            self._timer.cancel()
        return self.flush_retrying(timeout)

    def flush_retrying(self, timeout: float) -> bool:
        """Flush ``.git/index``, retrying with backoff for up to ``timeout`` seconds;
        True once nothing is pending.  The vault lock is taken per attempt only."""
        git = self.store.git
        deadline = time.monotonic() + timeout
        delay = GIT_INDEX_RETRY_FIRST
        while True:
            # Never longer than ``timeout`` for the vault lock either: a busy writer in
            # another process leaves the work to the next writer (.git/index stays marked).
            with self.store.lock.try_hold(max(deadline - time.monotonic(), 0.001)) as held:
                if not held:
                    return False
                if git.flush_index():
                    if not git.index_dirty():
                        return True
                    try:  # left dirty by a process that gave up (or an open that met the lock)
                        git.repair_index()
                        return True
                    except FileLocked:
                        pass
            if time.monotonic() + delay > deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, GIT_INDEX_RETRY_MAX)
