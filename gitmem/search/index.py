"""Full-text search over memories: a Whoosh index that is only ever a rebuildable cache.

The only module of gitmem that touches :mod:`whoosh`: the check of the installed
distribution, the schema and analysis, the postings codec and the reading of its posting
blocks, opening, stamping and recreating the index, writing and merging segments, metadata
filters.  The vault feeds it :class:`IndexDoc` objects and asks :meth:`SearchIndex.search`;
the query language is parsed (and documented) in :mod:`gitmem.search.query`, queries are
evaluated and ranked in :mod:`gitmem.search.rank` from the plain posting arrays this module
hands over, results are the types of :mod:`gitmem.search.results`, and snippets are cut in
:mod:`gitmem.search.snippet` (none of them sees Whoosh).  Plain text never fails: what is
not valid syntax is read as text (:func:`gitmem.search.query.parse_query`).

Ranking (each piece measured with ``bench/retrieval.py``): one positional ``text`` field
holds title, tags/entities, author, body and context (the text of the memory it follows,
low weight), tag words weighing double (true BM25F, ``B=0.25``, Porter2 stemming); the
month and year of ``created`` and the author (``agent``, ``SearchConfig.agent_boost``) add
to the score of documents the words matched; the group prior and the natural-query policy
are in :mod:`gitmem.search.rank`.

Statuses archived, deleted and superseded are hidden unless ``include_inactive`` or an
explicit ``status:`` filter.  Whoosh's exceptions never leave this module: a bad
``filters=`` argument or paging value is :class:`InvalidQuery`, anything else
:class:`StorageError`.
"""

from __future__ import annotations

import base64
import functools
import gc
import hashlib
import heapq
import importlib.metadata
import importlib.util
import mmap
import os
import pickle
import re
import sys
import threading
import time
import warnings
import weakref
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import accumulate
from pathlib import Path
from typing import Any

import whoosh.index
import whoosh.searching
from whoosh import formats, scoring
from whoosh import query as wq
from whoosh.analysis import LowercaseFilter, RegexTokenizer, StemFilter, StopFilter
from whoosh.analysis.analyzers import STOP_WORDS
from whoosh.codec.whoosh3 import W3Codec, W3FieldWriter, W3LeafMatcher, W3PostingsWriter
from whoosh.columns import NumericColumn, VarBytesColumn
from whoosh.fields import COLUMN, ID, KEYWORD, NUMERIC, STORED, TEXT, Schema
from whoosh.filedb.filestore import FileStorage, RamStorage
from whoosh.filedb.structfile import StructFile
from whoosh.lang import stemmer_for_language
from whoosh.lang.porter import stem as porter_stem
from whoosh.matching import ListMatcher
from whoosh.reading import MultiReader, SegmentReader
from whoosh.system import pack_uint
from whoosh.writing import CLEAR, OPTIMIZE, SegmentWriter

from ..errors import InvalidQuery, StorageError
from . import query as sq
from .documents import IndexDoc, index_fields
from .rank import PREFIX_EXPANSION_LIMIT, Ranker, SearchConfig
from .rank import TEXT as TEXT_FIELD
from .results import SearchHit, SearchPage, hit
from .snippet import WORD_PATTERN, Snippeter
from .state import read_json, write_json_atomic

# IndexDoc, SearchHit, SearchPage and SearchConfig are defined elsewhere (documents, results,
# rank) and part of this module's API.
__all__ = ["IndexDoc", "SearchHit", "SearchPage", "SearchIndex", "SearchConfig", "VersionIndex",
           "version_key", "whoosh_version",
           "PREFIX_EXPANSION_LIMIT", "INACTIVE_STATUSES"]

INACTIVE_STATUSES = ("archived", "deleted", "superseded")
SCHEMA_VERSION = 7                   # bump when the schema or the analysis changes
_INDEX_NAME = "MAIN"
_STAMP, _STATE = "gitmem-stamp.json", "gitmem-state.json"


# --- the installed distribution ------------------------------------------------------------

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


# --- reading posting blocks ------------------------------------------------------------------

#: The block internals of whoosh-reloaded's W3 posting reader that :func:`_blocks` reads
#: (the distribution is checked by :func:`whoosh_version`, and gitmem's codec below
#: extends that reader).
_BLOCK_API = ("_read_ids", "_read_weights", "_next_block", "_maxid")


def _blocks(matcher: Any, values: bool = False,
            wanted: Sequence[int] | None = None) -> Iterator[tuple[Sequence, Sequence, Sequence]]:
    """(ids, weights, values or ()) of a segment's posting list, a block at a time: plain
    arrays for :mod:`gitmem.search.rank` (deleted documents included).

    ``wanted`` (sorted segment-local ids) skips blocks holding none of them without
    decoding them.  A posting list inlined in the term table (one posting) is read as it
    is; any other reader without the block internals is read a posting at a time
    (:func:`_unblocked`: correct, several times slower)."""
    m = getattr(matcher, "child", matcher)      # deletions are filtered by the caller
    if _has_blocks(m):
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
    elif isinstance(m, ListMatcher):            # a short list inlined in the term table
        yield _one_at_a_time(m, values)
    else:
        yield from _unblocked(m, values)


def _has_blocks(m: Any) -> bool:
    """Whether :func:`_blocks` can read this posting reader a block at a time."""
    return all(hasattr(m, a) for a in _BLOCK_API)


def _unblocked(m: Any, values: bool) -> Iterator[tuple[Sequence, Sequence, Sequence]]:
    """The fallback of :func:`_blocks` for a posting reader without the block internals."""
    yield _one_at_a_time(m, values)


def _one_at_a_time(m: Any, values: bool) -> tuple[list, list, list]:
    """(ids, weights, values) of a posting reader, read a posting at a time."""
    ids, weights, vals = [], [], []
    while m.is_active():
        ids.append(m.id())
        weights.append(m.weight())
        if values:
            vals.append(m.value())
        m.next()
    return ids, weights, vals


def _postings_for(matcher: Any, wanted: Sequence[int]) -> tuple[dict[int, float], dict[int, bytes]]:
    """Weights and values of a posting list's postings for the documents in ``wanted``
    (sorted segment-local ids, all of which hold the term): only the blocks holding one
    are read, and only the wanted values are cut out of a block (with ``values_at``,
    gitmem's codec) instead of every value of it."""
    m = getattr(matcher, "child", matcher)
    # gitmem's codec: called while ``_blocks`` holds m at a block (so only when it can)
    cut = getattr(m, "values_at", None) if _has_blocks(m) else None
    wts: dict[int, float] = {}
    vals: dict[int, bytes] = {}
    for ids, ws, vs in _blocks(m, cut is None, wanted):
        here = wanted[bisect_left(wanted, ids[0]):bisect_right(wanted, ids[-1])]
        # Where the wanted ids sit in the block: a C-level scan each for a few, one
        # id -> index map for many.
        at = [ids.index(d) for d in here] if len(here) < 16 else \
            list(map(dict(zip(ids, range(len(ids)))).__getitem__, here))
        wts.update(zip(here, map(ws.__getitem__, at)))
        vals.update(zip(here, cut(at) if cut else map(vs.__getitem__, at)))
    return wts, vals


def _text(term: str | bytes) -> str:
    """A term as ``str`` (Whoosh's readers give some as UTF-8 bytes)."""
    return term if isinstance(term, str) else term.decode()


class _Segment:
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

    def blocks(self, fieldname: str, text: str, values: bool = False,
               wanted: Sequence[int] | None = None) -> Iterator[tuple[Sequence, Sequence, Sequence]]:
        return _blocks(self._leaf.postings(fieldname, text), values, wanted)

    def postings_for(self, fieldname: str, text: str,
                     wanted: Sequence[int]) -> tuple[dict[int, float], dict[int, bytes]]:
        return _postings_for(self._leaf.postings(fieldname, text), wanted)

    def text_lengths(self) -> list[int]:
        leaf = self._leaf
        return [leaf.doc_field_length(i, TEXT_FIELD, 0) for i in range(leaf.doc_count_all())]

    def sources(self) -> list[str]:
        return list(self._leaf.column_reader("source"))


