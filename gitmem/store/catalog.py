"""gitmem's private catalog: a SQLite cache in ``.git/gitmem/catalog.sqlite``.

Caches, all rebuildable from the files and from git (delete the file and
nothing is lost):

* ``files``: one row per memory file in the working tree (path, id, stat,
  frontmatter as JSON).  It answers "which file has id X", "list the
  long_term goals" and "is this file name taken" without parsing thousands of
  files.  :meth:`Catalog.scan` re-reads only files whose size or mtime changed.
* ``dirs``: each folder of the tier folders with its mtime and its number of
  memory files as the last scan saw them: a folder unchanged since is not
  listed again, its catalogued files are stat-ed by name.
* ``unindexed``: the paths whose ``files`` row changed (triggers, whoever
  changes it) since the search index took them: what the index may lack.
* ``touches``: memory id -> commits that created, changed, moved or removed
  it, recorded at write time (and by catching up on commits made outside
  gitmem), so the history of one memory is an indexed lookup instead of a
  walk over all of git's history (12.5 s at 10k files with dulwich).

Several processes share the file (SQLite in WAL mode: readers never wait for a
writer).  Every transaction that writes starts with ``BEGIN IMMEDIATE``, so it
waits (up to the busy timeout, the vault's lock timeout) for the one SQLite
writer at a time instead of failing: a transaction that began by reading and
then wrote would get ``database is locked`` at once whenever another process
had written meanwhile, a wait SQLite's busy timeout does not cover.  Errors of
SQLite come out as gitmem's: still locked after the timeout is
:class:`~gitmem.errors.LockTimeout` (``vault_busy``), a full disk, an I/O error
or a damaged file :class:`~gitmem.errors.StorageError` (``storage_error``).
"""

from __future__ import annotations

import builtins
import itertools
import json
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from ..errors import GitmemError, from_system_error
from ..memory.markdown import inline_tags, link_key, memory_links
from ..memory.schema import path_id, safe_text, safe_value
from ..memory.similarity import content_key, fingerprints

__all__ = ["Catalog", "FileRow", "Touch"]

# Files modified this recently are never trusted by their stat alone (see scan).
RACY_NS = 2_000_000_000

