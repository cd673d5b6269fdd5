"""Sharing a vault through an ordinary git remote: fetch, integrate, push (dulwich only).

``vault.sync("origin")`` (:class:`Syncer`):

1. **fetch** the remote's branch (``refs/heads/main``) into the object store
   and record it as ``refs/remotes/<name>/main`` (network; no lock held);
2. **integrate** under the vault lock: memory files edited outside gitmem
   are committed first (as the watcher would; a generated ``MEMORY.md`` that
   someone edited too), then a fast-forward when our branch has nothing new,
   otherwise a real merge commit (two parents) built in the object store by
   :mod:`gitmem.write.merge`, memory by memory, with ``MEMORY.md`` regenerated.
   The working tree and ``.git/index`` follow; a file the incoming change
   touches that holds other uncommitted edits stops the sync
   (``dirty_worktree``) before anything is written.  The catalog, the
   memory history and the search index then catch up from the diff of what
   arrived (the same paths as after a ``git pull``);
3. **push** with a compare-and-swap on the remote branch, never forced.  If
   the remote moved in between, fetch and integrate again (bounded retries).

Purges travel too (:mod:`gitmem.sync.forget`): the tombstones on
``refs/gitmem/purged`` are fetched with the branch and pushed before it; after
integrating, every tombstone not yet applied here is applied to this clone's
history, and a remote branch that still holds purged content is replaced by
the rewritten one with the same compare-and-swap (never a blind force).

Credentials are never stored by gitmem: ssh uses the ssh agent and keys; for
https, a URL with a user or password is refused by :meth:`Syncer.add_remote`
and credentials come, at sync time only, from ``GITMEM_GIT_USERNAME`` /
``GITMEM_GIT_PASSWORD``, the configured git ``credential.helper``, or
``~/.git-credentials``.  Every URL in a message has its user info replaced by
``***``.  A failure before the integrate step leaves the vault untouched.

What a remote sends is fetched into a quarantine (:mod:`gitmem.sync.quarantine`)
and checked before anything is written, before HEAD moves, before the
remote-tracking ref records it and before its objects join the vault's store
(so nothing refused is kept, and ``git fsck`` stays clean):

* the remote's branch must share history with ours (a vault is its history,
  not its folder): a branch with no common commit is another vault and is
  refused (``unrelated_history``); an empty remote just receives ours;

* every tree entry the incoming commits add or change (each commit against
  its parents, so the cost follows what arrives) must be a safe name (no
  ``..``, ``.``, ``.git`` in any case, ``/``, ``\\``, NUL, over-long or
  non-UTF-8 names) and a plain file or folder (no symbolic link, no
  submodule): else :class:`~gitmem.errors.UnsafeRemoteTree`.  ``clone``
  checks the whole history the same way before it checks anything out;
* every new file version is scanned with the vault's ``secrets:`` policy;
  ``refuse`` and ``redact`` (others' history cannot be rewritten here) refuse
  the sync (``secret_detected``), ``allow`` lets it in;
* a ``.gitmem.yaml`` that would weaken a safety setting (``secrets``,
  ``protected_types``, ``max_content_bytes``, ``trust``) arrives as a file, but the local
  value stays in force (pinned in ``.git/gitmem/config-pinned.json``, see
  :mod:`gitmem.config`) until ``gitmem config accept``; a bad value in it
  (out of range, not finite, an identity git cannot store) is held back, the
  default in force, and named in ``warnings``; a file that is not a mapping
  of settings refuses the sync (``invalid_remote_config``);
* a memory arriving with a file name (stem, any case, any tier) the vault
  already uses is renamed ``<stem>-2.md`` (``-3`` ...) in the merge commit, so
  ``[[links]]`` keep one target.  A fast-forward that needs such a rename
  becomes a merge commit (the remote's tip as second parent), so the rename
  and the arrival are one atomic step.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dulwich.objects import Commit, ObjectID, Tree
from dulwich.refs import Ref

from .. import safefs
from ..errors import Conflict, GitmemError, InvalidInput, InvalidMetadata, InvalidPath, NotFound, SyncError
from ..memory.paths import MEMORY_MD
from ..store.catalog import stem_key
from ..store.git import FileChange, blob_id
from ..store.git_index import prime_cached_trees
from ..store.purged import purge_stamp
from ..write.merge import CONFLICT_FIELD, CONFLICT_STATUS, merge_trees
from .forget import Forgetting, fetch_tombstones, purge_line, push_tombstones, tombstones_ahead, without_purged
from .quarantine import Quarantine
from .remote_trees import all_commits, check_incoming_trees
from .remotes import (
    add_config_section,
    check_name,
    http_credentials,
    normalise_url,
    redact,
    remove_config_section,
)
from .state import SyncState
from .transport import RemoteMoved, client_for, close_client, git_errors, remote_errors, server_said

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from dulwich.client import GitClient
    from dulwich.repo import Repo

    from ..config import Identity
    from ..ops.history import History
    from ..search.service import SearchService
    from ..store.reader import Reader
    from ..store.storage import Storage
    from ..write.memory_md import MemoryMd
    from ..write.pipeline import WritePipeline

__all__ = ["Syncer", "clone_repository", "SyncReport", "Remote", "redact", "check_incoming_trees"]

CONFIG_FILE = ".gitmem.yaml"
MAX_ATTEMPTS = 5
_ZERO = b"0" * 40


@dataclass(frozen=True)
class Remote:
    """A configured remote (``url`` already redacted)."""

    name: str
    url: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "url": self.url}


@dataclass
class SyncReport:
    """What one :meth:`Syncer.sync` did.

    ``action``: ``up_to_date``, ``pushed`` (only we had new commits),
    ``fast_forward`` or ``merge``.  ``arrived``: commits that came in;
    ``changed``: files the integrate step changed in the working tree;
    ``merged``: memory ids merged field by field; ``conflicts``: conflict
    copies made ({id, path, copy_id, copy_path}); ``kept``: ids deleted on one
    side and changed on the other (the changed version was kept);
    ``renamed``: arriving memories whose file name was taken ({from, to});
    ``purged``: memory ids a purge made on another machine removed from
    this clone's history (see :mod:`gitmem.sync.forget`);
    ``config_held``: safety settings of an arriving ``.gitmem.yaml`` kept at
    the local value until ``gitmem config accept`` ({key: {kept, incoming}});
    ``warnings``: catch-up steps after the commit that did not complete (the
    commit is in place; the caches catch up on the next scan).
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
    renamed: list[dict[str, str]] = field(default_factory=list)
    config_held: dict[str, dict[str, Any]] = field(default_factory=dict)
    purged: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    outside_edits: str | None = None
    pushed: bool = False
    retries: int = 0
    duration_ms: float = 0.0
    timings_ms: dict[str, float] = field(default_factory=dict)  # fetch, integrate, catch_up, push

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Syncer:
    """Remotes, and syncing with them: fetch, check, merge memory by memory, push."""

    def __init__(self, store: Storage, reader: Reader, pipeline: WritePipeline,
                 memory_md: MemoryMd, searcher: SearchService, history: History) -> None:
        self.store = store
        self.reader = reader
        self.pipeline = pipeline
        self.memory_md = memory_md
        self.searcher = searcher
        self.history = history
        # What the syncs of this clone did (.git/gitmem/sync-state.json), for `gitmem status`.
        self.state = SyncState(store)

    @property
    def head(self) -> str | None:
        sha = self.store.git.head()
        return sha.decode() if sha else None

    def add_remote(self, name: str, url: str) -> Remote:
        """Configure remote ``name`` (in ``.git/config``, like ``git remote add``).

        ``url``: a local path, ``ssh://``/``user@host:path`` or ``https://``.
        An http(s) URL holding a user name or password is refused: gitmem never
        stores credentials (see the module doc for where they come from).
        """
        check_name(name)
        url = normalise_url(url)
        with self.store.lock.hold():
            config = self.store.git.repo.get_config()
            section = (b"remote", name.encode())
            if config.has_section(section):
                raise Conflict(f"remote {name!r} already exists",
                               hint=f"Remove it first: gitmem remote remove {name}")
            add_config_section(self._config_path(), "remote", name,
                               [("url", url), ("fetch", f"+refs/heads/*:refs/remotes/{name}/*")])
        return Remote(name, redact(url))

    def remove_remote(self, name: str) -> Remote:
        """Forget remote ``name`` and its remote-tracking refs (the remote itself is untouched)."""
        url = self._remote_url(name)
        with self.store.lock.hold():
            repo = self.store.git.repo
            remove_config_section(self._config_path(), "remote", name)
            prefix = f"refs/remotes/{name}/".encode()
            for ref in [r for r in repo.refs.allkeys() if r.startswith(prefix)]:
                repo.refs.remove_if_equals(ref, None)
        return Remote(name, redact(url))

    def remotes(self) -> list[Remote]:
        """The configured remotes, URLs redacted."""
        config = self.store.git.repo.get_config()
        out = []
        for section in config.sections():
            if len(section) == 2 and section[0] == b"remote":
                try:
                    url = config.get(section, b"url").decode("utf-8", "replace")
                except KeyError:
                    continue
                out.append(Remote(section[1].decode("utf-8", "replace"), redact(url)))
        return sorted(out, key=lambda r: r.name)

    def _remote_url(self, name: str) -> str:
        if not isinstance(name, str) or not name:
            raise InvalidInput("remote name is empty")
        config = self.store.git.repo.get_config()
        try:
            return config.get((b"remote", name.encode()), b"url").decode("utf-8")
        except KeyError:
            raise NotFound(f"no remote named {name!r}", code="remote_not_found",
                           hint="Add one: gitmem remote add origin URL") from None

    def conflicts(self) -> list[dict[str, Any]]:
        """Conflict copies a sync made and nobody has resolved yet.

        Each is {id, path, title, conflict_of, original_path}.  Resolve one by
        merging what matters into the original (``update``) and deleting the
        copy (``delete(copy_id, hard=True)``), or by keeping the copy instead.
        """
        self.reader.scan()
        out = []
        for row in self.store.catalog.all_rows():
            if row.meta.get("status") != CONFLICT_STATUS:
                continue
            original = str(row.meta.get(CONFLICT_FIELD, ""))
            rows = self.store.catalog.by_id(original) if original else []
            out.append({"id": row.id, "path": row.path, "title": row.meta.get("title"),
                        "conflict_of": original or None,
                        "original_path": rows[0].path if rows else None})
        return out

    # -------------------------------------------------------------- sync
    def status(self, remote: str | None = None) -> dict[str, Any]:
        """The sync state of ``remote`` (:meth:`SyncState.status`) and, under ``purges``,
        one line on the purges this clone made or applied (None when there was none)."""
        state = self.state.status(remote)
        state["purges"] = purge_line(self.store, state["remote"], state.get("last_success"))
        return state

    def sync(self, remote: str = "origin", *, author: str | Identity | None = None,
             max_attempts: int = MAX_ATTEMPTS) -> SyncReport:
        """Fetch from ``remote``, integrate (fast-forward or merge), push.

        Never force-pushes and never drops a memory (see :mod:`gitmem.write.merge`).
        Raises :class:`SyncError` (``remote_unreachable``, ``auth_failed``,
        ``push_rejected``, ``dirty_worktree``, ``unsafe_remote_tree``,
        ``secret_detected``, ``invalid_remote_config``, ``purged_content``,
        ``unrelated_history``, ``sync_error``) with the vault left usable; never
        a raw exception.
        """
        started = time.perf_counter()
        who = self.store.author_of(author)
        url = self._remote_url(remote)
        report = SyncReport(remote, redact(url), before=self.head)
        with self.state.recording(report):   # for `gitmem status`: when, what, the last error
            client, path = self._client(url)
            try:
                with git_errors(f"sync with {redact(url)}"):
                    self._sync_loop(client, path, url, remote, who, report, max_attempts)
            finally:
                close_client(client)
            report.after = self.head
        report.duration_ms = round((time.perf_counter() - started) * 1000, 1)
        return report

    def _sync_loop(self, client: GitClient, path: str, url: str, remote: str,
                   who: Identity, report: SyncReport, max_attempts: int) -> None:
        branch = self.store.git.head_ref()
        previous: bytes | None | object = object()
        busy = False
        for attempt in range(max(1, max_attempts)):
            if attempt:
                _back_off(attempt)  # clones racing each other: do not retry in lock-step
            stamp = purge_stamp(self.store.state_dir)
            with Quarantine(self.store.git.repo) as quarantine:
                with _timer(report, "fetch"):
                    tip = self._fetch(client, path, url, branch, quarantine)
                    # After the branch: a tombstone is pushed before the branch it rewrote.
                    tombs = fetch_tombstones(client, path, url, quarantine)
                if attempt and tip == previous and not busy:
                    raise SyncError(f"the remote {redact(url)} refused the push",
                                    code="push_rejected", hint="Check the remote's branch protection.")
                previous = tip
                with self.store.lock.hold(), quarantine.exposed(), _timer(report, "integrate"):
                    if purge_stamp(self.store.state_dir) != stamp:
                        # Another process rewrote history while this one fetched without the lock:
                        # the fetch skipped objects we then had, and this process may still read
                        # the packs that purge deleted.  Forget them and fetch again.
                        self.store.git.repo.object_store.close()
                        busy = True
                        report.retries += 1
                        continue
                    forgetting = Forgetting(self, tombs, quarantine)   # purges: see gitmem.sync.forget
                    forgetting.before(tip)
                    # An old tip a tombstone maps is integrated as the commit it became: the
                    # old history is never merged into the rewritten one.
                    arrived = forgetting.rewritten(tip)
                    self._integrate(remote, arrived, who, report, quarantine)
                    if arrived is not None:  # only once checked and integrated (see the module doc)
                        self._track(remote, branch, arrived)
                    forgetting.after(report)
                    stamp = purge_stamp(self.store.state_dir)   # history as pushed below
            head = self.store.git.head()
            if head is None or (head == tip and not tombstones_ahead(self.store, tombs)):
                break
            try:
                with _timer(report, "push"):
                    push_tombstones(self, client, path, url, tombs)
                    if head != tip:   # a rewritten history too: only while the remote is still at tip
                        self._push(client, path, url, branch, tip, head)
            except RemoteMoved as moved:
                report.retries += 1
                busy = moved.busy
                continue
            report.pushed = True
            with self.store.lock.hold():
                if purge_stamp(self.store.state_dir) != stamp:
                    # A purge rewrote this clone's history while the push ran (no lock held):
                    # the commit just pushed is gone here and must not be tracked.  The next
                    # round fetches it back and replaces it on the remote with its rewritten form.
                    report.retries += 1
                    continue
                self._track(remote, branch, head)
            if report.action == "up_to_date":
                report.action = "pushed"
            break
        else:
            raise SyncError(f"the remote {redact(url)} kept moving; gave up after {max_attempts} attempts",
                            code="push_rejected", hint="Sync again; everything so far is committed locally.")

    # ---------------------------------------------------------- transport
    def _client(self, url: str) -> tuple[GitClient, str]:
        return client_for(self.store.git, url)

    def _fetch(self, client: GitClient, path: str, url: str, branch: bytes,
               quarantine: Quarantine) -> bytes | None:
        """Fetch ``branch`` from the remote; its tip (None: the remote has no such branch).

        Only objects are stored, in ``quarantine`` (readable through the vault's
        store, moved into it once checked): no ref records the tip until it has
        been checked.

        The tip is the one the objects were asked for (``wants``), not the refs the
        client reports afterwards: dulwich's local-path client reads the remote's
        refs again once the objects are copied, so a push by another clone in
        between would hand back a tip whose commits never arrived."""
        from dulwich.objects import Commit
        store = self.store.git.repo.object_store
        seen: list[ObjectID | None] = []

        def wants(refs: Mapping[Ref, ObjectID], depth: int | None = None) -> list[ObjectID]:
            sha = refs.get(Ref(branch))
            seen.append(None if sha in (None, _ZERO) else sha)
            return [sha] if sha and sha != _ZERO and sha not in store else []

        with remote_errors(url), quarantine.fetching():
            result = client.fetch(path.encode() if isinstance(path, str) else path, quarantine.target,
                                  determine_wants=wants)
        tip = seen[-1] if seen else (result.refs or {}).get(Ref(branch))
        if tip is None or tip == _ZERO:
            return None
        try:
            complete = isinstance(quarantine.read(tip), Commit)
        except KeyError:
            complete = False
        if not complete:
            raise SyncError(f"the remote {redact(url)} advertised {tip.decode()[:12]} for "
                            f"{branch.decode()} but did not send it", code="sync_error",
                            hint="Sync again; the vault is unchanged.")
        return tip

    def _track(self, remote: str, branch: bytes, sha: bytes) -> None:
        """Record the remote's tip as ``refs/remotes/<remote>/<branch>`` (what ``git status`` compares to)."""
        name = branch.rsplit(b"/", 1)[-1]
        self.store.git.repo.refs[Ref(b"refs/remotes/" + remote.encode() + b"/" + name)] = ObjectID(sha)
        config = self.store.git.repo.get_config()
        if not config.has_section((b"branch", name)):
            add_config_section(self._config_path(), "branch", name.decode(),
                               [("remote", remote), ("merge", branch.decode())])

    def _config_path(self) -> str:
        return os.path.join(self.store.git.repo.controldir(), "config")

    def _push(self, client: GitClient, path: str, url: str, branch: bytes,
              expected: bytes | None, head: bytes) -> None:
        """Move the remote branch from ``expected`` to ``head``; :class:`RemoteMoved` if it moved."""
        repo = self.store.git.repo
        moved: list[bool] = []

        def update_refs(refs: dict[Ref, ObjectID]) -> dict[Ref, ObjectID]:
            current = refs.get(Ref(branch))
            if (None if current in (None, _ZERO) else current) != expected:
                moved.append(True)
                return {}
            return {Ref(branch): ObjectID(head)}

        def pack(have: Any, want: Any, *, ofs_delta: bool = False, progress: Any = None) -> Any:
            return repo.generate_pack_data(set(have), set(want), progress=progress, ofs_delta=ofs_delta)

        said = bytearray()   # what the server's side says (hook output: "remote: ..."), kept short

        def heard(data: bytes) -> None:
            del said[:max(0, len(said) + len(data) - 4096)]
            said.extend(data[-4096:])

        from dulwich.errors import SendPackError
        from dulwich.file import FileLocked
        hint = "Your commits are kept here; once the server accepts pushes again, sync again."
        with remote_errors(url):
            try:
                result = client.send_pack(path.encode() if isinstance(path, str) else path, update_refs, pack,
                                          progress=heard)
            except FileLocked:
                # A local-path remote: another clone's push holds the branch's lock file.
                raise RemoteMoved(busy=True) from None
            except SendPackError as exc:   # the server could not take the pack (size limit, full disk)
                raise SyncError(f"the remote {redact(url)} could not store the push: "
                                f"{redact(str(exc))}{server_said(said)}", code="push_rejected", hint=hint) from None
        if moved:
            raise RemoteMoved()
        status = (result.ref_status or {}).get(branch)
        if status is not None:
            text = str(status)
            if "lock" in text:   # git: "failed to lock", "cannot lock ref ..." (another push)
                raise RemoteMoved(busy=True)
            if any(w in text for w in ("non-fast-forward", "fetch first", "unable to set", "stale",
                                      "failed to update")):
                raise RemoteMoved()
            raise SyncError(f"the remote {redact(url)} refused the push: {redact(text)}{server_said(said)}",
                            code="push_rejected", hint=hint)

    # ----------------------------------------------------------- integrate
    def _integrate(self, remote: str, tip: bytes | None, who: Identity,
                   report: SyncReport, quarantine: Quarantine) -> None:
        """Bring the fetched ``tip`` into our branch and working tree (lock held).

        Everything that arrives is checked before anything is written (tree
        entries, secrets, purged memories); see the module doc."""
        local = self.store.git.head()
        if tip is None or tip == local or (local is not None and self.store.git.is_ancestor(tip, local)):
            return
        if local is None:
            raise SyncError("the vault has no commits yet", hint="Create it with gitmem init first.")
        self._refuse_unrelated(remote, local, tip)
        incoming = self.store.git.walk_new(local, tip)
        blobs = check_incoming_trees(self.store.git.repo, incoming)
        # Purged versions (a remote not rewritten yet) are not scanned: they are forgotten right after.
        self._check_incoming_secrets(remote, without_purged(self.store, blobs))
        quarantine.keep()   # checked: what arrived joins the vault's objects
        report.outside_edits = self._commit_pending_edits()
        local = self.store.git.head()
        assert local is not None
        report.arrived += len(self.store.git.walk_new(local, tip))
        label = f"{remote}/{self.store.git.head_ref().rsplit(b'/', 1)[-1].decode()}"
        if self.store.git.is_ancestor(local, tip):
            changes = self._diff_files(local, tip)
            if self._taken_names(local, changes):
                # A rename cannot ride on a fast-forward (HEAD would be their tree):
                # one merge commit does the arrival and the rename atomically.
                changes = self._merge_commit(local, tip, label, who, report, arrived=changes)
                report.action = "merge"
            else:
                self._refuse_dirty(local, changes)
                self._cap_arrived(remote, changes)   # before any session can read them
                with self._config_guard(changes, tip, report):
                    self.pipeline.fast_forward(local, tip, changes, f"sync: fast-forward to {label}")
                report.action = "fast_forward"
        else:
            changes = self._merge_commit(local, tip, label, who, report)
            report.action = "merge"
        self._cap_arrived(remote, changes)
        report.changed = sorted(set(report.changed) | {c.path for c in changes})
        with _timer(report, "catch_up"):
            self._after_sync(changes, report)

    def _cap_arrived(self, remote: str, changes: list[FileChange]) -> None:
        """What a sync brings from a remote the person has not listed in ``trust: {remotes}``
        is trusted at most as ``remote:<address>``, whatever its files claim (store/trust.py)."""
        url = self._remote_url(remote)
        trusted = self.store.config.trust.remotes
        if remote in trusted or redact(url) in trusted:
            return
        self.store.trust.arrived((blob_id(c.data) for c in changes
                                  if c.data is not None and self.store.is_memory_path(c.path)), redact(url))

    def _refuse_unrelated(self, remote: str, local: bytes, tip: bytes) -> None:
        """A vault is its history, wherever it is checked out: a remote branch with no
        commit in common with ours is another vault, never merged into this one."""
        from dulwich.graph import find_merge_base
        if find_merge_base(self.store.git.repo, [ObjectID(local), ObjectID(tip)]):
            return
        raise SyncError(
            f"{remote} holds another vault: its history shares no commit with this one",
            code="unrelated_history",
            hint=f"Check the URL (gitmem remote list). To share this vault, point {remote} at an "
                 "empty repository or a clone of this vault; nothing was changed.")

    def _merge_commit(self, local: bytes, tip: bytes, label: str, who: Identity,
                      report: SyncReport, arrived: list[FileChange] | None = None) -> list[FileChange]:
        """Commit the merge of ``tip`` into ``local`` (two parents); the files it changed.

        ``arrived``: for a fast-forward that needs renames, the files that
        differ between ``local`` and ``tip`` (taken as they are, then renamed)."""
        from dulwich.graph import find_merge_base

        from ..write.merge import MergeOutcome
        if arrived is None:
            bases = find_merge_base(self.store.git.repo, [ObjectID(local), ObjectID(tip)])
            outcome = merge_trees(self.store.git, bases[0] if bases else None, local, tip,
                                  is_memory_path=self.store.is_memory_path, tiers=self.store.config.tiers)
            changes = list(outcome.changes)
        else:
            outcome = MergeOutcome()
            # MEMORY.md is regenerated below, as in every merge (the renamed file moved).
            changes = [c for c in arrived if not (c.path == MEMORY_MD and self.store.config.memory_index)]
        taken = self._taken_names(local, changes)
        changes = [FileChange(taken.get(c.path, c.path), c.data) for c in changes]
        # Both kinds of rename: a path a different memory of ours holds (the merge moved
        # theirs aside) and a file name used elsewhere in the vault.
        renames = {old: taken.get(new, new) for old, new in outcome.moved_aside.items()}
        renames.update((old, new) for old, new in taken.items() if old not in outcome.moved_aside.values())
        self._refuse_dirty(local, changes)
        if self.store.config.memory_index:
            written, removed = self.pipeline.parse_changes(changes)
            memory_md = self.pipeline.memory_md_change(changes, written, removed)
            if memory_md is not None:
                changes.append(memory_md)
        lines = [f"merged {m}" for m in outcome.merged]
        lines += [f"conflict {c['id']}: theirs kept as {c['copy_path']}" for c in outcome.conflicts]
        lines += [f"kept {k} (deleted on one side, changed on the other)" for k in outcome.kept]
        lines += [f"kept ours at {p} (theirs is in the second parent)" for p in outcome.kept_ours]
        lines += [f"renamed {old} to {new} (file name already used in the vault)"
                  for old, new in renames.items()]
        summary = f"sync: merge {label}"
        extras = [f"{len(outcome.conflicts)} conflict(s)"] if outcome.conflicts else []
        extras += [f"{len(renames)} renamed"] if renames else []
        message = (f"{summary}{' (' + ', '.join(extras) + ')' if extras else ''}\n\n"
                   + ("\n".join(lines) + "\n\n" if lines else "")
                   + f"Op: sync\nAgent: {who.name}\n")
        with self._config_guard(changes, tip, report):
            self.pipeline.commit_merge(changes, message, who, tip)
        report.merged += outcome.merged
        report.conflicts += outcome.conflicts
        report.kept += outcome.kept
        report.kept_ours += outcome.kept_ours
        report.renamed += [{"from": old, "to": new} for old, new in renames.items()]
        return changes

    def _diff_files(self, old: bytes, new: bytes) -> list[FileChange]:
        out: dict[str, bytes | None] = {}
        for change in self.store.git.changes_between(old, new):
            if change.old_path is not None and change.old_path not in out:
                out[change.old_path] = None
            if change.new_path is not None and change.new_sha is not None:
                out[change.new_path] = self.store.git.blob(change.new_sha)
        return [FileChange(p, d) for p, d in out.items()]

    # ------------------------------------------------- what arrives, checked
    def _current_config(self) -> Any:
        """The config in force now (the file on disk, pins applied); the loaded
        one if the file cannot be read."""
        from ..config import VaultConfig
        try:
            return VaultConfig.load(self.store.root)
        except GitmemError:
            return self.store.config

    def _check_incoming_secrets(self, remote: str, blobs: dict[bytes, tuple[str, bytes]]) -> None:
        """Apply the vault's ``secrets:`` policy to every file version that arrives.

        ``redact`` cannot rewrite the remote's history, so it refuses like
        ``refuse``; ``allow`` lets everything in.  Names file, line and kind,
        never the value."""
        from ..memory.secrets import policy_of, scan_text
        try:
            policy = policy_of(self._current_config())
        except InvalidMetadata:
            policy = "refuse"  # an unusable setting protects, it does not open the door
        if policy == "allow":
            return
        findings: list[dict[str, Any]] = []
        for sha, (path, commit) in blobs.items():
            data = self.store.git.blob(sha)
            if b"\x00" in data[:8000]:
                continue  # binary (git's own test): no text secrets to find
            text = data.decode("utf-8", "replace")
            for found in scan_text(text, "file"):
                findings.append({"path": path, "kind": found.kind, "line": text.count("\n", 0, found.start) + 1,
                                 "commit": commit.decode()[:12]})
        if findings:
            first = findings[0]
            more = f" and {len(findings) - 1} more" if len(findings) > 1 else ""
            raise SyncError(
                f"{remote} holds what looks like a secret ({first['kind']} in {first['path']} line "
                f"{first['line']}, commit {first['commit'][:7]}{more}); refusing to bring it into this "
                "vault's history", code="secret_detected", findings=findings,
                hint="Remove it from the remote's history (gitmem purge there, then push --force), or "
                     "set 'secrets: allow' in .gitmem.yaml to accept it. Nothing was changed.")

    def _taken_names(self, local: bytes, changes: list[FileChange]) -> dict[str, str]:
        """Arriving memory files whose name (stem, any case, any tier) another file
        of the vault keeps: {path: free path with ``-2``, ``-3`` ...}."""
        removed = {c.path for c in changes if c.data is None}
        claimed: dict[str, str] = {}
        arriving: list[str] = []
        for change in changes:
            if change.data is None or not self.store.is_memory_path(change.path):
                continue
            if self.store.git.blob_sha_at(local, change.path) is None:
                arriving.append(change.path)
            else:
                claimed.setdefault(stem_key(change.path), change.path)
        if not arriving:
            return {}

        def ours(key: str, path: str) -> bool:
            # The catalog holds every memory file of our tree (pending edits were committed).
            return any(row.path != path and row.path not in removed for row in self.store.catalog.by_stem(key))

        renames: dict[str, str] = {}
        for path in sorted(arriving):
            key = stem_key(path)
            if key not in claimed and not ours(key, path):
                claimed[key] = path
                continue
            folder, _, name = path.rpartition("/")
            stem = name[:-3]
            n = 2
            while True:
                while len(f"{stem}-{n}.md".encode()) > safefs.MAX_COMPONENT_BYTES:
                    stem = stem[:-1]
                candidate = f"{folder}/{stem}-{n}.md"
                if stem_key(candidate) not in claimed and not ours(stem_key(candidate), path) \
                        and self.store.git.blob_sha_at(local, candidate) is None:
                    break
                n += 1
            renames[path] = candidate
            claimed[stem_key(candidate)] = candidate
        return renames

    @contextmanager
    def _config_guard(self, changes: list[FileChange], source: bytes,
                      report: SyncReport) -> Iterator[None]:
        """Around the write of ``changes``: an arriving ``.gitmem.yaml`` that weakens a
        safety setting is written, but the local value is pinned first (so it is in
        force even if the process dies right after the write), and reported."""
        from ..config import SAFETY_KEYS, VaultConfig, pin_entries, weakened_settings, write_pins
        change = next((c for c in changes if c.path == CONFIG_FILE), None)
        if change is None:
            yield
            return
        try:
            incoming = VaultConfig.parse(change.data)
        except InvalidMetadata as exc:
            raise SyncError(f"the remote's {CONFIG_FILE} cannot be used: {exc.message}",
                            code="invalid_remote_config",
                            hint=f"Fix {CONFIG_FILE} on the remote, then sync again; nothing was changed.") from None
        report.warnings += [f"{problem}: held back, the default is in force" for problem in incoming.problems]
        weakened = weakened_settings(self._current_config(), incoming)
        before = pin_entries(self.store.root)
        after = {key: before[key] for key in before if key in SAFETY_KEYS}
        for key in SAFETY_KEYS:
            if key in weakened:
                after[key] = {**weakened[key], "commit": source.decode()}
            else:
                after.pop(key, None)  # the arriving file is at least as strict as what is in force
        if after != before:
            write_pins(self.store.root, after)
        try:
            yield
        except BaseException:
            if after != before:
                write_pins(self.store.root, before)
            raise
        report.config_held.update(weakened)

    # ------------------------------------------------------ config pins
    def pending_config(self) -> dict[str, dict[str, Any]]:
        """Safety settings a sync held back: {key: {kept, file, since}} (see
        :func:`gitmem.config.pending_changes`)."""
        from ..config import pending_changes
        return pending_changes(self.store.root)

    def accept_config(self, keys: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """Let the ``.gitmem.yaml`` values a sync held back take effect (``keys``:
        some of ``secrets``, ``protected_types``, ``max_content_bytes``, ``trust``; None: all).
        Returns what was accepted ({key: {kept, file, since}})."""
        from ..config import SAFETY_KEYS, VaultConfig, clear_pins
        unknown = sorted(set(keys or []) - set(SAFETY_KEYS))
        if unknown:
            raise InvalidInput(f"unknown setting(s) {', '.join(unknown)}",
                               hint=f"Held-back settings are among: {', '.join(SAFETY_KEYS)}.")
        with self.store.lock.hold():
            pending = self.pending_config()
            clear_pins(self.store.root, keys)
            self.store.config = VaultConfig.load(self.store.root)
        return {k: v for k, v in pending.items() if keys is None or k in keys}

    # ------------------------------------------------------ work tree
    def _commit_pending_edits(self) -> str | None:
        """Commit outside edits (memory files, and a hand-edited MEMORY.md) before integrating."""
        sha = self.pipeline.outside.commit()
        return self.pipeline.outside.keep_memory_md_edit("kept before sync", tracked_only=True) or sha

    def _refuse_dirty(self, head: bytes, changes: list[FileChange]) -> None:
        """Raise ``dirty_worktree`` if a file about to be replaced holds uncommitted
        edits, ``unsafe_path`` if a symbolic link is on the way to one."""
        from dulwich.objects import Blob
        dirty, links = [], []
        for change in changes:
            try:
                data: bytes | None = safefs.read_bytes(self.store.root, change.path)
            except (FileNotFoundError, NotADirectoryError):
                data = None
            except IsADirectoryError:
                dirty.append(change.path)
                continue
            except InvalidPath:  # UnsafePath: a link at the file or a folder on the way
                links.append(change.path)
                continue
            if data == change.data:
                continue
            committed = self.store.git.blob_sha_at(head, change.path)
            if data is None and committed is None:
                continue
            if data is None or committed is None or Blob.from_string(data).id != committed:
                dirty.append(change.path)
        if links:
            raise SyncError(f"a symbolic link is on the way to files the sync would write: {_listing(links)}",
                            code="unsafe_path", hint="gitmem never writes through links: replace the "
                            "link with a real file or folder ('gitmem doctor' lists them); nothing was changed.")
        if dirty:
            raise SyncError(f"uncommitted changes to files the sync would replace: {_listing(dirty)}",
                            code="dirty_worktree",
                            hint="Commit them with git (or undo them), then sync again; nothing was changed.")

    def _after_sync(self, changes: list[FileChange], report: SyncReport | None = None) -> None:
        """Catalog, history and search index catch up with what arrived (lock held).

        The same steps as after a local write (each arrived file parsed once,
        then catalog rows and index documents for just those paths), and the
        memory history from the new commits (:meth:`sync_history`).  The commit
        is already in place, so a step that fails (a hostile file, a full disk)
        is reported in ``report.warnings`` and left to catch up later, never
        raised half-way.
        """
        from ..config import VaultConfig
        problems: list[str] = []
        if any(c.path == CONFIG_FILE for c in changes):
            try:
                self.store.config = VaultConfig.load(self.store.root)
            except GitmemError as exc:
                problems.append(f"{CONFIG_FILE} not reloaded ({exc.message}); the previous settings stay in force")
        problems += self.pipeline.take_arrived(changes)
        try:
            self.history.sync_history()
        except Exception as exc:  # noqa: BLE001 - same: history catches up on the next write
            problems.append(f"memory history not updated ({type(exc).__name__}: {exc})")
        self.pipeline.background.schedule()
        if report is not None:
            report.warnings += problems


def clone_repository(url: str, path: str | os.PathLike[str]) -> Path:
    """Copy a shared vault from ``url`` into the new folder ``path`` (remote ``origin``);
    returns the folder.

    The history is fetched without a checkout and every tree of it is
    checked first (see the module doc); a remote holding an entry gitmem
    will not write raises :class:`UnsafeRemoteTree` and the half-made
    folder is removed (an empty folder given as ``path`` is left empty)."""
    import io

    from dulwich import porcelain
    url = normalise_url(url)
    target = Path(path).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InvalidInput(f"{target} already exists and is not an empty folder")
    created = not target.exists()
    username, password = http_credentials(None, url)
    try:
        with remote_errors(url):
            if password:
                repo = porcelain.clone(url, str(target), checkout=False, errstream=io.BytesIO(),
                                       username=username or "", password=password)
            else:
                repo = porcelain.clone(url, str(target), checkout=False, errstream=io.BytesIO())
        try:
            with git_errors(f"clone from {redact(url)}"):
                check_incoming_trees(repo, all_commits(repo))
                if _head_or_none(repo) is not None:
                    # Safe now: every entry is a checked name and a plain file or folder.
                    repo.get_worktree().reset_index(config=repo.get_config_stack())
                    # with git's cached trees, as a `git clone` leaves them (cache_tree.py)
                    head = repo.get_object(repo.head())
                    if isinstance(head, Commit):
                        prime_cached_trees(Path(repo.index_path()), head.tree, _tree_loader(repo))
        finally:
            repo.close()
    except BaseException:
        _remove_clone(target, created)
        raise
    return target


def _listing(paths: list[str]) -> str:
    return ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def _tree_loader(repo: Repo) -> Callable[[bytes], Tree | None]:
    def load(sha: bytes) -> Tree | None:
        obj = repo.object_store[ObjectID(sha)]
        return obj if isinstance(obj, Tree) else None
    return load


def _head_or_none(repo: Repo) -> bytes | None:
    try:
        return repo.refs[Ref(b"HEAD")]
    except KeyError:
        return None


def _remove_clone(target: os.PathLike[str], created: bool) -> None:
    """Undo a refused or failed clone: the folder made for it, or what was put in
    the empty folder the caller gave (links are removed, never followed)."""
    from pathlib import Path
    folder = Path(target)
    if created:
        shutil.rmtree(folder, ignore_errors=True)
        return
    try:
        children = list(folder.iterdir())
    except OSError:
        return
    for child in children:
        try:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink()
        except OSError:
            continue


# ------------------------------------------------------------ helpers
@contextmanager
def _timer(report: SyncReport, name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        spent = (time.perf_counter() - start) * 1000
        report.timings_ms[name] = round(report.timings_ms.get(name, 0.0) + spent, 1)


def _back_off(attempt: int) -> None:
    """Wait a little, randomly, before retry ``attempt`` (1, 2 ...): clones that
    lost the same race spread out instead of colliding again."""
    time.sleep(random.uniform(0.0, min(0.05 * 2 ** attempt, 1.0)))