class _Postings:
    """The index as the ranker reads it (:class:`gitmem.search.rank.Postings`), over one
    Whoosh reader: its statistics, its segments as :class:`_Segment` views (made once),
    its terms as ``str``."""

    order = None        # equal scores by document number

    def __init__(self, r: Any) -> None:
        self._r = r
        self._segments: list[_Segment] | None = None
        self.doc_count_all: Callable[[], int] = r.doc_count_all
        self.field_length: Callable[[str], int] = r.field_length
        self.doc_frequency: Callable[[str, str], int] = r.doc_frequency

    def segments(self) -> list[_Segment]:
        if self._segments is None:      # (an empty index's one reader has no segment)
            self._segments = [_Segment(leaf, base) for leaf, base in self._r.leaf_readers()
                              if leaf.doc_count_all()]
        return self._segments

    def expand_prefix(self, fieldname: str, prefix: str) -> list[str]:
        return list(map(_text, self._r.expand_prefix(fieldname, prefix)))

    def prefix_frequencies(self, fieldname: str, prefix: str) -> dict[str, int]:
        # One walk of each segment's term table, its frequencies read on the way (a
        # frequency asked of the whole index looks the term up in every segment).
        out: dict[str, int] = {}
        for leaf, _ in self._r.leaf_readers():
            if fieldname in leaf.schema and leaf.doc_count_all():
                for term, info in leaf.iter_prefix(fieldname, prefix):
                    key = _text(term)
                    out[key] = out.get(key, 0) + info.doc_frequency()
        return out

    def terms_within(self, fieldname: str, text: str, maxdist: int, prefix: int = 0) -> list[str]:
        return list(map(_text, self._r.terms_within(fieldname, text, maxdist, prefix=prefix)))



# The postings codec: Whoosh's W3 layout (blocks of 128 postings) with cheaper blocks.
# Whoosh pickles a block as delta-encoded ids, float weights and one bytes object per
# value (~400 objects and a generator per block: most of a phrase query's time); here
# ids, weights and value lengths are machine arrays and the values one string, so reading
# a block is a few C calls.  Uncompressed (zlib was half the cost of reading a common
# word).  One-posting terms (all of a write's one-document segment) are inlined in the
# term table.  Segments record their codec: plain W3 segments stay readable.


class _PostingsWriter(W3PostingsWriter):
    def _mini_ids(self) -> Any:
        return super()._mini_ids() if self._byteids else self._ids.tobytes()

    def _mini_weights(self) -> Any:
        return None if all(w == 1.0 for w in self._weights) else self._weights.tobytes()

    def finish_postings(self) -> Any:
        # Inlining, done here: whoosh-reloaded's own path calls ``set_inline``, a misnaming
        # of ``W3TermInfo.set_inlined``.  Value-less postings get b"" each: an inlined
        # list without values reads back as "" (a str), which a segment merge rejects.
        if self.written() or len(self) >= self._inlinelimit:
            return super().finish_postings()
        info, self._terminfo = self._terminfo, None
        info.add_block(self)
        values = self._values if len(self._values) == len(self._ids) else [b""] * len(self._ids)
        info.set_inlined(self._ids, self._weights, values)
        return info

    def add_many(self, ids: Sequence[int], weights: Sequence[float], values: Sequence[bytes | None],
                 lengths: Sequence[int]) -> None:
        """``add_posting`` for a whole term's postings (ids ascending), a block at a time."""
        limit = self._blocklimit
        for start in range(0, len(ids), limit):
            if len(self._ids):
                self._write_block()
            end = start + limit
            chunk = weights[start:end]
            self._ids.extend(ids[start:end])
            self._weights.extend(chunk)
            self._maxweight = max(self._maxweight, max(chunk))
            self._values.extend(v for v in values[start:end] if v)
            sizes = [n for n in lengths[start:end] if n]
            if sizes:
                low = min(sizes)
                if self._minlength is None or low < self._minlength:
                    self._minlength = low
                self._maxlength = max(self._maxlength, max(sizes))

    def _mini_values(self) -> Any:
        size, values = self._format.fixed_value_size(), self._values
        if (size is None or size < 0) and values and len(values) == len(self._ids):
            return array("I", map(len, values)).tobytes() + b"".join(values)
        return super()._mini_values()


class _LeafMatcher(W3LeafMatcher):
    def _read_ids(self) -> None:
        if self._data is None:
            self._read_data()
        ids = self._data[0]
        self._ids = array("I", ids) if isinstance(ids, bytes) and not self._byteids else ids

    def _read_weights(self) -> None:
        if self._data is None:
            self._read_data()
        ws = self._data[1]
        self._weights = (array("f", (1.0,)) * self._blocklength if ws is None
                         else array("f", ws) if isinstance(ws, bytes) else ws)

    def _packed(self) -> tuple[bytes, list[int]] | None:
        """The block's values string and each value's end offset, if this codec packed
        them (variable-size values); None for blocks in Whoosh's own layout."""
        if self._data is None:
            self._read_data()
        vs, n, fixed = self._data[2], self._blocklength, self._fixedsize
        if not isinstance(vs, bytes) or not (fixed is None or fixed < 0):
            return None
        return vs, list(accumulate(array("I", vs[:4 * n]), initial=4 * n))

    def _read_values(self) -> None:
        packed = self._packed()
        if packed is None:
            super()._read_values()
        else:
            vs, ends = packed
            self._values = tuple(map(vs.__getitem__, map(slice, ends, ends[1:])))

    def values_at(self, at: Sequence[int]) -> list[bytes]:
        """The values of the postings at these indexes of the current block, without
        cutting out the others (a phrase needs the positions of a few documents)."""
        packed = self._packed()
        if packed is None:
            self._read_values()
            return [self._values[i] for i in at]
        vs, ends = packed
        return list(map(vs.__getitem__, map(slice, map(ends.__getitem__, at),
                                            map(ends.__getitem__, map((1).__add__, at)))))


class _FieldWriter(W3FieldWriter):
    def add_postings(self, schema: Any, lengths: Any, items: Any) -> None:
        # Whoosh looks up a document's field length once per posting, and each lookup
        # checks that the length column's file exists (a stat, ~7 us): remembered here,
        # a reindex spends its time indexing rather than in stat calls.
        known = _KnownLengths(lengths) if lengths else lengths
        if isinstance(items, _TermPostings):
            self._add_terms(schema, known, items)
        else:
            super().add_postings(schema, known, items)

    def _add_terms(self, schema: Any, lengths: _KnownLengths | None, items: _TermPostings) -> None:
        """A rebuild's postings, a whole term at a time (see :class:`_MemoryPool`)."""
        field = None
        for fieldname, btext, ids, weights, values in items.terms():
            if fieldname != field:
                if field is not None:
                    self.finish_field()
                self.start_field(fieldname, schema[fieldname])
                field = fieldname
                of_field = lengths.of_field(fieldname) if lengths and schema[fieldname].scorable else {}
            self.start_term(btext)
            if of_field:
                lengths_of = list(map(of_field.get, ids))  # (every posting's document has a length)
                if None in lengths_of:
                    lengths_of = [n or 0 for n in lengths_of]
            else:
                lengths_of = [0] * len(ids)
            self._postwriter.add_many(ids, weights, values, lengths_of)
            self.finish_term()
        if field is not None:
            self.finish_field()


class _KnownLengths:
    def __init__(self, lengths: Any) -> None:
        self._lengths: Any = lengths
        self._known: dict[str, dict[int, int]] = {}

    def of_field(self, fieldname: str) -> dict[int, int]:
        """Every document's length in ``fieldname`` (docnum -> length; zeros left out)."""
        r = self._lengths
        return {n: size for n in range(r.doc_count_all())
                if (size := r.doc_field_length(n, fieldname, 0))}

    def doc_field_length(self, docnum: int, fieldname: str, default: int = 0) -> int:
        known = self._known.get(fieldname)
        if known is None:
            known = self._known[fieldname] = {}
        value = known.get(docnum)
        if value is None:
            value = known[docnum] = self._lengths.doc_field_length(docnum, fieldname, default)
        return value


