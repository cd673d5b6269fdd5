"""Keeping what a remote sends aside until it has been checked (like git's receive quarantine).

A sync fetches into a temporary object store under ``.git/gitmem/quarantine/``,
never into the vault's own.  While the sync checks what arrived, that store is
an extra (in-memory) alternate of the vault's store, so every check reads the
new objects as usual (only under the vault lock, so no local write meanwhile
takes an unchecked object for one of its own); nothing on disk in
``.git/objects`` changes.  Only once the checks pass are the objects moved in
(:meth:`Quarantine.keep`, pack files renamed into ``objects/pack``, then loose
objects); a refused or failed sync
deletes the folder (:meth:`Quarantine.close`), so a hostile tree, an unrelated
history or a half-received pack never reaches the vault's object store and
``git fsck --full`` stays clean.  A folder left behind by a killed process is
removed by the next sync.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # pragma: no cover
    from dulwich.object_store import BaseObjectStore, DiskObjectStore
    from dulwich.repo import Repo

__all__ = ["Quarantine", "QUARANTINE_DIR", "remove_stale", "remove_refused_objects"]

# Under .git/gitmem/: one folder per sync in progress.
QUARANTINE_DIR = "quarantine"
# A folder older than this belongs to a process that died (a sync takes seconds).
STALE_SECONDS = 3600.0


class _Target:
    """The vault's repository as a fetch target, with objects written to the quarantine.

    The graph walker (what we already have, so the remote sends only what is
    new) and every other attribute come from the vault's repository."""

    def __init__(self, repo: Repo, store: DiskObjectStore) -> None:
        self._repo = repo
        self.object_store = store

    def update_shallow(self, new_shallow: Any, new_unshallow: Any) -> None:
        if new_shallow or new_unshallow:  # gitmem never asks for a shallow fetch
            self._repo.update_shallow(new_shallow, new_unshallow)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repo, name)


class Quarantine:
    """One sync's temporary object store.  Use as a context manager (closed on exit)."""

    def __init__(self, repo: Repo) -> None:
        from dulwich.object_store import DiskObjectStore
        self.main = repo.object_store
        base = Path(repo.controldir()) / "gitmem" / QUARANTINE_DIR
        base.mkdir(parents=True, exist_ok=True)
        remove_stale(base)
        self.path = Path(tempfile.mkdtemp(prefix="incoming-", dir=base))
        self.store = DiskObjectStore.init(str(self.path / "objects"), object_format=self.main.object_format)
        self._repo = repo
        self._exposed = False

    @property
    def target(self) -> Repo:
        """What to pass to ``GitClient.fetch``: the vault's repository, objects going here."""
        return cast("Repo", _Target(self._repo, self.store))

    def fetching(self) -> _Fetching:
        """Around the fetch: the quarantine sees the vault's objects (a thin pack's bases)."""
        return _Fetching(self.store, self.main)

    @contextmanager
    def exposed(self) -> Iterator[None]:
        """While the sync checks and integrates (vault lock held, so no local write sees
        unchecked objects): the vault's store reads the quarantined ones too, in memory only."""
        if not self._exposed:
            self.main.alternates.append(self.store)
            self._exposed = True
        try:
            yield
        finally:
            self._hide()

    def read(self, sha: bytes) -> Any:
        """The object ``sha`` if it arrived or was already in the vault's store (KeyError if neither)."""
        from dulwich.objects import ObjectID
        oid = ObjectID(sha)
        return self.store[oid] if oid in self.store else self.main[oid]

    def keep(self) -> None:
        """The checks passed: move every quarantined object into the vault's store."""
        self._hide()
        self.store.close()
        source = self.path / "objects"
        pack_dir = Path(self.main.pack_dir)
        names = sorted(os.listdir(source / "pack"), key=lambda n: n.endswith(".idx"))  # .idx last
        for name in names:
            if not (pack_dir / name).exists():
                os.replace(source / "pack" / name, pack_dir / name)
        for folder in source.iterdir():
            if len(folder.name) != 2 or not folder.is_dir():
                continue
            target = Path(str(self.main.path)) / folder.name
            target.mkdir(exist_ok=True)
            for item in folder.iterdir():
                if not (target / item.name).exists():
                    os.replace(item, target / item.name)

    def close(self) -> None:
        """Forget the quarantine and delete what is still in it (everything, unless kept)."""
        self._hide()
        self.store.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def _hide(self) -> None:
        if self._exposed:
            alternates: list[BaseObjectStore] = self.main.alternates
            if self.store in alternates:
                alternates.remove(self.store)
            self._exposed = False

    def __enter__(self) -> Quarantine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Fetching:
    def __init__(self, store: DiskObjectStore, main: DiskObjectStore) -> None:
        self.store, self.main = store, main

    def __enter__(self) -> None:
        self.store.alternates.append(self.main)

    def __exit__(self, *exc: object) -> None:
        # Never both ways at once: a lookup of a missing object would go round in circles.
        if self.main in self.store.alternates:
            self.store.alternates.remove(self.main)


def remove_stale(base: Path) -> list[str]:
    """Delete quarantine folders under ``base`` left by a process that died; their names."""
    removed: list[str] = []
    now = time.time()
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        try:
            old = now - entry.stat().st_mtime > STALE_SECONDS
        except OSError:
            continue
        if old and entry.name.startswith("incoming-"):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


_FSCK_OBJECT = re.compile(r"(?:error|warning) in (?:tree|commit|blob|tag) ([0-9a-f]{40,64})")


def remove_refused_objects(root: Path) -> list[str]:
    """Delete the objects a refused sync left in the vault's store (gitmem before the
    quarantine fetched straight into it), when ``git fsck`` reports them.

    Only objects no ref, reflog or ``.git/index`` entry reaches are removed, and
    only if every object ``git fsck --full`` complains about is such a
    leftover (a damaged object that something still uses is never touched):
    ``git repack -a -d`` keeps what is reachable, ``git prune`` drops the loose
    rest.  Returns the object ids fsck named ([] when nothing was done).  Needs
    the git CLI; the caller holds the vault lock."""
    git = shutil.which("git")
    if git is None:
        return []

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([git, *args], cwd=root, capture_output=True, text=True, check=False)

    fsck = run("fsck", "--full", "--no-dangling", "--no-progress")
    named = sorted(set(_FSCK_OBJECT.findall(fsck.stdout + fsck.stderr)))
    if not named:
        return []
    reachable = run("rev-list", "--objects", "--all", "--reflog", "--indexed-objects")
    if reachable.returncode != 0:
        return []
    used = {line.split(" ", 1)[0] for line in reachable.stdout.splitlines()}
    if any(sha in used for sha in named):
        return []
    # As `git gc --prune=now` does (-l: objects borrowed from an alternate stay there).
    if run("repack", "-a", "-d", "-l", "-q").returncode != 0 or run("prune", "--expire=now").returncode != 0:
        return []
    return named
