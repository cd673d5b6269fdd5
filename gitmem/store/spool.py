"""Session notes waiting for the vault lock, in ``.git/gitmem/hook-spool/``.

An agent's note hook keeps the session's note here (one JSON file per agent session)
before it waits for the vault lock; the next note hook commits it.  The note's memory
names the session in its ``source`` (``"<agent> session <id>"``), so a purge of that
memory drops the session's waiting note too: the next hook would otherwise write the
forgotten text back.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

__all__ = ["SPOOL_DIR", "spool_file", "session_source", "drop_spooled"]

SPOOL_DIR = "hook-spool"
_SOURCE = re.compile(r"^([A-Za-z0-9_-]+) session (.+)$")


def spool_file(state_dir: Path, agent: str, session: str) -> Path:
    """Where the waiting note of ``agent``'s ``session`` is kept."""
    return state_dir / SPOOL_DIR / f"{agent}-{hashlib.sha256(session.encode('utf-8')).hexdigest()[:16]}.json"


def session_source(agent: str, session: str) -> str:
    """The ``source`` of the memory a session's note becomes."""
    return f"{agent} session {session}"


def drop_spooled(state_dir: Path, sources: Iterable[object]) -> list[Path]:
    """Remove the waiting notes of the sessions these memory ``source`` values name;
    returns the files removed."""
    removed = []
    for source in sources:
        match = _SOURCE.match(source) if isinstance(source, str) else None
        if match is None:
            continue
        file = spool_file(state_dir, match.group(1), match.group(2))
        try:
            file.unlink()
        except FileNotFoundError:
            continue
        removed.append(file)
    return removed
