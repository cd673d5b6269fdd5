"""Memory vectors for hybrid search: a rebuildable cache in ``.git/gitmem/vectors/``.

One file, ``vectors.npz``: the unit vector (float16, 384 numbers) of each memory's title
and text, with the memory's path and the content hash of the file it was computed from.
Like the search index it is a cache of the files: never tracked, rebuilt by
``gitmem embed``, and pruned of every vector whose file is gone or changed (``gitmem
purge`` prunes it, so purged text leaves no vector behind).  Vectors are computed in the
background (:class:`EmbedWorker`, run by ``gitmem watch`` and the MCP server's follower)
or by ``gitmem embed``, never while a memory is written.

The file is replaced atomically (written aside, then renamed), so a reader sees either
the old or the new set; a process reloads it when its inode, modification time or size
changes.
numpy is imported only when used (``import gitmem`` stays free of it).

A damaged file (cut short, overwritten, arrays of the wrong shape, NaNs) is never used:
:meth:`VectorStore.load` checks it and reads it as empty, :meth:`VectorStore.damage` says
why, search falls back to words only with a notice, and the next :func:`embed_pending`
(``gitmem embed``, the background worker, ``gitmem doctor --repair``) replaces it.
"""

from __future__ import annotations

import os
import threading
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GitmemError, StorageError
from .documents import context_text
from .embedding import DIM

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from ..store.reader import Reader
    from ..store.storage import Storage
    from .embedding import Embedder

__all__ = ["VectorStore", "embed_text", "vector_keys", "memory_text", "embed_pending", "forget_removed", "EmbedWorker",
           "start_embed_worker", "vector_dir", "zip_problem"]

_FILE = "vectors.npz"
_ARRAYS = ("paths", "hashes", "vectors")
#: texts embedded per batch (then saved, so an interrupted run keeps its work)
SAVE_EVERY = 512


def vector_dir(state_dir: Path) -> Path:
    """Where a vault's vectors live (inside ``.git``: never tracked, never synced)."""
    return state_dir / "vectors"


def embed_text(title: str, body: str, context: str = "") -> str:
    """What is embedded of a memory: its title and text, then its context (its
    ``context`` field and the text of the memory it follows), which the model reads only
    as far as its 256 word pieces reach."""
    own = f"{title}\n{body}" if title and not body.lstrip().startswith(title) else body or title
    return f"{own}\n{context}" if context else own


def vector_keys(store: Storage) -> dict[str, tuple[str, str | None]]:
    """``path -> (key, path of the memory it follows)`` for every memory.  The key says
    what its vector is computed from: its file's content hash, plus that of the memory
    it ``follows`` (whose text is part of its context), so editing either makes the
    vector stale.  ``follows`` names a memory by id, as the search index reads it."""
    with store.lock.threads():      # one SQLite connection, shared with writing threads
        rows = list(store.catalog.all_rows())
    by_id = {r.id: r for r in rows}
    out: dict[str, tuple[str, str | None]] = {}
    for r in rows:
        follows = r.meta.get("follows") if isinstance(r.meta, dict) else None
        before = by_id.get(str(follows)) if follows else None
        out[r.path] = (r.hash + (f"+{before.hash}" if before is not None else ""),
                       before.path if before is not None else None)
    return out


def memory_text(reader: Reader, path: str, followed: str | None = None) -> str:
    """The text embedded for the memory at ``path`` whose ``follows`` names the memory
    at ``followed`` (see :func:`embed_text`)."""
    memory = reader.get(path)
    before = None
    if followed:
        try:
            before = reader.get(followed)
        except GitmemError:         # the memory it follows is gone: no context from it
            before = None
    own = memory.meta.get("context")
    context = context_text(str(own) if own else None, before.title if before else None,
                           before.body if before else None)
    return embed_text(memory.title, memory.body, context)


