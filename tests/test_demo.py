"""``gitmem demo``: one command after ``pip install`` makes a vault with history from the
bundled sample, adds a memory, finds it and shows the git log; the sample ships inside
the package (one copy in the repository, mapped into the wheel by pyproject.toml)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from gitmem import Vault

from .conftest import REPO, SAMPLE, git


def gitmem(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitmem", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env)


def test_demo_makes_a_vault_with_history_finds_the_new_memory_and_prints_the_log(tmp_path: Path) -> None:
    done = gitmem("demo", "my-vault", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    vault_dir = tmp_path / "my-vault"
    # The history, as git itself reads it: the sample's commit, then the added memory's.
    assert git(vault_dir, "log", "--format=%s").splitlines() == [
        "add: Prefers dark mode", f"init: gitmem vault with {len(list(SAMPLE.rglob('*.md')))} memories from sample-vault"]
    assert git(vault_dir, "status", "--porcelain") == ""
    with Vault.open(vault_dir) as vault:
        memory = vault.get("Prefers dark mode")
        assert (memory.type, memory.tags, memory.tier) == ("preference", ["ui"], "short_term")
        assert len(vault.list(status=None)) == len(list(SAMPLE.rglob("*.md"))) + 1
    # Each step is shown as the command that does it by hand, then what that command prints.
    out = done.stdout
    assert re.findall(r"^==> (.*)$", out, re.M) == [
        f"gitmem init --from {SAMPLE} my-vault",
        'gitmem -C my-vault add "Prefers dark mode" "Use dark themes in every editor." --type preference --tag ui',
        'gitmem -C my-vault search "dark mode" --limit 1',
        "git -C my-vault log --oneline"]
    head = git(vault_dir, "rev-parse", "--short=7", "HEAD").strip()
    assert f"added {memory.id[:8]}  {memory.path}  (commit {head})" in out
    # The search result: the new memory, first.
    hit = re.search(r"search .*\n(.*)\n(.*)\n(.*)\n", out)
    assert hit and re.fullmatch(rf"\s*\d+\.\d\d  {memory.id[:8]}  short_term\s+preference\s+Prefers dark mode",
                                hit[1]), out
    assert "**dark**" in hit[2] and re.fullmatch(r"1 of \d+ result\(s\)", hit[3])
    # The log it prints is git's own.
    printed_log = out.split("log --oneline\n", 1)[1]
    assert printed_log == git(vault_dir, "log", "--oneline")


def test_demo_refuses_a_vault_and_changes_nothing(tmp_path: Path) -> None:
    assert gitmem("init", "my-vault", cwd=tmp_path).returncode == 0
    before = git(tmp_path / "my-vault", "log", "--oneline")
    done = gitmem("demo", "my-vault", cwd=tmp_path)
    assert done.returncode == 5, done.stdout + done.stderr
    assert "already a gitmem vault" in done.stderr and "==> gitmem -C" not in done.stdout
    assert git(tmp_path / "my-vault", "log", "--oneline") == before


def installed_copy(site: Path, *, with_sample: bool) -> dict[str, str]:
    """gitmem laid out as an installed wheel puts it (sample under gitmem/sample-vault, no
    checkout around it); the environment that imports it from there."""
    shutil.copytree(REPO / "gitmem", site / "gitmem", ignore=shutil.ignore_patterns("__pycache__"))
    if with_sample:
        shutil.copytree(SAMPLE, site / "gitmem" / "sample-vault")
    return {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}


def test_demo_runs_from_the_sample_inside_an_installed_package(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    env = installed_copy(site, with_sample=True)
    work = tmp_path / "work"
    work.mkdir()
    done = gitmem("demo", "v", cwd=work, env=env)
    assert done.returncode == 0, done.stderr
    assert f"==> gitmem init --from {site / 'gitmem' / 'sample-vault'} v\n" in done.stdout
    assert git(work / "v", "log", "-1", "--format=%s", "HEAD~1").startswith("init: gitmem vault with 33 memories")


def test_demo_without_its_sample_says_so(tmp_path: Path) -> None:
    env = installed_copy(tmp_path / "site-packages", with_sample=False)
    done = gitmem("demo", "v", cwd=tmp_path, env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.startswith("error: the sample vault is not installed with gitmem\nhint: ")
    assert not (tmp_path / "v").exists()


def test_the_wheel_holds_every_package_and_every_sample_note() -> None:
    """pyproject.toml lists the packages (one of them mapped from sample-vault/): the list
    must follow the folders, and the sample's patterns must take every note."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    packages = set(setuptools["packages"])
    code = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "gitmem").rglob("__init__.py")}
    sample = {"gitmem.sample-vault"} | {f"gitmem.sample-vault.{d.name}" for d in SAMPLE.iterdir() if d.is_dir()}
    assert packages == code | sample
    assert setuptools["package-dir"] == {"gitmem.sample-vault": "sample-vault"}
    shipped = {p for pattern in setuptools["package-data"]["gitmem.sample-vault"] for p in SAMPLE.glob(pattern)}
    assert shipped == {p for p in SAMPLE.rglob("*") if p.is_file()}
