"""Evaluating and ranking queries from the postings of the search index, without Whoosh.

:mod:`gitmem.search.index` (the one module that imports Whoosh) passes its reader objects in;
this module only calls their methods (``leaf_readers()``, ``doc_frequency()``,
``postings()``, ``doc_field_length()``, ``column_reader()``, ``expand_prefix()``,
``terms_within()``, ``deleted_docs_set``), and asks it for the documents of a metadata
filter through a callback.

- Words are scored with Whoosh's BM25F formula, a posting block at a time: several times
  faster than Whoosh's matchers in pure Python, exact totals, the same ranking for every page.
- A phrase reads its words' document ids (rarest word first, later words only in the
  blocks that can hold a candidate), intersects them, and reads weights and positions
  only of the documents holding every word; positions are stored as machine arrays
  (``gitmem.search.index``), so the check is a few C calls per document.  Whoosh's span
  matcher spent ~27 µs per such document (0.3 s for two words that are in most memories).
  A phrase scores what Whoosh gave it: the sum of its words' scores (a repeated word
  counts twice).
- A group prior: memories sharing ``source`` (a conversation, a session) lend each other
  30% of the sum of their group's best three scores.
- The author: a word (or two or three words in a row) of a natural query that is a
  memory's ``agent`` (its author or speaker) adds ``SearchConfig.agent_boost`` x that
  field's idf to the matched memories by that author ("what did Ann say about X" prefers
  Ann's own memories about X to memories that mention Ann).
- Natural queries (plain words and phrases) are ranked by ``SearchConfig.natural``
  (default: by score over any-word matches; ``mode`` tells whether a document holds
  every word); operators, parentheses or a prefix switch to strict boolean meaning
  (``mode="syntax"``).  ``SearchConfig.pair_weight`` adds proximity: adjacent query
  words adjacent in a document add their phrase score.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import add, neg as neg_, not_, truediv
from typing import Any, Callable, Protocol

from gitmem.search import query as sq

__all__ = ["PREFIX_EXPANSION_LIMIT", "blocks", "hit", "Ranker"]

PREFIX_EXPANSION_LIMIT = 50   # a prefix becomes at most this many (most frequent) words
TEXT = "text"                 # the positional, weighted text field
_WORDS = re.compile(r"\w+")


class Analysis(Protocol):
    """The index's tokenisation (``gitmem.search.index``)."""

    def tokens(self, text: str) -> list[str]: ...
    def stems(self, text: str) -> list[str]: ...
    def stem(self, word: str) -> str: ...


def blocks(matcher: Any, values: bool = False,
           wanted: Sequence[int] | None = None) -> Iterable[tuple[Sequence, Sequence, Sequence]]:
    """(ids, weights, values or ()) of a leaf posting list, a block at a time.

    ``wanted`` (sorted segment-local ids) skips blocks holding none of them without
    decoding them.  Uses the block internals of whoosh-reloaded's codec (its version is
    pinned by the distribution check); other matchers take a posting-at-a-time path."""
    m = getattr(matcher, "child", matcher)      # deletions are filtered by the caller
    if all(hasattr(m, a) for a in ("_read_ids", "_read_weights", "_next_block", "_maxid")):
        low = -1
        while m.is_active():
            high = m._maxid
            if wanted is None or bisect_right(wanted, high) > bisect_right(wanted, low):
                if m._ids is None:
                    m._read_ids()
                if m._weights is None:
                    m._read_weights()
                if values and m._values is None:
                    m._read_values()
                yield m._ids, m._weights, (m._values if values else ())
            low = high
            m._next_block()
    else:                                       # e.g. a short list inlined in the term info
        ids, weights, vals = [], [], []
        while m.is_active():
            ids.append(m.id())
            weights.append(m.weight())
            if values:
                vals.append(m.value())
            m.next()
        yield ids, weights, vals


