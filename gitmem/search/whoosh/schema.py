"""What the search index holds and how text becomes terms: the analysis shared by indexing,
querying and snippets, the schema, the positional weighted text field, and the Or query
that avoids Whoosh's wrong top-k."""

from __future__ import annotations

import functools
import re
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from whoosh import formats
from whoosh import query as wq
from whoosh.analysis import LowercaseFilter, RegexTokenizer, StemFilter, StopFilter
from whoosh.analysis.analyzers import STOP_WORDS
from whoosh.columns import NumericColumn, VarBytesColumn
from whoosh.fields import COLUMN, ID, KEYWORD, NUMERIC, STORED, TEXT, Schema
from whoosh.lang import stemmer_for_language
from whoosh.lang.porter import stem as porter_stem

from ..rank import SearchConfig
from ..snippet import WORD_PATTERN

__all__ = ["SCHEMA_VERSION", "MAX_WORD_CHARS", "Or", "any_of", "Analysis", "ArrayPositions", "WeightedText",
           "make_schema"]

# Bump when the schema, the analysis or the codec's class path changes (each segment of the
# table of contents pickles its codec by module and class name: an index naming a class
# gitmem no longer has must be rebuilt, which the stamp's schema hash tells before it is read).
# 8: the codec moved from gitmem.search.index to gitmem.search.whoosh.codec.
# 9: Obsidian aliases are indexed with the tags and entities.
# 10: ``ownlen`` (where the context starts in ``text``); a title the writer gave weighs more;
#     ``follows`` stored (the neighbour prior).
# 11: ``ownlen`` only for memories with a context (10 set it on every memory, which made
#     every phrase and exact word check each memory's context start).
# 12: the day a memory was created (``d20231116``) in ``when``, for queries naming a day, and
#     a mark there when its text tells a time (``TELLS_TIME``), for questions asking when.
SCHEMA_VERSION = 12


class Or(wq.Or):
    """An Or that always uses the binary union matcher: whoosh-reloaded 2.7.5's preloaded
    Or matcher returns a wrong top-k when an Or nests in an Or and a limit is given."""
    matcher_type = wq.Or.DEFAULT_MATCHER


def any_of(items: list) -> Any:
    return items[0] if len(items) == 1 else Or(items)


MAX_WORD_CHARS = 100


class Analysis:
    """One tokenisation shared by indexing, querying and snippets."""

    def __init__(self, cfg: SearchConfig) -> None:
        self.stop = frozenset(STOP_WORDS | {"i", "s", "t", "d", "ll", "m", "re", "ve"})
        words = RegexTokenizer(WORD_PATTERN)
        self._findall = re.compile(WORD_PATTERN).findall
        # A "word" over 100 characters is never something to search for, and stemming one
        # of a megabyte (a hostile or broken file) would take minutes: such tokens are dropped.
        self.base = words | LowercaseFilter() | StopFilter(stoplist=self.stop, minsize=1, maxsize=MAX_WORD_CHARS)
        raw = {"porter2": stemmer_for_language("en"), "porter": porter_stem}.get(cfg.stemmer)
        self._forms: dict[str, list[str]] = {}       # stem -> irregular forms indexed as it
        if raw is not None and cfg.verb_forms:
            for form, verb in VERB_FORMS.items():
                self._forms.setdefault(raw(verb), []).append(form)
            raw = functools.partial(_verb_then, raw)
        self.stem: Callable[[str], str] = functools.lru_cache(100_000)(raw) if raw else str
        self.text = self.base | StemFilter(stemfn=raw) if raw else self.base

    def tokens(self, text: str) -> list[str]:
        # What ``self.base`` yields, without a token object per word.
        stop = self.stop
        return [w for w in map(str.lower, self._findall(text)) if w not in stop and len(w) <= MAX_WORD_CHARS]

    def stems(self, text: str) -> list[str]:
        return [self.stem(t) for t in self.tokens(text)]

    def forms(self, terms: Iterable[str]) -> set[str]:
        """The irregular forms indexed as one of ``terms`` (``went`` for ``go``)."""
        return {f for t in terms for f in self._forms.get(t, ())}

    def key(self, word: str) -> str:
        """The term a lower-case word of a text is indexed as (stop words: themselves)."""
        return word if word in self.stop else self.stem(word)



