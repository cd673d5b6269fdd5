"""A vault made from 10,000 notes with ``gitmem init --from``, as a user makes it: the
import ends without error, git sees nothing pending, and ``gitmem doctor`` is clean."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import git

WORDS = ("plan review deploy coffee garden invoice migration runner budget standup ticket "
         "release sprint backlog recipe holiday meeting roadmap metrics dashboard").split()


@pytest.mark.slow
def test_init_from_ten_thousand_notes_leaves_git_and_doctor_clean(tmp_path: Path) -> None:
    rng = random.Random(10_000)
    notes = tmp_path / "notes"
    for i in range(10_000):
        # 1,024 folders two deep, as a big Obsidian vault has (and as gitmem's own
        # hash folders spread memories): no per-folder cache may be relied on.
        folder = notes / f"area{i % 32}" / f"topic{i // 32 % 32}"
        folder.mkdir(parents=True, exist_ok=True)
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 120)))
        (folder / f"note-{i}.md").write_text(
            f"---\ntitle: Note {i} {rng.choice(WORDS)}\ntags: [{rng.choice(WORDS)}]\n---\n{words}\n")
    vault = tmp_path / "vault"

    def gitmem(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gitmem", *args], capture_output=True, text=True,
                              timeout=900, stdin=subprocess.DEVNULL)

    made = gitmem("init", "--from", str(notes), str(vault), "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["memories"] == 10_000
    assert git(vault, "status", "--porcelain") == ""
    # + .gitmem.yaml, .gitignore, .gitattributes, MEMORY.md and the empty tiers' .gitkeep (3)
    assert len(git(vault, "ls-files").splitlines()) == 10_000 + 7
    doctor = gitmem("-C", str(vault), "doctor", "--json")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert json.loads(doctor.stdout)["ok"] is True
    found = gitmem("-C", str(vault), "search", "roadmap", "--json")
    assert found.returncode == 0 and json.loads(found.stdout)["total"] > 1000
    assert git(vault, "status", "--porcelain") == ""
