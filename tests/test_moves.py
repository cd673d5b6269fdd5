"""Moves never lose history, and a memory being moved is never reported missing.

``git log --follow`` on a memory's final path must list every earlier version,
whatever sequence of moves it went through (gitmem's ``mv``, ``archive``,
``unarchive``, ``compress``, ``merge``, ``restore``, a person's rename), also for
one-line memories, whose frontmatter changes would otherwise make git see a
delete and an add.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gitmem import NotFound, Vault

from .conftest import FakeClock, RENAME, assert_clean, git


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
