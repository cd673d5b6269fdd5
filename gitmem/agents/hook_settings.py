"""gitmem's entries in an agent's JSON settings: hook handlers and the MCP server entry.

Two hook layouts exist.  ``grouped`` (Claude Code, Codex CLI, Gemini CLI)::

    {"hooks": {"SessionStart": [{"matcher": "...", "hooks": [{"type": "command", "command": "..."}]}]}}

and ``flat`` (Cursor, whose file also carries ``"version": 1``)::

    {"version": 1, "hooks": {"sessionStart": [{"command": "..."}]}}

gitmem recognises its own handlers by their command (``gitmem agent hook AGENT ...``,
whatever the vault or options), so a reinstall replaces them where they stand and an
uninstall removes them and nothing else.  These functions work on parsed JSON; reading
and writing the files as their owner keeps them is :mod:`gitmem.agents.settings_files`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import Conflict, InvalidInput

__all__ = ["is_our_handler", "is_our_mcp", "merge_hooks", "remove_hooks", "found_hooks", "merge_mcp",
           "remove_mcp", "LAYOUTS"]

LAYOUTS = ("grouped", "flat")


def is_our_handler(handler: Any, agent: str) -> bool:
    """A hook handler gitmem installed for ``agent`` (whatever its vault or options)."""
    if not isinstance(handler, dict) or handler.get("type", "command") != "command":
        return False
    command = handler.get("command")
    return isinstance(command, str) and re.search(
        rf"(^|[\s/'\"])gitmem['\"]?\s+agent\s+hook\s+{re.escape(agent)}(\s|$)", command) is not None


def is_our_mcp(entry: Any) -> bool:
    """An MCP server entry that runs ``gitmem mcp`` (``gitmem`` or ``python -m gitmem``)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return False
    args = entry.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return False
    argv = [entry["command"], *args]
    for i, token in enumerate(argv):
        if Path(token).name in ("gitmem", "gitmem.exe") or (token == "gitmem" and i and argv[i - 1] == "-m"):
            return i + 1 < len(argv) and argv[i + 1] == "mcp"
    return False


def _section(data: dict[str, Any], key: str, where: Path) -> dict[str, Any] | None:
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise InvalidInput(f"{where}: '{key}' is a {type(value).__name__}, not an object",
                           hint="Fix the file by hand; gitmem changed nothing.")
    return value


def _handler_lists(hooks: dict[str, Any], event: str, layout: str) -> list[list[Any]]:
    """The lists of handlers ``event`` holds: one per group (grouped), or the event's own."""
    entries = hooks.get(event, [])
    if not isinstance(entries, list):
        return []
    if layout == "flat":
        return [entries]
    return [group["hooks"] for group in entries
            if isinstance(group, dict) and isinstance(group.get("hooks"), list)]


def _checked_hooks(out: dict[str, Any], where: Path, create: bool) -> dict[str, Any] | None:
    hooks = _section(out, "hooks", where)
    if hooks is None and create:
        hooks = out["hooks"] = {}
    for event, entries in (hooks or {}).items():
        if not isinstance(entries, list) and event not in ("enabled", "disabled"):
            raise InvalidInput(f"{where}: hooks.{event} is not a list",
                               hint="Fix the file by hand; gitmem changed nothing.")
    return hooks


def merge_hooks(settings: dict[str, Any], agent: str, handlers: Mapping[str, dict[str, Any]],
                where: Path = Path("settings.json"), *, layout: str = "grouped") -> dict[str, Any]:
    """``settings`` with one gitmem handler per event in ``handlers`` (event name ->
    handler object).  An existing gitmem handler is replaced where it stands (so a second
    install changes nothing), duplicates and handlers for other events dropped; every
    other key and handler is kept as it was.  A ``flat`` file gets ``"version": 1`` when
    it has none."""
    out = json.loads(json.dumps(settings))  # a deep copy: the caller's dict stays the "before"
    if layout == "flat" and "version" not in out:
        out = {"version": 1, **out}
    hooks = _checked_hooks(out, where, create=True)
    assert hooks is not None
    for event, ours in handlers.items():
        placed = False
        for entries in _handler_lists(hooks, event, layout):
            kept = []
            for handler in entries:
                if is_our_handler(handler, agent):
                    if not placed:
                        kept.append(ours)
                        placed = True
                else:
                    kept.append(handler)
            entries[:] = kept
        if not placed:
            hooks.setdefault(event, []).append(ours if layout == "flat" else {"hooks": [ours]})
    # Handlers left over from an install with other events go; emptied groups with them.
    _drop_handlers(hooks, agent, keep_events=set(handlers), layout=layout)
    return out


