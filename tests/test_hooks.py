"""Git hooks: installed into real repositories, run by the real git CLI.

After any git command that changes files, the next gitmem process must search,
list and show history as the files are (the post-* hooks run no Python: the
caches catch up when a vault is opened; the hooks only touch a stamp);
pre-commit must reject staged memories gitmem cannot read; and no hook may ever
block git because gitmem itself is missing or broken.
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
from gitmem.cli.main import cli
from gitmem.errors import Conflict
from gitmem.store.git import blob_id
from gitmem.outside.hooks import (HOOK_NAMES, MARKER, MANUAL_PY_LINE, STAMP, hook_script, hook_status, hooks_dir,
                          install_hooks, py_line, run_hook, staged_problems, uninstall_hooks)

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
    """What the search index of the next gitmem process to open the vault holds."""
    with Vault.open(root) as vault:
        return vault.services.searcher.index.indexed()


def search_total(root: Path, query: str) -> int:
    """What the next gitmem process finds."""
    with Vault.open(root) as vault:
        return vault.search(query).total


def stamp_mtime(root: Path) -> int | None:
    try:
        return (root / ".git" / "gitmem" / STAMP).stat().st_mtime_ns
    except FileNotFoundError:
        return None


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
        if name == "pre-commit":
            assert f"PY='{sys.executable}'\n" in text
            # One Python process, through gitmem.outside.hooks.main (not the click CLI).
            assert f"' \"$(git rev-parse --show-toplevel)\" {name} \"$@\"" in text
            assert text.count('"$PY" -c') == 1 and "from gitmem.outside.hooks import main" in text
        else:
            # The post-* hooks start no Python: the caches catch up when gitmem opens the vault.
            assert "PY=" not in text and "$PY" not in text and STAMP in text
        assert f"installed {name}" in out
    assert f"hooks run {sys.executable}" in out
    code, out = invoke(vault.root, "hooks", "status", "--json", monkeypatch=monkeypatch)
    states = json.loads(out)
    assert [s["name"] for s in states] == list(HOOK_NAMES)
    assert all(s["state"] == "gitmem" for s in states)
    assert (states[0]["python"], states[0]["python_ok"]) == (sys.executable, True)
    assert all(s["python"] is None for s in states[1:])
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
        expected = [(py_line("/opt/python/bin/python3"), MANUAL_PY_LINE)] if name == "pre-commit" else []
        assert differ == expected, name


# ------------------------------------------------------ post-* hooks: index
def test_git_commit_is_searchable_and_in_the_history_without_gitmem_being_asked(
        repo: Path, env: dict[str, str]) -> None:
    note = repo / "short_term" / "alpha.md"
    note.write_text(note.read_text() + "Edited in a shell: a quokka.\n")
    before = stamp_mtime(repo)
    result = run_git(repo, env, "commit", "-qam", "edit alpha by hand")
    assert result.stderr == ""  # quick and quiet
    assert stamp_mtime(repo) is not None and stamp_mtime(repo) != before  # the hook left its stamp
    # The next gitmem process searches and lists history as the files are.
    assert search_total(repo, "quokka") == 1
    assert indexed(repo)["short_term/alpha.md"] == blob_id(note.read_bytes())
    with Vault.open(repo) as vault:
        assert [v.subject for v in vault.history("alpha")][-1] == "edit alpha by hand"
        assert vault.get("alpha").body.endswith("a quokka.\n")


@pytest.mark.slow
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
        # The amended commit replaced the one it amends, in git's history and in gitmem's.
        assert [v.subject for v in vault.history("delta")] == ["delta and no alpha"]
        assert "marmot" in vault.show_at("delta", "~0").body
        assert vault.services.store.catalog.get("history_tip") == head(repo, env)


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
        assert hook_status(vault)[0].python_ok is False  # pre-commit: the only hook that runs Python
    (repo / "mid_term" / "bad.md").write_text("---\ntitle: [unclosed\n---\n")  # would be rejected
    run_git(repo, env, "add", "-A")
    before = stamp_mtime(repo)
    result = run_git(repo, env, "commit", "-qm", "gitmem is gone")
    warnings = result.stderr.splitlines()
    assert len(warnings) == 1
    assert warnings[0].startswith("gitmem: pre-commit hook skipped") and "not validated" in warnings[0]
    assert stamp_mtime(repo) != before  # post-commit needs no Python: it still did its part
    assert run_git(repo, env, "checkout", "-q", "HEAD~1").stderr == ""
    assert search_total(repo, "alpha") == 1  # and gitmem catches up when it next opens the vault


def test_hooks_fail_safe_when_gitmem_cannot_be_imported(repo: Path, env: dict[str, str], tmp_path: Path) -> None:
    broken = tmp_path / "python-without-gitmem"
    broken.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'gitmem'\" >&2\nexit 1\n")
    broken.chmod(0o755)
    with Vault.open(repo) as vault:
        install_hooks(vault, python=str(broken))
    (repo / "long_term" / "beta.md").write_text(GOOD.format(title="Beta", body="Still committed."))
    result = run_git(repo, env, "commit", "-qam", "import fails")
    ours = [line for line in result.stderr.splitlines() if line.startswith("gitmem:")]
    assert len(ours) == 1 and ours[0].startswith("gitmem: pre-commit hook skipped")
    assert search_total(repo, "committed") == 1


def test_hook_command_never_fails_the_git_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    assert run_hook("post-commit", [], tmp_path / "not-a-vault", lines.append) == 0
    assert lines and lines[0].startswith("gitmem: post-commit hook: ")
    assert run_hook("post-frobnicate", [], tmp_path, lines.append) == 0
    assert run_hook("pre-commit", [], tmp_path / "missing", lines.append) == 0  # cannot validate: let it through
    assert "not validated" in lines[-1]
    code, out = invoke(tmp_path / "not-a-vault", "hook", "post-merge", "0", monkeypatch=monkeypatch)
    assert code == 0 and "post-merge hook" in out


def test_post_hooks_run_through_python_only_touch_the_stamp(repo: Path, env: dict[str, str],
                                                            tmp_path: Path) -> None:
    """Hooks installed by an older gitmem run ``gitmem hook post-*``: still cheap and quiet."""
    lines: list[str] = []
    assert stamp_mtime(repo) is None
    for name in ("post-commit", "post-merge", "post-checkout", "post-rewrite"):
        assert run_hook(name, ["0"], repo, lines.append) == 0
    assert lines == [] and stamp_mtime(repo) is not None
    # A repository gitmem never opened gets no .git/gitmem folder, from Python or from sh.
    plain = tmp_path / "plain"
    run_git(tmp_path, env, "init", "-q", str(plain))
    assert run_hook("post-commit", [], plain, lines.append) == 0 and lines == []
    script = plain / "post-commit.sh"
    script.write_text(hook_script("post-commit"))
    assert subprocess.run(["sh", str(script)], cwd=plain, env=env, capture_output=True,
                          text=True).returncode == 0
    assert not (plain / ".git" / "gitmem").exists()


def test_pre_commit_imports_neither_dulwich_nor_whoosh_nor_click(repo: Path, env: dict[str, str]) -> None:
    """What a `git commit` pays for: one Python process that imports only the YAML check."""
    (repo / "short_term" / "alpha.md").write_text(GOOD.format(title="Alpha", body="Staged."))
    (repo / "mid_term" / "bad.md").write_text("---\ntitle: [unclosed\n---\n")
    run_git(repo, env, "add", "-A")
    code = ("import sys\n"
            "from gitmem.outside.hooks import main\n"
            "rc = main(sys.argv[1:])\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'dulwich', 'whoosh', 'click', 'sqlite3', 'watchdog'})\n"
            "print(rc, heavy)\n")
    result = subprocess.run([sys.executable, "-c", code, str(repo), "pre-commit"], cwd=repo, env=env,
                            capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "65 []"   # it did check (and reject), without them
    assert "mid_term/bad.md" in result.stderr


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
    seen = calls.read_text()
    assert "vault pre-commit" in seen  # the spy sees real hook runs
    assert "post-commit" not in seen   # post-* hooks start no Python
    calls.unlink()
    (repo / "short_term" / "alpha.md").write_text(GOOD.format(title="Alpha", body="Nested."))
    run_git(repo, {**env, "GITMEM_HOOK": "post-merge"}, "commit", "-qam", "inside another hook")
    assert not calls.exists()  # the guard: nothing runs while GITMEM_HOOK is set
