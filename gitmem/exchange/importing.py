"""Importing memories from other tools in one commit: ``gitmem import FORMAT SOURCE``.

The reader of the format (:mod:`gitmem.exchange.import_formats`) turns SOURCE into
items, each with a stable ``source`` key.  Under the vault lock the import then

1. finds the memories earlier imports made, by the ``source`` field the catalog
   holds (one listing, no file read per item); a memory an earlier gitmem
   version imported from a folder has a key without the folder
   (:attr:`ImportItem.older_source`): it is found by that key, unless the
   import that made it named another folder, and takes the new key;
2. places each new item (an id derived from its source key, a file name unique
   in the vault and in this import) and resolves ``[[links]]`` between items
   and ``related`` entries to the new files and ids;
3. renders each memory through the vault's secrets policy, and runs the write
   checks on the whole batch at once: an item either fails alone (reported,
   skipped) or is committed;
4. makes ONE commit of every created and changed file.  An item whose memory
   already holds what the import would write is left alone, so running the
   same import twice makes no second commit.

Nothing is written with ``dry_run``; the report says what would happen.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GitmemError, InvalidInput, InvalidMetadata, NotFound
from ..memory.markdown import link_key
from ..memory.paths import memory_relpath, slugify
from ..memory.provenance import IMPORT, lowest, make_origin
from ..memory.schema import clean_metadata, new_id, ordered
from ..store.git import FileChange
from .import_formats import FORMATS, ImportItem, in_code, in_folder
from .import_sources import MAX_IMPORT_BYTES, MAX_IMPORT_OBJECTS, ImportLimits

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Identity
    from ..memory.schema import Memory
    from ..services import Services

__all__ = ["ImportEntry", "ImportReport", "run_import", "convert_links", "ACTIONS"]

#: What an import did with each item.
ACTIONS = ("created", "updated", "unchanged", "skipped")
# Ids of imported memories are UUID5s of their source key: importing the same item
# into two vaults gives it the same id, so a later sync sees one memory, not two.
_IMPORT_NAMESPACE = uuid.UUID("2b0d7f3e-61a4-4c1e-8f57-3d9c0a6e5b14")
_LINK = re.compile(r"\[\[([^\[\]|#\n]+)(#[^\[\]|\n]*)?(\|[^\[\]\n]*)?\]\]")
# Fields an import compares and sets; everything else in a memory is left as it is.
_UNCOMPARED = ("updated", "created", "agent")


@dataclass(frozen=True)
class ImportEntry:
    """One item of an import: what happened (``action``), and why when skipped."""

    action: str
    source: str
    title: str
    path: str | None = None
    id: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (empty fields left out)."""
        return {k: v for k, v in (("action", self.action), ("source", self.source), ("title", self.title),
                                  ("path", self.path), ("id", self.id), ("reason", self.reason))
                if v is not None}


@dataclass
class ImportReport:
    """What :meth:`Vault.import_from` did (or, with ``dry_run``, would do)."""

    format: str
    source: str
    dry_run: bool
    entries: list[ImportEntry] = field(default_factory=list)
    commit: str | None = None

    def of(self, action: str) -> list[ImportEntry]:
        """The entries with this ``action`` (created, updated, unchanged, skipped)."""
        return [e for e in self.entries if e.action == action]

    created = property(lambda self: self.of("created"), doc="Items that became new memories.")
    updated = property(lambda self: self.of("updated"), doc="Memories rewritten because their source changed.")
    unchanged = property(lambda self: self.of("unchanged"), doc="Memories that already held the source.")
    skipped = property(lambda self: self.of("skipped"), doc="Items not imported, each with its reason.")

    def counts(self) -> dict[str, int]:
        """How many items each action got."""
        return {action: len(self.of(action)) for action in ACTIONS}

    def to_dict(self) -> dict[str, Any]:
        """JSON form: format, source, dry_run, commit, counts and every entry."""
        return {"format": self.format, "source": self.source, "dry_run": self.dry_run, "commit": self.commit,
                "counts": self.counts(), "items": [e.to_dict() for e in self.entries]}


