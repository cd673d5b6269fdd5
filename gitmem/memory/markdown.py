"""Reading and writing memory files: YAML frontmatter + Markdown body.

Reading is defensive: frontmatter is size-bounded, aliases are
capped (no alias bombs), YAML 1.1 surprises are switched off (``no`` stays the
string "no", ``12:30`` stays "12:30", timestamps stay strings), a UTF-8 BOM is
tolerated, and a file that merely *starts* with a ``---`` horizontal rule is not
mistaken for frontmatter.  A file whose frontmatter cannot be parsed is still a
readable memory: its whole text becomes the body and the problem is reported.

Writing is stable: known keys in a fixed order, ISO-8601 strings, no key
sorting, and keys gitmem does not know are re-emitted *verbatim* (their
original YAML text, comments included) whenever that can be done safely.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import frontmatter
import yaml

from ..errors import InvalidContent, InvalidFrontmatter, InvalidMetadata
from .schema import FIELD_ORDER, has_surrogate, ordered, safe_value

__all__ = ["ParsedFile", "parse_text", "decode", "render", "MAX_FRONTMATTER_BYTES", "inline_tags",
           "wikilinks", "memory_links", "link_key", "wikilink_target"]

MAX_FRONTMATTER_BYTES = 64 * 1024
MAX_ALIASES = 20


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML-1.2-like scalars and an alias budget."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases = getattr(self, "_aliases", 0) + 1
            if self._aliases > MAX_ALIASES:
                raise InvalidFrontmatter(
                    f"frontmatter uses more than {MAX_ALIASES} YAML aliases (possible alias bomb)")
        return super().compose_node(parent, index)


# Rebuild the implicit resolvers: keep null, true/false, ints, floats; drop the
# YAML 1.1 booleans (yes/no/on/off), sexagesimal numbers and timestamps.
_Loader.yaml_implicit_resolvers = {}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$"), list("-+0123456789."))
_Loader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"),
                              ["~", "n", "N", ""])


# libyaml's parser (about 8x faster: it matters when thousands of notes are read at
# once) with the same scalar rules.  It is used only for frontmatter without anchors,
# aliases or tags and without tabs, control or line-separator characters, where it and
# the pure-Python parser agree; everything else, and every error message, comes from
# :class:`_Loader`, whose alias budget stops alias bombs; so does anything that is not a
# mapping.
def _libyaml_loader() -> type | None:
    if not getattr(yaml, "__with_libyaml__", False):
        return None

    class FastLoader(yaml.CSafeLoader):
        """CSafeLoader with :class:`_Loader`'s scalar rules."""

    FastLoader.yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers
    return FastLoader


_CLoader = _libyaml_loader()
_NOT_FOR_C = re.compile("[&*!\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff]")