class VectorStore:
    """The vectors of one vault (or one search index, in benchmarks), keyed by path;
    ``dim``: how many numbers each vector has (the model's)."""

    def __init__(self, directory: str | Path, dim: int = DIM) -> None:
        self.dir = Path(directory)
        self.dim = dim
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._paths: list[str] = []
        self._hashes: list[str] = []
        self._matrix: Any = None
        self._row: dict[str, int] = {}
        self._damage: str | None = None

    @property
    def file(self) -> Path:
        """The one file holding the vectors."""
        return self.dir / _FILE

    def exists(self) -> bool:
        """Whether any vectors were stored (without loading numpy)."""
        return self.file.is_file()

    def load(self) -> tuple[list[str], list[str], np.ndarray, dict[str, int]]:
        """(paths, hashes, float32 matrix of unit rows, path -> row), reloaded when the
        file changed; one consistent set even while another thread saves.  A damaged
        file reads as empty (:meth:`damage` says why); this never raises for it."""
        import numpy as np
        with self._lock:
            try:
                st = self.file.stat()
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            except FileNotFoundError:
                stamp = None
            if stamp != self._stamp:
                damage = None
                paths: list[str]
                hashes: list[str]
                if stamp is None:
                    paths, hashes, matrix = [], [], np.zeros((0, 0), dtype=np.float32)
                else:
                    try:
                        paths, hashes, matrix = _read(self.file, self.dim)
                    except _Damaged as exc:   # never used; replaced by the next embedding run
                        paths, hashes, matrix = [], [], np.zeros((0, 0), dtype=np.float32)
                        damage = str(exc)
                self._paths, self._hashes, self._matrix = paths, hashes, matrix
                self._row = {p: i for i, p in enumerate(paths)}
                self._stamp, self._damage = stamp, damage
            return self._paths, self._hashes, self._matrix, self._row

    def damage(self) -> str | None:
        """Why the stored file cannot be used (it is then read as empty), or None when it
        is sound or absent.  Needs numpy, like :meth:`load`."""
        self.load()
        return self._damage

    def check(self) -> str | None:
        """:meth:`damage`; None where there is no file."""
        return self.damage() if self.exists() else None

    def stored(self) -> dict[str, str]:
        """``path -> content hash`` of every stored vector."""
        paths, hashes, _, _ = self.load()
        return dict(zip(paths, hashes, strict=True))

    def save(self, vectors: Mapping[str, tuple[str, Any]], keep: Mapping[str, str] | None = None) -> None:
        """Store ``{path: (hash, vector)}``, replacing those paths' vectors; with ``keep``
        (``path -> current hash``), drop every other vector whose path or hash differs."""
        import numpy as np
        paths, hashes, matrix, _ = self.load()
        rows = {p: (h, matrix[i]) for i, (p, h) in enumerate(zip(paths, hashes, strict=False))}
        rows.update(vectors)
        if keep is not None:
            rows = {p: v for p, v in rows.items() if keep.get(p) == v[0]}
        order = sorted(rows)
        data: dict[str, Any] = {
            "paths": np.array(order, dtype=str), "hashes": np.array([rows[p][0] for p in order], dtype=str),
            "vectors": (np.stack([rows[p][1] for p in order]) if order
                        else np.zeros((0, 0))).astype(np.float16)}
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = self.dir / f".{_FILE}.{os.getpid()}.{threading.get_ident()}.tmp.npz"
            with open(tmp, "wb") as fh:
                np.savez(fh, **data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.file)
        except OSError as exc:
            raise StorageError(f"cannot write the vector cache in {self.dir}: {exc}",
                               hint="run 'gitmem embed --rebuild'") from exc

    def prune(self, current: Mapping[str, str]) -> int:
        """Drop the vectors whose file is gone or changed (``current``: path -> hash);
        returns how many were dropped.  Needs no model."""
        stored = self.stored()
        gone = [p for p, h in stored.items() if current.get(p) != h]
        if gone:
            self.save({}, keep=current)
        return len(gone)

    def drop(self) -> None:
        """Delete every vector (the cache is rebuilt by ``gitmem embed``)."""
        with self._lock:
            self.file.unlink(missing_ok=True)
            self._stamp = None


class _Damaged(Exception):
    """A vectors file that cannot be used (the message says why)."""


