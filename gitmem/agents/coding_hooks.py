"""Session hooks for coding agents: ``gitmem agent install|uninstall|status|hook``.

A coding agent (Claude Code) forgets everything between sessions.  Its own hook
system fixes that when it is told to run gitmem at the right moments:

* **SessionStart**: ``gitmem agent hook claude-code session-start`` prints the
  vault's protected context and ``MEMORY.md`` (bounded: Claude Code replaces an
  ``additionalContext`` value over 10,000 characters by a short preview) as
  ``{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": ...}}``;
* **PreCompact** and **SessionEnd**: ``... pre-compact`` / ``... session-end`` read
  ``transcript_path`` from the hook's stdin JSON and save the last user/assistant
  turns as the session's one ``episodic`` memory in ``short_term`` (one commit,
  authored by the agent; a later hook of the session updates it).  A hook never
  fails the agent's session: on any error it prints one line to stderr and exits 0.
  It answers within a bound (:attr:`AgentSpec.bounds`) whatever other processes
  hold: reads never wait for the vault lock, and a note that cannot be committed in
  time stays on disk for the next note hook (:func:`spool_session_note`).

:func:`install` merges those hooks into the agent's ``settings.json`` and
registers ``gitmem mcp`` in its MCP configuration; :func:`uninstall` removes
exactly those entries, putting back the file's bytes from before the install when
nothing else changed.  The files are merged as their owner keeps them
(:mod:`gitmem.agents.settings_files`).

Which agents: Claude Code only.  Its hook events, settings layering
(``~/.claude/settings.json``, ``.claude/settings.json``) and MCP files
(``.mcp.json``, ``~/.claude.json``) are documented and stable, and its
transcripts are JSONL.  Gemini CLI's hooks are documented but newer (and its
transcript is a different JSON document); Codex CLI keeps its configuration in
TOML, which cannot be merged without reformatting it; Cursor's hooks use another
schema and are in beta.  Those can use ``gitmem mcp`` directly.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Conflict, InvalidInput, NotAVault, NotFound
from ..store.spool import SPOOL_DIR, session_source, spool_file
from .settings_files import FileResult, apply_plan, load_json_object, restore_backup

if TYPE_CHECKING:  # pragma: no cover
    from ..vault import Vault

__all__ = [
    "AgentSpec", "AGENTS", "agent_spec", "HOOK_VERBS", "SCOPES", "DEFAULT_MAX_CHARS", "DEFAULT_MCP_NAME",
    "FileResult", "InstallReport", "install", "uninstall", "status",
    "config_paths", "hook_command", "mcp_entry", "merge_hooks", "remove_hooks",
    "merge_mcp", "remove_mcp", "session_context", "transcript_turns", "save_session_note",
    "run_hook", "spool_session_note", "spooled_notes", "commit_spooled_notes",
]

#: Claude Code shows at most 10,000 characters of one ``additionalContext`` value
#: (the rest goes to a file the model is not told to read); stay under it.
DEFAULT_MAX_CHARS = 9000
DEFAULT_MCP_NAME = "gitmem"
SCOPES = ("project", "user")
HOOK_VERBS = ("session-start", "pre-compact", "session-end")

# A session note: the last few turns, each clipped, the whole bounded.
NOTE_TURNS = 10
NOTE_TURN_CHARS = 1200
NOTE_MAX_CHARS = 6000
# Only the end of a transcript is read: it can be hundreds of megabytes.
TRANSCRIPT_TAIL_BYTES = 4 * 1024 * 1024
STDIN_MAX_BYTES = 1024 * 1024


@dataclass(frozen=True)
class AgentSpec:
    """How one coding agent is configured: where its files are, what its events are called."""

    name: str                      # the CLI name, also the default commit author
    display: str
    events: Mapping[str, str]      # hook verb -> the agent's event name
    timeouts: Mapping[str, int]    # hook verb -> timeout, in the agent's unit
    bounds: Mapping[str, float]    # hook verb -> seconds gitmem answers within (under timeouts)
    settings: Callable[[str, Path], Path]
    mcp_file: Callable[[str, Path], Path]


def _claude_settings(scope: str, project: Path) -> Path:
    return Path.home() / ".claude" / "settings.json" if scope == "user" \
        else project / ".claude" / "settings.json"


def _claude_mcp(scope: str, project: Path) -> Path:
    # User-scope servers live in ~/.claude.json (what `claude mcp add -s user` writes);
    # project-scope ones in the project's .mcp.json (shared; Claude asks before using them).
    return Path.home() / ".claude.json" if scope == "user" else project / ".mcp.json"


AGENTS: dict[str, AgentSpec] = {
    "claude-code": AgentSpec(
        name="claude-code", display="Claude Code",
        events={"session-start": "SessionStart", "pre-compact": "PreCompact",
                "session-end": "SessionEnd"},
        # A hook answers within its bound whatever other processes hold (run_hook); the
        # timeout Claude Code is told leaves room above it, so it never kills a hook.
        timeouts={"session-start": 10, "pre-compact": 30, "session-end": 30},  # seconds
        bounds={"session-start": 5.0, "pre-compact": 20.0, "session-end": 20.0},
        settings=_claude_settings, mcp_file=_claude_mcp),
}


def agent_spec(name: str) -> AgentSpec:
    """The :class:`AgentSpec` called ``name``, or :class:`InvalidInput`."""
    try:
        return AGENTS[name]
    except KeyError:
        raise InvalidInput(f"unknown agent {name!r}",
                           hint=f"Supported: {', '.join(AGENTS)}.") from None


def config_paths(agent: str, scope: str, project: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """The files :func:`install` writes for ``agent`` in ``scope``: ``settings`` and ``mcp``."""
    spec = agent_spec(agent)
    if scope not in SCOPES:
        raise InvalidInput(f"unknown scope {scope!r}", hint="Use 'project' or 'user'.")
    root = Path(project or os.getcwd()).expanduser().absolute()
    return {"settings": spec.settings(scope, root), "mcp": spec.mcp_file(scope, root)}


# ------------------------------------------------------------- commands
def _gitmem_argv(python: str | None) -> list[str]:
    # The interpreter gitmem runs under now: the agent's shell may not have it on PATH.
    return [python or sys.executable, "-m", "gitmem"]


def hook_command(agent: str, verb: str, vault: str | os.PathLike[str], *,
                 max_chars: int = DEFAULT_MAX_CHARS, author: str | None = None,
                 python: str | None = None) -> str:
    """The shell command the agent runs for ``verb`` (quoted for a POSIX shell)."""
    argv = _gitmem_argv(python) + ["agent", "hook", agent, verb, "--vault", str(vault)]
    if verb == "session-start":
        argv += ["--max-chars", str(max_chars)]
    if author and author != agent:
        argv += ["--author", author]
    return shlex.join(argv)


def mcp_entry(agent: str, vault: str | os.PathLike[str], *, profile: str = "gitmem",
              author: str | None = None, python: str | None = None) -> dict[str, Any]:
    """The MCP server entry: ``gitmem mcp --vault DIR --profile P --agent NAME`` over stdio."""
    argv = _gitmem_argv(python) + ["mcp", "--vault", str(vault), "--profile", profile,
                                   "--agent", author or agent]
    return {"type": "stdio", "command": argv[0], "args": argv[1:], "env": {}}


def _is_our_handler(handler: Any, agent: str) -> bool:
    """A hook handler gitmem installed for ``agent`` (whatever its vault or options)."""
    if not isinstance(handler, dict) or handler.get("type") != "command":
        return False
    command = handler.get("command")
    return isinstance(command, str) and re.search(
        rf"(^|[\s/'\"])gitmem['\"]?\s+agent\s+hook\s+{re.escape(agent)}(\s|$)", command) is not None


def _is_our_mcp(entry: Any) -> bool:
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


# ------------------------------------------------------------- merging
def _section(data: dict[str, Any], key: str, where: Path) -> dict[str, Any] | None:
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise InvalidInput(f"{where}: '{key}' is a {type(value).__name__}, not an object",
                           hint="Fix the file by hand; gitmem changed nothing.")
    return value


def merge_hooks(settings: dict[str, Any], agent: str, commands: Mapping[str, str],
                timeouts: Mapping[str, int], where: Path = Path("settings.json")) -> dict[str, Any]:
    """``settings`` with one gitmem handler per event in ``commands`` (event name ->
    command).  An existing gitmem handler is replaced where it stands (so a second
    install changes nothing), duplicates and handlers for other events dropped;
    every other key and handler is kept as it was."""
    out = json.loads(json.dumps(settings))  # a deep copy: the caller's dict stays the "before"
    hooks = _section(out, "hooks", where)
    if hooks is None:
        hooks = out["hooks"] = {}
    for event, groups in list(hooks.items()):
        if not isinstance(groups, list):
            raise InvalidInput(f"{where}: hooks.{event} is not a list",
                               hint="Fix the file by hand; gitmem changed nothing.")
    for event, command in commands.items():
        ours = {"type": "command", "command": command, "timeout": timeouts[event]}
        placed = False
        for group in hooks.get(event, []):
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            kept = []
            for handler in group["hooks"]:
                if _is_our_handler(handler, agent):
                    if not placed:
                        kept.append(ours)
                        placed = True
                else:
                    kept.append(handler)
            group["hooks"] = kept
        if not placed:
            hooks.setdefault(event, []).append({"hooks": [ours]})
    # Handlers left over from an install with other events go; emptied groups with them.
    _drop_handlers(hooks, agent, keep_events=set(commands))
    return out


def _drop_handlers(hooks: dict[str, Any], agent: str, keep_events: set[str]) -> bool:
    removed = False
    for event in list(hooks):
        if event in keep_events or not isinstance(hooks[event], list):
            continue
        groups = []
        for group in hooks[event]:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                kept = [h for h in group["hooks"] if not _is_our_handler(h, agent)]
                if len(kept) != len(group["hooks"]):
                    removed = True
                    if not kept:
                        continue  # the group held only gitmem's handler
                    group = dict(group, hooks=kept)
            groups.append(group)
        if groups:
            hooks[event] = groups
        elif hooks[event]:
            del hooks[event]  # emptied by us; an event the user left empty stays
    return removed


def remove_hooks(settings: dict[str, Any], agent: str,
                 where: Path = Path("settings.json")) -> tuple[dict[str, Any], bool]:
    """``settings`` without gitmem's handlers for ``agent`` (and without the groups,
    events and ``hooks`` object that only they filled), and whether any were found."""
    out = json.loads(json.dumps(settings))
    hooks = _section(out, "hooks", where)
    if not hooks:
        return out, False
    removed = _drop_handlers(hooks, agent, keep_events=set())
    if removed and not hooks:
        del out["hooks"]
    return out, removed


def merge_mcp(data: dict[str, Any], name: str, entry: dict[str, Any],
              where: Path = Path(".mcp.json")) -> dict[str, Any]:
    """``data`` with ``mcpServers.<name>`` set to ``entry``; refuses to replace a
    server of that name that is not gitmem's."""
    out = json.loads(json.dumps(data))
    servers = _section(out, "mcpServers", where)
    if servers is None:
        servers = out["mcpServers"] = {}
    if name in servers and not _is_our_mcp(servers[name]):
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
    if not servers or name not in servers or not _is_our_mcp(servers[name]):
        return out, False
    del servers[name]  # an emptied "mcpServers" stays: it may have been there before
    return out, True


