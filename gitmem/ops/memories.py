"""Creating, changing, moving and deleting one memory: :class:`Memories`.

Each method is one write through the write pipeline (:mod:`gitmem.write.pipeline`): one
commit, preceded by a pure-rename commit when it moves the file and changes its text
(a move, a soft delete), so ``git log --follow`` keeps the memory's history; the
lifecycle operations (:mod:`gitmem.ops.lifecycle`) build on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..config import Identity
from ..errors import Conflict, InvalidInput, InvalidMetadata, MatchError, Protected
from ..memory.markdown import ParsedFile
from ..memory.paths import check_relpath, memory_relpath, slugify
from ..memory.provenance import PERSON
from ..memory.schema import Memory, clean_metadata, new_id, ordered, validate_title
from ..store.git import FileChange

if TYPE_CHECKING:  # pragma: no cover
    from ..store.reader import Reader
    from ..store.storage import Storage
    from ..write.pipeline import WritePipeline

__all__ = ["Memories", "refuse_origin"]


class Memories:
    """Add, update, move and delete memories, one write each."""

    def __init__(self, store: Storage, reader: Reader, pipeline: WritePipeline) -> None:
        self.store = store
        self.reader = reader
        self.pipeline = pipeline

    def unique_stem(self, title: str, memory_id: str) -> str:
        base = slugify(title) or f"memory-{memory_id[:8]}"
        self.reader.ensure_scanned()
        stem, n = base, 2
        while self.store.catalog.stem_taken(stem):
            stem, n = f"{base}-{n}", n + 1
        return stem

    def add(self, title: str, body: str = "", *, type: str = "memory", tier: str | None = None,
            tags: Sequence[str] | None = None, author: str | Identity | None = None,
            path: str | None = None, force: bool = False, inputs: Sequence[Memory] = (),
            **fields: Any) -> Memory:
        """Create a memory (one commit ``add: <title>``) and return it.

        ``fields`` are any other frontmatter fields (importance, confidence,
        scope, entities, related, summary, source, expires, ...).  ``path``
        places the file explicitly (vault-relative, under a tier folder);
        otherwise it goes where the vault's layout puts it (``<tier>/<slug>.md``).  A ``supersedes``
        field (or ``related`` entries with relation ``supersedes``) marks those
        memories ``status: superseded`` with ``superseded_by`` in the same commit
        (a protected one needs ``force``).  :meth:`write` adds dedup and
        idempotency on top of this.

        The memory's ``origin`` is set here, never from ``fields``: the writer's
        (:meth:`Storage.origin_of`), lowered to the least trusted of ``inputs`` (the
        memories its text was derived from) and of the memories it supersedes.
        """
        who = self.store.author_of(author)
        refuse_origin(fields)
        title = validate_title(title)
        tier = tier or self.store.config.tiers[0]
        memory_id = str(fields.pop("id", None) or new_id())
        now = self.store.now()
        meta = {"id": memory_id, "title": title, "type": type, "tier": tier, "status": "active",
                "tags": list(tags or []), "created": now, "updated": now, "agent": who.name, **fields}
        meta = ordered(clean_metadata(meta, tiers=self.store.config.tiers))
        with self.store.lock.hold():
            if self.store.catalog.by_id(memory_id):
                raise Conflict(f"a memory with id {memory_id} already exists")
            olds = self._superseded_by_new(meta, force)
            meta["origin"] = self.pipeline.derived_origin(who, [*inputs, *(o for o, _ in olds)],
                                                          own_words=not inputs)
            meta = ordered(meta)
            if path is not None:
                rel = self._new_path(path, meta)
            else:
                rel = memory_relpath(tier, memory_id, self.unique_stem(title, memory_id),
                                     layout=self.store.layout())
            changes = [FileChange(rel, self.pipeline.render(meta, body))]
            touched = [(memory_id, rel, "add")]
            for old, parsed in olds:
                changes.append(FileChange(old.path, self.pipeline.render(
                    ordered(dict(old.meta, status="superseded", superseded_by=memory_id,
                                 origin=self.pipeline.origin_of(old), updated=now)),
                    old.body, parsed.raw_blocks)))
                touched.append((old.id, old.path, "supersede"))
            subject = f"add: {title}" + (f" (supersedes {', '.join(o.title for o, _ in olds)})"
                                         if olds else "")
            done = self.pipeline.commit(changes, subject, "add", touched, author=who,
                                forced=force and any(self.pipeline.protected(o) for o, _ in olds))
        return self.pipeline.written(done, rel)

    def _superseded_by_new(self, meta: dict[str, Any], force: bool) -> list[tuple[Memory, ParsedFile]]:
        """The memories a new memory's ``supersedes`` names (resolved; ids written back)."""
        refs = [meta["supersedes"]] if meta.get("supersedes") else []
        refs += [r["id"] for r in meta.get("related", []) if r["relation"] == "supersedes"]
        found: dict[str, tuple[Memory, ParsedFile]] = {}
        resolved: dict[str, str] = {}
        for ref in refs:
            old, parsed = self.pipeline.current(str(ref))
            self.pipeline.guard(old, force, "supersede")
            found.setdefault(old.id, (old, parsed))
            resolved[str(ref)] = old.id
        if meta.get("supersedes"):
            meta["supersedes"] = resolved[str(meta["supersedes"])]
        for entry in meta.get("related", []):
            if entry["relation"] == "supersedes":
                entry["id"] = resolved[entry["id"]]
        return list(found.values())

    def _new_path(self, path: str, meta: dict[str, Any]) -> str:
        rel = check_relpath(path)
        if not rel.endswith(".md"):
            rel += ".md"
        top = rel.split("/", 1)[0]
        if top not in self.store.config.tiers or "/" not in rel:
            raise InvalidInput(f"path {path!r} must start with a tier folder "
                               f"({', '.join(self.store.config.tiers)})")
        meta["tier"] = top
        if safefs.lstat(self.store.root, rel) is not None:
            raise Conflict(f"{rel} already exists", hint="Update it instead, or pick another name.")
        if self.store.catalog.stem_taken(rel.rsplit("/", 1)[-1][:-3]):
            raise Conflict(f"a memory file named {rel.rsplit('/', 1)[-1]} already exists in the vault",
                           hint="File names are unique across tiers so [[links]] stay unambiguous.")
        return rel

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
        A call that would change nothing but the ``updated`` time stamp makes no
        commit: the memory comes back as it is, with ``commit`` None.
        """
        who = self.store.author_of(author)
        refuse_origin(meta or {})
        with self.store.lock.hold():
            memory, parsed = self.pipeline.current(ref)
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
                drop = set(remove_tags)
                current = [t for t in new_meta.get("tags", []) if t not in drop]
                new_meta["tags"] = list(dict.fromkeys([*current, *add_tags]))  # linear, order kept
            for key, value in (meta or {}).items():
                if key in ("id", "tier", "created"):
                    raise InvalidMetadata(f"{key} cannot be changed by update",
                                          hint="Use move() to change the tier." if key == "tier" else None)
                if key == "type":
                    content_change = True
                new_meta[key] = value
                if value is None:
                    new_meta.pop(key)
            tiers = self.store.config.tiers
            if new_body == memory.body and _same_fields(clean_metadata(new_meta, tiers=tiers),
                                                        clean_metadata(memory.meta, tiers=tiers)):
                return memory  # nothing but the time stamp would change: no commit (commit stays None)
            if content_change:
                self.pipeline.guard(memory, force, "overwrite")
            # An edit is the writer's words over the memory's: the lower trust of the two,
            # except that what a person edits is the person's.
            new_meta["origin"] = self.pipeline.derived_origin(who, [memory], own_words=True)
            new_meta["updated"] = self.store.now()
            new_meta = ordered(clean_metadata(new_meta, tiers=tiers))
            data = self.pipeline.render(new_meta, new_body, parsed.raw_blocks)
            subject = message or f"update: {new_meta['title']}"
            done = self.pipeline.commit([FileChange(memory.path, data)], subject, "update",
                                        [(memory.id, memory.path, "update")], author=who,
                                        forced=force and self.pipeline.protected(memory))
        return self.pipeline.written(done, memory.path)

    def move(self, ref: str, tier: str, *, force: bool = False, author: str | Identity | None = None,
             extra_meta: Mapping[str, Any] | None = None, op: str = "move",
             body: str | None = None) -> Memory:
        """Move a memory to another tier: a tracked rename (a pure-rename commit, then the
        commit that changes ``tier:`` and the rest).

        ``body`` also replaces the content in the same commit (the ``fsm``
        profile's ``update_memory`` with content and tier)."""
        who = self.store.author_of(author)
        if tier not in self.store.config.tiers:
            raise InvalidMetadata(f"unknown tier {tier!r}", hint=f"Use one of: {', '.join(self.store.config.tiers)}")
        with self.store.lock.hold():
            memory, parsed = self.pipeline.current(ref)
            if memory.tier == tier and not extra_meta and body is None:
                return memory
            self.pipeline.guard(memory, force, "move")
            changes, new_path = self.move_changes(memory, parsed, tier, extra_meta, body)
            subject = f"{op}: {memory.title} {memory.tier} -> {tier}"
            done = self.pipeline.commit(changes, subject, op, [(memory.id, new_path, op)], author=who,
                               forced=force and self.pipeline.protected(memory))
        return self.pipeline.written(done, new_path)

    def move_changes(self, memory: Memory, parsed: ParsedFile, tier: str,
                      extra_meta: Mapping[str, Any] | None = None,
                      body: str | None = None) -> tuple[list[FileChange], str]:
        """The file changes that move ``memory`` to ``tier`` (a rename git tracks), set
        ``extra_meta`` (None removes a key) and optionally a new ``body``.  Moving into
        the archive records ``archived_from`` and marks an active memory archived;
        moving out makes it active again."""
        # The text moves as it is: it keeps the trust it has here, now written in the file.
        new_meta = dict(memory.meta, tier=tier, origin=self.pipeline.origin_of(memory))
        archive = self.store.config.archive_tier
        if tier == archive and memory.tier != archive:
            new_meta.setdefault("archived_from", memory.tier)
            if new_meta.get("status", "active") == "active":
                new_meta["status"] = "archived"
        elif memory.tier == archive and tier != archive:
            for key in ("archived_from", "archived_into", "merged_into"):
                new_meta.pop(key, None)
            new_meta["status"] = "active"
        for key, value in (extra_meta or {}).items():
            new_meta[key] = value
            if value is None:
                new_meta.pop(key)
        new_meta = ordered(clean_metadata(new_meta, tiers=self.store.config.tiers))
        top, _, rest = memory.path.partition("/")
        if top not in self.store.config.tiers or not rest:
            rest = memory.path   # a note in a person's own folders (an adopted vault) keeps them
        new_path = f"{tier}/{rest}"
        if new_path != memory.path and safefs.lstat(self.store.root, new_path) is not None:
            raise Conflict(f"cannot move {memory.path}: {new_path} already exists")
        data = self.pipeline.render(new_meta, memory.body if body is None else body, parsed.raw_blocks)
        changes = [FileChange(new_path, data, moved_from=memory.path if new_path != memory.path else None)]
        if new_path != memory.path:
            changes.insert(0, FileChange(memory.path, None))
        return changes, new_path

    def accept(self, ref: str, *, author: str | Identity | None = None) -> Memory:
        """A person vouches for a memory: its ``origin`` becomes ``person`` (one commit
        ``accept: <title>``), so a goal, rule or constraint an agent, an import or a remote
        proposed is in force from now on.  Only a person can accept (the command line, or
        a Vault opened with ``person=True``): anyone else gets :class:`Protected`.  A
        memory that is already the person's comes back unchanged (``commit`` None)."""
        who = self.store.author_of(author)
        if self.store.origin_of(who) != PERSON:
            raise Protected(f"only a person can accept a memory; this write is {self.store.origin_of(who)}",
                            hint="Ask the person to run 'gitmem accept ID' on the command line.")
        with self.store.lock.hold():
            memory, parsed = self.pipeline.current(ref)
            was = self.pipeline.origin_of(memory)
            if was == PERSON and memory.meta.get("origin") == PERSON:
                return memory
            meta = ordered(dict(memory.meta, origin=PERSON, updated=self.store.now()))
            data = self.pipeline.render(meta, memory.body, parsed.raw_blocks)
            done = self.pipeline.commit([FileChange(memory.path, data)], f"accept: {memory.title}", "accept",
                                        [(memory.id, memory.path, "accept")], author=who,
                                        body=f"Accepted by a person; it was trusted as {was}.")
        return self.pipeline.written(done, memory.path)

    def delete(self, ref: str, *, hard: bool = False, force: bool = False,
               author: str | Identity | None = None) -> Memory:
        """Delete a memory in one write.

        Soft (default): ``status: deleted`` and moved to the archive tier, still
        readable.  Hard: the file is removed.  Both are recoverable from history
        with :meth:`restore`.  Returns the memory as it was before a hard
        delete, or as it is now after a soft one.
        """
        who = self.store.author_of(author)
        if not hard:
            with self.store.lock.hold():
                memory, _ = self.pipeline.current(ref)
                self.pipeline.guard(memory, force, "delete")
                return self.move(memory.path, self.store.config.archive_tier, force=force, author=who,
                                 extra_meta={"status": "deleted", "updated": self.store.now()}, op="delete")
        with self.store.lock.hold():
            memory = self.reader.get(ref)
            self.pipeline.guard(memory, force, "delete")
            done = self.pipeline.commit([FileChange(memory.path, None)], f"delete: {memory.title} (hard)", "delete",
                                        [(memory.id, None, "delete")], author=who,
                                        forced=force and self.pipeline.protected(memory))
        memory.commit = done.sha
        return memory


def refuse_origin(fields: Mapping[str, Any]) -> None:
    """Refuse a caller's ``origin``: gitmem sets it from who writes (memory/provenance.py)."""
    if "origin" in fields:
        raise InvalidMetadata("origin cannot be set by a caller: gitmem records who wrote a memory",
                              hint="Leave 'origin' out; a person raises trust with 'gitmem accept ID'.",
                              field="origin")


def _same_fields(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """True when a write would leave the frontmatter ``old`` as it is: the same fields
    with the same values, ``updated`` aside (every write sets it, so a write that
    changes nothing else would otherwise still make a commit)."""
    return ({k: v for k, v in new.items() if k != "updated"}
            == {k: v for k, v in old.items() if k != "updated"})
