"""Adopting a folder of notes in place (``gitmem init --adopt DIR``).

A person's Obsidian vault (or any folder of Markdown notes) becomes a gitmem vault
without a note moving or changing:

* every note (``.md``, outside hidden folders such as ``.obsidian/`` and ``.trash/``)
  is committed as it is on disk, byte for byte, in the vault's first commit; notes
  outside the tier folders are memories of one tier (``outside_notes`` in
  ``.gitmem.yaml``, ``long_term`` unless told) where they are, so they are searched,
  linked and versioned like any memory, and a move into ``archive/`` keeps their folders;
* gitmem adds only its own files, each only when the folder has no file of that
  name (the folder's ``.gitignore`` and ``.gitattributes`` are committed as they are):
  ``.gitmem.yaml``, ``.gitignore``, ``.gitattributes``, the tier folders for
  what agents write, and ``MEMORY.md`` (left out when the folder has a ``MEMORY.md`` of
  its own: that one stays the person's note);
* attachments (images, PDFs ...), ``.obsidian/`` and everything else that is not a
  note are left alone: not moved, not committed (``git add`` them for their history).

A plain ``init`` of a folder that holds notes outside the tier folders counts them
(:func:`outside_notes_count`), so the command can say they are not memories and how
to adopt them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import safefs
from ..config import CONFIG_NAME, DEFAULT_CONFIG_TEXT, GITATTRIBUTES, GITIGNORE, VaultConfig
from ..memory.paths import MEMORY_MD, is_hidden_part, is_memory_path
from .import_formats import notes_to_copy

__all__ = ["Adoption", "adoption", "outside_notes_count"]

_OUTSIDE_NOTES_TEXT = (
    "# Notes outside the tier folders are memories of this tier, where they are (this\n"
    "# folder was adopted: gitmem init --adopt). null: only the tier folders hold memories.\n"
    "outside_notes: {tier}\n")


@dataclass
class Adoption:
    """What adopting a folder commits and adds (see the module docstring)."""

    root: Path
    config_text: bytes
    config: VaultConfig
    plan: list[tuple[str, str]]                 # (path, path): every note stays where it is
    left_out: list[tuple[str, str]]             # notes a vault cannot hold, with why
    own_files: dict[str, bytes] = field(default_factory=dict)   # gitmem's files the folder lacks
    not_notes: int = 0                          # attachments and other files left alone
    hidden: list[str] = field(default_factory=list)             # hidden folders left alone

    def write_own_files(self, made: list[Path]) -> None:
        """Write gitmem's own files (none of them exists), adding each file and folder
        to ``made`` as it is made, so that a failed init can take them away again."""
        for rel, data in self.own_files.items():
            folder = rel.rpartition("/")[0]
            if folder and not os.path.lexists(self.root / folder):   # ours to take away again
                made.append(self.root / folder)
            # Through the path gate (a linked tier folder is refused, never followed), and
            # never over a file of the person's that appeared meanwhile.
            safefs.write_bytes(self.root, rel, data, expect=lambda held: held is None)
            made.append(self.root / rel)

    def git_file(self, name: str) -> bytes | None:
        """What the first commit holds as ``name`` (``.gitignore``, ``.gitattributes``):
        gitmem's text, or the folder's own file as it is (a link or folder: nothing)."""
        if name in self.own_files:
            return self.own_files[name]
        return safefs.read_or_none(self.root, name)

    def left_alone(self) -> dict[str, Any]:
        """The report's account of the adoption."""
        outside = sum(1 for rel, _ in self.plan if rel.split("/", 1)[0] not in self.config.tiers)
        return {"adopted": True, "outside_tiers": outside, "outside_notes": self.config.outside_notes,
                "not_notes_left_alone": self.not_notes, "hidden_folders_left_alone": self.hidden,
                "memory_md": self.config.memory_index}


def adoption(root: Path, config: VaultConfig, tier: str) -> Adoption:
    """How the folder ``root`` is adopted with the notes outside the tier folders in
    ``tier`` (nothing is written yet)."""
    text = DEFAULT_CONFIG_TEXT + _OUTSIDE_NOTES_TEXT.format(tier=tier)
    if os.path.lexists(root / MEMORY_MD):
        # The folder's MEMORY.md is the person's note: gitmem writes no index over it.
        text = text.replace("memory_index: true", "memory_index: false  # MEMORY.md is a note of this folder")
    config_text = text.encode()
    adopted_config = VaultConfig.from_dict(_yaml(config_text))
    notes, left_out = notes_to_copy(root, adopted_config.tiers, tier)
    plan = [(src, src) for src, _ in notes]
    own: dict[str, bytes] = {CONFIG_NAME: config_text}
    for name, content in ((".gitignore", GITIGNORE), (".gitattributes", GITATTRIBUTES)):
        if not os.path.lexists(root / name):
            own[name] = content.encode()
    for tier_name in adopted_config.tiers:
        if not any(rel.startswith(tier_name + "/") for rel, _ in plan):
            own[f"{tier_name}/.gitkeep"] = b""
    not_notes, hidden = _others(root, adopted_config)
    return Adoption(root, config_text, adopted_config, plan, left_out, own, not_notes, hidden)


def outside_notes_count(root: Path, tiers: tuple[str, ...]) -> int:
    """Notes in ``root`` outside the tier folders (a plain init does not make them memories)."""
    count = 0
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root).as_posix()
        dirs[:] = [d for d in dirs if not is_hidden_part(d) and not (rel == "." and d in tiers)]
        count += sum(1 for name in files if name.endswith(".md") and not is_hidden_part(name)
                     and not (rel == "." and name == MEMORY_MD))
    return count


def _others(root: Path, config: VaultConfig) -> tuple[int, list[str]]:
    """(files that are not notes, hidden folders at the top) of ``root``: left alone."""
    count, hidden = 0, []
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root).as_posix()
        if rel == ".":
            hidden = sorted(d + "/" for d in dirs if is_hidden_part(d) and d != ".git")
        dirs[:] = [d for d in dirs if not is_hidden_part(d)]
        for name in files:
            path = name if rel == "." else f"{rel}/{name}"
            if is_hidden_part(name) or path in (CONFIG_NAME, MEMORY_MD):
                continue
            if not is_memory_path(path, config.tiers, config.outside_notes):
                count += 1
    return count, hidden


def _yaml(text: bytes) -> dict[str, Any]:
    import yaml
    data = yaml.safe_load(text.decode("utf-8"))
    return data if isinstance(data, dict) else {}
