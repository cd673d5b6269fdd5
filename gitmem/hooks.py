"""Git hooks that keep gitmem in step with the git command line.

``gitmem hooks install`` writes five small POSIX ``sh`` scripts into the
vault's hooks folder (``core.hooksPath`` if set, else ``.git/hooks``):

* ``post-commit``, ``post-merge``, ``post-checkout``, ``post-rewrite``:
  after git changed files (a commit, pull, merge, checkout, rebase), refresh
  the search index for those files and record the new commits in the
  memory history (:meth:`Vault.refresh`, :meth:`Vault.sync_history`);
* ``pre-commit``: validate the *staged* content of every added or modified
  memory file (UTF-8, frontmatter YAML, field values) and reject the commit
  with one line per bad file.

Each script records the interpreter that installed it and runs
``"$PY" -m gitmem --vault "$(git rev-parse --show-toplevel)" hook NAME ARGS``.
They fail safe: when that interpreter is gone or cannot import gitmem, a
post-* hook prints one warning and exits 0, and pre-commit lets the commit
through unvalidated (with a warning).  A ``GITMEM_HOOK`` environment variable
guards against re-entry: the script exits at once when it is set and sets it
for everything it runs.  gitmem's own commits are built from the object store
and never run hooks.

A hook is gitmem's when it contains the :data:`MARKER` line; install,
uninstall and status never touch other hooks (``install --force`` moves a
foreign hook aside to ``NAME.pre-gitmem``; ``uninstall`` puts it back).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .errors import Conflict, GitmemError, InvalidInput, StorageError
from .paths import is_memory_path

if TYPE_CHECKING:  # pragma: no cover
    from .vault import Vault

__all__ = ["HOOK_NAMES", "MARKER", "HookState", "hook_script", "hooks_dir", "hook_status",
           "install_hooks", "uninstall_hooks", "run_hook", "staged_problems"]

HOOK_NAMES = ("pre-commit", "post-commit", "post-merge", "post-checkout", "post-rewrite")
POST_HOOKS = HOOK_NAMES[1:]
MARKER = "# gitmem-hook:"
BACKUP_SUFFIX = ".pre-gitmem"
# The interpreter line of the copies in the repository's hooks/ folder, for
# people who install hooks by hand: any python3 with gitmem installed.
MANUAL_PY_LINE = 'PY="${GITMEM_PYTHON:-python3}"'
_NULL_SHA = "0" * 40
_HOOK_LOCK_TIMEOUT = 10.0  # a hook waits this long for the vault lock, then gives up quietly

_PURPOSE = {
    "pre-commit": "Rejects a commit whose staged memory files have broken frontmatter.",
    "post-commit": "Refreshes gitmem's search index and history for the committed files.",
    "post-merge": "Refreshes gitmem's search index and history after a merge or pull.",
    "post-checkout": "Refreshes gitmem's search index and history after a checkout.",
    "post-rewrite": "Refreshes gitmem's search index and history after a rebase or amend.",
}

_TEMPLATE = """\
#!/bin/sh
{marker} {name}
# {purpose}
# Installed by 'gitmem hooks install' (or copied from gitmem's hooks/ folder);
# 'gitmem hooks uninstall' removes it.
# It never blocks git because gitmem is missing: {failsafe}
{py_line}
# Re-entrancy guard: anything this hook starts must not run it again.
if [ -n "${{GITMEM_HOOK:-}}" ]; then exit 0; fi
GITMEM_HOOK={name}
export GITMEM_HOOK
if ! "$PY" -c 'import gitmem' >/dev/null 2>&1; then
    echo "gitmem: {name} hook skipped: cannot run gitmem with $PY{skipped} (reinstall: gitmem hooks install)" >&2
    exit 0
fi
{run}
"""

_POST_RUN = """\
"$PY" -m gitmem --vault "$(git rev-parse --show-toplevel)" hook {name} "$@" ||
    echo "gitmem: {name} hook failed; the search index catches up the next time gitmem opens the vault" >&2
