"""Git hooks that keep gitmem in step with the git command line.

``gitmem hooks install`` writes five small POSIX ``sh`` scripts into the
vault's hooks folder (``core.hooksPath`` if set, else ``.git/hooks``):

* ``pre-commit``: validate the *staged* content of every added or modified
  memory file (UTF-8, frontmatter YAML, field values) and reject the commit
  with one line per bad file.  It runs ``"$PY" -c`` (the interpreter that
  installed it) importing only :func:`main` and what the check needs (YAML,
  the schema; no dulwich, Whoosh or click), and reads the staged blobs with
  one ``git cat-file --batch``.
* ``post-commit``, ``post-merge``, ``post-checkout``, ``post-rewrite``: run
  no Python at all.  gitmem's search index, catalog and memory history are
  caches that catch up by themselves when a process next opens the vault
  (opening the search index compares file hashes with it, ``sync_history``
  reads only the new commits, the catalog re-reads files whose stat
  changed), so these hooks only touch ``.git/gitmem/changed-by-git``
  (:data:`STAMP`): one ``stat`` tells a long-running process that git changed
  files.  (Refreshing eagerly in the hook cost ~0.4 s of CPU per commit at
  1,000 memories, mostly imports.)

pre-commit fails safe: when its interpreter is gone or cannot import gitmem,
it prints one warning and lets the commit through unvalidated.  A
``GITMEM_HOOK`` environment variable guards against re-entry: a script exits
at once when it is set and sets it for everything it runs.  gitmem's own
commits are built from the object store and never run hooks.

A hook is gitmem's when it contains the :data:`MARKER` line; install,
uninstall and status never touch other hooks (``install --force`` moves a
foreign hook aside to ``NAME.pre-gitmem``; ``uninstall`` puts it back).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Conflict, GitmemError, InvalidInput, NotAVault, StorageError
from ..memory.paths import is_memory_path

if TYPE_CHECKING:  # pragma: no cover
    from ..vault import Vault

__all__ = ["HOOK_NAMES", "MARKER", "STAMP", "HookState", "hook_script", "hooks_dir", "hook_status",
           "install_hooks", "uninstall_hooks", "main", "run_hook", "staged_problems"]

HOOK_NAMES = ("pre-commit", "post-commit", "post-merge", "post-checkout", "post-rewrite")
POST_HOOKS = HOOK_NAMES[1:]
MARKER = "# gitmem-hook:"
BACKUP_SUFFIX = ".pre-gitmem"
# The interpreter line of the copies in the repository's hooks/ folder, for
# people who install hooks by hand: any python3 with gitmem installed.
MANUAL_PY_LINE = 'PY="${GITMEM_PYTHON:-python3}"'

_PURPOSE = {
    "pre-commit": "Rejects a commit whose staged memory files have broken frontmatter.",
    "post-commit": "Tells gitmem that git committed files (gitmem's caches catch up by themselves).",
    "post-merge": "Tells gitmem that a merge or pull changed files (its caches catch up by themselves).",
    "post-checkout": "Tells gitmem that a checkout changed files (its caches catch up by themselves).",
    "post-rewrite": "Tells gitmem that a rebase or amend rewrote commits (its caches catch up by themselves).",
}
# The file the post-* hooks touch in the vault's state folder (.git/gitmem/) when git changed
# files: a one-stat signal for long-running gitmem processes.  Nothing is written when the
# state folder does not exist (gitmem never opened the repository).
STAMP = "changed-by-git"

_TEMPLATE = """\
#!/bin/sh
{marker} {name}
# {purpose}
# Installed by 'gitmem hooks install' (or copied from gitmem's hooks/ folder);
# 'gitmem hooks uninstall' removes it.
# It never blocks git because gitmem is missing: {failsafe}
{py_line}# Re-entrancy guard: anything this hook starts must not run it again.
if [ -n "${{GITMEM_HOOK:-}}" ]; then exit 0; fi
GITMEM_HOOK={name}
export GITMEM_HOOK
{run}
"""

# The Python side of pre-commit, passed with -c: exit 0 done (gitmem's own failures are
# one warning line and exit 0), 65 the commit is rejected, 66 gitmem cannot be imported.
_BOOT = (
    "import sys\n"
    "try:\n"
    "    from gitmem.outside.hooks import main\n"
    "except Exception:\n"
    "    sys.exit(66)\n"
    "sys.exit(main(sys.argv[1:]))\n")

_POST_RUN = """\
# No Python here: gitmem's search index, catalog and memory history catch up
# by themselves the next time gitmem opens the vault.  This only touches
# .git/gitmem/{stamp}, which long-running gitmem processes can stat.
dir=$(git rev-parse --git-common-dir 2>/dev/null) || exit 0
if [ -d "$dir/gitmem" ]; then {{ true >"$dir/gitmem/{stamp}"; }} 2>/dev/null; fi
exit 0"""

# What pre-commit prints when it cannot run gitmem (the commit goes through).
_SKIPPED = ("gitmem: {name} hook skipped: cannot run gitmem with $PY; memories were not validated "
            "(reinstall: gitmem hooks install)")
_PRE_RUN = """\
# One Python process, importing only what the check needs (not the gitmem CLI).
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "{skipped}" >&2
    exit 0
