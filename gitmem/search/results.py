"""What a search returns: :class:`SearchHit` (one memory found) and :class:`SearchPage` (one
page of them), and :func:`hit`, which makes a hit from the fields the index stores of a memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..memory.provenance import neutralize

__all__ = ["SearchHit", "SearchPage", "hit"]


@dataclass
class SearchHit:
    """One search result; ``snippet`` is ~200 characters with matches in ``**bold**``."""
    id: str
    path: str
    title: str
    tier: str
    type: str
    tags: list[str]
    score: float
    updated: str | None
    snippet: str
    commit: str | None = None          # set when searching the vault as of a commit

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if out["commit"] is None:
            del out["commit"]
        return out


@dataclass
class SearchPage:
    """One page of results; ``total`` counts every match (for a query that is one phrase
    whose words are all in more than 5,000 memories, it may be estimated: then
    ``total_estimated`` is true, see :meth:`gitmem.search.rank.Ranker.rank_phrase`),
    ``suggestion`` is a corrected
    query when nothing matched and a word has a close indexed alternative, ``notice``
    says why a search was not done as asked (e.g. by words only, the vectors file
    being damaged)."""
    hits: list[SearchHit]
    total: int
    suggestion: str | None
    mode: str               # all-words | any-words | syntax | filter | hybrid
    commit: str | None = None   # the commit searched, when searching the vault as of one
    notice: str | None = None
    total_estimated: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hits": [h.to_dict() for h in self.hits], "total": self.total,
                               "suggestion": self.suggestion, "mode": self.mode}
        if self.total_estimated:
            out["total_estimated"] = True
        if self.commit is not None:
            out["commit"] = self.commit
        if self.notice is not None:
            out["notice"] = self.notice
        return out


def hit(f: dict[str, Any], score: float, snippet: Callable[[str, str, str], str]) -> SearchHit:
    """A result from a document's stored fields; ``snippet(body, title, context)`` cuts
    its snippet (:class:`gitmem.search.snippet.Snippeter`)."""
    return SearchHit(id=f.get("id", ""), path=f["path"], title=neutralize(f.get("title", "")),
                     tier=f.get("tier", ""), type=f.get("type", ""),
                     tags=list(f.get("taglist") or []), score=round(float(score), 4),
                     updated=f.get("updated_iso"),
                     snippet=snippet(f.get("body", ""), f.get("title", ""),
                                     f.get("context", "")))
