"""gitmem: a Git-backed Markdown memory vault for LLM agents.

``import gitmem`` is cheap: the heavy modules (dulwich, YAML, Whoosh) load on
first use of the name that needs them.

    >>> from gitmem import Vault
    >>> vault = Vault.init("my-vault")                      # doctest: +SKIP
    >>> vault.add("Prefers dark mode", "Use dark themes.", type="preference")  # doctest: +SKIP
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .version import __version__

# name -> module that defines it; resolved lazily by __getattr__ (PEP 562).
_EXPORTS = {
    "Vault": "vault",
    "Memory": "memory.schema",
    "Version": "ops.history",
    "VaultConfig": "config",
    "Identity": "config",
    "Toolbox": "agents.registry",
    "MEMORY_TYPES": "memory.schema",
    "GitmemError": "errors",
    "InvalidInput": "errors",
    "InvalidPath": "errors",
    "UnsafePath": "errors",
    "InvalidTitle": "errors",
    "InvalidMetadata": "errors",
    "InvalidContent": "errors",
    "ContentTooLarge": "errors",
    "InvalidFrontmatter": "errors",
    "InvalidQuery": "errors",
    "MatchError": "errors",
    "NotFound": "errors",
    "NotAVault": "errors",
    "RevisionNotFound": "errors",
    "Protected": "errors",
    "Conflict": "errors",
    "AmbiguousReference": "errors",
    "BranchMoved": "errors",
    "LockTimeout": "errors",
    "StorageError": "errors",
    "VaultClosed": "errors",
    "SecretDetected": "errors",
    "NotInstalled": "errors",
    "SearchEngineUnsupported": "errors",
    "SyncError": "errors",
    "UnsafeRemoteTree": "errors",
    "SyncReport": "sync.syncer",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:  # pragma: no cover
    # What __getattr__ hands out, for type checkers: ``X as X`` marks a re-export.
    from .agents.registry import Toolbox as Toolbox
    from .config import Identity as Identity
    from .config import VaultConfig as VaultConfig
    from .errors import *  # noqa: F403
    from .memory.schema import MEMORY_TYPES as MEMORY_TYPES
    from .memory.schema import Memory as Memory
    from .ops.history import Version as Version
    from .sync.syncer import SyncReport as SyncReport
    from .vault import Vault as Vault


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gitmem' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
