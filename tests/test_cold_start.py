"""Changes made while no gitmem process runs are seen by the next command.

Each gitmem command here is a new process, as a user runs it in a shell.  Every
file and folder is dated well in the past before the change, so no change is
caught only because it is recent (files and folders changed in the last seconds
are always read again): what these tests see, the per-process change detection
saw (an edit in place changes a file's mtime, not its folder's; a new, removed or
renamed file changes its folder's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import git

PAST = time.time() - 600   # every file and folder is dated ten minutes ago


def gitmem(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitmem", "--vault", str(root), *args],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))


def found(root: Path, query: str) -> list[str]:
    """Paths of the memories ``gitmem search QUERY`` finds (a new process)."""
    result = gitmem(root, "search", query, "--json")
    assert result.returncode == 0, result.stderr
    return [hit["path"] for hit in json.loads(result.stdout)["hits"]]


def age(root: Path, when: float = PAST) -> None:
    """Date every file and folder of the working tree ``when`` (long ago)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            os.utime(Path(folder, name), (when, when), follow_symlinks=False)
        os.utime(folder, (when, when))


def bump(path: Path, seconds: float = 1.0) -> None:
    """Move a file's or folder's mtime on by ``seconds`` (still long ago)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + int(seconds * 1e9)))


@pytest.fixture
def vault(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A vault of three memories, aged, that one gitmem process has already seen
    (catalog, folder list and search index in step); returns its folder and the
    path of each memory by its unique word."""
    root = tmp_path / "v"
    assert gitmem(tmp_path, "init", str(root)).returncode == 0
    paths = {}
    for word in ("wombatxq", "pelicanq", "marmotzq"):
        result = gitmem(root, "add", f"Notes on {word}", f"The {word} lives here.",
                        "--tier", "long_term", "--json")
        assert result.returncode == 0, result.stderr
        paths[word] = json.loads(result.stdout)["path"]
    age(root)
    assert found(root, "wombatxq") == [paths["wombatxq"]]   # this process records the aged stats
    assert found(root, "pelicanq") == [paths["pelicanq"]]
    return root, paths


def test_an_edit_in_place_of_the_same_size_is_seen(vault: tuple[Path, dict[str, str]]) -> None:
    root, paths = vault
    file = root / paths["wombatxq"]
    folder_mtime = file.parent.stat().st_mtime_ns
    data = file.read_bytes()
    with open(file, "r+b") as fh:     # as Obsidian saves: the same file, rewritten in place
        fh.write(data.replace(b"The wombatxq", b"The quokkazq"))
    bump(file)
    assert file.stat().st_size == len(data)
    assert file.parent.stat().st_mtime_ns == folder_mtime   # its folder looks untouched

    assert found(root, "quokkazq") == [paths["wombatxq"]]
    shown = gitmem(root, "show", paths["wombatxq"])
    assert shown.returncode == 0, shown.stderr
    assert "The quokkazq lives here." in shown.stdout


def test_an_edit_in_place_is_seen_by_show_first(vault: tuple[Path, dict[str, str]]) -> None:
    root, paths = vault
    file = root / paths["pelicanq"]
    data = file.read_bytes()
    with open(file, "r+b") as fh:
        fh.write(data.replace(b"The pelicanq", b"The flamingo"))
    bump(file)
    shown = gitmem(root, "show", "Notes on pelicanq")   # a title: looked up in the catalog
    assert shown.returncode == 0, shown.stderr
    assert "The flamingo lives here." in shown.stdout
    # show brought the catalog up to date; the search index still takes the change
    assert found(root, "flamingo") == [paths["pelicanq"]]
    assert found(root, "pelicanq") == [paths["pelicanq"]]   # (the title still says pelicanq)


def test_a_new_file_is_seen(vault: tuple[Path, dict[str, str]]) -> None:
    root, paths = vault
    folder = (root / paths["marmotzq"]).parent
    new = folder / "written-by-hand.md"
    new.write_text("---\ntitle: Written by hand\n---\nA note about the ocelotzq.\n", encoding="utf-8")
    os.utime(new, (PAST, PAST))
    os.utime(folder, (PAST + 2, PAST + 2))    # what the new name did to its folder, long ago
    rel = new.relative_to(root).as_posix()

    assert found(root, "ocelotzq") == [rel]
    shown = gitmem(root, "show", "written-by-hand")
    assert shown.returncode == 0, shown.stderr
    assert "ocelotzq" in shown.stdout


def test_a_new_file_in_a_new_folder_is_seen(vault: tuple[Path, dict[str, str]]) -> None:
    root, _ = vault
    new = root / "mid_term" / "projects" / "deep" / "by-hand.md"
    new.parent.mkdir(parents=True)
    new.write_text("A note about the capybzq.\n", encoding="utf-8")
    age(root, PAST + 5)
    assert found(root, "capybzq") == ["mid_term/projects/deep/by-hand.md"]