class _Dumper(yaml.SafeDumper):
    """SafeDumper that never emits aliases and quotes YAML-1.1-ambiguous strings."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Multi-line text reads best as a literal block; everything else is left to
    # SafeDumper, which already quotes strings a YAML 1.1 reader would coerce.
    # A "keep" block (text ending in blank lines) makes PyYAML end the document
    # with "...", which breaks the frontmatter; NEL / LS / PS are line breaks to
    # YAML that PyYAML writes raw unless the string is double-quoted (fuzz finds).
    style: str | None = None
    if any(c in value for c in "\x85\u2028\u2029"):
        style = '"'
    elif "\n" in value and value.strip() and not value.endswith("\n\n") and "\r" not in value:
        style = "|"
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


class GitmemYAMLHandler(frontmatter.YAMLHandler):
    """python-frontmatter handler with gitmem's strict boundary and bounded loader."""

    # Exactly three dashes on their own line: `---- ` rules are not boundaries.
    FM_BOUNDARY = re.compile(r"^---[ \t]*\r?$", re.MULTILINE)

    def detect(self, text: str) -> bool:
        return bool(re.match(r"---[ \t]*\r?\n", text))

    def load(self, fm: str, **kwargs: object) -> Any:
        if len(fm.encode("utf-8")) > MAX_FRONTMATTER_BYTES:
            raise InvalidFrontmatter(f"frontmatter is larger than {MAX_FRONTMATTER_BYTES // 1024} KiB")
        if _CLoader is not None and not _NOT_FOR_C.search(fm):
            try:
                meta = yaml.load(fm, Loader=_CLoader)  # noqa: S506 - a CSafeLoader
            except (yaml.YAMLError, RecursionError, ValueError):
                meta = None  # the pure-Python parser below says what is wrong, as it always has
            if isinstance(meta, dict):  # (the parsers differ on some broken non-mappings)
                return meta
        try:
            return yaml.load(fm, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
        except InvalidFrontmatter:
            raise
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            # fm starts with the newline after the opening ---, so its line N is file line N + 1
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise InvalidFrontmatter(f"frontmatter is not valid YAML{where}: {exc.problem}") from None
        except (yaml.YAMLError, RecursionError, ValueError) as exc:
            raise InvalidFrontmatter(f"frontmatter is not valid YAML: {exc}") from None


_HANDLER = GitmemYAMLHandler()


@dataclass
class ParsedFile:
    """The parts of a memory file.

    ``raw_blocks`` maps each top-level frontmatter key to its original YAML
    text so unknown keys can be written back exactly as the person wrote them.
    ``problem`` is set (and ``meta`` empty, ``body`` the whole text) when the
    frontmatter could not be parsed.
    """

    meta: dict[str, Any]
    body: str
    has_frontmatter: bool
    raw_blocks: dict[str, str] = field(default_factory=dict)
    problem: str | None = None


def decode(data: bytes) -> str:
    """Bytes of a memory file to text: UTF-8 (BOM tolerated), no NUL bytes."""
    if b"\x00" in data:
        raise InvalidContent("file contains NUL bytes; it is not a text memory")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidContent(f"file is not UTF-8 text (byte {exc.start})",
                             hint="Re-save the file as UTF-8.") from None
    return text[1:] if text.startswith("\ufeff") else text


def _split_blocks(fm: str) -> dict[str, str]:
    """Top-level ``key:`` blocks of a YAML mapping, as raw text (best effort)."""
    blocks: dict[str, str] = {}
    key: str | None = None
    lines: list[str] = []
    for line in fm.splitlines(keepends=True):
        match = re.match(r"([A-Za-z0-9_][^:#\s]*)[ \t]*:(?:[ \t]|$)", line)
        if match:
            if key is not None:
                blocks[key] = "".join(lines)
            key, lines = match.group(1), [line]
        elif key is not None:
            lines.append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            return {}  # content before the first key: not a plain block mapping
    if key is not None:
        blocks[key] = "".join(lines)
    return blocks


def parse_text(text: str, *, strict: bool = False) -> ParsedFile:
    """Split and parse a memory file's text.

    With ``strict`` a frontmatter problem raises :class:`InvalidFrontmatter`;
    otherwise it is recorded in ``problem`` and the whole text is the body.
    """
    if not _HANDLER.detect(text):
        return ParsedFile({}, text, False)
    parts = _HANDLER.FM_BOUNDARY.split(text, 2)
    if len(parts) < 3:
        problem = "frontmatter starts with '---' but has no closing '---' line"
        if strict:
            raise InvalidFrontmatter(problem)
        return ParsedFile({}, text, False, problem=problem)
    fm, rest = parts[1], parts[2]
    try:
        meta = _HANDLER.load(fm)
    except InvalidFrontmatter as exc:
        if strict:
            raise
        return ParsedFile({}, text, False, problem=exc.message)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) for k in meta):
        # A leading horizontal rule followed by prose: there is no frontmatter.
        return ParsedFile({}, text, False)
    body = rest[1:] if rest.startswith("\n") else rest[2:] if rest.startswith("\r\n") else rest
    blocks = _split_blocks(fm)
    if set(blocks) != set(meta):
        blocks = {}
    return ParsedFile(meta, body, True, raw_blocks=blocks)


def _dump(key: str, value: Any) -> str:
    quick = _quick_dump(key, value, flow=False)
    if quick is not None:
        return quick
    return yaml.dump({key: value}, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=False, width=100)


def _dump_list(key: str, value: list[Any]) -> str:
    quick = _quick_dump(key, value, flow=True)
    if quick is not None:
        return quick
    return yaml.dump({key: value}, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=None, width=10_000)


# What PyYAML's emitter writes for the commonest fields, without running it (it costs
# about 0.15 ms a field; an import writes tens of thousands).  Only shapes whose output
# is certain are written here: a name-like key, and null, a bool, an int, a string of
# letters, digits and a few harmless signs (or an ISO timestamp), or a list of those.
# Anything else goes to PyYAML.  tests/test_fuzz.py compares the two.
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SIGNS = frozenset(" _./()+-'")
_RESOLVE = _Dumper(io.StringIO()).resolve  # how the emitter decides whether a string needs quotes
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")


