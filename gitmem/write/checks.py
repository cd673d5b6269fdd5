"""The checks every write passes before git stores anything.

:class:`WriteChecks` is handed to the vault's :class:`~gitmem.store.git.GitStore`,
whose ``commit_files`` and ``fast_forward`` are the only ways gitmem moves the
branch: so every write (the Python API, every agent tool profile, plain-file
writes, the watcher's commit of outside edits, sync, compress, merge, reflect,
MEMORY.md) passes the same sequence, and a new front door cannot skip it.

First, once per commit, the **author** and committer are screened for secrets
(:func:`~gitmem.memory.secrets.screen_identity`): refused under ``refuse`` and
``redact`` (an author cannot be redacted), let through under ``allow``.  Then, in
order, for each file the write sets or removes:

1. **Path gate** (:mod:`gitmem.safefs`): no ``.``/``..``/``.git``/empty part, no
   ``/`` ``\\`` NUL inside a part, parts of at most 255 bytes of valid UTF-8, and
   no symbolic link on the way in the work tree.
2. **Names**: a new file may not differ only by letter case from another file
   in the same folder (``Notes.md`` beside ``notes.md`` breaks on macOS and
   Windows checkouts).
3. **Text**: a write an agent made must be valid UTF-8 (no lone surrogates) and
   at most ``max_content_bytes``.
4. **Secrets** (the vault's ``secrets:`` policy, :mod:`gitmem.memory.secrets`): the
   path and the whole file text (frontmatter, so title and tags, and body) are
   scanned; content already in the repository (a pure move) is not scanned
   again.  A person's file is never rewritten, so ``redact`` applies only to what
   gitmem writes itself; a file a person saved with a secret is refused (left
   uncommitted, reported by the watcher and ``gitmem doctor``).

Metadata of memory files is validated where it is made (``schema.clean_metadata``
for gitmem's own writes) and read defensively everywhere else, so a hostile
value in a person's or a remote's file is recorded as a problem, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import safefs
from ..errors import Conflict, ContentTooLarge, GitmemError, InvalidContent, SecretDetected, UnsafePath
from ..memory.secrets import policy_of, redact_text, scan_text, screen_identity
from ..store.git import FileChange, GitStore, Origin

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Identity, VaultConfig

__all__ = ["WriteChecks", "Origin", "ORIGINS"]

ORIGINS = ("agent", "person", "remote", "generated")


@dataclass
class WriteChecks:
    """The write checks of one vault (see the module doc).

    ``config`` returns the vault's current settings (they change when a sync
    brings a new ``.gitmem.yaml``).
    """

    root: Path
    config: Callable[[], VaultConfig]
    # Lines of generated files already scanned and found clean.  MEMORY.md is ~40 KB at
    # 10k memories and a write changes a few of its lines: scanning only new lines keeps
    # the check at microseconds instead of ~10 ms per write.
    _clean_lines: set[str] = field(default_factory=set, repr=False)

    def _scrub(self, text: str) -> str | None:
        """``text`` with secrets redacted, or None when it holds none."""
        fresh = [line for line in text.split("\n") if line not in self._clean_lines]
        if not fresh or not scan_text("\n".join(fresh)):
            if len(self._clean_lines) > 200_000:
                self._clean_lines.clear()
            self._clean_lines.update(fresh)
            return None
        return redact_text(text)

    def prepare(self, changes: Sequence[FileChange], generated: Collection[str]) -> list[FileChange]:
        """``changes`` with secrets redacted from the files gitmem generates (MEMORY.md):
        they quote memories, and a person's uncommitted note may hold a secret."""
        if not generated or policy_of(self.config()) == "allow":
            return list(changes)
        out = []
        for change in changes:
            if change.path in generated and change.data is not None:
                scrubbed = self._scrub(change.data.decode("utf-8", "replace"))
                if scrubbed is not None:
                    change = FileChange(change.path, scrubbed.encode("utf-8"))
            out.append(change)
        return out

    def identity(self, author: Identity, committer: Identity | None) -> None:
        """Raise :class:`SecretDetected` if the author or committer holds a secret (the
        ``secrets:`` policy: only ``allow`` lets it through)."""
        policy = policy_of(self.config())
        for who in (author, committer):
            if who is not None:
                screen_identity(who.name, who.email, policy)

    def __call__(self, store: GitStore, changes: Sequence[FileChange], origin: Origin,
                 parent: bytes | None, generated: Collection[str] = ()) -> None:
        """Raise a :class:`~gitmem.errors.GitmemError` if any change may not be committed."""
        errors = self.refusals(store, changes, origin, parent, generated)
        if errors:
            raise next(iter(errors.values()))

    def refusals(self, store: GitStore, changes: Sequence[FileChange], origin: Origin,
                 parent: bytes | None, generated: Collection[str] = ()) -> dict[str, GitmemError]:
        """Each change that may not be committed -> why (empty when all pass)."""
        out: dict[str, GitmemError] = {}
        config = self.config()
        policy = policy_of(config)
        removed = {c.path for c in changes if c.data is None}
        added_names: dict[tuple[str, str], str] = {}
        for change in changes:
            try:
                self._check_one(store, change, origin, parent, generated, config, policy,
                                removed, added_names)
            except GitmemError as exc:
                out[change.path] = exc
        return out

    def _check_one(self, store: GitStore, change: FileChange, origin: Origin, parent: bytes | None,
                   generated: Collection[str], config: VaultConfig, policy: str,
                   removed: set[str], added_names: dict[tuple[str, str], str]) -> None:
        path = change.path
        parts = safefs.split_checked(path)
        if path not in generated and safefs.is_symlink_on_the_way(self.root, path):
            raise UnsafePath(f"{path} is (or is inside) a symbolic link; gitmem never reads, "
                                    "writes or commits through links in the vault", path=path)
        if change.data is None or path in generated:
            return
        folder, name = "/".join(parts[:-1]), parts[-1]
        key = (folder, name.casefold())
        other = added_names.setdefault(key, name)
        if other != name:
            raise Conflict(f"{path}: two files in one write differ only by letter case ({other})")
        if store.blob_sha_at(parent, path) is None:  # a new file: no case twin may exist
            twin = _case_twin(store, parent, folder, name, removed)
            if twin is not None:
                raise Conflict(f"{path}: {twin} already exists and differs only by letter case",
                               hint="File names must stay distinct on case-insensitive file systems; "
                                    "pick another name or update the existing file.")
        if origin == "agent":
            try:
                change.data.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidContent(f"{path}: content is not valid UTF-8 text (a lone surrogate?)") from None
            if len(change.data) > config.max_content_bytes:
                raise ContentTooLarge(f"{path} is {len(change.data):,} bytes; the limit is "
                                      f"{config.max_content_bytes:,}")
        if policy == "allow":
            return
        found = scan_text(path, "path")
        if not found and not store.has_blob_of(change.data):
            found = scan_text(change.data.decode("utf-8", "replace"), "content")
        if found:
            kinds = sorted({f.kind for f in found})
            places = sorted({f.where for f in found})
            who = {"person": "the file", "remote": "the incoming file"}.get(origin, "the write")
            shown = redact_text(path)  # never echo the secret, not even in an error
            raise SecretDetected(
                f"{shown}: refusing to commit {who}: it looks like it contains a secret "
                f"({', '.join(kinds)} in {', '.join(places)}); git history keeps everything it is given",
                findings=[f.to_dict() for f in found], path=shown)


def _case_twin(store: GitStore, parent: bytes | None, folder: str, name: str,
               removed: set[str]) -> str | None:
    """Another entry of ``folder`` in ``parent``'s tree whose name equals ``name`` but for case."""
    folded = name.casefold()
    for other in store.names_in(parent, folder):
        rel = f"{folder}/{other}" if folder else other
        if other != name and other.casefold() == folded and rel not in removed:
            return rel
    return None
