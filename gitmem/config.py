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

__all__ = ["CONFIG_NAME", "VaultConfig", "LifecycleSettings", "Identity", "DEFAULT_CONFIG_TEXT"]

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
# Content that looks like a secret (API keys, tokens, private keys): refuse | redact | allow.
secrets: refuse
# MEMORY.md at the root: regenerated in every write commit, at most this many lines.
memory_index: true
memory_index_lines: 200
# Near-duplicate writes (dedup=True): similarity at or above 'skip' returns the
# existing memory; at or above 'supersede' the new memory supersedes the old one.
dedup:
  skip: 0.92
  supersede: 0.80
# gitmem reflect: strength halves every half_life_days (per tier, scaled by
# importance / 3) since the memory was last updated or retrieved.
reflect:
  half_life_days: {short_term: 7, mid_term: 30, long_term: 365}
  prune_below: 0.05
  merge_above: 0.95
  promote_after_days: 7
  promote_min_retrievals: 3
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
class LifecycleSettings:
    """Thresholds of dedup and reflect (``dedup:`` and ``reflect:`` in the config)."""

    skip_above: float = 0.92
    supersede_above: float = 0.80
    half_life_days: dict[str, float] = field(default_factory=lambda: {
        "short_term": 7.0, "mid_term": 30.0, "long_term": 365.0})
    prune_below: float = 0.05
    merge_above: float = 0.95
    promote_after_days: float = 7.0
    promote_min_retrievals: int = 3

    @classmethod
    def from_dict(cls, dedup: Any, reflect: Any) -> "LifecycleSettings":
        """Validate the ``dedup`` and ``reflect`` mappings of the config file."""
        kw: dict[str, Any] = {}
        for section, data, keys in (("dedup", dedup, {"skip": "skip_above",
                                                      "supersede": "supersede_above"}),
                                    ("reflect", reflect, {"prune_below": "prune_below",
                                                          "merge_above": "merge_above"})):
            if data is None:
                continue
            if not isinstance(data, dict):
                raise InvalidMetadata(f"{CONFIG_NAME}: {section} must be a mapping")
            for key, attr in keys.items():
                if key in data:
                    kw[attr] = _fraction(data[key], f"{section}.{key}")
        reflect = reflect or {}
        if "half_life_days" in reflect:
            lives = reflect["half_life_days"]
            if not isinstance(lives, dict) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                    for v in lives.values()):
                raise InvalidMetadata(f"{CONFIG_NAME}: reflect.half_life_days maps tiers to "
                                      "positive numbers of days")
            kw["half_life_days"] = {str(k): float(v) for k, v in lives.items()}
        for key, kind in (("promote_after_days", float), ("promote_min_retrievals", int)):
            if key in reflect:
                value = reflect[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise InvalidMetadata(f"{CONFIG_NAME}: reflect.{key} must be a number >= 0")
                kw[key] = kind(value)
        made = cls(**kw)
        if made.supersede_above > made.skip_above:
            raise InvalidMetadata(f"{CONFIG_NAME}: dedup.supersede must not exceed dedup.skip")
        return made


def _fraction(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InvalidMetadata(f"{CONFIG_NAME}: {name} must be a number from 0 to 1")
    return float(value)


@dataclass(frozen=True)
class VaultConfig:
    """Parsed ``.gitmem.yaml``; defaults for anything missing."""

    tiers: tuple[str, ...] = DEFAULT_TIERS
    protected_types: tuple[str, ...] = ("goal", "rule", "constraint")
    author: Identity = Identity("gitmem", "gitmem@localhost")
    user: Identity = Identity("vault user", "user@localhost")
    max_content_bytes: int = 1_000_000
    memory_index: bool = True
    memory_index_lines: int = 200
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)
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
        if "memory_index" in data:
            if not isinstance(data["memory_index"], bool):
                raise InvalidMetadata(f"{CONFIG_NAME}: memory_index must be true or false")
            kwargs["memory_index"] = data["memory_index"]
        if "memory_index_lines" in data:
            lines = data["memory_index_lines"]
            if isinstance(lines, bool) or not isinstance(lines, int) or lines < 20:
                raise InvalidMetadata(f"{CONFIG_NAME}: memory_index_lines must be an integer >= 20")
            kwargs["memory_index_lines"] = lines
        kwargs["lifecycle"] = LifecycleSettings.from_dict(data.get("dedup"), data.get("reflect"))
        known = {"version", "tiers", "protected_types", "author", "user", "max_content_bytes",
                 "memory_index", "memory_index_lines", "dedup", "reflect"}
        kwargs["extra"] = {k: v for k, v in data.items() if k not in known}
        return cls(**kwargs)


def env_author() -> Identity | None:
    """The author named by ``GITMEM_AUTHOR`` (``"Name <email>"``), if set."""
    value = os.environ.get("GITMEM_AUTHOR", "").strip()
    return Identity.parse(value) if value else None
