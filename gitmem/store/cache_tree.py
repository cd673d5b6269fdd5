"""The cached trees of ``.git/index`` (git's ``TREE`` extension), kept true by each write.

Why gitmem writes them: ``git commit`` reads ``.git/index`` *before* it takes
``index.lock``.  When that index has no valid cached trees, git rebuilds them and
writes the index it read back over ``.git/index``.  A gitmem write that landed between
git's read and git's lock would lose its entries that way (git's own commit then fails,
the branch having moved), and the *next* ``git commit`` would commit the deletion of the
agent's new memory.  With valid cached trees and up-to-date entries git finds nothing to
write, and its stale copy never reaches the disk.

Each write therefore updates the extension it found: for every folder on the path of a
changed file, the folder's tree in the new commit when the index held exactly the old
commit's files there (the old cached tree says so), else "unknown" (git recomputes it).
Folders the write did not touch keep their entries byte for byte in meaning.

The format (git's ``Documentation/technical/index-format``): one record per folder, depth
first from the root: the folder's name relative to its parent, NUL, the number of index
entries under it (``-1``: unknown), a space, the number of sub-folder records that follow,
a newline, and, when the number is not ``-1``, the folder's 20-byte tree id.
"""

from __future__ import annotations

import re
import stat
import struct
from collections.abc import Callable, Mapping
from typing import Any

from dulwich.objects import Tree

__all__ = ["CachedTree", "TreeLoader", "parse", "encode", "extension", "find_extension",
           "updated", "invalidated", "from_tree", "SIGNATURE"]

SIGNATURE = b"TREE"
FILE_MODE = 0o100644
_RECORD = re.compile(rb"([^\0]*)\0(-?[0-9]+) ([0-9]+)\n", re.DOTALL)

#: Loads a tree object by id (None if it is not a tree).
TreeLoader = Callable[[bytes], "Tree | None"]


class CachedTree:
    """One folder's record: ``count`` index entries under it (-1: unknown), its tree id
    (None when unknown) and the records of its sub-folders by name.

    Records are never changed once encoded: an update makes new records for the folders
    on the changed paths and shares the others, whose bytes (``encoded``: everything
    after the name, sub-folders included) are then reused as they are, so encoding
    after a write costs what the write changed, not the size of the vault."""

    __slots__ = ("count", "sha", "children", "encoded")

    def __init__(self, count: int, sha: bytes | None, children: dict[bytes, CachedTree] | None = None) -> None:
        self.count = count
        self.sha = sha                  # hex, as dulwich names objects
        self.children = children if children is not None else {}
        self.encoded: bytes | None = None

    @property
    def valid(self) -> bool:
        return self.count >= 0 and self.sha is not None

    def __repr__(self) -> str:
        return f"CachedTree({self.count}, {self.sha!r}, {sorted(self.children)!r})"


# ------------------------------------------------------------------ reading, writing
def parse(payload: bytes | memoryview) -> CachedTree | None:
    """The record tree of a ``TREE`` extension's payload; None if it is malformed (then it
    is left out, which git allows)."""
    data = bytes(payload)
    try:
        root, end = _read(data, 0)
    except (ValueError, IndexError):
        return None
    return root if end == len(data) else None


def _read(data: bytes, pos: int) -> tuple[CachedTree, int]:
    match = _RECORD.match(data, pos)
    if match is None:
        raise ValueError("malformed cached tree record")
    count, subtrees = int(match.group(2)), int(match.group(3))
    body = match.end(1) + 1
    pos = match.end()
    sha = None
    if count >= 0:
        if pos + 20 > len(data):
            raise ValueError("truncated cached tree record")
        sha = data[pos:pos + 20].hex().encode("ascii")
        pos += 20
    node = CachedTree(count, sha)
    for _ in range(subtrees):
        name = data[pos:data.index(b"\0", pos)]
        child, pos = _read(data, pos)
        node.children[name] = child
    node.encoded = data[body:pos]
    return node, pos


def encode(root: CachedTree) -> bytes:
    """The payload of a ``TREE`` extension for ``root``."""
    return b"\0" + _body(root)


def _body(node: CachedTree) -> bytes:
    """A record's bytes after its name (kept on the record: see :class:`CachedTree`)."""
    if node.encoded is None:
        valid = node.valid
        out = [b"%d %d\n" % (node.count if valid else -1, len(node.children))]
        if valid:
            assert node.sha is not None
            out.append(bytes.fromhex(node.sha.decode("ascii")))
        # git keeps sub-folders ordered by name length, then name; it reads any order
        for name in sorted(node.children, key=lambda n: (len(n), n)):
            out += [name, b"\0", _body(node.children[name])]
        node.encoded = b"".join(out)
    return node.encoded


def extension(root: CachedTree | None) -> bytes:
    """The whole extension (signature, length, payload), or nothing for None."""
    if root is None:
        return b""
    payload = encode(root)
    return SIGNATURE + struct.pack(">L", len(payload)) + payload


