"""Keeping the search index in step with the vault, and searching it.

:class:`SearchService` owns the vault's search index.  The index (Whoosh, owned
by :mod:`gitmem.search.whoosh`) lives in ``.git/gitmem/index`` and is a cache of the
files:

* every Vault write updates it in the same operation, under the vault lock;
* the first time a process opens it, it catches up with whatever changed
  while nothing was watching (a ``git pull``, a commit from the git CLI, an
  edit in Obsidian): every file is stat-ed (like ``git status``), only files
  whose size or mtime changed are re-read, and the catalog lists every path
  whose row changed since the index took it, so only those are looked up in
  the index and re-indexed when their content hash differs (nothing is read
  from the index when nothing changed);
* :meth:`SearchService.refresh` does the same for given paths (the watcher and
  long-lived servers call it; the git hooks only leave a mark, and the next
  process to open the index catches up);
* :meth:`SearchService.reindex` rebuilds it from scratch.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..errors import InvalidInput, NotInstalled
from ..memory.markdown import memory_links
from ..store.catalog import all_tags
from ..store.git import blob_id

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.schema import Memory
    from ..store.reader import Reader
    from ..store.storage import Storage
    from .as_of import AsOfSearch
    from .vectors import EmbedWorker, VectorStore
    from .whoosh import IndexDoc, SearchIndex, SearchPage

__all__ = ["SearchService", "RefreshReport"]

_FILTER_KEYS = ("tier", "type", "tag", "scope", "agent", "status", "id", "entity", "source", "path",
                "link", "created", "updated")


@dataclass
class RefreshReport:
    """What a refresh found and did."""

    indexed: list[str] = field(default_factory=list)   # paths (re)indexed
    removed: list[str] = field(default_factory=list)   # paths dropped from the index
    problems: dict[str, str] = field(default_factory=dict)  # path -> why its frontmatter is unusable
    busy: bool = False   # refresh(wait=False) found the vault lock held: nothing was done

    def to_dict(self) -> dict[str, Any]:
        return {"indexed": self.indexed, "removed": self.removed, "problems": self.problems}


class SearchService:
    """The vault's search index (a cache of the files), its history index for searches
    as of a past commit, and its embedding vectors."""

    def __init__(self, store: Storage, reader: Reader) -> None:
        self.store = store
        self.reader = reader
        self.open_index: SearchIndex | None = None   # None until first used
        self._behind = False               # open_index may lag the files (not caught up)
        self._private: str | None = None   # the folder of a private index (see index)
        self._as_of: AsOfSearch | None = None
        self._vector_store: VectorStore | None = None
        self._worker: EmbedWorker | None = None   # this process's embedding worker, once started

    # ------------------------------------------------------------- the index
    @property
    def index(self) -> SearchIndex:
        """The search index, opened (and caught up with the files) on first use.

        Never waits for the vault lock.  Catching up writes the index, so it is done
        only when the lock is free (or held by this process); while another process
        holds it, the index is searched as it is, and the next use tries again.  An
        index that must be rebuilt first (missing, or of another version) and cannot
        be, is replaced for this process by a private one built from the files."""
        if self.open_index is None or self._behind:
            with self.store.lock.try_hold() as held:
                if held:
                    self._open_caught_up()
                elif self.open_index is None:
                    self._open_as_is()
        assert self.open_index is not None
        return self.open_index

    def _open_caught_up(self) -> None:
        """Open the shared index (lock held), rebuilt or caught up with the files."""
        from .whoosh import SearchIndex
        if self.open_index is not None and self._private is not None:
            self._close_private()
        if self.open_index is None:
            index = SearchIndex(self.store.state_dir / "index")
            self.open_index = index
            if index.needs_rebuild:
                self._rebuild(index)
                self._behind = False
                return
        self._behind = False
        self._catch_up(self.open_index)

    def _open_as_is(self) -> None:
        """Open the shared index without the lock (another process holds it): as it is
        when it can be trusted, else a private index of the files (see :attr:`index`)."""
        from .whoosh import SearchIndex
        index = SearchIndex(self.store.state_dir / "index")
        self.reader.scan()
        pending = None if index.needs_rebuild else self._pending(index)
        if pending is not None:
            self.open_index, self._behind = index, bool(pending)
            return
        index.close()
        folder = tempfile.mkdtemp(prefix="gitmem-search-")
        private = SearchIndex(folder)
        catalog = self.store.catalog
        private.rebuild(self._docs_for(row.path for row in catalog.all_rows()), total=catalog.count())
        self.open_index, self._private, self._behind = private, folder, True

    def _pending(self, index: SearchIndex) -> list[str] | None:
        """The paths whose catalog row changed since ``index`` took them (after a scan),
        or None when that list cannot be trusted for this index (every indexed hash
        must then be compared with the catalog's)."""
        catalog = self.store.catalog
        pending = catalog.unindexed(self.CHECK_ALL_OVER)
        token = index.get_state("catalog")
        if (pending is not None and token is not None and token == catalog.get("search_index")
                and abs(index.doc_count() - catalog.count()) <= len(pending)):
            return pending
        return None

    def _close_private(self) -> None:
        """Drop this process's private index (see :attr:`index`)."""
        if self.open_index is not None:
            self.open_index.close()
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
        self.open_index, self._private = None, None

    @property
    def as_of_search(self) -> AsOfSearch:
        """Searches of the vault as it was at a commit or date (``.git/gitmem/versions``)."""
        if self._as_of is None:
            from .as_of import AsOfSearch
            self._as_of = AsOfSearch(self.store.git, self.store.state_dir / "versions", self.store.is_memory_path,
                                     self.reader.memory_from_bytes, self.doc)
        return self._as_of

    def doc(self, memory: Memory, blob_hash: str, context: str | None = None) -> IndexDoc:
        """What the search index stores of a memory; ``context`` (what it answers or
        continues) is read from the files when not given."""
        from .whoosh import IndexDoc
        meta = memory.meta
        links = list(dict.fromkeys(target for target, _ in memory_links(meta, memory.body)))
        return IndexDoc(
            path=memory.path, id=memory.id, title=memory.title, body=memory.body, hash=blob_hash,
            # Obsidian's tags: the frontmatter's and the body's inline #tags (never written to the file)
            tags=all_tags(meta, memory.body),
            type=str(meta.get("type", "memory")), tier=memory.tier, status=str(meta.get("status", "active")),
            scope=_opt(meta.get("scope")), agent=_opt(meta.get("agent")),
            entities=_names(meta.get("entities")), aliases=_names(meta.get("aliases")),
            links=links, importance=memory.importance if isinstance(meta.get("importance", 3), int) else 3,
            created=_opt(meta.get("created")), updated=_opt(meta.get("updated")), source=_opt(meta.get("source")),
            context=self._context_of(meta) if context is None else context,
            follows=_opt(meta.get("follows")))

    def _context_of(self, meta: Mapping[str, Any]) -> str:
        """A memory's indexed context: its ``context`` field, then the title and text of
        the memory it ``follows`` (read from the files; empty when that one is gone)."""
        from .documents import context_text
        own, follows = _opt(meta.get("context")), _opt(meta.get("follows"))
        for row in self.store.catalog.by_id(follows) if follows else ():
            try:
                data = safefs.read_or_none(self.store.root, row.path)
            except PermissionError:
                continue
            if data is not None:
                before = self.reader.read_file(row.path, data)
                return context_text(own, before.title, before.body)
        return own or ""

    def _with_followers(self, index: SearchIndex,
                        docs: list[IndexDoc]) -> list[IndexDoc]:
        """``docs`` and the documents of the memories that follow one of them: their
        context holds the text of the memory they follow, so they are re-indexed with it
        (one index lookup per write; a follower is re-read only when it exists)."""
        paths = {d.path for d in docs}
        more = [p for p in index.followers({d.id for d in docs if d.id}) if p not in paths]
        return docs + list(self._docs_for(more)) if more else docs

    def _docs_for(self, paths: Iterable[str]) -> Iterator[IndexDoc]:
        for path in paths:
            try:
                data = safefs.read_or_none(self.store.root, path)
            except PermissionError:
                continue
            if data is not None:
                yield self.doc(self.reader.read_file(path, data), blob_id(data))

    def _rebuild(self, index: SearchIndex,
                 progress: Callable[[int], None] | None = None) -> int:
        self.reader.scan()
        taken: dict[str, str | None] = {}

        def docs() -> Iterator[IndexDoc]:
            for d in self._docs_for(row.path for row in self.store.catalog.all_rows()):
                taken[d.path] = d.hash
                yield d

        count = index.rebuild(docs(), progress, total=self.store.catalog.count())
        self._in_step(index, taken, everything=True)
        self._note_head(index)
        return count

    def build_from(self, written: Mapping[str, tuple[Memory, str]]) -> None:
        """Build the index of a new vault from its first commit's memories, parsed once
        already (lock held): ``gitmem init --from`` is searchable when it returns, and
        the next process finds the index in step with the catalog."""
        from .whoosh import SearchIndex
        index = SearchIndex(self.store.state_dir / "index")
        # In path order, as a rebuild from the files adds them (ties rank the same).
        index.rebuild((self.doc(*written[path]) for path in sorted(written)), total=len(written))
        self.open_index = index
        self._in_step(index, {path: blob for path, (_, blob) in written.items()}, everything=True)
        self._note_head(index)

    def _catch_up(self, index: SearchIndex) -> RefreshReport:
        """Re-index what differs between the files and the index (lock held).

        The catalog lists the paths whose row changed since the index took them
        (:meth:`Catalog.unindexed`), so when the index is the one the catalog was
        last in step with, only those are looked at; otherwise (a new catalog or
        index, or many changes) every indexed hash is compared with the catalog's."""
        self.reader.scan()
        catalog = self.store.catalog
        pending = self._pending(index)
        if pending is not None:
            if not pending:
                self._note_head(index)
                return RefreshReport()
            on_disk = catalog.hashes_of(pending)
            indexed = index.hashes_of(pending)
            everything = False
        else:
            on_disk, indexed, everything = catalog.hashes(), index.indexed(), True
        report = self._bring_in_line(index, on_disk, indexed, pending or (), everything)
        self._note_head(index)
        return report

    def _bring_in_line(self, index: SearchIndex, on_disk: Mapping[str, str], indexed: Mapping[str, str],
                       looked_at: Iterable[str], everything: bool) -> RefreshReport:
        """Re-index the paths whose catalog hash (``on_disk``) differs from the indexed one,
        drop those gone, and record what the index now holds (``looked_at``: paths also
        compared, in neither when absent from both)."""
        report = RefreshReport(
            indexed=sorted(p for p, h in on_disk.items() if indexed.get(p) != h),
            removed=sorted(p for p in indexed if p not in on_disk))
        if report.removed:
            index.delete(report.removed)
        docs: list[IndexDoc] = []
        if report.indexed:
            docs = self._with_followers(index, list(self._docs_for(report.indexed)))
            index.upsert(docs)
        held = self._held(on_disk, indexed, report.removed, docs)
        held.update({p: None for p in looked_at if p not in held})   # in neither
        self._in_step(index, held, everything)
        return report

    @staticmethod
    def _held(on_disk: Mapping[str, str], indexed: Mapping[str, str], removed: Iterable[str],
              docs: Iterable[IndexDoc]) -> dict[str, str | None]:
        """What the index holds of the paths compared, once ``removed`` are deleted and
        ``docs`` written (a file that could not be read keeps what it had)."""
        held: dict[str, str | None] = {p: indexed.get(p) for p in (*on_disk, *indexed)}
        held.update({p: None for p in removed})
        held.update({d.path: d.hash for d in docs})
        return held

    #: Over this many changed rows, a catch-up compares every indexed hash (one pass)
    #: instead of looking each changed path up in the index.
    CHECK_ALL_OVER = 2000

    def _in_step(self, index: SearchIndex, taken: Mapping[str, str | None],
                 everything: bool = False) -> None:
        """Record that the index now holds ``taken`` (path -> blob id, None: not at all);
        ``everything``: ``taken`` is all the index holds (a full comparison or a
        rebuild), and from now on the catalog's list of changed rows is trusted for
        this index."""
        catalog = self.store.catalog
        with self.store.lock.threads():
            if everything:
                taken = {**{p: None for p in catalog.unindexed(10**9) or ()}, **taken}
            catalog.mark_indexed(taken.items())
            if everything:
                token = uuid.uuid4().hex
                index.set_state("catalog", token)
                catalog.set("search_index", token)

    def _note_head(self, index: SearchIndex) -> None:
        head = self.store.git.head()
        commit = head.decode() if head else ""
        if index.get_state("commit") != commit:
            index.set_state("commit", commit)

    def fall_behind(self) -> None:
        """The open index may lack a commit's changes (taking them failed): the next
        use catches it up with the files."""
        if self.open_index is not None:
            self._behind = True

    def index_changes(self, written: Mapping[str, tuple[Memory, str]],
                       removed: Sequence[str], new: Sequence[str] = ()) -> None:
        """Index the memory files of a commit this Vault just made (lock held).

        ``written`` maps each written path to its parsed memory and blob id;
        ``new`` lists paths that did not exist before the commit (faster to add).
        """
        if self.open_index is None or self._behind:
            if self._behind or (self.store.state_dir / "index").exists():
                # Opening (or catching up) takes in the files on disk, this commit's included;
                # indexing the changes again would add a second copy of new files.
                self.index  # noqa: B018
            return  # (no index yet: it is built from the files on first use)
        index = self.index
        if removed:
            index.delete(list(removed))
        docs: list[IndexDoc] = []
        if written:
            docs = self._with_followers(
                index, [self.doc(memory, blob_hash) for memory, blob_hash in written.values()])
            index.upsert(docs, new=set(new))
        self._in_step(index, {**{p: None for p in removed}, **{d.path: d.hash for d in docs}})

    # ----------------------------------------------------------- front doors
    def refresh(self, paths: Iterable[str] | None = None, *, wait: bool = True) -> RefreshReport:
        """Bring the catalog and the search index up to date with the files.

        ``paths`` (vault-relative) limits the work to those files, as the
        watcher does; None checks the whole vault (cheap when little changed).
        ``wait=False``: only if the vault lock is free now (a server catching up
        before it answers a read); otherwise nothing is done and the report says
        ``busy``.
        """
        with self.store.lock.try_hold() if not wait else _holding(self.store.lock) as held:
            if not held:
                return RefreshReport(busy=True)
            if paths is None:
                report = self._catch_up(self.index)
            else:
                wanted = sorted({p for p in paths if self.store.is_memory_path(p)})
                changed, removed = self.reader.scan_paths(wanted)
                index = self.index
                report = self._bring_in_line(index, self.store.catalog.hashes_of(wanted),
                                             index.hashes_of(wanted), wanted, everything=False)
            for path in report.indexed:
                row = self.store.catalog.row(path)
                if row is not None and row.problem:
                    report.problems[path] = row.problem
        return report

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the search index from the files; returns the number of memories."""
        from .whoosh import SearchIndex
        with self.store.lock.hold():
            if self._private is not None:
                self._close_private()
            index = self.open_index or SearchIndex(self.store.state_dir / "index")
            self.open_index, self._behind = index, False
            return self._rebuild(index, progress)

    def search(self, query: str, *, limit: int = 10, offset: int = 0,
               include_inactive: bool = False, as_of: str | None = None,
               progress: Callable[[int, int], None] | None = None, hybrid: bool | None = None,
               record: bool = True, **filters: str | Sequence[str] | None) -> SearchPage:
        """Full-text search (BM25, stemming, phrases, AND/OR/NOT, prefix*, field filters).

        ``filters``: ``tier``, ``type``, ``tag``, ``scope``, ``agent``,
        ``status``, ``id``, ``entity``, ``source``, ``path``, ``link``,
        ``created``/``updated`` (``">2026-01-01"``, ``"2026-01-01..2026-03-31"``);
        a list value means any of them.  Archived, deleted and superseded
        memories are left out unless ``include_inactive`` or a ``status``
        filter asks for them.

        ``as_of`` searches the vault as it was at a commit (``HEAD~N``, a commit
        id) or a date (ISO 8601; a bare date means the end of that day), ranked
        as a fresh vault of that commit would rank it; the page and its hits
        carry that ``commit``.  The first such search indexes the vault's
        history once (``progress(done, total)`` counts versions).

        ``hybrid``: None (default) ranks plain-language queries with the memories'
        embedding vectors too when the ``embed`` extra is installed and vectors
        exist (``gitmem embed``; ``mode="hybrid"``); False is lexical only; True
        asks for hybrid and fails with ``not_installed`` without the extra.  A damaged
        vectors file is never used: the search is lexical and the page's ``notice``
        says so (``gitmem embed`` or this process's embedding worker rebuilds it).

        ``record=False`` does not count the hits as retrievals (a measurement, not a use).
        """
        if not isinstance(query, str):
            raise InvalidInput("query must be text")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidInput("limit must be an integer from 1 to 1000")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInput("offset must be a non-negative integer")
        unknown = sorted(set(filters) - set(_FILTER_KEYS))
        if unknown:
            raise InvalidInput(f"unknown search filter(s): {', '.join(unknown)}",
                               hint=f"Filters: {', '.join(_FILTER_KEYS)}")
        clean: Mapping[str, str | Sequence[str]] = {k: v for k, v in filters.items() if v not in (None, "", [], ())}
        if as_of is not None:   # the past is not a retrieval of today's memories: none counted
            return self.as_of_search.search(query, as_of, limit=limit, offset=offset,
                                            include_inactive=include_inactive,
                                            filters=clean or None, progress=progress)
        store = self._vectors_for_search(hybrid)
        notice = None
        if store is not None:
            damage = store.damage()
            if damage is not None:     # never used: words only, and say so
                notice, store = self._damaged_notice(store, damage), None
        if store is not None:
            from .embedding import get_embedder
            from .hybrid import hybrid_search
            page = hybrid_search(self.index, store, get_embedder(), query, limit=limit, offset=offset,
                                 include_inactive=include_inactive, filters=clean or None)
        else:
            page = self.index.search(query, limit=limit, offset=offset, include_inactive=include_inactive,
                                     filters=clean or None)
            page.notice = notice
        if page.hits and record:
            # Retrievals reinforce memories at the next reflect; counted outside the
            # tracked tree so reading never makes a commit.
            # (never failing nor keeping the search waiting: see Catalog.add_retrievals)
            with self.store.lock.threads():
                self.store.catalog.add_retrievals([h.id for h in page.hits], int(self.store.clock().timestamp()))
        return page

    def list_as_of(self, as_of: str, want: dict[str, set[str]], need_tags: set[str],
                   limit: int | None) -> list[Memory]:
        """The memories of the vault as it was at commit or date ``as_of`` passing the
        filters of :func:`~gitmem.store.reader.listing_filters` (bodies not loaded)."""
        from ..memory.schema import Memory
        from ..store.catalog import tag_key
        from ..store.reader import matches_filters
        _, files = self.as_of_search.memory_files(as_of)
        entries = (Memory(m.path, m.meta, "", m.problems) for m in
                   (self.reader.memory_from_bytes(path, data) for path, data in files)
                   if need_tags <= {tag_key(t) for t in all_tags(m.meta, m.body)})
        return matches_filters(entries, want, limit)

    def start_embedding(self, log: Callable[[str], None] | None = None) -> EmbedWorker | None:
        """Keep the vectors current in a background thread when the vault has vectors
        and the ``embed`` extra is installed (None otherwise)."""
        from .vectors import start_embed_worker
        worker = start_embed_worker(self.store, self.reader, self.refresh, log)
        if worker is not None:
            self._worker = worker       # (a search finding the vectors damaged nudges it)
        return worker

    def _damaged_notice(self, store: VectorStore, damage: str) -> str:
        """What a search says when the vectors file is damaged; nudges this process's
        embedding worker (``gitmem watch``, ``gitmem mcp``), which rebuilds it."""
        where = f"the vectors file {store.file.relative_to(self.store.root).as_posix()}" \
            if store.file.is_relative_to(self.store.root) else f"the vectors file {store.file}"
        worker = self._worker
        if worker is not None and worker.running:
            worker.nudge()
            then = "it is being rebuilt in the background"
        else:
            then = "run 'gitmem embed' to rebuild it"
        return f"searched by words only: {where} is damaged ({damage}); {then}"

    def close(self) -> None:
        """Close the open indexes (no write of this process's threads under way)."""
        if self._private is not None:
            self._close_private()
        if self.open_index is not None:
            self.open_index.close()
        if self._as_of is not None:
            self._as_of.close()

    def hybrid_unavailable(self) -> tuple[str, str] | None:
        """Why a hybrid search cannot run now, as (reason, hint), or None when it can."""
        from .embedding import INSTALL_HINT, available
        if not available():
            return "the embed extra is not installed", INSTALL_HINT
        store = self._vectors()
        if not store.exists():
            return "the vault has no vectors yet", "Run gitmem embed first."
        damage = store.damage()
        if damage is not None:
            return f"the vectors file is damaged ({damage})", "Run gitmem embed to rebuild it."
        return None

    def _vectors_for_search(self, hybrid: bool | None) -> VectorStore | None:
        """The vector store when a search should be hybrid (see :meth:`search`), else None."""
        if hybrid is False:
            return None
        from .embedding import INSTALL_HINT, available
        if not available():
            if hybrid:
                raise NotInstalled("hybrid search needs the embed extra", hint=INSTALL_HINT)
            return None
        store = self._vectors()
        return store if store.exists() else None

    def _vectors(self) -> VectorStore:
        if self._vector_store is None:
            from .vectors import VectorStore, vector_dir
            self._vector_store = VectorStore(vector_dir(self.store.state_dir))
        return self._vector_store

    def embed(self, *, rebuild: bool = False,
              progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Compute the embedding vectors of new and changed memories for hybrid search
        (a cache in ``.git/gitmem/vectors/``; ``rebuild`` drops every stored vector
        first; a damaged vectors file is replaced and everything embedded again).  Needs
        the ``embed`` extra (NotInstalled otherwise).  Returns what was done: ``embedded``,
        ``vectors`` (stored now), ``model``, ``backend``, ``path``, and ``replaced_damaged``
        (why the file was unusable) when it replaced a damaged one."""
        from .embedding import INSTALL_HINT, MODEL_NAME, available, get_embedder
        from .vectors import embed_pending
        if not available():
            raise NotInstalled("gitmem embed needs the embed extra", hint=INSTALL_HINT)
        store = self._vectors()
        damage = store.damage() if store.exists() else None
        if rebuild:
            store.drop()
        embedder = get_embedder()
        count = embed_pending(self.store, self.reader, self.refresh, embedder, progress)
        done: dict[str, Any] = {"embedded": count, "vectors": len(store.stored()), "model": MODEL_NAME,
                                "backend": embedder.backend, "path": str(store.file)}
        if damage is not None:
            done["replaced_damaged"] = damage    # the damaged file it replaced, and why
        return done


def _opt(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _names(value: Any) -> list[str]:
    """A list field of names (``entities``, ``aliases``; the reader makes them lists)."""
    return [str(v) for v in value] if isinstance(value, list) else []


@contextmanager
def _holding(lock: Any) -> Iterator[bool]:
    """``lock.hold()`` yielding True, to stand beside ``lock.try_hold()``."""
    with lock.hold():
        yield True
