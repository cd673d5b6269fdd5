"""Recall as of a point in time: search the vault as it was at a commit or a date.

Every version of every memory along the branch's first-parent line of commits is kept
in a :class:`~gitmem.search.whoosh.VersionIndex` under ``.git/gitmem/versions/`` (a cache,
never tracked, rebuilt from git when history is rewritten), tagged with the number of
the commit that introduced it; this module records when each version ended (the commit
that changed, moved or removed it).  A search as of commit number ``n`` sees exactly the
versions alive in that commit's tree and ranks them as a fresh index of that tree would.

A commit off that line (one that came in from another clone through a merge) is answered
from a one-off index of its tree, kept for the next few questions.

The versions index catches up with new commits when asked (a few milliseconds per
commit); the first question in a vault indexes its whole history once.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, LockTimeout, RevisionNotFound

if TYPE_CHECKING:
    from ..memory.schema import Memory
    from ..store.git import GitStore
    from .whoosh import IndexDoc, SearchPage, VersionIndex

__all__ = ["AsOfSearch", "Point", "cutoff_epoch"]

_STATE = "versions.json"
_TREE_INDEXES = 3            # one-off indexes of commits off the first-parent line kept
_BATCH = 2000                # versions per index commit while catching up
_LOCK_TIMEOUT = 600.0        # another process may be indexing a long history
_SEE_LOG = "'git log --first-parent' lists the vault's commits and their dates."
_EXAMPLES = "Examples: 2026-03-01, 2026-03-01T09:30:00Z, HEAD~5, 3f2a9c1"


def cutoff_epoch(text: str) -> int:
    """The moment an ISO 8601 date or time names, in seconds since the epoch; a bare
    date (``2026-03-01``) means the end of that day (UTC).  InvalidInput otherwise."""
    from ..memory.schema import normalize_timestamp
    stamp = normalize_timestamp(text.strip(), "as-of date")
    cutoff = int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
    return cutoff + 86399 if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text.strip()) else cutoff


@dataclass(frozen=True)
class Point:
    """A commit the vault is seen at: its sha and its commit time (seconds)."""
    commit: str
    time: int


@dataclass
class _State:
    """The versions index's bookkeeping (JSON beside the index)."""
    chain: list[str]                 # first-parent line, oldest first (index = commit number)
    times: list[int]                 # commit times, same order
    alive: dict[str, int]            # path -> number of the commit that added its version
    until: dict[str, int]            # version key -> number of the commit that ended it
    blobs: dict[str, str] = field(default_factory=dict)     # path -> blob of its live version
    ids: dict[str, str] = field(default_factory=dict)       # path -> memory id
    follows: dict[str, str] = field(default_factory=dict)   # path -> id of the memory it follows

    @classmethod
    def empty(cls) -> _State:
        return cls([], [], {}, {})

    @classmethod
    def load(cls, data: Any) -> _State:
        if not isinstance(data, dict):
            return cls.empty()
        try:
            alive, until = ({str(k): int(v) for k, v in data[key].items()} for key in ("alive", "until"))
            blobs, ids, follows = ({str(k): str(v) for k, v in data[key].items()}
                                   for key in ("blobs", "ids", "follows"))
            state = cls(list(data["chain"]), [int(t) for t in data["times"]], alive, until, blobs, ids, follows)
        except (KeyError, TypeError, ValueError, AttributeError):
            return cls.empty()
        return state if len(state.chain) == len(state.times) else cls.empty()

    def to_json(self) -> dict[str, Any]:
        return {"chain": self.chain, "times": self.times, "alive": self.alive, "until": self.until,
                "blobs": self.blobs, "ids": self.ids, "follows": self.follows}


