"""Whoosh's posting lists as plain arrays: what :mod:`gitmem.search.rank` reads.

:func:`blocks` reads a segment's posting list a block at a time (gitmem's codec,
:mod:`.codec`, stores a block as machine arrays); :class:`SegmentView` and
:class:`PostingsView` are the index as the ranker sees it
(:class:`gitmem.search.rank.Segment`, :class:`gitmem.search.rank.Postings`);
:class:`Snapshot` and :class:`SnapshotPostings` are some of its documents (a commit of
the past, :mod:`.versions`) scored as a fresh index of just them would be.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from whoosh.matching import ListMatcher
from whoosh.reading import TermNotFound

from ..rank import TEXT as TEXT_FIELD
from ..rank import numpy

__all__ = ["BLOCK_API", "blocks", "ValueList", "has_blocks", "unblocked", "one_at_a_time", "PostingBlocks", "read",
           "term_text",
           "SegmentView", "PostingsView", "Snapshot", "SnapshotPostings"]


#: The block internals of Whoosh's W3 posting reader that :func:`blocks` reads (checked
#: at import by :mod:`.internals`; :class:`gitmem.search.whoosh.codec.LeafMatcher`
#: extends that reader).  A reader of another kind (a one-posting list inlined in the
#: term table) lacks them and is read a posting at a time.
BLOCK_API = ("_read_ids", "_read_weights", "_next_block", "_maxid")


def blocks(matcher: Any, wanted: Sequence[int] | None = None,
           values: bool = False) -> Iterator[tuple[Sequence, Sequence, Any]]:
    """(ids, weights, values or ()) of a segment's posting list, a block at a time: plain
    arrays for :mod:`gitmem.search.rank` (deleted documents included).  With ``values``,
    the third item holds the block's values, cut out when asked (``at``, ``whole``).

    ``wanted`` (sorted segment-local ids) skips blocks holding none of them without
    decoding them.  A posting list inlined in the term table (one posting) is read as it
    is; any other reader without the block internals is read a posting at a time
    (:func:`unblocked`: correct, several times slower)."""
    m = getattr(matcher, "child", matcher)      # deletions are filtered by the caller
    if has_blocks(m):
        low = -1
        packed = getattr(m, "block_values", None)     # gitmem's codec
        while m.is_active():
            high = m._maxid
            if wanted is None or bisect_right(wanted, high) > bisect_right(wanted, low):
                if m._ids is None:
                    m._read_ids()
                if m._weights is None:
                    m._read_weights()
                found: Any = ()
                if values:
                    found = packed() if packed is not None else None
                    if found is None:                 # (a block in Whoosh's own layout)
                        if m._values is None:
                            m._read_values()
                        found = ValueList(m._values)
                yield m._ids, m._weights, found
            low = high
            m._next_block()
        return
    parts = [one_at_a_time(m, values)] if isinstance(m, ListMatcher) else unblocked(m, values)
    for ids, weights, vals in parts:              # (a short list inlined in the term table, or other)
        yield ids, weights, (ValueList(vals) if values else ())


class ValueList:
    """A block's values as a sequence (a block in Whoosh's own layout, or a posting
    list read a posting at a time), with the methods of gitmem's packed blocks
    (:class:`gitmem.search.whoosh.codec.BlockValues`)."""

    __slots__ = ("_values",)

    def __init__(self, values: Sequence[bytes]) -> None:
        self._values = values

    def at(self, at: Iterable[int]) -> list[bytes]:
        """The values at these indexes."""
        return [self._values[i] for i in at]

    def size(self) -> int:
        """The bytes of all the values."""
        return sum(map(len, self._values))

    def whole(self) -> tuple[bytes, bytes]:
        """Their sizes in bytes (a machine array of 32-bit integers) and the values."""
        return array("I", map(len, self._values)).tobytes(), b"".join(self._values)


def has_blocks(m: Any) -> bool:
    """Whether :func:`blocks` can read this posting reader a block at a time."""
    return all(hasattr(m, a) for a in BLOCK_API)


def unblocked(m: Any, values: bool) -> Iterator[tuple[Sequence, Sequence, Sequence]]:
    """The fallback of :func:`blocks` for a posting reader without the block internals."""
    yield one_at_a_time(m, values)


def one_at_a_time(m: Any, values: bool) -> tuple[list, list, list]:
    """(ids, weights, values) of a posting reader, read a posting at a time."""
    ids, weights, vals = [], [], []
    while m.is_active():
        ids.append(m.id())
        weights.append(m.weight())
        if values:
            vals.append(m.value())
        m.next()
    return ids, weights, vals


class PostingBlocks:
    """The blocks of one posting list read for a query (:func:`read`): each block's ids
    and weights, and its values cut out only when asked (a phrase reads the positions
    of a few of the documents; the blocks are kept, so that costs no second read)."""

    __slots__ = ("ids", "weights", "_cuts", "_lasts")

    def __init__(self, parts: Iterable[tuple[Sequence[int], Sequence[float], Any]]) -> None:
        self.ids: list[Sequence[int]] = []
        self.weights: list[Sequence[float]] = []
        self._cuts: list[Any] = []      # per block: its values (``at``, ``whole``)
        for ids, weights, cut in parts:
            if not len(ids):            # (a reader with nothing left to read)
                continue
            self.ids.append(ids)
            self.weights.append(weights)
            self._cuts.append(cut)
        self._lasts = [ids[-1] for ids in self.ids]

    def joined(self) -> tuple[array, array]:
        """Every id (``array("I")``) and weight (``array("f")``) of the blocks read, in order."""
        ids, weights = array("I"), array("f")
        for i, w in zip(self.ids, self.weights, strict=True):
            ids.extend(_as_extendable(i, "I"))
            weights.extend(_as_extendable(w, "f"))
        return ids, weights

    def positions(self, wanted: Sequence[int] | None = None) -> tuple[Any, Any, Any]:
        """Every posting of the blocks read, or only those of ``wanted`` (sorted ids, each
        in a block read), as numpy arrays: (ids, how many positions each has, all their
        positions one after another).  ``text`` postings only: their values are
        positions stored as 32-bit machine arrays."""
        np = numpy()
        if wanted is None:
            parts = [cut.whole() for cut in self._cuts]
            ids = np.asarray(self.joined()[0], np.int64)
            sizes, values = b"".join(a for a, _ in parts), b"".join(b for _, b in parts)
        else:
            found = self.values_for(wanted)
            mine = [found[d] for d in wanted]
            ids = np.asarray(wanted, np.int64)
            sizes, values = array("I", map(len, mine)).tobytes(), b"".join(mine)
        return (ids, np.frombuffer(sizes, np.uint32).astype(np.int64) // 4,
                np.frombuffer(values, np.uint32).astype(np.int64))

    def position_count(self) -> int:
        """How many positions the blocks read hold (``text`` postings)."""
        return sum(cut.size() for cut in self._cuts) // 4

    def values_for(self, wanted: Sequence[int]) -> dict[int, bytes]:
        """The values of the postings of ``wanted`` (sorted ids, each in a block read)."""
        out: dict[int, bytes] = {}
        lasts, j, n = self._lasts, 0, len(wanted)
        while j < n:
            k = bisect_left(lasts, wanted[j])        # the block holding wanted[j]
            ids = self.ids[k]
            end = bisect_right(wanted, lasts[k], j)
            here = wanted[j:end]
            # Where the wanted ids sit in the block: a C-level scan each for a few, one
            # id -> index map for many.
            at = [ids.index(d) for d in here] if len(here) < 16 else \
                list(map(dict(zip(ids, range(len(ids)), strict=True)).__getitem__, here))
            out.update(zip(here, self._cuts[k].at(at), strict=True))
            j = end
        return out


def _as_extendable(part: Sequence, typecode: str) -> Sequence:
    # An array of the same type is copied as one block of memory; one of another type
    # cannot extend it at all.
    return part.tolist() if isinstance(part, array) and part.typecode != typecode else part


def read(matcher: Any, wanted: Sequence[int] | None = None) -> PostingBlocks:
    """A posting list's blocks, only those holding one of ``wanted`` (sorted ids) if given."""
    return PostingBlocks(blocks(matcher, wanted, values=True))


