"""What every part of a vault shares: its folder, git store, catalog, lock, settings and clock.

One :class:`Storage` is made per open :class:`~gitmem.vault.Vault` and handed to
each of its services.  ``config`` is the one mutable field: a sync that brings a
new ``.gitmem.yaml`` replaces it, and every service sees the new settings at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..config import CONFIG_NAME, DEFAULT_USER, Identity, VaultConfig
from ..memory.paths import is_memory_path
from ..memory.provenance import PERSON
from ..memory.schema import iso_now
from ..memory.secrets import policy_of, screen_identity
from .catalog import Catalog
from .git import GitStore
from .locking import VaultLock
from .trust import TrustRecord

__all__ = ["Clock", "Storage"]

Clock = Callable[[], datetime]


@dataclass
class Storage:
    """The vault's folder and the stores in it (see the module docstring)."""

    root: Path
    git: GitStore
    catalog: Catalog
    lock: VaultLock
    config: VaultConfig
    clock: Clock
    author: Identity          # who writes when a call names nobody
    state_dir: Path           # .git/gitmem: lock, caches, search index
    trust: TrustRecord        # arrived and person-saved file versions (store/trust.py)
    origin: str = PERSON      # who writes when a call names nobody (memory/provenance.py)
    # What this thread's writes want their caller told (:meth:`notify`), for agent tools
    _notices: threading.local = field(default_factory=threading.local, repr=False)
    # (stat of .gitmem.yaml, layout it names), for :meth:`layout`
    _layout_seen: tuple[tuple[int, int, int] | None, str] | None = field(default=None, repr=False)

    def now(self) -> str:
        """The clock's time as ISO 8601 UTC."""
        return iso_now(self.clock())

    def author_of(self, author: str | Identity | None) -> Identity:
        """The identity a write is committed as: ``author``, else the vault's default;
        refused (:class:`~gitmem.errors.SecretDetected`) when it holds a secret
        (:meth:`check_author`)."""
        who = self.author if author is None else author if isinstance(author, Identity) else Identity.parse(author)
        self.check_author(who)
        return who

    def check_author(self, who: Identity) -> None:
        """Refuse ``who`` as a commit author if its name or email looks like it holds a
        secret, under the vault's ``secrets:`` policy (only ``allow`` lets it through)."""
        screen_identity(who.name, who.email, policy_of(self.config))

    def origin_of(self, who: Identity) -> str:
        """The origin of what ``who`` writes: the one its front door set, else the vault's."""
        return who.origin or self.origin

    def in_force(self, meta: dict[str, Any], blob: str | None) -> bool:
        """True when a protected memory with this frontmatter and blob is an instruction
        (a person's, or an agent's listed in ``trust: {agents}``), not a proposal."""
        return self.trust.in_force(meta, blob, self.config.trust.agents)

    def notify(self, text: str) -> None:
        """Keep ``text`` for whoever made this thread's write (:meth:`take_notices`): e.g. that
        a rule an agent wrote is held as a proposal."""
        kept = getattr(self._notices, "items", None)
        if kept is None:
            kept = self._notices.items = []
        if text not in kept and len(kept) < 50:
            kept.append(text)

    def take_notices(self) -> list[str]:
        """The notices of this thread's writes since the last call (and forget them)."""
        kept = getattr(self._notices, "items", None) or []
        self._notices.items = []
        return list(kept)

    def person(self) -> Identity:
        """Who a person's edits outside gitmem are committed as: ``user:`` in
        ``.gitmem.yaml`` when it names someone, else the person's git identity
        (:meth:`GitStore.person`), else the default ``vault user``."""
        if self.config.user != DEFAULT_USER:
            return self.config.user
        return self.git.person() or self.config.user

    def layout(self) -> str:
        """The layout new memories get (:mod:`gitmem.memory.paths`): ``layout`` in
        ``.gitmem.yaml`` as the file says now, so a long-running process follows a
        ``gitmem layout`` another process made (one ``lstat`` per call)."""
        try:
            st = os.lstat(self.root / CONFIG_NAME)
            key: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            key = None
        if self._layout_seen is None or self._layout_seen[0] != key:
            layout = self.config.layout
            if self._layout_seen is not None or key is None:
                try:
                    layout = VaultConfig.load(self.root, apply_pins=False).layout
                except Exception:  # noqa: BLE001 - a file being rewritten: keep the settings in force
                    layout = self.config.layout
            self._layout_seen = (key, layout)
        return self._layout_seen[1]

    def is_memory_path(self, path: str) -> bool:
        """True if the vault-relative ``path`` is a memory file of this vault's tiers."""
        return is_memory_path(path, self.config.tiers, self.config.outside_notes)
