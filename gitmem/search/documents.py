"""What the search index stores of a memory: :class:`IndexDoc` (produced by the vault
from a Markdown file) and the field values derived from it; and the index's Whoosh-free
bookkeeping: the distribution check, its JSON stamp and state files, which segments a
commit merges.  The schema these values fill is in :mod:`gitmem.search.index`."""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitmem.search import query as sq
from gitmem.errors import StorageError
from gitmem.search.query import SearchConfig
from gitmem.search.rank import Analysis

__all__ = ["IndexDoc", "context_text", "index_fields", "merge_group", "read_json", "whoosh_version",
           "write_json_atomic"]


@dataclass
class IndexDoc:
    """One memory as the index sees it (produced by the vault from a Markdown file)."""
    path: str
    id: str
    title: str
    body: str
    hash: str
    tags: list[str] = field(default_factory=list)
    type: str = "memory"
    tier: str = "short_term"
    status: str = "active"
    scope: str | None = None
    agent: str | None = None
    entities: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    importance: int = 3
    created: str | None = None
    updated: str | None = None
    source: str | None = None
    #: what the memory answers or continues: its own ``context`` field and the title and
    #: text of the memory it ``follows`` (indexed with ``SearchConfig.context_weight``)
    context: str = ""
    follows: str | None = None          # the id of the memory before it (same source)


def context_text(own: str | None, followed_title: str | None = None,
                 followed_body: str | None = None) -> str:
    """The context a memory is indexed with: its own ``context`` field, then the title
    and text of the memory it ``follows`` (what it answers or continues).  A title that
    merely starts the text (the default title is the first line) is not repeated."""
    if followed_title and followed_body and followed_body.lstrip().startswith(followed_title.strip()):
        followed_title = None
    return "\n".join(t for t in (own, followed_title, followed_body) if t)


def index_fields(d: IndexDoc, an: Analysis, c: SearchConfig) -> dict[str, Any]:
    """The field values the index stores for a memory (see ``gitmem.search.index._schema``).

    ``text`` is one list of ``(stem, weight)`` per position: title, tags and entities,
    author, body, context, each followed by a gap of four ``None`` positions so that no
    phrase matches across two parts."""
    title, body = an.tokens(d.title or ""), an.tokens(d.body or "")
    meta = an.tokens(" ".join(list(d.tags) + list(d.entities)))
    text: list = []
    for toks, weight in ((title, c.title_weight), (meta, c.meta_weight),
                         (an.tokens(d.agent or ""), c.agent_weight), (body, 1.0),
                         (an.tokens(d.context or ""), c.context_weight)):
        if weight:
            text += [(an.stem(t), weight) for t in toks] + [None] * 4
    out: dict[str, Any] = dict(
        path=d.path, hash=(d.hash or "").encode(), id=(d.id or "").lower(),
        title=d.title or "", body=d.body or "", text=text,
        words=list(dict.fromkeys(title + body + meta)), taglist=list(d.tags),
        type=_low(d.type) or "memory", tier=_low(d.tier) or "short_term",
        status=_low(d.status) or "active", importance=int(d.importance or 0),
        updated_iso=d.updated, context=d.context or "",
        recency=sq.iso_to_epoch(d.updated) or sq.iso_to_epoch(d.created) or 0)
    for key, val in (("tags", ",".join(t.strip().lower() for t in d.tags)),
                     ("entities", ",".join(e.strip().lower() for e in d.entities)),
                     ("links", ",".join(d.links)), ("scope", _low(d.scope)),
                     ("agent", _low(d.agent)), ("source", _low(d.source)),
                     ("follows", _low(d.follows)),
                     ("when", sq.month_year(d.created)),
                     ("created", sq.iso_to_epoch(d.created)),
                     ("updated", sq.iso_to_epoch(d.updated))):
        if val:
            out[key] = val
    return out


def _low(v: str | None) -> str | None:
    return v.strip().lower() if isinstance(v, str) and v.strip() else None


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _top_level(dist: importlib.metadata.Distribution) -> set[str]:
    """The top-level modules ``dist`` installs (as ``packages_distributions()`` infers them)."""
    declared = dist.read_text("top_level.txt")
    if declared is not None:
        return {line.strip() for line in declared.splitlines() if line.strip()}
    tops = set()
    for f in dist.files or ():
        parts = f.parts
        if len(parts) > 1:
            tops.add(parts[0])
        elif f.suffix == ".py":
            tops.add(f.stem)
    return tops


