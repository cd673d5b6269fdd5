"""File names and paths: slugs, the on-disk layout, and strict path validation.

Layouts (``layout`` in ``.gitmem.yaml``), where a memory gitmem creates lives:

* ``flat`` (new vaults): ``<tier>/<slug>.md``, the folder a person browses in Obsidian;
* ``hashed``: ``<tier>/<h1>/<h2>/<slug>.md`` where ``h1``/``h2`` are the first two hex
  digits of its id.  The two 16-way fan-out levels keep every git tree object small
  (at 100k memories a leaf folder holds ~400 entries), so the cost of a commit, which
  rewrites the trees on the path to the changed file, does not grow with the size of
  a tier; a flat tier folder of 100k memories is one tree git rewrites on every write.
  Vaults whose ``.gitmem.yaml`` names no layout (made before layouts existed) keep it.

Slugs are unique across the vault, so either layout names each memory once.  Moves
between tiers keep the sub-path, so ``git log --follow`` sees a pure rename.  Files a
person puts anywhere under a tier folder are memories too, wherever they are.

Every path that comes from outside (CLI, agent tools) goes through
:func:`check_relpath`, which refuses traversal in all its spellings, absolute
paths, ``~``, control characters, Windows-reserved names, and gitmem's private
or tool folders; the path gate (:mod:`gitmem.safefs`) then refuses any
symbolic link on the way when the path is used.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from urllib.parse import unquote

from ..errors import InvalidPath
from ..safefs import check_component

__all__ = ["slugify", "check_relpath", "memory_relpath", "LAYOUTS", "NEW_VAULT_LAYOUT", "UNSET_LAYOUT",
           "WINDOWS_RESERVED",
           "MAX_SLUG_CHARS", "is_hidden_part", "is_memory_path", "MEMORY_MD"]

MAX_SLUG_CHARS = 80
LAYOUTS = ("flat", "hashed")
NEW_VAULT_LAYOUT = "flat"   # what ``gitmem init`` writes into a new vault's .gitmem.yaml
UNSET_LAYOUT = "hashed"     # a .gitmem.yaml without ``layout``: how such vaults were made
MEMORY_MD = "MEMORY.md"  # the generated index of memories at the vault root
MAX_PATH_BYTES = 1024
WINDOWS_RESERVED = frozenset(
    {"con", "prn", "aux", "nul", "clock$"}
    | {f"com{i}" for i in range(1, 10)} | {f"lpt{i}" for i in range(1, 10)}
    | {"com¹", "com²", "com³", "lpt¹", "lpt²", "lpt³"}
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Characters no file name may hold on Windows (and that trouble shells and Obsidian).
_UNPORTABLE = re.compile(r'[<>:"|?*\\]')


def slugify(title: str) -> str:
    """A Unicode-aware, filesystem-safe file stem for ``title``.

    Letters and digits of any script are kept (NFC-normalised, lower-cased);
    everything else becomes single hyphens.  The result is portable to Linux,
    macOS and Windows: no reserved names, no trailing dots, at most
    :data:`MAX_SLUG_CHARS` characters.  May return "" for a title with no
    letters or digits; callers pick a fallback.
    """
    text = unicodedata.normalize("NFKC", title).casefold()
    text = re.sub(r"(?<=\w)['’](?=\w)", "", text)  # "Maya's" -> "mayas", not "maya-s"
    text = "".join(ch if (ch.isalnum() or ch in "-_") else "-" for ch in text)
    text = re.sub(r"[-_]*-[-_]*", "-", text).strip("-_")
    text = unicodedata.normalize("NFC", text)
    if len(text) > MAX_SLUG_CHARS:
        text = text[:MAX_SLUG_CHARS].rstrip("-_")
    while len(text.encode("utf-8")) > 200:  # many file systems cap names at 255 bytes
        text = text[:-1]
    if text.split(".")[0] in WINDOWS_RESERVED:
        text = f"{text}-memory"
    return text


def memory_relpath(tier: str, memory_id: str, stem: str, *, layout: str) -> str:
    """Where gitmem puts a new memory in ``layout``: ``tier/stem.md`` (flat) or
    ``tier/h1/h2/stem.md`` (hashed; see module doc)."""
    if layout == "flat":
        return f"{tier}/{stem}.md"
    digits = re.sub(r"[^0-9a-f]", "", memory_id.lower()) or "00"
    digits = (digits + "00")[:2]
    return f"{tier}/{digits[0]}/{digits[1]}/{stem}.md"


def is_hidden_part(part: str) -> bool:
    """True for path parts gitmem never treats as memories (``.git``, ``.obsidian`` ...)."""
    return part.startswith(".") or part in {"node_modules", "__pycache__"}


def is_memory_path(path: str, tiers: Sequence[str], outside_notes: str | None = None) -> bool:
    """True for a vault-relative path that is a memory: a ``.md`` file under a
    tier folder, with no hidden part (``.obsidian``, ``.trash``, temp files).  In an
    adopted vault (``outside_notes`` names a tier) a note anywhere else is one too,
    except the generated ``MEMORY.md`` at the root."""
    parts = path.split("/")
    if not path.endswith(".md") or any(is_hidden_part(p) for p in parts):
        return False
    if len(parts) > 1 and parts[0] in tiers:
        return True
    return outside_notes is not None and path != MEMORY_MD


def check_relpath(raw: str, *, what: str = "path") -> str:
    """Validate a vault-relative path from untrusted input; return it normalised.

    The result uses ``/`` separators, has no empty, ``.`` or ``..`` parts, and
    names nothing under a hidden folder (``.git``, ``.obsidian``, ``.trash``,
    gitmem's state).  URL-encoded spellings are decoded before checking, so
    ``%2e%2e%2f`` is refused like ``../``.
    """
    if not isinstance(raw, str):
        raise InvalidPath(f"{what} must be text, got {type(raw).__name__}")
    text = raw
    for _ in range(3):  # decode %-escapes (also double-encoded ones) before judging
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    if not text.strip():
        raise InvalidPath(f"{what} is empty")
    if _CONTROL.search(text):
        raise InvalidPath(f"{what} {raw!r} contains control characters or NUL")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:  # (lone surrogates: each part's check)
        raise InvalidPath(f"{what} is longer than {MAX_PATH_BYTES} bytes")
    if text.startswith("~"):
        raise InvalidPath(f"{what} {raw!r} starts with '~'; paths are relative to the vault")
    unified = text.replace("\\", "/")
    if unified.startswith("/") or re.match(r"[A-Za-z]:", unified):
        raise InvalidPath(f"{what} {raw!r} is absolute; paths are relative to the vault")
    parts = [p for p in unified.split("/") if p not in ("", ".")]
    if not parts:
        raise InvalidPath(f"{what} {raw!r} names the vault itself")
    for part in parts:
        if part == "..":
            raise InvalidPath(f"{what} {raw!r} leaves the vault ('..' is not allowed)")
        if is_hidden_part(part):
            raise InvalidPath(f"{what} {raw!r} is inside {part!r}, which gitmem does not write to",
                              hint="Memories live in the tier folders.")
        if _UNPORTABLE.search(part):
            raise InvalidPath(f"{what} {raw!r} contains a character that is not portable: < > : \" | ? * \\")
        if part.split(".")[0].casefold() in WINDOWS_RESERVED:
            raise InvalidPath(f"{what} {raw!r} uses the reserved name {part!r} (invalid on Windows)")
        if part.endswith((" ", ".")):
            raise InvalidPath(f"{what} {raw!r} has a part ending in a space or dot (invalid on Windows)")
        check_component(part, path=raw)
    return "/".join(unicodedata.normalize("NFC", p) for p in parts)
