"""Evaluating and ranking queries from the postings of the search index: the ranking knobs
(:class:`SearchConfig`), BM25F scores, phrases, the day and when priors, and the final
ordering (the natural-query policy and the group and neighbour priors are in
:mod:`gitmem.search.priors`).

This module works on plain data.  :mod:`gitmem.search.whoosh` (the package that fences
Whoosh in) hands over a :class:`Postings` view of the index: its statistics and its
:class:`Segment` objects, whose ``blocks()`` give a term's postings as plain arrays (document
ids, weights, values) a block of up to 128 postings at a time; metadata filters are answered
by the index through a callback.

- Words are scored with BM25F (the formula Whoosh's ``BM25F`` uses), a posting block at a
  time: several times faster than Whoosh's matchers in pure Python, exact totals, the same
  ranking for every page.
- A phrase reads its words' document ids and weights (rarest word first, later words only
  in the blocks that can hold a candidate), intersects and scores them as numpy arrays,
  and reads positions only of the documents holding every word, from the blocks already
  read; positions are stored as machine arrays
  (``gitmem.search.whoosh.schema``), so the check is a few C calls per document.  Whoosh's span
  matcher spent ~27 µs per such document (0.3 s for two words that are in most memories).
  A phrase scores what Whoosh gave it: the sum of its words' scores (a repeated word
  counts twice), so a query that is one phrase checks positions lazily, best candidate
  first, until its page is full (:meth:`Ranker.rank_phrase`; two words in nearly every one
  of 100,000 memories: 60,000 documents to check otherwise).
- A prefix's words (up to :data:`PREFIX_EXPANSION_LIMIT`) are scored and summed as numpy
  arrays, a segment at a time.  numpy is imported by the first phrase or prefix query.
- A group prior: memories sharing ``source`` (a conversation, a session) lend each other
  30% of the sum of their group's best three scores.
- A day the query names ("on 16 November 2023"): the memories created that day or in the
  week after, which may tell of it, are lifted (``SearchConfig.day_boost``); a question
  asking when lifts the memories whose text tells a time (``SearchConfig.when_boost``).
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
from array import array
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from itertools import compress, repeat
from operator import add, truediv
from operator import neg as neg_
from typing import Any, Protocol

from . import query as sq
from .priors import add_scores, combine_natural, group_prior, neighbour_prior

__all__ = ["PREFIX_EXPANSION_LIMIT", "DAY_WINDOW", "Estimate", "LAZY_PHRASE_POSITIONS", "PHRASE_SAMPLE",
           "PHRASE_SAMPLE_MATCHES", "TEXT", "numpy",
           "SearchConfig", "Analysis", "Blocks", "Segment", "Postings",
           "Ranker", "edit_distance", "holders"]

PREFIX_EXPANSION_LIMIT = 50   # a prefix becomes at most this many (most frequent) words
LAZY_PHRASE_POSITIONS = 1_000_000   # a lone phrase whose words have more positions is checked lazily
PHRASE_SAMPLE = 500           # ... its total estimated from about this many of those memories,
PHRASE_SAMPLE_MATCHES = 100   # ... or more, until that many of them hold the phrase (~10%)
DAY_WINDOW = 7                # days after a named day whose memories may tell of it
TEXT = "text"                 # the positional, weighted text field
_WORDS = re.compile(r"\w+")


@dataclass(frozen=True)
class SearchConfig:
    """Ranking knobs; the defaults are the measured best (``bench/retrieval.py``).  The
    title, meta, agent and context weights, ``stemmer`` and ``verb_forms`` shape the index
    (they are in its stamp, :meth:`schema_key`); the others apply at query time."""
    b: float = 0.25                  # BM25 length normalisation (memories are short)
    k1: float = 0.8
    title_weight: float = 1.0        # a title word counts as this many body words ...
    named_title_weight: float = 3.0  # ... and this many when the title is not the text's start
    meta_weight: float = 2.0         # tags and entities
    agent_weight: float = 1.0        # the author / speaker
    stemmer: str = "porter2"         # porter2 | porter | none
    verb_forms: bool = True          # irregular past forms count as their verb (went -> go)
    date_boost: float = 1.0          # month/year of ``created`` matching query words
    day_boost: float = 0.5           # a day the query names: memories created then or the week after
    when_boost: float = 0.1          # a question asking when: memories whose text tells a time
    group_weight: float = 0.3        # 0 disables the group prior
    group_depth: int = 3             # a group's score = sum of its best N member scores
    natural: str = "any"             # any | all-first | all-then-any | all-boost
    all_boost: float = 1.0           # natural="all-boost": extra weight of all-word matches
    question_stop: bool = True       # drop question words (what, did, ...) from natural queries
    context_weight: float = 0.3      # a word of the context (followed memory) counts this much
    pair_weight: float = 0.0         # natural queries: bonus x score of adjacent query word pairs
    agent_boost: float = 4.0         # natural queries: a query word that is the author's name
    neighbour_weight: float = 0.1    # natural queries: a top memory gains this x the best score ...
    neighbour_depth: int = 2         # ... of the memories up to this many ``follows`` links away

    def schema_key(self) -> str:
        return (f"{self.stemmer}{'+verbs' if self.verb_forms else ''}:{self.title_weight}"
                f":{self.named_title_weight}:{self.meta_weight}"
                f":{self.agent_weight}:{self.context_weight}")


class Analysis(Protocol):
    """The index's tokenisation (``gitmem.search.whoosh.schema.Analysis``)."""

    def tokens(self, text: str) -> list[str]: ...
    def stems(self, text: str) -> list[str]: ...
    def stem(self, word: str) -> str: ...


