"""Reading memories: finding files, parsing them, resolving references, listing.

:class:`Reader` is the vault's read side, used by every other service.  Reading
never takes the vault lock and never writes a memory file; it only refreshes the
private catalog cache, re-parsing files whose size or mtime changed since it last
looked.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..errors import AmbiguousReference, InvalidContent, InvalidInput, NotFound, UnsafePath
from ..memory.markdown import ParsedFile, decode, parse_text, wikilink_target
from ..memory.paths import MEMORY_MD, check_relpath, is_hidden_part
from ..memory.schema import Memory, clean_metadata, derive, path_id
from .catalog import RACY_NS, FileRow, FileStat, tag_key
from .git import blob_id

if TYPE_CHECKING:  # pragma: no cover
    from .storage import Storage

__all__ = ["Reader", "row_fields", "matches_filters", "listing_filters"]


def row_fields(memory: Memory) -> tuple[dict[str, Any], str | None, str]:
    """(frontmatter without the id, problem text, body) as the catalog stores them."""
    return ({k: v for k, v in memory.meta.items() if k != "id"}, "; ".join(memory.problems) or None,
            memory.body)


class Reader:
    """Finds, parses and lists the memories of one vault (never writes a memory file)."""

    def __init__(self, store: Storage) -> None:
        self.store = store
        self.scanned = False   # the catalog has been compared with the disk once

    def disk_files(self) -> dict[str, os.stat_result]:
        """Every memory file in the tier folders -> its stat (no parsing).

        Symbolic links are never followed: a linked note or folder is left out
        (:meth:`refused_links` lists them for ``gitmem doctor``)."""
        found: dict[str, os.stat_result] = {}
        for tier in self.top_folders():
            for rel, st in safefs.walk_files(self.store.root, tier, skip_dir=is_hidden_part):
                if rel.endswith(".md") and not rel.rsplit("/", 1)[-1].startswith("."):
                    found[rel] = st
        if self.store.config.outside_notes is not None:   # notes at the root of an adopted vault
            for entry in os.scandir(self.store.root):
                if entry.is_file(follow_symlinks=False) and self.store.is_memory_path(entry.name):
                    found[entry.name] = entry.stat(follow_symlinks=False)
        return found

    def refused_links(self) -> list[str]:
        """Symbolic links in the tier folders (and a linked tier folder itself), and file
        names that are not valid UTF-8: gitmem never reads, follows or commits them."""
        links: list[str] = []
        for tier in self.top_folders():
            for _ in safefs.walk_files(self.store.root, tier, links=links, skip_dir=is_hidden_part):
                pass
        for name in (MEMORY_MD, ".gitmem.yaml"):
            if safefs.is_symlink_on_the_way(self.store.root, name):
                links.append(name)
        # A name that is not UTF-8 is shown with its bytes escaped, so it can be printed.
        return sorted(p.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") for p in links)

    def _load_row(self, path: str, data: bytes | None = None
                  ) -> tuple[str, dict[str, Any], str | None, str, str] | None:
        """(id, meta without id, problem, body, blob id) of one file, for the catalog."""
        if data is None:
            data = safefs.read_or_none(self.store.root, path)
            if data is None:
                return None
        memory = self.read_file(path, data)
        return (memory.id, *row_fields(memory), blob_id(data))

    def read_file(self, path: str, data: bytes | None = None) -> Memory:
        """Parse one memory file (from disk, or ``data``) without ever writing it."""
        return self.read_parsed(path, data)[0]

    def read_parsed(self, path: str, data: bytes | None = None) -> tuple[Memory, ParsedFile]:
        """:meth:`_read_file` plus the parsed file (raw frontmatter blocks, for rewriting)."""
        if data is None:
            data = safefs.read_bytes(self.store.root, path)
        parsed, problems = _parse(data)
        meta = derive(path, parsed.meta, parsed.body, tiers=self.store.config.tiers,
                      inherited_id=self._inherited_id(path, parsed.meta),
                      outside_notes=self.store.config.outside_notes)
        return Memory(path, meta, parsed.body, problems), parsed

    def memory_from_bytes(self, path: str, data: bytes) -> Memory:
        """A memory file's bytes (from any commit) read as a fresh vault reads them: no
        id is inherited from a name the file had before (unlike a file on disk)."""
        parsed, problems = _parse(data)
        return Memory(path, derive(path, parsed.meta, parsed.body, tiers=self.store.config.tiers,
                                   outside_notes=self.store.config.outside_notes),
                      parsed.body, problems)

    def _inherited_id(self, path: str, meta: dict[str, Any]) -> str | None:
        """The id a file without an ``id:`` keeps from the name it had before a person
        renamed it (see :meth:`OutsideEdits.commit <gitmem.write.person_edits.OutsideEdits.commit>`); None otherwise."""
        written = meta.get("id")
        if isinstance(written, str) and written.strip():
            return None
        return self.store.catalog.inherited_id(path)

    def plain_id(self, path: str) -> str:
        """The id of a file at ``path`` with no ``id:`` in its frontmatter."""
        return self.store.catalog.inherited_id(path) or path_id(path)

    def scan(self) -> tuple[list[str], list[str]]:
        """Re-read changed files into the catalog; returns (changed, removed) paths.

        Like ``git status``: every memory file is stat-ed and compared with the size and
        mtime the catalog has for it, and only files that differ are read.  A folder
        whose mtime (and count of memory files) is as the last scan saw it holds the
        same names, so it is not listed again: its catalogued files are stat-ed by name
        (an edit in place changes a file's mtime, not its folder's; adding, removing or
        renaming a file changes its folder's)."""
        with self.store.lock.threads():  # not inside another thread's catalog transaction
            catalog = self.store.catalog
            known, dirs = catalog.stats(), catalog.dirs()
            files: dict[str, FileStat] | dict[str, os.stat_result]
            if _FOLDER_FDS:
                files, seen = self._stat_files(known, dirs)
            else:  # pragma: no cover - Windows: every folder listed
                files, seen = self.disk_files(), dirs
            result = catalog.scan(files, self._load_row, known=known)
            if seen != dirs:
                catalog.set_dirs(seen)
        self.scanned = True
        return result

    def _stat_files(self, known: dict[str, tuple[int, int]], dirs: dict[str, tuple[int, int]]
                    ) -> tuple[dict[str, FileStat], dict[str, tuple[int, int]]]:
        """What :meth:`disk_files` finds, listing only the folders that changed since the
        last scan (``known``: the catalog's files, ``dirs``: the folders it saw); also
        the folders as this scan saw them, for the next."""
        trusted_before = time.time_ns() - RACY_NS   # a folder changed since may change again unseen
        in_dir: dict[str, list[str]] = {}
        for path in known:
            in_dir.setdefault(path.rpartition("/")[0], []).append(path)
        subdirs: dict[str, list[str]] = {}
        for folder in dirs:
            subdirs.setdefault(folder.rpartition("/")[0], []).append(folder)
        files: dict[str, FileStat] = {}
        seen: dict[str, tuple[int, int]] = {}
        lstat, is_file = os.lstat, stat.S_ISREG
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
        root_fd = os.open(self.store.root, os.O_RDONLY)
        try:
            # Folders are taken parent first, so a folder is only entered through real
            # folders (one replaced by a link changes its parent, which is then listed).
            stack = list(self.store.config.tiers)   # (folder names: never a "/" in them)
            if self.store.config.outside_notes is not None:
                stack += self._top_level(root_fd, files)   # an adopted vault: the person's folders
            while stack:
                folder = stack.pop()
                try:
                    fd = os.open(folder, flags, dir_fd=root_fd)   # never through a link
                except OSError:
                    continue
                try:
                    st = os.fstat(fd)
                    mtime, names = st.st_mtime_ns, in_dir.get(folder, ())
                    if mtime < trusted_before and dirs.get(folder) == (mtime, len(names)):
                        for path in names:          # the same names as last time: stat them
                            try:
                                fst = lstat(path.rpartition("/")[2], dir_fd=fd)
                            except OSError:
                                continue
                            if is_file(fst.st_mode):
                                files[path] = FileStat(fst.st_mtime_ns, fst.st_size)
                        stack.extend(subdirs.get(folder, ()))
                        count = len(names)
                    else:
                        count = 0
                        for rel, file_st, _ in _list_folder(fd, folder):
                            if file_st is None:
                                stack.append(rel)
                            else:
                                files[rel] = FileStat(file_st.st_mtime_ns, file_st.st_size)
                                count += 1
                finally:
                    os.close(fd)
                seen[folder] = (mtime if mtime < trusted_before else -1, count)
        finally:
            os.close(root_fd)
        return files, seen

    def _top_level(self, root_fd: int, files: dict[str, FileStat]) -> list[str]:
        """In an adopted vault: the notes at the vault's root (into ``files``) and the
        folders beside the tier folders, to walk (listed on every scan: one folder)."""
        folders = []
        for rel, file_st, _ in _list_folder(root_fd, ""):
            rel = rel.lstrip("/")
            if file_st is None:
                if rel not in self.store.config.tiers:
                    folders.append(rel)
            elif self.store.is_memory_path(rel):
                files[rel] = FileStat(file_st.st_mtime_ns, file_st.st_size)
        return folders

    def top_folders(self) -> list[str]:
        """The folders that hold memories: the tier folders and, in an adopted vault,
        every other folder at the root that is not hidden (``.obsidian`` ...)."""
        folders = list(self.store.config.tiers)
        if self.store.config.outside_notes is not None:
            try:
                entries = list(os.scandir(self.store.root))
            except OSError:
                entries = []
            folders += sorted(e.name for e in entries if e.name not in folders and not is_hidden_part(e.name)
                              and e.is_dir(follow_symlinks=False))
        return folders

    def scan_paths(self, paths: Iterable[str]) -> tuple[list[str], list[str]]:
        """Like :meth:`scan` for just these vault-relative paths."""
        wanted = [p for p in paths if self.store.is_memory_path(p)]
        present: dict[str, os.stat_result] = {}
        for path in wanted:
            try:
                st = safefs.lstat(self.store.root, path)
            except (OSError, UnsafePath):
                continue
            if st is not None and stat.S_ISREG(st.st_mode):
                present[path] = st
        with self.store.lock.threads():  # not inside another thread's catalog transaction
            return self.store.catalog.scan(present, self._load_row, only=wanted)

    def ensure_scanned(self) -> None:
        if not self.scanned:
            self.scan()

    def fresh_row(self, row: FileRow) -> bool:
        try:
            st = safefs.lstat(self.store.root, row.path)
        except (OSError, UnsafePath):
            return False
        if st is None or not stat.S_ISREG(st.st_mode):
            return False
        return self.store.catalog.stat_of(row.path) == (st.st_mtime_ns, st.st_size)

    def _lookup(self, ref: str) -> list[FileRow]:
        ref = ref.strip()
        if ref.startswith("[[") and ref.endswith("]]"):
            return self.link_rows(wikilink_target(ref))
        if "/" in ref or "\\" in ref:
            rel = check_relpath(ref)
            row = self.store.catalog.row(rel)
            if row:
                return [row]
            rows = self.link_rows(ref)  # a path as an Obsidian link names it, or a title with "/"
        else:
            rows = self.store.catalog.by_id(ref)
            if not rows and ref.endswith(".md"):
                rows = self.store.catalog.by_stem(ref[:-3])
            if not rows:
                rows = self.store.catalog.by_stem(ref)
            if not rows:
                rows = self.store.catalog.by_title(ref)
            if not rows:
                rows = self.store.catalog.by_alias(ref)
            if not rows and len(ref) >= 4 and all(c in "0123456789abcdef-" for c in ref.lower()):
                rows = self.store.catalog.by_id_prefix(ref.lower())
        if not rows:
            target = wikilink_target(ref)   # "[[x|label]]", "x#heading", "x#^block"
            if target and target != ref:
                rows = self.link_rows(target)
        return rows

    def link_rows(self, target: str) -> list[FileRow]:
        """The memories an Obsidian ``[[target]]`` names (``target`` without its ``|label``
        or ``#heading``), case-insensitively: an id, a path (``.md`` optional, from the
        vault root or a tier folder), a file name, a title, then an alias."""
        target = target.strip()
        if not target:
            return []
        rows = self.store.catalog.by_id(target)
        if not rows and ("/" in target or "\\" in target):
            rows = self.store.catalog.by_link_path(target, self.store.config.tiers)
        if not rows:
            rows = self.store.catalog.by_stem(target[:-3] if target.lower().endswith(".md") else target)
        if not rows:
            rows = self.store.catalog.by_title(target)
        if not rows:
            rows = self.store.catalog.by_alias(target)
        return rows

    def _fast_lookup(self, ref: str) -> list[FileRow] | None:
        """An exact id or path found in the catalog, if the file is unchanged.

        Skips the full working-tree scan (~80 ms at 10k files) that other
        references need; ids are unique, so a fresh hit cannot be ambiguous.
        """
        ref = ref.strip()
        if ref.startswith("[["):
            return None
        if "/" in ref:
            row = self.store.catalog.row(check_relpath(ref))
            rows = [row] if row else []
        else:
            rows = self.store.catalog.by_id(ref)
        if len(rows) == 1 and self.fresh_row(rows[0]):
            return rows
        return None

    def resolve(self, ref: str) -> str:
        """The path of the memory ``ref`` names: an id (or unique id prefix of
        4+ characters), a vault-relative path, a file name (with or without
        ``.md``), an exact title or an Obsidian alias (case-insensitive), or a note as
        an Obsidian ``[[link]]`` names it (``Folder/Note``, ``Note#heading``, ``[[Note|label]]``)."""
        if not isinstance(ref, str) or not ref.strip():
            raise InvalidInput("memory reference is empty", hint="Pass an id, path, file name or title.")
        rows = self._fast_lookup(ref)
        if rows is None:
            self.ensure_scanned()
            rows = self._lookup(ref)
            if not rows or not all(self.fresh_row(r) for r in rows):
                self.scan()
                rows = self._lookup(ref)
        if not rows:
            raise NotFound(f"no memory matches {ref!r}",
                           hint="List memories with 'gitmem ls' or search with 'gitmem search'.")
        if len(rows) > 1:
            listing = ", ".join(f"{r.path} ({r.id[:8]})" for r in rows[:5])
            raise AmbiguousReference(f"{ref!r} matches {len(rows)} memories: {listing}")
        return rows[0].path

    def get(self, ref: str) -> Memory:
        """Read one memory (see :meth:`resolve` for what ``ref`` may be)."""
        try:
            return self.read_file(self.resolve(ref))
        except (NotFound, FileNotFoundError, NotADirectoryError):
            if self.store.lock.held:
                raise
        # Another process may be moving the file right now (its old name is gone, the
        # new one not there yet): look again once its write is over.  A read never waits
        # for the vault lock: when it is free the answer is final at once; while a writer
        # holds it (for milliseconds a write), look again a few times for a short while.
        deadline = time.monotonic() + LOOK_AGAIN_FOR
        delay = 0.005
        while True:
            with self.store.lock.try_hold() as quiet:
                self.scan()
                try:
                    path = self.resolve(ref)
                    try:
                        return self.read_file(path)
                    except (FileNotFoundError, NotADirectoryError):
                        raise NotFound(f"memory file {path} vanished while reading") from None
                except NotFound:
                    if quiet or time.monotonic() + delay > deadline:
                        raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def exists(self, ref: str) -> bool:
        """True if ``ref`` names exactly one memory."""
        try:
            self.resolve(ref)
        except (NotFound, AmbiguousReference):
            return False
        return True

    def list(self, *, tier: str | Iterable[str] | None = None, type: str | Iterable[str] | None = None,
             tags: str | Iterable[str] | None = None, status: str | Iterable[str] | None = "active",
             scope: str | None = None, agent: str | None = None, limit: int | None = None) -> list[Memory]:
        """Memories matching every given filter, newest ``updated`` first.

        ``status`` defaults to ``"active"``; pass ``None`` for every status.
        ``tags`` matches memories carrying all the given tags.  Bodies are not
        loaded (``body`` is ""); use :meth:`get` for the full memory.
        """
        want, need_tags = listing_filters(self.store.config.tiers, tier=tier, type=type, tags=tags,
                                          status=status, scope=scope, agent=agent)
        self.scan()
        # Tags as Obsidian counts them: frontmatter and inline #tags, any case, "#" optional.
        tagged = self.store.catalog.paths_with_tags(need_tags) if need_tags else set()
        entries = (Memory(row.path, {"id": row.id, **row.meta}, "", [row.problem] if row.problem else [])
                   for row in self.store.catalog.all_rows() if not need_tags or row.path in tagged)
        return matches_filters(entries, want, limit)


def listing_filters(tiers: Iterable[str], *, tier: str | Iterable[str] | None = None,
                    type: str | Iterable[str] | None = None, tags: str | Iterable[str] | None = None,
                    status: str | Iterable[str] | None = "active", scope: str | None = None,
                    agent: str | None = None) -> tuple[dict[str, set[str]], set[str]]:
    """The field filters of a listing (checked: an unknown tier, type or status is an
    error) and the tag keys every listed memory must carry."""
    want = {k: _as_set(v) for k, v in (("tier", tier), ("type", type), ("status", status),
                                        ("scope", scope), ("agent", agent)) if v is not None}
    for key in ("tier", "type", "status", "scope"):
        for value in want.get(key, ()):
            clean_metadata({key: value}, tiers=tuple(tiers))  # raises on unknown values
    return want, ({tag_key(t) for t in _as_set(tags)} if tags else set())


def matches_filters(entries: Iterable[Memory], want: dict[str, set[str]], limit: int | None) -> list[Memory]:
    """The memories whose fields pass ``want``, newest ``updated`` first, at most ``limit``."""
    out = [m for m in entries
           if not any(str(m.meta.get(k, "active" if k == "status" else "")) not in v
                      for k, v in want.items())]
    out.sort(key=lambda m: (str(m.meta.get("updated", "")), m.path), reverse=True)
    return out[:limit] if limit else out


# Folders opened once and their files stat-ed through them (not Windows)
#: How long a read that found no file looks again while a writer holds the vault lock.
LOOK_AGAIN_FOR = 1.0
_FOLDER_FDS = ({os.open, os.stat} <= os.supports_dir_fd and os.stat in os.supports_follow_symlinks
               and os.scandir in os.supports_fd)


def _list_folder(fd: int, folder: str) -> Iterator[tuple[str, os.stat_result | None, bool]]:
    """The open folder ``fd`` (vault path ``folder``) as :meth:`Reader.disk_files` walks
    it: (path, stat, False) for each memory file, (path, None, True) for each sub-folder
    to enter.  Links, hidden names and names that are not UTF-8 are left out."""
    try:
        entries = list(os.scandir(fd))
    except OSError:
        return
    for entry in entries:
        name = entry.name
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            continue
        try:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                if not is_hidden_part(name):
                    yield f"{folder}/{name}", None, True
            elif entry.is_file(follow_symlinks=False) and name.endswith(".md") and not name.startswith("."):
                yield f"{folder}/{name}", entry.stat(follow_symlinks=False), False
        except OSError:
            continue


def _parse(data: bytes) -> tuple[ParsedFile, list[str]]:
    """A memory file's bytes parsed, with the problems found (bad UTF-8, bad YAML)."""
    problems: list[str] = []
    try:
        text = decode(data)
    except InvalidContent as exc:
        text, problems = data.decode("utf-8", "replace").replace("\x00", ""), [exc.message]
    parsed = parse_text(text)
    if parsed.problem:
        problems.append(parsed.problem)
    return parsed, problems


def _as_set(value: str | Iterable[str]) -> set[str]:
    return {value} if isinstance(value, str) else set(value)
