"""``gitmem view --serve``: the generated page served on this machine only.

A tiny HTTP server bound to a loopback address that answers ``GET /`` (and
``HEAD``) with the page file and 404 to anything else.  It reads the file at each
request (so memory stays flat and a regenerated page is served as it is now) and
never lists folders or serves other files.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..errors import Conflict, InvalidInput

__all__ = ["PageServer", "serve_page"]

# Headers of every answer: no caching of a page that changes with the vault, no sniffing,
# and the same no-network policy the page carries in its own <meta> tag.
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}


class PageServer(ThreadingHTTPServer):
    """The HTTP server of one page file."""

    daemon_threads = True

    def __init__(self, page: Path, host: str, port: int) -> None:
        self.page = page
        try:
            super().__init__((host, port), _PageHandler)
        except OSError as exc:
            where = f"{host}:{port}"
            if exc.errno == errno.EADDRINUSE:
                raise Conflict(f"cannot serve the view on {where}: the port is already in use", code="port_in_use",
                               hint="Pick another port with --port, or 0 for a free one.") from None
            raise InvalidInput(f"cannot serve the view on {where}: {exc.strerror or exc}", code="cannot_bind",
                               hint="Use a port of 1024 or above (or 0 for a free one).") from None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        # The standard library types the host as str or bytes; an AF_INET server's is a str.
        name = host.decode() if isinstance(host, bytes) else host
        return f"http://{name}:{port}/"


class _PageHandler(BaseHTTPRequestHandler):
    server: PageServer
    server_version = "gitmem-view"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        if self.path.split("?", 1)[0] not in ("/", "/index.html", "/" + self.server.page.name):
            self.send_error(404, "Only the page is served here: /")
            return
        try:
            handle = self.server.page.open("rb")
        except OSError:
            self.send_error(404, "The page file is gone; run gitmem view again")
            return
        with handle:
            size = handle.seek(0, 2)
            handle.seek(0)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(size))
            for name, value in HEADERS.items():
                self.send_header(name, value)
            self.end_headers()
            if body:
                try:
                    shutil.copyfileobj(handle, self.wfile, 1 << 20)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the browser went away mid-page

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass  # the terminal shows the URL and nothing else


def serve_page(page: str | Path, *, host: str = "127.0.0.1", port: int = 0,
               on_ready: Callable[[str], None] | None = None) -> None:
    """Serve ``page`` at ``http://HOST:PORT/`` until interrupted (Ctrl-C: returns).

    ``port`` 0 picks a free port; ``on_ready(url)`` is called once it listens."""
    server = PageServer(Path(page), host, port)
    try:
        if on_ready is not None:
            on_ready(server.url)
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
