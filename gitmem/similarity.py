"""Local text similarity for dedup and consolidation: no network, no model.

Two measures, both on the same word normalisation (case-folded Unicode words,
punctuation and Markdown markup ignored):

* :func:`content_key` - a hash of the normalised text plus type and scope.
  Equal keys mean "the same memory said again" (seed 002's content-hash dedup).
* :func:`similarity` - cosine similarity of word counts, 0..1.  Word order is
  ignored on purpose: "prefers dark mode and TypeScript" and "prefers dark
  mode, TypeScript and VS Code" score 0.87 (a refinement: supersede), while
  unrelated notes on the same topic stay well under 0.8.

Finding candidates among thousands of memories uses a *bottom-k sketch*: the
k smallest hashes of a text's distinct content words.  Texts with mostly the
same words share most of their sketch, so a lookup of the new text's sketch in
the catalog (an indexed SQL query) yields the few memories worth comparing.
"""

from __future__ import annotations

import hashlib
import math
import re
import zlib
from collections import Counter

__all__ = ["words", "normalize", "content_key", "sketch", "bands", "similarity", "SKETCH_SIZE"]

SKETCH_SIZE = 16
_WORD = re.compile(r"[^\W_]+")
# Words too common to say what a text is about (kept out of sketches only).
_STOP = frozenset("""a an and are as at be been but by can did do does for from had has have he her
his i if in into is it its me my no not of on or our she so than that the their them then there
these they this to too us was we were what when where which who will with you your""".split())


def words(text: str) -> list[str]:
    """Case-folded words of ``text`` (letters and digits; markup and punctuation dropped)."""
    return _WORD.findall(text.casefold())


def normalize(text: str) -> str:
    """The text as its words joined by single spaces (what dedup compares)."""
    return " ".join(words(text))


def content_key(text: str, type_: str | None, scope: str | None) -> str:
    """A hash of the normalised text, the type and the scope (identical-memory key)."""
    raw = f"{type_ or 'memory'}\x00{scope or ''}\x00{normalize(text)}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()[:32]


def _hash(word: str) -> int:
    # crc32 is stable across processes (str hash is salted) and fast; collisions
    # only add a candidate, they never decide a match.
    return zlib.crc32(word.encode("utf-8", "surrogatepass"))


def sketch(text: str, k: int = SKETCH_SIZE) -> list[int]:
    """The ``k`` smallest hashes of the distinct content words of ``text``."""
    distinct = {w for w in words(text) if w not in _STOP}
    return sorted(_hash(w) for w in distinct)[:k]


# MinHash banding for finding near-duplicate *pairs* among all memories (reflect):
# 4 bands of 4 min-hashes.  Two texts land in a shared band with probability
# 1 - (1 - J^4)^4: 0.99 at word-set overlap J = 0.9, 0.0004 at J = 0.1, so the
# pairs to compare stay few even in a vault of thousands of notes on one topic.
_BANDS, _ROWS = 4, 4
_MASKS = [zlib.crc32(f"gitmem-minhash-{i}".encode()) for i in range(_BANDS * _ROWS)]


def bands(text: str) -> list[int]:
    """The MinHash band keys of ``text`` (empty for a text without content words)."""
    hashes = {_hash(w) for w in words(text) if w not in _STOP}
    if not hashes:
        return []
    mins = [min(h ^ mask for h in hashes) for mask in _MASKS]
    return [zlib.crc32(repr((b, mins[b * _ROWS:(b + 1) * _ROWS])).encode()) for b in range(_BANDS)]


def similarity(a: str, b: str) -> float:
    """Cosine similarity of the word counts of two texts (1.0 = same words, same counts)."""
    ca, cb = Counter(words(a)), Counter(words(b))
    if not ca or not cb:
        return 1.0 if not ca and not cb else 0.0
    if len(ca) > len(cb):
        ca, cb = cb, ca
    dot = sum(n * cb.get(w, 0) for w, n in ca.items())
    norm = math.sqrt(sum(n * n for n in ca.values())) * math.sqrt(sum(n * n for n in cb.values()))
    return round(dot / norm, 4) if norm else 0.0
