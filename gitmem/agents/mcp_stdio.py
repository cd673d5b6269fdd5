"""``gitmem mcp`` over stdio without the MCP SDK: a small built-in server.

Importing the official ``mcp`` SDK costs 0.6-1.6 s of CPU (pydantic models for
every protocol revision), all of it before the first answer; clients give a
server about 5 s to answer ``initialize``.  The stdio protocol itself is small:
JSON-RPC 2.0, one message per line, and gitmem serves tools only.  So stdio is
served here with the standard library, and the SDK is kept for streamable
HTTP (:mod:`gitmem.agents.mcp_server`); ``GITMEM_MCP_STDIO=sdk`` serves stdio with
the SDK instead (for comparison).

What is spoken, as the SDK's low-level server speaks it (v2, checked against
``mcp/server/runner.py``):

* ``initialize``: the client's ``protocolVersion`` when it is one of
  :data:`HANDSHAKE_PROTOCOL_VERSIONS`, else the newest of them; capabilities
  ``{"tools": {"listChanged": false}}``, ``serverInfo`` and ``instructions``.
* ``ping`` (any time), ``tools/list``, ``tools/call``.  Before ``initialize``
  the last two are refused (-32602), as the SDK does.  A tool's failure is a
  result with ``isError: true`` and the error object as ``structuredContent``.
* Anything else, including the 2026 ``server/discover`` probe: -32601, which
  makes SDK clients fall back to the ``initialize`` handshake.
* Notifications are ignored; responses to requests the server never sent are
  ignored; a line that is not JSON gets -32700 and one that is not a request
  -32600 (with ``id: null``), and serving goes on.

Requests are answered one at a time, in order (one vault; tool calls are
synchronous).  The server stops, with exit status 0, when stdin closes.

Outside edits (an editor, ``git pull``) are followed by a
:class:`~gitmem.outside.follow.Follower` when :func:`serve` is given one: it starts
once ``initialize`` has been answered (so the handshake pays nothing for it)
and is asked to catch up before each tool call (a no-op while the watcher runs).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:  # pragma: no cover
    from ..outside.follow import Follower
    from .registry import Toolbox

__all__ = ["StdioServer", "serve", "tool_definitions", "server_info", "negotiate_version", "INSTRUCTIONS",
           "HANDSHAKE_PROTOCOL_VERSIONS", "LATEST_HANDSHAKE_VERSION"]

#: Revisions reachable through the ``initialize`` handshake, oldest first
#: (``mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS`` of the SDK; a test keeps them equal).
HANDSHAKE_PROTOCOL_VERSIONS: tuple[str, ...] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE_VERSION = HANDSHAKE_PROTOCOL_VERSIONS[-1]

INSTRUCTIONS = ("gitmem: a Git-backed Markdown memory vault. Every write through these tools is one git "
                "commit authored by the connected agent, so nothing is lost and every change can be "
                "inspected or restored. Errors come back as results with a code, a message and a hint.")

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700, -32600, -32601, -32602, -32603)


def negotiate_version(requested: Any) -> str:
    """The protocol version to answer ``initialize`` with: the client's if supported, else the latest."""
    return requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION


def server_info(profile: str) -> dict[str, str]:
    """``serverInfo`` (also what :func:`gitmem.agents.mcp_server.build_server` names the SDK server)."""
    from ..version import __version__
    return {"name": f"gitmem-{profile}", "title": f"gitmem ({profile} tools)", "version": __version__}


def tool_definitions(toolbox: Toolbox) -> list[dict[str, Any]]:
    """``tools/list``'s tools: name, title, description, inputSchema and annotations."""
    listed = []
    for t in toolbox.tools.values():
        annotations = t.annotations()
        listed.append({"name": t.name, "title": annotations["title"], "description": t.description,
                       "inputSchema": t.schema, "annotations": annotations})
    return listed


class _RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def _error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


