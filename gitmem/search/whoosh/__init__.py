"""The fence around Whoosh: the only code of gitmem that imports :mod:`whoosh`.

Full-text search over memories is a Whoosh index that is only ever a rebuildable cache
(:class:`SearchIndex`; :class:`VersionIndex` for searches as of a past commit).  gitmem
builds on internals of whoosh-reloaded 2.7.5 (the codec, the posting reader, the segment
writer, the storage): every private name it uses is declared in :mod:`.internals` and
checked, with the installed distribution and version, before any other module of this
package imports Whoosh.  A mismatch is :class:`~gitmem.errors.SearchEngineUnsupported`
when the search index opens, with what to install; never a silent slower path.

Modules, one idea each:

* :mod:`.internals` - the Whoosh names and versions gitmem relies on, and their check;
* :mod:`.schema` - fields, analysis (tokens, stems), the top-k-safe ``Or`` query;
* :mod:`.codec` - the postings codec and the in-memory posting pool of rebuilds;
* :mod:`.storage` - the memory-mapped index folder, and what reading a damaged one raises;
* :mod:`.postings` - posting lists as plain arrays for :mod:`gitmem.search.rank`;
* :mod:`.writing` - commits, size-tier and idle merges, rebuilds (a child process helps);
* :mod:`.searcher` - reopening a searcher, reusing unchanged segment readers;
* :mod:`.index` - :class:`SearchIndex`: opening, stamping, reading and searching;
* :mod:`.versions` - :class:`VersionIndex`.

:mod:`gitmem.search.rank`, :mod:`gitmem.search.query` and :mod:`gitmem.search.snippet`
never see Whoosh.
"""

from __future__ import annotations

# First: a Whoosh gitmem does not support is named here, before a module below imports it.
from .internals import check, whoosh_version

check()

# isort: split
from ..documents import IndexDoc  # noqa: E402 - after the check, deliberately
from ..rank import PREFIX_EXPANSION_LIMIT, SearchConfig  # noqa: E402
from ..results import SearchHit, SearchPage  # noqa: E402
from .index import INACTIVE_STATUSES, SearchIndex  # noqa: E402
from .versions import VersionIndex, version_key  # noqa: E402

# IndexDoc, SearchHit, SearchPage and SearchConfig are defined elsewhere (documents, results,
# rank) and part of this package's API.
__all__ = ["IndexDoc", "SearchHit", "SearchPage", "SearchIndex", "SearchConfig", "VersionIndex",
           "version_key", "whoosh_version", "PREFIX_EXPANSION_LIMIT", "INACTIVE_STATUSES"]
