"""The vault configuration file, ``.gitmem.yaml`` at the vault root (tracked in git).

It is small, commented and meant to be edited by a person.  Unknown keys are
ignored (so newer gitmem versions can add settings); bad values are reported
with the key that is wrong.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .errors import InvalidMetadata, StorageError
from .memory.schema import DEFAULT_TIERS, MEMORY_TYPES

__all__ = ["CONFIG_NAME", "VaultConfig", "LifecycleSettings", "Identity", "DEFAULT_CONFIG_TEXT",
           "SAFETY_KEYS", "PIN_FILE", "safety_values", "weakened_settings", "read_pins", "write_pins",
           "clear_pins", "pending_changes", "pin_entries"]

CONFIG_NAME = ".gitmem.yaml"
# Settings that guard the vault.  A sync never weakens them silently: the local
# value stays in force (pinned) until a person accepts the change.
SAFETY_KEYS = ("secrets", "protected_types", "max_content_bytes")
# Under .git/gitmem/: the pinned values, per vault clone, never shared or committed.
PIN_FILE = "config-pinned.json"
_SECRETS_RANK = {"allow": 0, "redact": 1, "refuse": 2}

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
max_content_bytes: 4194304
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
    def parse(cls, text: str, *, default_email: str = "agent@gitmem.local") -> Identity:
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
    def from_dict(cls, dedup: Any, reflect: Any) -> LifecycleSettings:
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
    # 4 MiB: room for 1,000,000 characters of any script (up to 4 bytes each) plus frontmatter.
    max_content_bytes: int = 4_194_304
    memory_index: bool = True
    memory_index_lines: int = 200
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)
    extra: dict[str, Any] = field(default_factory=dict)
    # Safety settings held at their local value after a sync brought weaker ones.
    pinned: tuple[str, ...] = ()

    @property
    def archive_tier(self) -> str:
        """The last tier: where archived and soft-deleted memories go."""
        return self.tiers[-1]

    @property
    def live_tiers(self) -> tuple[str, ...]:
        """Tiers in promotion order, without the archive."""
        return self.tiers[:-1]

    @classmethod
    def load(cls, root: Path, *, apply_pins: bool = True) -> VaultConfig:
        """Read ``root/.gitmem.yaml``; a missing file means all defaults.

        With ``apply_pins`` (the default), safety settings a sync held back
        (:func:`read_pins`) stay at their stronger local value."""
        from . import safefs
        try:
            # A link in place of the file is never followed (the defaults, the strictest
            # settings, apply; `gitmem doctor` lists the link).
            raw = safefs.read_or_none(root, CONFIG_NAME)
        except OSError as exc:
            raise StorageError(f"cannot read {CONFIG_NAME}: {exc}") from None
        if raw is None:
            config = cls()
        else:
            try:
                data = yaml.safe_load(raw.decode("utf-8")) or {}
            except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
                raise StorageError(f"cannot read {CONFIG_NAME}: {exc}",
                                   hint="Fix the file or delete it to use the defaults.") from None
            config = cls.from_yaml_data(data)
        if apply_pins:
            pins = read_pins(root)
            if pins:
                config = config.with_pins(pins)
        return config

    @classmethod
    def from_yaml_data(cls, data: Any) -> VaultConfig:
        """Validate the parsed YAML of a config file (any value: it may come from a remote)."""
        if not isinstance(data, dict):
            raise InvalidMetadata(f"{CONFIG_NAME} must be a mapping of settings")
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError, AttributeError) as exc:  # e.g. 'reflect: 5'
            raise InvalidMetadata(f"{CONFIG_NAME} holds a setting of the wrong shape: {exc}") from None

    @classmethod
    def parse(cls, text: bytes | None) -> VaultConfig:
        """The config a ``.gitmem.yaml`` holding ``text`` means (None: no file, defaults).

        Raises :class:`InvalidMetadata` for a file gitmem cannot use."""
        if text is None:
            return cls()
        try:
            data = yaml.safe_load(text.decode("utf-8")) or {}
        except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
            raise InvalidMetadata(f"{CONFIG_NAME} is not valid YAML text: {exc}") from None
        return cls.from_yaml_data(data)

    def with_pins(self, pins: dict[str, Any]) -> VaultConfig:
        """This config with each pinned safety setting at the stronger of the
        file's value and the pinned one (a stale pin never weakens anything)."""
        kept: list[str] = []
        changes: dict[str, Any] = {}
        extra = dict(self.extra)
        for key in SAFETY_KEYS:
            if key not in pins:
                continue
            value = _clean_safety_value(key, pins[key])
            if value is None:
                continue
            current = safety_values(self)[key]
            if not _weaker(key, current, value):
                continue  # the file is at least as strict: nothing to hold back
            kept.append(key)
            strongest = _strongest(key, current, value)
            if key == "secrets":
                extra["secrets"] = strongest
            elif key == "protected_types":
                changes["protected_types"] = tuple(strongest)
            else:
                changes["max_content_bytes"] = strongest
        if not kept:
            return self
        return replace(self, extra=extra, pinned=tuple(kept), **changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VaultConfig:
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


# ------------------------------------------------------------ safety pins
def safety_values(config: VaultConfig) -> dict[str, Any]:
    """The safety settings of ``config`` as plain values (``secrets`` as written,
    ``refuse`` when unset; ``protected_types`` as a sorted list)."""
    secrets = config.extra.get("secrets", "refuse")
    if secrets is False:  # YAML 'off'
        secrets = "allow"
    return {"secrets": secrets if isinstance(secrets, str) else repr(secrets),
            "protected_types": sorted(config.protected_types),
            "max_content_bytes": config.max_content_bytes}


def _weaker(key: str, new: Any, old: Any) -> bool:
    """True if safety setting ``key`` at ``new`` protects less than at ``old``."""
    if key == "secrets":
        # An unknown policy counts as the weakest: it would break every write.
        return _SECRETS_RANK.get(new, -1) < _SECRETS_RANK.get(old, -1)
    if key == "protected_types":
        return not set(old) <= set(new)
    return int(new) > int(old)


def _strongest(key: str, a: Any, b: Any) -> Any:
    if key == "secrets":
        return a if _SECRETS_RANK.get(a, -1) >= _SECRETS_RANK.get(b, -1) else b
    if key == "protected_types":
        return sorted(set(a) | set(b))
    return min(int(a), int(b))


def _clean_safety_value(key: str, value: Any) -> Any:
    """A pinned value as read from the pin file, or None if it is unusable."""
    if key == "secrets":
        return value if value in _SECRETS_RANK else None
    if key == "protected_types":
        ok = isinstance(value, list) and all(isinstance(t, str) and t in MEMORY_TYPES for t in value)
        return sorted(value) if ok else None
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1024
    return value if ok else None


def weakened_settings(current: VaultConfig, incoming: VaultConfig) -> dict[str, dict[str, Any]]:
    """The safety settings ``incoming`` weakens compared with ``current``:
    {key: {"kept": current value, "incoming": incoming value}}."""
    now, new = safety_values(current), safety_values(incoming)
    return {key: {"kept": now[key], "incoming": new[key]}
            for key in SAFETY_KEYS if _weaker(key, new[key], now[key])}


def _pin_path(root: Path) -> Path:
    return root / ".git" / "gitmem" / PIN_FILE


def read_pins(root: Path) -> dict[str, Any]:
    """The pinned safety values of the vault at ``root`` ({key: value}; {} if none).

    An unreadable pin file counts as no pins: it is gitmem's own state and is
    only ever replaced atomically."""
    try:
        data = json.loads(_pin_path(root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
        return {}
    out = {}
    for key, entry in data["settings"].items():
        if key in SAFETY_KEYS and isinstance(entry, dict) and "kept" in entry:
            out[key] = entry["kept"]
    return out


def pin_entries(root: Path) -> dict[str, dict[str, Any]]:
    """The pin file's entries: {key: {"kept", "incoming", "commit"}} ({} if none)."""
    try:
        data = json.loads(_pin_path(root).read_text(encoding="utf-8"))
        settings = data["settings"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {k: v for k, v in settings.items() if k in SAFETY_KEYS and isinstance(v, dict)} \
        if isinstance(settings, dict) else {}


def write_pins(root: Path, settings: dict[str, dict[str, Any]]) -> None:
    """Replace the pin file with ``settings`` ({key: {"kept", "incoming", ...}});
    an empty mapping removes it.  Written atomically (temp file + rename)."""
    path = _pin_path(root)
    if not settings:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    from . import safefs
    data = json.dumps({"settings": settings}, indent=2, sort_keys=True).encode("utf-8")
    safefs.write_bytes(path.parent, path.name, data)


def clear_pins(root: Path, keys: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Drop the pins of ``keys`` (all when None); returns the entries removed."""
    entries = pin_entries(root)
    chosen = set(entries) if keys is None else set(keys) & set(entries)
    removed = {k: entries.pop(k) for k in sorted(chosen)}
    write_pins(root, entries)
    return removed


def pending_changes(root: Path) -> dict[str, dict[str, Any]]:
    """Safety settings a sync held back and nobody has accepted yet, for
    ``gitmem doctor`` and ``gitmem config show``: {key: {"kept": value in force,
    "file": weaker value in .gitmem.yaml, "since": commit that brought it}}.

    A pin the file no longer weakens is not listed (it has no effect)."""
    entries = pin_entries(root)
    if not entries:
        return {}
    try:
        file_values = safety_values(VaultConfig.load(root, apply_pins=False))
    except (InvalidMetadata, StorageError):
        file_values = {}
    out = {}
    for key, entry in entries.items():
        kept = _clean_safety_value(key, entry.get("kept"))
        if kept is None:
            continue
        now = file_values.get(key, entry.get("incoming"))
        if now is None or _weaker(key, now, kept):
            out[key] = {"kept": kept, "file": now, "since": entry.get("commit")}
    return out


def env_author() -> Identity | None:
    """The author named by ``GITMEM_AUTHOR`` (``"Name <email>"``), if set."""
    value = os.environ.get("GITMEM_AUTHOR", "").strip()
    return Identity.parse(value) if value else None