class StdioServer:
    """Answers MCP messages for one :class:`~gitmem.agents.registry.Toolbox`.

    :meth:`handle_line` turns one input line into the response to write (or
    None); :meth:`serve` runs the loop over binary streams.
    """

    def __init__(self, toolbox: Toolbox, follower: Follower | None = None) -> None:
        self.toolbox = toolbox
        self.follower = follower  # started after ``initialize``; asked to catch up before each call
        self.initialized = False  # ``initialize`` answered
        self._tools: list[dict[str, Any]] | None = None
        self._following = False

    # -------------------------------------------------------------- messages
    def handle_line(self, line: bytes | str) -> dict[str, Any] | None:
        """The response to one line of input, or None (a notification, a response, a blank line)."""
        if not line.strip():
            return None
        try:
            message = json.loads(line)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, too deep
            return _error(None, PARSE_ERROR, "Parse error", str(exc))
        return self.handle(message)

    def handle(self, message: Any) -> dict[str, Any] | None:
        """The response to one decoded message, or None."""
        if not isinstance(message, dict):
            data = "batches are not supported" if isinstance(message, list) else "not a JSON-RPC message"
            return _error(None, INVALID_REQUEST, "Invalid Request", data)
        has_id = "id" in message
        request_id = message.get("id")
        method = message.get("method")
        if message.get("jsonrpc") != "2.0":
            return _error(request_id if _valid_id(request_id) else None, INVALID_REQUEST, "Invalid Request",
                          "jsonrpc must be '2.0'") if has_id or method is None else None
        if method is None and has_id and ("result" in message or "error" in message):
            return None  # a response; this server sends no requests
        if not isinstance(method, str) or (has_id and not _valid_id(request_id)):
            return _error(request_id if _valid_id(request_id) else None, INVALID_REQUEST, "Invalid Request",
                          "a request needs a string method and a string or integer id")
        params = message.get("params")
        if not has_id:
            return None  # a notification: nothing to answer (notifications/initialized, cancelled ...)
        try:
            if params is not None and not isinstance(params, dict):
                raise _RpcError(INVALID_PARAMS, "Invalid request parameters", "params must be an object")
            result = self._dispatch(method, params or {})
        except _RpcError as exc:
            return _error(request_id, exc.code, exc.message, exc.data)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - one broken request must not end the session
            return _error(request_id, INTERNAL_ERROR, "Internal error", f"{type(exc).__name__}: {exc}")
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "ping":
            return {}
        if method == "initialize":
            return self._initialize(params)
        handler = {"tools/list": self._list_tools, "tools/call": self._call_tool}.get(method)
        if handler is None:
            raise _RpcError(METHOD_NOT_FOUND, "Method not found", method)
        if not self.initialized:
            # The SDK's answer to a request before the handshake (its "init gate").
            raise _RpcError(INVALID_PARAMS, "Invalid request parameters", "initialize first")
        return handler(params)

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise _RpcError(INVALID_PARAMS, "Invalid request parameters", "protocolVersion must be a string")
        for key in ("capabilities", "clientInfo"):
            if key in params and not isinstance(params[key], dict):
                raise _RpcError(INVALID_PARAMS, "Invalid request parameters", f"{key} must be an object")
        self.initialized = True
        # One stdio connection is one session: its memories share a source and each
        # follows the one written before it.
        self.toolbox.begin_session("mcp")
        return {"protocolVersion": negotiate_version(requested),
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": server_info(self.toolbox.profile),
                "instructions": INSTRUCTIONS}

    def _list_tools(self, _params: dict[str, Any]) -> dict[str, Any]:
        if self._tools is None:
            self._tools = tool_definitions(self.toolbox)
        return {"tools": self._tools}

    def _call_tool(self, params: dict[str, Any]) -> dict[str, Any]:
        from .registry import render_result
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str):
            raise _RpcError(INVALID_PARAMS, "Invalid request parameters", "name must be a string")
        if arguments is not None and not isinstance(arguments, Mapping):
            raise _RpcError(INVALID_PARAMS, "Invalid request parameters", "arguments must be an object")
        if self.follower is not None:
            self.follower.before_call()
        result = self.toolbox.call(name, arguments or {})
        text, is_error = render_result(result, self.toolbox.profile)
        answer: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": is_error}
        if isinstance(result, dict):
            answer["structuredContent"] = result
        return answer

    # -------------------------------------------------------------- the loop
    @staticmethod
    def encode(response: dict[str, Any]) -> bytes:
        """One response as a line of UTF-8 JSON."""
        text = json.dumps(response, ensure_ascii=False, separators=(",", ":"))
        try:
            return text.encode("utf-8") + b"\n"
        except UnicodeEncodeError:  # a lone surrogate (from a "\\ud800" escape): escape everything
            return json.dumps(response, separators=(",", ":")).encode("ascii") + b"\n"

    def serve(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        """Answer each line of ``stdin`` on ``stdout`` until ``stdin`` ends."""
        for line in stdin:
            response = self.handle_line(line)
            if response is None:
                continue
            try:
                data = self.encode(response)
            except (TypeError, ValueError) as exc:  # a result JSON cannot carry
                data = self.encode(_error(response.get("id"), INTERNAL_ERROR, "Internal error",
                                          f"the result cannot be sent as JSON: {exc}"))
            try:
                stdout.write(data)
                stdout.flush()
            except BrokenPipeError:  # the client went away
                return
            if self.initialized and not self._following:
                self.start_following()

    def start_following(self) -> None:
        """Start the follower (once), in the background: called after the
        ``initialize`` answer is written."""
        if self._following:
            return
        self._following = True
        if self.follower is not None:
            self.follower.start(background=True)


def serve(toolbox: Toolbox, follower: Follower | None = None) -> None:
    """Serve ``toolbox`` on this process's stdin/stdout until stdin closes.

    ``follower`` (not started yet) is started once ``initialize`` is answered
    and stopped when stdin closes.

    The protocol gets its own copy of the stdout descriptor and descriptor 1
    (and ``sys.stdout``) become stderr, so a stray print, or a child process
    writing to its inherited stdout, cannot corrupt the message stream.
    """
    sys.stdout.flush()
    out: BinaryIO
    try:
        out = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    except OSError:  # no usable stderr: keep writing to stdout as it is
        out = sys.stdout.buffer
    try:
        StdioServer(toolbox, follower).serve(sys.stdin.buffer, out)
    finally:
        if follower is not None:
            follower.stop()
        try:
            out.flush()
        except OSError:
            pass