class _Codec(W3Codec):
    def field_writer(self, storage: Any, segment: Any) -> Any:
        return _FieldWriter(self, storage, segment)

    def postings_writer(self, dbfile: Any, byteids: bool = False) -> Any:
        return _PostingsWriter(dbfile, blocklimit=self._blocklimit, byteids=byteids,
                               compression=self._compression, inlinelimit=self._inlinelimit)

    def postings_reader(self, dbfile: Any, terminfo: Any, format_: Any, term: Any = None,
                        scorer: Any = None) -> Any:
        if terminfo.is_inlined():
            return super().postings_reader(dbfile, terminfo, format_, term, scorer)
        offset, length = terminfo.extent()
        return _LeafMatcher(dbfile, offset, length, format_, term=term, scorer=scorer)


class _MemoryPool:
    """The postings of a rebuild, held in memory term by term instead of Whoosh's
    external sort (which pickles every posting to a scratch file, unpickles it and
    merges the runs: most of a rebuild's time).  Documents arrive in order, so each
    term's postings are already sorted; only the terms are sorted, once.  Memory is
    bounded by the caller writing one segment per :attr:`SearchIndex.REBUILD_SEGMENT_DOCS`."""

    def __init__(self) -> None:
        self.fieldnames: set[str] = set()
        # field name -> term -> postings (a dict per field: no tuple key made per posting)
        self._terms: dict[str, dict[bytes, list[tuple[int, float, Any]]]] = {}

    def add(self, item: tuple[str, bytes, int, float, Any]) -> None:
        fieldname, tbytes, docnum, weight, vbytes = item
        of_field = self._terms.get(fieldname)
        if of_field is None:
            self.fieldnames.add(fieldname)
            of_field = self._terms[fieldname] = {}
        postings = of_field.get(tbytes)
        if postings is None:
            postings = of_field[tbytes] = []
        postings.append((docnum, weight, vbytes))

    @staticmethod
    def fits(schema: Any) -> bool:
        """Whether :meth:`add_document` can index documents of ``schema`` (no term
        vectors, no separate spelling fields: gitmem's schemas have neither)."""
        return not any(f.vector or f.separate_spelling() for _, f in schema.items())

    def add_document(self, w: Any, fields: Mapping[str, Any]) -> None:
        """``w.add_document(**fields)`` with the postings put straight into this pool:
        the same stored fields, lengths and columns, without a call per posting."""
        perdoc, schema, docnum, terms = w.perdocwriter, w.schema, w.docnum, self._terms
        names = sorted(name for name in fields if not name.startswith("_"))
        perdoc.start_doc(docnum)
        try:
            for name in names:
                value = fields[name]
                if value is None:
                    continue
                field = schema[name]
                length = 0
                if field.indexed:
                    of_field = terms.get(name)
                    if of_field is None:
                        of_field = terms[name] = {}
                        self.fieldnames.add(name)
                    get = of_field.get
                    for tbytes, freq, weight, vbytes in _term_values(field, value):
                        length += freq
                        postings = get(tbytes)
                        if postings is None:
                            of_field[tbytes] = [(docnum, weight, vbytes)]
                        else:
                            postings.append((docnum, weight, vbytes))
                    if not field.scorable:
                        length = 0
                perdoc.add_field(name, field, value if field.stored else None, length)
                column = field.column_type
                if column:
                    perdoc.add_column_value(name, column, field.to_column_value(value))
        except Exception:
            perdoc.cancel_doc()
            raise
        perdoc.finish_doc()
        w._added = True
        w.docnum += 1

    def iter_postings(self) -> _TermPostings:
        terms, self._terms = self._terms, {}
        return _TermPostings(terms)

    def cleanup(self) -> None:
        self._terms.clear()




def _other_threads() -> bool:
    """Whether threads other than this one run in the process."""
    return threading.active_count() > 1


def _cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@contextmanager
def _collector_paused(pause: bool = True) -> Iterator[None]:
    """Millions of postings are held at once in a large write: the cyclic garbage
    collector would scan them over and over (they hold no cycles), so it waits."""
    collecting = pause and gc.isenabled()
    if collecting:
        gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _term_values(field: Any, value: Any) -> Iterable[tuple[bytes, int, float, bytes]]:
    """``field.index(value)``; for a list of words in a plain frequency field (``words``,
    ``when``) the same tuples computed at once instead of through a token object per word."""
    if isinstance(value, list) and type(field.format) is formats.Frequency:
        boost = field.format.field_boost
        return [(word.encode("utf-8"), freq, *_frequency_value(freq, boost)) for word, freq in Counter(value).items()]
    return field.index(value)


@functools.lru_cache(maxsize=256)
def _frequency_value(freq: int, boost: float) -> tuple[float, bytes]:
    # One shared (weight, value) per frequency: a rebuild holds millions of postings in
    # memory, nearly all with frequency 1 (see _MemoryPool).
    return float(freq) * boost, pack_uint(freq)


class _TermPostings:
    """A :class:`_MemoryPool`'s postings: term by term for gitmem's field writer, or one
    ``(fieldname, term, docnum, weight, value)`` at a time as Whoosh iterates them."""

    def __init__(self, terms: dict[str, dict[bytes, list[tuple[int, float, Any]]]]) -> None:
        self._terms = terms

    def terms(self) -> Iterator[tuple[str, bytes, list[int], list[float], list[Any]]]:
        for fieldname in sorted(self._terms):
            of_field = self._terms.pop(fieldname)
            for tbytes in sorted(of_field):
                postings = of_field.pop(tbytes)   # in document order: documents arrive in order
                docnums, weights, values = zip(*postings)
                yield fieldname, tbytes, list(docnums), list(weights), list(values)

    def __iter__(self) -> Iterator[tuple[str, bytes, int, float, Any]]:
        for fieldname, tbytes, docnums, weights, values in self.terms():
            for posting in zip(docnums, weights, values):
                yield (fieldname, tbytes, *posting)


