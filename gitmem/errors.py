"""The one exception hierarchy of gitmem.

Every error gitmem raises on purpose is a :class:`GitmemError` with a stable
``code`` (a snake_case string that scripts, agent tools and the MCP server may
match on), a human ``message``, an optional ``hint`` saying what to do about it,
and a process ``exit_code`` used by the CLI.  Codes never change meaning once
released; new situations get new codes.

Exit codes (documented in the README):

====  =====================================================
0     success
1     unexpected failure (storage, git, bug)
2     invalid input (bad path, title, metadata, query ...)
3     not found (memory, vault, revision)
4     refused: protected memory (use ``force``)
5     conflict (name taken, concurrent change, ambiguous id)
6     busy: the vault lock could not be taken in time
====  =====================================================
"""

from __future__ import annotations

import errno
from typing import Any

__all__ = [  # the error classes (from_system_error is a helper, not re-exported by gitmem)
    "GitmemError",
    "InvalidInput",
    "InvalidPath",
    "UnsafePath",
    "InvalidTitle",
    "InvalidMetadata",
    "InvalidContent",
    "ContentTooLarge",
    "InvalidFrontmatter",
    "InvalidQuery",
    "MatchError",
    "NotFound",
    "NotAVault",
    "RevisionNotFound",
    "Protected",
    "Conflict",
    "AmbiguousReference",
    "BranchMoved",
    "LockTimeout",
    "StorageError",
    "VaultClosed",
    "SecretDetected",
    "NotInstalled",
    "SearchEngineUnsupported",
    "SyncError",
    "UnsafeRemoteTree",
]


class GitmemError(Exception):
    """Base class of every error gitmem raises deliberately."""

    code: str = "error"
    exit_code: int = 1
    default_hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None, code: str | None = None,
                 **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint
        if code is not None:
            self.code = code
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form used by ``--json`` output and agent tools."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        if self.details:
            out["details"] = {k: v for k, v in self.details.items() if v is not None}
        return out

    def __str__(self) -> str:
        return self.message


class InvalidInput(GitmemError):
    """The caller passed something gitmem will not accept."""

    code = "invalid_input"
    exit_code = 2


class InvalidPath(InvalidInput):
    """A path escapes the vault, names private state, or is not portable."""

    code = "invalid_path"
    default_hint = ("Use a relative path inside the vault such as "
                    "'long_term/editor-preferences.md'.")


class UnsafePath(InvalidPath):
    """A path that reaches a symbolic link, or a tree entry gitmem will not write
    (a link or a submodule): gitmem never follows links inside the vault."""

    code = "unsafe_path"
    default_hint = ("gitmem never reads, writes or commits through symbolic links in the vault; "
                    "replace the link with a real file or folder ('gitmem doctor' lists them).")


class InvalidTitle(InvalidInput):
    """A title is empty, too long or contains control characters."""

    code = "invalid_title"


class InvalidMetadata(InvalidInput):
    """A frontmatter field has a value outside its vocabulary or range."""

    code = "invalid_metadata"


class InvalidContent(InvalidInput):
    """Memory content is not valid text (NUL bytes, not UTF-8 ...)."""

    code = "invalid_content"


class ContentTooLarge(InvalidInput):
    """Content exceeds the vault's ``max_content_bytes``."""

    code = "content_too_large"
    default_hint = "Split the memory, or raise max_content_bytes in .gitmem.yaml."


class InvalidFrontmatter(InvalidInput):
    """YAML frontmatter cannot be parsed, or is hostile (alias bomb, too big)."""

    code = "invalid_frontmatter"


class InvalidQuery(InvalidInput):
    """A search query has bad syntax."""

    code = "invalid_query"


class MatchError(InvalidInput):
    """An exact-replace target matched zero or several times."""

    code = "no_match"


class NotFound(GitmemError):
    """A memory (or other named thing) does not exist."""

    code = "not_found"
    exit_code = 3


class NotAVault(NotFound):
    """The folder is not a gitmem vault."""

    code = "not_a_vault"
    default_hint = "Create one with 'gitmem init DIR' or point --vault / GITMEM_VAULT at one."


class RevisionNotFound(NotFound):
    """A commit, version or date does not resolve for this memory."""

    code = "revision_not_found"
    default_hint = "List the versions with 'gitmem log ID'."


class Protected(GitmemError):
    """The memory's type is protected; the operation needs ``force``."""

    code = "protected"
    exit_code = 4
    default_hint = "Pass force=True (CLI: --force) if you really mean it; it is recorded in the commit."


class Conflict(GitmemError):
    """The operation collides with existing state."""

    code = "conflict"
    exit_code = 5


class BranchMoved(Conflict):
    """The vault's branch moved while a write was being made (a git command committed,
    or held the branch's lock); nothing was changed.  A write retries by itself first."""

    code = "branch_moved"
    default_hint = "Retry; nothing was changed."


