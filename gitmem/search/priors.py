"""Ranking arithmetic for natural queries, on plain score maps (``{document: score}``):
per-word maps combined by the natural-query policy (:func:`combine_natural`), and the
priors that let related memories lend each other score: the group prior (memories
sharing a ``source``) and the neighbour prior (memories a few ``follows`` links apart).
:mod:`gitmem.search.rank` applies them to document numbers, :mod:`gitmem.search.hybrid`
the neighbour prior to paths after fusion."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from typing import TypeVar

__all__ = ["NEIGHBOUR_POOL", "combine_natural", "add_scores", "neighbour_prior", "group_prior"]

NEIGHBOUR_POOL = 20           # the best this many memories take part in the neighbour prior
K = TypeVar("K", bound=Hashable)


def combine_natural(units: list[dict[int, float]], extras: list[dict[int, float]],
                    allow: set[int] | None, restrict: set[int] | None, policy: str,
                    all_boost: float) -> tuple[dict[int, float], set[int], str]:
    """Per-word score maps -> (scores, documents to rank first, mode).

    ``units`` hold one map per query word or phrase (a document matches when it is in any),
    ``extras`` only add to documents the words matched (e.g. the date field).  ``allow`` and
    ``restrict`` are the filter and the hidden documents.  Policies: ``all-first`` ranks the
    documents containing every word first, ``all-then-any`` keeps only those when there are
    any, ``all-boost`` multiplies their score by ``1 + all_boost``, ``any`` ranks by score."""
    scores = add_scores(units)
    if allow is not None or restrict:
        scores = {d: v for d, v in scores.items()
                  if (allow is None or d in allow) and not (restrict and d in restrict)}
    for u in extras:
        for d, v in u.items():
            if d in scores:
                scores[d] += v
    everywhere = set(scores).intersection(*units[1:]) if len(units) > 1 else set(scores)
    mode = "all-words" if everywhere else "any-words"
    if policy == "all-then-any" and everywhere:
        scores = {d: scores[d] for d in everywhere}
    elif policy == "all-boost":
        for d in everywhere:
            scores[d] *= 1 + all_boost
    return scores, (everywhere if policy == "all-first" else set()), mode


def add_scores(maps: list[dict[int, float]]) -> dict[int, float]:
    """The union of score maps, adding the scores of documents in several."""
    if not maps:
        return {}
    out = dict(maps[0])
    for m in maps[1:]:
        for d, v in m.items():
            out[d] = out.get(d, 0.0) + v
    return out


def neighbour_prior(scores: dict[K, float], linked: Callable[[set[K]], dict[K, list[K]]],
                    weight: float, depth: int, pool: int = NEIGHBOUR_POOL) -> dict[K, float]:
    """Each of the best ``pool`` memories gains ``weight`` x the best score among the
    memories up to ``depth`` ``follows`` links away (``linked`` gives each memory's
    neighbours one link away): in a conversation the words of a question are often in the
    turn before or after the one that answers it.  Only the pool is looked at, so the cost
    is a few lookups per pool member, whatever the size of the vault.  Memories are
    document numbers (lexical search) or paths (hybrid search, after fusion)."""
    best = heapq.nlargest(pool, scores, key=scores.__getitem__)
    hops: dict[K, list[K]] = {}
    reach = {d: {d} for d in best}
    frontier = {d: {d} for d in best}
    for _ in range(depth):
        hops.update(linked({n for f in frontier.values() for n in f if n not in hops}))
        frontier = {d: {m for n in f for m in hops.get(n, ())} - reach[d] for d, f in frontier.items()}
        for d, f in frontier.items():
            reach[d] |= f
    out = dict(scores)
    for d in best:
        out[d] += weight * max((scores.get(n, 0.0) for n in reach[d] if n != d), default=0.0)
    return out


def group_prior(scores: dict[int, float], source: dict[int, str], weight: float,
                depth: int) -> dict[int, float]:
    """Add ``weight`` x (sum of the best ``depth`` scores of the document's group) to each
    score: a hit among related hits (same conversation, same session) outranks a lone one."""
    groups: dict[str, list[float]] = {}
    for d, v in scores.items():
        if source.get(d):
            groups.setdefault(source[d], []).append(v)
    best = {g: sum(sorted(v, reverse=True)[:depth]) for g, v in groups.items()}
    return {d: v + weight * best[source[d]] if source.get(d) else v for d, v in scores.items()}
