"""Reading an import's source within the import's limits.

An export can be huge, and a file from elsewhere can be built to be (a 2 MB
``.zip`` of 2 GiB of spaces, a ``conversations.json`` of a million message
nodes).  So what an import reads and holds is bounded by :class:`ImportLimits`:

* ``max_bytes``: source text in all (a file, the files of a folder, the member of
  a ``.zip``, uncompressed).  A size known before reading (a file's, the size a
  ``.zip`` header declares) is checked first; the bytes are counted as they are
  read or inflated, so a header that lies changes nothing.
* ``max_objects``: JSON objects and records (conversations, message nodes,
  messages, JSON lines, notes, the files a ``.zip`` lists), counted as the JSON is
  parsed, so parsing stops at the limit.

A source over a limit is refused with an :class:`~gitmem.errors.InvalidInput`
whose code is ``import_too_large`` (:data:`TOO_LARGE`) and whose hint names the
option that raises it; a source that cannot be read at all (not UTF-8, invalid
JSON, a broken ``.zip``) gets ``invalid_import`` (:data:`INVALID_IMPORT`).  The
readers of :mod:`gitmem.exchange.import_formats` read through :class:`ReadBudget`.
"""

from __future__ import annotations

import copy
import json
import os
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .. import safefs
from ..errors import InvalidInput, NotFound, UnsafePath

__all__ = ["INVALID_IMPORT", "TOO_LARGE", "MAX_IMPORT_BYTES", "MAX_IMPORT_OBJECTS", "ImportLimits", "ReadBudget",
           "parse_size", "bad_import", "text_of", "read_member", "load_json", "read_bounded"]

#: Error code of an import source that cannot be read (truncated JSON, not text ...).
INVALID_IMPORT = "invalid_import"
#: Error code of an import source over one of the import's limits (:class:`ImportLimits`).
TOO_LARGE = "import_too_large"
#: What one import reads at most by default: bytes of source text (uncompressed) ...
MAX_IMPORT_BYTES = 256 * 2**20
#: ... and JSON objects and records (a ChatGPT message node is four or five objects).
MAX_IMPORT_OBJECTS = 1_000_000


@dataclass(frozen=True)
class ImportLimits:
    """What one import may read from its source (see the module doc).

    ``max_bytes``: source text in all, uncompressed; ``max_objects``: JSON objects
    and records.  The command line sets them with ``--max-bytes`` and
    ``--max-objects``, :meth:`Vault.import_from` with ``max_bytes=`` and ``max_objects=``."""

    max_bytes: int = MAX_IMPORT_BYTES
    max_objects: int = MAX_IMPORT_OBJECTS

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_objects"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name} must be a whole number of at least 1, got {value!r}")


_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"(?i)\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*")


