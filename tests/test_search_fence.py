"""The fence around Whoosh (gitmem.search.whoosh): every private Whoosh name it uses is
declared and present in the installed Whoosh; another release is a clear error when the
search index opens (API and CLI), never a slower path; failures inside the fence that are
not expected runtime conditions surface instead of being swallowed."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitmem import Vault
from gitmem.errors import SearchEngineUnsupported
from gitmem.search.documents import IndexDoc
from gitmem.search.whoosh import SearchIndex, internals, postings
from gitmem.search.whoosh.storage import IndexStorage

from .conftest import FakeClock

FENCE = Path(internals.__file__).parent


@pytest.fixture(autouse=True)
def fresh_check() -> Iterator[None]:
    """Each test checks the installed Whoosh afresh, and leaves the next test to do so."""
    internals.check.cache_clear()
    yield
    internals.check.cache_clear()


def doc(path: str, body: str) -> IndexDoc:
    return IndexDoc(path=path, id=path, title=path, body=body, hash=path)


# --- the canary ---------------------------------------------------------------------------

def test_every_listed_whoosh_name_exists_in_the_installed_whoosh() -> None:
    assert importlib.metadata.version("whoosh-reloaded") == internals.SUPPORTED_VERSION
    assert internals.missing() == []
    assert internals.check() == internals.SUPPORTED_VERSION
    assert len(internals.PRIVATE_NAMES) >= 35 and len(internals.SIGNATURES) >= 10


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_the_list_names_every_private_whoosh_name_the_fence_uses() -> None:
    """Read from the fence's code: every private name it reaches on another object
    (``m._maxid``, ``w._added``) or on ``self`` that no class of the fence defines, and
    every private name a fence class shares with the Whoosh class it extends (an
    override, or Whoosh's own state it sets), is in internals.PRIVATE_NAMES."""
    listed = {p.name for p in internals.PRIVATE_NAMES}
    defined: set[str] = set()      # private names fence classes define (methods, attributes)
    on_self: set[str] = set()      # private names read or set on self
    reached: set[str] = set()      # private names reached on anything else
    shared: set[str] = set()       # private names a fence class shares with its Whoosh base
    for path in sorted(FENCE.glob("*.py")):
        module = importlib.import_module("gitmem.search.whoosh" if path.stem == "__init__"
                                         else f"gitmem.search.whoosh.{path.stem}")
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr) and not (
                    isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}):
                reached.add(node.attr)
        for klass in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            mine: set[str] = set()
            used: set[str] = set()
            for node in ast.walk(klass):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and node.value.id in {"self", "cls"} and _private(node.attr):
                    used.add(node.attr)
                    if isinstance(node.ctx, ast.Store):
                        mine.add(node.attr)
            for stmt in klass.body:
                if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                    mine.add(stmt.name)
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    mine.add(stmt.target.id)
                elif isinstance(stmt, ast.Assign):
                    mine |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            cls = getattr(module, klass.name)
            mine |= set(getattr(cls, "__slots__", ()))
            bases = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] == "whoosh"]
            theirs = set().union(*(internals.code_names(b) | set(vars(b)) for b in bases))
            shared |= {n for n in (mine | used) & theirs if _private(n)}
            defined |= {n for n in mine - theirs if _private(n)}
            on_self |= used
    unlisted = sorted((((reached | on_self) - defined) | shared) - listed - {"_exit"})   # (os._exit)
    assert unlisted == [], f"private Whoosh names the fence uses but internals does not list: {unlisted}"
    assert {"_maxid", "_added", "_read_toc", "_segments", "_fpath", "_btexts", "_mini_ids"} <= listed
    assert {"_ix", "_lock", "_searcher"} <= defined and {"_ids", "_read_ids", "_fpath"} <= shared | on_self


# --- another release: a clear error at open -----------------------------------------------

def _assert_clear(err: SearchEngineUnsupported, *mentions: str) -> None:
    assert err.code == "search_engine_unsupported" and err.exit_code == 1
    for text in mentions:
        assert text in err.message
    assert err.hint is not None and 'pip install "whoosh-reloaded==2.7.5"' in err.hint


