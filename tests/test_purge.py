"""``gitmem purge``: one memory leaves all of history; everything else stays as it was."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitmem import Vault
from gitmem.cli.main import cli

from .conftest import FakeClock, assert_clean, git

SECRET = "the-launch-code-" + "7781-alpha-zulu"


def everything_git_can_see(root: Path) -> str:
    """Every object git can still reach by any means, as one text; all but the
    tombstones, which name a purged memory by its id (checked by :func:`tombstone_text`)."""
    objects = git(root, "rev-list", "--exclude=refs/gitmem/*", "--all", "--objects")
    out = [objects, git(root, "log", "--exclude=refs/gitmem/*", "--all", "-p", "--format=%H %an %s%n%b")]
    for line in objects.splitlines():
        sha = line.split()[0]
        out.append(git(root, "cat-file", "-p", sha))
    return "\n".join(out)


def tombstone_objects(root: Path) -> set[str]:
    """The objects of the tombstones (ids and object ids of purged memories, never their text)."""
    if not git(root, "for-each-ref", "refs/gitmem/", check=False).strip():
        return set()
    return {line.split()[0] for line in git(root, "rev-list", "--objects", "refs/gitmem/purged").splitlines()}


def tombstone_text(root: Path) -> str:
    return "\n".join(git(root, "cat-file", "-p", sha) for sha in sorted(tombstone_objects(root)))


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
        report = v.purge(doomed.id)
        assert report.commits_dropped >= 4 and report.objects_pruned > 0
        assert len(report.paths) >= 2  # short_term, long_term and archive versions
        assert not v.exists(doomed.id)
        assert [(h.subject, h.author, h.date) for h in v.history(keep.id)] == keep_history
        assert v.search("launch").total == 0 and v.search("ordinary").total == 1
    seen = everything_git_can_see(root)
    assert SECRET not in seen and "Launch code notes" not in seen and doomed.id not in seen
    tombstone = tombstone_text(root)   # names the memory by id and object ids, never by its text
    assert doomed.id in tombstone and SECRET not in tombstone and "Launch code" not in tombstone
    assert "launch-code" not in tombstone   # nor its path
    assert git(root, "grep", SECRET, *git(root, "rev-list", "--all").split(), check=False) == ""
    assert git(root, "log", "--format=%an|%ad|%s", "--", keep.path) == other_commits
    assert git(root, "reflog", check=False).strip() == ""
    for stored in (root / ".git").rglob("*"):  # no cache kept a copy either
        if stored.is_file():
            assert SECRET.encode() not in stored.read_bytes(), stored
    assert_clean(root)


def test_purge_cli_needs_yes_and_gives_a_receipt(tmp_path: Path) -> None:
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
    assert data["id"] == m.id and "warning" not in data and "next gitmem sync" in data["next_sync"]
    assert data["old_head"] != data["new_head"] and data["objects_pruned"] > 0
    assert data["tombstone"].startswith(m.id)
    assert out.stderr == ""
    assert "personal data" not in git(root, "log", "--all", "-p")
    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=root, capture_output=True, text=True)
    assert fsck.returncode == 0 and fsck.stdout + fsck.stderr == ""


# --------------------------------------------------------------------------
# What else holds the text: conflict copies, notes, MEMORY.md; crash safety.

def fsck_full(root: Path) -> str:
    """``git fsck --full`` output; a clean repository prints nothing (no dangling object either)."""
    result = subprocess.run(["git", "fsck", "--full", "--strict"], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return (result.stdout + result.stderr).strip()


def all_objects_text(root: Path) -> str:
    """The content of every object in the store, reachable or not (stricter than rev-list),
    but the tombstones'."""
    listed = git(root, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split()
    wanted = "\n".join(sha for sha in listed if sha not in tombstone_objects(root)) + "\n"
    return subprocess.run(["git", "cat-file", "--batch"], cwd=root, input=wanted.encode(),
                          capture_output=True, check=True).stdout.decode("utf-8", "replace")


def assert_forgotten(root: Path, *texts: str) -> None:
    seen, stored, tombstones = everything_git_can_see(root), all_objects_text(root), tombstone_text(root)
    for text in texts:
        assert text not in seen and text not in stored, text
        assert text not in tombstones or re.fullmatch(r"[0-9a-f-]{36}", text), text   # ids only
    assert fsck_full(root) == ""
    assert git(root, "status", "--porcelain") == ""


def test_purge_removes_sync_conflict_copies(tmp_path: Path, clock: FakeClock) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    a = Vault.init(tmp_path / "a", author="agent-a", clock=clock)
    a.add_remote("origin", str(remote))
    keep = a.add("Deploy window", "Deploys happen on Tuesday.\n")
    m = a.add("Vault combination", f"The combination is {SECRET}-base.\n")
    a.sync()
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    clock.tick()
    a.update(m.id, body=f"The combination is {SECRET}-from-a.\n")
    b.update(m.id, body=f"The combination is {SECRET}-from-b.\n")
    a.sync()
    report = b.sync()
    assert len(report.conflicts) == 1
    copy_id = report.conflicts[0]["copy_id"]
    copy = b.get(copy_id)
    assert copy.meta["conflict_of"] == m.id and "from-a" in copy.body
    # A copy of the copy's text made by hand, whose conflict_of names nothing known:
    # same body as a purged version, so it holds the purged text too.
    stray = "short_term/stray-conflict-copy.md"
    (b.root / stray).write_text("---\nid: 0badc0de-0000-4000-8000-000000000000\ntitle: stray\n"
                                "status: conflict\nconflict_of: 11111111-2222-4333-8444-555555555555\n---\n"
                                f"The combination is {SECRET}-from-a.\n")
    b.flush()  # .git/index in line with HEAD before the git CLI commits from it
    git(b.root, "add", stray)
    git(b.root, "commit", "-q", "-m", "a person kept another copy")
    b.close()
    a.close()
    assert SECRET in everything_git_can_see(tmp_path / "b")

    with Vault.open(tmp_path / "b") as v:
        result = v.purge(m.id)
        assert copy_id in result.conflict_copies
        assert "0badc0de-0000-4000-8000-000000000000" in result.conflict_copies
        assert not v.exists(m.id) and not v.exists(copy_id)
        assert v.get(keep.id).body == "Deploys happen on Tuesday.\n"
        assert v.conflicts() == []
    root = tmp_path / "b"
    assert not (root / stray).exists() and not (root / copy.path).exists()
    assert_forgotten(root, SECRET, copy_id, "Vault combination")
    assert "Deploy window" in git(root, "show", "HEAD:MEMORY.md")


def test_purge_drops_notes_holding_the_text_and_moves_the_others(tmp_path: Path, clock: FakeClock) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="tester", clock=clock) as v:
        doomed = v.add("Launch code notes", f"first version {SECRET}\n")
        clock.tick()
        keep = v.add("Keep me", "ordinary memory\n")
        clock.tick()
        v.update(doomed.id, append="a later line")
        doomed_commit, keep_commit, head = (
            git(root, "log", "--format=%H", "-1", f"--grep={word}", "--all").strip()
            for word in ("add: Launch", "add: Keep", "update: Launch"))
    git(root, "notes", "add", "-m", SECRET, "HEAD")                       # the reported case
    git(root, "notes", "add", "-m", "reviewed, fine to ship", keep_commit)  # keeps its note
    git(root, "notes", "--ref=review", "add", "-m", f"see {doomed.path}", doomed_commit)
    git(root, "notes", "--ref=review", "add", "-m", f"mentions {SECRET[:20]}...", keep_commit)
    assert SECRET in everything_git_can_see(root)

    with Vault.open(root) as v:
        report = v.purge(doomed.id)
        assert report.notes_dropped == 3
        assert v.get(keep.id).title == "Keep me"
    assert_forgotten(root, SECRET, doomed.path, "Launch code notes")
    new_keep = git(root, "log", "--format=%H", "-1", "--grep=add: Keep").strip()
    assert new_keep != keep_commit  # rewritten (its parent changed) and its note followed it
    assert git(root, "notes", "show", new_keep).strip() == "reviewed, fine to ship"
    assert [line.split()[1] for line in git(root, "notes", "list").splitlines()] == [new_keep]
    assert git(root, "rev-parse", "--verify", "-q", "refs/notes/review", check=False) == ""  # no note left
    assert head not in git(root, "rev-list", "--all")


