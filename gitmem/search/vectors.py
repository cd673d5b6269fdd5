"""Memory vectors for hybrid search: a rebuildable cache in ``.git/gitmem/vectors/``.

One file, ``vectors.npz``: the unit vector (float16, 384 numbers) of each memory's title
and text, with the memory's path and the content hash of the file it was computed from.
Like the search index it is a cache of the files: never tracked, rebuilt by
``gitmem embed``, and pruned of every vector whose file is gone or changed (``gitmem
purge`` prunes it, so purged text leaves no vector behind).  Vectors are computed in the
background (:class:`EmbedWorker`, run by ``gitmem watch`` and the MCP server's follower)
or by ``gitmem embed``, never while a memory is written.

The file is replaced atomically (written aside, then renamed), so a reader sees either
the old or the new set; a process reloads it when its modification time changes.
Everything here needs the ``embed`` extra (numpy), imported only when used.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GitmemError, StorageError
from .documents import context_text

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from ..store.reader import Reader
    from ..store.storage import Storage
    from .embedding import Embedder

__all__ = ["VectorStore", "embed_text", "vector_keys", "memory_text", "embed_pending", "forget_removed", "EmbedWorker",
           "start_embed_worker", "vector_dir"]

_FILE = "vectors.npz"
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
    """The vectors of one vault (or one search index, in benchmarks), keyed by path."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._paths: list[str] = []
        self._hashes: list[str] = []
        self._matrix: Any = None
        self._row: dict[str, int] = {}

    @property
    def file(self) -> Path:
        """The one file holding the vectors."""
        return self.dir / _FILE

    def exists(self) -> bool:
        """Whether any vectors were stored (without loading numpy)."""
        return self.file.is_file()

    def load(self) -> tuple[list[str], list[str], np.ndarray, dict[str, int]]:
        """(paths, hashes, float32 matrix of unit rows, path -> row), reloaded when the
        file changed; one consistent set even while another thread saves."""
        import numpy as np
        with self._lock:
            try:
                st = self.file.stat()
                stamp = (st.st_mtime_ns, st.st_size)
            except FileNotFoundError:
                stamp = None
            if stamp != self._stamp:
                if stamp is None:
                    paths, hashes, matrix = [], [], np.zeros((0, 0), dtype=np.float32)
                else:
                    try:
                        with np.load(self.file, allow_pickle=False) as data:
                            paths = [str(p) for p in data["paths"]]
                            hashes = [str(h) for h in data["hashes"]]
                            matrix = data["vectors"].astype(np.float32)
                    except (OSError, ValueError, KeyError):   # a broken cache: rebuilt later
                        paths, hashes, matrix = [], [], np.zeros((0, 0), dtype=np.float32)
                self._paths, self._hashes, self._matrix = paths, hashes, matrix
                self._row = {p: i for i, p in enumerate(paths)}
                self._stamp = stamp
            return self._paths, self._hashes, self._matrix, self._row

    def stored(self) -> dict[str, str]:
        """``path -> content hash`` of every stored vector."""
        paths, hashes, _, _ = self.load()
        return dict(zip(paths, hashes, strict=False))   # (as stored: a damaged file is not checked here)

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


def forget_removed(store: Storage) -> None:
    """Drop the vectors of memories that are gone or changed (after ``gitmem purge``:
    no vector of purged text stays behind).  Without numpy the cache cannot be read,
    so it is deleted whole (it is rebuilt by ``gitmem embed``)."""
    vectors = VectorStore(vector_dir(store.state_dir))
    if not vectors.exists():
        return
    try:
        vectors.prune({p: key for p, (key, _) in vector_keys(store).items()})
    except ImportError:
        vectors.drop()


def embed_pending(store: Storage, reader: Reader, refresh: Callable[[], object],
                  embedder: Embedder | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  should_stop: Callable[[], bool] = lambda: False) -> int:
    """Compute the vectors of the vault's memories that have none (new or changed since),
    drop those of memories gone or changed, and return how many were computed.
    ``progress(done, total)`` is called after each saved batch; ``should_stop()``
    ends the work early (what is done so far is kept)."""
    from .embedding import get_embedder
    refresh()
    plan = vector_keys(store)
    current = {p: key for p, (key, _) in plan.items()}
    vectors = VectorStore(vector_dir(store.state_dir))
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
    seconds (or at once after :meth:`nudge`) it embeds what is new.  Started by the
    MCP server's follower and ``gitmem watch`` when the ``embed`` extra is installed;
    never raises (problems go to ``log``)."""

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

    def nudge(self) -> None:
        """Look for new memories now."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the batch in progress (what it embedded is kept)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        seen: dict[str, str] | None = None
        while not self._stop.is_set():
            try:
                with self.store.lock.threads():
                    now = self.store.catalog.hashes()
                if now != seen:         # something changed: look for what to embed
                    self.embedded += embed_pending(self.store, self.reader, self.refresh,
                                                   should_stop=self._stop.is_set)
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
