"""gitmem export: JSON lines that hold every memory whole, and a plain folder
projection that never writes inside the vault nor through a link."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitmem import Vault
from gitmem.cli.main import cli
from gitmem.errors import GitmemError
from gitmem.memory.schema import FIELD_ORDER

from .conftest import assert_clean, git, snapshot


def invoke(root: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--vault", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def mixed(sample_vault: Vault) -> Vault:
    """The sample vault plus an unknown field, a soft-deleted memory and a person's
    notes without frontmatter, two of them with the same file name in one tier."""
    sample_vault.add("Export me", "Body with **markdown**.\n", type="fact", tags=["x"], importance=5,
                     reviewed_by={"name": "maya", "on": "2026-11-01"})
    gone = sample_vault.add("Deleted one", "bye\n")
    sample_vault.delete(gone.id)
    for folder in ("a", "b"):
        path = sample_vault.root / "mid_term" / folder / "Note.md"
        path.parent.mkdir(parents=True)
        path.write_text(f"# Note in {folder}\n\nplain text\n")
    sample_vault.commit_outside_edits()
    sample_vault.flush()
    return sample_vault


def test_jsonl_round_trip_holds_every_memory_and_field(mixed: Vault, tmp_path: Path) -> None:
    out = tmp_path / "memories.jsonl"
    count = mixed.export_jsonl(out)
    memories = sorted(mixed.list(status=None), key=lambda m: m.path)
    assert count == len(memories) > 30
    lines = out.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["path"] for r in records] == [m.path for m in memories]
    for record in records:
        memory = mixed.get(record["path"])
        keys = list(record)
        assert keys[0] == "path" and keys[-1] == "body"
        known = [k for k in keys[1:-1] if k in FIELD_ORDER]
        assert known == [k for k in FIELD_ORDER if k in known]             # gitmem's field order
        assert keys[1:1 + len(known)] == known                               # unknown fields after them
        assert {k: v for k, v in record.items() if k not in ("path", "body")} == memory.meta
        assert record["body"] == memory.body
    extra = next(r for r in records if r["title"] == "Export me")
    assert extra["reviewed_by"] == {"name": "maya", "on": "2026-11-01"} and extra["importance"] == 5
    assert next(r for r in records if r["title"] == "Deleted one")["status"] == "deleted"
    # stable: a second export of the unchanged vault is the same bytes; the CLI writes the same lines
    again = tmp_path / "again.jsonl"
    mixed.export_jsonl(again)
    assert again.read_bytes() == out.read_bytes()
    result = subprocess.run([sys.executable, "-m", "gitmem", "-C", str(mixed.root), "export", "jsonl"],
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == out.read_bytes()
    assert_clean(mixed.root)


def test_jsonl_cli_out_and_refusal_inside_the_vault(mixed: Vault, tmp_path: Path) -> None:
    code, out = invoke(mixed.root, "export", "jsonl", "--out", str(tmp_path / "e.jsonl"), "--json")
    assert code == 0 and json.loads(out)["exported"] == len((tmp_path / "e.jsonl").read_text().splitlines())
    before = snapshot(mixed.root)
    code, out = invoke(mixed.root, "export", "jsonl", "--out", str(mixed.root / "export.jsonl"))
    assert code == 2 and "inside the vault" in out
    assert snapshot(mixed.root) == before


def test_folder_projection_names_and_contents(mixed: Vault, tmp_path: Path) -> None:
    target = tmp_path / "plain"
    report = mixed.export_folder(target)
    memories = mixed.list(status=None)
    assert len(report.files) == len(memories)
    written = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    assert written == sorted(report.files.values())
    assert all(len(rel.split("/")) == 2 for rel in written)                 # <tier>/<name>.md, no hash folders
    assert report.files["mid_term/a/Note.md"] == "mid_term/Note.md"
    assert report.files["mid_term/b/Note.md"] == "mid_term/Note-2.md"       # collision-safe
    for source, rel in report.files.items():
        assert (target / rel).read_bytes() == (mixed.root / source).read_bytes()
        assert rel.split("/")[0] == source.split("/")[0]
    archived = next(m for m in memories if m.title == "Deleted one")
    assert report.files[archived.path].startswith("archive/")
    assert_clean(mixed.root)


def test_folder_refuses_non_empty_inside_vault_and_links(mixed: Vault, tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    code, out = invoke(mixed.root, "export", "folder", str(target))
    assert code == 5 and "not empty" in out
    assert sorted(os.listdir(target)) == ["keep.txt"]
    code, out = invoke(mixed.root, "export", "folder", str(target), "--force", "--json")
    assert code == 0 and json.loads(out)["exported"] > 30
    assert (target / "keep.txt").read_text() == "mine"
    # a link in the target is never followed: nothing is written anywhere
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "long_term").symlink_to(elsewhere)
    with pytest.raises(GitmemError) as caught:
        mixed.export_folder(linked, force=True)
    assert caught.value.code == "unsafe_path"
    assert os.listdir(elsewhere) == [] and os.listdir(linked) == ["long_term"]
    (tmp_path / "dir-link").symlink_to(elsewhere)
    with pytest.raises(GitmemError) as caught:
        mixed.export_folder(tmp_path / "dir-link")
    assert caught.value.code == "unsafe_path" and os.listdir(elsewhere) == []
    before = snapshot(mixed.root)
    for inside in (mixed.root / "exported", mixed.root, mixed.root / "long_term"):
        with pytest.raises(GitmemError) as caught:
            mixed.export_folder(inside, force=True)
        assert caught.value.code == "invalid_input"
    assert snapshot(mixed.root) == before
    assert git(mixed.root, "status", "--porcelain") == ""


def test_import_of_an_exported_folder_keeps_the_memories(mixed: Vault, tmp_path: Path) -> None:
    """The folder projection reads back as a markdown import: titles, types and tags kept."""
    mixed.export_folder(tmp_path / "plain")
    with Vault.init(tmp_path / "second", author="tester") as other:
        report = other.import_from("markdown", tmp_path / "plain")
        assert report.counts()["created"] == len(mixed.list(status=None))
        by_title = {m.title: m for m in other.list(status=None)}
        for memory in mixed.list(status=None):
            copy = by_title[memory.title]
            assert (copy.type, copy.tier) == (memory.type, memory.tier)
            assert set(memory.tags) <= set(copy.tags)
