"""Obsidian as Obsidian users know it: scalar tags, "#tags", aliases, path links, renamed
notes without frontmatter, titles from file names.

Every note is written to disk as Obsidian writes it (a temp file renamed over the
note), then read through the ``Vault`` API and ``python -m gitmem`` in a subprocess;
history is cross-checked with the git CLI.  Reading and indexing never change a
person's file: each test compares the bytes before and after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from gitmem import Vault
from gitmem.errors import NotFound
from gitmem.memory.markdown import inline_tags

from .conftest import FakeClock, git


@pytest.fixture
def obsidian(tmp_path: Path, clock: FakeClock) -> Iterator[Vault]:
    v = Vault.init(tmp_path / "vault", author="tester", clock=clock)
    yield v
    v.close()


def write_note(root: Path, rel: str, text: str) -> Path:
    """Save a note as Obsidian does: write a temp file, then rename it over the note."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.tmp"
    temp.write_bytes(text.encode("utf-8"))
    os.replace(temp, path)
    return path


def rename_note(root: Path, old: str, new: str) -> None:
    """Rename a note in Obsidian's file explorer (a plain rename of the file)."""
    (root / new).parent.mkdir(parents=True, exist_ok=True)
    os.rename(root / old, root / new)


def files(root: Path) -> dict[str, bytes]:
    """Every note under the tier folders, with its bytes."""
    out = {}
    for path in sorted(root.rglob("*.md")):
        rel = path.relative_to(root).as_posix()
        if not rel.startswith(".git/") and rel != "MEMORY.md":
            out[rel] = path.read_bytes()
    return out


def cli(root: Path, *args: str, ok: bool | None = True) -> Any:
    """``python -m gitmem -C root ARGS --json`` in a subprocess: the parsed JSON output
    (``ok`` None: whatever the exit status)."""
    result = subprocess.run([sys.executable, "-m", "gitmem", "-C", str(root), *args, "--json"],
                            capture_output=True, text=True, check=False, timeout=120)
    assert ok is None or (result.returncode == 0) == ok, result.stdout + result.stderr
    return json.loads(result.stdout) if result.stdout.strip() else None


