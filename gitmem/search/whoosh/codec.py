"""gitmem's postings codec and in-memory posting pool, built on Whoosh's W3 codec.

Writing: :class:`PostingsWriter` (blocks as machine arrays, one-posting lists inlined),
:class:`FieldWriter` (a whole term's postings at once), :class:`Codec` (the three,
as :data:`CODEC`).  Reading: :class:`LeafMatcher` (a block read with a few C calls).
A rebuild's postings: :class:`MemoryPool` (term by term in memory instead of Whoosh's
external sort).  The Whoosh internals these classes override or read are listed in
:mod:`.internals`.
"""

from __future__ import annotations

import functools
import io
import pickle
import struct
import zlib
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import accumulate
from typing import Any

from whoosh import formats
from whoosh.codec.whoosh3 import WHOOSH3_HEADER_MAGIC, W3Codec, W3FieldWriter, W3LeafMatcher, W3PostingsWriter
from whoosh.system import pack_uint
from whoosh.util.numeric import byte_to_length, length_to_byte

__all__ = ["PostingsWriter", "LeafMatcher", "BlockValues", "FieldWriter", "KnownLengths", "Codec", "CODEC",
           "MemoryPool", "TermPostings", "term_values"]

# Whoosh's own W3 blocks pickle Python lists, an object per posting id, weight and
# value (~400 objects and a generator per block: most of a phrase query's time); here
# ids, weights and value lengths are machine arrays and the values one string, so reading
# a block is a few C calls.  Uncompressed (zlib was half the cost of reading a common
# word).  One-posting terms (all of a write's one-document segment) are inlined in the
# term table.  Segments record their codec: plain W3 segments stay readable.


_INT = struct.Struct("!i")      # a block's length (Whoosh's ``write_int``)
_HEAD_BYTES = 128                # the length and the pickled header of a block fit in this
_PICKLE = pickle.HIGHEST_PROTOCOL   # (bytes as bytes: protocol 3 and later)


class PostingsWriter(W3PostingsWriter):
    # Whoosh's block state, as this class reads and sets it (set by Whoosh's own code)
    _postfile: Any
    _blockcount: int
    _compression: int
    _terminfo: Any
    _maxweight: float
    _minlength: int | None
    _maxlength: int

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

    def _write_block(self, last: bool = False) -> None:
        # Whoosh's own, with the block's data and header pickled with the current protocol
        # instead of protocol 2, which stores each bytes object as a latin-1 string that
        # unpickling decodes and encodes again (18 us per block instead of 0.4 us; every
        # query reads thousands of blocks).  Readers unpickle either.
        postfile = self._postfile
        if not self._blockcount:
            postfile.write(WHOOSH3_HEADER_MAGIC)
        self._terminfo.add_block(self)
        data = pickle.dumps((self._mini_ids(), self._mini_weights(), self._mini_values()), _PICKLE)
        comp = self._compression
        if comp:
            data = zlib.compress(data, comp)
        ids = self._ids
        info = pickle.dumps((len(ids), ids[-1], self._maxweight, comp, length_to_byte(self._minlength),
                             length_to_byte(self._maxlength)), _PICKLE)
        length = len(info) + len(data)
        postfile.write_int(-length if last else length)    # (negative: the last block)
        postfile.write(info)
        postfile.write(data)
        self._blockcount += 1
        self._new_block()


class LeafMatcher(W3LeafMatcher):
    # Whoosh's block state, as :meth:`_goto` sets it (set by Whoosh's own code too)
    _data: Any
    _ids: Any
    _weights: Any
    _values: Any
    _blocklength: int
    _maxid: int
    _postfile: Any
    _i: int
    _lastblock: bool
    _nextoffset: int
    _dataoffset: int
    _maxweight: float
    _compression: int
    _minlength: int
    _maxlength: int

    def _goto(self, position: int) -> None:
        # Whoosh's own: a seek, a read of the length, then an unpickle of the block's
        # header from the file, which calls ``read`` once per opcode (a dozen Python
        # calls per block).  Here: one cut of the mapped file, unpickled in memory.
        head = self._postfile.get(position, _HEAD_BYTES)
        buf = io.BytesIO(head)
        buf.seek(_INT.size)
        try:
            count, maxid, maxweight, comp, low, high = pickle.load(buf)  # noqa: S301 - the index's own block header
        except (EOFError, pickle.UnpicklingError, ValueError):      # (a header longer than the cut)
            super()._goto(position)
            return
        self._data = self._ids = self._weights = self._values = None
        self._i = 0
        length = _INT.unpack_from(head)[0]
        if length < 0:                              # (the last block)
            self._lastblock = True
            length = -length
        self._nextoffset = position + _INT.size + length
        self._dataoffset = position + buf.tell()
        self._blocklength, self._maxid, self._maxweight, self._compression = count, maxid, maxweight, comp
        self._minlength, self._maxlength = byte_to_length(low), byte_to_length(high)

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

    def block_values(self) -> BlockValues | None:
        """The current block's values, if this codec packed them (variable-size values:
        one string, the values' lengths in front), cut out when asked and kept past the
        block; None for a block in Whoosh's own layout."""
        if self._data is None:
            self._read_data()
        vs, fixed = self._data[2], self._fixedsize
        if not isinstance(vs, bytes) or not (fixed is None or fixed < 0):
            return None
        return BlockValues(vs, self._blocklength)

    def _read_values(self) -> None:
        packed = self.block_values()
        if packed is None:
            super()._read_values()
        else:
            self._values = tuple(packed.at(range(self._blocklength)))


