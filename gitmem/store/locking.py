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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import LockTimeout, VaultClosed, from_system_error

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
        # Two thread locks.  The gate orders this process's threads that want the file
        # lock (a thread may wait at it for another process); the thread lock is taken
        # only once the file lock is had, and by threads() (a read sharing the SQLite
        # connection), so a read never waits behind a writer that itself waits for
        # another process.  Always gate first, then thread lock.
        self._gate = threading.RLock()
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
        # Set once hold() has had the lock: this process wrote (or did upkeep that must
        # be finished under the lock); a process that only read never set it.
        self.taken = False

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the lock for the duration of a ``with`` block."""
        if not self._gate.acquire(timeout=self.timeout):
            raise LockTimeout(f"timed out after {self.timeout:.0f}s waiting for another thread")
        try:
            if self._closed and self._depth == 0:
                raise VaultClosed("this Vault object is closed")
            if not self._take_file_lock(self.timeout):
                raise LockTimeout(
                    f"another process has held the vault lock for over {self.timeout:.0f}s "
                    f"({self.path})")
            self.taken = True
            with self._counted(True):
                yield
        except OSError as exc:
            # Every write runs under this lock: the disk failing under any of them (full,
            # read-only, an I/O error) reaches the caller as storage_error, not as OSError.
            mapped = from_system_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        finally:
            self._gate.release()

    @contextmanager
    def try_hold(self, timeout: float = 0.0) -> Iterator[bool]:
        """Hold the lock for a ``with`` block if it can be had within ``timeout`` seconds
        (0: only if free now); yields whether it was taken.

        For work that may be left for later (bringing a cache up to date, repairing
        ``.git/index``): when the lock is busy, or this Vault is closed, the block runs
        without it (False) and must do nothing that needs it.  Readers use it so they
        never wait for a writer."""
        got = self._gate.acquire(timeout=timeout) if timeout > 0 else self._gate.acquire(blocking=False)
        if not got:
            yield False
            return
        try:
            if (self._closed and self._depth == 0) or not self._take_file_lock(timeout):
                yield False
                return
            with self._counted(False) as had:
                yield had
        finally:
            self._gate.release()

    def _take_file_lock(self, timeout: float) -> bool:
        """Take the file lock unless this process holds it already (gate held)."""
        if self._depth > 0:
            return True
        try:
            self._file_lock.acquire(timeout=timeout, poll_interval=0.002)
        except Timeout:
            return False
        return True

    @contextmanager
    def _counted(self, strict: bool) -> Iterator[bool]:
        """A hold once the file lock is had (gate held): exclude this process's other
        threads (:meth:`threads`), count the depth, run ``on_acquire`` on the first
        level, release the file lock on the last.  Yields False (``strict``: raises
        VaultClosed) when the Vault was closed while the file lock was waited for."""
        if not self._thread_lock.acquire(timeout=self.timeout):
            if self._depth == 0:
                self._file_lock.release()
            raise LockTimeout(f"timed out after {self.timeout:.0f}s waiting for another thread")
        try:
            if self._closed and self._depth == 0:
                self._file_lock.release()
                if strict:
                    raise VaultClosed("this Vault object is closed")
                yield False
                return
            self._depth += 1
            try:
                if self._depth == 1 and self._on_acquire is not None:
                    self._on_acquire()
                yield True
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
        """Refuse every later :meth:`hold` (call while holding it, or :meth:`threads`, as
        the last act)."""
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
