"""``gitmem mcp``: serve a tool profile over the Model Context Protocol.

Built on the official ``mcp`` SDK, **major version 2** (the optional extra
``gitmem-vault[mcp]``).  Its v2 API differs from most tutorials, which show
v1's ``FastMCP``: here the low-level ``mcp.server.Server`` takes
``on_list_tools`` / ``on_call_tool`` handlers in its constructor and
``mcp_types`` models use snake_case fields (``input_schema``,
``read_only_hint``, ``is_error``).  gitmem needs the low-level server because
its tools come with ready JSON Schemas and must keep the seeds' exact names.

* stdio (default): what Claude Desktop, Claude Code and Cursor launch.
* streamable HTTP (``--http``): binds 127.0.0.1 by default; binding any other
  address requires a bearer token (``--token`` or ``GITMEM_MCP_TOKEN``), which
  every request must then send as ``Authorization: Bearer <token>``.

Each tool call runs in a worker thread (the Vault serialises writes with its
lock), so one slow write does not stall other requests; errors are tool
results with ``isError: true`` and the structured error as
``structuredContent``, never protocol failures.  The SDK is imported only
when the server starts, so ``gitmem --help`` and ``import gitmem`` stay fast.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from typing import TYPE_CHECKING, Any

from .errors import InvalidInput

if TYPE_CHECKING:  # pragma: no cover
    from .tools import Toolbox

__all__ = ["build_server", "serve_stdio", "serve_http", "require_sdk", "SDK_MAJOR"]

SDK_MAJOR = 2
_INSTRUCTIONS = ("gitmem: a Git-backed Markdown memory vault. Every write through these tools is one git "
                 "commit authored by this session's agent, so nothing is lost and every change can be "
                 "inspected or restored. Errors come back as results with a code, a message and a hint.")


def require_sdk() -> None:
    """Fail with an actionable error when the ``mcp`` SDK (v2) is missing."""
    try:
        from importlib.metadata import version
        installed = version("mcp")
    except Exception:  # noqa: BLE001 - PackageNotFoundError or a broken install
        installed = None
    if installed is None or not installed.split(".")[0].isdigit() or int(installed.split(".")[0]) != SDK_MAJOR:
        found = f"mcp {installed} is installed" if installed else "the mcp package is not installed"
        raise InvalidInput(f"gitmem mcp needs the MCP Python SDK {SDK_MAJOR}.x; {found}",
                           hint='pip install "gitmem-vault[mcp]"')


def build_server(toolbox: "Toolbox") -> Any:
    """An ``mcp.server.Server`` serving ``toolbox``'s profile."""
    import anyio
    import mcp_types as types
    from mcp.server import Server

    from . import __version__
    from .tools import render_result

    listed = [types.Tool(name=t.name, title=t.annotations()["title"], description=t.description,
                         input_schema=t.schema,
                         annotations=types.ToolAnnotations(
                             title=t.annotations()["title"], read_only_hint=t.read_only,
                             destructive_hint=t.destructive, idempotent_hint=t.idempotent,
                             open_world_hint=False))
              for t in toolbox.tools.values()]

    async def list_tools(_ctx: Any, _params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    async def call_tool(_ctx: Any, params: Any) -> Any:
        result = await anyio.to_thread.run_sync(toolbox.call, params.name, params.arguments or {})
        text, is_error = render_result(result, toolbox.profile)
        return types.CallToolResult(content=[types.TextContent(text=text)],
                                    structured_content=result if isinstance(result, dict) else None,
                                    is_error=is_error)

    return Server(f"gitmem-{toolbox.profile}", version=__version__, title=f"gitmem ({toolbox.profile} tools)",
                  instructions=_INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)


async def _run_stdio(toolbox: "Toolbox") -> None:
    from mcp.server.stdio import stdio_server
    server = build_server(toolbox)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(toolbox: "Toolbox") -> None:
    """Serve over stdin/stdout until the client closes the connection."""
    require_sdk()
    import anyio
    anyio.run(_run_stdio, toolbox)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            given = headers.get(b"authorization", b"")
            if not (given.startswith(b"Bearer ") and hmac.compare_digest(given[7:].strip(), self.token)):
                body = b'{"error": "missing or wrong bearer token"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(toolbox: "Toolbox", *, host: str = "127.0.0.1", token: str | None = None) -> Any:
    """The streamable-HTTP ASGI app (at ``/mcp``), token-protected when ``token`` is given.

    Refuses a non-loopback ``host`` without a token: the vault would be
    writable by anyone who can reach the port.
    """
    if not _is_loopback(host) and not token:
        raise InvalidInput(f"refusing to serve on {host} without a bearer token",
                           hint="Pass --token (or set GITMEM_MCP_TOKEN), or bind 127.0.0.1.")
    require_sdk()
    app = build_server(toolbox).streamable_http_app(host=host)
    return _BearerAuth(app, token) if token else app


def serve_http(toolbox: "Toolbox", *, host: str = "127.0.0.1", port: int = 8765,
               token: str | None = None) -> None:
    """Serve streamable HTTP at ``http://HOST:PORT/mcp`` until interrupted."""
    token = token or os.environ.get("GITMEM_MCP_TOKEN") or None
    app = http_app(toolbox, host=host, token=token)
    import uvicorn
    uvicorn.run(app, host=host, port=port, log_level="warning")
