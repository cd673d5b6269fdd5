"""Plain files in the vault: exact-text reads and writes for file-shaped agent tools.

Part of the :class:`~gitmem.vault.Vault` (a mixin).  Seed 000's
``memory_write(path, content)`` and Anthropic's memory tool (``/memories``)
address memories as *files*: they write a file's exact text, rename and delete
paths.  These methods do that, each write as one commit through
:meth:`Vault._commit`, so history, the catalog and the search index stay in
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
through :func:`gitmem.paths.check_relpath` (traversal, absolute paths, ``~``,
hidden folders, unportable names) and :func:`gitmem.paths.inside` (symlinks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import Conflict, ContentTooLarge, InvalidContent, InvalidInput, InvalidPath, NotFound, Protected
from .gitstore import FileChange
from .paths import check_relpath, inside, is_hidden_part

if TYPE_CHECKING:  # pragma: no cover
    from .config import Identity
    from .vault import Vault

__all__ = ["RawFilesMixin", "FileWrite"]

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


class RawFilesMixin:
    """Exact-text file methods of the Vault (see the module doc for the file view)."""

    # ------------------------------------------------------------ the view
    @property
    def files_tier(self: "Vault") -> str:
        """The tier that is the root of the file view (``files_tier`` in .gitmem.yaml)."""
        chosen = self.config.extra.get("files_tier")
        if isinstance(chosen, str) and chosen in self.config.live_tiers:
            return chosen
        return "long_term" if "long_term" in self.config.live_tiers else self.config.live_tiers[-1]

    def file_path(self: "Vault", path: str) -> str:
        """The vault-relative path a file-view ``path`` names (validated, not required to exist).

        ``""`` or ``"."`` names the view's root, the files tier folder.
        """
        if isinstance(path, str) and path.strip().strip("/") in ("", "."):
            return self.files_tier
        rel = check_relpath(path)
        if rel.split("/", 1)[0] in self.config.tiers:
            return rel
        return f"{self.files_tier}/{rel}"

    def view_path(self: "Vault", relpath: str) -> str:
        """The file-view spelling of a vault-relative path (inverse of :meth:`file_path`)."""
        prefix = self.files_tier + "/"
        return relpath[len(prefix):] if relpath.startswith(prefix) else relpath

    # ------------------------------------------------------------ reading
    def list_files(self: "Vault", folder: str | None = None) -> list[str]:
        """Every file under the tier folders (or under vault-relative ``folder``),
        as sorted vault-relative paths; hidden files and folders are left out."""
        tops = [folder] if folder else list(self.config.tiers)
        found: list[str] = []
        for top in tops:
            base = inside(self.root, check_relpath(top))
            if not base.is_dir():
                continue
            for here, dirs, names in os.walk(base):
                dirs[:] = sorted(d for d in dirs if not is_hidden_part(d))
                rel_here = os.path.relpath(here, self.root).replace(os.sep, "/")
                for name in names:
                    if is_hidden_part(name) or name == _KEEP:
                        continue
                    full = os.path.join(here, name)
                    if os.path.islink(full) or not os.path.isfile(full):
                        continue
                    found.append(f"{rel_here}/{name}")
        return sorted(found)

    def read_text(self: "Vault", relpath: str) -> str:
        """The exact text of the file at vault-relative ``relpath`` (never rewritten)."""
        rel = check_relpath(relpath)
        target = inside(self.root, rel)
        if target.is_dir():
            raise InvalidInput(f"{rel} is a folder, not a file")
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no file at {rel}") from None
        if b"\x00" in data:
            raise InvalidContent(f"{rel} is not a text file (it contains NUL bytes)")
        text = data.decode("utf-8", "replace")
        return text[1:] if text.startswith("\ufeff") else text

    # ------------------------------------------------------------ writing
    def _file_data(self: "Vault", text: Any) -> bytes:
        if not isinstance(text, str):
            raise InvalidContent(f"file content must be text, got {type(text).__name__}")
        if "\x00" in text:
            raise InvalidContent("file content contains NUL characters")
        data = text.encode("utf-8", "surrogatepass")
        if len(data) > self.config.max_content_bytes:
            raise ContentTooLarge(f"file is {len(data):,} bytes; the limit is {self.config.max_content_bytes:,}")
        return data

    def _guard_file(self: "Vault", rel: str, action: str) -> None:
        """Refuse to change an active protected memory (goal, rule, ...) through a file tool."""
        if not self.is_memory_path(rel):
            return
        memory = self._read_file(rel)
        if self._protected(memory):
            raise Protected(f"{rel} is a protected {memory.type} ({memory.title!r}); refusing to {action} it",
                            hint="Protected memories are changed by a person: gitmem edit/rm/mv --force.")

    def _touch(self: "Vault", rel: str, data: bytes | None, op: str) -> list[tuple[str, str | None, str]]:
        if not self.is_memory_path(rel):
            return []
        if data is None:
            return [(self._read_file(rel).id, None, op)]
        return [(self._read_file(rel, data).id, rel, op)]

    def write_text(self: "Vault", relpath: str, text: str, *, exists: bool | None = None,
                   if_match: str | None = None, author: "str | Identity | None" = None,
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
        who = self._author(author)
        rel = check_relpath(relpath)
        if rel.split("/", 1)[0] not in self.config.tiers or "/" not in rel:
            raise InvalidPath(f"{rel!r} is not inside a tier folder ({', '.join(self.config.tiers)})")
        if rel.rsplit("/", 1)[-1] == _KEEP:
            raise InvalidPath(f"{rel!r} is reserved (it keeps an empty tier folder in git)")
        data = self._file_data(text)
        with self.lock.hold():
            target = inside(self.root, rel)
            if target.is_symlink():
                raise InvalidPath(f"{rel} is a symbolic link; gitmem does not write through links")
            if target.is_dir():
                raise Conflict(f"{rel} is a folder", hint="Write to a file path inside it.")
            for parent in target.parents:
                if parent == self.root:
                    break
                if parent.exists() and not parent.is_dir():
                    raise Conflict(f"cannot create {rel}: {parent.relative_to(self.root).as_posix()} is a file")
            existed = target.is_file()
            if exists is False and existed:
                raise Conflict(f"{rel} already exists")
            if exists is True and not existed:
                raise NotFound(f"no file at {rel}")
            if if_match is not None and (not existed or self.read_text(rel) != if_match):
                raise Conflict(f"{rel} changed since it was read", hint="Read it again and redo the edit.")
            if existed:
                self._guard_file(rel, "overwrite")
                if target.read_bytes() == data:
                    return FileWrite([rel], None, False, self._problems(rel, data))
            op = "update" if existed else "add"
            done = self._commit([FileChange(rel, data)], subject or f"{'write' if existed else 'create'}: {rel}",
                                op, self._touch(rel, data, op), author=who)
        return FileWrite([rel], done.sha, not existed, self._problems(rel, data))

    def _problems(self: "Vault", rel: str, data: bytes) -> list[str]:
        return list(self._read_file(rel, data).problems) if self.is_memory_path(rel) else []

    def _files_at(self: "Vault", rel: str) -> list[str]:
        """The file at ``rel``, or every file under the folder ``rel`` (none: NotFound)."""
        target = inside(self.root, rel)
        if target.is_file() and not target.is_symlink():
            return [rel]
        if target.is_dir():
            files = self.list_files(rel)
            keep = [p for p in self._tracked_under(rel) if p.endswith("/" + _KEEP)]
            return files + keep
        raise NotFound(f"no file or folder at {rel}")

    def _tracked_under(self: "Vault", rel: str) -> list[str]:
        return [p for p in self.git.list_tree(self.git.head()) if p.startswith(rel + "/")]

    def remove_path(self: "Vault", relpath: str, *, author: "str | Identity | None" = None) -> FileWrite:
        """Remove a file, or a folder with everything in it, as one commit.

        A tier folder itself cannot be removed.  Removed files stay in git
        history (``gitmem restore``).  Protected memories are refused.
        """
        who = self._author(author)
        rel = check_relpath(relpath)
        if rel in self.config.tiers:
            raise InvalidPath(f"{rel!r} is a tier folder; it cannot be removed")
        if rel.split("/", 1)[0] not in self.config.tiers:
            raise NotFound(f"no file or folder at {rel}")
        with self.lock.hold():
            paths = self._files_at(rel)
            for path in paths:
                self._guard_file(path, "delete")
            touched = [t for p in paths for t in self._touch(p, None, "delete")]
            subject = f"delete: {rel}" + (f" ({len(paths)} files)" if len(paths) > 1 else "")
            done = self._commit([FileChange(p, None) for p in paths], subject, "delete", touched, author=who)
        return FileWrite(paths, done.sha)

    def rename_path(self: "Vault", old: str, new: str, *, author: "str | Identity | None" = None) -> FileWrite:
        """Rename (move) a file or folder as one commit of tracked renames.

        Never overwrites: the destination must not exist.  Protected memories
        are refused.  A file without an ``id`` in its frontmatter gets a new
        path-derived id (its history before the rename stays under the old one).
        """
        who = self._author(author)
        src, dst = check_relpath(old), check_relpath(new, what="new path")
        for rel in (src, dst):
            if rel in self.config.tiers:
                raise InvalidPath(f"{rel!r} is a tier folder; it cannot be renamed")
            if rel.split("/", 1)[0] not in self.config.tiers:
                raise InvalidPath(f"{rel!r} is not inside a tier folder ({', '.join(self.config.tiers)})")
        if dst == src or dst.startswith(src + "/"):
            raise InvalidPath(f"cannot move {src} into itself")
        with self.lock.hold():
            target = inside(self.root, dst)
            if target.exists() or target.is_symlink():
                raise Conflict(f"{dst} already exists", hint="Pick a new name; rename never overwrites.")
            paths = [p for p in self._files_at(src) if not p.endswith("/" + _KEEP)]
            changes: list[FileChange] = []
            touched: list[tuple[str, str | None, str]] = []
            for path in paths:
                self._guard_file(path, "rename")
                moved = dst + path[len(src):]
                data = (self.root / path).read_bytes()
                changes += [FileChange(path, None), FileChange(moved, data)]
                touched += self._touch(moved, data, "move")
            done = self._commit(changes, f"rename: {src} -> {dst}", "move", touched, author=who)
        return FileWrite([dst + p[len(src):] for p in paths], done.sha)
