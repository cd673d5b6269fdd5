"""Talking to a remote: transport failures turned into one clear :class:`SyncError`
(URLs redacted), and the connections a failed request leaves open released.

Used by :mod:`gitmem.sync.syncer` around every fetch, push and clone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..errors import GitmemError, SyncError
from .remotes import http_credentials, redact, ssh_command

if TYPE_CHECKING:  # pragma: no cover
    from dulwich.client import GitClient

    from ..store.git import GitStore

__all__ = ["RemoteMoved", "client_for", "close_client", "release_transport", "remote_errors", "git_errors",
           "server_said"]


def client_for(git: GitStore, url: str) -> tuple[GitClient, str]:
    """The dulwich client and path for ``url`` (credentials from git's helpers, ssh
    from ``GIT_SSH_COMMAND``); transport errors become :class:`SyncError`.

    A remote that is a folder (a USB drive, a shared folder) is read by dulwich itself,
    without pack bitmaps: dulwich 1.2 fails every fetch from a repository holding packs
    with and without bitmaps side by side (which ``git gc`` followed by a push makes),
    asking for the bitmap of a pack that has none."""
    from dulwich.client import LocalGitClient, get_transport_and_path
    username, password = http_credentials(git, url)
    with remote_errors(url):
        client, path = get_transport_and_path(url, config=git.repo.get_config_stack(), quiet=True,
                                              username=username, password=password, ssh_command=ssh_command())
    if type(client) is LocalGitClient:
        client = _local_client_without_bitmaps()
    return client, path


def _local_client_without_bitmaps() -> GitClient:
    import os
    from contextlib import closing

    from dulwich.client import LocalGitClient
    from dulwich.repo import Repo

    class FolderClient(LocalGitClient):
        """dulwich's client of a local repository, whose objects it walks without bitmaps."""

        @classmethod
        def _open_repo(cls, path: str | bytes) -> Any:   # dulwich opens the remote through this
            repo = Repo(path if isinstance(path, str) else os.fsdecode(path))
            provider = repo.object_store.get_reachability_provider

            def without_bitmaps(prefer_bitmaps: bool = True) -> Any:
                return provider(prefer_bitmaps=False)
            repo.object_store.get_reachability_provider = without_bitmaps  # type: ignore[method-assign]
            return closing(repo)

    return FolderClient()


class RemoteMoved(Exception):
    """The remote branch is not where we fetched it: fetch and integrate again.

    ``busy``: another push held the remote's ref lock (it may have failed too, so
    the branch may still be where we saw it); retry without calling the push refused."""

    def __init__(self, busy: bool = False) -> None:
        super().__init__("busy" if busy else "moved")
        self.busy = busy


def server_said(data: bytes | bytearray) -> str:
    """The last lines a server printed while refusing (a hook's reason, "No space left on
    device"), for an error message: `` (the server said: ...)``, or ``""``."""
    text = bytes(data).decode("utf-8", "replace").replace("\r", "\n")
    lines = [re.sub(r"[\x00-\x1f\x7f]", "", line).strip() for line in text.split("\n")]
    lines = [line[:200] for line in lines if line]
    return f" (the server said: {redact(' / '.join(lines[-3:]))})" if lines else ""


def close_client(client: GitClient) -> None:
    """Release the client's connections (http keeps a pool of sockets)."""
    try:
        client.close()
        pool = getattr(client, "pool_manager", None)
        if pool is not None:
            pool.clear()
    except Exception:  # noqa: BLE001 - cleanup must not hide the sync's own result
        pass


def release_transport(exc: BaseException) -> None:
    """Close the http responses and ssh connections a failed request left open.

    dulwich raises ``HTTPUnauthorized`` (401), ``NotGitRepository`` (404) and
    other status errors without closing the response it read them from, so its
    socket would stay open until garbage collection (a ``ResourceWarning``);
    over ssh, a server that hangs up while the protocol version is negotiated
    (a refused key, a dropped connection) leaves the connection's ``Protocol``
    and its ``ssh`` process open the same way.  Both are found in the frames
    the exception passed through; closing the ``Protocol`` waits for ``ssh``."""
    from dulwich.protocol import Protocol
    try:
        from urllib3.response import BaseHTTPResponse
    except ImportError:  # pragma: no cover - dulwich's http client needs urllib3
        return
    tb = exc.__traceback__
    while tb is not None:
        for value in list(tb.tb_frame.f_locals.values()):
            if isinstance(value, (BaseHTTPResponse, Protocol)):
                try:
                    value.close()
                except Exception:  # noqa: BLE001 - best effort cleanup
                    pass
        tb = tb.tb_next


@contextmanager
def remote_errors(url: str) -> Iterator[None]:
    """Turn transport failures into one clear :class:`SyncError`, URLs redacted."""
    from dulwich.client import HTTPUnauthorized
    from dulwich.errors import GitProtocolError, HangupException, NotGitRepository
    shown = redact(url)
    try:
        try:
            yield
        except Exception as exc:
            release_transport(exc)
            raise
    except (SyncError, RemoteMoved):
        raise
    except HTTPUnauthorized:
        raise SyncError(f"authentication failed for {shown}", code="auth_failed",
                        hint="Set up a git credential helper or ~/.git-credentials, or export "
                             "GITMEM_GIT_USERNAME and GITMEM_GIT_PASSWORD (a token).") from None
    except NotGitRepository:
        raise SyncError(f"no git repository at {shown}", code="remote_unreachable",
                        hint="Check the path or URL (gitmem remote list); the vault is unchanged.") from None
    except HangupException as exc:
        text = redact(str(exc) or "the remote hung up")
        code = "auth_failed" if re.search(r"(?i)permission denied|authenticat|publickey", text) else \
            "remote_unreachable"
        raise SyncError(f"cannot reach {shown}: {text}", code=code,
                        hint="Check the network, the URL and your ssh keys/agent; the vault is unchanged.") from None
    except (GitProtocolError, OSError) as exc:
        raise SyncError(f"cannot reach {shown}: {redact(str(exc)) or type(exc).__name__}",
                        code="remote_unreachable",
                        hint="Check the network and the URL; the vault is unchanged.") from None
    except Exception as exc:  # noqa: BLE001 - urllib3 and ssh errors vary by version
        name = type(exc).__name__
        code = "remote_unreachable" if any(w in name for w in ("Connection", "Timeout", "MaxRetry", "NewConnection",
                                                               "Resolution", "Protocol", "SSL")) else "sync_error"
        raise SyncError(f"sync with {shown} failed: {name}: {redact(str(exc))}", code=code,
                        hint="The vault is unchanged.") from None


@contextmanager
def git_errors(what: str) -> Iterator[None]:
    """Anything that is not a gitmem error (dulwich's, the file system's) becomes a
    :class:`SyncError`: a sync racing other processes never ends in a traceback."""
    try:
        yield
    except (GitmemError, RemoteMoved):
        raise
    except Exception as exc:  # noqa: BLE001 - dulwich and OS errors vary
        raise SyncError(f"{what} failed: {type(exc).__name__}: {redact(str(exc))}", code="sync_error",
                        hint="Run it again; what was committed so far is kept.") from exc
