"""Bulk imports (``gitmem init --from``, ``gitmem import markdown``) index their memories
in one pass, with the postings held in memory: the commits' trees and every search
result are exactly those of the ordinary path (Whoosh's own posting pool, one
document at a time)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from gitmem import Vault
from gitmem.search.whoosh import SearchIndex
from gitmem.write import pipeline

from .conftest import FakeClock, git

WORDS = ("plan review deploy coffee garden invoice migration runner budget standup ticket release "
         "sprint backlog recipe holiday meeting roadmap metrics dashboard running deployed gardens "
         "Zürich naïve résumé").split()
QUERIES = ("roadmap", "deploy", "garden*", '"release sprint"', "budget OR coffee", "tag:work",
           "review -meeting", "zurich", "naive", "run", "note", "links", "title:plan")


def _notes(folder: Path, n: int = 50) -> Path:
    rng = random.Random(50)
    for i in range(n):
        where = folder / ("long_term" if i % 10 == 0 else f"area{i % 3}") / f"topic{i % 4}"
        where.mkdir(parents=True, exist_ok=True)
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 80)))
        link = f"\nSee [[note-{rng.randrange(i)}]] and [[note-{rng.randrange(i)}|the other one]].\n" if i else ""
        head = (f"---\ntitle: Note {i} {rng.choice(WORDS)}\ntags: [{rng.choice(['work', 'home'])}]\n"
                f"type: {rng.choice(['fact', 'preference', 'memory'])}\n---\n") if i % 7 else ""
        (where / f"note-{i}.md").write_text(f"{head}# Heading {i}\n\n{words}\n{link}", encoding="utf-8")
    return folder


def _results(vault: Vault) -> dict[str, list[tuple[str, float, str]]]:
    out = {}
    for query in QUERIES:
        page = vault.search(query, limit=100)
        out[query] = [(h.path, round(h.score, 9), h.snippet) for h in page.hits]
    return out


@pytest.fixture
def ordinary(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Whoosh's own posting pool, a document at a time, and no bulk index build."""
    monkeypatch.setattr(SearchIndex, "IN_MEMORY_POSTINGS", False)
    monkeypatch.setattr(SearchIndex, "BULK_DOCS", 10**9)
    monkeypatch.setattr(pipeline, "BULK_MEMORIES", 10**9)
    yield


def _tree(root: Path) -> str:
    return git(root, "rev-parse", "HEAD^{tree}").strip()


def test_init_from_folder_bulk_matches_the_ordinary_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _notes(tmp_path / "notes")
    monkeypatch.setattr(pipeline, "BULK_MEMORIES", 10)   # these 50 notes are a bulk import
    bulk = Vault.init(tmp_path / "bulk", from_dir=source, author="tester", clock=FakeClock())
    try:
        assert bulk.services.searcher.open_index is not None   # searchable when init returns
        found_bulk, tree_bulk = _results(bulk), _tree(bulk.root)
    finally:
        bulk.close()
    with monkeypatch.context() as m:
        m.setattr(SearchIndex, "IN_MEMORY_POSTINGS", False)
        plain = Vault.init(tmp_path / "plain", from_dir=source, author="tester", clock=FakeClock())
        plain.close()
        shutil.rmtree(tmp_path / "plain" / ".git" / "gitmem" / "index")   # built again on first use
        plain = Vault.open(tmp_path / "plain", author="tester", clock=FakeClock())
        try:
            found_plain, tree_plain = _results(plain), _tree(plain.root)
        finally:
            plain.close()
    assert tree_bulk == tree_plain
    assert found_bulk == found_plain
    assert sum(map(len, found_bulk.values())) > 100
    assert git(tmp_path / "bulk", "status", "--porcelain") == ""


