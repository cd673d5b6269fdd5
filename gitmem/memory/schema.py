"""What a memory is: field order, vocabularies, validation and the Memory object.

A memory is one Markdown file.  Its frontmatter holds the fields below, always
written in :data:`FIELD_ORDER` so diffs stay small; keys a person added that
gitmem does not know are kept after them, untouched.  Files written by a person
may lack any field: :func:`derive` fills in what is missing from the path and
the body when reading, without writing anything back.
"""

from __future__ import annotations

import base64
import math
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidInput, InvalidMetadata, InvalidTitle
from .provenance import check_origin

__all__ = [
    "FIELD_ORDER", "MEMORY_TYPES", "STATUSES", "SCOPES", "RELATIONS", "DEFAULT_TIERS",
    "Memory", "new_id", "path_id", "iso_now", "normalize_timestamp", "clean_metadata",
    "derive", "validate_title", "MetadataProblem", "sanitize_metadata", "safe_text", "safe_value",
    "has_surrogate", "REPLACEMENT_CHAR", "MAX_RETRIEVALS", "MAX_CONTEXT_CHARS",
]

#: Frontmatter keys in the order gitmem writes them.
FIELD_ORDER: tuple[str, ...] = (
    "id", "title", "type", "tier", "status", "tags", "aliases", "created", "updated",
    "expires", "importance", "confidence", "strength", "scope", "agent", "origin", "entities",
    "related", "supersedes", "superseded_by", "summary", "source", "follows", "context",
    "archived_from", "archived_into", "merged_into", "external_write_id", "retrievals",
    "reinforced",
)

#: The type vocabularies of every tool profile: gitmem's and fsm's (memory/goal/rule), agentos'
#: (Tulving's types) and vault's.
MEMORY_TYPES: tuple[str, ...] = (
    "memory", "goal", "rule",
    "episodic", "semantic", "procedural", "prospective",
    "fact", "skill", "preference", "constraint", "task", "correction",
)
#: ``conflict``: a copy a sync made when both sides changed a memory differently (see gitmem.write.merge).
STATUSES: tuple[str, ...] = ("active", "superseded", "archived", "deleted", "conflict")
SCOPES: tuple[str, ...] = ("thread", "user", "persona", "organization")
RELATIONS: tuple[str, ...] = ("derived_from", "contradicts", "refines", "part_of", "supersedes")
DEFAULT_TIERS: tuple[str, ...] = ("short_term", "mid_term", "long_term", "archive")

_LIST_FIELDS = ("tags", "aliases", "entities")
_INT_FIELDS = ("importance", "confidence")
_TIME_FIELDS = ("created", "updated", "expires", "reinforced")
_TEXT_FIELDS = ("title", "summary", "source", "agent", "supersedes", "superseded_by",
                "archived_from", "archived_into", "merged_into", "external_write_id",
                "follows", "context")
MAX_TITLE_CHARS = 200
#: Longest ``context`` (what a memory answers or continues: a short line, not a copy).
MAX_CONTEXT_CHARS = 500
#: Largest ``retrievals`` count: the largest integer every JSON reader holds exactly.
MAX_RETRIEVALS = 2 ** 53 - 1
#: What a lone surrogate in a file's metadata is read as (it cannot be encoded as UTF-8).
REPLACEMENT_CHAR = "\ufffd"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Greedy and anchored at both ends, trailing markup stripped afterwards: the former
# lazy ``(.+?)[ \t#]*$`` backtracked quadratically over a long run of spaces.
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+)$", re.MULTILINE)
_INT64 = 2 ** 63
_MAX_DEPTH = 32      # nesting a person's unknown field may have before the rest is cut
_SHOW_CHARS = 60     # how much of a bad value an error message quotes
# A stable namespace so an id derived from a path is the same on every machine.
_PATH_NAMESPACE = uuid.UUID("6f1c3a52-2f0e-4b8e-9a55-6d1b0c4e7a21")


def new_id() -> str:
    """A fresh memory id (a random UUID4 string, usable as the ``vault`` profile's UUID)."""
    return str(uuid.uuid4())