def convert_links(body: str, stems: Mapping[str, str]) -> str:
    """``body`` with each ``[[link]]`` whose target is a key of ``stems`` (compared as
    :func:`~gitmem.memory.markdown.link_key` makes it) pointed at that file stem; the
    label shown stays what was written, and other links (and anything in fenced
    code blocks) are left as they are."""
    def swap(match: re.Match[str]) -> str:
        target = match.group(1).strip()
        stem = stems.get(link_key(target))
        if stem is None or stem == target:
            return match.group(0)
        label = match.group(3)[1:] if match.group(3) else target
        heading = match.group(2) or ""
        return f"[[{stem}{heading}]]" if label == stem else f"[[{stem}{heading}|{label}]]"
    if "[[" not in body:
        return body
    lines = body.split("\n")
    for number, code in enumerate(in_code(lines)):
        if not code and "[[" in lines[number]:  # a [[link]] in a fenced code block is code, not a link
            lines[number] = _LINK.sub(swap, lines[number])
    return "\n".join(lines)


def run_import(services: Services, format: str, source: str | os.PathLike[str], *, dry_run: bool = False,
               tier: str | None = None, author: str | Identity | None = None, force: bool = False,
               progress: Callable[[int, int], None] | None = None, max_bytes: int | None = None,
               max_objects: int | None = None) -> ImportReport:
    """Import ``source`` in format ``format`` into ``vault`` (see the module doc).

    ``tier`` places new memories (default: the format's, see
    :data:`~gitmem.exchange.import_formats.FORMATS`); ``force`` lets changed sources
    update protected memories (rules ...); ``progress(done, total)`` is called
    as items are prepared.  Raises before anything is written when the source
    is missing or unreadable, or goes over the import's limits: ``max_bytes`` of
    source text (default 256 MiB) and ``max_objects`` JSON objects and records
    (default 1,000,000; see :mod:`gitmem.exchange.import_sources`);
    an item the write checks refuse (a secret under ``secrets: refuse``, too
    large ...) is skipped and reported.
    """
    spec = FORMATS.get(format)
    if spec is None:
        raise InvalidInput(f"unknown import format {format!r}", hint=f"Formats: {', '.join(FORMATS)}.")
    limits = ImportLimits(MAX_IMPORT_BYTES if max_bytes is None else max_bytes,
                          MAX_IMPORT_OBJECTS if max_objects is None else max_objects)
    tiers = tuple(services.store.config.tiers)
    if tier is not None and tier not in tiers:
        raise InvalidMetadata(f"unknown tier {tier!r}", hint=f"Use one of: {', '.join(tiers)}")
    who = services.store.author_of(author)  # an author holding a secret: refused before reading
    path = Path(os.path.abspath(Path(source).expanduser()))
    if not path.exists():
        raise NotFound(f"import source {path} does not exist")
    root = services.store.root
    if any(form == root or root in form.parents for form in (path, Path(os.path.realpath(path)))):
        raise InvalidInput(f"{path} is inside the vault; import from a folder or file outside it")
    items = spec.read(path, tiers, limits)
    if spec.folder_keys:
        items = in_folder(items, path)
    report = ImportReport(format, str(path), dry_run)
    default_tier = tier or (spec.default_tier if spec.default_tier in tiers else tiers[0])
    with services.store.lock.hold():
        batch = _Batch(services, who, force, spec.links)
        batch.place(items, default_tier, tier is not None, path)
        for done, placed in enumerate(batch.placed, 1):
            batch.prepare(*placed)
            if progress is not None:
                progress(done, len(batch.placed))
        batch.check()
        report.entries = batch.entries()
        if batch.changes and not dry_run:
            counts = report.counts()
            subject = f"import {format}: {counts['created']} created, {counts['updated']} updated from {path.name}"
            report.commit = services.pipeline.commit(batch.changes, subject, "import", batch.touched, author=who,
                                               forced=batch.forced).sha
    return report


