"""An agent's JSON settings files, merged the way their owner keeps them.

``gitmem agent install`` adds its entries to files a person owns (``settings.json``,
``.mcp.json``) and ``uninstall`` takes them out again.  What the person has there is
theirs: unrelated keys stay, in order, with the file's indentation and line endings;
every number gitmem does not change keeps its exact text (``1e400`` stays ``1e400``,
never ``Infinity``, which the agent could not read); a file that is a symbolic link
(a dotfiles setup) is written through the link to its target, which stays a link; a
path that is not a regular file (a FIFO, a folder, a device) is refused before
anything is read from it.  Every write is atomic and the old bytes are backed up
first (``<file>.gitmem-backup``, kept from the first install).

The same reading and writing serve files that are not JSON (Codex's ``config.toml``,
:mod:`gitmem.agents.codex_toml`): :func:`read_regular_text`, :func:`write_through`,
:func:`backup_file`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidInput

__all__ = ["FileResult", "PlannedFile", "load_json_object", "apply_plan", "restore_backup", "BACKUP_SUFFIX",
           "read_regular_text", "write_through", "backup_file", "backup_path"]

BACKUP_SUFFIX = ".gitmem-backup"
#: The objects gitmem adds its entries to (an empty one may be gone after an uninstall).
MANAGED_KEYS = ("hooks", "mcpServers")


@dataclass
class FileResult:
    """What happened to one configuration file."""

    path: Path
    action: str                     # created | updated | unchanged | removed | restored | absent | manual
    backup: Path | None = None
    text: str | None = None         # manual: the exact text to add (or remove) by hand; gitmem left the file

    def to_dict(self) -> dict[str, Any]:
        out = {"path": str(self.path), "action": self.action,
               "backup": str(self.backup) if self.backup else None}
        if self.text is not None:
            out["by_hand"] = self.text
        return out


@dataclass
class PlannedFile:
    """A settings file as read (``text``: None when it does not exist; ``before``: its
    JSON object) and what it should hold (``after``; None: delete it)."""

    path: Path
    text: str | None
    before: dict[str, Any]
    after: dict[str, Any] | None = None
    numbers: str = ""               # the mark of the numbers kept as written (see _kept_number)


def _target(path: Path) -> Path:
    """Where ``path``'s bytes live: the file a symbolic link (or a chain of them) points
    to, so a write replaces the target and leaves the link in place."""
    return path.resolve() if path.is_symlink() else path


def read_regular_text(path: Path, *, encoding: str = "utf-8") -> str | None:
    """The text of ``path`` (through a symbolic link), or None when nothing is there.
    Refuses, reading nothing, a path that is not a regular file (a FIFO would block the
    read forever), a link to nothing, and bytes that are not text in ``encoding``."""
    real = _target(path)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise InvalidInput(f"{path} is a link to {real}, which does not exist",
                               hint="Create the target (or remove the link); gitmem changed nothing.") from None
        return None
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise InvalidInput(f"{path} is not a regular file", hint="Move it away and run the command again; "
                                                                "gitmem changed nothing.")
    try:
        raw = real.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError:
        raise InvalidInput(f"{path} is not UTF-8 text",
                           hint="Fix or move the file; gitmem changed nothing.") from None


def load_json_object(path: Path, *, add_by_hand: str | None = None) -> PlannedFile:
    """Read a JSON object file; refuse (and touch nothing) if it is not one.  For a file
    its agent reads as JSON with comments (which a merge could not keep), ``add_by_hand``
    is the text the refusal tells the person to add themselves."""
    text = read_regular_text(path, encoding="utf-8-sig")
    if text is None:
        return PlannedFile(path, None, {})
    if not text.strip():
        return PlannedFile(path, text, {})
    mark = secrets.token_hex(8)
    try:
        data = json.loads(text, parse_float=lambda s: _kept_number(mark, s),
                          parse_int=lambda s: int(s) if str(int(s)) == s else _kept_number(mark, s),
                          parse_constant=lambda s: _kept_number(mark, s))
    except json.JSONDecodeError as exc:
        hint = ("Fix the file (or move it away) and run the command again; gitmem changed nothing."
                if add_by_hand is None else
                "gitmem changed nothing: it cannot merge into a file with comments without losing them. "
                f"Add this to {path.name} yourself (or remove the comments and run the command again):\n"
                + add_by_hand)
        raise InvalidInput(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
                           hint=hint) from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{path} holds a JSON {type(data).__name__}, not an object",
                           hint="Fix the file (or move it away); gitmem changed nothing.")
    return PlannedFile(path, text, data, numbers=mark)


def _kept_number(mark: str, text: str) -> str:
    """A number whose text must be written back as it was (a float, ``-0``, a constant):
    carried through the merge as a string no JSON text can hold (it starts with a NUL,
    which a JSON string can only hold escaped), put back by :func:`_render`."""
    return f"\0{mark}:{text}\0"


def _indent_of(text: str | None) -> int | str:
    """The indentation the file already uses, so a merge does not reformat it all."""
    match = re.search(r"\n([ \t]+)\S", text or "")
    if not match:
        return 2
    unit = match.group(1)
    return unit if "\t" in unit else len(unit)


def _render(plan: PlannedFile) -> str:
    assert plan.after is not None
    out = json.dumps(plan.after, indent=_indent_of(plan.text), ensure_ascii=False) + "\n"
    if plan.numbers:
        out = re.sub(rf'"\\u0000{plan.numbers}:([^"\\]*)\\u0000"', lambda m: m.group(1), out)
    return out.replace("\n", "\r\n") if plan.text and "\r\n" in plan.text else out


def apply_plan(plan: PlannedFile, *, keep_backup: bool = False) -> FileResult:
    """Write ``plan``'s new content (or delete the file), backing the old bytes up first.
    ``keep_backup``: an existing backup is the file as it was before gitmem's entries
    were added, and is kept rather than replaced by a version holding them."""
    path = plan.path
    if plan.after is None:
        if plan.text is None:
            return FileResult(path, "absent")
        saved = _backup(path, keep_backup)
        path.unlink()   # a link goes, its target stays
        return FileResult(path, "removed", saved)
    if plan.text is not None and plan.after == plan.before:
        return FileResult(path, "unchanged")
    backup = _backup(path, keep_backup) if plan.text is not None else None
    write_through(path, _render(plan).encode("utf-8"))
    return FileResult(path, "created" if plan.text is None else "updated", backup)


def write_through(path: Path, data: bytes) -> None:
    """Replace ``path``'s bytes atomically, through a symbolic link (the link stays), with
    the file's permissions (a new file gets 0644)."""
    real = _target(path)
    try:
        mode = real.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    _write_atomic(real, data, mode)