class _Storage(FileStorage):
    """The index folder; a small write (``small_writes``) keeps Whoosh's scratch files in
    memory instead of a temporary folder of files created and deleted per commit."""

    small_writes = False
    supports_mmap = False   # (Whoosh's own mapping copies each segment part into memory)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._maps: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()   # the open maps

    def temp_storage(self, name: str | None = None) -> Any:
        return RamStorage() if self.small_writes else super().temp_storage(name)

    def open_file(self, name: str, **kwargs: Any) -> Any:
        """A file of the index, memory-mapped: reading a part of a segment cuts out only
        the bytes asked for, so opening the index reads (and holds) next to nothing."""
        with open(self._fpath(name), "rb") as f:
            try:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (ValueError, OSError):   # an empty file cannot be mapped
                return super().open_file(name, **kwargs)
        self._maps.add(mm)
        return _MappedFile(mm, 0, len(mm), name=name, **kwargs)

    def release_pages(self) -> None:
        """Let go of the pages the open maps have read (they stay in the page cache, and
        come back on the next read): a long-lived process keeps its segment readers
        open from one write to the next, and would otherwise hold every page any query
        ever touched."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        for mm in list(self._maps):
            try:
                if advice is not None:
                    mm.madvise(advice)
            except (ValueError, OSError):   # closed since, or the platform refuses
                pass


class _Region:
    """A read-only file object over part of a memory map (what :class:`_MappedFile` wraps)."""

    __slots__ = ("_mm", "_start", "_end", "_pos", "closed")

    def __init__(self, mm: mmap.mmap, start: int, length: int) -> None:
        self._mm, self._start, self._end, self._pos = mm, start, start + length, start
        self.closed = False

    def read(self, size: int | None = -1) -> bytes:
        pos = self._pos
        end = self._end if size is None or size < 0 else min(self._end, pos + size)
        if end <= pos:
            return b""
        self._pos = end
        return self._mm[pos:end]

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def readline(self, size: int | None = -1) -> bytes:
        found = self._mm.find(b"\n", self._pos, self._end)
        return self.read((self._end if found < 0 else found + 1) - self._pos
                         if size is None or size < 0 else size)

    def seek(self, where: int, whence: int = 0) -> int:
        self._pos = (self._start if whence == 0 else self._pos if whence == 1 else self._end) + where
        return self._pos - self._start

    def tell(self) -> int:
        return self._pos - self._start

    def close(self) -> None:
        self.closed = True   # the map itself goes when its last view does


class _MappedFile(StructFile):
    """A Whoosh file over part of a memory map; its parts (``subset``) share the map."""

    def __init__(self, mm: mmap.mmap, start: int, length: int, name: str | None = None,
                 onclose: Any = None) -> None:
        super().__init__(_Region(mm, start, length), name=name, onclose=onclose)
        self._mm, self._start = mm, start

    def get(self, position: int, length: int) -> bytes:
        start = self._start + position
        return self._mm[start:start + length]

    def subset(self, position: int, length: int, name: str | None = None) -> _MappedFile:
        return _MappedFile(self._mm, self._start + position, length, name=name or self._name)


_CODEC = _Codec(compression=0, inlinelimit=2)


class _Or(wq.Or):
    """An Or that always uses the binary union matcher: whoosh-reloaded 2.7.5's preloaded
    Or matcher returns a wrong top-k when an Or nests in an Or and a limit is given."""
    matcher_type = wq.Or.DEFAULT_MATCHER


def _or(items: list) -> Any:
    return items[0] if len(items) == 1 else _Or(items)


MAX_WORD_CHARS = 100


class _Analysis:
    """One tokenisation shared by indexing, querying and snippets."""

    def __init__(self, cfg: SearchConfig) -> None:
        self.stop = frozenset(STOP_WORDS | {"i", "s", "t", "d", "ll", "m", "re", "ve"})
        words = RegexTokenizer(WORD_PATTERN)
        self._findall = re.compile(WORD_PATTERN).findall
        # A "word" over 100 characters is never something to search for, and stemming one
        # of a megabyte (a hostile or broken file) would take minutes: such tokens are dropped.
        self.base = words | LowercaseFilter() | StopFilter(stoplist=self.stop, minsize=1, maxsize=MAX_WORD_CHARS)
        raw = {"porter2": stemmer_for_language("en"), "porter": porter_stem}.get(cfg.stemmer)
        self.stem: Callable[[str], str] = functools.lru_cache(100_000)(raw) if raw else str
        self.text = self.base | StemFilter(stemfn=raw) if raw else self.base

    def tokens(self, text: str) -> list[str]:
        # What ``self.base`` yields, without a token object per word.
        stop = self.stop
        return [w for w in map(str.lower, self._findall(text)) if w not in stop and len(w) <= MAX_WORD_CHARS]

    def stems(self, text: str) -> list[str]:
        return [self.stem(t) for t in self.tokens(text)]

    def key(self, word: str) -> str:
        """The term a lower-case word of a text is indexed as (stop words: themselves)."""
        return word if word in self.stop else self.stem(word)



if array("I").itemsize != 4:  # pragma: no cover - every platform Python supports today
    raise ImportError("gitmem.search.index needs 4-byte unsigned ints in array('I')")


class _ArrayPositions(formats.Positions):
    """Positions stored as a machine array of 32-bit integers instead of Whoosh's pickled
    list of deltas: checking a phrase decodes a posting with one C call instead of an
    unpickle and a Python loop (``gitmem.search.rank``).  Whoosh's own span queries
    read it through ``decode_positions`` as before."""

    def encode(self, poslist: Sequence[int]) -> bytes:
        return array("I", poslist).tobytes()

    def decode_positions(self, valuestring: bytes) -> list[int]:
        return array("I", valuestring).tolist()

    def decode_frequency(self, valuestring: bytes) -> int:
        return len(valuestring) // 4

    # ``decode_positions`` without a Python frame (gitmem.search.rank's phrase check)
    positions_array = staticmethod(functools.partial(array, "I"))




class _WeightedText(TEXT):
    """A positional text field whose value is a list of ``(term, weight)`` pairs, one per
    position (``None`` = a gap), so title and tag words can weigh more than body words
    inside one BM25 field."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.format = _ArrayPositions(field_boost=self.format.field_boost)

    def index(self, value: Any, **kw: Any) -> Any:
        poses: dict[str, list[int]] = {}
        weights: dict[str, float] = {}
        for pos, item in enumerate(value):
            if item is not None:
                term, weight = item
                plist = poses.get(term)
                if plist is None:
                    poses[term] = [pos]
                    weights[term] = weight
                else:
                    plist.append(pos)
                    weights[term] += weight
        encode = self.format.encode
        return [(term.encode("utf-8"), len(plist), weights[term], encode(plist)) for term, plist in poses.items()]


def _schema(cfg: SearchConfig, an: _Analysis, versions: bool = False) -> Schema:
    fields: dict[str, Any] = dict(
        # (a versions index holds several versions of a path: not unique there)
        path=ID(stored=True, unique=not versions, sortable=True), hash=COLUMN(VarBytesColumn()),
        id=ID(stored=True), title=STORED(), body=STORED(),
        text=_WeightedText(analyzer=an.text),        # title + tags + agent + body, weighted
        words=KEYWORD(),                              # unstemmed vocabulary: prefix, spelling
        when=TEXT(phrase=False),                      # month and year of created
        tags=KEYWORD(lowercase=True, commas=True), taglist=STORED(),
        entities=KEYWORD(lowercase=True, commas=True), links=KEYWORD(lowercase=True, commas=True),
        type=ID(stored=True), tier=ID(stored=True), status=ID(stored=True), scope=ID(),
        agent=ID(), source=ID(sortable=True), importance=NUMERIC(int, stored=True),
        context=STORED(), follows=ID(),              # context text (snippets); followed id
        created=NUMERIC(int, bits=64, signed=True),
        updated=NUMERIC(int, bits=64, signed=True), updated_iso=STORED(),
        recency=COLUMN(NumericColumn("q")))                 # updated or created, for listings
    if versions:
        fields.update(since=COLUMN(NumericColumn("q")),     # first commit (number) holding it
                      textlen=COLUMN(NumericColumn("I")))   # exact length of ``text``
    return Schema(**fields)


def _merge_group(sizes: list[int], tier_factor: int, min_group: int, max_docs: int | None = None,
                 max_segments: int | None = None) -> set[int]:
    """Which segments (indexes into ``sizes``, their document counts) a commit merges.

    Segments fall in size tiers (1 to ``tier_factor - 1`` documents, then up to
    ``tier_factor**2 - 1``, ...); the smallest tier holding ``min_group`` segments (and at
    least two) is merged, so each document is copied about once per tier.  With
    ``max_docs``, only the smallest segments of a tier that hold at most that many
    documents together (and, with ``max_segments``, at most that many segments) are
    merged; larger ones wait for the commits that fill their tier."""
    tiers: dict[int, list[int]] = {}
    for i, n in enumerate(sizes):
        tier = 0
        while n >= tier_factor:
            n, tier = n // tier_factor, tier + 1
        tiers.setdefault(tier, []).append(i)
    for tier in sorted(tiers):
        members = tiers[tier]
        if max_docs is not None:
            taken, total = [], 0
            for i in sorted(members, key=sizes.__getitem__):
                if total + sizes[i] > max_docs or len(taken) == max_segments:
                    break
                taken.append(i)
                total += sizes[i]
            members = taken
        if len(members) >= min_group and len(members) > 1:
            return set(members)
    return set()


