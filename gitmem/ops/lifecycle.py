"""Memory lifecycle: dedup on write, protected context, compress, archive, merge, links.

:class:`Lifecycle` does these, one write each.  Consolidation is where
memory systems lose data, so here every step is one commit a person can read,
diff and revert: archiving and compressing are tracked renames into
``archive/`` (a pure-rename commit precedes the step's commit, so ``git log
--follow`` shows a file's whole life), merged and
compressed sources stay readable with ``merged_into`` / ``archived_into``
pointing at what replaced them, and protected types (goal, rule, constraint
by default) are never touched without ``force``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..config import Identity
from ..errors import InvalidInput
from ..memory.markdown import split_body
from ..memory.paths import memory_relpath
from ..memory.schema import Memory, clean_metadata, new_id, normalize_timestamp, ordered, validate_title
from ..memory.similarity import content_key, differences, similarity, sketch
from ..store.catalog import FileRow, gist
from ..store.git import FileChange

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.markdown import ParsedFile
    from ..store.reader import Reader
    from ..store.storage import Storage
    from ..write.pipeline import WritePipeline
    from .memories import Memories

__all__ = ["Lifecycle", "WriteResult", "ProtectedContext", "CompressBatch", "MergeResult",
           "Links", "extractive_summary", "title_from_content"]

Summarizer = Callable[[str], str]
_TITLE_CHARS = 80


def title_from_content(content: str) -> str:
    """A title for a memory written without one: its first line of prose, shortened."""
    for line in content.splitlines():
        line = line.strip().lstrip("#>-* ").strip()
        if line:
            line = " ".join(line.split())
            return line if len(line) <= _TITLE_CHARS else line[: _TITLE_CHARS - 1].rstrip() + "\u2026"
    return "Untitled memory"


@dataclass
class WriteResult:
    """What :meth:`Lifecycle.write` did: ``status`` is ``created``, ``skipped``
    (an identical or near-identical memory, or the same ``external_write_id``,
    already exists: no commit), ``superseded`` (created, and it supersedes the
    near-duplicate ``superseded``) or ``updated`` (an upsert by
    ``external_write_id`` changed the memory ``duplicate_of``: one commit)."""

    status: str
    memory: Memory
    duplicate_of: str | None = None
    superseded: list[str] = field(default_factory=list)
    similarity: float | None = None
    reason: str | None = None

    @property
    def id(self) -> str:
        return self.memory.id

    @property
    def path(self) -> str:
        return self.memory.path

    @property
    def commit(self) -> str | None:
        return self.memory.commit if self.status != "skipped" else None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path, "status": self.status, "commit": self.commit,
                "duplicate_of": self.duplicate_of, "superseded": self.superseded,
                "similarity": self.similarity, "reason": self.reason}


@dataclass
class ProtectedContext:
    """Every active protected memory, ordered, plus one ready-to-inject Markdown block."""

    memories: list[Memory]
    markdown: str

    def to_dict(self) -> dict[str, Any]:
        return {"memories": [_brief(m) | {"content": m.body} for m in self.memories],
                "markdown": self.markdown}


@dataclass
class CompressBatch:
    """The input of a compression: the combined text and the files it came from."""

    tier: str
    target_tier: str
    content: str
    files: list[str]
    ids: list[str]
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"tier": self.tier, "target_tier": self.target_tier, "content": self.content,
                "files": self.files, "ids": self.ids, "truncated": self.truncated}


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
class Links:
    """Outgoing links of one memory and the memories that link to it."""

    memory: Memory
    outgoing: list[dict[str, Any]]
    backlinks: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.memory.id, "path": self.memory.path, "title": self.memory.title,
                "outgoing": self.outgoing, "backlinks": self.backlinks}


def _brief(m: Memory) -> dict[str, Any]:
    return {"id": m.id, "path": m.path, "title": m.title, "type": m.type, "tier": m.tier,
            "importance": m.meta.get("importance", 3), "tags": list(m.meta.get("tags", []))}


def _link_names(memory: Memory, tiers: Iterable[str]) -> list[str]:
    """Every link target that names ``memory``: its id, file name, title, aliases and
    its path from the vault root and from its tier folder (compared as link_key does)."""
    stem = memory.path.rsplit("/", 1)[-1][:-3]
    names = [memory.id, stem, memory.title, memory.path]
    top, _, rest = memory.path.partition("/")
    if top in tiers and rest:
        names.append(rest)
    aliases = memory.meta.get("aliases")
    names += [str(a) for a in aliases] if isinstance(aliases, list) else []
    return names


def _row_brief(row: FileRow) -> dict[str, Any]:
    return {"id": row.id, "path": row.path, "title": row.meta.get("title"),
            "tier": row.meta.get("tier"), "status": row.meta.get("status", "active")}


def _without_title_heading(body: str, title: str) -> str:
    """The body without a leading heading that only repeats the title."""
    text = body.strip()
    first, _, rest = text.partition("\n")
    if first.lstrip("#").strip() == title.strip() and first.startswith("#"):
        return rest.strip()
    return text


def _merge_part(memory: Memory) -> str:
    """A source's text in a merged body: under its title as a heading, unless the title
    is only its first line (a title made from the content), which would say it twice."""
    text = memory.body.strip()
    if not text or title_from_content(text) == memory.title:
        return text or f"## {memory.title}"
    return f"## {memory.title}\n\n{text}"


def _date(meta: dict[str, Any]) -> str:
    return str(meta.get("created") or meta.get("updated") or "")[:10]


def extractive_summary(memories: Sequence[Memory]) -> str:
    """A deterministic summary (no model): one line per source with its date and gist.

    What ``gitmem compress`` uses offline; an agent passes its own LLM's summary."""
    lines = [f"Summary of {len(memories)} memories"
             + (f" from {min(_date(m.meta) for m in memories)} to {max(_date(m.meta) for m in memories)}"
                if memories else "") + ":", ""]
    for m in sorted(memories, key=lambda m: (_date(m.meta), m.title)):
        line = gist(m.meta, m.body)
        lines.append(f"- **{m.title}** ({_date(m.meta)})" + (f": {line}" if line and line != m.title else ""))
    return "\n".join(lines) + "\n"


