"""Command-line front doors for agent tools: ``gitmem tools list|export|call`` and
``gitmem mcp``.

Registered in :mod:`gitmem.cli`.  Like every command there, each makes one
library call (:mod:`gitmem.tools`, :mod:`gitmem.mcp_server`) and prints the
result.  Only click is imported at module level so ``gitmem --help`` stays fast.
"""

from __future__ import annotations

import json
import sys

import click

from .cli_common import emit, json_option, open_vault

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
    from .tools import PROFILES, profile_tools
    names = [profile] if profile else list(PROFILES)
    data = {name: {"description": PROFILES[name],
                   "tools": [{"name": t.name, "read_only": t.read_only, "destructive": t.destructive,
                              "description": t.description} for t in profile_tools(name)]}
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
    from .tools import export
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
    from .tools import Toolbox, render_result
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


@click.command()
@click.option("--vault", "vault_path", type=click.Path(file_okay=False),
              help="The vault folder (default: the global --vault / $GITMEM_VAULT / the current folder).")
@_profile_option
@click.option("--agent", help="Name the client's writes are committed as (default: --author, else 'mcp-agent').")
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP at /mcp instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: address to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535), help="HTTP: port.")
@click.option("--token", envvar="GITMEM_MCP_TOKEN",
              help="HTTP: bearer token clients must send (required when --host is not loopback).")
@click.pass_context
def mcp(ctx: click.Context, vault_path: str | None, profile: str, agent: str | None, use_http: bool,
        host: str, port: int, token: str | None) -> None:
    """Serve a tool profile over MCP (stdio by default) for Claude, Cursor & co.

    Needs the MCP SDK: pip install "gitmem-vault[mcp]".  Every write is one
    commit authored by --agent.

    \b
    Example:
      gitmem mcp --vault ~/memory --profile gitmem --agent claude-desktop
      gitmem mcp --vault ~/memory --http --port 8765
    """
    from .mcp_server import require_sdk, serve_http, serve_stdio
    from .tools import Toolbox
    require_sdk()
    if vault_path:
        ctx.obj["vault_path"] = vault_path
    vault = open_vault(ctx)
    box = Toolbox(vault, profile, agent=agent or ctx.obj.get("author") or "mcp-agent")
    if use_http:
        click.echo(f"gitmem MCP ({profile} tools) on http://{host}:{port}/mcp", err=True)
        serve_http(box, host=host, port=port, token=token)
    else:
        serve_stdio(box)