# 6: metadata is sanitised when read (schema.sanitize_metadata); rows cached by an older
# gitmem may hold values (a dict among tags ...) that readers no longer expect.
# 7: Obsidian: tags (frontmatter and inline #tags) and aliases tables, link targets stored as
# link_key() (a path link "Projects/X.md" as "projects/x"), ids inherited across renames.
SCHEMA_VERSION = "7"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, id TEXT NOT NULL, stem_key TEXT NOT NULL, title_key TEXT NOT NULL,
    mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, meta TEXT NOT NULL, problem TEXT,
    hash TEXT NOT NULL,
    tier TEXT NOT NULL, type TEXT NOT NULL, status TEXT NOT NULL, importance INTEGER NOT NULL,
    updated TEXT NOT NULL, title TEXT NOT NULL, gist TEXT NOT NULL, content_key TEXT NOT NULL,
    ext_id TEXT
);
CREATE INDEX IF NOT EXISTS files_id ON files(id);
CREATE INDEX IF NOT EXISTS files_order ON files(tier, status, importance DESC, updated DESC, path);
CREATE INDEX IF NOT EXISTS files_content ON files(content_key);
CREATE INDEX IF NOT EXISTS files_kind ON files(tier, status, type);
CREATE INDEX IF NOT EXISTS files_typed ON files(type, status, importance DESC, title COLLATE NOCASE, path);
CREATE INDEX IF NOT EXISTS files_ext ON files(ext_id) WHERE ext_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS sketch (path TEXT NOT NULL, h INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS sketch_h ON sketch(h);
CREATE INDEX IF NOT EXISTS sketch_path ON sketch(path);
CREATE TABLE IF NOT EXISTS bands (path TEXT NOT NULL, key INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS bands_key ON bands(key);
CREATE INDEX IF NOT EXISTS bands_path ON bands(path);
CREATE TABLE IF NOT EXISTS sketch_df (h INTEGER PRIMARY KEY, n INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS sketch_added AFTER INSERT ON sketch BEGIN
    INSERT INTO sketch_df VALUES (NEW.h, 1) ON CONFLICT(h) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS sketch_removed AFTER DELETE ON sketch BEGIN
    UPDATE sketch_df SET n = n - 1 WHERE h = OLD.h;
END;
CREATE TABLE IF NOT EXISTS links (path TEXT NOT NULL, target TEXT NOT NULL, relation TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS links_target ON links(target);
CREATE INDEX IF NOT EXISTS links_path ON links(path);
CREATE TABLE IF NOT EXISTS retrievals (
    id TEXT PRIMARY KEY, count INTEGER NOT NULL, last INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS files_stem ON files(stem_key);
CREATE INDEX IF NOT EXISTS files_title ON files(title_key);
CREATE TABLE IF NOT EXISTS touches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, commit_sha TEXT NOT NULL,
    path TEXT, op TEXT NOT NULL, time INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS touches_id ON touches(id);
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tags (path TEXT NOT NULL, tag TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS tags_tag ON tags(tag);
CREATE INDEX IF NOT EXISTS tags_path ON tags(path);
CREATE TABLE IF NOT EXISTS aliases (path TEXT NOT NULL, key TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS aliases_key ON aliases(key);
CREATE INDEX IF NOT EXISTS aliases_path ON aliases(path);
CREATE TABLE IF NOT EXISTS path_ids (path TEXT PRIMARY KEY, id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS files_stat ON files(path, mtime_ns, size);
CREATE TABLE IF NOT EXISTS dirs (path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL, files INTEGER NOT NULL)
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS unindexed (path TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS files_added AFTER INSERT ON files BEGIN
    INSERT OR IGNORE INTO unindexed VALUES (NEW.path);
END;
CREATE TRIGGER IF NOT EXISTS files_updated AFTER UPDATE ON files BEGIN
    INSERT OR IGNORE INTO unindexed VALUES (OLD.path);
    INSERT OR IGNORE INTO unindexed VALUES (NEW.path);
END;
CREATE TRIGGER IF NOT EXISTS files_removed AFTER DELETE ON files BEGIN
    INSERT OR IGNORE INTO unindexed VALUES (OLD.path);
END;
"""
_ID_LINE = re.compile(rb"^id:[ \t]*['\"]?([^'\"\r\n#]+?)['\"]?[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class FileRow:
    """A catalogued memory file (``hash`` is the git blob id of its bytes)."""

    path: str
    id: str
    meta: dict[str, Any]
    problem: str | None
    hash: str = ""


@dataclass(frozen=True)
class Touch:
    """One commit that touched one memory."""

    commit: str
    path: str | None
    op: str
    time: int


_GIST_CHARS = 120


def gist(meta: dict[str, Any], body: str) -> str:
    """One line saying what a memory holds: its ``summary``, else its first prose line."""
    text = str(meta.get("summary") or "")
    if not text:
        for line in body.splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "---", "```", "<!--")):
                text = line.lstrip("-*> ").strip()
                break
    text = " ".join(text.split())
    return text if len(text) <= _GIST_CHARS else text[: _GIST_CHARS - 1].rstrip() + "\u2026"


def stem_key(path: str) -> str:
    """Case-insensitive file stem, used to keep file names unique in the vault."""
    return path.rsplit("/", 1)[-1].rsplit(".", 1)[0].casefold()


def id_from_blob(data: bytes) -> str | None:
    """The ``id:`` of a memory file's frontmatter, without a full YAML parse."""
    if not data.startswith(b"---"):
        return None
    end = data.find(b"\n---", 3)
    head = data[: end if end != -1 else 4096]
    match = _ID_LINE.search(head)
    return match.group(1).decode("utf-8", "replace").strip() if match else None


def tag_key(tag: str) -> str:
    """How tags are compared (Obsidian's are case-insensitive; "#x" names the tag "x")."""
    return tag.strip().lstrip("#").casefold()


def all_tags(meta: dict[str, Any], body: str) -> list[str]:
    """A memory's tags as Obsidian counts them: the frontmatter ``tags`` and the inline
    ``#tags`` of the body (which are never written into the frontmatter)."""
    listed = meta.get("tags")
    tags = [str(t) for t in listed if isinstance(t, (str, int, float))] if isinstance(listed, list) else []
    return list(dict.fromkeys([*tags, *inline_tags(body)]))


def _text(value: Any) -> str:
    """A catalog text column: any value as text SQLite can store."""
    return safe_text(value if isinstance(value, str) else str(value))


def _meta_json(meta: dict[str, Any]) -> str:
    """The frontmatter as strict JSON (SQLite's json_extract refuses NaN) without lone
    surrogates; a value that cannot be written so is stored as safe_value makes it."""
    try:
        text = json.dumps(meta, ensure_ascii=False, default=str, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        text = None
    if text is None or not text.isascii() and safe_text(text) != text:
        text = json.dumps(safe_value(meta), ensure_ascii=False, default=str, allow_nan=False)
    return text


# Files recorded per batch of statements by Catalog.put_many.
_PUT_CHUNK = 2_000


class FileStat(NamedTuple):
    """What the catalog keeps of a file's ``os.stat_result`` (same attribute names): a
    scan of 100,000 files holds one per file, a sixth of a full stat result's memory."""

    st_mtime_ns: int
    st_size: int


# SQLite result codes of a file that is not a sound database (SQLITE_CORRUPT, SQLITE_NOTADB).
_DAMAGED = frozenset({11, 26})
# How long recording retrievals (a read's side effect) waits for another process's write.
RETRIEVALS_WAIT = 0.25


class _Connection(sqlite3.Connection):
    """A connection whose errors are gitmem's (see the module docstring): every
    statement of the catalog runs through :meth:`execute`, :meth:`executemany` or
    :meth:`executescript`.  (Rows read by iterating a cursor after its first one
    are not covered: reading in WAL mode neither waits nor fails for a writer.)"""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.Error as exc:
            _reraise(exc)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        try:
            return super().executemany(sql, parameters)
        except sqlite3.Error as exc:
            _reraise(exc)

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        try:
            return super().executescript(sql_script)
        except sqlite3.Error as exc:
            _reraise(exc)


def _reraise(exc: sqlite3.Error) -> NoReturn:
    """Raise what an SQLite error of the catalog stands for: ``vault_busy`` or
    ``storage_error``, or the error itself (a programming error: bad SQL ...)."""
    mapped = from_system_error(exc, "the catalog (.git/gitmem/catalog.sqlite)")
    if mapped is None:
        raise exc
    raise mapped from exc


def _damaged(exc: GitmemError) -> bool:
    """True if ``exc`` stands for SQLite saying the file is not a sound database."""
    return getattr(exc.__cause__, "sqlite_errorcode", -1) & 0xFF in _DAMAGED


class Catalog:
    """Connection to the catalog database (one per Vault object).

    ``busy_timeout``: seconds a write waits for another process's catalog write
    (the vault's lock timeout); past it the write fails with ``vault_busy``."""

    def __init__(self, path: Path, busy_timeout: float = 30.0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.busy_timeout = busy_timeout
        self._counting = False   # change_stamp's count of changed rows is set up
        try:
            self.db = self._connect()
        except GitmemError as exc:
            if not _damaged(exc):   # busy, a full disk ...: the file itself is sound
                raise
            # A cache: a damaged file (disk error, half-copied vault) is dropped and
            # rebuilt from the files and from git, like a missing one.
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            self.db = self._connect()

    def _connect(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(str(self.path), timeout=self.busy_timeout, isolation_level=None,
                                 check_same_thread=False, factory=_Connection)
        except sqlite3.Error as exc:
            _reraise(exc)
        try:
            self._set_up(db)
        except BaseException:
            db.close()
            raise
        return db

    @staticmethod
    def _set_up(db: sqlite3.Connection) -> None:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # a cache: durability comes from git
        # The version is checked before the schema script runs: a catalog written by an
        # older gitmem lacks columns the script indexes, and it is only a cache anyway.
        db.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        version = db.execute("SELECT value FROM kv WHERE key='schema'").fetchone()
        if version is not None and version[0] != SCHEMA_VERSION:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                               "AND name NOT LIKE 'sqlite_%'")]
            db.executescript("".join(f'DROP TABLE IF EXISTS "{t}";' for t in tables))
            version = None
        db.executescript(_SCHEMA)
        if version is None:
            db.execute("INSERT OR REPLACE INTO kv VALUES ('schema', ?)", (SCHEMA_VERSION,))

    def close(self) -> None:
        self.db.close()

    # --------------------------------------------------------------- kv
    def get(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set(self, key: str, value: str | None) -> None:
        if value is None:
            self.db.execute("DELETE FROM kv WHERE key=?", (key,))
        else:
            self.db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))

    # ------------------------------------------------------------ files
    def put(self, path: str, memory_id: str, st: os.stat_result | FileStat | None, meta: dict[str, Any],
            problem: str | None, body: str, blob_hash: str) -> None:
        """Record (or replace) one file's row, its listing columns and its sketch.

        ``st`` None records a file not written yet (mtime 0: never taken as fresh)."""
        self.put_many([(path, memory_id, st, meta, problem, body, blob_hash)])

    def put_many(self, rows: Iterable[tuple[str, str, os.stat_result | FileStat | None, dict[str, Any], str | None,
                                            str, str]],
                 *, listing_only: bool = False) -> None:
        """:meth:`put` for many files (``(path, memory_id, st, meta, problem, body,
        blob_hash)`` each), a few statements for all of them.  ``listing_only`` records
        only what listings and ``MEMORY.md`` read (no sketch, bands, links, tags,
        aliases): for a what-if preview."""
        rows = iter(rows)
        while chunk := list(itertools.islice(rows, _PUT_CHUNK)):  # (bounds the memory an import takes)
            self._put_chunk(chunk, listing_only)

    def _put_chunk(self, rows: list[tuple[str, str, os.stat_result | FileStat | None, dict[str, Any], str | None,
                                          str, str]],
                   listing_only: bool) -> None:
        files, paths, sketches, banded, links, tags, aliases = [], [], [], [], [], [], []
        for path, memory_id, st, meta, problem, body, blob_hash in rows:
            # Readers sanitise metadata (schema.derive); this is the last line of defence, as
            # SQLite can store neither a lone surrogate nor an integer over 64 bits.
            title = safe_text(str(meta.get("title", "")))
            importance = meta.get("importance", 3)
            if isinstance(importance, bool) or not isinstance(importance, int) or not 1 <= importance <= 5:
                importance = 3
            ext = meta.get("external_write_id")
            files.append(
                (path, safe_text(memory_id), stem_key(path), title.casefold(), st.st_mtime_ns if st else 0,
                 st.st_size if st else -1, _meta_json(meta), safe_text(problem) if problem else problem,
                 blob_hash, _text(meta.get("tier", "")), _text(meta.get("type", "memory")),
                 _text(meta.get("status", "active")), importance,
                 _text(meta.get("updated") or meta.get("created") or ""), title, safe_text(gist(meta, body)),
                 content_key(body or title, meta.get("type"), meta.get("scope")),
                 _text(ext) if ext not in (None, "") else None))
            if listing_only:
                continue
            paths.append((path,))
            top, keys = fingerprints(title, body)
            sketches += [(path, h) for h in top]
            banded += [(path, k) for k in keys]
            links += [(path, link_key(safe_text(t)), safe_text(r)) for t, r in memory_links(meta, body)]
            tags += [(path, k) for k in dict.fromkeys(tag_key(safe_text(t)) for t in all_tags(meta, body)) if k]
            named = meta.get("aliases")
            aliases += [(path, k) for k in dict.fromkeys(safe_text(str(a)).strip().casefold()
                                                         for a in (named if isinstance(named, list) else [])) if k]
        self.db.executemany(
            "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", files)
        if listing_only:
            return
        for table, values, marks in (("sketch", sketches, "?, ?"), ("bands", banded, "?, ?"),
                                     ("links", links, "?, ?, ?"), ("tags", tags, "?, ?"),
                                     ("aliases", aliases, "?, ?")):
            self.db.executemany(f"DELETE FROM {table} WHERE path=?", paths)  # noqa: S608 - fixed names
            self.db.executemany(f"INSERT INTO {table} VALUES ({marks})", values)  # noqa: S608

    def drop(self, paths: Iterable[str]) -> None:
        rows = [(p,) for p in paths]
        self.db.executemany("DELETE FROM files WHERE path=?", rows)
        self.db.executemany("DELETE FROM sketch WHERE path=?", rows)
        self.db.executemany("DELETE FROM links WHERE path=?", rows)
        self.db.executemany("DELETE FROM bands WHERE path=?", rows)
        self.db.executemany("DELETE FROM tags WHERE path=?", rows)
        self.db.executemany("DELETE FROM aliases WHERE path=?", rows)

    def row(self, path: str) -> FileRow | None:
        found = self.db.execute("SELECT path, id, meta, problem, hash FROM files WHERE path=?",
                                (path,)).fetchone()
        return _row(found) if found else None

    def by_id(self, memory_id: str) -> list[FileRow]:
        rows = self.db.execute("SELECT path, id, meta, problem, hash FROM files WHERE id=?", (memory_id,))
        return [_row(r) for r in rows]

    def by_id_prefix(self, prefix: str) -> list[FileRow]:
        rows = self.db.execute(
            "SELECT path, id, meta, problem, hash FROM files WHERE id >= ? AND id < ? LIMIT 10",
            (prefix, prefix + "\U0010ffff"))
        return [_row(r) for r in rows]

    def by_stem(self, stem: str) -> list[FileRow]:
        rows = self.db.execute("SELECT path, id, meta, problem, hash FROM files WHERE stem_key=?",
                               (stem.casefold(),))
        return [_row(r) for r in rows]

    def by_title(self, title: str) -> list[FileRow]:
        rows = self.db.execute("SELECT path, id, meta, problem, hash FROM files WHERE title_key=?",
                               (title.strip().casefold(),))
        return [_row(r) for r in rows]

    def by_alias(self, alias: str) -> list[FileRow]:
        """Memories with this Obsidian alias (case-insensitive)."""
        rows = self.db.execute(
            "SELECT path, id, meta, problem, hash FROM files WHERE path IN "
            "(SELECT path FROM aliases WHERE key=?) ORDER BY path", (alias.strip().casefold(),))
        return [_row(r) for r in rows]

    def by_link_path(self, target: str, folders: Iterable[str]) -> list[FileRow]:
        """Memories a path link names, as Obsidian resolves it: case-insensitive, ``.md``
        optional, relative to the vault root or to one of ``folders`` (the tiers)."""
        key = link_key(target)
        if not key or "/" not in key:
            return []
        stem = key.rsplit("/", 1)[-1]
        wanted = {key, *(f"{f.casefold()}/{key}" for f in folders)}
        return [r for r in self.by_stem(stem) if link_key(r.path) in wanted]

    def paths_with_tags(self, tags: Iterable[str]) -> builtins.set[str]:   # (Catalog.set is a method)
        """Paths of the memories carrying every one of ``tags`` (frontmatter or inline)."""
        keys = list(dict.fromkeys(tag_key(t) for t in tags))
        if not keys or not all(keys):
            return set()
        marks = ",".join("?" * len(keys))
        rows = self.db.execute(f"SELECT path FROM tags WHERE tag IN ({marks}) GROUP BY path "
                               "HAVING COUNT(DISTINCT tag) = ?", (*keys, len(keys)))
        return {r[0] for r in rows}

    # ------------------------------------------------- ids across renames
    def inherited_id(self, path: str) -> str | None:
        """The id a file without one in its frontmatter keeps from its former name (a
        rename seen by ``commit_outside_edits`` or in history), or None."""
        row = self.db.execute("SELECT id FROM path_ids WHERE path=?", (path,)).fetchone()
        return row[0] if row else None

    def set_inherited_id(self, path: str, memory_id: str | None) -> None:
        """Record (None: forget) that the file at ``path``, when it has no ``id:``, is the
        memory ``memory_id``; its catalog row follows.  Joins the caller's transaction."""
        old = self.inherited_id(path)
        if memory_id is None:
            self.db.execute("DELETE FROM path_ids WHERE path=?", (path,))
        else:
            self.db.execute("INSERT OR REPLACE INTO path_ids VALUES (?, ?)", (path, memory_id))
        derived = {path_id(path), *([old] if old else [])}
        marks = ",".join("?" * len(derived))
        self.db.execute(f"UPDATE files SET id=? WHERE path=? AND id IN ({marks})",
                        (memory_id or path_id(path), path, *derived))

    def stat_of(self, path: str) -> tuple[int, int] | None:
        found = self.db.execute("SELECT mtime_ns, size FROM files WHERE path=?", (path,)).fetchone()
        return (found[0], found[1]) if found else None

    def stem_taken(self, stem: str) -> bool:
        return self.db.execute("SELECT 1 FROM files WHERE stem_key=? LIMIT 1",
                               (stem.casefold(),)).fetchone() is not None

    def all_rows(self) -> Iterator[FileRow]:
        for r in self.db.execute("SELECT path, id, meta, problem, hash FROM files ORDER BY path"):
            yield _row(r)

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM files").fetchone()[0])

    def hashes(self) -> dict[str, str]:
        """Every catalogued path -> blob id of its content."""
        return dict(self.each_hash())

    def each_hash(self) -> Iterator[tuple[str, str]]:
        """(path, blob id of its content) of every catalogued file, one row at a time (a
        large vault's rows are compared without holding them all)."""
        return iter(self.db.execute("SELECT path, hash FROM files"))

    def change_stamp(self) -> tuple[int, int]:
        """Changes as soon as the memory files' rows may have changed (another process
        committed to the catalog, or this connection wrote a row of ``files``, undone
        changes aside): a cache of those rows is current while it is equal.  The first call
        sets up the count (a trigger of this connection only); call it outside transactions."""
        if not self._counting:
            self.db.execute("CREATE TEMP TABLE IF NOT EXISTS files_changes (n INTEGER NOT NULL)")
            self.db.execute("INSERT INTO files_changes SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM files_changes)")
            for event in ("INSERT", "UPDATE", "DELETE"):
                self.db.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS files_{event.lower()}_counted AFTER {event} "
                                "ON main.files BEGIN UPDATE files_changes SET n = n + 1; END")
            self._counting = True
        version = self.db.execute("PRAGMA data_version").fetchone()[0]
        return int(version), int(self.db.execute("SELECT n FROM files_changes").fetchone()[0])

    def hashes_of(self, paths: Iterable[str]) -> dict[str, str]:
        """Those of ``paths`` that are catalogued -> blob id of their content."""
        out: dict[str, str] = {}
        for path in paths:
            found = self.db.execute("SELECT hash FROM files WHERE path=?", (path,)).fetchone()
            if found is not None:
                out[path] = found[0]
        return out

    def stats(self) -> dict[str, tuple[int, int]]:
        """Every catalogued path -> (mtime_ns, size) it had when read (from one small index)."""
        return {p: (m, s) for p, m, s in
                self.db.execute("SELECT path, mtime_ns, size FROM files INDEXED BY files_stat")}

    def dirs(self) -> dict[str, tuple[int, int]]:
        """Each folder of the tier folders as the last scan saw it -> (its mtime_ns, how
        many memory files it held); a folder changed too recently to trust has mtime -1."""
        return {p: (m, n) for p, m, n in self.db.execute("SELECT path, mtime_ns, files FROM dirs")}

    def set_dirs(self, dirs: dict[str, tuple[int, int]]) -> None:
        """Replace the folders a scan saw (see :meth:`dirs`)."""
        with self.transaction():
            self.db.execute("DELETE FROM dirs")
            self.db.executemany("INSERT INTO dirs VALUES (?, ?, ?)",
                                [(p, m, n) for p, (m, n) in dirs.items()])

    # ------------------------------------------------ the search index's to-do list
    # Every change to a ``files`` row (insert, update, delete: whoever makes it) lists its
    # path in ``unindexed`` (triggers in the schema, same transaction); the search index
    # takes them off once it holds that content.  So what the search index may lack is a
    # short indexed lookup, not a comparison of every file's hash with the search index's.

    def unindexed(self, limit: int) -> list[str] | None:
        """Paths whose row changed since the search index last took them (None: more
        than ``limit``)."""
        rows = [r[0] for r in self.db.execute("SELECT path FROM unindexed LIMIT ?", (limit + 1,))]
        return None if len(rows) > limit else rows

    def mark_indexed(self, indexed: Iterable[tuple[str, str | None]]) -> None:
        """The search index now holds these paths with these blob ids (None: not at all):
        each leaves the to-do list, unless its row has changed since."""
        rows = [(p, p, h) for p, h in indexed]
        if not rows:
            return
        sql = "DELETE FROM unindexed WHERE path=? AND (SELECT hash FROM files WHERE path=?) IS ?"
        if self.db.in_transaction:
            self.db.executemany(sql, rows)
        else:
            with self.transaction():
                self.db.executemany(sql, rows)

    def scan(self, files: dict[str, os.stat_result] | dict[str, FileStat],
             load: Callable[[str], tuple[str, dict[str, Any], str | None, str, str] | None],
             only: Iterable[str] | None = None,
             known: dict[str, tuple[int, int]] | None = None) -> tuple[list[str], list[str]]:
        """Bring ``files`` rows in line with the working tree.

        ``files`` maps each memory path on disk to its stat; ``load(path)``
        parses one file and returns (id, meta, problem, body, blob id) or None if
        it vanished.  ``only`` limits the comparison to those paths (``files``
        then holds just the ones of them that exist).
        ``known`` is :meth:`stats` when the caller has already read it.
        Returns (changed paths, removed paths).
        """
        if only is None:
            if known is None:
                known = self.stats()
        else:
            known = {}
            for p in only:
                found = self.stat_of(p)
                if found is not None:
                    known[p] = found
        # A file modified in the last seconds is read again even when its size and
        # mtime look unchanged: two saves within one clock tick (a few ms) leave the
        # same mtime, and the second would be missed ("racily clean", as git calls it).
        recent = time.time_ns() - RACY_NS
        changed = [p for p, st in files.items()
                   if known.get(p) != (st.st_mtime_ns, st.st_size) or st.st_mtime_ns >= recent]
        removed = [p for p in known if p not in files]
        if not changed and not removed:
            return [], []
        # IMMEDIATE: ``load`` reads the catalog (inherited ids) before the rows are written.
        with self.transaction():
            self.drop(removed)
            for path in changed:
                loaded = load(path)
                if loaded is None:
                    self.drop([path])
                    continue
                memory_id, meta, problem, body, blob_hash = loaded
                self.put(path, memory_id, files[path], meta, problem, body, blob_hash)
        return changed, removed

    # -------------------------------------------------- lifecycle queries
    def tier_counts(self) -> dict[tuple[str, str], int]:
        """(tier, status) -> number of memory files."""
        rows = self.db.execute("SELECT tier, status, COUNT(*) FROM files GROUP BY tier, status")
        return {(t, s): n for t, s, n in rows}

    def listing(self, tier: str, limit: int, *, exclude_types: Iterable[str] = (),
                status: str = "active") -> list[tuple[FileRow, str]]:
        """The top ``limit`` memories of a tier by importance, then recency: (row, gist)."""
        kinds = list(exclude_types)
        # No exclusions: no NOT IN clause ("type NOT IN (NULL)" is NULL, which matched nothing).
        exclude = f"AND type NOT IN ({','.join('?' * len(kinds))}) " if kinds else ""
        rows = self.db.execute(
            "SELECT path, id, meta, problem, hash, gist FROM files WHERE tier=? AND status=? "
            f"{exclude}ORDER BY importance DESC, updated DESC, path LIMIT ?",
            (tier, status, *kinds, limit))
        return [(_row(r[:5]), r[5]) for r in rows]

    def count_of_types(self, types: Iterable[str], tiers: Iterable[str], *,
                       status: str = "active") -> dict[str, int]:
        """tier -> number of memories of these types with this status."""
        kinds, places = list(types), list(tiers)
        rows = self.db.execute(
            f"SELECT tier, COUNT(*) FROM files WHERE type IN ({','.join('?' * len(kinds)) or 'NULL'}) "
            f"AND tier IN ({','.join('?' * len(places)) or 'NULL'}) AND status=? GROUP BY tier",
            (*kinds, *places, status))
        return dict(rows)

    def of_types(self, types: Iterable[str], tiers: Iterable[str], *, limit: int = -1,
                 status: str = "active") -> list[tuple[FileRow, str]]:
        """Memories of these types in these tiers with this status, rules and constraints
        before goals, each by importance then title: (row, gist)."""
        kinds, places = list(dict.fromkeys(types)), list(tiers)
        if not kinds:
            return []
        # One index-ordered, limited scan per type (files_typed), merged and cut in a
        # small sort: a single query over all types sorted every protected memory
        # (3 ms at 2,500 of 10k), and MEMORY.md runs this in every write.
        order = "importance DESC, title COLLATE NOCASE, path"
        marks = ",".join("?" * len(places)) or "NULL"
        part = ("SELECT * FROM (SELECT path, id, meta, problem, hash, gist, type, importance, title "
                f"FROM files WHERE type=? AND status=? AND tier IN ({marks}) ORDER BY {order} LIMIT ?)")
        params: list[Any] = []
        for kind in kinds:
            params += [kind, status, *places, limit]
        rows = self.db.execute(
            "SELECT * FROM (" + " UNION ALL ".join([part] * len(kinds)) + ")"
            f" ORDER BY CASE type WHEN 'goal' THEN 1 ELSE 0 END, {order} LIMIT ?", (*params, limit))
        return [(_row(r[:5]), r[5]) for r in rows]

    def in_tier(self, tier: str) -> list[FileRow]:
        """Every memory file in one tier folder, oldest first."""
        rows = self.db.execute("SELECT path, id, meta, problem, hash FROM files WHERE tier=? "
                               "ORDER BY updated, path", (tier,))
        return [_row(r) for r in rows]

    def by_content_key(self, key: str) -> list[FileRow]:
        rows = self.db.execute("SELECT path, id, meta, problem, hash FROM files WHERE content_key=? "
                               "AND status='active' ORDER BY path", (key,))
        return [_row(r) for r in rows]

    def by_external_id(self, ext: str) -> list[FileRow]:
        rows = self.db.execute("SELECT path, id, meta, problem, hash FROM files WHERE ext_id=?", (ext,))
        return [_row(r) for r in rows]

    # A sketch hash shared by more memories than this says little about any pair
    # (a common word): it is left out of candidate lookups so their cost stays flat.
    COMMON_HASH = 200

    def similar_candidates(self, hashes: Iterable[int], limit: int = 10, *, min_shared: int = 2,
                           type: str | None = None, scope: str | None = None,
                           exclude_tier: str | None = None) -> list[tuple[str, int]]:
        """Active memories (of ``type`` and ``scope`` when given) whose sketch shares
        the most hashes with ``hashes``: (path, shared), best first."""
        hs = self._selective(hashes)
        if not hs:
            return []
        marks = ",".join("?" * len(hs))
        where, args = ["f.status = 'active'"], []
        if type is not None:
            where.append("f.type = ?")
            args.append(type)
        if scope is not None:
            where.append("json_extract(f.meta, '$.scope') = ?")
            args.append(scope)
        else:
            where.append("json_extract(f.meta, '$.scope') IS NULL")
        if exclude_tier is not None:
            where.append("f.tier != ?")
            args.append(exclude_tier)
        rows = self.db.execute(
            f"SELECT s.path, COUNT(*) AS c FROM sketch s JOIN files f ON f.path = s.path "
            f"WHERE s.h IN ({marks}) AND {' AND '.join(where)} GROUP BY s.path "
            "HAVING c >= ? ORDER BY c DESC, s.path LIMIT ?",
            (*hs, *args, min(min_shared, len(hs)), limit))
        return [(p, c) for p, c in rows]

    def _selective(self, hashes: Iterable[int], keep: int = 4) -> list[int]:
        """The hashes worth looking up: those of at most :attr:`COMMON_HASH` memories,
        or else the ``keep`` rarest (so a text of only common words still finds its twin)."""
        hs = list(dict.fromkeys(hashes))
        if not hs:
            return []
        df = dict(self.db.execute(
            f"SELECT h, n FROM sketch_df WHERE h IN ({','.join('?' * len(hs))})", hs))
        ranked = sorted(hs, key=lambda h: df.get(h, 0))
        rare = [h for h in ranked if df.get(h, 0) <= self.COMMON_HASH]
        return rare if len(rare) >= keep else ranked[:keep]

    def similar_pairs(self) -> list[tuple[str, str]]:
        """Pairs of active memories that share a MinHash band (near-duplicate candidates)."""
        rows = self.db.execute(
            "SELECT DISTINCT a.path, b.path FROM bands a JOIN bands b ON a.key = b.key AND a.path < b.path "
            "JOIN files fa ON fa.path = a.path JOIN files fb ON fb.path = b.path "
            "WHERE fa.status = 'active' AND fb.status = 'active' AND fa.type = fb.type")
        return [(x, y) for x, y in rows]

    def linking_to(self, targets: Iterable[str]) -> list[tuple[FileRow, str, str]]:
        """Memories with a link to any of ``targets`` (ids, note names; any case):
        (row, target as matched, relation)."""
        keys = list(dict.fromkeys(link_key(t) for t in targets if t))
        if not keys:
            return []
        marks = ",".join("?" * len(keys))
        rows = self.db.execute(
            "SELECT f.path, f.id, f.meta, f.problem, f.hash, l.target, l.relation FROM links l "
            f"JOIN files f ON f.path = l.path WHERE l.target IN ({marks}) ORDER BY f.path", keys)
        return [(_row(r[:5]), r[5], r[6]) for r in rows]

    # ------------------------------------------------------- retrievals
    def add_retrievals(self, ids: Iterable[str], when: int) -> bool:
        """Count one retrieval (a search hit) of each memory id, in a transaction of its
        own (or the caller's).  A read's side effect, so it never fails the read nor
        keeps it waiting: when another process is writing the catalog for longer than
        :data:`RETRIEVALS_WAIT` seconds, or the disk is full, these are not counted
        (returns False)."""
        rows = [(i, when) for i in set(ids)]
        if not rows:
            return True
        sql = ("INSERT INTO retrievals VALUES (?, 1, ?) ON CONFLICT(id) DO UPDATE SET "
               "count = count + 1, last = max(last, excluded.last)")
        if self.db.in_transaction:
            self.db.executemany(sql, rows)
            return True
        self.db.execute(f"PRAGMA busy_timeout = {int(RETRIEVALS_WAIT * 1000)}")
        try:
            with self.transaction():
                self.db.executemany(sql, rows)
        except GitmemError:   # busy or a full disk: a hint for reflect, not worth an error
            return False
        finally:
            self.db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        return True

    def retrievals(self) -> dict[str, tuple[int, int]]:
        """Memory id -> (retrievals since the last reflect, time of the last one)."""
        return {i: (n, t) for i, n, t in self.db.execute("SELECT id, count, last FROM retrievals")}

    def clear_retrievals(self, ids: Iterable[str]) -> None:
        self.db.executemany("DELETE FROM retrievals WHERE id=?", [(i,) for i in ids])

    # ---------------------------------------------------------- touches
    def add_touches(self, commit_sha: str, when: int, touches: Iterable[tuple[str, str | None, str]]) -> None:
        """Record that ``commit_sha`` touched these (id, path, op)."""
        self.db.executemany("INSERT INTO touches (id, commit_sha, path, op, time) VALUES (?, ?, ?, ?, ?)",
                            [(i, commit_sha, p, op, when) for i, p, op in touches])

    def touches(self, memory_id: str) -> list[Touch]:
        rows = self.db.execute(
            "SELECT commit_sha, path, op, time FROM touches WHERE id=? ORDER BY seq", (memory_id,))
        return [Touch(*r) for r in rows]

    def all_touches(self) -> list[tuple[str, Touch]]:
        """Every (memory id, touch) recorded, in commit order: one scan of the table."""
        rows = self.db.execute("SELECT id, commit_sha, path, op, time FROM touches ORDER BY seq")
        return [(r[0], Touch(*r[1:])) for r in rows]

    def quick_check(self) -> bool:
        """True if SQLite finds the cache file sound."""
        return self.db.execute("PRAGMA quick_check").fetchone()[0] == "ok"

    def forget_files(self) -> None:
        """Drop every file row (the next scan reads every file again)."""
        self.db.execute("DELETE FROM files")
        self.db.execute("DELETE FROM dirs")

    def compact(self) -> None:
        """Rewrite the database without free pages and empty its write-ahead log, so no
        deleted text stays on disk (after a purge)."""
        self.db.execute("VACUUM")
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def last_path(self, memory_id: str) -> str | None:
        row = self.db.execute(
            "SELECT path FROM touches WHERE id=? AND path IS NOT NULL ORDER BY seq DESC LIMIT 1",
            (memory_id,)).fetchone()
        return row[0] if row else None

    def touched_ids_with_prefix(self, prefix: str) -> list[str]:
        rows = self.db.execute("SELECT DISTINCT id FROM touches WHERE id >= ? AND id < ? LIMIT 10",
                               (prefix, prefix + "\U0010ffff"))
        return [r[0] for r in rows]

    def reset_touches(self) -> None:
        self.db.execute("DELETE FROM touches")
        self.set("history_tip", None)

    def transaction(self) -> _Tx:
        """All changes inside are committed together (or none, on an exception).

        Begins IMMEDIATE (takes SQLite's write lock first, waiting up to the busy
        timeout), so no statement inside fails because another process wrote."""
        return _Tx(self.db)

    @contextmanager
    def what_if(self) -> Iterator[None]:
        """Changes made inside are seen by reads inside, then undone: how the catalog
        would look after a commit that is not made yet (MEMORY.md is rendered so)."""
        if not self.db.in_transaction:
            with self.transaction():   # IMMEDIATE, like every transaction that writes
                with self.what_if():
                    yield
            return
        self.db.execute("SAVEPOINT what_if")
        try:
            yield
        finally:
            # An error may have ended the transaction already (SQLite rolls back on a full
            # disk): then there is nothing to undo, and undoing would raise a second error.
            if self.db.in_transaction:
                self.db.execute("ROLLBACK TO what_if")
                self.db.execute("RELEASE what_if")


class _Tx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            try:
                self.db.execute("COMMIT")
            except BaseException:
                _roll_back(self.db)
                raise
        else:
            _roll_back(self.db)


def _roll_back(db: sqlite3.Connection) -> None:
    """Undo the open transaction, if an error has not ended it already (SQLite rolls
    back by itself on a full disk or an I/O error; ROLLBACK would then fail with
    "cannot rollback - no transaction is active" and hide the error that matters).
    A failing rollback hides nothing either: the error being handled is raised."""
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except (sqlite3.Error, GitmemError):
            pass


def _row(r: tuple[str, str, str, str | None, str]) -> FileRow:
    return FileRow(r[0], r[1], json.loads(r[2]), r[3], r[4])
