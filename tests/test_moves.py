"""Moves never lose history, and a memory being moved is never reported missing.

``git log --follow`` on a memory's final path must list every earlier version,
whatever sequence of moves it went through (gitmem's ``mv``, ``archive``,
``unarchive``, ``compress``, ``merge``, ``restore``, a person's rename), also for
one-line memories, whose frontmatter changes would otherwise make git see a
delete and an add.

The same holds for a person's moves (a folder moved to another tier, renamed,
half committed with git, deleted) while ``gitmem watch`` and ``gitmem mcp`` follow
the vault: HEAD holds each memory at one path, as renames, and ``git status`` is
clean once they settle.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from gitmem import NotFound, Vault

from .conftest import REPO, FakeClock, RENAME, assert_clean, git, mcp_params


def followed(root: Path, path: str) -> list[str]:
    """Subjects ``git log --follow`` lists for ``path`` (newest first), rename halves left out."""
    return [s for s in git(root, "log", "--follow", "--format=%s", "--", path).splitlines()
            if not s.startswith(RENAME)]


def test_every_move_keeps_follow_for_one_line_memories(vault: Vault, clock: FakeClock) -> None:
    m = vault.add("Tea", "Green.")
    steps = [lambda: vault.move(m.id, "mid_term"), lambda: vault.update(m.id, body="Oolong."),
             lambda: vault.move(m.id, "long_term"), lambda: vault.archive([m.id]),
             lambda: vault.unarchive(m.id), lambda: vault.delete(m.id),
             lambda: vault.restore(m.id, "~1")]
    for step in steps:
        clock.tick()
        step()
    final = vault.get(m.id).path
    history = [v.subject for v in reversed(vault.history(m.id))]
    assert followed(vault.root, final) == history
    assert len(history) == 8
    vault.close()
    assert_clean(vault.root)


def test_compress_and_merge_sources_keep_follow(vault: Vault, clock: FakeClock) -> None:
    a = vault.add("Loops", "for.")
    b = vault.add("Vars", "let.")
    c = vault.add("Traits", "impl.", tier="mid_term")
    d = vault.add("Enums", "match.", tier="mid_term")
    clock.tick()
    vault.compress("short_term", "Basics.", "Week 1", [a.id, b.id])
    vault.merge([c.id, d.id], "Traits and enums.")
    for memory in (a, b, c, d):
        now = vault.get(memory.id)
        subjects = followed(vault.root, now.path)
        # (git's --follow may list more for tiny look-alike files; every version must be there)
        assert subjects[0].startswith(("compress:", "merge:")) and f"add: {memory.title}" in subjects, subjects
    vault.close()
    assert_clean(vault.root)


def test_a_note_without_frontmatter_keeps_follow_through_renames_and_moves(vault: Vault, clock: FakeClock) -> None:
    note = vault.root / "short_term" / "Groceries.md"
    note.write_text("milk\n")
    vault.commit_outside_edits()
    os.replace(note, vault.root / "short_term" / "Shopping.md")   # renamed in the editor
    vault.commit_outside_edits()
    clock.tick()
    moved = vault.move("Shopping.md", "long_term")               # gitmem adds frontmatter as it moves
    subjects = followed(vault.root, moved.path)
    assert len(subjects) == 3 and subjects[-1].startswith("edit: ")
    assert [v.op for v in vault.history(moved.id)][-1] == "move"
    vault.close()
    assert_clean(vault.root)


MOVER = textwrap.dedent("""
    import sys
    from gitmem import Vault
    root, ref, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with Vault.open(root, author="mover") as v:
        for i in range(rounds):
            v.move(ref, "mid_term" if i % 2 == 0 else "short_term")
