"""Plain files in the vault: exact-text reads and writes for file-shaped agent tools.

The ``files`` profile's ``memory_write(path, content)`` and Anthropic's memory tool
(``/memories``) address memories as *files*: they write a file's exact text, rename
and delete paths.  :class:`Files` does that; an open vault's is ``vault.files``
(documented with the Python API).  Each write is one commit through
:meth:`WritePipeline.commit`, so history, the catalog and the search index stay in
step.  Nothing here rewrites what it was given: a file with no frontmatter is a
valid memory (its id comes from its path, its title from its first heading).

**The file view.**  File tools see the vault as a tree whose root is the
*files tier* (``files_tier`` in ``.gitmem.yaml``; default ``long_term``, the
tier where durable knowledge lives):

* ``notes/editor.md``          -> ``long_term/notes/editor.md``
* ``short_term/today.md``      -> ``short_term/today.md`` (a path that starts
  with a tier folder names that tier)
* ``long_term/notes/editor.md`` -> itself (the explicit spelling of the same file)

so a file an agent writes is exactly where it says, and memories gitmem keeps
in other tiers are still visible under their tier folder.  Every path goes
through :func:`gitmem.memory.paths.check_relpath` (traversal, absolute paths, ``~``,
hidden folders, unportable names) and the path gate :mod:`gitmem.safefs`
(symbolic links are never followed), and every write through the vault's
write checks (:mod:`gitmem.write.checks`: secrets, size, names).
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..errors import (
    Conflict,
    ContentTooLarge,
    InvalidContent,
    InvalidInput,
    InvalidPath,
    NotFound,
    Protected,
    UnsafePath,
)
from ..memory.paths import MEMORY_MD, check_relpath, is_hidden_part, memory_relpath
from ..memory.secrets import policy_of as secrets_policy
from ..memory.secrets import redact_text
from ..store.git import FileChange, blob_id

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Identity
    from ..store.catalog import FileRow
    from ..store.reader import Reader
    from ..store.storage import Storage
    from ..write.pipeline import WritePipeline

__all__ = ["Files", "FileWrite", "ViewFile"]

_KEEP = ".gitkeep"


@dataclass
class FileWrite:
    """What a file write, delete or rename did.

    ``paths`` are the vault-relative paths written (or removed); ``commit`` is
    None when nothing changed (the same text written again).  ``problems``
    lists frontmatter problems of a written Markdown file: it is stored as
    given, and ``gitmem doctor`` reports it.
    """

    paths: list[str]
    commit: str | None
    created: bool = False
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"paths": self.paths, "commit": self.commit, "created": self.created,
                "problems": self.problems}


@dataclass(frozen=True)
class ViewFile:
    """One file of the *readable* file view (see :meth:`Files.readable_files`).

    ``path`` is where the file really is (vault-relative); ``view`` is how the
    readable view spells it (relative to the files tier, like
    :meth:`Files.view_path`); ``title`` and ``status`` are the memory's
    (None for a file that is not a memory, e.g. ``notes.txt``).
    """

    path: str
    view: str
    title: str | None = None
    status: str | None = None


class Files:
    """Exact-text file reads and writes (see the module doc for the file view)."""

    def __init__(self, store: Storage, reader: Reader, pipeline: WritePipeline) -> None:
        self.store = store
        self.reader = reader
        self.pipeline = pipeline

    # ------------------------------------------------------------ the view
    @property
    def files_tier(self) -> str:
        """The tier that is the root of the file view (``files_tier`` in .gitmem.yaml)."""
        chosen = self.store.config.extra.get("files_tier")
        if isinstance(chosen, str) and chosen in self.store.config.live_tiers:
            return chosen
        return "long_term" if "long_term" in self.store.config.live_tiers else self.store.config.live_tiers[-1]

    def file_path(self, path: str) -> str:
        """The vault-relative path a file-view ``path`` names (validated, not required to exist).

        ``""`` or ``"."`` names the view's root, the files tier folder.
        """
        if isinstance(path, str) and path.strip().strip("/") in ("", "."):
            return self.files_tier
        rel = check_relpath(path)
        if rel.split("/", 1)[0] in self.store.config.tiers:
            return rel
        return f"{self.files_tier}/{rel}"

    def view_path(self, relpath: str) -> str:
        """The file-view spelling of a vault-relative path (inverse of :meth:`file_path`)."""
        prefix = self.files_tier + "/"
        return relpath[len(prefix):] if relpath.startswith(prefix) else relpath

    # ------------------------------------------------------------ the readable view
    # Memories gitmem places itself live at <tier>/<h1>/<h2>/<slug>.md: the two hash
    # folders keep git trees small but mean nothing to an agent browsing files.  The
    # readable view shows such a memory at <tier>/<slug>.md (slugs are unique across
    # the vault) and leaves deleted memories out; every other file keeps its own path.
    # A projected spelling is used only when it names nothing real and no other memory
    # would show there, so each readable path names exactly one file.
    def _projection_spot(self, path: str, memory_id: str) -> str | None:
        """``<tier>/<name>`` for a memory gitmem placed in its hash folders, else None."""
        parts = path.split("/")
        if len(parts) != 4 or parts[0] not in self.store.config.tiers or not parts[3].endswith(".md"):
            return None
        if memory_relpath(parts[0], memory_id, parts[3][:-3], layout="hashed") != path:
            return None
        return f"{parts[0]}/{parts[3]}"

    def readable_files(self, folder: str | None = None) -> list[ViewFile]:
        """The files of the readable view under vault-relative ``folder`` (None or a
        tier folder: projected spellings; a deeper folder: the files' own paths), sorted
        by their readable spelling.  Deleted memories are left out.  Catches up with
        outside edits first (a scan)."""
        self.reader.scan()
        rows = {row.path: row for row in self.store.catalog.all_rows()}
        rel = check_relpath(folder) if folder else None
        files = self.list_files(rel)
        project = rel is None or rel in self.store.config.tiers
        visible: list[tuple[str, FileRow | None]] = []
        spots: dict[str, list[str]] = {}
        for path in files:
            row = rows.get(path)
            if row is not None and row.meta.get("status") == "deleted":
                continue  # soft-deleted: in the archive folder and in history, not shown
            visible.append((path, row))
            spot = self._projection_spot(path, row.id) if project and row is not None else None
            if spot is not None:
                spots.setdefault(spot, []).append(path)
        shown = {paths[0]: spot for spot, paths in spots.items()
                 if len(paths) == 1 and self.file_kind(spot) is None}
        out = [ViewFile(path, self.view_path(shown.get(path, path)),
                        None if row is None else str(row.meta.get("title") or "") or None,
                        None if row is None else str(row.meta.get("status") or "active"))
               for path, row in visible]
        return sorted(out, key=lambda f: f.view)

    def readable_path(self, path: str) -> str:
        """The vault-relative path a readable-view ``path`` names (inverse of the
        projection :meth:`readable_files` makes; validated, not required to exist).

        A real file or folder at the spelled place always wins; otherwise
        ``<tier>/<slug>.md`` names the one visible memory gitmem placed in that
        tier's hash folders under that name.
        """
        rel = self.file_path(path)
        parts = rel.split("/")
        if len(parts) != 2 or parts[0] not in self.store.config.tiers or not rel.endswith(".md"):
            return rel
        if self.file_kind(rel) is not None:
            return rel
        self.reader.ensure_scanned()
        for attempt in range(2):
            rows = [row for row in self.store.catalog.by_stem(parts[1][:-3])
                    if self._projection_spot(row.path, row.id) == rel and row.meta.get("status") != "deleted"]
            if attempt or all(self.reader.fresh_row(row) for row in rows):
                break
            self.reader.scan()  # a memory moved or changed outside gitmem: look again
        return rows[0].path if len(rows) == 1 else rel

    def readable_view(self, relpath: str) -> str:
        """How the readable view spells the file at vault-relative ``relpath``: its
        projected ``<tier>/<slug>.md`` spelling when that names it, else :meth:`view_path`."""
        rel = check_relpath(relpath)
        self.reader.ensure_scanned()
        row = self.store.catalog.row(rel)
        spot = self._projection_spot(rel, row.id) if row is not None else None
        if spot is not None and self.readable_path(self.view_path(spot)) == rel:
            return self.view_path(spot)
        return self.view_path(rel)

    def memories_named(self, name: str) -> list[str]:
        """Paths of every memory that is not deleted whose file name (with or without
        ``.md``), id, title (case-insensitive) or id prefix (4+ characters) is ``name``,
        sorted; the first kind of match that finds any wins.  Unlike
        :meth:`resolve`, several matches are all returned."""
        ref = name.strip() if isinstance(name, str) else ""
        if not ref:
            return []
        self.reader.ensure_scanned()
        rows: list[FileRow] = []
        for attempt in range(2):
            rows = self.store.catalog.by_id(ref)
            if not rows and ref.endswith(".md"):
                rows = self.store.catalog.by_stem(ref[:-3])
            rows = rows or self.store.catalog.by_stem(ref) or self.store.catalog.by_title(ref)
            if not rows and len(ref) >= 4 and all(c in "0123456789abcdef-" for c in ref.lower()):
                rows = self.store.catalog.by_id_prefix(ref.lower())
            if attempt or (rows and all(self.reader.fresh_row(row) for row in rows)):
                break
            self.reader.scan()  # unknown or changed: catch up with outside edits once
        return sorted(row.path for row in rows if row.meta.get("status") != "deleted")

    # ------------------------------------------------------------ reading
    def list_files(self, folder: str | None = None) -> list[str]:
        """Every file under the tier folders (or under vault-relative ``folder``),
        as sorted vault-relative paths; hidden files and folders, and symbolic
        links (never followed), are left out."""
        tops = [check_relpath(folder)] if folder else list(self.store.config.tiers)
        found: list[str] = []
        for top in tops:
            for rel, _ in safefs.walk_files(self.store.root, top, skip_dir=is_hidden_part):
                name = rel.rsplit("/", 1)[-1]
                if not is_hidden_part(name) and name != _KEEP:
                    found.append(rel)
        return sorted(found)

    def file_kind(self, relpath: str) -> str | None:
        """``"file"``, ``"folder"`` or None (absent) for vault-relative ``relpath``;
        a symbolic link on the way raises :class:`~gitmem.errors.UnsafePath`."""
        st = safefs.lstat(self.store.root, check_relpath(relpath))
        if st is None:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(f"{relpath} is a symbolic link; gitmem never follows links inside the vault")
        return "folder" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else None

    def file_size(self, relpath: str) -> int:
        """The size in bytes the file system reports for the file or folder at
        ``relpath`` (0 if absent or a link)."""
        st = safefs.lstat(self.store.root, check_relpath(relpath))
        return st.st_size if st is not None and (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)) else 0

    def read_text(self, relpath: str) -> str:
        """The exact text of the file at vault-relative ``relpath`` (never rewritten)."""
        rel = check_relpath(relpath)
        try:
            data = safefs.read_bytes(self.store.root, rel)
        except IsADirectoryError:
            raise InvalidInput(f"{rel} is a folder, not a file") from None
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"no file at {rel}") from None
        if b"\x00" in data:
            raise InvalidContent(f"{rel} is not a text file (it contains NUL bytes)")
        text = data.decode("utf-8", "replace")
        return text[1:] if text.startswith("\ufeff") else text

    def names_memory_md(self, relpath: str) -> bool:
        """True for a vault-relative path naming ``MEMORY.md`` directly in a tier folder
        (any letter case): how agents spell the generated index, which no tool writes."""
        folder, _, name = relpath.rpartition("/")
        return name.casefold() == MEMORY_MD.casefold() and folder in self.store.config.tiers

    def memory_md_text(self) -> str | None:
        """The text of the vault's ``MEMORY.md`` as it is on disk (None if absent or a link)."""
        data = safefs.read_or_none(self.store.root, MEMORY_MD)
        return None if data is None else data.decode("utf-8", "replace")

    # ------------------------------------------------------------ writing
    def _file_data(self, text: Any) -> bytes:
        if not isinstance(text, str):
            raise InvalidContent(f"file content must be text, got {type(text).__name__}")
        if "\x00" in text:
            raise InvalidContent("file content contains NUL characters")
        if secrets_policy(self.store.config) == "redact":
            text = redact_text(text)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidContent("file content is not valid Unicode text (it holds a lone surrogate)") from None
        if len(data) > self.store.config.max_content_bytes:
            raise ContentTooLarge(f"file is {len(data):,} bytes; the limit is {self.store.config.max_content_bytes:,}")
        return data

    def _new_name_free(self, rel: str) -> None:
        """Refuse a new memory file whose name differs only by letter case from another
        memory's (``Notes.md`` beside ``notes.md``): on macOS and Windows they are one
        file, and a ``[[link]]`` cannot tell them apart.  The same name in another
        folder is allowed here: file tools address a tree of paths."""
        if not self.store.is_memory_path(rel):
            return
        self.reader.ensure_scanned()
        stem = rel.rsplit("/", 1)[-1][:-3]
        for row in self.store.catalog.by_stem(stem):
            other = row.path.rsplit("/", 1)[-1][:-3]
            if other != stem:
                raise Conflict(f"{row.path} already exists and its name differs from {rel} only by letter case",
                               hint="Pick another name, or update the existing file.")

    def _guard_file(self, rel: str, action: str) -> None:
        """Refuse to change an active protected memory (goal, rule, ...) through a file tool."""
        if not self.store.is_memory_path(rel):
            return
        memory = self.reader.read_file(rel)
        if self.pipeline.protected(memory):
            raise Protected(f"{rel} is a protected {memory.type} ({memory.title!r}); refusing to {action} it",
                            hint="Protected memories are changed by a person: gitmem edit/rm/mv --force.")

    def _touch(self, rel: str, data: bytes | None, op: str) -> list[tuple[str, str | None, str]]:
        if not self.store.is_memory_path(rel):
            return []
        if data is None:
            return [(self.reader.read_file(rel).id, None, op)]
        return [(self.reader.read_file(rel, data).id, rel, op)]

    def write_text(self, relpath: str, text: str, *, exists: bool | None = None,
                   if_match: str | None = None, author: str | Identity | None = None,
                   subject: str | None = None) -> FileWrite:
        """Write ``text`` exactly to vault-relative ``relpath`` as one commit.

        ``exists=False`` refuses to overwrite (create only), ``True`` refuses
        to create, ``None`` does either.  ``if_match`` makes the write
        conditional: the file must still hold exactly that text (an edit
        computed from an earlier :meth:`read_text` never overwrites a change
        made in between; it raises :class:`Conflict`).  Parent folders are
        created; the path must be inside a tier folder.  Writing the text a
        file already has makes no commit.  An active protected memory is never
        overwritten.
        """
        who = self.store.author_of(author)
        rel = check_relpath(relpath)
        if rel.split("/", 1)[0] not in self.store.config.tiers or "/" not in rel:
            raise InvalidPath(f"{rel!r} is not inside a tier folder ({', '.join(self.store.config.tiers)})")
        if rel.rsplit("/", 1)[-1] == _KEEP:
            raise InvalidPath(f"{rel!r} is reserved (it keeps an empty tier folder in git)")
        if self.names_memory_md(rel):
            raise InvalidPath(f"{relpath!r} is the index gitmem generates at the vault root from the memory "
                              "files; it cannot be written",
                              hint="Write a topic file instead (e.g. 'preferences.md'); the index lists it "
                                   "after the write.")
        data = self._file_data(text)
        with self.store.lock.hold():
            parts = rel.split("/")
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if self.file_kind(folder) == "file":
                    raise Conflict(f"cannot create {rel}: {folder} is a file")
            kind = self.file_kind(rel)
            if kind == "folder":
                raise Conflict(f"{rel} is a folder", hint="Write to a file path inside it.")
            existed = kind == "file"
            if exists is False and existed:
                raise Conflict(f"{rel} already exists")
            if exists is True and not existed:
                raise NotFound(f"no file at {rel}")
            if if_match is not None and (not existed or self.read_text(rel) != if_match):
                raise Conflict(f"{rel} changed since it was read", hint="Read it again and redo the edit.")
            if existed:
                self._guard_file(rel, "overwrite")
                current = safefs.read_bytes(self.store.root, rel)
                self.pipeline.bases[rel] = current  # what this write replaces (person_edits.py)
                if current == data:
                    return FileWrite([rel], None, False, self._problems(rel, data))
            else:
                self._new_name_free(rel)
            if self.store.is_memory_path(rel):
                # The text is stored exactly as given, so what its frontmatter claims is
                # capped at the writer's trust (store/trust.py).
                writer = self.store.origin_of(who)
                self.store.trust.cap([(blob_id(data), self.reader.read_file(rel, data).meta)], writer)
            op = "update" if existed else "add"
            subject = subject or f"{'write' if existed else 'create'}: {rel}"
            done = self.pipeline.commit([FileChange(rel, data)], subject, op, self._touch(rel, data, op), author=who)
        return FileWrite([rel], done.sha, not existed, self._problems(rel, data))

    def _problems(self, rel: str, data: bytes) -> list[str]:
        return list(self.reader.read_file(rel, data).problems) if self.store.is_memory_path(rel) else []

    def _files_at(self, rel: str) -> list[str]:
        """The file at ``rel``, or every file under the folder ``rel`` (none: NotFound)."""
        kind = self.file_kind(rel)
        if kind == "file":
            return [rel]
        if kind == "folder":
            files = self.list_files(rel)
            keep = [p for p in self._tracked_under(rel) if p.endswith("/" + _KEEP)]
            return files + keep
        raise NotFound(f"no file or folder at {rel}")

    def _tracked_under(self, rel: str) -> list[str]:
        return [p for p in self.store.git.list_tree(self.store.git.head()) if p.startswith(rel + "/")]

    def remove_path(self, relpath: str, *, author: str | Identity | None = None) -> FileWrite:
        """Remove a file, or a folder with everything in it, as one commit.

        A tier folder itself cannot be removed.  Removed files stay in git
        history (``gitmem restore``).  Protected memories are refused.
        """
        who = self.store.author_of(author)
        rel = check_relpath(relpath)
        if rel in self.store.config.tiers:
            raise InvalidPath(f"{rel!r} is a tier folder; it cannot be removed")
        if rel.split("/", 1)[0] not in self.store.config.tiers:
            raise NotFound(f"no file or folder at {rel}")
        with self.store.lock.hold():
            paths = self._files_at(rel)
            for path in paths:
                self._guard_file(path, "delete")
            touched = [t for p in paths for t in self._touch(p, None, "delete")]
            subject = f"delete: {rel}" + (f" ({len(paths)} files)" if len(paths) > 1 else "")
            done = self.pipeline.commit([FileChange(p, None) for p in paths], subject, "delete", touched, author=who)
        return FileWrite(paths, done.sha)

    def rename_path(self, old: str, new: str, *, author: str | Identity | None = None) -> FileWrite:
        """Rename (move) a file or folder as one commit of tracked renames.

        Never overwrites: the destination must not exist.  Protected memories
        are refused.  A file without an ``id`` in its frontmatter gets a new
        path-derived id (its history before the rename stays under the old one).
        """
        who = self.store.author_of(author)
        src, dst = check_relpath(old), check_relpath(new, what="new path")
        for rel in (src, dst):
            if rel in self.store.config.tiers:
                raise InvalidPath(f"{rel!r} is a tier folder; it cannot be renamed")
            if rel.split("/", 1)[0] not in self.store.config.tiers:
                raise InvalidPath(f"{rel!r} is not inside a tier folder ({', '.join(self.store.config.tiers)})")
        if dst == src or dst.startswith(src + "/"):
            raise InvalidPath(f"cannot move {src} into itself")
        with self.store.lock.hold():
            if safefs.lstat(self.store.root, dst) is not None:
                raise Conflict(f"{dst} already exists", hint="Pick a new name; rename never overwrites.")
            paths = [p for p in self._files_at(src) if not p.endswith("/" + _KEEP)]
            changes: list[FileChange] = []
            touched: list[tuple[str, str | None, str]] = []
            for path in paths:
                self._guard_file(path, "rename")
                moved = dst + path[len(src):]
                if moved.rsplit("/", 1)[-1].casefold() != path.rsplit("/", 1)[-1].casefold():
                    self._new_name_free(moved)
                data = safefs.read_bytes(self.store.root, path)
                self.pipeline.bases[path] = data
                changes += [FileChange(path, None), FileChange(moved, data, moved_from=path)]
                touched += self._touch(moved, data, "move")
            done = self.pipeline.commit(changes, f"rename: {src} -> {dst}", "move", touched, author=who)
        return FileWrite([dst + p[len(src):] for p in paths], done.sha)