def path_id(relpath: str) -> str:
    """The id of a file that has none in its frontmatter: a UUID5 of its path."""
    return str(uuid.uuid5(_PATH_NAMESPACE, relpath))


def iso_now(now: datetime | None = None) -> str:
    """ISO 8601 UTC with a ``Z`` suffix, second precision."""
    now = now or datetime.now(UTC)
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def has_surrogate(text: str) -> bool:
    """True if ``text`` holds a lone surrogate (a code point UTF-8 cannot encode)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def safe_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (so it encodes as UTF-8)."""
    return _SURROGATE.sub(REPLACEMENT_CHAR, text) if has_surrogate(text) else text


def _show(value: Any) -> str:
    """A short, printable quote of a bad value for an error message."""
    try:
        text = repr(value)  # repr escapes lone surrogates and control characters
    except ValueError:      # an int too long to print (sys.int_info.default_max_str_digits)
        text = f"<{type(value).__name__} too large to show>"
    return text if len(text) <= _SHOW_CHARS else text[: _SHOW_CHARS - 3] + "..."


def _safe_scalar_text(value: Any) -> str | None:
    """A text or finite number as one clean line (surrogates, control characters
    replaced); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        return None
    text = safe_text(value) if isinstance(value, str) else str(value)
    return " ".join(_CONTROL.sub(" ", text).split())


def safe_value(value: Any) -> Any:
    """A value of a person's frontmatter made safe to index, print and store as JSON:
    text without lone surrogates, non-finite floats and out-of-range integers as text,
    only lists and string-keyed mappings as containers, nesting cut at 32 levels."""
    return _sanitize(value, 0, set())


def _sanitize(value: Any, depth: int, issues: set[str]) -> Any:
    # Recursion is bounded by _MAX_DEPTH, and the YAML loader refuses deeper documents first.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if has_surrogate(value):
            issues.add("holds a lone surrogate (read as U+FFFD)")
            return safe_text(value)
        return value
    if isinstance(value, int):
        if -_INT64 <= value < _INT64:
            return value
        issues.add("holds an integer out of the 64-bit range (read as text)")
        try:
            return str(value)
        except ValueError:  # too many digits to print at all
            return None
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        issues.add(f"holds the non-finite number {value!r} (read as text)")
        return repr(value)
    if depth >= _MAX_DEPTH:
        issues.add(f"is nested deeper than {_MAX_DEPTH} levels (the rest is ignored)")
        return None
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = _sanitize(key, depth + 1, issues) if isinstance(key, str) else _key_text(key)
            out[str(name)] = _sanitize(item, depth + 1, issues)
        return out
    if isinstance(value, (set, frozenset)):  # YAML !!set: a stable order, not hash order
        return [_sanitize(v, depth + 1, issues) for v in sorted(value, key=_show)]
    if isinstance(value, (list, tuple)):
        return [_sanitize(v, depth + 1, issues) for v in value]
    if isinstance(value, (bytes, bytearray)):  # YAML !!binary: keep it as the base64 it was
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime):            # YAML !!timestamp
        return normalize_timestamp(value) if _utc_ok(value) else value.isoformat()
    if hasattr(value, "isoformat"):            # a date
        return str(value.isoformat())
    issues.add(f"holds an unsupported value of type {type(value).__name__}")
    return None


def _key_text(key: Any) -> str:
    if isinstance(key, float) and not math.isfinite(key):
        return repr(key)
    try:
        return safe_text(str(key))
    except ValueError:
        return "?"


def _utc_ok(dt: datetime) -> bool:
    try:
        (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).astimezone(UTC)
    except (OverflowError, ValueError):
        return False
    return True


def normalize_timestamp(value: Any, field_name: str = "timestamp") -> str:
    """Accept a datetime, a date or an ISO-8601 string; return ISO 8601 UTC ``...Z``."""
    try:
        if isinstance(value, datetime):
            dt = value if value.tzinfo else value.replace(tzinfo=UTC)
            return iso_now(dt)
        if hasattr(value, "isoformat") and not isinstance(value, str):  # a date
            return f"{value.isoformat()}T00:00:00Z"
        if isinstance(value, str):
            text = value.strip()
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
                datetime.strptime(text, "%Y-%m-%d")  # 2026-13-45 is not a date
                return f"{text}T00:00:00Z"
            dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
            return normalize_timestamp(dt)
    except (ValueError, OverflowError):
        # OverflowError: year 1 or 9999 shifted out of range by a UTC offset
        pass
    raise InvalidMetadata(f"{field_name} must be an ISO 8601 date or time, got {_show(value)}",
                          hint="Example: 2026-11-21T09:30:00Z", field=field_name)


def validate_title(title: Any) -> str:
    """Return the title stripped, or raise :class:`InvalidTitle`."""
    if not isinstance(title, str):
        raise InvalidTitle(f"title must be text, got {type(title).__name__}")
    text = title.strip()
    if not text:
        raise InvalidTitle("title is empty", hint="Give the memory a short descriptive title.")
    if _CONTROL.search(text):
        raise InvalidTitle("title contains control characters (newline, tab, NUL ...)")
    if has_surrogate(text):
        raise InvalidTitle("title contains a lone surrogate (not valid Unicode text)",
                           hint="Pass the title as valid UTF-8 text.")
    if len(text) > MAX_TITLE_CHARS:
        raise InvalidTitle(f"title is {len(text)} characters; the limit is {MAX_TITLE_CHARS}",
                           hint="Put the detail in the body or the summary.")
    return text


def _str_list(name: str, value: Any) -> list[str]:
    """A list field as stripped, distinct strings (numbers become text); linear in its length."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise InvalidMetadata(f"{name} must be a list of strings, got {type(value).__name__}",
                              field=name)
    out: dict[str, None] = {}  # insertion-ordered set: `text not in list` made 100k tags quadratic
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise InvalidMetadata(f"{name} entries must be strings, got {_show(item)}", field=name)
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidMetadata(f"{name} entries must be strings, got {item!r}", field=name)
        if isinstance(item, int) and not -_INT64 <= item < _INT64:
            raise InvalidMetadata(f"{name} entries must be strings, got a {_show(item)}", field=name)
        text = str(item).strip()
        if name == "tags":  # Obsidian's "#tag" spelling in the frontmatter names the tag "tag"
            text = text.lstrip("#").strip()
        if _CONTROL.search(text):
            raise InvalidMetadata(f"{name} entry {_show(text)} contains control characters", field=name)
        if has_surrogate(text):
            raise InvalidMetadata(f"{name} entry {_show(text)} contains a lone surrogate", field=name)
        if text:
            out[text] = None
    return list(out)


