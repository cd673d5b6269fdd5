"""File-shaped tool profiles: ``files`` and ``index``.

``files``: ``memory_read(path?)`` lists every file (one path per line) or
returns one file's text; ``memory_write(path, content)`` writes a file's exact
text (parent folders appear as needed; the whole file is replaced) as one
commit.  Paths are in the *file view* (see :mod:`gitmem.ops.files`): relative to
the files tier (``long_term`` by default), or starting with a tier folder.

``MEMORY.md`` at the vault root is the index gitmem generates; ``memory_write``
refuses it (an agent's edit would silently become an ordinary memory named
MEMORY.md in the files tier) and ``memory_read("MEMORY.md")`` returns the index.

``index``: ``memory_read(topics?)`` returns the vault's ``MEMORY.md`` (or
``(no memories yet)``) and, for each topic, that topic file's text, with the
original tool's sanitising (``[^a-zA-Z0-9_.-]`` removed, ``.md`` added),
``---`` separators and ``(no matching topic files)``.  A topic may also be:

* a path (``work/notes``): ``/`` is kept so two ``notes.md`` in different
  folders are each addressable;
* a bare name several files share (``notes``): each is returned under its own
  heading, its addressable name;
* any memory's title or id, for memories MEMORY.md has no room for;
* a folder (``short_term/``, ``work``): a list of the memories in it, by the
  names to load them with.

When MEMORY.md leaves memories out (its ``… and N more`` lines), a line
after it says how to reach them with ``memory_read`` itself.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from ..errors import InvalidInput, InvalidPath, NotFound
from ..memory.provenance import neutralize
from ..write.memory_md import HEADER
from .registry import ToolContext, tool

if TYPE_CHECKING:  # pragma: no cover
    from ..vault import Vault

__all__: list[str] = []

# ------------------------------------------------------------------ files (000)
_PATH = ("File path relative to the memory directory, e.g. 'preferences/tools.md'. "
         "A path starting with a tier folder (short_term/, mid_term/, long_term/, archive/) "
         "names that tier; other paths live in the long-term tier.")


@tool("files", "memory_read", read_only=True, title="Read memory file")
def files_read(ctx: ToolContext,
               path: Annotated[str, Field(description="File path relative to the memory directory. Omit to list "
                                                      "all files.", max_length=1024)] | None = None) -> str:
    """Read content from a memory file, or list all memory files when no path is provided.
    Without `path`: returns every memory file path, one per line. With `path`: returns the
    file's full text exactly as stored. Read-only."""
    vault = ctx.vault
    if path is None or not path.strip():
        return "\n".join(vault.files.view_path(p) for p in vault.files.list_files())
    if _is_memory_md(vault, path):
        return _index_text(ctx)  # the generated index, which lives at the vault root
    return vault.files.read_text(vault.files.file_path(path))


def _is_memory_md(vault: Vault, path: str) -> bool:
    """True for a path naming MEMORY.md directly in a tier folder (``MEMORY.md``,
    ``long_term/MEMORY.md``, any letter case): the spellings an agent uses for the
    generated index.  A MEMORY.md deeper in a folder of the agent's is an ordinary file."""
    return vault.files.names_memory_md(vault.files.file_path(path))


@tool("files", "memory_write", destructive=True, idempotent=True, title="Write memory file")
def files_write(ctx: ToolContext,
                path: Annotated[str, Field(description=_PATH, min_length=1, max_length=1024)],
                content: Annotated[str, Field(description="Content to write (the whole file).",
                                              max_length=1_000_000)]) -> str:
    """Write content to a memory file. Creates parent directories automatically. Overwrites the
    entire file: read it first (memory_read) if you need to keep existing content. Every write is
    a git commit, so earlier versions stay recoverable. Returns 'Written to <path>'."""
    vault = ctx.vault
    rel = vault.files.file_path(path)
    if _is_memory_md(vault, path):
        raise InvalidPath(f"{path!r} is the index gitmem generates at the vault root from the memory files; "
                          "it cannot be written",
                          hint="Write a topic file instead (e.g. 'preferences.md'); the index lists it after "
                               "the write. memory_read('MEMORY.md') returns the index.")
    if rel in vault.config.tiers:
        raise InvalidInput(f"{path!r} names a folder, not a file")
    vault.files.write_text(rel, content, author=ctx.author)
    return f"Written to {path}"


