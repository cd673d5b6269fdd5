"""Readers of what other tools keep as memory, turned into :class:`ImportItem` objects.

Each reader takes the SOURCE a user names (a file, a folder, or for exports a
``.zip``) and returns one item per memory to be, with a stable ``source`` key
(``chatgpt:<conversation id>``, ``mcp-memory:<entity name>``,
``claude-code:<file>#<section>``, ``markdown:<relative path>`` ...) by which a
later import of the same source finds it again.  The keys of formats that read
files of a folder (:attr:`FormatSpec.folder_keys`) name the file inside the
folder; :func:`in_folder` puts the folder in front, so two projects' ``CLAUDE.md``
(or two note folders' ``Welcome.md``) are two memories.  Readers only read:
placing, linking, comparing and committing is :mod:`gitmem.exchange.importing`'s
work.

Bad input is refused with an :class:`~gitmem.errors.InvalidInput` whose code is
``invalid_import`` (truncated or invalid JSON, a file that is not text),
``wrong_import_format`` (valid data of another kind, with a hint naming the
format it looks like) or ``import_too_large`` (over one of the import's limits),
and a missing file with :class:`~gitmem.errors.NotFound`.

What a reader reads and holds is bounded: every file it reads, it reads through
:mod:`gitmem.exchange.import_sources` (:class:`ImportLimits`, at most
``max_bytes`` of text and ``max_objects`` JSON objects and records).  A source
over a limit is refused before anything is written.

The folder walk of ``gitmem init --from`` lives here too (:func:`markdown_notes`,
:func:`notes_to_copy`), so both ways of bringing Markdown notes in read the same files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import safefs
from ..config import CONFIG_NAME
from ..errors import GitmemError, InvalidInput, NotFound
from ..memory.paths import MEMORY_MD, check_relpath, is_hidden_part, slugify
from .import_sources import (
    INVALID_IMPORT,
    ImportLimits,
    ReadBudget,
    bad_import,
    load_json,
    read_bounded,
    read_member,
    text_of,
)

__all__ = ["ImportItem", "FormatSpec", "FORMATS", "markdown_notes", "notes_to_copy", "in_folder", "split_sections",
           "in_code", "guess_format", "INVALID_IMPORT", "WRONG_FORMAT", "MAX_MESSAGE_CHARS", "MAX_EXTRACT_CHARS",
           "VAULT_SKIPPED"]

#: Error code of an import source holding another kind of data than the format named.
WRONG_FORMAT = "wrong_import_format"
#: A conversation's memory holds at most this much of one message ...
MAX_MESSAGE_CHARS = 2000
#: ... and at most this much of the conversation (the rest is counted, not copied).
MAX_EXTRACT_CHARS = 16000
_TITLE_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass
class ImportItem:
    """One memory an import would create or update.

    ``source`` is the stable key stored in the memory's ``source`` field;
    ``names`` are what ``[[links]]`` of other items of the same import may call
    it; ``related`` names other items by their source key; ``tier`` is a tier
    the source itself places it in (a note in a tier folder); ``meta`` holds
    other frontmatter fields to keep; ``skip`` says why nothing is imported.
    ``older_source`` is the key gitmem versions before :func:`in_folder` gave the
    item (without its folder), by which an import finds what they imported.
    """

    source: str
    title: str
    body: str = ""
    type: str = "memory"
    tags: list[str] = field(default_factory=list)
    created: str | None = None
    updated: str | None = None
    summary: str | None = None
    entities: list[str] = field(default_factory=list)
    related: list[tuple[str, str]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    tier: str | None = None
    skip: str | None = None
    older_source: str | None = None

    def __post_init__(self) -> None:
        # Exports are JSON: "\ud800" escapes decode to lone surrogates, which no file
        # can hold; they (and NUL) become U+FFFD here, once, for every format.
        for name in ("source", "title", "body", "summary", "created", "updated"):
            setattr(self, name, _clean(getattr(self, name)))
        self.tags, self.entities, self.names = (_clean(self.tags), _clean(self.entities),
                                                _clean(self.names))
        self.related = _clean(self.related)
        self.meta = _clean(self.meta)


_UNWRITABLE = re.compile("[\ud800-\udfff\x00]")


def _clean(value: Any) -> Any:
    """``value`` with lone surrogates and NUL in its text replaced by U+FFFD."""
    if isinstance(value, str):
        return _UNWRITABLE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_clean(v) for v in value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class FormatSpec:
    """An import format: its reader, the tier its memories go to by default, and
    whether its ``[[links]]`` are resolved between the items of one import."""

    name: str
    read: Callable[[Path, Sequence[str], ImportLimits], list[ImportItem]]
    default_tier: str
    description: str
    links: bool = False
    #: Keys name files inside the source folder (see :func:`in_folder`).
    folder_keys: bool = False


def in_folder(items: list[ImportItem], source: Path) -> list[ImportItem]:
    """``items`` read from the folder ``source`` (a file source: its folder) with the
    folder in their keys: ``claude-code:CLAUDE.md#architecture`` becomes
    ``claude-code:~/code/atlas/CLAUDE.md#architecture`` (``~`` is the home folder, so
    one layout on two machines gives one key).  The key the item had before goes to
    ``older_source``."""
    folder = Path(os.path.realpath(source if source.is_dir() else source.parent))
    home = Path(os.path.realpath(Path.home()))
    place = f"~/{folder.relative_to(home).as_posix()}" if home in folder.parents else \
        "~" if folder == home else folder.as_posix()

    def key(old: str) -> str:
        kind, _, rest = old.partition(":")
        return f"{kind}:{place.rstrip('/')}/{rest}"
    for item in items:
        item.older_source, item.source = item.source, key(item.source)
        item.related = [(key(other), relation) for other, relation in item.related]
    return items


# ------------------------------------------------------------------ helpers
def _wrong(message: str, data: Any = None) -> InvalidInput:
    guess = guess_format(data) if data is not None else None
    hint = (f"It looks like a {guess} source: gitmem import {guess} SOURCE." if guess
            else "See 'gitmem import --help' for the formats and what each reads.")
    return InvalidInput(message, code=WRONG_FORMAT, hint=hint)


def guess_format(data: Any) -> str | None:
    """The import format parsed ``data`` (JSON, or a list of JSONL records) looks like."""
    first = data[0] if isinstance(data, list) and data else data
    if isinstance(data, dict) and isinstance(data.get("conversations"), list) and data["conversations"]:
        first = data["conversations"][0]
    if not isinstance(first, dict):
        return None
    if "mapping" in first:
        return "chatgpt"
    if "chat_messages" in first:
        return "claude"
    if first.get("type") in ("entity", "relation") or {"entityType", "relationType"} & set(first):
        return "mcp-memory"
    return None


def _iso(value: Any) -> str | None:
    """An epoch number or ISO text as ISO 8601 UTC (None when absent or unreadable)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            dt = datetime.fromtimestamp(float(value), tz=UTC)
        elif isinstance(value, str) and value.strip():
            dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
        else:
            return None
        return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        return None


