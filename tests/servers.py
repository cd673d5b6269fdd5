"""Real git servers on 127.0.0.1 for sync tests and benchmarks, that can be stopped
and started again (a partition) without changing their address.

* :class:`SshServer`: a throw-away ``sshd`` with its own host key and user keys
  (``client`` is authorized, ``stranger`` is not), in its own session so that
  stopping it stops every connection it forked;
* :class:`HttpServer`: ``git http-backend`` behind basic auth
  (:class:`tests.git_http_server.GitHttpServer`), restarted on the same port;
* :class:`PathServer`: a bare repository reached by its path; "stopped" means
  renamed away (as an unmounted share or a missing disk looks to a client).

The three can serve one bare repository, as one machine serves a real fleet.
Nothing here imports pytest: :class:`ServerUnavailable` says why a server cannot
run on this machine, and the caller decides (a test skips, a benchmark stops).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .git_http_server import GitHttpServer, http_backend

__all__ = ["ServerUnavailable", "SshServer", "HttpServer", "PathServer", "free_port", "processes",
           "ssh_children", "ssh_command", "http_backend"]


class ServerUnavailable(RuntimeError):
    """This machine cannot run the server (not installed, or it would not start)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def processes(match: Callable[[int, int, str], bool]) -> list[int]:
    """Ids of running processes whose (session id, parent id, name) ``match`` says yes to."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and match(int(fields[3]), int(fields[1]), name):
            found.append(int(entry.name))
    return found


def ssh_children() -> list[int]:
    """ssh clients this process started that still run (a leak)."""
    me = os.getpid()
    return processes(lambda session, parent, name: parent == me and name == "ssh")


def ssh_command(keys: Path, key: str = "client") -> str:
    """What a user puts in GIT_SSH_COMMAND for a key and a host gitmem has not seen."""
    return (f"ssh -i {keys / key} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no "
            f"-o UserKnownHostsFile={keys / 'known_hosts'} -o BatchMode=yes -o LogLevel=ERROR")


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


class SshServer:
    """``sshd`` on 127.0.0.1 serving the current user; ``prefix`` + an absolute path is a URL.

    ``SshServer(folder)`` makes the keys and the configuration (raises
    :class:`ServerUnavailable` when openssh is not installed); ``start()`` and
    ``stop()`` may be called again and again (same port, same keys)."""

    def __init__(self, folder: Path) -> None:
        self.sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        keygen = shutil.which("ssh-keygen")
        if not os.access(self.sshd, os.X_OK) or keygen is None or shutil.which("ssh") is None:
            raise ServerUnavailable("sshd (openssh-server) is not installed: no local ssh server to sync with")
        if os.geteuid() == 0:
            # sshd checks its privilege separation folder even for one local user; packages create
            # it at boot (tmpfiles), which a container never runs.  (Not root: sshd serves only the
            # current user, and start() says so if it cannot start.)
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.keys = folder
        folder.mkdir(mode=0o700, parents=True)
        for name in ("host", "client", "stranger"):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True)
        (folder / "authorized_keys").write_text((folder / "client.pub").read_text())
        (folder / "authorized_keys").chmod(0o600)
        self.port = free_port()
        self.config = folder / "sshd_config"
        self.config.write_text(
            f"ListenAddress 127.0.0.1\nPort {self.port}\nHostKey {folder / 'host'}\n"
            f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPidFile {folder / 'sshd.pid'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
            f"SetEnv PATH={os.environ.get('PATH', '/usr/bin:/bin')}\n")
        user = pwd.getpwuid(os.geteuid()).pw_name   # the account sshd runs as and serves
        self.prefix = f"ssh://{user}@127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.left_running: list[int] = []   # sessions still running 10 s after the last stop (a leak)

    def command(self, key: str = "client") -> str:
        """GIT_SSH_COMMAND for one of this server's keys (``client`` or ``stranger``)."""
        return ssh_command(self.keys, key)

    @property
    def running(self) -> bool:
        return self.proc is not None

    def start(self) -> None:
        """Start sshd and wait until it accepts connections."""
        if self.proc is not None:
            return
        # Its own session: sshd and the processes it forks per connection are stopped together.
        # Its log goes to a file: a pipe nobody reads fills up and every sshd process blocks on it.
        log = self.keys / "sshd.log"
        with log.open("ab") as sink:
            proc = subprocess.Popen([self.sshd, "-D", "-e", "-f", str(self.config)], stdout=subprocess.DEVNULL,
                                    stderr=sink, start_new_session=True)
        deadline = time.monotonic() + 10
        while not _listening(self.port):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                err = log.read_text(errors="replace").strip()
                raise ServerUnavailable(f"sshd could not be started here: {err[-200:]}")
            time.sleep(0.05)
        self.proc = proc

    def stop(self) -> None:
        """Stop sshd and every session it started (a connection in flight is cut)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        session = proc.pid
        deadline = time.monotonic() + 10
        while self.sessions(session) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.left_running = self.sessions(session)
        for pid in self.left_running:   # reported by left_running; not left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    @staticmethod
    def sessions(session: int) -> list[int]:
        """Processes still running in sshd's session ``session``."""
        return processes(lambda sid, parent, name: sid == session)

    def __enter__(self) -> SshServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HttpServer:
    """Smart HTTP for every repository under ``root``; ``stop()``/``start()`` keep the port."""

    def __init__(self, root: Path, credentials: tuple[str, str]) -> None:
        if http_backend() is None:
            raise ServerUnavailable("git http-backend is not installed")
        self.root, self.credentials = root, credentials
        self.port = free_port()
        self.server: GitHttpServer | None = None

    @property
    def running(self) -> bool:
        return self.server is not None

    def url(self, repo: str) -> str:
        return f"http://127.0.0.1:{self.port}/{repo}"

    def start(self) -> None:
        if self.server is not None:
            return
        deadline = time.monotonic() + 10
        while True:
            try:
                server = GitHttpServer(self.root, self.credentials, port=self.port)
                break
            except OSError:   # the old socket is still closing
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.server = server.__enter__()

    def stop(self) -> None:
        """Stop answering (requests being served are finished first)."""
        server, self.server = self.server, None
        if server is not None:
            server.__exit__(None, None, None)

    def __enter__(self) -> HttpServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PathServer:
    """A bare repository reached by its path; ``stop()`` renames it away, ``start()`` back."""

    def __init__(self, bare: Path) -> None:
        self.bare = bare
        self.away = bare.with_name(bare.name + ".away")

    @property
    def running(self) -> bool:
        return self.bare.exists()

    def start(self) -> None:
        if self.away.exists() and not self.bare.exists():
            self.away.rename(self.bare)

    def stop(self) -> None:
        if self.bare.exists():
            self.bare.rename(self.away)