def term_text(term: str | bytes) -> str:
    """A term as ``str`` (Whoosh's readers give some as UTF-8 bytes)."""
    return term if isinstance(term, str) else term.decode()


class SegmentView:
    """One segment of the index as the ranker reads it (:class:`gitmem.search.rank.Segment`):
    its postings as plain arrays, its deletions, lengths and sources."""

    __slots__ = ("_leaf", "key", "base", "deleted", "positions", "doc_frequency")

    def __init__(self, leaf: Any, base: int) -> None:
        self._leaf = leaf
        self.key = leaf.segment().segment_id()
        self.base = base
        self.deleted: frozenset[int] = (frozenset(leaf.deleted_docs_set) if leaf.has_deletions()
                                        else frozenset())
        fmt = leaf.schema[TEXT_FIELD].format
        # ``decode_positions`` without a Python frame where the format has it (gitmem's)
        self.positions = getattr(fmt, "positions_array", fmt.decode_positions)
        self.doc_frequency: Callable[[str, str], int] = leaf.doc_frequency

    def blocks(self, fieldname: str, text: str) -> Iterator[tuple[Sequence, Sequence, Any]]:
        return blocks(self._leaf.postings(fieldname, text))

    def read(self, fieldname: str, text: str, wanted: Sequence[int] | None = None) -> PostingBlocks:
        try:
            matcher = self._leaf.postings(fieldname, text)
        except TermNotFound:        # (one lookup instead of asking for its frequency first)
            return PostingBlocks(())
        return read(matcher, wanted)

    def text_lengths(self) -> list[int]:
        leaf = self._leaf
        return [leaf.doc_field_length(i, TEXT_FIELD, 0) for i in range(leaf.doc_count_all())]

    def sources(self) -> list[str]:
        return list(self._leaf.column_reader("source"))

    def context_starts(self) -> list[int]:
        return list(self._leaf.column_reader("ownlen"))

    def has_links(self) -> bool:
        return next(iter(self._leaf.lexicon("follows")), None) is not None


