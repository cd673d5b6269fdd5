"""The catalog (``.git/gitmem/catalog.sqlite``) shared by several processes: a write
waits for another process's write instead of failing, and SQLite's errors come out
as gitmem's (``vault_busy`` past the timeout, ``storage_error`` for a damaged or
full disk), never as ``OperationalError: database is locked``."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from gitmem.errors import LockTimeout
from gitmem.store.catalog import Catalog, FileStat


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Catalog, Catalog]]:
    """Two connections to one catalog, as two processes have."""
    a, b = Catalog(tmp_path / "catalog.sqlite"), Catalog(tmp_path / "catalog.sqlite")
    yield a, b
    a.close()
    b.close()


def _held(catalog: Catalog, release: threading.Event) -> threading.Thread:
    """Another process's catalog write, in progress until ``release`` is set."""
    taken = threading.Event()

    def hold() -> None:
        with catalog.transaction():
            catalog.set("other", "writing")
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(10)
    return thread


def test_a_scan_that_reads_before_it_writes_waits_for_another_writer(two: tuple[Catalog, Catalog]) -> None:
    mine, other = two
    release = threading.Event()
    holder = _held(other, release)
    result: list[Any] = []

    def load(path: str) -> tuple[str, dict[str, Any], None, str, str]:
        mine.inherited_id(path)   # a read inside the scan's transaction, as Reader's load does
        return "m1", {"title": "note", "tier": "short_term"}, None, "body", "0" * 40

    def scan() -> None:
        try:
            result.append(mine.scan({"short_term/note.md": FileStat(1, 10)}, load))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            result.append(exc)

    scanner = threading.Thread(target=scan)
    scanner.start()
    scanner.join(0.3)     # the other write goes on for a while (a deferred transaction failed at once)
    release.set()
    holder.join()
    scanner.join()
    assert result == [(["short_term/note.md"], [])]
    assert mine.row("short_term/note.md") is not None


def test_a_catalog_busy_past_its_timeout_is_vault_busy(tmp_path: Path) -> None:
    mine = Catalog(tmp_path / "catalog.sqlite", busy_timeout=0.1)
    other = Catalog(tmp_path / "catalog.sqlite")
    release = threading.Event()
    holder = _held(other, release)
    try:
        with pytest.raises(LockTimeout) as info:
            mine.set_dirs({"short_term": (1, 1)})
        assert info.value.code == "vault_busy"
        # Recording a search's hits (a read's side effect) neither fails nor waits long.
        assert mine.add_retrievals(["m1"], 1) is False
        assert not mine.db.in_transaction
    finally:
        release.set()
        holder.join()
        mine.close()
        other.close()
    again = Catalog(tmp_path / "catalog.sqlite", busy_timeout=0.1)
    try:
        again.set_dirs({"short_term": (1, 1)})   # the writer is gone: no wait
        assert again.dirs() == {"short_term": (1, 1)}
    finally:
        again.close()
