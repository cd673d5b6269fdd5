"""Codex's ``config.toml``: gitmem's MCP server table, added without reformatting the file.

Python reads TOML (``tomllib``) but writes none, and a TOML rewrite would lose a
person's comments, key order and spelling anyway.  So gitmem never rewrites the file: it
**appends** one block of text at the end,

.. code-block:: toml

    # >>> gitmem mcp_servers.gitmem: added by `gitmem agent install codex`, removed by `gitmem agent uninstall codex`
    [mcp_servers.gitmem]
    command = "/usr/bin/python3"
    args = ["-m", "gitmem", "mcp", "--vault", "/home/me/memory", "--profile", "gitmem", "--agent", "codex"]
    # <<< gitmem mcp_servers.gitmem

after checking that ``mcp_servers.<name>`` is new and that the file with the block parses
to exactly the file's own values plus that one server.  When it would not (the name is
taken by hand, ``mcp_servers`` is an inline table, the file does not end cleanly ...),
nothing is written and the block is given to the person to add (``manual``).  Uninstall
removes exactly the appended text, the newline put before it included, so the file's
bytes are what they were; a block edited since (no longer gitmem's server, or no longer
parsing) is left for the person.  Reads and writes go through
:mod:`gitmem.agents.settings_files`: a symbolic link is written through, a path that is
not a regular file is refused, the old bytes are backed up first.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Conflict, InvalidInput
from .settings_files import FileResult, backup_file, backup_path, read_regular_text, write_through

__all__ = ["TomlPlan", "toml_block", "plan_toml_install", "plan_toml_uninstall", "apply_toml", "read_toml_server",
           "block_span"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _string(value: str) -> str:
    """``value`` as a TOML basic string (every control character escaped)."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else _string(name)


def _markers(name: str) -> tuple[str, str]:
    key = f"mcp_servers.{_key(name)}"
    return (f"# >>> gitmem {key}: added by `gitmem agent install codex`, removed by `gitmem agent uninstall codex`",
            f"# <<< gitmem {key}")


def toml_block(name: str, entry: dict[str, Any], newline: str = "\n") -> str:
    """The text gitmem appends for MCP server ``name`` running ``entry`` (``command`` and
    ``args``), between its marker comments."""
    begin, end = _markers(name)
    lines = [begin, f"[mcp_servers.{_key(name)}]", f"command = {_string(entry['command'])}",
             "args = [" + ", ".join(_string(a) for a in entry["args"]) + "]", end]
    return newline.join(lines) + newline


def block_span(text: str, name: str) -> tuple[int, int] | None:
    """Where gitmem's block for ``name`` is in ``text`` (from its begin marker to the end
    of its end marker's line), or None."""
    begin, end = _markers(name)
    match = re.search(rf"(?m)^{re.escape(begin)}\r?\n(?:.*\r?\n)*?{re.escape(end)}(?:\r?\n|\Z)", text)
    return match.span() if match else None


