"""The services one open vault is made of, and how they are put together.

Each service is a plain class given what it needs, and each imports only the
layers below it::

    Storage      folder, git store, catalog, lock, settings, clock   (store/)
    Reader       finding, parsing, resolving, listing memories       (store/reader.py)
    SearchService   the search index, as-of searches, vectors        (search/)
    MemoryMd     the generated MEMORY.md                             (write/memory_md.py)
    WritePipeline   the one place a change becomes a commit          (write/pipeline.py)
    Memories, Lifecycle, Reflect, History, Files                     (ops/)
    Syncer       remotes and sync                                    (sync/)

:class:`~gitmem.vault.Vault` owns one :class:`Services` and delegates to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .config import Identity, VaultConfig
from .ops.files import Files
from .ops.history import History
from .ops.layout import Layouts
from .ops.lifecycle import Lifecycle
from .ops.memories import Memories
from .ops.reflect import Reflect
from .search.service import SearchService
from .store.catalog import Catalog
from .store.git import GitStore
from .store.locking import VaultLock
from .store.reader import Reader
from .store.storage import Clock, Storage
from .store.trust import TrustRecord
from .sync.syncer import Syncer
from .write.checks import WriteChecks
from .write.memory_md import MemoryMd
from .write.pipeline import WritePipeline

__all__ = ["Services", "open_services"]


@dataclass
class Services:
    """Everything one open vault is made of (see the module docstring)."""

    store: Storage
    reader: Reader
    searcher: SearchService
    memory_md: MemoryMd
    pipeline: WritePipeline
    memories: Memories
    lifecycle: Lifecycle
    layouts: Layouts
    reflect: Reflect
    history: History
    files: Files
    syncer: Syncer


def open_services(root: Path, *, author: Identity | None, clock: Clock, lock_timeout: float,
                  on_lock: Callable[[], None]) -> Services:
    """The services of the vault at ``root`` (a git repository).

    ``author`` writes when a call names nobody (None: the settings' ``author``).
    ``on_lock`` runs each time this process takes the vault lock (crash recovery:
    whoever takes the lock first finishes a write whose process was killed)."""
    git = GitStore(root)
    git.index_lock_timeout = lock_timeout   # a write waits as long for git's index.lock
    config = VaultConfig.load(root)
    state_dir = git.git_dir / "gitmem"
    store = Storage(root=root, git=git, catalog=Catalog(state_dir / "catalog.sqlite", busy_timeout=lock_timeout),
                    lock=VaultLock(state_dir / "lock", timeout=lock_timeout, on_acquire=on_lock),
                    config=config, clock=clock, author=author or config.author, state_dir=state_dir,
                    trust=TrustRecord(state_dir))
    # Every commit and fast-forward passes these before git stores anything (write/checks.py).
    git.checks = WriteChecks(root, lambda: store.config)
    reader = Reader(store)
    searcher = SearchService(store, reader)
    memory_md = MemoryMd(store, reader)
    pipeline = WritePipeline(store, reader, searcher, memory_md)
    memories = Memories(store, reader, pipeline)
    lifecycle = Lifecycle(store, reader, pipeline, memories)
    history = History(store, reader, pipeline)
    return Services(store=store, reader=reader, searcher=searcher, memory_md=memory_md, pipeline=pipeline,
                    memories=memories, lifecycle=lifecycle, layouts=Layouts(store, reader, pipeline),
                    reflect=Reflect(store, reader, pipeline, memories, lifecycle), history=history,
                    files=Files(store, reader, pipeline),
                    syncer=Syncer(store, reader, pipeline, memory_md, searcher, history))
