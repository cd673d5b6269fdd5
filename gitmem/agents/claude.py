"""The ``claude`` profile: a gitmem backend for Anthropic's client-side memory tool.

Claude's memory tool (type ``memory_20250818``, name ``memory``) sends one of
six commands on paths under ``/memories``; the client executes them.  Here
each command is one Vault call and each change is one commit:

=============  ==========================================================
``view``       a folder: files and folders up to 2 levels deep with sizes;
               a file: its text with line numbers (``view_range`` [a, b],
               b = -1 for the end)
``create``     a new file (never overwrites an existing one)
``str_replace`` replace ``old_str``, which must occur exactly once
``insert``     insert ``insert_text`` after line ``insert_line`` (0 = top)
``delete``     a file or a folder
``rename``     ``old_path`` -> ``new_path`` (never overwrites)
=============  ==========================================================

``/memories`` is the root of the vault's *readable* file view
(:mod:`gitmem.ops.files`): ``/memories/notes.md`` is ``long_term/notes.md``;
``/memories/short_term/...`` reaches the other tiers.  A memory gitmem placed
in its hash folders (``short_term/9/0/rust.md``) shows as
``/memories/short_term/rust.md`` (long-term ones as ``/memories/rust.md``);
files the agent made keep their own paths; deleted memories are not shown.
Every command maps a shown path back to the real file.  Paths are validated
strictly: they must be ``/memories`` or start with ``/memories/``; ``..``,
encoded traversal, absolute paths inside, hidden folders and symlinks out of
the vault are refused.  Result and error texts are those the memory tool's reference
implementation gives, so prompts written for it work unchanged; errors come
back as ``{"error": {...}}`` whose ``message`` is that text
(:meth:`Toolbox.call_text` returns it alone, for ``is_error`` tool results).
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field

from ..errors import InvalidPath, NotFound
from .registry import ToolContext, ToolFailure, tool

__all__: list[str] = []

ROOT = "/memories"
Command = Literal["view", "create", "str_replace", "insert", "delete", "rename"]
COMMANDS: tuple[str, ...] = get_args(Command)
_WIDTH = 6  # line numbers are right-aligned to six digits, then a tab
_NEEDS = {"view": ("path",), "create": ("path", "file_text"), "str_replace": ("path", "old_str"),
          "insert": ("path", "insert_line", "insert_text"), "delete": ("path",),
          "rename": ("old_path", "new_path")}
_TEXT = 1_000_000


Text = Annotated[str, Field(max_length=_TEXT)]
MemoriesPath = Annotated[str, Field(max_length=1100)]


@tool("claude", "memory", destructive=True, title="Memory directory (/memories)",
      anthropic={"type": "memory_20250818", "name": "memory"})
def memory(ctx: ToolContext,
           command: Annotated[Command, Field(description="The operation.")],
           path: Annotated[MemoriesPath, Field(description="A path under /memories, e.g. /memories/project_notes.md.")
                           ] | None = None,
           view_range: Annotated[list[int], Field(description="view: [first line, last line], 1-based; last -1 = "
                                                              "to the end.", min_length=2, max_length=2)
                                 ] | None = None,
           file_text: Annotated[Text, Field(description="create: the whole text of the new file.")] | None = None,
           old_str: Annotated[Text, Field(description="str_replace: the exact text to replace (must occur exactly "
                                                      "once).")] | None = None,
           new_str: Annotated[Text, Field(description="str_replace: the replacement text (default: empty).")
                              ] | None = None,
           insert_line: Annotated[int, Field(description="insert: the line after which to insert (0 = before "
                                                         "line 1).", ge=0)] | None = None,
           insert_text: Annotated[Text, Field(description="insert: the text to insert.")] | None = None,
           old_path: Annotated[MemoriesPath, Field(description="rename: the current path.")] | None = None,
           new_path: Annotated[MemoriesPath, Field(description="rename: the new path (must not exist).")] | None = None
           ) -> str:
    """Your persistent memory directory, /memories. ALWAYS view /memories first to see what you
    saved in earlier sessions, and record progress and learnings as you work. Commands: view
    (a folder: files up to 2 levels deep with sizes; a file: its lines numbered, optional
    view_range [start, end] with end -1 for the last line), create (a new file with file_text;
    never overwrites), str_replace (old_str must occur exactly once in the file; replaced by
    new_str), insert (insert_text after line insert_line, 0 = top), delete (a file or folder),
    rename (old_path to new_path; never overwrites). Every path starts with /memories. Every change
    is a git commit, so nothing is lost."""
    given = {"path": path, "file_text": file_text, "old_str": old_str, "insert_line": insert_line,
             "insert_text": insert_text, "old_path": old_path, "new_path": new_path}
    missing = [k for k in _NEEDS[command] if given[k] is None]
    if missing:
        raise ToolFailure("invalid_arguments",
                          f"Missing required parameter `{missing[0]}` for command `{command}`",
                          f"The {command} command takes: {', '.join(_NEEDS[command])}.")
    if command == "view":
        return _view(ctx, path or ROOT, view_range)
    if command == "create":
        return _create(ctx, path or ROOT, file_text or "")
    if command == "str_replace":
        return _str_replace(ctx, path or ROOT, old_str or "", new_str or "")
    if command == "insert":
        return _insert(ctx, path or ROOT, int(insert_line or 0), insert_text or "")
    if command == "delete":
        return _delete(ctx, path or ROOT)
    return _rename(ctx, old_path or ROOT, new_path or ROOT)


# -------------------------------------------------------------------- paths
def _rel(ctx: ToolContext, path: str) -> str:
    """The vault path of a /memories path ("" for /memories itself)."""
    if path != ROOT and not path.startswith(ROOT + "/"):
        raise ToolFailure("invalid_path", f"Path must start with /memories, got: {path}",
                          "Use a path such as /memories/notes.md.")
    inner = path[len(ROOT):].strip("/")
    if not inner:
        return ""
    try:
        rel = ctx.vault.files.readable_path(inner)  # a shown spelling -> the real file
        ctx.vault.files.file_kind(rel)  # the path gate: a symbolic link on the way is refused
    except InvalidPath as exc:
        if ".." in exc.message or "outside" in exc.message or "absolute" in exc.message:
            raise ToolFailure("invalid_path", f"Path {path} would escape /memories directory",
                              "Use a path inside /memories without '..'.") from None
        raise ToolFailure("invalid_path", exc.message, exc.hint) from None
    return rel


def _missing(path: str) -> ToolFailure:
    return ToolFailure("not_found", f"The path {path} does not exist. Please provide a valid path.",
                       "View /memories to see what exists.")


def _kind(ctx: ToolContext, rel: str) -> str | None:
    """"file", "dir" or None for a vault path ("" = the view root)."""
    try:
        kind = ctx.vault.files.file_kind(rel or ctx.vault.files.files_tier)
    except InvalidPath as exc:
        raise ToolFailure("invalid_path", exc.message, exc.hint) from None
    return {"file": "file", "folder": "dir"}.get(kind or "")


def _size(num: float) -> str:
    if num < 1024:
        return f"{int(num)}B" if num else "0B"
    for unit in ("K", "M", "G"):
        num /= 1024
        if num < 1024 or unit == "G":
            return f"{int(num)}{unit}" if num == int(num) else f"{num:.1f}{unit}"
    return f"{num}G"  # pragma: no cover


# --------------------------------------------------------------------- view
def _view(ctx: ToolContext, path: str, view_range: list[int] | None) -> str:
    rel = _rel(ctx, path)
    kind = _kind(ctx, rel)
    if kind is None:
        raise _missing(path)
    if kind == "dir":
        return _view_dir(ctx, path, rel)
    lines = _read(ctx, path, rel).split("\n")
    start = 1
    if view_range:
        first, last = view_range
        if first < 1 or first > max(len(lines), 1) or (last != -1 and last < first):
            raise ToolFailure("invalid_arguments",
                              f"Invalid `view_range` parameter: {view_range}. The first line must be within "
                              f"[1, {len(lines)}] and the last line -1 or at least the first.")
        start = first
        lines = lines[first - 1:] if last == -1 else lines[first - 1:last]
    numbered = [f"{str(i + start).rjust(_WIDTH)}\t{line}" for i, line in enumerate(lines)]
    return f"Here's the content of {path} with line numbers:\n" + "\n".join(numbered)


def _view_dir(ctx: ToolContext, path: str, rel: str) -> str:
    vault = ctx.vault
    # The folder spelled in the readable view ("" = its root, the files tier folder).
    base = "" if rel in ("", vault.files.files_tier) else vault.files.view_path(rel)
    children: dict[str, set[str]] = {}
    sizes: dict[str, int] = {}
    for entry in vault.files.readable_files(rel or None):
        if base and not entry.view.startswith(base + "/"):
            continue
        parts = (entry.view[len(base) + 1:] if base else entry.view).split("/")
        for depth in range(len(parts)):
            children.setdefault("/".join(parts[:depth]), set()).add("/".join(parts[:depth + 1]))
        sizes["/".join(parts)] = vault.files.file_size(entry.path)
    lines = [f"{_size(_dir_size(ctx, base))}\t{path}"]

    def walk(parent: str, depth: int) -> None:
        for name in sorted(children.get(parent, ()), key=lambda n: n.rsplit("/", 1)[-1]):
            if name in sizes:
                lines.append(f"{_size(sizes[name])}\t{path}/{name}")
            else:
                lines.append(f"{_size(_dir_size(ctx, f'{base}/{name}' if base else name))}\t{path}/{name}/")
                if depth < 2:
                    walk(name, depth + 1)

    walk("", 1)
    header = (f"Here're the files and directories up to 2 levels deep in {path}, "
              "excluding hidden items and node_modules:")
    return header + "\n" + "\n".join(lines)


def _dir_size(ctx: ToolContext, view: str) -> int:
    """The size the file system reports for a folder of the file view ("" = the root)."""
    vault = ctx.vault
    try:
        return vault.files.file_size(vault.files.file_path(view))
    except InvalidPath:
        return 0


def _read(ctx: ToolContext, path: str, rel: str) -> str:
    try:
        return ctx.vault.files.read_text(rel)
    except NotFound:
        raise ToolFailure("not_found", f"The file {path} no longer exists (may have been deleted or "
                                       "renamed concurrently).") from None


# ------------------------------------------------------------------- writes
def _create(ctx: ToolContext, path: str, text: str) -> str:
    rel = _rel(ctx, path)
    if not rel or _kind(ctx, rel) is not None or rel in ctx.vault.config.tiers:
        raise ToolFailure("conflict", f"File {path} already exists",
                          "Use str_replace or insert to change it, or pick a new name.")
    ctx.vault.files.write_text(rel, text, exists=False, author=ctx.author, subject=f"create: {rel}")
    return f"File created successfully at: {path}"


def _editable(ctx: ToolContext, path: str) -> tuple[str, str]:
    rel = _rel(ctx, path)
    kind = _kind(ctx, rel)
    if kind is None:
        raise _missing(path)
    if kind != "file":
        raise ToolFailure("invalid_path", f"The path {path} is not a file.")
    return rel, _read(ctx, path, rel)


def _str_replace(ctx: ToolContext, path: str, old: str, new: str) -> str:
    rel, content = _editable(ctx, path)
    count = content.count(old) if old else 0
    if count == 0:
        raise ToolFailure("no_match", f"No replacement was performed, old_str `{old}` did not appear "
                                      f"verbatim in {path}.", "View the file and copy the text exactly.")
    if count > 1:
        lines, start = [], 0
        while (pos := content.find(old, start)) != -1:
            lines.append(content[:pos].count("\n") + 1)
            start = pos + 1
        raise ToolFailure("ambiguous_match", f"No replacement was performed. Multiple occurrences of old_str "
                                             f"`{old}` in lines: {', '.join(map(str, lines))}. Please ensure "
                                             "it is unique", "Include more surrounding text in old_str.")
    at = content[:content.find(old)].count("\n")
    updated = content.replace(old, new, 1)
    ctx.vault.files.write_text(rel, updated, exists=True, if_match=content, author=ctx.author,
                         subject=f"edit: {rel}")
    new_lines = updated.split("\n")
    first, last = max(0, at - 2), min(len(new_lines), at + 3 + new.count("\n"))
    snippet = [f"{str(n + 1).rjust(_WIDTH)}\t{new_lines[n]}" for n in range(first, last)]
    return ("The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
            + "\n".join(snippet))


def _insert(ctx: ToolContext, path: str, line: int, text: str) -> str:
    rel, content = _editable(ctx, path)
    lines = content.splitlines()
    if line < 0 or line > len(lines):
        raise ToolFailure("invalid_arguments", f"Invalid `insert_line` parameter: {line}. It should be within "
                                               f"the range [0, {len(lines)}].")
    lines.insert(line, text.rstrip("\n"))
    updated = "\n".join(lines)
    if not updated.endswith("\n"):
        updated += "\n"
    ctx.vault.files.write_text(rel, updated, exists=True, if_match=content, author=ctx.author,
                         subject=f"edit: {rel}")
    return f"The file {path} has been edited."


def _delete(ctx: ToolContext, path: str) -> str:
    rel = _rel(ctx, path)
    if not rel:
        raise ToolFailure("invalid_path", "Cannot delete the /memories directory itself")
    if _kind(ctx, rel) is None:
        raise ToolFailure("not_found", f"The path {path} does not exist")
    ctx.vault.files.remove_path(rel, author=ctx.author)
    return f"Successfully deleted {path}"


def _rename(ctx: ToolContext, old_path: str, new_path: str) -> str:
    src, dst = _rel(ctx, old_path), _rel(ctx, new_path)
    if not dst or _kind(ctx, dst) is not None:
        raise ToolFailure("conflict", f"The destination {new_path} already exists",
                          "Pick a new name; rename never overwrites.")
    if not src or _kind(ctx, src) is None:
        raise ToolFailure("not_found", f"The path {old_path} does not exist")
    ctx.vault.files.rename_path(src, dst, author=ctx.author)
    return f"Successfully renamed {old_path} to {new_path}"