""")


@pytest.mark.slow
def test_reads_while_another_process_moves_never_miss(vault: Vault) -> None:
    m = vault.add("Moving target", "Read me while I move.")
    vault.flush()
    mover = subprocess.Popen([sys.executable, "-c", MOVER, str(vault.root), m.id, "40"],
                             stderr=subprocess.PIPE, text=True)
    misses = reads = 0
    while mover.poll() is None:
        try:
            assert vault.get(m.id).title == "Moving target"
        except NotFound:
            misses += 1
        reads += 1
    assert mover.returncode == 0, mover.stderr.read()
    mover.stderr.close()
    assert reads > 50 and misses == 0
    vault.close()
    assert_clean(vault.root)


# ------------------------------------------------- folders a person moves
def project_note(title: str, memory_id: str | None = None) -> str:
    """A person's note: one with an ``id:`` in its frontmatter, one without (its id is
    inherited across renames)."""
    head = f"id: {memory_id}\n" if memory_id else ""
    return f"---\n{head}title: {title}\ntype: fact\n---\n{title} notes, kept by hand.\n"


def make_project(root: Path, folder: str) -> set[str]:
    base = root / folder
    base.mkdir(parents=True)
    (base / "alpha.md").write_text(project_note("Alpha", "0b5e3c1e-5b8a-4d0e-9c57-1c2f6f0a9e11"))
    (base / "beta.md").write_text(project_note("Beta"))
    return {f"{folder}/alpha.md", f"{folder}/beta.md"}


def head_memories(root: Path) -> set[str]:
    """The memory files HEAD holds (the seed's folders aside)."""
    return {p for p in git(root, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
            if p.endswith(".md") and p != "MEMORY.md" and "/seed" not in p}


def settle(root: Path, expect: set[str], what: str, timeout: float = 30.0) -> None:
    """Wait until HEAD holds exactly ``expect`` and ``git status`` is clean."""
    deadline = time.monotonic() + timeout
    while True:
        files, status = head_memories(root), git(root, "status", "--porcelain")
        if files == expect and status == "":
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: after {timeout}s HEAD holds {sorted(files)} "
                                 f"(expected {sorted(expect)}); git status:\n{status}")
        time.sleep(0.05)


def move_history(root: Path, new: str, old: str) -> None:
    """``git log --follow`` on ``new`` reaches the commit that added ``old``."""
    names = git(root, "log", "--follow", "--name-only", "--format=", "--", new).split()
    assert old in names, names


def person_git(root: Path, *args: str) -> None:
    """A person's git command: retried while a gitmem write holds ``.git/index.lock``;
    nothing to commit (the followers were first) is fine."""
    deadline = time.monotonic() + 10
    while True:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        if done.returncode == 0 or "nothing to commit" in done.stdout + done.stderr:
            return
        assert "index.lock" in done.stderr and time.monotonic() < deadline, done.stdout + done.stderr
        time.sleep(0.05)


def folder_moves(root: Path, after: Callable[[], None] = lambda: None) -> None:
    """A person's folder moves, renames and deletes, each waited for until the followers
    settle: HEAD holds each memory at one path, as renames, and git status is clean."""
    first = make_project(root, "mid_term/Projects")
    settle(root, first, "the new notes committed")
    after()
    os.rename(root / "mid_term/Projects", root / "long_term/Projects")
    moved = {p.replace("mid_term/", "long_term/") for p in first}
    settle(root, moved, "a folder moved to another tier")
    for path in sorted(moved):
        move_history(root, path, path.replace("long_term/", "mid_term/"))

    os.rename(root / "long_term/Projects", root / "long_term/Work")   # renamed within its tier
    renamed = {p.replace("/Projects/", "/Work/") for p in moved}
    settle(root, renamed, "a folder renamed")
    move_history(root, "long_term/Work/alpha.md", "mid_term/Projects/alpha.md")

    # The person commits the new side of a move themselves (usually before the followers do).
    os.rename(root / "long_term/Work", root / "short_term/Work")
    person_git(root, "add", "short_term/Work")
    person_git(root, "commit", "-q", "-m", "person: moved Work")
    back = {p.replace("long_term/", "short_term/") for p in renamed}
    settle(root, back, "a move half committed with git")

    shutil.rmtree(root / "short_term/Work")
    settle(root, set(), "a folder deleted")


@pytest.mark.slow
@pytest.mark.parametrize("server", [True, False], ids=["and gitmem mcp", "alone"])
def test_folder_moves_with_gitmem_watch_running(vault: Vault, tmp_path: Path, server: bool) -> None:
    if server:
        mcp = pytest.importorskip("mcp", reason="the MCP SDK is an optional extra")
        anyio = pytest.importorskip("anyio")
    root = vault.root
    vault.add("Seed", "Keeps the index non-empty.")
    vault.close()
    log = tmp_path / "watch.log"
    # `gitmem watch` is the slower of the two followers here, so the server's follower
    # indexes each move first: the watcher's own refresh then finds nothing changed.
    with open(log, "wb") as err:
        watch = subprocess.Popen([sys.executable, "-m", "gitmem", "--vault", str(root), "watch",
                                  "--debounce", "1", "--commit-delay", "0.5"],
                                 cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
    try:
        async def session() -> None:
            async with mcp.Client(mcp_params(root, "gitmem", "mover-test")) as client:
                result = await client.call_tool("memory_search", {"query": "seed"})
                assert not result.is_error, result.content
                await anyio.to_thread.run_sync(folder_moves, root)
        deadline = time.monotonic() + 20
        while b"watching " not in log.read_bytes():
            assert watch.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        if server:
            anyio.run(session)
        else:
            folder_moves(root)
    finally:
        watch.terminate()
        try:
            code = watch.wait(timeout=30)
        except subprocess.TimeoutExpired:
            watch.kill()
            watch.wait()
            raise
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text(), log.read_text()
    assert_clean(root)


@pytest.mark.slow
def test_folder_moves_with_a_committing_server_alone(vault: Vault) -> None:
    mcp = pytest.importorskip("mcp", reason="the MCP SDK is an optional extra")
    anyio = pytest.importorskip("anyio")
    root = vault.root
    vault.add("Seed", "Keeps the index non-empty.")
    vault.close()
    config = root / ".gitmem.yaml"
    config.write_text(config.read_text() + "auto_commit: true\n")
    git(root, "commit", "-q", "-am", "turn on auto_commit")

    async def session() -> None:
        async with mcp.Client(mcp_params(root, "gitmem", "mover-test")) as client:
            assert not (await client.call_tool("memory_search", {"query": "seed"})).is_error
            await anyio.to_thread.run_sync(folder_moves, root)
    anyio.run(session)
    assert_clean(root)


def test_a_commit_of_one_side_of_a_move_takes_the_other(vault: Vault) -> None:
    root = vault.root
    first = make_project(root, "mid_term/Projects")
    vault.commit_outside_edits(sorted(first))
    os.rename(root / "mid_term/Projects", root / "long_term/Projects")
    alpha = root / "long_term/Projects/alpha.md"
    alpha.write_text(alpha.read_text().replace("kept by hand", "rewritten entirely by the person"))
    # Another process has indexed the move already (the catalog knows the new paths).
    vault.refresh()
    # Only the new side is named: the memory with an id is committed as a rename,
    # a pure one first since its text changed too.
    vault.commit_outside_edits(["long_term/Projects/alpha.md"])
    assert "mid_term/Projects/alpha.md" not in head_memories(root)
    assert git(root, "log", "-1", "--format=%s", "HEAD~1").startswith(RENAME)
    move_history(root, "long_term/Projects/alpha.md", "mid_term/Projects/alpha.md")
    # A folder names every file HEAD holds under it.
    vault.commit_outside_edits(["mid_term/Projects", "long_term/Projects"])
    assert head_memories(root) == {"long_term/Projects/alpha.md", "long_term/Projects/beta.md"}
    move_history(root, "long_term/Projects/beta.md", "mid_term/Projects/beta.md")
    vault.close()
    assert_clean(root)


def test_an_agent_write_to_a_moved_note_commits_the_whole_move_first(vault: Vault) -> None:
    root = vault.root
    make_project(root, "mid_term/Projects")
    vault.commit_outside_edits()
    os.rename(root / "mid_term/Projects", root / "long_term/Projects")
    vault.refresh()
    vault.update("0b5e3c1e-5b8a-4d0e-9c57-1c2f6f0a9e11", body="Updated by an agent.")
    files = head_memories(root)
    assert "long_term/Projects/alpha.md" in files and "mid_term/Projects/alpha.md" not in files
    move_history(root, "long_term/Projects/alpha.md", "mid_term/Projects/alpha.md")
    vault.commit_outside_edits()
    assert head_memories(root) == {"long_term/Projects/alpha.md", "long_term/Projects/beta.md"}
    vault.close()
    assert_clean(root)
