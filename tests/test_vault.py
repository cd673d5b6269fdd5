"""Vault writes: one commit per write, files on disk, what git shows a user."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitmem import Vault
from gitmem.errors import Conflict, NotAVault, Protected
from gitmem.memory.markdown import parse_text

from .conftest import FakeClock, assert_clean, git, assert_one_write


def commits(root: Path) -> list[str]:
    return git(root, "log", "--format=%s").splitlines()


def test_init_creates_layout_config_and_one_commit(vault: Vault) -> None:
    root = vault.root
    for tier in ("short_term", "mid_term", "long_term", "archive"):
        assert (root / tier).is_dir()
    assert (root / ".gitmem.yaml").is_file()
    assert ".obsidian/workspace*.json" in (root / ".gitignore").read_text()
    assert commits(root) == ["init: gitmem vault"]
    assert (root / ".git" / "gitmem" / "catalog.sqlite").exists()  # private state inside .git
    vault.close()
    assert_clean(root)


def test_add_writes_file_with_frontmatter_and_one_commit(vault: Vault, clock: FakeClock) -> None:
    memory = vault.add("Maya prefers dark mode", "Dark themes in every editor.\n", type="preference",
                       tier="long_term", tags=["ui", "editor"], importance=4, entities=["VS Code"])
    path = vault.root / memory.path
    assert memory.path == "long_term/maya-prefers-dark-mode.md"     # the flat layout of new vaults
    text = path.read_text()
    parsed = parse_text(text, strict=True)
    assert list(parsed.meta)[:5] == ["id", "title", "type", "tier", "status"]
    assert parsed.meta["created"] == "2026-11-01T09:00:00Z"
    assert parsed.meta["agent"] == "tester"
    assert parsed.meta["tags"] == ["ui", "editor"]
    assert "confidence" not in parsed.meta  # defaults are not written
    assert parsed.body == "Dark themes in every editor.\n"
    assert commits(vault.root)[0] == "add: Maya prefers dark mode"
    body = git(vault.root, "log", "-1", "--format=%B")
    assert f"Memory-Id: {memory.id}" in body and "Op: add" in body and "Agent: tester" in body
    assert git(vault.root, "log", "-1", "--format=%an").strip() == "tester"
    assert git(vault.root, "log", "--grep", f"Memory-Id: {memory.id}", "--format=%h").strip()
    assert memory.commit == git(vault.root, "rev-parse", "HEAD").strip()
    vault.close()
    assert_clean(vault.root)


def test_every_write_is_exactly_one_commit(vault: Vault, clock: FakeClock) -> None:
    m = vault.add("Project Atlas deadline", "Due in March.")
    steps = [
        lambda: vault.update(m.id, append="Moved to April."),
        lambda: vault.update(m.id, replace=("April", "May")),
        lambda: vault.update(m.id, add_tags=["deadline"]),
        lambda: vault.move(m.id, "mid_term"),
        lambda: vault.delete(m.id),
        lambda: vault.restore(m.id, "~1"),
        lambda: vault.delete(m.id, hard=True),
        lambda: vault.restore(m.id, "~1"),
    ]
    for step in steps:
        before = git(vault.root, "rev-parse", "HEAD").strip()
        clock.tick()
        step()
        assert_one_write(vault.root, before)
    vault.close()
    assert_clean(vault.root)


def test_noop_update_makes_no_commit(vault: Vault) -> None:
    m = vault.add("Stable fact", "Water boils at 100 C.", tags=["physics"])
    before = commits(vault.root)
    vault.update(m.id, tags=["physics"])
    assert commits(vault.root) == before


def test_a_write_that_would_change_only_the_time_stamp_makes_no_commit(vault: Vault, clock: FakeClock) -> None:
    m = vault.add("Stable fact", "Water boils at 100 C.\n", tags=["physics"], importance=4)
    rule = vault.add("Keep answers short", "One paragraph at most.\n", type="rule")
    head = vault.head
    for ref, change in ((m.id, {}), (m.id, {"add_tags": ["physics"]}), (m.id, {"tags": ["physics"]}),
                        (m.id, {"remove_tags": ["not-there"]}), (m.id, {"title": "Stable fact"}),
                        (m.id, {"body": "Water boils at 100 C.\n"}), (m.id, {"meta": {"importance": 4}}),
                        (rule.id, {"title": "Keep answers short"})):  # a protected no-op needs no force
        clock.tick()
        same = vault.update(ref, **change)
        assert same.commit is None and same.meta["updated"] == "2026-11-01T09:00:00Z", change
    assert vault.head == head
    from gitmem import Toolbox
    box = Toolbox(vault, "gitmem", agent="bot")
    result = box.call("memory_update", {"ref": m.id, "add_tags": ["physics"]})
    assert "commit" not in result and result["tags"] == ["physics"]
    assert vault.head == head
    clock.tick()
    changed = vault.update(m.id, add_tags=["heat"])
    assert changed.commit and changed.meta["updated"] != "2026-11-01T09:00:00Z" and vault.head != head


def test_update_modes(vault: Vault, clock: FakeClock) -> None:
    m = vault.add("Editor", "Uses VS Code.\n")
    clock.tick()
    m = vault.update(m.id, append="Likes vim keys.")
    assert m.body == "Uses VS Code.\n\nLikes vim keys.\n"
    assert m.meta["updated"] == "2026-11-01T09:01:00Z" and m.meta["created"] == "2026-11-01T09:00:00Z"
    m = vault.update(m.id, replace=("VS Code", "Neovim"))
    assert "Neovim" in m.body
    m = vault.update(m.id, body="Replaced entirely.\n", title="Editor choice")
    assert m.body == "Replaced entirely.\n" and m.title == "Editor choice"
    assert m.path.endswith("/editor.md")  # the file name stays: links keep working
    m = vault.update(m.id, meta={"importance": 5, "summary": "Neovim user"})
    assert m.importance == 5 and m.meta["summary"] == "Neovim user"
    m = vault.update(m.id, meta={"summary": None})
    assert "summary" not in m.meta


def test_move_is_a_tracked_rename(vault: Vault, clock: FakeClock) -> None:
    m = vault.add("Running goal", "Run a half marathon in under 1:50.\n" * 3)
    clock.tick()
    vault.update(m.id, append="Training four times a week.")
    clock.tick()
    moved = vault.move(m.id, "long_term")
    assert moved.path == m.path.replace("short_term/", "long_term/")
    assert moved.tier == "long_term" and not (vault.root / m.path).exists()
    assert commits(vault.root)[0] == "move: Running goal short_term -> long_term"
    follow = git(vault.root, "log", "--follow", "--format=%s", "--", moved.path).splitlines()
    assert follow == ["move: Running goal short_term -> long_term",
                      "rename: move: Running goal short_term -> long_term (the next commit updates the text)",
                      "update: Running goal", "add: Running goal"]
    # the move is a pure rename (100% similar) followed by the metadata change in place
    status = git(vault.root, "show", "--name-status", "--format=", "-M", "HEAD~1").splitlines()
    assert [line.split("\t")[0] for line in status] == ["R100"]
    status = git(vault.root, "show", "--name-status", "--format=", "-M", "HEAD").splitlines()
    assert sorted(line.split("\t")[0] for line in status) == ["M", "M"]   # MEMORY.md + the moved file
    assert "M\tMEMORY.md" in status
    assert (vault.root / m.path).parent.is_dir()  # the tier folder stays (emptied hash folders go: test_layout)


def test_soft_and_hard_delete(vault: Vault) -> None:
    m = vault.add("Old phone number", "070-000 00 00")
    soft = vault.delete(m.id)
    assert soft.status == "deleted" and soft.tier == "archive" and soft.meta["archived_from"] == "short_term"
    assert vault.list() == [] and [x.id for x in vault.list(status="deleted")] == [m.id]
    hard = vault.delete(m.id, hard=True)
    assert not (vault.root / hard.path).exists()
    assert commits(vault.root)[0] == "delete: Old phone number (hard)"
    back = vault.restore(m.id, "~2")  # the version before the soft delete
    assert back.tier == "short_term" and back.status == "active" and back.body == "070-000 00 00"


def test_protected_types_need_force_and_force_is_recorded(vault: Vault) -> None:
    rule = vault.add("Never send client data to third parties", "Hard rule.", type="rule")
    goal = vault.add("Learn Rust", "By June.", type="goal")
    head = git(vault.root, "rev-parse", "HEAD")
    for call in (lambda: vault.delete(rule.id), lambda: vault.delete(rule.id, hard=True),
                 lambda: vault.update(rule.id, body="changed"), lambda: vault.move(goal.id, "archive"),
                 lambda: vault.update(goal.id, replace=("June", "July")),
                 lambda: vault.update(goal.id, meta={"type": "memory"})):
        with pytest.raises(Protected) as info:
            call()
        assert info.value.code == "protected" and info.value.exit_code == 4
    assert git(vault.root, "rev-parse", "HEAD") == head
    vault.update(goal.id, add_tags=["learning"])  # tags are not an overwrite
    vault.update(rule.id, body="Still a hard rule.", force=True)
    last = git(vault.root, "log", "-1", "--format=%B")
    assert last.startswith("update: Never send client data to third parties (forced)")
    assert "Forced: true" in last


def test_same_title_gets_distinct_file_names_case_insensitively(vault: Vault) -> None:
    a = vault.add("Dark Mode", "a")
    b = vault.add("dark mode!", "b")
    c = vault.add("DARK-MODE", "c")
    names = [Path(m.path).name for m in (a, b, c)]
    assert names == ["dark-mode.md", "dark-mode-2.md", "dark-mode-3.md"]
    assert len({n.casefold() for n in names}) == 3


def test_person_written_file_is_read_without_rewrite(vault: Vault) -> None:
    target = vault.root / "long_term" / "notes" / "Kitchen Renovation.md"
    target.parent.mkdir(parents=True)
    target.write_text("# Kitchen renovation plan\n\nTiles ordered.\n")
    before = target.read_bytes()
    memory = vault.get("Kitchen Renovation")
    assert memory.title == "Kitchen renovation plan" and memory.tier == "long_term"
    assert memory.type == "memory" and memory.status == "active"
    assert memory.id == vault.get(memory.id).id  # derived id is stable
    assert [m.path for m in vault.list()] == ["long_term/notes/Kitchen Renovation.md"]
    assert target.read_bytes() == before
    # Writing through gitmem keeps the location and adds the frontmatter.
    updated = vault.update(memory.id, append="Cabinets next week.")
    assert updated.path == "long_term/notes/Kitchen Renovation.md"
    assert parse_text(target.read_text(), strict=True).meta["id"] == memory.id


def test_unknown_keys_and_comments_survive_updates(vault: Vault) -> None:
    target = vault.root / "mid_term" / "trip.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("---\ntitle: Trip to Oslo\nmood: excited   # my own field\n"
                      "checklist:\n- passport\n- charger\ntags: [travel]\n---\nLeaving Friday.\n")
    vault.update("trip", append="Train at 07:10.")
    text = target.read_text()
    assert "mood: excited   # my own field\n" in text
    assert "checklist:\n- passport\n- charger\n" in text
    meta = parse_text(text, strict=True).meta
    assert list(meta)[-2:] == ["mood", "checklist"]


def test_get_by_every_kind_of_reference(vault: Vault) -> None:
    m = vault.add("Cat vaccination", "Kanel needs a booster.")
    for ref in (m.id, m.id[:8], m.path, "cat-vaccination", "cat-vaccination.md", "cat vaccination"):
        assert vault.get(ref).id == m.id


def test_list_filters(vault: Vault) -> None:
    vault.add("A goal", "g", type="goal", tier="long_term", tags=["x"], scope="user")
    vault.add("A fact", "f", type="fact", tags=["x", "y"], agent="other")
    vault.add("Old note", "o", tier="mid_term")
    assert {m.title for m in vault.list(tier="long_term")} == {"A goal"}
    assert {m.title for m in vault.list(type=["goal", "fact"])} == {"A goal", "A fact"}
    assert {m.title for m in vault.list(tags=["x", "y"])} == {"A fact"}
    assert {m.title for m in vault.list(scope="user")} == {"A goal"}
    assert {m.title for m in vault.list(agent="other")} == {"A fact"}
    assert len(vault.list(limit=2)) == 2


def test_two_vault_objects_on_one_repo_do_not_lose_writes(tmp_path: Path) -> None:
    root = tmp_path / "v"
    Vault.init(root).close()
    a, b = Vault.open(root, author="a"), Vault.open(root, author="b")
    ids = []
    for i in range(5):
        ids.append(a.add(f"from a {i}", "x").id)
        ids.append(b.add(f"from b {i}", "y").id)
    a.close()
    b.close()
    with Vault.open(root) as v:
        assert {m.id for m in v.list()} == set(ids)
    assert len(commits(root)) == 11
    assert_clean(root)


def test_threads_share_one_vault(vault: Vault) -> None:
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda i: vault.add(f"thread note {i}", str(i)).id, range(20)))
    assert {m.id for m in vault.list()} == set(made)
    assert len(commits(vault.root)) == 21
    vault.close()
    assert_clean(vault.root)


def test_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    import subprocess
    import sys
    root = tmp_path / "v"
    Vault.init(root).close()
    script = ("import sys\nfrom gitmem import Vault\n"
              "with Vault.open(sys.argv[1], author=f'p{sys.argv[2]}') as v:\n"
              "    for i in range(8):\n        v.add(f'proc {sys.argv[2]} note {i}', 'x')\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(root), str(n)]) for n in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    with Vault.open(root) as v:
        titles = {m.title for m in v.list()}
    assert titles == {f"proc {n} note {i}" for n in range(4) for i in range(8)}
    assert len(commits(root)) == 33
    assert_clean(root)


def test_commit_failure_restores_working_tree(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    m = vault.add("Fragile", "original\n")
    before = (vault.root / m.path).read_bytes()
    head = git(vault.root, "rev-parse", "HEAD")

    def refuse(*args: object, **kwargs: object) -> bool:
        return False  # as if another git process moved the branch

    monkeypatch.setattr("gitmem.store.git.move_branch", refuse)
    with pytest.raises(Conflict):
        vault.update(m.id, body="new\n")
    with pytest.raises(Conflict):
        vault.move(m.id, "long_term")
    assert (vault.root / m.path).read_bytes() == before
    assert not (vault.root / m.path.replace("short_term", "long_term")).exists()
    assert git(vault.root, "rev-parse", "HEAD") == head


def test_git_index_matches_head_after_close_and_after_a_crash(tmp_path: Path) -> None:
    import subprocess
    import sys
    root = tmp_path / "v"
    Vault.init(root).close()
    # A writer that dies without closing (os._exit skips atexit and the flush timer).
    script = ("import os, sys\nfrom gitmem import Vault\nv = Vault.open(sys.argv[1])\n"
              "v.add('written then crashed', 'x')\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", script, str(root)], check=True)
    assert git(root, "status", "--porcelain") == ""  # .git/index followed before the write returned
    Vault.open(root).close()
    assert_clean(root)


def test_a_vault_is_a_repository_with_gitmem_settings(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    git(plain, "init", "-q")
    with pytest.raises(NotAVault) as refused:
        Vault.open(plain)
    assert "not a gitmem vault" in refused.value.message and "gitmem init" in (refused.value.hint or "")
    assert not (plain / ".git" / "gitmem").exists()
    # The settings file deleted from disk only: still a vault (defaults apply) ...
    Vault.init(tmp_path / "v").close()
    (tmp_path / "v" / ".gitmem.yaml").unlink()
    with Vault.open(tmp_path / "v") as vault:
        assert vault.add("Still a vault", "yes").commit
    # ... and once the deletion is committed as well, it is no longer one: init makes it one again.
    git(tmp_path / "v", "commit", "-q", "-a", "-m", "drop the settings")
    with pytest.raises(NotAVault):
        Vault.open(tmp_path / "v" / "long_term")
    Vault.init(tmp_path / "v").close()
    with Vault.open(tmp_path / "v") as vault:
        assert [m.title for m in vault.list()] == ["Still a vault"]
