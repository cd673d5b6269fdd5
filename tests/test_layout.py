"""Layouts: where new memories go (flat in new vaults, hashed on request) and
``gitmem layout``, which converts a vault in one commit of pure renames.

Checked the way a person sees it: the git CLI (``git show -M``, ``git log --follow``,
``git status``, ``git fsck``), the bytes of every file, and a second gitmem process
that was open before the conversion."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gitmem import Vault
from gitmem.ops.layout import set_layout_line

from .conftest import FakeClock, git

HASHED = re.compile(r"(short_term|mid_term|long_term|archive)/[0-9a-f]/[0-9a-f]/[^/]+\.md")


def cli(root: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "gitmem", "-C", str(root), *args],
                            capture_output=True, text=True, timeout=120, check=False)
    assert (result.returncode == 0) == ok, result.stdout + result.stderr
    return result


def notes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.md"))
            if ".git" not in p.parts and p.name != "MEMORY.md"}


def hashed_vault(root: Path, clock: FakeClock) -> Vault:
    """A vault made before layouts existed: its settings name no layout."""
    vault = Vault.init(root, author="tester", clock=clock)
    config = root / ".gitmem.yaml"
    config.write_text("".join(line for line in config.read_text().splitlines(keepends=True)
                              if not line.startswith("layout:")))
    vault.commit_outside_edits()
    vault.close()
    return Vault.open(root, author="tester", clock=clock)


def test_a_new_vault_writes_readable_paths_and_an_old_one_keeps_hash_folders(tmp_path: Path,
                                                                             clock: FakeClock) -> None:
    with Vault.init(tmp_path / "new", author="tester", clock=clock) as vault:
        assert "layout: flat" in (vault.root / ".gitmem.yaml").read_text()
        assert vault.add("Kanel's vet", "Tuesday 9:00.").path == "short_term/kanels-vet.md"
        assert vault.add("Kanel's vet", "Again.").path == "short_term/kanels-vet-2.md"
        assert vault.add("Desk", "Standing.", tier="long_term").path == "long_term/desk.md"
    with hashed_vault(tmp_path / "old", clock) as vault:
        assert HASHED.fullmatch(vault.add("Kanel's vet", "Tuesday 9:00.").path)


def test_converting_is_one_commit_of_pure_renames_that_git_follows(tmp_path: Path, clock: FakeClock) -> None:
    vault = hashed_vault(tmp_path / "v", clock)
    root = vault.root
    kept = vault.add("Standing desk", "Maya switched to a standing desk.")
    vault.update(kept.id, append="It arrived on Friday.")
    moved_tier = vault.move(kept.id, "mid_term")
    other = vault.add("Oat milk", "Maya takes oat milk.", tier="long_term")
    (root / "long_term" / "Projects").mkdir()
    (root / "long_term" / "Projects" / "Kegs.md").write_text("# Kegs\n\nCount them on Mondays.\n")
    vault.commit_outside_edits()
    history_before = git(root, "log", "--follow", "--format=%H", "--", moved_tier.path).split()
    assert len(history_before) >= 3
    files_before = notes(root)
    head = git(root, "rev-parse", "HEAD").strip()

    report = vault.convert_layout("flat")
    assert sorted(report.moved) == sorted([(moved_tier.path, "mid_term/standing-desk.md"),
                                           (other.path, "long_term/oat-milk.md")])
    assert report.kept == 1 and report.memories == {"flat": 0, "hashed": 2, "own": 1}
    assert git(root, "rev-parse", "HEAD~1").strip() == head              # one commit
    status = git(root, "show", "-M", "--name-status", "--format=", "HEAD").split("\n")
    assert sorted(filter(None, status)) == sorted([
        "M\t.gitmem.yaml",
        f"R100\t{moved_tier.path}\tmid_term/standing-desk.md", f"R100\t{other.path}\tlong_term/oat-milk.md"])
    after = notes(root)
    assert after["mid_term/standing-desk.md"] == files_before[moved_tier.path]
    assert after["long_term/Projects/Kegs.md"] == files_before["long_term/Projects/Kegs.md"]
    assert len(after) == len(files_before)
    assert not (root / moved_tier.path).parent.exists()          # emptied hash folders go
    follow = git(root, "log", "--follow", "--format=%H", "--", "mid_term/standing-desk.md").split()
    assert follow[1:] == history_before
    assert git(root, "status", "--porcelain") == ""
    git(root, "fsck", "--strict")
    assert vault.get(kept.id).path == "mid_term/standing-desk.md"
    assert [h.path for h in vault.search("standing desk").hits][:1] == ["mid_term/standing-desk.md"]
    assert vault.add("New note", "Lands flat now.").path == "short_term/new-note.md"
    assert [v.commit for v in vault.history(kept.id)][:1] != []
    vault.close()


def test_a_process_open_before_the_change_follows_it(tmp_path: Path, clock: FakeClock) -> None:
    """An MCP server or watcher open all day writes where the vault's layout now says."""
    server = Vault.init(tmp_path / "v", author="agent", clock=clock)
    assert server.add("Before", "x").path == "short_term/before.md"
    out = json.loads(cli(server.root, "layout", "hashed", "--json").stdout)
    assert out["moved"] == 1 and out["commit"]
    assert HASHED.fullmatch(server.add("After", "y").path)
    assert HASHED.fullmatch(server.get("Before").path)
    server.close()


