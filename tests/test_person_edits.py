"""A person's save is never lost to an agent's write, nor attributed to the agent.

Saves are made as editors make them (a temp file renamed over the note, or an
in-place write), before an agent's write, while it is being computed, and in
the last moments before the file is replaced.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from gitmem import Conflict, Vault
from gitmem.store.git import GitStore
from gitmem.write.pipeline import WritePipeline

from .conftest import assert_clean, git


def save(path: Path, text: str) -> None:
    """Save as Obsidian and most editors do: write a temp file, rename it over the note."""
    tmp = path.with_name(f".{path.name}.swp-{threading.get_ident()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def log(root: Path, n: int = 10) -> list[str]:
    return git(root, "log", f"-{n}", "--format=%an|%s").splitlines()


@pytest.fixture
def note(vault: Vault) -> tuple[Vault, str, Path]:
    m = vault.add("Standup", "The standup is at 9:30.\n\nBring the notes.\n")
    return vault, m.id, vault.root / m.path


def during_write(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None], when: str = "render") -> None:
    """Run ``action`` once, at a point inside the next agent write."""
    done: list[bool] = []
    if when == "render":
        original: Any = WritePipeline.render

        def hooked(self: WritePipeline, *args: Any, **kwargs: Any) -> bytes:
            data = original(self, *args, **kwargs)
            if not done:
                done.append(True)
                action()
            return data
        monkeypatch.setattr(WritePipeline, "render", hooked)
    else:  # right before the working tree is written (after every earlier check)
        original_apply: Any = GitStore._apply_to_worktree

        def hooked_apply(self: GitStore, *args: Any, **kwargs: Any) -> Any:
            if not done:
                done.append(True)
                action()
            return original_apply(self, *args, **kwargs)
        monkeypatch.setattr(GitStore, "_apply_to_worktree", hooked_apply)


def test_an_unsaved_edit_is_committed_as_the_persons_before_the_agents(note: tuple[Vault, str, Path]) -> None:
    vault, mid, path = note
    save(path, path.read_text().replace("9:30", "9:45"))
    vault.update(mid, append="Agenda first.")
    assert log(vault.root, 2) == ["tester|update: Standup", "git user|edit: Standup (outside edit)"]
    person = git(vault.root, "show", "HEAD~1", "--format=", "--", vault.get(mid).path)
    agent = git(vault.root, "show", "HEAD", "--format=", "--", vault.get(mid).path)
    assert "+The standup is at 9:45." in person and "Agenda first" not in person
    assert "Agenda first" in agent and "9:45" not in "".join(l for l in agent.splitlines() if l.startswith("+"))
    text = path.read_text()
    assert "9:45" in text and text.endswith("Agenda first.\n")
    vault.close()
    assert_clean(vault.root)


def test_a_save_while_the_agent_writes_is_merged_with_its_change(note: tuple[Vault, str, Path],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    vault, mid, path = note
    during_write(monkeypatch, lambda: save(path, path.read_text().replace("9:30", "10:00")))
    vault.update(mid, append="Agenda first.")
    text = path.read_text()
    assert "The standup is at 10:00." in text and text.endswith("Agenda first.\n")   # both kept
    assert log(vault.root, 2) == ["tester|update: Standup", "git user|edit: Standup (outside edit)"]
    assert "10:00" in git(vault.root, "show", "HEAD~1:" + vault.get(mid).path)
    vault.close()
    assert_clean(vault.root)


def test_a_save_in_the_last_moment_is_not_overwritten(note: tuple[Vault, str, Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    vault, mid, path = note
    during_write(monkeypatch, lambda: save(path, path.read_text().replace("9:30", "11:00")), when="worktree")
    vault.update(mid, append="Agenda first.")
    text = path.read_text()
    assert "The standup is at 11:00." in text and text.endswith("Agenda first.\n")
    assert log(vault.root, 2) == ["tester|update: Standup", "git user|edit: Standup (outside edit)"]
    vault.close()
    assert_clean(vault.root)   # the abandoned attempt left no dangling objects


def test_changes_that_cannot_be_merged_are_refused_and_the_persons_text_kept(
        note: tuple[Vault, str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    vault, mid, path = note
    mine = path.read_text().replace("Bring the notes.", "Bring the slides.")
    during_write(monkeypatch, lambda: save(path, mine))
    with pytest.raises(Conflict, match="cannot be merged"):
        vault.update(mid, replace=("Bring the notes.", "Bring nothing."))
    assert path.read_text() == mine
    assert log(vault.root, 1) == ["git user|edit: Standup (outside edit)"]
    assert "Bring nothing" not in git(vault.root, "log", "-p", "--all")
    vault.close()
    assert_clean(vault.root)


def test_a_move_keeps_a_concurrent_save(note: tuple[Vault, str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    vault, mid, path = note
    during_write(monkeypatch, lambda: save(path, path.read_text().replace("9:30", "8:15")))
    moved = vault.move(mid, "long_term")
    assert "8:15" in (vault.root / moved.path).read_text() and not path.exists()
    follow = git(vault.root, "log", "--follow", "--format=%an|%s", "--", moved.path).splitlines()
    assert follow[0].startswith("tester|move: Standup") and "git user|edit: Standup (outside edit)" in follow
    vault.close()
    assert_clean(vault.root)


def test_a_file_tool_write_keeps_a_persons_unsaved_edit(vault: Vault) -> None:
    from gitmem import Toolbox
    files = Toolbox(vault, "files", agent="bot")
    files.call("memory_write", {"path": "todo.md", "content": "- milk\n"})
    save(vault.root / "long_term" / "todo.md", "- milk\n- eggs\n")
    files.call("memory_write", {"path": "todo.md", "content": "- milk\n- bread\n"})
    assert log(vault.root, 2) == ["bot|write: long_term/todo.md", "git user|edit: todo (outside edit)"]
    assert "- eggs" in git(vault.root, "show", "HEAD~1:long_term/todo.md")


@pytest.mark.slow
def test_saves_racing_agent_writes_are_never_lost_or_misattributed(note: tuple[Vault, str, Path]) -> None:
    """A person saving in a loop while an agent updates the same note: every agent
    commit changes only the agent's lines, and the person's last save survives."""
    vault, mid, path = note
    stop = threading.Event()
    saves: list[str] = []

    def person() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                text = path.read_text()
            except FileNotFoundError:
                continue
            marker = f"The standup is at person-{n}."   # the person edits the first line of the body
            lines = [marker if line.startswith("The standup is at") else line for line in text.splitlines()]
            save(path, "\n".join(lines) + "\n")
            saves.append(marker)
            # A fast typist with autosave: 20 saves a second, and a pause of a second
            # after every tenth (on a loaded machine a write can take longer than 50 ms:
            # each one racing a save is refused, and the pauses let some through).
            stop.wait(1.0 if n % 10 == 0 else 0.05)

    worker = threading.Thread(target=person)
    worker.start()
    conflicts = 0
    try:
        for i in range(40):
            try:
                vault.update(mid, append=f"agent line {i}")
            except Conflict:
                conflicts += 1
    finally:
        stop.set()
        worker.join()
    vault.commit_outside_edits()
    rel = vault.get(mid).path
    for line in git(vault.root, "log", "--format=%H|%an", "--", rel).splitlines():
        sha, author = line.split("|")
        added = [l for l in git(vault.root, "show", sha, "--format=", "--", rel).splitlines()
                 if l.startswith("+") and not l.startswith("+++")]
        if author == "tester":   # the agent's commits add only the agent's lines (and metadata)
            assert not any("person-" in l for l in added), (sha, added)
    assert saves and saves[-1] in git(vault.root, "show", f"HEAD:{rel}")
    # Writes go through (none on an idle machine meets a save in its last moments; on a
    # loaded one a write can take longer than the 50 ms between saves, and each such write
    # is refused rather than overwrite the save, which is the point of this test).
    assert conflicts < 40, "no agent write went through, not even in the person's pauses"
    vault.close()
    assert_clean(vault.root)


# ------------------------------------------------------------- whose name
def person_commit(root: Path) -> str:
    """The author of the commit gitmem makes for a person's save of a new note."""
    save(root / "long_term" / "mine.md", "---\ntitle: Mine\n---\nWritten by hand.\n")
    with Vault.open(root) as vault:
        vault.commit_outside_edits()
    return git(root, "log", "-1", "--format=%an <%ae>").strip()


