"""``gitmem mcp``: serve a tool profile over the Model Context Protocol.

Built on the official ``mcp`` SDK, **major version 2** (the optional extra
``gitmem-vault[mcp]``).  Its v2 API differs from most tutorials, which show
v1's ``FastMCP``: here the low-level ``mcp.server.Server`` takes
``on_list_tools`` / ``on_call_tool`` handlers in its constructor and
``mcp_types`` models use snake_case fields (``input_schema``,
``read_only_hint``, ``is_error``).  gitmem needs the low-level server because
its tools come with ready JSON Schemas and must keep their contracts' exact names.

* stdio (default): what Claude Desktop, Claude Code and Cursor launch.  Served
  by gitmem's own small server (:mod:`gitmem.agents.mcp_stdio`), which answers
  ``initialize`` without importing the SDK (0.6-1.6 s of CPU);
  :func:`serve_stdio` here is the SDK's stdio server, used only when
  ``GITMEM_MCP_STDIO=sdk`` (for comparison).
* streamable HTTP (``--http``): binds 127.0.0.1 by default.  Only 127.0.0.1,
  ::1 and ``localhost`` may be served without a bearer token (``--token`` or
  ``GITMEM_MCP_TOKEN``); with one, every request must send
  ``Authorization: Bearer <token>``.  DNS-rebinding protection (Host and
  Origin checks) is on for every bind address.

Over HTTP each tool call runs in a worker thread (the Vault serialises writes
with its lock), so one slow write does not stall other requests; errors are tool
results with ``isError: true`` and the structured error as
``structuredContent``, never protocol failures.  The SDK is imported only
when the server starts, so ``gitmem --help`` and ``import gitmem`` stay fast.

Both transports take a :class:`~gitmem.outside.follow.Follower` that keeps the index
current with outside edits while the server runs (``gitmem mcp --follow``).
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import Conflict, GitmemError, InvalidInput
from ..localhttp import (
    allowed_hosts_and_origins,
    authority,
    clean_token,
    is_loopback_host,
    normalize_host,
    token_matches,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..outside.follow import Follower
    from .registry import Toolbox

__all__ = ["build_server", "serve_stdio", "serve_http", "http_app", "http_url", "require_sdk",
           "is_loopback_host", "normalize_host", "allowed_hosts_and_origins", "check_exposure", "SDK_MAJOR"]

SDK_MAJOR = 2


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


def build_server(toolbox: Toolbox, before_call: Callable[[], None] | None = None) -> Any:
    """An ``mcp.server.Server`` serving ``toolbox``'s profile; ``before_call``
    (e.g. :meth:`Follower.before_call`) runs before each tool call, in its thread."""
    import anyio
    import mcp_types as types
    from mcp.server import Server

    from .mcp_stdio import INSTRUCTIONS, server_info
    from .registry import render_result

    listed = [types.Tool(name=t.name, title=t.annotations()["title"], description=t.description,
                         input_schema=t.schema,
                         annotations=types.ToolAnnotations(
                             title=t.annotations()["title"], read_only_hint=t.read_only,
                             destructive_hint=t.destructive, idempotent_hint=t.idempotent,
                             open_world_hint=False))
              for t in toolbox.tools.values()]

    async def list_tools(_ctx: Any, _params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    # One conversation (a shared source, each memory following the one before it) per
    # HTTP client session; the stdio client, and HTTP clients without a session id, share
    # the server's own.
    toolbox.begin_session("mcp")

    async def call_tool(_ctx: Any, params: Any) -> Any:
        client = _client_session(_ctx)

        def run() -> Any:
            if before_call is not None:
                before_call()
            return toolbox.call(params.name, params.arguments or {}, session=client)

        result = await anyio.to_thread.run_sync(run)
        text, is_error = render_result(result, toolbox.profile)
        return types.CallToolResult(content=[types.TextContent(text=text)],
                                    structured_content=result if isinstance(result, dict) else None,
                                    is_error=is_error)

    info = server_info(toolbox.profile)
    return Server(info["name"], version=info["version"], title=info["title"],
                  instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)


def _client_session(ctx: Any) -> str | None:
    """The MCP session id an HTTP client sends (``Mcp-Session-Id``), if any."""
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    value = headers.get("mcp-session-id") if headers is not None else None
    return value if isinstance(value, str) and value else None


async def _run_stdio(toolbox: Toolbox, follower: Follower | None = None) -> None:
    from mcp.server.stdio import stdio_server
    server = build_server(toolbox, follower.before_call if follower is not None else None)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(toolbox: Toolbox, follower: Follower | None = None) -> None:
    """Serve over stdin/stdout with the SDK until the client closes the connection.

    ``gitmem mcp`` uses :func:`gitmem.agents.mcp_stdio.serve` instead unless
    ``GITMEM_MCP_STDIO=sdk``; this stays as the reference it is measured against.
    ``follower`` (not started yet) is started in the background and stopped at the end.
    """
    require_sdk()
    import anyio
    if follower is not None:
        follower.start(background=True)
    try:
        anyio.run(_run_stdio, toolbox, follower)
    finally:
        if follower is not None:
            follower.stop()


def http_url(host: str, port: int) -> str:
    """The URL clients use for a server bound to ``host``:``port`` (``http://[::1]:8765/mcp``)."""
    return f"http://{authority(normalize_host(host), port)}/mcp"


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to serve a non-loopback ``host`` without a bearer token.

    Anyone who can reach such an address could otherwise read and rewrite
    the vault.  Called before anything binds.
    """
    if not is_loopback_host(host) and not token:
        raise InvalidInput(f"refusing to serve on {host} without a bearer token",
                           hint="Pass --token (or set GITMEM_MCP_TOKEN), or bind 127.0.0.1, ::1 or localhost.")


class _BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``.

    The scheme is matched case-insensitively (RFC 9110 section 11.1), the token
    in constant time.
    """

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token.encode()

    def _authorized(self, scope: dict[str, Any]) -> bool:
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, credentials = given.strip().partition(b" ")
        return scheme.lower() == b"bearer" and token_matches(credentials.strip(), self.token)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self._authorized(scope):
            body = b'{"error": "missing or wrong bearer token"}'
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def http_app(toolbox: Toolbox, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
             allowed_hosts: tuple[str, ...] | list[str] = (),
             before_call: Callable[[], None] | None = None) -> Any:
    """The streamable-HTTP ASGI app (at ``/mcp``) for a server bound to ``host``:``port``.

    DNS-rebinding protection is always on: gitmem passes the SDK explicit
    :class:`TransportSecuritySettings` (see :func:`allowed_hosts_and_origins`)
    rather than letting it choose, because the SDK switches protection off
    for any bind address but its three loopback spellings.  Requests with
    another Host get 421, with another Origin 403; requests without an Origin
    (non-browser clients) pass.  With ``token`` every request must also send
    ``Authorization: Bearer <token>`` (401 otherwise).  Refuses a non-loopback
    ``host`` without a token.
    """
    token = clean_token(token)
    check_exposure(host, token)
    require_sdk()
    from mcp.server.transport_security import TransportSecuritySettings
    hosts, origins = allowed_hosts_and_origins(host, port, allowed_hosts)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)
    app = build_server(toolbox, before_call).streamable_http_app(host=normalize_host(host), transport_security=security)
    return _BearerAuth(app, token) if token else app


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (what uvicorn would bind), or a gitmem error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if os.name != "nt":
            # As uvicorn does: a restarted server may rebind a port whose old connections sit
            # in TIME_WAIT.  On POSIX this never lets two servers listen on one port; on
            # Windows it would (so a taken port would go unnoticed), hence not there.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        where = authority(host, port)
        if exc.errno == errno.EADDRINUSE:
            raise Conflict(f"cannot serve on {where}: the port is already in use", code="port_in_use",
                           hint="Stop the other server or pick another port with --port.") from None
        raise InvalidInput(f"cannot serve on {where}: {exc.strerror or exc}", code="cannot_bind",
                           hint="Bind an address of this machine (default 127.0.0.1) and a port you may "
                                "use (1024 or above unless privileged).") from None
    return sock