exit 0"""

_PRE_RUN = """\
exec "$PY" -m gitmem --vault "$(git rev-parse --show-toplevel)" hook {name} "$@\""""


def py_line(python: str) -> str:
    """The line of a hook script that records the interpreter."""
    return "PY=" + "'" + python.replace("'", "'\"'\"'") + "'"


def hook_script(name: str, python: str | None = None, *, manual: bool = False) -> str:
    """The text of hook ``name`` running gitmem with ``python`` (default: this interpreter).

    ``manual`` gives the copy kept in the repository's ``hooks/`` folder,
    whose interpreter is ``$GITMEM_PYTHON`` or ``python3``.
    """
    if name not in HOOK_NAMES:
        raise InvalidInput(f"unknown hook {name!r}", hint=f"gitmem hooks: {', '.join(HOOK_NAMES)}")
    pre = name == "pre-commit"
    return _TEMPLATE.format(
        marker=MARKER, name=name, purpose=_PURPOSE[name],
        failsafe=("without gitmem, commits are let through unvalidated." if pre
                  else "if gitmem cannot run, it warns once and exits 0."),
        py_line=MANUAL_PY_LINE if manual else py_line(python or sys.executable),
        skipped="; memories were not validated" if pre else "",
        run=(_PRE_RUN if pre else _POST_RUN).format(name=name))


# ------------------------------------------------------------- installing
@dataclass(frozen=True)
class HookState:
    """One hook file: ``state`` is ``gitmem``, ``foreign`` or ``missing``."""

    name: str
    path: str
    state: str
    python: str | None = None        # the interpreter a gitmem hook runs
    python_ok: bool | None = None    # does that interpreter still exist?
    backup: str | None = None        # a foreign hook moved aside by install --force

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "state": self.state, "python": self.python,
                "python_ok": self.python_ok, "backup": self.backup}


def hooks_dir(vault: "Vault") -> Path:
    """The folder git runs this vault's hooks from (``core.hooksPath`` aware)."""
    configured = None
    try:
        stack = vault.git.repo.get_config_stack()
        value = stack.get((b"core",), b"hooksPath")
        configured = value.decode("utf-8", "surrogateescape") if value else None
    except KeyError:
        configured = None
    if configured:
        path = Path(os.path.expanduser(configured))
        return path if path.is_absolute() else vault.root / path
    return vault.git.git_dir / "hooks"


def _is_ours(text: str) -> bool:
    return any(line.startswith(MARKER) for line in text.splitlines()[:5])