# ------------------------------------------------------------- install
@dataclass
class InstallReport:
    """What :func:`install` / :func:`uninstall` did."""

    agent: str
    scope: str
    vault: str | None
    files: list[FileResult] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    mcp_name: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(f.action in ("created", "updated", "removed", "restored") for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "scope": self.scope, "vault": self.vault,
                "changed": self.changed, "files": [f.to_dict() for f in self.files],
                "events": self.events, "mcp_server": self.mcp_name, "notes": self.notes}


def install(agent: str, vault: Vault | str | os.PathLike[str], *, scope: str = "project",
            project: str | os.PathLike[str] | None = None, max_chars: int = DEFAULT_MAX_CHARS,
            mcp: bool = True, mcp_name: str = DEFAULT_MCP_NAME, profile: str = "gitmem",
            author: str | None = None, python: str | None = None) -> InstallReport:
    """Write ``agent``'s hooks (and MCP server) for ``vault`` into its configuration.

    Both files are read and merged before either is written, so a bad file
    stops the install with nothing changed.  Running it again with the same
    arguments changes nothing; with other arguments it updates gitmem's entries
    in place.
    """
    spec = agent_spec(agent)
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 500:
        raise InvalidInput("max_chars must be an integer >= 500")
    if not mcp_name or not isinstance(mcp_name, str):
        raise InvalidInput("the MCP server name is empty")
    root = Path(vault if isinstance(vault, (str, os.PathLike)) else vault.root).expanduser().absolute()
    paths = config_paths(agent, scope, project)
    settings = load_json_object(paths["settings"])
    commands = {spec.events[verb]: hook_command(agent, verb, root, max_chars=max_chars,
                                                author=author, python=python)
                for verb in HOOK_VERBS}
    timeouts = {spec.events[verb]: spec.timeouts[verb] for verb in HOOK_VERBS}
    settings.after = merge_hooks(settings.before, agent, commands, timeouts, settings.path)
    plans = [settings]
    if mcp:
        servers = load_json_object(paths["mcp"])
        servers.after = merge_mcp(servers.before, mcp_name,
                                  mcp_entry(agent, root, profile=profile, author=author, python=python),
                                  servers.path)
        plans.append(servers)
    # Over gitmem's own entries (a reinstall), the backup made before the first install is kept.
    had = [remove_hooks(settings.before, agent, settings.path)[1]]
    if mcp:
        had.append(remove_mcp(plans[1].before, mcp_name, plans[1].path)[1])
    results = [apply_plan(p, keep_backup=k) for p, k in zip(plans, had, strict=True)]
    report = InstallReport(agent, scope, str(root), results, list(commands), mcp_name if mcp else None)
    if max_chars > 10_000:
        report.notes.append(f"{spec.display} shows at most 10,000 characters of session-start "
                            "context; the rest is replaced by a preview.")
    if mcp and scope == "project":
        report.notes.append(f"{spec.display} asks once before it starts a server from .mcp.json.")
    return report