def _salvage_list(value: Any, name: str = "") -> list[str]:
    """What can be kept of a bad list field from a file: text entries (cleaned) and
    numbers as text; null, booleans, mappings and nested lists are dropped."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)):
        return []
    out: dict[str, None] = {}
    for item in value:
        text = _safe_scalar_text(item)
        if text and name == "tags":
            text = text.lstrip("#").strip()
        if text:
            out[text] = None
    return list(out)


def _bounded_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidMetadata(f"{name} must be an integer from 1 to 5, got {_show(value)}", field=name)
    try:
        number = int(value)
    except ValueError:
        raise InvalidMetadata(f"{name} must be an integer from 1 to 5, got {_show(value)}",
                              field=name) from None
    if not 1 <= number <= 5:
        raise InvalidMetadata(f"{name} must be from 1 to 5, got {_show(number)}", field=name)
    return number


def _related_entry(item: Any) -> dict[str, str]:
    if isinstance(item, str):
        item = {"id": item, "relation": "refines"}
    if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
        raise InvalidMetadata(f"related entry {_show(item)} needs an 'id'", field="related")
    if has_surrogate(item["id"]):
        raise InvalidMetadata(f"related id {_show(item['id'])} contains a lone surrogate", field="related")
    relation = item.get("relation", "refines")
    if not isinstance(relation, str) or relation not in RELATIONS:
        raise InvalidMetadata(f"unknown relation {_show(relation)}",
                              hint=f"Use one of: {', '.join(RELATIONS)}", field="related")
    return {"id": item["id"].strip(), "relation": relation}


def _related(value: Any) -> list[dict[str, str]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidMetadata("related must be a list of {id, relation} entries", field="related")
    out: dict[tuple[str, str], dict[str, str]] = {}
    for item in value:
        entry = _related_entry(item)
        out.setdefault((entry["id"], entry["relation"]), entry)
    return list(out.values())


def _salvage_related(value: Any) -> list[dict[str, str]]:
    out: dict[tuple[str, str], dict[str, str]] = {}
    for item in value if isinstance(value, list) else []:
        try:
            entry = _related_entry(item)
        except InvalidInput:
            continue
        if entry["id"]:
            out.setdefault((entry["id"], entry["relation"]), entry)
    return list(out.values())


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key.strip():
        raise InvalidMetadata(f"frontmatter field names must be non-empty text, got {_show(key)}")
    if _CONTROL.search(key) or has_surrogate(key):
        raise InvalidMetadata(f"frontmatter field name {_show(key)} contains control characters "
                              "or a lone surrogate")
    return key


_VOCABULARIES: dict[str, tuple[str, ...]] = {"type": MEMORY_TYPES, "status": STATUSES, "scope": SCOPES}


def _clean_field(key: str, value: Any, tiers: tuple[str, ...]) -> Any:
    """The cleaned value of one non-empty field, or raise :class:`InvalidInput` naming it."""
    if key == "title":
        return validate_title(value)
    if key in _VOCABULARIES or key == "tier":
        allowed = tiers if key == "tier" else _VOCABULARIES[key]
        if not isinstance(value, str) or value not in allowed:
            raise InvalidMetadata(f"unknown {key} {_show(value)}",
                                  hint=f"Use one of: {', '.join(allowed)}", field=key)
        return value
    if key in _LIST_FIELDS:
        return _str_list(key, value)
    if key in _INT_FIELDS:
        return _bounded_int(key, value)
    if key == "strength":
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not 0 <= value <= 1):  # NaN fails the comparison too
            raise InvalidMetadata(f"strength must be a number from 0 to 1, got {_show(value)}",
                                  field=key)
        return round(float(value), 4)
    if key in _TIME_FIELDS:
        return normalize_timestamp(value, key)
    if key == "related":
        return _related(value)
    if key == "origin":
        return check_origin(value)
    if key == "retrievals":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIEVALS:
            raise InvalidMetadata(f"retrievals must be an integer from 0 to {MAX_RETRIEVALS}, "
                                  f"got {_show(value)}", field=key)
        return value
    if key in _TEXT_FIELDS:
        text = _safe_scalar_text(value)
        if text is None:
            raise InvalidMetadata(f"{key} must be text, got {_show(value)}", field=key)
        value = str(value).strip()
        if _CONTROL.search(value):
            raise InvalidMetadata(f"{key} contains control characters", field=key)
        if has_surrogate(value):
            raise InvalidMetadata(f"{key} contains a lone surrogate", field=key)
        if key == "context" and len(value) > MAX_CONTEXT_CHARS:
            raise InvalidMetadata(f"context is {len(value)} characters; the limit is "
                                  f"{MAX_CONTEXT_CHARS}", field=key,
                                  hint="Say in a line what the memory answers; link the "
                                       "memory it continues with 'follows' instead.")
        if key == "follows" and (" " in value or len(value) > MAX_TITLE_CHARS):
            raise InvalidMetadata(f"follows must be the id of a memory, got {_show(value)}",
                                  field=key)
        return value
    # Unknown fields and ``id``: any YAML value, as long as it can be written and read back.
    issues: set[str] = set()
    _sanitize(value, 0, issues)
    if issues:
        raise InvalidMetadata(f"{key} {sorted(issues)[0]}", field=key)
    return value


def clean_metadata(meta: Mapping[str, Any], *, tiers: Iterable[str] = DEFAULT_TIERS) -> dict[str, Any]:
    """Validate and normalise known fields; unknown keys pass through unchanged.

    Raises :class:`InvalidMetadata` (or :class:`InvalidTitle`) naming the field on
    any bad value, never another exception.  Empty optional values are dropped
    so files stay clean.
    """
    tiers = tuple(tiers)
    out: dict[str, Any] = {}
    for key, value in meta.items():
        key = _check_key(key)
        if _empty(value):
            continue
        value = _clean_field(key, value, tiers)
        if key in _LIST_FIELDS or key == "related":
            if not value:
                continue
        out[key] = value
    return out


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list)) and len(value) == 0)


@dataclass(frozen=True)
class MetadataProblem:
    """One bad value in a file's frontmatter, and what it was read as instead."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def sanitize_metadata(meta: Mapping[str, Any], *, tiers: Iterable[str] = DEFAULT_TIERS
                      ) -> tuple[dict[str, Any], list[MetadataProblem]]:
    """A file's frontmatter made safe to read, and the problems found on the way.

    Never raises: a value :func:`clean_metadata` would refuse is recorded as a
    problem and replaced by a safe default (dropped, so the usual default
    applies; a list keeps its usable text entries; text loses its lone
    surrogates and control characters).  Valid values are kept as written,
    except list fields, which become lists of distinct strings.  The result
    passes :func:`clean_metadata`, so every gitmem command can work with it.
    """
    tiers = tuple(tiers)
    out: dict[str, Any] = {}
    problems: list[MetadataProblem] = []
    for raw_key, value in meta.items():
        key = safe_text(raw_key) if isinstance(raw_key, str) else _key_text(raw_key)
        if key != raw_key:
            problems.append(MetadataProblem(key, "field name is not valid text (read with U+FFFD)"))
        if not key.strip() or _CONTROL.search(key):
            problems.append(MetadataProblem(_show(key), "field name is empty or has control characters "
                                            "(field ignored)"))
            continue
        if key not in _KNOWN:
            issues: set[str] = set()
            out[key] = _sanitize(value, 0, issues)
            problems += [MetadataProblem(key, issue) for issue in sorted(issues)]
            continue
        if key == "id":
            if isinstance(value, str) and value.strip():
                if has_surrogate(value):
                    problems.append(MetadataProblem(key, "contains a lone surrogate (read with U+FFFD)"))
                out[key] = safe_text(value)
            elif value is not None:
                problems.append(MetadataProblem(key, f"must be text, got {_show(value)} "
                                                "(an id derived from the path is used)"))
            continue
        if _empty(value):
            if key in _LIST_FIELDS and value == []:
                out[key] = []
            continue
        try:
            cleaned = _clean_field(key, value, tiers)
        except InvalidInput as exc:
            problems.append(MetadataProblem(key, exc.message))
            fallback = _fallback(key, value)
            if fallback is not None:
                out[key] = fallback
            continue
        if key in _LIST_FIELDS or key in _INT_FIELDS or key == "related" \
                or isinstance(value, bool) or not isinstance(value, (str, int, float)):
            out[key] = cleaned   # lists of strings, integers (not "4"), text: what readers rely on
        else:
            out[key] = value     # as written (a date stays "2026-01-01")
    return out, problems


