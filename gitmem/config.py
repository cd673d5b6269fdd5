"""The vault configuration file, ``.gitmem.yaml`` at the vault root (tracked in git).

It is small, commented and meant to be edited by a person, and it travels with
sync, so it is read like anything that arrives from elsewhere: unknown keys are
ignored (so newer gitmem versions can add settings); every known setting is
checked for its type and range in one place (:meth:`VaultConfig.from_dict`:
bounded integers, finite numbers, identities without NUL, line breaks or
``<>``).  A bad value is never applied: the default is used instead and the
problem is kept in :attr:`VaultConfig.problems` (``gitmem doctor`` and the sync
report name it), so one bad line never stops the vault.  Only a file that is
not YAML, or not a mapping of settings, is refused as a whole.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .errors import InvalidMetadata, StorageError
from .memory.paths import LAYOUTS, NEW_VAULT_LAYOUT, UNSET_LAYOUT
from .memory.schema import DEFAULT_TIERS, MEMORY_TYPES

__all__ = ["CONFIG_NAME", "VaultConfig", "LifecycleSettings", "SyncSettings", "TrustSettings", "Identity",
           "DEFAULT_USER", "DEFAULT_CONFIG_TEXT", "GITIGNORE", "GITATTRIBUTES", "SAFETY_KEYS", "PIN_FILE",
           "remote_setting", "safety_values", "weakened_settings",
           "read_pins", "write_pins", "clear_pins", "pending_changes", "pin_entries"]

CONFIG_NAME = ".gitmem.yaml"
# Settings that guard the vault.  A sync never weakens them silently: the local
# value stays in force (pinned) until a person accepts the change.
SAFETY_KEYS = ("secrets", "protected_types", "max_content_bytes", "trust")
# Under .git/gitmem/: the pinned values, per vault clone, never shared or committed.
PIN_FILE = "config-pinned.json"
_SECRETS_RANK = {"allow": 0, "redact": 1, "refuse": 2}
# Ranges of the numeric settings: wide enough for any real use, small enough that no
# value overflows a C integer or a float, or turns a loop over lines into hours.
MAX_IDENTITY_CHARS = 256
_IDENTITY_FORBIDDEN = "\x00\n\r<>"
MAX_CONTENT_BYTES_LIMIT = 1 << 30
MAX_INDEX_LINES = 100_000
MAX_DAYS = 36_500.0
MAX_RETRIEVALS = 1_000_000
# Background sync (``sync: {remote, interval}``): seconds between fetches.  The file travels
# with sync, so its lower bound keeps a collaborator's value from hammering the server.
SYNC_INTERVAL_DEFAULT = 60.0
SYNC_INTERVAL_MIN = 5.0
SYNC_INTERVAL_MAX = 86_400.0
# A remote name git accepts (as ``gitmem remote add`` checks it).
_REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

DEFAULT_CONFIG_TEXT = """\
# gitmem vault configuration. Edit freely; gitmem reads it on every open.
version: 1
# Tier folders, from the shortest-lived to the longest; 'archive' must be last.
tiers: [short_term, mid_term, long_term, archive]
# Where new memories go: flat = <tier>/<name>.md; hashed = <tier>/<h1>/<h2>/<name>.md
# (two hash folders: cheaper writes past ~10,000 memories). `gitmem layout` converts.
layout: """ + NEW_VAULT_LAYOUT + """
# Types that ordinary delete/overwrite/move calls refuse (pass --force / force=True).
protected_types: [goal, rule, constraint]
# Commit author for writes made through gitmem when no agent name is given.
author:
  name: gitmem
  email: gitmem@localhost
# Commit author for edits a person makes outside gitmem (Obsidian, vim ...). Left as
# 'vault user', your git identity is used (GIT_AUTHOR_NAME, else git config user.name).
user:
  name: vault user
  email: user@localhost
# Largest memory (frontmatter + body) accepted, in bytes.
max_content_bytes: 4194304
# Content that looks like a secret (API keys, tokens, private keys): refuse | redact | allow.
secrets: refuse
# Goals, rules and constraints written by an agent, an import or a remote are proposals
# until you accept them (`gitmem accept ID`). Agents listed here write them in force;
# files from remotes listed here keep the origin they state (see docs/safety.md).
trust:
  agents: []
  remotes: []
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