def uninstall(agent: str, *, scope: str = "project", project: str | os.PathLike[str] | None = None,
              mcp_name: str = DEFAULT_MCP_NAME) -> InstallReport:
    """Remove exactly what :func:`install` added for ``agent`` in ``scope``: gitmem's
    hook handlers (with groups/events only they filled) and its MCP server entry.
    A file left holding nothing else (``{}``, or an empty ``mcpServers``) is deleted."""
    agent_spec(agent)
    paths = config_paths(agent, scope, project)
    plans = [load_json_object(paths["settings"]), load_json_object(paths["mcp"])]
    settings, servers = plans
    settings.after, removed_hooks = remove_hooks(settings.before, agent, settings.path)
    servers.after, removed_mcp = remove_mcp(servers.before, mcp_name, servers.path)
    results = []
    for plan, removed in ((settings, removed_hooks), (servers, removed_mcp)):
        if plan.text is None:
            results.append(FileResult(plan.path, "absent"))
            continue
        restored = restore_backup(plan) if removed else None
        if restored is not None:   # the user's own bytes, as they were before install
            results.append(restored)
            continue
        if removed and plan.after in ({}, {"mcpServers": {}}):
            plan.after = None  # nothing but what install put there
        results.append(apply_plan(plan))
    return InstallReport(agent, scope, None, results,
                         [], mcp_name if removed_mcp else None,
                         [] if removed_hooks or removed_mcp else ["nothing of gitmem's was installed here"])


