"""Full-text search over memories: a Whoosh index that is only ever a rebuildable cache.

The only module of gitmem that imports :mod:`whoosh`.  The vault feeds it :class:`IndexDoc`
objects and asks :meth:`SearchIndex.search`; the query language is parsed (and documented)
in :mod:`gitmem.search_query`.  Unknown ``field:value`` is an error there, on purpose.

Ranking, each piece measured on a conversational eval set (``bench/retrieval.py``):

- One positional ``text`` field holds title, tags/entities, author and body, with title and
  tag words weighing double: true BM25F (a word in title *and* body saturates once) with
  little length normalisation (``B=0.25``; memories are short) and Porter2 stemming.
- The month and year of ``created`` (unstemmed, so "in May 2023" matches) add to the
  score of documents the words matched.  Question words (what, did, ...) are dropped.
- A group prior: memories sharing ``source`` (a conversation, a session) lend each other
  30% of the sum of their group's best three scores.
- Natural queries (plain words and phrases) rank the documents containing *all* words first
  and fill with *any*-word matches (``mode`` tells which exists); operators, parentheses or
  a prefix switch to strict boolean meaning (``mode="syntax"``).

Queries are scored here from the postings, a block at a time (Whoosh's formula; Whoosh
itself scores only phrases): several times faster than Whoosh's matchers in pure Python,
exact totals, and the same ranking for every page.

Statuses archived, deleted and superseded are hidden unless ``include_inactive`` or an
explicit ``status:`` filter.  Whoosh's exceptions never leave this module: bad syntax is
:class:`InvalidQuery`, anything else :class:`StorageError`.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import heapq
import importlib.metadata
import json
import math
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Any

import whoosh.index
from whoosh import highlight, query as wq, scoring
from whoosh.analysis import LowercaseFilter, RegexTokenizer, StemFilter, StopFilter
from whoosh.analysis.analyzers import STOP_WORDS
from whoosh.columns import NumericColumn, VarBytesColumn
from whoosh.filedb.filestore import FileStorage
from whoosh.fields import COLUMN, ID, KEYWORD, NUMERIC, STORED, TEXT, Schema
from whoosh.lang import stemmer_for_language
from whoosh.lang.porter import stem as porter_stem
from whoosh.writing import CLEAR, OPTIMIZE

from gitmem import search_query as sq
from gitmem.errors import InvalidQuery, StorageError
from gitmem.search_query import SearchConfig, SearchHit, SearchPage   # part of this API

__all__ = ["IndexDoc", "SearchHit", "SearchPage", "SearchIndex", "SearchConfig",
           "PREFIX_EXPANSION_LIMIT", "INACTIVE_STATUSES"]

PREFIX_EXPANSION_LIMIT = 50          # a prefix becomes at most this many (most frequent) words
INACTIVE_STATUSES = ("archived", "deleted", "superseded")
SCHEMA_VERSION = 5                   # bump when the schema or the analysis changes
SNIPPET_CHARS = 200
_INDEX_NAME = "MAIN"
_STAMP, _STATE = "gitmem-stamp.json", "gitmem-state.json"


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


class _Or(wq.Or):
    """An Or that always uses the binary union matcher: whoosh-reloaded 2.7.5's preloaded
    Or matcher returns a wrong top-k when an Or nests in an Or and a limit is given."""
    matcher_type = wq.Or.DEFAULT_MATCHER


def _or(items: list) -> Any:
    return items[0] if len(items) == 1 else _Or(items)


@functools.cache
def _whoosh_version() -> str:
    """Version of whoosh-reloaded, after checking that it (alone) provides ``whoosh``."""
    owners = importlib.metadata.packages_distributions().get("whoosh", [])
    names = sorted({re.sub(r"[-_.]+", "-", n).lower() for n in owners})
    if names != ["whoosh-reloaded"]:
        raise StorageError(f"the 'whoosh' module comes from {names or 'an unknown package'}; "
                           "gitmem needs exactly the distribution 'whoosh-reloaded'",
                           hint="pip uninstall whoosh whoosh-ng; pip install whoosh-reloaded")
    return importlib.metadata.version("whoosh-reloaded")


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


class _Analysis:
    """One tokenisation shared by indexing, querying and highlighting."""

    def __init__(self, cfg: SearchConfig) -> None:
        stop = STOP_WORDS | {"i", "s", "t", "d", "ll", "m", "re", "ve"}
        # Not whoosh-reloaded's default pattern, which keeps "*" in words (Markdown "**bold**")
        # and "_" around them ("_italic_"); inner "_", ".", "'" join: long_term, 3.5, Ann's.
        words = RegexTokenizer(r"[^\W_]+(?:[_.'’][^\W_]+)*")
        self.base = words | LowercaseFilter() | StopFilter(stoplist=stop, minsize=1)
        raw = {"porter2": stemmer_for_language("en"), "porter": porter_stem}.get(cfg.stemmer)
        self.stem: Callable[[str], str] = functools.lru_cache(100_000)(raw) if raw else str
        self.text = self.base | StemFilter(stemfn=raw) if raw else self.base   # highlighting

    def tokens(self, text: str) -> list[str]:
        return [t.text for t in self.base(text)]

    def stems(self, text: str) -> list[str]:
        return [self.stem(t) for t in self.tokens(text)]



class _WeightedText(TEXT):
    """A positional text field whose value is a list of ``(term, weight)`` pairs, one per
    position (``None`` = a gap), so title and tag words can weigh more than body words
    inside one BM25 field."""

    def index(self, value: Any, **kw: Any) -> Any:
        poses: dict[str, list[int]] = {}
        weights: dict[str, float] = {}
        for pos, item in enumerate(value):
            if item is not None:
                poses.setdefault(item[0], []).append(pos)
                weights[item[0]] = weights.get(item[0], 0.0) + item[1]
        for term, plist in poses.items():
            yield term.encode("utf-8"), len(plist), weights[term], self.format.encode(plist)


def _schema(cfg: SearchConfig, an: _Analysis) -> Schema:
    fields: dict[str, Any] = dict(
        path=ID(stored=True, unique=True, sortable=True), hash=COLUMN(VarBytesColumn()),
        id=ID(stored=True), title=STORED(), body=STORED(),
        text=_WeightedText(analyzer=an.text),        # title + tags + agent + body, weighted
        words=KEYWORD(),                              # unstemmed vocabulary: prefix, spelling
        when=TEXT(phrase=False),                      # month and year of created
        tags=KEYWORD(lowercase=True, commas=True), taglist=STORED(),
        entities=KEYWORD(lowercase=True, commas=True), links=KEYWORD(lowercase=True, commas=True),
        type=ID(stored=True), tier=ID(stored=True), status=ID(stored=True), scope=ID(),
        agent=ID(), source=ID(sortable=True), importance=NUMERIC(int, stored=True),
        created=NUMERIC(int, bits=64, signed=True),
        updated=NUMERIC(int, bits=64, signed=True), updated_iso=STORED(),
        recency=COLUMN(NumericColumn("q")))                 # updated or created, for listings
    return Schema(**fields)


def _low(v: str | None) -> str | None:
    return v.strip().lower() if isinstance(v, str) and v.strip() else None


def _blocks(matcher: Any) -> Iterable[tuple[Sequence[int], Sequence[float]]]:
    """(ids, weights) of a leaf posting list, a block at a time (Whoosh's block internals,
    pinned by the whoosh-reloaded version check; generic per-posting path otherwise)."""
    m = getattr(matcher, "child", matcher)      # deletions are filtered by the caller
    if all(hasattr(m, a) for a in ("_read_ids", "_read_weights", "_next_block", "_ids")):
        while m.is_active():
            if m._ids is None:
                m._read_ids()
            if m._weights is None:
                m._read_weights()
            yield m._ids, m._weights
            m._next_block()
    else:                                       # e.g. a short list inlined in the term info
        ids, weights = [], []
        while m.is_active():
            ids.append(m.id())
            weights.append(m.weight())
            m.next()
        yield ids, weights


class SearchIndex:
    """A Whoosh index of memories in ``directory`` (a cache: recreated when unusable)."""

    WRITE_TIMEOUT = 10.0      # seconds to wait for the index write lock
    MAX_SEGMENTS = 10         # a single-document commit merges small segments beyond this

    def __init__(self, directory: str | Path, *, config: SearchConfig | None = None) -> None:
        self.cfg = config or SearchConfig()
        self.dir = Path(directory)
        self._lock = threading.RLock()
        self._an = _Analysis(self.cfg)
        self._schema = _schema(self.cfg, self._an)
        self._weighting = scoring.BM25F(B=self.cfg.b, K1=self.cfg.k1, when_B=0.0)
        self._searcher: Any = None
        self._leaf_cache: dict[Any, tuple[list[int], list[str]]] = {}
        self.needs_rebuild = False
        schema = f"{SCHEMA_VERSION}:{self.cfg.schema_key()}".encode()
        self._stamp = {"distribution": "whoosh-reloaded", "version": _whoosh_version(),
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
        if _read_json(self.dir / _STAMP) == self._stamp:
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
        if _read_json(self.dir / _STAMP) != self._stamp:
            return None
        with warnings.catch_warnings():   # whoosh leaks the file it failed to read
            warnings.simplefilter("ignore", ResourceWarning)
            try:
                ix = whoosh.index.open_dir(str(self.dir), indexname=_INDEX_NAME,
                                           schema=self._schema)
                with ix.searcher() as s:
                    r = s.reader()
                    next(iter(r.lexicon("path")), None)
                    for n in list(r.all_doc_ids())[:1]:
                        r.stored_fields(n)
                return ix
            except Exception:  # noqa: BLE001 - whatever broke, the cache is unusable
                return None
            finally:
                gc.collect()

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
            ix = whoosh.index.create_in(str(self.dir), self._schema, indexname=_INDEX_NAME)
            _write_json_atomic(self.dir / _STAMP, self._stamp)
        finally:
            lock.release()
        self.needs_rebuild = True
        return ix

    # --- writing ------------------------------------------------------------------------

    def _fields(self, d: IndexDoc) -> dict[str, Any]:
        an, c = self._an, self.cfg
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

    def _writer(self, limitmb: int) -> Any:
        deadline = time.monotonic() + self.WRITE_TIMEOUT
        while True:
            try:
                return self._ix.writer(timeout=min(1.0, self.WRITE_TIMEOUT), limitmb=limitmb)
            except whoosh.index.LockError:
                if time.monotonic() >= deadline:
                    raise StorageError("index busy: another process holds the search index "
                                       "write lock", hint="retry in a moment") from None
            except Exception as exc:  # noqa: BLE001
                raise StorageError(f"cannot write the search index: {exc}",
                                   hint="run 'gitmem reindex'") from exc

    def _commit(self, work: Callable[[Any], None], limitmb: int = 64, **commit_kw: Any) -> None:
        with self._lock:
            w = self._writer(limitmb)
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

    def upsert(self, docs: Sequence[IndexDoc], *, new: Collection[str] = ()) -> None:
        """Add or replace documents (keyed by ``path``) in one commit; the last copy of a
        path in ``docs`` wins.  Paths listed in ``new`` are known not to be indexed yet
        (a file just created) and skip the replace step, which has to open every
        segment's term index (~5-10 ms at 10k documents)."""
        latest = {d.path: d for d in docs}

        def work(w: Any) -> None:
            for d in latest.values():
                (w.add_document if d.path in new else w.update_document)(**self._fields(d))

        if latest:
            self._commit(work, merge=self._merge_due())

    def delete(self, paths: Sequence[str]) -> None:
        """Remove documents by path (unknown paths are ignored)."""
        if paths:
            self._commit(lambda w: [w.delete_by_term("path", p) for p in set(paths)],
                         merge=self._merge_due())

    def _merge_due(self) -> bool:
        # Merging small segments on every commit costs ~25 ms at 10k docs; a
        # single-document commit only merges once segments pile up, and
        # merge_small() catches up when the writer is idle.
        return self._segment_count() >= self.MAX_SEGMENTS

    def merge_small(self) -> None:
        """Merge the small segments left by recent single-document commits (cheap;
        call when idle so queries do not slow down as segments pile up)."""
        if self._segment_count() > 2:
            self._commit(lambda w: None)

    def rebuild(self, docs: Iterable[IndexDoc],
                progress: Callable[[int], None] | None = None) -> int:
        """Replace the whole index with ``docs`` in one commit and return how many were
        indexed (a repeated path keeps its first copy).  Readers see the old index until
        the commit; ``progress(n)`` is called every 500 documents and at the end."""
        count, seen = 0, set()

        def work(w: Any) -> None:
            nonlocal count
            for d in docs:
                if d.path not in seen:
                    seen.add(d.path)
                    w.add_document(**self._fields(d))
                    count += 1
                    if progress and count % 500 == 0:
                        progress(count)

        self._commit(work, limitmb=256, mergetype=CLEAR)
        self.needs_rebuild = False
        if progress:
            progress(count)
        return count

    def optimize(self) -> None:
        """Merge all segments into one.  Slow (about 1 s per 1,000 documents): call it only
        when idle; commits already merge small segments, so this is rarely needed."""
        if self._segment_count() > 1:
            self._commit(lambda w: None, mergetype=OPTIMIZE)

    # --- reading --------------------------------------------------------------------------

    def _refresh(self) -> Any:
        """The current searcher: reopened when this or another process committed."""
        try:
            if self._searcher is None:
                self._searcher = self._ix.searcher(weighting=self._weighting)
            elif not self._searcher.up_to_date():
                # Not Searcher.refresh(): it reuses segment readers whose deletions changed
                # (deleted documents come back) and fails on an empty index.
                self._searcher.close()
                self._searcher = None
                self._searcher = self._ix.searcher(weighting=self._weighting)
            return self._searcher
        except Exception as exc:  # noqa: BLE001
            self._searcher = None
            raise StorageError(f"cannot read the search index: {exc}",
                               hint="run 'gitmem reindex'") from exc

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

    def get_state(self, key: str) -> str | None:
        value = (_read_json(self.dir / _STATE) or {}).get(key)
        return value if isinstance(value, str) else None

    def set_state(self, key: str, value: str) -> None:
        """Store a small string beside the index (atomically; cleared with the index)."""
        with self._lock:
            data = _read_json(self.dir / _STATE) or {}
            data[key] = value
            try:
                _write_json_atomic(self.dir / _STATE, data)
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
        r = self._refresh().reader()
        found = [(r.doc_frequency("words", t), t) for t in r.expand_prefix("words", prefix.lower())]
        top = heapq.nsmallest(PREFIX_EXPANSION_LIMIT, found, key=lambda x: (-x[0], x[1]))
        return [t if isinstance(t, str) else t.decode() for _, t in top]

    def _eval(self, s: Any, n: Any, hl: set[str]) -> dict[int, float] | None:
        """Score every document matching a syntax node, from the postings (None when the
        node analyses to nothing, e.g. a stop word).  Whoosh only scores phrases."""
        b = self.cfg.b
        if isinstance(n, (sq.Word, sq.Phrase)):
            stems = self._an.stems(n.text)
            hl.update(stems)
            if len(stems) > 1:
                return {h.docnum: h.score or 0.0
                        for h in s.search(wq.Phrase("text", stems), limit=None)}
            return self._term_scores(s, "text", stems[0], 1.0, b) if stems else None
        if isinstance(n, sq.Prefix):
            stems = dict.fromkeys(self._an.stem(t) for t in self.prefix_terms(n.text))
            hl.update(stems)
            return sq.add_scores([self._term_scores(s, "text", t, 1.0, b) for t in stems])
        if isinstance(n, (sq.FieldTerm, sq.DateRange)):
            return dict.fromkeys(self._docs(s, self._filter_query(n)), 0.5)
        if isinstance(n, sq.Not):
            inner = self._eval(s, n.item, set())
            return None if inner is None else dict.fromkeys(
                set(s.reader().all_doc_ids()).difference(inner), 0.0)
        parts = [p for p in (self._eval(s, c, hl) for c in n.items) if p is not None]
        if not parts or isinstance(n, sq.Or):
            return sq.add_scores(parts) if parts else None
        both = set(parts[0]).intersection(*parts[1:])
        return {d: sum(p[d] for p in parts) for d in both}

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
        """Run a query (syntax: :mod:`gitmem.search_query`); InvalidQuery on bad syntax."""
        if limit < 0 or offset < 0:
            raise InvalidQuery("limit and offset must not be negative")
        pq = sq.parse_query(query or "")
        pq.add_filters(filters)
        with self._lock:
            try:
                return self._search(pq, query or "", limit, offset, include_inactive)
            except (InvalidQuery, StorageError):
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. a segment file vanished or broke
                try:
                    self.close()
                except Exception:  # noqa: BLE001
                    self._searcher = None
                raise StorageError(f"search failed: {exc}", hint="run 'gitmem reindex'") from exc

    def _search(self, pq: sq.ParsedQuery, query: str, limit: int, offset: int,
                include_inactive: bool) -> SearchPage:
        s = self._refresh()
        allow = restrict = None
        if pq.filters:
            allow = self._docs(s, wq.And([self._filter_query(f) for f in pq.filters]))
        if not include_inactive and not pq.filters_status:
            restrict = self._docs(s, _Or([wq.Term("status", x) for x in INACTIVE_STATUSES]))
        hl: set[str] = set()
        want = offset + limit
        if pq.natural and (pq.words or pq.phrases):
            ranked, total, mode = self._rank_natural(s, pq, hl, allow, restrict, want)
        elif not pq.natural and pq.expr is not None:
            ranked, total, mode = self._rank_syntax(s, pq, hl, allow, restrict, want)
        elif allow is not None and not allow:
            ranked, total, mode = [], 0, "filter"
        else:   # filters only: newest first
            res = s.search(wq.Every(), limit=max(want, 1), filter=allow, mask=restrict or None,
                           sortedby="recency", reverse=True)
            total = len((allow or set(s.reader().all_doc_ids())) - (restrict or set()))
            ranked, mode = [(h.docnum, 0.0) for h in res], "filter"
        hits = [self._hit(s, dn, sc, hl) for dn, sc in ranked[offset:want]]
        suggestion = self._suggest(s, pq, query) if total == 0 else None
        return SearchPage(hits, total, suggestion, mode)

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
                        for ids, _ in _blocks(leaf.postings(q.fieldname, t)):
                            out.update(base + i for i in ids if i not in deleted)
            return out
        if isinstance(q, (wq.And, wq.Or)) and q.subqueries:
            sets = [self._docs(s, c) for c in q.subqueries]
            return set.intersection(*sets) if isinstance(q, wq.And) else set().union(*sets)
        if isinstance(q, wq.Not):
            return set(r.all_doc_ids()) - self._docs(s, q.query)
        return set(s.docs_for_query(q))

    def _rank_syntax(self, s: Any, pq: sq.ParsedQuery, hl: set[str], allow: Any,
                     restrict: Any, want: int) -> tuple[list, int, str]:
        scores = self._eval(s, pq.expr, hl) or {}
        if allow is not None or restrict:
            scores = {d: v for d, v in scores.items()
                      if (allow is None or d in allow) and not (restrict and d in restrict)}
        return self._group_prior(s, scores, want), len(scores), "syntax"

    def _term_scores(self, s: Any, fieldname: str, text: str, boost: float,
                     b: float) -> dict[int, float]:
        """BM25 scores (Whoosh's formula) of every live document containing the term."""
        r = s.reader()
        df = r.doc_frequency(fieldname, text)
        if not df:
            return {}
        k1, n_all = self.cfg.k1, r.doc_count_all()
        idf = (math.log(n_all / (df + 1)) + 1) * boost
        avgfl = (r.field_length(fieldname) / n_all) or 1.0
        out: dict[int, float] = {}
        for leaf, base in r.leaf_readers():
            if not leaf.doc_frequency(fieldname, text):
                continue
            lengths = self._leaf_info(leaf)[0] if b else None
            deleted = leaf.deleted_docs_set if leaf.has_deletions() else ()
            for ids, weights in _blocks(leaf.postings(fieldname, text)):
                for i, w in zip(ids, weights):
                    if i not in deleted:
                        norm = k1 * ((1 - b) + b * lengths[i] / avgfl) if lengths else k1
                        out[base + i] = idf * w * (k1 + 1) / (w + norm)
        return out

    def _leaf_info(self, leaf: Any) -> tuple[list[int], list[str]]:
        """Per-segment ``text`` lengths and ``source`` values, cached per segment."""
        key = leaf.segment().segment_id()
        if key not in self._leaf_cache:
            if len(self._leaf_cache) > 64:
                self._leaf_cache.clear()
            n = leaf.doc_count_all()
            self._leaf_cache[key] = ([leaf.doc_field_length(i, "text", 0) for i in range(n)],
                                     list(leaf.column_reader("source")))
        return self._leaf_cache[key]

    def _rank_natural(self, s: Any, pq: sq.ParsedQuery, hl: set[str], allow: Any,
                      restrict: Any, want: int) -> tuple[list, int, str]:
        """Score plain words from the postings; all-word matches first (see SearchConfig)."""
        c, r = self.cfg, s.reader()
        text = " ".join(pq.words)
        toks = self._an.tokens(text)
        if c.question_stop:
            toks = [t for t in toks if t not in sq.QUESTION_WORDS] or toks
        stems = list(dict.fromkeys(self._an.stem(t) for t in toks))
        hl.update(stems)
        units = [self._term_scores(s, "text", st, 1.0, c.b) for st in stems]
        units += [u for u in (self._eval(s, sq.Phrase(ph), hl) for ph in pq.phrases)
                  if u is not None]
        extras = [self._term_scores(s, "when", w, c.date_boost, 0.0)
                  for w in dict.fromkeys(re.findall(r"\w+", text.lower()))
                  if c.date_boost and r.doc_frequency("when", w)]
        scores, first, mode = sq.combine_natural(units, extras, allow, restrict, c.natural,
                                                 c.all_boost)
        return self._group_prior(s, scores, want, first), len(scores), mode

    def _group_prior(self, s: Any, scores: dict[int, float], want: int,
                     first: set[int] | frozenset = frozenset()) -> list[tuple[int, float]]:
        if self.cfg.group_weight and len(scores) > 1:
            src: dict[int, str] = {}
            for leaf, base in s.reader().leaf_readers():
                sources = self._leaf_info(leaf)[1]
                hi = base + len(sources)
                src.update((d, sources[d - base]) for d in scores if base <= d < hi)
            scores = sq.group_prior(scores, src, self.cfg.group_weight, self.cfg.group_depth)
        return heapq.nlargest(want, scores.items(), key=lambda x: (x[0] in first, x[1], -x[0]))

    def _hit(self, s: Any, docnum: int, score: float, hl: set[str]) -> SearchHit:
        f = s.stored_fields(docnum)
        return SearchHit(id=f.get("id", ""), path=f["path"], title=f.get("title", ""),
                         tier=f.get("tier", ""), type=f.get("type", ""),
                         tags=list(f.get("taglist") or []), score=round(float(score), 4),
                         updated=f.get("updated_iso"),
                         snippet=self._snippet(f.get("body", ""), f.get("title", ""), hl))

    def _snippet(self, body: str, title: str, terms: set[str]) -> str:
        """The best ~200-character passage of the body with matches in ``**bold**``."""
        for text in (body, title):
            if text and terms:
                frag = highlight.highlight(text, terms, self._an.text, _FRAGMENTER, _FORMATTER,
                                           top=1)
                if frag:
                    return _clip(frag)
        return _clip(body or title)

    def _suggest(self, s: Any, pq: sq.ParsedQuery, query: str) -> str | None:
        """The query with unknown words replaced by the closest indexed words, if any."""
        text, r = " ".join(pq.texts()), s.reader()
        fixes: dict[str, str] = {}
        for w in dict.fromkeys(self._an.tokens(text)):
            if len(w) < 3 or w.isdigit() or r.doc_frequency("words", w):
                continue
            found = [(sq.edit_distance(w, c), -r.doc_frequency("words", c), c) for c in
                     (x if isinstance(x, str) else x.decode()
                      for x in r.terms_within("words", w, 2, prefix=1))]
            if found:
                fixes[w] = min(found)[2]
        if not fixes:
            return None
        fix = functools.partial(re.sub, r"\w+", lambda m: fixes.get(m[0].lower(), m[0]))
        return "".join(p if ":" in p else fix(p) for p in re.split(r"(\s+)", query))


class _MarkFormatter(highlight.Formatter):
    """Marks matched words Markdown-style: ``**word**``; ``…`` where text was cut."""
    between = " … "

    def format_token(self, text: str, token: Any, replace: bool = False) -> str:
        return f"**{highlight.get_text(text, token, replace)}**"

    def format_fragment(self, fragment: Any, replace: bool = False) -> str:
        out = super().format_fragment(fragment, replace).strip()
        rest = fragment.text[fragment.endchar:]
        punct = re.match(r"[.!?)\"']+", rest)          # keep a sentence's final punctuation
        if punct:
            out, rest = out + punct.group(0), rest[punct.end():]
        return ("…" if fragment.startchar > 0 else "") + out + ("…" if rest.strip() else "")


_FRAGMENTER = highlight.ContextFragmenter(maxchars=SNIPPET_CHARS, surround=60, charlimit=None)
_FORMATTER = _MarkFormatter()


def _clip(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= SNIPPET_CHARS + 40:
        return text
    cut = text[:SNIPPET_CHARS]
    return cut + ("**" if cut.count("**") % 2 else "") + "…"