def test_a_deleted_file_is_seen(vault: tuple[Path, dict[str, str]]) -> None:
    root, paths = vault
    file = root / paths["marmotzq"]
    file.unlink()
    os.utime(file.parent, (PAST + 2, PAST + 2))

    assert found(root, "marmotzq") == []
    shown = gitmem(root, "show", paths["marmotzq"])
    assert shown.returncode == 3, shown.stdout   # not found


def test_a_commit_made_with_git_is_seen(vault: tuple[Path, dict[str, str]]) -> None:
    root, paths = vault
    new = root / "long_term" / "from-git.md"
    new.write_text("---\ntitle: From git\n---\nThe tapirzq came with a git commit.\n", encoding="utf-8")
    edited = root / paths["wombatxq"]
    edited.write_bytes(edited.read_bytes().replace(b"The wombatxq", b"The dingozqq"))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "by hand")
    git(root, "rm", "-q", paths["marmotzq"])
    git(root, "commit", "-q", "-m", "removed by hand")
    age(root, PAST + 5)

    assert found(root, "tapirzq") == ["long_term/from-git.md"]
    assert found(root, "dingozqq") == [paths["wombatxq"]]
    assert found(root, "marmotzq") == []
    shown = gitmem(root, "show", "from-git")
    assert shown.returncode == 0, shown.stderr
    assert "tapirzq" in shown.stdout
    log = gitmem(root, "history", "from-git", "--json")
    assert log.returncode == 0, log.stderr


def test_a_save_through_a_rename_is_seen(vault: tuple[Path, dict[str, str]]) -> None:
    root, paths = vault
    file = root / paths["pelicanq"]
    tmp = file.with_name(".pelican.md.swp")
    tmp.write_bytes(file.read_bytes().replace(b"The pelicanq", b"The heronzqq"))
    os.utime(tmp, (PAST + 1, PAST + 1))
    os.replace(tmp, file)                     # as vim saves: a new file renamed over the old
    os.utime(file.parent, (PAST + 2, PAST + 2))
    assert found(root, "heronzqq") == [paths["pelicanq"]]


def test_nothing_changed_reads_no_file(vault: tuple[Path, dict[str, str]]) -> None:
    """With nothing changed, a command re-reads no memory file: every file's stat
    matches the catalog's (a file read again would show in the catalog's to-do list
    of the search index, which stays empty)."""
    root, paths = vault
    import sqlite3
    db = root / ".git" / "gitmem" / "catalog.sqlite"
    with sqlite3.connect(db) as con:
        before = con.execute("SELECT path, mtime_ns, size, hash FROM files ORDER BY path").fetchall()
    assert found(root, "wombatxq") == [paths["wombatxq"]]
    with sqlite3.connect(db) as con:
        after = con.execute("SELECT path, mtime_ns, size, hash FROM files ORDER BY path").fetchall()
        assert con.execute("SELECT COUNT(*) FROM unindexed").fetchone()[0] == 0
    assert before == after


def test_an_add_leaves_git_status_clean_after_git_wrote_the_index(
        vault: tuple[Path, dict[str, str]]) -> None:
    """``.git/index`` as git wrote it (with its cached-tree extension), then a gitmem
    write updates its entries: git sees a clean tree and a sound index."""
    root, paths = vault
    (root / "long_term" / "by-git.md").write_text("Written and committed with git.\n", encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "by hand")
    git(root, "status", "--porcelain")
    for i in range(2):
        result = gitmem(root, "add", f"After git {i}", "A note added after git wrote the index.")
        assert result.returncode == 0, result.stderr
    assert git(root, "status", "--porcelain") == ""
    assert git(root, "diff", "--cached", "--name-only") == ""
    git(root, "fsck", "--strict")
    listed = git(root, "ls-files").split()
    assert "long_term/by-git.md" in listed and paths["wombatxq"] in listed
    assert sum("after-git" in p for p in listed) == 2


def test_a_file_added_and_removed_unseen_leaves_nothing_to_do(
        vault: tuple[Path, dict[str, str]]) -> None:
    """A file the catalog took and lost before the search index ever saw it is off the
    index's to-do list after the next search (it would otherwise be looked up forever)."""
    import sqlite3
    root, paths = vault
    new = root / "long_term" / "brief.md"
    new.write_text("Here a moment.\n", encoding="utf-8")
    assert gitmem(root, "show", "brief").returncode == 0     # the catalog takes it, no index
    new.unlink()
    assert gitmem(root, "ls").returncode == 0                # the catalog drops it, no index
    assert found(root, "moment") == []
    with sqlite3.connect(root / ".git" / "gitmem" / "catalog.sqlite") as con:
        assert con.execute("SELECT COUNT(*) FROM unindexed").fetchone()[0] == 0