def status(agent: str, *, project: str | os.PathLike[str] | None = None,
           mcp_name: str = DEFAULT_MCP_NAME) -> list[dict[str, Any]]:
    """For each scope: gitmem's hook commands and MCP entry for ``agent``, as found."""
    out = []
    for scope in SCOPES:
        paths = config_paths(agent, scope, project)
        row: dict[str, Any] = {"scope": scope, "settings": str(paths["settings"]),
                               "mcp_file": str(paths["mcp"]), "hooks": {}, "mcp": None, "errors": []}
        try:
            data = load_json_object(paths["settings"]).before
            hooks = data.get("hooks")
            for event, groups in (hooks if isinstance(hooks, dict) else {}).items():
                for group in groups if isinstance(groups, list) else []:
                    handlers = group.get("hooks") if isinstance(group, dict) else None
                    for handler in handlers if isinstance(handlers, list) else []:
                        if _is_our_handler(handler, agent):
                            row["hooks"][event] = handler["command"]
        except InvalidInput as exc:
            row["errors"].append(exc.message)
        try:
            servers = load_json_object(paths["mcp"]).before.get("mcpServers")
            if isinstance(servers, dict) and _is_our_mcp(servers.get(mcp_name)):
                row["mcp"] = servers[mcp_name]
        except InvalidInput as exc:
            row["errors"].append(exc.message)
        row["installed"] = bool(row["hooks"] or row["mcp"])
        out.append(row)
    return out