@pytest.mark.parametrize("case", ["git env", "git config", "gitmem config", "nobody"])
def test_a_persons_edits_carry_their_name(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "vault"
    Vault.init(root, author="tester").close()
    if case != "git env":
        monkeypatch.delenv("GIT_AUTHOR_NAME")
        monkeypatch.delenv("GIT_AUTHOR_EMAIL")
    if case == "git config":
        git(root, "config", "user.name", "Maya Lin")
        git(root, "config", "user.email", "maya@example.com")
    if case == "gitmem config":   # user: in .gitmem.yaml names the person for everyone's clones
        git(root, "config", "user.name", "Maya Lin")
        git(root, "config", "user.email", "maya@example.com")
        text = (root / ".gitmem.yaml").read_text().replace("name: vault user", "name: Household")
        (root / ".gitmem.yaml").write_text(text)
        git(root, "commit", "-q", "-am", "settings")
    expected = {"git env": "git user <git@example.com>", "git config": "Maya Lin <maya@example.com>",
                "gitmem config": "Household <user@localhost>", "nobody": "vault user <user@localhost>"}[case]
    assert person_commit(root) == expected


def test_the_command_line_writes_as_the_person_and_agents_keep_their_names(tmp_path: Path) -> None:
    import subprocess
    import sys
    root = tmp_path / "vault"
    Vault.init(root, author="tester").close()
    env = {**os.environ, "GIT_AUTHOR_NAME": "Maya Lin", "GIT_AUTHOR_EMAIL": "maya@example.com"}
    env.pop("GITMEM_AUTHOR", None)

    def cli(*args: str) -> None:
        done = subprocess.run([sys.executable, "-m", "gitmem", "-C", str(root), *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    cli("add", "By hand", "Typed in a shell.")
    assert git(root, "log", "-1", "--format=%an <%ae>").strip() == "Maya Lin <maya@example.com>"
    cli("--author", "planner-agent", "add", "By an agent", "Through the command line, named.")
    assert git(root, "log", "-1", "--format=%an").strip() == "planner-agent"
    with Vault.open(root) as vault:   # the Python API is an agent's: the vault's author
        vault.add("By the API", "No author given.")
    assert git(root, "log", "-1", "--format=%an").strip() == "gitmem"