def _fallback(key: str, value: Any) -> Any:
    """What a field whose value :func:`clean_metadata` refused is read as (None: absent)."""
    if key == "origin":
        return "tool"   # an unreadable origin is trusted least, never read as a person's
    if key in _LIST_FIELDS:
        return _salvage_list(value, key) or None
    if key == "related":
        return _salvage_related(value) or None
    if key == "title" or key in _TEXT_FIELDS:
        text = _safe_scalar_text(value)
        if not text:
            return None
        if key == "title" and len(text) > MAX_TITLE_CHARS:
            text = text[: MAX_TITLE_CHARS - 1].rstrip() + "\u2026"
        if key == "context" and len(text) > MAX_CONTEXT_CHARS:
            text = text[: MAX_CONTEXT_CHARS - 1].rstrip() + "\u2026"
        if key == "follows" and (" " in text or len(text) > MAX_TITLE_CHARS):
            return None     # not an id: no link
        return text
    return None  # vocabularies, numbers, times: the default applies


_KNOWN = frozenset(FIELD_ORDER)


def ordered(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Known keys in :data:`FIELD_ORDER`, then unknown keys in their original order."""
    out = {k: meta[k] for k in FIELD_ORDER if k in meta}
    out.update((k, v) for k, v in meta.items() if k not in out)
    return out


def first_heading(body: str) -> str | None:
    """The text of the first Markdown heading in ``body``, if any."""
    match = _HEADING.search(body)
    if not match:
        return None
    text = match.group(1)
    return (text.rstrip(" \t#") or text[:1]).strip()


@dataclass
class Memory:
    """One memory as read from the vault (or from a past commit).

    ``meta`` holds the frontmatter as written (plus derived values for missing
    fields); ``body`` is the Markdown after the frontmatter, byte-exact.
    """

    path: str
    meta: dict[str, Any]
    body: str
    problems: list[str] = field(default_factory=list)  # e.g. unparseable frontmatter
    commit: str | None = None  # set on the object a write returns: the commit it made
    blob: str | None = field(default=None, repr=False)  # git blob id of the bytes read, when known

    @property
    def id(self) -> str:
        return str(self.meta["id"])

    @property
    def title(self) -> str:
        return str(self.meta["title"])

    @property
    def type(self) -> str:
        return str(self.meta.get("type", "memory"))

    @property
    def tier(self) -> str:
        return str(self.meta.get("tier", ""))

    @property
    def status(self) -> str:
        return str(self.meta.get("status", "active"))

    @property
    def tags(self) -> list[str]:
        return list(self.meta.get("tags", []))

    @property
    def importance(self) -> int:
        return int(self.meta.get("importance", 3))

    @property
    def confidence(self) -> int:
        return int(self.meta.get("confidence", 3))

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def to_dict(self, *, body: bool = True) -> dict[str, Any]:
        """JSON-serialisable form (frontmatter fields, path, and body)."""
        out: dict[str, Any] = {"id": self.id, "path": self.path}
        out.update((k, v) for k, v in self.meta.items() if k != "id")
        out.setdefault("importance", self.importance)
        out.setdefault("confidence", self.confidence)
        if body:
            out["body"] = self.body
        if self.problems:
            out["problems"] = list(self.problems)
        if self.commit:
            out["commit"] = self.commit
        return out


def derive(path: str, meta: Mapping[str, Any], body: str, *, tiers: Iterable[str] = DEFAULT_TIERS,
           default_time: str | None = None,
           problems: list[MetadataProblem] | None = None,
           inherited_id: str | None = None, outside_notes: str | None = None) -> dict[str, Any]:
    """Fill in missing fields of a memory read from ``path`` (nothing is written).

    id from the path, title from the first heading or the file name, tier from
    the folder, type ``memory``, status ``active``.  Bad values are read safely
    (see :func:`sanitize_metadata`), so one hostile file cannot stop a command;
    what was wrong is appended to ``problems`` when it is given (``gitmem doctor``).
    ``inherited_id`` is the id of a file without one that a person renamed (the id
    it had under its former name, recorded by the catalog); it wins over the path's.
    ``outside_notes``: the tier of a note outside the tier folders (an adopted vault).
    """
    tiers = tuple(tiers)
    out, found = sanitize_metadata(meta, tiers=tiers)
    if problems is not None:
        problems.extend(found)
    if not isinstance(out.get("id"), str) or not out["id"].strip():
        out["id"] = inherited_id or path_id(path)
    if not isinstance(out.get("title"), str) or not out["title"].strip():
        # The file name as written ("Daily 2026-11-24"), as Obsidian shows it.
        stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        title = first_heading(body) or stem.strip() or stem
        # A derived title is written when gitmem rewrites the file: it must be a valid one.
        out["title"] = _fallback("title", title) or "Untitled"
    top = path.split("/", 1)[0]
    if top in tiers and "/" in path:
        out["tier"] = top  # the folder is the truth; frontmatter mirrors it
    elif outside_notes is not None:
        out["tier"] = outside_notes  # a person's own folders, in an adopted vault
    out.setdefault("type", "memory")
    out.setdefault("status", "active")
    if default_time:
        out.setdefault("created", default_time)
        out.setdefault("updated", out["created"])
    return ordered(out)
