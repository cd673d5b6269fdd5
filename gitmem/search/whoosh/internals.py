"""What gitmem's search index needs of Whoosh beyond its public API, declared and checked.

gitmem's codec, posting reader, memory-mapped storage, segment writer and searcher
reopen (the modules of :mod:`gitmem.search.whoosh`) subclass or call internals of
whoosh-reloaded 2.7.5 that another release may rename or drop.  Every such name is
listed here, in :data:`PRIVATE_NAMES` (and :data:`SIGNATURES` where the parameters
matter), and :func:`check` verifies them, the installed version and the distribution
that provides the ``whoosh`` module before any other module of the package imports
Whoosh.  A mismatch is :class:`~gitmem.errors.SearchEngineUnsupported` when the search
index opens, saying what differs and how to install the supported release: never a
silently slower path or a swallowed exception later.

The check costs about a millisecond, once per process.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ...errors import SearchEngineUnsupported

__all__ = ["DISTRIBUTION", "SUPPORTED_VERSION", "INSTALL", "PRIVATE_NAMES", "SIGNATURES", "Private",
           "Signature", "check", "code_names", "missing", "whoosh_version"]

DISTRIBUTION = "whoosh-reloaded"
SUPPORTED_VERSION = "2.7.5"
INSTALL = f'pip install "{DISTRIBUTION}=={SUPPORTED_VERSION}"'


@dataclass(frozen=True)
class Private:
    """One name gitmem uses on a Whoosh class: a ``method`` or ``attribute`` of the
    class itself, or an ``instance`` attribute its own code assigns (``self._x = ...``)."""

    module: str
    owner: str
    name: str
    kind: Literal["method", "attribute", "instance"] = "method"
    why: str = ""

    def __str__(self) -> str:
        return f"{self.module}.{self.owner}.{self.name}"


@dataclass(frozen=True)
class Signature:
    """Parameters gitmem passes (by name or position) to a Whoosh callable."""

    module: str
    owner: str
    name: str
    params: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.module}.{self.owner}.{self.name}({', '.join(self.params)})"


_W3 = "whoosh.codec.whoosh3"

#: Every private (or unusual) Whoosh name the package relies on, with what uses it.
PRIVATE_NAMES: tuple[Private, ...] = (
    # codec.PostingsWriter: gitmem's block layout and inlining
    *(Private(_W3, "W3PostingsWriter", n, "method", "codec.PostingsWriter")
      for n in ("_mini_ids", "_mini_weights", "_mini_values", "_write_block", "_new_block")),
    *(Private(_W3, "W3PostingsWriter", n, "instance", "codec.PostingsWriter")
      for n in ("_byteids", "_ids", "_weights", "_values", "_terminfo", "_inlinelimit", "_blocklimit",
                "_maxweight", "_minlength", "_maxlength", "_format", "_postfile", "_blockcount",
                "_compression")),
    Private(_W3, "W3TermInfo", "set_inlined", "method", "codec.PostingsWriter (Whoosh's own path misnames it)"),
    # codec.LeafMatcher and postings.blocks: reading posting lists a block at a time
    *(Private(_W3, "W3LeafMatcher", n, "method", "codec.LeafMatcher, postings.blocks")
      for n in ("_read_data", "_read_ids", "_read_weights", "_read_values", "_next_block", "_goto")),
    *(Private(_W3, "W3LeafMatcher", n, "instance", "codec.LeafMatcher, postings.blocks")
      for n in ("_data", "_ids", "_weights", "_values", "_maxid", "_blocklength", "_fixedsize", "_byteids",
                "_postfile", "_i", "_lastblock", "_nextoffset", "_dataoffset", "_maxweight", "_compression",
                "_minlength", "_maxlength")),
    # codec.FieldWriter and codec.Codec
    Private(_W3, "W3FieldWriter", "_postwriter", "instance", "codec.FieldWriter"),
    *(Private(_W3, "W3Codec", n, "instance", "codec.Codec")
      for n in ("_blocklimit", "_compression", "_inlinelimit")),
    # storage: the memory-mapped index folder
    Private("whoosh.filedb.filestore", "FileStorage", "_fpath", "method", "storage.IndexStorage"),
    Private("whoosh.filedb.filestore", "FileStorage", "supports_mmap", "attribute", "storage.IndexStorage"),
    Private("whoosh.filedb.structfile", "StructFile", "_name", "instance", "storage.MappedFile"),
    # writing: segments, merges, the in-memory posting pool, a child's segment
    Private("whoosh.index", "FileIndex", "_segments", "method", "writing (segment counts, idle merge)"),
    Private("whoosh.index", "FileIndex", "_read_toc", "method", "searcher.open_reusing"),
    Private("whoosh.writing", "SegmentWriter", "_finalize_segment", "method", "writing (a child's segment)"),
    Private("whoosh.writing", "SegmentWriter", "_added", "instance", "codec.MemoryPool (else a commit writes nothing)"),
    Private("whoosh.writing", "SegmentWriter", "pool", "instance", "writing (the in-memory posting pool)"),
    Private("whoosh.writing", "SegmentWriter", "perdocwriter", "instance", "codec.MemoryPool"),
    # queries
    Private("whoosh.query", "MultiTerm", "_btexts", "method", "index.SearchIndex (filter documents)"),
    Private("whoosh.query", "Or", "matcher_type", "attribute", "schema.Or (the wrong top-k guard)"),
    Private("whoosh.query", "Or", "DEFAULT_MATCHER", "attribute", "schema.Or (the wrong top-k guard)"),
)

#: Whoosh callables whose parameters gitmem passes by name (or relies on by position).
SIGNATURES: tuple[Signature, ...] = (
    Signature(_W3, "W3PostingsWriter", "__init__", ("postfile", "blocklimit", "byteids", "compression",
                                                    "inlinelimit")),
    Signature(_W3, "W3LeafMatcher", "__init__", ("postfile", "startoffset", "length", "format_", "term",
                                                 "scorer")),
    Signature(_W3, "W3FieldWriter", "__init__", ("codec", "storage", "segment")),
    Signature(_W3, "W3FieldWriter", "add_postings", ("schema", "lengths", "items")),
    Signature(_W3, "W3Codec", "__init__", ("blocklimit", "compression", "inlinelimit")),
    Signature(_W3, "W3Codec", "postings_writer", ("dbfile", "byteids")),
    Signature(_W3, "W3Codec", "postings_reader", ("dbfile", "terminfo", "format_", "term", "scorer")),
    Signature(_W3, "W3Codec", "field_writer", ("storage", "segment")),
    Signature("whoosh.writing", "SegmentWriter", "__init__", ("ix", "_lk", "limitmb", "codec")),
    Signature("whoosh.reading", "SegmentReader", "__init__", ("storage", "schema", "segment", "generation")),
    Signature("whoosh.reading", "MultiReader", "__init__", ("readers", "generation")),
    Signature("whoosh.searching", "Searcher", "__init__", ("reader", "weighting", "fromindex")),
    Signature("whoosh.filedb.structfile", "StructFile", "__init__", ("fileobj", "name", "onclose")),
    Signature("whoosh.filedb.filestore", "FileStorage", "open_file", ("name",)),
    Signature("whoosh.filedb.filestore", "FileStorage", "temp_storage", ("name",)),
)


def _owner(module: str, owner: str) -> type | None:
    try:
        found = getattr(importlib.import_module(module), owner, None)
    except ImportError:
        return None
    return found if isinstance(found, type) else None


def code_names(cls: type) -> set[str]:
    """Attribute names the code of ``cls`` and its bases reads or assigns."""
    names: set[str] = set()

    def walk(code: types.CodeType) -> None:
        names.update(code.co_names)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                walk(const)

    for klass in cls.__mro__:
        for value in vars(klass).values():
            func = getattr(value, "__func__", value)
            code = getattr(func, "__code__", None)
            if isinstance(code, types.CodeType):
                walk(code)
    return names


def _lacks(item: Private) -> bool:
    cls = _owner(item.module, item.owner)
    if cls is None:
        return True
    if item.kind == "instance":
        return item.name not in code_names(cls)
    value = inspect.getattr_static(cls, item.name, None)
    if value is None:
        return True
    return item.kind == "method" and not callable(getattr(value, "__func__", value))


def _lacks_params(item: Signature) -> bool:
    cls = _owner(item.module, item.owner)
    func = getattr(cls, item.name, None) if cls is not None else None
    if func is None:
        return True
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return True
    return any(p not in params for p in item.params)


def missing() -> list[str]:
    """The names of :data:`PRIVATE_NAMES` and the signatures of :data:`SIGNATURES` the
    installed Whoosh lacks (empty when it has them all)."""
    return ([str(p) for p in PRIVATE_NAMES if _lacks(p)]
            + [str(s) for s in SIGNATURES if _lacks_params(s)])


# --- the installed distribution ------------------------------------------------------------

def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _top_level(dist: importlib.metadata.Distribution) -> set[str]:
    """The top-level modules ``dist`` installs (as ``packages_distributions()`` infers them)."""
    declared = dist.read_text("top_level.txt")
    if declared is not None:
        return {line.strip() for line in declared.splitlines() if line.strip()}
    tops = set()
    for f in dist.files or ():
        parts = f.parts
        if len(parts) > 1:
            tops.add(parts[0])
        elif f.suffix == ".py":
            tops.add(f.stem)
    return tops


def _whoosh_owners() -> list[str]:
    """Normalised names of the installed distributions that install a ``whoosh`` module.

    Only distributions whose metadata folder names mention whoosh (``whoosh``,
    ``Whoosh``, ``whoosh-ng``, ``whoosh_reloaded`` ...) are read: listing the
    import path's folders costs a millisecond, where ``packages_distributions()``
    reads every installed distribution's file list (~0.15 s).
    """
    owners: set[str] = set()
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # a zip file, a missing folder
            continue
        for name in names:
            stem, _, kind = name.rpartition(".")
            if kind not in ("dist-info", "egg-info") or "whoosh" not in stem.lower():
                continue
            dist = importlib.metadata.PathDistribution(Path(entry or ".", name))
            if "whoosh" in _top_level(dist):
                owners.add(_normal(dist.metadata["Name"] or stem.split("-")[0]))
    return sorted(owners)


def _whoosh_files_mismatch() -> str | None:
    """Why the ``whoosh`` package Python imports is not the one whoosh-reloaded installed, or None.

    Catches what the name scan cannot: another distribution (whatever its name)
    having overwritten whoosh-reloaded's files.  Compares ``whoosh/__init__.py``
    with its entry in whoosh-reloaded's RECORD (location and sha256); says
    nothing when RECORD lacks the entry (an egg-info or editable install).
    """
    spec = importlib.util.find_spec("whoosh")
    origin = spec.origin if spec is not None else None
    if not origin:
        return "no 'whoosh' module can be imported"
    entry = next((f for f in importlib.metadata.distribution(DISTRIBUTION).files or ()
                  if f.as_posix() == "whoosh/__init__.py"), None)
    if entry is None:
        return None
    if os.path.realpath(entry.locate()) != os.path.realpath(origin):
        return f"'whoosh' is imported from {origin}, not from whoosh-reloaded's {entry.locate()}"
    if entry.hash is not None and entry.hash.mode == "sha256":
        digest = base64.urlsafe_b64encode(hashlib.sha256(Path(origin).read_bytes()).digest()).rstrip(b"=")
        if digest.decode() != entry.hash.value:
            return f"{origin} is not the file whoosh-reloaded installed (another package overwrote it)"
    return None


def _problems() -> Iterator[str]:
    """What makes the installed Whoosh unusable for gitmem, most basic first."""
    names = _whoosh_owners()
    if names != [DISTRIBUTION]:
        yield (f"the 'whoosh' module comes from {names or 'an unknown package'}; gitmem needs exactly "
               f"the distribution '{DISTRIBUTION}'")
        return
    try:
        mismatch = _whoosh_files_mismatch()
    except (importlib.metadata.PackageNotFoundError, OSError, ValueError) as exc:
        mismatch = f"whoosh-reloaded's files cannot be checked ({exc})"
    if mismatch is not None:
        yield mismatch
        return
    installed = importlib.metadata.version(DISTRIBUTION)
    if installed != SUPPORTED_VERSION:
        yield f"{DISTRIBUTION} {installed} is installed; gitmem supports {DISTRIBUTION} {SUPPORTED_VERSION}"
    lacking = missing()
    if lacking:
        yield (f"the installed Whoosh ({DISTRIBUTION} {installed}) lacks what gitmem's search index "
               f"builds on: {', '.join(lacking)}")


@functools.cache
def check() -> str:
    """The installed version of whoosh-reloaded, once the distribution, its version and every
    name gitmem relies on are checked (once per process: ``check.cache_clear()`` to redo).

    Raises :class:`~gitmem.errors.SearchEngineUnsupported` saying what differs."""
    problems = list(_problems())
    if problems:
        if problems[0].startswith("the 'whoosh' module comes from"):
            hint = f"pip uninstall whoosh whoosh-ng; {INSTALL}"
        else:
            hint = INSTALL
        raise SearchEngineUnsupported(
            "the search engine installed is not the one gitmem supports: " + "; ".join(problems),
            hint=f"{hint} (the search index is a cache: it is rebuilt from the files)",
            supported=f"{DISTRIBUTION}=={SUPPORTED_VERSION}")
    return importlib.metadata.version(DISTRIBUTION)


#: The version of whoosh-reloaded (what the search index's stamp records), after :func:`check`.
whoosh_version = check