def _one_line(text: Any, limit: int = _TITLE_CHARS) -> str:
    """``text`` as one clean line of at most ``limit`` characters ("" if none)."""
    if not isinstance(text, str):
        return ""
    line = " ".join(_CONTROL.sub(" ", text).split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "\u2026"


def _stable_key(*parts: Any) -> str:
    """A short stable key for an item whose source gives it no id."""
    return hashlib.sha1(json.dumps(parts, default=str).encode()).hexdigest()[:16]


# ------------------------------------------------------------------ markdown
#: Why a folder inside an import source is not read.
VAULT_SKIPPED = "a gitmem vault: its files are memories already, not notes to import"


def markdown_notes(source: Path, tiers: Sequence[str], other_tier: str | None = None, *,
                   skipped: list[tuple[str, str]] | None = None) -> Iterator[tuple[str, str]]:
    """The notes to import from ``source``, as (path in source, path the source gives
    it in a vault): Markdown files under its tier folders as they are, and, with
    ``other_tier``, every other Markdown file under that tier (keeping its folders).
    Hidden files and folders (``.git``, ``.obsidian``, ``.trash``), a top-level
    ``MEMORY.md`` (a generated index) and symbolic links (to files or folders) are
    skipped; so is every folder below ``source`` that is a gitmem vault (it holds
    ``.gitmem.yaml``: a vault inside a notes folder, or the importing vault itself
    when ``source`` is a folder above it), which goes to ``skipped`` as
    (folder, reason).  The vault paths are not checked (:func:`notes_to_copy` does)."""
    def notes(top: str) -> list[str]:
        if os.path.lexists(source / top / CONFIG_NAME):
            if skipped is not None:
                skipped.append((top, VAULT_SKIPPED))
            return []
        files = [rel for rel, _ in safefs.walk_files(source, top, skip_dir=is_hidden_part)]
        marked = sorted({rel.rpartition("/")[0] for rel in files if rel.rpartition("/")[2] == CONFIG_NAME})
        vaults = [v for v in marked if not any(v.startswith(f"{outer}/") for outer in marked)]  # outermost
        if skipped is not None:
            skipped.extend((folder, VAULT_SKIPPED) for folder in vaults)
        inside = tuple(f"{folder}/" for folder in vaults)
        return sorted(rel for rel in files if rel.endswith(".md") and not rel.startswith(inside)
                      and not any(is_hidden_part(p) for p in rel.split("/")))

    for tier in tiers:
        for rel in notes(tier):
            yield rel, rel
    if other_tier is None:
        return
    try:
        entries = sorted(os.scandir(source), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if name in tiers or is_hidden_part(name) or entry.is_symlink():
            continue
        if entry.is_dir(follow_symlinks=False):
            found = notes(name)
        elif entry.is_file(follow_symlinks=False) and name.endswith(".md") and name != MEMORY_MD:
            found = [name]
        else:
            continue
        for rel in found:
            yield rel, f"{other_tier}/{rel}"


def notes_to_copy(source: Path, tiers: Sequence[str], other_tier: str
                  ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """What ``gitmem init --from`` copies (:func:`markdown_notes`, each note at the path
    the source gives it), and what it leaves out, with why: (path in source, reason)
    for a vault folder and for a note whose path a vault cannot hold (``aux.md``, a
    name reserved on Windows ...)."""
    left_out: list[tuple[str, str]] = []
    plan = []
    for src_rel, vault_rel in markdown_notes(source, tiers, other_tier, skipped=left_out):
        try:
            plan.append((check_relpath(src_rel), check_relpath(vault_rel)))
        except GitmemError as exc:
            left_out.append((src_rel, exc.message))
    return plan, left_out


# Fields a note's frontmatter may carry that the import sets itself.
_SET_BY_IMPORT = ("id", "title", "type", "tier", "tags", "created", "updated", "source", "agent",
                  "summary", "entities", "related")


def _read_markdown(source: Path, tiers: Sequence[str], limits: ImportLimits) -> list[ImportItem]:
    from ..memory.markdown import decode, parse_text
    from ..memory.schema import MEMORY_TYPES, derive, sanitize_metadata
    if not source.is_dir():
        raise _wrong(f"{source} is not a folder; the markdown format imports a folder of notes")
    items = []
    left_out: list[tuple[str, str]] = []
    # A note's path in the source only names it (key, title, folder tags): the memory gets
    # a file name of its own, so names a vault could not hold (aux.md ...) import as well.
    budget = ReadBudget(limits)
    for src_rel, vault_rel in markdown_notes(source, tiers, tiers[0], skipped=left_out):
        key = f"markdown:{src_rel}"
        budget.count(1, str(source))
        data = read_bounded(source, src_rel, budget)  # over the import's limits: the whole import is refused
        if data is None:
            items.append(ImportItem(key, src_rel, skip="gone, or not a regular file, when it was read"))
            continue
        try:
            text = decode(data)
        except GitmemError as exc:
            items.append(ImportItem(key, src_rel, skip=f"not readable: {exc.message}"))
            continue
        parsed = parse_text(text)
        meta, _ = sanitize_metadata(parsed.meta, tiers=tuple(tiers))
        derived = derive(src_rel, parsed.meta, parsed.body, tiers=tuple(tiers))
        in_tier = src_rel == vault_rel
        folders = src_rel.split("/")[1 if in_tier else 0:-1]
        tags = [str(t) for t in meta.get("tags", [])]
        folder_tag = "/".join(filter(None, (slugify(p) for p in folders)))
        if folder_tag:
            tags.append(folder_tag)
        mtype = parsed.meta.get("type")
        if isinstance(mtype, str) and mtype not in MEMORY_TYPES and slugify(mtype) not in ("", "note"):
            tags.append(slugify(mtype))  # Basic Memory's entity types (Person ...) become tags
        mtime = _iso((source / src_rel).stat().st_mtime)
        stem = src_rel.rsplit("/", 1)[-1][:-3]
        aliases = [str(a) for a in meta.get("aliases", [])]
        items.append(ImportItem(
            key, str(derived["title"]), parsed.body, type=str(derived["type"]), tags=tags,
            created=_iso(meta.get("created")) or mtime, updated=_iso(meta.get("updated")) or mtime,
            summary=_one_line(meta.get("summary"), 1000) or None,
            entities=[str(e) for e in meta.get("entities", [])],
            names=[src_rel[:-3], stem, str(derived["title"]), *aliases],
            meta={k: v for k, v in meta.items() if k not in _SET_BY_IMPORT},
            tier=src_rel.split("/", 1)[0] if in_tier else None))
    items += [ImportItem(f"markdown:{folder}/", folder, skip=reason) for folder, reason in left_out]
    return items


# ---------------------------------------------------------------- mcp-memory
# The memory server's relation types are free text; gitmem's `related` has five.
_RELATION_WORDS = (("contradicts", ("contradict", "conflict", "disagree")),
                   ("part_of", ("part", "member", "belong", "within", "inside", "child")),
                   ("derived_from", ("derive", "based", "source", "from", "cite")),
                   ("refines", ("refine", "extend", "detail", "specialize", "specialise")))


def _relation(kind: str) -> str:
    text = kind.casefold()
    for relation, words in _RELATION_WORDS:
        if any(word in text for word in words):
            return relation
    return "refines"  # what gitmem reads an untyped related entry as


def _read_mcp_memory(source: Path, _tiers: Sequence[str], limits: ImportLimits) -> list[ImportItem]:
    budget = ReadBudget(limits)
    data, where = read_member(source, "memory.jsonl" if source.is_dir() else "", budget)
    text = text_of(data, where)
    del data
    hook = budget.object_hook(where)
    entities: dict[str, dict[str, Any]] = {}
    relations: list[tuple[str, str, str]] = []
    records: list[Any] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_hook=hook)
        except RecursionError:
            raise bad_import(f"{where} line {number} is nested too deeply to read") from None
        except json.JSONDecodeError as exc:
            if number == 1 and line.lstrip().startswith(("[", "{")) and not records:
                try:
                    whole = json.loads(text)
                except json.JSONDecodeError:
                    whole = None
                if whole is not None:
                    raise _wrong(f"{where} is one JSON document, not the memory server's JSON lines",
                                 whole) from None
            raise bad_import(f"{where} line {number} is not valid JSON ({exc.msg}, column {exc.colno})",
                       hint="The file may be truncated; each line must be one JSON object.") from None
        records.append(record)
        if not isinstance(record, dict):
            raise _wrong(f"{where} line {number} is not a JSON object", record)
        kind = record.get("type")
        if kind == "entity":
            name = record.get("name")
            if not isinstance(name, str) or not name.strip():
                raise bad_import(f"{where} line {number}: an entity needs a non-empty 'name'")
            observations = record.get("observations") or []
            if not isinstance(observations, list):
                raise bad_import(f"{where} line {number}: 'observations' must be a list of text")
            entry = entities.setdefault(name.strip(), {"types": [], "observations": []})
            if isinstance(record.get("entityType"), str) and record["entityType"].strip():
                entry["types"].append(record["entityType"].strip())
            entry["observations"] += [str(o) for o in observations if isinstance(o, (str, int, float))]
        elif kind == "relation":
            ends = [record.get(k) for k in ("from", "to", "relationType")]
            names = [v.strip() for v in ends if isinstance(v, str)]
            if len(names) < len(ends) or not all(names):
                raise bad_import(f"{where} line {number}: a relation needs 'from', 'to' and 'relationType'")
            relations.append((names[0], names[1], names[2]))
    if not entities:
        raise _wrong(f"{where} holds no entities of the MCP memory server's knowledge graph", records)
    outgoing: dict[str, list[tuple[str, str]]] = {}
    incoming: dict[str, list[tuple[str, str]]] = {}
    for start, end, kind in dict.fromkeys(relations):
        outgoing.setdefault(start, []).append((kind, end))
        incoming.setdefault(end, []).append((kind, start))
    items = []
    for name, entry in entities.items():
        kinds = list(dict.fromkeys(entry["types"]))
        lines = [f"Entity type: {', '.join(kinds)}", ""] if kinds else []
        lines += [f"- {' '.join(str(o).split())}" for o in dict.fromkeys(entry["observations"])]
        outs, ins = outgoing.get(name, []), incoming.get(name, [])
        if outs or ins:
            lines += ["", "## Relations"]
            lines += [f"- {kind} [[{end}]]" for kind, end in outs]
            lines += [f"- [[{start}]] {kind} this" for kind, start in ins]
        related = [(f"mcp-memory:{end}", _relation(kind)) for kind, end in outs if end in entities]
        peers = [end for _, end in outs] + [start for _, start in ins]
        items.append(ImportItem(
            f"mcp-memory:{name}", _one_line(name) or "Unnamed entity", "\n".join(lines).strip() + "\n",
            type="semantic", tags=["mcp-memory", *filter(None, (slugify(k) for k in kinds))],
            entities=list(dict.fromkeys([name, *peers])), related=related, names=[name]))
    return items


# --------------------------------------------------------------- agent-rules
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING_LINE = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
_STRONG_RULE = {"rule", "rules", "convention", "conventions", "guideline", "guidelines", "style", "must",
                "never", "always", "don't", "dont", "do's", "dos", "policy", "policies", "constraint", "constraints",
                "etiquette", "forbidden", "avoid"}
_PROCEDURE = {"command", "commands", "build", "building", "test", "tests", "testing", "setup", "install",
              "installation", "run", "running", "workflow", "workflows", "deploy", "deployment", "deploying",
              "development", "usage", "scripts", "debugging", "release", "releasing", "lint", "linting",
              "how", "steps", "environment"}
_WEAK_RULE = {"standards", "standard", "instructions", "practices", "requirements", "important",
              "guardrails", "boundaries", "commit", "commits", "pr", "review"}
# Claude Code's own memory files say what they are in `type:`.
_CLAUDE_MEMORY_TYPES = {"user": "preference", "feedback": "correction", "project": "semantic",
                        "reference": "fact"}


def _section_type(heading: str) -> str:
    words = set(re.findall(r"[a-z']+", heading.casefold()))
    if words & _STRONG_RULE:
        return "rule"
    if words & _PROCEDURE:
        return "procedural"
    return "rule" if words & _WEAK_RULE else "semantic"


def in_code(lines: Sequence[str]) -> list[bool]:
    """For each Markdown line, whether it is a code fence or inside a fenced code block."""
    flags, fence = [], ""
    for line in lines:
        mark = _FENCE.match(line)
        if mark:
            fence = "" if fence and mark.group(1)[0] == fence[0] else (fence or mark.group(1))
        flags.append(bool(mark) or bool(fence))
    return flags


def split_sections(text: str) -> list[tuple[str | None, str]]:
    """A Markdown text cut at its headings, as (heading, text under it) pairs.

    The level cut at is the highest one, unless a single heading of that level
    titles the whole text: then its sub-headings are cut at, and the text
    before the first of them is a section under the title.  Subsections stay
    in their section; headings inside fenced code do not count.
    """
    lines = text.splitlines()
    heads: list[tuple[int, int, str]] = []
    for number, (line, code) in enumerate(zip(lines, in_code(lines), strict=True)):
        heading = None if code else _HEADING_LINE.match(line)
        if heading:
            heads.append((number, len(heading.group(1)), heading.group(2).strip()))
    if not heads:
        return [(None, text)]
    top = min(level for _, level, _ in heads)
    title = None
    tops = [h for h in heads if h[1] == top]
    if len(tops) == 1 and any(h[1] > top for h in heads) and not "".join(lines[:tops[0][0]]).strip():
        title = tops[0]
        top = min(level for _, level, _ in heads if level > top)
    cuts = [h for h in heads if h[1] == top]
    out: list[tuple[str | None, str]] = []
    start = title[0] + 1 if title else 0
    out.append((title[2] if title else None, "\n".join(lines[start:cuts[0][0]])))
    for i, (number, _, name) in enumerate(cuts):
        end = cuts[i + 1][0] if i + 1 < len(cuts) else len(lines)
        # a heading above the cut level ends the section too
        end = next((n for n, level, _ in heads if number < n < end and level < top), end)
        out.append((name, "\n".join(lines[number + 1:end])))
    return [(h, body.strip("\n") + "\n") for h, body in out if body.strip()]


def _simple_frontmatter(text: str) -> tuple[dict[str, str], str]:
    """``key: value`` lines of a leading ``---`` block, read as plain text (Cursor's
    ``globs: **/*.ts`` is not valid YAML), and the text after it."""
    if not text.startswith("---"):
        return {}, text
    end = text.find("\n---", 3)
    if end == -1:
        return {}, text
    meta = {}
    for line in text[3:end].splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            meta[key.strip()] = value.strip().strip("'\"")
    after = text.find("\n", end + 4)
    return meta, "" if after == -1 else text[after + 1:]


def _tool_of(rel: str) -> str:
    name = rel.rsplit("/", 1)[-1]
    if name == ".cursorrules" or name.endswith(".mdc"):
        return "cursor"
    if name.upper() == "AGENTS.MD":
        return "agents-md"
    if name.upper().startswith("CLAUDE") or rel.startswith(".claude/") or "/.claude/" in rel:
        return "claude-code"
    return "agent-rules"


def _rule_sections(rel: str, text: str, tool: str, *, all_rules: bool = False,
                   drop_links_to: Sequence[str] = ()) -> list[ImportItem]:
    """One item per section of the rules file ``rel``."""
    if drop_links_to:  # an index's pointers to files imported on their own
        targets = tuple(f"]({name})" for name in drop_links_to)
        text = "\n".join(line for line in text.splitlines() if not any(t in line for t in targets))
    items: list[ImportItem] = []
    seen: dict[str, int] = {}
    name = rel.rsplit("/", 1)[-1]
    for heading, body in split_sections(text):
        title = _one_line(heading or "") or name
        slug = slugify(heading or "") or "preamble"
        seen[slug] = seen.get(slug, 0) + 1
        if seen[slug] > 1:
            slug = f"{slug}-{seen[slug]}"
        items.append(ImportItem(f"{tool}:{rel}#{slug}", title, body,
                                type="rule" if all_rules else _section_type(heading or ""),
                                tags=[tool], summary=f"From {rel}"))
    return items


_RULE_FILES = ("CLAUDE.md", "CLAUDE.local.md", "AGENTS.md", ".cursorrules")


def _agent_files(source: Path) -> list[str]:
    """The agent memory files of the project folder ``source`` (relative paths)."""
    found = [name for name in (*_RULE_FILES, ".claude/CLAUDE.md") if safefs.is_file(source, name)]
    # A Claude Code memory folder (the folder itself, or its memory/ subfolder):
    # MEMORY.md and the topic files it indexes.
    for folder in ("", "memory/"):
        if safefs.is_file(source, f"{folder}MEMORY.md"):
            found += sorted(f"{folder}{name}" for name in safefs.listdir(source, folder.rstrip("/"))
                            if name.endswith(".md") and not is_hidden_part(name)
                            and safefs.is_file(source, f"{folder}{name}"))
    for top, suffix in ((".claude/rules", ".md"), (".cursor/rules", ".mdc")):
        found += sorted(rel for rel, _ in safefs.walk_files(source, top) if rel.endswith(suffix))
    # nested CLAUDE.md / AGENTS.md of a monorepo's packages
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False) and not is_hidden_part(entry.name):
            found += sorted(rel for rel, _ in safefs.walk_files(source, entry.name, skip_dir=is_hidden_part)
                            if rel.rsplit("/", 1)[-1] in ("CLAUDE.md", "AGENTS.md"))
    return list(dict.fromkeys(found))


def _read_agent_rules(source: Path, _tiers: Sequence[str], limits: ImportLimits) -> list[ImportItem]:
    if source.is_file():
        root, files = source.parent, [source.name]
    elif source.is_dir():
        root, files = source, _agent_files(source)
    else:
        raise NotFound(f"import source {source} does not exist")
    if not files:
        raise _wrong(f"{source} holds no CLAUDE.md, AGENTS.md, .cursorrules, .cursor/rules/*.mdc or "
                     "Claude Code memory folder")
    # A Claude Code memory folder: MEMORY.md indexes topic files that carry frontmatter.
    topic_folders = {rel.rsplit("/", 1)[0] if "/" in rel else "" for rel in files
                     if rel.rsplit("/", 1)[-1] == "MEMORY.md"}
    items: list[ImportItem] = []
    budget = ReadBudget(limits)
    budget.count(len(files), str(source))
    for rel in files:
        data = read_bounded(root, rel, budget)
        if data is None:
            continue
        text = text_of(data, str(root / rel))
        if "\x00" in text:
            raise bad_import(f"{root / rel} is not a text file")
        folder, name = (rel.rsplit("/", 1) if "/" in rel else ("", rel))
        tool = _tool_of(rel)
        if name == "MEMORY.md":
            topics = [f.rsplit("/", 1)[-1] for f in files if (f.rsplit("/", 1)[0] if "/" in f else "") == folder
                      and f != rel]
            items += _rule_sections(rel, text, "claude-code", drop_links_to=topics)
        elif name.endswith(".mdc"):
            meta, body = _simple_frontmatter(text)
            title = _one_line(meta.get("description", "")) or name[:-4]
            extra = {k: meta[k] for k in ("globs", "alwaysApply") if meta.get(k)}
            items.append(ImportItem(f"cursor:{rel}", title, body.strip("\n") + "\n", type="rule",
                                    tags=["cursor"], summary=_one_line(meta.get("description"), 1000) or None,
                                    meta={f"cursor_{k}": v for k, v in extra.items()}))
        elif folder in topic_folders and name.endswith(".md") and name not in _RULE_FILES:
            meta, body = _simple_frontmatter(text)
            kind = meta.get("type", "").casefold()
            title = _one_line(meta.get("name", "")) or _one_line(_first_heading(body)) or name[:-3]
            items.append(ImportItem(f"claude-code:{rel}", title, body.strip("\n") + "\n",
                                    type=_CLAUDE_MEMORY_TYPES.get(kind, "semantic"),
                                    tags=["claude-code", *([kind] if kind else [])],
                                    summary=_one_line(meta.get("description"), 1000) or None))
        else:
            items += _rule_sections(rel, text, tool, all_rules=tool == "cursor" or "/rules/" in f"/{rel}")
    return items


def _first_heading(text: str) -> str:
    match = re.search(r"^#{1,6}[ \t]+(.+)$", text, re.MULTILINE)
    return match.group(1).strip(" #") if match else ""


# ------------------------------------------------------------- conversations
def _extract(label: str, when: str | None, messages: list[tuple[str, str]]) -> str:
    """A bounded Markdown extract of a conversation's messages."""
    head = f"{label} conversation" + (f", {when[:10]}" if when else "") + f", {len(messages)} messages."
    parts, used, shown = [head], len(head), 0
    for role, text in messages:
        text = text.strip()
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[:MAX_MESSAGE_CHARS].rstrip() + " \u2026"
        # a message of several lines (a list, code) starts on its own line, so its Markdown holds
        block = f"**{role}:**\n\n{text}" if "\n" in text or text.startswith(("```", "~~~")) else f"**{role}:** {text}"
        if used + len(block) > MAX_EXTRACT_CHARS and shown:
            break
        parts.append(block)
        used += len(block) + 2
        shown += 1
    if shown < len(messages):
        parts.append(f"\u2026 ({len(messages) - shown} more messages not shown)")
    return "\n\n".join(parts) + "\n"


def _conversation_list(data: Any, where: str, fmt: str, marker: str) -> list[dict[str, Any]]:
    if isinstance(data, dict) and isinstance(data.get("conversations"), list):
        data = data["conversations"]
    if not isinstance(data, list):
        raise _wrong(f"{where} is not a list of conversations (a {fmt} export's conversations.json)", data)
    if data and not any(isinstance(c, dict) and marker in c for c in data[:50]):
        raise _wrong(f"{where} does not look like a {fmt} export (no conversation has '{marker}')", data)
    for number, conv in enumerate(data, 1):
        if not isinstance(conv, dict):
            raise bad_import(f"{where}: conversation {number} is not a JSON object")
    return data


def _conversation_item(fmt: str, label: str, key: str, title: Any, created: str | None,
                       updated: str | None, messages: list[tuple[str, str]],
                       summary: Any = None) -> ImportItem:
    shown_title = _one_line(title) or f"Untitled {label} conversation" + (f" {created[:10]}" if created else "")
    item = ImportItem(f"{fmt}:{key}", shown_title, _extract(label, created, messages), type="episodic",
                      tags=[fmt], created=created, updated=updated or created,
                      summary=_one_line(summary, 1000) or None)
    if not messages:
        item.skip = "no messages"
    return item


def _chatgpt_text(message: dict[str, Any]) -> str:
    content = message.get("content") or {}
    if not isinstance(content, dict):
        return ""
    kind = content.get("content_type")
    if kind in ("text", "multimodal_text"):
        parts = content.get("parts") or []
        texts = [p if isinstance(p, str) else p.get("text", "") if isinstance(p, dict) else ""
                 for p in parts if isinstance(p, (str, dict))]
        return "\n".join(t for t in texts if isinstance(t, str) and t.strip())
    if kind == "code" and isinstance(content.get("text"), str):
        return f"```\n{content['text']}\n```"
    return ""  # tool output, reasoning, browsing results: not part of the extract


def _chatgpt_messages(conv: dict[str, Any]) -> list[tuple[str, str]]:
    """The visible user and assistant messages of the branch the export shows last."""
    mapping = conv.get("mapping")
    if not isinstance(mapping, dict):
        mapping = {}
    chain: list[dict[str, Any]] = []
    node_id, seen = conv.get("current_node"), set()
    while isinstance(node_id, str) and isinstance(mapping.get(node_id), dict) and node_id not in seen:
        seen.add(node_id)
        chain.append(mapping[node_id])
        node_id = mapping[node_id].get("parent")
    if chain:
        chain.reverse()
    else:  # no current_node: every message, in time order
        chain = sorted((n for n in mapping.values() if isinstance(n, dict) and isinstance(n.get("message"), dict)),
                       key=lambda n: n["message"].get("create_time") or 0)
    out = []
    for node in chain:
        message = node.get("message")
        if not isinstance(message, dict):
            continue
        role = (message.get("author") or {}).get("role") if isinstance(message.get("author"), dict) else None
        hidden = (message.get("metadata") or {}).get("is_visually_hidden_from_conversation") \
            if isinstance(message.get("metadata"), dict) else False
        if role not in ("user", "assistant") or hidden:
            continue
        text = _chatgpt_text(message)
        if text.strip():
            out.append(("User" if role == "user" else "Assistant", text))
    return out


def _read_chatgpt(source: Path, _tiers: Sequence[str], limits: ImportLimits) -> list[ImportItem]:
    data = load_json(source, "conversations.json", ReadBudget(limits))
    where = str(source)
    items = []
    for conv in _conversation_list(data, where, "ChatGPT", "mapping"):
        key = conv.get("conversation_id") or conv.get("id")
        created, updated = _iso(conv.get("create_time")), _iso(conv.get("update_time"))
        if not isinstance(key, str) or not key.strip():
            key = _stable_key(conv.get("title"), conv.get("create_time"))
        items.append(_conversation_item("chatgpt", "ChatGPT", key.strip(), conv.get("title"), created, updated,
                                        _chatgpt_messages(conv)))
    return items


def _claude_text(message: dict[str, Any]) -> str:
    if isinstance(message.get("text"), str) and message["text"].strip():
        return message["text"]
    blocks = message.get("content")
    if not isinstance(blocks, list):
        blocks = []
    return "\n".join(b["text"] for b in blocks
                     if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))


