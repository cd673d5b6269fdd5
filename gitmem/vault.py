"""The Vault: gitmem's one service class.

Every front door (Python API, CLI, agent tools, MCP server) calls a Vault
method; only the Vault touches files, git and the caches.  Each write is one
commit made under the vault lock; reads never take the lock and never write a
memory file.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .catalog import Catalog
from .config import CONFIG_NAME, DEFAULT_CONFIG_TEXT, Identity, VaultConfig, env_author
from .errors import (Conflict, ContentTooLarge, InvalidContent,
                     InvalidFrontmatter, InvalidInput, InvalidMetadata, MatchError, NotAVault,
                     NotFound, Protected)
from .gitstore import FileChange, GitStore, blob_id
from .history import HistoryMixin
from .indexing import IndexMixin
from .reading import ReadMixin, row_fields
from .locking import VaultLock
from .markdown import ParsedFile, decode, parse_text, render
from .paths import check_relpath, inside, is_hidden_part, is_memory_path, memory_relpath, slugify
from .schema import Memory, clean_metadata, derive, iso_now, new_id, ordered, validate_title

__all__ = ["Vault", "Committed"]

Clock = Callable[[], datetime]
GITIGNORE = """\
# gitmem keeps its private state (lock, caches, search index) in .git/gitmem/.
# Editor and OS litter that should never become a memory:
.obsidian/workspace*.json
.obsidian/cache
.trash/
.DS_Store
Thumbs.db
*.swp
*.swo
*~
4913
.*.gitmem-tmp-*
"""
# Seconds of quiet before .git/index is brought up to date.  Rewriting the
# index costs ~50 ms at 10k files, so it is batched, not paid per write; the
# window in which a shell `git commit -a` could see a stale index stays short.
_INDEX_FLUSH_DELAY = 0.25
_live_vaults: "weakref.WeakSet[Vault]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # pragma: no cover - exercised by CLI subprocess tests
    for vault in list(_live_vaults):
        try:
            vault.close()
        except Exception:  # noqa: BLE001 - never fail interpreter shutdown
            pass


@dataclass(frozen=True)
class Committed:
    """What :meth:`Vault._commit` made: the commit id and the memories it wrote."""

    sha: str
    memories: dict[str, Memory]


class Vault(ReadMixin, HistoryMixin, IndexMixin):
    """A gitmem vault: a git repository of Markdown memories in tier folders.

    Open with :meth:`Vault.open` or create with :meth:`Vault.init`; use as a
    context manager (or call :meth:`close`) so ``.git/index`` is left in line
    with HEAD.  ``author`` is the identity every write is committed as (an
    agent's name, or ``"Name <email>"``); ``clock`` returns the current time
    (inject one in tests).  One Vault object may be shared by threads.
    """

    def __init__(self, root: Path, *, author: str | Identity | None = None,
                 clock: Clock | None = None, lock_timeout: float = 30.0) -> None:
        self.root = Path(os.path.realpath(root))
        if not (self.root / ".git").is_dir():
            raise NotAVault(f"{root} is not a gitmem vault (no .git folder)")
        self.git = GitStore(self.root)
        self.config = VaultConfig.load(self.root)
        self.clock: Clock = clock or (lambda: datetime.now(timezone.utc))
        if isinstance(author, str):
            author = Identity.parse(author)
        self.author: Identity = author or env_author() or self.config.author
        self.state_dir = self.git.git_dir / "gitmem"
        self.lock = VaultLock(self.state_dir / "lock", timeout=lock_timeout)
        self.catalog = Catalog(self.state_dir / "catalog.sqlite")
        self._scanned = False
        self._flush_timer: threading.Timer | None = None
        self._closed = False
        self._search_index = None
        if (self.state_dir / "index-dirty").exists() and not self.git.index_pending:
            with self.lock.hold():
                self.git.repair_index()  # a writer died before syncing .git/index
        _live_vaults.add(self)

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> "Vault":
        """Open the vault at ``path`` (default: ``$GITMEM_VAULT``, else the current folder)."""
        chosen = path if path is not None else os.environ.get("GITMEM_VAULT") or "."
        root = Path(chosen).expanduser()
        if not root.is_dir():
            raise NotAVault(f"{root} does not exist")
        if not (root / CONFIG_NAME).exists() and not (root / ".git").is_dir():
            raise NotAVault(f"{root} is not a gitmem vault")
        return cls(root, **kwargs)

    @classmethod
    def init(cls, path: str | os.PathLike[str], *, from_dir: str | os.PathLike[str] | None = None,
             author: str | Identity | None = None, clock: Clock | None = None) -> "Vault":
        """Create a vault at ``path`` (one commit), optionally importing the
        Markdown memories of a plain folder such as the bundled ``sample-vault``."""
        root = Path(path).expanduser()
        if (root / CONFIG_NAME).exists():
            raise Conflict(f"{root} is already a gitmem vault", hint="Open it with Vault.open().")
        if root.exists() and not root.is_dir():
            raise InvalidInput(f"{root} exists and is not a folder")
        source = Path(from_dir).expanduser() if from_dir is not None else None
        if source is not None and not source.is_dir():
            raise NotFound(f"import folder {source} does not exist")
        GitStore.init(root).close()
        vault = cls(root, author=author, clock=clock)
        changes = [FileChange(CONFIG_NAME, _read_or(source, CONFIG_NAME, DEFAULT_CONFIG_TEXT.encode())),
                   FileChange(".gitignore", GITIGNORE.encode())]
        vault.config = VaultConfig.from_dict(_yaml_dict(changes[0].data or b""))
        imported: list[tuple[str, str]] = []
        if source is not None:
            for rel, data in _iter_import(source, vault.config.tiers):
                changes.append(FileChange(rel, data))
                parsed = parse_text(decode(data))
                imported.append((str(derive(rel, parsed.meta, parsed.body)["id"]), rel))
        for tier in vault.config.tiers:
            if not any(c.path.startswith(tier + "/") for c in changes):
                changes.append(FileChange(f"{tier}/.gitkeep", b""))
        what = f" with {len(imported)} memories from {source.name}" if source else ""
        vault._commit(changes, f"init: gitmem vault{what}", "init",
                      [(mid, rel, "import") for mid, rel in imported])
        return vault

    def close(self) -> None:
        """Sync ``.git/index`` with HEAD and release resources (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._flush_timer:
            self._flush_timer.cancel()
        with self.lock.hold():
            self.git.flush_index()
            self.git.pack_if_needed()
            if self._search_index is not None:
                self._search_index.close()
        self.git.repo.close()
        self.catalog.close()
        _live_vaults.discard(self)

    def flush(self) -> None:
        """Bring ``.git/index`` in line with HEAD now (normally done lazily)."""
        if self._flush_timer:
            self._flush_timer.cancel()
        with self.lock.hold():
            self.git.flush_index()

    def __enter__(self) -> "Vault":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    @property
    def head(self) -> str | None:
        """The sha of the vault's latest commit (None before the first)."""
        sha = self.git.head()
        return sha.decode() if sha else None

    def now(self) -> str:
        """The injected clock's time as ISO 8601 UTC."""
        return iso_now(self.clock())

    # -------------------------------------------------------------- writing
    def _author(self, author: str | Identity | None) -> Identity:
        if author is None:
            return self.author
        return author if isinstance(author, Identity) else Identity.parse(author)

    def _protected(self, memory: Memory) -> bool:
        return memory.type in self.config.protected_types and memory.status == "active"

    def _guard(self, memory: Memory, force: bool, action: str) -> None:
        if self._protected(memory) and not force:
            raise Protected(f"{memory.title!r} is a protected {memory.type}; refusing to {action} it")

    def _render(self, meta: Mapping[str, Any], body: str, raw: Mapping[str, str] | None = None) -> bytes:
        if not isinstance(body, str):
            raise InvalidContent(f"content must be text, got {type(body).__name__}")
        if "\x00" in body:
            raise InvalidContent("content contains NUL characters")
        data = render(meta, body, raw).encode("utf-8", "surrogatepass")
        if len(data) > self.config.max_content_bytes:
            raise ContentTooLarge(f"memory is {len(data):,} bytes; the limit is "
                                  f"{self.config.max_content_bytes:,}")
        return data

    def _unique_stem(self, title: str, memory_id: str) -> str:
        base = slugify(title) or f"memory-{memory_id[:8]}"
        self._ensure_scanned()
        stem, n = base, 2
        while self.catalog.stem_taken(stem):
            stem, n = f"{base}-{n}", n + 1
        return stem

    def add(self, title: str, body: str = "", *, type: str = "memory", tier: str | None = None,
            tags: Sequence[str] | None = None, author: str | Identity | None = None,
            path: str | None = None, **fields: Any) -> Memory:
        """Create a memory (one commit ``add: <title>``) and return it.

        ``fields`` are any other frontmatter fields (importance, confidence,
        scope, entities, related, summary, source, expires, ...).  ``path``
        places the file explicitly (vault-relative, under a tier folder);
        otherwise it goes to ``<tier>/<h1>/<h2>/<slug>.md``.
        """
        who = self._author(author)
        title = validate_title(title)
        tier = tier or self.config.tiers[0]
        memory_id = str(fields.pop("id", None) or new_id())
        now = self.now()
        meta = {"id": memory_id, "title": title, "type": type, "tier": tier, "status": "active",
                "tags": list(tags or []), "created": now, "updated": now, "agent": who.name, **fields}
        meta = ordered(clean_metadata(meta, tiers=self.config.tiers))
        with self.lock.hold():
            if self.catalog.by_id(memory_id):
                raise Conflict(f"a memory with id {memory_id} already exists")
            if path is not None:
                rel = self._new_path(path, meta)
            else:
                rel = memory_relpath(tier, memory_id, self._unique_stem(title, memory_id))
            data = self._render(meta, body)
            done = self._commit([FileChange(rel, data)], f"add: {title}", "add",
                                [(memory_id, rel, "add")], author=who)
        return self._written(done, rel)

    def _new_path(self, path: str, meta: dict[str, Any]) -> str:
        rel = check_relpath(path)
        if not rel.endswith(".md"):
            rel += ".md"
        top = rel.split("/", 1)[0]
        if top not in self.config.tiers or "/" not in rel:
            raise InvalidInput(f"path {path!r} must start with a tier folder "
                               f"({', '.join(self.config.tiers)})")
        meta["tier"] = top
        target = inside(self.root, rel)
        if target.exists() or target.is_symlink():
            raise Conflict(f"{rel} already exists", hint="Update it instead, or pick another name.")
        if self.catalog.stem_taken(rel.rsplit("/", 1)[-1][:-3]):
            raise Conflict(f"a memory file named {rel.rsplit('/', 1)[-1]} already exists in the vault",
                           hint="File names are unique across tiers so [[links]] stay unambiguous.")
        return rel

    def _current(self, ref: str) -> tuple[Memory, ParsedFile]:
        """The memory and its parsed file, refusing files gitmem cannot rewrite safely."""
        path = self.resolve(ref)
        target = inside(self.root, path)
        if target.is_symlink():
            raise InvalidInput(f"{path} is a symbolic link; gitmem does not write through links")
        data = target.read_bytes()
        memory = self._read_file(path, data)
        parsed = parse_text(decode(data)) if not memory.problems else None
        if parsed is None or parsed.problem:
            raise InvalidFrontmatter(
                f"{path} has frontmatter gitmem cannot parse: {'; '.join(memory.problems)}",
                hint="Fix the file by hand (gitmem doctor lists such files); gitmem will not overwrite it.")
        return memory, parsed

    def update(self, ref: str, *, body: str | None = None, append: str | None = None,
               replace: tuple[str, str] | None = None, title: str | None = None,
               tags: Sequence[str] | None = None, add_tags: Sequence[str] = (),
               remove_tags: Sequence[str] = (), meta: Mapping[str, Any] | None = None,
               force: bool = False, author: str | Identity | None = None,
               message: str | None = None) -> Memory:
        """Change a memory in one commit ``update: <title>``.

        ``body`` replaces the content, ``append`` adds a paragraph at the end,
        ``replace=(old, new)`` swaps text that must occur exactly once.
        ``tags`` replaces the tag list; ``add_tags``/``remove_tags`` edit it;
        ``meta`` sets other frontmatter fields (a value of None removes one).
        Changing the content, title or type of a protected memory needs ``force``.
        """
        who = self._author(author)
        with self.lock.hold():
            memory, parsed = self._current(ref)
            new_meta = dict(memory.meta)
            new_body = memory.body
            content_change = body is not None or append is not None or replace is not None
            if body is not None:
                new_body = body
            if append is not None:
                sep = "" if not new_body or new_body.endswith("\n\n") else ("\n" if new_body.endswith("\n") else "\n\n")
                new_body = f"{new_body}{sep}{append}" + ("" if append.endswith("\n") else "\n")
            if replace is not None:
                old, new = replace
                if not isinstance(old, str) or not old:
                    raise InvalidInput("the text to replace is empty")
                count = new_body.count(old)
                if count != 1:
                    raise MatchError(
                        f"the text to replace occurs {count} times in {memory.path}; it must occur exactly once",
                        code="no_match" if count == 0 else "ambiguous_match",
                        hint="Quote more surrounding text so it matches exactly once.")
                new_body = new_body.replace(old, new, 1)
            if title is not None:
                new_meta["title"] = validate_title(title)
                content_change = True
            if tags is not None:
                new_meta["tags"] = list(tags)
            if add_tags or remove_tags:
                current = [t for t in new_meta.get("tags", []) if t not in set(remove_tags)]
                new_meta["tags"] = current + [t for t in add_tags if t not in current]
            for key, value in (meta or {}).items():
                if key in ("id", "tier", "created"):
                    raise InvalidMetadata(f"{key} cannot be changed by update",
                                          hint="Use move() to change the tier." if key == "tier" else None)
                if key == "type":
                    content_change = True
                new_meta[key] = value
                if value is None:
                    new_meta.pop(key)
            if content_change:
                self._guard(memory, force, "overwrite")
            new_meta["updated"] = self.now()
            new_meta = ordered(clean_metadata(new_meta, tiers=self.config.tiers))
            if new_meta == memory.meta and new_body == memory.body:
                return memory  # nothing changed: no empty commit
            data = self._render(new_meta, new_body, parsed.raw_blocks)
            subject = message or f"update: {new_meta['title']}"
            done = self._commit([FileChange(memory.path, data)], subject, "update",
                               [(memory.id, memory.path, "update")], author=who, forced=force and self._protected(memory))
        return self._written(done, memory.path)

    def move(self, ref: str, tier: str, *, force: bool = False, author: str | Identity | None = None,
             extra_meta: Mapping[str, Any] | None = None, op: str = "move") -> Memory:
        """Move a memory to another tier: one commit, a tracked rename."""
        who = self._author(author)
        if tier not in self.config.tiers:
            raise InvalidMetadata(f"unknown tier {tier!r}", hint=f"Use one of: {', '.join(self.config.tiers)}")
        with self.lock.hold():
            memory, parsed = self._current(ref)
            if memory.tier == tier and not extra_meta:
                return memory
            self._guard(memory, force, "move")
            new_meta = dict(memory.meta, tier=tier)
            archive = self.config.archive_tier
            if tier == archive and memory.tier != archive:
                new_meta.setdefault("archived_from", memory.tier)
                if new_meta.get("status", "active") == "active":
                    new_meta["status"] = "archived"
            elif memory.tier == archive and tier != archive:
                new_meta.pop("archived_from", None)
                new_meta.pop("archived_into", None)
                new_meta["status"] = "active"
            for key, value in (extra_meta or {}).items():
                new_meta[key] = value
            new_meta = ordered(clean_metadata(new_meta, tiers=self.config.tiers))
            rest = memory.path.split("/", 1)[1] if "/" in memory.path else memory.path
            new_path = f"{tier}/{rest}"
            if new_path != memory.path and inside(self.root, new_path).exists():
                raise Conflict(f"cannot move: {new_path} already exists")
            data = self._render(new_meta, memory.body, parsed.raw_blocks)
            changes = [FileChange(new_path, data)]
            if new_path != memory.path:
                changes.insert(0, FileChange(memory.path, None))
            subject = f"{op}: {memory.title} {memory.tier} -> {tier}"
            done = self._commit(changes, subject, op, [(memory.id, new_path, op)], author=who,
                               forced=force and self._protected(memory))
        return self._written(done, new_path)

    def delete(self, ref: str, *, hard: bool = False, force: bool = False,
               author: str | Identity | None = None) -> Memory:
        """Delete a memory in one commit.

        Soft (default): ``status: deleted`` and moved to the archive tier, still
        readable.  Hard: the file is removed.  Both are recoverable from history
        with :meth:`restore`.  Returns the memory as it was before a hard
        delete, or as it is now after a soft one.
        """
        who = self._author(author)
        if not hard:
            with self.lock.hold():
                memory, _ = self._current(ref)
                self._guard(memory, force, "delete")
                return self.move(memory.path, self.config.archive_tier, force=force, author=who,
                                 extra_meta={"status": "deleted", "updated": self.now()}, op="delete")
        with self.lock.hold():
            memory = self.get(ref)
            self._guard(memory, force, "delete")
            done = self._commit([FileChange(memory.path, None)], f"delete: {memory.title} (hard)", "delete",
                               [(memory.id, None, "delete")], author=who, forced=force and self._protected(memory))
        memory.commit = done.sha
        return memory

    # --------------------------------------------------------------- commit
    @staticmethod
    def _written(done: "Committed", path: str) -> Memory:
        """The memory a write produced (parsed once, in :meth:`_after_commit`)."""
        memory = done.memories[path]
        memory.commit = done.sha
        return memory

    def _commit(self, changes: Sequence[FileChange], subject: str, op: str,
                touched: Sequence[tuple[str, str | None, str]], *, author: Identity | None = None,
                forced: bool = False, body: str = "", write_worktree: bool = True) -> "Committed":
        """Make one commit of ``changes`` and update the caches. Lock must be held."""
        who = author or self.author
        trailers = [f"Memory-Id: {mid}" for mid in dict.fromkeys(t[0] for t in touched)]
        trailers += [f"Op: {op}", f"Agent: {who.name}"]
        if forced:
            subject += " (forced)"
            trailers.append("Forced: true")
        message = f"{subject}\n\n" + (f"{body.rstrip()}\n\n" if body else "") + "\n".join(trailers) + "\n"
        with self.lock.hold():
            parent = self.git.head()
            when = self.clock().timestamp()
            sha = self.git.commit_files(changes, message, who, when=when, write_worktree=write_worktree)
            memories = self._after_commit(parent, sha, changes, touched, int(when))
        return Committed(sha.decode(), memories)

    def _after_commit(self, parent: bytes | None, sha: bytes, changes: Sequence[FileChange],
                      touched: Sequence[tuple[str, str | None, str]], when: int) -> dict[str, Memory]:
        """Update caches for a commit this Vault made (lock held).

        Each written memory file is parsed and hashed once here; the catalog,
        the search index and the caller's return value all use that parse.
        """
        written: dict[str, tuple[Memory, str]] = {}
        removed: list[str] = []
        for change in changes:
            if not self.is_memory_path(change.path):
                continue
            if change.data is None:
                removed.append(change.path)
            else:
                written[change.path] = (self._read_file(change.path, change.data), blob_id(change.data))
        with self.catalog.transaction():
            self.catalog.drop(removed)
            for path, (memory, blob_hash) in written.items():
                self.catalog.put(path, memory.id, os.stat(self.root / path), *row_fields(memory), blob_hash)
            tip = self.catalog.get("history_tip")
            if tip == (parent.decode() if parent else None) or (tip is None and parent is None):
                self.catalog.add_touches(sha.decode(), when, touched)
                self.catalog.set("history_tip", sha.decode())
        self._index_changes(written, removed, new=[t[1] for t in touched if t[2] == "add" and t[1]])
        self._schedule_index_flush()
        return {path: memory for path, (memory, _) in written.items()}

    def is_memory_path(self, path: str) -> bool:
        """True if the vault-relative ``path`` is a memory file (see :func:`paths.is_memory_path`)."""
        return is_memory_path(path, self.config.tiers)

    def _schedule_index_flush(self) -> None:
        if self._flush_timer:
            self._flush_timer.cancel()
        timer = threading.Timer(_INDEX_FLUSH_DELAY, self._flush_quietly)
        timer.daemon = True
        self._flush_timer = timer
        timer.start()

    def _flush_quietly(self) -> None:
        if self._closed:
            return
        try:
            with self.lock.hold():
                self.git.flush_index()
                if self._search_index is not None:
                    self._search_index.merge_small()
                self.git.pack_if_needed()
        except Exception:  # noqa: BLE001 - best effort in a timer thread; close() retries
            pass


def _read_or(folder: Path | None, name: str, default: bytes) -> bytes:
    if folder is not None and (folder / name).is_file():
        return (folder / name).read_bytes()
    return default


def _yaml_dict(data: bytes) -> dict[str, Any]:
    import yaml
    try:
        loaded = yaml.safe_load(data.decode("utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InvalidMetadata(f"{CONFIG_NAME} is not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise InvalidMetadata(f"{CONFIG_NAME} must be a mapping")
    return loaded


def _iter_import(source: Path, tiers: Sequence[str]) -> Iterable[tuple[str, bytes]]:
    """Markdown files under ``source``'s tier folders, as (relpath, bytes)."""
    for tier in tiers:
        top = source / tier
        if not top.is_dir():
            continue
        for file in sorted(top.rglob("*.md")):
            rel = file.relative_to(source).as_posix()
            if any(is_hidden_part(p) for p in rel.split("/")) or file.is_symlink():
                continue
            yield check_relpath(rel), file.read_bytes()
