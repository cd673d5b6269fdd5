"""``gitmem init --adopt``: a person's Obsidian-style folder becomes a vault in place.

A generated vault (topic folders, daily notes, notes at the root, attachments,
``.obsidian/``, a ``.gitignore`` of the person's) is adopted through the real CLI;
then every note is checked byte for byte (and by inode and mtime: not rewritten),
searched, and followed in git; the watcher and a person's edits keep working on notes
outside the tier folders."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitmem import Vault
from gitmem.outside.watcher import Watcher

from .conftest import git

WORDS = ("kettle", "harbour", "lantern", "juniper", "meadow", "quartz", "saffron", "tundra", "violet", "walrus")


def cli(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "gitmem", *args], capture_output=True, text=True,
                            timeout=120, check=False)
    assert (result.returncode == 0) == ok, result.stdout + result.stderr
    return result


def obsidian_folder(root: Path, notes: int = 40) -> dict[str, str]:
    """An Obsidian-style folder; returns {note path: its unique word}."""
    rng = random.Random(5)
    words: dict[str, str] = {}
    for i in range(notes):
        kind = i % 4
        if kind == 0:
            rel = f"Daily/2026-11-{1 + i % 28:02d}.md"
        elif kind == 1:
            rel = f"Projects/{rng.choice(['Kegs', 'Garden', 'Trip'])}/Note {i}.md"
        elif kind == 2:
            rel = f"Areas/Health/Topic {i}.md"
        else:
            rel = f"Inbox {i}.md"
        word = f"{rng.choice(WORDS)}{i}"
        text = (f"---\ntags: [{rng.choice(WORDS)}]\n---\n" if i % 3 == 0 else "") + \
            f"# Note {i}\n\nAbout {word}, see [[Inbox 3]].\n"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            continue
        path.write_text(text, encoding="utf-8")
        words[rel] = word
    (root / "attachments").mkdir()
    (root / "attachments" / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(200)))
    (root / "Projects" / "plan.pdf").write_bytes(b"%PDF-1.4 not a note")
    (root / ".obsidian").mkdir()
    (root / ".obsidian" / "app.json").write_text('{"vimMode": true}')
    (root / ".obsidian" / "Hidden note.md").write_text("not a note of the vault\n")
    (root / ".gitignore").write_text("private/\n")
    return words


def fingerprint(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file outside .git: (bytes, inode, mtime)."""
    out = {}
    for path in root.rglob("*"):
        if path.is_file() and ".git" not in path.relative_to(root).parts:
            st = path.stat()
            out[path.relative_to(root).as_posix()] = (path.read_bytes(), st.st_ino, st.st_mtime_ns)
    return out


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
    return value


def test_adopting_keeps_every_note_and_makes_each_one_searchable(tmp_path: Path) -> None:
    root = tmp_path / "Obsidian"
    words = obsidian_folder(root)
    before = fingerprint(root)
    out = json.loads(cli("init", "--adopt", str(root), "--json").stdout)
    assert out["adopted"]["imported"] == len(words) == out["memories"]
    assert out["adopted"]["not_notes_left_alone"] == 2
    assert out["adopted"]["hidden_folders_left_alone"] == [".obsidian/"]
    after = fingerprint(root)
    assert {rel: after[rel] for rel in before} == before          # nothing moved, rewritten or touched
    added = sorted(set(after) - set(before))
    assert added == [".gitattributes", ".gitmem.yaml", "MEMORY.md", "archive/.gitkeep",
                     "long_term/.gitkeep", "mid_term/.gitkeep", "short_term/.gitkeep"]
    # History starts here: one commit holding every note as it was.
    assert git(root, "rev-list", "--count", "HEAD").strip() == "1"
    tracked = set(git(root, "ls-files").split("\n")) - {""}
    assert set(words) <= tracked and ".gitignore" in tracked
    assert not {"attachments/photo.png", "Projects/plan.pdf", ".obsidian/app.json"} & tracked
    for rel in list(words)[:5]:
        assert git(root, "log", "--follow", "--format=%s", "--", rel).strip().startswith("init:")
    status = git(root, "status", "--porcelain").splitlines()
    assert sorted(status) == ["?? .obsidian/", "?? Projects/plan.pdf", "?? attachments/"]
    git(root, "fsck", "--strict")
    with Vault.open(root) as vault:
        for rel, word in words.items():
            assert [h.path for h in vault.search(word).hits][:1] == [rel], word
            assert vault.get(rel).tier == "long_term"
        links = vault.links("Inbox 3").backlinks
        assert len(links) == len(words) - 1
        # Agents write into the tier folders; the person's folders stay theirs.
        assert vault.add("Agent note", "From an agent.").path == "short_term/agent-note.md"
        archived = vault.archive(["Inbox 7"])[0]
        assert archived.path == "archive/Inbox 7.md"
        assert vault.unarchive(archived.id).tier == "long_term"
    untouched = [rel for rel in words if rel.startswith("Projects/")]
    assert {rel: fingerprint(root)[rel] for rel in untouched} == {rel: before[rel] for rel in untouched}


