"""The search index: a Whoosh index of memories that is only ever a rebuildable cache.

The vault feeds it :class:`~gitmem.search.documents.IndexDoc` objects and asks
:meth:`SearchIndex.search`; the query language is parsed (and documented) in
:mod:`gitmem.search.query`, queries are evaluated and ranked in :mod:`gitmem.search.rank`
from the plain posting arrays :mod:`.postings` hands over, results are the types of
:mod:`gitmem.search.results`, and snippets are cut in :mod:`gitmem.search.snippet`
(none of them sees Whoosh).  Plain text never fails: what is not valid syntax is read as
text (:func:`gitmem.search.query.parse_query`).

Ranking (each piece measured with ``bench/retrieval.py``): one positional ``text`` field
holds title, tags/entities, author, body and context (the text of the memory it follows,
low weight), tag words weighing double (true BM25F, ``B=0.25``, Porter2 stemming); the
month and year of ``created`` and the author (``agent``, ``SearchConfig.agent_boost``) add
to the score of documents the words matched; the group prior and the natural-query policy
are in :mod:`gitmem.search.rank`.

Statuses archived, deleted and superseded are hidden unless ``include_inactive`` or an
explicit ``status:`` filter.  Whoosh's exceptions for a damaged or changing index never
leave this module: a bad ``filters=`` argument or paging value is :class:`InvalidQuery`,
an index that cannot be read :class:`StorageError`; anything else (a bug) surfaces as it is.
"""

from __future__ import annotations

import gc
import hashlib
import heapq
import threading
import time
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from whoosh import query as wq
from whoosh import scoring
from whoosh.filedb.filestore import FileStorage

from ...errors import InvalidQuery, StorageError
from .. import query as sq
from ..rank import Estimate, Ranker, SearchConfig
from ..results import SearchHit, SearchPage, hit
from ..snippet import Snippeter
from ..state import read_json, write_json_atomic
from . import postings
from .internals import DISTRIBUTION, whoosh_version
from .postings import Snapshot
from .schema import SCHEMA_VERSION, Analysis, Or, any_of, make_schema
from .searcher import reopen
from .storage import READ_ERRORS, IndexStorage, mapped_resident
from .writing import SegmentWriting

__all__ = ["SearchIndex", "INACTIVE_STATUSES"]

INACTIVE_STATUSES = ("archived", "deleted", "superseded")
_INDEX_NAME = "MAIN"
_STAMP, _STATE = "gitmem-stamp.json", "gitmem-state.json"


