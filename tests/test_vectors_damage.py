"""A damaged vectors file never breaks search: the loader checks it and reads it as
empty, search falls back to words with a notice (Python, CLI, the gitmem tool profile),
``gitmem embed`` and the background worker rebuild it, and ``gitmem doctor`` reports it
and ``--repair`` replaces it.

Every kind of damage is made on disk, in a real vault.  The loader and doctor tests need
numpy (a dependency of gitmem) but not the model; the search tests need the ``embed``
extra."""

from __future__ import annotations

import json
import os
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitmem import Toolbox, Vault
from gitmem.cli.main import cli
from gitmem.search.embedding import DIM, available
from gitmem.search.vectors import VectorStore, embed_pending, vector_dir, vector_keys, zip_problem

from .conftest import FakeClock

needs_extra = pytest.mark.skipif(not available(), reason='needs pip install "gitmem-vault[embed]"')


def _store(v: Vault) -> VectorStore:
    return VectorStore(vector_dir(v.services.store.state_dir))


def _sound_file(v: Vault) -> VectorStore:
    """A sound vectors file for every memory of ``v``, written by gitmem's own store
    (random unit vectors: no model needed)."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(7)
    store = _store(v)
    rows = {}
    for path, (key, _) in vector_keys(v.services.store).items():
        vec = rng.standard_normal(DIM).astype(np.float32)
        rows[path] = (key, vec / np.linalg.norm(vec))
    store.save(rows)
    assert store.damage() is None and len(store.stored()) == len(rows)
    return store


def _arrays(file: Path) -> dict:
    import numpy as np
    with np.load(file, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def _resave(file: Path, **arrays: object) -> None:
    import numpy as np
    with open(file, "wb") as fh:
        np.savez(fh, **arrays)


# --- kinds of damage: each takes the path of a sound file and damages it --------------------

def cut_in_half(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[:len(data) // 2])


def random_bytes(file: Path) -> None:
    file.write_bytes(os.urandom(4096))


def empty_file(file: Path) -> None:
    file.write_bytes(b"")


def wrong_width(file: Path) -> None:
    a = _arrays(file)
    _resave(file, paths=a["paths"], hashes=a["hashes"], vectors=a["vectors"][:, :128])


def fewer_vectors_than_paths(file: Path) -> None:
    a = _arrays(file)
    _resave(file, paths=a["paths"], hashes=a["hashes"], vectors=a["vectors"][:-1])


def more_hashes_than_paths(file: Path) -> None:
    import numpy as np
    a = _arrays(file)
    _resave(file, paths=a["paths"], hashes=np.append(a["hashes"], "extra"), vectors=a["vectors"])


def nan_values(file: Path) -> None:
    a = _arrays(file)
    vectors = a["vectors"].copy()
    vectors[0, 3] = float("nan")
    _resave(file, paths=a["paths"], hashes=a["hashes"], vectors=vectors)


def infinite_values(file: Path) -> None:
    a = _arrays(file)
    vectors = a["vectors"].copy()
    vectors[-1, 0] = float("inf")
    _resave(file, paths=a["paths"], hashes=a["hashes"], vectors=vectors)


def no_vectors_array(file: Path) -> None:
    a = _arrays(file)
    _resave(file, paths=a["paths"], hashes=a["hashes"])


def vectors_of_text(file: Path) -> None:
    a = _arrays(file)
    _resave(file, paths=a["paths"], hashes=a["hashes"], vectors=a["paths"][:, None].repeat(DIM, 1))


def pickled_objects(file: Path) -> None:
    import numpy as np
    a = _arrays(file)
    _resave(file, paths=np.array(list(a["paths"]), dtype=object), hashes=a["hashes"], vectors=a["vectors"])


def path_twice(file: Path) -> None:
    a = _arrays(file)
    paths = a["paths"].copy()
    paths[1] = paths[0]
    _resave(file, paths=paths, hashes=a["hashes"], vectors=a["vectors"])


DAMAGE: dict[str, Callable[[Path], None]] = {f.__name__: f for f in (
    cut_in_half, random_bytes, empty_file, wrong_width, fewer_vectors_than_paths, more_hashes_than_paths,
    nan_values, infinite_values, no_vectors_array, vectors_of_text, pickled_objects, path_twice)}
#: What the reason given says, in part, for each kind.
REASON = {"cut_in_half": "unreadable, BadZipFile", "random_bytes": "unreadable, BadZipFile",
          "empty_file": "unreadable, ", "wrong_width": "vectors of 128 numbers, the model's have 384",
          "fewer_vectors_than_paths": "4 paths but 3 vectors", "more_hashes_than_paths": "4 paths but 5 hashes",
          "nan_values": "NaN or infinite", "infinite_values": "NaN or infinite",
          "no_vectors_array": "no vectors array", "vectors_of_text": "not a matrix of numbers",
          "pickled_objects": "an array holds Python objects", "path_twice": "a path appears twice"}


@pytest.fixture
def v(tmp_path: Path, clock: FakeClock) -> Iterator[Vault]:
    vault = Vault.init(tmp_path / "v", author="tester", clock=clock)
    vault.add("Trip plans", "We fly to Madrid and Barcelona in May.", tags=["travel"])
    vault.add("Groceries", "Buy milk, eggs and bread.")
    vault.add("Car", "The car needs new tyres before winter.")
    vault.add("Books", "Reading a novel about a lighthouse keeper.")
    yield vault
    vault.close()


# --- the loader ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", DAMAGE)
def test_loader_reads_a_damaged_file_as_empty_and_says_why(v: Vault, kind: str) -> None:
    store = _sound_file(v)
    DAMAGE[kind](store.file)
    fresh = VectorStore(store.dir)          # another process opening it
    for s in (store, fresh):                # ... and this one, after the file changed
        paths, hashes, matrix, rows = s.load()
        assert (paths, hashes, rows, matrix.shape[0]) == ([], [], {}, 0)
        assert s.stored() == {}
        reason = s.damage()
        assert reason is not None and REASON[kind] in reason, reason
        assert s.check() == reason
        assert s.exists()                   # still there: it is replaced, never silently lost


def test_a_sound_file_and_no_file_have_no_damage(v: Vault) -> None:
    store = _sound_file(v)
    assert store.damage() is None and store.check() is None and zip_problem(store.file) is None
    store.drop()
    assert store.damage() is None and store.check() is None


# The archive check made before numpy reads the file (numpy would read a file that is no
# archive as a pickle): a sound zip archive with the three arrays.  Written and damaged
# here with the standard library only.

def _zip(file: Path, names: tuple[str, ...] = ("paths", "hashes", "vectors")) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in names:
            zf.writestr(f"{name}.npy", os.urandom(3000))


@pytest.mark.parametrize("kind", ["cut_in_half", "random_bytes", "empty_file", "missing_array", "bad_checksum"])
def test_zip_check_before_numpy_reads_the_file(tmp_path: Path, kind: str) -> None:
    file = tmp_path / "vectors.npz"
    _zip(file)
    assert zip_problem(file) is None
    if kind == "missing_array":
        _zip(file, ("paths", "hashes"))
        assert zip_problem(file) == "no vectors array"
        return
    if kind == "bad_checksum":
        data = bytearray(file.read_bytes())
        data[100] ^= 0xFF                   # inside the first member's compressed data
        file.write_bytes(bytes(data))
    else:
        DAMAGE[kind](file)
    assert zip_problem(file) is not None


# --- doctor ---------------------------------------------------------------------------------------

def _finding(v: Vault, repair: bool = False):
    return {f.check: f for f in v.doctor(repair=repair)}["vectors"]


def test_doctor_notes_no_vectors_and_sound_vectors(v: Vault) -> None:
    f = _finding(v)
    assert f.ok and "no vectors" in f.summary
    _sound_file(v)
    f = _finding(v)
    assert f.ok and f.summary == "4 vector(s) stored"
    v.add("New", "A memory added after the vectors.")
    f = _finding(v)
    assert f.ok and "1 memory without a current one" in f.summary


@pytest.mark.parametrize("kind", DAMAGE)
def test_doctor_reports_a_damaged_file_and_repair_rebuilds_it(v: Vault, kind: str) -> None:
    store = _sound_file(v)
    DAMAGE[kind](store.file)
    f = _finding(v)
    assert not f.ok and "is damaged" in f.summary and REASON[kind] in f.summary
    assert f.paths == [".git/gitmem/vectors/vectors.npz"]
    out = CliRunner().invoke(cli, ["--vault", str(v.root), "doctor"])
    assert out.exit_code == 1 and "FAIL  vectors" in out.output
    f = _finding(v, repair=True)
    assert f.repaired and "replaced the damaged .git/gitmem/vectors/vectors.npz by an empty one" in f.repaired[0]
    assert store.damage() is None
    if available():                         # embedded again, after the lock was released
        assert f.repaired[-1] == "embedded 4 memories again" and len(store.stored()) == 4
    else:
        assert "needs the embed extra" in f.repaired[-1] and store.stored() == {}
    assert _finding(v).ok
    out = CliRunner().invoke(cli, ["--vault", str(v.root), "doctor", "--json"])
    assert out.exit_code == 0 and json.loads(out.output)["ok"]


def test_embedding_a_vault_without_memories_replaces_a_damaged_file(tmp_path: Path, clock: FakeClock) -> None:
    vault = Vault.init(tmp_path / "empty", author="tester", clock=clock)
    try:
        store = _store(vault)
        store.dir.mkdir(parents=True, exist_ok=True)
        random_bytes(store.file)
        pytest.importorskip("numpy")
        assert store.damage() is not None
        # (no memory to embed: the model is never loaded, so this needs none)
        assert embed_pending(vault.services.store, vault.services.reader, vault.services.searcher.refresh) == 0
        assert store.damage() is None and store.stored() == {}
    finally:
        vault.close()


# --- search -------------------------------------------------------------------------------------

QUERY = "holiday in a European country"


@pytest.fixture
def hv(v: Vault) -> Vault:
    if not available():
        pytest.skip('needs pip install "gitmem-vault[embed]"')
    assert v.embed()["embedded"] == 4
    assert v.search(QUERY).mode == "hybrid"
    return v


@needs_extra
@pytest.mark.parametrize("kind", DAMAGE)
def test_search_falls_back_to_words_with_a_notice(hv: Vault, kind: str) -> None:
    DAMAGE[kind](_store(hv).file)
    for hybrid in (None, True):
        page = hv.search("Madrid holiday", hybrid=hybrid)
        assert page.mode != "hybrid" and [h.title for h in page.hits] == ["Trip plans"]
        assert page.notice is not None and "searched by words only" in page.notice
        assert ".git/gitmem/vectors/vectors.npz is damaged" in page.notice and REASON[kind] in page.notice
        assert "run 'gitmem embed' to rebuild it" in page.notice     # no worker runs in this process
        assert page.to_dict()["notice"] == page.notice
    assert hv.search("Madrid", hybrid=False).notice is None          # words only was asked: nothing to say
    # `gitmem embed` replaces it; hybrid search is back, without a notice
    done = hv.embed()
    assert done["embedded"] == 4 and done["vectors"] == 4 and REASON[kind] in done["replaced_damaged"]
    page = hv.search(QUERY)
    assert page.mode == "hybrid" and page.notice is None and "notice" not in page.to_dict()
    assert "replaced_damaged" not in hv.embed()


@needs_extra
def test_cli_and_tool_say_the_search_fell_back(hv: Vault) -> None:
    cut_in_half(_store(hv).file)
    runner = CliRunner()
    out = runner.invoke(cli, ["--vault", str(hv.root), "search", "Madrid holiday"])
    assert out.exit_code == 0 and "Trip plans" in out.stdout and "notice" not in out.stdout
    notes = [line for line in out.stderr.splitlines() if line.startswith("notice: ")]
    assert len(notes) == 1 and "searched by words only" in notes[0] and "gitmem embed" in notes[0]
    out = runner.invoke(cli, ["--vault", str(hv.root), "search", "--json", "Madrid holiday"])
    assert out.exit_code == 0 and "damaged" in json.loads(out.stdout)["notice"]
    box = Toolbox(hv, "gitmem", agent="Bot <bot@example.com>")
    result = box.call("memory_search", {"query": "Madrid holiday"})
    assert "error" not in result and result["hits"][0]["title"] == "Trip plans"
    assert "searched by words only" in result["notice"]
    out = runner.invoke(cli, ["--vault", str(hv.root), "embed"])
    assert out.exit_code == 0 and "the vectors file was damaged" in out.stderr
    assert "notice" not in box.call("memory_search", {"query": QUERY})


@needs_extra
@pytest.mark.slow
def test_background_worker_rebuilds_a_damaged_file(hv: Vault) -> None:
    logged: list[str] = []
    worker = hv.start_embedding(logged.append)      # as gitmem watch and gitmem mcp do
    assert worker is not None and worker.running
    store = _store(hv)
    try:
        nan_values(store.file)
        page = hv.search("Madrid holiday")
        # (the worker wakes every 5 s: it may, rarely, have rebuilt the file already)
        if page.notice is not None:
            assert "it is being rebuilt in the background" in page.notice   # and the search nudged it
        deadline = time.monotonic() + 30
        while store.damage() is not None or len(store.stored()) < 4:
            assert time.monotonic() < deadline, f"the worker never rebuilt the vectors: {logged}"
            time.sleep(0.05)
        assert any("is damaged" in line and "rebuilding it" in line for line in logged), (logged, page.notice)
        page = hv.search(QUERY)
        assert page.mode == "hybrid" and page.notice is None
    finally:
        worker.stop()
    assert not worker.running


def test_purge_replaces_a_damaged_file(v: Vault) -> None:
    """A damaged file cannot be pruned of the purged memory's vector: it is replaced."""
    store = _sound_file(v)
    doomed = v.add("Door code", "The door code is 4711.")
    store.save({doomed.path: ("x", _arrays(store.file)["vectors"][0])})
    data = store.file.read_bytes()
    store.file.write_bytes(data[:-10])      # cut short: unreadable, yet it holds the purged vector
    assert store.damage() is not None
    v.purge(doomed.id)
    assert store.damage() is None and store.stored() == {}      # (nothing of the damaged file is kept)
