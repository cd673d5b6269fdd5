"""How far each memory file is trusted on this clone: the frontmatter's ``origin``, corrected
by what this clone saw happen to the file.

The frontmatter states an origin (:mod:`gitmem.memory.provenance`), but anyone who can
write a file can state anything.  Two facts only this clone knows correct it, recorded
per git blob (the exact bytes of a file version) in ``.git/gitmem/trust.jsonl``:

* a file version that **arrived by sync** from a remote the person has not listed in
  ``trust: {remotes: [...]}`` is trusted at most as ``remote:<address>``, whatever it
  claims (a hostile clone can write ``origin: person``);
* a file version an agent wrote **as a whole file** (the ``files`` and ``claude`` tool
  profiles write text exactly as given, frontmatter included) is trusted at most as
  that agent;
* a file version **a person saved** (an edit in Obsidian or any editor, committed by
  the watcher, or by gitmem before its next write) is the person's, whatever its
  frontmatter says.

The record is local state, never committed or synced (each clone knows what it
received); it is append-only, one JSON object per line, and read again when another
process has added to it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..memory.provenance import (
    PERSON,
    REMOTE,
    claimed_origin,
    has_authority,
    lowest,
    make_origin,
    rank,
)

__all__ = ["TrustRecord", "TRUST_FILE"]

TRUST_FILE = "trust.jsonl"


class TrustRecord:
    """The per-clone record of arrived and person-saved file versions (module doc)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / TRUST_FILE
        self._held: dict[str, str] = {}     # blob id -> "person" or "remote:<address>"
        self._seen: tuple[int, int] | None = None   # (size, mtime_ns) of the file last read
        self._mutex = threading.Lock()

    # ------------------------------------------------------------ reading
    def _current(self) -> dict[str, str]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return self._held
        key = (st.st_size, st.st_mtime_ns)
        if key != self._seen:
            with self._mutex:
                held: dict[str, str] = {}
                with open(self.path, "rb") as fh:
                    for line in fh:
                        try:
                            entry = json.loads(line)
                            held[str(entry["blob"])] = str(entry["origin"])
                        except (ValueError, KeyError, TypeError):
                            continue    # a line cut short by a crash: the rest still counts
                self._held, self._seen = held, key
        return self._held

    def effective(self, meta: Mapping[str, Any], blob: str | None) -> str:
        """The origin a file version is trusted as: what it states, capped by a sync that
        brought it, or the person's when a person saved it."""
        claimed = claimed_origin(meta)
        held = self._current().get(blob) if blob else None
        if held is None:
            return claimed
        if held == PERSON:
            return PERSON
        return lowest([claimed, held])

    def in_force(self, meta: Mapping[str, Any], blob: str | None, trusted_agents: Iterable[str]) -> bool:
        """True when a protected memory of this version is an instruction, not a proposal."""
        return has_authority(self.effective(meta, blob), trusted_agents)

    # ------------------------------------------------------------ recording
    def _append(self, entries: Iterable[tuple[str, str]], *, durable: bool = True) -> None:
        lines = b"".join(json.dumps({"blob": b, "origin": o}).encode() + b"\n" for b, o in entries)
        if not lines:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One O_APPEND write per batch: processes appending at once never interleave lines.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, lines)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    def person_saved(self, blobs: Iterable[str]) -> None:
        """Record file versions a person saved."""
        held = self._current()
        # Not synced to disk: losing this line in a crash only leaves the file at the trust
        # its frontmatter states (lower, never higher), and a person's save stays quick.
        self._append(((b, PERSON) for b in dict.fromkeys(blobs) if held.get(b) != PERSON), durable=False)

    def cap(self, files: Iterable[tuple[str, Mapping[str, Any]]], origin: str) -> int:
        """Record that file versions (blob id, frontmatter) came from ``origin``: each whose
        frontmatter claims more trust is trusted as ``origin`` at most.  Returns how many
        claimed more."""
        held = self._current()
        todo = [(blob, origin) for blob, meta in files
                if rank(claimed_origin(meta)) > rank(origin) and blob not in held]
        self._append(todo)
        return len(todo)

    def arrived(self, blobs: Iterable[str], remote_url: str) -> None:
        """Record memory file versions (blob ids) a sync brought from ``remote_url`` (a remote
        not listed as trusted; its address with credentials already hidden): each is trusted
        at most as ``remote:<address>``.  No file is parsed: :meth:`effective` takes the lower
        of this and what the file states."""
        cap = make_origin(REMOTE, remote_url)
        held = self._current()
        self._append((blob, cap) for blob in dict.fromkeys(blobs) if blob not in held)