class _Batch:
    """The work of one import under the vault lock: placing, rendering, checking."""

    def __init__(self, services: Services, who: Identity, force: bool, links: bool) -> None:
        self.services, self.who, self.force, self.links = services, who, force, links
        self.results: dict[str, ImportEntry] = {}
        self.order: list[str] = []
        self.placed: list[tuple[ImportItem, Memory | None, str, str]] = []
        self.changes: list[FileChange] = []
        self.touched: list[tuple[str, str, str]] = []
        self.forced = False
        self.stems: dict[str, str] = {}   # link_key of an item's name -> its file stem
        self.ids: dict[str, str] = {}     # source key -> memory id

    def _done(self, item: ImportItem, action: str, path: str | None = None, mid: str | None = None,
              reason: str | None = None) -> None:
        if item.source not in self.results:
            self.order.append(item.source)
        self.results[item.source] = ImportEntry(action, item.source, item.title, path, mid, reason)

    def entries(self) -> list[ImportEntry]:
        """Every item's entry, in the order the source listed them."""
        return [self.results[key] for key in self.order]

    def place(self, items: list[ImportItem], default_tier: str, tier_given: bool, source: Path) -> None:
        """Find each item's memory from an earlier import, or give it an id and a path."""
        existing: dict[str, Memory] = {}
        for memory in sorted(self.services.reader.list(status=None), key=lambda m: m.path):
            key = memory.meta.get("source")
            if isinstance(key, str):
                existing.setdefault(key, memory)
        taken: set[str] = set()
        for item in items:
            if item.source in self.results:
                continue  # the source lists it twice: the first one counts
            if item.skip:
                self._done(item, "skipped", reason=item.skip)
                continue
            old = existing.get(item.source)
            if old is None and item.older_source is not None:
                older = existing.pop(item.older_source, None)  # one item takes it over, at most
                old = older if older is not None and self._imported_from(older, source) else None
            if old is not None:
                mid, path = old.id, old.path
            else:
                mid = self._new_id(item.source)
                where = default_tier if tier_given or item.tier not in self.services.store.config.tiers else item.tier
                path = memory_relpath(str(where), mid, self._free_stem(item.title, mid, taken),
                                      layout=self.services.store.layout())
            self._done(item, "unchanged", path, mid)  # until prepare() says otherwise
            self.placed.append((item, old, mid, path))
            self.ids[item.source] = mid
            if self.links:
                stem = path.rsplit("/", 1)[-1][:-3]
                for name in item.names:
                    self.stems.setdefault(link_key(name), stem)

    def _imported_from(self, memory: Memory, source: Path) -> bool:
        """Whether ``memory``, imported under a key without its folder, may be this
        ``source``'s: no when the import commit that made it (``import ...: ... from
        NAME``) names a folder other than this source's (another project's
        ``CLAUDE.md``); yes when that cannot be told."""
        touches = self.services.store.catalog.touches(memory.id)
        if not touches:
            return True
        try:
            subject = self.services.store.git.info(touches[0].commit.encode()).message.split("\n", 1)[0]
        except GitmemError:
            return True
        if not subject.startswith("import "):
            return True
        named = subject.rpartition(" from ")[2]
        if named.endswith((".md", ".mdc")) or named == ".cursorrules":
            return True  # that import named a file, not its folder
        return named == (source if source.is_dir() else source.parent).name

    def _new_id(self, key: str) -> str:
        mid = str(uuid.uuid5(_IMPORT_NAMESPACE, key))
        return new_id() if self.services.store.catalog.by_id(mid) else mid

    def _free_stem(self, title: str, mid: str, taken: set[str]) -> str:
        base = slugify(title) or f"memory-{mid[:8]}"
        stem, n = base, 2
        while stem.casefold() in taken or self.services.store.catalog.stem_taken(stem):
            stem, n = f"{base}-{n}", n + 1
        taken.add(stem.casefold())
        return stem

    def prepare(self, item: ImportItem, old: Memory | None, mid: str, path: str) -> None:
        """Render the item's memory file; record a change when it differs from the vault's."""
        try:
            self._prepare(item, old, mid, path)
        except GitmemError as exc:  # a bad title, a secret, too large: this item only
            self._done(item, "skipped", path if old else None, mid if old else None, exc.message)

    def _prepare(self, item: ImportItem, old: Memory | None, mid: str, path: str) -> None:
        services = self.services
        body = convert_links(item.body, self.stems) if self.links else item.body
        related = [{"id": self.ids[key], "relation": rel} for key, rel in item.related if key in self.ids]
        owned: dict[str, Any] = {**item.meta, "title": item.title, "type": item.type, "summary": item.summary,
                                 "source": item.source}
        # Imported text is anyone's: an import, never above who runs it, whatever the source claims.
        owned["origin"] = lowest([services.store.origin_of(self.who), make_origin(IMPORT, item.source)])
        if old is None:
            now = services.store.now()
            created = item.created or now
            meta = {"id": mid, "title": item.title, "type": item.type, "tier": path.split("/", 1)[0],
                    "status": "active", "tags": item.tags, "created": created,
                    "updated": item.updated or created, "agent": self.who.name, "entities": item.entities,
                    "related": related, **owned}
            meta = ordered(clean_metadata({k: v for k, v in meta.items() if v is not None},
                                          tiers=services.store.config.tiers))
            self._change(item, FileChange(path, services.pipeline.render(meta, body)), mid, path, "created")
            return
        if old.status == "deleted":
            self._done(item, "unchanged", path, mid, "deleted in the vault (restore it to import it again)")
            return
        current = services.reader.get(path)
        if current.problems:
            raise InvalidInput(f"{path} cannot be updated: {'; '.join(current.problems)}")
        meta = dict(current.meta)
        owned["origin"] = lowest([owned["origin"], services.pipeline.origin_of(current)])
        for key, value in owned.items():
            meta[key] = value
            if value is None:
                meta.pop(key)
        for key, new in (("tags", item.tags), ("entities", item.entities)):
            meta[key] = list(dict.fromkeys([*current.meta.get(key, []), *new]))
        kept = [r for r in current.meta.get("related", []) if isinstance(r, dict)]
        meta["related"] = list({(r["id"], r["relation"]): r for r in [*kept, *related]}.values())
        meta = ordered(clean_metadata(meta, tiers=services.store.config.tiers))

        def compared(fields: Mapping[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in fields.items() if k not in _UNCOMPARED}
        if compared(meta) == compared(current.meta) and body == current.body:
            return  # what the vault holds already: nothing to write
        content = body != current.body or any(meta.get(k) != current.meta.get(k) for k in ("title", "type"))
        protected = current.type in services.store.config.protected_types and current.status == "active"
        if protected and content and not self.force:
            self._done(item, "skipped", path, mid, f"the source changed, but {current.title!r} is a protected "
                       f"{current.type}; import with --force (force=True) to update it")
            return
        self.forced = self.forced or (protected and content)
        newer = item.updated if item.updated and item.updated > str(current.meta.get("updated", "")) else None
        meta["updated"] = newer or services.store.now()
        self._change(item, FileChange(path, services.pipeline.render(meta, body)), mid, path, "updated")

    def _change(self, item: ImportItem, change: FileChange, mid: str, path: str, action: str) -> None:
        self.changes.append(change)
        self.touched.append((mid, path, "add" if action == "created" else "update"))
        self._done(item, action, path, mid)

    def check(self) -> None:
        """Run the vault's write checks on the whole batch; drop (and report) what they refuse."""
        checks = self.services.store.git.checks
        if checks is None or not self.changes:
            return
        refused = checks.refusals(self.services.store.git, self.changes, "agent", self.services.store.git.head())
        if not refused:
            return
        by_path = {entry.path: key for key, entry in self.results.items() if entry.path}
        for path, error in refused.items():
            key = by_path.get(path)
            if key is not None:
                old = self.results[key]
                self.results[key] = ImportEntry("skipped", old.source, old.title, None, None, error.message)
        self.changes = [c for c in self.changes if c.path not in refused]
        self.touched = [t for t in self.touched if t[1] not in refused]
