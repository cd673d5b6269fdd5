"""The Vault: the one object every front door talks to.

Every front door (Python API, CLI, agent tools, MCP server) calls a Vault
method.  A Vault owns the services one open vault is made of
(:mod:`gitmem.services`) and each public method hands the call to one of them:
reads to the :class:`~gitmem.store.reader.Reader`, writes through the
:class:`~gitmem.write.pipeline.WritePipeline` (each write is one commit made
under the vault lock, preceded by a pure-rename commit when it moves memories and
changes their text, so ``git log --follow`` keeps their history), searches to the
:class:`~gitmem.search.service.SearchService`.  Reads never take the lock and
never write a memory file.
"""

from __future__ import annotations

import atexit
import builtins
import os
import shutil
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from dulwich.file import FileLocked

from . import safefs
from .config import CONFIG_NAME, DEFAULT_CONFIG_TEXT, GITATTRIBUTES, GITIGNORE, Identity, VaultConfig, env_author
from .errors import Conflict, InvalidInput, InvalidMetadata, NotAVault, NotFound
from .exchange.import_formats import notes_to_copy
from .memory.provenance import AGENT, PERSON, check_origin, make_origin
from .memory.schema import Memory
from .services import Services, open_services
from .store.git import CommitInfo, FileChange, GitStore
from .store.purged import PURGE_JOURNAL
from .store.recovery import log_recovery, needs_recovery, recover
from .store.storage import Clock
from .sync.syncer import MAX_ATTEMPTS
from .write.pipeline import Committed

if TYPE_CHECKING:  # pragma: no cover
    from .exchange.adopt import Adoption
    from .exchange.exporting import FolderExport
    from .exchange.importing import ImportReport
    from .exchange.view import ViewReport
    from .ops.files import Files
    from .ops.history import Lineage, Version
    from .ops.layout import LayoutReport
    from .ops.lifecycle import CompressBatch, Links, MergeResult, ProtectedContext, Summarizer, WriteResult
    from .ops.reflect import ReflectReport
    from .search.results import SearchPage
    from .search.service import RefreshReport
    from .search.vectors import EmbedWorker
    from .sync.background import BackgroundSync
    from .sync.syncer import Remote, SyncReport
    from .upkeep.doctor import Finding
    from .upkeep.evaluation import EvalReport
    from .upkeep.purge import PurgeReport

__all__ = ["Vault", "Committed"]

# An exiting process waits at most this long for git's index.lock to update .git/index.
_CLOSE_FLUSH_TIMEOUT = 10.0
_live_vaults: weakref.WeakSet[Vault] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # pragma: no cover - exercised by CLI subprocess tests
    for vault in list(_live_vaults):
        try:
            vault.close()
        except Exception:  # noqa: BLE001 - never fail interpreter shutdown
            pass