class SearchIndex(SegmentWriting):
    """A Whoosh index of memories in ``directory`` (a cache: recreated when unusable).

    Opening checks the installed Whoosh (:func:`gitmem.search.whoosh.internals.check`:
    :class:`~gitmem.errors.SearchEngineUnsupported` when it is not the supported release).
    Writing (upsert, delete, rebuild, merges) is :class:`.writing.SegmentWriting`'s."""

    VERSIONS = False          # True: documents are versions of memories (VersionIndex)

    def __init__(self, directory: str | Path, *, config: SearchConfig | None = None) -> None:
        self.cfg = config or SearchConfig()
        self.dir = Path(directory)
        self._lock = threading.RLock()
        self._an = Analysis(self.cfg)
        self._schema = make_schema(self.cfg, self._an, self.VERSIONS)
        self._weighting = scoring.BM25F(B=self.cfg.b, K1=self.cfg.k1, when_B=0.0)
        self._searcher: Any = None
        self._rank = Ranker(self.cfg, self._an)
        self._memo: dict[Any, Any] = {}      # per-searcher results (live docs, hidden docs)
        self._mapped_floor: int | None = None   # file-backed bytes held after the last release
        self.needs_rebuild = False
        schema = f"{SCHEMA_VERSION}:{self.cfg.schema_key()}{':versions' if self.VERSIONS else ''}".encode()
        self._stamp = {"distribution": DISTRIBUTION, "version": whoosh_version(),
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
                ix = IndexStorage(str(self.dir)).open_index(_INDEX_NAME, schema=self._schema)
                with ix.searcher() as s:
                    r = s.reader()
                    next(iter(r.lexicon("path")), None)
                    for n in list(r.all_doc_ids())[:1]:
                        r.stored_fields(n)
                return ix
            except READ_ERRORS:   # damaged, or replaced meanwhile: the cache is unusable
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
            ix = IndexStorage(str(self.dir)).create_index(self._schema, indexname=_INDEX_NAME)
            write_json_atomic(self.dir / _STAMP, self._stamp)
        finally:
            lock.release()
        self.needs_rebuild = True
        return ix

    # --- reading --------------------------------------------------------------------------

    def _refresh(self) -> Any:
        """The current searcher: reopened when this or another process committed."""
        try:
            if self._searcher is None:
                self._memo = {}
                self._searcher = self._ix.searcher(weighting=self._weighting)
            elif not self._searcher.up_to_date():
                old, self._searcher, self._memo = self._searcher, None, {}
                self._searcher = reopen(self._ix, old, self._weighting)
            return self._searcher
        except READ_ERRORS as exc:
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
            docs = self._docs(s, any_of([wq.Term("follows", i.lower()) for i in set(ids)]))
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

    def _postings(self, s: Any) -> postings.PostingsView:
        """The ranker's view of the searcher's reader (kept until the searcher changes)."""
        if "postings" not in self._memo:
            self._memo["postings"] = postings.PostingsView(s.reader())
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
        return any_of(parts) if isinstance(n, sq.Or) else wq.And(parts)

    # --- searching ----------------------------------------------------------------------

    def search(self, query: str, *, limit: int = 10, offset: int = 0,
               include_inactive: bool = False,
               filters: Mapping[str, str | Sequence[str]] | None = None,
               neighbours: bool = True) -> SearchPage:
        """Run a query (syntax: :mod:`gitmem.search.query`; text that is not valid syntax is
        read as text); InvalidQuery only for a bad ``filters`` entry or negative paging.
        ``neighbours=False`` leaves out the neighbour prior (for a caller that applies it
        after fusing other scores, :func:`gitmem.search.hybrid.hybrid_search`)."""
        return self._run(query, limit, offset, include_inactive, filters, None, neighbours)

    def _run(self, query: str, limit: int, offset: int, include_inactive: bool,
             filters: Mapping[str, str | Sequence[str]] | None,
             snap: Callable[[Any], Snapshot] | None, neighbours: bool = True) -> SearchPage:
        """:meth:`search`, over the snapshot ``snap(searcher)`` gives when set."""
        if limit < 0 or offset < 0:
            raise InvalidQuery("limit and offset must not be negative")
        pq = sq.parse_query(query or "")
        pq.add_filters(filters)
        with self._lock:
            try:
                return self._search(pq, query or "", limit, offset, include_inactive,
                                    None if snap is None else snap(self._refresh()), neighbours)
            except READ_ERRORS as exc:   # e.g. a segment file vanished or broke
                try:
                    self.close()
                except READ_ERRORS:
                    self._searcher = None
                raise StorageError(f"search failed: {exc}", hint="run 'gitmem reindex'") from exc
            finally:
                self._settle_pages()

    #: Index pages a long-lived process may gather between two releases: the pages the
    #: queries touch stay mapped (a search server would end up holding the whole index),
    #: so past this many bytes they are let go; they stay in the page cache.
    MAPPED_BUDGET = 32 << 20

    def _settle_pages(self) -> None:
        """Let go of the index pages the searches mapped once they pass
        :attr:`MAPPED_BUDGET` over what the process held after the last release."""
        held = mapped_resident()
        if held is None or self._ix is None:
            return
        if self._mapped_floor is None or held < self._mapped_floor:
            self._mapped_floor = held
        elif held - self._mapped_floor > self.MAPPED_BUDGET:
            self._ix.storage.release_pages()
            self._mapped_floor = mapped_resident()

    def _search(self, pq: sq.ParsedQuery, query: str, limit: int, offset: int,
                include_inactive: bool, snap: Snapshot | None = None,
                neighbours: bool = True) -> SearchPage:
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
            ranked, total, mode = self._rank.rank_natural(r, pq, hl, allow, restrict, want, neighbours)
        elif not pq.natural and pq.expr is not None:
            ranked, total, mode = self._rank.rank_syntax(
                r, pq, hl, allow, restrict, want,
                lambda n: self._docs(s, self._filter_query(n)), live)
        elif allow is not None and not allow:
            ranked, total, mode = [], 0, "filter"
        elif snap is not None:   # filters only, newest first, ties as in a fresh index
            assert allow is not None    # (a snapshot sets it)
            found = allow - (restrict or set())
            recency = s.reader().column_reader("recency")
            top = heapq.nlargest(want, found, key=lambda d: (recency[d], snap.order[d]))
            ranked, total, mode = [(d, 0.0) for d in top], len(found), "filter"
        else:   # filters only: newest first
            res = s.search(wq.Every(), limit=max(want, 1), filter=allow, mask=restrict or None,
                           sortedby="recency", reverse=True)
            total = len((self._live(s) if allow is None else allow) - (restrict or set()))
            ranked, mode = [(h.docnum, 0.0) for h in res], "filter"
        snippet = Snippeter(hl, self._an.key, self._an.forms(hl))
        hits = [hit(s.stored_fields(dn), sc, snippet) for dn, sc in ranked[offset:want]]
        suggestion = self._rank.suggest(r, pq, query) if total == 0 else None
        return SearchPage(hits, int(total), suggestion, mode, total_estimated=isinstance(total, Estimate))

    def _hidden(self, s: Any) -> set[int]:
        """Archived, deleted and superseded documents (kept until the searcher changes)."""
        if "hidden" not in self._memo:
            self._memo["hidden"] = self._docs(
                s, Or([wq.Term("status", x) for x in INACTIVE_STATUSES]))
        return self._memo["hidden"]

    def linked(self, paths: Collection[str]) -> dict[str, list[str]]:
        """Each of ``paths`` that is indexed -> the paths one ``follows`` link away (the
        memory it follows, those that follow it): the neighbour prior after fusion."""
        with self._lock:
            try:
                s = self._refresh()
                postings = self._postings(s)
                if not self._rank.any_links(postings):      # (most vaults: no lookups at all)
                    return {}
                by_doc = {d: p for p in set(paths) for d in self._docs(s, wq.Term("path", p))}
                near = postings.linked(by_doc)
                return {by_doc[d]: [s.stored_fields(n)["path"] for n in ns] for d, ns in near.items()}
            except READ_ERRORS as exc:   # as in search()
                self._searcher = None
                raise StorageError(f"search failed: {exc}", hint="run 'gitmem reindex'") from exc

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
                docs = self._docs(s, any_of([wq.Term("path", p) for p in set(paths)]))
                if pq.filters:
                    docs &= self._docs(s, wq.And([self._filter_query(f) for f in pq.filters]))
                if not include_inactive and not pq.filters_status:
                    docs -= self._hidden(s)
                terms = {self._an.stem(w) for t in pq.texts() for w in self._an.tokens(t)
                         if w not in sq.QUESTION_WORDS}
                snippet = Snippeter(terms, self._an.key, self._an.forms(terms))
                return [hit(s.stored_fields(d), 0.0, snippet) for d in sorted(docs)]
            except READ_ERRORS as exc:   # as in search()
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
                        for ids, _, _ in postings.blocks(leaf.postings(q.fieldname, t)):
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

