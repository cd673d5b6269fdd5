"""Consolidation: several memories become fewer, in one write a person can read,
diff and revert.

Archiving moves memories into the archive tier; merging and compressing make one
new memory from several and archive the sources with ``merged_into`` /
``archived_into`` pointing at it.  The moves are tracked renames (a pure-rename
commit precedes the step's commit, so ``git log --follow`` shows a file's whole
life), and protected types (goal, rule, constraint by default) are never touched
without ``force``.  A :class:`Consolidation` is the plan of one such step; the
compress flow (:mod:`gitmem.ops.compress`) and reflect (:mod:`gitmem.ops.reflect`)
build on :class:`Consolidator`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import Identity
from ..errors import InvalidInput
from ..memory.paths import memory_relpath
from ..memory.schema import Memory, clean_metadata, new_id, ordered
from ..store.git import FileChange
from .dedup import title_from_content

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.markdown import ParsedFile
    from ..store.reader import Reader
    from ..store.storage import Storage
    from ..write.person_edits import Touched
    from ..write.pipeline import WritePipeline
    from .memories import Memories

__all__ = ["Consolidation", "Consolidator", "MergeResult", "ConsolidationChanges"]

#: A memory as a write reads it: the parsed memory and its file.
Source = tuple[Memory, "ParsedFile"]


@dataclass
class MergeResult:
    """The memory a merge made and the ids of the sources it archived."""

    memory: Memory
    sources: list[str]
    repointed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.memory.id, "path": self.memory.path, "commit": self.memory.commit,
                "sources": self.sources, "repointed": self.repointed}


@dataclass
class Consolidation:
    """The plan of one consolidation: a new memory made from ``sources``, each of which
    moves into the archive tier with ``source_meta`` (``archived_into`` or ``merged_into``)."""

    sources: list[Source]
    id: str
    title: str
    body: str
    tier: str
    tags: list[str]
    importance: int
    related: list[dict[str, str]]
    source_meta: dict[str, Any]
    #: More frontmatter of the new memory (``type``, ``strength``, ``scope``).
    extra: dict[str, Any] = field(default_factory=dict)
    #: Rewrite the ``related`` links of other memories that name a source to name the new one.
    repoint: bool = False


@dataclass
class ConsolidationChanges:
    """The file changes of a :class:`Consolidation` and what they touch."""

    changes: list[FileChange]
    touched: list[Touched]
    path: str                   # the new memory's path
    repointed: list[str]        # ids of the memories whose links now name the new one


def merge_part(memory: Memory) -> str:
    """A source's text in a merged body: under its title as a heading, unless the title
    is only its first line (a title made from the content), which would say it twice."""
    text = memory.body.strip()
    if not text or title_from_content(text) == memory.title:
        return text or f"## {memory.title}"
    return f"## {memory.title}\n\n{text}"


class Consolidator:
    """Archive, unarchive and merge; the consolidation step compress and reflect share."""

    def __init__(self, store: Storage, reader: Reader, pipeline: WritePipeline, memories: Memories) -> None:
        self.store = store
        self.reader = reader
        self.pipeline = pipeline
        self.memories = memories

    # ------------------------------------------------------------ the step
    def sources(self, refs: Iterable[str], force: bool, action: str) -> list[Source]:
        """Resolve memories to consolidate: distinct, not archived, protected only with force."""
        out: dict[str, Source] = {}
        if isinstance(refs, str):
            raise InvalidInput("files must be a list of memory references")
        for ref in refs:
            if not isinstance(ref, str):
                raise InvalidInput(f"memory reference {ref!r} is not text")
            memory, parsed = self.pipeline.current(ref)
            if memory.tier == self.store.config.archive_tier:
                raise InvalidInput(f"{memory.path} is already archived")
            self.pipeline.guard(memory, force, action)
            out.setdefault(memory.id, (memory, parsed))
        return list(out.values())

    def commit(self, plan: Consolidation, subject: str, op: str, who: Identity,
               force: bool) -> tuple[Memory, list[str]]:
        """One write: the new memory plus every source archived; the new memory and the
        ids whose links were re-pointed at it."""
        done_changes = self.changes(plan, who)
        listing = "\n".join(f"- {m.title} ({m.path})" for m, _ in plan.sources)
        done = self.pipeline.commit(done_changes.changes, subject, op, done_changes.touched, author=who,
                                    body=f"Sources:\n{listing}",
                                    forced=force and any(self.pipeline.protected(m) for m, _ in plan.sources))
        return self.pipeline.written(done, done_changes.path), done_changes.repointed

    def changes(self, plan: Consolidation, who: Identity, *, reserved: set[str] | None = None,
                skip: set[str] | None = None) -> ConsolidationChanges:
        """The file changes of ``plan`` (reflect puts several consolidations in one
        commit: ``reserved`` file stems and ``skip`` ids already changed by the same commit)."""
        now = self.store.now()
        extra = dict(plan.extra)
        extra.pop("origin", None)
        meta = {"id": plan.id, "title": plan.title, "type": extra.pop("type", "memory"), "tier": plan.tier,
                "status": "active", "tags": plan.tags, "created": now, "updated": now,
                "importance": plan.importance, "agent": who.name,
                # derived text: the least trusted of the writer and every source (provenance.py)
                "origin": self.pipeline.derived_origin(who, [m for m, _ in plan.sources]),
                "related": plan.related, **extra}
        meta = ordered(clean_metadata(meta, tiers=self.store.config.tiers))
        rel = self._placed(plan.tier, plan.id, plan.title, reserved)
        changes = [FileChange(rel, self.pipeline.render(meta, plan.body))]
        touched: list[Touched] = [(plan.id, rel, "add")]
        for memory, parsed in plan.sources:
            moved, new_path = self.memories.move_changes(memory, parsed, self.store.config.archive_tier,
                                                         {**plan.source_meta, "updated": now})
            changes += moved
            touched.append((memory.id, new_path, "archive"))
        repointed: list[str] = []
        if plan.repoint:
            source_ids = {m.id for m, _ in plan.sources}
            for other, change in self._repoint_changes(source_ids, plan.id, source_ids | (skip or set())):
                changes.append(change)
                touched.append((other.id, other.path, "update"))
                repointed.append(other.id)
        return ConsolidationChanges(changes, touched, rel, repointed)

    def _placed(self, tier: str, memory_id: str, title: str, reserved: set[str] | None = None) -> str:
        """A new memory's path; ``reserved`` stems (taken in the same commit) are avoided."""
        stem, n = self.memories.unique_stem(title, memory_id), 2
        while reserved is not None and stem.casefold() in reserved:
            stem, n = self.memories.unique_stem(f"{title} {n}", memory_id), n + 1
        if reserved is not None:
            reserved.add(stem.casefold())
        return memory_relpath(tier, memory_id, stem, layout=self.memories.store.layout())

    def _repoint_changes(self, source_ids: set[str], merged_id: str,
                         skip: set[str]) -> list[tuple[Memory, FileChange]]:
        """Memories whose ``related`` names a source, rewritten to name ``merged_id``."""
        out: list[tuple[Memory, FileChange]] = []
        seen: set[str] = set()
        for row, _, relation in self.store.catalog.linking_to(source_ids):
            if relation == "wikilink" or row.path in seen or row.id in skip or row.problem:
                continue
            seen.add(row.path)
            memory, parsed = self.pipeline.current(row.path)
            related, changed = [], False
            for entry in memory.meta.get("related", []):
                if isinstance(entry, dict) and entry.get("id") in source_ids:
                    entry = dict(entry, id=merged_id)
                    changed = True
                if entry not in related:
                    related.append(entry)
            if changed:
                meta = ordered(dict(memory.meta, related=related, origin=self.pipeline.origin_of(memory),
                                    updated=self.store.now()))
                out.append((memory, FileChange(memory.path,
                                               self.pipeline.render(meta, memory.body, parsed.raw_blocks))))
        return out

    # ----------------------------------------------------------- archiving
    def archive(self, refs: Sequence[str], *, force: bool = False,
                author: str | Identity | None = None) -> list[Memory]:
        """Move memories into the archive tier in one write (tracked renames: a pure-rename
        commit, then the commit that marks them archived)."""
        who = self.store.author_of(author)
        with self.store.lock.hold():
            sources = self.sources(refs, force, "archive")
            if not sources:
                raise InvalidInput("no memories to archive")
            changes: list[FileChange] = []
            touched: list[Touched] = []
            now = self.store.now()
            for memory, parsed in sources:
                moved, new_path = self.memories.move_changes(memory, parsed, self.store.config.archive_tier,
                                                             {"updated": now})
                changes += moved
                touched.append((memory.id, new_path, "archive"))
            subject = (f"archive: {sources[0][0].title}" if len(sources) == 1
                       else f"archive: {len(sources)} memories")
            listing = "\n".join(f"- {m.title} ({m.path})" for m, _ in sources)
            done = self.pipeline.commit(changes, subject, "archive", touched, author=who, body=listing,
                                        forced=force and any(self.pipeline.protected(m) for m, _ in sources))
        return [self.pipeline.written(done, path) for _, path, _ in touched if path is not None]

    def unarchive(self, ref: str, *, tier: str | None = None,
                  author: str | Identity | None = None) -> Memory:
        """Bring an archived memory back to the tier it came from (or ``tier``), active."""
        memory = self.reader.get(ref)
        if memory.tier != self.store.config.archive_tier:
            raise InvalidInput(f"{memory.path} is not archived")
        back = tier or str(memory.meta.get("archived_from") or self.store.config.tiers[0])
        if back not in self.store.config.live_tiers:
            back = self.store.config.tiers[0]
        return self.memories.move(memory.path, back, author=author, op="unarchive",
                                  extra_meta={"updated": self.store.now()})

    # --------------------------------------------------------------- merge
    def merge(self, refs: Sequence[str], content: str | None = None, *,
              title: str | None = None, force: bool = False,
              author: str | Identity | None = None) -> MergeResult:
        """Merge memories into a new one, in one write.

        Content is ``content`` or the sources concatenated (each under a
        ``## title`` heading unless its title is just its first line); tags are unioned;
        the highest importance and strength are kept; sources are archived with
        ``merged_into``; every ``related`` link that pointed at a source now
        points at the merged memory.
        """
        who = self.store.author_of(author)
        if content is not None and not isinstance(content, str):
            raise InvalidInput("content must be text")
        with self.store.lock.hold():
            sources = self.sources(refs, force, "merge")
            if len(sources) < 2:
                raise InvalidInput("merge needs at least two different memories")
            mems = [m for m, _ in sources]
            body = content if content is not None else "\n\n".join(merge_part(m) for m in mems) + "\n"
            title = title or mems[0].title
            memory, repointed = self.commit(self.merge_plan(sources, title, body),
                                            f"merge: {len(mems)} memories -> {title}", "merge", who, force)
        return MergeResult(memory, [m.id for m in mems], repointed)

    def merge_plan(self, sources: list[Source], title: str, body: str) -> Consolidation:
        """Merging ``sources`` into a new memory (for :meth:`merge` and reflect): tags
        unioned, the highest importance and strength, the highest tier, the shared type
        and scope; sources archived with ``merged_into``; links re-pointed."""
        mems = [m for m, _ in sources]
        merged_id = new_id()
        strengths = [float(m.meta["strength"]) for m in mems if "strength" in m.meta]
        types = {m.type for m in mems}
        scopes = {m.meta.get("scope") for m in mems} - {None}
        extra: dict[str, Any] = {"type": types.pop() if len(types) == 1 else "memory"}
        if strengths:
            extra["strength"] = max(strengths)
        if len(scopes) == 1:
            extra["scope"] = scopes.pop()
        return Consolidation(
            sources, merged_id, title, body, max((m.tier for m in mems), key=self.store.config.live_tiers.index),
            list(dict.fromkeys(t for m in mems for t in m.meta.get("tags", []))),
            max(int(m.meta.get("importance", 3)) for m in mems),
            [{"id": m.id, "relation": "derived_from"} for m in mems], {"merged_into": merged_id},
            extra=extra, repoint=True)

    def merge_changes(self, sources: list[Source], title: str, body: str, who: Identity, *,
                      reserved: set[str] | None = None, skip: set[str] | None = None
                      ) -> tuple[list[FileChange], list[Touched], str, list[str]]:
        """The file changes of merging ``sources`` (:meth:`merge_plan`), for a commit that
        holds more (reflect): changes, touched, the new path and the re-pointed ids."""
        done = self.changes(self.merge_plan(sources, title, body), who, reserved=reserved, skip=skip)
        return done.changes, done.touched, done.path, done.repointed
