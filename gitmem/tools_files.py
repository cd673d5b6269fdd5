"""File-shaped tool profiles: ``files`` (seed 000) and ``index`` (seed 001).

``files``: ``memory_read(path?)`` lists every file (one path per line) or
returns one file's text; ``memory_write(path, content)`` writes a file's exact
text (parent folders appear as needed; the whole file is replaced) as one
commit.  Paths are in the *file view* (see :mod:`gitmem.rawfiles`): relative to
the files tier (``long_term`` by default), or starting with a tier folder.

``index``: ``memory_read(topics?)`` returns the vault's ``MEMORY.md`` (or
``(no memories yet)``) and, for each topic, that topic file's text, with seed
001's sanitising (``[^a-zA-Z0-9_.-]`` removed, ``.md`` added), ``---``
separators and ``(no matching topic files)``.
"""

from __future__ import annotations

import re
from .errors import AmbiguousReference, InvalidInput, InvalidPath, NotFound
from .tools import ToolContext, obj, string, tool

__all__: list[str] = []

# ------------------------------------------------------------------ files (000)
_PATH = ("File path relative to the memory directory, e.g. 'preferences/tools.md'. "
         "A path starting with a tier folder (short_term/, mid_term/, long_term/, archive/) "
         "names that tier; other paths live in the long-term tier.")


@tool("files", "memory_read",
      """Read content from a memory file, or list all memory files when no path is provided.
      Without `path`: returns every memory file path, one per line. With `path`: returns the
      file's full text exactly as stored. Read-only.""",
      obj({"path": string("File path relative to the memory directory. Omit to list all files.",
                          maxLength=1024)}),
      read_only=True, title="Read memory file")
def files_read(ctx: ToolContext, path: str | None = None) -> str:
    vault = ctx.vault
    if path is None or not path.strip():
        return "\n".join(vault.view_path(p) for p in vault.list_files())
    return vault.read_text(vault.file_path(path))


@tool("files", "memory_write",
      """Write content to a memory file. Creates parent directories automatically. Overwrites the
      entire file: read it first (memory_read) if you need to keep existing content. Every write is
      a git commit, so earlier versions stay recoverable. Returns 'Written to <path>'.""",
      obj({"path": string(_PATH, minLength=1, maxLength=1024),
           "content": string("Content to write (the whole file).", maxLength=1_000_000)},
          ["path", "content"]),
      destructive=True, idempotent=True, title="Write memory file")
def files_write(ctx: ToolContext, path: str, content: str) -> str:
    vault = ctx.vault
    rel = vault.file_path(path)
    if rel in vault.config.tiers:
        raise InvalidInput(f"{path!r} names a folder, not a file")
    vault.write_text(rel, content, author=ctx.author)
    return f"Written to {path}"


# ------------------------------------------------------------------ index (001)
_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")
NO_MEMORIES = "(no memories yet)"
NO_TOPICS = "(no matching topic files)"
SEPARATOR = "\n\n---\n\n"


@tool("index", "memory_read",
      """Read the agent memory index (MEMORY.md) and optionally specific topic files. Call with no
      arguments to load only the lightweight index (cheap). Pass `topics` only when you need the full
      content of a specific topic file. Returns text. Read-only.""",
      obj({"topics": {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 50,
                      "description": 'Optional topic file names to load in full (e.g., ["preferences", '
                                     '"projects"]). Omit to return the index only.'}}),
      read_only=True, title="Read memory index")
def index_read(ctx: ToolContext, topics: list[str] | None = None) -> str:
    text = _index_text(ctx)
    topics = topics or []
    if topics:
        text += SEPARATOR + _topics_text(ctx, topics)
    return text


def _index_text(ctx: ToolContext) -> str:
    from .memory_index import MEMORY_INDEX
    vault = ctx.vault
    target = vault.root / MEMORY_INDEX
    if target.is_file() and not target.is_symlink():
        return target.read_bytes().decode("utf-8", "replace")
    render = getattr(vault, "render_memory_index", None)
    if render is not None and vault.list(limit=1):
        # The index is switched off (memory_index: false): show it without writing it.
        return render().decode("utf-8")
    return NO_MEMORIES


def _topics_text(ctx: ToolContext, topics: list[str]) -> str:
    parts: list[str] = []
    for topic in topics:
        safe = _UNSAFE.sub("", topic)
        if not safe or safe.strip(".") == "":
            continue
        name = safe if safe.endswith(".md") else f"{safe}.md"
        text = _topic_file(ctx, name)
        if text is not None:
            parts.append(f"# {safe}\n\n{text}")
    return SEPARATOR.join(parts) or NO_TOPICS


def _topic_file(ctx: ToolContext, name: str) -> str | None:
    """A topic file's text: ``<files tier>/<name>``, else the memory file of that name."""
    vault = ctx.vault
    direct = f"{vault.files_tier}/{name}"
    try:
        return vault.read_text(direct)
    except (NotFound, InvalidPath):  # a hidden name (".x.md") is no topic either
        pass
    try:
        path = vault.resolve(name)
    except (NotFound, AmbiguousReference, InvalidInput):
        return None
    if path.rsplit("/", 1)[-1] != name:  # resolve() also matches titles; a topic is a file name
        return None
    return vault.read_text(path)