class PostingsView:
    """The index as the ranker reads it (:class:`gitmem.search.rank.Postings`), over one
    Whoosh reader: its statistics, its segments as :class:`SegmentView` views (made once),
    its terms as ``str``."""

    order: Sequence[int] | None = None        # equal scores by document number

    def __init__(self, r: Any) -> None:
        self._r = r
        self._views: list[SegmentView] | None = None
        self.doc_count_all: Callable[[], int] = r.doc_count_all
        self.field_length: Callable[[str], int] = r.field_length
        self.doc_frequency: Callable[[str, str], int] = r.doc_frequency

    def segments(self) -> list[SegmentView]:
        if self._views is None:      # (an empty index's one reader has no segment)
            self._views = [SegmentView(leaf, base) for leaf, base in self._r.leaf_readers()
                           if leaf.doc_count_all()]
        return self._views

    def expand_prefix(self, fieldname: str, prefix: str) -> list[str]:
        return list(map(term_text, self._r.expand_prefix(fieldname, prefix)))

    def prefix_frequencies(self, fieldname: str, prefix: str) -> dict[str, int]:
        # One walk of each segment's term table, its frequencies read on the way (a
        # frequency asked of the whole index looks the term up in every segment).
        out: dict[str, int] = {}
        for leaf, _ in self._r.leaf_readers():
            if fieldname in leaf.schema and leaf.doc_count_all():
                for term, info in leaf.iter_prefix(fieldname, prefix):
                    key = term_text(term)
                    out[key] = out.get(key, 0) + info.doc_frequency()
        return out

    def terms_within(self, fieldname: str, text: str, maxdist: int, prefix: int = 0) -> list[str]:
        return list(map(term_text, self._r.terms_within(fieldname, text, maxdist, prefix=prefix)))

    def linked(self, docs: Iterable[int]) -> dict[int, list[int]]:
        r, out = self._r, {}
        for d in docs:
            fields = r.stored_fields(d)
            near: list[int] = []
            for name, value in (("id", fields.get("follows")), ("follows", fields.get("id"))):
                if value:
                    try:
                        near.extend(n for n in r.postings(name, value).all_ids() if n != d)
                    except TermNotFound:     # (cheaper than asking for its frequency first)
                        pass
            out[d] = near
        return out



# --- a snapshot: some documents of an index, as the ranker reads them ----------------------


class Snapshot:
    """Some documents of an index, seen as a fresh index of just them would be: the
    statistics BM25 reads (document count, document frequencies, total text length)
    count only these documents, and equal scores are ordered by path (a fresh index
    holds its documents in path order)."""

    def __init__(self, docs: set[int], lengths: Sequence[int], order: Sequence[int]) -> None:
        self.docs = docs
        self.total = sum(map(lengths.__getitem__, docs))
        self.order = order          # document number -> rank of its path (one version per path)
        self._mask = bytearray(max(docs, default=-1) + 1)
        for d in docs:
            self._mask[d] = 1

    def view(self, p: PostingsView) -> SnapshotPostings:
        return SnapshotPostings(p, self)

    def count(self, p: PostingsView, fieldname: str, text: str) -> int:
        """How many of the snapshot's documents hold the term."""
        mask, size, n = self._mask, len(self._mask), 0
        for seg in p.segments():
            if seg.doc_frequency(fieldname, text):
                base = seg.base
                for ids, _, _ in seg.blocks(fieldname, text):
                    n += sum(mask[base + i] for i in ids if base + i < size)
        return n


class SnapshotPostings:
    """The index as the ranker reads it (:class:`gitmem.search.rank.Postings`), with a
    :class:`Snapshot`'s statistics and ties in path order (one per query)."""

    def __init__(self, p: PostingsView, snap: Snapshot) -> None:
        self._p, self._snap = p, snap
        self._df: dict[tuple[str, Any], int] = {}
        self.order: Sequence[int] | None = snap.order     # ties by path (rank.Ranker.top)
        self.segments = p.segments
        self.terms_within = p.terms_within

    def linked(self, docs: Iterable[int]) -> dict[int, list[int]]:
        alive = self._snap.docs
        return {d: [n for n in near if n in alive] for d, near in self._p.linked(docs).items()}

    def prefix_frequencies(self, fieldname: str, prefix: str) -> dict[str, int]:
        terms = self._p.expand_prefix(fieldname, prefix)
        return {t: n for t in terms if (n := self.doc_frequency(fieldname, t))}

    def doc_count_all(self) -> int:
        return len(self._snap.docs)

    def field_length(self, fieldname: str) -> int:
        # Only the text field's average length enters a score (the others have B = 0).
        return self._snap.total if fieldname == TEXT_FIELD else self._p.field_length(fieldname)

    def doc_frequency(self, fieldname: str, text: Any) -> int:
        key = (fieldname, text)
        if key not in self._df:
            self._df[key] = self._snap.count(self._p, fieldname, text)
        return self._df[key]

