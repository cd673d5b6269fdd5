"""Compression: a tier's old memories become one summary in the next tier up.

:meth:`Compressor.batch` gathers what a summary is written from (an agent's LLM
reads it); :meth:`Compressor.compress` commits the summary and archives the
sources with ``archived_into`` (one consolidation, :mod:`gitmem.ops.consolidate`).
Without a summary or a summarizer, :func:`extractive_summary` writes one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..config import Identity
from ..errors import InvalidInput
from ..memory.schema import Memory, new_id, normalize_timestamp
from ..store.catalog import gist
from .consolidate import Consolidation, Consolidator

if TYPE_CHECKING:  # pragma: no cover
    from ..store.reader import Reader
    from ..store.storage import Storage

__all__ = ["Compressor", "CompressBatch", "Summarizer", "extractive_summary"]

Summarizer = Callable[[str], str]


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


class Compressor:
    """The tiered compress flow."""

    def __init__(self, store: Storage, reader: Reader, consolidator: Consolidator) -> None:
        self.store = store
        self.reader = reader
        self.consolidator = consolidator

    def _next_tier(self, tier: str) -> str:
        live = self.store.config.live_tiers
        if tier not in live:
            raise InvalidInput(f"cannot compress tier {tier!r}",
                               hint=f"Compress one of: {', '.join(live)}")
        return live[min(live.index(tier) + 1, len(live) - 1)]

    def batch(self, tier: str, *, older_than_days: float | None = None,
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

        ``files`` default to :meth:`batch`'s files (``batch_filters`` are
        passed to it); ``summary`` defaults to ``summarizer(batch content)`` (an
        agent's LLM) or else :func:`extractive_summary`.
        """
        target = self._next_tier(tier)
        who = self.store.author_of(author)
        with self.store.lock.hold():
            if files is None:
                files = self.batch(tier, **batch_filters).files
            sources = self.consolidator.sources(files, force, "compress")
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
            plan = Consolidation(sources, summary_id, title, summary, target, tag_union, importance, related,
                                 {"archived_into": summary_id})
            return self.consolidator.commit(plan, f"compress: {len(sources)} {tier} memories -> {title}",
                                            "compress", who, force)[0]