# ------------------------------------------------------------------ index (001)
_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")
_UNSAFE_PATH = re.compile(r"[^a-zA-Z0-9_./-]")  # the same, keeping "/" so a topic can be a path
# MEMORY.md's line for memories it has no room for ("- … and 12 more: ...").
_OVERFLOW = re.compile(r"^- \u2026 and \d+ more\b", re.M)
_SECTION = re.compile(r"^## (\S+)", re.M)
NO_MEMORIES = "(no memories yet)"
NO_TOPICS = "(no matching topic files)"
SEPARATOR = "\n\n---\n\n"
SAME_NAME_LIMIT = 10   # files returned for one bare name several files share
FOLDER_LIMIT = 200     # memories listed for one folder topic


@tool("index", "memory_read", read_only=True, title="Read memory index")
def index_read(ctx: ToolContext,
               topics: Annotated[list[Annotated[str, Field(max_length=200)]], Field(
                   description='Optional topic file names to load in full (e.g., ["preferences", "projects"]). '
                               'Omit to return the index only. Also accepted: a path ("work/notes"), a memory\'s '
                               'title or id, a folder ("short_term/").', max_length=50)] | None = None) -> str:
    """Read the agent memory index (MEMORY.md) and optionally specific topic files. Call with no
    arguments to load only the lightweight index (cheap). Pass `topics` only when you need the full
    content of a specific topic file. A topic may also be a path (work/notes), a memory's title or
    id, or a folder ending in / (short_term/) to list the memories in it. Returns text. Read-only."""
    text = _index_text(ctx)
    hint = _overflow_hint(ctx, text)
    if hint:
        text += "\n" + hint + "\n"
    topics = topics or []
    if topics:
        text += SEPARATOR + _topics_text(ctx, topics)
    # Straight into the agent's context: without hidden characters, HTML comments or images
    # (gitmem's own first line, the note that MEMORY.md is generated, aside).
    head = HEADER + "\n" if text.startswith(HEADER + "\n") else ""
    return head + neutralize(text[len(head):])


def _index_text(ctx: ToolContext) -> str:
    vault = ctx.vault
    if vault.list(limit=1):
        # Rendered from the memories, not read from disk: what a sync or an editor put in the
        # file is never passed off as gitmem's index (and it works with memory_index: false).
        return vault.render_memory_md().decode("utf-8")
    text = vault.files.memory_md_text()
    return NO_MEMORIES if text is None else text


def _overflow_hint(ctx: ToolContext, index: str) -> str:
    """How to reach the memories MEMORY.md leaves out, with this tool alone ("" if none are).

    MEMORY.md's own pointer names CLI commands, which an agent that has only this tool
    cannot run."""
    if not _OVERFLOW.search(index) or 'topics=["' in index:  # none left out, or MEMORY.md says how
        return ""
    tiers = ctx.vault.config.tiers
    named: list[str] = []
    section = ""
    for line in index.splitlines():
        heading = _SECTION.match(line)
        if heading:
            section = heading.group(1)
        elif _OVERFLOW.match(line):
            # Protected memories live in the tier folders too: then every tier may hold more.
            for tier in ([section] if section in tiers else ctx.vault.config.live_tiers):
                if tier not in named:
                    named.append(tier)
    folders = ", ".join(f'"{t}/"' for t in named)
    where = "that folder" if len(named) == 1 else "those folders"
    return (f"(gitmem: this index shows part of the vault. memory_read(topics=[{folders}]) lists every memory "
            f"in {where}; a topic may be any memory's file name, path, title or id.)")


def _topics_text(ctx: ToolContext, topics: list[str]) -> str:
    parts: list[str] = []
    for topic in topics:
        parts += _topic_parts(ctx.vault, topic)
    return SEPARATOR.join(parts) or NO_TOPICS


