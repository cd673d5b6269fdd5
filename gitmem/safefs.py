"""The path gate: the one way gitmem touches a path in the vault's work tree.

Every read, write, rename and delete gitmem makes in the work tree (every
front door, sync, clone, the watcher, hooks, crash recovery, purge) goes
through this module, which refuses:

* a path component that is empty, ``.``, ``..``, ``.git`` in any case, holds
  ``/``, ``\\`` or NUL, is longer than 255 bytes, or is not valid UTF-8
  (:func:`check_component`, also used on tree entries arriving from a remote);
* any symbolic link on the way.  Each component is opened relative to its
  parent folder with ``O_NOFOLLOW`` (``openat``), so a link planted anywhere in
  the path, even between a check and the use, is never followed.  A symlinked
  note is reported by ``gitmem doctor``, never read and never committed.

On systems without ``openat`` (Windows) each component is checked with
``lstat`` before use instead.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import InvalidPath, UnsafePath

__all__ = ["MAX_COMPONENT_BYTES", "check_component", "split_checked", "read_bytes", "read_or_none",
           "lstat", "is_file", "is_dir", "is_symlink_on_the_way", "write_bytes", "remove",
           "prune_empty_dirs", "walk_files", "listdir", "temp_name", "temp_prefix", "TEMP_MARK",
           "check_tree_entry", "ReplacedWrongFile"]

MAX_COMPONENT_BYTES = 255
_SYMLINK_MODE = 0o120000
_GITLINK_MODE = 0o160000
_HAS_DIR_FD = os.open in os.supports_dir_fd and hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def check_component(name: str | bytes, *, path: str | bytes | None = None) -> str:
    """Return ``name`` as text if it is a safe single path component, else raise
    :class:`InvalidPath` saying which rule it breaks (``path`` names the whole path)."""
    shown = repr(path if path is not None else name)
    if isinstance(name, bytes):
        if len(name) > MAX_COMPONENT_BYTES:
            raise InvalidPath(f"path {shown} has a part longer than {MAX_COMPONENT_BYTES} bytes")
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidPath(f"path {shown} is not valid UTF-8") from None
    else:
        text = name
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidPath(f"path {shown} is not valid UTF-8 (it holds a lone surrogate)") from None
        if size > MAX_COMPONENT_BYTES:
            raise InvalidPath(f"path {shown} has a part longer than {MAX_COMPONENT_BYTES} bytes")
    if text in ("", ".", ".."):
        raise InvalidPath(f"path {shown} has an empty, '.' or '..' part")
    if "/" in text or "\\" in text or "\x00" in text:
        raise InvalidPath(f"path {shown} has a part holding '/', '\\' or NUL")
    if text.casefold() == ".git":
        raise InvalidPath(f"path {shown} names the git folder", hint="gitmem never writes inside .git.")
    return text


def split_checked(rel: str | bytes) -> list[str]:
    """The components of vault-relative ``rel`` (``/``-separated), each checked."""
    sep = b"/" if isinstance(rel, bytes) else "/"
    parts = rel.split(sep)  # type: ignore[arg-type]
    return [check_component(p, path=rel) for p in parts]


def check_tree_entry(path: bytes, mode: int) -> str:
    """Check one file entry of a git tree (as it would be written to the work tree).

    Refuses unsafe names (:func:`check_component` on each part) and symlink or
    gitlink (submodule) modes; returns the path as text."""
    rel = "/".join(split_checked(path))
    if stat.S_ISLNK(mode) or mode == _SYMLINK_MODE:
        raise UnsafePath(f"{rel!r} is a symbolic link; gitmem does not create links in the vault")
    if mode == _GITLINK_MODE or stat.S_IFMT(mode) == _GITLINK_MODE:
        raise UnsafePath(f"{rel!r} is a submodule (gitlink); a vault holds only files")
    return rel


# ------------------------------------------------------------------ opening
def _symlink_error(root: Path, parts: list[str], depth: int) -> UnsafePath:
    where = "/".join(parts[:depth + 1])
    return UnsafePath(f"{where} is a symbolic link; gitmem never follows links inside the vault",
                      path=where)


def _open_parent(root: Path, parts: list[str], *, create: bool = False) -> int:
    """A directory fd of the folder holding ``parts[-1]``, opened link-free from ``root``."""
    fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        for depth, part in enumerate(parts[:-1]):
            try:
                nfd = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                nfd = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link_at(fd, part):
                    raise _symlink_error(root, parts, depth) from None
                raise
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link_at(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _checked_path(root: Path, parts: list[str]) -> Path:
    """Fallback without openat: lstat each existing component, refusing links."""
    here = root
    for depth, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return root.joinpath(*parts)
        if stat.S_ISLNK(st.st_mode):
            raise _symlink_error(root, parts, depth)
    return here


def read_bytes(root: Path, rel: str) -> bytes:
    """The bytes of the file at ``rel``; raises :class:`UnsafePath` if a link is on
    the way, ``FileNotFoundError``/``IsADirectoryError`` like :meth:`Path.read_bytes`."""
    parts = split_checked(rel)
    if not _HAS_DIR_FD:  # pragma: no cover - Windows
        target = _checked_path(root, parts)
        return target.read_bytes()
    dfd = _open_parent(root, parts)
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | _NOFOLLOW | _CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP or _is_link_at(dfd, parts[-1]):
                raise _symlink_error(root, parts, len(parts) - 1) from None
            raise
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as handle:
        if stat.S_ISDIR(os.fstat(handle.fileno()).st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
        return handle.read()


def read_or_none(root: Path, rel: str) -> bytes | None:
    """:func:`read_bytes`, or None when there is no regular file there (absent, a
    folder, or a symbolic link, which is never followed)."""
    try:
        return read_bytes(root, rel)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, UnsafePath):
        return None


def lstat(root: Path, rel: str) -> os.stat_result | None:
    """The ``lstat`` of ``rel`` reached without following links (None if absent);
    raises :class:`UnsafePath` if a folder on the way is a link."""
    parts = split_checked(rel)
    if not _HAS_DIR_FD:  # pragma: no cover - Windows
        _checked_path(root, parts[:-1] + ["."])  # checks the folders only
        try:
            return os.lstat(root.joinpath(*parts))
        except FileNotFoundError:
            return None
    try:
        dfd = _open_parent(root, parts)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    finally:
        os.close(dfd)


def is_file(root: Path, rel: str) -> bool:
    """True if ``rel`` is a regular file reached without links."""
    try:
        st = lstat(root, rel)
    except UnsafePath:
        return False
    return st is not None and stat.S_ISREG(st.st_mode)


def is_dir(root: Path, rel: str) -> bool:
    """True if ``rel`` is a real folder (not a link to one) reached without links."""
    try:
        st = lstat(root, rel)
    except UnsafePath:
        return False
    return st is not None and stat.S_ISDIR(st.st_mode)


def is_symlink_on_the_way(root: Path, rel: str) -> bool:
    """True if ``rel`` or any folder on its way is a symbolic link."""
    try:
        st = lstat(root, rel)
    except UnsafePath:
        return True
    return st is not None and stat.S_ISLNK(st.st_mode)


TEMP_MARK = ".gitmem-tmp-"


def temp_prefix(name: str) -> str:
    """What the temporary file of a write of ``name`` starts with (before the pid):
    hidden, recognisable so recovery and ``doctor`` can remove it, and short enough
    that the whole name stays within 255 bytes."""
    stem = name
    while len(f".{stem}{TEMP_MARK}{2**22}".encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES:
        stem = stem[: len(stem) // 2]
    return f".{stem}{TEMP_MARK}"


def temp_name(name: str) -> str:
    """The name of the temporary file a write of ``name`` by this process goes through."""
    return f"{temp_prefix(name)}{os.getpid()}"


class ReplacedWrongFile(Exception):
    """:func:`write_bytes` found something else than ``expect`` allowed at the target;
    nothing was replaced (the file there is as it was)."""


def _exchange(dfd: int, a: str, b: str) -> bool:
    """Swap the names ``a`` and ``b`` in the folder ``dfd`` in one step (Linux
    ``renameat2(RENAME_EXCHANGE)``); False when the system cannot."""
    func = _renameat2()
    if func is None:
        return False
    if func(dfd, a.encode(), dfd, b.encode(), 2) != 0:  # 2 = RENAME_EXCHANGE
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            return False
        raise OSError(err, os.strerror(err), b)
    return True


@functools.lru_cache(maxsize=1)
def _renameat2() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


def _read_at(dfd: int, name: str) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _replace_checked(dfd: int, tmp: str, name: str, expect: Callable[[bytes | None], bool]) -> None:
    """Rename ``tmp`` over ``name`` only if what ``name`` holds passes ``expect``.

    Where the system can swap two names in one step, the swap is the check: the
    file that was replaced is judged afterwards and swapped back when it should not
    have been, so a save landing at any moment is never lost.  Elsewhere the file
    is checked right before the rename (a window of microseconds)."""
    if _read_at(dfd, name) is None:
        if not expect(None):
            raise ReplacedWrongFile(name)
        try:
            os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:  # someone created it meanwhile
            raise ReplacedWrongFile(name) from None
        os.unlink(tmp, dir_fd=dfd)
        return
    try:
        swapped = _exchange(dfd, tmp, name)
    except FileNotFoundError:  # removed meanwhile
        raise ReplacedWrongFile(name) from None
    if not swapped:
        if not expect(_read_at(dfd, name)):
            raise ReplacedWrongFile(name)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        return
    if not expect(_read_at(dfd, tmp)):  # what was there is not what gitmem based its change on
        _exchange(dfd, tmp, name)
        raise ReplacedWrongFile(name)
    os.unlink(tmp, dir_fd=dfd)


def write_bytes(root: Path, rel: str, data: bytes, *, replace_link: bool = False,
                expect: Callable[[bytes | None], bool] | None = None, durable: bool = True) -> os.stat_result:
    """Replace the file at ``rel`` with ``data`` atomically and durably (temp file,
    fsync, rename), creating folders as needed; returns its stat.  ``durable=False``
    leaves out the fsync, for a caller writing many files that syncs once after all
    of them (:func:`sync_all`).

    Refuses (:class:`UnsafePath`) when a folder on the way, or the file itself, is
    a symbolic link: the link is never followed, and replaced (by the new file)
    only with ``replace_link`` (for files gitmem generates, such as MEMORY.md).
    With ``expect``, the file is replaced only if ``expect(what it holds, or None
    if absent)`` is true at the moment of the rename; else :class:`ReplacedWrongFile`
    is raised and the file there is left as it was."""
    parts = split_checked(rel)
    if not _HAS_DIR_FD:  # pragma: no cover - Windows
        target = _checked_path(root, parts[:-1] + ["."]) if replace_link else _checked_path(root, parts)
        target = root.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        spare = target.parent / temp_name(parts[-1])
        try:
            with open(spare, "wb") as handle:
                handle.write(data)
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
            os.replace(spare, target)
        except BaseException:
            spare.unlink(missing_ok=True)
            raise
        return os.stat(target)
    dfd = _open_parent(root, parts, create=True)
    try:
        if not replace_link and _is_link_at(dfd, parts[-1]):
            raise _symlink_error(root, parts, len(parts) - 1)
        tmp = temp_name(parts[-1])
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
            if expect is None:
                os.replace(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
            else:
                _replace_checked(dfd, tmp, parts[-1], expect)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
        return os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
    finally:
        os.close(dfd)


def sync_all() -> None:
    """Make every file written so far durable, at once (after many ``durable=False``
    writes: one sync costs far less than a sync per file)."""
    if hasattr(os, "sync"):
        os.sync()


def remove(root: Path, rel: str, *, prune: bool = True) -> bool:
    """Delete the file (or link) at ``rel``, never following a link on the way;
    returns False if it was not there.  Empty folders left behind are removed up
    to (not including) the top-level folder when ``prune``."""
    parts = split_checked(rel)
    if not _HAS_DIR_FD:  # pragma: no cover - Windows
        target = _checked_path(root, parts)
        try:
            target.unlink()
        except FileNotFoundError:
            return False
    else:
        try:
            dfd = _open_parent(root, parts)
        except (FileNotFoundError, NotADirectoryError):
            return False
        try:
            os.unlink(parts[-1], dir_fd=dfd)
        except FileNotFoundError:
            return False
        finally:
            os.close(dfd)
    if prune:
        prune_empty_dirs(root, "/".join(parts[:-1]))
    return True


def prune_empty_dirs(root: Path, folder_rel: str) -> None:
    """Remove now-empty folders from ``folder_rel`` upward, stopping below the
    top-level (tier) folder; never follows links."""
    parts = [p for p in folder_rel.split("/") if p]
    while len(parts) > 1:
        try:
            dfd = _open_parent(root, parts)
        except (OSError, UnsafePath):
            return
        try:
            os.rmdir(parts[-1], dir_fd=dfd) if _HAS_DIR_FD else os.rmdir(root.joinpath(*parts))
        except OSError:
            return
        finally:
            os.close(dfd)
        parts.pop()


def listdir(root: Path, rel: str) -> list[str]:
    """The names in the folder ``rel`` ("" for the root), opened without following
    links ([] if it is absent or not a real folder)."""
    if not rel:
        return os.listdir(root)
    parts = split_checked(rel)
    if not _HAS_DIR_FD:  # pragma: no cover - Windows
        try:
            return os.listdir(_checked_path(root, parts))
        except (OSError, UnsafePath):
            return []
    try:
        dfd = _open_parent(root, parts + ["."])
    except (OSError, UnsafePath):
        return []
    try:
        return os.listdir(dfd)
    finally:
        os.close(dfd)


def _valid_name(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # os.scandir decoded undecodable bytes as lone surrogates
        return False
    return True


def walk_files(root: Path, top: str, *, links: list[str] | None = None,
               skip_dir: Callable[[str], bool] | None = None) -> Iterator[tuple[str, os.stat_result]]:
    """Every regular file under the folder ``top`` as (vault-relative path, stat),
    without following links.  Links met on the way (to files or folders), and
    names that are not valid UTF-8, are not entered; their paths are appended to
    ``links`` when given.  ``skip_dir(name)``
    prunes folders by name."""
    try:
        st = lstat(root, top)
    except UnsafePath:
        if links is not None:
            links.append(top)
        return
    if st is None:
        return
    if stat.S_ISLNK(st.st_mode):
        if links is not None:
            links.append(top)
        return
    if not stat.S_ISDIR(st.st_mode):
        return
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(root / folder))
        except OSError:
            continue
        for entry in entries:
            rel = f"{folder}/{entry.name}"
            if not _valid_name(entry.name):  # not UTF-8 on disk: no path gitmem can name or commit
                if links is not None:
                    links.append(rel)
                continue
            try:
                if entry.is_symlink():
                    if links is not None:
                        links.append(rel)
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if skip_dir is None or not skip_dir(entry.name):
                        stack.append(rel)
                elif entry.is_file(follow_symlinks=False):
                    yield rel, entry.stat(follow_symlinks=False)
            except OSError:
                continue
