"""Hybrid search: the lexical ranking fused with the memories' embedding vectors.

For a plain-language query, the best lexical candidates and the memories whose vectors
are nearest the query's are scored together::

    score = lexical score / best lexical score  +  HYBRID_WEIGHT x cosine similarity

(a memory the words did not match has lexical score 0; one without a vector yet has
cosine 0, so it is still found by its words), then the neighbour prior
(:func:`gitmem.search.priors.neighbour_prior`) on the fused scores.  Candidates found only by their vector pass
the query's filters and the inactive-status rule like every hit.  Queries with operators,
parentheses or a prefix keep their strict lexical meaning, and a vault without vectors (or
without the ``embed`` extra) is searched lexically.  The weight and the number of
candidates were measured with ``bench/retrieval.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from . import query as sq
from .priors import neighbour_prior
from .results import SearchPage

if TYPE_CHECKING:  # pragma: no cover
    from .embedding import Embedder
    from .vectors import VectorStore
    from .whoosh import SearchIndex

__all__ = ["HYBRID_WEIGHT", "CANDIDATES", "FUSION", "MIN_COSINE", "hybrid_search", "fuse"]

HYBRID_WEIGHT = 1.0     # how much the cosine counts against the normalised lexical score
CANDIDATES = 50         # lexical and vector candidates considered (at least the page asked)
FUSION = "linear"       # how the two rankings are combined (see fuse)
MIN_COSINE = 0.2        # least similarity of a memory the words did not match


def fuse(lexical: Sequence[tuple[str, float]], cosine: Mapping[str, float],
         weight: float = HYBRID_WEIGHT, method: str = "linear") -> dict[str, float]:
    """``{path: fused score}`` of lexical hits ``(path, score)`` (best first) and vector
    candidates ``{path: cosine}``.  ``linear``: lexical score over the best one, plus
    ``weight`` times the cosine (0 for a memory without a vector); ``minmax``: the same
    with the cosines scaled to 0..1 over the candidates; ``rrf``: reciprocal rank fusion,
    ``1/(60 + lexical rank) + weight/(60 + vector rank)``."""
    if method == "rrf":
        out: dict[str, float] = {}
        for rank, (p, _) in enumerate(lexical):
            out[p] = 1.0 / (61 + rank)
        for rank, p in enumerate(sorted(cosine, key=lambda p: -cosine[p])):
            out[p] = out.get(p, 0.0) + weight / (61 + rank)
        return out
    if method == "minmax" and cosine:
        lo, hi = min(cosine.values()), max(cosine.values())
        cosine = {p: (c - lo) / ((hi - lo) or 1.0) for p, c in cosine.items()}
    top = max((s for _, s in lexical), default=0.0) or 1.0
    out = {p: s / top + weight * cosine.get(p, 0.0) for p, s in lexical}
    for p, c in cosine.items():
        if p not in out:
            out[p] = weight * c
    return out


def hybrid_search(index: SearchIndex, store: VectorStore, embedder: Embedder, query: str, *,
                  limit: int = 10, offset: int = 0, include_inactive: bool = False,
                  filters: Mapping[str, str | Sequence[str]] | None = None,
                  weight: float = HYBRID_WEIGHT, candidates: int = CANDIDATES,
                  method: str = FUSION) -> SearchPage:
    """One page of hybrid results (``mode="hybrid"``); the lexical page when the query is
    not plain language or no vector is stored."""
    import numpy as np
    want = offset + limit
    pq = sq.parse_query(query or "")
    n = max(want, candidates)
    paths, _, matrix, rows = store.load()
    if not pq.natural or not (pq.words or pq.phrases) or not paths or not want:
        lexical = index.search(query, limit=want, offset=0, include_inactive=include_inactive,
                               filters=filters)
        return SearchPage(lexical.hits[offset:want], lexical.total, lexical.suggestion,
                          lexical.mode, total_estimated=lexical.total_estimated)
    # The neighbour prior is applied once, to the fused scores.
    lexical = index.search(query, limit=n, include_inactive=include_inactive, filters=filters,
                           neighbours=False)
    q = embedder.embed([" ".join(pq.words + pq.phrases)])[0]     # the text, not its filters
    sims = matrix @ q
    k = min(n, len(paths))
    near = np.argpartition(-sims, k - 1)[:k]
    # A memory found by its vector alone must be somewhat similar: the nearest vectors
    # of a query about something the vault does not hold are noise.
    cosine = {paths[i]: float(sims[i]) for i in near if sims[i] >= MIN_COSINE}
    for h in lexical.hits:                 # the lexical hits' own similarity, when they have one
        row = rows.get(h.path)
        if row is not None:
            cosine.setdefault(h.path, float(sims[row]))
    found = {h.path: h for h in lexical.hits}
    extra = [p for p in cosine if p not in found]
    allowed = {h.path: h for h in index.hits_for(query, extra, include_inactive=include_inactive,
                                                 filters=filters)}
    cosine = {p: c for p, c in cosine.items() if p in found or p in allowed}
    scores = fuse([(h.path, h.score) for h in lexical.hits], cosine, weight, method)
    cfg = index.cfg
    if cfg.neighbour_weight and len(scores) > 1:
        scores = neighbour_prior(scores, index.linked, cfg.neighbour_weight, cfg.neighbour_depth)
    ranked = sorted(scores, key=lambda p: (-scores[p], p))[offset:want]
    hits = []
    for p in ranked:
        h = found.get(p) or allowed[p]
        h.score = round(scores[p], 4)
        hits.append(h)
    return SearchPage(hits, lexical.total + len(allowed), None if hits else lexical.suggestion,
                      "hybrid", total_estimated=lexical.total_estimated)