def _quick_scalar(value: Any, room: int) -> str | None:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if type(value) is not str or not 0 < len(value) <= room:
        return None
    if _TIMESTAMP.fullmatch(value):
        return f"'{value}'"
    if not (value[0].isalnum() and (value[-1].isalnum() or value[-1] in ".)")) or "  " in value \
            or not all(c.isalnum() or c in _SIGNS for c in value) \
            or not all(ord(c) < 0x10000 and (ord(c) < 0x80 or c.isalnum()) for c in value):
        return None
    if _RESOLVE(yaml.ScalarNode, value, (True, False)) == "tag:yaml.org,2002:str":
        return value
    return None if "'" in value else f"'{value}'"


def _quick_dump(key: str, value: Any, *, flow: bool) -> str | None:
    if not _KEY.fullmatch(key) or len(key) > 40 or _quick_scalar(key, 40) != key:
        return None
    if isinstance(value, list):
        if not value:
            return f"{key}: []\n"
        quoted = [_quick_scalar(v, 60) for v in value]
        items = [i for i in quoted if i is not None]
        if len(items) < len(quoted) or flow and any("," in i for i in items):
            return None
        return f"{key}: [{', '.join(items)}]\n" if flow else f"{key}:\n" + "".join(f"- {i}\n" for i in items)
    scalar = _quick_scalar(value, 60)
    return None if scalar is None else f"{key}: {scalar}\n"