# ------------------------------------------------------------- session start
def _clip(text: str, limit: int, what: str) -> str:
    """``text`` cut to at most ``limit`` characters, at a line end when one is near,
    with a note saying how much was left out."""
    if len(text) <= limit:
        return text
    note = f"\n[... {what} truncated: {{}} more characters; read it with the gitmem MCP tools]\n"
    room = max(0, limit - len(note.format(len(text))))
    cut = text.rfind("\n", 0, room + 1)
    cut = cut if cut > room * 0.8 else room
    return text[:cut].rstrip() + note.format(len(text) - cut)


def session_context(vault: Vault, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """What a session starts with: a one-line header, the protected context
    (rules, constraints, goals) and then ``MEMORY.md``, at most ``max_chars``
    characters in all; the protected context keeps its room first."""
    header = (f"Memory from the gitmem vault at {vault.root} (protected context first, then the "
              "MEMORY.md index). Follow protected rules and constraints.\n\n")
    protected = vault.protected_context().markdown
    protected = _clip(protected, max(0, max_chars - len(header)), "protected context")
    text = header + protected
    index = vault.files.memory_md_text()
    room = max_chars - len(text) - 2
    if index and index.strip() and room > 200:
        text += "\n" + _clip(index.strip() + "\n", room, "MEMORY.md")
    return text[:max_chars]


# ------------------------------------------------------------- transcripts
_NOISE = re.compile(r"^\s*<(command-name|command-message|command-args|local-command-stdout|"
                    r"local-command-stderr|system-reminder|user-prompt-submit-hook)>")


def _text_of(content: Any) -> str:
    """The readable text of a message's content: a string, or the ``text`` blocks of
    a list (tool calls, tool results, thinking and images are left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(block["text"] for block in content
                         if isinstance(block, dict) and block.get("type") == "text"
                         and isinstance(block.get("text"), str))
    return ""


def transcript_turns(path: str | os.PathLike[str], *, max_turns: int = NOTE_TURNS,
                     turn_chars: int = NOTE_TURN_CHARS) -> list[tuple[str, str]]:
    """The last ``max_turns`` user/assistant text messages of a Claude Code JSONL
    transcript as ``(role, text)``, each clipped to ``turn_chars``.  Lines that are
    not JSON, not messages, meta or sidechain (subagent) entries are skipped;
    only the file's last few megabytes are read."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise NotFound(f"transcript {file} does not exist")
    with file.open("rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - TRANSCRIPT_TAIL_BYTES))
        data = handle.read()
    lines = data.decode("utf-8", "replace").splitlines()
    if size > TRANSCRIPT_TAIL_BYTES:
        lines = lines[1:]  # the first line read is probably cut
    turns: list[tuple[str, str]] = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("isMeta") or entry.get("isSidechain"):
            continue
        message = entry.get("message")
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if entry.get("type") not in ("user", "assistant") or role not in ("user", "assistant"):
            continue
        text = _text_of(message.get("content")).strip()
        if not text or _NOISE.match(text):
            continue
        if len(text) > turn_chars:
            text = text[:turn_chars].rstrip() + " [...]"
        turns.append((role, text))
    return turns[-max_turns:]


# ------------------------------------------------------------- session notes
def save_session_note(vault: Vault, payload: Mapping[str, Any], *, agent: str, verb: str,
                      author: str | None = None, max_chars: int = NOTE_MAX_CHARS,
                      turns: list[tuple[str, str]] | None = None) -> Any:
    """Save the end of the session's transcript as the session's one ``episodic`` memory
    in ``short_term`` (one commit, authored by ``author`` or ``agent``).

    ``turns`` (``(role, text)`` pairs) are read from the payload's ``transcript_path``
    when not given.  Returns the :class:`~gitmem.ops.lifecycle.WriteResult`, or None
    when there is no user/assistant text.  A session has one note, keyed on its
    ``session_id``: a later hook with new turns updates it (``updated``, one commit),
    the same turns again (a compaction right before the session ends, a repeated
    SessionEnd) are ``skipped`` with no commit, whichever ``verb`` saved them.  Secrets
    in the extract are redacted unless the vault's policy is ``allow``.
    """
    from ..memory.secrets import policy_of, redact_text
    spec = agent_spec(agent)
    if turns is None:
        turns = transcript_turns(_transcript_of(payload))
    while turns and sum(len(t) + 20 for _, t in turns) > max_chars:
        turns = turns[1:]  # the oldest turns go first
    if not turns:
        return None
    session = _session_of(payload)
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
    # Nothing in the note depends on which hook saved it: the same turns make the same note.
    lines = [f"{spec.display} session `{session}`" + (f" in `{cwd}`" if cwd else "") + ".",
             "", "## Last turns", ""]
    for role, text in turns:
        lines += [f"**{role.capitalize()}:** {text}", ""]
    body = "\n".join(lines).rstrip() + "\n"
    if policy_of(vault.config) != "allow":
        body = redact_text(body)  # a chat log quotes tool output, keys included
    asked = next((t for r, t in reversed(turns) if r == "user"), turns[-1][1])
    topic = " ".join(asked.split())[:80].rstrip() or "session"
    return vault.write(body, title=f"Session note: {topic}", type="episodic", tier="short_term",
                       tags=["session-note", agent], author=author or agent,
                       external_write_id=f"{agent}-session-{session}", upsert=True,
                       source=session_source(agent, session),
                       summary=f"Last turns of a {spec.display} session.")


def _transcript_of(payload: Mapping[str, Any]) -> str:
    path = payload.get("transcript_path")
    if not isinstance(path, str) or not path.strip():
        raise InvalidInput("the hook input has no transcript_path")
    return path


def _session_of(payload: Mapping[str, Any]) -> str:
    return str(payload.get("session_id") or "unknown")[:80]


# ------------------------------------------------------------- waiting notes
#: Session notes a hook could not commit in time (another process held the vault lock):
#: one JSON file per session in ``.git/gitmem/hook-spool/`` (:mod:`gitmem.store.spool`),
#: written before the hook waits for the lock and removed once committed.  The next
#: note hook commits them.


def spool_session_note(vault: Vault, payload: Mapping[str, Any], turns: list[tuple[str, str]], *,
                       agent: str, verb: str, author: str | None = None) -> Path:
    """Keep a session note's turns on disk (synced) until it is committed; one file per
    session (a later hook of the session replaces it: its turns are the newer).  Returns
    the file."""
    from ..search.state import write_json_atomic
    session = _session_of(payload)
    file = spool_file(vault.services.store.state_dir, agent, session)
    file.parent.mkdir(parents=True, exist_ok=True)
    kept = {k: payload[k] for k in ("session_id", "cwd") if isinstance(payload.get(k), str)}
    write_json_atomic(file, {"agent": agent, "verb": verb, "author": author, "payload": kept,
                             "turns": [list(t) for t in turns]})
    return file


def spooled_notes(vault: Vault) -> list[Path]:
    """The session notes waiting to be committed, oldest first."""
    folder = vault.services.store.state_dir / SPOOL_DIR
    try:
        files = [f for f in folder.iterdir() if f.suffix == ".json" and not f.name.startswith(".")]
    except OSError:
        return []
    return sorted(files, key=lambda f: (f.stat().st_mtime_ns, f.name))


def commit_spooled_notes(vault: Vault) -> dict[Path, Any]:
    """Commit every waiting session note (caller holds the vault lock), oldest first;
    each file is removed once its note is in a commit (unless a newer hook of the same
    session replaced it meanwhile).  Returns file -> WriteResult, or the exception for a
    note that could not be saved (its file stays)."""
    done: dict[Path, Any] = {}
    for file in spooled_notes(vault):
        try:
            data = file.read_bytes()
            entry = json.loads(data)
            turns = [(str(r), str(t)) for r, t in entry["turns"]]
            done[file] = save_session_note(vault, entry.get("payload") or {}, agent=entry["agent"],
                                           verb=entry.get("verb", "session-end"),
                                           author=entry.get("author"), turns=turns)
        except FileNotFoundError:
            continue  # committed by another hook meanwhile
        except Exception as exc:  # noqa: BLE001 - one bad note does not stop the others
            done[file] = exc
            continue
        try:
            if file.read_bytes() == data:
                file.unlink()
        except FileNotFoundError:
            pass
    return done


# ------------------------------------------------------------- the hook entry
def _payload(stdin_text: str) -> dict[str, Any]:
    try:
        data = json.loads(stdin_text[:STDIN_MAX_BYTES]) if stdin_text.strip() else {}
    except ValueError:
        raise InvalidInput("the hook input on stdin is not JSON") from None
    if not isinstance(data, dict):
        raise InvalidInput("the hook input on stdin is not a JSON object")
    return data


def run_hook(agent: str, verb: str, stdin_text: str, *, vault_path: str | None = None,
             max_chars: int = DEFAULT_MAX_CHARS, author: str | None = None,
             deadline: float | None = None) -> tuple[str, str]:
    """Run one hook as the agent calls it and return ``(stdout, stderr)``.

    Never raises: whatever goes wrong becomes one ``gitmem: ...`` line for
    stderr, so the caller can exit 0 and the agent's session carries on.
    Answers by ``deadline`` (a :func:`time.monotonic` time; default: the verb's
    bound from now) whatever other processes hold: session-start only reads,
    which never waits for the vault lock; a note hook keeps the note on disk
    first (:func:`spool_session_note`), then waits for the lock until shortly
    before the deadline, and if it stays busy leaves the note for the next hook.
    """
    started = time.monotonic()
    try:
        spec = agent_spec(agent)
        if verb not in HOOK_VERBS:
            raise InvalidInput(f"unknown hook {verb!r}", hint=f"Use one of: {', '.join(HOOK_VERBS)}.")
        payload = _payload(stdin_text)
        if deadline is None:
            deadline = started + spec.bounds[verb]
        from ..vault import Vault
        # The lock is waited for until LOCK_MARGIN before the deadline (a write then takes well under it).
        wait = max(0.5, deadline - time.monotonic() - LOCK_MARGIN)
        vault = Vault.open(vault_path, author=author or agent, lock_timeout=wait)
        try:
            if verb == "session-start":
                context = session_context(vault, max_chars)
                out = {"hookSpecificOutput": {"hookEventName": spec.events[verb],
                                              "additionalContext": context}}
                return json.dumps(out, ensure_ascii=False) + "\n", ""
            return "", _save_note(vault, payload, agent=agent, verb=verb, author=author)
        finally:
            vault.close()
    except Exception as exc:  # noqa: BLE001 - a hook must never break the agent's session
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        if isinstance(exc, NotAVault):  # say how to make or name one (the hook command takes --vault)
            message += f". {exc.hint}"
        return "", f"gitmem: {verb} hook skipped: {message}\n"


#: A note hook stops waiting for the vault lock this long before its deadline.
LOCK_MARGIN = 4.0


def _save_note(vault: Vault, payload: Mapping[str, Any], *, agent: str, verb: str,
               author: str | None) -> str:
    """A note hook's work (see :func:`run_hook`); returns what it tells stderr."""
    from ..errors import LockTimeout
    turns = transcript_turns(_transcript_of(payload))
    if not turns:
        return "gitmem: no user or assistant text in the transcript; nothing saved\n"
    file = spool_session_note(vault, payload, turns, agent=agent, verb=verb, author=author)
    try:
        with vault.services.store.lock.hold():
            done = commit_spooled_notes(vault)
    except LockTimeout:
        return (f"gitmem: the vault stayed busy; the session note is kept in {file} and the next "
                f"session note hook commits it\n")
    result = done.get(file)
    if isinstance(result, Exception):
        raise result
    if result is None and file.exists():   # replaced by a newer hook of the same agent session: that one saves it
        return ""
    if result is not None and result.status == "skipped":
        return f"gitmem: session note already saved ({result.memory.id[:8]})\n"
    return ""