def test_a_missing_whoosh_name_is_a_clear_error_when_the_index_opens(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from whoosh.codec.whoosh3 import W3LeafMatcher
    monkeypatch.delattr(W3LeafMatcher, "_next_block")   # as if a release renamed it
    with pytest.raises(SearchEngineUnsupported) as caught:
        SearchIndex(tmp_path / "ix")
    _assert_clear(caught.value, "whoosh.codec.whoosh3.W3LeafMatcher._next_block", "whoosh-reloaded 2.7.5")


def test_a_changed_signature_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from whoosh.writing import SegmentWriter

    def init(self: object, ix: object, limitmb: int = 128, codec: object = None) -> None:  # no _lk
        raise AssertionError("never called")
    monkeypatch.setattr(SegmentWriter, "__init__", init)
    with pytest.raises(SearchEngineUnsupported) as caught:
        SearchIndex(tmp_path / "ix")
    _assert_clear(caught.value, "whoosh.writing.SegmentWriter.__init__(ix, _lk, limitmb, codec)")


def test_another_version_is_a_clear_error_through_the_vault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault = Vault.init(tmp_path / "v", author="tester", clock=FakeClock())
    try:
        vault.add("Ferry times", "The ferry leaves at noon.")
        real = importlib.metadata.version
        monkeypatch.setattr(importlib.metadata, "version",
                            lambda name: "2.7.6" if name == "whoosh-reloaded" else real(name))
        with pytest.raises(SearchEngineUnsupported) as caught:
            vault.search("ferry")
        _assert_clear(caught.value, "whoosh-reloaded 2.7.6 is installed", "supports whoosh-reloaded 2.7.5")
    finally:
        vault.close()


_PRELUDE = {
    "renamed": "import whoosh.codec.whoosh3 as w3\ndel w3.W3LeafMatcher._next_block\n",
    "version": ("import importlib.metadata as md\nreal = md.version\n"
                "md.version = lambda name: '2.8.0' if name == 'whoosh-reloaded' else real(name)\n"),
}


@pytest.mark.parametrize("case", sorted(_PRELUDE))
def test_the_cli_prints_the_error_without_a_traceback(tmp_path: Path, case: str) -> None:
    """``gitmem search`` in a real process whose Whoosh differs (a name renamed, another
    version): exit code 1, the error and the hint on stderr, no traceback."""
    root = tmp_path / "v"
    Vault.init(root, author="tester", clock=FakeClock()).close()
    with Vault.open(root, author="tester") as vault:
        vault.add("Ferry times", "The ferry leaves at noon.")
    script = _PRELUDE[case] + "import sys\nfrom gitmem.cli.main import main\nsys.argv[0] = 'gitmem'\nmain()\n"
    env = {**os.environ, "GITMEM_VAULT": str(root)}
    env.pop("GITMEM_DEBUG", None)
    for args, as_json in ((["search", "ferry"], False), (["search", "ferry", "--json"], True)):
        done = subprocess.run([sys.executable, "-W", "error", "-c", script, *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout
        if as_json:
            error = json.loads(done.stdout)["error"]
            assert error["code"] == "search_engine_unsupported"
            assert 'pip install "whoosh-reloaded==2.7.5"' in error["hint"]
        else:
            assert done.stderr.startswith("error: the search engine installed is not the one gitmem supports")
            assert ("W3LeafMatcher._next_block" if case == "renamed" else "whoosh-reloaded 2.8.0") in done.stderr
            assert 'hint: pip install "whoosh-reloaded==2.7.5"' in done.stderr


# --- nothing swallowed --------------------------------------------------------------------

@pytest.fixture
def small_segments(tmp_path: Path) -> Iterator[SearchIndex]:
    ix = SearchIndex(tmp_path / "ix")
    for i in range(4):
        ix.upsert([doc(f"n{i}.md", f"kestrel note {i}")], new=[f"n{i}.md"])
    assert ix._segment_count() == 4
    yield ix
    ix.close()


def test_a_merge_failing_for_an_internal_reason_is_not_swallowed(small_segments: SearchIndex,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def renamed(self: object) -> object:
        raise AttributeError("'FileIndex' object has no attribute '_read_toc'")
    monkeypatch.setattr(type(small_segments._ix), "_segments", renamed)
    with pytest.raises(AttributeError):
        small_segments.merge_small()
    with pytest.raises(AttributeError):
        small_segments.optimize()


def test_a_merge_meeting_files_replaced_meanwhile_waits_for_the_next_idle_moment(
        small_segments: SearchIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    real = type(small_segments._ix)._segments

    def vanished(self: object) -> object:
        raise FileNotFoundError("MAIN_7.toc")
    monkeypatch.setattr(type(small_segments._ix), "_segments", vanished)
    assert small_segments.merge_small() is False and small_segments._segment_count() == 0
    monkeypatch.setattr(type(small_segments._ix), "_segments", real)
    assert small_segments.merge_small() is False and small_segments._segment_count() == 1


def test_an_internal_failure_is_never_taken_for_a_damaged_index(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening an index whose files are fine but whose reading fails for a reason of the
    code (not of the files) raises, instead of deleting the index and rebuilding it at
    every open; a search failing so is not dressed up as 'run gitmem reindex'."""
    with SearchIndex(tmp_path / "ix") as ix:
        ix.rebuild([doc("a.md", "ferry at noon"), doc("b.md", "bus at nine")])
    real_blocks = postings.blocks

    def broken(*args: object, **kw: object) -> object:
        raise TypeError("blocks() got an unexpected keyword argument")
    with SearchIndex(tmp_path / "ix") as ix:
        assert not ix.needs_rebuild
        monkeypatch.setattr(postings, "blocks", broken)
        with pytest.raises(TypeError):
            ix.search("ferry")
        monkeypatch.setattr(postings, "blocks", real_blocks)
        assert [h.path for h in ix.search("ferry").hits] == ["a.md"]

    def open_file(self: object, name: str, **kw: object) -> object:
        raise TypeError("open_file() missing 1 required positional argument")
    monkeypatch.setattr(IndexStorage, "open_file", open_file)
    with pytest.raises(TypeError):
        SearchIndex(tmp_path / "ix")
    monkeypatch.undo()
    with SearchIndex(tmp_path / "ix") as ix:           # the index was left as it was
        assert not ix.needs_rebuild and ix.doc_count() == 2


def test_a_damaged_index_is_still_recreated(tmp_path: Path) -> None:
    with SearchIndex(tmp_path / "ix") as ix:
        ix.rebuild([doc("a.md", "ferry at noon")])
    for part in (tmp_path / "ix").glob("*.toc"):
        part.write_bytes(b"\x80\x04not a pickle" * 10)
    with SearchIndex(tmp_path / "ix") as ix:
        assert ix.needs_rebuild and ix.doc_count() == 0



def test_the_idle_merge_logs_an_internal_failure_instead_of_hiding_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The quiet-moment merge runs in a timer thread with no caller to raise to: an
    internal mismatch is logged with its traceback (a lock held elsewhere or a vanished
    file would pass quietly)."""
    def renamed(self: object, rounds: int = 0) -> bool:
        raise AttributeError("'FileIndex' object has no attribute '_read_toc'")
    monkeypatch.setattr(SearchIndex, "merge_small", renamed)
    caplog.set_level("ERROR", logger="gitmem.write.background")
    vault = Vault.init(tmp_path / "v", author="tester")
    try:
        vault.add("Ferry times", "The ferry leaves at noon.")
        vault.search("ferry")  # the search index is open: the next write's quiet moment merges
        vault.add("Bus times", "The bus leaves at one.")
        deadline = time.monotonic() + 60
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        vault.close()
    [record] = [r for r in caplog.records if "search index" in r.getMessage()]
    assert record.exc_info is not None and "_read_toc" in str(record.exc_info[1])