def _read_claude(source: Path, _tiers: Sequence[str], limits: ImportLimits) -> list[ImportItem]:
    data = load_json(source, "conversations.json", ReadBudget(limits))
    where = str(source)
    items = []
    for conv in _conversation_list(data, where, "Claude", "chat_messages"):
        key = conv.get("uuid")
        created, updated = _iso(conv.get("created_at")), _iso(conv.get("updated_at"))
        if not isinstance(key, str) or not key.strip():
            key = _stable_key(conv.get("name"), conv.get("created_at"))
        raw = conv.get("chat_messages")
        if not isinstance(raw, list):
            raw = []
        messages = [("User" if m.get("sender") == "human" else "Assistant", _claude_text(m))
                    for m in raw if isinstance(m, dict) and m.get("sender") in ("human", "assistant")]
        items.append(_conversation_item("claude", "Claude", key.strip(), conv.get("name"), created, updated,
                                        [(r, t) for r, t in messages if t.strip()], conv.get("summary")))
    return items


FORMATS: dict[str, FormatSpec] = {spec.name: spec for spec in (
    FormatSpec("markdown", _read_markdown, "long_term",
               "a folder of Markdown notes (an Obsidian vault, a Basic Memory project)", links=True,
               folder_keys=True),
    FormatSpec("mcp-memory", _read_mcp_memory, "long_term",
               "the MCP memory server's memory.jsonl (knowledge graph entities and relations)", links=True),
    FormatSpec("agent-rules", _read_agent_rules, "long_term",
               "CLAUDE.md, AGENTS.md, .cursorrules, .cursor/rules/*.mdc, a Claude Code memory folder",
               folder_keys=True),
    FormatSpec("chatgpt", _read_chatgpt, "mid_term", "ChatGPT's conversations.json (or the export .zip)"),
    FormatSpec("claude", _read_claude, "mid_term", "Claude's conversations.json (or the export .zip)"),
)}
