"""Sharing a vault through an ordinary git remote: fetch, integrate, push (dulwich only).

Part of the :class:`~gitmem.vault.Vault` (a mixin).  ``vault.sync("origin")``:

1. **fetch** the remote's branch (``refs/heads/main``) into the object store
   and record it as ``refs/remotes/<name>/main`` (network; no lock held);
2. **integrate** under the vault lock: memory files edited outside gitmem
   are committed first (as the watcher would; a generated ``MEMORY.md`` that
   someone edited too), then a fast-forward when our branch has nothing new,
   otherwise a real merge commit (two parents) built in the object store by
   :mod:`gitmem.treemerge`, memory by memory, with ``MEMORY.md`` regenerated.
   The working tree and ``.git/index`` follow; a file the incoming change
   touches that holds other uncommitted edits stops the sync
   (``dirty_worktree``) before anything is written.  The catalog, the
   memory history and the search index then catch up from the diff of what
   arrived (the same paths as after a ``git pull``);
3. **push** with a compare-and-swap on the remote branch, never forced.  If
   the remote moved in between, fetch and integrate again (bounded retries).

Credentials are never stored by gitmem: ssh uses the ssh agent and keys; for
https, a URL with a user or password is refused by :meth:`SyncMixin.add_remote`
and credentials come, at sync time only, from ``GITMEM_GIT_USERNAME`` /
``GITMEM_GIT_PASSWORD``, the configured git ``credential.helper``, or
``~/.git-credentials``.  Every URL in a message has its user info replaced by
``***``.  A failure before the integrate step leaves the vault untouched.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator
from urllib.parse import urlparse

from .errors import Conflict, InvalidInput, NotFound, SyncError
from .gitstore import FileChange
from .treemerge import CONFLICT_FIELD, CONFLICT_STATUS, merge_trees

if TYPE_CHECKING:  # pragma: no cover
    from dulwich.client import GitClient
    from .config import Identity
    from .vault import Vault

__all__ = ["SyncMixin", "SyncReport", "Remote", "redact"]

MEMORY_INDEX = "MEMORY.md"
MAX_ATTEMPTS = 5
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@")
_ZERO = b"0" * 40


def redact(text: str) -> str:
    """``text`` with the user info (user, password, token) of every URL in it replaced by ``***``."""
    return _USERINFO.sub(r"\1***@", text)


@dataclass(frozen=True)
class Remote:
    """A configured remote (``url`` already redacted)."""

    name: str
    url: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "url": self.url}


@dataclass
class SyncReport:
    """What one :meth:`SyncMixin.sync` did.

    ``action``: ``up_to_date``, ``pushed`` (only we had new commits),
    ``fast_forward`` or ``merge``.  ``arrived``: commits that came in;
    ``changed``: files the integrate step changed in the working tree;
    ``merged``: memory ids merged field by field; ``conflicts``: conflict
    copies made ({id, path, copy_id, copy_path}); ``kept``: ids deleted on one
    side and changed on the other (the changed version was kept).
    """

    remote: str
    url: str
    before: str | None = None
    after: str | None = None
    action: str = "up_to_date"
    arrived: int = 0
    changed: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    conflicts: list[dict[str, str]] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    kept_ours: list[str] = field(default_factory=list)
    outside_edits: str | None = None
    pushed: bool = False
    retries: int = 0
    duration_ms: float = 0.0
    timings_ms: dict[str, float] = field(default_factory=dict)  # fetch, integrate, catch_up, push

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class _RemoteMoved(Exception):
    """The remote branch is not where we fetched it: fetch and integrate again."""


class SyncMixin:
    """Remote and sync methods of the Vault."""

    # ----------------------------------------------------------- remotes
    @classmethod
    def clone(cls, url: str, path: "str | os.PathLike[str]", **kwargs: Any) -> "Vault":
        """Copy a shared vault from ``url`` into the new folder ``path`` (remote ``origin``)
        and open it; ``kwargs`` go to :meth:`Vault.open` (``author``, ``clock``)."""
        import io
        from pathlib import Path
        from dulwich import porcelain
        url = _normalise_url(url)
        target = Path(path).expanduser()
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise InvalidInput(f"{target} already exists and is not an empty folder")
        created = not target.exists()
        username, password = _http_credentials(None, url)
        extra = {"username": username, "password": password} if password else {}
        try:
            with _remote_errors(url):
                porcelain.clone(url, str(target), checkout=True, errstream=io.BytesIO(), **extra).close()
        except BaseException:
            if created:
                shutil.rmtree(target, ignore_errors=True)
            raise
        vault: "Vault" = cls.open(target, **kwargs)  # type: ignore[attr-defined]
        vault.sync_history()  # record the history now, so later syncs pay only for what arrives
        return vault

    def add_remote(self: "Vault", name: str, url: str) -> Remote:
        """Configure remote ``name`` (in ``.git/config``, like ``git remote add``).

        ``url``: a local path, ``ssh://``/``user@host:path`` or ``https://``.
        An http(s) URL holding a user name or password is refused: gitmem never
        stores credentials (see the module doc for where they come from).
        """
        _check_name(name)
        url = _normalise_url(url)
        with self.lock.hold():
            config = self.git.repo.get_config()
            section = (b"remote", name.encode())
            if config.has_section(section):
                raise Conflict(f"remote {name!r} already exists",
                               hint=f"Remove it first: gitmem remote remove {name}")
            config.set(section, b"url", url.encode())
            config.set(section, b"fetch", f"+refs/heads/*:refs/remotes/{name}/*".encode())
            config.write_to_path()
        return Remote(name, redact(url))

    def remove_remote(self: "Vault", name: str) -> Remote:
        """Forget remote ``name`` and its remote-tracking refs (the remote itself is untouched)."""
        url = self._remote_url(name)
        with self.lock.hold():
            repo = self.git.repo
            config = repo.get_config()
            del config[(b"remote", name.encode())]
            config.write_to_path()
            prefix = f"refs/remotes/{name}/".encode()
            for ref in [r for r in repo.refs.allkeys() if r.startswith(prefix)]:
                repo.refs.remove_if_equals(ref, None)
        return Remote(name, redact(url))

    def remotes(self: "Vault") -> list[Remote]:
        """The configured remotes, URLs redacted."""
        config = self.git.repo.get_config()
        out = []
        for section in config.sections():
            if len(section) == 2 and section[0] == b"remote":
                try:
                    url = config.get(section, b"url").decode("utf-8", "replace")
                except KeyError:
                    continue
                out.append(Remote(section[1].decode("utf-8", "replace"), redact(url)))
        return sorted(out, key=lambda r: r.name)

    def _remote_url(self: "Vault", name: str) -> str:
        if not isinstance(name, str) or not name:
            raise InvalidInput("remote name is empty")
        config = self.git.repo.get_config()
        try:
            return config.get((b"remote", name.encode()), b"url").decode("utf-8")
        except KeyError:
            raise NotFound(f"no remote named {name!r}", code="remote_not_found",
                           hint="Add one: gitmem remote add origin URL") from None

    def conflicts(self: "Vault") -> list[dict[str, Any]]:
        """Conflict copies a sync made and nobody has resolved yet.

        Each is {id, path, title, conflict_of, original_path}.  Resolve one by
        merging what matters into the original (``update``) and deleting the
        copy (``delete(copy_id, hard=True)``), or by keeping the copy instead.
        """
        self.scan()
        out = []
        for row in self.catalog.all_rows():
            if row.meta.get("status") != CONFLICT_STATUS:
                continue
            original = str(row.meta.get(CONFLICT_FIELD, ""))
            rows = self.catalog.by_id(original) if original else []
            out.append({"id": row.id, "path": row.path, "title": row.meta.get("title"),
                        "conflict_of": original or None,
                        "original_path": rows[0].path if rows else None})
        return out

    # -------------------------------------------------------------- sync
    def sync(self: "Vault", remote: str = "origin", *, author: "str | Identity | None" = None,
             max_attempts: int = MAX_ATTEMPTS) -> SyncReport:
        """Fetch from ``remote``, integrate (fast-forward or merge), push.

        Never force-pushes and never drops a memory (see :mod:`gitmem.treemerge`).
        Raises :class:`SyncError` (``remote_unreachable``, ``auth_failed``,
        ``push_rejected``, ``dirty_worktree``) with the vault left usable.
        """
        started = time.perf_counter()
        who = self._author(author)
        url = self._remote_url(remote)
        report = SyncReport(remote, redact(url), before=self.head)
        client, path = self._client(url)
        try:
            self._sync_loop(client, path, url, remote, who, report, max_attempts)
        finally:
            _close_client(client)
        report.after = self.head
        report.duration_ms = round((time.perf_counter() - started) * 1000, 1)
        return report

    def _sync_loop(self: "Vault", client: "GitClient", path: str, url: str, remote: str,
                   who: "Identity", report: SyncReport, max_attempts: int) -> None:
        branch = self.git.head_ref()
        previous: bytes | None | object = object()
        for attempt in range(max(1, max_attempts)):
            with _timer(report, "fetch"):
                tip = self._fetch(client, path, url, branch, remote)
            if attempt and tip == previous:
                raise SyncError(f"the remote {redact(url)} refused the push",
                                code="push_rejected", hint="Check the remote's branch protection.")
            previous = tip
            with self.lock.hold(), _timer(report, "integrate"):
                self._integrate(remote, tip, who, report)
            head = self.git.head()
            if head is None or head == tip:
                break
            try:
                with _timer(report, "push"):
                    self._push(client, path, url, branch, tip, head)
            except _RemoteMoved:
                report.retries += 1
                continue
            report.pushed = True
            self._track(remote, branch, head)
            if report.action == "up_to_date":
                report.action = "pushed"
            break
        else:
            raise SyncError(f"the remote {redact(url)} kept moving; gave up after {max_attempts} attempts",
                            code="push_rejected", hint="Sync again; everything so far is committed locally.")

    # ---------------------------------------------------------- transport
    def _client(self: "Vault", url: str) -> tuple["GitClient", str]:
        from dulwich.client import get_transport_and_path
        username, password = _http_credentials(self, url)
        with _remote_errors(url):
            return get_transport_and_path(url, config=self.git.repo.get_config_stack(), quiet=True,
                                          username=username, password=password)

    def _fetch(self: "Vault", client: "GitClient", path: str, url: str, branch: bytes,
               remote: str) -> bytes | None:
        """Fetch ``branch`` from the remote; its tip (None: the remote has no such branch)."""
        store = self.git.repo.object_store

        def wants(refs: dict[bytes, bytes], *_: Any, **__: Any) -> list[bytes]:
            sha = refs.get(branch)
            return [sha] if sha and sha != _ZERO and sha not in store else []

        with _remote_errors(url):
            result = client.fetch(path.encode() if isinstance(path, str) else path, self.git.repo,
                                  determine_wants=wants)
        tip = (result.refs or {}).get(branch)
        tip = None if tip in (None, _ZERO) else tip
        if tip is not None:
            self._track(remote, branch, tip)
        return tip

    def _track(self: "Vault", remote: str, branch: bytes, sha: bytes) -> None:
        """Record the remote's tip as ``refs/remotes/<remote>/<branch>`` (what ``git status`` compares to)."""
        name = branch.rsplit(b"/", 1)[-1]
        self.git.repo.refs[b"refs/remotes/" + remote.encode() + b"/" + name] = sha
        config = self.git.repo.get_config()
        section = (b"branch", name)
        if not config.has_section(section):
            config.set(section, b"remote", remote.encode())
            config.set(section, b"merge", branch)
            config.write_to_path()

    def _push(self: "Vault", client: "GitClient", path: str, url: str, branch: bytes,
              expected: bytes | None, head: bytes) -> None:
        """Move the remote branch from ``expected`` to ``head``; :class:`_RemoteMoved` if it moved."""
        repo = self.git.repo
        moved: list[bool] = []

        def update_refs(refs: dict[bytes, bytes]) -> dict[bytes, bytes]:
            current = refs.get(branch)
            if (None if current in (None, _ZERO) else current) != expected:
                moved.append(True)
                return {}
            return {branch: head}

        def pack(have: Any, want: Any, *, ofs_delta: bool = False, progress: Any = None) -> Any:
            return repo.generate_pack_data(set(have), set(want), progress=progress, ofs_delta=ofs_delta)

        with _remote_errors(url):
            result = client.send_pack(path.encode() if isinstance(path, str) else path, update_refs, pack)
        if moved:
            raise _RemoteMoved()
        status = (result.ref_status or {}).get(branch)
        if status is not None:
            text = str(status)
            if any(w in text for w in ("non-fast-forward", "fetch first", "unable to set", "stale",
                                      "failed to lock", "cannot lock", "failed to update")):
                raise _RemoteMoved()
            raise SyncError(f"the remote {redact(url)} refused the push: {redact(text)}",
                            code="push_rejected")

    # ----------------------------------------------------------- integrate
    def _integrate(self: "Vault", remote: str, tip: bytes | None, who: "Identity",
                   report: SyncReport) -> None:
        """Bring the fetched ``tip`` into our branch and working tree (lock held)."""
        local = self.git.head()
        if tip is None or tip == local or (local is not None and self.git.is_ancestor(tip, local)):
            return
        if local is None:
            raise SyncError("the vault has no commits yet", hint="Create it with gitmem init first.")
        from .purge import purged_in
        back = purged_in(self, self.git.walk_new(local, tip))
        if back:
            raise SyncError(
                f"{remote} still has memory {', '.join(back)}, which was purged here; "
                "merging would bring it back into history",
                code="purged_content",
                hint=f"Rewrite the remote too: 'git push --force {remote} HEAD' once nobody else "
                     "pushed (every other clone must purge or re-clone), then sync again.")
        report.outside_edits = self._commit_pending_edits()
        local = self.git.head()
        assert local is not None
        report.arrived += len(self.git.walk_new(local, tip))
        label = f"{remote}/{self.git.head_ref().rsplit(b'/', 1)[-1].decode()}"
        if self.git.is_ancestor(local, tip):
            changes = self._diff_files(local, tip)
            self._refuse_dirty(local, changes)
            self.git.fast_forward(local, tip, changes, f"sync: fast-forward to {label}")
            report.action = "fast_forward"
        else:
            changes = self._merge_commit(local, tip, label, who, report)
            report.action = "merge"
        report.changed = sorted(set(report.changed) | {c.path for c in changes})
        with _timer(report, "catch_up"):
            self._after_sync(changes)

    def _merge_commit(self: "Vault", local: bytes, tip: bytes, label: str, who: "Identity",
                      report: SyncReport) -> list[FileChange]:
        from dulwich.graph import find_merge_base
        bases = find_merge_base(self.git.repo, [local, tip])
        outcome = merge_trees(self.git, bases[0] if bases else None, local, tip,
                              is_memory_path=self.is_memory_path, tiers=self.config.tiers)
        changes = list(outcome.changes)
        self._refuse_dirty(local, changes)
        if getattr(self.config, "memory_index", False) and hasattr(self, "_memory_index_change"):
            written, removed = self._parse_changes(changes)
            index_change = self._memory_index_change(changes, written, removed)
            if index_change is not None:
                changes.append(index_change)
        lines = [f"merged {m}" for m in outcome.merged]
        lines += [f"conflict {c['id']}: theirs kept as {c['copy_path']}" for c in outcome.conflicts]
        lines += [f"kept {k} (deleted on one side, changed on the other)" for k in outcome.kept]
        lines += [f"kept ours at {p} (theirs is in the second parent)" for p in outcome.kept_ours]
        summary = f"sync: merge {label}"
        extras = [f"{len(outcome.conflicts)} conflict(s)"] if outcome.conflicts else []
        message = (f"{summary}{' (' + ', '.join(extras) + ')' if extras else ''}\n\n"
                   + ("\n".join(lines) + "\n\n" if lines else "")
                   + f"Op: sync\nAgent: {who.name}\n")
        self.git.commit_files(changes, message, who, when=self.clock().timestamp(),
                              merge_parents=[tip])
        report.merged += outcome.merged
        report.conflicts += outcome.conflicts
        report.kept += outcome.kept
        report.kept_ours += outcome.kept_ours
        return changes

    def _diff_files(self: "Vault", old: bytes, new: bytes) -> list[FileChange]:
        out: dict[str, bytes | None] = {}
        for change in self.git.changes_between(old, new):
            if change.old_path is not None and change.old_path not in out:
                out[change.old_path] = None
            if change.new_path is not None and change.new_sha is not None:
                out[change.new_path] = self.git.blob(change.new_sha)
        return [FileChange(p, d) for p, d in out.items()]

    def _commit_pending_edits(self: "Vault") -> str | None:
        """Commit outside edits (memory files, and a hand-edited MEMORY.md) before integrating."""
        sha = self.commit_outside_edits()
        head = self.git.head()
        try:
            on_disk = (self.root / MEMORY_INDEX).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            on_disk = None
        committed = self.git.read_at(head, MEMORY_INDEX)
        if on_disk is not None and committed is not None and on_disk != committed:
            sha = self.git.commit_files(
                [FileChange(MEMORY_INDEX, on_disk)],
                f"edit: {MEMORY_INDEX} (outside edit, kept before sync)\n\nOp: edit\n"
                f"Agent: {self.config.user.name}\n", self.config.user,
                when=self.clock().timestamp(), write_worktree=False).decode()
        return sha

    def _refuse_dirty(self: "Vault", head: bytes, changes: list[FileChange]) -> None:
        """Raise ``dirty_worktree`` if a file about to be replaced holds uncommitted edits."""
        from dulwich.objects import Blob
        dirty = []
        for change in changes:
            target = self.root / change.path
            try:
                data: bytes | None = target.read_bytes()
            except (FileNotFoundError, NotADirectoryError):
                data = None
            except IsADirectoryError:
                dirty.append(change.path)
                continue
            if data == change.data:
                continue
            committed = self.git.blob_sha_at(head, change.path)
            if data is None and committed is None:
                continue
            if data is None or committed is None or Blob.from_string(data).id != committed:
                dirty.append(change.path)
        if dirty:
            listing = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
            raise SyncError(f"uncommitted changes to files the sync would replace: {listing}",
                            code="dirty_worktree",
                            hint="Commit them with git (or undo them), then sync again; nothing was changed.")

    def _after_sync(self: "Vault", changes: list[FileChange]) -> None:
        """Catalog, history and search index catch up with what arrived (lock held).

        The same steps as after a local write (each arrived file parsed once,
        then catalog rows and index documents for just those paths), and the
        memory history from the new commits (:meth:`sync_history`).
        """
        from .config import VaultConfig
        from .reading import row_fields
        if any(c.path == ".gitmem.yaml" for c in changes):
            self.config = VaultConfig.load(self.root)
        written, removed = self._parse_changes(changes)
        with self.catalog.transaction():
            self.catalog.drop(removed)
            for path, (memory, blob_hash) in written.items():
                self.catalog.put(path, memory.id, os.stat(self.root / path), *row_fields(memory), blob_hash)
        self._index_changes(written, removed)
        self.sync_history()
        self._schedule_index_flush()