class SearchIndex:
    """A Whoosh index of memories in ``directory`` (a cache: recreated when unusable)."""

    WRITE_TIMEOUT = 10.0      # seconds to wait for the index write lock
    MERGE_FACTOR = 20         # a commit merges a size tier once it holds this many segments
    VERSIONS = False          # True: documents are versions of memories (VersionIndex)
    REBUILD_SEGMENT_DOCS = 25_000  # documents per segment a rebuild writes (bounds its memory)
    BULK_DOCS = 500           # an upsert of this many documents holds its postings in memory
    PARALLEL_DOCS = 2_000     # a rebuild of this many documents uses a second process
    # The idle merge (merge_small) runs under the vault lock: one merge takes at most
    # this many segments (a few ms each to open and copy) of at most this many documents
    # together (0.3-0.8 ms each for 2 KB memories on a 2-core machine), so a merge holds
    # the lock well under 100 ms; larger segments merge as commits fill their size tier
    # (MERGE_FACTOR), never on an idle timer.
    IDLE_MERGE_DOCS = 60
    IDLE_MERGE_SEGMENTS = 6
    IN_MEMORY_POSTINGS = True  # False: rebuilds and large upserts use Whoosh's own posting pool

    def __init__(self, directory: str | Path, *, config: SearchConfig | None = None) -> None:
        self.cfg = config or SearchConfig()
        self.dir = Path(directory)
        self._lock = threading.RLock()
        self._an = _Analysis(self.cfg)
        self._schema = _schema(self.cfg, self._an, self.VERSIONS)
        self._weighting = scoring.BM25F(B=self.cfg.b, K1=self.cfg.k1, when_B=0.0)
        self._searcher: Any = None
        self._rank = Ranker(self.cfg, self._an)
        self._memo: dict[Any, Any] = {}      # per-searcher results (live docs, hidden docs)
        self.needs_rebuild = False
        schema = f"{SCHEMA_VERSION}:{self.cfg.schema_key()}{':versions' if self.VERSIONS else ''}".encode()
        self._stamp = {"distribution": "whoosh-reloaded", "version": whoosh_version(),
                       "schema": hashlib.sha256(schema).hexdigest()[:16]}
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._ix = self._open()
        except OSError as exc:
            raise StorageError(f"cannot open the search index in {self.dir}: {exc}") from exc

    # --- opening, stamping, recreating ------------------------------------------------

    def _open(self) -> Any:
        """Open the index if its stamp matches and a probe of everything reads back;
        otherwise recreate it empty (``needs_rebuild``)."""
        if read_json(self.dir / _STAMP) == self._stamp:
            # A probe can fail transiently while another process commits (its merge
            # deletes segment files this TOC still names): retry before judging.
            for delay in (0.0, 0.05, 0.2):
                time.sleep(delay)
                ix = self._probe()
                if ix is not None:
                    return ix
        return self._recreate()

    def _probe(self) -> Any:
        """The opened index if the stamp matches and everything reads back, else None."""
        if read_json(self.dir / _STAMP) != self._stamp:
            return None
        with warnings.catch_warnings():   # whoosh leaks the file it failed to read
            warnings.simplefilter("ignore", ResourceWarning)
            try:
                ix = _Storage(str(self.dir)).open_index(_INDEX_NAME, schema=self._schema)
                with ix.searcher() as s:
                    r = s.reader()
                    next(iter(r.lexicon("path")), None)
                    for n in list(r.all_doc_ids())[:1]:
                        r.stored_fields(n)
                return ix
            except Exception:  # noqa: BLE001 - whatever broke, the cache is unusable
                gc.collect()   # (closes what the failed open left behind)
                return None

    def _recreate(self) -> Any:
        """Delete the index files (and the state describing them) and start empty.

        Done under Whoosh's write lock, and only if the index still does not open
        once the lock is held: a writer in another process is never mid-commit while
        its files are deleted, and an index another process just rebuilt is kept."""
        lock = FileStorage(str(self.dir)).lock(f"{_INDEX_NAME}_WRITELOCK")
        deadline = time.monotonic() + self.WRITE_TIMEOUT
        while not lock.acquire(blocking=False):
            if time.monotonic() >= deadline:
                raise StorageError("index busy: another process holds the search index "
                                   "write lock", hint="retry in a moment")
            time.sleep(0.05)
        try:
            ix = self._probe()
            if ix is not None:
                return ix
            for p in self.dir.iterdir():
                if p.name == _STATE or (p.name.startswith((f"_{_INDEX_NAME}_",
                                                           f"{_INDEX_NAME}_"))
                                        and p.name != f"{_INDEX_NAME}_WRITELOCK"):
                    p.unlink(missing_ok=True)
            ix = _Storage(str(self.dir)).create_index(self._schema, indexname=_INDEX_NAME)
            write_json_atomic(self.dir / _STAMP, self._stamp)
        finally:
            lock.release()
        self.needs_rebuild = True
        return ix

    # --- writing ------------------------------------------------------------------------

    def _writer(self, limitmb: int, small: bool) -> Any:
        deadline = time.monotonic() + self.WRITE_TIMEOUT
        storage = self._ix.storage
        while True:
            try:
                # Scratch files in memory for small writes.  (Segments stay compound: a
                # reader opens a compound segment's one file at once, separate files only
                # when first used, which fails once a concurrent merge has deleted them.)
                storage.small_writes = small
                return self._ix.writer(timeout=min(1.0, self.WRITE_TIMEOUT), limitmb=limitmb,
                                       codec=_CODEC)
            except whoosh.index.LockError:
                if time.monotonic() >= deadline:
                    raise StorageError("index busy: another process holds the search index "
                                       "write lock", hint="retry in a moment") from None
            except Exception as exc:  # noqa: BLE001
                raise StorageError(f"cannot write the search index: {exc}",
                                   hint="run 'gitmem reindex'") from exc
            finally:
                storage.small_writes = False

    def _commit(self, work: Callable[[Any], None], limitmb: int = 64, small: bool = True,
                **commit_kw: Any) -> None:
        with self._lock:
            w = self._writer(limitmb, small)
            try:
                work(w)
                w.commit(**commit_kw)
            except Exception as exc:  # noqa: BLE001
                try:
                    w.cancel()
                except Exception:  # noqa: BLE001
                    pass
                raise StorageError(f"search index write failed: {exc}",
                                   hint="run 'gitmem reindex'") from exc
            # No eager searcher reopen (~15 ms at 10k docs): the next search sees
            # that the index changed (up_to_date) and reopens then.

    def _segment_count(self) -> int:
        try:
            return len(self._ix._segments())
        except Exception:  # noqa: BLE001
            return 0

    def _in_memory(self, w: Any) -> bool:
        return self.IN_MEMORY_POSTINGS and _MemoryPool.fits(w.schema)

    def upsert(self, docs: Sequence[IndexDoc], *, new: Collection[str] = ()) -> None:
        """Add or replace documents (keyed by ``path``) in one commit; the last copy of a
        path in ``docs`` wins.  Paths listed in ``new`` are known not to be indexed yet
        (a file just created) and skip the replace step, which has to open every
        segment's term index (~5-10 ms at 10k documents)."""
        latest = {d.path: d for d in docs}
        elsewhere: list[Any] = []   # a segment a child process wrote

        def work(w: Any) -> None:
            if len(latest) >= self.BULK_DOCS and self._in_memory(w):
                # A large batch (an import): postings in memory, as a rebuild does, and
                # for a very large one half of them in a child process (see rebuild).
                batch = list(latest.values())
                for d in batch:
                    if d.path not in new:
                        w.delete_by_term("path", d.path)   # (what update_document does first)
                half = len(batch) // 2 if len(batch) >= self.PARALLEL_DOCS else 0
                elsewhere[:] = self._index_split(w, batch[:half], lambda: batch[half:])[0]
                return
            for d in latest.values():
                (w.add_document if d.path in new else w.update_document)(**index_fields(d, self._an, self.cfg))

        if latest:
            policy = self._merge_policy(self.MERGE_FACTOR)
            with _collector_paused(len(latest) >= self.BULK_DOCS):
                self._commit(work, mergetype=lambda w, segments: [*policy(w, segments), *elsewhere])

    def delete(self, paths: Sequence[str]) -> None:
        """Remove documents by path (unknown paths are ignored)."""
        if paths:
            self._commit(lambda w: [w.delete_by_term("path", p) for p in set(paths)],
                         mergetype=self._merge_policy(self.MERGE_FACTOR))

    def _merge_policy(self, factor: int, max_docs: int | None = None,
                      max_segments: int | None = None) -> Callable[[Any, list], list]:
        """A Whoosh merge policy: segments are grouped in size tiers (1-19 documents,
        20-399, 400-7,999, ... for MERGE_FACTOR 20); the smallest tier holding ``factor``
        segments is merged into the segment being written.  Each document is thus copied
        about once per tier, a merge costs about as much as the small segments it takes,
        and only one commit in 20 merges (each extra segment costs a query ~20 µs).
        (Whoosh's MERGE_SMALL re-copied the growing segment every 5th commit.)"""
        def policy(writer: Any, segments: list) -> list:
            group = _merge_group([seg.doc_count_all() for seg in segments], self.MERGE_FACTOR, factor,
                                 max_docs, max_segments)
            for i in group:
                reader = SegmentReader(writer.storage, writer.schema, segments[i])
                writer.add_reader(reader)
                reader.close()
            return [seg for i, seg in enumerate(segments) if i not in group]
        return policy

    def merge_small(self, rounds: int | None = None) -> bool:
        """Merge small segments left by recent commits, as long as some size tier of at
        most :attr:`IDLE_MERGE_DOCS` documents holds two or more, at most
        :attr:`IDLE_MERGE_SEGMENTS` of them per merge (call when idle: a burst
        of commits leaves up to ``MERGE_FACTOR - 1`` segments per tier, and each segment
        costs every query a little).  ``rounds`` caps the merges (one tier each); returns
        True when there may be more to merge."""
        done = 0
        while self._idle_merge_group():
            self._commit(lambda w: None, mergetype=self._merge_policy(2, self.IDLE_MERGE_DOCS,
                                                                      self.IDLE_MERGE_SEGMENTS))
            done += 1
            if rounds is not None and done >= rounds:
                return True
        return False

    def _idle_merge_group(self) -> bool:
        """Whether :meth:`merge_small` has segments to merge (without opening a writer,
        which would write a new table of contents even for nothing)."""
        try:
            sizes = [seg.doc_count_all() for seg in self._ix._segments()]
        except Exception:  # noqa: BLE001 - an unreadable index: nothing to merge here
            return False
        return bool(_merge_group(sizes, self.MERGE_FACTOR, 2, self.IDLE_MERGE_DOCS, self.IDLE_MERGE_SEGMENTS))

    def rebuild(self, docs: Iterable[IndexDoc],
                progress: Callable[[int], None] | None = None, *, total: int | None = None) -> int:
        """Replace the whole index with ``docs`` and return how many were indexed (a
        repeated path keeps its first copy).  Up to :attr:`REBUILD_SEGMENT_DOCS` documents
        this is one commit and readers see the old index until it; a larger rebuild
        commits one segment of that many documents at a time.  ``progress(n)`` is called
        every 500 documents and at the end.

        ``total`` (about how many ``docs`` there are) lets a large rebuild use a second
        process: the first half of each round is handed to a child process, which writes
        it as a segment of its own while this one reads and indexes the second half."""
        count, seen = 0, set()
        pending = iter(docs)
        more = True
        elsewhere: list[Any] = []   # segments of this round built by a child process

        def take(n: int) -> list[IndexDoc]:
            nonlocal more
            out: list[IndexDoc] = []
            if n <= 0:
                return out
            for d in pending:
                if d.path not in seen:
                    seen.add(d.path)
                    out.append(d)
                    if len(out) >= n:
                        return out
            more = False
            return out

        def work(w: Any) -> None:
            nonlocal count
            elsewhere.clear()
            if not self._in_memory(w):
                for d in take(self.REBUILD_SEGMENT_DOCS):
                    w.add_document(**index_fields(d, self._an, self.cfg))
                    count += 1
                    if progress and count % 500 == 0:
                        progress(count)
                return
            size = self.REBUILD_SEGMENT_DOCS
            left = size if total is None else min(size, total - count)
            first = take(left // 2) if left >= self.PARALLEL_DOCS else []
            base = count
            segments, added = self._index_split(w, first, lambda: take(size - len(first)),
                                                (lambda n: progress(base + n)) if progress else None)
            elsewhere.extend(segments)
            count += added

        # The first segment replaces the index; a large vault's further segments are
        # added to it (each holds at most REBUILD_SEGMENT_DOCS documents, which bounds
        # the memory a rebuild takes).
        with _collector_paused():
            self._commit(work, limitmb=256, small=False, mergetype=lambda w, segments: [*elsewhere])
            while more:
                self._commit(work, limitmb=256, small=False,
                             mergetype=lambda w, segments: [*segments, *elsewhere])
        self.needs_rebuild = False
        if progress:
            progress(count)
        return count

    def _index_split(self, w: Any, first: list[IndexDoc], rest: Callable[[], list[IndexDoc]],
                     every_500: Callable[[int], None] | None = None) -> tuple[list[Any], int]:
        """Index ``first`` and then ``rest()`` into writer ``w``'s in-memory pool, handing
        ``first`` to a child process where one can be had (see :meth:`_build_in_child`):
        it writes them as a segment of its own while this process gets and indexes
        ``rest()``.  Returns the child's segments, to be listed before ``w``'s own so
        documents keep their order, and how many documents were indexed.  ``every_500(n)``
        is told about how many are done (both processes go at about the same pace)."""
        child = self._build_in_child(first) if first else None
        mine = rest() if child is not None else first + rest()
        pace = 2 if child is not None else 1
        self._add_to_pool(w, mine, (lambda n: every_500(n * pace)) if every_500 else None)
        if child is None:
            return [], len(mine)
        # (the child failed: this process writes the segment it would have written)
        return [child() or self._write_segment(first)], len(first) + len(mine)

    def _add_to_pool(self, w: Any, docs: Sequence[IndexDoc],
                     every_500: Callable[[int], None] | None = None) -> None:
        """Index ``docs`` into a new in-memory pool of writer ``w`` (see :class:`_MemoryPool`);
        ``every_500(n)`` is called after each 500th."""
        w.pool.cleanup()
        w.pool = _MemoryPool()
        add = functools.partial(w.pool.add_document, w)
        for n, d in enumerate(docs, 1):
            add(index_fields(d, self._an, self.cfg))
            if every_500 is not None and n % 500 == 0:
                every_500(n)

    def _write_segment(self, docs: Sequence[IndexDoc]) -> Any:
        """Write ``docs`` as a new segment of this index, not listed in it yet (the caller
        holds the write lock and lists it in its commit)."""
        storage = self._ix.storage
        storage.small_writes = True   # scratch space in memory, apart from the main writer's folder
        try:
            w = SegmentWriter(self._ix, _lk=False, codec=_CODEC, limitmb=256)
        finally:
            storage.small_writes = False
        self._add_to_pool(w, docs)
        return w._finalize_segment()

    def _build_in_child(self, docs: Sequence[IndexDoc]) -> Callable[[], Any] | None:
        """Start a child process writing ``docs`` as a new segment of this index (not yet
        listed in it); returns a function that waits for it and gives the segment, or None
        if the child failed.  None at once where a child cannot be had safely: one core, no
        ``fork``, or other threads in this process (a forked child gets only this thread,
        and a lock another thread held would stay locked in it)."""
        if not hasattr(os, "fork") or _cores() < 2 or _other_threads():
            return None
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return None
        if pid == 0:  # the child: never returns into the caller's code
            status = 1
            try:
                os.close(read_end)
                segment = self._write_segment(docs)
                with os.fdopen(write_end, "wb") as out:
                    out.write(pickle.dumps(segment))
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)

        def finish() -> Any:
            with os.fdopen(read_end, "rb") as result:
                payload = result.read()
            _, status = os.waitpid(pid, 0)
            if status != 0 or not payload:
                return None
            return pickle.loads(payload)  # noqa: S301 - written by this process's own child
        return finish

    def optimize(self) -> None:
        """Merge all segments into one.  Slow (about 1 s per 1,000 documents): call it only
        when idle; commits already merge small segments, so this is rarely needed."""
        if self._segment_count() > 1:
            self._commit(lambda w: None, small=False, mergetype=OPTIMIZE)

    # --- reading --------------------------------------------------------------------------

    def _refresh(self) -> Any:
        """The current searcher: reopened when this or another process committed."""
        try:
            if self._searcher is None:
                self._memo = {}
                self._searcher = self._ix.searcher(weighting=self._weighting)
            elif not self._searcher.up_to_date():
                old, self._searcher, self._memo = self._searcher, None, {}
                self._searcher = self._reopen(old)
            return self._searcher
        except Exception as exc:  # noqa: BLE001
            self._searcher = None
            raise StorageError(f"cannot read the search index: {exc}",
                               hint="run 'gitmem reindex'") from exc

    def _reopen(self, old: Any) -> Any:
        """A searcher of the index as it is now, reusing the readers of ``old`` for the
        segments that did not change (same segment, same deletions): a write adds one
        small segment, and opening every segment again costs ~1 ms each.  The rest of
        ``old`` is closed.

        Not Whoosh's Searcher.refresh(): it reuses segment readers whose deletions changed
        (deleted documents come back), puts merged-away segments back, and fails on an
        empty index."""
        leaves = [leaf for leaf, _ in old.reader().leaf_readers()]
        kept: list[Any] = []
        try:
            for _ in range(9):
                try:    # (as Whoosh retries: a merge may delete a file just as it is opened)
                    searcher, kept = self._open_reusing(leaves)
                    return searcher
                except OSError:
                    time.sleep(0.05)
            searcher, kept = self._open_reusing(leaves)
            return searcher
        finally:
            reused = set(map(id, kept))
            for leaf in leaves:             # the old searcher's readers nobody uses now
                if id(leaf) not in reused:
                    leaf.close()

    def _open_reusing(self, leaves: list[Any]) -> tuple[Any, list[Any]]:
        """(a searcher of the index's current segments, the readers of ``leaves`` it uses)."""
        toc = self._ix._read_toc()
        if len(toc.segments) < 2:       # nothing worth reusing: opened as Whoosh opens it
            return self._ix.searcher(weighting=self._weighting), []
        reusable = {leaf.segment().segment_id(): leaf for leaf in leaves
                    if isinstance(leaf, SegmentReader) and leaf.segment() is not None}
        readers, opened, kept = [], [], []
        try:
            for seg in toc.segments:
                leaf = reusable.pop(seg.segment_id(), None)
                if leaf is not None and set(leaf.segment().deleted_docs()) == set(seg.deleted_docs()):
                    kept.append(leaf)
                else:
                    leaf = SegmentReader(self._ix.storage, toc.schema, seg, generation=toc.generation)
                    opened.append(leaf)
                readers.append(leaf)
        except BaseException:
            for leaf in opened:
                leaf.close()
            raise
        self._ix.storage.release_pages()    # as a reopen of every segment would
        return whoosh.searching.Searcher(MultiReader(readers, generation=toc.generation),
                                         weighting=self._weighting, fromindex=self._ix), kept

    def doc_count(self) -> int:
        with self._lock:
            return self._refresh().doc_count()

    def indexed(self) -> dict[str, str]:
        """``path -> hash`` of every indexed document (for catch-up diffing)."""
        with self._lock:
            r = self._refresh().reader()
            if not r.doc_count_all():   # an index with no segments has no columns
                return {}
            paths, hashes = r.column_reader("path"), r.column_reader("hash")
            return {paths[n]: hashes[n].decode() for n in r.all_doc_ids()}

    def hashes_of(self, paths: Iterable[str]) -> dict[str, str]:
        """``path -> hash`` of those of ``paths`` that are indexed (a lookup each)."""
        with self._lock:
            s = self._refresh()
            r = s.reader()
            wanted = set(paths)
            if not wanted or not r.doc_count_all():   # an index with no segments has no columns
                return {}
            hashes = r.column_reader("hash")
            return {p: hashes[n].decode() for p in wanted for n in self._docs(s, wq.Term("path", p))}

    def followers(self, ids: Collection[str]) -> list[str]:
        """Paths of the documents whose ``follows`` names one of ``ids`` (their context
        holds those memories' text)."""
        if not ids:
            return []
        with self._lock:
            s = self._refresh()
            docs = self._docs(s, _or([wq.Term("follows", i.lower()) for i in set(ids)]))
            return sorted(s.stored_fields(d)["path"] for d in docs)

    def get_state(self, key: str) -> str | None:
        value = (read_json(self.dir / _STATE) or {}).get(key)
        return value if isinstance(value, str) else None

    def set_state(self, key: str, value: str) -> None:
        """Store a small string beside the index (atomically; cleared with the index)."""
        with self._lock:
            data = read_json(self.dir / _STATE) or {}
            data[key] = value
            try:
                write_json_atomic(self.dir / _STATE, data)
            except OSError as exc:
                raise StorageError(f"cannot write search index state: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._searcher is not None:
                self._searcher.close()
                self._searcher = None

    def __enter__(self) -> SearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- evaluating queries -------------------------------------------------------------

    def prefix_terms(self, prefix: str) -> list[str]:
        """The words ``prefix*`` expands to: the PREFIX_EXPANSION_LIMIT most frequent."""
        with self._lock:
            return self._rank.prefix_terms(self._postings(self._refresh()), prefix)

    def _postings(self, s: Any) -> _Postings:
        """The ranker's view of the searcher's reader (kept until the searcher changes)."""
        if "postings" not in self._memo:
            self._memo["postings"] = _Postings(s.reader())
        return self._memo["postings"]

    def _filter_query(self, n: Any) -> Any:
        if isinstance(n, sq.FieldTerm):
            if n.prefix:
                return wq.Prefix(n.field, n.value)
            if n.field in ("tags", "entities") and "," in n.value:
                return wq.And([wq.Term(n.field, v.strip()) for v in n.value.split(",")])
            return wq.Term(n.field, n.value)
        if isinstance(n, sq.DateRange):
            return wq.NumericRange(n.field, n.start, None if n.end is None else n.end - 1)
        if isinstance(n, sq.Not):
            return wq.Not(self._filter_query(n.item))
        parts = [self._filter_query(c) for c in n.items]
        return _or(parts) if isinstance(n, sq.Or) else wq.And(parts)

    # --- searching ----------------------------------------------------------------------

    def search(self, query: str, *, limit: int = 10, offset: int = 0,
               include_inactive: bool = False,
               filters: Mapping[str, str | Sequence[str]] | None = None) -> SearchPage:
        """Run a query (syntax: :mod:`gitmem.search.query`; text that is not valid syntax is
        read as text); InvalidQuery only for a bad ``filters`` entry or negative paging."""
        return self._run(query, limit, offset, include_inactive, filters, None)

    def _run(self, query: str, limit: int, offset: int, include_inactive: bool,
             filters: Mapping[str, str | Sequence[str]] | None,
             snap: Callable[[Any], _Snapshot] | None) -> SearchPage:
        """:meth:`search`, over the snapshot ``snap(searcher)`` gives when set."""
        if limit < 0 or offset < 0:
            raise InvalidQuery("limit and offset must not be negative")
        pq = sq.parse_query(query or "")
        pq.add_filters(filters)
        with self._lock:
            try:
                return self._search(pq, query or "", limit, offset, include_inactive,
                                    None if snap is None else snap(self._refresh()))
            except (InvalidQuery, StorageError):
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. a segment file vanished or broke
                try:
                    self.close()
                except Exception:  # noqa: BLE001
                    self._searcher = None
                raise StorageError(f"search failed: {exc}", hint="run 'gitmem reindex'") from exc

    def _search(self, pq: sq.ParsedQuery, query: str, limit: int, offset: int,
                include_inactive: bool, snap: _Snapshot | None = None) -> SearchPage:
        """Evaluate a parsed query; with ``snap``, over the snapshot's documents only,
        scored and ordered as a fresh index of just those documents would."""
        s = self._refresh()
        allow = restrict = None
        if pq.filters:
            allow = self._docs(s, wq.And([self._filter_query(f) for f in pq.filters]))
        if snap is not None:
            allow = snap.docs if allow is None else allow & snap.docs
        if not include_inactive and not pq.filters_status:
            restrict = self._hidden(s)
        hl: set[str] = set()
        want = offset + limit
        r = self._postings(s) if snap is None else snap.view(self._postings(s))
        live = (lambda: self._live(s)) if snap is None else (lambda: snap.docs)
        if pq.natural and (pq.words or pq.phrases):
            ranked, total, mode = self._rank.rank_natural(r, pq, hl, allow, restrict, want)
        elif not pq.natural and pq.expr is not None:
            ranked, total, mode = self._rank.rank_syntax(
                r, pq, hl, allow, restrict, want,
                lambda n: self._docs(s, self._filter_query(n)), live)
        elif allow is not None and not allow:
            ranked, total, mode = [], 0, "filter"
        elif snap is not None:   # filters only, newest first, ties as in a fresh index
            found = allow - (restrict or set())
            recency = s.reader().column_reader("recency")
            top = heapq.nlargest(want, found, key=lambda d: (recency[d], snap.order[d]))
            ranked, total, mode = [(d, 0.0) for d in top], len(found), "filter"
        else:   # filters only: newest first
            res = s.search(wq.Every(), limit=max(want, 1), filter=allow, mask=restrict or None,
                           sortedby="recency", reverse=True)
            total = len((self._live(s) if allow is None else allow) - (restrict or set()))
            ranked, mode = [(h.docnum, 0.0) for h in res], "filter"
        snippet = Snippeter(hl, self._an.key)
        hits = [hit(s.stored_fields(dn), sc, snippet) for dn, sc in ranked[offset:want]]
        suggestion = self._rank.suggest(r, pq, query) if total == 0 else None
        return SearchPage(hits, total, suggestion, mode)

    def _hidden(self, s: Any) -> set[int]:
        """Archived, deleted and superseded documents (kept until the searcher changes)."""
        if "hidden" not in self._memo:
            self._memo["hidden"] = self._docs(
                s, _Or([wq.Term("status", x) for x in INACTIVE_STATUSES]))
        return self._memo["hidden"]

    def hits_for(self, query: str, paths: Collection[str], *, include_inactive: bool = False,
                 filters: Mapping[str, str | Sequence[str]] | None = None) -> list[SearchHit]:
        """Hits (score 0) for those of ``paths`` that pass the query's filters and the
        inactive-status rule, whether or not they hold its words: candidates another
        ranking found (hybrid search's vectors), with snippets marking the query's words."""
        pq = sq.parse_query(query or "")
        pq.add_filters(filters)
        if not paths:
            return []
        with self._lock:
            try:
                s = self._refresh()
                docs = self._docs(s, _or([wq.Term("path", p) for p in set(paths)]))
                if pq.filters:
                    docs &= self._docs(s, wq.And([self._filter_query(f) for f in pq.filters]))
                if not include_inactive and not pq.filters_status:
                    docs -= self._hidden(s)
                snippet = Snippeter({self._an.stem(w) for t in pq.texts() for w in self._an.tokens(t)
                                     if w not in sq.QUESTION_WORDS}, self._an.key)
                return [hit(s.stored_fields(d), 0.0, snippet) for d in sorted(docs)]
            except (InvalidQuery, StorageError):
                raise
            except Exception as exc:  # noqa: BLE001 - as in search()
                self._searcher = None
                raise StorageError(f"search failed: {exc}", hint="run 'gitmem reindex'") from exc

    def _docs(self, s: Any, q: Any) -> set[int]:
        """Live documents matching a filter query, read from the postings where possible
        (Whoosh's own docs_for_query walks its matchers a document at a time)."""
        r = s.reader()
        if isinstance(q, wq.NumericRange):
            q = q.simplify(r)
        if isinstance(q, wq.ConstantScoreQuery):
            return self._docs(s, q.child)
        if isinstance(q, (wq.Term, wq.MultiTerm)):
            texts = [q.text] if isinstance(q, wq.Term) else list(q._btexts(r))
            out: set[int] = set()
            for leaf, base in r.leaf_readers():
                deleted = leaf.deleted_docs_set if leaf.has_deletions() else ()
                for t in texts:
                    if leaf.doc_frequency(q.fieldname, t):
                        for ids, _, _ in _blocks(leaf.postings(q.fieldname, t)):
                            out.update(base + i for i in ids if i not in deleted)
            return out
        if isinstance(q, (wq.And, wq.Or)) and q.subqueries:
            sets = [self._docs(s, c) for c in q.subqueries]
            return set.intersection(*sets) if isinstance(q, wq.And) else set().union(*sets)
        if isinstance(q, wq.Not):
            return self._live(s) - self._docs(s, q.query)
        return set(s.docs_for_query(q))

    def _live(self, s: Any) -> set[int]:
        """Every live document number (kept until the searcher changes; never mutate)."""
        if "live" not in self._memo:
            self._memo["live"] = set(s.reader().all_doc_ids())
        return self._memo["live"]


# --- versions: the vault as of a commit ------------------------------------------------------


class _Snapshot:
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

    def view(self, p: _Postings) -> _SnapshotPostings:
        return _SnapshotPostings(p, self)

    def count(self, p: _Postings, fieldname: str, text: str) -> int:
        """How many of the snapshot's documents hold the term."""
        mask, size, n = self._mask, len(self._mask), 0
        for seg in p.segments():
            if seg.doc_frequency(fieldname, text):
                base = seg.base
                for ids, _, _ in seg.blocks(fieldname, text):
                    n += sum(mask[base + i] for i in ids if base + i < size)
        return n


class _SnapshotPostings:
    """The index as the ranker reads it (:class:`gitmem.search.rank.Postings`), with a
    :class:`_Snapshot`'s statistics and ties in path order (one per query)."""

    def __init__(self, p: _Postings, snap: _Snapshot) -> None:
        self._p, self._snap = p, snap
        self._df: dict[tuple[str, Any], int] = {}
        self.order = snap.order                   # ties by path (rank.Ranker.top)
        self.segments = p.segments
        self.terms_within = p.terms_within

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


class VersionIndex(SearchIndex):
    """Every version of every memory along a line of commits, each document tagged with
    the number of the first commit holding it (``since``); a search at commit number
    ``n`` sees the versions alive then and ranks them as a fresh index of that commit's
    tree would.  A cache like the main index: rebuilt from git when unusable."""

    VERSIONS = True

    def add_versions(self, docs: Sequence[tuple[IndexDoc, int]]) -> None:
        """Add versions, each with the number of the first commit holding it."""
        def work(w: Any) -> None:
            for d, since in docs:
                fields = index_fields(d, self._an, self.cfg)
                fields.update(since=since, textlen=sum(1 for t in fields["text"] if t is not None))
                w.add_document(**fields)

        if docs:
            self._commit(work, limitmb=128, small=len(docs) < 50,
                         mergetype=self._merge_policy(self.MERGE_FACTOR))

    def clear(self) -> None:
        """Remove every document."""
        self._commit(lambda w: None, mergetype=CLEAR)
        self.needs_rebuild = False

    def search_at(self, query: str, at: int, until: Mapping[str, int], token: str, *,
                  limit: int = 10, offset: int = 0, include_inactive: bool = False,
                  filters: Mapping[str, str | Sequence[str]] | None = None) -> SearchPage:
        """Search the versions alive at commit number ``at``: added at or before it
        (``since <= at``) and not ended by then.  ``until`` maps the key of each ended
        version (:func:`version_key`) to the number of the commit that changed or removed
        it; ``token`` names that state (snapshots are cached per token and ``at``)."""
        def snap(s: Any) -> _Snapshot:
            key = ("at", at, token)
            if key not in self._memo:
                since, paths, lengths, order = self._columns(s)
                docs = {d for d in range(len(since)) if since[d] <= at
                        and until.get(version_key(paths[d], since[d]), at + 1) > at}
                docs.difference_update(self._memo["deleted"])
                self._memo = {k: v for k, v in self._memo.items()      # older states' snapshots go
                              if not (isinstance(k, tuple) and k[0] == "at" and k[2] != token)}
                self._memo[key] = _Snapshot(docs, lengths, order)
            return self._memo[key]
        return self._run(query, limit, offset, include_inactive, filters, snap)


    def _columns(self, s: Any) -> tuple[list[int], list[str], list[int], list[int]]:
        """Per document: ``since``, path, text length, and the rank of its path among all
        paths (kept until the searcher changes)."""
        if "columns" not in self._memo:
            r = s.reader()
            if r.doc_count_all():
                paths = list(r.column_reader("path"))
                cols = (list(r.column_reader("since")), paths, list(r.column_reader("textlen")))
                rank = [0] * len(paths)
                for i, d in enumerate(sorted(range(len(paths)), key=paths.__getitem__)):
                    rank[d] = i
                self._memo["deleted"] = set(range(len(paths))) - set(r.all_doc_ids())
            else:
                cols, rank = ([], [], []), []
                self._memo["deleted"] = set()
            self._memo["columns"] = (*cols, rank)
        return self._memo["columns"]


def version_key(path: str, since: int) -> str:
    """The key of one version of a memory in a :class:`VersionIndex`."""
    return f"{since}:{path}"
