"""The gitmem command: real subprocesses for the contract (exit codes, stderr,
JSON), click's runner for the many option combinations."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitmem.cli.main import cli

from .conftest import REPO, SAMPLE, assert_clean, git, documentation


def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "gitmem", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, input=stdin, timeout=120)


@pytest.fixture
def vault_dir(tmp_path: Path) -> Path:
    result = run("init", "--from", str(SAMPLE), str(tmp_path / "v"))
    assert result.returncode == 0, result.stderr
    return tmp_path / "v"


def invoke(vault_dir: Path, *args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--vault", str(vault_dir), *args], input=input, catch_exceptions=False)
    return result.exit_code, result.output


def test_quickstart_flow_in_real_processes(vault_dir: Path) -> None:
    added = run("add", "Maya bought a standing desk", "Desk arrives Friday.", "--type", "fact",
                "--tag", "office", "--json", cwd=vault_dir)
    assert added.returncode == 0, added.stderr
    memory = json.loads(added.stdout)
    assert memory["title"] == "Maya bought a standing desk" and memory["commit"]
    shown = run("show", memory["id"][:8], cwd=vault_dir)
    assert shown.returncode == 0 and "Desk arrives Friday." in shown.stdout
    assert "add: Maya bought a standing desk" in git(vault_dir, "log", "--oneline")
    assert_clean(vault_dir)  # the CLI process synced .git/index before exiting


def test_vault_from_env_and_author_option(vault_dir: Path, tmp_path: Path) -> None:
    result = run("--author", "Atlas <atlas@example.com>", "add", "Env vault works", cwd=tmp_path,
                 env={"GITMEM_VAULT": str(vault_dir)})
    assert result.returncode == 0, result.stderr
    assert git(vault_dir, "log", "-1", "--format=%an <%ae>").strip() == "Atlas <atlas@example.com>"


@pytest.mark.parametrize("args,code,needle", [
    (["show", "no-such-memory"], 3, "no memory matches"),
    (["add", ""], 2, "title is empty"),
    (["add", "x", "--path", "../escape.md"], 2, "leaves the vault"),
    (["rm", "never-send-client-data-to-third-party-services"], 4, "protected"),
    (["mv", "maya-lindqvist-core-profile", "nowhere"], 2, "unknown tier"),
    (["edit", "maya-lindqvist-core-profile", "--replace", "zzz-not-there", "x"], 2, "0 times"),
    (["diff", "maya-lindqvist-core-profile", "not-a-rev"], 3, "not a version"),
])
@pytest.mark.slow
def test_errors_are_one_line_with_exit_codes(vault_dir: Path, args: list[str], code: int, needle: str) -> None:
    head = git(vault_dir, "rev-parse", "HEAD")
    result = run(*args, cwd=vault_dir)
    assert result.returncode == code, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") and needle in result.stderr
    assert "Traceback" not in result.stderr
    assert git(vault_dir, "rev-parse", "HEAD") == head
    as_json = run(*args, "--json", cwd=vault_dir)
    assert as_json.returncode == code
    assert json.loads(as_json.stdout)["error"]["code"]


def test_not_a_vault(tmp_path: Path) -> None:
    result = run("ls", cwd=tmp_path)
    assert result.returncode == 3 and "not a gitmem vault" in result.stderr
    assert "hint:" in result.stderr


def test_body_from_stdin(vault_dir: Path) -> None:
    result = run("add", "From stdin", "--body-file", "-", "--json", cwd=vault_dir, stdin="piped body\n")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["body"] == "piped body\n"


@pytest.mark.slow
def test_every_command_through_the_runner(vault_dir: Path) -> None:
    code, out = invoke(vault_dir, "add", "Cycling route", "Along the river.", "--tier", "mid_term",
                       "--tag", "sport", "--importance", "4", "--entity", "Göta älv", "--json")
    assert code == 0
    mid = json.loads(out)["id"]
    code, out = invoke(vault_dir, "ls", "--tier", "mid_term", "--tag", "sport")
    assert code == 0 and re.search(rf"^{mid[:8]}\s+mid_term\s+memory\s+.*Cycling route  \[sport\]$", out, re.M)
    code, out = invoke(vault_dir, "edit", mid, "--append", "Bring lights.", "--set", "summary=River loop",
                       "--tag", "evening")
    assert code == 0 and out.startswith(f"updated {mid[:8]}")
    code, out = invoke(vault_dir, "update", mid, "--replace", "river", "canal")
    assert code == 0
    code, out = invoke(vault_dir, "mv", mid, "long_term")
    assert code == 0 and "-> long_term/" in out
    code, out = invoke(vault_dir, "log", mid)
    assert code == 0 and len(out.splitlines()) == 4 and out.startswith("~0 ")
    code, out = invoke(vault_dir, "history", mid, "--json")
    assert [v["op"] for v in json.loads(out)] == ["move", "update", "update", "add"]
    code, out = invoke(vault_dir, "diff", mid, "~3", "~2")
    assert code == 0 and "+Bring lights." in out
    code, out = invoke(vault_dir, "show", mid, "--at", "~3")
    assert code == 0 and "Along the river." in out and "Bring lights" not in out
    code, out = invoke(vault_dir, "rm", mid)
    assert code == 0 and "deleted (soft)" in out
    code, out = invoke(vault_dir, "ls", "--status", "deleted", "--json")
    assert [m["id"] for m in json.loads(out)] == [mid]
    code, out = invoke(vault_dir, "restore", mid, "~1")
    assert code == 0 and out.startswith(f"restored {mid[:8]}")
    code, out = invoke(vault_dir, "rm", mid, "--hard", "--json")
    assert code == 0 and not (vault_dir / json.loads(out)["path"]).exists()
    code, out = invoke(vault_dir, "edit", "never-send-client-data-to-third-party-services",
                       "--append", "Including screenshots.", "--force")
    assert code == 0
    assert "(forced)" in git(vault_dir, "log", "-1", "--format=%s")


@pytest.mark.slow
def test_help_lists_every_command_and_readme_documents_them() -> None:
    result = run("--help")
    assert result.returncode == 0
    commands = sorted(name for name, command in cli.commands.items() if not command.hidden)
    readme = documentation()
    for name in commands:
        assert re.search(rf"^\s+{name}\b", result.stdout, re.M), name
        assert f"gitmem {name}" in readme, f"the documentation does not cover 'gitmem {name}'"
        sub = run(name, "--help")
        assert sub.returncode == 0 and "Example" in sub.stdout, name


# ------------------------------------------------------- finding the vault
@pytest.mark.slow
def test_ls_finds_the_vault_from_a_subfolder_like_git(vault_dir: Path, tmp_path: Path) -> None:
    at_root = run("ls", "--json", cwd=vault_dir)
    assert at_root.returncode == 0, at_root.stderr
    listed = json.loads(at_root.stdout)
    assert len(listed) > 5
    deep = vault_dir / "long_term" / "some" / "folder"
    deep.mkdir(parents=True)
    for where in (vault_dir / "long_term", deep):
        result = run("ls", "--json", cwd=where)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == listed, where
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    from_env = run("ls", "--json", cwd=elsewhere, env={"GITMEM_VAULT": str(vault_dir)})
    assert from_env.returncode == 0, from_env.stderr
    assert json.loads(from_env.stdout) == listed
    # --vault beats $GITMEM_VAULT; a folder inside the vault works there too.
    explicit = run("--vault", str(deep), "ls", "--json", cwd=elsewhere, env={"GITMEM_VAULT": str(elsewhere)})
    assert explicit.returncode == 0 and json.loads(explicit.stdout) == listed


def test_outside_any_vault_the_error_names_the_absolute_folder(tmp_path: Path) -> None:
    outside = tmp_path / "no" / "vault" / "here"
    outside.mkdir(parents=True)
    for args, cwd, named in ((["ls"], outside, outside),
                             (["--vault", "vault/here", "ls"], tmp_path / "no", outside),
                             (["ls"], tmp_path, tmp_path)):
        result = run(*args, cwd=cwd)
        assert result.returncode == 3, (args, result.stderr)
        first = result.stderr.splitlines()[0]
        assert first.startswith("error: ") and f"{named} is not a gitmem vault" in first, first
        assert "Traceback" not in result.stderr and result.stdout == ""
    plain_git = tmp_path / "repo"
    (plain_git / "docs").mkdir(parents=True)
    git(plain_git, "init", "-q")
    result = run("ls", cwd=plain_git / "docs")
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert f"{plain_git / 'docs'} is not in a gitmem vault" in result.stderr
    assert f"the git repository at {plain_git}" in result.stderr


def test_an_edit_that_changes_nothing_reports_unchanged_and_commits_nothing(vault_dir: Path) -> None:
    added = run("add", "Stable fact", "Water boils at 100 C.", "--tag", "physics", "--json", cwd=vault_dir)
    mid = json.loads(added.stdout)["id"]
    head = git(vault_dir, "rev-parse", "HEAD")
    for args in ((), ("--tag", "physics"), ("--title", "Stable fact")):
        result = run("edit", mid[:8], *args, cwd=vault_dir)
        assert result.returncode == 0 and result.stdout.startswith(f"unchanged {mid[:8]}"), (args, result.stdout)
    as_json = json.loads(run("edit", mid[:8], "--tag", "physics", "--json", cwd=vault_dir).stdout)
    assert "commit" not in as_json and as_json["tags"] == ["physics"]
    assert git(vault_dir, "rev-parse", "HEAD") == head and git(vault_dir, "status", "--porcelain") == ""
    assert run("edit", mid[:8], "--tag", "heat", cwd=vault_dir).stdout.startswith(f"updated {mid[:8]}")


def test_a_code_repository_is_not_a_vault_for_any_front_door(tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "src").mkdir(parents=True)
    (code / "src" / "app.py").write_text("print('hi')\n")
    git(code, "init", "-q")
    git(code, "add", "-A")
    git(code, "commit", "-q", "-m", "code")
    head = git(code, "rev-parse", "HEAD")
    for args, cwd in ((["add", "oops", "x"], code), (["ls"], code), (["add", "oops", "x"], code / "src"),
                      (["-C", str(code), "add", "oops", "x"], tmp_path), (["mcp"], code)):
        result = run(*args, cwd=cwd)
        assert result.returncode == 3, (args, result.stderr)
        assert "not a gitmem vault" in result.stderr or "not in a gitmem vault" in result.stderr, result.stderr
        assert "gitmem init" in result.stderr and "--vault" in result.stderr and "GITMEM_VAULT" in result.stderr
    from_env = run("add", "oops", "x", cwd=tmp_path, env={"GITMEM_VAULT": str(code)})
    assert from_env.returncode == 3 and "not a gitmem vault" in from_env.stderr
    # The coding-agent hooks without --vault run in the project: they save nothing there either.
    payload = json.dumps({"session_id": "s1", "cwd": str(code), "transcript_path": str(tmp_path / "none.jsonl")})
    for event in ("session-start", "session-end"):
        hooked = run("agent", "hook", "claude-code", event, cwd=code, stdin=payload)
        assert hooked.returncode == 0 and "not a gitmem vault" in hooked.stderr, hooked.stderr
        assert "--vault" in hooked.stderr and hooked.stdout == ""
    assert git(code, "rev-parse", "HEAD") == head and git(code, "status", "--porcelain") == ""
    assert not (code / ".git" / "gitmem").exists() and not (code / "MEMORY.md").exists()


# ------------------------------------------------------------ init --from
def _notes_folder(tmp_path: Path) -> Path:
    """An Obsidian-like folder: notes in and outside tier folders, hidden folders, symlinks."""
    src = tmp_path / "Obsidian Notes"
    for rel, text in {"Projects/x.md": "---\ntitle: Project X\n---\nThe x project.\n",
                      "Projects/deep/y.md": "A deep note about y.\n",
                      "top.md": "A note at the top.\n",
                      "short_term/in-tier.md": "Already in a tier folder.\n",
                      ".obsidian/app.json": "{}",
                      ".obsidian/hidden.md": "Obsidian's own.\n",
                      ".trash/deleted.md": "Deleted in Obsidian.\n",
                      "Projects/.hidden/secret.md": "A hidden folder deeper down.\n"}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    (tmp_path / "elsewhere.md").write_text("Not part of the vault.\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "z.md").write_text("Behind a linked folder.\n")
    (src / "linked-note.md").symlink_to(tmp_path / "elsewhere.md")
    (src / "Linked folder").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    return src


def _memory_files(root: Path) -> set[str]:
    return {p for p in git(root, "ls-files").splitlines()
            if p.endswith(".md") and p != "MEMORY.md"}


@pytest.mark.parametrize("tier_args,tier", [([], "long_term"), (["--tier", "mid_term"], "mid_term")])
def test_init_from_imports_notes_outside_tiers_keeping_their_folders(tmp_path: Path, tier_args: list[str],
                                                                     tier: str) -> None:
    src = _notes_folder(tmp_path)
    # A relative --from: the output still says exactly where the notes came from.
    result = run("init", "--from", src.name, *tier_args, "dest", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    dest = tmp_path / "dest"
    assert _memory_files(dest) == {f"{tier}/Projects/x.md", f"{tier}/Projects/deep/y.md", f"{tier}/top.md",
                                   "short_term/in-tier.md"}
    assert (dest / tier / "Projects" / "x.md").read_bytes() == (src / "Projects" / "x.md").read_bytes()
    assert not any(".obsidian" in p or ".trash" in p or "hidden" in p or "elsewhere" in p or "inked" in p
                   for p in git(dest, "ls-files").splitlines())
    assert f"imported 4 notes from {src}" in result.stdout
    assert f"3 from outside the tier folders, now under {tier}/" in result.stdout
    assert git(dest, "status", "--porcelain") == ""
    listed = run("ls", "--json", cwd=dest)
    assert {m["title"] for m in json.loads(listed.stdout)} >= {"Project X", "y", "top", "in-tier"}


@pytest.mark.parametrize("dest_exists", [False, True])
def test_init_from_refused_leaves_the_folder_as_it_was(tmp_path: Path, dest_exists: bool) -> None:
    """A note the write checks refuse stops init before anything is committed; what init
    had made is removed again, so the same command works once the note is fixed."""
    src = tmp_path / "notes"
    src.mkdir()
    (src / "ok.md").write_text("# Fine\n\nAn ordinary note.\n")
    (src / "leak.md").write_text("password=" + "S3cr3t!Passw0rd" + "\n")
    dest = tmp_path / "dest"
    if dest_exists:
        dest.mkdir()
        (dest / "keep.txt").write_text("mine\n")
    refused = run("init", "--from", str(src), str(dest), cwd=tmp_path)
    assert refused.returncode != 0 and "secret" in refused.stderr
    assert "Traceback" not in refused.stderr
    if dest_exists:
        assert sorted(p.name for p in dest.iterdir()) == ["keep.txt"]
    else:
        assert not dest.exists()
    (src / "leak.md").write_text("A note without a secret.\n")
    again = run("init", "--from", str(src), str(dest), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert git(dest, "status", "--porcelain") == ("?? keep.txt\n" if dest_exists else "")


# ------------------------------------------------------- trailing newlines
def _ends_with_one_newline(vault_dir: Path, rel: str) -> None:
    data = (vault_dir / rel).read_bytes()
    assert data.endswith(b"\n") and not data.endswith(b"\n\n"), data[-40:]
    for shown in (git(vault_dir, "show", "HEAD", "--", rel), git(vault_dir, "diff", "HEAD~1", "HEAD", "--", rel)):
        assert "No newline at end of file" not in shown


@pytest.mark.slow
@pytest.mark.parametrize("body", ["Body without a newline", "Body with many newlines\n\n\n"])
def test_written_bodies_end_with_exactly_one_newline(vault_dir: Path, body: str) -> None:
    added = run("add", "Newline check", body, "--json", cwd=vault_dir)
    assert added.returncode == 0, added.stderr
    memory = json.loads(added.stdout)
    rel = memory["path"]
    _ends_with_one_newline(vault_dir, rel)
    for args in (["--body", body.replace("Body", "Replaced body")], ["--append", "Appended line"],
                 ["--append", "Appended with newlines\n\n\n"], ["--body", "Short"]):
        result = run("edit", memory["id"], *args, cwd=vault_dir)
        assert result.returncode == 0, (args, result.stderr)
        _ends_with_one_newline(vault_dir, rel)
    assert (vault_dir / rel).read_text().endswith("\n---\nShort\n")
    assert_clean(vault_dir)


# ------------------------------------------------------ doctor and MEMORY.md
@pytest.mark.slow
def test_doctor_after_a_plain_git_commit_is_a_notice_but_a_hand_edited_memory_md_fails(vault_dir: Path) -> None:
    assert run("doctor", cwd=vault_dir).returncode == 0
    note = vault_dir / "long_term" / "monthly-invoicing-in-fortnox.md"
    text = note.read_text()
    assert "title: Monthly invoicing in Fortnox\n" in text
    note.write_text(text.replace("title: Monthly invoicing in Fortnox\n", "title: Monthly invoicing in Visma\n"))
    git(vault_dir, "commit", "-qam", "retitle in a shell")     # MEMORY.md still says Fortnox
    assert "Monthly invoicing in Fortnox" in (vault_dir / "MEMORY.md").read_text()
    result = run("doctor", cwd=vault_dir)
    assert result.returncode == 0, result.stdout
    line = next(line for line in result.stdout.splitlines() if "memory-index" in line)
    assert line.startswith("ok ") and "behind memories committed with git" in line and "notice" in line
    as_json = json.loads(run("doctor", "--json", cwd=vault_dir).stdout)
    assert as_json["ok"] is True

    index = vault_dir / "MEMORY.md"
    index.write_text(index.read_text() + "- [[my-own-line]] added by hand\n")
    result = run("doctor", cwd=vault_dir)
    assert result.returncode == 1
    line = next(line for line in result.stdout.splitlines() if "memory-index" in line)
    assert line.startswith("FAIL") and "edited by hand" in line
    git(vault_dir, "commit", "-qam", "hand edit of MEMORY.md, committed")
    assert run("doctor", cwd=vault_dir).returncode == 1     # committed by hand: still a failure


# ----------------------------------------------------------------- help texts
def test_help_examples_quote_version_numbers_for_the_shell() -> None:
    """An unquoted ~1 is tilde-expanded by bash/zsh (the directory stack): examples quote it."""
    texts = {name: run(name, "--help").stdout for name in ("show", "restore", "diff", "rm", "log", "history")}
    assert "--at '~1'" in texts["show"]
    assert "'~1'" in texts["restore"]
    for name, text in texts.items():
        for line in text.splitlines():
            if line.strip().startswith("gitmem "):
                assert not re.search(r"(?<!')~\d", line), (name, line)
