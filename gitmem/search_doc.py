"""What the search index stores of a memory: :class:`IndexDoc` (produced by the vault
from a Markdown file) and the field values derived from it.  Whoosh-free; the schema
these values fill is in :mod:`gitmem.search`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gitmem import search_query as sq
from gitmem.search_query import SearchConfig
from gitmem.search_rank import Analysis

__all__ = ["IndexDoc", "index_fields"]


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


def index_fields(d: IndexDoc, an: Analysis, c: SearchConfig) -> dict[str, Any]:
    """The field values the index stores for a memory (see ``gitmem.search._schema``).

    ``text`` is one list of ``(stem, weight)`` per position: title, tags and entities,
    author, body, each followed by a gap of four ``None`` positions so that no phrase
    matches across two parts."""
    title, body = an.tokens(d.title or ""), an.tokens(d.body or "")
    meta = an.tokens(" ".join(list(d.tags) + list(d.entities)))
    text: list = []
    for toks, weight in ((title, c.title_weight), (meta, c.meta_weight),
                         (an.tokens(d.agent or ""), c.agent_weight), (body, 1.0)):
        if weight:
            text += [(an.stem(t), weight) for t in toks] + [None] * 4
    out: dict[str, Any] = dict(
        path=d.path, hash=(d.hash or "").encode(), id=(d.id or "").lower(),
        title=d.title or "", body=d.body or "", text=text,
        words=list(dict.fromkeys(title + body + meta)), taglist=list(d.tags),
        type=_low(d.type) or "memory", tier=_low(d.tier) or "short_term",
        status=_low(d.status) or "active", importance=int(d.importance or 0),
        updated_iso=d.updated,
        recency=sq.iso_to_epoch(d.updated) or sq.iso_to_epoch(d.created) or 0)
    for key, val in (("tags", ",".join(t.strip().lower() for t in d.tags)),
                     ("entities", ",".join(e.strip().lower() for e in d.entities)),
                     ("links", ",".join(d.links)), ("scope", _low(d.scope)),
                     ("agent", _low(d.agent)), ("source", _low(d.source)),
                     ("when", sq.month_year(d.created)),
                     ("created", sq.iso_to_epoch(d.created)),
                     ("updated", sq.iso_to_epoch(d.updated))):
        if val:
            out[key] = val
    return out


def _low(v: str | None) -> str | None:
    return v.strip().lower() if isinstance(v, str) and v.strip() else None
