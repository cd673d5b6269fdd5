"""What agents see through the file-shaped profiles, written as their call sequences:

* ``index``: two topic files with one name are both reachable (by path, or both
  at once under their own headings), memories MEMORY.md has no room for are
  reachable with ``memory_read`` itself, and ``files`` refuses to write MEMORY.md;
* ``claude``: ``/memories`` shows gitmem's memories as ``<tier>/<slug>.md``
  (no hash folders, no deleted memories) and every command maps those paths
  back to the real files.

Two of them run over MCP stdio with the SDK's own client."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitmem import Toolbox, Vault

from .conftest import FakeClock, git, mcp_params, snapshot

SEP = "\n\n---\n\n"


@pytest.fixture
def vault(tmp_path: Path, clock: FakeClock) -> Iterator[Vault]:
    """The readable view hides gitmem's hash folders: a vault with the hashed layout."""
    v = Vault.init(tmp_path / "vault", author="tester", clock=clock)
    v.convert_layout("hashed")
    yield v
    v.close()


def run(box: Toolbox, **args: object) -> str:
    """One claude-profile call as the agent sees it: the text, marked if it is an error."""
    text, is_error = box.call_text("memory", args)
    return ("ERROR: " if is_error else "") + text


def listed(view: str) -> list[str]:
    """The paths of a claude folder view, without the header, the sizes and the folder itself."""
    return [line.split("\t")[1] for line in view.splitlines()[2:]]


def small_index_vault(tmp_path: Path, clock: FakeClock) -> Vault:
    """A vault whose MEMORY.md has room for few memories (the smallest budget allowed)."""
    vault = Vault.init(tmp_path / "v", author="tester", clock=clock)
    cfg = vault.root / ".gitmem.yaml"
    cfg.write_text(cfg.read_text().replace("memory_index_lines: 200", "memory_index_lines: 20"))
    vault.close()
    return Vault.open(tmp_path / "v", author="tester", clock=clock)


# ------------------------------------------------------------------ index: same name
def test_index_topics_with_one_name_in_two_folders(vault: Vault) -> None:
    files, index = Toolbox(vault, "files", agent="bot"), Toolbox(vault, "index")
    assert files.call("memory_write", {"path": "work/notes.md", "content": "Standup at 9.\n"}) == \
        "Written to work/notes.md"
    files.call("memory_write", {"path": "home/notes.md", "content": "Water the plants.\n"})
    head = index.call("memory_read", {})
    assert head.count("- [[notes]] - ") == 2  # MEMORY.md cannot tell them apart
    # By path: exactly one file, under the name the agent used.
    assert index.call("memory_read", {"topics": ["work/notes"]}) == f"{head}{SEP}# work/notes\n\nStandup at 9.\n"
    assert index.call("memory_read", {"topics": ["home/notes.md"]}) == \
        f"{head}{SEP}# home/notes.md\n\nWater the plants.\n"
    # The bare shared name: both, each under the name that loads it alone.
    both = index.call("memory_read", {"topics": ["notes"]})
    assert both == f"{head}{SEP}# home/notes\n\nWater the plants.\n{SEP}# work/notes\n\nStandup at 9.\n"
    # A folder lists its memories by those names; the names load them.
    assert index.call("memory_read", {"topics": ["work/"]}) == f"{head}{SEP}# work/\n\n- work/notes"
    # A unique name keeps the original heading; ".." and hidden parts still load nothing.
    files.call("memory_write", {"path": "home/plants.md", "content": "Ficus.\n"})
    head = index.call("memory_read", {})
    assert index.call("memory_read", {"topics": ["plants"]}) == f"{head}{SEP}# plants\n\nFicus.\n"
    for bad in ("../home/notes", "home/../work/notes", "home/.obsidian/notes", "/etc/passwd", "x/nul"):
        assert index.call("memory_read", {"topics": [bad]}) == f"{head}{SEP}(no matching topic files)", bad


def test_index_same_name_as_a_memory_gitmem_placed(vault: Vault) -> None:
    """A file-tool file and a memory gitmem made share a name: both addressable."""
    memory = vault.add("Notes", "Kept by gitmem.", tier="mid_term")
    assert re.fullmatch(r"mid_term/[0-9a-f]/[0-9a-f]/notes\.md", memory.path)
    Toolbox(vault, "files").call("memory_write", {"path": "work/notes.md", "content": "Mine.\n"})
    index = Toolbox(vault, "index")
    head = index.call("memory_read", {})
    text = (vault.root / memory.path).read_text()
    assert index.call("memory_read", {"topics": ["notes"]}) == \
        f"{head}{SEP}# mid_term/notes\n\n{text}{SEP}# work/notes\n\nMine.\n"
    assert index.call("memory_read", {"topics": ["mid_term/notes"]}) == f"{head}{SEP}# mid_term/notes\n\n{text}"


