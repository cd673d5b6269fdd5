"""``gitmem purge``: one memory leaves all of history; everything else stays as it was."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from click.testing import CliRunner

from gitmem import Vault
from gitmem.cli import cli
from gitmem.purge import purge

from .conftest import FakeClock, assert_clean, git

SECRET = "the-launch-code-" + "7781-alpha-zulu"


def everything_git_can_see(root: Path) -> str:
    """Every object git can still reach by any means the issue names, as one text."""
    objects = git(root, "rev-list", "--all", "--objects")
    out = [objects, git(root, "log", "--all", "-p", "--format=%H %an %s%n%b")]
    for line in objects.splitlines():
        sha = line.split()[0]
        out.append(git(root, "cat-file", "-p", sha))
    return "\n".join(out)


def test_purge_removes_every_version_and_keeps_the_rest(tmp_path: Path, clock: FakeClock) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="tester", clock=clock) as v:
        keep = v.add("Keep me", "ordinary memory\n", tags=["x"])
        clock.tick()
        doomed = v.add("Launch code notes", f"first version {SECRET}\n")
        clock.tick()
        v.update(keep.id, append="second paragraph")
        clock.tick()
        v.update(doomed.id, append=f"again {SECRET}")
        clock.tick()
        v.move(doomed.id, "long_term")
        clock.tick()
        v.update(keep.id, title="Keep me (renamed)")
        v.delete(doomed.id)  # soft delete: archived, still in history
        keep_history = [(h.subject, h.author, h.date) for h in v.history(keep.id)]
        other_commits = git(root, "log", "--format=%an|%ad|%s", "--", keep.path)
    assert SECRET in everything_git_can_see(root)
    git(root, "tag", "-a", "v1", "-m", "a tag on the old history")

    with Vault.open(root) as v:
        report = purge(v, doomed.id)
        assert report.commits_dropped >= 4 and report.objects_pruned > 0
        assert len(report.paths) >= 2  # short_term, long_term and archive versions
        assert not v.exists(doomed.id)
        assert [(h.subject, h.author, h.date) for h in v.history(keep.id)] == keep_history
        assert v.search("launch").total == 0 and v.search("ordinary").total == 1
    seen = everything_git_can_see(root)
    assert SECRET not in seen and "Launch code notes" not in seen and doomed.id not in seen
    assert git(root, "grep", SECRET, *git(root, "rev-list", "--all").split(), check=False) == ""
    assert git(root, "log", "--format=%an|%ad|%s", "--", keep.path) == other_commits
    assert git(root, "reflog", check=False).strip() == ""
    for stored in (root / ".git").rglob("*"):  # no cache kept a copy either
        if stored.is_file():
            assert SECRET.encode() not in stored.read_bytes(), stored
    assert_clean(root)


def test_purge_cli_needs_yes_and_warns_about_remotes(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="tester") as v:
        m = v.add("Forget me", "personal data\n")
    runner = CliRunner()
    out = runner.invoke(cli, ["--vault", str(root), "purge", m.id])
    assert out.exit_code == 2 and "--yes" in out.output, (out.output, out.exception)
    assert "personal data" in git(root, "log", "-p")
    out = runner.invoke(cli, ["--vault", str(root), "purge", m.id[:8], "--yes", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["id"] == m.id and "force-push" in data["warning"]
    assert "warning: Remotes and other clones" in out.stderr
    assert "personal data" not in git(root, "log", "--all", "-p")
    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=root, capture_output=True, text=True)
    assert fsck.returncode == 0 and fsck.stdout + fsck.stderr == ""
