"""Where memories live on disk (``gitmem layout``): see the layouts in :mod:`gitmem.memory.paths`.

Converting a vault to another layout is one commit of pure renames: every memory
gitmem placed is renamed, byte for byte, to where the new layout puts it, and
``layout:`` in ``.gitmem.yaml`` changes in the same commit, so the next write goes
there too.  ``git log --follow`` follows each memory across it (the file's bytes do
not change, so git sees a 100% rename).

Which memories move: those gitmem placed, that is the ones at the spot the old layout
gives them (``<tier>/<slug>.md`` in a flat vault, ``<tier>/<h1>/<h2>/<slug>.md`` in a
hashed one).  Notes a person keeps in folders of their own stay where they are, unless
``every`` is asked for: then every memory moves.  A memory whose new spot is taken (two
notes of the same name in different folders, when flattening) stays and is reported.
Links by name (``[[slug]]``) keep working; a link spelled with a moved memory's old
folders (``[[long_term/4/5/slug]]``) names a file that moved.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..config import CONFIG_NAME, Identity
from ..errors import InvalidInput, StorageError
from ..memory.paths import LAYOUTS, memory_relpath
from ..memory.schema import path_id
from ..store.git import FileChange

if TYPE_CHECKING:  # pragma: no cover
    from ..store.catalog import FileRow
    from ..store.reader import Reader
    from ..store.storage import Storage
    from ..write.pipeline import WritePipeline

__all__ = ["LayoutReport", "Layouts", "set_layout_line"]


@dataclass
class LayoutReport:
    """What :meth:`Layouts.convert` did (or, with ``dry_run``, would do)."""

    layout: str                       # the layout asked for
    previous: str                     # the vault's layout before
    moved: list[tuple[str, str]] = field(default_factory=list)     # (old path, new path)
    kept: int = 0                     # memories left where they are (a person's own folders)
    clashes: list[tuple[str, str]] = field(default_factory=list)   # (path, the taken new path)
    commit: str | None = None
    dry_run: bool = False
    #: where the memories were: at the spot each layout gives them (``flat``, ``hashed``)
    #: or in a person's own folders (``own``)
    memories: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"layout": self.layout, "previous": self.previous, "moved": len(self.moved),
                "kept": self.kept, "clashes": [{"path": p, "taken": t} for p, t in self.clashes],
                "commit": self.commit, "dry_run": self.dry_run, "memories": self.memories,
                "sample": [{"from": a, "to": b} for a, b in self.moved[:10]]}


def set_layout_line(text: str, layout: str) -> str:
    """``.gitmem.yaml``'s text with ``layout:`` set, every other byte kept: the value of
    an existing top-level ``layout:`` line is replaced, else a commented line is added."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("layout:"):
            comment = line[line.index("#"):].rstrip("\n") if "#" in line else ""
            end = "\n" if line.endswith("\n") else ""
            lines[i] = f"layout: {layout}" + (f"  {comment}" if comment else "") + end
            return "".join(lines)
    sep = "" if not text or text.endswith("\n") else "\n"
    return (f"{text}{sep}# Where new memories go: flat = <tier>/<name>.md; hashed = "
            f"<tier>/<h1>/<h2>/<name>.md. `gitmem layout` converts.\nlayout: {layout}\n")


def _own_id(row: FileRow) -> bool:
    """True when the memory's id is not made from its path (a file without ``id:`` has
    such an id, which a move would change: those files stay where they are)."""
    return row.id != path_id(row.path)


class Layouts:
    """Convert a vault from one layout to another (module docstring)."""

    def __init__(self, store: Storage, reader: Reader, pipeline: WritePipeline) -> None:
        self.store = store
        self.reader = reader
        self.pipeline = pipeline

    def _placed_by_gitmem(self, row: FileRow, layout: str) -> bool:
        """True when ``row`` is where ``layout`` would have put a memory of its name:
        gitmem placed it (a person's own folders are elsewhere)."""
        parts = row.path.split("/")
        if parts[0] not in self.store.config.tiers or not row.path.endswith(".md"):
            return False
        if not _own_id(row):
            return False
        return memory_relpath(parts[0], row.id, parts[-1][:-3], layout=layout) == row.path

    def plan(self, layout: str, *, every: bool = False) -> LayoutReport:
        """Which memories :meth:`convert` moves to reach ``layout`` (nothing is written)."""
        if layout not in LAYOUTS:
            raise InvalidInput(f"unknown layout {layout!r}", hint=f"Use one of: {', '.join(LAYOUTS)}.")
        previous = self.store.layout()
        report = LayoutReport(layout, previous, memories={"flat": 0, "hashed": 0, "own": 0})
        self.reader.scan()
        taken = {row.path.casefold() for row in self.store.catalog.all_rows()}
        for row in sorted(self.store.catalog.all_rows(), key=lambda r: r.path):
            parts = row.path.split("/")
            if parts[0] not in self.store.config.tiers:
                continue
            spot = next((name for name in LAYOUTS if self._placed_by_gitmem(row, name)), "own")
            report.memories[spot] += 1
            movable = (self._placed_by_gitmem(row, previous)
                       or (every and _own_id(row)))
            new = memory_relpath(parts[0], row.id, parts[-1][:-3], layout=layout)
            if not movable or new == row.path:
                report.kept += new != row.path
                continue
            if new.casefold() in taken or safefs.lstat(self.store.root, new) is not None:
                report.clashes.append((row.path, new))
                continue
            taken.add(new.casefold())
            report.moved.append((row.path, new))
        return report

    def convert(self, layout: str, *, every: bool = False, dry_run: bool = False,
                author: str | Identity | None = None) -> LayoutReport:
        """Move the vault to ``layout`` in one commit of pure renames (see the module doc);
        ``every`` also moves the memories in a person's own folders."""
        who = self.store.author_of(author)
        with self.store.lock.hold():
            if not dry_run:  # a person's unsaved-to-git edits are theirs: committed first, as theirs
                self.pipeline.outside.commit(reason="before the layout change")
            report = self.plan(layout, every=every)
            report.dry_run = dry_run
            config_text = safefs.read_or_none(self.store.root, CONFIG_NAME) or b""
            new_config = set_layout_line(config_text.decode("utf-8"), layout).encode("utf-8")
            if dry_run or (not report.moved and new_config == config_text):
                return report
            changes = [FileChange(CONFIG_NAME, new_config)] if new_config != config_text else []
            touched = []
            for old, new in report.moved:
                data = safefs.read_or_none(self.store.root, old)
                if data is None:
                    raise StorageError(f"{old} disappeared during the layout change; nothing was changed",
                                       hint="Run the command again.")
                changes += [FileChange(old, None), FileChange(new, data)]
                touched.append(("", new, "layout"))
            n = len(report.moved)
            subject = f"layout: {report.previous} -> {layout} ({n} {'memory' if n == 1 else 'memories'} moved)"
            done = self.pipeline.commit(changes, subject, "layout", touched, author=who, origin="person")
            report.commit = done.sha
            self.store.config = replace(self.store.config, layout=layout)
        return report