# The first commit's .gitignore and .gitattributes (a new vault; an adopted folder gets
# each only when it has no file of that name).
GITIGNORE = """\
# gitmem keeps its private state (lock, caches, search index) in .git/gitmem/.
# Editor and OS litter that should never become a memory:
.obsidian/workspace*.json
.obsidian/cache
.trash/
.DS_Store
Thumbs.db
*.swp
*.swo
*~
4913
.*.gitmem-tmp-*
"""
# MEMORY.md is regenerated by the next gitmem write, so a `git pull` or `git merge`
# should never stop on a conflict in it: git's built-in union driver keeps both sides.
GITATTRIBUTES = """\
MEMORY.md merge=union
"""


@dataclass(frozen=True)
class Identity:
    """A commit author: ``Name <email>``."""

    name: str
    email: str
    #: What kind of writer this is (``agent:bot``, ``tool:...``; see gitmem.memory.provenance),
    #: set by the front door that writes as it; None: the vault's default.
    origin: str | None = field(default=None, compare=False)

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

    @classmethod
    def checked(cls, name: Any, email: Any, what: str = "author") -> Identity:
        """An identity git can store as it is: each part a non-empty string of at most
        :data:`MAX_IDENTITY_CHARS` characters without NUL, line breaks, ``<`` or ``>``
        (``git fsck --strict`` rejects commits whose author holds them)."""
        for part, value in (("name", name), ("email", email)):
            if not isinstance(value, str) or not value.strip() or len(value) > MAX_IDENTITY_CHARS \
                    or any(c in value for c in _IDENTITY_FORBIDDEN):
                raise InvalidMetadata(f"{what}.{part} must be text of 1 to {MAX_IDENTITY_CHARS} characters "
                                      "without NUL, line breaks, '<' or '>'")
        return cls(name.strip(), email.strip())

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
    def from_dict(cls, dedup: Any, reflect: Any, problems: list[str] | None = None) -> LifecycleSettings:
        """Validate the ``dedup`` and ``reflect`` mappings of the config file.

        With ``problems``, a bad value is described there and its default kept;
        without, the first one raises :class:`InvalidMetadata`."""
        found: list[str] = [] if problems is None else problems
        kw: dict[str, Any] = {}

        def take(attr: str, check: Any, value: Any, name: str) -> None:
            try:
                kw[attr] = check(value, name)
            except InvalidMetadata as exc:
                found.append(exc.message)

        for section, data, keys in (("dedup", dedup, {"skip": "skip_above",
                                                      "supersede": "supersede_above"}),
                                    ("reflect", reflect, {"prune_below": "prune_below",
                                                          "merge_above": "merge_above"})):
            if data is None:
                continue
            if not isinstance(data, dict):
                found.append(f"{CONFIG_NAME}: {section} must be a mapping")
                continue
            for key, attr in keys.items():
                if key in data:
                    take(attr, _fraction, data[key], f"{section}.{key}")
        reflect = reflect if isinstance(reflect, dict) else {}
        if "half_life_days" in reflect:
            take("half_life_days", _half_lives, reflect["half_life_days"], "reflect.half_life_days")
        if "promote_after_days" in reflect:
            take("promote_after_days", lambda v, n: float(_bounded(v, n, 0, MAX_DAYS)),
                 reflect["promote_after_days"], "reflect.promote_after_days")
        if "promote_min_retrievals" in reflect:
            take("promote_min_retrievals", lambda v, n: int(_bounded(v, n, 0, MAX_RETRIEVALS, integer=True)),
                 reflect["promote_min_retrievals"], "reflect.promote_min_retrievals")
        if kw.get("supersede_above", cls.supersede_above) > kw.get("skip_above", cls.skip_above):
            found.append(f"{CONFIG_NAME}: dedup.supersede must not exceed dedup.skip")
            kw.pop("supersede_above", None)
            kw.pop("skip_above", None)
        if problems is None and found:
            raise InvalidMetadata(found[0])
        return cls(**kw)


