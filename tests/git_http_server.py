"""A real git smart-HTTP server for tests: ``git http-backend`` (CGI) behind
Python's ``http.server`` on 127.0.0.1, with HTTP basic auth.

What GitHub, GitLab or Gitea do for ``https://`` remotes, minus TLS: a request
without (valid) credentials gets ``401`` and ``WWW-Authenticate: Basic``; an
authenticated one runs ``git http-backend`` with the CGI variables git
documents (``GIT_PROJECT_ROOT``, ``GIT_HTTP_EXPORT_ALL``, ``REQUEST_METHOD``,
``PATH_INFO``, ``QUERY_STRING``, ``CONTENT_TYPE``, ``REMOTE_USER`` ...); the
request body is streamed to it and its output streamed back.

Fault modes, to test a server that misbehaves (set on the running server):
``delay`` seconds before every answer (a slow server), and ``fault =
"drop"``: the connection is cut half-way through the next pack it sends (a
fetch), once.
"""

from __future__ import annotations

import base64
import http.server
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["GitHttpServer", "http_backend"]


def http_backend() -> str | None:
    """Path of ``git http-backend`` (in ``git --exec-path``), or None."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        exec_path = subprocess.run([git, "--exec-path"], capture_output=True, text=True,
                                   check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    backend = Path(exec_path) / "git-http-backend"
    return str(backend) if os.access(backend, os.X_OK) else None


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # the response ends when the connection closes

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        self._serve()

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        self._serve()

    def log_message(self, *args: Any) -> None:
        pass

    def _user(self) -> str | None:
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        try:
            user, _, password = base64.b64decode(header[6:]).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return user if (user, password) == self.server.credentials else None

    def _serve(self) -> None:
        self.server.requests.append(f"{self.command} {self.path}")
        if self.server.delay:
            time.sleep(self.server.delay)
        user = self._user()
        if user is None:
            self.server.refused += 1
            self._drain()
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "REMOTE_USER": user,
            "REMOTE_ADDR": self.client_address[0],
        }
        for header, name in (("Content-Encoding", "HTTP_CONTENT_ENCODING"), ("Git-Protocol", "GIT_PROTOCOL")):
            if self.headers.get(header):
                env[name] = self.headers[header]
        length = self.headers.get("Content-Length")
        if length is not None:
            env["CONTENT_LENGTH"] = length
        proc = subprocess.Popen([self.server.backend], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdin is not None and proc.stdout is not None
        writer = threading.Thread(target=self._copy_body, args=(proc.stdin,), daemon=True)
        writer.start()
        try:
            status, headers = "200 OK", []
            while True:
                line = proc.stdout.readline().decode("latin-1").rstrip("\r\n")
                if not line:
                    break
                key, _, value = line.partition(":")
                if key.lower() == "status":
                    status = value.strip()
                else:
                    headers.append((key, value.strip()))
            code, _, reason = status.partition(" ")
            self.send_response(int(code), reason or None)
            for key, value in headers:
                self.send_header(key, value)
            self.end_headers()
            drop = self.server.fault == "drop" and path.endswith("/git-upload-pack")
            if drop:
                self.server.fault = None
                self.server.dropped += 1
                answer = proc.stdout.read()
                self.wfile.write(answer[:len(answer) // 2])   # the negotiation and part of the pack
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            while chunk := proc.stdout.read(65536):
                self.wfile.write(chunk)
        finally:
            writer.join()
            proc.stdout.close()
            proc.wait()

    def _copy_body(self, sink: Any) -> None:
        """Stream the request body (Content-Length or chunked) into the backend."""
        try:
            for chunk in self._body():
                sink.write(chunk)
        except (BrokenPipeError, ConnectionError):
            pass
        finally:
            try:
                sink.close()
            except BrokenPipeError:
                pass

    def _body(self) -> Any:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline().strip():
                        pass  # trailers
                    return
                yield self.rfile.read(size)
                self.rfile.readline()
        left = int(self.headers.get("Content-Length") or 0)
        while left > 0:
            chunk = self.rfile.read(min(left, 65536))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk

    def _drain(self) -> None:
        for _ in self._body():
            pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = False  # server_close() waits for every request being served
    root: Path
    backend: str
    credentials: tuple[str, str]
    requests: list[str]
    refused: int
    delay: float
    fault: str | None
    dropped: int


class GitHttpServer:
    """``with GitHttpServer(root, ("u", "p")) as server: server.url("remote.git")``.

    Serves every repository under ``root`` on 127.0.0.1 (``port``, default a free one);
    ``requests`` lists what was asked, ``refused`` counts 401 answers."""

    def __init__(self, root: Path, credentials: tuple[str, str], port: int = 0) -> None:
        backend = http_backend()
        if backend is None:
            raise RuntimeError("git http-backend not found")
        self._server = _Server(("127.0.0.1", port), _Handler)   # port 0: a free one
        self._server.root = Path(root)
        self._server.backend = backend
        self._server.credentials = credentials
        self._server.requests = []
        self._server.refused = 0
        self._server.delay = 0.0
        self._server.fault = None
        self._server.dropped = 0
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def requests(self) -> list[str]:
        return self._server.requests

    @property
    def refused(self) -> int:
        return self._server.refused

    @property
    def dropped(self) -> int:
        """How many connections the ``drop`` fault cut."""
        return self._server.dropped

    def misbehave(self, *, delay: float = 0.0, fault: str | None = None) -> None:
        """Answer every request ``delay`` seconds late; ``fault="drop"``: cut the next pack."""
        self._server.delay = delay
        self._server.fault = fault

    def url(self, repo: str) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/{repo}"

    def __enter__(self) -> GitHttpServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