def postings_for(matcher: Any, wanted: Sequence[int]) -> tuple[dict[int, float], dict[int, bytes]]:
    """Weights and values of a leaf posting list's postings for the documents in
    ``wanted`` (sorted segment-local ids, all of which hold the term): only the blocks
    holding one are read, and only the wanted values are cut out of a block (with
    ``values_at``, gitmem's codec) instead of every value of it."""
    m = getattr(matcher, "child", matcher)
    cut = getattr(m, "values_at", None)     # called while ``blocks`` holds m at a block
    wts: dict[int, float] = {}
    vals: dict[int, bytes] = {}
    for ids, ws, vs in blocks(m, cut is None, wanted):
        here = wanted[bisect_left(wanted, ids[0]):bisect_right(wanted, ids[-1])]
        # Where the wanted ids sit in the block: a C-level scan each for a few, one
        # id -> index map for many.
        at = [ids.index(d) for d in here] if len(here) < 16 else \
            list(map(dict(zip(ids, range(len(ids)))).__getitem__, here))
        wts.update(zip(here, map(ws.__getitem__, at)))
        vals.update(zip(here, cut(at) if cut else map(vs.__getitem__, at)))
    return wts, vals


class Ranker:
    """BM25F term and phrase scores and the final ordering (group prior, top k)."""

    def __init__(self, cfg: sq.SearchConfig, an: Analysis) -> None:
        self.cfg = cfg
        self.an = an
        self._leaf_cache: dict[Any, tuple[list[int], list[str]]] = {}
        self._norm_cache: dict[Any, list[float]] = {}

    def leaf_info(self, leaf: Any) -> tuple[list[int], list[str]]:
        """Per-segment ``text`` lengths and ``source`` values (``[]`` when no document of
        the segment has one), cached per segment (segments never change; their
        deletions are read on every query)."""
        key = leaf.segment().segment_id()
        if key not in self._leaf_cache:
            if len(self._leaf_cache) > 64:
                self._leaf_cache.clear()
            n = leaf.doc_count_all()
            sources = list(leaf.column_reader("source"))
            self._leaf_cache[key] = ([leaf.doc_field_length(i, TEXT, 0) for i in range(n)],
                                     sources if any(sources) else [])
        return self._leaf_cache[key]

    def norms(self, leaf: Any, avgfl: float, b: float) -> list[float]:
        """BM25's length norm ``k1 * ((1 - b) + b * length / avgfl)`` of every document of
        a segment (cached for the current average length)."""
        key = (leaf.segment().segment_id(), avgfl, b)
        if key not in self._norm_cache:
            if len(self._norm_cache) > 64:
                self._norm_cache.clear()
            k1 = self.cfg.k1
            self._norm_cache[key] = [k1 * ((1 - b) + b * n / avgfl)
                                     for n in self.leaf_info(leaf)[0]]
        return self._norm_cache[key]

    def term_scores(self, r: Any, fieldname: str, text: str, boost: float = 1.0,
                    b: float | None = None) -> dict[int, float]:
        """BM25 scores (Whoosh's formula) of every live document containing the term.

        ``idf * (k1 + 1) * w / (w + norm)`` is computed by C-level ``map`` calls over a
        block of postings (no Python frame per posting)."""
        b = self.cfg.b if b is None else b
        df = r.doc_frequency(fieldname, text)
        if not df:
            return {}
        k1, n_all = self.cfg.k1, r.doc_count_all()
        scale = (math.log(n_all / (df + 1)) + 1) * boost * (k1 + 1)
        avgfl = (r.field_length(fieldname) / n_all) or 1.0
        out: dict[int, float] = {}
        for leaf, base in r.leaf_readers():
            if not leaf.doc_frequency(fieldname, text):
                continue
            norm = self.norms(leaf, avgfl, b).__getitem__ if b else None
            for ids, weights, _ in blocks(leaf.postings(fieldname, text)):
                ns = map(norm, ids) if norm else repeat(k1)
                out.update(zip(map(base.__add__, ids) if base else ids,
                               map(scale.__mul__, map(truediv, weights,
                                                      map(add, weights, ns)))))
            if leaf.has_deletions():
                for i in leaf.deleted_docs_set:
                    out.pop(base + i, None)
        return out

    def _idf(self, r: Any, fieldname: str, text: str, boost: float = 1.0) -> float:
        df = r.doc_frequency(fieldname, text)
        return (math.log(r.doc_count_all() / (df + 1)) + 1) * boost if df else 0.0

    def phrase_scores(self, r: Any, stems: Sequence[str]) -> dict[int, float]:
        """Scores of the live documents containing ``stems`` (two or more) as adjacent
        words in this order: the sum of the words' BM25 scores, as Whoosh scores a phrase."""
        k1, b, n_all = self.cfg.k1, self.cfg.b, r.doc_count_all()
        avgfl = ((r.field_length(TEXT) / n_all) if n_all else 0.0) or 1.0
        idf = {st: self._idf(r, TEXT, st) * n for st, n in Counter(stems).items()}
        out: dict[int, float] = {}
        if not all(idf.values()):
            return out
        for leaf, base in r.leaf_readers():
            docs, weights = self._phrase_in(leaf, stems)
            if not docs:
                continue
            norms = self.norms(leaf, avgfl, b) if b else None
            for d in docs:
                norm = norms[d] if norms else k1
                out[base + d] = sum(idf[st] * w[d] * (k1 + 1) / (w[d] + norm)
                                    for st, w in weights.items())
        return out

    @staticmethod
    def _phrase_in(leaf: Any, stems: Sequence[str]) -> tuple[list[int], dict[str, dict]]:
        """Documents of one segment holding the phrase, and each word's posting weights.

        Document ids are read first, rarest word first, later words only in the blocks
        that can hold a candidate; then weights and positions only of the documents
        holding every word (``postings_for``).  For two words the position check runs
        as C-level ``map`` calls (decode, set, isdisjoint): no Python frame per document."""
        dfs = sorted((leaf.doc_frequency(TEXT, st), st) for st in set(stems))
        if not dfs[0][0]:
            return [], {}
        # First the documents holding every word (ids only), then the weights and
        # positions of just those documents.
        docs: set[int] | None = None
        for _, st in dfs:
            wanted = None if docs is None else sorted(docs)
            found: set[int] = set()
            for ids, _, _ in blocks(leaf.postings(TEXT, st), False, wanted):
                found.update(ids)
            docs = found if docs is None else docs & found
            if not docs:
                return [], {}
        if leaf.has_deletions():
            docs -= leaf.deleted_docs_set           # type: ignore[operator]
        order = sorted(docs or ())
        weights: dict[str, dict[int, float]] = {}
        values: dict[str, dict[int, bytes]] = {}
        for _, st in dfs:
            weights[st], values[st] = postings_for(leaf.postings(TEXT, st), order)
        fmt = leaf.schema[TEXT].format
        decode = getattr(fmt, "positions_array", fmt.decode_positions)
        cands = order
        firsts = map(set, map(decode, map(values[stems[0]].__getitem__, cands)))
        if len(stems) == 2:
            seconds = map(decode, map(values[stems[1]].__getitem__, cands))
            apart = map(set.isdisjoint, firsts, map(map, repeat((-1).__add__), seconds))
            return list(compress(cands, map(not_, apart))), weights
        rest = [(values[st], (-k).__add__) for k, st in enumerate(stems[1:], 1)]

        def holds(d: int, starts: set[int]) -> bool:
            for post, back in rest:
                starts.intersection_update(map(back, decode(post[d])))
                if not starts:
                    return False
            return True
        return list(compress(cands, map(holds, cands, firsts))), weights

    def top(self, r: Any, scores: dict[int, float], want: int,
            first: set[int] | frozenset = frozenset()) -> list[tuple[int, float]]:
        """The best ``want`` (docnum, score), documents in ``first`` ahead, after the
        group prior (memories sharing a ``source`` lend each other score)."""
        if self.cfg.group_weight and len(scores) > 1:
            src: dict[int, str] = {}
            for leaf, base in r.leaf_readers():
                sources = self.leaf_info(leaf)[1]
                if sources:                     # most vaults have no ``source`` at all
                    hi = base + len(sources)
                    src.update((d, sources[d - base]) for d in scores if base <= d < hi)
            if src:
                scores = sq.group_prior(scores, src, self.cfg.group_weight,
                                        self.cfg.group_depth)
        order = getattr(r, "order", None)
        if order is not None:   # a snapshot's reader: equal scores in path order, as when fresh
            return heapq.nlargest(want, scores.items(),
                                  key=lambda x: (x[0] in first, x[1], -order[x[0]]))
        if len(first) in (0, len(scores)):     # no all-words tier to put first: C-level keys
            return [(-neg, v) for v, neg in heapq.nlargest(want, zip(scores.values(),
                                                                     map(neg_, scores)))]
        return heapq.nlargest(want, scores.items(), key=lambda x: (x[0] in first, x[1], -x[0]))

    # --- queries ---------------------------------------------------------------------------

    def prefix_terms(self, r: Any, prefix: str) -> list[str]:
        """The words ``prefix*`` expands to: the PREFIX_EXPANSION_LIMIT most frequent."""
        found = [(r.doc_frequency("words", t), t) for t in r.expand_prefix("words", prefix.lower())]
        top = heapq.nsmallest(PREFIX_EXPANSION_LIMIT, found, key=lambda x: (-x[0], x[1]))
        return [t if isinstance(t, str) else t.decode() for _, t in top]

    def evaluate(self, r: Any, n: Any, hl: set[str], docs_of: Callable[[Any], set[int]],
                 live: Callable[[], set[int]]) -> dict[int, float] | None:
        """Score every document matching a syntax node (None when the node analyses to
        nothing, e.g. a stop word).  ``docs_of(node)`` gives the documents of a metadata
        filter node, ``live()`` every live document; ``hl`` collects the matched stems."""
        if isinstance(n, (sq.Word, sq.Phrase)):
            stems = self.an.stems(n.text)
            hl.update(stems)
            if len(stems) > 1:
                return self.phrase_scores(r, stems)
            return self.term_scores(r, TEXT, stems[0]) if stems else None
        if isinstance(n, sq.Prefix):
            stems = dict.fromkeys(self.an.stem(t) for t in self.prefix_terms(r, n.text))
            hl.update(stems)
            return sq.add_scores([self.term_scores(r, TEXT, t) for t in stems])
        if isinstance(n, (sq.FieldTerm, sq.DateRange)):
            return dict.fromkeys(docs_of(n), 0.5)
        if isinstance(n, sq.Not):
            inner = self.evaluate(r, n.item, set(), docs_of, live)
            return None if inner is None else dict.fromkeys(live().difference(inner), 0.0)
        if isinstance(n, sq.And) and any(not isinstance(c, sq.Not) for c in n.items):
            # "a NOT b": drop b's documents from a's instead of intersecting a with
            # the complement of b (a set of every document); same result and scores.
            parts, minus = [], []
            for c in n.items:
                if isinstance(c, sq.Not):
                    inner = self.evaluate(r, c.item, set(), docs_of, live)
                    if inner is not None:
                        minus.append(inner)
                else:
                    part = self.evaluate(r, c, hl, docs_of, live)
                    if part is not None:
                        parts.append(part)
            if not parts:
                return {d: 0.0 for d in live().difference(*minus)} if minus else None
            both = set(parts[0]).intersection(*parts[1:]).difference(*minus)
            return {d: sum(p[d] for p in parts) for d in both}
        parts = [p for p in (self.evaluate(r, c, hl, docs_of, live) for c in n.items)
                 if p is not None]
        if not parts or isinstance(n, sq.Or):
            return sq.add_scores(parts) if parts else None
        both = set(parts[0]).intersection(*parts[1:])
        return {d: sum(p[d] for p in parts) for d in both}

    def rank_syntax(self, r: Any, pq: sq.ParsedQuery, hl: set[str], allow: set[int] | None,
                    restrict: set[int] | None, want: int, docs_of: Callable[[Any], set[int]],
                    live: Callable[[], set[int]]) -> tuple[list, int, str]:
        """A query with operators: strict boolean meaning, ranked by score."""
        scores = self.evaluate(r, pq.expr, hl, docs_of, live) or {}
        if allow is not None or restrict:
            scores = {d: v for d, v in scores.items()
                      if (allow is None or d in allow) and not (restrict and d in restrict)}
        return self.top(r, scores, want), len(scores), "syntax"

    def rank_natural(self, r: Any, pq: sq.ParsedQuery, hl: set[str], allow: set[int] | None,
                     restrict: set[int] | None, want: int) -> tuple[list, int, str]:
        """Plain words and phrases: all-word matches first (see SearchConfig.natural)."""
        c = self.cfg
        text = " ".join(pq.words)
        toks = self.an.tokens(text)
        if c.question_stop:
            toks = [t for t in toks if t not in sq.QUESTION_WORDS] or toks
        stems = list(dict.fromkeys(self.an.stem(t) for t in toks))
        hl.update(stems)
        units = [self.term_scores(r, TEXT, st) for st in stems]
        for ph in pq.phrases:
            words = self.an.stems(ph)
            hl.update(words)
            if len(words) > 1:
                units.append(self.phrase_scores(r, words))
            elif words:
                units.append(self.term_scores(r, TEXT, words[0]))
        extras = [self.term_scores(r, "when", w, c.date_boost, 0.0)
                  for w in dict.fromkeys(_WORDS.findall(text.lower()))
                  if c.date_boost and r.doc_frequency("when", w)]
        if c.agent_boost:
            # The author as its own field: a query word that is a memory's author lifts
            # the memories the query matched that this author wrote, apart from the
            # same word in a text (a name said to someone).
            names = (" ".join(toks[i:i + n]) for n in (1, 2, 3) for i in range(len(toks) - n + 1))
            for w in dict.fromkeys(names):
                if r.doc_frequency("agent", w):
                    extras.append(self.term_scores(r, "agent", w, c.agent_boost, 0.0))
        if c.pair_weight:
            # Proximity: query words written next to each other that are also next to
            # each other in a memory add the pair's phrase score (times pair_weight).
            seq = [self.an.stem(t) for t in toks]
            for a, b in dict.fromkeys(zip(seq, seq[1:])):
                pair = self.phrase_scores(r, [a, b]) if a != b else {}
                extras.append({d: v * c.pair_weight for d, v in pair.items()})
        scores, first, mode = sq.combine_natural(units, extras, allow, restrict, c.natural,
                                                 c.all_boost)
        return self.top(r, scores, want, first), len(scores), mode

    def suggest(self, r: Any, pq: sq.ParsedQuery, query: str) -> str | None:
        """The query with unknown words replaced by the closest indexed words, if any."""
        text = " ".join(pq.texts())
        fixes: dict[str, str] = {}
        for w in dict.fromkeys(self.an.tokens(text)):
            if len(w) < 3 or w.isdigit() or r.doc_frequency("words", w):
                continue
            found = [(sq.edit_distance(w, c), -df, c) for c, df in
                     ((c, r.doc_frequency("words", c)) for c in
                      (x if isinstance(x, str) else x.decode()
                       for x in r.terms_within("words", w, 2, prefix=1))) if df]
            if found:
                fixes[w] = min(found)[2]
        if not fixes:
            return None
        fix = functools.partial(re.sub, r"\w+", lambda m: fixes.get(m[0].lower(), m[0]))
        return "".join(p if ":" in p else fix(p) for p in re.split(r"(\s+)", query))


def hit(f: dict[str, Any], score: float, snippet: Callable[[str, str, str], str]) -> sq.SearchHit:
    """A result from a document's stored fields."""
    return sq.SearchHit(id=f.get("id", ""), path=f["path"], title=f.get("title", ""),
                        tier=f.get("tier", ""), type=f.get("type", ""),
                        tags=list(f.get("taglist") or []), score=round(float(score), 4),
                        updated=f.get("updated_iso"),
                        snippet=snippet(f.get("body", ""), f.get("title", ""),
                                        f.get("context", "")))
