"""The coding agents ``gitmem agent`` knows: where each keeps its configuration, what its
hook events are called, what a hook handler and an MCP server entry look like there, and
what a session-start hook must print.

Each agent's protocol is its own documented one:

* **Claude Code**: ``settings.json`` hooks (``SessionStart``, ``PreCompact``,
  ``SessionEnd``; timeouts in seconds), MCP servers in ``.mcp.json`` / ``~/.claude.json``,
  JSONL transcripts.
* **Codex CLI**: ``hooks.json`` next to its config layers (``.codex/`` in a project,
  ``~/.codex/`` or ``$CODEX_HOME``) with Claude Code's layout (``SessionStart``,
  ``PreCompact``, ``SessionEnd``; timeouts in seconds, ``SessionEnd`` capped at 3 s by
  Codex), MCP servers as ``[mcp_servers.<name>]`` tables of ``config.toml`` (TOML, see
  :mod:`gitmem.agents.codex_toml`), JSONL rollouts of ``{"type", "payload"}`` lines.
* **Gemini CLI**: ``settings.json`` hooks (``SessionStart``, ``PreCompress``,
  ``SessionEnd``; timeouts in milliseconds) and ``mcpServers`` in the same file, which
  Gemini reads as JSON with comments; its transcript is one JSON document (older
  releases) or JSONL records (newer ones).
* **Cursor**: ``hooks.json`` (``{"version": 1, "hooks": {"sessionStart": [{"command":
  ...}]}}``: one flat list of handlers per event, ``sessionStart``, ``preCompact``,
  ``sessionEnd``), MCP servers in ``.cursor/mcp.json`` / ``~/.cursor/mcp.json``; the
  session-start hook answers ``{"additional_context": ...}``; JSONL transcripts of
  ``{"role", "message"}`` lines (the CLI sends no ``transcript_path``: the transcript is
  looked up under ``~/.cursor/projects/``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidInput

__all__ = ["AgentSpec", "AGENTS", "agent_spec", "HOOK_VERBS", "SCOPES", "codex_home"]

SCOPES = ("project", "user")
HOOK_VERBS = ("session-start", "pre-compact", "session-end")


@dataclass(frozen=True)
class AgentSpec:
    """How one coding agent is configured: where its files are, what its events are called.

    ``events`` maps each gitmem hook verb the agent has an event for to that event's name
    (a verb it has no event for is not installed).  ``timeouts`` are in the agent's unit
    (``timeout_unit`` seconds each; None: gitmem writes no timeout), ``bounds`` the
    seconds gitmem answers within, under those timeouts."""

    name: str                      # the CLI name, also the default commit author
    display: str
    events: Mapping[str, str]      # hook verb -> the agent's event name
    timeouts: Mapping[str, int]    # hook verb -> timeout, in the agent's unit
    bounds: Mapping[str, float]    # hook verb -> seconds gitmem answers within (under timeouts)
    settings: Callable[[str, Path], Path]
    mcp_file: Callable[[str, Path], Path]
    hook_layout: str = "grouped"   # grouped: {event: [{matcher?, hooks: [handler]}]}; flat: {event: [handler]}
    timeout_unit: float | None = 1.0
    mcp_format: str = "json"       # json: "mcpServers" object; toml: [mcp_servers.<name>] tables
    mcp_type: bool = False         # the entry carries "type": "stdio"
    jsonc: bool = False            # the agent reads its settings as JSON with comments
    transcript: str = "claude"     # the transcript reader (gitmem.agents.transcripts)
    context_key: str = "hookSpecificOutput"   # how session-start answers (see session_start_output)
    handler_extra: Callable[[str], dict[str, Any]] = field(default=lambda verb: {})
    notes: tuple[str, ...] = ()    # what the agent cannot do, or asks of the person
    project_notes: tuple[str, ...] = ()

    def handler(self, verb: str, command: str) -> dict[str, Any]:
        """The hook handler object gitmem writes for ``verb``."""
        out: dict[str, Any] = {"type": "command", "command": command} if self.hook_layout == "grouped" \
            else {"command": command}
        if self.timeout_unit is not None:
            out["timeout"] = self.timeouts[verb]
        out.update(self.handler_extra(verb))
        return out

    def session_start_output(self, context: str) -> dict[str, Any]:
        """What the session-start hook prints (as JSON) to hand ``context`` to the model."""
        if self.context_key == "additional_context":
            return {"additional_context": context}
        return {"hookSpecificOutput": {"hookEventName": self.events["session-start"],
                                       "additionalContext": context}}

    def mcp_entry(self, argv: list[str]) -> dict[str, Any]:
        """The MCP server entry that runs ``argv`` over stdio."""
        entry: dict[str, Any] = {"type": "stdio"} if self.mcp_type else {}
        entry.update({"command": argv[0], "args": argv[1:]})
        if self.mcp_type:
            entry["env"] = {}
        return entry

    def notes_for(self, scope: str) -> list[str]:
        """What the person should know after installing in ``scope``."""
        return list(self.notes) + (list(self.project_notes) if scope == "project" else [])


def codex_home() -> Path:
    """Codex's home folder: ``$CODEX_HOME``, or ``~/.codex``."""
    home = os.environ.get("CODEX_HOME")
    return Path(home).expanduser() if home else Path.home() / ".codex"