fi
"$PY" -c '{boot}' "$(git rev-parse --show-toplevel)" {name} "$@"
case $? in
    0) exit 0 ;;
    65) exit 1 ;;
esac
echo "{skipped}" >&2
exit 0"""


def py_line(python: str) -> str:
    """The line of a hook script that records the interpreter."""
    return "PY=" + "'" + python.replace("'", "'\"'\"'") + "'"


def hook_script(name: str, python: str | None = None, *, manual: bool = False) -> str:
    """The text of hook ``name`` running gitmem with ``python`` (default: this interpreter).

    Only pre-commit runs Python; the post-* hooks are a few lines of ``sh``.
    ``manual`` gives the copy kept in the repository's ``hooks/`` folder,
    whose interpreter is ``$GITMEM_PYTHON`` or ``python3``.
    """
    if name not in HOOK_NAMES:
        raise InvalidInput(f"unknown hook {name!r}", hint=f"gitmem hooks: {', '.join(HOOK_NAMES)}")
    if name != "pre-commit":
        return _TEMPLATE.format(marker=MARKER, name=name, purpose=_PURPOSE[name],
                                failsafe="it runs no gitmem code, only sh and git.", py_line="",
                                run=_POST_RUN.format(stamp=STAMP))
    line = MANUAL_PY_LINE if manual else py_line(python or sys.executable)
    return _TEMPLATE.format(
        marker=MARKER, name=name, purpose=_PURPOSE[name],
        failsafe="without gitmem, commits are let through unvalidated.",
        py_line=line + "\n", run=_PRE_RUN.format(name=name, boot=_BOOT, skipped=_SKIPPED.format(name=name)))


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


def hooks_dir(vault: Vault) -> Path:
    """The folder git runs this vault's hooks from (``core.hooksPath`` aware)."""
    configured = None
    try:
        stack = vault.services.store.git.repo.get_config_stack()
        value = stack.get((b"core",), b"hooksPath")
        configured = value.decode("utf-8", "surrogateescape") if value else None
    except KeyError:
        configured = None
    if configured:
        path = Path(os.path.expanduser(configured))
        return path if path.is_absolute() else vault.root / path
    return vault.services.store.git.git_dir / "hooks"


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


def hook_status(vault: Vault) -> list[HookState]:
    """The state of each gitmem hook in the vault's hooks folder."""
    folder = hooks_dir(vault)
    return [_state(folder, name) for name in HOOK_NAMES]


def install_hooks(vault: Vault, *, force: bool = False, python: str | None = None) -> list[HookState]:
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


def uninstall_hooks(vault: Vault) -> list[HookState]:
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
REJECTED = 65  # main()'s exit code when pre-commit rejects the commit


def main(argv: Sequence[str]) -> int:
    """What the pre-commit script runs (``python -c``): ``ROOT NAME ARGS...``.

    Imports only what hook NAME needs (no click, no CLI, no Vault), so a
    ``git commit`` pays one small Python start.  Returns 0, or :data:`REJECTED`."""
    if len(argv) < 2:
        sys.stderr.write("gitmem: hook: expected ROOT NAME [ARGS]\n")
        return 0

    def echo(line: str) -> None:
        sys.stderr.write(line + "\n")

    code = run_hook(argv[1], list(argv[2:]), argv[0], echo)
    return REJECTED if code else 0


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
        _post_hook(root)
    except GitmemError as exc:
        echo(f"gitmem: {name} hook: {exc.message}{_UNCHECKED if name == 'pre-commit' else ''}")
    except Exception as exc:  # noqa: BLE001 - a hook must never fail the git command
        echo(f"gitmem: {name} hook failed: {type(exc).__name__}: {exc}"
             f"{_UNCHECKED if name == 'pre-commit' else ''}")
    return 0


_UNCHECKED = " (memories were not validated; the commit goes ahead)"


def _post_hook(root: Path) -> None:
    """What a post-* hook does when it is run through Python (hooks installed by older
    gitmem versions, ``gitmem hook NAME``): the same as the ``sh`` of today's hooks,
    touch the :data:`STAMP`.  No Vault is opened: the search index, catalog and history
    catch up by themselves when gitmem next opens the vault."""
    git = root / ".git"
    if not git.is_dir():
        raise NotAVault(f"{root} is not a gitmem vault (no .git folder)")
    state = git / "gitmem"
    if state.is_dir():
        try:
            (state / STAMP).write_bytes(b"")
        except OSError as exc:
            raise StorageError(f"cannot write {state / STAMP}: {exc.strerror or exc}") from exc


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
    from ..config import VaultConfig
    from ..memory.markdown import decode, parse_text
    from ..memory.schema import clean_metadata
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
        if is_memory_path(path, config.tiers, config.outside_notes):
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
