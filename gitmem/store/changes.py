"""A change to one file of the vault, as a write commits it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FileChange"]


@dataclass(frozen=True)
class FileChange:
    """Set ``path`` to ``data`` (bytes), or delete it (``data is None``).

    ``moved_from`` names the path this file is moved from (deleted by another change
    of the same write): the commit is then preceded by a pure-rename commit, so
    ``git log --follow`` keeps the file's history however much its text changes."""

    path: str
    data: bytes | None
    moved_from: str | None = None