def backup_file(path: Path, keep: bool = False) -> Path:
    """Copy ``path``'s bytes to ``<path>.gitmem-backup`` (an existing backup is kept when
    ``keep``: it is the file as it was before gitmem's first install); returns the backup."""
    return _backup(path, keep)


def backup_path(path: Path) -> Path:
    """Where :func:`backup_file` keeps ``path``'s bytes."""
    return _backup_path(path)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)  # atomic: the agent never reads half a settings file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def _backup(path: Path, keep: bool = False) -> Path:
    backup = _backup_path(path)
    if not (keep and backup.exists()):
        shutil.copyfile(path, backup)   # the bytes (through a link), never the link itself
        shutil.copymode(path, backup)
    return backup


def restore_backup(plan: PlannedFile, added: dict[str, Any] | None = None) -> FileResult | None:
    """Put back the bytes the file had before install, when removing gitmem's entries
    leaves exactly what its backup holds (the user changed nothing else since): byte
    for byte, the backup then removed.  ``added``: top-level keys install adds when the
    file has none (Cursor's ``"version": 1``), not counted when the backup lacks them.
    None when the backup does not match (the entries are then removed from the file as
    it is now)."""
    backup = _backup_path(plan.path)
    try:
        original = load_json_object(backup)
        data = backup.read_bytes()
    except (InvalidInput, OSError):
        return None
    after = dict(plan.after or {})
    for key, value in (added or {}).items():
        if key not in original.before and after.get(key) == value:
            del after[key]
    # An empty "hooks" / "mcpServers" is the same as none: the person's empty one goes with
    # gitmem's last entry in it, and one gitmem added stays behind emptied.
    before = dict(original.before)
    for key in MANAGED_KEYS:
        if before.get(key) == {} and key not in after:
            del before[key]
        elif after.get(key) == {} and key not in before:
            del after[key]
    if original.text is None or _plain(before, original.numbers) != _plain(after, plan.numbers):
        return None
    real = _target(plan.path)
    _write_atomic(real, data, real.stat().st_mode & 0o7777)
    backup.unlink()
    return FileResult(plan.path, "restored")


def _plain(data: Any, mark: str) -> Any:
    """``data`` with its kept numbers' marks taken out, to compare two readings."""
    if isinstance(data, dict):
        return {k: _plain(v, mark) for k, v in data.items()}
    if isinstance(data, list):
        return [_plain(v, mark) for v in data]
    if mark and isinstance(data, str) and data.startswith(f"\0{mark}:") and data.endswith("\0"):
        return ("number", data[len(mark) + 2:-1])
    return data