# ------------------------------------------------------------ helpers
def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name or name.endswith((".lock", ".")):
        raise InvalidInput(f"invalid remote name {name!r}",
                           hint="Use letters, digits, '.', '_' or '-', e.g. origin.")


def _normalise_url(url: str) -> str:
    if not isinstance(url, str) or not url.strip() or any(c in url for c in "\n\r\x00"):
        raise InvalidInput("remote URL is empty or has control characters")
    url = url.strip()
    parsed = urlparse(url)
    if "://" in url:
        if parsed.scheme not in ("file", "ssh", "git", "http", "https", "git+ssh", "ssh+git"):
            raise InvalidInput(f"unsupported remote URL scheme {parsed.scheme!r}",
                               hint="Use a path, ssh://, user@host:path or https://.")
        if parsed.password or (parsed.scheme in ("http", "https") and parsed.username):
            raise InvalidInput(
                f"the remote URL {redact(url)} contains credentials; gitmem does not store them",
                code="credentials_in_url",
                hint="Give the URL without user:password@ and provide credentials through a git "
                     "credential helper, ~/.git-credentials, or GITMEM_GIT_USERNAME/GITMEM_GIT_PASSWORD.")
        return url
    if re.match(r"^[^/\\]+@[^/\\:]+:", url) or (re.match(r"^[A-Za-z0-9.-]+:", url) and not os.path.exists(url)):
        return url  # scp-like ssh: user@host:path
    return os.path.abspath(os.path.expanduser(url))