# ------------------------------------------------------------------ index: past the cap
def test_index_reaches_memories_past_the_cap(tmp_path: Path, clock: FakeClock) -> None:
    vault = small_index_vault(tmp_path, clock)
    try:
        made = [vault.add(f"Trip {n:02d}", f"Packing list {n}.", tier="mid_term") for n in range(30)]
        index = Toolbox(vault, "index")
        head = index.call("memory_read", {})
        memory_md = (vault.root / "MEMORY.md").read_text()
        assert head.startswith(memory_md) and "more: `gitmem ls --tier mid_term`" in memory_md
        assert head == memory_md + (
            '\n(gitmem: this index shows part of the vault. memory_read(topics=["mid_term/"]) lists every '
            "memory in that folder; a topic may be any memory's file name, path, title or id.)\n")
        hidden = [m for m in made if f"[[{m.filename[:-3]}|" not in memory_md]
        assert len(hidden) >= 25
        # The folder lists every memory, by a name that loads it.
        listing = index.call("memory_read", {"topics": ["mid_term/"]})[len(head) + len(SEP):]
        assert listing.splitlines()[:3] == ["# mid_term/", "", "- mid_term/trip-00: Trip 00"]
        assert len(listing.splitlines()) == 2 + 30
        one = hidden[0]
        text = (vault.root / one.path).read_text()
        for topic in (f"mid_term/{one.filename[:-3]}", one.title, one.id):
            assert index.call("memory_read", {"topics": [topic]}) == \
                f"{head}{SEP}# mid_term/{one.filename[:-3]}\n\n{text}", topic
        assert index.call("memory_read", {"topics": [one.filename[:-3]]}) == \
            f"{head}{SEP}# {one.filename[:-3]}\n\n{text}"
    finally:
        vault.close()


def test_index_has_no_hint_when_everything_fits(vault: Vault) -> None:
    vault.add("Small vault", "One memory.")
    index = Toolbox(vault, "index")
    assert index.call("memory_read", {}) == (vault.root / "MEMORY.md").read_text()


# ------------------------------------------------------------------ files: MEMORY.md
@pytest.mark.parametrize("path", ["MEMORY.md", "memory.md", "long_term/MEMORY.md", "short_term/MEMORY.md"])
def test_files_write_of_memory_md_is_refused(vault: Vault, path: str) -> None:
    files = Toolbox(vault, "files", agent="bot")
    files.call("memory_write", {"path": "preferences.md", "content": "Dark mode.\n"})
    before = snapshot(vault.root)
    result = files.call("memory_write", {"path": path, "content": "# My own index\n"})
    assert result["error"]["code"] == "invalid_path"
    assert result["error"]["message"] == (f"{path!r} is the index gitmem generates at the vault root from the "
                                          "memory files; it cannot be written")
    assert "topic file" in result["error"]["hint"]
    assert snapshot(vault.root) == before  # no long_term/MEMORY.md, no commit
    # Reading it returns the generated index; a MEMORY.md deeper in a folder is an ordinary file.
    assert files.call("memory_read", {"path": "MEMORY.md"}) == (vault.root / "MEMORY.md").read_text()
    assert files.call("memory_write", {"path": "projects/MEMORY.md", "content": "x"}) == \
        "Written to projects/MEMORY.md"


# ------------------------------------------------------------------ claude: the readable view
@pytest.fixture
def claude(vault: Vault) -> Toolbox:
    return Toolbox(vault, "claude", agent="claude")


