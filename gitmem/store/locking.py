"""The vault lock: one writer at a time, across threads and processes.

Every git write (and every index write) in every process happens while
holding this lock.  It is an OS advisory lock (``flock`` on POSIX, via
``filelock``) on ``.git/gitmem/lock``: the kernel drops it when its holder
dies, so a process killed with SIGKILL never leaves a stale lock behind.
Inside one process a re-entrant thread lock serialises threads first, so one
:class:`~gitmem.vault.Vault` object can be shared by threads.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from filelock import FileLock, Timeout

from ..errors import LockTimeout, VaultClosed

__all__ = ["VaultLock", "try_flock"]


class VaultLock:
    """Re-entrant inter-process lock for one vault.

    ``on_acquire`` runs each time this process takes the file lock (not on
    re-entry): the vault uses it to finish a write whose process died while
    holding the lock (:mod:`gitmem.store.recovery`).  Once :meth:`close` is called
    every later :meth:`hold` raises :class:`~gitmem.errors.VaultClosed`.
    """

    def __init__(self, path: Path, timeout: float = 30.0,
                 on_acquire: Callable[[], None] | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.timeout = timeout
        self._thread_lock = threading.RLock()
        # thread_local=False: the in-process RLock already serialises threads,
        # and the file lock's re-entrancy count must be shared with them.
        # preserve_lock_file: deleting a flock'ed file on release lets two
        # processes lock two different inodes at once.  fallback_to_soft=False:
        # a soft (existence) lock would go stale when its holder is killed.
        self._file_lock = FileLock(str(path), thread_local=False, preserve_lock_file=True,
                                   fallback_to_soft=False)
        self._depth = 0
        self._on_acquire = on_acquire
        self._closed = False

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the lock for the duration of a ``with`` block."""
        if not self._thread_lock.acquire(timeout=self.timeout):
            raise LockTimeout(f"timed out after {self.timeout:.0f}s waiting for another thread")
        try:
            if self._closed and self._depth == 0:
                raise VaultClosed("this Vault object is closed")
            if self._depth == 0:
                try:
                    self._file_lock.acquire(timeout=self.timeout, poll_interval=0.002)
                except Timeout:
                    raise LockTimeout(
                        f"another process has held the vault lock for over {self.timeout:.0f}s "
                        f"({self.path})") from None
            self._depth += 1
            try:
                if self._depth == 1 and self._on_acquire is not None:
                    self._on_acquire()
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._file_lock.release()
        finally:
            self._thread_lock.release()

    @contextmanager
    def threads(self) -> Iterator[None]:
        """Exclude the other threads of this process only (not other processes).

        For work that must not interleave with a write in another thread, but
        needs no inter-process lock: a read that refreshes the catalog cache
        shares one SQLite connection with the writers, whose transactions it
        must not enter (``cannot start a transaction within a transaction``).
        """
        if not self._thread_lock.acquire(timeout=self.timeout):
            raise LockTimeout(f"timed out after {self.timeout:.0f}s waiting for another thread")
        try:
            yield
        finally:
            self._thread_lock.release()

    def close(self) -> None:
        """Refuse every later :meth:`hold` (call while holding it, as the last act)."""
        self._closed = True

    @property
    def held(self) -> bool:
        """True while this process (any thread) holds the lock."""
        return self._depth > 0


@contextmanager
def try_flock(path: Path, timeout: float) -> Iterator[bool]:
    """``flock`` the file ``path`` for a ``with`` block, waiting at most ``timeout`` seconds.

    Yields True when taken, False when another holder kept it past ``timeout``
    (the block then runs without it and must do nothing that needs it).  Each
    call opens its own file descriptor, so this excludes the other threads of
    this process too, including one holding the same file through a
    :class:`VaultLock`; a thread that already holds such a lock must not call it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path), thread_local=False, preserve_lock_file=True, fallback_to_soft=False)
    try:
        lock.acquire(timeout=timeout, poll_interval=0.002)
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()
