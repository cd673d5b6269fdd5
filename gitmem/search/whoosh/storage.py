"""The index folder as Whoosh reads it: memory-mapped files, scratch space in memory for
small writes, and what reading a damaged or changing index may raise."""

from __future__ import annotations

import mmap
import pickle
import struct
import weakref
import zlib
from typing import Any

import whoosh.index
from whoosh.filedb.filestore import FileStorage, RamStorage
from whoosh.filedb.structfile import StructFile

__all__ = ["IndexStorage", "Region", "MappedFile", "READ_ERRORS", "mapped_resident"]

#: What reading index files that are damaged, or that another process's commit is
#: replacing, raises (a file vanished, a truncated or garbled part, a table of contents
#: Whoosh cannot read).  Anything else (an ``AttributeError``, a ``TypeError``) is a bug
#: or a Whoosh gitmem does not support, and is never taken for a damaged cache.
READ_ERRORS: tuple[type[BaseException], ...] = (
    OSError, EOFError, ValueError, LookupError, struct.error, zlib.error, pickle.UnpicklingError,
    whoosh.index.IndexError,
    AssertionError,   # (Whoosh asserts on what it reads: a table of contents of another generation)
)


class IndexStorage(FileStorage):
    """The index folder; a small write (``small_writes``) keeps Whoosh's scratch files in
    memory instead of a temporary folder of files created and deleted per commit."""

    small_writes = False
    supports_mmap = False   # (Whoosh's own mapping copies each segment part into memory)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._maps: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()   # the open maps

    def temp_storage(self, name: str | None = None) -> Any:
        return RamStorage() if self.small_writes else super().temp_storage(name)

    def open_file(self, name: str, **kwargs: Any) -> Any:
        """A file of the index, memory-mapped: reading a part of a segment cuts out only
        the bytes asked for, so opening the index reads (and holds) next to nothing."""
        with open(self._fpath(name), "rb") as f:
            try:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (ValueError, OSError):   # an empty file cannot be mapped
                return super().open_file(name, **kwargs)
        self._maps.add(mm)
        return MappedFile(mm, 0, len(mm), name=name, **kwargs)

    def release_pages(self) -> None:
        """Let go of the pages the open maps have read (they stay in the page cache, and
        come back on the next read): a long-lived process keeps its segment readers
        open from one write to the next, and would otherwise hold every page any query
        ever touched."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        for mm in list(self._maps):
            try:
                if advice is not None:
                    mm.madvise(advice)
            except (ValueError, OSError):   # closed since, or the platform refuses
                pass


def mapped_resident() -> int | None:
    """Bytes of file-backed memory this process holds resident (its mapped index pages,
    and the shared libraries it loaded), or None where the system does not say (Linux's
    ``/proc/self/statm``; one small read)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[2]) * mmap.PAGESIZE
    except (OSError, ValueError, IndexError):
        return None


class Region:
    """A read-only file object over part of a memory map (what :class:`MappedFile` wraps)."""

    __slots__ = ("_mm", "_start", "_end", "_pos", "closed")

    def __init__(self, mm: mmap.mmap, start: int, length: int) -> None:
        self._mm, self._start, self._end, self._pos = mm, start, start + length, start
        self.closed = False

    def read(self, size: int | None = -1) -> bytes:
        pos = self._pos
        end = self._end if size is None or size < 0 else min(self._end, pos + size)
        if end <= pos:
            return b""
        self._pos = end
        return self._mm[pos:end]

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def readline(self, size: int | None = -1) -> bytes:
        found = self._mm.find(b"\n", self._pos, self._end)
        return self.read((self._end if found < 0 else found + 1) - self._pos
                         if size is None or size < 0 else size)

    def seek(self, where: int, whence: int = 0) -> int:
        self._pos = (self._start if whence == 0 else self._pos if whence == 1 else self._end) + where
        return self._pos - self._start

    def tell(self) -> int:
        return self._pos - self._start

    def close(self) -> None:
        self.closed = True   # the map itself goes when its last view does


class MappedFile(StructFile):
    """A Whoosh file over part of a memory map; its parts (``subset``) share the map."""

    def __init__(self, mm: mmap.mmap, start: int, length: int, name: str | None = None,
                 onclose: Any = None) -> None:
        super().__init__(Region(mm, start, length), name=name, onclose=onclose)
        self._mm, self._start = mm, start

    def get(self, position: int, length: int) -> bytes:
        start = self._start + position
        return self._mm[start:start + length]

    def subset(self, position: int, length: int, name: str | None = None) -> MappedFile:
        return MappedFile(self._mm, self._start + position, length, name=name or self._name)