class Vault:
    """A gitmem vault: a git repository of Markdown memories in tier folders.

    Open with :meth:`Vault.open` or create with :meth:`Vault.init`; use as a
    context manager (or call :meth:`close`) so ``.git/index`` is left in line
    with HEAD.  ``author`` is the identity every write is committed as (an
    agent's name, or ``"Name <email>"``; default: ``$GITMEM_AUTHOR``, else
    ``author:`` in ``.gitmem.yaml``); one whose name or email looks like it holds a
    secret is refused (``SecretDetected``) unless ``secrets: allow``.  ``person=True`` says a person is writing
    (the command line does): without an author, writes then carry the person's
    git identity (``GIT_AUTHOR_NAME``/``EMAIL``, else git config ``user.*``) when
    git names one.  ``origin`` is the provenance of what this Vault writes
    (``person``, ``agent:NAME``, ``tool:SOURCE``...; see ``docs/safety.md``):
    ``person`` with ``person=True``, else ``agent:<author name>``.
    ``clock`` returns the current time (inject one in tests).
    One Vault object may be shared by threads.
    """

    import_report: dict[str, Any] | None = None  # what Vault.init imported (counts, source)

    def __init__(self, root: Path, *, author: str | Identity | None = None,
                 clock: Clock | None = None, lock_timeout: float = 30.0, person: bool = False,
                 origin: str | None = None) -> None:
        root = Path(os.path.realpath(root))
        if not (root / ".git").is_dir():
            raise NotAVault(f"{root} is not a gitmem vault (no .git folder)")
        if isinstance(author, str):
            author = Identity.parse(author)
        self.services: Services = open_services(
            root, author=author or env_author(), clock=clock or (lambda: datetime.now(UTC)),
            lock_timeout=lock_timeout, on_lock=self._recover)
        self._closed = False
        store = self.services.store
        named = author or env_author()
        if named is not None and (root / CONFIG_NAME).exists():
            # An author holding a secret is refused where it enters, not at the first write.
            # (Vault.init has no settings yet: its first commit screens under the new ones.)
            try:
                store.check_author(named)
            except BaseException:
                self.close()
                raise
        git = store.git
        if person and author is None and env_author() is None:
            store.author = git.person() or store.author
        # Who writes, for provenance (memory/provenance.py): the command line is a person's;
        # a program using the API is an agent unless it says otherwise.
        store.origin = check_origin(origin) if origin is not None else (
            PERSON if person else make_origin(AGENT, store.author.name))
        if needs_recovery(git) or git.index_dirty() or (store.state_dir / PURGE_JOURNAL).exists():
            # Upkeep, not a precondition of reading: only if the lock is free now.  A
            # live holder ran this same recovery when it took the lock (VaultLock's
            # on_acquire), so a busy lock means there is nothing half-done to read.
            with store.lock.try_hold() as held:
                if held:
                    try:
                        git.repair_index()  # a writer died before syncing .git/index
                    except FileLocked:
                        pass  # git holds index.lock: still marked; the next writer repairs it
        _live_vaults.add(self)

    # ------------------------------------------------------------ the parts
    @property
    def root(self) -> Path:
        """The vault's folder."""
        return self.services.store.root

    @property
    def config(self) -> VaultConfig:
        """The vault's settings (``.gitmem.yaml``)."""
        return self.services.store.config

    @config.setter
    def config(self, value: VaultConfig) -> None:
        self.services.store.config = value

    @property
    def author(self) -> Identity:
        """Who writes when a call names nobody."""
        return self.services.store.author

    @author.setter
    def author(self, value: Identity) -> None:
        self.services.store.author = value

    @property
    def outside_refused(self) -> dict[str, str]:
        """Outside edits the write checks refused at the last :meth:`commit_outside_edits`."""
        return self.services.pipeline.outside.refused

    @property
    def head(self) -> str | None:
        """The sha of the vault's latest commit (None before the first)."""
        sha = self.services.store.git.head()
        return sha.decode() if sha else None

    def now(self) -> str:
        """The clock's time as ISO 8601 UTC."""
        return self.services.store.now()

    @property
    def files(self) -> Files:
        """The file view: the vault as plain files under the files tier, for file-shaped tools
        (exact-text reads and writes, renames, removals; see :mod:`gitmem.ops.files`)."""
        return self.services.files

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> Vault:
        """Open the vault at ``path`` (default: ``$GITMEM_VAULT``, else the current folder).

        A vault is a git repository holding ``.gitmem.yaml`` (in its folder, or
        in its last commit when the file was only deleted from disk); any other
        repository is refused with :class:`NotAVault`, so gitmem never writes
        into a code repository by mistake.  Like git, a folder inside a vault
        opens that vault: the search goes up from ``path`` and stops at the
        first git repository (a vault or not) or at the file system root.
        """
        chosen = path if path is not None else os.environ.get("GITMEM_VAULT") or "."
        start = Path(os.path.abspath(Path(chosen).expanduser()))
        if not start.is_dir():
            raise NotAVault(f"{start} does not exist" if not start.exists()
                            else f"{start} is not a folder")
        folder = start
        while True:
            if (folder / ".git").is_dir() and _is_vault(folder):
                return cls(folder, **kwargs)
            if (folder / ".git").exists():
                raise NotAVault(f"{start} is a git repository but not a gitmem vault (no {CONFIG_NAME})"
                                if folder == start else f"{start} is not in a gitmem vault (the git "
                                f"repository at {folder} has no {CONFIG_NAME})", hint=_NOT_A_VAULT_HINT)
            if folder.parent == folder:
                raise NotAVault(f"{start} is not a gitmem vault (nor is any folder above it)",
                                hint=_NOT_A_VAULT_HINT)
            folder = folder.parent

    @classmethod
    def init(cls, path: str | os.PathLike[str], *, from_dir: str | os.PathLike[str] | None = None,
             author: str | Identity | None = None, clock: Clock | None = None,
             import_tier: str = "long_term", person: bool = False,
             progress: Callable[[int, int], None] | None = None, adopt: bool = False,
             origin: str | None = None) -> Vault:
        """Create a vault at ``path`` (one commit), optionally importing the
        Markdown notes of a plain folder such as the bundled ``sample-vault`` or an
        Obsidian vault.

        Notes in the source's tier folders keep their place; every other note goes
        under ``import_tier`` with its folders (``Projects/x.md`` ->
        ``long_term/Projects/x.md``).  Hidden folders (``.obsidian``, ``.trash``)
        and symbolic links are skipped.  ``progress(done, total)`` is called as
        notes are read.  What was imported is in ``vault.import_report``; its
        ``skipped`` lists what was left out and why (a gitmem vault inside the
        folder, a file name a vault cannot hold such as ``aux.md``).

        ``adopt`` makes the existing folder ``path`` itself a vault, in place: no note is
        moved or rewritten; every note outside the tier folders becomes a memory of
        ``import_tier`` where it is (``outside_notes`` in ``.gitmem.yaml``); attachments,
        ``.obsidian/`` and other files that are not notes are left alone (not committed).
        See :mod:`gitmem.exchange.adopt`.
        """
        from .exchange.adopt import adoption, outside_notes_count
        root = Path(path).expanduser()
        if (root / CONFIG_NAME).exists():
            raise Conflict(f"{root} is already a gitmem vault", hint="Open it with Vault.open().")
        if root.exists() and not root.is_dir():
            raise InvalidInput(f"{root} exists and is not a folder")
        if adopt and from_dir is not None:
            raise InvalidInput("adopting makes the folder itself a vault: it takes no folder to import from")
        if adopt and not root.is_dir():
            raise NotFound(f"{root} does not exist", hint="Adopting makes an existing folder of notes a vault.")
        source = Path(os.path.abspath(Path(from_dir).expanduser())) if from_dir is not None else None
        if source is not None and not source.is_dir():
            raise NotFound(f"import folder {source} does not exist")
        config_text = _read_or(source, CONFIG_NAME, DEFAULT_CONFIG_TEXT.encode())
        config = VaultConfig.from_dict(_yaml_dict(config_text))
        if (source is not None or adopt) and import_tier not in config.live_tiers:
            raise InvalidInput(f"unknown tier {import_tier!r} for the notes outside the tier folders",
                               hint=f"Tiers: {', '.join(config.live_tiers)}.")
        adopted = adoption(root, config, import_tier) if adopt else None
        if adopted is not None:
            config_text, config, source = adopted.config_text, adopted.config, root
            plan, left_out = adopted.plan, adopted.left_out
        else:
            plan, left_out = notes_to_copy(source, config.tiers, import_tier) if source is not None else ([], [])
        ignored = outside_notes_count(root, config.tiers) if source is None and root.is_dir() else 0
        made = [root] if not root.exists() else [] if (root / ".git").exists() else [root / ".git"]
        vault: Vault | None = None
        try:
            if adopted is not None:
                adopted.write_own_files(made)
            GitStore.init(root).close()
            vault = cls(root, author=author, clock=clock, person=person, origin=origin)
            _first_commit(vault, config, config_text, source, plan, import_tier, progress, left_out,
                          adopted=adopted)
            if vault.import_report is not None:
                vault.import_report["outside_notes_ignored"] = ignored
        except BaseException:
            # Nothing was committed (a secret or a bad note in the folder, a full disk ...):
            # what init made goes again, so the folder reads as it did and init can be rerun.
            if vault is not None:
                try:
                    vault.close()
                except Exception:  # noqa: BLE001 - it is being removed anyway
                    pass
            for made_path in reversed(made):
                if made_path.is_dir() and not made_path.is_symlink():
                    shutil.rmtree(made_path, ignore_errors=True)
                else:
                    made_path.unlink(missing_ok=True)
            raise
        return vault

    @classmethod
    def clone(cls, url: str, path: str | os.PathLike[str], **kwargs: Any) -> Vault:
        """Copy a shared vault from ``url`` into the new folder ``path`` (remote ``origin``)
        and open it; ``kwargs`` go to :meth:`Vault.open` (``author``, ``clock``).  Every
        tree is checked before anything is written (see :mod:`gitmem.sync.syncer`)."""
        from .sync.syncer import clone_repository
        vault = cls.open(clone_repository(url, path), **kwargs)
        vault.services.history.sync_history()  # record the history now, so later syncs pay only for what arrives
        return vault

    def close(self) -> None:
        """Sync ``.git/index`` with HEAD and release resources (idempotent).

        Only a Vault that wrote takes the vault lock here: one that only read
        closes without waiting for any other process.  If git holds
        ``index.lock``, the index update is retried for up to ten seconds; after
        that it stays marked dirty and the next writer repairs it.
        """
        if self._closed:
            return
        pipeline, git, lock = self.services.pipeline, self.services.store.git, self.services.store.lock
        # A Vault that never held the lock for a write (VaultLock.taken) only read: it
        # has nothing to flush or pack, and closes without waiting for other processes.
        wrote = lock.taken or git.index_pending > 0
        flushed = True
        if wrote:
            # Marked closed only after the flush: if a signal ends the process meanwhile
            # (SystemExit), the atexit handler's close() runs the flush again.
            flushed = pipeline.background.flush(_CLOSE_FLUSH_TIMEOUT)
            try:  # without the vault lock (it waits for a run of the idle timer under way)
                git.housekeep(closing=True)
            except Exception:  # noqa: BLE001 - packing can wait for the next process
                pass
        self._closed = pipeline.background.closed = True
        # The other threads of this process (a write under way) are waited for; other
        # processes only briefly, and only when a write of this process left index
        # entries behind: closing never fails or hangs because another process is busy.
        with lock.threads():
            if wrote and (git.index_pending > 0 or not flushed):
                with lock.try_hold(_CLOSE_FLUSH_TIMEOUT if flushed else 0.0) as held:
                    if not (held and git.flush_index()):
                        git.mark_index_dirty()  # given up: the next writer repairs it
            self.services.searcher.close()
            lock.close()  # other threads' later writes get VaultClosed, not a closed database
        git.repo.close()
        self.services.store.catalog.close()
        _live_vaults.discard(self)

    def flush(self) -> None:
        """Bring ``.git/index`` in line with HEAD now (normally done lazily); retries while
        git holds ``index.lock`` (at most ten seconds)."""
        self.services.pipeline.background.flush(_CLOSE_FLUSH_TIMEOUT)

    def __enter__(self) -> Vault:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _recover(self) -> None:
        """Each time this process takes the vault lock: finish or roll back a write or a
        purge whose process was killed, then bring ``.git/index``, the catalog and the
        search index in line (two stats when there is nothing to do)."""
        if (self.services.store.state_dir / PURGE_JOURNAL).exists():   # a purge was killed
            from .upkeep.purge import recover_purge
            recover_purge(self.services)
        git = self.services.store.git
        if not needs_recovery(git):
            return
        report = recover(git)
        try:
            git.repair_index()
        except Exception:  # noqa: BLE001 - a git command holds index.lock: index-dirty stays, retried later
            pass
        if report.paths:
            if self.services.searcher.open_index is not None:   # keep an open index current
                self.services.searcher.refresh(report.paths)
            else:
                self.services.reader.scan_paths(report.paths)
        if report.actions:
            log_recovery(git, report.actions)

    # ------------------------------------------------------------- reading
    def list(self, *, tier: str | Iterable[str] | None = None, type: str | Iterable[str] | None = None,
             tags: str | Iterable[str] | None = None, status: str | Iterable[str] | None = "active",
             scope: str | None = None, agent: str | None = None, limit: int | None = None,
             as_of: str | None = None) -> builtins.list[Memory]:
        """Memories matching every given filter, newest ``updated`` first.

        ``status`` defaults to ``"active"``; pass ``None`` for every status.
        ``tags`` matches memories carrying all the given tags.  Bodies are not
        loaded (``body`` is ""); use :meth:`get` for the full memory.  ``as_of``
        lists the memories of the vault as it was at a commit or date (see
        :meth:`search`).
        """
        if as_of is None:
            return self.services.reader.list(tier=tier, type=type, tags=tags, status=status, scope=scope,
                                             agent=agent, limit=limit)
        from .store.reader import listing_filters
        want, need_tags = listing_filters(self.config.tiers, tier=tier, type=type, tags=tags, status=status,
                                          scope=scope, agent=agent)
        return self.services.searcher.list_as_of(as_of, want, need_tags, limit)

    def render_memory_md(self) -> bytes:
        """The content ``MEMORY.md`` has for the memories committed at HEAD."""
        return self.services.memory_md.render()

    # -------------------------------------------------- reader
    def scan(self) -> tuple[builtins.list[str], builtins.list[str]]:
        """Re-read changed files into the catalog; returns (changed, removed) paths
        (:meth:`Reader.scan`)."""
        return self.services.reader.scan()

    def resolve(self, ref: str) -> str:
        """The path of the memory ``ref`` names: an id (or unique id prefix of 4+ characters), a
        vault-relative path, a file name (with or without ``.md``), an exact title or an Obsidian
        alias (case-insensitive), or a note as an Obsidian ``[[link]]`` names it (``Folder/Note``,
        ``Note#heading``, ``[[Note|label]]``) (:meth:`Reader.resolve`)."""
        return self.services.reader.resolve(ref)

    def get(self, ref: str) -> Memory:
        """Read one memory (see :meth:`resolve` for what ``ref`` may be) (:meth:`Reader.get`)."""
        return self.services.reader.get(ref)

    def exists(self, ref: str) -> bool:
        """True if ``ref`` names exactly one memory (:meth:`Reader.exists`)."""
        return self.services.reader.exists(ref)

    # -------------------------------------------------- memories
    def add(self, title: str, body: str = "", *, type: str = "memory", tier: str | None = None,
            tags: Sequence[str] | None = None, author: str | Identity | None = None,
            path: str | None = None, force: bool = False, inputs: Sequence[Memory] = (),
            **fields: Any) -> Memory:
        """Create a memory (one commit ``add: <title>``) and return it (:meth:`Memories.add`).
        ``inputs``: memories its text was derived from (its origin is never above theirs)."""
        return self.services.memories.add(title, body, type=type, tier=tier, tags=tags, author=author,
                                          path=path, force=force, inputs=inputs, **fields)

    def update(self, ref: str, *, body: str | None = None, append: str | None = None,
               replace: tuple[str, str] | None = None, title: str | None = None,
               tags: Sequence[str] | None = None, add_tags: Sequence[str] = (),
               remove_tags: Sequence[str] = (), meta: Mapping[str, Any] | None = None,
               force: bool = False, author: str | Identity | None = None,
               message: str | None = None) -> Memory:
        """Change a memory in one commit ``update: <title>`` (:meth:`Memories.update`)."""
        return self.services.memories.update(ref, body=body, append=append, replace=replace, title=title,
                                             tags=tags, add_tags=add_tags, remove_tags=remove_tags,
                                             meta=meta, force=force, author=author, message=message)

    def move(self, ref: str, tier: str, *, force: bool = False, author: str | Identity | None = None,
             extra_meta: Mapping[str, Any] | None = None, op: str = "move",
             body: str | None = None) -> Memory:
        """Move a memory to another tier: a tracked rename (:meth:`Memories.move`)."""
        return self.services.memories.move(ref, tier, force=force, author=author, extra_meta=extra_meta,
                                           op=op, body=body)

    def delete(self, ref: str, *, hard: bool = False, force: bool = False,
               author: str | Identity | None = None) -> Memory:
        """Delete a memory (:meth:`Memories.delete`)."""
        return self.services.memories.delete(ref, hard=hard, force=force, author=author)

    # -------------------------------------------------- lifecycle
    def write(self, content: str, *, title: str | None = None, type: str | None = None,
              tier: str | None = None, tags: Sequence[str] | None = None, dedup: bool | str = False,
              external_write_id: str | None = None, upsert: bool = False,
              allow_protected: Collection[str] = (), default_type: str = "memory",
              author: str | Identity | None = None,
              force: bool = False, **fields: Any) -> WriteResult:
        """Create a memory unless it is already there (an agent's add/write)
        (:meth:`Lifecycle.write`)."""
        return self.services.lifecycle.write(content, title=title, type=type, tier=tier, tags=tags,
                                             dedup=dedup, external_write_id=external_write_id,
                                             upsert=upsert, allow_protected=allow_protected,
                                             default_type=default_type, author=author, force=force,
                                             **fields)

    def protected_context(self) -> ProtectedContext:
        """All active protected memories (rules and constraints, then goals, each by importance), as
        data and as one Markdown block to put in a prompt (:meth:`Lifecycle.protected_context`)."""
        return self.services.lifecycle.protected_context()

    def accept(self, ref: str, *, author: str | Identity | None = None) -> Memory:
        """A person vouches for a memory: its origin becomes ``person``, so a proposed goal,
        rule or constraint is in force (one commit; only a person can, see
        :meth:`Memories.accept`)."""
        return self.services.memories.accept(ref, author=author)

    def take_notices(self) -> builtins.list[str]:
        """What this thread's writes since the last call want their caller told (e.g. that a
        rule an agent wrote is held as a proposal), and forget them (:meth:`Storage.take_notices`)."""
        return self.services.store.take_notices()

    def why(self, ref: str) -> Lineage:
        """Where a memory came from: origin, how far this clone trusts it, the memories it
        was derived from and every commit of its life (:meth:`History.why`)."""
        return self.services.history.why(ref)

    def compress_tier(self, tier: str, *, older_than_days: float | None = None,
                      tag: str | None = None, type: str | None = None,
                      max_chars: int | None = None) -> CompressBatch:
        """The combined content of ``tier``'s active, unprotected memories (each with its title, id
        and date), oldest first, and the files it came from (:meth:`Lifecycle.compress_tier`)."""
        return self.services.lifecycle.compress_tier(tier, older_than_days=older_than_days, tag=tag,
                                                     type=type, max_chars=max_chars)

    def compress(self, tier: str, summary: str | None = None, title: str | None = None,
                 files: Sequence[str] | None = None, *, tags: Sequence[str] | None = None,
                 summarizer: Summarizer | None = None, force: bool = False,
                 author: str | Identity | None = None, **batch_filters: Any) -> Memory:
        """The tiered compress flow as one write: create ``summary`` in the next tier up, with
        ``related: derived_from`` links to every source, and move every source into the archive
        (``status: archived``, ``archived_into: <summary id>``) (:meth:`Lifecycle.compress`)."""
        return self.services.lifecycle.compress(tier, summary, title, files, tags=tags,
                                                summarizer=summarizer, force=force, author=author,
                                                **batch_filters)

    def archive(self, refs: Sequence[str], *, force: bool = False,
                author: str | Identity | None = None) -> builtins.list[Memory]:
        """Move memories into the archive tier in one write (tracked renames)
        (:meth:`Lifecycle.archive`)."""
        return self.services.lifecycle.archive(refs, force=force, author=author)

    def unarchive(self, ref: str, *, tier: str | None = None,
                  author: str | Identity | None = None) -> Memory:
        """Bring an archived memory back to the tier it came from (or ``tier``), active
        (:meth:`Lifecycle.unarchive`)."""
        return self.services.lifecycle.unarchive(ref, tier=tier, author=author)

    def merge(self, refs: Sequence[str], content: str | None = None, *,
              title: str | None = None, force: bool = False,
              author: str | Identity | None = None) -> MergeResult:
        """Merge memories into a new one, in one write (:meth:`Lifecycle.merge`)."""
        return self.services.lifecycle.merge(refs, content, title=title, force=force, author=author)

    def links(self, ref: str) -> Links:
        """Outgoing links of a memory (``related`` with relation types, supersede and archive
        pointers, body ``[[wikilinks]]``) and its backlinks (:meth:`Lifecycle.links`)."""
        return self.services.lifecycle.links(ref)

    # -------------------------------------------------- reflect
    def reflect(self, dry_run: bool = False, *,
                author: str | Identity | None = None) -> ReflectReport:
        """Consolidate the vault (see :mod:`gitmem.ops.reflect`): one commit, or none when there is
        nothing to do or ``dry_run``.  A reflect started while another runs (in any process) returns
        at once with zero counts and ``busy=True`` (:meth:`Reflect.reflect`)."""
        return self.services.reflect.reflect(dry_run, author=author)

    # -------------------------------------------------- history

    def commits(self) -> builtins.list[CommitInfo]:
        """The branch's commits, newest first (what ``git log`` lists)."""
        git = self.services.store.git
        head = git.head()
        return [git.info(sha) for sha in reversed(git.walk_new(None, head))] if head else []

    def history(self, ref: str) -> builtins.list[Version]:
        """Every commit that touched the memory, oldest first, across moves
        (:meth:`History.history`)."""
        return self.services.history.history(ref)

    def show_at(self, ref: str, rev: str | int) -> Memory:
        """The memory as it was at ``rev`` (``~N``, a commit id, or an ISO date)
        (:meth:`History.show_at`)."""
        return self.services.history.show_at(ref, rev)

    def diff(self, ref: str, old: str | int | None = None, new: str | int | None = None) -> str:
        """Unified diff of a memory between two versions (:meth:`History.diff`)."""
        return self.services.history.diff(ref, old, new)

    def restore(self, ref: str, rev: str | int, *, force: bool = False,
                author: Any = None) -> Memory:
        """Bring a memory back to an earlier version, as a new commit (:meth:`History.restore`)."""
        return self.services.history.restore(ref, rev, force=force, author=author)

    # -------------------------------------------------- searcher
    def refresh(self, paths: Iterable[str] | None = None, *, wait: bool = True) -> RefreshReport:
        """Bring the catalog and the search index up to date with the files; ``wait=False``
        does nothing (``busy``) while another process holds the vault lock
        (:meth:`SearchService.refresh`)."""
        return self.services.searcher.refresh(paths, wait=wait)

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the search index from the files; returns the number of memories
        (:meth:`SearchService.reindex`)."""
        return self.services.searcher.reindex(progress)

    def search(self, query: str, *, limit: int = 10, offset: int = 0,
               include_inactive: bool = False, as_of: str | None = None,
               progress: Callable[[int, int], None] | None = None, hybrid: bool | None = None,
               record: bool = True, **filters: str | Sequence[str] | None) -> SearchPage:
        """Full-text search (BM25, stemming, phrases, AND/OR/NOT, prefix*, field filters)
        (:meth:`SearchService.search`); ``record=False`` counts no retrieval."""
        return self.services.searcher.search(query, limit=limit, offset=offset,
                                             include_inactive=include_inactive, as_of=as_of,
                                             progress=progress, hybrid=hybrid, record=record, **filters)

    def embed(self, *, rebuild: bool = False,
              progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Compute the embedding vectors of new and changed memories for hybrid search (a cache in
        ``.git/gitmem/vectors/``; ``rebuild`` drops every stored vector first).  Needs the ``embed``
        extra (NotInstalled otherwise).  Returns what was done: ``embedded``, ``vectors`` (stored
        now), ``model``, ``backend``, ``path``, and ``replaced_damaged`` when a damaged vectors
        file was replaced (:meth:`SearchService.embed`)."""
        return self.services.searcher.embed(rebuild=rebuild, progress=progress)

    def evaluate(self, *, questions: int = 200, seed: int = 0, kinds: Sequence[str] | None = None,
                 modes: Sequence[str] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> EvalReport:
        """Measure recall on this vault with questions built from its own content and history
        (``gitmem eval``): hit@1/5/10 and MRR per search mode and per kind of question.
        See :mod:`gitmem.upkeep.evaluation`."""
        from .upkeep.evaluation import evaluate
        return evaluate(self.services, questions=questions, seed=seed, kinds=kinds, modes=modes,
                        progress=progress)

    # -------------------------------------------------- pipeline
    def commit_outside_edits(self, paths: Iterable[str] | None = None,
                             author: str | Identity | None = None, reason: str | None = None) -> str | None:
        """Commit memory files edited outside gitmem, as one commit authored by the vault's ``user``
        (from ``.gitmem.yaml``); the files are not touched. ``reason`` is added to the subject in
        parentheses (``edit: <title> (outside edit)``)
        (:meth:`OutsideEdits.commit <gitmem.write.person_edits.OutsideEdits.commit>`)."""
        return self.services.pipeline.outside.commit(paths, author, reason)

    # -------------------------------------------------- syncer
    def add_remote(self, name: str, url: str) -> Remote:
        """Configure remote ``name`` (in ``.git/config``, like ``git remote add``)
        (:meth:`Syncer.add_remote`)."""
        return self.services.syncer.add_remote(name, url)

    def remove_remote(self, name: str) -> Remote:
        """Forget remote ``name`` and its remote-tracking refs (the remote itself is untouched)
        (:meth:`Syncer.remove_remote`)."""
        return self.services.syncer.remove_remote(name)

    def remotes(self) -> builtins.list[Remote]:
        """The configured remotes, URLs redacted (:meth:`Syncer.remotes`)."""
        return self.services.syncer.remotes()

    def conflicts(self) -> builtins.list[dict[str, Any]]:
        """Conflict copies a sync made and nobody has resolved yet (:meth:`Syncer.conflicts`)."""
        return self.services.syncer.conflicts()

    def sync(self, remote: str = "origin", *, author: str | Identity | None = None,
             max_attempts: int = MAX_ATTEMPTS) -> SyncReport:
        """Fetch from ``remote``, integrate (fast-forward or merge), push (:meth:`Syncer.sync`)."""
        return self.services.syncer.sync(remote, author=author, max_attempts=max_attempts)

    def sync_status(self, remote: str | None = None) -> dict[str, Any]:
        """How this vault syncs with ``remote``: last success and error, ahead/behind,
        conflict copies, the background sync, the purges (:meth:`Syncer.status`)."""
        return self.services.syncer.status(remote)

    def start_sync(self, remote: str | None = None, interval: float | None = None, *,
                   log: Callable[[str], None] | None = None, quiet: bool = False) -> BackgroundSync | None:
        """Sync with ``remote`` in a background thread: fetch on start and every ``interval``
        seconds, push shortly after each write, back off while the remote is unreachable.
        ``remote``/``interval`` None: the ``sync:`` settings of ``.gitmem.yaml``; None is
        returned when neither names a remote.  Call ``stop()`` on the result to end it
        (with a last push).  See :mod:`gitmem.sync.background`."""
        from .sync.background import start_background_sync
        return start_background_sync(self.services.syncer, self.config, remote=remote, interval=interval,
                                     log=log, quiet=quiet)

    def pending_config(self) -> dict[str, dict[str, Any]]:
        """Safety settings a sync held back: {key: {kept, file, since}} (see
        :func:`gitmem.config.pending_changes`) (:meth:`Syncer.pending_config`)."""
        return self.services.syncer.pending_config()

    def accept_config(self, keys: builtins.list[str] | None = None) -> dict[str, dict[str, Any]]:
        """Let the ``.gitmem.yaml`` values a sync held back take effect (``keys``: some of
        ``secrets``, ``protected_types``, ``max_content_bytes``, ``trust``; None: all). Returns what was
        accepted ({key: {kept, file, since}}) (:meth:`Syncer.accept_config`)."""
        return self.services.syncer.accept_config(keys)

    def start_embedding(self, log: Callable[[str], None] | None = None) -> EmbedWorker | None:
        """Keep embedding vectors current in a background thread, when the vault has
        vectors and the ``embed`` extra is installed (None otherwise)."""
        return self.services.searcher.start_embedding(log)

    def convert_layout(self, layout: str, *, every: bool = False, dry_run: bool = False,
                       author: str | Identity | None = None) -> LayoutReport:
        """Move the memories gitmem placed to where ``layout`` (``flat`` or ``hashed``) puts
        them, and make it the vault's layout: one commit of pure renames (``every`` also
        moves the notes in a person's own folders).  The report also counts where the
        vault's memories were (``memories``).  See :mod:`gitmem.ops.layout`."""
        return self.services.layouts.convert(layout, every=every, dry_run=dry_run, author=author)

    # ------------------------------------------------- import / export / view
    def import_from(self, format: str, source: str | os.PathLike[str], *, dry_run: bool = False,
                    tier: str | None = None, author: str | Identity | None = None, force: bool = False,
                    progress: Callable[[int, int], None] | None = None, max_bytes: int | None = None,
                    max_objects: int | None = None) -> ImportReport:
        """Import another tool's memories in ONE commit (none when nothing changed).

        ``format``: ``markdown``, ``mcp-memory``, ``agent-rules``, ``chatgpt``,
        ``claude``.  Re-importing creates nothing new: items carry a ``source``
        key; changed ones are updated, unchanged ones skipped.  A source over
        ``max_bytes`` of text (default 256 MiB) or ``max_objects`` JSON objects
        and records (default 1,000,000) is refused (``import_too_large``) before
        anything is written.  See :func:`gitmem.exchange.importing.run_import`."""
        from .exchange.importing import run_import
        return run_import(self.services, format, source, dry_run=dry_run, tier=tier, author=author,
                          force=force, progress=progress, max_bytes=max_bytes, max_objects=max_objects)

    def export_jsonl(self, out: str | os.PathLike[str] | IO[str]) -> int:
        """Write every memory as one JSON line to ``out`` (a path outside the vault, or a
        text stream); returns the count.  See :mod:`gitmem.exchange.exporting`."""
        from .exchange.exporting import export_jsonl
        return export_jsonl(self.services, out)

    def export_folder(self, target: str | os.PathLike[str], *, force: bool = False) -> FolderExport:
        """Write every memory to ``target/<tier>/<file name>.md`` (never inside the vault;
        a non-empty ``target`` needs ``force``).  See :mod:`gitmem.exchange.exporting`."""
        from .exchange.exporting import export_folder
        return export_folder(self.services, target, force=force)

    def write_view(self, path: str | os.PathLike[str] | None = None) -> ViewReport:
        """Write the history viewer, one self-contained HTML page, to ``path`` (default
        ``.git/gitmem/view.html``, outside the tracked files): tiers, memories, the commit
        timeline, each memory's versions with diffs and its moves.
        Returns a :class:`gitmem.exchange.view.ViewReport` (path, counts, bytes, seconds)."""
        from .exchange.view import write_view
        return write_view(self.services, path)

    # ------------------------------------------------------------- upkeep
    def memory_id(self, ref: str) -> str:
        """The id ``ref`` names, also for a memory that no longer has a file (deleted
        for good, or purged from the working tree)."""
        return self.services.history.memory_id(ref)

    def purge(self, ref: str) -> PurgeReport:
        """Remove memory ``ref`` (also a deleted one) from the whole history: every version,
        in every commit, as if it had never been written.  See :mod:`gitmem.upkeep.purge`."""
        from .upkeep.purge import purge
        return purge(self.services, ref)

    def purge_status(self) -> dict[str, Any]:
        """The purges made or applied here (``tombstones``) and, for each configured remote,
        whether it has the rewritten history (``remotes``); asks each remote for its refs.
        See :func:`gitmem.sync.forget.remote_status`."""
        from .upkeep.purge import purge_status
        return purge_status(self.services)

    def doctor(self, *, repair: bool = False) -> builtins.list[Finding]:
        """Check the vault (frontmatter, metadata, caches, git); ``repair`` fixes what can
        be fixed safely.  See :mod:`gitmem.upkeep.doctor`."""
        from .upkeep.doctor import diagnose
        return diagnose(self.services, repair=repair)


def _first_commit(vault: Vault, config: VaultConfig, config_text: bytes, source: Path | None,
                  plan: list[tuple[str, str]], import_tier: str,
                  progress: Callable[[int, int], None] | None, left_out: list[tuple[str, str]],
                  adopted: Adoption | None = None) -> None:
    """The first commit of :meth:`Vault.init`: the settings, and the notes of ``plan``
    (``adopted``: the folder's own files, committed as they are on disk)."""
    changes = [FileChange(CONFIG_NAME, config_text)]
    for name, text in ((".gitignore", GITIGNORE), (".gitattributes", GITATTRIBUTES)):
        # An adopted folder's own file of that name is committed as it is.
        data = text.encode() if adopted is None else adopted.git_file(name)
        if data is not None:
            changes.append(FileChange(name, data))
    vault.config = config
    imported: list[tuple[str, str]] = []
    outside = 0
    for done, (src_rel, rel) in enumerate(plan, 1):
        data = safefs.read_or_none(source, src_rel) if source is not None else None
        if data is not None:
            changes.append(FileChange(rel, data))
            imported.append(("", rel))   # the id: the commit reads it (parsing each note once)
            outside += src_rel != rel
        if progress is not None:
            progress(done, len(plan))
    for tier in vault.config.tiers:
        if not any(c.path.startswith(tier + "/") for c in changes):
            changes.append(FileChange(f"{tier}/.gitkeep", b""))
    what = f" with {len(imported)} memories from {source.name}" if source else ""
    if adopted is not None:
        what = f" adopting {len(imported)} notes where they are"
    # Adopting commits the folder's notes as they are on disk: not one is rewritten.
    vault.services.pipeline.commit(changes, f"init: gitmem vault{what}", "init",
                                   [(mid, rel, "import") for mid, rel in imported], origin="person",
                                   write_worktree=adopted is None)
    vault.import_report = {"source": str(source) if source else None, "imported": len(imported),
                           "outside_tiers": outside, "import_tier": import_tier,
                           "skipped": [{"path": rel, "reason": why} for rel, why in left_out]}
    if adopted is not None:
        vault.import_report.update(adopted.left_alone())


_NOT_A_VAULT_HINT = ("Make a vault with 'gitmem init DIR', or name one with -C DIR / --vault DIR "
                      "or GITMEM_VAULT=DIR.")


def _is_vault(root: Path) -> bool:
    """True when the git repository at ``root`` is a gitmem vault: ``.gitmem.yaml`` is in
    its folder, or in HEAD's tree (a settings file deleted from disk only: the defaults
    apply, and the vault stays a vault).  Every vault ``init`` made holds the file from its
    first commit on; a repository that never had it is not a vault."""
    if os.path.lexists(root / CONFIG_NAME):  # a link counts (doctor reports it; defaults apply)
        return True
    try:
        store = GitStore(root)
    except NotAVault:
        return False
    try:
        return store.blob_sha_at(store.head(), CONFIG_NAME) is not None
    finally:
        store.repo.close()


def _read_or(folder: Path | None, name: str, default: bytes) -> bytes:
    data = safefs.read_or_none(folder, name) if folder is not None else None
    return default if data is None else data


def _yaml_dict(data: bytes) -> dict[str, Any]:
    import yaml
    try:
        loaded = yaml.safe_load(data.decode("utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InvalidMetadata(f"{CONFIG_NAME} is not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise InvalidMetadata(f"{CONFIG_NAME} must be a mapping")
    return loaded

