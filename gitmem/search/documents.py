"""What the search index stores of a memory: :class:`IndexDoc` (produced by the vault from
a Markdown file), the context it is indexed with (:func:`context_text`) and the field values
derived from it (:func:`index_fields`).  The schema these values fill is in
:mod:`gitmem.search.whoosh`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any

from . import query as sq

if TYPE_CHECKING:  # pragma: no cover
    from .rank import Analysis, SearchConfig

__all__ = ["IndexDoc", "context_text", "index_fields", "when_words"]


@dataclass
class IndexDoc:
    """One memory as the index sees it (produced by the vault from a Markdown file)."""
    path: str
    id: str
    title: str
    body: str
    hash: str
    tags: list[str] = field(default_factory=list)
    type: str = "memory"
    tier: str = "short_term"
    status: str = "active"
    scope: str | None = None
    agent: str | None = None
    entities: list[str] = field(default_factory=list)
    #: Obsidian's other names of the note (frontmatter ``aliases``), found like its tags
    aliases: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    importance: int = 3
    created: str | None = None
    updated: str | None = None
    source: str | None = None
    #: what the memory answers or continues: its own ``context`` field and the title and
    #: text of the memory it ``follows`` (indexed with ``SearchConfig.context_weight``)
    context: str = ""
    follows: str | None = None          # the id of the memory before it (same source)


def context_text(own: str | None, followed_title: str | None = None,
                 followed_body: str | None = None) -> str:
    """The context a memory is indexed with: its own ``context`` field, then the title
    and text of the memory it ``follows`` (what it answers or continues).  A title that
    merely starts the text (the default title is the first line) is not repeated."""
    if followed_title and followed_body and followed_body.lstrip().startswith(followed_title.strip()):
        followed_title = None
    return "\n".join(t for t in (own, followed_title, followed_body) if t)


def index_fields(d: IndexDoc, an: Analysis, c: SearchConfig) -> dict[str, Any]:
    """The field values the index stores for a memory (see ``gitmem.search.whoosh.schema.make_schema``).

    ``text`` is one list of ``(stem, weight)`` per position: title, tags, entities and
    aliases, author, body, context, each followed by a gap of four ``None`` positions so that no
    phrase matches across two parts.  The context comes last; ``ownlen`` (set only when there
    is context) is the position where it starts, so that phrases and operators can match the
    memory's own text only (:mod:`gitmem.search.rank`).

    A title the writer gave (one that is not just the first words of the text) weighs
    ``SearchConfig.named_title_weight``; a title that merely starts the text weighs
    ``title_weight`` (its words are already counted in the body)."""
    title, body = an.tokens(d.title or ""), an.tokens(d.body or "")
    meta = an.tokens(" ".join(list(d.tags) + list(d.entities) + list(d.aliases)))
    named = _names_itself(title, body, an.tokens(d.agent or ""))
    text: list = []
    own = 0
    for toks, weight in ((title, c.named_title_weight if named else c.title_weight),
                         (meta, c.meta_weight), (an.tokens(d.agent or ""), c.agent_weight),
                         (body, 1.0), (None, 0.0), (an.tokens(d.context or ""), c.context_weight)):
        if toks is None:
            own = len(text)
        elif weight and (toks or not own):
            # (an empty context adds nothing, not even its gap: a memory without context
            # has no ``ownlen``, and its phrases need no check of where the context starts)
            text += [(an.stem(t), weight) for t in toks] + [None] * 4
    out: dict[str, Any] = dict(
        path=d.path, hash=(d.hash or "").encode(), id=(d.id or "").lower(),
        title=d.title or "", body=d.body or "", text=text,
        words=list(dict.fromkeys(title + body + meta)), taglist=list(d.tags),
        type=_low(d.type) or "memory", tier=_low(d.tier) or "short_term",
        status=_low(d.status) or "active", importance=int(d.importance or 0),
        updated_iso=d.updated, context=d.context or "",
        recency=sq.iso_to_epoch(d.updated) or sq.iso_to_epoch(d.created) or 0)
    if len(text) > own:
        out["ownlen"] = own
    for key, val in (("tags", ",".join(t.strip().lower() for t in d.tags)),
                     ("entities", ",".join(e.strip().lower() for e in d.entities)),
                     ("links", ",".join(d.links)), ("scope", _low(d.scope)),
                     ("agent", _low(d.agent)), ("source", _low(d.source)),
                     ("follows", _low(d.follows)),
                     ("when", when_words(d.created) + ([] if sq.TIME_WORDS.isdisjoint(body)
                                                       and sq.TIME_WORDS.isdisjoint(title)
                                                       else [sq.TELLS_TIME])),
                     ("created", sq.iso_to_epoch(d.created)),
                     ("updated", sq.iso_to_epoch(d.updated))):
        if val:
            out[key] = val
    return out


def _names_itself(title: list[str], body: list[str], author: list[str]) -> bool:
    """Whether a title (as tokens) was given by its writer rather than taken from the start
    of the text.  A title made from the first words (``Ann: I moved to Berlin in ...``, cut
    anywhere, even inside a word) is not: its words are the body's first words, once the
    author's name, which has its own field, is set aside."""
    words = [t for t in title if t not in author] if author else title
    if not words:
        return False
    head = body[:len(words)]
    if len(head) < len(words):
        return True
    return head[:-1] != words[:-1] or not head[-1].startswith(words[-1])


def when_words(iso: str | None) -> list[str]:
    """``2023-05-08...`` -> ``["may", "2023", "d20230508"]``: the ``when`` field, the month
    and year a question may name, and the day (:func:`gitmem.search.query.day_word`), which
    a question naming a date looks up."""
    m = re.match(r"(\d{4})-(\d\d)(?:-(\d\d))?", iso or "")
    if not m or not 0 < int(m[2]) < 13:
        return []
    words = [_MONTHS[int(m[2]) - 1], m[1]]
    if m[3]:
        try:
            words.append(sq.day_word(date(int(m[1]), int(m[2]), int(m[3]))))
        except ValueError:
            pass
    return words


_MONTHS = ("january february march april may june july august september october november "
           "december").split()


def _low(v: str | None) -> str | None:
    return v.strip().lower() if isinstance(v, str) and v.strip() else None