def frontmatter_of(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


# --------------------------------------------------------------- scalar tags
def test_a_scalar_tags_value_is_one_tag(obsidian: Vault) -> None:
    root = obsidian.root
    note = write_note(root, "long_term/Warehouse.md",
                      "---\ntags: snowflake\ncustom: keep me   # a comment\n---\nThe warehouse bill doubled.\n")
    before = files(root)
    assert obsidian.get("Warehouse").tags == ["snowflake"]
    assert [m.path for m in obsidian.list(tags=["snowflake"])] == ["long_term/Warehouse.md"]
    assert obsidian.list(tags=["s"]) == []            # not one tag per letter
    obsidian.refresh()
    assert [h.path for h in obsidian.search("warehouse", tag="snowflake").hits] == ["long_term/Warehouse.md"]
    assert [m["path"] for m in cli(root, "ls", "--tag", "snowflake")] == ["long_term/Warehouse.md"]
    assert [h["path"] for h in cli(root, "search", "bill", "--tag", "snowflake")["hits"]] \
        == ["long_term/Warehouse.md"]
    report = cli(root, "doctor", ok=None)   # (the note is not committed yet: a finding)
    metadata = {f["check"]: f for f in report["findings"]}["metadata"]
    assert metadata["ok"], metadata
    assert files(root) == before                       # reading, indexing, doctor: no rewrite
    obsidian.commit_outside_edits()
    assert files(root) == before
    # The first gitmem write keeps one tag, and the person's own field as written.
    obsidian.update("Warehouse", append="Check the auto-suspend setting.")
    meta = frontmatter_of(note)
    assert meta["tags"] == ["snowflake"]
    assert "custom: keep me   # a comment\n" in note.read_text()


# ------------------------------------------------------------- "#" and #tags
BREWING = """---
tags: ["#kegs", "#Cellar/Temps"]
---
# Brewing log

Cleaned the lines today. #brewing #maintenance/lines, and #2026-batch.
Not tags: #123, issue#45, https://example.com/guide#sanitizing, `#inline-code`,
``a `#double-code` span``, `see #spaced-code`, ``x #in-double ` y``, %% #hidden-comment %%, ##doubled.
#start-of-line is a tag; so is a tag in a list:
- item #in-list

```bash
# a shell comment, #fenced-tag
```

~~~
#tilde-fenced
~~~
## Heading two #heading-tag
"""


def test_inline_tags_follow_obsidian_rules() -> None:
    assert inline_tags(BREWING.split("---\n", 2)[2]) == [
        "brewing", "maintenance/lines", "2026-batch", "start-of-line", "in-list", "heading-tag"]
    assert inline_tags("#a#b #c-\t#d_e #ünïcode #1984 #y1984") == ["a", "c-", "d_e", "ünïcode", "y1984"]
    assert inline_tags("````\n```\n#inside\n````\n#after") == ["after"]   # a longer fence closes only on its length
    assert inline_tags("``` not`a fence\n#real") == ["real"]


@pytest.mark.slow
def test_hash_tags_in_frontmatter_and_body_count_for_tag_filters(obsidian: Vault) -> None:
    root = obsidian.root
    note = write_note(root, "mid_term/Brewing log.md", BREWING)
    write_note(root, "mid_term/Other.md", "Nothing tagged here, only `#kegs` in code and brewing words.\n")
    before = files(root)
    memory = obsidian.get("Brewing log")
    assert memory.tags == ["kegs", "Cellar/Temps"]                 # "#" stripped when reading
    assert "brewing" not in memory.tags                           # inline tags are not frontmatter
    for tag in ("kegs", "#kegs", "KEGS", "cellar/temps", "brewing", "maintenance/lines", "in-list",
                "heading-tag"):
        assert [m.path for m in obsidian.list(tags=[tag])] == ["mid_term/Brewing log.md"], tag
    assert [m.path for m in obsidian.list(tags=["kegs", "brewing"])] == ["mid_term/Brewing log.md"]
    for not_a_tag in ("123", "45", "sanitizing", "inline-code", "double-code", "spaced-code", "in-double", "hidden-comment",
                      "doubled", "fenced-tag", "tilde-fenced", "a"):
        assert obsidian.list(tags=[not_a_tag]) == [], not_a_tag
    obsidian.refresh()
    for query, tag in (("lines", "kegs"), ("lines", "#kegs"), ("lines", "brewing"),
                       ("lines", "maintenance/lines")):
        assert [h.path for h in obsidian.search(query, tag=tag).hits] == ["mid_term/Brewing log.md"], tag
    assert [h.path for h in obsidian.search("brewing tag:brewing").hits] == ["mid_term/Brewing log.md"]
    assert obsidian.search("lines", tag="fenced-tag").hits == []
    assert [m["path"] for m in cli(root, "ls", "--tag", "brewing")] == ["mid_term/Brewing log.md"]
    assert [m["path"] for m in cli(root, "ls", "--tag", "kegs")] == ["mid_term/Brewing log.md"]
    assert [h["path"] for h in cli(root, "search", "cleaned", "--tag", "kegs")["hits"]] \
        == ["mid_term/Brewing log.md"]
    assert [h["path"] for h in cli(root, "search", "cleaned tag:maintenance/lines")["hits"]] \
        == ["mid_term/Brewing log.md"]
    assert files(root) == before
    # A gitmem write adds no inline tag to the frontmatter; the body keeps them.
    obsidian.update("Brewing log", append="Kegs filled. #filled")
    assert frontmatter_of(note)["tags"] == ["kegs", "Cellar/Temps"]
    assert [m.path for m in obsidian.list(tags=["filled"])] == ["mid_term/Brewing log.md"]


# --------------------------------------------------------- aliases and links
def test_aliases_and_path_links_resolve_like_obsidian(obsidian: Vault) -> None:
    root = obsidian.root
    write_note(root, "long_term/Projects/Snowflake costs.md",
               "---\naliases: SF costs\n---\n# Snowflake costs\n\n## Budget\n\nCredits ^abc123\n")
    write_note(root, "short_term/Standup.md",
               "See [[SF costs]], [[Projects/Snowflake costs|costs]], [[long_term/Projects/Snowflake costs.md]],\n"
               "[[projects/snowflake COSTS#Budget]], [[Snowflake costs#^abc123|the credits]],\n"
               "[[sf costs]] and [[Nowhere/Snowflake costs]] and [[Missing note]].\n")
    before = files(root)
    target = obsidian.get("long_term/Projects/Snowflake costs.md")
    for ref in ("SF costs", "sf COSTS", "[[SF costs]]", "Projects/Snowflake costs", "projects/snowflake costs.md",
                "[[Projects/Snowflake costs|costs]]", "Snowflake costs#Budget", "Snowflake costs#^abc123"):
        assert obsidian.resolve(ref) == target.path, ref
        assert obsidian.get(ref).id == target.id
    links = obsidian.links("Standup")
    found = {o["target"]: o.get("path") for o in links.outgoing}
    assert found == {"SF costs": target.path, "Projects/Snowflake costs": target.path,
                     "long_term/Projects/Snowflake costs.md": target.path,
                     "projects/snowflake COSTS": target.path, "Snowflake costs": target.path,
                     "sf costs": target.path, "Nowhere/Snowflake costs": None, "Missing note": None}
    assert [b["path"] for b in obsidian.links(target.id).backlinks] == ["short_term/Standup.md"]
    shown = cli(root, "show", "SF costs")
    assert shown["id"] == target.id and shown["path"] == target.path
    out = cli(root, "links", "Standup")
    missing = sorted(o["target"] for o in out["outgoing"] if not o["exists"])
    assert missing == ["Missing note", "Nowhere/Snowflake costs"]
    assert [b["path"] for b in cli(root, "links", "SF costs")["backlinks"]] == ["short_term/Standup.md"]
    with pytest.raises(NotFound):
        obsidian.get("Missing note")
    assert files(root) == before


def test_aliases_are_searchable_as_a_person_writes_them(obsidian: Vault) -> None:
    """A note is found by any of its aliases, in both spellings Obsidian accepts (one
    name, a list); an alias edited away stops matching."""
    root = obsidian.root
    write_note(root, "long_term/Coffee.md", "---\naliases: Kaffe\n---\nThe bean drink I start with.\n")
    write_note(root, "long_term/Tea.md", "---\naliases: [Tee, Chai]\n---\nThe leaf drink for the evening.\n")
    obsidian.commit_outside_edits()
    before = files(root)
    assert [h.path for h in obsidian.search("Kaffe").hits] == ["long_term/Coffee.md"]
    assert [h.path for h in obsidian.search("chai").hits] == ["long_term/Tea.md"]
    assert [h["path"] for h in cli(root, "search", "Tee")["hits"]] == ["long_term/Tea.md"]
    write_note(root, "long_term/Tea.md", "---\naliases: [Tee]\n---\nThe leaf drink for the evening.\n")
    obsidian.commit_outside_edits()
    assert obsidian.search("chai").hits == []
    assert files(root) == {**before, "long_term/Tea.md": (root / "long_term/Tea.md").read_bytes()}


# ------------------------------------------------ renames without frontmatter
def follow(root: Path, rel: str) -> list[str]:
    return git(root, "log", "--follow", "--format=%H", "--", rel).split()


def test_a_renamed_note_without_frontmatter_keeps_its_identity_and_history(obsidian: Vault) -> None:
    root = obsidian.root
    body = "".join(f"- idea {i}: something worth keeping\n" for i in range(8))
    write_note(root, "short_term/Inbox idea.md", body)
    write_note(root, "short_term/Unrelated.md", "Groceries: oats, coffee.\n")
    first = obsidian.commit_outside_edits()
    original = obsidian.get("Inbox idea")
    # Renamed in Obsidian and edited a little (git still calls it a rename), while an
    # unrelated note is deleted and a different one created in the same batch.
    rename_note(root, "short_term/Inbox idea.md", "short_term/Idea for the offsite.md")
    write_note(root, "short_term/Idea for the offsite.md", body + "- idea 8: one more\n")
    (root / "short_term/Unrelated.md").unlink()
    write_note(root, "short_term/Brand new.md", "Call the venue about the projector.\n")
    before = files(root)
    second = obsidian.commit_outside_edits()
    assert files(root) == before                                   # no id written into the file
    assert "id:" not in (root / "short_term/Idea for the offsite.md").read_text()

    renamed = obsidian.get("Idea for the offsite")
    assert renamed.id == original.id
    assert obsidian.get("Brand new").id not in (original.id, obsidian.get("Unrelated.md").id
                                                if obsidian.exists("Unrelated.md") else "")
    history = obsidian.history("Idea for the offsite")
    assert [v.commit for v in history] == [first, second]
    assert [v.path for v in history] == ["short_term/Inbox idea.md", "short_term/Idea for the offsite.md"]
    assert [v.commit for v in reversed(history)] == follow(root, "short_term/Idea for the offsite.md")
    assert [v["commit"] for v in cli(root, "log", "Idea for the offsite")] == [second, first]
    assert obsidian.show_at("Idea for the offsite", "~1").body == body
    assert [h.id for h in obsidian.search("offsite OR idea").hits] == [original.id]
    assert len(obsidian.history("Brand new")) == 1
    doctor = {f.check: f for f in obsidian.doctor()}
    assert doctor["catalog"].ok and doctor["metadata"].ok, doctor
    assert files(root) == before

    # A second rename keeps the same id; the catalog is a cache rebuilt from git.
    rename_note(root, "short_term/Idea for the offsite.md", "mid_term/Offsite plan.md")
    third = obsidian.commit_outside_edits()
    assert obsidian.get("Offsite plan").id == original.id
    obsidian.close()
    shutil.rmtree(root / ".git" / "gitmem")
    with Vault.open(root) as again:
        assert [v.commit for v in again.history("Offsite plan")] == [first, second, third]
        assert again.get("Offsite plan").id == original.id
    assert [v["commit"] for v in cli(root, "log", "Offsite plan")] == [third, second, first]
    assert follow(root, "mid_term/Offsite plan.md") == [third, second, first]

    # The first gitmem write adds frontmatter with the id the note kept.
    with Vault.open(root, author="tester") as again:
        again.update("Offsite plan", append="Booked.")
        assert frontmatter_of(root / "mid_term/Offsite plan.md")["id"] == original.id
        assert len(again.history(original.id)) == 4


def test_a_deleted_and_a_dissimilar_new_note_are_not_a_rename(obsidian: Vault) -> None:
    root = obsidian.root
    write_note(root, "long_term/Old.md", "Alpha beta gamma.\nDelta epsilon.\n")
    obsidian.commit_outside_edits()
    old_id = obsidian.get("Old").id
    (root / "long_term/Old.md").unlink()
    write_note(root, "long_term/New.md", "Something else entirely.\n")
    obsidian.commit_outside_edits()
    assert obsidian.get("New").id != old_id
    assert len(obsidian.history("New")) == 1
    assert [v.path for v in obsidian.history(old_id)] == ["long_term/Old.md", None]


# ------------------------------------------------------- titles from names
def test_a_title_from_a_file_name_keeps_the_name_as_written(obsidian: Vault) -> None:
    root = obsidian.root
    note = write_note(root, "short_term/Daily 2026-11-24.md", "Standup at 10, then the_long_review.\n")
    write_note(root, "short_term/snake_case-note.md", "---\ntags: [x]\n---\nBody.\n")
    before = files(root)
    assert obsidian.get("Daily 2026-11-24").title == "Daily 2026-11-24"
    assert obsidian.get("snake_case-note").title == "snake_case-note"
    assert cli(root, "show", "Daily 2026-11-24")["title"] == "Daily 2026-11-24"
    assert files(root) == before
    obsidian.update("Daily 2026-11-24", append="Retro moved to Friday.")
    assert frontmatter_of(note)["title"] == "Daily 2026-11-24"