def _read(file: Path, dim: int) -> tuple[list[str], list[str], np.ndarray]:
    """The paths, hashes and float32 matrix of a vectors file, checked: a readable
    archive holding the three arrays, one path, one hash and one vector of ``dim``
    finite numbers per memory, no path twice.  Raises :class:`_Damaged` otherwise."""
    import numpy as np
    problem = zip_problem(file)     # (numpy would try a file that is no archive as a pickle)
    if problem is not None:
        raise _Damaged(problem)
    try:
        # (opened here: numpy leaves the file open when the archive cannot be read)
        with open(file, "rb") as fh, np.load(fh, allow_pickle=False) as data:
            missing = [name for name in _ARRAYS if name not in data.files]
            if missing:
                raise _Damaged(f"no {' or '.join(missing)} array")
            paths_a, hashes_a, vectors = data["paths"], data["hashes"], data["vectors"]
    except _Damaged:
        raise
    except Exception as exc:  # noqa: BLE001 - a cut or overwritten file fails in many ways (zip, zlib, EOF, format)
        if isinstance(exc, ValueError) and "pickle" in str(exc):
            raise _Damaged("an array holds Python objects (never loaded)") from exc
        raise _Damaged(f"unreadable, {type(exc).__name__}: {str(exc)[:120]}") from exc
    if not isinstance(paths_a, np.ndarray) or paths_a.ndim != 1 or paths_a.dtype.kind != "U":
        raise _Damaged("its paths are not a list of text")
    if not isinstance(hashes_a, np.ndarray) or hashes_a.ndim != 1 or hashes_a.dtype.kind != "U":
        raise _Damaged("its hashes are not a list of text")
    if not isinstance(vectors, np.ndarray) or vectors.ndim != 2 or vectors.dtype.kind != "f":
        raise _Damaged("its vectors are not a matrix of numbers")
    n = len(paths_a)
    if len(hashes_a) != n:
        raise _Damaged(f"{n} paths but {len(hashes_a)} hashes")
    if vectors.shape[0] != n:
        raise _Damaged(f"{n} paths but {vectors.shape[0]} vectors")
    if n and vectors.shape[1] != dim:
        raise _Damaged(f"vectors of {vectors.shape[1]} numbers, the model's have {dim}")
    matrix = vectors.astype(np.float32)
    if not np.isfinite(matrix).all():
        raise _Damaged("NaN or infinite numbers in its vectors")
    paths = [str(p) for p in paths_a]
    if len(set(paths)) != n:
        raise _Damaged("a path appears twice")
    return paths, [str(h) for h in hashes_a], matrix


def zip_problem(file: Path) -> str | None:
    """Why ``file`` is not a sound vectors archive, checked without numpy: readable as
    a zip archive, every member's checksum right, the three arrays present."""
    import zlib
    try:
        with zipfile.ZipFile(file) as zf:
            bad = zf.testzip()
            names = {name.removesuffix(".npy") for name in zf.namelist()}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
        return f"unreadable, {type(exc).__name__}: {str(exc)[:120]}"
    if bad is not None:
        return f"its member {bad} fails its checksum"
    missing = [name for name in _ARRAYS if name not in names]
    return f"no {' or '.join(missing)} array" if missing else None


def forget_removed(store: Storage) -> None:
    """Drop the vectors of memories that are gone or changed (after ``gitmem purge``:
    no vector of purged text stays behind); a damaged file, which cannot be pruned, is
    replaced by an empty one."""
    vectors = VectorStore(vector_dir(store.state_dir))
    if not vectors.exists():
        return
    if vectors.damage() is not None:
        vectors.save({}, keep={})
        return
    vectors.prune({p: key for p, (key, _) in vector_keys(store).items()})


