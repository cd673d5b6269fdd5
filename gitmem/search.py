"""Full-text search over memories: a Whoosh index that is only ever a rebuildable cache.

This is the only module of gitmem that imports :mod:`whoosh`.  The vault feeds it
:class:`IndexDoc` objects and asks it :meth:`SearchIndex.search` questions; query syntax is
parsed by :mod:`gitmem.search_query` (see its docstring for the language).

Ranking (each piece measured on a conversational eval set, see ``bench/retrieval.py``):

- BM25 per field with little length normalisation (``B=0.25``; memories are short) and
  Snowball (Porter2) stemming; title, tags/entities and the author weigh more than the body.
- The month and year of ``created`` form an unstemmed field, so "in May 2023" matches.
- A bigram field scores adjacent words, a cheap stand-in for proximity.
- A group prior: memories sharing ``source`` (a conversation, a session) lend each other a
  fraction of their scores, so a hit among related hits ranks above an isolated one.
- Natural-language queries (plain words only) rank documents containing *all* words first
  and fill with *any*-word matches, so a question never comes back empty just because one
  word is missing (``mode`` is ``"all-words"`` or ``"any-words"``); any operator, phrase,
  parenthesis or prefix switches to strict boolean meaning (``mode="syntax"``).

Unknown ``field:value`` is an error (see :mod:`gitmem.search_query`).  Statuses archived,
deleted and superseded are hidden unless ``include_inactive`` or a ``status:`` filter.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import whoosh.index
from whoosh import highlight, query as wq, scoring
from whoosh.analysis import LowercaseFilter, RegexTokenizer, StemFilter, StopFilter
from whoosh.analysis.analyzers import STOP_WORDS
from whoosh.columns import VarBytesColumn
from whoosh.fields import COLUMN, ID, KEYWORD, NUMERIC, STORED, TEXT, Schema
from whoosh.lang import stemmer_for_language
from whoosh.writing import CLEAR, OPTIMIZE

from gitmem import search_query as sq
from gitmem.errors import InvalidQuery, StorageError

__all__ = ["IndexDoc", "SearchHit", "SearchPage", "SearchIndex", "SearchConfig",
           "PREFIX_EXPANSION_LIMIT", "INACTIVE_STATUSES"]

PREFIX_EXPANSION_LIMIT = 50          # a prefix becomes at most this many (most frequent) words
INACTIVE_STATUSES = ("archived", "deleted", "superseded")
SCHEMA_VERSION = 1                   # bump when the schema or analysis changes
SNIPPET_CHARS = 200
_INDEX_NAME = "MAIN"
_STAMP, _STATE = "gitmem-stamp.json", "gitmem-state.json"
# Words that carry no topic in a natural-language question; dropped from natural queries only.
_QUESTION_WORDS = frozenset(
    "what when where which who whom whose why how did do does done was were been being am has "
    "had having i me my mine our ours he him his she her hers they them their theirs its "
    "would could should shall might must there here than then so such any some about into "
    "over also just very much many more most other".split())
_MONTHS = ("january february march april may june july august september october "
           "november december").split()


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


@dataclass
class SearchHit:
    id: str
    path: str
    title: str
    tier: str
    type: str
    tags: list[str]
    score: float
    updated: str | None
    snippet: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SearchPage:
    hits: list[SearchHit]
    total: int
    suggestion: str | None
    mode: str               # all-words | any-words | syntax | filter

    def to_dict(self) -> dict[str, Any]:
        return {"hits": [h.to_dict() for h in self.hits], "total": self.total,
                "suggestion": self.suggestion, "mode": self.mode}


@dataclass(frozen=True)
class SearchConfig:
    """Ranking knobs (defaults = the measured best).  Fields marked *schema* change the
    index layout and therefore its stamp; the others apply at query time only."""
    b: float = 0.25
    k1: float = 1.2
    title_boost: float = 2.0
    meta_boost: float = 2.0          # tags + entities
    agent_boost: float = 1.5
    date_boost: float = 1.0
    bigram_boost: float = 0.5
    stemmer: str = "porter2"         # schema: porter2 | porter | none
    bigrams: bool = True             # schema
    group_weight: float = 0.1        # 0 disables the group prior
    group_depth: int = 3             # a group's score = sum of its best N member scores
    candidates: int = 100            # how many top hits the group prior re-ranks
    natural: str = "all-first"       # all-first | all-then-any | any | all-boost
    all_boost: float = 1.0           # for natural="all-boost"
    question_stop: bool = True       # drop question words from natural queries

    def schema_key(self) -> str:
        return f"{SCHEMA_VERSION}:{self.stemmer}:{self.bigrams}"


class _Or(wq.Or):
    """Or that always uses the binary union matcher: whoosh-reloaded 2.7.5's preloaded Or
    matcher returns a wrong top-k when Ors nest and a limit is given."""
    matcher_type = wq.Or.DEFAULT_MATCHER


def _or(items: list) -> wq.Query:
    return items[0] if len(items) == 1 else _Or(items)


_DIST_OK: str | None = None


def _whoosh_version() -> str:
    """Name the distribution that owns the ``whoosh`` module; refuse anything but whoosh-reloaded."""
    global _DIST_OK
    if _DIST_OK is None:
        owners = importlib.metadata.packages_distributions().get("whoosh", [])
        names = sorted({re.sub(r"[-_.]+", "-", n).lower() for n in owners})
        if names != ["whoosh-reloaded"]:
            raise StorageError(
                f"the 'whoosh' module is provided by {names or 'an unknown distribution'}; "
                "gitmem needs exactly 'whoosh-reloaded'",
                hint="pip uninstall whoosh whoosh-ng; pip install 'whoosh-reloaded==2.7.5'")
        _DIST_OK = importlib.metadata.version("whoosh-reloaded")
    return _DIST_OK


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
    """Analyzers and the per-word query expansion shared by indexing and querying."""

    def __init__(self, cfg: SearchConfig) -> None:
        stop = STOP_WORDS | {"i", "s", "t", "d", "ll", "m", "re", "ve"}
        base = RegexTokenizer() | LowercaseFilter() | StopFilter(stoplist=stop, minsize=1)
        if cfg.stemmer == "porter2":
            self.stem_fn = stemmer_for_language("en")
            self.text = base | StemFilter(stemfn=self.stem_fn)
        elif cfg.stemmer == "porter":
            self.text = base | StemFilter()
            self.stem_fn = StemFilter().stemfn
        else:
            self.text, self.stem_fn = base, (lambda w: w)
        self.base = base
        self.plain = RegexTokenizer() | LowercaseFilter()

    def stems(self, text: str) -> list[str]:
        return [t.text for t in self.text(text)]

    def bigrams(self, stems: list[str]) -> list[str]:
        return [f"{a}_{b}" for a, b in zip(stems, stems[1:])]


def _date_words(iso: str | None) -> str:
    m = re.match(r"(\d{4})-(\d{2})", iso or "")
    if not m or not 1 <= int(m.group(2)) <= 12:
        return ""
    return f"{_MONTHS[int(m.group(2)) - 1]} {m.group(1)}"


class _TokenList:
    """Analyzer for fields whose value is already a space-separated list of terms."""

    def __init__(self) -> None:
        self.tok = RegexTokenizer(r"[^ ]+")

    def __call__(self, value, **kw):
        return self.tok(value, **kw)


def _schema(cfg: SearchConfig, an: _Analysis) -> Schema:
    lists = _TokenList()
    fields: dict[str, Any] = dict(
        path=ID(stored=True, unique=True, sortable=True),
        hash=COLUMN(VarBytesColumn()),
        id=ID(stored=True),
        title=TEXT(analyzer=an.text, stored=True),
        body=TEXT(analyzer=an.text, stored=True),
        meta=TEXT(analyzer=an.text, phrase=False),          # tags + entities as text
        speaker=TEXT(analyzer=an.text, phrase=False),       # agent as text
        when=TEXT(analyzer=an.plain, phrase=False),          # "may 2023"
        words=TEXT(analyzer=lists, phrase=False),            # unstemmed vocabulary: prefix, spelling
        tags=KEYWORD(lowercase=True, commas=True), taglist=STORED(),
        entities=KEYWORD(lowercase=True, commas=True), links=KEYWORD(commas=True),
        type=ID(stored=True), tier=ID(stored=True), status=ID(stored=True), scope=ID(),
        agent=ID(), source=ID(sortable=True), importance=NUMERIC(int, stored=True),
        created=NUMERIC(int, bits=64, signed=True, sortable=True),
        updated=NUMERIC(int, bits=64, signed=True, sortable=True),
        updated_iso=STORED())
    if cfg.bigrams:
        fields["bigram"] = TEXT(analyzer=lists, phrase=False)
    return Schema(**fields)


def _low(v: str | None) -> str | None:
    return v.strip().lower() if isinstance(v, str) and v.strip() else None


class SearchIndex:
    """A Whoosh index of memories in ``directory`` (a cache: recreated when unusable)."""

    WRITE_TIMEOUT = 10.0      # seconds to wait for the index write lock
    MAX_SEGMENTS = 8          # more than this after a commit -> merge them all

    def __init__(self, directory: str | Path, *, config: SearchConfig | None = None) -> None:
        self.cfg = config or SearchConfig()
        self.dir = Path(directory)
        self._lock = threading.RLock()
        self._an = _Analysis(self.cfg)
        self._schema = _schema(self.cfg, self._an)
        self._weighting = scoring.BM25F(B=self.cfg.b, K1=self.cfg.k1, meta_B=0.0,
                                        speaker_B=0.0, when_B=0.0)
        self._searcher: Any = None
        self.needs_rebuild = False
        self.last_expansion: list[str] = []     # terms the last prefix expanded to (diagnostics)
        self._stamp = {"distribution": "whoosh-reloaded", "version": _whoosh_version(),
                       "schema": hashlib.sha256(self.cfg.schema_key().encode()).hexdigest()[:16]}
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._ix = self._open()
        except OSError as exc:
            raise StorageError(f"cannot open the search index in {self.dir}: {exc}") from exc

    # --- opening, stamping, recreating ------------------------------------------------

    def _open(self) -> Any:
        if _read_json(self.dir / _STAMP) == self._stamp:
            try:
                ix = whoosh.index.open_dir(str(self.dir), indexname=_INDEX_NAME,
                                           schema=self._schema)
                with ix.searcher() as s:       # probe: TOC, segments, a lexicon, a stored doc
                    r = s.reader()
                    r.doc_count()
                    list(r.lexicon("path"))[:1]
                    for n in list(r.all_doc_ids())[:1]:
                        r.stored_fields(n)
                return ix
            except Exception:                  # noqa: BLE001 - any failure means "unusable cache"
                pass
        return self._recreate()

    def _recreate(self) -> Any:
        for p in self.dir.iterdir():
            if p.name.startswith((f"_{_INDEX_NAME}_", f"{_INDEX_NAME}_")) and \
                    p.name != f"{_INDEX_NAME}_WRITELOCK" or p.name == _STATE:
                p.unlink(missing_ok=True)
        ix = whoosh.index.create_in(str(self.dir), self._schema, indexname=_INDEX_NAME)
        _write_json_atomic(self.dir / _STAMP, self._stamp)
        self.needs_rebuild = True
        return ix

    # --- writing ------------------------------------------------------------------------

    def _fields(self, d: IndexDoc) -> dict[str, Any]:
        words = " ".join(t.text for t in self._an.plain(f"{d.title}\n{d.body}\n{' '.join(d.tags)}"))
        out: dict[str, Any] = dict(
            path=d.path, hash=(d.hash or "").encode(), id=(d.id or "").lower(), title=d.title or "",
            body=d.body or "", meta=" ".join(list(d.tags) + list(d.entities)), words=words,
            taglist=list(d.tags), type=_low(d.type) or "memory", tier=_low(d.tier) or "short_term",
            status=_low(d.status) or "active", importance=int(d.importance or 0),
            updated_iso=d.updated)
        if self.cfg.bigrams:
            out["bigram"] = " ".join(self._an.bigrams(self._an.stems(f"{d.title}\n{d.body}")))
        for key, val in (("tags", ",".join(t.strip().lower() for t in d.tags)),
                         ("entities", ",".join(e.strip().lower() for e in d.entities)),
                         ("links", ",".join(d.links)), ("scope", _low(d.scope)),
                         ("agent", _low(d.agent)), ("speaker", d.agent),
                         ("source", d.source or None), ("when", _date_words(d.created)),
                         ("created", sq.iso_to_epoch(d.created)),
                         ("updated", sq.iso_to_epoch(d.updated))):
            if val:
                out[key] = val
        return out

    def _writer(self) -> Any:
        deadline = time.monotonic() + self.WRITE_TIMEOUT
        while True:
            try:
                return self._ix.writer(timeout=min(1.0, self.WRITE_TIMEOUT))
            except whoosh.index.LockError:
                if time.monotonic() >= deadline:
                    raise StorageError("index busy: another process holds the search index "
                                       "write lock", hint="retry in a moment") from None
            except Exception as exc:  # noqa: BLE001
                raise StorageError(f"cannot write the search index: {exc}",
                                   hint="run 'gitmem reindex'") from exc

    def _commit(self, work: Callable[[Any], None], **commit_kw: Any) -> None:
        with self._lock:
            w = self._writer()
            try:
                work(w)
                if "mergetype" not in commit_kw and self._segment_count() >= self.MAX_SEGMENTS:
                    commit_kw["mergetype"] = OPTIMIZE
                w.commit(**commit_kw)
            except StorageError:
                w.cancel()
                raise
            except Exception as exc:  # noqa: BLE001
                try:
                    w.cancel()
                except Exception:  # noqa: BLE001
                    pass
                raise StorageError(f"search index write failed: {exc}",
                                   hint="run 'gitmem reindex'") from exc
            self._refresh()

    def _segment_count(self) -> int:
        try:
            return len(self._ix._segments())
        except Exception:  # noqa: BLE001
            return 0

    def upsert(self, docs: Sequence[IndexDoc]) -> None:
        """Add or replace documents (keyed by ``path``) in one commit."""
        latest = {d.path: d for d in docs}
        if latest:
            self._commit(lambda w: [w.update_document(**self._fields(d)) for d in latest.values()])

    def delete(self, paths: Sequence[str]) -> None:
        """Remove documents by path (unknown paths are ignored)."""
        if paths:
            self._commit(lambda w: [w.delete_by_term("path", p) for p in set(paths)])

    def rebuild(self, docs: Iterable[IndexDoc],
                progress: Callable[[int], None] | None = None) -> int:
        """Replace the whole index with ``docs`` in one commit; returns how many were indexed.
        Readers keep seeing the old index until the commit.  Duplicate paths: first wins."""
        count, seen = 0, set()

        def work(w: Any) -> None:
            nonlocal count
            for d in docs:
                if d.path in seen:
                    continue
                seen.add(d.path)
                w.add_document(**self._fields(d))
                count += 1
                if progress and count % 500 == 0:
                    progress(count)

        with self._lock:
            self._writer_kwargs = {}
            self._commit(work, mergetype=CLEAR)
            self.needs_rebuild = False
        if progress:
            progress(count)
        return count

    def optimize(self) -> None:
        """Merge all segments into one (call when idle; cheap when already merged)."""
        if self._segment_count() > 1:
            self._commit(lambda w: None, mergetype=OPTIMIZE)

    # --- reading --------------------------------------------------------------------------

    def _refresh(self) -> Any:
        try:
            if self._searcher is None:
                self._searcher = self._ix.searcher(weighting=self._weighting)
            elif not self._searcher.up_to_date():
                self._searcher = self._searcher.refresh()
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
            paths, hashes = r.column_reader("path"), r.column_reader("hash")
            return {paths[n]: hashes[n].decode() for n in r.all_doc_ids()}

    def get_state(self, key: str) -> str | None:
        value = (_read_json(self.dir / _STATE) or {}).get(key)
        return value if isinstance(value, str) else None

    def set_state(self, key: str, value: str) -> None:
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

    # --- query building -------------------------------------------------------------------

    def prefix_terms(self, prefix: str) -> list[str]:
        """The words a ``prefix*`` query expands to: the most frequent ones, bounded."""
        s = self._refresh()
        r = s.reader()
        prefix = prefix.lower()
        found = [(r.doc_frequency("words", t), t) for t in r.expand_prefix("words", prefix)]
        found.sort(key=lambda x: (-x[0], x[1]))
        return [t if isinstance(t, str) else t.decode() for _, t in found[:PREFIX_EXPANSION_LIMIT]]

    def _term_fields(self, stem: str) -> list[wq.Query]:
        c = self.cfg
        return [wq.Term("title", stem, boost=c.title_boost), wq.Term("body", stem),
                wq.Term("meta", stem, boost=c.meta_boost),
                wq.Term("speaker", stem, boost=c.agent_boost)]

    def _node(self, n: Any, hl: set[str]) -> wq.Query | None:
        """A syntax tree node -> a Whoosh query (None when it analyses to nothing)."""
        if isinstance(n, sq.Word):
            stems = self._an.stems(n.text)
            hl.update(stems)
            if len(stems) > 1:
                return _Or([wq.Phrase("body", stems), wq.Phrase("title", stems)])
            return _or(self._term_fields(stems[0])) if stems else None
        if isinstance(n, sq.Phrase):
            stems = self._an.stems(n.text)
            hl.update(stems)
            if len(stems) == 1:
                return _or(self._term_fields(stems[0]))
            return _Or([wq.Phrase("body", stems), wq.Phrase("title", stems, boost=2.0)]) \
                if stems else None
        if isinstance(n, sq.Prefix):
            terms = self.prefix_terms(n.text)
            self.last_expansion = terms
            hl.update(self._an.stem_fn(t) for t in terms)
            return _Or([wq.Term("words", t) for t in terms]) if terms else wq.NullQuery
        if isinstance(n, (sq.FieldTerm, sq.DateRange)):
            return wq.ConstantScoreQuery(self._filter_query(n), 0.5)
        if isinstance(n, sq.Not):
            inner = self._node(n.item, set())
            return wq.Not(inner) if inner is not None else None
        parts = [q for q in (self._node(c, hl) for c in n.items) if q is not None]
        if not parts:
            return None
        if isinstance(n, sq.Or):
            return _or(parts)
        return parts[0] if len(parts) == 1 else wq.And(parts)

    def _filter_query(self, n: Any) -> wq.Query:
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

    def _natural(self, words: list[str], hl: set[str]) -> tuple[wq.Query | None, wq.Query | None]:
        """Plain words -> (any-words query, all-words query)."""
        r = self._refresh().reader()
        text = " ".join(words)
        toks = [t.text for t in self._an.base(text)]
        if self.cfg.question_stop:
            kept = [t for t in toks if t not in _QUESTION_WORDS]
            toks = kept or toks
        stems = list(dict.fromkeys(self._an.stem_fn(t) for t in toks))
        hl.update(stems)
        if not stems:
            return None, None
        per_word = [self._term_fields(s) for s in stems]
        flat = [q for qs in per_word for q in qs]
        for w in dict.fromkeys(t.text for t in self._an.plain(text)):
            if self.cfg.date_boost and r.doc_frequency("when", w):
                flat.append(wq.Term("when", w, boost=self.cfg.date_boost))
        if self.cfg.bigrams and self.cfg.bigram_boost:
            flat += [wq.Term("bigram", b, boost=self.cfg.bigram_boost)
                     for b in dict.fromkeys(self._an.bigrams(stems))]
        any_q = _or(flat)
        all_q = wq.And([_or(qs) for qs in per_word]) if len(stems) > 1 else any_q
        return any_q, all_q

    # --- searching ----------------------------------------------------------------------

    def search(self, query: str, *, limit: int = 10, offset: int = 0,
               include_inactive: bool = False,
               filters: Mapping[str, str | Sequence[str]] | None = None) -> SearchPage:
        """Run a query (see :mod:`gitmem.search_query`); raise InvalidQuery on bad syntax."""
        if limit < 0 or offset < 0:
            raise InvalidQuery("limit and offset must not be negative")
        pq = sq.parse_query(query or "")
        for key, vals in (filters or {}).items():
            vals = [vals] if isinstance(vals, str) else list(vals)
            if vals:
                nodes = [sq.parse_filter(key, str(v)) for v in vals]
                pq.filters.append(nodes[0] if len(nodes) == 1 else sq.Or(tuple(nodes)))
        with self._lock:
            try:
                return self._search(pq, limit, offset, include_inactive)
            except (InvalidQuery, StorageError):
                raise
            except Exception as exc:  # noqa: BLE001
                self._searcher = None
                raise StorageError(f"search failed: {exc}", hint="run 'gitmem reindex'") from exc

    def _search(self, pq: sq.ParsedQuery, limit: int, offset: int,
                include_inactive: bool) -> SearchPage:
        s = self._refresh()
        flt = wq.And([self._filter_query(f) for f in pq.filters]) if pq.filters else None
        mask = None
        if not include_inactive and not pq.filters_status:
            mask = _Or([wq.Term("status", st) for st in INACTIVE_STATUSES])
        hl: set[str] = set()
        want = offset + limit
        if pq.natural and pq.words:
            any_q, all_q = self._natural(pq.words, hl)
            if any_q is None:
                return SearchPage([], 0, None, "any-words")
            ranked, total, mode = self._rank_natural(s, any_q, all_q, flt, mask, want)
        elif not pq.natural and pq.expr is not None:
            q = self._node(pq.expr, hl)
            if q is None:
                return SearchPage([], 0, None, "syntax")
            res = s.search(q.normalize(), limit=max(want, self.cfg.candidates),
                           filter=flt, mask=mask)
            ranked, total, mode = self._group_prior(s, res), len(res), "syntax"
        else:   # filters only: newest first
            res = s.search(wq.Every(), limit=want or None, filter=flt, mask=mask,
                           sortedby="updated", reverse=True)
            ranked, total, mode = [(h.docnum, 0.0) for h in res], len(res), "filter"
        hits = [self._hit(s, dn, sc, hl) for dn, sc in ranked[offset:want]]
        suggestion = self._suggest(s, pq) if total == 0 else None
        return SearchPage(hits, total, suggestion, mode)

    def _rank_natural(self, s: Any, any_q: Any, all_q: Any, flt: Any, mask: Any,
                      want: int) -> tuple[list[tuple[int, float]], int, str]:
        n = max(want, self.cfg.candidates)
        policy = self.cfg.natural
        all_res = s.search(all_q, limit=n, filter=flt, mask=mask) if policy != "any" else None
        if policy == "all-then-any" and all_res is not None and len(all_res):
            return self._group_prior(s, all_res), len(all_res), "all-words"
        q = any_q
        if policy == "all-boost" and all_q is not any_q:
            q = _Or([any_q, wq.And(list(all_q.subqueries), boost=self.cfg.all_boost)])
        res = s.search(q, limit=n, filter=flt, mask=mask)
        ranked = self._group_prior(s, res)
        has_all = all_res is not None and len(all_res) > 0
        if policy == "all-first" and has_all:
            first = {dn for dn in all_res.docs()}
            ranked = [x for x in ranked if x[0] in first] + [x for x in ranked if x[0] not in first]
        return ranked, len(res), "all-words" if has_all else "any-words"

    def _group_prior(self, s: Any, res: Any) -> list[tuple[int, float]]:
        """Add ``group_weight`` x (sum of the best ``group_depth`` scores in the same source)."""
        items = [(h.docnum, h.score or 0.0) for h in res]
        w = self.cfg.group_weight
        if not w or len(items) < 2:
            return items
        col = s.reader().column_reader("source")
        groups: dict[str, list[float]] = {}
        src = {}
        for dn, sc in items:
            g = col[dn]
            if g:
                src[dn] = g
                groups.setdefault(g, []).append(sc)
        gscore = {g: sum(sorted(v, reverse=True)[:self.cfg.group_depth]) for g, v in groups.items()}
        out = [(dn, sc + w * gscore[src[dn]] if dn in src else sc) for dn, sc in items]
        out.sort(key=lambda x: -x[1])
        return out

    def _hit(self, s: Any, docnum: int, score: float, hl: set[str]) -> SearchHit:
        f = s.stored_fields(docnum)
        return SearchHit(id=f.get("id", ""), path=f["path"], title=f.get("title", ""),
                         tier=f.get("tier", ""), type=f.get("type", ""),
                         tags=list(f.get("taglist") or []), score=round(float(score), 4),
                         updated=f.get("updated_iso"),
                         snippet=self._snippet(f.get("body", ""), f.get("title", ""), hl))

    def _snippet(self, body: str, title: str, terms: set[str]) -> str:
        for text in (body, title):
            if text and terms:
                frag = highlight.highlight(text, terms, self._an.text, _FRAGMENTER, _FORMATTER,
                                           top=1)
                if frag:
                    return _clip(frag)
        return _clip(body or title)

    def _suggest(self, s: Any, pq: sq.ParsedQuery) -> str | None:
        """A corrected query from the index vocabulary, when some word is unknown."""
        words = pq.words if pq.natural else _plain_words(pq.expr)
        r = s.reader()
        fixes: dict[str, str] = {}
        for w in dict.fromkeys(t.text for t in self._an.plain(" ".join(words))):
            if len(w) < 3 or r.doc_frequency("words", w):
                continue
            best = None
            for cand in r.terms_within("words", w, 2, prefix=1):
                cand = cand if isinstance(cand, str) else cand.decode()
                key = (_edits(w, cand), -r.doc_frequency("words", cand), cand)
                best = min(best, key) if best else key
            if best:
                fixes[w] = best[2]
        if not fixes:
            return None
        text = " ".join(words) if pq.natural else _source_text(pq)
        return re.sub(r"\w+", lambda m: fixes.get(m.group(0).lower(), m.group(0)), text)


def _plain_words(n: Any) -> list[str]:
    if isinstance(n, (sq.Word, sq.Phrase)):
        return [n.text]
    if isinstance(n, (sq.And, sq.Or)):
        return [w for c in n.items for w in _plain_words(c)]
    return []


def _source_text(pq: sq.ParsedQuery) -> str:
    return " ".join(_plain_words(pq.expr))


def _edits(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


class _MarkFormatter(highlight.Formatter):
    """Marks matched words Markdown-style: ``**word**``."""
    between = " … "

    def format_token(self, text: str, token: Any, replace: bool = False) -> str:
        return f"**{highlight.get_text(text, token, replace)}**"

    def format_fragment(self, fragment: Any, replace: bool = False) -> str:
        out = super().format_fragment(fragment, replace)
        pre = "…" if fragment.startchar > 0 else ""
        post = "…" if fragment.endchar < len(fragment.text) else ""
        return f"{pre}{out.strip()}{post}"


_FRAGMENTER = highlight.ContextFragmenter(maxchars=SNIPPET_CHARS, surround=60, charlimit=None)
_FORMATTER = _MarkFormatter()


def _clip(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= SNIPPET_CHARS + 40:
        return text
    cut = text[:SNIPPET_CHARS]
    if cut.count("**") % 2:
        cut += "**"
    return cut.rstrip() + "…"