def test_claude_view_shows_tiers_and_slugs_not_hash_folders(claude: Toolbox, vault: Vault) -> None:
    rust = vault.add("Rust learning", "Loops first.\n", tier="short_term")
    deploy = vault.add("Deploy checklist", "Tests green.\n", tier="long_term")
    gone = vault.add("Old idea", "Dropped.\n", tier="mid_term")
    vault.delete(gone.id)  # soft: moved to archive/ with status deleted
    shelved = vault.add("Shelved idea", "Later.\n", tier="mid_term")
    vault.archive([shelved.id])
    assert run(claude, command="create", path="/memories/progress.md", file_text="- step 1\n") == \
        "File created successfully at: /memories/progress.md"
    view = run(claude, command="view", path="/memories")
    assert view.splitlines()[0] == ("Here're the files and directories up to 2 levels deep in /memories, "
                                    "excluding hidden items and node_modules:")
    assert listed(view) == ["/memories/archive/", "/memories/archive/shelved-idea.md",
                            "/memories/deploy-checklist.md", "/memories/progress.md",
                            "/memories/short_term/", "/memories/short_term/rust-learning.md"]
    size = len((vault.root / rust.path).read_bytes())
    assert f"{size}B\t/memories/short_term/rust-learning.md" in view.splitlines()
    assert listed(run(claude, command="view", path="/memories/short_term")) == \
        ["/memories/short_term/rust-learning.md"]
    # The shown paths are the ones every command takes.
    assert run(claude, command="view", path="/memories/short_term/rust-learning.md").endswith(
        "\n    11\t---\n    12\tLoops first.\n    13\t")
    assert run(claude, command="view", path="/memories/deploy-checklist.md", view_range=[12, 12]) == (
        "Here's the content of /memories/deploy-checklist.md with line numbers:\n    12\tTests green.")
    assert run(claude, command="view", path="/memories/archive/old-idea.md") == \
        "ERROR: The path /memories/archive/old-idea.md does not exist. Please provide a valid path."
    # The real (hash-folder) spelling still names the same file.
    assert "Tests green." in run(claude, command="view", path="/memories/" + vault.files.view_path(deploy.path))


def test_claude_commands_map_shown_paths_to_the_real_files(claude: Toolbox, vault: Vault) -> None:
    root = vault.root
    rust = vault.add("Rust learning", "Loops first.\n", tier="short_term")
    deploy = vault.add("Deploy checklist", "Tests green.\n", tier="long_term")
    shown = "/memories/short_term/rust-learning.md"
    assert run(claude, command="str_replace", path=shown, old_str="Loops first.", new_str="Loops, then traits.") \
        .startswith("The memory file has been edited.")
    assert (root / rust.path).read_text().endswith("Loops, then traits.\n")
    assert git(root, "log", "-1", "--format=%an|%s").strip() == f"claude|edit: {rust.path}"
    assert run(claude, command="insert", path=shown, insert_line=12, insert_text="Next: lifetimes.") == \
        f"The file {shown} has been edited."
    assert (root / rust.path).read_text().endswith("Loops, then traits.\nNext: lifetimes.\n")
    assert vault.get(rust.id).path == rust.path  # still the same memory, in place
    before = snapshot(root)
    assert run(claude, command="create", path=shown, file_text="x") == f"ERROR: File {shown} already exists"
    assert run(claude, command="create", path="/memories/deploy-checklist.md", file_text="x") == \
        "ERROR: File /memories/deploy-checklist.md already exists"
    run(claude, command="create", path="/memories/todo.md", file_text="- buy milk\n")
    before = snapshot(root)
    assert run(claude, command="rename", old_path="/memories/todo.md", new_path=shown) == \
        f"ERROR: The destination {shown} already exists"
    assert snapshot(root) == before
    assert run(claude, command="rename", old_path="/memories/deploy-checklist.md",
               new_path="/memories/mid_term/deploy-checklist.md") == \
        "Successfully renamed /memories/deploy-checklist.md to /memories/mid_term/deploy-checklist.md"
    assert not (root / deploy.path).exists()
    assert (root / "mid_term/deploy-checklist.md").read_text().endswith("Tests green.\n")
    assert f"R100\t{deploy.path}\tmid_term/deploy-checklist.md" in \
        git(root, "log", "-1", "--name-status", "-M", "--format=")
    assert run(claude, command="delete", path=shown) == f"Successfully deleted {shown}"
    assert not (root / rust.path).exists()
    assert git(root, "log", "-1", "--format=%s").strip() == f"delete: {rust.path}"
    assert listed(run(claude, command="view", path="/memories")) == \
        ["/memories/mid_term/", "/memories/mid_term/deploy-checklist.md", "/memories/todo.md"]


def test_claude_projection_never_hides_or_doubles_a_file(claude: Toolbox, vault: Vault) -> None:
    """A file of the agent's at the spot a memory would show wins; the memory keeps its real path."""
    memory = vault.add("Dup", "From gitmem.\n", tier="short_term")
    vault.files.write_text("short_term/dup.md", "From the agent.\n", author="someone")
    view = run(claude, command="view", path="/memories/short_term")
    hash_folder = memory.path.split("/")[1]
    assert sorted(listed(view)) == sorted(["/memories/short_term/dup.md", f"/memories/short_term/{hash_folder}/",
                                           f"/memories/short_term/{hash_folder}/{memory.path.split('/')[2]}/"])
    assert run(claude, command="view", path="/memories/short_term/dup.md").endswith("1\tFrom the agent.\n     2\t")
    assert "From gitmem." in run(claude, command="view", path="/memories/" + memory.path)


