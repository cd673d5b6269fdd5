"""Exporting a vault's memories: ``gitmem export jsonl`` and ``gitmem export folder``.

* **jsonl**: one memory per line, ``path`` first, then every frontmatter field
  in gitmem's field order (fields gitmem does not know after them, in the
  order the file has them), ``problems`` when the file has any, and ``body``
  last, so two exports of an unchanged vault are byte-identical.
* **folder**: a plain projection ``<tier>/<file name>.md`` without the
  ``<h1>/<h2>/`` folders, each file byte-for-byte the memory file.  Names are
  made unique per tier (``note.md``, ``note-2.md``), the target is never inside
  the vault, a non-empty target is refused unless ``force``, and no symbolic link
  in the target is followed (:mod:`gitmem.safefs`): everything is checked before
  the first file is written.

Reading needs no lock: an export reads each memory file once.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .. import safefs
from ..errors import Conflict, InvalidInput, NotFound, UnsafePath
from ..memory.schema import ordered

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.schema import Memory
    from ..services import Services

__all__ = ["memory_record", "iter_memories", "export_jsonl", "export_folder", "FolderExport"]


@dataclass
class FolderExport:
    """What :func:`export_folder` wrote: the folder and each memory path -> file written."""

    path: str
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"path": self.path, "exported": len(self.files), "files": dict(self.files)}


def memory_record(memory: Memory) -> dict[str, Any]:
    """One memory as an export line holds it (see the module doc for the key order)."""
    record: dict[str, Any] = {"path": memory.path}
    record.update(ordered(memory.meta))
    if memory.problems:
        record["problems"] = list(memory.problems)
    record["body"] = memory.body
    return record


def iter_memories(services: Services) -> Iterator[Memory]:
    """Every memory of the vault (any status), with its body, in path order."""
    for listed in sorted(services.reader.list(status=None), key=lambda m: m.path):
        try:
            yield services.reader.get(listed.path)
        except NotFound:
            continue  # removed while the export ran


def _outside_vault(services: Services, target: Path) -> None:
    for form in (target, Path(os.path.realpath(target))):
        if form == services.store.root or services.store.root in form.parents:
            raise InvalidInput(f"{target} is inside the vault; export to a place outside it")


def export_jsonl(services: Services, out: str | os.PathLike[str] | IO[str]) -> int:
    """Write every memory as one JSON line to ``out`` (a text stream, or a file path
    outside the vault); returns how many were written."""
    if isinstance(out, (str, os.PathLike)):
        target = Path(os.path.abspath(Path(out).expanduser()))
        _outside_vault(services, target)
        with open(target, "w", encoding="utf-8", newline="\n") as handle:
            return export_jsonl(services, handle)
    count = 0
    for memory in iter_memories(services):
        out.write(json.dumps(memory_record(memory), ensure_ascii=False, default=str) + "\n")
        count += 1
    return count


def _unique(stem: str, taken: set[str]) -> str:
    name, n = stem, 2
    while name.casefold() in taken:
        name, n = f"{stem}-{n}", n + 1
    taken.add(name.casefold())
    return name


def _has_entries(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return any(True for _ in entries)


def export_folder(services: Services, target: str | os.PathLike[str], *, force: bool = False) -> FolderExport:
    """Write every memory to ``target/<tier>/<file name>.md`` (see the module doc)."""
    root = Path(os.path.abspath(Path(target).expanduser()))
    _outside_vault(services, root)
    if root.is_symlink():
        raise UnsafePath(f"{root} is a symbolic link; export to a real folder", path=str(root))
    if root.exists() and not root.is_dir():
        raise InvalidInput(f"{root} exists and is not a folder")
    if root.is_dir() and not force and _has_entries(root):
        raise Conflict(f"{root} is not empty", hint="Export to an empty folder, or pass --force (force=True) "
                                                     "to write into it (files of the same name are replaced).")
    plan: list[tuple[Memory, str]] = []
    taken: dict[str, set[str]] = {}
    for memory in sorted(services.reader.list(status=None), key=lambda m: m.path):
        tier = memory.path.split("/", 1)[0]
        stem = memory.filename[:-3] if memory.filename.endswith(".md") else memory.filename
        plan.append((memory, f"{tier}/{_unique(stem, taken.setdefault(tier, set()))}.md"))
    if root.is_dir():  # nothing is written before every target is known to be safe
        for _, rel in plan:
            st = safefs.lstat(root, rel)  # raises UnsafePath for a link on the way
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise UnsafePath(f"{root / rel} is a symbolic link or a folder; gitmem will not write "
                                 "through it", path=rel)
    root.mkdir(parents=True, exist_ok=True)
    report = FolderExport(str(root))
    for memory, rel in plan:
        data = safefs.read_or_none(services.store.root, memory.path)
        if data is None:
            continue  # removed while the export ran
        safefs.write_bytes(root, rel, data)
        report.files[memory.path] = rel
    return report