def _plain(value: Any) -> Any:
    """``value`` for comparing two readings: floats by their text (``nan`` equals ``nan``)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else repr(value))
    return value


def _parse(text: str) -> dict[str, Any] | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def _servers(data: dict[str, Any]) -> dict[str, Any]:
    servers = data.get("mcp_servers")
    return servers if isinstance(servers, dict) else {}


@dataclass
class TomlPlan:
    """``config.toml`` as read (``text``: None when absent) and what it should hold
    (``after``; None: delete the file; equal to ``text``: unchanged).  ``manual``: the
    text the person must add, the file left alone."""

    path: Path
    text: str | None
    after: str | None
    manual: str | None = None
    ours_before: bool = False       # gitmem's block was there already (a reinstall keeps the first backup)


def _read(path: Path) -> tuple[str | None, dict[str, Any]]:
    text = read_regular_text(path)
    if text is None:
        return None, {}
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path} is not valid TOML ({exc})",
                           hint="Fix the file (or move it away) and run the command again; "
                                "gitmem changed nothing.") from None


def plan_toml_install(path: Path, name: str, entry: dict[str, Any],
                      is_ours: Callable[[Any], bool]) -> TomlPlan:
    """How to add MCP server ``name`` (``entry``) to the ``config.toml`` at ``path``.
    Refuses (:class:`Conflict`) to shadow a server of that name that is not gitmem's; one
    of gitmem's added by hand is left as it is."""
    text, data = _read(path)
    newline = "\r\n" if text and "\r\n" in text else "\n"
    block = toml_block(name, entry, newline)
    span = block_span(text, name) if text else None
    if span is not None and text is not None:   # gitmem's own block: replaced where it stands
        after = text[:span[0]] + block + text[span[1]:]
        parsed = _parse(after)
        if parsed is not None and _plain(_servers(parsed).get(name)) == _plain(entry):
            return TomlPlan(path, text, after, ours_before=True)
        return TomlPlan(path, text, text, manual=block, ours_before=True)
    servers = _servers(data)
    if name in servers:
        if is_ours(servers[name]):
            return TomlPlan(path, text, text)   # registered by hand: the person's, kept as it is
        raise Conflict(f"{path}: an MCP server named {name!r} exists and is not gitmem's",
                       hint="Pick another name with --mcp-name, or skip it with --no-mcp.")
    after = (text + newline + block) if text else block
    expected = dict(data, mcp_servers=dict(servers, **{name: entry}))
    parsed = _parse(after)
    if parsed is None or _plain(parsed) != _plain(expected):
        return TomlPlan(path, text, text, manual=block)
    return TomlPlan(path, text, after)


def plan_toml_uninstall(path: Path, name: str, is_ours: Callable[[Any], bool]) -> tuple[TomlPlan, bool]:
    """How to take gitmem's block for ``name`` out of the ``config.toml`` at ``path``, and
    whether it is there.  The block and the newline install put before it go; a block
    edited since so that it is no longer gitmem's server is left (``manual`` says so)."""
    text = read_regular_text(path)
    span = block_span(text, name) if text else None
    if text is None or span is None:
        return TomlPlan(path, text, text), False
    start, end = span
    if start and text[start - 1] == "\n":
        start -= 2 if text[:start].endswith("\r\n") else 1
    block = _parse(text[span[0]:span[1]])
    after = text[:start] + text[end:]
    left = _parse(after)
    if block is None or not is_ours(_servers(block).get(name)) or left is None or name in _servers(left):
        return TomlPlan(path, text, text, manual=text[span[0]:span[1]]), False
    return TomlPlan(path, text, after), True


def apply_toml(plan: TomlPlan, *, keep_backup: bool = False, removing: bool = False) -> FileResult:
    """Write ``plan`` (backing the old bytes up first).  Removing: a file whose remaining
    text is its backup's gets the backup's bytes back (the backup goes); a file left
    empty is deleted."""
    path = plan.path
    if plan.manual is not None:
        return FileResult(path, "manual", text=plan.manual)
    if plan.after is None or plan.after == plan.text:
        return FileResult(path, "absent" if plan.text is None else "unchanged")
    if removing:
        saved = backup_path(path)
        original = read_regular_text(saved) if saved.is_file() else None
        if original == plan.after:   # the person's own bytes, as they were before install
            write_through(path, saved.read_bytes())
            saved.unlink()
            return FileResult(path, "restored")
        if not plan.after.strip():   # nothing but what install put there
            saved = backup_file(path)
            path.unlink()   # a link goes, its target stays
            return FileResult(path, "removed", saved)
    backup = backup_file(path, keep_backup) if plan.text is not None else None
    write_through(path, plan.after.encode("utf-8"))
    return FileResult(path, "created" if plan.text is None else "updated", backup)


def read_toml_server(path: Path, name: str) -> tuple[Any, bool]:
    """``mcp_servers.<name>`` of the ``config.toml`` at ``path`` (None when absent), and
    whether it is in gitmem's block; :class:`InvalidInput` for a file that is not TOML."""
    text, data = _read(path)
    return _servers(data).get(name), bool(text and block_span(text, name))
