"""Reading a search query: the query language, parsed into a tree of plain nodes
(:func:`parse_query`), and the dates and fields it names.  The tree is evaluated and ranked
in :mod:`gitmem.search.rank`; :mod:`gitmem.search.whoosh` answers its metadata filters.

Syntax, in the order the parser tries it on each whitespace-separated piece:

- ``"exact phrase"``: words in this order (stemmed, stop words ignored).
- ``(`` ... ``)``: grouping.  ``AND``, ``OR``, ``NOT`` (upper case only) are operators;
  lower-case ``and``/``or``/``not`` are ordinary words.  ``AND`` binds tighter than ``OR``;
  pieces written next to each other are joined by ``AND``.
- ``field:value`` / ``field:"two words"`` / ``field:prefix*``: a filter on a metadata field
  (see :data:`FIELDS`).  Dates take ``created:>2026-01-01``, ``<``, ``>=``, ``<=``,
  ``created:2026-01-01..2026-03-31`` or a single day/month/year ``created:2026-05``;
  a date is ``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD`` or a full ISO 8601 time.
- ``word*``: every word starting with ``word`` (bounded, see
  :data:`gitmem.search.rank.PREFIX_EXPANSION_LIMIT`).
- anything else is a plain word.

A query made only of plain words, phrases and filters is a *natural* query: the engine
ranks it by the policy ``natural`` of :class:`gitmem.search.rank.SearchConfig` (default
``any``: memories holding more of the words, more often, rank higher; a phrase counts as
one word that must match as a phrase).  Any operator, parenthesis or prefix makes it a *syntax* query with strict
boolean meaning.

Plain text never fails: :func:`parse_query` reads a query with the full syntax when it is
valid, and otherwise reads what is not valid syntax as text: an unknown ``field:`` prefix
(``besides CS:GO?``, ``TODO:fix``), a known field with an empty or bad value
(``Status: done``, ``created:yesterday``), an unclosed quote, a misplaced ``*``; if
operators or parentheses still do not parse (``a OR``, ``(a b``), they are words too.
Valid filters, phrases and operators in the same query keep their meaning.  A colon
followed by ``//`` (``https://x``) is always part of a word.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from typing import cast

from ..errors import InvalidQuery

__all__ = ["FIELDS", "DATE_FIELDS", "QUESTION_WORDS", "Word", "Phrase", "Prefix", "FieldTerm",
           "DateRange", "And", "Or", "Not", "ParsedQuery", "parse_query", "parse_filter",
           "date_range", "iso_to_epoch", "named_days", "day_word", "TIME_WORDS", "TELLS_TIME",
           "asks_when"]

#: query field name -> index field name (matched exactly; case-insensitive except ``path``)
FIELDS: dict[str, str] = {
    "tier": "tier", "type": "type", "tag": "tags", "tags": "tags", "scope": "scope",
    "agent": "agent", "status": "status", "id": "id", "source": "source",
    "entity": "entities", "entities": "entities", "path": "path", "link": "links",
    "links": "links",
}
DATE_FIELDS = ("created", "updated")

#: Words that carry no topic in a natural-language question; dropped from natural queries
#: only (on top of the index's own stop words), so "What did Ann say about X?" needs X, Ann.
QUESTION_WORDS = frozenset(
    "what when where which who whom whose why how did do does done was were been being am "
    "has had having i me my mine our ours he him his she her hers they them their theirs its "
    "would could should shall might must there here than then so such any some about into "
    "over also just very much many more most other".split())


@dataclass(frozen=True)
class Word:
    text: str


@dataclass(frozen=True)
class Phrase:
    text: str


@dataclass(frozen=True)
class Prefix:
    text: str


@dataclass(frozen=True)
class FieldTerm:
    field: str          # index field name, e.g. "tags"
    value: str          # lower-cased value
    prefix: bool = False


@dataclass(frozen=True)
class DateRange:
    field: str                  # "created" | "updated"
    start: int | None           # epoch seconds, inclusive
    end: int | None             # epoch seconds, exclusive


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    item: Node


Node = Word | Phrase | Prefix | FieldTerm | DateRange | And | Or | Not


@dataclass
class ParsedQuery:
    """``natural`` queries carry ``words``; syntax queries carry ``expr``.  ``filters`` are
    top-level conjuncts on metadata fields (they never affect ranking)."""

    natural: bool
    words: list[str] = field(default_factory=list)
    phrases: list[str] = field(default_factory=list)
    expr: Node | None = None
    filters: list[Node] = field(default_factory=list)

    @property
    def filters_status(self) -> bool:
        return any(isinstance(f, FieldTerm) and f.field == "status" for f in _walk_all(self))

    def add_filters(self, filters: Mapping[str, str | Sequence[str]] | None) -> None:
        """Add ``{field: value or [values]}`` filters (several values: any of them)."""
        for key, vals in (filters or {}).items():
            nodes = [parse_filter(key, str(v))
                     for v in ([vals] if isinstance(vals, str) else list(vals))]
            if nodes:
                self.filters.append(nodes[0] if len(nodes) == 1 else Or(tuple(nodes)))

    def texts(self) -> list[str]:
        """The words and phrases searched for (not negated), e.g. for spelling suggestions."""
        if self.natural:
            return self.words + self.phrases
        out, stack = [], [self.expr]
        while stack:
            n = stack.pop()
            if isinstance(n, (Word, Phrase)):
                out.append(n.text)
            elif isinstance(n, (And, Or)):
                stack.extend(reversed(n.items))
        return out


def _walk_all(pq: ParsedQuery):
    stack: list = list(pq.filters) + ([pq.expr] if pq.expr is not None else [])
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (And, Or)):
            stack.extend(n.items)
        elif isinstance(n, Not):
            stack.append(n.item)


# --- dates -----------------------------------------------------------------------------

_DATE_RE = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?"
                      r"(Z|[+-]\d{2}:?\d{2})?)?)?)?$")


def _span(text: str) -> tuple[int, int]:
    """A date or time -> [start, end) in epoch seconds (UTC unless an offset is given)."""
    m = _DATE_RE.match(text.strip())
    if not m:
        raise InvalidQuery(f"bad date {text!r}: use YYYY, YYYY-MM, YYYY-MM-DD or ISO 8601 "
                           "like 2026-05-08T13:56:00Z")
    y, mo, d, hh, mi, ss, tz = m.groups()
    try:
        tzinfo = UTC
        if tz and tz != "Z":
            sign = 1 if tz[0] == "+" else -1
            digits = tz[1:].replace(":", "")
            tzinfo = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
        start = datetime(int(y), int(mo or 1), int(d or 1), int(hh or 0), int(mi or 0),
                         int(ss or 0), tzinfo=tzinfo)
    except ValueError as exc:
        raise InvalidQuery(f"bad date {text!r}: {exc}") from None
    if hh is not None:
        end = start + timedelta(seconds=1 if ss is not None else 60)
    elif d is not None:
        end = start + timedelta(days=1)
    elif mo is not None:
        end = start.replace(year=start.year + (start.month == 12), month=start.month % 12 + 1)
    else:
        end = start.replace(year=start.year + 1)
    return int(start.timestamp()), int(end.timestamp())


def iso_to_epoch(text: str | None) -> int | None:
    """Start of an ISO 8601 date/time in epoch seconds, or None if missing or unparsable."""
    if not text:
        return None
    try:
        return _span(str(text))[0]
    except InvalidQuery:
        return None


_MONTH_NUMBERS = {name: i for i, names in enumerate(
    ("january jan", "february feb", "march mar", "april apr", "may", "june jun", "july jul",
     "august aug", "september sep sept", "october oct", "november nov", "december dec"), 1)
    for name in names.split()}
_MONTH = "|".join(sorted(_MONTH_NUMBERS, key=len, reverse=True))
_NAMED_DAY_RE = re.compile(
    rf"\b(?:(\d{{1,2}})(?:st|nd|rd|th)?(?:\s+of)?\s+({_MONTH})\.?,?\s+(\d{{4}})"
    rf"|({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})"
    rf"|(\d{{4}})-(\d{{2}})-(\d{{2}}))\b", re.I)


def named_days(text: str) -> list[date]:
    """The calendar days a text names, in order and once each: ``16 November 2023``,
    ``16th of Nov, 2023``, ``November 16, 2023``, ``2023-11-16``.  A day that does not
    exist (``31 June 2023``) is left out; a month or year alone names no day."""
    out: list[date] = []
    for m in _NAMED_DAY_RE.finditer(text):
        if m[1]:
            y, mo, d = int(m[3]), _MONTH_NUMBERS[m[2].lower()], int(m[1])
        elif m[4]:
            y, mo, d = int(m[6]), _MONTH_NUMBERS[m[4].lower()], int(m[5])
        else:
            y, mo, d = int(m[7]), int(m[8]), int(m[9])
        try:
            day = date(y, mo, d)
        except ValueError:
            continue
        if day not in out:
            out.append(day)
    return out


#: Words that place what a text tells in time: relative days and spans ("yesterday",
#: "last week", "a month ago"), weekdays, months (not "may", mostly a verb) and seasons.
TIME_WORDS = frozenset(
    "yesterday today tonight tomorrow ago last next recently earlier soon since weekend week "
    "weeks month months year years morning night monday tuesday wednesday thursday friday "
    "saturday sunday january february march april june july august september october "
    "november december spring summer autumn fall winter".split())

#: The word the search index adds to the ``when`` field of a memory whose own text holds
#: one of :data:`TIME_WORDS` (a word no text has, so no query word meets it by chance).
TELLS_TIME = "0when"

_ASKS_WHEN = re.compile(r"^\W*(?:when|what\s+(?:year|month|day|date|time)|how\s+long\s+ago"
                        r"|(?:in|on)\s+which\s+(?:year|month|day|date))\b", re.I)


def asks_when(text: str) -> bool:
    """Whether a question asks when something happened ("When did Ann ...?", "What year
    ...?", "How long ago ...?")."""
    return bool(_ASKS_WHEN.match(text))


def day_word(day: date) -> str:
    """The word the search index holds for the day a memory was created (``d20231116``),
    one word so that no analyzer splits it."""
    return f"d{day:%Y%m%d}"


def date_range(fieldname: str, spec: str) -> DateRange:
    """``>D``, ``>=D``, ``<D``, ``<=D``, ``D1..D2`` (inclusive) or ``D`` -> a half-open range."""
    spec = spec.strip()
    for op in (">=", "<=", ">", "<"):
        if spec.startswith(op):
            s, e = _span(spec[len(op):])
            return {">=": DateRange(fieldname, s, None), ">": DateRange(fieldname, e, None),
                    "<": DateRange(fieldname, None, s), "<=": DateRange(fieldname, None, e)}[op]
    if ".." in spec:
        lo, _, hi = spec.partition("..")
        if not lo and not hi:
            raise InvalidQuery(f"bad date range {spec!r}: give at least one end")
        return DateRange(fieldname, _span(lo)[0] if lo else None, _span(hi)[1] if hi else None)
    s, e = _span(spec)
    return DateRange(fieldname, s, e)


# --- tokenizer -------------------------------------------------------------------------

_FIELD_RE = re.compile(r"^([A-Za-z_]+):(.*)$", re.S)


def _tokens(q: str, level: int = 0) -> list[tuple[str, object]]:
    """The query's tokens.  ``level`` 0 is the strict reading (errors on bad syntax);
    1 reads what is not valid syntax as text (an unclosed quote is dropped, an unknown
    field or a bad value is a plain word, a misplaced ``*`` is dropped); 2 also reads
    parentheses and operators as text (see :func:`parse_query`)."""
    out: list[tuple[str, object]] = []
    i, n = 0, len(q)
    while i < n:
        c = q[i]
        if c.isspace():
            i += 1
        elif c in "()":
            out.append((c, c) if level < 2 else ("word", c))
            i += 1
        elif c == '"':
            j = q.find('"', i + 1)
            if j < 0:
                if level:
                    i += 1          # a stray quote is punctuation
                    continue
                raise InvalidQuery(f'unbalanced quote: the " at position {i} is never closed')
            out.append(("phrase", q[i + 1:j]))
            i = j + 1
        else:
            j = i
            while j < n and not q[j].isspace() and q[j] not in '()"':
                j += 1
            piece = q[i:j]
            m = _FIELD_RE.match(piece)
            if m and j < n and q[j] == '"' and m.group(2) == "" and q.find('"', j + 1) >= 0:
                k = q.find('"', j + 1)
                out.append(_field_token(m.group(1), q[j + 1:k], True, level, q[i:k + 1]))
                i = k + 1
                continue
            if m and not m.group(2) and m.group(1).lower() in (*FIELDS, *DATE_FIELDS):
                if level:
                    out.append(("word", piece))
                    i = j
                    continue
                raise InvalidQuery(f"empty value for field {m.group(1)!r}: write "
                                   f"{m.group(1)}:value with no space after the colon")
            if m and j < n and q[j] == '"' and m.group(2) == "" and not level:
                raise InvalidQuery(f'unbalanced quote: the " at position {j} is never closed')
            if m and m.group(2) and not m.group(2).startswith("//"):
                out.append(_field_token(m.group(1), m.group(2), False, level, piece))
            elif piece in ("AND", "OR", "NOT"):
                out.append((piece, piece) if level < 2 else ("word", piece))
            elif level and "*" in piece and not _PREFIX_RE.match(piece):
                out.append(("word", piece.replace("*", " ")))   # "*", "a*b*": punctuation
            else:
                out.append(("word", piece))
            i = j
    return out


_PREFIX_RE = re.compile(r"^[^*]+\*+$")


def _field_token(name: str, value: str, quoted: bool, level: int,
                 piece: str) -> tuple[str, object]:
    """A ``field:value`` token; above level 0 an invalid one is read as a plain word."""
    if not level:
        return ("field", (name, value, quoted))
    try:
        return ("node", _field_node(name, value, quoted))
    except InvalidQuery:
        return ("phrase" if quoted else "word", piece.replace('"', " ").replace("*", " "))


def _field_node(name: str, value: str, quoted: bool) -> Node:
    key = name.lower()
    if key in DATE_FIELDS:
        return date_range(key, value)
    if key not in FIELDS:
        known = ", ".join(sorted(set(FIELDS) | set(DATE_FIELDS)))
        raise InvalidQuery(f"unknown field {name!r} in '{name}:{value}'; known fields: {known}. "
                           f"To search the text itself, put it in quotes: \"{name}:{value}\"")
    value = value.strip()
    if not value:
        raise InvalidQuery(f"empty value for field {name!r}")
    if FIELDS[key] != "path":         # every other field is matched case-insensitively
        value = value.lower()
    if FIELDS[key] == "tags":          # Obsidian spells a tag "#tag"
        value = ",".join(v.strip().lstrip("#") for v in value.split(","))
        if not value.strip(","):
            raise InvalidQuery(f"empty value for field {name!r}")
    if not quoted and value.endswith("*") and len(value) > 1:
        return FieldTerm(FIELDS[key], value[:-1], prefix=True)
    return FieldTerm(FIELDS[key], value)


def parse_filter(name: str, value: str) -> Node:
    """One ``filters=`` entry of :meth:`SearchIndex.search` as a node (same rules as the syntax)."""
    return _field_node(name, value, True)


class _Parser:
    def __init__(self, toks: list[tuple[str, object]]) -> None:
        self.toks = toks
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i][0] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, object]:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def parse(self) -> Node | None:
        node = self.or_expr()
        if self.peek() == ")":
            raise InvalidQuery("unbalanced parenthesis: ')' without a matching '('")
        if self.i < len(self.toks):  # pragma: no cover - every token is consumed above
            raise InvalidQuery(f"unexpected {self.toks[self.i][1]!r}")
        return node

    def or_expr(self) -> Node:
        items = [self.and_expr()]
        while self.peek() == "OR":
            self.take()
            if self.peek() in (None, ")", "OR", "AND"):
                raise InvalidQuery("OR needs something on both sides")
            items.append(self.and_expr())
        return items[0] if len(items) == 1 else Or(tuple(items))

    def and_expr(self) -> Node:
        if self.peek() == "AND":
            raise InvalidQuery("AND needs something on both sides")
        items = [self.unary()]
        while self.peek() not in (None, ")", "OR"):
            if self.peek() == "AND":
                self.take()
                if self.peek() in (None, ")", "OR", "AND"):
                    raise InvalidQuery("AND needs something on both sides")
            items.append(self.unary())
        return items[0] if len(items) == 1 else And(tuple(items))

    def unary(self) -> Node:
        if self.peek() == "NOT":
            self.take()
            if self.peek() in (None, ")", "OR", "AND"):
                raise InvalidQuery("NOT needs something after it")
            return Not(self.unary())
        return self.primary()

    def primary(self) -> Node:
        kind, val = self.take()
        if kind == "(":
            if self.peek() == ")":
                raise InvalidQuery("empty parentheses")
            node = self.or_expr()
            if self.peek() != ")":
                raise InvalidQuery("unbalanced parenthesis: '(' is never closed")
            self.take()
            return node
        if kind == ")":
            raise InvalidQuery("unbalanced parenthesis: ')' without a matching '('")
        if kind == "phrase":
            return Phrase(str(val))
        if kind == "field":
            name, value, quoted = cast(tuple[str, str, bool], val)
            return _field_node(name, value, quoted)
        if kind == "node":
            return val  # type: ignore[return-value]
        text = str(val)
        if text.endswith("*"):
            stem = text.rstrip("*")
            if not stem:
                raise InvalidQuery("a lone '*' is not a query; write a prefix such as deploy*")
            if "*" in stem:
                raise InvalidQuery(f"{text!r}: only a trailing * (prefix) is supported")
            return Prefix(stem)
        return Word(text)