class Blocks(Protocol):
    """Blocks of a term's postings read for a query (:meth:`Segment.read`)."""

    ids: list[Sequence[int]]            # per block: its documents (segment-local, ascending)
    weights: list[Sequence[float]]      # ... and their weights

    def values_for(self, wanted: Sequence[int]) -> dict[int, bytes]:
        """The posting values (``text``: positions) of ``wanted`` (sorted ids, each in a
        block read)."""
        ...

    def positions(self, wanted: Sequence[int] | None = None) -> tuple[Any, Any, Any]:
        """Every posting of the blocks read, or only those of ``wanted`` (sorted ids), as
        numpy arrays: (ids, how many positions each has, all their positions one after
        another)."""
        ...

    def position_count(self) -> int:
        """How many positions the blocks read hold."""
        ...

    def joined(self) -> tuple[array, array]:
        """Every id and weight of the blocks read, in order, as buffers (``array("I")``
        and ``array("f")``: numpy reads them without a copy)."""
        ...


class Segment(Protocol):
    """One segment of the index, as :mod:`gitmem.search.whoosh.postings` hands it over.  Document
    numbers are local to the segment (``base`` + local = number in the whole index);
    segments never change (their deletions do: a new view is made then)."""

    key: Hashable                       # the segment's identity (for caches)
    base: int                           # number of its first document in the whole index
    deleted: frozenset[int]             # its deleted documents (empty when none)
    #: the positions of a ``text`` posting's value (a sequence of ints)
    positions: Callable[[bytes], Sequence[int]]

    def doc_frequency(self, fieldname: str, text: str) -> int:
        """How many documents of the segment hold the term (deleted ones included)."""
        ...

    def blocks(self, fieldname: str, text: str) -> Iterable[tuple[Sequence[int], Sequence[float], Any]]:
        """The term's postings, a block at a time: (ids, weights, ``()``), deleted documents
        included (:meth:`read` keeps them, with their values)."""
        ...

    def read(self, fieldname: str, text: str, wanted: Sequence[int] | None = None) -> Blocks:
        """The term's postings: every block, or only the blocks holding one of ``wanted``
        (sorted ids)."""
        ...

    def text_lengths(self) -> list[int]:
        """The ``text`` length of every document of the segment."""
        ...

    def sources(self) -> list[str]:
        """The ``source`` of every document of the segment."""
        ...

    def context_starts(self) -> list[int]:
        """Of every document of the segment, the ``text`` position where its context
        starts (0: it has none)."""
        ...

    def has_links(self) -> bool:
        """Whether a document of the segment follows another (has a ``follows`` value;
        deleted ones included)."""
        ...


class Postings(Protocol):
    """The index as the ranker reads it (statistics count the whole index, or the
    documents of a snapshot when searching the vault as of a commit)."""

    #: document number -> rank of its path, when equal scores go in path order; else None
    order: Sequence[int] | None

    def segments(self) -> Sequence[Segment]: ...
    def doc_count_all(self) -> int: ...
    def field_length(self, fieldname: str) -> int: ...
    def doc_frequency(self, fieldname: str, text: str) -> int: ...
    def prefix_frequencies(self, fieldname: str, prefix: str) -> dict[str, int]:
        """Every term of the field starting with ``prefix``, with its document frequency."""
        ...
    def terms_within(self, fieldname: str, text: str, maxdist: int,
                     prefix: int = 0) -> Iterable[str]: ...
    def linked(self, docs: Iterable[int]) -> dict[int, list[int]]:
        """Each document's live neighbours one ``follows`` link away (the memory it
        follows and those that follow it)."""
        ...


class Estimate(int):
    """A total of matches estimated from a sample (:meth:`Ranker.rank_phrase`), not counted."""


def numpy() -> Any:
    """numpy, imported when a query first needs it (importing it takes ~80 ms: a plain
    word query, the most common, does without)."""
    import numpy as np
    return np


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (for ranking spelling suggestions)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


