"""Command-line front doors for agent tools: ``gitmem tools list|export|call`` and
``gitmem mcp``.

Registered in :mod:`gitmem.cli.main`.  Like every command there, each makes one
library call (:mod:`gitmem.agents.registry`, :mod:`gitmem.agents.mcp_server`) and prints the
result.  Only click is imported at module level so ``gitmem --help`` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from .common import emit, json_option, open_vault
from .status import background_sync, sync_options

__all__ = ["tools", "mcp"]

_PROFILES = ["gitmem", "files", "index", "agentos", "vault", "fsm", "claude"]
_profile_option = click.option("--profile", "-p", type=click.Choice(_PROFILES), default="gitmem",
                               show_default=True, help="The tool set (see 'gitmem tools list').")


@click.group()
def tools() -> None:
    """Agent tool sets: list them, export their schemas, call one.

    \b
    Example:
      gitmem tools list
      gitmem tools export --profile agentos --format anthropic
      gitmem -C my-vault tools call --profile fsm search_memory '{"query": "rust"}'
    """


@tools.command(name="list")
@click.option("--profile", "-p", type=click.Choice(_PROFILES), help="Only this profile, with each tool's summary.")
@json_option
def tools_list(profile: str | None, as_json: bool) -> None:
    """List the profiles and their tools.

    \b
    Example:
      gitmem tools list
      gitmem tools list --profile fsm
    """
    from ..agents.registry import PROFILES, profile_tools
    names = [profile] if profile else list(PROFILES)
    data: dict[str, dict[str, Any]] = {name: {"description": PROFILES[name],
                                              "tools": [{"name": t.name, "read_only": t.read_only,
                                                         "destructive": t.destructive,
                                                         "description": t.description}
                                                        for t in profile_tools(name)]}
                                       for name in names}

    def text() -> str:
        lines = []
        for name, info in data.items():
            if profile:
                lines.append(f"{name}: {info['description']}")
                for t in info["tools"]:
                    mark = "read " if t["read_only"] else "write"
                    lines.append(f"  {t['name']:<26} {mark}  {t['description'].split('. ')[0][:90]}")
            else:
                lines.append(f"{name:<8} {', '.join(t['name'] for t in info['tools'])}")
        return "\n".join(lines)

    emit(data, as_json, text)


@tools.command(name="export")
@_profile_option
@click.option("--format", "-f", "fmt", type=click.Choice(["openai", "anthropic", "mcp"]), default="openai",
              show_default=True, help="OpenAI function calling, Anthropic tools, or MCP tool definitions.")
def tools_export(profile: str, fmt: str) -> None:
    """Print a profile's tool definitions as JSON (a list, ready for an API call).

    \b
    Example:
      gitmem tools export --profile vault --format openai > tools.json
    """
    from ..agents.registry import export
    click.echo(json.dumps(export(profile, fmt), ensure_ascii=False, indent=2))


@tools.command(name="call")
@_profile_option
@click.option("--agent", help="Commit author of writes (default: --author / GITMEM_AUTHOR / the vault's).")
@click.argument("name")
@click.argument("arguments", default="{}")
@click.pass_context
def tools_call(ctx: click.Context, profile: str, agent: str | None, name: str, arguments: str) -> None:
    """Call tool NAME with ARGUMENTS (a JSON object; '-' reads stdin) and print the result.

    Prints exactly what an agent would get: the result as JSON (text results
    as they are).  Exit 1 when the result is an error.

    \b
    Example:
      gitmem -C my-vault tools call --profile files memory_write '{"path": "a.md", "content": "# A"}'
    """
    from ..agents.registry import Toolbox, render_result
    if arguments == "-":
        arguments = sys.stdin.read()
    vault = open_vault(ctx)
    box = Toolbox(vault, profile, agent=agent or ctx.obj.get("author"))
    result = box.call(name, arguments)
    text, is_error = render_result(result, "gitmem")
    if not isinstance(result, str):
        text = json.dumps(result, ensure_ascii=False, indent=2)
    click.echo(text)
    if is_error:
        ctx.exit(1)


class _JsonUsageCommand(click.Command):
    """A command whose usage errors (unknown option, bad value) follow ``--json``.

    click reports those itself, as text, before the command body runs; with
    ``--json`` a script expects ``{"error": ...}`` on stdout like every other
    failure, so they are re-raised as gitmem ``invalid_input`` errors (exit 2
    either way).
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse ``args``; on a usage error with ``--json`` among them, fail as gitmem does."""
        wants_json = "--json" in (args[:args.index("--")] if "--" in args else args)
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            if not wants_json:
                raise
            from ..errors import InvalidInput
            ctx.meta["gitmem.json"] = True  # the option's callback may not have run yet
            raise InvalidInput(exc.format_message(), hint=f"See 'gitmem {ctx.info_name} --help'.") from None


_HTTP_ONLY = ("host", "port", "token", "allow_host")


@click.command(cls=_JsonUsageCommand)
@click.option("--vault", "vault_path", type=click.Path(file_okay=False),
              help="The vault folder (default: the global --vault / $GITMEM_VAULT / the current folder).")
@_profile_option
@click.option("--agent", help="Name the client's writes are committed as (default: --author, else 'mcp-agent').")
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP at /mcp instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="HTTP: address to bind. Only 127.0.0.1, ::1 and localhost may go without --token.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535), help="HTTP: port.")
@click.option("--token", envvar="GITMEM_MCP_TOKEN",
              help="HTTP: bearer token clients must send (required unless --host is 127.0.0.1, ::1 or localhost).")
@click.option("--allow-host", "allow_host", multiple=True, metavar="NAME",
              help="HTTP: another host name clients reach the server by (repeatable), e.g. the machine's "
                   "LAN name when binding 0.0.0.0. Requests naming any other host are refused.")
@click.option("--follow", "follow_mode", type=click.Choice(["watch", "poll", "off"]), default="watch",
              show_default=True, envvar="GITMEM_MCP_FOLLOW",
              help="How the server follows outside edits (editors, git pull): 'watch' re-indexes changed "
                   "files as they are saved (inotify), 'poll' checks every file before a tool call (at "
                   "most once a second), 'off' not at all. Commits them only with auto_commit: true "
                   "in .gitmem.yaml.")
@sync_options
@json_option
@click.pass_context
def mcp(ctx: click.Context, vault_path: str | None, profile: str, agent: str | None, use_http: bool,
        host: str, port: int, token: str | None, allow_host: tuple[str, ...], follow_mode: str,
        sync_remote: str | None, sync_interval: float | None, as_json: bool) -> None:
    """Serve a tool profile over MCP (stdio by default) for Claude, Cursor & co.

    Over stdio gitmem answers by itself (start-up ~0.1 s); --http needs the
    MCP SDK: pip install "gitmem-vault[mcp]".  Every write is one commit
    authored by --agent (a move that changes the text: a pure rename first).
    Over HTTP, requests whose Host or Origin header names another host are
    refused (DNS-rebinding protection).
    Files edited outside gitmem (Obsidian, vim, git pull) are searchable
    ~0.4 s after they are saved, without 'gitmem watch' (see --follow).
    With --sync REMOTE (or sync: in .gitmem.yaml) the vault syncs with REMOTE
    in the background: writes are pushed within seconds, other machines'
    memories arrive every --sync-interval seconds (see 'gitmem status').

    \b
    Example:
      gitmem mcp --vault ~/memory --profile gitmem --agent claude-desktop
      gitmem mcp --vault ~/memory --sync origin --sync-interval 60
      gitmem mcp --vault ~/memory --http --port 8765
      GITMEM_MCP_TOKEN=... gitmem mcp --vault ~/memory --http --host 0.0.0.0 --allow-host box.lan
    """
    from ..agents.registry import Toolbox
    from ..errors import InvalidInput
    from ..outside.follow import Follower
    if not use_http:
        given = [f"--{name.replace('_', '-')}" for name in _HTTP_ONLY
                 if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise InvalidInput(f"{', '.join(given)}: only for the HTTP transport (--http)",
                               hint="Add --http, or drop them to serve over stdio.")
        # stdio is served by gitmem's own small server (no SDK import: initialize is answered
        # in ~0.1 s of CPU); GITMEM_MCP_STDIO=sdk serves it with the SDK instead (a baseline).
        sdk_stdio = os.environ.get("GITMEM_MCP_STDIO", "").strip().lower() == "sdk"
        if sdk_stdio:
            from ..agents.mcp_server import require_sdk
            require_sdk()
        if vault_path:
            ctx.obj["vault_path"] = vault_path
        vault = open_vault(ctx)
        box = Toolbox(vault, profile, agent=agent or ctx.obj.get("author") or "mcp-agent")
        follower = Follower(vault, follow_mode)
        with background_sync(vault, sync_remote, sync_interval, quiet=True):
            if sdk_stdio:
                from ..agents.mcp_server import serve_stdio
                serve_stdio(box, follower)
            else:
                from ..agents.mcp_stdio import serve
                serve(box, follower)
        return
    from ..agents.mcp_server import check_exposure, require_sdk, serve_http
    require_sdk()
    token = (token or "").strip() or None  # an empty GITMEM_MCP_TOKEN is no token
    check_exposure(host, token)  # before the vault opens and anything binds
    if vault_path:
        ctx.obj["vault_path"] = vault_path
    vault = open_vault(ctx)
    box = Toolbox(vault, profile, agent=agent or ctx.obj.get("author") or "mcp-agent")

    def announce(url: str) -> None:
        # Printed only once the socket listens, so a script that waits for it can connect at once.
        if as_json:
            click.echo(json.dumps({"url": url, "profile": profile, "token_required": bool(token)}))
        else:
            click.echo(f"gitmem MCP ({profile} tools) on {url}", err=True)

    with background_sync(vault, sync_remote, sync_interval, quiet=True):
        serve_http(box, host=host, port=port, token=token, allowed_hosts=allow_host, on_ready=announce,
                   follower=Follower(vault, follow_mode))