class AmbiguousReference(Conflict):
    """A short id, title or file name matches several memories."""

    code = "ambiguous_reference"
    default_hint = "Use the full id or the path."


class LockTimeout(GitmemError):
    """Another process held the vault lock for too long."""

    code = "vault_busy"
    exit_code = 6
    default_hint = "Another gitmem process is writing; retry in a moment."


class StorageError(GitmemError):
    """The file system or git repository failed underneath gitmem (a full disk, an
    I/O error, a read-only file system, a damaged cache file)."""

    code = "storage_error"
    exit_code = 1
    default_hint = ("Check the disk (free space, permissions, errors), then retry; no acknowledged "
                    "write is lost and 'gitmem doctor' checks the vault.")


class NotInstalled(GitmemError):
    """An optional part of gitmem is asked for but its extra is not installed
    (e.g. hybrid search without ``pip install "gitmem-vault[embed]"``)."""

    code = "not_installed"
    exit_code = 2


class SearchEngineUnsupported(GitmemError):
    """The installed search engine (the ``whoosh`` module) is not the release gitmem
    supports: another version of whoosh-reloaded, another distribution of ``whoosh``, or
    a release lacking internals gitmem's search index builds on.  Raised when the search
    index opens; the message names what differs and the hint how to install the
    supported release."""

    code = "search_engine_unsupported"
    exit_code = 1


class SyncError(GitmemError):
    """A sync with a git remote failed; the local vault is unchanged and usable.

    ``code`` says why: ``remote_unreachable`` (network, DNS, missing path),
    ``auth_failed``, ``push_rejected``, ``dirty_worktree`` (uncommitted edits
    to files the incoming changes touch), ``unrelated_history`` (the remote
    holds another vault: no common first commit) or ``sync_error``.
    """

    code = "sync_error"
    exit_code = 1


class UnsafeRemoteTree(SyncError):
    """A remote's commits hold a tree entry gitmem will not write to the work tree
    (``..``, ``.git``, a name with ``/``, a symbolic link, a submodule ...).

    Nothing was written and HEAD did not move; ``details["entry"]`` names it."""

    code = "unsafe_remote_tree"
    exit_code = 2
    default_hint = ("The remote holds a file gitmem will not write into a vault. Remove it on the "
                    "remote (with git), then sync again.")


class VaultClosed(GitmemError):
    """The Vault object was closed; open the vault again to keep using it."""

    code = "vault_closed"
    exit_code = 1
    default_hint = "Open the vault again with Vault.open()."


class SecretDetected(InvalidInput):
    """The content looks like it holds a secret (API key, token, private key).

    Git never forgets, so gitmem refuses such a write by default;
    ``details["findings"]`` lists each kind and where it was found (never the
    secret itself).
    """

    code = "secret_detected"
    default_hint = ("Remove the secret (or write [REDACTED]) and retry. To store it anyway, or to have "
                    "gitmem redact it, set 'secrets: allow' or 'secrets: redact' in .gitmem.yaml.")


# errno values that mean "the storage failed", not "gitmem has a bug".
_STORAGE_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EIO", "EROFS", "EFBIG", "EACCES", "EPERM", "EMFILE", "ENFILE", "ENOLCK")
    if hasattr(errno, name))
# SQLite primary result codes (sqlite3 exceptions' ``sqlite_errorcode & 0xff``).
_SQLITE_BUSY = frozenset({5, 6})   # SQLITE_BUSY, SQLITE_LOCKED
_SQLITE_STORAGE = frozenset({3, 8, 10, 11, 13, 14, 15, 26})
# SQLITE_PERM, READONLY, IOERR, CORRUPT, FULL, CANTOPEN, PROTOCOL, NOTADB


def from_system_error(exc: BaseException, what: str = "the vault") -> GitmemError | None:
    """The :class:`GitmemError` an operating-system or SQLite error stands for, or None
    when it stands for none (a bug: the caller reports it as such).

    A full disk, an I/O error or a read-only file system (``OSError``, or SQLite's
    ``SQLITE_FULL``, ``SQLITE_IOERR`` ...) is :class:`StorageError`; SQLite still busy
    after its timeout is :class:`LockTimeout`.  ``what`` names what failed, for the message.
    SQLite errors are recognised by their ``sqlite_errorcode`` (not imported here)."""
    if isinstance(exc, GitmemError):
        return exc
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        if code & 0xFF in _SQLITE_BUSY:
            return LockTimeout(f"{what} stayed locked by another gitmem process ({exc})")
        if code & 0xFF in _SQLITE_STORAGE:
            return StorageError(f"{what}: {exc}")
        return None
    if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS:
        where = f" ({exc.filename})" if exc.filename else ""
        return StorageError(f"{what}: {exc.strerror or exc}{where}")
    return None