def _topic_parts(vault: Vault, topic: str) -> list[str]:
    """The ``# heading\n\ntext`` parts one topic loads (none: no match)."""
    safe = _UNSAFE.sub("", topic)
    pathish = _UNSAFE_PATH.sub("", topic)
    name = pathish.strip("/")
    if pathish.endswith("/") and name:
        listing = _folder_listing(vault, name)
        if listing is not None:
            return [listing]
    if "/" in name:  # a path in the file view: work/notes, short_term/rust-learning
        text = _read_view(vault, name)
        if text is not None:
            return [f"# {name}\n\n{text}"]
    if safe and safe.strip("."):
        # The original tool's lookup: <name>.md at the root of the memory folder.
        text = _read_view(vault, safe)
        if text is not None:
            return [f"# {safe}\n\n{text}"]
        file_name = safe if safe.endswith(".md") else f"{safe}.md"
        paths = vault.files.memories_named(file_name)
        if len(paths) == 1:  # the file name is unique in the vault: the original heading
            text = _read(vault, paths[0])
            return [] if text is None else [f"# {safe}\n\n{text}"]
        paths = paths or vault.files.memories_named(topic)  # not a file name: a title or an id
        if paths:
            return _same_name_parts(vault, paths)
    elif topic.strip():
        # A title with no letter the file-name rules keep (e.g. only non-Latin letters).
        paths = vault.files.memories_named(topic)
        if paths:
            return _same_name_parts(vault, paths)
    if name:
        listing = _folder_listing(vault, name)
        if listing is not None:
            return [listing]
    return []


def _same_name_parts(vault: Vault, paths: list[str]) -> list[str]:
    """Each file a shared name matches, under its addressable name (the heading)."""
    named = sorted((_address(vault, path), path) for path in paths)  # the order a folder listing has
    parts: list[str] = []
    for address, path in named[:SAME_NAME_LIMIT]:
        text = _read(vault, path)
        if text is not None:
            parts.append(f"# {address}\n\n{text}")
    rest = named[SAME_NAME_LIMIT:]
    if rest:
        parts.append(f"(and {len(rest)} more with this name: " + ", ".join(a for a, _ in rest) + ")")
    return parts


def _address(vault: Vault, path: str) -> str:
    """The name that loads exactly the file at vault path ``path``: its readable spelling, no ``.md``."""
    view = vault.files.readable_view(path)
    return view[:-3] if view.endswith(".md") else view


def _read_view(vault: Vault, name: str) -> str | None:
    """The text of ``<name>.md`` in the readable file view, or None."""
    file_name = name if name.endswith(".md") else f"{name}.md"
    try:
        rel = vault.files.readable_path(file_name)
    except InvalidPath:  # "..", a hidden part, a reserved name: no topic
        return None
    return _read(vault, rel)


def _read(vault: Vault, rel: str) -> str | None:
    """The text of the file at vault path ``rel``; None if absent, a folder, a link or binary."""
    try:
        return vault.files.read_text(rel)
    except (NotFound, InvalidInput):
        return None


def _folder_listing(vault: Vault, name: str) -> str | None:
    """A folder topic: the memories under it, one per line by the name that loads it
    (and its title); None if ``name`` is no folder."""
    try:
        rel = vault.files.file_path(name)
        if vault.files.file_kind(rel) != "folder":
            return None
    except InvalidPath:
        return None
    entries = [e for e in vault.files.readable_files(rel) if e.view.endswith(".md")]
    lines = [f"# {name}/", ""]
    for entry in entries[:FOLDER_LIMIT]:
        address = entry.view[:-3]
        line = f"- {address}"
        title = " ".join((entry.title or "").split())
        if title and title != address.rsplit("/", 1)[-1]:
            line += f": {title}"
        if entry.status not in (None, "active"):
            line += f" ({entry.status})"
        lines.append(line)
    rest = entries[FOLDER_LIMIT:]
    if rest:
        subs = sorted({vault.files.view_path(rel + "/" + e.path[len(rel) + 1:].split("/", 1)[0]) + "/"
                       for e in rest if "/" in e.path[len(rel) + 1:]})
        lines.append(f"- \u2026 and {len(rest)} more" + (f": list a sub-folder ({', '.join(subs[:16])})"
                                                          if subs else ""))
    if not entries:
        lines.append("(no memories)")
    return "\n".join(lines)
