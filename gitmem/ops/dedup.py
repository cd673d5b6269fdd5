"""Dedup on write: an agent's new memory, unless the vault already holds it.

:meth:`DedupWriter.write` is an add that first looks for the same memory: the same
``external_write_id`` (an idempotent retry, or an upsert), the same normalised
content, or (``dedup=True``) a near-identical text of the same type and scope,
which the new memory then skips or supersedes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..config import Identity
from ..errors import InvalidInput
from ..memory.markdown import split_body
from ..memory.schema import Memory, clean_metadata, ordered, validate_title
from ..memory.similarity import content_key, differences, similarity, sketch
from ..store.catalog import FileRow

if TYPE_CHECKING:  # pragma: no cover
    from ..store.reader import Reader
    from ..store.storage import Storage
    from ..write.pipeline import WritePipeline
    from .memories import Memories

__all__ = ["DedupWriter", "WriteResult", "title_from_content"]

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
    """What :meth:`DedupWriter.write` did: ``status`` is ``created``, ``skipped``
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


class DedupWriter:
    """An agent's add that returns the memory already there instead of a duplicate."""

    def __init__(self, store: Storage, reader: Reader, pipeline: WritePipeline, memories: Memories) -> None:
        self.store = store
        self.reader = reader
        self.pipeline = pipeline
        self.memories = memories

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
