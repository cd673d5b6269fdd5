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

from gitmem.cli import cli

from .conftest import REPO, SAMPLE, assert_clean, git


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


def test_help_lists_every_command_and_readme_documents_them() -> None:
    result = run("--help")
    assert result.returncode == 0
    commands = sorted(name for name, command in cli.commands.items() if not command.hidden)
    readme = (REPO / "README.md").read_text()
    for name in commands:
        assert re.search(rf"^\s+{name}\b", result.stdout, re.M), name
        assert f"gitmem {name}" in readme, f"README does not document 'gitmem {name}'"
        sub = run(name, "--help")
        assert sub.returncode == 0 and "Example" in sub.stdout, name