def test_every_moves_a_persons_folders_too_and_a_taken_name_stays(tmp_path: Path, clock: FakeClock) -> None:
    with Vault.init(tmp_path / "v", author="tester", clock=clock) as vault:
        root = vault.root
        a = vault.add("Readme", "one", path="long_term/Home/readme.md")
        b = vault.add("Plants", "Water them.", path="long_term/Home/plants.md")
        (root / "long_term/Work").mkdir()
        (root / "long_term/Work/readme.md").write_text("---\nid: work-readme\n---\nTwo.\n")
        vault.commit_outside_edits()
        plain = vault.convert_layout("flat")
        assert plain.moved == [] and plain.commit is None            # a person's folders stay
        report = vault.convert_layout("flat", every=True)
        assert (b.path, "long_term/plants.md") in report.moved
        moved_readme = [old for old, _ in report.moved if old.endswith("readme.md")]
        assert len(moved_readme) == 1                                   # one readme.md moves ...
        assert [old for old, _ in report.clashes] == [p for p in (a.path, "long_term/Work/readme.md")
                                                      if p not in moved_readme]   # ... the other stays
        assert git(root, "status", "--porcelain") == ""


def test_dry_run_and_the_census_change_nothing(tmp_path: Path, clock: FakeClock) -> None:
    with Vault.init(tmp_path / "v", author="tester", clock=clock) as vault:
        vault.add("One", "1")
        vault.add("Two", "2")
        root = vault.root
    head = git(root, "rev-parse", "HEAD")
    before = notes(root)
    census = json.loads(cli(root, "layout", "--json").stdout)
    assert census == {"layout": "flat", "memories": {"flat": 2, "hashed": 0, "own": 0}}
    out = cli(root, "layout", "hashed", "--dry-run").stdout
    assert "would move 2 memories to the hashed layout" in out
    assert git(root, "rev-parse", "HEAD") == head and notes(root) == before
    assert "layout: flat" in (root / ".gitmem.yaml").read_text()
    assert "already has the flat layout" in cli(root, "layout", "flat").stdout
    assert git(root, "rev-parse", "HEAD") == head
    bad = cli(root, "layout", "nested", ok=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_a_persons_unsaved_edit_is_committed_as_theirs_before_the_renames(tmp_path: Path,
                                                                          clock: FakeClock) -> None:
    with Vault.init(tmp_path / "v", author="tester", clock=clock) as vault:
        memory = vault.add("Tea", "Green.")
        path = vault.root / memory.path
        path.write_text(path.read_text() + "\nAnd sometimes black.\n")
        report = vault.convert_layout("hashed")
        assert report.commit
        subjects = git(vault.root, "log", "-2", "--format=%s").splitlines()
        assert subjects == ["layout: flat -> hashed (1 memory moved)", "edit: Tea (before the layout change)"]
        assert "sometimes black" in (vault.root / report.moved[0][1]).read_text()
        assert git(vault.root, "status", "--porcelain") == ""


@pytest.mark.parametrize("text, expected", [
    ("version: 1\nlayout: hashed  # mine\ntiers: [a, b]\n", "version: 1\nlayout: flat  # mine\ntiers: [a, b]\n"),
    ("version: 1\n# my note\n", "version: 1\n# my note\n# Where new memories go: flat = <tier>/<name>.md; "
     "hashed = <tier>/<h1>/<h2>/<name>.md. `gitmem layout` converts.\nlayout: flat\n"),
    ("version: 1", "version: 1\n# Where new memories go: flat = <tier>/<name>.md; "
     "hashed = <tier>/<h1>/<h2>/<name>.md. `gitmem layout` converts.\nlayout: flat\n"),
])
def test_the_settings_file_keeps_every_other_byte(text: str, expected: str) -> None:
    assert set_layout_line(text, "flat") == expected


def test_doctor_names_the_layout_and_advises_on_a_crowded_flat_folder(tmp_path: Path, clock: FakeClock,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from gitmem.upkeep import doctor
    with Vault.init(tmp_path / "v", author="tester", clock=clock) as vault:
        for i in range(4):
            vault.add(f"Note {i}", "x")
        found = {f.check: f for f in vault.doctor()}["layout"]
        assert found.ok and found.summary == "flat layout; at most 4 memories in one folder"
        monkeypatch.setattr(doctor, "CROWDED_FOLDER", 3)
        found = {f.check: f for f in vault.doctor()}["layout"]
        assert found.ok and "(short_term)" in found.summary and "'gitmem layout hashed'" in found.summary
        vault.convert_layout("hashed")
        # Memory ids are random, so two of the four may share a hash folder.
        per_folder = Counter(p.parent for p in (tmp_path / "v" / "short_term").rglob("*.md"))
        assert all(len(p.relative_to(tmp_path / "v").parts) == 3 for p in per_folder)  # tier/h1/h2
        found = {f.check: f for f in vault.doctor()}["layout"]
        assert found.summary == f"hashed layout; at most {max(per_folder.values())} memories in one folder"
