"""What purges leave on this machine: the commits each rewrote, the tombstones
already applied here, and the journal of a purge under way.

Kept in ``.git/gitmem/purged.json``: ``{"commits": {memory id: [old commit ids]},
"applied": [tombstone names]}``.  The tombstones themselves travel with the
vault (:mod:`gitmem.sync.forget`); this file only says which of them this clone
has applied to its own history, so a sync applies each one once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["record_purged", "purged_in", "applied_tombstones", "purge_stamp", "PURGED", "PURGE_JOURNAL"]

PURGED = "purged.json"
#: The journal of a purge under way (its steps, so a killed purge is finished).
PURGE_JOURNAL = "purge-journal"


def record_purged(state_dir: Path, memory_id: str, old_commits: list[bytes],
                  applied: Iterable[str] = ()) -> None:
    """Remember the commits a purge (or an applied tombstone) rewrote, and the
    tombstones now applied here."""
    path = state_dir / PURGED
    data = _purged(state_dir)
    commits = data["commits"]
    commits[memory_id] = sorted(set(commits.get(memory_id, [])) | {c.decode() for c in old_commits})
    data["applied"] = sorted(set(data["applied"]) | set(applied))
    tmp = path.with_name(PURGED + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def purge_stamp(state_dir: Path) -> tuple[bool, tuple[int, int, int] | None]:
    """Changes whenever a purge (or an applied tombstone) rewrites this clone's
    history, in any process: its journal exists meanwhile, and it rewrites
    ``purged.json`` (by rename) when done.  Work begun without the vault lock
    compares it to know whether history was rewritten under it."""
    try:
        st = os.stat(state_dir / PURGED)
        purged: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        purged = None
    return (state_dir / PURGE_JOURNAL).exists(), purged


def _purged(state_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((state_dir / PURGED).read_text())
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        return {"commits": {}, "applied": []}
    if "commits" not in data and "applied" not in data:  # the older layout: {memory id: [commits]}
        return {"commits": {k: v for k, v in data.items() if isinstance(v, list)}, "applied": []}
    commits = data.get("commits")
    applied = data.get("applied")
    return {"commits": commits if isinstance(commits, dict) else {},
            "applied": [a for a in applied if isinstance(a, str)] if isinstance(applied, list) else []}


def purged_in(state_dir: Path, commits: Iterable[bytes]) -> list[str]:
    """Ids of purged memories whose old (pre-purge) history is among ``commits``."""
    data = _purged(state_dir)["commits"]
    if not data:
        return []
    incoming = {c.decode() for c in commits}
    return [mid for mid, old in data.items() if isinstance(old, list) and incoming.intersection(old)]


def applied_tombstones(state_dir: Path) -> set[str]:
    """Names of the tombstones this clone has applied to its history (or made)."""
    return set(_purged(state_dir)["applied"])