def test_purge_regenerates_memory_index_in_the_new_head(tmp_path: Path, clock: FakeClock) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="tester", clock=clock) as v:
        v.add("Keep me", "ordinary memory\n")
        doomed = v.add("Launch code notes", f"{SECRET}\n")
        clock.tick()
        v.add("Keep me too", "another ordinary memory\n")
    before = git(root, "show", "HEAD:MEMORY.md")
    assert "3 active memories" in before and "Launch code notes" in before
    with Vault.open(root) as v:
        report = v.purge(doomed.id)
        assert report.memory_index_regenerated
        regenerated = v.render_memory_md().decode()
    head_index = git(root, "show", "HEAD:MEMORY.md")
    assert head_index == regenerated == (root / "MEMORY.md").read_text()
    assert "2 active memories" in head_index and "short_term (2)" in head_index
    assert "Launch code notes" not in head_index and "Keep me too" in head_index
    assert git(root, "log", "-1", "--format=%s") == "add: Keep me too\n"  # regenerated in place, no new commit
    assert_forgotten(root, SECRET, "Launch code notes")


def test_doctor_finds_an_index_naming_a_missing_blob_and_rebuilds_it(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="tester") as v:
        m = v.add("Indexed", "some text\n")
    # What a prune killed between the objects and the index leaves: entries naming
    # blobs that are gone (one for a HEAD path, one for a path HEAD does not have).
    for path, text in ((m.path, "an edit staged, then pruned\n"), ("short_term/ghost.md", "ghost\n")):
        sha = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=root, input=text, text=True,
                             capture_output=True, check=True).stdout.strip()
        git(root, "update-index", "--add", "--cacheinfo", f"100644,{sha},{path}")
        (root / ".git" / "objects" / sha[:2] / sha[2:]).unlink()
    broken = subprocess.run(["git", "fsck", "--full"], cwd=root, capture_output=True, text=True)
    assert "missing blob" in broken.stdout + broken.stderr
    with Vault.open(root) as v:
        found = {f.check: f for f in v.doctor()}["git-index"]
        assert not found.ok and "missing blob" in found.summary
        assert sorted(found.details) == sorted([m.path, "short_term/ghost.md"])
        fixed = {f.check: f for f in v.doctor(repair=True)}["git-index"]
        assert sorted(fixed.repaired) == sorted([m.path, "short_term/ghost.md"])
        assert {f.check: f for f in v.doctor()}["git-index"].ok
    assert_forgotten(root)