def parse_size(text: str) -> int:
    """A size as people write it: ``1048576``, ``512K``, ``300M``, ``1.5G``, ``2GiB``
    (the units are powers of 1024)."""
    match = _SIZE.fullmatch(text)
    if match is None or float(match.group(1)) * _UNITS[match.group(2).lower()] < 1:
        raise InvalidInput(f"not a size: {text!r}", hint="Write a number of bytes, or one with K, M or G: 300M, 2G.")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _size(count: int) -> str:
    """``count`` bytes for a message: ``256 MiB``, ``2.0 GiB``, ``1,000 bytes``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            value = count / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{count:,} bytes"


def _too_large(message: str, option: str, example: int, shown: str) -> InvalidInput:
    return InvalidInput(message, code=TOO_LARGE,
                        hint=f"Nothing was imported. If you trust this source, raise the limit: gitmem import ... "
                             f"{option} {shown} (Python: import_from(..., {option[2:].replace('-', '_')}={example})).")


class ReadBudget:
    """What one reader has read so far, against the import's limits."""

    def __init__(self, limits: ImportLimits) -> None:
        self.limits = limits
        self.bytes = 0
        self.objects = 0

    def _over_bytes(self, where: str, what: str, needed: int | None = None) -> InvalidInput:
        limit = self.limits.max_bytes
        # What the hint suggests: what this source needs when that is known, else far more.
        scale, unit = next((u for u in ((2**30, "G"), (2**20, "M"), (2**10, "K")) if (needed or limit * 4) >= u[0]),
                           (2**10, "K"))
        larger = -(-(needed or limit * 4) // scale)
        return _too_large(f"{where} {what}; an import reads at most {_size(limit)} (its max_bytes limit)",
                          "--max-bytes", larger * scale, f"{larger}{unit}")

    def size(self, size: int, where: str, what: str = "") -> None:
        """Refuse before reading a file (or member) of ``size`` bytes that would go over."""
        if self.bytes + size > self.limits.max_bytes:
            after = f", after {_size(self.bytes)} of other files" if self.bytes else ""
            raise self._over_bytes(where, (what or f"is {_size(size)}") + after, self.bytes + size)

    def take(self, count: int, where: str) -> None:
        """Count ``count`` bytes read (a file read whole); refuse once they go over."""
        self.bytes += count
        if self.bytes > self.limits.max_bytes:
            raise self._over_bytes(where, f"brings the text read to {_size(self.bytes)}")

    def read(self, handle: IO[bytes], where: str, declared: int | None = None) -> bytearray:
        """All of ``handle``, counted as it comes (a header's size is never trusted)."""
        data = bytearray()
        while True:
            chunk = handle.read(min(1 << 20, self.limits.max_bytes - self.bytes + 1))
            if not chunk:
                return data
            data += chunk
            self.bytes += len(chunk)
            if self.bytes > self.limits.max_bytes:
                said = f" (its header says {_size(declared)})" if declared is not None else ""
                raise self._over_bytes(where, f"holds more than the limit allows{said}")

    def count(self, objects: int, where: str) -> None:
        """Count ``objects`` JSON objects or records; refuse once they go over."""
        self.objects += objects
        limit = self.limits.max_objects
        if self.objects > limit:
            raise _too_large(f"{where} holds more than {limit:,} JSON objects and records (conversations, "
                             "message nodes, messages, lines, notes ...); that is the import's max_objects limit",
                             "--max-objects", limit * 10, str(limit * 10))

    def object_hook(self, where: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """A ``json`` object hook that counts each object as the parser makes it."""
        def hook(obj: dict[str, Any]) -> dict[str, Any]:
            self.count(1, where)
            return obj
        return hook


def _zip_entries(path: Path) -> int | None:
    """How many files the central directory of the ``.zip`` ``path`` lists, read from its
    end record (zip64 too) before :mod:`zipfile` reads the whole directory; None when
    that record cannot be found (zipfile then says what is wrong)."""
    import struct
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            tail_at = max(0, size - (22 + 0xFFFF))
            handle.seek(tail_at)
            tail = handle.read()
            end = tail.rfind(b"PK\x05\x06")
            if end < 0 or len(tail) - end < 22:
                return None
            entries = struct.unpack_from("<H", tail, end + 10)[0]
            if entries != 0xFFFF:
                return int(entries)
            locator = end - 20
            if locator < 0 or tail[locator:locator + 4] != b"PK\x06\x07":
                return None
            handle.seek(struct.unpack_from("<Q", tail, locator + 8)[0])
            record = handle.read(56)
            if len(record) < 56 or record[:4] != b"PK\x06\x06":
                return None
            return int(struct.unpack_from("<Q", record, 32)[0])
    except (OSError, struct.error):
        return None


def bad_import(message: str, hint: str | None = None) -> InvalidInput:
    return InvalidInput(message, code=INVALID_IMPORT, hint=hint)


def text_of(data: bytes | bytearray, where: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise bad_import(f"{where} is not UTF-8 text (byte {exc.start})") from None


def read_member(path: Path, member: str, budget: ReadBudget) -> tuple[bytearray, str]:
    """The bytes of ``path`` (a file), of ``member`` in the folder ``path``, or of
    ``member`` inside the ``.zip`` export ``path``; and a name for messages.  Read
    within ``budget``: a size over it is refused before reading, and the bytes are
    counted as they are read."""
    if path.is_dir():
        target = path / member
        if not target.is_file():
            raise NotFound(f"no {member} in {path}", hint=f"Point at the {member} file or the unpacked export.")
        path = target
    elif not path.is_file():
        raise NotFound(f"import source {path} does not exist")
    elif path.suffix.lower() == ".zip":
        return _read_zip_member(path, member, budget)
    where = str(path)
    with path.open("rb") as handle:
        budget.size(os.fstat(handle.fileno()).st_size, where)
        return budget.read(handle, where), where


def _read_zip_member(path: Path, member: str, budget: ReadBudget) -> tuple[bytearray, str]:
    import zipfile  # (loads bz2 and lzma: only for an export archive)
    entries = _zip_entries(path)
    if entries is not None:
        budget.count(entries, f"{path} (its list of files)")
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == member]
            if not names:
                raise NotFound(f"no {member} in the archive {path}")
            info = archive.getinfo(min(names, key=len))
            where = f"{path}:{info.filename}"
            budget.size(info.file_size, where, f"is {_size(info.file_size)} uncompressed")
            # zipfile stops inflating at the size the header declares (and then fails the
            # CRC of what it cut short); a header that lies must not decide how much is
            # read, so the member is opened as if it declared a little more than the budget
            # allows, and the bytes are counted as they come: past the budget, refused.
            # (The CRC of a member read to its end is still checked.)
            bounded = copy.copy(info)
            bounded.file_size = budget.limits.max_bytes - budget.bytes + (2 << 20)
            with archive.open(bounded) as handle:
                return budget.read(handle, where, declared=info.file_size), where
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, zlib.error) as exc:
        raise bad_import(f"{path} is not a readable .zip archive ({exc})") from None


def load_json(path: Path, member: str, budget: ReadBudget) -> Any:
    data, where = read_member(path, member, budget)
    text = text_of(data, where)
    del data  # the text alone from here on
    try:
        return json.loads(text, object_hook=budget.object_hook(where))
    except json.JSONDecodeError as exc:
        raise bad_import(f"{where} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
                   hint="The file may be truncated; export it again.") from None
    except RecursionError:
        raise bad_import(f"{where} is nested too deeply to read") from None


def read_bounded(root: Path, rel: str, budget: ReadBudget) -> bytes | None:
    """The file ``rel`` of the folder ``root`` (:func:`safefs.read_or_none`: None when it
    is not a regular file), within ``budget``: its size is checked before it is read."""
    try:
        st = safefs.lstat(root, rel)
    except UnsafePath:
        return None  # a link on the way: never followed
    if st is not None:
        budget.size(st.st_size, str(root / rel))
    data = safefs.read_or_none(root, rel)
    if data is not None:
        budget.take(len(data), str(root / rel))
    return data
