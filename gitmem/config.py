"""The vault configuration file, ``.gitmem.yaml`` at the vault root (tracked in git).

It is small, commented and meant to be edited by a person.  Unknown keys are
ignored (so newer gitmem versions can add settings); bad values are reported
with the key that is wrong.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import InvalidMetadata, StorageError
from .schema import DEFAULT_TIERS, MEMORY_TYPES

__all__ = ["CONFIG_NAME", "VaultConfig", "Identity", "DEFAULT_CONFIG_TEXT"]

CONFIG_NAME = ".gitmem.yaml"

DEFAULT_CONFIG_TEXT = """\
# gitmem vault configuration. Edit freely; gitmem reads it on every open.
version: 1
# Tier folders, from the shortest-lived to the longest; 'archive' must be last.
tiers: [short_term, mid_term, long_term, archive]
# Types that ordinary delete/overwrite/move calls refuse (pass --force / force=True).
protected_types: [goal, rule, constraint]
# Commit author for writes made through gitmem when no agent name is given.
author:
  name: gitmem
  email: gitmem@localhost
# Commit author for edits a person makes outside gitmem (Obsidian, vim ...).
user:
  name: vault user
  email: user@localhost
# Largest memory (frontmatter + body) accepted, in bytes.
max_content_bytes: 1000000
"""


@dataclass(frozen=True)
class Identity:
    """A commit author: ``Name <email>``."""

    name: str
    email: str

    @classmethod
    def parse(cls, text: str, *, default_email: str = "agent@gitmem.local") -> "Identity":
        """Parse ``"Name <email>"`` or a bare name."""
        text = text.strip()
        if "<" in text and text.endswith(">"):
            name, _, email = text[:-1].partition("<")
            return cls(name.strip() or email.strip(), email.strip())
        if not text:
            raise InvalidMetadata("author name is empty")
        return cls(text, default_email)

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"

    def as_bytes(self) -> bytes:
        """The ``Name <email>`` form git stores."""
        clean = str(self).replace("\n", " ").replace("\x00", "")
        return clean.encode("utf-8")


@dataclass(frozen=True)
class VaultConfig:
    """Parsed ``.gitmem.yaml``; defaults for anything missing."""

    tiers: tuple[str, ...] = DEFAULT_TIERS
    protected_types: tuple[str, ...] = ("goal", "rule", "constraint")
    author: Identity = Identity("gitmem", "gitmem@localhost")
    user: Identity = Identity("vault user", "user@localhost")
    max_content_bytes: int = 1_000_000
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def archive_tier(self) -> str:
        """The last tier: where archived and soft-deleted memories go."""
        return self.tiers[-1]

    @property
    def live_tiers(self) -> tuple[str, ...]:
        """Tiers in promotion order, without the archive."""
        return self.tiers[:-1]

    @classmethod
    def load(cls, root: Path) -> "VaultConfig":
        """Read ``root/.gitmem.yaml``; a missing file means all defaults."""
        path = root / CONFIG_NAME
        if not path.exists():
            return cls()
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise StorageError(f"cannot read {CONFIG_NAME}: {exc}",
                               hint="Fix the file or delete it to use the defaults.") from None
        if not isinstance(data, dict):
            raise InvalidMetadata(f"{CONFIG_NAME} must be a mapping of settings")
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "VaultConfig":
        """Validate a settings mapping (see :data:`DEFAULT_CONFIG_TEXT`)."""
        kwargs: dict[str, Any] = {}
        if "tiers" in data:
            tiers = data["tiers"]
            if (not isinstance(tiers, list) or len(tiers) < 2
                    or not all(isinstance(t, str) and t.isidentifier() for t in tiers)
                    or len(set(tiers)) != len(tiers)):
                raise InvalidMetadata(f"{CONFIG_NAME}: tiers must be a list of 2+ distinct folder names")
            kwargs["tiers"] = tuple(tiers)
        if "protected_types" in data:
            types = data["protected_types"] or []
            unknown = [t for t in types if t not in MEMORY_TYPES]
            if unknown:
                raise InvalidMetadata(f"{CONFIG_NAME}: unknown protected type(s) {unknown}")
            kwargs["protected_types"] = tuple(types)
        for key in ("author", "user"):
            if key in data:
                value = data[key]
                if isinstance(value, str):
                    kwargs[key] = Identity.parse(value)
                elif isinstance(value, dict) and value.get("name"):
                    kwargs[key] = Identity(str(value["name"]), str(value.get("email") or "gitmem@localhost"))
                else:
                    raise InvalidMetadata(f"{CONFIG_NAME}: {key} needs a name (and an email)")
        if "max_content_bytes" in data:
            size = data["max_content_bytes"]
            if isinstance(size, bool) or not isinstance(size, int) or size < 1024:
                raise InvalidMetadata(f"{CONFIG_NAME}: max_content_bytes must be an integer >= 1024")
            kwargs["max_content_bytes"] = size
        known = {"version", "tiers", "protected_types", "author", "user", "max_content_bytes"}
        kwargs["extra"] = {k: v for k, v in data.items() if k not in known}
        return cls(**kwargs)


def env_author() -> Identity | None:
    """The author named by ``GITMEM_AUTHOR`` (``"Name <email>"``), if set."""
    value = os.environ.get("GITMEM_AUTHOR", "").strip()
    return Identity.parse(value) if value else None