def _recorded_python(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("PY="):
            try:
                words = shlex.split(line[3:])
            except ValueError:
                return None
            return words[0] if words else None
    return None


def _state(folder: Path, name: str) -> HookState:
    path = folder / name
    backup = folder / f"{name}{BACKUP_SUFFIX}"
    backup_text = str(backup) if backup.exists() else None
    if not path.exists() and not path.is_symlink():
        return HookState(name, str(path), "missing", backup=backup_text)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return HookState(name, str(path), "foreign", backup=backup_text)
    if not _is_ours(text):
        return HookState(name, str(path), "foreign", backup=backup_text)
    python = _recorded_python(text)
    python_ok = (os.access(python, os.X_OK) if python and os.path.isabs(python) else None)
    return HookState(name, str(path), "gitmem", python, python_ok, backup_text)


def hook_status(vault: "Vault") -> list[HookState]:
    """The state of each gitmem hook in the vault's hooks folder."""
    folder = hooks_dir(vault)
    return [_state(folder, name) for name in HOOK_NAMES]


def install_hooks(vault: "Vault", *, force: bool = False, python: str | None = None) -> list[HookState]:
    """Write gitmem's hooks (replacing older gitmem hooks).

    A hook file that is not gitmem's is left alone and the whole install is
    refused (:class:`Conflict`, nothing written) unless ``force``; then it is
    renamed to ``NAME.pre-gitmem`` first.  ``python`` is the interpreter the
    hooks run (default: the current one).
    """
    python = python or sys.executable
    folder = hooks_dir(vault)
    states = [_state(folder, name) for name in HOOK_NAMES]
    foreign = [s for s in states if s.state == "foreign"]
    if foreign and not force:
        names = ", ".join(s.name for s in foreign)
        raise Conflict(f"{len(foreign)} existing hook(s) are not gitmem's: {names} (in {folder})",
                       hint="Pass --force to install anyway; each is kept as NAME.pre-gitmem and "
                            "restored by 'gitmem hooks uninstall'.")
    stuck = [s.name for s in foreign if s.backup]
    if stuck:
        raise Conflict(f"cannot keep your {', '.join(stuck)} hook: {stuck[0]}{BACKUP_SUFFIX} exists "
                       f"already (in {folder})", hint="Move the older copy away, then install again.")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for state in states:
            target = folder / state.name
            if state.state == "foreign":
                os.replace(target, folder / f"{state.name}{BACKUP_SUFFIX}")
            tmp = folder / f".{state.name}.gitmem-tmp-{os.getpid()}"
            tmp.write_text(hook_script(state.name, python), encoding="utf-8")
            tmp.chmod(0o755)
            os.replace(tmp, target)
    except OSError as exc:
        raise StorageError(f"cannot write hooks in {folder}: {exc.strerror or exc}") from exc
    return [_state(folder, name) for name in HOOK_NAMES]


def uninstall_hooks(vault: "Vault") -> list[HookState]:
    """Remove gitmem's hooks (only those), restoring hooks ``install --force``
    moved aside.  Returns the states of the hooks that were removed."""
    folder = hooks_dir(vault)
    removed = []
    for name in HOOK_NAMES:
        state = _state(folder, name)
        if state.state != "gitmem":
            continue
        Path(state.path).unlink()
        backup = folder / f"{name}{BACKUP_SUFFIX}"
        if backup.exists() and not (folder / name).exists():
            os.replace(backup, folder / name)
        removed.append(state)
    return removed


# ---------------------------------------------------------------- running
Echo = Callable[[str], None]


def run_hook(name: str, args: Sequence[str], vault_path: str | os.PathLike[str] | None,
             echo: Echo) -> int:
    """Run hook ``name`` for the vault at ``vault_path``; return the exit code.

    Never raises.  Only a pre-commit that found bad staged memories returns
    1; everything else (including gitmem failing) returns 0 after a one-line
    warning through ``echo``, so git is never blocked by gitmem itself.
    """
    root = Path(vault_path if vault_path is not None else os.getcwd())
    try:
        if name == "pre-commit":
            problems = staged_problems(root)
            for path, problem in problems:
                echo(f"gitmem: {path}: {problem}")
            if problems:
                echo("gitmem: commit rejected: fix the frontmatter of the file(s) above, `git add` "
                     "them, and commit again (or skip this check: git commit --no-verify)")
                return 1
            return 0
        if name not in POST_HOOKS:
            echo(f"gitmem: unknown hook {name!r}; expected one of {', '.join(HOOK_NAMES)}")
            return 0
        _post_hook(name, list(args), root, echo)
    except GitmemError as exc:
        echo(f"gitmem: {name} hook: {exc.message}{_UNCHECKED if name == 'pre-commit' else ''}")
    except Exception as exc:  # noqa: BLE001 - a hook must never fail the git command
        echo(f"gitmem: {name} hook failed: {type(exc).__name__}: {exc}"
             f"{_UNCHECKED if name == 'pre-commit' else ''}")
    return 0


_UNCHECKED = " (memories were not validated; the commit goes ahead)"


def _post_hook(name: str, args: list[str], root: Path, echo: Echo) -> None:
    from .vault import Vault
    with Vault.open(root, lock_timeout=_HOOK_LOCK_TIMEOUT) as vault:
        paths = _changed_paths(vault, name, args)
        if paths is not None:
            paths = [p for p in paths if vault.is_memory_path(p)]
        # No index yet: it is built on first use.  No memory changed: nothing to refresh.
        if (vault.state_dir / "index").exists() and paths != []:
            report = vault.refresh(paths)
            for path, problem in sorted(report.problems.items()):
                echo(f"gitmem: {path}: {problem} (indexed as plain Markdown)")
        vault.sync_history()


def _changed_paths(vault: "Vault", name: str, args: list[str]) -> list[str] | None:
    """The files a post-* hook must refresh, or None for "check them all"."""
    head = vault.git.head()
    if head is None:
        return None
    if name == "post-commit":
        parents = vault.git.commit(head).parents
        return _diff(vault, parents[0] if parents else None, head)
    if name == "post-checkout" and len(args) >= 3 and args[2] == "1":
        old, new = args[0], args[1]
        if old == new:
            return []  # a new branch at the same commit: no file changed
        if old != _NULL_SHA:
            try:
                return _diff(vault, vault.git.resolve(old), vault.git.resolve(new))
            except GitmemError:
                return None
    return None  # merges, rebases, file checkouts: stat every file (cheap)


def _diff(vault: "Vault", old: bytes | None, new: bytes) -> list[str]:
    paths: set[str] = set()
    for change in vault.git.changes_between(old, new):
        paths.update(p for p in (change.old_path, change.new_path) if p)
    return sorted(paths)


# -------------------------------------------------------------- pre-commit
def _git(root: Path, *args: str, data: bytes | None = None) -> bytes:
    result = subprocess.run(["git", *args], cwd=root, input=data, capture_output=True, check=False)
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip()
        raise StorageError(f"git {args[0]} failed: {message}")
    return result.stdout


def staged_problems(root: Path) -> list[tuple[str, str]]:
    """(path, problem) for each staged (added or modified) memory file whose
    content in the git index is not valid: not UTF-8, frontmatter that does
    not parse, or fields with bad values.  Uses the git CLI, so it honours
    ``GIT_INDEX_FILE`` (``git commit -a`` and partial commits)."""
    from .config import VaultConfig
    from .markdown import decode, parse_text
    from .schema import clean_metadata
    config = VaultConfig.load(root)
    raw = _git(root, "diff", "--cached", "--raw", "-z", "--no-abbrev", "--no-renames",
               "--diff-filter=ACMR", "--no-ext-diff")
    staged: list[tuple[str, str]] = []  # (path, blob sha)
    fields = raw.split(b"\0")
    for i in range(0, len(fields) - 1, 2):
        meta, path_b = fields[i].decode("ascii", "replace"), fields[i + 1]
        parts = meta.lstrip(":").split()
        if len(parts) < 5 or not parts[1].startswith("100"):
            continue  # symlinks and submodules are not memory files
        path = path_b.decode("utf-8", "surrogateescape")
        # no Vault here: opening one could rewrite .git/index while git holds index.lock
        if is_memory_path(path, config.tiers):
            staged.append((path, parts[3]))
    if not staged:
        return []
    blobs = _cat_blobs(root, [sha for _, sha in staged])
    problems: list[tuple[str, str]] = []
    for path, sha in staged:
        try:
            parsed = parse_text(decode(blobs[sha]), strict=True)
            clean_metadata(parsed.meta, tiers=config.tiers)
        except GitmemError as exc:
            problems.append((path, exc.message))
    return problems


def _cat_blobs(root: Path, shas: list[str]) -> dict[str, bytes]:
    """Contents of blobs by sha, with one ``git cat-file --batch``."""
    unique = list(dict.fromkeys(shas))
    out = _git(root, "cat-file", "--batch", data="".join(f"{s}\n" for s in unique).encode())
    blobs: dict[str, bytes] = {}
    pos = 0
    for sha in unique:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        if len(header) != 3:
            raise StorageError(f"git cat-file: object {sha} is missing")
        size = int(header[2])
        blobs[sha] = out[end + 1:end + 1 + size]
        pos = end + 1 + size + 1
    return blobs