@pytest.fixture
def two_processes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Rebuilds of 8 documents or more split in two processes (where this machine can);
    the list records, per rebuild round, whether a child process took half."""
    from gitmem.search.whoosh import writing as index_module
    if not hasattr(os, "fork") or index_module.cores() < 2:
        pytest.skip("needs fork and two cores")
    monkeypatch.setattr(index_module, "other_threads", lambda: False)
    monkeypatch.setattr(SearchIndex, "PARALLEL_DOCS", 8)
    monkeypatch.setattr(SearchIndex, "REBUILD_SEGMENT_DOCS", 20)   # several rounds
    used: list[bool] = []
    original = SearchIndex._build_in_child  # noqa: SLF001

    def spy(self: SearchIndex, docs: list) -> object:
        child = original(self, docs)
        used.append(child is not None)
        return child
    monkeypatch.setattr(SearchIndex, "_build_in_child", spy)
    return used


def _reindexed(root: Path) -> dict[str, list[tuple[str, float, str]]]:
    vault = Vault.open(root, author="tester", clock=FakeClock())
    try:
        assert vault.reindex() == 50
        return _results(vault)
    finally:
        vault.close()


def test_a_rebuild_in_two_processes_matches_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        two_processes: list[bool]) -> None:
    source = _notes(tmp_path / "notes")
    monkeypatch.setattr(pipeline, "BULK_MEMORIES", 10)
    Vault.init(tmp_path / "vault", from_dir=source, author="tester", clock=FakeClock()).close()
    parallel = _reindexed(tmp_path / "vault")
    assert two_processes and all(two_processes)
    segments = len(list((tmp_path / "vault" / ".git" / "gitmem" / "index").glob("*.seg")))
    assert segments == 6                                  # 3 rounds (20 + 20 + 10), 2 segments each
    with monkeypatch.context() as m:
        m.setattr(SearchIndex, "PARALLEL_DOCS", 10**9)
        alone = _reindexed(tmp_path / "vault")
    assert parallel == alone and sum(map(len, alone.values())) > 100


def test_a_bulk_import_in_two_processes_finds_what_one_process_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      two_processes: list[bool]) -> None:
    source = _notes(tmp_path / "notes")
    monkeypatch.setattr(SearchIndex, "BULK_DOCS", 2)
    _, parallel = _import(tmp_path / "parallel", source)
    assert two_processes == [True]
    monkeypatch.setattr(SearchIndex, "PARALLEL_DOCS", 10**9)
    _, alone = _import(tmp_path / "alone", source)

    def unordered(found: dict[str, list[tuple[str, float, str]]]) -> dict[str, set[tuple[str, float, str]]]:
        return {query: set(hits) for query, hits in found.items()}   # (equal scores may swap places)
    assert unordered(parallel) == unordered(alone) and sum(map(len, alone.values())) > 100


def test_a_failed_child_leaves_the_rebuild_to_the_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         two_processes: list[bool]) -> None:
    source = _notes(tmp_path / "notes")
    monkeypatch.setattr(pipeline, "BULK_MEMORIES", 10)
    Vault.init(tmp_path / "vault", from_dir=source, author="tester", clock=FakeClock()).close()
    with monkeypatch.context() as m:
        m.setattr(SearchIndex, "PARALLEL_DOCS", 10**9)
        alone = _reindexed(tmp_path / "vault")
    from whoosh.writing import SegmentWriter
    parent, finalize = os.getpid(), SegmentWriter._finalize_segment  # noqa: SLF001

    def broken_in_the_child(self: SegmentWriter) -> object:
        if os.getpid() != parent:
            raise OSError("disk full")
        return finalize(self)
    monkeypatch.setattr(SegmentWriter, "_finalize_segment", broken_in_the_child)
    assert _reindexed(tmp_path / "vault") == alone
    segments = len(list((tmp_path / "vault" / ".git" / "gitmem" / "index").glob("*.seg")))
    assert segments == 6                                  # the parent wrote the children's segments
    assert two_processes and all(two_processes)


def _import(root: Path, source: Path) -> tuple[str, dict[str, list[tuple[str, float, str]]]]:
    vault = Vault.init(root, author="tester", clock=FakeClock())
    try:
        vault.search("roadmap")   # the index is open, so the import updates it
        assert vault.services.searcher.open_index is not None
        report = vault.import_from("markdown", source)
        assert len(report.created) == 50
        return _tree(root), _results(vault)
    finally:
        vault.close()


def test_import_markdown_bulk_matches_the_ordinary_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _notes(tmp_path / "notes")
    with monkeypatch.context() as m:
        m.setattr(SearchIndex, "BULK_DOCS", 2)   # this small import takes the bulk path
        tree_bulk, found_bulk = _import(tmp_path / "bulk", source)
    with monkeypatch.context() as m:
        m.setattr(SearchIndex, "IN_MEMORY_POSTINGS", False)
        m.setattr(SearchIndex, "BULK_DOCS", 10**9)
        tree_plain, found_plain = _import(tmp_path / "plain", source)
    assert tree_bulk == tree_plain
    assert found_bulk == found_plain
    assert sum(map(len, found_bulk.values())) > 100


def test_import_into_a_vault_without_an_index_leaves_it_searchable(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "BULK_MEMORIES", 10)
    source = _notes(tmp_path / "notes")
    vault = Vault.init(tmp_path / "vault", author="tester", clock=FakeClock())
    try:
        assert vault.services.searcher.open_index is None
        vault.import_from("markdown", source)
        assert vault.services.searcher.open_index is not None
        assert vault.search("roadmap").total > 0
    finally:
        vault.close()


def test_the_index_a_bulk_init_builds_is_in_step_with_the_catalog(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The next process trusts the catalog's list of changed rows (nothing pending, one
    token on both sides) instead of comparing every indexed hash once."""
    monkeypatch.setattr(pipeline, "BULK_MEMORIES", 5)
    source = tmp_path / "notes"
    source.mkdir()
    for i in range(12):
        (source / f"note-{i}.md").write_text(f"# Note {i}\n\nword{i} and shared text\n")
    Vault.init(tmp_path / "vault", from_dir=source).close()
    with Vault.open(tmp_path / "vault") as vault:
        assert vault.services.store.catalog.unindexed(10**6) == []
        index = SearchIndex(vault.services.store.state_dir / "index")
        try:
            assert index.get_state("catalog") == vault.services.store.catalog.get("search_index") is not None
        finally:
            index.close()
        assert vault.search("word7").hits[0].title == "Note 7"
