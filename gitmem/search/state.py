"""The small JSON files kept beside the search caches (the index's stamp and state, the
as-of index's state): written atomically, read forgivingly (a missing or broken file reads
as None, and the cache it describes is rebuilt)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

__all__ = ["read_json", "write_json_atomic"]


def write_json_atomic(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path``: a synced temporary file renamed into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    """The JSON object in ``path``, or None if it is missing or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None