def _is_filter(n: Node) -> bool:
    return isinstance(n, (FieldTerm, DateRange)) or (
        isinstance(n, (And, Or)) and all(_is_filter(c) for c in n.items)) or (
        isinstance(n, Not) and _is_filter(n.item))


def parse_query(text: str) -> ParsedQuery:
    """Read a query string.  This is the one place that decides how a query is read, and
    it never fails on text: the query is read with the full syntax when it is valid;
    otherwise what is not valid syntax is read as text (unknown ``field:`` prefixes such
    as ``CS:GO`` or ``TODO:fix``, a known field with a bad value, an unclosed quote, a
    stray ``*``), keeping valid filters, phrases and operators; and if the operators or
    parentheses still do not parse (``a OR``, ``(a b``), they are read as words too."""
    for level in (0, 1):
        try:
            return _parse(text, level)
        except InvalidQuery:
            continue
    return _parse(text, 2)


def _parse(text: str, level: int) -> ParsedQuery:
    """Parse at one level of :func:`_tokens`; InvalidQuery when the syntax is bad (never
    at level 2, where every token is a word, a phrase or a valid filter)."""
    toks = _tokens(text, level)
    depth = 0
    for kind, _ in toks:
        depth += (kind == "(") - (kind == ")")
        if depth < 0:
            raise InvalidQuery("unbalanced parenthesis: ')' without a matching '('")
    if depth:
        raise InvalidQuery("unbalanced parenthesis: '(' is never closed")
    expr = _Parser(toks).parse() if toks else None
    top = list(expr.items) if isinstance(expr, And) else ([expr] if expr is not None else [])
    filters = [n for n in top if _is_filter(n)]
    rest = [n for n in top if not _is_filter(n)]
    if all(isinstance(n, (Word, Phrase)) for n in rest) and not any(
            k in ("OR", "AND", "NOT", "(") for k, _ in toks):
        return ParsedQuery(True, words=[n.text for n in rest if isinstance(n, Word)],
                           phrases=[n.text for n in rest if isinstance(n, Phrase)],
                           filters=filters)
    body = None if not rest else rest[0] if len(rest) == 1 else And(tuple(rest))
    return ParsedQuery(False, expr=body, filters=filters)
