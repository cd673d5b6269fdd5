"""``gitmem view --serve``: the generated page served on this machine only, to its owner.

A tiny HTTP server bound to a loopback address that answers ``GET /`` (and
``HEAD``) with the page file and 404 to anything else.  It reads the file at each
request (so memory stays flat and a regenerated page is served as it is now) and
never lists folders or serves other files.

The page holds every version of every memory, so before anything else each
request must pass three checks (the rules are :mod:`gitmem.localhttp`'s, shared
with ``gitmem mcp --http``):

1. its ``Host`` header names the address served (``127.0.0.1:PORT``, or
   ``localhost:PORT``): a web page that reaches the port through a name of its
   own (DNS rebinding, ``Host: evil.example:PORT``) is refused, 403;
2. an ``Origin`` header, when sent, is this server's own: another site's script
   is refused, 403;
3. it carries the server's token, in the address (``/?token=...``, the URL
   ``gitmem view --serve`` prints) or in the cookie the server sets when the token
   in the address was right (``HttpOnly``, ``SameSite=Strict``, path ``/``, for
   this browser session), so a reload or a bookmark of ``/`` works.  Anything
   else is refused, 401.  Another user of the machine, or a page that only knows
   the port, gets nothing.

Tokens are compared in constant time; a refusal is a short plain-text answer.
"""

from __future__ import annotations

import errno
import re
import shutil
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..errors import Conflict, InvalidInput
from ..localhttp import (
    allowed_hosts_and_origins,
    authority,
    clean_token,
    foreign_host,
    foreign_origin,
    new_token,
    normalize_host,
    token_matches,
)

__all__ = ["PageServer", "serve_page", "checked_token", "TOKEN_ENV", "COOKIE_PREFIX"]

#: The environment variable ``gitmem view --serve`` reads its token from (when no ``--token``).
TOKEN_ENV = "GITMEM_VIEW_TOKEN"
#: The cookie's name is this and the port: two servers on two ports keep their own.
COOKIE_PREFIX = "gitmem_view_"
# A token travels in a URL and a cookie: URL-safe characters only, and long enough not to guess.
_TOKEN = re.compile(r"[A-Za-z0-9._~-]{16,256}")

# Headers of every answer: no caching of a page that changes with the vault, no sniffing,
# and the same no-network policy the page carries in its own <meta> tag.
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}


def checked_token(token: str | None) -> str:
    """The token a server is to use: ``token`` if it is a usable one, a new random one if
    ``token`` is None or blank; a token with other characters, or shorter than 16, is refused."""
    token = clean_token(token)
    if token is None:
        return new_token()
    if not _TOKEN.fullmatch(token):
        raise InvalidInput("the view token must be 16 to 256 characters of A-Z, a-z, 0-9, '.', '_', '~' or '-'",
                           code="invalid_token",
                           hint=f"Leave --token (and {TOKEN_ENV}) unset to get a random token each run.")
    return token


class PageServer(ThreadingHTTPServer):
    """The HTTP server of one page file, for the holder of ``token`` only."""

    daemon_threads = True

    def __init__(self, page: Path, host: str, port: int, token: str) -> None:
        self.page = page
        self.token = token
        host = normalize_host(host)
        try:
            super().__init__((host, port), _PageHandler)
        except OSError as exc:
            where = authority(host, port)
            if exc.errno == errno.EADDRINUSE:
                raise Conflict(f"cannot serve the view on {where}: the port is already in use", code="port_in_use",
                               hint="Pick another port with --port, or 0 for a free one.") from None
            raise InvalidInput(f"cannot serve the view on {where}: {exc.strerror or exc}", code="cannot_bind",
                               hint="Use a port of 1024 or above (or 0 for a free one).") from None
        self.host, self.port = host, int(self.server_address[1])
        self.hosts, self.origins = allowed_hosts_and_origins(host, self.port)
        self.cookie = f"{COOKIE_PREFIX}{self.port}"

    @property
    def address(self) -> str:
        """``http://HOST:PORT/``: where the page is, without the token."""
        return f"http://{authority(self.host, self.port)}/"

    @property
    def url(self) -> str:
        """The address to open: the page with the token."""
        return f"{self.address}?token={self.token}"


class _PageHandler(BaseHTTPRequestHandler):
    server: PageServer
    server_version = "gitmem-view"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        server = self.server
        if foreign_host(self.headers.get("Host"), server.hosts):
            self._plain(403, f"Forbidden: this server answers only at {server.address}", body)
            return
        if foreign_origin(self.headers.get("Origin"), server.origins):
            self._plain(403, "Forbidden: requests from other sites are refused", body)
            return
        parts = urlsplit(self.path)
        given = parse_qs(parts.query).get("token", [])
        in_address = any(token_matches(t, server.token) for t in given)
        if not in_address and not token_matches(self._cookie(), server.token):
            self._plain(401, "A valid token is needed: open the address gitmem view --serve printed", body)
            return
        if parts.path not in ("/", "/index.html", "/" + server.page.name):
            self._plain(404, "Only the page is served here: /", body)
            return
        try:
            handle = server.page.open("rb")
        except OSError:
            self._plain(404, "The page file is gone; run gitmem view again", body)
            return
        with handle:
            size = handle.seek(0, 2)
            handle.seek(0)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(size))
            for name, value in HEADERS.items():
                self.send_header(name, value)
            if in_address:
                # For the page's later requests (a reload of /, a bookmark): this browser
                # session only, never readable by a script, never sent by another site.
                self.send_header("Set-Cookie", f"{server.cookie}={server.token}; Path=/; HttpOnly; "
                                               "SameSite=Strict")
            self.end_headers()
            if body:
                try:
                    shutil.copyfileobj(handle, self.wfile, 1 << 20)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the browser went away mid-page

    def _cookie(self) -> str | None:
        """The value of this server's cookie in the request, if any."""
        jar: SimpleCookie = SimpleCookie()
        for header in self.headers.get_all("Cookie") or []:
            try:
                jar.load(header)
            except CookieError:
                continue  # another site's odd cookie on this host must not cost the page
        morsel = jar.get(self.server.cookie)
        return morsel.value if morsel is not None else None

    def _plain(self, status: int, text: str, body: bool) -> None:
        data = (text + "\n").encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass  # the terminal shows the URL and nothing else


def serve_page(page: str | Path, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
               on_ready: Callable[[PageServer], None] | None = None) -> None:
    """Serve ``page`` at ``http://HOST:PORT/`` to the holder of ``token`` until
    interrupted (Ctrl-C: returns).

    ``token`` None (or blank) makes a random one (see :func:`checked_token`); ``port`` 0
    picks a free port; ``on_ready(server)`` is called once it listens (``server.url``
    is the address to open, with the token)."""
    server = PageServer(Path(page), host, port, checked_token(token))
    try:
        if on_ready is not None:
            on_ready(server)
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