def test_a_persons_edits_and_new_folders_are_followed_in_an_adopted_vault(tmp_path: Path) -> None:
    root = tmp_path / "Notes"
    obsidian_folder(root, notes=8)
    cli("init", "--adopt", str(root))
    vault = Vault.open(root)
    watcher = Watcher(vault, debounce=0.05, commit_delay=0.3, rescan_interval=0)
    watcher.start()
    try:
        note = root / "Areas" / "Health" / "Topic 2.md"
        note.write_text(note.read_text() + "\nNew: a pelican at the lake.\n")
        fresh = root / "Resources" / "Reading" / "Books.md"          # a folder that did not exist
        fresh.parent.mkdir(parents=True)
        fresh.write_text("# Books\n\nA quokka novel.\n")
        rooted = root / "Scratch.md"
        rooted.write_text("A narwhal idea.\n")
        wait_for(lambda: all(vault.search(w).hits for w in ("pelican", "quokka", "narwhal")), "the edits indexed")
        wait_for(lambda: git(root, "status", "--porcelain", "--", "Areas", "Resources", "Scratch.md") == "",
                 "the edits committed")
    finally:
        watcher.stop()
        vault.close()
    assert git(root, "log", "-1", "--format=%s", "--", "Resources/Reading/Books.md").strip()


def test_a_plain_init_of_a_folder_of_notes_says_they_are_not_memories(tmp_path: Path) -> None:
    root = tmp_path / "Mixed"
    (root / "Notes").mkdir(parents=True)
    (root / "Notes" / "a.md").write_text("hello\n")
    out = cli("init", str(root)).stdout
    assert "1 note is outside the tier folders" in out and "gitmem init --adopt" in out


@pytest.mark.parametrize("args, message", [
    (["init", "--adopt", "{missing}"], "does not exist"),
    (["init", "--adopt", "{root}", "--from", "{root}"], "takes no folder to import from"),
    (["init", "--adopt", "{root}", "--tier", "archive"], "unknown tier"),
])
def test_adopt_refuses_clearly(tmp_path: Path, args: list[str], message: str) -> None:
    root = tmp_path / "r"
    root.mkdir()
    (root / "n.md").write_text("x\n")
    result = cli(*[a.format(root=root, missing=tmp_path / "missing") for a in args], ok=False)
    assert message in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in root.iterdir()) == ["n.md"]        # nothing left behind


def test_a_folders_own_memory_md_stays_its_note(tmp_path: Path) -> None:
    root = tmp_path / "Own"
    root.mkdir()
    (root / "MEMORY.md").write_text("My own memory page.\n")
    (root / "Idea.md").write_text("An idea about otters.\n")
    cli("init", "--adopt", str(root))
    assert (root / "MEMORY.md").read_text() == "My own memory page.\n"
    with Vault.open(root) as vault:
        vault.add("Agent note", "From an agent.")
        assert not vault.config.memory_index
    assert (root / "MEMORY.md").read_text() == "My own memory page.\n"
    assert os.path.exists(root / ".gitmem.yaml")


def test_reflect_leaves_a_persons_own_notes_alone(tmp_path: Path) -> None:
    """Years-old, retrieved notes outside the tier folders: reflect neither archives
    (prunes) nor rewrites (folds retrievals into) them; an agent's memory it does."""
    root = tmp_path / "Old"
    note = root / "Projects" / "old.md"
    note.parent.mkdir(parents=True)
    text = b"---\ncreated: 2015-01-01T00:00:00Z\nupdated: 2015-01-01T00:00:00Z\n---\nOld quokka note.\n"
    note.write_bytes(text)
    cli("init", "--adopt", str(root))
    with Vault.open(root) as vault:
        agent = vault.add("Agent quokka", "An agent's quokka memory.", tier="long_term")
        assert len(vault.search("quokka").hits) == 2            # both retrieved
        result = vault.reflect()
        assert result.reinforced == 1                           # the agent's memory only
        assert vault.get(agent.id).meta.get("retrievals") == 1
    assert note.read_bytes() == text


def test_a_planted_link_for_a_tier_folder_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    """A folder whose ``short_term`` is a link elsewhere: adopting writes nothing through it
    and leaves the folder as it was."""
    root, elsewhere = tmp_path / "Notes", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / "n.md").write_text("x\n")
    (root / "short_term").symlink_to(elsewhere)
    result = cli("init", "--adopt", str(root), ok=False)
    assert "symbolic link" in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in root.iterdir()) == ["n.md", "short_term"]
    assert list(elsewhere.iterdir()) == []
