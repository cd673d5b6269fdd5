"""History of one memory: versions across moves, as-of reads, diffs, restore, catch-up."""

from __future__ import annotations

import pytest

from gitmem import Vault
from gitmem.errors import GitmemError, RevisionNotFound

from .conftest import FakeClock, assert_clean, git, RENAME


@pytest.fixture
def story(vault: Vault, clock: FakeClock) -> str:
    """A memory with five versions, two of them moves."""
    m = vault.add("Coffee order", "Flat white.\n", tags=["cafe"])
    clock.tick(days=1)
    vault.update(m.id, replace=("Flat white", "Oat flat white"))
    clock.tick(days=1)
    vault.move(m.id, "mid_term")
    clock.tick(days=1)
    vault.update(m.id, append="No sugar.")
    clock.tick(days=1)
    vault.move(m.id, "long_term")
    return m.id


def test_history_lists_every_commit_across_moves(vault: Vault, story: str) -> None:
    versions = vault.history(story)
    assert [v.op for v in versions] == ["add", "update", "move", "update", "move"]
    assert [v.path.split("/")[0] for v in versions] == ["short_term", "short_term", "mid_term", "mid_term",
                                                        "long_term"]
    assert versions[0].date == "2026-11-01T09:00:00Z" and versions[-1].date == "2026-11-05T09:00:00Z"
    assert all(v.author.startswith("tester") for v in versions)
    # git agrees: the same commits, newest first, following renames.
    follow = git(vault.root, "log", "--follow", "--format=%H %s", "--", versions[-1].path).splitlines()
    assert [line.split(" ", 1)[0] for line in follow if not line.split(" ", 1)[1].startswith(RENAME)] == \
        [v.commit for v in reversed(versions)]
    assert sum(line.split(" ", 1)[1].startswith(RENAME) for line in follow) == 2  # one per move


def test_show_at_by_version_commit_and_date(vault: Vault, story: str) -> None:
    versions = vault.history(story)
    assert vault.show_at(story, "~4").body == "Flat white.\n"
    assert vault.show_at(story, 4).body == "Flat white.\n"
    assert vault.show_at(story, versions[1].commit[:10]).body == "Oat flat white.\n"
    assert vault.show_at(story, "2026-11-03").tier == "mid_term"  # end of that day
    assert vault.show_at(story, "2026-11-02T09:00:00Z").body == "Oat flat white.\n"
    with pytest.raises(RevisionNotFound):
        vault.show_at(story, "2026-10-01")
    with pytest.raises(RevisionNotFound):
        vault.show_at(story, "~9")
    with pytest.raises(GitmemError) as info:
        vault.show_at(story, "yesterday-ish")
    assert info.value.code == "revision_not_found"


def test_diff_between_versions(vault: Vault, story: str) -> None:
    text = vault.diff(story, "~4", "~3")
    assert "-Flat white." in text and "+Oat flat white." in text
    assert text.startswith("--- a/short_term/")
    latest = vault.diff(story)  # previous version -> working tree: a pure move
    assert "-tier: mid_term" in latest and "+tier: long_term" in latest
    assert vault.diff(story, "~0", "~0") == ""


def test_restore_is_a_new_commit_with_old_content_and_location(vault: Vault, story: str,
                                                               clock: FakeClock) -> None:
    clock.tick(days=1)
    restored = vault.restore(story, "~4")
    assert restored.body == "Flat white.\n" and restored.tier == "short_term"
    assert restored.meta["updated"] == "2026-11-06T09:00:00Z"
    assert git(vault.root, "log", "-1", "--format=%s").startswith("restore: Coffee order to ")
    assert len(vault.history(story)) == 6
    vault.close()
    assert_clean(vault.root)


def test_hard_deleted_memory_has_history_and_comes_back(vault: Vault, story: str) -> None:
    vault.delete(story, hard=True)
    assert [v.op for v in vault.history(story)][-1] == "delete"
    assert vault.history(story[:8])[-1].path is None  # an id prefix works for gone memories too
    with pytest.raises(RevisionNotFound):
        vault.show_at(story, "~0")  # the deleted state has no file
    back = vault.restore(story, "~1")
    assert back.tier == "long_term" and "No sugar." in back.body


def test_history_catches_up_with_git_cli_commits(vault: Vault, story: str) -> None:
    path = vault.get(story).path
    vault.flush()  # what the debounce timer does 0.25 s after the last write
    file = vault.root / path
    file.write_text(file.read_text().replace("No sugar.", "Two sugars."))
    git(vault.root, "commit", "-qam", "edited in vim")
    (vault.root / path.replace("long_term/", "archive/")).parent.mkdir(parents=True, exist_ok=True)
    git(vault.root, "mv", path, path.replace("long_term/", "archive/"))
    git(vault.root, "commit", "-qm", "archived by hand")
    versions = vault.history(story)
    assert [v.subject for v in versions[-2:]] == ["edited in vim", "archived by hand"]
    assert [v.op for v in versions[-2:]] == ["update", "move"]
    assert versions[-1].author.startswith("git user")
    # and gitmem's next write is recorded on top
    vault.update(story, append="Decaf after 15:00.")
    assert vault.history(story)[-1].op == "update"


def test_history_survives_losing_the_catalog_and_rewritten_history(vault: Vault, story: str) -> None:
    expected = [v.commit for v in vault.history(story)]
    vault.close()
    (vault.root / ".git" / "gitmem" / "catalog.sqlite").unlink()
    for suffix in ("-wal", "-shm"):
        (vault.root / ".git" / "gitmem" / f"catalog.sqlite{suffix}").unlink(missing_ok=True)
    with Vault.open(vault.root) as v:
        assert [x.commit for x in v.history(story)] == expected
        git(v.root, "commit", "-q", "--amend", "-m", "rewritten move")
        assert v.history(story)[-1].subject == "rewritten move"
        assert len(v.history(story)) == 5