def _whoosh_owners() -> list[str]:
    """Normalised names of the installed distributions that install a ``whoosh`` module.

    Only distributions whose metadata folder names mention whoosh (``whoosh``,
    ``Whoosh``, ``whoosh-ng``, ``whoosh_reloaded`` ...) are read: listing the
    import path's folders costs a millisecond, where ``packages_distributions()``
    reads every installed distribution's file list (~0.15 s).
    """
    owners: set[str] = set()
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # a zip file, a missing folder
            continue
        for name in names:
            stem, _, kind = name.rpartition(".")
            if kind not in ("dist-info", "egg-info") or "whoosh" not in stem.lower():
                continue
            dist = importlib.metadata.PathDistribution(Path(entry or ".", name))
            if "whoosh" in _top_level(dist):
                owners.add(_normal(dist.metadata["Name"] or stem.split("-")[0]))
    return sorted(owners)


def _whoosh_files_mismatch() -> str | None:
    """Why the ``whoosh`` package Python imports is not the one whoosh-reloaded installed, or None.

    Catches what the name scan cannot: another distribution (whatever its name)
    having overwritten whoosh-reloaded's files.  Compares ``whoosh/__init__.py``
    with its entry in whoosh-reloaded's RECORD (location and sha256); says
    nothing when RECORD lacks the entry (an egg-info or editable install).
    """
    spec = importlib.util.find_spec("whoosh")
    origin = spec.origin if spec is not None else None
    if not origin:
        return "no 'whoosh' module can be imported"
    entry = next((f for f in importlib.metadata.distribution("whoosh-reloaded").files or ()
                  if f.as_posix() == "whoosh/__init__.py"), None)
    if entry is None:
        return None
    if os.path.realpath(entry.locate()) != os.path.realpath(origin):
        return f"'whoosh' is imported from {origin}, not from whoosh-reloaded's {entry.locate()}"
    if entry.hash is not None and entry.hash.mode == "sha256":
        digest = base64.urlsafe_b64encode(hashlib.sha256(Path(origin).read_bytes()).digest()).rstrip(b"=")
        if digest.decode() != entry.hash.value:
            return f"{origin} is not the file whoosh-reloaded installed (another package overwrote it)"
    return None


@functools.cache
def whoosh_version() -> str:
    """Version of whoosh-reloaded, after checking that it (alone) provides ``whoosh``.

    Only one distribution of whoosh may be installed: ``whoosh``, ``whoosh-ng``
    and ``whoosh-reloaded`` all install the same ``whoosh`` package, and files
    of one overwriting the other's give an index no version describes.  Checked
    once per process, cheaply (see :func:`_whoosh_owners` and
    :func:`_whoosh_files_mismatch`).
    """
    names = _whoosh_owners()
    problem = None if names == ["whoosh-reloaded"] else (
        f"the 'whoosh' module comes from {names or 'an unknown package'}")
    if problem is None:
        try:
            problem = _whoosh_files_mismatch()
        except (importlib.metadata.PackageNotFoundError, OSError, ValueError) as exc:
            problem = f"whoosh-reloaded's files cannot be checked ({exc})"
    if problem is not None:
        raise StorageError(f"{problem}; gitmem needs exactly the distribution 'whoosh-reloaded'",
                           hint="pip uninstall whoosh whoosh-ng; pip install whoosh-reloaded")
    return importlib.metadata.version("whoosh-reloaded")


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


def merge_group(sizes: list[int], tier_factor: int, min_group: int) -> set[int]:
    """Which segments (indexes into ``sizes``, their document counts) a commit merges.

    Segments fall in size tiers (1 to ``tier_factor - 1`` documents, then up to
    ``tier_factor**2 - 1``, ...); the smallest tier holding ``min_group`` segments (and at
    least two) is merged, so each document is copied about once per tier."""
    tiers: dict[int, list[int]] = {}
    for i, n in enumerate(sizes):
        tier = 0
        while n >= tier_factor:
            n, tier = n // tier_factor, tier + 1
        tiers.setdefault(tier, []).append(i)
    for tier in sorted(tiers):
        if len(tiers[tier]) >= min_group and len(tiers[tier]) > 1:
            return set(tiers[tier])
    return set()