# ------------------------------------------------------------------ over MCP stdio
mcp = pytest.importorskip("mcp", reason="the MCP SDK is an optional extra: pip install gitmem-vault[mcp]")
anyio = pytest.importorskip("anyio")


params = mcp_params


@pytest.mark.slow
def test_index_and_files_over_mcp_stdio(tmp_path: Path, clock: FakeClock) -> None:
    vault = small_index_vault(tmp_path, clock)
    made = [vault.add(f"Trip {n:02d}", f"Packing list {n}.", tier="mid_term") for n in range(30)]
    memory_md = (vault.root / "MEMORY.md").read_text()
    hidden = next(m for m in made if f"[[{m.filename[:-3]}|" not in memory_md)
    root = vault.root
    vault.close()

    async def session() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with mcp.Client(params(root, "files", "bot")) as client:
            out["work"] = await client.call_tool("memory_write", {"path": "work/notes.md", "content": "Standup.\n"})
            await client.call_tool("memory_write", {"path": "home/notes.md", "content": "Plants.\n"})
            out["index_write"] = await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "x"})
        async with mcp.Client(params(root, "index", "bot")) as client:
            out["head"] = await client.call_tool("memory_read", {})
            out["notes"] = await client.call_tool("memory_read", {"topics": ["notes"]})
            out["folder"] = await client.call_tool("memory_read", {"topics": ["mid_term/"]})
            out["title"] = await client.call_tool("memory_read", {"topics": [hidden.title]})
        return out

    out = anyio.run(session)
    assert out["work"].content[0].text == "Written to work/notes.md"
    assert out["index_write"].is_error
    assert out["index_write"].structured_content["error"]["code"] == "invalid_path"
    head = out["head"].content[0].text
    assert head.splitlines()[-1].startswith('(gitmem: this index shows part of the vault. memory_read(topics=[') \
        and '"mid_term/"' in head.splitlines()[-1]
    assert out["notes"].content[0].text == f"{head}{SEP}# home/notes\n\nPlants.\n{SEP}# work/notes\n\nStandup.\n"
    slug = hidden.filename[:-3]
    assert f"\n- mid_term/{slug}: {hidden.title}\n" in out["folder"].content[0].text
    assert out["title"].content[0].text == f"{head}{SEP}# mid_term/{slug}\n\n" + (root / hidden.path).read_text()
    assert not (root / "long_term/MEMORY.md").exists()


def test_claude_readable_view_over_mcp_stdio(vault: Vault) -> None:
    rust = vault.add("Rust learning", "Loops first.\n", tier="short_term")
    gone = vault.add("Old idea", "Dropped.\n", tier="mid_term")
    vault.delete(gone.id)
    root = vault.root
    vault.close()

    async def session() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with mcp.Client(params(root, "claude", "claude")) as client:
            out["view"] = await client.call_tool("memory", {"command": "view", "path": "/memories"})
            out["edit"] = await client.call_tool("memory", {
                "command": "str_replace", "path": "/memories/short_term/rust-learning.md",
                "old_str": "Loops first.", "new_str": "Traits next."})
            out["gone"] = await client.call_tool("memory", {"command": "view",
                                                            "path": "/memories/archive/old-idea.md"})
        return out

    out = anyio.run(session)
    assert listed(out["view"].content[0].text) == ["/memories/short_term/",
                                                   "/memories/short_term/rust-learning.md"]
    assert out["edit"].content[0].text.startswith("The memory file has been edited.")
    assert (root / rust.path).read_text().endswith("Traits next.\n")
    assert out["gone"].is_error and out["gone"].content[0].text == \
        "The path /memories/archive/old-idea.md does not exist. Please provide a valid path."


def test_no_file_tool_can_write_the_generated_index(vault: Vault) -> None:
    head = vault.head
    for profile, args in (("claude", {"command": "create", "path": "/memories/MEMORY.md", "file_text": "x"}),
                          ("claude", {"command": "create", "path": "/memories/short_term/memory.md",
                                      "file_text": "x"}),
                          ("files", {"path": "MEMORY.md", "content": "x"})):
        name = "memory" if profile == "claude" else "memory_write"
        out = Toolbox(vault, profile).call(name, args)
        assert out["error"]["code"] == "invalid_path" and "index gitmem generates" in out["error"]["message"]
    assert vault.head == head