def _in(project_dir: str, user: Callable[[], Path], name: str) -> Callable[[str, Path], Path]:
    """A file called ``name`` in the project's ``project_dir`` or the user's folder."""
    return lambda scope, project: user() / name if scope == "user" else project / project_dir / name


def _claude_mcp(scope: str, project: Path) -> Path:
    # User-scope servers live in ~/.claude.json (what `claude mcp add -s user` writes);
    # project-scope ones in the project's .mcp.json (shared; Claude asks before using them).
    return Path.home() / ".claude.json" if scope == "user" else project / ".mcp.json"


def _gemini_extra(verb: str) -> dict[str, Any]:
    # Gemini names a hook for `/hooks enable|disable NAME` and shows its description.
    return {"name": f"gitmem-{verb}",
            "description": "Load the gitmem memory" if verb == "session-start" else "Save a gitmem session note"}


def _codex_extra(verb: str) -> dict[str, Any]:
    return {"statusMessage": "gitmem: loading memory" if verb == "session-start" else "gitmem: saving a session note"}


AGENTS: dict[str, AgentSpec] = {
    "claude-code": AgentSpec(
        name="claude-code", display="Claude Code",
        events={"session-start": "SessionStart", "pre-compact": "PreCompact", "session-end": "SessionEnd"},
        # A hook answers within its bound whatever other processes hold (run_hook); the
        # timeout Claude Code is told leaves room above it, so it never kills a hook.
        timeouts={"session-start": 10, "pre-compact": 30, "session-end": 30},  # seconds
        bounds={"session-start": 5.0, "pre-compact": 20.0, "session-end": 20.0},
        settings=_in(".claude", lambda: Path.home() / ".claude", "settings.json"), mcp_file=_claude_mcp,
        mcp_type=True,
        project_notes=("Claude Code asks once before it starts a server from .mcp.json.",)),
    "codex": AgentSpec(
        name="codex", display="Codex CLI",
        events={"session-start": "SessionStart", "pre-compact": "PreCompact", "session-end": "SessionEnd"},
        # Codex caps a SessionEnd hook at 3 s (default 1 s): the note hook answers in time,
        # leaving a note it could not commit by then for the next note hook.
        timeouts={"session-start": 10, "pre-compact": 30, "session-end": 3},  # seconds
        bounds={"session-start": 5.0, "pre-compact": 20.0, "session-end": 2.75},
        settings=_in(".codex", codex_home, "hooks.json"), mcp_file=_in(".codex", codex_home, "config.toml"),
        mcp_format="toml", transcript="codex", handler_extra=_codex_extra,
        notes=("Codex runs a hook only once you trust it: review gitmem's hooks in Codex's /hooks "
               "browser (again after a reinstall changes their command).",
               "Codex runs SessionEnd hooks from release 0.146 on, for at most 3 s; earlier "
               "releases save notes before compaction only."),
        project_notes=("Codex reads a project's .codex/ folder only once you trust the project.",)),
    "gemini": AgentSpec(
        name="gemini", display="Gemini CLI",
        events={"session-start": "SessionStart", "pre-compact": "PreCompress", "session-end": "SessionEnd"},
        timeouts={"session-start": 10_000, "pre-compact": 30_000, "session-end": 30_000},  # milliseconds
        timeout_unit=0.001,
        bounds={"session-start": 5.0, "pre-compact": 20.0, "session-end": 20.0},
        settings=_in(".gemini", lambda: Path.home() / ".gemini", "settings.json"),
        mcp_file=_in(".gemini", lambda: Path.home() / ".gemini", "settings.json"),
        jsonc=True, transcript="gemini", handler_extra=_gemini_extra,
        notes=("Gemini CLI does not wait for SessionEnd hooks (best effort): a note it cut "
               "short is kept and committed by the next note hook.",),
        project_notes=("Gemini CLI warns before it runs a project hook whose command is new, and "
                       "reads a project's .gemini/settings.json only in a trusted folder.",)),
    "cursor": AgentSpec(
        name="cursor", display="Cursor",
        events={"session-start": "sessionStart", "pre-compact": "preCompact", "session-end": "sessionEnd"},
        timeouts={}, timeout_unit=None,   # Cursor's own default timeout; gitmem answers within its bounds
        bounds={"session-start": 5.0, "pre-compact": 20.0, "session-end": 20.0},
        settings=_in(".cursor", lambda: Path.home() / ".cursor", "hooks.json"),
        mcp_file=_in(".cursor", lambda: Path.home() / ".cursor", "mcp.json"),
        hook_layout="flat", transcript="cursor", context_key="additional_context",
        notes=("Cursor also runs Claude Code's hooks when its third-party hooks setting is on: "
               "install gitmem for one of the two there, not both.",),
        project_notes=("Cursor runs a project's hooks only in a trusted workspace.",)),
}


def agent_spec(name: str) -> AgentSpec:
    """The :class:`AgentSpec` called ``name``, or :class:`InvalidInput`."""
    try:
        return AGENTS[name]
    except KeyError:
        raise InvalidInput(f"unknown agent {name!r}",
                           hint=f"Supported: {', '.join(AGENTS)}.") from None
