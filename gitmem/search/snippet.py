"""Snippets of search hits: the best ~200-character passage with matched words in ``**bold**``.

Whoosh-free (:mod:`gitmem.search.whoosh` owns Whoosh and hands over the stemmer and stop words).
Whoosh's highlighter ran the index's analyzer over each hit's whole text, about 1 ms per
hit of 2 KB: ten hits cost more than the rest of a query.  Here ``str.find`` on the
lower-cased text finds the places where a word starts like a query term (its stem but
the last two letters, at least three), and only those words are stemmed and compared, so
a hit costs a few microseconds.  A word the stemmer changes earlier (``dying`` -> ``die``)
is left unmarked; the hit itself was found by the index, this only concerns bold marks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

from ..memory.provenance import neutralize

__all__ = ["WORD_PATTERN", "SNIPPET_CHARS", "CONTEXT_MARK", "Snippeter", "clip"]

#: A word as the index tokenizes it: letters/digits, joined by inner ``_ . ' ’``
#: (``long_term``, ``3.5``, ``Ann's``); not whoosh's default, which keeps ``*``
#: (Markdown ``**bold**``) and ``_`` around words (``_italic_``).
WORD_PATTERN = r"[^\W_]+(?:[_.'’][^\W_]+)*"
SNIPPET_CHARS = 200
#: What separates a hit's own text from its context in a snippet matched by the context.
CONTEXT_MARK = "context:"
CONTEXT_HEAD_CHARS = 100
_BEFORE = 60                     # context kept before the first marked word
_WORD = re.compile(WORD_PATTERN)
_WORD_START = r"(?<![^\W_])(?<![^\W_][_.'’])"     # not inside a word such as x_deploy

_PUNCT = re.compile(r"[.!?)\"']+")


class Snippeter:
    """Makes the snippets of one query's hits.

    ``terms`` are the indexed terms the query matched (stems); ``key(word)`` maps a
    lower-case word to the term it is indexed as (its stem; a stop word maps to itself,
    as in Whoosh's highlighter, which never stems stop words); ``forms`` are words indexed
    as one of the terms that do not start like it (``went`` for ``go``)."""

    def __init__(self, terms: Collection[str], key: Callable[[str], str],
                 forms: Collection[str] = ()) -> None:
        self.terms = frozenset(t for t in terms if t)
        self.key = key
        # A stem is its word minus a suffix, sometimes with its last letter or two
        # changed (happy -> happi): all but the last two letters (at least three) start
        # every word of the stem, bar the irregular forms given.
        self.heads = sorted({t[:max(3, len(t) - 2)] for t in self.terms} | set(forms),
                            key=lambda h: (-len(h), h))
        self._find: re.Pattern | None = None      # compiled when first needed

    def __call__(self, body: str, title: str, context: str = "") -> str:
        """The snippet of a hit (:meth:`passage_of`) of the neutralized text: hidden characters,
        HTML comments and images are removed before a passage is cut (a cut could otherwise
        leave half a comment), since snippets go straight into agents' prompts."""
        return self.passage_of(neutralize(body), neutralize(title), neutralize(context))

    def passage_of(self, body: str, title: str, context: str = "") -> str:
        """The snippet of a hit: the best passage of the body, else the title marked,
        else (when the words matched the memory's context: what it answers or continues)
        the start of the body followed by the context's best passage, else the start of
        the body."""
        for text in (body, title):
            if text:
                passage = self.passage(text)
                if passage:
                    return clip(passage)
        passage = self.passage(context) if context else None
        if passage:
            head = clip(body or title)
            if len(head) > CONTEXT_HEAD_CHARS:
                head = head[:CONTEXT_HEAD_CHARS].rsplit(" ", 1)[0].rstrip("*") + "…"
            return f"{head} ({CONTEXT_MARK} {clip(passage)})"
        return clip(body or title)

    def matches(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, term) of every word of ``text`` indexed as one of the terms."""
        if not self.heads:
            return []
        low = text.lower()
        if len(low) == len(text):   # str.find on the lower-cased text: faster than a regex
            return self._matches_lower(low)
        if self._find is None:      # lower-casing moved offsets (e.g. "İ"): a regex
            self._find = re.compile(_WORD_START + "(?:" + "|".join(map(re.escape, self.heads))
                                    + ")", re.IGNORECASE)
        out: list[tuple[int, int, str]] = []
        search, word, key, terms = self._find.search, _WORD.match, self.key, self.terms
        pos = 0
        while True:
            found = search(text, pos)
            if found is None:
                return out
            m = word(text, found.start())
            if m is None:                       # pragma: no cover - a head is word chars
                pos = found.end()
                continue
            term = key(m[0].lower())
            if term in terms:
                out.append((m.start(), m.end(), term))
            pos = m.end()

    def _matches_lower(self, low: str) -> list[tuple[int, int, str]]:
        found: dict[int, tuple[int, int, str]] = {}
        word, key, terms, find = _WORD.match, self.key, self.terms, low.find
        for head in self.heads:
            at = find(head)
            while at >= 0:
                if at not in found and (at == 0 or _starts_word(low, at)):
                    m = word(low, at)
                    if m is not None:
                        term = key(m[0])
                        if term in terms:
                            found[at] = (at, m.end(), term)
                at = find(head, at + 1)
        return [found[at] for at in sorted(found)]

    def passage(self, text: str) -> str | None:
        """The ~200-character window with the most marked words (times the number of
        distinct terms among them, as Whoosh scores fragments), formatted; None when
        no word of ``text`` matches."""
        hits = self.matches(text)
        if not hits:
            return None
        span = SNIPPET_CHARS - _BEFORE
        best, best_score, j = (0, 1), -1, 0
        for i in range(len(hits)):
            j = max(j, i + 1)
            while j < len(hits) and hits[j][1] - hits[i][0] <= span:
                j += 1
            score = (j - i) * len({h[2] for h in hits[i:j]})
            if score > best_score:
                best, best_score = (i, j), score
        i, j = best
        first, last = hits[i][0], hits[j - 1][1]
        lo = first - min(_BEFORE, first)
        if lo > 0 and not text[lo - 1].isspace():           # start at a word boundary
            gaps = [g for g in (text.find(c, lo, first) for c in " \n\t") if g >= 0]
            lo = min(gaps) + 1 if gaps else first
        hi = min(len(text), lo + SNIPPET_CHARS)
        if hi < len(text) and not text[hi].isspace():       # end at a word boundary
            cut = max(text.rfind(c, last, hi) for c in " \n\t")
            hi = cut if cut >= 0 else last
        out, at = [], lo
        for start, end, _ in hits[i:]:
            if start >= hi:
                break
            if start >= at:
                out += [text[at:start], "**", text[start:end], "**"]
                at = end
        out.append(text[at:hi])
        frag, rest = "".join(out).strip(), text[hi:]
        punct = _PUNCT.match(rest)              # keep a sentence's final punctuation
        if punct:
            frag, rest = frag + punct.group(0), rest[punct.end():]
        return ("…" if lo > 0 else "") + frag + ("…" if rest.strip() else "")


def _starts_word(text: str, at: int) -> bool:
    """Whether a word (as the tokenizer sees words) starts at ``at`` (> 0) of ``text``."""
    before = text[at - 1]
    if before.isalnum():
        return False
    return not (before in "_.'’" and at > 1 and text[at - 2].isalnum())


def clip(text: str) -> str:
    """Whitespace collapsed; cut to about SNIPPET_CHARS (never inside a bold mark)."""
    text = " ".join(text.split())
    if len(text) <= SNIPPET_CHARS + 40:
        return text
    cut = text[:SNIPPET_CHARS]
    return cut + ("**" if cut.count("**") % 2 else "") + "…"
