"""What a purge leaves for later: the commits it rewrote, so a sync never merges them
back, and its journal while it runs.

Kept in ``.git/gitmem/purged.json``: memory id -> the commit ids its old history had.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["record_purged", "purged_in", "PURGED", "PURGE_JOURNAL"]

PURGED = "purged.json"
#: The journal of a purge under way (its steps, so a killed purge is finished).
PURGE_JOURNAL = "purge-journal"


def record_purged(state_dir: Path, memory_id: str, old_commits: list[bytes]) -> None:
    """Remember the commits a purge rewrote, so a sync can refuse a remote whose
    history still holds them instead of merging them back."""
    path = state_dir / PURGED
    data = _purged(state_dir)
    data[memory_id] = sorted(set(data.get(memory_id, [])) | {c.decode() for c in old_commits})
    tmp = path.with_name(PURGED + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _purged(state_dir: Path) -> dict[str, list[str]]:
    try:
        data = json.loads((state_dir / PURGED).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def purged_in(state_dir: Path, commits: Iterable[bytes]) -> list[str]:
    """Ids of purged memories whose old (pre-purge) history is among ``commits``."""
    data = _purged(state_dir)
    if not data:
        return []
    incoming = {c.decode() for c in commits}
    return [mid for mid, old in data.items() if incoming.intersection(old)]