def _drop_handlers(hooks: dict[str, Any], agent: str, keep_events: set[str], layout: str) -> bool:
    removed = False
    for event in list(hooks):
        if event in keep_events or not isinstance(hooks[event], list):
            continue
        entries = []
        for entry in hooks[event]:
            if layout == "flat":
                if is_our_handler(entry, agent):
                    removed = True
                    continue
            elif isinstance(entry, dict) and isinstance(entry.get("hooks"), list):
                kept = [h for h in entry["hooks"] if not is_our_handler(h, agent)]
                if len(kept) != len(entry["hooks"]):
                    removed = True
                    if not kept:
                        continue  # the group held only gitmem's handler
                    entry = dict(entry, hooks=kept)
            entries.append(entry)
        if entries:
            hooks[event] = entries
        elif hooks[event]:
            del hooks[event]  # emptied by us; an event the user left empty stays
    return removed


def remove_hooks(settings: dict[str, Any], agent: str, where: Path = Path("settings.json"), *,
                 layout: str = "grouped") -> tuple[dict[str, Any], bool]:
    """``settings`` without gitmem's handlers for ``agent`` (and without the groups,
    events and ``hooks`` object that only they filled), and whether any were found."""
    out = json.loads(json.dumps(settings))
    hooks = _checked_hooks(out, where, create=False)
    if not hooks:
        return out, False
    removed = _drop_handlers(hooks, agent, keep_events=set(), layout=layout)
    if removed and not hooks:
        del out["hooks"]
    return out, removed


def found_hooks(settings: dict[str, Any], agent: str, *, layout: str = "grouped") -> dict[str, str]:
    """gitmem's hook commands for ``agent`` in ``settings``: event name -> command."""
    hooks = settings.get("hooks")
    found: dict[str, str] = {}
    if not isinstance(hooks, dict):
        return found
    for event in hooks:
        for entries in _handler_lists(hooks, event, layout):
            for handler in entries:
                if is_our_handler(handler, agent):
                    found[event] = handler["command"]
    return found


def merge_mcp(data: dict[str, Any], name: str, entry: dict[str, Any],
              where: Path = Path(".mcp.json")) -> dict[str, Any]:
    """``data`` with ``mcpServers.<name>`` set to ``entry``; refuses to replace a
    server of that name that is not gitmem's."""
    out = json.loads(json.dumps(data))
    servers = _section(out, "mcpServers", where)
    if servers is None:
        servers = out["mcpServers"] = {}
    if name in servers and not is_our_mcp(servers[name]):
        raise Conflict(f"{where}: an MCP server named {name!r} exists and is not gitmem's",
                       hint="Pick another name with --mcp-name, or skip it with --no-mcp.")
    if name in servers:
        # Ours already: update the command in place, keep what the user added (env ...).
        servers[name] = {**servers[name], **{k: v for k, v in entry.items() if k != "env"}}
    else:
        servers[name] = entry
    return out


def remove_mcp(data: dict[str, Any], name: str,
               where: Path = Path(".mcp.json")) -> tuple[dict[str, Any], bool]:
    """``data`` without gitmem's ``mcpServers.<name>``, and whether it was there."""
    out = json.loads(json.dumps(data))
    servers = _section(out, "mcpServers", where)
    if not servers or name not in servers or not is_our_mcp(servers[name]):
        return out, False
    del servers[name]  # an emptied "mcpServers" stays: it may have been there before
    return out, True
