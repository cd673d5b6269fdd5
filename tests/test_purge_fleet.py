"""Forgetting across machines: a purge travels with sync (tombstones), rewrites the
remote only with a lease, and every other clone forgets the memory at its next sync."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gitmem import Vault
from gitmem.cli.main import cli
from gitmem.errors import SyncError
from gitmem.sync.syncer import Syncer

from .conftest import FakeClock, assert_clean, git
from .git_http_server import GitHttpServer, http_backend

CANARY = "QUOKKA7731CANARY"
USER, PASSWORD = "gitmem-user", "s3cret-token-42"


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    return bare


def _blobs_of(root: Path, text: str) -> set[str]:
    """Ids of every object (any ref, reflog, or unreachable) whose content holds ``text``."""
    out = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)"],
                         cwd=root, capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():
        sha, kind = line.split()
        if kind == "blob" and text.encode() in subprocess.run(["git", "cat-file", "blob", sha], cwd=root,
                                                               capture_output=True, check=True).stdout:
            found.add(sha)
    return found


def _all_objects(root: Path) -> set[str]:
    out = git(root, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    return set(out.split())


def assert_forgotten(root: Path, blob_ids: set[str], *, bare: bool = False) -> None:
    """``CANARY`` is nowhere: work tree, history, reflogs, objects (loose and packed), caches."""
    if not bare:
        for path in root.rglob("*"):
            if path.is_file() and ".git" not in path.parts:
                assert CANARY not in path.read_text(encoding="utf-8", errors="replace"), path
        for path in (root / ".git" / "gitmem").rglob("*"):   # catalog, search index, as-of, vectors
            if path.is_file():
                assert CANARY.encode() not in path.read_bytes(), path
        assert not _all_objects(root) & blob_ids
        assert not _blobs_of(root, CANARY)
        assert CANARY not in git(root, "log", "-g", "--all", "-p", check=False)   # reflogs
        assert CANARY not in git(root, "notes", "list", check=False)
    assert CANARY not in git(root, "log", "--all", "-p")
    revs = git(root, "rev-list", "--all").split()
    assert not revs or git(root, "grep", "-c", CANARY, *revs, check=False) == ""
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def _canary_blobs(*roots: Path) -> set[str]:
    found: set[str] = set()
    for root in roots:
        found |= _blobs_of(root, CANARY)
    return found


def _shared_canary(tmp_path: Path, remote: Path, clock: FakeClock, title: str = "Canary") -> tuple[Vault, Any]:
    """Vault ``a`` (remote ``origin``) holding a canary memory and an ordinary one, synced."""
    a = Vault.init(tmp_path / "a", author="agent-a", clock=clock)
    a.add_remote("origin", str(remote))
    canary = a.add(title, f"The code is {CANARY}.")
    a.add("Ordinary", "Nothing secret here.")
    a.sync()
    return a, canary


def _titles(vault: Vault) -> set[str]:
    return {m.title for m in vault.list()}


def _gitmem(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command, in its own process."""
    return subprocess.run([sys.executable, "-m", "gitmem", "--vault", str(root), *args],
                          capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_a_purge_reaches_every_clone_over_a_path_remote(tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    a = Vault.init(tmp_path / "a", author="agent-a", clock=clock)
    a.add_remote("origin", str(remote))
    a.add("Ordinary", "Nothing secret here.")
    canary = a.add("Canary", f"The code is {CANARY}.")
    a.add("Later", "Added after the canary.")
    a.sync()
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    c = Vault.clone(str(remote), tmp_path / "c", author="agent-c", clock=clock)
    # b's own unpushed work: an edit of the canary and an unrelated memory.
    clock.tick()
    b.update(canary.id, append=f"b adds more about {CANARY}.")
    b_note = b.add("From b", "Unrelated work of b.")
    blobs = _canary_blobs(a.root, b.root)
    assert len(blobs) >= 2

    # a purges and syncs: the remote is rewritten with a lease.
    out = _gitmem(a.root, "purge", canary.id, "--yes", "--json")
    assert out.returncode == 0, out.stderr
    receipt = json.loads(out.stdout)
    assert receipt["old_head"] != receipt["new_head"] and receipt["objects_pruned"] > 0
    assert receipt["commits_rewritten"] + receipt["commits_dropped"] >= 2
    status = json.loads(_gitmem(a.root, "purge", "--status", "--json").stdout)
    assert [r["state"] for r in status["remotes"]] == ["not yet rewritten"]
    assert status["remotes"][0]["holds_old_history"] is True
    a.close()
    a = Vault.open(tmp_path / "a", clock=clock)
    report = a.sync()
    assert report.pushed and git(remote, "rev-parse", "main").strip() == a.head
    assert_forgotten(remote, blobs, bare=True)
    text = _gitmem(a.root, "purge", "--status").stdout
    assert "origin: rewritten" in text and "1 purge(s) known here" in text

    # b syncs: the canary leaves its history (its own edit too); its other work survives and is pushed.
    report = b.sync()
    assert canary.id in report.purged and report.pushed
    assert_forgotten(b.root, blobs)
    assert_clean(b.root)
    assert "Canary" not in _titles(b) and b.search(CANARY).total == 0
    assert "From b" in _titles(b) and b.get(b_note.id).body.strip() == "Unrelated work of b."
    assert git(remote, "rev-parse", "main").strip() == b.head
    log = git(b.root, "log", "--format=%an %s")
    assert "agent-b add: From b" in log   # author and message kept

    # more ordinary work while c stays offline
    for i in range(3):
        clock.tick()
        a.add(f"A later {i}", "more")
        a.sync()
        b.add(f"B later {i}", "more")
        b.sync()
    c_note = c.add("From c", "Written offline.")
    c.close()
    out = _gitmem(c.root, "sync")   # c comes back, in its own process
    assert out.returncode == 0, out.stderr
    c = Vault.open(tmp_path / "c", clock=clock)
    assert_forgotten(c.root, blobs)
    assert "From c" in _titles(c) and c.get(c_note.id)
    for v in (a, b):
        v.sync()
    assert len({a.head, b.head, c.head, git(remote, "rev-parse", "main").strip()}) == 1
    for v in (a, b, c):
        v.flush()
        assert_clean(v.root)
        assert_forgotten(v.root, blobs)
    assert_forgotten(remote, blobs, bare=True)
    for v in (a, b, c):
        v.close()


@pytest.mark.slow
def test_the_lease_refuses_a_racing_push_and_the_purge_rewrites_what_arrived(
        tmp_path: Path, remote: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    a, canary = _shared_canary(tmp_path, remote, clock)
    path = a.get(canary.id).path
    writer = tmp_path / "writer"   # a plain git user on another machine, who never heard of the purge
    git(tmp_path, "clone", "-q", str(remote), str(writer))
    git(writer, "config", "user.name", "racer")
    git(writer, "config", "user.email", "racer@example.org")
    a.purge(canary.id)
    blobs = _canary_blobs(writer)
    real_push = Syncer._push
    raced: list[str] = []

    def push_after_a_racer(self: Syncer, *args: object) -> None:
        if not raced:   # between a's fetch and a's push, the racer pushes onto the old history
            (writer / path).write_text((writer / path).read_text() + f"racer edit {CANARY}\n")
            (writer / "short_term" / "racer.md").write_text("---\ntitle: Racer\n---\nThe racer's note.\n")
            git(writer, "add", "-A")
            git(writer, "commit", "-q", "-m", "racer: edit and add")
            git(writer, "push", "-q", "origin", "main")
            raced.append(git(writer, "rev-parse", "HEAD").strip())
        real_push(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Syncer, "_push", push_after_a_racer)
    report = a.sync()
    assert raced and report.retries >= 1 and report.pushed
    tip = git(remote, "rev-parse", "main").strip()
    assert tip == a.head and tip != raced[0]
    assert "The racer's note." in git(remote, "show", "main:short_term/racer.md")
    assert "racer: edit and add" in git(remote, "log", "--format=%s", "main")   # rewritten, not lost
    assert_forgotten(remote, blobs, bare=True)
    assert_forgotten(a.root, blobs)
    a.close()


@pytest.mark.slow
@pytest.mark.skipif(http_backend() is None, reason="git http-backend is not installed")
def test_a_purge_travels_over_smart_http(tmp_path: Path, clock: FakeClock,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "srv"
    root.mkdir()
    bare = root / "vault.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(bare))
    git(bare, "config", "core.logAllRefUpdates", "true")   # the server keeps a reflog of its branch
    monkeypatch.setenv("GITMEM_GIT_USERNAME", USER)
    monkeypatch.setenv("GITMEM_GIT_PASSWORD", PASSWORD)
    with GitHttpServer(root, (USER, PASSWORD)) as server:
        url = server.url("vault.git")
        a = Vault.init(tmp_path / "a", author="agent-a", clock=clock)
        a.add_remote("origin", url)
        canary = a.add("Canary", f"The code is {CANARY}.")
        a.add("Ordinary", "Nothing secret here.")
        a.sync()
        b = Vault.clone(url, tmp_path / "b", author="agent-b", clock=clock)
        b.add("From b", "b's own work")
        blobs = _canary_blobs(a.root)
        a.purge(canary.id)
        assert a.sync().pushed
        rewritten = git(bare, "rev-parse", "main").strip()
        assert b.sync().purged == [canary.id]
        assert a.sync().action == "fast_forward"
        assert a.head == b.head == git(bare, "rev-parse", "main").strip()
        # The server's reflog: the leased rewrite, and no later update brings the canary back.
        entries = git(bare, "reflog", "show", "--format=%H", "main").split()
        assert rewritten in entries and len(entries) >= 3, entries
        for sha in entries[: entries.index(rewritten) + 1]:
            assert git(bare, "grep", "-c", CANARY, sha, check=False) == ""
        for v in (a, b):
            assert_forgotten(v.root, blobs)
            v.close()
        assert_forgotten(bare, blobs, bare=True)
        assert any("git-receive-pack" in r for r in server.requests)
    gc.collect()


def test_uncommitted_edits_to_a_purged_memory_stop_the_sync_with_what_to_do(
        tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    a = Vault.init(tmp_path / "a", author="agent-a", clock=clock)
    a.add_remote("origin", str(remote))
    canary = a.add("Canary", f"The code is {CANARY}.")
    a.sync()
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    path = b.get(canary.id).path
    a.purge(canary.id)
    a.sync()
    edited = b.root / path
    edited.write_text(edited.read_text() + "an edit not committed yet\n")
    head = b.head
    with pytest.raises(SyncError) as caught:
        b.sync()
    assert caught.value.code == "purged_content" and path in caught.value.message
    assert "delete" in (caught.value.hint or "") and b.head == head
    git(b.root, "checkout", "--", path)   # what the hint says: drop the edit
    assert b.sync().purged == [canary.id]
    assert CANARY not in git(b.root, "log", "--all", "-p") and not edited.exists()
    a.close()
    b.close()


def test_purge_receipt_and_status_in_text(tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    with Vault.init(tmp_path / "a", author="agent-a", clock=clock) as a:
        a.add_remote("origin", str(remote))
        m = a.add("Forget me", "personal data")
        a.sync()
    runner = CliRunner()
    out = runner.invoke(cli, ["--vault", str(tmp_path / "a"), "purge", m.id, "--yes"])
    assert out.exit_code == 0, out.output
    assert "commit(s) rewritten" in out.output and "object(s) pruned" in out.output
    assert "tombstone" in out.output and "next gitmem sync" in out.output
    out = runner.invoke(cli, ["--vault", str(tmp_path / "a"), "purge", "--status"])
    assert "origin: not yet rewritten (still holds the old history)" in out.output, out.output
    out = runner.invoke(cli, ["--vault", str(tmp_path / "a"), "status"])
    assert "purges        1 made or applied here" in out.output and "origin not synced since" in out.output
    out = runner.invoke(cli, ["--vault", str(tmp_path / "a"), "sync"])
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["--vault", str(tmp_path / "a"), "purge", "--status"])
    assert "origin: rewritten" in out.output, out.output
    out = runner.invoke(cli, ["--vault", str(tmp_path / "a"), "status"])
    assert "origin has the rewritten history" in out.output, out.output


def test_a_rewrite_deletes_the_view_page_the_html_view_writes() -> None:
    from gitmem.exchange.view import DEFAULT_PAGE
    from gitmem.sync.rewrite import VIEW_PAGE
    assert VIEW_PAGE == DEFAULT_PAGE   # the rewrite cannot import the view (a layer above it)


@pytest.mark.slow
def test_two_clones_purging_different_memories_at_once_converge(tmp_path: Path, remote: Path,
                                                                 clock: FakeClock) -> None:
    a = Vault.init(tmp_path / "a", author="agent-a", clock=clock)
    a.add_remote("origin", str(remote))
    first = a.add("Canary one", f"First {CANARY}.")
    a.add("Ordinary", "Nothing secret here.")
    second = a.add("Canary two", f"Second {CANARY}.")
    a.sync()
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    blobs = _canary_blobs(a.root)
    a.purge(first.id)
    b.purge(second.id)   # each clone forgets one; neither has seen the other's purge
    b.add("From b", "b's own work")
    a.sync()
    report = b.sync()   # b applies a's tombstone, rewrites what arrived, and pushes both tombstones
    assert first.id in report.purged and report.pushed
    assert a.sync().purged == [second.id]
    assert a.head == b.head == git(remote, "rev-parse", "main").strip()
    assert _titles(a) == _titles(b) == {"Ordinary", "From b"}
    tombstones = git(remote, "ls-tree", "--name-only", "refs/gitmem/purged").split()
    assert len(tombstones) == 2
    for root in (a.root, b.root):
        assert_forgotten(root, blobs)
    assert_forgotten(remote, blobs, bare=True)
    a.close()
    b.close()


@pytest.mark.slow
def test_a_purge_by_another_process_during_a_fetch_never_merges_the_old_history(
        tmp_path: Path, remote: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    a, canary = _shared_canary(tmp_path, remote, clock)
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    b.add("From b", "b's own work")
    b.sync()
    b.close()
    a.sync()   # a holds b's commit: the remote's tip is a commit a has
    blobs = _canary_blobs(a.root)
    real_fetch = Syncer._fetch
    purged: list[str] = []

    def fetch_then_purge_elsewhere(self: Syncer, *args: object) -> bytes | None:
        tip = real_fetch(self, *args)  # type: ignore[arg-type]
        if not purged:   # another process (the CLI) purges while this sync holds no lock
            out = _gitmem(a.root, "purge", canary.id, "--yes", "--json")
            assert out.returncode == 0, out.stderr
            purged.append(json.loads(out.stdout)["new_head"])
        return tip

    monkeypatch.setattr(Syncer, "_fetch", fetch_then_purge_elsewhere)
    report = a.sync()
    assert purged and report.pushed
    head = a.head
    assert head == git(remote, "rev-parse", "main").strip() == purged[0]   # no merge with the old tip
    assert len(git(a.root, "log", "--format=%p", "-1", head).split()) <= 1
    assert_forgotten(a.root, blobs)
    assert_forgotten(remote, blobs, bare=True)
    assert a.sync().action in ("up_to_date", "pushed")
    a.close()


def test_doctor_reports_and_repairs_a_commit_whose_parent_is_missing(tmp_path: Path, clock: FakeClock) -> None:
    vault = Vault.init(tmp_path / "v", author="agent", clock=clock)
    vault.add("Kept", "Everything here stays.")
    root = vault.root
    head = git(root, "rev-parse", "HEAD").strip()
    tree = git(root, "rev-parse", "HEAD^{tree}").strip()
    # What an older gitmem left: a merge whose second parent (old history) was pruned.
    gone = git(root, "commit-tree", tree, "-p", head, "-m", "old history").strip()
    merge = git(root, "commit-tree", tree, "-p", head, "-p", gone, "-m", "sync: merge origin/main").strip()
    git(root, "update-ref", "refs/heads/main", merge)
    (root / ".git" / "objects" / gone[:2] / gone[2:]).unlink()
    vault.close()
    vault = Vault.open(root, clock=clock)
    findings = {f.check: f for f in vault.doctor()}
    assert list(findings) == ["history"] and not findings["history"].ok
    assert gone[:12] in findings["history"].summary and "--repair" in findings["history"].summary
    repaired = {f.check: f for f in vault.doctor(repair=True)}
    assert repaired["history"].ok and repaired["history"].repaired
    assert subprocess.run(["git", "fsck", "--no-dangling"], cwd=root, capture_output=True).returncode == 0
    assert git(root, "rev-parse", "HEAD^{tree}").strip() == tree
    assert _titles(vault) == {"Kept"}
    assert all(f.ok for f in vault.doctor() if f.check in ("history", "fsck"))
    vault.close()


@pytest.mark.slow
def test_applying_a_tombstone_leaves_no_mention_of_the_memory_in_the_sync_state(
        tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    a, canary = _shared_canary(tmp_path, remote, clock, title="Canary zebrafinch")
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    c = Vault.clone(str(remote), tmp_path / "c", author="agent-c", clock=clock)
    clock.tick()
    a.update(canary.id, body=f"The code is {CANARY}, from a.\n")
    b.update(canary.id, body=f"The code is {CANARY}, from b.\n")
    c.update(canary.id, body=f"The code is {CANARY}, from c.\n")
    a.sync()
    assert b.sync().conflicts   # b's state lists a conflict copy of the canary (its path names it)
    state = tmp_path / "b" / ".git" / "gitmem" / "sync-state.json"
    assert "zebrafinch" in state.read_text()
    b.sync()
    a.purge(canary.id)
    a.sync()
    assert canary.id in b.sync().purged
    # c merges its own edit (a new conflict copy) in the very sync that applies the tombstone.
    report = c.sync()
    assert canary.id in report.purged and not report.conflicts
    for root in (tmp_path / "b", tmp_path / "c"):
        text = (root / ".git" / "gitmem" / "sync-state.json").read_text()
        assert "zebrafinch" not in text and canary.id not in text, text
    for vault in (a, b, c):
        vault.close()


@pytest.mark.slow
def test_a_purged_version_that_reaches_the_store_again_is_pruned_by_the_next_sync(
        tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    a, canary = _shared_canary(tmp_path, remote, clock)
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    old = git(b.root, "cat-file", "blob", f"HEAD:{b.get(canary.id).path}")
    a.purge(canary.id)
    a.sync()
    b.sync()
    # A pack written before the tombstone was applied (a fetch completing a thin pack with
    # it as a base, say) puts an old version back, unreachable, in a pack (and loose).
    sha = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=b.root, input=old, capture_output=True,
                         text=True, check=True).stdout.strip()
    blobs = {sha}
    subprocess.run(["git", "pack-objects", "-q", str(b.root / ".git" / "objects" / "pack" / "pack")],
                   cwd=b.root, input=sha + "\n", capture_output=True, text=True, check=True)
    assert _blobs_of(b.root, CANARY)
    b.close()
    b = Vault.open(tmp_path / "b", clock=clock)
    b.sync()
    assert_forgotten(b.root, blobs)
    a.close()
    b.close()


@pytest.mark.slow
def test_a_purge_during_a_push_never_leaves_a_tracking_ref_on_a_pruned_commit(
        tmp_path: Path, remote: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync pushes without the vault lock; a purge run meanwhile (another process) rewrites
    the commit being pushed.  The sync must not then record the old commit as the remote's
    tip: its objects are pruned, and ``git fsck`` would report the ref."""
    a, canary = _shared_canary(tmp_path, remote, clock)
    a.add("Later", "Written after the last sync.")
    blobs = _canary_blobs(a.root)
    real_push = Syncer._push
    purged: list[bool] = []

    def push_then_purge(self: Syncer, *args: object) -> None:
        real_push(self, *args)  # type: ignore[arg-type]
        if not purged:   # between the push and its bookkeeping: the person purges
            done = _gitmem(a.root, "purge", canary.id, "--yes")
            assert done.returncode == 0, done.stderr
            purged.append(True)

    monkeypatch.setattr(Syncer, "_push", push_then_purge)
    report = a.sync()
    assert purged and report.pushed and report.retries >= 1
    tracked = git(a.root, "rev-parse", "refs/remotes/origin/main").strip()
    assert git(a.root, "cat-file", "-t", tracked).strip() == "commit"
    assert tracked == a.head == git(remote, "rev-parse", "main").strip()
    assert git(a.root, "fsck", "--full", "--no-progress").strip() == ""
    assert_forgotten(a.root, blobs)
    assert_forgotten(remote, blobs, bare=True)
    a.close()