class BlockValues:
    """A packed block's values: one string, the value lengths in front; each value's
    offset is worked out the first time one is asked for."""

    __slots__ = ("_vs", "_n", "_ends")

    def __init__(self, vs: bytes, n: int) -> None:
        self._vs, self._n = vs, n
        self._ends: list[int] | None = None

    def size(self) -> int:
        """The bytes of all the block's values."""
        return len(self._vs) - 4 * self._n

    def whole(self) -> tuple[bytes, bytes]:
        """Every value of the block: their sizes in bytes (a machine array of 32-bit
        integers) and the values, one after another."""
        cut = 4 * self._n
        return self._vs[:cut], self._vs[cut:]

    def at(self, at: Sequence[int] | range) -> list[bytes]:
        """The values at these indexes of the block."""
        ends = self._ends
        if ends is None:
            n = self._n
            ends = self._ends = list(accumulate(array("I", self._vs[:4 * n]), initial=4 * n))
        return list(map(self._vs.__getitem__, map(slice, map(ends.__getitem__, at),
                                                   map(ends.__getitem__, map((1).__add__, at)))))


class FieldWriter(W3FieldWriter):
    def add_postings(self, schema: Any, lengths: Any, items: Any) -> None:
        # Whoosh looks up a document's field length once per posting, and each lookup
        # checks that the length column's file exists (a stat, ~7 us): remembered here,
        # a reindex spends its time indexing rather than in stat calls.
        known = KnownLengths(lengths) if lengths else lengths
        if isinstance(items, TermPostings):
            self._add_terms(schema, known, items)
        else:
            super().add_postings(schema, known, items)

    def _add_terms(self, schema: Any, lengths: KnownLengths | None, items: TermPostings) -> None:
        """A rebuild's postings, a whole term at a time (see :class:`MemoryPool`)."""
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


class KnownLengths:
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


class Codec(W3Codec):
    """Whoosh's W3 codec with gitmem's postings writer and reader.  Every segment pickles
    its codec by module and class name: moving or renaming this class needs a bump of
    :data:`gitmem.search.whoosh.schema.SCHEMA_VERSION` (indexes are then rebuilt)."""

    def field_writer(self, storage: Any, segment: Any) -> Any:
        return FieldWriter(self, storage, segment)

    def postings_writer(self, dbfile: Any, byteids: bool = False) -> Any:
        return PostingsWriter(dbfile, blocklimit=self._blocklimit, byteids=byteids,
                               compression=self._compression, inlinelimit=self._inlinelimit)

    def postings_reader(self, dbfile: Any, terminfo: Any, format_: Any, term: Any = None,
                        scorer: Any = None) -> Any:
        if terminfo.is_inlined():
            return super().postings_reader(dbfile, terminfo, format_, term, scorer)
        offset, length = terminfo.extent()
        return LeafMatcher(dbfile, offset, length, format_, term=term, scorer=scorer)


class MemoryPool:
    """The postings of a rebuild, held in memory term by term instead of Whoosh's
    external sort (which pickles every posting to a scratch file, unpickles it and
    merges the runs: most of a rebuild's time).  Documents arrive in order, so each
    term's postings are already sorted; only the terms are sorted, once.  Memory is
    bounded by the caller writing one segment per :attr:`.writing.SegmentWriting.REBUILD_SEGMENT_DOCS`."""

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
                    for tbytes, freq, weight, vbytes in term_values(field, value):
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

    def iter_postings(self) -> TermPostings:
        terms, self._terms = self._terms, {}
        return TermPostings(terms)

    def cleanup(self) -> None:
        self._terms.clear()





def term_values(field: Any, value: Any) -> Iterable[tuple[bytes, int, float, bytes]]:
    """``field.index(value)``; for a list of words in a plain frequency field (``words``,
    ``when``) the same tuples computed at once instead of through a token object per word."""
    if isinstance(value, list) and type(field.format) is formats.Frequency:
        boost = field.format.field_boost
        return [(word.encode("utf-8"), freq, *frequency_value(freq, boost)) for word, freq in Counter(value).items()]
    return field.index(value)


@functools.lru_cache(maxsize=256)
def frequency_value(freq: int, boost: float) -> tuple[float, bytes]:
    # One shared (weight, value) per frequency: a rebuild holds millions of postings in
    # memory, nearly all with frequency 1 (see MemoryPool).
    return float(freq) * boost, pack_uint(freq)


class TermPostings:
    """A :class:`MemoryPool`'s postings: term by term for gitmem's field writer, or one
    ``(fieldname, term, docnum, weight, value)`` at a time as Whoosh iterates them."""

    def __init__(self, terms: dict[str, dict[bytes, list[tuple[int, float, Any]]]]) -> None:
        self._terms = terms

    def terms(self) -> Iterator[tuple[str, bytes, list[int], list[float], list[Any]]]:
        for fieldname in sorted(self._terms):
            of_field = self._terms.pop(fieldname)
            for tbytes in sorted(of_field):
                postings = of_field.pop(tbytes)   # in document order: documents arrive in order
                docnums, weights, values = zip(*postings, strict=True)
                yield fieldname, tbytes, list(docnums), list(weights), list(values)

    def __iter__(self) -> Iterator[tuple[str, bytes, int, float, Any]]:
        for fieldname, tbytes, docnums, weights, values in self.terms():
            for posting in zip(docnums, weights, values, strict=True):
                yield (fieldname, tbytes, *posting)



CODEC = Codec(compression=0, inlinelimit=2)