def serve_http(toolbox: Toolbox, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
               allowed_hosts: tuple[str, ...] | list[str] = (),
               on_ready: Callable[[str], None] | None = None, follower: Follower | None = None) -> None:
    """Serve streamable HTTP at ``http://HOST:PORT/mcp`` until interrupted.

    ``follower`` (not started yet) is started in the background once the
    socket is bound and stopped when serving ends.

    Checks the token rule before binding; binds the socket itself so that a
    taken port is a gitmem error (``port_in_use``) rather than uvicorn's log
    line and exit status; calls ``on_ready(url)`` once the socket listens
    (that is when a "serving on" banner is true).
    """
    token = clean_token(token or os.environ.get("GITMEM_MCP_TOKEN"))
    host = normalize_host(host)
    check_exposure(host, token)
    allowed_hosts_and_origins(host, port, allowed_hosts)  # refuses a malformed --allow-host before binding
    require_sdk()
    sock = _bind(host, port)
    try:
        port = int(sock.getsockname()[1])  # the real one when port 0 asked for any
        app = http_app(toolbox, host=host, port=port, token=token, allowed_hosts=allowed_hosts,
                       before_call=follower.before_call if follower is not None else None)
        import uvicorn
        server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        if on_ready is not None:
            on_ready(http_url(host, port))
        if follower is not None:
            follower.start(background=True)
        try:
            server.run(sockets=[sock])
        except SystemExit as exc:  # uvicorn exits 3 when the app's start-up fails
            # (a SIGTERM after a good start also ends in SystemExit: that is a normal stop)
            if exc.code not in (0, None) and not getattr(server, "started", False):
                raise GitmemError(f"the MCP HTTP server on {http_url(host, port)} failed to start",
                                  code="server_start_failed",
                                  hint="The server's log lines above say why.") from None
            raise
    finally:
        if follower is not None:
            follower.stop()
        sock.close()