def embed_pending(store: Storage, reader: Reader, refresh: Callable[[], object],
                  embedder: Embedder | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  should_stop: Callable[[], bool] = lambda: False,
                  log: Callable[[str], None] | None = None) -> int:
    """Compute the vectors of the vault's memories that have none (new or changed since),
    drop those of memories gone or changed, and return how many were computed.
    ``progress(done, total)`` is called after each saved batch; ``should_stop()``
    ends the work early (what is done so far is kept).  A damaged vectors file is
    replaced at once by an empty one (and ``log`` told), then every memory is embedded
    again."""
    from .embedding import get_embedder
    refresh()
    plan = vector_keys(store)
    current = {p: key for p, (key, _) in plan.items()}
    vectors = VectorStore(vector_dir(store.state_dir))
    damage = vectors.damage() if vectors.exists() else None
    if damage is not None:
        if log:
            log(f"the vectors file {vectors.file} is damaged ({damage}): rebuilding it")
        vectors.save({}, keep=current)      # (it reads as empty: nothing of it is kept)
    stored = vectors.stored() if vectors.exists() else {}
    todo = sorted(p for p, h in current.items() if stored.get(p) != h)
    if len(stored) != len(current) or todo:
        vectors.prune(current)
    if not todo:
        return 0
    embedder = embedder or get_embedder()
    done = 0
    for start in range(0, len(todo), SAVE_EVERY):
        if should_stop():
            break
        batch: dict[str, tuple[str, str]] = {}
        for path in todo[start:start + SAVE_EVERY]:
            try:
                batch[path] = (current[path], memory_text(reader, path, plan[path][1]))
            except GitmemError:     # a file gone or unreadable meanwhile: skipped
                continue
        if not batch:
            continue
        vecs = embedder.embed([text for _, text in batch.values()])
        vectors.save({p: (h, vecs[i]) for i, (p, (h, _)) in enumerate(batch.items())})
        done += len(batch)
        if progress:
            progress(done, len(todo))
    return done


class EmbedWorker:
    """Keeps a vault's vectors current in a background thread: every ``interval``
    seconds (or at once after :meth:`nudge`) it embeds what is new, and rebuilds a
    damaged vectors file.  Started by the MCP server's follower and ``gitmem watch``
    when the ``embed`` extra is installed; never raises (problems go to ``log``)."""

    def __init__(self, store: Storage, reader: Reader, refresh: Callable[[], object],
                 interval: float = 5.0, log: Callable[[str], None] | None = None) -> None:
        self.store, self.reader, self.refresh = store, reader, refresh
        self.interval = interval
        self._log = log or (lambda msg: None)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.embedded = 0

    def start(self) -> EmbedWorker:
        """Start the background thread (a daemon: it never keeps a process alive)."""
        self._thread = threading.Thread(target=self._run, name="gitmem-embed", daemon=True)
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """Whether the background thread runs (started and not stopped)."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def nudge(self) -> None:
        """Look for new memories (and a damaged vectors file) now."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the batch in progress (what it embedded is kept)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        seen: dict[str, str] | None = None
        vectors = VectorStore(vector_dir(self.store.state_dir))
        while not self._stop.is_set():
            try:
                with self.store.lock.threads():
                    now = self.store.catalog.hashes()
                damaged = vectors.exists() and vectors.damage() is not None   # (a stat when unchanged)
                if now != seen or damaged:   # something changed: look for what to embed
                    self.embedded += embed_pending(self.store, self.reader, self.refresh,
                                                   should_stop=self._stop.is_set, log=self._log)
                    seen = now
            except Exception as exc:  # noqa: BLE001 - the worker must outlive a bad moment
                self._log(f"embedding failed: {exc} (retrying in {self.interval:.0f}s)")
            self._wake.wait(self.interval)
            self._wake.clear()


def start_embed_worker(store: Storage, reader: Reader, refresh: Callable[[], object],
                       log: Callable[[str], None] | None = None) -> EmbedWorker | None:
    """An :class:`EmbedWorker` for the vault, started, when the ``embed`` extra is
    installed and the vault has vectors (``gitmem embed`` was run once: a vault is
    never embedded behind its owner's back); None otherwise, with nothing imported."""
    from .embedding import available
    if not VectorStore(vector_dir(store.state_dir)).exists() or not available():
        return None
    return EmbedWorker(store, reader, refresh, log=log).start()
