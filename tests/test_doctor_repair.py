"""``gitmem doctor --repair``: everything git can rebuild is rebuilt, and it says what it did."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from click.testing import CliRunner

from gitmem import Vault
from gitmem.cli.main import cli
from gitmem.search.whoosh import SearchIndex

from .conftest import assert_clean, git


def damage(root: Path) -> dict[str, Path]:
    """What crashes and outside git commands leave behind, all at once."""
    with Vault.open(root) as v:
        a = v.add("alpha memory", "alpha body\n")
        b = v.add("beta memory", "beta body\n")
        v.search("alpha")  # build the index
    idx = SearchIndex(root / ".git/gitmem/index")
    idx.delete([a.path])  # stale search index
    idx.close()
    tmp = root / "short_term" / ".x.md.gitmem-tmp-4242"
    tmp.write_text("half a file")  # temp file of a killed atomic write
    git(root, "commit", "-q", "--allow-empty", "-m", "a commit made with the git CLI")  # history ahead of catalog
    git(root, "rm", "-q", "--cached", b.path)  # .git/index out of date (git status shows it)
    locks = {"index": root / ".git/index.lock", "ref": root / ".git/refs/heads/main.lock",
             "object": root / ".git/objects/ab/cdef.lock"}
    locks["object"].parent.mkdir(exist_ok=True)
    for lock in locks.values():
        lock.write_bytes(b"")
        old = time.time() - 3600
        os.utime(lock, (old, old))
    return {"tmp": tmp, **locks}


def test_doctor_repair_fixes_what_git_can_rebuild(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    Vault.init(root, author="setup").close()
    left = damage(root)
    with Vault.open(root) as v:
        found = {f.check: f for f in v.doctor()}
        for check in ("git-index", "temp-files", "git-locks"):
            assert not found[check].ok, check
        assert "recorded the memories touched by 1 new commit(s)" in found["catalog"].summary
        assert v.services.store.catalog.get("history_tip") == v.head
        fixed = {f.check: f for f in v.doctor(repair=True)}
        for check in ("git-index", "temp-files", "git-locks"):
            assert fixed[check].repaired, check
        assert [f.to_dict() for f in v.doctor() if not f.ok] == []
    assert not any(p.exists() for p in left.values())
    assert_clean(root)


def test_doctor_cli_says_what_it_repaired(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    Vault.init(root, author="setup").close()
    damage(root)
    runner = CliRunner()
    out = runner.invoke(cli, ["--vault", str(root), "doctor"])
    assert out.exit_code == 1 and "FAIL  git-locks" in out.output
    out = runner.invoke(cli, ["--vault", str(root), "doctor", "--repair"])
    assert out.exit_code == 0, out.output
    assert "fixed temp-files" in out.output and "fixed git-locks" in out.output
    out = runner.invoke(cli, ["--vault", str(root), "doctor", "--json"])
    assert out.exit_code == 0 and json.loads(out.output)["ok"]


def test_a_damaged_catalog_is_rebuilt_on_open(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="setup") as v:
        m = v.add("survivor", "kept\n")
    catalog = root / ".git/gitmem/catalog.sqlite"
    for extra in ("-wal", "-shm"):
        Path(str(catalog) + extra).unlink(missing_ok=True)
    catalog.write_bytes(b"this is not a database" * 100)
    with Vault.open(root) as v:
        assert v.get(m.id).title == "survivor"
        assert [x.op for x in v.history(m.id)] == ["add"]


def test_doctor_reports_a_secret_a_person_saved(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="setup") as v:
        (root / "short_term" / "note.md").write_text(
            "---\ntitle: deploy notes\n---\nThe key is AKIAIOSFODNN7EXAMPLE for now.\n")
        head = v.head
        # A person's file holding a secret is never committed (nor rewritten): it stays on
        # disk, the refusal is reported, and doctor lists it.
        assert v.commit_outside_edits() is None
        assert v.head == head
        assert "aws_access_key" in v.outside_refused["short_term/note.md"]
        found = {f.check: f for f in v.doctor()}
        assert not found["secrets"].ok
        assert found["secrets"].details == {"short_term/note.md": "aws_access_key"}
