"""Moving the vault's branch the way git does, with ``.git/index`` published inside the move.

A ``git commit`` in a shell reads HEAD, then ``.git/index``, and only then takes
``index.lock``.  Were the branch moved first and the index replaced after (dulwich's
``set_if_equals``, then a rename), a ``git commit -a`` reading in between would see the
new HEAD with the old index, take ``index.lock`` the moment gitmem let it go, and commit
the deletion of the files the write had just added.

So a write holds git's lock on the branch (``refs/heads/<name>.lock``, the lock every
git command takes to move it) while it replaces ``.git/index``, and moves the branch
after: whoever reads HEAD and then the index sees either both old or both new, and a
``git commit`` that read the old pair cannot move the branch from under the write (its
compare-and-swap fails).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from dulwich.file import FileLocked, GitFile
from dulwich.reflog import format_reflog_line
from dulwich.refs import DiskRefsContainer, Ref
from dulwich.repo import Repo

__all__ = ["move_branch", "REF_LOCK_TIMEOUT"]

ZERO = b"0" * 40
#: git waits up to 100 ms for a ref lock held by another command (core.filesRefLockTimeout);
#: a write waits longer, for a git command on a loaded machine.
REF_LOCK_TIMEOUT = 2.0


def move_branch(repo: Repo, ref: bytes, old: bytes | None, new: bytes, *, message: bytes,
                who: bytes, when: int, tz: int, publish: Callable[[], None] = lambda: None) -> bool:
    """Move ``ref`` from ``old`` (None: the ref must not exist yet) to ``new``, calling
    ``publish`` (which replaces ``.git/index``) while holding the ref's lock, just before
    the ref moves; append the move to the ref's reflog (and HEAD's, when HEAD names it).

    Returns False, with nothing changed and ``publish`` not called, when the ref does not
    hold ``old``.  Raises :class:`FileLocked` when another process held the ref's lock
    for :data:`REF_LOCK_TIMEOUT` seconds, :class:`OSError` when the ref cannot be written;
    if ``publish`` returned, the caller must put the index back."""
    refs = repo.refs
    assert isinstance(refs, DiskRefsContainer), "a vault is a repository on disk"
    name = Ref(ref)
    path = refs.refpath(name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    deadline = time.monotonic() + REF_LOCK_TIMEOUT
    pause = 0.001
    while True:
        try:
            lock = GitFile(path, "wb")
            break
        except FileLocked:
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
    try:
        current = refs.read_loose_ref(name)
        if current is None:
            current = refs.get_packed_refs().get(name)
        if current != old:
            lock.abort()
            return False
        lock.write(new + b"\n")
        publish()
    except BaseException:
        lock.abort()
        raise
    try:
        lock.close()      # renames the lock over the ref: the branch has moved
    except BaseException:
        lock.abort()      # a full disk fails the flush: the lock file must not stay behind
        raise
    _log(repo, ref, old, new, who, when, tz, message)
    return True


def _log(repo: Repo, ref: bytes, old: bytes | None, new: bytes, who: bytes, when: int, tz: int,
         message: bytes) -> None:
    """Append the move to the reflogs git keeps for the ref and for HEAD (best effort:
    the branch has moved; a reflog that cannot be written loses one line of history)."""
    line = format_reflog_line(old or ZERO, new, who, when, tz, message) + b"\n"
    names = [ref]
    try:
        if repo.refs.read_ref(Ref(b"HEAD")) == b"ref: " + ref:
            names.append(b"HEAD")
    except (OSError, KeyError):
        pass
    logs = os.path.join(repo.controldir(), "logs")
    for name in names:
        target = os.path.join(logs, os.fsdecode(name))
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "ab") as handle:
                handle.write(line)
        except OSError:
            continue
