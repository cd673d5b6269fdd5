"""What a memory is: field order, vocabularies, validation and the Memory object.

A memory is one Markdown file.  Its frontmatter holds the fields below, always
written in :data:`FIELD_ORDER` so diffs stay small; keys a person added that
gitmem does not know are kept after them, untouched.  Files written by a person
may lack any field: :func:`derive` fills in what is missing from the path and
the body when reading, without writing anything back.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from .errors import InvalidMetadata, InvalidTitle

__all__ = [
    "FIELD_ORDER", "MEMORY_TYPES", "STATUSES", "SCOPES", "RELATIONS", "DEFAULT_TIERS",
    "Memory", "new_id", "path_id", "iso_now", "normalize_timestamp", "clean_metadata",
    "derive", "validate_title",
]

#: Frontmatter keys in the order gitmem writes them.
FIELD_ORDER: tuple[str, ...] = (
    "id", "title", "type", "tier", "status", "tags", "aliases", "created", "updated",
    "expires", "importance", "confidence", "strength", "scope", "agent", "entities",
    "related", "supersedes", "superseded_by", "summary", "source",
    "archived_from", "archived_into", "merged_into", "external_write_id", "retrievals",
    "reinforced",
)

#: Every seed's type vocabulary: 004 (memory/goal/rule), 002 (Tulving types), 003.
MEMORY_TYPES: tuple[str, ...] = (
    "memory", "goal", "rule",
    "episodic", "semantic", "procedural", "prospective",
    "fact", "skill", "preference", "constraint", "task", "correction",
)
#: ``conflict``: a copy a sync made when both sides changed a memory differently (see treemerge).
STATUSES: tuple[str, ...] = ("active", "superseded", "archived", "deleted", "conflict")
SCOPES: tuple[str, ...] = ("thread", "user", "persona", "organization")
RELATIONS: tuple[str, ...] = ("derived_from", "contradicts", "refines", "part_of", "supersedes")
DEFAULT_TIERS: tuple[str, ...] = ("short_term", "mid_term", "long_term", "archive")

_LIST_FIELDS = ("tags", "aliases", "entities")
_INT_FIELDS = ("importance", "confidence")
_TIME_FIELDS = ("created", "updated", "expires", "reinforced")
_TEXT_FIELDS = ("title", "summary", "source", "agent", "supersedes", "superseded_by",
                "archived_from", "archived_into", "merged_into", "external_write_id")
MAX_TITLE_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
# A stable namespace so an id derived from a path is the same on every machine.
_PATH_NAMESPACE = uuid.UUID("6f1c3a52-2f0e-4b8e-9a55-6d1b0c4e7a21")


def new_id() -> str:
    """A fresh memory id (a random UUID4 string, usable as seed 003's UUID)."""
    return str(uuid.uuid4())


def path_id(relpath: str) -> str:
    """The id of a file that has none in its frontmatter: a UUID5 of its path."""
    return str(uuid.uuid5(_PATH_NAMESPACE, relpath))


def iso_now(now: datetime | None = None) -> str:
    """ISO 8601 UTC with a ``Z`` suffix, second precision."""
    now = now or datetime.now(timezone.utc)
    return now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def normalize_timestamp(value: Any, field_name: str = "timestamp") -> str:
    """Accept a datetime, a date or an ISO-8601 string; return ISO 8601 UTC ``...Z``."""
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return iso_now(dt)
    if hasattr(value, "isoformat") and not isinstance(value, str):  # a date
        return f"{value.isoformat()}T00:00:00Z"
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return f"{text}T00:00:00Z"
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
        except ValueError:
            pass
        else:
            return normalize_timestamp(dt)
    raise InvalidMetadata(f"{field_name} must be an ISO 8601 date or time, got {value!r}",
                          hint="Example: 2026-11-21T09:30:00Z")


def validate_title(title: Any) -> str:
    """Return the title stripped, or raise :class:`InvalidTitle`."""
    if not isinstance(title, str):
        raise InvalidTitle(f"title must be text, got {type(title).__name__}")
    text = title.strip()
    if not text:
        raise InvalidTitle("title is empty", hint="Give the memory a short descriptive title.")
    if _CONTROL.search(text):
        raise InvalidTitle("title contains control characters (newline, tab, NUL ...)")
    if len(text) > MAX_TITLE_CHARS:
        raise InvalidTitle(f"title is {len(text)} characters; the limit is {MAX_TITLE_CHARS}",
                           hint="Put the detail in the body or the summary.")
    return text


def _str_list(name: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise InvalidMetadata(f"{name} must be a list of strings, got {type(value).__name__}")
    out: list[str] = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise InvalidMetadata(f"{name} entries must be strings, got {item!r}")
        text = str(item).strip()
        if _CONTROL.search(text):
            raise InvalidMetadata(f"{name} entry {text!r} contains control characters")
        if text and text not in out:
            out.append(text)
    return out


def _bounded_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidMetadata(f"{name} must be an integer from 1 to 5, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise InvalidMetadata(f"{name} must be an integer from 1 to 5, got {value!r}") from None
    if not 1 <= number <= 5:
        raise InvalidMetadata(f"{name} must be from 1 to 5, got {number}")
    return number


def _related(value: Any) -> list[dict[str, str]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidMetadata("related must be a list of {id, relation} entries")
    out: list[dict[str, str]] = []
    for item in value:
        if isinstance(item, str):
            item = {"id": item, "relation": "refines"}
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
            raise InvalidMetadata(f"related entry {item!r} needs an 'id'")
        relation = item.get("relation", "refines")
        if relation not in RELATIONS:
            raise InvalidMetadata(f"unknown relation {relation!r}",
                                  hint=f"Use one of: {', '.join(RELATIONS)}")
        entry = {"id": item["id"].strip(), "relation": relation}
        if entry not in out:
            out.append(entry)
    return out


def clean_metadata(meta: Mapping[str, Any], *, tiers: Iterable[str] = DEFAULT_TIERS) -> dict[str, Any]:
    """Validate and normalise known fields; unknown keys pass through unchanged.

    Raises :class:`InvalidMetadata` naming the field on any bad value.  Empty
    optional values are dropped so files stay clean.
    """
    tiers = tuple(tiers)
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if value is None or value == [] or value == "":
            continue
        if key == "title":
            value = validate_title(value)
        elif key == "type":
            if value not in MEMORY_TYPES:
                raise InvalidMetadata(f"unknown type {value!r}",
                                      hint=f"Use one of: {', '.join(MEMORY_TYPES)}")
        elif key == "tier":
            if value not in tiers:
                raise InvalidMetadata(f"unknown tier {value!r}", hint=f"Use one of: {', '.join(tiers)}")
        elif key == "status":
            if value not in STATUSES:
                raise InvalidMetadata(f"unknown status {value!r}",
                                      hint=f"Use one of: {', '.join(STATUSES)}")
        elif key == "scope":
            if value not in SCOPES:
                raise InvalidMetadata(f"unknown scope {value!r}", hint=f"Use one of: {', '.join(SCOPES)}")
        elif key in _LIST_FIELDS:
            value = _str_list(key, value)
            if not value:
                continue
        elif key in _INT_FIELDS:
            value = _bounded_int(key, value)
        elif key == "strength":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise InvalidMetadata(f"strength must be a number from 0 to 1, got {value!r}")
            value = round(float(value), 4)
        elif key in _TIME_FIELDS:
            value = normalize_timestamp(value, key)
        elif key == "related":
            value = _related(value)
            if not value:
                continue
        elif key == "retrievals":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidMetadata(f"retrievals must be a non-negative integer, got {value!r}")
        elif key in _TEXT_FIELDS:
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise InvalidMetadata(f"{key} must be text, got {value!r}")
            value = str(value).strip()
            if _CONTROL.search(value):
                raise InvalidMetadata(f"{key} contains control characters")
        out[key] = value
    return out


def ordered(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Known keys in :data:`FIELD_ORDER`, then unknown keys in their original order."""
    out = {k: meta[k] for k in FIELD_ORDER if k in meta}
    out.update((k, v) for k, v in meta.items() if k not in out)
    return out


def first_heading(body: str) -> str | None:
    """The text of the first Markdown heading in ``body``, if any."""
    match = _HEADING.search(body)
    return match.group(1).strip() if match else None


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
           default_time: str | None = None) -> dict[str, Any]:
    """Fill in missing fields of a memory read from ``path`` (nothing is written).

    id from the path, title from the first heading or the file name, tier from
    the folder, type ``memory``, status ``active``.
    """
    out = dict(meta)
    if not isinstance(out.get("id"), str) or not out["id"].strip():
        out["id"] = path_id(path)
    if isinstance(out.get("title"), (int, float)) and not isinstance(out["title"], bool):
        out["title"] = str(out["title"])
    if not isinstance(out.get("title"), str) or not out["title"].strip():
        stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        out["title"] = first_heading(body) or stem.replace("-", " ").replace("_", " ").strip() or stem
    top = path.split("/", 1)[0]
    if top in tuple(tiers):
        out["tier"] = top  # the folder is the truth; frontmatter mirrors it
    out.setdefault("type", "memory")
    out.setdefault("status", "active")
    if default_time:
        out.setdefault("created", default_time)
        out.setdefault("updated", out["created"])
    return ordered(out)