def _bounded(value: Any, name: str, low: float, high: float, *, integer: bool = False) -> float:
    """``value`` if it is a finite number (an integer when ``integer``) from ``low`` to ``high``."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)) \
            or (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high:
        shown = f"{high:g}" if isinstance(high, float) else f"{high}"
        raise InvalidMetadata(f"{CONFIG_NAME}: {name} must be {kind} from {low:g} to {shown}")
    return value


def _half_lives(value: Any, name: str) -> dict[str, float]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InvalidMetadata(f"{CONFIG_NAME}: {name} maps tiers to positive numbers of days")
    out = {}
    for tier, days in value.items():
        if _bounded(days, f"{name}.{tier}", 0, MAX_DAYS) <= 0:
            raise InvalidMetadata(f"{CONFIG_NAME}: {name}.{tier} must be a positive number of days")
        out[tier] = float(days)
    return out


def _fraction(value: Any, name: str) -> float:
    return float(_bounded(value, name, 0, 1))


@dataclass(frozen=True)
class SyncSettings:
    """Background sync of long-running processes (``sync:`` in the config): ``remote``
    (None: off) and ``interval``, the seconds between fetches.  Whether the remote is
    configured in this clone is checked when the sync starts (remotes live in
    ``.git/config``, not in the shared file)."""

    remote: str | None = None
    interval: float = SYNC_INTERVAL_DEFAULT


def remote_setting(value: Any, name: str = "sync.remote") -> str | None:
    """A remote name as a setting or a flag gives it: None for ``off``, ``none``,
    ``false`` or empty (no background sync); else a name git accepts."""
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() in
                                           ("", "off", "none", "false", "no")):
        return None
    if not isinstance(value, str) or not _REMOTE_NAME.fullmatch(value) or ".." in value \
            or value.endswith((".lock", ".")):
        raise InvalidMetadata(f"{CONFIG_NAME}: {name} must be a remote name (letters, digits, '.', '_', "
                              "'-') or off")
    return value


def _sync(value: Any) -> SyncSettings:
    if value is None or value is False:   # `sync: off`
        return SyncSettings()
    if not isinstance(value, dict):
        raise InvalidMetadata(f"{CONFIG_NAME}: sync must be a mapping such as {{remote: origin, interval: 60}}, "
                              "or off")
    unknown = sorted(str(k) for k in value if k not in ("remote", "interval"))
    if unknown:
        raise InvalidMetadata(f"{CONFIG_NAME}: sync has unknown key(s) {', '.join(unknown)} "
                              "(it takes remote and interval)")
    interval = float(_bounded(value.get("interval", SYNC_INTERVAL_DEFAULT), "sync.interval",
                              SYNC_INTERVAL_MIN, SYNC_INTERVAL_MAX))
    return SyncSettings(remote_setting(value.get("remote")), interval)


@dataclass(frozen=True)
class TrustSettings:
    """``trust:`` in the config: agents whose goals, rules and constraints are in force
    without a person accepting them, and remotes whose files keep the origin they state."""

    agents: tuple[str, ...] = ()
    remotes: tuple[str, ...] = ()

    def entries(self) -> list[str]:
        """The settings as one sorted list (``agent:NAME``, ``remote:NAME``): how a sync
        compares them (a longer list trusts more)."""
        return sorted([f"agent:{a}" for a in self.agents] + [f"remote:{r}" for r in self.remotes])

    @classmethod
    def from_entries(cls, entries: list[str]) -> TrustSettings:
        """The settings :meth:`entries` lists."""
        return cls(tuple(e[6:] for e in entries if e.startswith("agent:")),
                   tuple(e[7:] for e in entries if e.startswith("remote:")))


def _names(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > 1000 or not all(
            isinstance(v, str) and v.strip() and len(v) <= 200 and not re.search(r"[\x00-\x1f\x7f]", v)
            for v in value):
        raise InvalidMetadata(f"{CONFIG_NAME}: trust.{what} must be a list of names")
    return tuple(dict.fromkeys(v.strip() for v in value))


def _trust(value: Any) -> TrustSettings:
    if value is None:
        return TrustSettings()
    if not isinstance(value, dict) or set(value) - {"agents", "remotes"}:
        raise InvalidMetadata(f"{CONFIG_NAME}: trust must be a mapping with 'agents' and 'remotes' lists")
    return TrustSettings(_names(value.get("agents"), "agents"), _names(value.get("remotes"), "remotes"))


#: Who a person's edits outside gitmem are committed as when neither ``user:`` in
#: ``.gitmem.yaml`` nor git (``GIT_AUTHOR_NAME``, ``user.name``) names them.
DEFAULT_USER = Identity("vault user", "user@localhost")


@dataclass(frozen=True)
class VaultConfig:
    """Parsed ``.gitmem.yaml``; defaults for anything missing."""

    tiers: tuple[str, ...] = DEFAULT_TIERS
    layout: str = UNSET_LAYOUT
    # The tier of the notes outside the tier folders (an adopted vault), None: not memories.
    outside_notes: str | None = None
    protected_types: tuple[str, ...] = ("goal", "rule", "constraint")
    author: Identity = Identity("gitmem", "gitmem@localhost")
    user: Identity = DEFAULT_USER
    # 4 MiB: room for 1,000,000 characters of any script (up to 4 bytes each) plus frontmatter.
    max_content_bytes: int = 4_194_304
    memory_index: bool = True
    memory_index_lines: int = 200
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)
    sync: SyncSettings = field(default_factory=SyncSettings)
    trust: TrustSettings = field(default_factory=TrustSettings)
    extra: dict[str, Any] = field(default_factory=dict)
    # Safety settings held at their local value after a sync brought weaker ones.
    pinned: tuple[str, ...] = ()
    # Bad values of the file, each held back (the default in force instead), described.
    problems: tuple[str, ...] = ()

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
        return cls.from_dict(data)

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
            elif key == "trust":
                changes["trust"] = TrustSettings.from_entries(strongest)
            else:
                changes["max_content_bytes"] = strongest
        if not kept:
            return self
        return replace(self, extra=extra, pinned=tuple(kept), **changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VaultConfig:
        """Validate a settings mapping (see :data:`DEFAULT_CONFIG_TEXT`).

        Every setting is checked on its own; a bad one is left at its default
        and described in :attr:`problems` (it is never applied)."""
        kwargs: dict[str, Any] = {}
        problems: list[str] = []
        for key, check in _CHECKS:
            if key not in data:
                continue
            try:
                kwargs[key] = check(data[key])
            except InvalidMetadata as exc:
                problems.append(exc.message)
            except (TypeError, ValueError, AttributeError, OverflowError) as exc:
                problems.append(f"{CONFIG_NAME}: {key} has the wrong shape ({type(exc).__name__})")
        tiers = kwargs.get("tiers", DEFAULT_TIERS)
        if kwargs.get("outside_notes") is not None and kwargs["outside_notes"] not in tiers[:-1]:
            problems.append(f"{CONFIG_NAME}: outside_notes names {kwargs.pop('outside_notes')!r}, "
                            f"which is not a tier (nor may it be the archive)")
        kwargs["lifecycle"] = LifecycleSettings.from_dict(data.get("dedup"), data.get("reflect"), problems)
        known = {"version", "dedup", "reflect"} | {key for key, _ in _CHECKS}
        kwargs["extra"] = {k: v for k, v in data.items() if k not in known}
        return cls(**kwargs, problems=tuple(problems))


def _tiers(value: Any) -> tuple[str, ...]:
    if (not isinstance(value, list) or not 2 <= len(value) <= 16
            or not all(isinstance(t, str) and t.isidentifier() and len(t) <= 64 for t in value)
            or len(set(value)) != len(value)):
        raise InvalidMetadata(f"{CONFIG_NAME}: tiers must be a list of 2 to 16 distinct folder names")
    return tuple(value)


def _layout(value: Any) -> str:
    if value not in LAYOUTS:
        raise InvalidMetadata(f"{CONFIG_NAME}: layout must be one of {', '.join(LAYOUTS)}")
    return str(value)


def _outside_notes(value: Any) -> str | None:
    # Checked against the tiers in VaultConfig.from_dict (the tiers may come later in the file).
    if value is None or (isinstance(value, str) and value.isidentifier() and len(value) <= 64):
        return value
    raise InvalidMetadata(f"{CONFIG_NAME}: outside_notes must name a tier (or be null)")


def _protected(value: Any) -> tuple[str, ...]:
    types = value or []
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise InvalidMetadata(f"{CONFIG_NAME}: protected_types must be a list of memory types")
    unknown = [t for t in types if t not in MEMORY_TYPES]
    if unknown:
        raise InvalidMetadata(f"{CONFIG_NAME}: unknown protected type(s) {unknown}")
    return tuple(types)


def _identity(key: str) -> Any:
    def check(value: Any) -> Identity:
        if isinstance(value, str):
            parsed = Identity.parse(value) if value.strip() else None
            if parsed is not None:
                return Identity.checked(parsed.name, parsed.email, f"{CONFIG_NAME}: {key}")
        elif isinstance(value, dict) and value.get("name"):
            return Identity.checked(value["name"], value.get("email") or "gitmem@localhost",
                                    f"{CONFIG_NAME}: {key}")
        raise InvalidMetadata(f"{CONFIG_NAME}: {key} needs a name (and an email)")
    return check


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidMetadata(f"{CONFIG_NAME}: memory_index must be true or false")
    return value


_CHECKS: tuple[tuple[str, Any], ...] = (
    ("tiers", _tiers),
    ("layout", _layout),
    ("outside_notes", _outside_notes),
    ("protected_types", _protected),
    ("author", _identity("author")),
    ("user", _identity("user")),
    ("max_content_bytes", lambda v: int(_bounded(v, "max_content_bytes", 1024, MAX_CONTENT_BYTES_LIMIT,
                                                 integer=True))),
    ("memory_index", _flag),
    ("memory_index_lines", lambda v: int(_bounded(v, "memory_index_lines", 20, MAX_INDEX_LINES, integer=True))),
    ("sync", _sync),
    ("trust", _trust),
)


# ------------------------------------------------------------ safety pins
def safety_values(config: VaultConfig) -> dict[str, Any]:
    """The safety settings of ``config`` as plain values (``secrets`` as written,
    ``refuse`` when unset; ``protected_types`` as a sorted list)."""
    secrets = config.extra.get("secrets", "refuse")
    if secrets is False:  # YAML 'off'
        secrets = "allow"
    return {"secrets": secrets if isinstance(secrets, str) else repr(secrets),
            "protected_types": sorted(config.protected_types),
            "max_content_bytes": config.max_content_bytes,
            "trust": config.trust.entries()}


def _weaker(key: str, new: Any, old: Any) -> bool:
    """True if safety setting ``key`` at ``new`` protects less than at ``old``."""
    if key == "secrets":
        # An unknown policy counts as the weakest: it would break every write.
        return _SECRETS_RANK.get(new, -1) < _SECRETS_RANK.get(old, -1)
    if key == "protected_types":
        return not set(old) <= set(new)
    if key == "trust":
        return not set(new) <= set(old)   # trusting more is weaker
    return int(new) > int(old)


def _strongest(key: str, a: Any, b: Any) -> Any:
    if key == "secrets":
        return a if _SECRETS_RANK.get(a, -1) >= _SECRETS_RANK.get(b, -1) else b
    if key == "protected_types":
        return sorted(set(a) | set(b))
    if key == "trust":
        return sorted(set(a) & set(b))
    return min(int(a), int(b))


def _clean_safety_value(key: str, value: Any) -> Any:
    """A pinned value as read from the pin file, or None if it is unusable."""
    if key == "secrets":
        return value if value in _SECRETS_RANK else None
    if key == "protected_types":
        ok = isinstance(value, list) and all(isinstance(t, str) and t in MEMORY_TYPES for t in value)
        return sorted(value) if ok else None
    if key == "trust":
        ok = isinstance(value, list) and all(isinstance(t, str) and t.startswith(("agent:", "remote:"))
                                             for t in value)
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