def render(meta: Mapping[str, Any], body: str, raw_blocks: Mapping[str, str] | None = None) -> str:
    """Serialise a memory: ``---`` frontmatter in stable order, then the body.

    Unknown keys whose value is unchanged since parsing are written from
    ``raw_blocks`` verbatim.  Refuses (:class:`InvalidContent`,
    :class:`InvalidMetadata`) what could not be read back: a body or value
    holding a lone surrogate, frontmatter over :data:`MAX_FRONTMATTER_BYTES`.
    """
    if has_surrogate(body):
        raise InvalidContent("content contains a lone surrogate (not valid Unicode text)",
                             hint="Pass the content as valid UTF-8 text.")
    raw_blocks = raw_blocks or {}
    lines: list[str] = []
    for key, value in ordered(meta).items():
        raw = raw_blocks.get(key)
        if key not in FIELD_ORDER and raw is not None and _same_value(raw, key, value):
            lines.append(raw if raw.endswith("\n") else raw + "\n")
        elif key in ("tags", "aliases", "entities"):
            lines.append(_dump_list(key, list(value)))
        else:
            lines.append(_dump(key, value))
    head = "".join(lines)
    try:
        size = len(head.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidMetadata("a frontmatter value contains a lone surrogate (not valid Unicode text)"
                              ) from None
    if size > MAX_FRONTMATTER_BYTES:
        # The reader refuses frontmatter this large: the file would read back without it.
        raise InvalidMetadata(f"frontmatter would be {size:,} bytes; the limit is "
                              f"{MAX_FRONTMATTER_BYTES:,}", hint="Use fewer or shorter tags and "
                              "fields; put long text in the body.")
    return f"---\n{head}---\n{body}"


def _same_value(raw: str, key: str, value: Any) -> bool:
    # Compared as read (safe_value): a person's field holding a lone surrogate or .nan is
    # read sanitised, and is still written back as the person wrote it.
    try:
        return safe_value(yaml.load(raw, Loader=_Loader)) == {key: value}  # noqa: S506
    except (yaml.YAMLError, InvalidFrontmatter, ValueError, RecursionError):
        return False


# No part may hold "[": every match attempt then stops at the next "[", so a body of
# many "[[" costs linear time (the former pattern took 10 s on 16 KB of "[[").
_WIKILINK = re.compile(r"\[\[([^\[\]|#\n]+)(?:#[^\[\]|\n]*)?(?:\|[^\[\]\n]*)?\]\]")
#: Frontmatter fields that point at another memory's id, and the relation each names.
LINK_FIELDS = ("supersedes", "superseded_by", "archived_into", "merged_into")


def wikilinks(body: str) -> list[str]:
    """Targets of Obsidian ``[[links]]`` in a Markdown body, in order, unique: the note
    name or path as written, without a ``|label``, ``#heading`` or ``#^block`` part."""
    return list(dict.fromkeys(m.group(1).strip() for m in _WIKILINK.finditer(body)))


def wikilink_target(text: str) -> str:
    """The note a reference names when written as an Obsidian link: ``[[x|label]]``,
    ``x#heading`` and ``x#^block`` name ``x``; anything else is returned stripped."""
    ref = text.strip()
    if ref.startswith("[[") and ref.endswith("]]"):
        ref = ref[2:-2]
    for mark in ("|", "#"):
        head = ref.split(mark, 1)[0].strip()
        if head:
            ref = head
    return ref.strip()


def link_key(target: str) -> str:
    """How a link target is compared (Obsidian resolves links case-insensitively): folded
    case, ``/`` separators, no leading ``/`` or ``./``, no ``.md`` suffix."""
    key = target.strip().replace("\\", "/").casefold()
    while key.startswith(("/", "./")):
        key = key[1:] if key.startswith("/") else key[2:]
    return key[:-3] if key.endswith(".md") else key


# Obsidian's inline tags: "#" at the start of a line or after whitespace, then letters,
# digits, "_", "-" or "/" with at least one that is not a digit ("#123" is no tag).  A
# heading ("# Title") has a space after its "#"; a URL's "#fragment" follows a non-space.
_INLINE_TAG = re.compile(r"(?<!\S)#([\w/-]+)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_BACKTICKS = re.compile(r"`+")
MAX_INLINE_TAGS = 1000


def _without_code_spans(line: str) -> str:
    """``line`` with its `code spans` blanked (linear: each backtick run is looked at once)."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(line)]
    if len(runs) < 2:
        return line
    later: dict[int, list[int]] = {}
    for i in range(len(runs) - 1, -1, -1):  # run length -> indexes, nearest last
        later.setdefault(runs[i][1] - runs[i][0], []).append(i)
    out, pos, i = [], 0, 0
    while i < len(runs):
        start, end = runs[i]
        same = later[end - start]
        while same and same[-1] <= i:
            same.pop()
        if same:
            close = same[-1]
            out.append(line[pos:start] + " ")
            pos, i = runs[close][1], close + 1
        else:
            i += 1
    out.append(line[pos:])
    return "".join(out)


def inline_tags(body: str) -> list[str]:
    """Obsidian ``#tags`` written in a Markdown body, in order, unique (case kept),
    without the ``#``; none are taken from fenced code blocks, code spans or
    ``%%comments%%``.  At most :data:`MAX_INLINE_TAGS`."""
    if "#" not in body:
        return []
    found: dict[str, None] = {}
    fence: str | None = None
    for line in body.splitlines():
        match = _FENCE.match(line)
        if fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                    and not match.group(2).strip():
                fence = None
            continue
        if match and not (match.group(1)[0] == "`" and "`" in match.group(2)):
            fence = match.group(1)
            continue
        if "#" not in line:
            continue
        if "%%" in line:
            line = re.sub(r"%%.*?(?:%%|$)", " ", line)
        for tag in _INLINE_TAG.findall(_without_code_spans(line)):
            if tag and not tag.isdigit():
                found.setdefault(tag, None)
                if len(found) >= MAX_INLINE_TAGS:
                    return list(found)
    return list(found)


def memory_links(meta: Mapping[str, Any], body: str) -> list[tuple[str, str]]:
    """Every outgoing link of a memory as (target, relation): ``related`` entries
    (target = id), the id-valued fields of :data:`LINK_FIELDS`, and body
    ``[[wikilinks]]`` (target = the note name as written, relation ``wikilink``)."""
    out: list[tuple[str, str]] = []
    related = meta.get("related")
    for item in related if isinstance(related, list) else []:
        if isinstance(item, dict) and item.get("id"):
            out.append((str(item["id"]), str(item.get("relation") or "related")))
    for key in LINK_FIELDS:
        value = meta.get(key)
        for target in value if isinstance(value, list) else [value]:
            if target not in (None, ""):
                out.append((str(target), key))
    out += [(target, "wikilink") for target in wikilinks(body)]
    return list(dict.fromkeys(out))


def split_body(text: str) -> str:
    """The Markdown after a leading ``---`` frontmatter block, without parsing the YAML
    (a cheap read for comparisons; :func:`parse_text` is the real reader)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.startswith("---"):
        return text
    end = text.find("\n---", 3)
    if end == -1:
        return text
    after = text.find("\n", end + 4)
    return "" if after == -1 else text[after + 1:]