class Killed(BaseException):
    """Stands for SIGKILL: nothing catches it, nothing after it runs."""


@pytest.mark.slow
@pytest.mark.parametrize("step", ["objects", "refs", "worktree", "gc", "caches"])
def test_a_purge_stopped_at_any_step_is_finished_by_the_next_process(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    import gitmem.sync.rewrite as purge_module
    root = tmp_path / "vault"
    with Vault.init(root, author="tester", clock=clock) as v:
        keep = v.add("Keep me", "ordinary memory\n")
        doomed = v.add("Launch code notes", f"{SECRET}\n")
        clock.tick()
        v.update(doomed.id, append="again")
        v.add("Later", "added after\n")
    git(root, "notes", "add", "-m", SECRET, "HEAD")
    head = git(root, "rev-parse", "HEAD").strip()
    target = {"objects": "store_objects", "refs": "_move_refs", "worktree": "_update_worktree",
              "gc": "forget_old_objects", "caches": "rebuild_caches"}[step]
    real = getattr(purge_module, target)

    def half_then_killed(*args: object) -> None:
        if step == "objects":  # a pack write cut short: a temp pack and no index
            pack_dir = root / ".git" / "objects" / "pack"
            pack_dir.mkdir(parents=True, exist_ok=True)
            (pack_dir / "tmpab12cd.pack").write_bytes(b"PACK\x00\x00\x00\x02 half")
        else:
            real(*args)  # the step did its work (or part of it): re-running it must be harmless
        raise Killed()

    monkeypatch.setattr(purge_module, target, half_then_killed)
    v = Vault.open(root)
    with pytest.raises(Killed):
        v.purge(doomed.id)
    monkeypatch.setattr(purge_module, target, real)
    assert (root / ".git" / "gitmem" / "purge-journal").exists()
    out = CliRunner().invoke(cli, ["--vault", str(root), "ls", "--json"])  # the next process
    assert out.exit_code == 0, out.output
    listed = {m["id"] for m in json.loads(out.stdout)}
    assert not (root / ".git" / "gitmem" / "purge-journal").exists()
    if step == "objects":  # rolled back: nothing had changed
        assert doomed.id in listed and git(root, "rev-parse", "HEAD").strip() == head
        assert SECRET in git(root, "notes", "show", "HEAD")
        assert fsck_full(root) == "" and git(root, "status", "--porcelain") == ""
    else:
        assert doomed.id not in listed and keep.id in listed
        assert_forgotten(root, SECRET, "Launch code notes")
        assert "Launch code notes" not in git(root, "show", "HEAD:MEMORY.md")
    log = (root / ".git" / "gitmem" / "recovery.log").read_text()
    assert ("rolled back a purge" if step == "objects" else f"killed during its {step} step") in log
    v.close()
    assert_clean(root)


def test_purge_leaves_no_index_entry_naming_a_pruned_blob(tmp_path: Path, clock: FakeClock) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, author="tester", clock=clock) as v:
        doomed = v.add("Launch code notes", f"{SECRET}\n")
        v.add("Keep me", "ordinary memory\n")
    (root / "draft.txt").write_text("a person's staged draft\n")
    git(root, "add", "draft.txt")  # staged, never committed: only .git/index names its blob
    with Vault.open(root) as v:
        v.purge(doomed.id)
    assert fsck_full(root) == ""  # the index was rebuilt from HEAD before unreachable blobs were pruned
    assert git(root, "status", "--porcelain") == "?? draft.txt\n"  # the file stays, unstaged
    assert (root / "draft.txt").read_text() == "a person's staged draft\n"
