"""File-shaped profiles through the dispatcher: `files` (a file tree), `index` (MEMORY.md
and topic files) and `claude` (Anthropic's memory tool), with the contracts' exact calls, the exact
result texts, the resulting files and commits, and bad input that changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitmem import Toolbox, Vault

from .conftest import git, snapshot


def log(root: Path, n: int = 1) -> list[str]:
    return git(root, "log", f"-{n}", "--format=%an|%s").strip().splitlines()


# ----------------------------------------------------------------- files (000)
@pytest.fixture
def files(vault: Vault) -> Toolbox:
    return Toolbox(vault, "files", agent="augure")


def test_files_seed_examples(files: Toolbox, vault: Vault) -> None:
    content = "# Tool Preferences\n\n- Editor: VS Code\n- Language: TypeScript\n- Package manager: pnpm"
    assert files.call("memory_write", {"path": "preferences/tools.md", "content": content}) == \
        "Written to preferences/tools.md"
    assert (vault.root / "long_term/preferences/tools.md").read_text() == content  # exact, no frontmatter added
    assert log(vault.root) == ["augure|create: long_term/preferences/tools.md"]
    files.call("memory_write", {"path": "observations.md", "content": "- likes tea\n"})
    files.call("memory_write", {"path": "knowledge/personal/housing.md", "content": "Rents a flat.\n"})
    files.call("memory_write", {"path": "identity.md", "content": "# Identity\n"})
    assert files.call("memory_read", {}) == \
        "identity.md\nknowledge/personal/housing.md\nobservations.md\npreferences/tools.md"
    assert files.call("memory_read", {"path": "observations.md"}) == "- likes tea\n"
    # overwrite = one more commit; the same text again = no commit
    files.call("memory_write", {"path": "observations.md", "content": "- likes green tea\n"})
    assert log(vault.root) == ["augure|write: long_term/observations.md"]
    head = vault.head
    files.call("memory_write", {"path": "observations.md", "content": "- likes green tea\n"})
    assert vault.head == head
    # a file without frontmatter is a memory: searchable, titled by its heading
    memory = vault.get("long_term/identity.md")
    assert memory.title == "Identity" and not memory.problems
    assert [h.path for h in vault.search("green tea").hits] == ["long_term/observations.md"]
    assert "long_term/observations.md" in git(vault.root, "ls-tree", "-r", "--name-only", "HEAD")


def test_files_tier_paths_and_other_tiers_are_visible(files: Toolbox, vault: Vault) -> None:
    vault.add("Fresh note", "from the API")
    files.call("memory_write", {"path": "short_term/scratch.md", "content": "scratch"})
    listing = files.call("memory_read", {}).splitlines()
    assert "short_term/scratch.md" in listing
    assert any(p.startswith("short_term/") and p.endswith("/fresh-note.md") for p in listing)
    assert files.call("memory_read", {"path": "long_term/../short_term/scratch.md"})["error"]["code"] == \
        "invalid_path"


@pytest.mark.parametrize("path", ["../escape.md", "..\\escape.md", "%2e%2e/escape.md", "/etc/passwd", "~/x.md",
                                  ".git/config", "a/.obsidian/x.md", "C:/x.md", "con.md", "a\x00b.md", ""])
def test_files_bad_paths_change_nothing(files: Toolbox, vault: Vault, path: str) -> None:
    before = snapshot(vault.root)
    result = files.call("memory_write", {"path": path, "content": "x"})
    assert result["error"]["code"] in ("invalid_path", "invalid_arguments"), result
    assert snapshot(vault.root) == before


def test_files_huge_content_and_protected_memory(files: Toolbox, vault: Vault) -> None:
    before = snapshot(vault.root)
    too_big = files.call("memory_write", {"path": "big.md", "content": "x" * 1_000_001})
    assert too_big["error"]["code"] == "invalid_arguments"
    vault.config = vault.config.__class__(**{**vault.config.__dict__, "max_content_bytes": 2048})
    assert files.call("memory_write", {"path": "big.md", "content": "é" * 1500})["error"]["code"] == \
        "content_too_large"
    assert snapshot(vault.root) == before
    rule = vault.add("Never deploy on Fridays", "Rule.", type="rule", tier="long_term")
    rel = vault.files.view_path(rule.path)
    before = snapshot(vault.root)
    assert files.call("memory_write", {"path": rel, "content": "deploy whenever"})["error"]["code"] == "protected"
    assert snapshot(vault.root) == before
    assert "Never deploy" in files.call("memory_read", {"path": rel})


def test_files_read_of_a_folder_and_a_symlink(files: Toolbox, vault: Vault, tmp_path: Path) -> None:
    files.call("memory_write", {"path": "dir/a.md", "content": "a"})
    assert files.call("memory_read", {"path": "dir"})["error"]["code"] == "invalid_input"
    secret = tmp_path / "secret.md"
    secret.write_text("secret")
    (vault.root / "long_term/link.md").symlink_to(secret)
    assert files.call("memory_read", {"path": "link.md"})["error"]["code"] == "unsafe_path"
    assert files.call("memory_write", {"path": "link.md", "content": "x"})["error"]["code"] == "unsafe_path"
    assert secret.read_text() == "secret"


# ----------------------------------------------------------------- index (001)
def test_index_seed_behaviour(vault: Vault) -> None:
    box = Toolbox(vault, "index")
    index_file = vault.root / "MEMORY.md"
    if index_file.exists():
        assert box.call("memory_read", {}) == index_file.read_text()
    else:
        assert box.call("memory_read", {}) == "(no memories yet)"
    files = Toolbox(vault, "files")
    files.call("memory_write", {"path": "preferences.md", "content": "Dark mode."})
    files.call("memory_write", {"path": "projects.md", "content": "gitmem."})
    index = box.call("memory_read", {})
    assert box.call("memory_read", {"topics": ["preferences", "projects.md"]}) == (
        f"{index}\n\n---\n\n# preferences\n\nDark mode.\n\n---\n\n# projects.md\n\ngitmem.")
    # the seed's sanitising: only [a-zA-Z0-9_.-] survive; unknown topics vanish
    assert box.call("memory_read", {"topics": ["../pref erences"]}) == \
        f"{index}\n\n---\n\n(no matching topic files)"  # "..preferences.md" is no file
    assert box.call("memory_read", {"topics": ["nope", "!!!", "..", ".git"]}) == \
        f"{index}\n\n---\n\n(no matching topic files)"
    assert box.call("memory_read", {"topics": ["pref/erences"]}).endswith("# preferences\n\nDark mode.")
    # a memory gitmem created elsewhere is a topic by its file name
    memory = vault.add("Rust learning", "Loops.", tier="mid_term")
    assert box.call("memory_read", {"topics": [memory.filename[:-3]]}).endswith(f"# {memory.filename[:-3]}\n\n"
                                                                                + memory_text(vault, memory.path))
    assert box.call("memory_read", {"topics": "preferences"})["error"]["code"] == "invalid_arguments"


def memory_text(vault: Vault, path: str) -> str:
    return (vault.root / path).read_text()


# ---------------------------------------------------------------- claude tool
@pytest.fixture
def claude(vault: Vault) -> Toolbox:
    return Toolbox(vault, "claude", agent="claude")


def run(box: Toolbox, **args: object) -> str:
    text, is_error = box.call_text("memory", args)
    return ("ERROR: " if is_error else "") + text


def test_claude_memory_commands_and_commits(claude: Toolbox, vault: Vault) -> None:
    root = vault.root
    assert run(claude, command="create", path="/memories/progress.md", file_text="# Progress\n- step 1\n") == \
        "File created successfully at: /memories/progress.md"
    assert (root / "long_term/progress.md").read_text() == "# Progress\n- step 1\n"
    assert log(root) == ["claude|create: long_term/progress.md"]
    assert run(claude, command="view", path="/memories/progress.md") == (
        "Here's the content of /memories/progress.md with line numbers:\n"
        "     1\t# Progress\n     2\t- step 1\n     3\t")
    assert run(claude, command="view", path="/memories/progress.md", view_range=[2, 2]) == (
        "Here's the content of /memories/progress.md with line numbers:\n     2\t- step 1")
    assert run(claude, command="str_replace", path="/memories/progress.md", old_str="step 1",
               new_str="step 1 done") == (
        "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
        "     1\t# Progress\n     2\t- step 1 done\n     3\t")
    assert run(claude, command="insert", path="/memories/progress.md", insert_line=2, insert_text="- step 2\n") == \
        "The file /memories/progress.md has been edited."
    assert (root / "long_term/progress.md").read_text() == "# Progress\n- step 1 done\n- step 2\n"
    assert run(claude, command="rename", old_path="/memories/progress.md", new_path="/memories/done/progress.md") \
        == "Successfully renamed /memories/progress.md to /memories/done/progress.md"
    assert "rename" in git(root, "log", "-1", "--name-status", "--format=%s")
    assert "R100\tlong_term/progress.md\tlong_term/done/progress.md" in git(root, "log", "-1", "--name-status",
                                                                           "-M", "--format=")
    view = run(claude, command="view", path="/memories")
    assert view.splitlines()[0] == ("Here're the files and directories up to 2 levels deep in /memories, "
                                    "excluding hidden items and node_modules:")
    assert view.splitlines()[1].endswith("\t/memories")
    assert [line.split("\t")[1] for line in view.splitlines()[2:]] == \
        ["/memories/done/", "/memories/done/progress.md"]
    assert view.splitlines()[3] == "34B\t/memories/done/progress.md"
    assert run(claude, command="delete", path="/memories/done") == "Successfully deleted /memories/done"
    assert not (root / "long_term/done").exists()
    assert [line.split("|")[1] for line in log(root, 6)] == [
        "delete: long_term/done", "rename: long_term/progress.md -> long_term/done/progress.md",
        "edit: long_term/progress.md", "edit: long_term/progress.md", "create: long_term/progress.md",
        "init: gitmem vault"]
    vault.flush()
    assert git(root, "status", "--porcelain") == ""


def test_claude_error_texts(claude: Toolbox, vault: Vault) -> None:
    run(claude, command="create", path="/memories/a.md", file_text="x\nx\n")
    before = snapshot(vault.root)
    cases = {
        ("view", "/memories/nope.md"): "The path /memories/nope.md does not exist. Please provide a valid path.",
        ("view", "/etc/passwd"): "Path must start with /memories, got: /etc/passwd",
        ("view", "/memoriesX/a.md"): "Path must start with /memories, got: /memoriesX/a.md",
        ("view", "/memories/../../etc/passwd"): "Path /memories/../../etc/passwd would escape /memories directory",
        ("view", "/memories/%2e%2e/x"): "Path /memories/%2e%2e/x would escape /memories directory",
        ("delete", "/memories"): "Cannot delete the /memories directory itself",
        ("delete", "/memories/nope.md"): "The path /memories/nope.md does not exist",
    }
    for (command, path), message in cases.items():
        assert run(claude, command=command, path=path) == "ERROR: " + message
    assert run(claude, command="create", path="/memories/a.md", file_text="y") == \
        "ERROR: File /memories/a.md already exists"
    assert run(claude, command="str_replace", path="/memories/a.md", old_str="zzz", new_str="y") == \
        "ERROR: No replacement was performed, old_str `zzz` did not appear verbatim in /memories/a.md."
    assert run(claude, command="str_replace", path="/memories/a.md", old_str="x", new_str="y") == \
        "ERROR: No replacement was performed. Multiple occurrences of old_str `x` in lines: 1, 2. " \
        "Please ensure it is unique"
    assert run(claude, command="insert", path="/memories/a.md", insert_line=5, insert_text="y") == \
        "ERROR: Invalid `insert_line` parameter: 5. It should be within the range [0, 2]."
    assert run(claude, command="rename", old_path="/memories/nope.md", new_path="/memories/b.md") == \
        "ERROR: The path /memories/nope.md does not exist"
    run(claude, command="create", path="/memories/b.md", file_text="b")
    before = snapshot(vault.root)
    assert run(claude, command="rename", old_path="/memories/a.md", new_path="/memories/b.md") == \
        "ERROR: The destination /memories/b.md already exists"
    assert run(claude, command="str_replace", path="/memories", old_str="x", new_str="y") == \
        "ERROR: The path /memories is not a file."
    assert run(claude, command="view").startswith("ERROR: Missing required parameter `path`")
    assert claude.call("memory", {"command": "explode", "path": "/memories"})["error"]["code"] == \
        "invalid_arguments"
    assert claude.call("memory", {"command": "view", "path": "/memories", "view_range": [1]})["error"]["code"] \
        == "invalid_arguments"
    assert snapshot(vault.root) == before


def test_claude_protected_and_huge(claude: Toolbox, vault: Vault) -> None:
    goal = vault.add("Learn Rust", "Goal.", type="goal", tier="long_term")
    path = "/memories/" + vault.files.view_path(goal.path)
    before = snapshot(vault.root)
    assert run(claude, command="delete", path=path).startswith("ERROR: ")
    assert run(claude, command="str_replace", path=path, old_str="Goal.", new_str="Nope.").startswith("ERROR: ")
    assert run(claude, command="rename", old_path=path, new_path="/memories/x.md").startswith("ERROR: ")
    assert claude.call("memory", {"command": "delete", "path": path})["error"]["code"] == "protected"
    assert claude.call("memory", {"command": "create", "path": "/memories/big.md",
                                  "file_text": "x" * 1_000_001})["error"]["code"] == "invalid_arguments"
    assert snapshot(vault.root) == before
    assert "Goal." in run(claude, command="view", path=path)


# ------------------------------------------------------------- the raw-file API
def test_rawfile_methods_guard_their_contracts(vault: Vault) -> None:
    from gitmem import Conflict, InvalidPath, NotFound
    done = vault.files.write_text("long_term/notes/a.md", "one\n", exists=False, author="raw")
    assert done.created and done.commit and done.paths == ["long_term/notes/a.md"]
    before = snapshot(vault.root)
    with pytest.raises(Conflict):
        vault.files.write_text("long_term/notes/a.md", "two\n", exists=False)
    with pytest.raises(NotFound):
        vault.files.write_text("long_term/notes/b.md", "two\n", exists=True)
    with pytest.raises(Conflict):  # an edit computed from stale text never lands
        vault.files.write_text("long_term/notes/a.md", "two\n", if_match="zero\n")
    with pytest.raises(InvalidPath):
        vault.files.write_text("notes/a.md", "x")  # not inside a tier folder
    with pytest.raises(InvalidPath):
        vault.files.write_text("long_term/.gitkeep", "x")
    with pytest.raises(Conflict):
        vault.files.write_text("long_term/notes/a.md/c.md", "x")  # a file is in the way
    with pytest.raises(InvalidPath):
        vault.files.remove_path("long_term")
    with pytest.raises(InvalidPath):
        vault.files.rename_path("long_term/notes", "long_term/notes/sub")
    with pytest.raises(InvalidPath):
        vault.files.rename_path("long_term/notes/a.md", "long_term/notes/a.md")
    assert snapshot(vault.root) == before
    assert vault.files.write_text("long_term/notes/a.md", "one\n").commit is None  # same text: no commit
    broken = vault.files.write_text("long_term/broken.md", "---\ntitle: [unclosed\n---\nbody\n")
    assert broken.problems and (vault.root / "long_term/broken.md").read_text().startswith("---\ntitle: [")
    moved = vault.files.rename_path("long_term/notes", "mid_term/notes")
    assert moved.paths == ["mid_term/notes/a.md"] and vault.files.read_text("mid_term/notes/a.md") == "one\n"
    assert vault.files.file_path("x/y.md") == "long_term/x/y.md"
    assert vault.files.view_path("long_term/x/y.md") == "x/y.md"
    assert vault.files.file_path("short_term/y.md") == "short_term/y.md"