class Lifecycle:
    """Dedup on write, protected context, compress, archive, merge and links."""

    def __init__(self, store: Storage, reader: Reader, pipeline: WritePipeline,
                 memories: Memories) -> None:
        self.store = store
        self.reader = reader
        self.pipeline = pipeline
        self.memories = memories

    # ------------------------------------------------------------ writing
    def write(self, content: str, *, title: str | None = None, type: str | None = None,
              tier: str | None = None, tags: Sequence[str] | None = None, dedup: bool | str = False,
              external_write_id: str | None = None, upsert: bool = False,
              allow_protected: Collection[str] = (), default_type: str = "memory",
              author: str | Identity | None = None,
              force: bool = False, **fields: Any) -> WriteResult:
        """Create a memory unless it is already there (an agent's add/write).

        * ``external_write_id``: the same key twice returns the first memory
          (``skipped``, no commit) - an idempotent retry.  With ``upsert=True``
          the key names the memory to keep current instead: different content
          (or other given fields) updates it (``updated``, one commit, a new
          version); the same content is ``skipped``.
        * ``dedup="exact"``: only a memory with the same normalised content, type
          and scope is returned as ``skipped`` (a content-hash check).
        * ``dedup=True``: the same exact check; then the most similar active
          memory of that type and scope (local word similarity) decides: at or
          above ``dedup.skip`` (0.92) ``skipped``, at or above ``dedup.supersede``
          (0.80) the new memory supersedes it (``superseded``), else ``created``.
          A text that differs in word order, numbers or negation
          (:func:`~gitmem.memory.similarity.differences`) is never skipped.  A protected
          near-duplicate is never superseded by dedup.
        * ``supersedes=<id>`` (a correction) supersedes that memory explicitly.
        * ``allow_protected``: protected types this write may nevertheless
          supersede (explicitly or by dedup) or update (upsert), as if ``force``
          were given for memories of those types only (a tool profile whose
          contract lets agents maintain them).
        * ``type``: a new memory's type (``default_type``, ``memory``, when not
          given); an upsert keeps the stored type unless one is given.

        Other keywords are frontmatter fields, as for :meth:`Vault.add`.
        """
        if not isinstance(content, str):
            raise InvalidInput("content must be text")
        if external_write_id is not None and (not isinstance(external_write_id, str)
                                              or not external_write_id.strip()):
            raise InvalidInput("external_write_id must be non-empty text")
        if dedup not in (True, False, "exact"):
            raise InvalidInput("dedup must be true, false or 'exact'")
        given_title = None if title is None else validate_title(title)
        title = given_title or title_from_content(content)
        kind = type or default_type
        scope = fields.get("scope")
        allowed = frozenset(allow_protected)
        with self.store.lock.hold():
            self.reader.ensure_scanned()
            if external_write_id:
                rows = self.store.catalog.by_external_id(external_write_id.strip())
                if rows:
                    current = self.reader.get(rows[0].path)
                    if upsert:
                        return self._upsert(current, content, given_title, type, tags, fields,
                                            author, force or current.type in allowed)
                    return WriteResult("skipped", current, duplicate_of=rows[0].id,
                                       reason="external_write_id")
            supersede: list[str] = []
            best: tuple[float, FileRow, list[str]] | None = None
            if dedup:
                same = self.store.catalog.by_content_key(content_key(content or title, kind, scope))
                if same:
                    return WriteResult("skipped", self.reader.get(same[0].path), duplicate_of=same[0].id,
                                       similarity=1.0, reason="identical")
                best = self.most_similar(content, title, kind, scope) if dedup is True else None
                settings = self.store.config.lifecycle
                # A reordering, another number or a negation is a different fact: at most
                # a supersede (the old text stays readable), never a silent skip.
                if best and best[0] >= settings.skip_above and not best[2]:
                    return WriteResult("skipped", self.reader.get(best[1].path), duplicate_of=best[1].id,
                                       similarity=best[0], reason="similar")
                other_type = best[1].meta.get("type") if best else None
                if (best and best[0] >= settings.supersede_above
                        and (other_type not in self.store.config.protected_types or other_type in allowed)):
                    supersede = [best[1].id]
            if supersede:
                related = list(fields.pop("related", None) or [])
                related.append({"id": supersede[0], "relation": "supersedes"})
                fields["related"] = related
            memory = self.memories.add(title, content, type=kind, tier=tier, tags=tags, author=author,
                              force=force or self._may_supersede(fields, allowed),
                              external_write_id=external_write_id, **fields)
        if supersede:
            return WriteResult("superseded", memory, duplicate_of=supersede[0], superseded=supersede,
                               similarity=best[0] if best else None, reason="similar")
        return WriteResult("created", memory, similarity=best[0] if best else None)

    def _may_supersede(self, fields: dict[str, Any], allowed: frozenset[str]) -> bool:
        """Whether every protected memory a new memory's fields supersede is of an ``allowed``
        type (then the add may touch them; otherwise :meth:`Vault.add` refuses as usual)."""
        if not allowed:
            return False
        refs = [fields["supersedes"]] if fields.get("supersedes") else []
        refs += [r.get("id") for r in fields.get("related") or []
                 if isinstance(r, dict) and r.get("relation") == "supersedes"]
        targets = []
        for ref in refs:
            if not isinstance(ref, str):
                return False  # add() reports the bad reference
            targets.append(self.pipeline.current(ref)[0])
        return bool(targets) and all(not self.pipeline.protected(m) or m.type in allowed for m in targets)

    def _upsert(self, current: Memory, content: str, title: str | None, type_: str | None,
                tags: Sequence[str] | None, fields: dict[str, Any], author: str | Identity | None,
                force: bool) -> WriteResult:
        """Bring the memory an external write id names up to date (``updated``), or
        ``skipped`` when it already holds this content and these fields."""
        if title is None and current.title == title_from_content(current.body):
            title = title_from_content(content)  # a title made from the old text follows the text
        meta = {k: v for k, v in fields.items() if v is not None}
        if type_ is not None:
            meta["type"] = type_
        wanted = dict(current.meta, **meta)
        if title is not None:
            wanted["title"] = title
        if tags is not None:
            wanted["tags"] = list(tags)
        wanted = ordered(clean_metadata(wanted, tiers=self.store.config.tiers))
        same_body = current.body.strip() == content.strip()
        if same_body and wanted == current.meta:
            return WriteResult("skipped", current, duplicate_of=current.id, reason="external_write_id")
        memory = self.memories.update(current.path, body=None if same_body else content, title=title, tags=tags,
                             meta=meta or None, force=force, author=author)
        return WriteResult("updated", memory, duplicate_of=current.id, reason="external_write_id")

    def most_similar(self, content: str, title: str, type_: str,
                      scope: str | None) -> tuple[float, FileRow, list[str]] | None:
        """The active memory of this type and scope most similar to ``content``: its score,
        its row and the :func:`~gitmem.memory.similarity.differences` between the two texts."""
        best: tuple[float, str, str] | None = None
        for path, _ in self.store.catalog.similar_candidates(
                sketch(f"{title}\n{content}"), type=type_, scope=scope,
                exclude_tier=self.store.config.archive_tier):
            data = safefs.read_or_none(self.store.root, path)
            if data is None:
                continue
            other = split_body(data.decode("utf-8", "replace"))
            score = similarity(content or title, other)
            if best is None or score > best[0]:
                best = (score, path, other)
        row = self.store.catalog.row(best[1]) if best else None
        return (best[0], row, differences(content or title, best[2])) if best and row else None

    # ---------------------------------------------------- protected context
    def protected_context(self) -> ProtectedContext:
        """All active protected memories (rules and constraints, then goals, each by
        importance), as data and as one Markdown block to put in a prompt."""
        self.reader.ensure_scanned()
        rows = self.store.catalog.of_types(self.store.config.protected_types, self.store.config.live_tiers)
        memories = [self.reader.read_file(row.path) for row, _ in rows]
        parts = ["# Protected context", ""]
        for kind in dict.fromkeys(m.type for m in memories):
            parts += [f"## {kind.capitalize()}s", ""]
            for m in (m for m in memories if m.type == kind):
                body = _without_title_heading(m.body, m.title)
                parts.append(f"### {m.title}\n\n{body}\n" if body else f"### {m.title}\n")
        if not memories:
            parts.append("(no protected memories)")
        return ProtectedContext(memories, "\n".join(parts).rstrip() + "\n")

    # -------------------------------------------------------- compression
    def _next_tier(self, tier: str) -> str:
        live = self.store.config.live_tiers
        if tier not in live:
            raise InvalidInput(f"cannot compress tier {tier!r}",
                               hint=f"Compress one of: {', '.join(live)}")
        return live[min(live.index(tier) + 1, len(live) - 1)]

    def compress_tier(self, tier: str, *, older_than_days: float | None = None,
                      tag: str | None = None, type: str | None = None,
                      max_chars: int | None = None) -> CompressBatch:
        """The combined content of ``tier``'s active, unprotected memories (each with
        its title, id and date), oldest first, and the files it came from.

        Filters: ``older_than_days`` (by ``updated``), ``tag``, ``type``.
        ``max_chars`` caps the content so the batch fits a model's context; the
        files listed are exactly those included (``truncated`` says more exist).
        """
        target = self._next_tier(tier)
        if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int)
                                      or max_chars < 100):
            raise InvalidInput("max_chars must be an integer >= 100")
        cutoff = None
        if older_than_days is not None:
            if isinstance(older_than_days, bool) or not isinstance(older_than_days, (int, float)) \
                    or older_than_days < 0:
                raise InvalidInput("older_than_days must be a number >= 0")
            cutoff = normalize_timestamp(self.store.clock() - timedelta(days=older_than_days))
        self.reader.ensure_scanned()
        parts: list[str] = []
        files: list[str] = []
        ids: list[str] = []
        size, truncated = 0, False
        for row in self.store.catalog.in_tier(tier):
            meta = row.meta
            if (meta.get("status", "active") != "active" or row.problem
                    or meta.get("type") in self.store.config.protected_types
                    or (type and meta.get("type", "memory") != type)
                    or (tag and tag not in (meta.get("tags") or []))
                    or (cutoff and str(meta.get("updated") or meta.get("created") or "") > cutoff)):
                continue
            memory = self.reader.read_file(row.path)
            piece = (f"## {memory.title}\nid: {memory.id} | date: {_date(meta)} | file: {row.path}\n\n"
                     f"{memory.body.strip()}\n")
            if max_chars is not None and files and size + len(piece) > max_chars:
                truncated = True
                break
            parts.append(piece)
            files.append(row.path)
            ids.append(memory.id)
            size += len(piece) + 5
        return CompressBatch(tier, target, "\n---\n\n".join(parts), files, ids, truncated)

    def compress(self, tier: str, summary: str | None = None, title: str | None = None,
                 files: Sequence[str] | None = None, *, tags: Sequence[str] | None = None,
                 summarizer: Summarizer | None = None, force: bool = False,
                 author: str | Identity | None = None, **batch_filters: Any) -> Memory:
        """The tiered compress flow as one write: create ``summary`` in the next tier up, with
        ``related: derived_from`` links to every source, and move every source into
        the archive (``status: archived``, ``archived_into: <summary id>``).

        ``files`` default to :meth:`compress_tier`'s batch (``batch_filters`` are
        passed to it); ``summary`` defaults to ``summarizer(batch content)`` (an
        agent's LLM) or else :func:`extractive_summary`.
        """
        target = self._next_tier(tier)
        who = self.store.author_of(author)
        with self.store.lock.hold():
            if files is None:
                files = self.compress_tier(tier, **batch_filters).files
            sources = self._sources(files, force, "compress")
            if not sources:
                raise InvalidInput(f"nothing to compress in {tier}",
                                   hint="compress_tier lists what can be compressed.")
            if summary is None:
                if summarizer is not None:
                    summary = summarizer("\n---\n\n".join(
                        f"## {m.title}\n{m.body.strip()}\n" for m, _ in sources))
                    if not isinstance(summary, str) or not summary.strip():
                        raise InvalidInput("the summarizer returned no text")
                else:
                    summary = extractive_summary([m for m, _ in sources])
            title = title or f"{tier.replace('_', ' ').capitalize()} summary {self.store.now()[:10]}"
            summary_id = new_id()
            tag_union = list(tags) if tags is not None else list(dict.fromkeys(
                t for m, _ in sources for t in m.meta.get("tags", [])))
            importance = max(int(m.meta.get("importance", 3)) for m, _ in sources)
            related = [{"id": m.id, "relation": "derived_from"} for m, _ in sources]
            return self._consolidate(
                sources, summary_id, title, summary, target, tag_union, importance, related,
                {"archived_into": summary_id}, "compress",
                f"compress: {len(sources)} {tier} memories -> {title}", who, force)[0]

    def _sources(self, refs: Iterable[str], force: bool, action: str
                 ) -> list[tuple[Memory, ParsedFile]]:
        """Resolve memories to consolidate: distinct, not archived, protected only with force."""
        out: dict[str, tuple[Memory, ParsedFile]] = {}
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

    def _consolidate(self, sources: list[tuple[Memory, ParsedFile]], new_id_: str,
                     title: str, body: str, tier: str, tags: list[str], importance: int,
                     related: list[dict[str, str]], source_meta: dict[str, Any], op: str,
                     subject: str, who: Identity, force: bool, *, repoint: bool = False,
                     **extra: Any) -> tuple[Memory, list[str]]:
        """One write: a new memory plus every source archived with ``source_meta``.

        ``repoint``: ``related`` links of other memories that name a source are
        rewritten to name the new memory (their ids are returned)."""
        changes, touched, rel, repointed = self._consolidation_changes(
            sources, new_id_, title, body, tier, tags, importance, related, source_meta, who,
            repoint=repoint, **extra)
        listing = "\n".join(f"- {m.title} ({m.path})" for m, _ in sources)
        done = self.pipeline.commit(changes, subject, op, touched, author=who, body=f"Sources:\n{listing}",
                            forced=force and any(self.pipeline.protected(m) for m, _ in sources))
        return self.pipeline.written(done, rel), repointed

    def _consolidation_changes(self, sources: list[tuple[Memory, ParsedFile]],
                               new_id_: str, title: str, body: str, tier: str, tags: list[str],
                               importance: int, related: list[dict[str, str]],
                               source_meta: dict[str, Any], who: Identity, *,
                               repoint: bool = False, reserved: set[str] | None = None,
                               skip: set[str] | None = None, **extra: Any
                               ) -> tuple[list[FileChange], list[tuple[str, str | None, str]],
                                          str, list[str]]:
        """The file changes of :meth:`_consolidate` (also used by reflect, which puts
        several consolidations in one commit: ``reserved`` file stems and ``skip``
        ids already changed by the same commit)."""
        now = self.store.now()
        meta = {"id": new_id_, "title": title, "type": extra.pop("type", "memory"), "tier": tier,
                "status": "active", "tags": tags, "created": now, "updated": now,
                "importance": importance, "agent": who.name, "related": related, **extra}
        meta = ordered(clean_metadata(meta, tiers=self.store.config.tiers))
        rel = self._placed(tier, new_id_, title, reserved)
        changes = [FileChange(rel, self.pipeline.render(meta, body))]
        touched: list[tuple[str, str | None, str]] = [(new_id_, rel, "add")]
        for memory, parsed in sources:
            moved, new_path = self.memories.move_changes(memory, parsed, self.store.config.archive_tier,
                                                 {**source_meta, "updated": now})
            changes += moved
            touched.append((memory.id, new_path, "archive"))
        repointed: list[str] = []
        if repoint:
            source_ids = {m.id for m, _ in sources}
            for other, change in self._repoint_changes(source_ids, new_id_,
                                                       source_ids | (skip or set())):
                changes.append(change)
                touched.append((other.id, other.path, "update"))
                repointed.append(other.id)
        return changes, touched, rel, repointed

    def _placed(self, tier: str, memory_id: str, title: str,
                reserved: set[str] | None = None) -> str:
        """A new memory's path; ``reserved`` stems (taken in the same commit) are avoided."""
        stem, n = self.memories.unique_stem(title, memory_id), 2
        while reserved is not None and stem.casefold() in reserved:
            stem, n = self.memories.unique_stem(f"{title} {n}", memory_id), n + 1
        if reserved is not None:
            reserved.add(stem.casefold())
        return memory_relpath(tier, memory_id, stem)

    # ----------------------------------------------------------- archiving
    def archive(self, refs: Sequence[str], *, force: bool = False,
                author: str | Identity | None = None) -> list[Memory]:
        """Move memories into the archive tier in one write (tracked renames: a pure-rename
        commit, then the commit that marks them archived)."""
        who = self.store.author_of(author)
        with self.store.lock.hold():
            sources = self._sources(refs, force, "archive")
            if not sources:
                raise InvalidInput("no memories to archive")
            changes: list[FileChange] = []
            touched = []
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
        return [self.pipeline.written(done, path) for _, path, _ in touched]

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
            sources = self._sources(refs, force, "merge")
            if len(sources) < 2:
                raise InvalidInput("merge needs at least two different memories")
            mems = [m for m, _ in sources]
            body = content if content is not None else "\n\n".join(_merge_part(m) for m in mems) + "\n"
            title = title or mems[0].title
            changes, touched, rel, repointed = self.merge_changes(sources, title, body, who)
            listing = "\n".join(f"- {m.title} ({m.path})" for m in mems)
            done = self.pipeline.commit(changes, f"merge: {len(mems)} memories -> {title}", "merge", touched,
                                author=who, body=f"Sources:\n{listing}",
                                forced=force and any(self.pipeline.protected(m) for m in mems))
            memory = self.pipeline.written(done, rel)
        return MergeResult(memory, [m.id for m in mems], repointed)

    def merge_changes(self, sources: list[tuple[Memory, ParsedFile]], title: str,
                       body: str, who: Identity, *, reserved: set[str] | None = None,
                       skip: set[str] | None = None
                       ) -> tuple[list[FileChange], list[tuple[str, str | None, str]], str, list[str]]:
        """The file changes of merging ``sources`` into a new memory (for :meth:`merge` and
        reflect): tags unioned, the highest importance and strength, the highest tier, the
        shared type and scope; sources archived with ``merged_into``; links re-pointed."""
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
        return self._consolidation_changes(
            sources, merged_id, title, body, max((m.tier for m in mems), key=self.store.config.live_tiers.index),
            list(dict.fromkeys(t for m in mems for t in m.meta.get("tags", []))),
            max(int(m.meta.get("importance", 3)) for m in mems),
            [{"id": m.id, "relation": "derived_from"} for m in mems], {"merged_into": merged_id},
            who, repoint=True, reserved=reserved, skip=skip, **extra)

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
                meta = ordered(dict(memory.meta, related=related, updated=self.store.now()))
                out.append((memory, FileChange(memory.path,
                                               self.pipeline.render(meta, memory.body, parsed.raw_blocks))))
        return out

    # --------------------------------------------------------------- links
    def links(self, ref: str) -> Links:
        """Outgoing links of a memory (``related`` with relation types, supersede and
        archive pointers, body ``[[wikilinks]]``) and its backlinks."""
        from ..memory.markdown import memory_links
        memory = self.reader.get(ref)
        self.reader.ensure_scanned()
        outgoing = []
        for target, relation in memory_links(memory.meta, memory.body):
            # Resolved as Obsidian does: path links, any case, aliases (see Reader.link_rows).
            rows = self.store.catalog.by_id(target) if relation != "wikilink" else self.reader.link_rows(target)
            item = {"target": target, "relation": relation, "exists": bool(rows)}
            if rows:
                item.update(_row_brief(rows[0]))
            outgoing.append(item)
        names = _link_names(memory, self.store.config.tiers)
        backlinks = []
        seen: set[tuple[str, str]] = set()
        for row, _, relation in self.store.catalog.linking_to(names):
            if row.path != memory.path and (row.path, relation) not in seen:
                seen.add((row.path, relation))
                backlinks.append({**_row_brief(row), "relation": relation})
        return Links(memory, outgoing, backlinks)