class Ranker:
    """BM25F term and phrase scores and the final ordering (group prior, top k)."""

    def __init__(self, cfg: SearchConfig, an: Analysis) -> None:
        self.cfg = cfg
        self.an = an
        self._segment_cache: dict[Any, tuple[list[int], list[str], list[int]]] = {}
        # segment -> ((average length, b), norms, the norms as numpy or None)
        self._norm_cache: dict[Any, tuple[tuple[float, float], array, Any]] = {}
        self._links_cache: dict[Any, bool] = {}

    def segment_info(self, seg: Segment) -> tuple[list[int], list[str], list[int]]:
        """Per-segment ``text`` lengths, ``source`` values and context starts (each ``[]``
        when no document of the segment has one), cached per segment (segments never
        change; their deletions are read on every query)."""
        key = seg.key
        if key not in self._segment_cache:
            if len(self._segment_cache) > 64:
                self._segment_cache.clear()
            sources, starts = seg.sources(), seg.context_starts()
            self._segment_cache[key] = (seg.text_lengths(), sources if any(sources) else [],
                                        starts if any(starts) else [])
        return self._segment_cache[key]

    def norms(self, seg: Segment, avgfl: float, b: float) -> array:
        """BM25's length norm ``k1 * ((1 - b) + b * length / avgfl)`` of every document of
        a segment, as doubles, cached per segment for the current average length only (every
        write changes it: a long-lived process would otherwise keep one copy per write)."""
        held = self._norm_cache.get(seg.key)
        if held is None or held[0] != (avgfl, b):
            if len(self._norm_cache) > 64:
                self._norm_cache.clear()
            k1 = self.cfg.k1
            held = ((avgfl, b), array("d", [k1 * ((1 - b) + b * n / avgfl)
                                            for n in self.segment_info(seg)[0]]), None)
            self._norm_cache[seg.key] = held
        return held[1]

    def dense_norms(self, seg: Segment, avgfl: float, b: float) -> Any:
        """:meth:`norms` as a numpy array over the same memory (read-only)."""
        norms = self.norms(seg, avgfl, b)
        stamp, _, dense = self._norm_cache[seg.key]
        if dense is None:
            dense = numpy().frombuffer(norms, dtype="float64")
            dense.flags.writeable = False
            self._norm_cache[seg.key] = (stamp, norms, dense)
        return dense

    def term_scores(self, r: Postings, fieldname: str, text: str, boost: float = 1.0,
                    b: float | None = None) -> dict[int, float]:
        """BM25 scores (Whoosh's BM25F formula) of every live document containing the term.

        ``idf * (k1 + 1) * w / (w + norm)`` is computed by C-level ``map`` calls over a
        block of postings (no Python frame per posting)."""
        b = self.cfg.b if b is None else b
        out: dict[int, float] = {}
        df = r.doc_frequency(fieldname, text)
        if not df:
            return out
        k1, n_all = self.cfg.k1, r.doc_count_all()
        scale = (math.log(n_all / (df + 1)) + 1) * boost * (k1 + 1)
        avgfl = (r.field_length(fieldname) / n_all) or 1.0
        for seg in r.segments():
            if not seg.doc_frequency(fieldname, text):
                continue
            base = seg.base
            norm = self.norms(seg, avgfl, b).__getitem__ if b else None
            for ids, weights, _ in seg.blocks(fieldname, text):
                ns = map(norm, ids) if norm else repeat(k1)
                docs = map(base.__add__, ids) if base else ids
                scores = map(scale.__mul__, map(truediv, weights, map(add, weights, ns)))
                out.update(zip(docs, scores, strict=True))
            for i in seg.deleted:
                out.pop(base + i, None)
        return out

    def own_text_scores(self, r: Postings, stems: Iterable[str]) -> dict[int, float]:
        """The summed scores of the documents holding any of ``stems`` in their own text:
        ``add_scores`` of each word's :meth:`in_own_text` scores, to the last bit
        (:meth:`own_text_arrays` as a map)."""
        docs, scores = self.own_text_arrays(r, stems)
        return dict(zip(docs.tolist(), scores.tolist(), strict=True))

    def own_text_arrays(self, r: Postings, stems: Iterable[str]) -> tuple[Any, Any]:
        """:meth:`own_text_scores` as two numpy arrays: the documents, ascending, and
        their summed scores.

        A prefix expands to up to :data:`PREFIX_EXPANSION_LIMIT` words, often in most
        memories (hundreds of thousands of postings at 100k), so the sums are numpy
        array operations a segment at a time: each word's scores as :meth:`term_scores`
        computes them, added word by word in order (``bincount`` adds in input order)."""
        np = numpy()
        k1, b, n_all = self.cfg.k1, self.cfg.b, r.doc_count_all()
        scales: dict[str, float] = {}
        for st in dict.fromkeys(stems):
            df = r.doc_frequency(TEXT, st)
            if df:
                scales[st] = (math.log(n_all / (df + 1)) + 1) * (k1 + 1)
        avgfl = (r.field_length(TEXT) / n_all) if n_all else 0.0
        found_docs, found_sums = [np.zeros(0, np.int64)], [np.zeros(0)]
        for seg in r.segments():
            starts = self.segment_info(seg)[2]
            # every word's postings in one pair of arrays (few numpy calls per segment,
            # not per word), each posting with its word's scale
            all_ids, all_ws, sizes, word_scales = array("I"), array("f"), [], []
            for st, scale in scales.items():
                got = seg.read(TEXT, st)          # (none read where the word is not)
                if not got.ids:
                    continue
                ids, ws = got.joined()
                if starts:
                    wanted = [d for d in ids if starts[d]]
                    drop = set(self.context_only(seg, starts, got, wanted)) if wanted else None
                    if drop:
                        keep = [d not in drop for d in ids]
                        ids, ws = array("I", compress(ids, keep)), array("f", compress(ws, keep))
                all_ids += ids
                all_ws += ws
                sizes.append(len(ids))
                word_scales.append(scale)
            if not all_ids:
                continue
            ids = np.frombuffer(all_ids, np.uint32).astype(np.int64)
            w = np.frombuffer(all_ws, np.float32).astype(np.float64)
            norm = k1 if not b else self.dense_norms(seg, avgfl or 1.0, b)[ids]
            part = np.repeat(word_scales, sizes) * (w / (w + norm))
            sums, held = np.bincount(ids, part), np.bincount(ids)
            if seg.deleted:
                gone = np.fromiter(seg.deleted, np.int64, len(seg.deleted))
                held[gone[gone < len(held)]] = 0
            found = np.flatnonzero(held)
            found_docs.append(found + seg.base)
            found_sums.append(sums[found])
        return np.concatenate(found_docs), np.concatenate(found_sums)

    @staticmethod
    def context_only(seg: Segment, starts: Sequence[int], got: Blocks, wanted: Sequence[int]) -> list[int]:
        """Those of ``wanted`` (sorted segment-local ids of documents holding the word of
        ``got``, its blocks holding them) that hold it only in their context: its first
        position is past their context start (``starts``)."""
        decode = seg.positions
        return [d for d, value in got.values_for(wanted).items() if decode(value)[0] >= starts[d]]

    def _idf(self, r: Postings, fieldname: str, text: str, boost: float = 1.0) -> float:
        df = r.doc_frequency(fieldname, text)
        return (math.log(r.doc_count_all() / (df + 1)) + 1) * boost if df else 0.0

    def in_own_text(self, r: Postings, stem: str, scores: dict[int, float]) -> dict[int, float]:
        """``scores`` (of documents holding ``stem``) without the documents that hold it only
        in their context: a quoted word or an operator's word must be the memory's own.
        Only documents with a context are read (the first position of the word in each)."""
        for seg in r.segments():
            starts = self.segment_info(seg)[2]
            if not starts or not seg.doc_frequency(TEXT, stem):
                continue
            base, end = seg.base, seg.base + len(starts)
            wanted = sorted(d - base for d in scores if base <= d < end and starts[d - base])
            if wanted:
                for d in self.context_only(seg, starts, seg.read(TEXT, stem, wanted), wanted):
                    del scores[base + d]
        return scores

    def phrase_scores(self, r: Postings, stems: Sequence[str], own: bool = True) -> dict[int, float]:
        """Scores of the live documents containing ``stems`` (two or more) as adjacent
        words in this order, in their own text (with ``own``; else anywhere, context
        included): the sum of the words' BM25 scores, as Whoosh scores a phrase."""
        np = numpy()
        out: dict[int, float] = {}
        for seg, cands, scores, lists in self.phrase_candidates(r, stems):
            held = np.isin(cands, self.phrase_holders(lists, stems, self.segment_info(seg)[2] if own else []))
            out.update(zip((cands[held] + seg.base).tolist(), scores[held].tolist(), strict=True))
        return out

    def phrase_candidates(self, r: Postings, stems: Sequence[str]) -> Iterator[tuple[Segment, Any, Any,
                                                                                    dict[str, Blocks]]]:
        """Per segment: the live documents holding every word of the phrase (``stems``),
        as a numpy array of sorted segment-local ids, the score each gets if it holds the phrase (the
        sum of its words' BM25 scores: the phrase check only filters), and each word's
        posting blocks read (they hold the candidates' positions).  Segments without a
        candidate are left out.

        Ids and weights are read a block at a time, rarest word first, later words only
        in the blocks that can hold a candidate; intersections and scores are numpy
        array operations (two words in most of 100,000 memories: tens of thousands of
        candidates), a word at a time, rarest first."""
        np = numpy()
        k1, b, n_all = self.cfg.k1, self.cfg.b, r.doc_count_all()
        avgfl = ((r.field_length(TEXT) / n_all) if n_all else 0.0) or 1.0
        idf = {st: self._idf(r, TEXT, st) * n for st, n in Counter(stems).items()}
        if not all(idf.values()):
            return
        for seg in r.segments():
            dfs = sorted((seg.doc_frequency(TEXT, st), st) for st in idf)
            if not dfs[0][0]:
                continue
            lists: dict[str, Blocks] = {}
            weights: dict[str, Any] = {}
            docs: Any = None
            for df, st in dfs:
                # (blocks without a candidate are skipped only when candidates are few:
                # with many, nearly every block holds one)
                wanted = None if docs is None or len(docs) * 8 >= df else docs.tolist()
                got = lists[st] = seg.read(TEXT, st, wanted)
                ids, ws = map(np.asarray, got.joined())
                if not len(ids):                 # (no block held a candidate)
                    docs = ids
                    break
                if docs is None:
                    docs, weights[st] = ids, ws
                    continue
                at = np.minimum(np.searchsorted(ids, docs), len(ids) - 1)
                both = ids[at] == docs
                docs = docs[both]
                weights = {k: v[both] for k, v in weights.items()}
                weights[st] = ws[at[both]]
                if not len(docs):
                    break
            if seg.deleted and len(docs):
                live = ~np.isin(docs, np.fromiter(seg.deleted, np.uint32, len(seg.deleted)))
                docs = docs[live]
                weights = {k: v[live] for k, v in weights.items()}
            if not len(docs):
                continue
            norm = self.dense_norms(seg, avgfl, b)[docs] if b else k1
            scores: Any = None
            for _, st in dfs:                                     # (the order of the sum)
                w = weights[st].astype(np.float64)
                part = idf[st] * w * (k1 + 1) / (w + norm)
                scores = part if scores is None else scores + part
            yield seg, docs.astype(np.int64), scores, lists

    @staticmethod
    def phrase_holders(lists: dict[str, Blocks], stems: Sequence[str], starts: Sequence[int],
                       docs: Sequence[int] | None = None) -> Any:
        """The documents (a sorted numpy array of segment-local ids) holding the phrase:
        among every posting of the blocks read (``lists``: each word's posting blocks), or
        among ``docs`` (sorted ids, each in those blocks).  Where ``starts`` gives a
        document's context start, the phrase must begin before it.

        Every position is checked at once, as arrays: a (document, position) pair of the
        first word starts the phrase when the k-th word has (document, position + k).
        Pairs are sorted integers, so each word's are intersected with the first's in one
        merge (a stable sort of two sorted runs)."""
        np = numpy()
        keys: Any = None
        for k, st in enumerate(stems):
            ids, counts, pos = lists[st].positions(docs)
            doc = np.repeat(ids, counts)
            if k == 0 and starts:
                # (a phrase cannot run from the text into the context: a gap lies between them)
                limit = np.asarray(starts, np.int64)[doc]
                own = (limit == 0) | (pos < limit)
                doc, pos = doc[own], pos[own]
            elif k:
                pos = pos - k
                starting = pos >= 0
                doc, pos = doc[starting], pos[starting]
            here = (doc << 32) | pos
            if keys is None:
                keys = here
            else:
                both = np.concatenate((keys, here))
                both.sort(kind="stable")
                keys = both[1:][both[1:] == both[:-1]]
            if not len(keys):
                break
        return np.unique(keys >> 32)

    def top(self, r: Postings, scores: dict[int, float], want: int,
            first: set[int] | frozenset = frozenset(),
            neighbours: bool = False, lifted: set[int] | frozenset = frozenset()) -> list[tuple[int, float]]:
        """The best ``want`` (docnum, score), documents in ``first`` ahead, after the
        group prior (memories sharing a ``source`` lend each other score), with
        ``neighbours`` the neighbour prior (:meth:`neighbour_prior`), and the ``lifted``
        documents' scores times ``1 + when_boost`` (then ``scores`` is changed in place)."""
        if self.cfg.group_weight and len(scores) > 1:
            src: dict[int, str] = {}
            for seg in r.segments():
                sources = self.segment_info(seg)[1]
                if sources:                     # most vaults have no ``source`` at all
                    base = seg.base
                    hi = base + len(sources)
                    src.update((d, sources[d - base]) for d in scores if base <= d < hi)
            if src:
                scores = group_prior(scores, src, self.cfg.group_weight, self.cfg.group_depth)
        if neighbours and self.cfg.neighbour_weight and len(scores) > 1 and self.any_links(r):
            scores = neighbour_prior(scores, r.linked, self.cfg.neighbour_weight, self.cfg.neighbour_depth)
        if lifted:
            lift = 1.0 + self.cfg.when_boost
            for d in lifted:
                scores[d] *= lift
        order = r.order
        if order is not None:   # a snapshot: equal scores in path order, as in a fresh index
            return heapq.nlargest(want, scores.items(),
                                  key=lambda x: (x[0] in first, x[1], -order[x[0]]))
        if len(first) in (0, len(scores)):     # no all-words tier to put first: C-level keys
            return [(-neg, v) for v, neg in heapq.nlargest(want, zip(scores.values(),
                                                                     map(neg_, scores), strict=True))]
        return heapq.nlargest(want, scores.items(), key=lambda x: (x[0] in first, x[1], -x[0]))

    # --- queries ---------------------------------------------------------------------------

    def prefix_terms(self, r: Postings, prefix: str) -> list[str]:
        """The words ``prefix*`` expands to: the PREFIX_EXPANSION_LIMIT most frequent."""
        found = r.prefix_frequencies("words", prefix.lower())
        top = heapq.nsmallest(PREFIX_EXPANSION_LIMIT, found.items(), key=lambda x: (-x[1], x[0]))
        return [t for t, _ in top]

    def exact_scores(self, r: Postings, text: str, hl: set[str]) -> dict[int, float] | None:
        """Scores of the documents whose own text holds ``text`` (a word, or words as a
        phrase); None when it analyses to nothing (e.g. a stop word)."""
        stems = self.an.stems(text)
        hl.update(stems)
        if len(stems) > 1:
            return self.phrase_scores(r, stems)
        return self.in_own_text(r, stems[0], self.term_scores(r, TEXT, stems[0])) if stems else None

    def evaluate(self, r: Postings, n: Any, hl: set[str], docs_of: Callable[[Any], set[int]],
                 live: Callable[[], set[int]]) -> dict[int, float] | None:
        """Score every document matching a syntax node (None when the node analyses to
        nothing, e.g. a stop word).  ``docs_of(node)`` gives the documents of a metadata
        filter node, ``live()`` every live document; ``hl`` collects the matched stems."""
        # Operators, phrases and prefixes match a memory's own text; its context (the
        # memory it follows) only adds to the score of what matched.
        if isinstance(n, (sq.Word, sq.Phrase)):
            return self.exact_scores(r, n.text, hl)
        if isinstance(n, sq.Prefix):
            expanded = dict.fromkeys(self.an.stem(t) for t in self.prefix_terms(r, n.text))
            hl.update(expanded)
            return self.own_text_scores(r, expanded)
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
            return add_scores(parts) if parts else None
        both = set(parts[0]).intersection(*parts[1:])
        return {d: sum(p[d] for p in parts) for d in both}

    def rank_syntax(self, r: Postings, pq: sq.ParsedQuery, hl: set[str], allow: set[int] | None,
                    restrict: set[int] | None, want: int, docs_of: Callable[[Any], set[int]],
                    live: Callable[[], set[int]]) -> tuple[list, int, str]:
        """A query with operators: strict boolean meaning, ranked by score."""
        alone = self.rank_prefix(r, pq, hl, allow, restrict, want)
        if alone is not None:
            return alone
        scores = self.evaluate(r, pq.expr, hl, docs_of, live) or {}
        if allow is not None or restrict:
            scores = {d: v for d, v in scores.items()
                      if (allow is None or d in allow) and not (restrict and d in restrict)}
        return self.top(r, scores, want), len(scores), "syntax"

    def rank_prefix(self, r: Postings, pq: sq.ParsedQuery, hl: set[str], allow: set[int] | None,
                    restrict: set[int] | None, want: int) -> tuple[list, int, str] | None:
        """A query that is one prefix and nothing else, ranked as numpy arrays (the same
        hits, order, scores and total as :meth:`rank_syntax`, without a map of every
        match: a prefix often matches most memories); None when this does not apply
        (another query; memories sharing a ``source``, as the group prior reads every
        match)."""
        if not isinstance(pq.expr, sq.Prefix) or any(self.segment_info(seg)[1] for seg in r.segments()):
            return None
        np = numpy()
        expanded = dict.fromkeys(self.an.stem(t) for t in self.prefix_terms(r, pq.expr.text))
        hl.update(expanded)
        docs, sums = filtered(allow, restrict, *self.own_text_arrays(r, expanded))
        best = np.lexsort((docs, -sums))[:want]     # best first, ties by document number
        return list(zip(docs[best].tolist(), sums[best].tolist(), strict=True)), len(docs), "syntax"

    def rank_natural(self, r: Postings, pq: sq.ParsedQuery, hl: set[str], allow: set[int] | None,
                     restrict: set[int] | None, want: int, neighbours: bool = True) -> tuple[list, int, str]:
        """Plain words and phrases: all-word matches first (see SearchConfig.natural), then
        with ``neighbours`` the neighbour prior (:func:`neighbour_prior`)."""
        c = self.cfg
        if not pq.words and len(pq.phrases) == 1:
            lazy = self.rank_phrase(r, pq.phrases[0], hl, allow, restrict, want)
            if lazy is not None:
                return lazy
        text = " ".join(pq.words)
        toks = self.an.tokens(text)
        if c.question_stop:
            toks = [t for t in toks if t not in sq.QUESTION_WORDS] or toks
        stems = list(dict.fromkeys(self.an.stem(t) for t in toks))
        hl.update(stems)
        units = [self.term_scores(r, TEXT, st) for st in stems]
        for ph in pq.phrases:
            exact = self.exact_scores(r, ph, hl)
            if exact is not None:
                units.append(exact)
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
            for a, b in dict.fromkeys(zip(seq, seq[1:], strict=False)):
                pair = self.phrase_scores(r, [a, b], own=False) if a != b else {}
                extras.append({d: v * c.pair_weight for d, v in pair.items()})
        scores, first, mode = combine_natural(units, extras, allow, restrict, c.natural,
                                                 c.all_boost)
        if c.day_boost and scores:
            self.day_prior(r, sq.named_days(text), scores)
        lifted: set[int] = set()
        if c.when_boost and scores and sq.asks_when(text):
            # What a "when" question seeks is often told with a time ("yesterday", "last
            # week"): the matched memories whose own text holds one score a little more.
            lifted = holders(r, "when", sq.TELLS_TIME).intersection(scores)
        return self.top(r, scores, want, first, neighbours, lifted), len(scores), mode

    def day_prior(self, r: Postings, days: Sequence[date], scores: dict[int, float]) -> None:
        """Lift, in ``scores``, the memories created on one of ``days`` (the days a query
        names, :func:`gitmem.search.query.named_days`) or in the :data:`DAY_WINDOW` days
        after, which may tell of it ("yesterday", "last week"): x ``1 + day_boost`` on the
        day, falling linearly to x ``1 + day_boost / 8`` a week later.  Only memories the
        words matched are lifted; a day's memories are one lookup of its word in ``when``."""
        factor: dict[int, float] = {}
        for day in days:
            for k in range(DAY_WINDOW + 1):
                try:
                    word = sq.day_word(day + timedelta(days=k))
                except OverflowError:       # (past the last day a date can hold)
                    break
                f = 1.0 + self.cfg.day_boost * (1 - k / (DAY_WINDOW + 1))
                for d in holders(r, "when", word).intersection(scores):
                    if f > factor.get(d, 1.0):
                        factor[d] = f
        for d, f in factor.items():
            scores[d] *= f

    def rank_phrase(self, r: Postings, text: str, hl: set[str], allow: set[int] | None,
                    restrict: set[int] | None, want: int) -> tuple[list, int, str] | None:
        """A natural query that is one phrase and nothing else, ranked as numpy arrays
        (the same hits, order and scores as :meth:`rank_natural`, without a map of every
        match); None when this does not apply (a single word; a snapshot;
        ``natural="all-boost"``; memories that lend each other score, through ``source``
        or ``follows``, since those priors read every match).

        Up to :data:`LAZY_PHRASE_POSITIONS` positions of its words (in the documents
        holding them all), every document is checked at once and ``total`` is exact.
        Beyond, they are checked lazily: a phrase scores the sum of its words' scores, so
        the documents holding every word are taken best first and checked a batch at a
        time until the page is full, and ``total`` counts the matches among those plus,
        for the others, the share of an evenly spread sample of them that holds the
        phrase: about :data:`PHRASE_SAMPLE` documents, more until
        :data:`PHRASE_SAMPLE_MATCHES` of them hold it (a standard error of about 10%),
        every one (an exact total) for a phrase that rare."""
        stems = self.an.stems(text)
        if (len(stems) < 2 or r.order is not None or self.cfg.natural == "all-boost"
                or self._lends(r)):
            return None
        hl.update(stems)
        np = numpy()
        parts = list(self.phrase_candidates(r, stems))
        if not parts:
            return [], 0, "any-words"
        ids = np.concatenate([cands + seg.base for seg, cands, _, _ in parts])
        scores = np.concatenate([values for _, _, values, _ in parts])
        part_of = np.repeat(np.arange(len(parts)), [len(cands) for _, cands, _, _ in parts])
        ids, scores, part_of = filtered(allow, restrict, ids, scores, part_of)
        lazy = sum(lists[st].position_count() for _, _, _, lists in parts
                   for st in dict.fromkeys(stems)) > LAZY_PHRASE_POSITIONS

        def check(at: Any) -> Any:
            """Which of the candidates at indexes ``at`` hold the phrase (a mask)."""
            held = np.zeros(len(at), bool)
            of = part_of[at]
            for i in np.unique(of).tolist():
                mine = of == i
                seg, _, _, lists = parts[i]
                local = ids[at[mine]] - seg.base
                docs = np.sort(local).tolist() if lazy else None
                held[mine] = np.isin(local, self.phrase_holders(lists, stems, self.segment_info(seg)[2], docs))
            return held

        # best first, ties by document number (as Ranker.top orders them)
        order = np.lexsort((ids, -scores))
        if not lazy:
            found = order[check(order)]
            best = found[:want]
            return (list(zip(ids[best].tolist(), scores[best].tolist(), strict=True)), len(found),
                    "all-words" if len(found) else "any-words")
        ranked: list[tuple[int, float]] = []
        checked, matched = np.zeros(len(ids), bool), np.zeros(len(ids), bool)
        batch, done = max(2 * want, 16), 0
        while len(ranked) < want and done < len(order):
            at = order[done:done + batch]
            done += len(at)
            held = check(at)
            checked[at], matched[at] = True, held
            ranked += zip(ids[at[held]].tolist(), scores[at[held]].tolist(), strict=True)
            batch *= 2
        if done == len(order):                    # every candidate checked: exact
            return ranked[:want], int(matched.sum()), "all-words" if matched.any() else "any-words"
        # The total: an evenly spread sample (every step-th candidate), doubled until it
        # holds PHRASE_SAMPLE_MATCHES matches (or is every candidate: then exact).
        step = 1 << (len(ids) // PHRASE_SAMPLE).bit_length()
        sample = np.arange(0, len(ids), step)
        held = check(sample)
        while held.sum() < PHRASE_SAMPLE_MATCHES and step > 1:
            step //= 2
            more = np.arange(step, len(ids), 2 * step)
            sample, held = np.concatenate((sample, more)), np.concatenate((held, check(more)))
        matched[sample[held]] = True
        checked[sample] = True
        total = int(matched.sum()) + round(int((~checked).sum()) * int(held.sum()) / len(sample))
        return ranked[:want], Estimate(total), "all-words"

    def _lends(self, r: Postings) -> bool:
        """Whether a memory of the index may lend another score (a ``source`` shared, for
        the group prior, or a ``follows`` link, for the neighbour prior)."""
        return any(self.segment_info(seg)[1] for seg in r.segments()) or self.any_links(r)

    def any_links(self, r: Postings) -> bool:
        """Whether a memory of the index follows another (cached per segment)."""
        for seg in r.segments():
            key = seg.key
            if key not in self._links_cache:
                if len(self._links_cache) > 64:
                    self._links_cache.clear()
                self._links_cache[key] = seg.has_links()
            if self._links_cache[key]:
                return True
        return False

    def suggest(self, r: Postings, pq: sq.ParsedQuery, query: str) -> str | None:
        """The query with unknown words replaced by the closest indexed words, if any."""
        text = " ".join(pq.texts())
        fixes: dict[str, str] = {}
        for w in dict.fromkeys(self.an.tokens(text)):
            if len(w) < 3 or w.isdigit() or r.doc_frequency("words", w):
                continue
            found = [(edit_distance(w, c), -df, c) for c, df in
                     ((c, r.doc_frequency("words", c)) for c in
                      r.terms_within("words", w, 2, prefix=1)) if df]
            if found:
                fixes[w] = min(found)[2]
        if not fixes:
            return None
        fix = functools.partial(re.sub, r"\w+", lambda m: fixes.get(m[0].lower(), m[0]))
        return "".join(p if ":" in p else fix(p) for p in re.split(r"(\s+)", query))


def holders(r: Postings, fieldname: str, text: str) -> set[int]:
    """The live documents holding a term (no score computed: the term only marks them)."""
    out: set[int] = set()
    if not r.doc_frequency(fieldname, text):
        return out
    for seg in r.segments():
        if not seg.doc_frequency(fieldname, text):
            continue
        base = seg.base
        for ids, _, _ in seg.blocks(fieldname, text):
            out.update(map(base.__add__, ids) if base else ids)
        if seg.deleted:
            out.difference_update(base + i for i in seg.deleted)
    return out


def filtered(allow: set[int] | None, restrict: set[int] | None, docs: Any, *aligned: Any) -> list[Any]:
    """``docs`` (a numpy array of document numbers) and the arrays ``aligned`` with it,
    without the documents outside ``allow`` (when given) or in ``restrict``."""
    np = numpy()
    arrays = [docs, *aligned]
    for group, inside in ((allow, True), (restrict, False)):
        if group is not None and (inside or group):
            keep = np.isin(arrays[0], np.fromiter(group, np.int64, len(group))) == inside
            arrays = [a[keep] for a in arrays]
    return arrays
