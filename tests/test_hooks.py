"""Git hooks: installed into real repositories, run by the real git CLI.

The post-* hooks must leave the search index matching the files after any git
command that changes them, without gitmem being asked; pre-commit must reject
staged memories gitmem cannot read; and no hook may ever block git because
gitmem itself is missing or broken.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from gitmem import Vault
from gitmem.cli import cli
from gitmem.errors import Conflict
from gitmem.gitstore import blob_id
from gitmem.hooks import (HOOK_NAMES, MARKER, MANUAL_PY_LINE, hook_script, hook_status, hooks_dir,
                          install_hooks, py_line, run_hook, staged_problems, uninstall_hooks)
from gitmem.search import SearchIndex

from .conftest import REPO

GOOD = "---\ntitle: {title}\ntype: fact\n---\n{body}\n"


# ------------------------------------------------------------------ helpers
@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Environment for git commands whose hooks run ``python -m gitmem ... hook``."""
    return dict(os.environ)


def run_git(root: Path, env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


def head(root: Path, env: dict[str, str]) -> str:
    return run_git(root, env, "rev-parse", "HEAD").stdout.strip()


def indexed(root: Path) -> dict[str, str]:
    index = SearchIndex(root / ".git" / "gitmem" / "index")
    try:
        return index.indexed()
    finally:
        index.close()


def search_total(root: Path, query: str) -> int:
    index = SearchIndex(root / ".git" / "gitmem" / "index")
    try:
        return index.search(query).total
    finally:
        index.close()


def files_on_disk(root: Path) -> dict[str, str]:
    """Every memory file in the working tree -> its blob id (what the index must hold)."""
    out = {}
    for tier in ("short_term", "mid_term", "long_term", "archive"):
        for file in (root / tier).rglob("*.md"):
            out[file.relative_to(root).as_posix()] = blob_id(file.read_bytes())
    return out


@pytest.fixture
def repo(tmp_path: Path, env: dict[str, str]) -> Iterator[Path]:
    """A vault with two memories, a built index and gitmem's hooks; no Vault left open."""
    with Vault.init(tmp_path / "vault", author="tester") as vault:
        vault.add("Alpha", "Alpha body.", path="short_term/alpha.md")
        vault.add("Beta", "Beta body.", path="long_term/beta.md")
        vault.search("alpha")  # builds the index
        install_hooks(vault)
    yield tmp_path / "vault"


def invoke(root: Path, *args: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--vault", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.output


# -------------------------------------------------------------- installing
def test_install_writes_executable_hooks_that_record_the_interpreter(vault: Vault,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = invoke(vault.root, "hooks", "install", monkeypatch=monkeypatch)
    assert code == 0, out
    folder = vault.root / ".git" / "hooks"
    for name in HOOK_NAMES:
        path = folder / name
        text = path.read_text()
        assert path.stat().st_mode & stat.S_IXUSR
        assert text.startswith("#!/bin/sh\n") and f"{MARKER} {name}\n" in text
        assert f"PY='{sys.executable}'\n" in text
        assert f'-m gitmem --vault "$(git rev-parse --show-toplevel)" hook {name} "$@"' in text
        assert f"installed {name}" in out
    assert f"hooks run {sys.executable}" in out
    code, out = invoke(vault.root, "hooks", "status", "--json", monkeypatch=monkeypatch)
    states = json.loads(out)
    assert [s["name"] for s in states] == list(HOOK_NAMES)
    assert all(s["state"] == "gitmem" and s["python"] == sys.executable and s["python_ok"] for s in states)
    # Installing again replaces gitmem's own hooks without complaint.
    assert invoke(vault.root, "hooks", "install", monkeypatch=monkeypatch)[0] == 0


def test_a_foreign_hook_is_not_clobbered_without_force(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = vault.root / ".git" / "hooks"
    mine = "#!/bin/sh\necho 'my own checks'\n"
    (folder / "pre-commit").write_text(mine)
    code, out = invoke(vault.root, "hooks", "install", monkeypatch=monkeypatch)
    assert code == 5 and "not gitmem's: pre-commit" in out and "--force" in out
    assert (folder / "pre-commit").read_text() == mine
    assert not (folder / "post-commit").exists()  # nothing written at all
    with pytest.raises(Conflict):
        install_hooks(vault)

    code, out = invoke(vault.root, "hooks", "install", "--force", monkeypatch=monkeypatch)
    assert code == 0 and "your hook kept as" in out
    assert (folder / "pre-commit.pre-gitmem").read_text() == mine
    assert [s.state for s in hook_status(vault)] == ["gitmem"] * 5

    code, out = invoke(vault.root, "hooks", "uninstall", monkeypatch=monkeypatch)
    assert code == 0 and "removed post-commit" in out and "restored pre-commit" in out
    assert (folder / "pre-commit").read_text() == mine and not (folder / "pre-commit.pre-gitmem").exists()
    code, out = invoke(vault.root, "hooks", "status", monkeypatch=monkeypatch)
    assert "pre-commit     foreign" in out and out.count(" missing ") == 4
    assert uninstall_hooks(vault) == []  # the foreign hook stays

    install_hooks(vault, force=True)
    (folder / "pre-commit").write_text(mine.replace("my own", "newer"))  # a second foreign hook
    with pytest.raises(Conflict, match="exists already"):
        install_hooks(vault, force=True)  # would overwrite the kept copy: refused
    assert (folder / "pre-commit.pre-gitmem").read_text() == mine


def test_core_hooks_path_is_respected(vault: Vault, env: dict[str, str]) -> None:
    run_git(vault.root, env, "config", "core.hooksPath", ".githooks")
    with Vault.open(vault.root) as reopened:
        assert hooks_dir(reopened) == vault.root / ".githooks"
        install_hooks(reopened)
    assert sorted(p.name for p in (vault.root / ".githooks").iterdir()) == sorted(HOOK_NAMES)
    assert not (vault.root / ".git" / "hooks" / "post-commit").exists()


def test_hooks_folder_copies_equal_the_generated_templates() -> None:
    for name in HOOK_NAMES:
        shipped = REPO / "hooks" / name
        assert shipped.read_text() == hook_script(name, manual=True), name
        assert shipped.stat().st_mode & stat.S_IXUSR, name
        generated = hook_script(name, "/opt/python/bin/python3").splitlines()
        manual = shipped.read_text().splitlines()
        differ = [(a, b) for a, b in zip(generated, manual) if a != b]
        assert len(generated) == len(manual)
        assert differ == [(py_line("/opt/python/bin/python3"), MANUAL_PY_LINE)], name


# ------------------------------------------------------ post-* hooks: index
def test_git_commit_updates_the_index_without_gitmem_being_asked(repo: Path, env: dict[str, str]) -> None:
    note = repo / "short_term" / "alpha.md"
    note.write_text(note.read_text() + "Edited in a shell: a quokka.\n")
    result = run_git(repo, env, "commit", "-qam", "edit alpha by hand")
    assert result.stderr == ""  # quick and quiet
    # No Vault has been opened since the commit: only the post-commit hook can have done this.
    assert indexed(repo)["short_term/alpha.md"] == blob_id(note.read_bytes())
    assert search_total(repo, "quokka") == 1
    with Vault.open(repo) as vault:
        assert vault.catalog.get("history_tip") == head(repo, env)  # the hook recorded the commit
        assert [v.subject for v in vault.history("alpha")][-1] == "edit alpha by hand"


def test_checkout_merge_and_pull_leave_the_index_matching_the_files(repo: Path, env: dict[str, str],
                                                                    tmp_path: Path) -> None:
    alpha = repo / "short_term" / "alpha.md"
    alpha.write_text(alpha.read_text() + "Version two.\n")
    run_git(repo, env, "commit", "-qam", "alpha v2")
    assert indexed(repo) == files_on_disk(repo)

    run_git(repo, env, "checkout", "-q", "HEAD~1")          # post-checkout: old version back
    assert "Version two" not in alpha.read_text()
    assert indexed(repo) == files_on_disk(repo)
    run_git(repo, env, "checkout", "-q", "main")
    assert indexed(repo) == files_on_disk(repo)

    run_git(repo, env, "checkout", "-qb", "feature")
    (repo / "mid_term" / "gamma.md").write_text(GOOD.format(title="Gamma", body="Gamma from a branch: okapi."))
    run_git(repo, env, "add", "-A")
    run_git(repo, env, "commit", "-qm", "gamma on a branch")
    run_git(repo, env, "checkout", "-q", "main")            # gamma disappears from disk and index
    assert indexed(repo) == files_on_disk(repo) and "mid_term/gamma.md" not in indexed(repo)
    beta = repo / "long_term" / "beta.md"
    beta.write_text(beta.read_text() + "Main moved on.\n")
    run_git(repo, env, "commit", "-qam", "beta on main")
    run_git(repo, env, "merge", "-q", "--no-edit", "feature")   # post-merge (a real merge commit)
    assert indexed(repo) == files_on_disk(repo) and search_total(repo, "okapi") == 1

    clone = tmp_path / "clone"
    run_git(tmp_path, env, "clone", "-q", f"file://{repo}", str(clone))
    (clone / "long_term" / "delta.md").write_text(GOOD.format(title="Delta", body="Pulled from a clone: tapir."))
    (clone / "short_term" / "alpha.md").unlink()
    run_git(clone, env, "add", "-A")
    run_git(clone, env, "commit", "-qm", "delta and no alpha")
    run_git(repo, env, "pull", "-q", "--no-rebase", f"file://{clone}", "main")  # fast-forward: post-merge
    assert indexed(repo) == files_on_disk(repo)
    assert "short_term/alpha.md" not in indexed(repo) and search_total(repo, "tapir") == 1

    delta = repo / "long_term" / "delta.md"
    delta.write_text(delta.read_text() + "Amended: a marmot.\n")
    run_git(repo, env, "commit", "-q", "-a", "--amend", "--no-edit")  # post-commit + post-rewrite
    assert indexed(repo) == files_on_disk(repo) and search_total(repo, "marmot") == 1
    with Vault.open(repo) as vault:
        assert vault.catalog.get("history_tip") == head(repo, env)


# --------------------------------------------------------------- pre-commit
@pytest.mark.parametrize("content,problem", [
    (b"---\ntitle: [unclosed\n---\nBody.\n", "frontmatter is not valid YAML"),
    (b"---\ntitle: Odd\ntype: gossip\n---\nBody.\n", "unknown type 'gossip'"),
    (b"---\ntitle: Latin-1\n---\nCaf\xe9 au lait.\n", "not UTF-8"),
    (b"---\ntitle: Bomb\nimportance: 9\n---\nBody.\n", "importance"),
])
def test_pre_commit_rejects_a_bad_staged_memory(repo: Path, env: dict[str, str], content: bytes,
                                                problem: str) -> None:
    before = head(repo, env)
    (repo / "mid_term" / "bad.md").write_bytes(content)
    run_git(repo, env, "add", "mid_term/bad.md")
    result = run_git(repo, env, "commit", "-qm", "bad memory", check=False)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0].startswith("gitmem: mid_term/bad.md: ") and problem in lines[0]
    assert "git commit --no-verify" in lines[-1]
    assert head(repo, env) == before


def test_pre_commit_checks_the_staged_content_not_the_working_tree(repo: Path, env: dict[str, str]) -> None:
    note = repo / "short_term" / "staged.md"
    note.write_text("---\ntitle: [broken\n---\n")
    run_git(repo, env, "add", "short_term/staged.md")
    note.write_text(GOOD.format(title="Fixed", body="Fixed only on disk."))
    assert run_git(repo, env, "commit", "-qm", "staged is broken", check=False).returncode == 1
    run_git(repo, env, "add", "short_term/staged.md")
    note.write_text("---\ntitle: [broken again\n---\n")     # the working tree is broken now
    assert run_git(repo, env, "commit", "-qm", "staged is fine").returncode == 0
    # `git commit -a` stages into a temporary index (GIT_INDEX_FILE): that is what gets checked.
    assert run_git(repo, env, "commit", "-qam", "broken via -a", check=False).returncode == 1
    assert staged_problems(repo) == []  # the real index still holds the good version


def test_pre_commit_accepts_valid_memories_and_ignores_other_files(repo: Path, env: dict[str, str]) -> None:
    (repo / "short_term" / "valid.md").write_text(GOOD.format(title="Valid", body="Fine."))
    (repo / "short_term" / "plain.md").write_text("# No frontmatter at all\n\nStill a memory.\n")
    (repo / "notes").mkdir()
    (repo / "notes" / "scratch.md").write_text("---\ntitle: [not a memory: not under a tier\n---\n")
    (repo / "short_term" / "data.txt").write_bytes(b"\xff\xfe binary-ish")
    run_git(repo, env, "add", "-A")
    result = run_git(repo, env, "commit", "-qm", "mixed")
    assert result.stderr == ""


# --------------------------------------------------------------- fail safe
def test_hooks_fail_safe_when_the_interpreter_is_gone(repo: Path, env: dict[str, str], tmp_path: Path) -> None:
    with Vault.open(repo) as vault:
        install_hooks(vault, python=str(tmp_path / "deleted-venv" / "bin" / "python"))
        assert {s.python_ok for s in hook_status(vault)} == {False}
    (repo / "mid_term" / "bad.md").write_text("---\ntitle: [unclosed\n---\n")  # would be rejected
    run_git(repo, env, "add", "-A")
    result = run_git(repo, env, "commit", "-qm", "gitmem is gone")
    warnings = result.stderr.splitlines()
    assert len(warnings) == 2
    assert warnings[0].startswith("gitmem: pre-commit hook skipped") and "not validated" in warnings[0]
    assert warnings[1].startswith("gitmem: post-commit hook skipped")
    assert run_git(repo, env, "checkout", "-q", "HEAD~1").stderr.startswith("gitmem: post-checkout hook skipped")


def test_hooks_fail_safe_when_gitmem_cannot_be_imported(repo: Path, env: dict[str, str], tmp_path: Path) -> None:
    broken = tmp_path / "python-without-gitmem"
    broken.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'gitmem'\" >&2\nexit 1\n")
    broken.chmod(0o755)
    with Vault.open(repo) as vault:
        install_hooks(vault, python=str(broken))
    (repo / "long_term" / "beta.md").write_text(GOOD.format(title="Beta", body="Still committed."))
    result = run_git(repo, env, "commit", "-qam", "import fails")
    assert "pre-commit hook skipped" in result.stderr and "post-commit hook skipped" in result.stderr


def test_hook_command_never_fails_the_git_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    assert run_hook("post-commit", [], tmp_path / "not-a-vault", lines.append) == 0
    assert lines and lines[0].startswith("gitmem: post-commit hook: ")
    assert run_hook("post-frobnicate", [], tmp_path, lines.append) == 0
    assert run_hook("pre-commit", [], tmp_path / "missing", lines.append) == 0  # cannot validate: let it through
    assert "not validated" in lines[-1]
    code, out = invoke(tmp_path / "not-a-vault", "hook", "post-merge", "0", monkeypatch=monkeypatch)
    assert code == 0 and "post-merge hook" in out


# ------------------------------------------------------------ re-entrancy
def test_gitmem_writes_run_no_hooks_and_the_guard_stops_reentry(repo: Path, env: dict[str, str],
                                                                tmp_path: Path) -> None:
    calls = tmp_path / "hook-calls.log"
    spy = tmp_path / "spy-python"
    spy.write_text(f"#!/bin/sh\necho \"$GITMEM_HOOK $*\" >> '{calls}'\nexec '{sys.executable}' \"$@\"\n")
    spy.chmod(0o755)
    with Vault.open(repo, author="agent") as vault:
        install_hooks(vault, python=str(spy))
        memory = vault.add("Written by gitmem", "No hook runs for this.")
        vault.update(memory.id, append="Nor for this.")
        vault.move(memory.id, "mid_term")
        (repo / "long_term" / "beta.md").write_text(GOOD.format(title="Beta", body="Outside edit."))
        assert vault.commit_outside_edits() is not None
        vault.delete(memory.id, hard=True)
    assert not calls.exists()  # gitmem's own commits never run hooks

    (repo / "short_term" / "alpha.md").write_text(GOOD.format(title="Alpha", body="By git."))
    run_git(repo, env, "commit", "-qam", "by git")
    assert "post-commit -m gitmem" in calls.read_text()  # the spy sees real hook runs
    calls.unlink()
    (repo / "short_term" / "alpha.md").write_text(GOOD.format(title="Alpha", body="Nested."))
    run_git(repo, {**env, "GITMEM_HOOK": "post-merge"}, "commit", "-qam", "inside another hook")
    assert not calls.exists()  # the guard: nothing runs while GITMEM_HOOK is set
