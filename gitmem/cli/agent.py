"""``gitmem agent install|uninstall|status|hook``: session hooks for coding agents.

Registered in :mod:`gitmem.cli.main`; the logic is in :mod:`gitmem.agents.coding_hooks`.
Only click is imported at module level so ``gitmem --help`` stays fast.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .common import emit, json_option

__all__ = ["agent"]

# Kept in step with coding_agents.AGENTS / SCOPES (not imported here: --help stays light).
_AGENTS = ["claude-code", "codex", "gemini", "cursor"]
_SCOPES = ["project", "user"]
_PROFILES = ["gitmem", "files", "index", "agentos", "vault", "fsm", "claude"]

_agent_arg = click.argument("agent_name", metavar="AGENT", type=click.Choice(_AGENTS))
_scope_option = click.option("--scope", type=click.Choice(_SCOPES), default="project", show_default=True,
                             help="project: the agent's files in PROJECT (.claude/settings.json and .mcp.json, "
                                  ".codex/, .gemini/, .cursor/); user: those in your home folder "
                                  "(~/.claude/settings.json and ~/.claude.json, ~/.codex/, ~/.gemini/, ~/.cursor/).")
_project_option = click.option("--project", type=click.Path(file_okay=False),
                               help="The project folder for --scope project (default: the current folder).")
_mcp_name_option = click.option("--mcp-name", default="gitmem", show_default=True,
                                help="The MCP server's name in the agent's configuration.")


@click.group()
def agent() -> None:
    """Give a coding agent a memory: session hooks and the MCP server.

    AGENT is claude-code, codex (Codex CLI), gemini (Gemini CLI) or cursor.
    At session start the agent gets the vault's protected context and
    MEMORY.md; before compaction and at session end the last turns are saved
    as an episodic memory (one commit authored by the agent).

    \b
    Example:
      gitmem agent install claude-code --vault ~/memory
      gitmem agent install codex --vault ~/memory --scope user
      gitmem agent status gemini
      gitmem agent uninstall cursor
    """


def _files_text(report: Any) -> str:
    lines = []
    for f in report.files:
        extra = f"  (backup: {f.backup})" if f.backup else ""
        lines.append(f"  {f.action:<9} {f.path}{extra}")
        if f.text is not None:   # gitmem left the file: the text to add (or take out) by hand
            lines += [f"    {line}" for line in f.text.splitlines()]
    return "\n".join(lines)


@agent.command()
@_agent_arg
@click.option("--vault", "vault_path", type=click.Path(file_okay=False),
              help="The vault (default: the global --vault / $GITMEM_VAULT / the current folder).")
@_scope_option
@_project_option
@click.option("--max-chars", type=click.IntRange(500, 100_000), default=9000, show_default=True,
              help="Most characters of context given at session start (Claude Code shows 10,000).")
@click.option("--profile", type=click.Choice(_PROFILES), default="gitmem", show_default=True,
              help="The MCP server's tool profile.")
@click.option("--agent", "author", help="Commit author of the agent's writes (default: AGENT).")
@click.option("--no-mcp", is_flag=True, help="Install the hooks only, not the MCP server.")
@_mcp_name_option
@json_option
@click.pass_context
def install(ctx: click.Context, agent_name: str, vault_path: str | None, scope: str, project: str | None,
            max_chars: int, profile: str, author: str | None, no_mcp: bool, mcp_name: str,
            as_json: bool) -> None:
    """Write AGENT's hooks and MCP server entry for the vault (idempotent).

    Existing settings are merged, never replaced: other keys and hooks stay
    as they are, a changed file is backed up to FILE.gitmem-backup first, and
    a file that is not valid JSON is refused (exit 2) and left untouched.
    Codex's config.toml is never rewritten: gitmem appends its MCP server
    table, or prints the text to add when appending would not be safe.

    \b
    Example:
      gitmem agent install claude-code --vault ~/memory
      gitmem agent install claude-code --vault ~/memory --scope user --max-chars 6000
      gitmem agent install codex --vault ~/memory --scope user
    """
    from ..agents.coding_hooks import install as do_install
    from ..vault import Vault
    vault = Vault.open(vault_path or ctx.obj.get("vault_path"))  # must be a vault, before any file changes
    try:
        report = do_install(agent_name, vault, scope=scope, project=project, max_chars=max_chars,
                            mcp=not no_mcp, mcp_name=mcp_name, profile=profile, author=author)
    finally:
        vault.close()

    def text() -> str:
        head = (f"{'installed' if report.changed else 'already installed'}: {agent_name} hooks "
                f"({', '.join(report.events)})" + ("" if no_mcp else f" and MCP server '{mcp_name}'")
                + f" for {report.vault} [{scope} scope]")
        return "\n".join([head, _files_text(report), *[f"note: {n}" for n in report.notes]])

    emit(report.to_dict(), as_json, text)


@agent.command()
@_agent_arg
@_scope_option
@_project_option
@_mcp_name_option
@json_option
def uninstall(agent_name: str, scope: str, project: str | None, mcp_name: str, as_json: bool) -> None:
    """Remove what 'gitmem agent install' added for AGENT, and nothing else.

    \b
    Example:
      gitmem agent uninstall claude-code
      gitmem agent uninstall gemini --scope user
    """
    from ..agents.coding_hooks import uninstall as do_uninstall
    report = do_uninstall(agent_name, scope=scope, project=project, mcp_name=mcp_name)

    def text() -> str:
        head = f"{'removed' if report.changed else 'nothing to remove'}: {agent_name} [{scope} scope]"
        return "\n".join([head, _files_text(report)])

    emit(report.to_dict(), as_json, text)


@agent.command(name="status")
@_agent_arg
@_project_option
@_mcp_name_option
@json_option
def agent_status(agent_name: str, project: str | None, mcp_name: str, as_json: bool) -> None:
    """Show where gitmem's hooks and MCP server for AGENT are installed.

    \b
    Example:
      gitmem agent status claude-code
      gitmem agent status cursor --json
    """
    from ..agents.coding_hooks import status as do_status
    rows = do_status(agent_name, project=project, mcp_name=mcp_name)

    def text() -> str:
        lines = []
        for row in rows:
            state = "installed" if row["installed"] else "not installed"
            files = dict.fromkeys([row["settings"], row["mcp_file"]])
            lines.append(f"{row['scope']}: {state}  ({', '.join(files)})")
            lines += [f"  hook {event}: {command}" for event, command in row["hooks"].items()]
            if row["mcp"]:
                by_hand = " (added by hand)" if row.get("mcp_added_by_hand") else ""
                argv = " ".join([row["mcp"]["command"], *row["mcp"].get("args", [])])
                lines.append(f"  mcp {mcp_name}{by_hand}: {argv}")
            lines += [f"  error: {e}" for e in row["errors"]]
        missing = [verb for verb, event in rows[0]["events"].items() if event is None] if rows else []
        lines += [f"note: {agent_name} has no event for {verb}; gitmem installs no hook for it" for verb in missing]
        lines += [f"note: {n}" for n in (rows[0]["notes"] if rows else [])]
        return "\n".join(lines)

    emit(rows, as_json, text)


@agent.command(name="hook", context_settings={"ignore_unknown_options": True})
@click.argument("agent_name", metavar="AGENT")
@click.argument("verb", metavar="EVENT")
@click.option("--vault", "vault_path", help="The vault (default: $GITMEM_VAULT / the current folder).")
@click.option("--max-chars", default="9000", help="session-start: most characters of context.")
@click.option("--author", help="Commit author of the session note (default: AGENT).")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def hook(ctx: click.Context, agent_name: str, verb: str, vault_path: str | None, max_chars: str,
         author: str | None, extra: tuple[str, ...]) -> None:
    """Run one agent hook: read its JSON on stdin, answer on stdout.

    AGENT is claude-code, codex, gemini or cursor.  EVENT is session-start
    (prints the context as the agent expects it), pre-compact or session-end
    (saves the transcript's last turns as an episodic memory).  Always exits 0: a problem is one line on stderr, so
    the agent's session never fails because of memory.

    \b
    Example:
      echo '{"session_id": "s1", "transcript_path": "t.jsonl"}' | gitmem agent hook claude-code session-end
    """
    from ..agents.coding_hooks import AGENTS, DEFAULT_MAX_CHARS, run_hook
    bound = AGENTS[agent_name].bounds.get(verb) if agent_name in AGENTS else None
    deadline = _hook_guard(verb, bound)
    try:
        # Bytes, decoded leniently: the agent's locale may not be UTF-8.
        stdin_text = "" if sys.stdin.isatty() else sys.stdin.buffer.read().decode("utf-8", "replace")
    except (OSError, ValueError, AttributeError):
        stdin_text = ""
    try:
        limit = max(500, int(max_chars))
    except ValueError:
        limit = DEFAULT_MAX_CHARS
    out, err = run_hook(agent_name, verb, stdin_text, vault_path=vault_path or ctx.obj.get("vault_path"),
                        max_chars=limit, author=author, deadline=deadline)
    if extra:
        err += f"gitmem: ignored unknown arguments: {' '.join(extra)}\n"
    if out:
        sys.stdout.write(out)
        sys.stdout.flush()
    if err:
        sys.stderr.write(err)
    ctx.exit(0)


def _hook_guard(verb: str, bound: float | None) -> float | None:
    """Make this process a well-behaved hook: it exits 0 without a traceback when the
    agent stops it (SIGTERM, SIGINT, SIGHUP: its timeout, or the user), and, as a last
    resort, at ``bound`` seconds from now (whatever it is stuck on).  What a note hook
    acknowledged is on disk before it waits for anything (coding_hooks.spool_session_note).
    Returns the deadline the hook answers by (None without a bound)."""
    import os
    import signal
    import threading
    import time

    def leave(why: str) -> None:
        try:
            sys.stderr.write(f"gitmem: {verb} hook stopped ({why}); nothing acknowledged is lost\n")
            sys.stderr.flush()
        finally:
            os._exit(0)

    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), lambda signum, _frame: leave(signal.Signals(signum).name))
    if bound is None:
        return None
    timer = threading.Timer(bound - 0.25, leave, args=(f"no answer within {bound:.0f}s",))
    timer.daemon = True
    timer.start()
    return time.monotonic() + bound - 1.0
