"""Local text similarity for dedup and consolidation: no network, no model.

All measures share one word normalisation (case-folded Unicode words,
punctuation and Markdown markup ignored):

* :func:`content_key` - a hash of the normalised text plus type and scope.
  Equal keys mean "the same memory said again" (an identical-content check).
* :func:`similarity` - 0..1: the cosine similarity of word counts, scaled by how
  well the shared content words keep their order, and capped below 0.9 when
  :func:`differences` finds a change that alters a fact.  "prefers dark mode and
  TypeScript" and "prefers dark mode, TypeScript and VS Code" score 0.87 (a
  refinement: supersede); unrelated notes on the same topic stay well under 0.8.
* :func:`differences` - why two texts with (nearly) the same words may still
  state different facts: ``word order`` ("Bob reports to Alice" / "Alice reports
  to Bob"), ``numbers`` ("3 pm" / "4 pm") or ``negation`` ("is" / "is not").
  Dedup never skips a text with such a difference, whatever the thresholds: a
  true fact must not be dropped because it uses the same words as another.

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
from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping

__all__ = ["words", "normalize", "content_key", "sketch", "bands", "fingerprints", "similarity", "differences",
           "SKETCH_SIZE", "FACT_CHANGE_CAP", "RENAME_SIMILARITY", "rename_pairs"]

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
    return _bands_of({_hash(w) for w in words(text) if w not in _STOP})


def _bands_of(hashes: set[int]) -> list[int]:
    if not hashes:
        return []
    mins = [min(map(mask.__xor__, hashes)) for mask in _MASKS]
    return [zlib.crc32(repr((b, mins[b * _ROWS:(b + 1) * _ROWS])).encode()) for b in range(_BANDS)]


def fingerprints(title: str, body: str) -> tuple[list[int], list[int]]:
    """``sketch(title + "\\n" + body)`` and ``bands(body or title)`` (distinct keys, in
    order) at once, each word read and hashed once: what the catalog keeps per memory."""
    body_words = set(words(body)) - _STOP
    title_words = set(words(title)) - _STOP
    hashed = dict(zip(body_words | title_words, map(_hash, body_words | title_words), strict=True))
    top = sorted(hashed.values())[:SKETCH_SIZE]
    banded = {hashed[w] for w in (body_words if body else title_words)}
    return top, list(dict.fromkeys(_bands_of(banded)))


# Words that turn a statement into its opposite.  "t" is what is left of "n't"
# ("don't" -> "don", "t") once punctuation is dropped.
_NEGATIONS = frozenset("""not no never nor neither none nobody nothing nowhere without cannot t""".split())
_NUMBER_WORDS = frozenset("""zero one two three four five six seven eight nine ten eleven twelve thirteen
fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
hundred thousand million billion half once twice""".split())
#: The highest :func:`similarity` of two texts :func:`differences` tells apart:
#: below the default skip threshold (0.92) and reflect's merge threshold (0.95),
#: so such texts can supersede one another but are never skipped or merged away.
FACT_CHANGE_CAP = 0.9


def _numbers(tokens: list[str]) -> Counter[str]:
    return Counter(w for w in tokens if w in _NUMBER_WORDS or any(c.isdigit() for c in w))


def _negations(tokens: list[str]) -> int:
    return sum(1 for w in tokens if w in _NEGATIONS)


def _order_agreement(ta: list[str], tb: list[str]) -> float:
    """How well the content words both texts share keep their order, 0..1 (1 = same order).

    Each occurrence is its own token ("deploy#0", "deploy#1"), so repeated
    words count too.  The longest run of shared tokens in the same order in
    both texts (a longest increasing subsequence, O(n log n) even for very long
    texts) divided by the number of shared tokens: inserting or deleting words
    keeps 1.0, swapping who did what to whom does not.
    """
    def keyed(tokens: list[str]) -> list[tuple[str, int]]:
        seen: Counter[str] = Counter()
        out = []
        for w in tokens:
            if w not in _STOP:
                out.append((w, seen[w]))
                seen[w] += 1
        return out

    where = {key: i for i, key in enumerate(keyed(tb))}
    positions = [where[key] for key in keyed(ta) if key in where]
    if len(positions) < 2:
        return 1.0
    tails: list[int] = []  # tails[k]: the smallest last position of an increasing run of length k+1
    for p in positions:
        k = bisect_left(tails, p)
        if k == len(tails):
            tails.append(p)
        else:
            tails[k] = p
    return len(tails) / len(positions)


def differences(a: str, b: str) -> list[str]:
    """What may make two texts state different facts despite similar words.

    Any of ``"word order"`` (shared content words in another order),
    ``"numbers"`` (the numbers differ: digits or number words) and
    ``"negation"`` (one says not/no/never/n't more often); empty when none.
    """
    ta, tb = words(a), words(b)
    found = []
    if _order_agreement(ta, tb) < 1.0:
        found.append("word order")
    if _numbers(ta) != _numbers(tb):
        found.append("numbers")
    if _negations(ta) != _negations(tb):
        found.append("negation")
    return found


def similarity(a: str, b: str) -> float:
    """How alike two texts are, 0..1 (1.0 = the same words in the same order).

    The cosine similarity of word counts, times ``(1 + order) / 2`` where
    ``order`` is how well shared content words keep their order; at most
    :data:`FACT_CHANGE_CAP` when :func:`differences` finds a reordering, a
    changed number or a negation (so those are never taken for duplicates).
    """
    ta, tb = words(a), words(b)
    ca, cb = Counter(ta), Counter(tb)
    if not ca or not cb:
        return 1.0 if not ca and not cb else 0.0
    small, large = (ca, cb) if len(ca) <= len(cb) else (cb, ca)
    dot = sum(n * large.get(w, 0) for w, n in small.items())
    norm = math.sqrt(sum(n * n for n in ca.values())) * math.sqrt(sum(n * n for n in cb.values()))
    if not norm or not dot:
        return 0.0
    order = _order_agreement(ta, tb)
    score = dot / norm * (1.0 + order) / 2.0
    if order < 1.0 or _numbers(ta) != _numbers(tb) or _negations(ta) != _negations(tb):
        score = min(score, FACT_CHANGE_CAP)
    return round(score, 4)


# ---------------------------------------------------------------- renames
#: How alike a removed and an added file must be to count as one renamed file (git's default).
RENAME_SIMILARITY = 0.5
#: Removed x added files compared at most in one commit (git's diff.renameLimit is similar).
_RENAME_PAIRS_LIMIT = 250_000


def _line_similarity(a: Counter[bytes], size_a: int, b: Counter[bytes], size_b: int) -> float:
    """Bytes of the lines two files share / bytes of the larger one (like git's score)."""
    if len(a) > len(b):
        a, b = b, a
    shared = sum(min(n, b[line]) * len(line) for line, n in a.items() if line in b)
    return shared / max(size_a, size_b, 1)


def rename_pairs(removed: Mapping[str, bytes], added: Mapping[str, bytes]) -> list[tuple[str, str]]:
    """(old path, new path) of the removed files an added file renames, as git finds
    them: identical content first, then the most similar pairs with at least
    :data:`RENAME_SIMILARITY` of their lines alike.  Empty files are never paired."""
    olds = {p: d for p, d in removed.items() if d}
    news = {p: d for p, d in added.items() if d}
    pairs: list[tuple[str, str]] = []
    by_content: dict[bytes, list[str]] = {}
    for path in sorted(olds):
        by_content.setdefault(olds[path], []).append(path)
    for path in sorted(news):
        same = by_content.get(news[path])
        if same:
            pairs.append((same.pop(0), path))
    done_old, done_new = {p for p, _ in pairs}, {p for _, p in pairs}
    rest_old = sorted(p for p in olds if p not in done_old)
    rest_new = sorted(p for p in news if p not in done_new)
    if not rest_old or not rest_new or len(rest_old) * len(rest_new) > _RENAME_PAIRS_LIMIT:
        return pairs
    lines = {p: (Counter(d.splitlines(keepends=True)), len(d)) for p, d in
             [*((p, olds[p]) for p in rest_old), *((p, news[p]) for p in rest_new)]}
    scored = sorted((-_line_similarity(*lines[o], *lines[n]), o, n) for o in rest_old for n in rest_new)
    for score, old, new in scored:
        if -score < RENAME_SIMILARITY:
            break
        if old not in done_old and new not in done_new:
            pairs.append((old, new))
            done_old.add(old)
            done_new.add(new)
    return pairs
