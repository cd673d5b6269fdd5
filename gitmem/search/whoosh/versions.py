"""Every version of every memory along a line of commits, searchable as of any of them
(:class:`VersionIndex`, the cache behind :mod:`gitmem.search.as_of`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from whoosh.writing import CLEAR

from ..documents import IndexDoc, index_fields
from ..results import SearchPage
from .index import SearchIndex
from .postings import Snapshot

__all__ = ["VersionIndex", "version_key"]


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
        def snap(s: Any) -> Snapshot:
            key = ("at", at, token)
            if key not in self._memo:
                since, paths, lengths, order = self._columns(s)
                docs = {d for d in range(len(since)) if since[d] <= at
                        and until.get(version_key(paths[d], since[d]), at + 1) > at}
                docs.difference_update(self._memo["deleted"])
                self._memo = {k: v for k, v in self._memo.items()      # older states' snapshots go
                              if not (isinstance(k, tuple) and k[0] == "at" and k[2] != token)}
                self._memo[key] = Snapshot(docs, lengths, order)
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