class AsOfSearch:
    """Searches of the vault as of a commit or a date (see the module docstring).

    ``parse(path, data)`` reads a memory file's bytes as a fresh vault would;
    ``doc(memory, blob_id, context)`` makes the document the search index stores for it,
    with ``context`` the text of what it answers or continues (its ``context`` field and
    the memory it ``follows``, as that memory was at the same commit); ``is_memory(path)``
    says which paths are memories.
    """

    def __init__(self, git: GitStore, directory: Path, is_memory: Callable[[str], bool],
                 parse: Callable[[str, bytes], Memory],
                 doc: Callable[[Memory, str, str], IndexDoc]) -> None:
        self.git = git
        self.dir = Path(directory)
        self.is_memory = is_memory
        self.parse = parse
        self.doc = doc
        self._index: VersionIndex | None = None
        self._state: _State | None = None
        self._state_stamp: tuple[int, int] | None = None

    # --- points in time ---------------------------------------------------------------

    def point(self, when: str) -> Point:
        """The commit ``when`` names: ``HEAD``, ``HEAD~N`` (N commits back on the
        first-parent line), a commit id (4-40 hex digits), or an ISO 8601 date or time
        (the newest commit made at or before it; a bare date means the end of that day).
        Read from git, walking back from HEAD as far as needed (the cache is not used)."""
        return self._resolve(when, self._walk())

    def _walk(self) -> Iterator[tuple[str, int]]:
        """The first-parent line, newest first: (sha, commit time)."""
        sha = self.git.head()
        while sha is not None:
            commit = self.git.commit(sha)
            yield sha.decode(), commit.commit_time
            sha = commit.parents[0] if commit.parents else None

    def _resolve(self, when: str, line: Iterable[tuple[str, int]]) -> Point:
        """:meth:`point`, with the first-parent line given newest first."""
        if not isinstance(when, str) or not when.strip():
            raise InvalidInput("as_of must be a commit id, HEAD~N or an ISO 8601 date", hint=_EXAMPLES)
        text = when.strip()
        back = re.fullmatch(r"(?i:head)(?:~(\d{1,9}))?", text)
        hexa = re.fullmatch(r"[0-9a-fA-F]{4,40}", text) and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text)
        if hexa:
            try:
                sha = self.git.resolve(text).decode()
            except RevisionNotFound as exc:
                raise RevisionNotFound(exc.message, hint=_SEE_LOG) from None
        elif not back:
            try:
                cutoff = cutoff_epoch(text)
            except InvalidInput:
                raise InvalidInput(f"as_of {when!r} is not a commit id, HEAD~N or an ISO 8601 date",
                                   hint=_EXAMPLES) from None
        steps = int(back.group(1) or 0) if back else 0
        seen, first = 0, None
        for seen, (sha_n, time_n) in enumerate(line, 1):
            first = time_n
            if (back and seen - 1 == steps) or (hexa and sha_n == sha) or \
                    (not back and not hexa and time_n <= cutoff):
                return Point(sha_n, time_n)
        if hexa:   # a commit off the branch's line (another clone's, merged in)
            return Point(sha, self.git.commit(sha.encode()).commit_time)
        if not seen:
            raise RevisionNotFound("the vault has no commits yet", hint=_SEE_LOG)
        if back:
            raise RevisionNotFound(f"{text}: the branch has only {seen} commits", hint=_SEE_LOG)
        oldest = datetime.fromtimestamp(first or 0, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        raise RevisionNotFound(f"the vault had no commits yet at {text} (its first is from {oldest})",
                               hint=_SEE_LOG)

    # --- searching --------------------------------------------------------------------

    def search(self, query: str, when: str, *, limit: int = 10, offset: int = 0,
               include_inactive: bool = False,
               filters: Mapping[str, str | Sequence[str]] | None = None,
               progress: Callable[[int, int], None] | None = None) -> SearchPage:
        """Search the vault as it was at ``when`` (see :meth:`point`); the page and each
        hit carry the commit they are from."""
        with self._locked():
            state = self._caught_up(progress)
            newest_first = ((state.chain[n], state.times[n]) for n in range(len(state.chain) - 1, -1, -1))
            at = self._resolve(when, newest_first)
            number = {c: n for n, c in enumerate(state.chain)}.get(at.commit)
            if number is not None:
                token = f"{len(state.chain)}:{state.chain[-1]}"
                page = self._versions().search_at(query, number, state.until, token, limit=limit,
                                                  offset=offset, include_inactive=include_inactive,
                                                  filters=filters)
            else:
                page = self._tree_index(at.commit).search(query, limit=limit, offset=offset,
                                                          include_inactive=include_inactive,
                                                          filters=filters)
        page.commit = at.commit
        for hit in page.hits:
            hit.commit = at.commit
        return page

    def memory_files(self, when: str) -> tuple[Point, Iterator[tuple[str, bytes]]]:
        """The commit ``when`` names and its memory files (path, bytes), path order."""
        at = self.point(when)
        files = self.git.list_tree(at.commit.encode())
        paths = sorted(p for p in files if self.is_memory(p))
        return at, ((p, self.git.blob(files[p])) for p in paths)

    def catch_up(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Index the versions of commits made since the last call; returns the number of
        commits on the first-parent line.  ``progress(done, total)`` counts versions."""
        with self._locked():
            return len(self._caught_up(progress).chain)

    def versions_indexed(self) -> int:
        """How many versions the cache holds (all lines of history it indexed so far)."""
        with self._locked():
            return self._versions().doc_count()

    def drop(self) -> None:
        """Delete the cache (after history was rewritten, e.g. by a purge)."""
        with self._locked():
            self.close()
            for child in self.dir.iterdir() if self.dir.exists() else ():
                if child.name != "lock":
                    shutil.rmtree(child) if child.is_dir() else child.unlink(missing_ok=True)
            self._state = None

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None

    # --- the cache --------------------------------------------------------------------

    def _locked(self) -> Any:
        from filelock import FileLock, Timeout

        self.dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.dir / "lock"), timeout=_LOCK_TIMEOUT, thread_local=False)

        class _Hold:
            def __enter__(self) -> None:
                try:
                    lock.acquire()
                except Timeout:
                    raise LockTimeout("another gitmem process has been indexing the vault's "
                                      "history for too long", hint="Retry when it is done.") from None

            def __exit__(self, *exc: object) -> None:
                lock.release()
        return _Hold()

    def _versions(self) -> VersionIndex:
        if self._index is None:
            from .whoosh import VersionIndex
            self._index = VersionIndex(self.dir / "index")
        return self._index

    def _load(self) -> _State:
        from .state import read_json
        path = self.dir / _STATE
        try:
            st = path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if self._state is None or stamp != self._state_stamp:
            self._state = _State.load(read_json(path)) if stamp else _State.empty()
            self._state_stamp = stamp
        return self._state

    def _save(self, state: _State) -> None:
        from .state import write_json_atomic
        write_json_atomic(self.dir / _STATE, state.to_json())
        self._state, self._state_stamp = state, None

    def _caught_up(self, progress: Callable[[int, int], None] | None = None) -> _State:
        """The state, after indexing the commits HEAD has and it has not (lock held)."""
        index = self._versions()
        state = self._load()
        if index.needs_rebuild or (not state.chain and index.doc_count()):
            index.clear()            # index or bookkeeping lost: both start again
            state = _State.empty()
        head = self.git.head()
        tip = head.decode() if head else None
        if (state.chain[-1] if state.chain else None) == tip:
            return state
        known = {c: i for i, c in enumerate(state.chain)}
        new: list[str] = []
        sha = tip
        while sha is not None and sha not in known:
            new.append(sha)
            parents = self.git.commit(sha.encode()).parents
            sha = parents[0].decode() if parents else None
        if state.chain and (sha is None or known[sha] != len(state.chain) - 1):
            # The line was rewritten (purge) or moved back: start again from scratch.
            index.clear()
            state = _State.empty()
            return self._extend(state, self._line(tip), progress)
        return self._extend(state, new[::-1], progress)

    def _line(self, tip: str | None) -> list[str]:
        line: list[str] = []
        while tip is not None:
            line.append(tip)
            parents = self.git.commit(tip.encode()).parents
            tip = parents[0].decode() if parents else None
        return line[::-1]

    def _extend(self, state: _State, commits: Sequence[str],
                progress: Callable[[int, int], None] | None) -> _State:
        """Record ``commits`` (oldest first, each the next on the line) and index the
        versions they add.  A memory that follows another gets a new version whenever
        the one it follows changes or goes (its indexed context changed)."""
        from .whoosh import version_key
        by_id = {mid: path for path, mid in state.ids.items()}
        followers: dict[str, set[str]] = {}
        for path, followed in state.follows.items():
            followers.setdefault(followed, set()).add(path)
        index, batch, done = self._versions(), [], 0

        def end(path: str, number: int) -> None:
            state.until[version_key(path, state.alive.pop(path))] = number
            state.blobs.pop(path)
            mid = state.ids.pop(path)
            if by_id.get(mid) == path:
                del by_id[mid]
            followed = state.follows.pop(path, None)
            if followed is not None:
                followers[followed].discard(path)

        def begin(path: str, blob: str, memory: Memory, number: int) -> None:
            state.alive[path], state.blobs[path], state.ids[path] = number, blob, memory.id
            by_id[memory.id] = path
            followed = memory.meta.get("follows")
            if isinstance(followed, str) and followed:
                state.follows[path] = followed
                followers.setdefault(followed, set()).add(path)

        for sha in commits:
            number = len(state.chain)
            parent = state.chain[-1].encode() if state.chain else None
            fresh: dict[str, Memory] = {}
            changed_ids: set[str] = set()
            for change in self.git.changes_between(parent, sha.encode()):
                old, new = change.old_path, change.new_path
                if old is not None and old in state.alive:
                    changed_ids.add(state.ids[old])
                    end(old, number)
                if new is not None and change.new_sha and self.is_memory(new):
                    memory = self.parse(new, self.git.blob(change.new_sha))
                    begin(new, change.new_sha.decode(), memory, number)
                    fresh[new] = memory
                    changed_ids.add(memory.id)
            for mid in changed_ids:
                for path in sorted(followers.get(mid, ())):
                    if path not in fresh:   # same file, new context: a new version
                        memory = self.parse(path, self.git.blob(state.blobs[path].encode()))
                        blob = state.blobs[path]
                        end(path, number)
                        begin(path, blob, memory, number)
                        fresh[path] = memory
            for path, memory in fresh.items():
                batch.append((self.doc(memory, state.blobs[path], self._context(state, memory, by_id)),
                              number))
            if len(batch) >= _BATCH:
                index.add_versions(batch)
                done += len(batch)
                batch = []
                if progress is not None:
                    progress(done, done)
            state.chain.append(sha)
            state.times.append(self.git.commit(sha.encode()).commit_time)
        index.add_versions(batch)
        if progress is not None:
            progress(done + len(batch), done + len(batch))
        self._save(state)
        return state

    def _context(self, state: _State, memory: Memory, by_id: Mapping[str, str]) -> str:
        """What a memory is indexed with as its context at the state's commit: its own
        ``context`` field, then the title and text of the memory it follows, if alive."""
        from .documents import context_text
        own = memory.meta.get("context")
        own = str(own) if own not in (None, "") else None
        followed = memory.meta.get("follows")
        path = by_id.get(followed) if isinstance(followed, str) and followed else None
        if path is None:
            return own or ""
        before = self.parse(path, self.git.blob(state.blobs[path].encode()))
        return context_text(own, before.title, before.body)

    def _tree_index(self, commit: str) -> Any:
        """A fresh index of one commit's tree (for a commit off the first-parent line),
        built once and kept among the last few asked for."""
        from .whoosh import SearchIndex
        trees = self.dir / "trees"
        folder = trees / commit
        fresh = not folder.exists()
        index = SearchIndex(folder)
        if fresh or index.needs_rebuild:
            files = self.git.list_tree(commit.encode())
            tree = _State.empty()
            memories = {p: self.parse(p, self.git.blob(files[p]))
                        for p in sorted(files) if self.is_memory(p)}
            for p in memories:
                tree.blobs[p] = files[p].decode()
            by_id = {m.id: p for p, m in memories.items()}
            index.rebuild((self.doc(m, tree.blobs[p], self._context(tree, m, by_id))
                           for p, m in memories.items()), total=len(memories))
        folder.touch()
        kept = sorted(trees.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[_TREE_INDEXES:]:
            shutil.rmtree(old, ignore_errors=True)
        return _Closing(index)


class _Closing:
    """A one-off index that closes itself after one search."""

    def __init__(self, index: Any) -> None:
        self.index = index

    def search(self, query: str, **kw: Any) -> SearchPage:
        try:
            return self.index.search(query, **kw)
        finally:
            self.index.close()