def _http_credentials(vault: "Vault | None", url: str) -> tuple[str | None, str | None]:
    """(username, password) for an http(s) remote, looked up now and never stored."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return None, None
    if parsed.username:
        return None, None  # dulwich takes them from the URL (configured by hand)
    env_user, env_pass = os.environ.get("GITMEM_GIT_USERNAME"), os.environ.get("GITMEM_GIT_PASSWORD")
    if env_pass:
        return env_user or "git", env_pass
    found = _credential_helper(vault, parsed.scheme, parsed.hostname, parsed.path.lstrip("/")) \
        if vault is not None else None
    if found:
        return found
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    for fname in (os.path.join(home, ".git-credentials"), os.path.join(xdg, "git", "credentials")):
        try:
            with open(fname, encoding="utf-8") as handle:
                for line in handle:
                    entry = urlparse(line.strip())
                    if entry.scheme == parsed.scheme and entry.hostname == parsed.hostname and entry.password:
                        from urllib.parse import unquote
                        return unquote(entry.username or ""), unquote(entry.password)
        except OSError:
            continue
    return None, None


def _credential_helper(vault: "Vault", scheme: str, host: str, path: str) -> tuple[str, str] | None:
    """Ask the configured ``credential.helper`` (git's protocol: ``get`` on stdin)."""
    try:
        helper = vault.git.repo.get_config_stack().get((b"credential",), b"helper").decode()
    except KeyError:
        return None
    helper = helper.strip()
    if not helper:
        return None
    if helper.startswith("!"):
        argv = ["/bin/sh", "-c", helper[1:] + " get"]
    else:
        parts = shlex.split(helper)
        program = parts[0] if os.path.isabs(parts[0]) else shutil.which(f"git-credential-{parts[0]}")
        if program is None:
            return None
        argv = [program, *parts[1:], "get"]
    request = f"protocol={scheme}\nhost={host}\npath={path}\n\n"
    try:
        done = subprocess.run(argv, input=request, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    answer = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    if done.returncode == 0 and answer.get("password"):
        return answer.get("username", ""), answer["password"]
    return None


@contextmanager
def _timer(report: SyncReport, name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        spent = (time.perf_counter() - start) * 1000
        report.timings_ms[name] = round(report.timings_ms.get(name, 0.0) + spent, 1)


def _close_client(client: "GitClient") -> None:
    """Release the client's connections (http keeps a pool of sockets)."""
    try:
        client.close()
        pool = getattr(client, "pool_manager", None)
        if pool is not None:
            pool.clear()
    except Exception:  # noqa: BLE001 - cleanup must not hide the sync's own result
        pass


@contextmanager
def _remote_errors(url: str) -> Iterator[None]:
    """Turn transport failures into one clear :class:`SyncError`, URLs redacted."""
    from dulwich.client import HTTPUnauthorized
    from dulwich.errors import GitProtocolError, HangupException, NotGitRepository
    shown = redact(url)
    try:
        yield
    except (SyncError, _RemoteMoved):
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