def find_extension(data: bytes | memoryview, entries_end: int) -> CachedTree | None:
    """The cached trees in the extensions of the index file ``data`` (its entries end at
    ``entries_end``), or None when there are none or they cannot be read."""
    pos, end = entries_end, len(data) - 20
    while pos + 8 <= end:
        sig = bytes(data[pos:pos + 4])
        size = struct.unpack_from(">L", data, pos + 4)[0]
        if pos + 8 + size > end:
            return None
        if sig == SIGNATURE:
            return parse(data[pos + 8:pos + 8 + size])
        pos += 8 + size
    return None


# ------------------------------------------------------------------ building
def from_tree(sha: bytes, load: TreeLoader) -> CachedTree | None:
    """The records of an index holding exactly the files of tree ``sha`` (None if a tree
    cannot be loaded)."""
    tree = load(sha)
    if tree is None:
        return None
    node = CachedTree(0, sha)
    for name, mode, child_sha in tree.iteritems():
        if stat.S_ISDIR(mode):
            child = from_tree(child_sha, load)
            if child is None:
                return None
            node.children[name] = child
            node.count += child.count
        else:
            node.count += 1
    return node


def invalidated(root: CachedTree | None, paths: Mapping[bytes, Any]) -> CachedTree | None:
    """The records of ``root`` with every folder on the path of one of ``paths`` marked
    unknown (new records; ``root`` is not changed): for index entries set without a
    commit to compare with."""
    if root is None:
        return None
    new_root = CachedTree(-1, None, dict(root.children))
    made = {id(new_root)}
    for path in paths:
        node = new_root
        for folder in path.split(b"/")[:-1]:
            child = node.children.get(folder)
            if child is None:
                break
            if id(child) not in made:
                child = node.children[folder] = CachedTree(-1, None, dict(child.children))
                made.add(id(child))
            node = child
    return new_root


def updated(old: CachedTree | None, entries: Mapping[bytes, tuple[bytes, Any] | None],
            before: bytes | None, after: bytes | None, load: TreeLoader,
            *, index_was_empty: bool = False) -> CachedTree | None:
    """The records after a commit from tree ``before`` to tree ``after`` that set (or, for
    None, removed) these index ``entries`` (path -> (blob id, stat)).

    A folder's record is valid when the index held exactly ``before``'s files there (its
    old record, or an ancestor's, names ``before``'s tree; or the index was empty and
    ``before`` is None) and every entry set under it is ``after``'s file: then the index
    holds exactly ``after``'s files there.  ``old`` is changed in place."""
    trie: dict[bytes, Any] = {}
    for path in entries:
        *folders, name = path.split(b"/")
        level = trie
        for folder in folders:
            sub = level.get(folder)
            if not isinstance(sub, dict):
                sub = level[folder] = {}
            level = sub
        level.setdefault(name, None)
    known = index_was_empty and before is None
    return _update(old, trie, b"", entries, _load(before, load), _load(after, load), known, load)[0]


def _load(sha: bytes | None, load: TreeLoader) -> Tree | None:
    return None if sha is None else load(sha)


def _subtree(tree: Tree | None, name: bytes, load: TreeLoader) -> Tree | None:
    if tree is None or name not in tree:
        return None
    mode, sha = tree[name]
    return load(sha) if stat.S_ISDIR(mode) else None


def _update(old: CachedTree | None, trie: dict[bytes, Any], prefix: bytes,
            entries: Mapping[bytes, tuple[bytes, Any] | None], before: Tree | None, after: Tree | None,
            known: bool, load: TreeLoader) -> tuple[CachedTree | None, bool]:
    """The new record of one folder on the path of a change (None: the folder is gone from
    ``after``), and whether every entry set under it is ``after``'s file."""
    if old is not None and old.valid and before is not None and old.sha == before.id:
        known = True      # the index held exactly `before`'s files in this folder
    children = dict(old.children) if old is not None else {}
    consistent = True
    for name, sub in trie.items():
        if sub is None:   # a file: its new entry must be `after`'s
            value = entries[prefix + name]
            mode_sha = after[name] if after is not None and name in after else None
            if value is None:
                consistent &= mode_sha is None
            else:
                consistent &= mode_sha is not None and mode_sha[0] == FILE_MODE and mode_sha[1] == value[0]
            continue
        child, fits = _update(children.get(name), sub, prefix + name + b"/", entries,
                              _subtree(before, name, load), _subtree(after, name, load), known, load)
        consistent &= fits
        if child is None:
            children.pop(name, None)
        else:
            children[name] = child
    if after is None:
        return None, consistent    # the folder is gone from the commit
    if not (known and consistent):
        return CachedTree(-1, None, children), consistent
    node = CachedTree(0, after.id)
    for name, mode, sha in after.iteritems():
        if not stat.S_ISDIR(mode):
            node.count += 1
            continue
        child = children.get(name)
        if child is None or not child.valid or child.sha != sha:
            child = from_tree(sha, load)   # not recorded before (rare): read from the tree
            if child is None:
                return CachedTree(-1, None, children), consistent
        node.children[name] = child
        node.count += child.count
    return node, consistent