# Irregular past forms and past participles of common English verbs -> the verb.  A
# stemmer leaves them apart ("did you go" never meets "we went"), and questions about the
# past are asked with the plain verb.  Forms that are often other words ("left", "saw",
# "found", "felt", "rose", "lay", "fell", "lead", "spoke", "born", "ground") are left out.
VERB_FORMS: dict[str, str] = {
    form: verb for verb, forms in {
        "go": "went gone", "take": "took taken", "win": "won", "make": "made", "see": "seen",
        "get": "got gotten", "give": "gave given", "come": "came", "buy": "bought",
        "bring": "brought", "think": "thought", "tell": "told", "say": "said", "meet": "met",
        "run": "ran", "begin": "began begun", "write": "wrote written", "eat": "ate eaten",
        "drive": "drove driven", "fly": "flew flown", "know": "knew known", "grow": "grew grown",
        "teach": "taught", "catch": "caught", "sell": "sold", "keep": "kept", "sleep": "slept",
        "spend": "spent", "send": "sent", "build": "built", "lose": "lost", "hold": "held",
        "stand": "stood", "understand": "understood", "hear": "heard", "pay": "paid",
        "become": "became", "choose": "chose chosen", "break": "broke broken",
        "forget": "forgot forgotten", "draw": "drew drawn", "sing": "sang sung",
        "swim": "swam swum", "ride": "rode ridden", "throw": "threw thrown", "wear": "wore worn",
        "fight": "fought", "hide": "hid hidden", "shake": "shook shaken", "steal": "stole stolen",
        "wake": "woke woken", "dig": "dug", "mean": "meant", "deal": "dealt", "lend": "lent",
        "shoot": "shot", "sit": "sat", "feed": "fed", "seek": "sought",
        "blow": "blew blown", "freeze": "froze frozen", "ring": "rang rung", "shine": "shone",
        "sink": "sank sunk", "speak": "spoken", "strike": "struck", "swear": "swore sworn",
        "tear": "tore torn", "weep": "wept", "bend": "bent", "hang": "hung",
    }.items() for form in forms.split()}


def _verb_then(stem: Callable[[str], str], word: str) -> str:
    return stem(VERB_FORMS.get(word, word))


if array("I").itemsize != 4:  # pragma: no cover - every platform Python supports today
    raise ImportError("gitmem's search index needs 4-byte unsigned ints in array('I')")


class ArrayPositions(formats.Positions):
    """Positions stored as a machine array of 32-bit integers instead of Whoosh's pickled
    list of deltas: checking a phrase decodes a posting with one C call instead of an
    unpickle and a Python loop (``gitmem.search.rank``).  Whoosh's own span queries
    read it through ``decode_positions`` as before."""

    def encode(self, poslist: Sequence[int]) -> bytes:
        return array("I", poslist).tobytes()

    def decode_positions(self, valuestring: bytes) -> list[int]:
        return array("I", valuestring).tolist()

    def decode_frequency(self, valuestring: bytes) -> int:
        return len(valuestring) // 4

    # ``decode_positions`` without a Python frame (gitmem.search.rank's phrase check)
    positions_array = staticmethod(functools.partial(array, "I"))




class WeightedText(TEXT):
    """A positional text field whose value is a list of ``(term, weight)`` pairs, one per
    position (``None`` = a gap), so title and tag words can weigh more than body words
    inside one BM25 field."""

    format: Any

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.format = ArrayPositions(field_boost=self.format.field_boost)

    def index(self, value: Any, **kw: Any) -> Any:
        poses: dict[str, list[int]] = {}
        weights: dict[str, float] = {}
        for pos, item in enumerate(value):
            if item is not None:
                term, weight = item
                plist = poses.get(term)
                if plist is None:
                    poses[term] = [pos]
                    weights[term] = weight
                else:
                    plist.append(pos)
                    weights[term] += weight
        encode = self.format.encode
        return [(term.encode("utf-8"), len(plist), weights[term], encode(plist)) for term, plist in poses.items()]


def make_schema(cfg: SearchConfig, an: Analysis, versions: bool = False) -> Schema:
    fields: dict[str, Any] = dict(
        # (a versions index holds several versions of a path: not unique there)
        path=ID(stored=True, unique=not versions, sortable=True), hash=COLUMN(VarBytesColumn()),
        id=ID(stored=True), title=STORED(), body=STORED(),
        text=WeightedText(analyzer=an.text),        # title + tags + agent + body, weighted
        words=KEYWORD(),                              # unstemmed vocabulary: prefix, spelling
        when=TEXT(phrase=False),                      # created's month, year, day; tells a time
        tags=KEYWORD(lowercase=True, commas=True), taglist=STORED(),
        entities=KEYWORD(lowercase=True, commas=True), links=KEYWORD(lowercase=True, commas=True),
        type=ID(stored=True), tier=ID(stored=True), status=ID(stored=True), scope=ID(),
        agent=ID(), source=ID(sortable=True), importance=NUMERIC(int, stored=True),
        context=STORED(), follows=ID(stored=True),   # context text (snippets); followed id
        created=NUMERIC(int, bits=64, signed=True),
        updated=NUMERIC(int, bits=64, signed=True), updated_iso=STORED(),
        recency=COLUMN(NumericColumn("q")),                 # updated or created, for listings
        ownlen=COLUMN(NumericColumn("I")))     # where the context starts in ``text`` (0: none)
    if versions:
        fields.update(since=COLUMN(NumericColumn("q")),     # first commit (number) holding it
                      textlen=COLUMN(NumericColumn("I")))   # exact length of ``text``
    return Schema(**fields)

