"""Sync through a git remote: a bare repository and clones in tmp_path, real
dulwich transport, cross-checked with the git CLI (graph, fsck, status)."""

from __future__ import annotations

import gc
import http.server
import itertools
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitmem import SyncError, Vault
from gitmem.cli.main import cli
from gitmem.errors import InvalidInput
from gitmem.sync.remotes import redact
from gitmem.sync.syncer import Syncer
from gitmem.write.merge import merge_lines, merge_memory

from .conftest import FakeClock, assert_clean, git

OPS = ("none", "edit", "tag", "move", "archive", "soft", "hard")


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    return bare


def _first(tmp_path: Path, remote: Path, clock: FakeClock, name: str = "a") -> Vault:
    vault = Vault.init(tmp_path / name, author=f"agent-{name}", clock=clock)
    vault.add_remote("origin", str(remote))
    return vault


def _diverged(tmp_path: Path, remote: Path, clock: FakeClock) -> tuple[Vault, Vault]:
    """Clones a and b of one remote, each with a write the other has not seen."""
    a = _first(tmp_path, remote, clock)
    a.add("Base", "base")
    a.sync()
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    a.add("From a", "alpha")
    b.add("From b", "bravo")
    return a, b


def _converged(a: Vault, b: Vault, reader: Vault) -> None:
    """After a's sync: b syncs too, both hold the same tree and every write (closes both)."""
    b.sync()
    _check_same(a, b)
    assert {m.title for m in reader.list()} == {"Base", "From a", "From b"}
    a.close()
    b.close()


def _tree(vault: Vault) -> dict[str, str]:
    return dict(line.split("\t", 1)[::-1] for line in git(vault.root, "ls-tree", "-r", "HEAD").splitlines())


def _all_text(vault: Vault) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(vault.root.rglob("*.md"))
                     if ".git" not in p.parts)


def _check_same(*vaults: Vault) -> None:
    trees = [_tree(v) for v in vaults]
    assert all(t == trees[0] for t in trees)
    for v in vaults:
        v.flush()
        assert_clean(v.root)
        assert v.head == vaults[0].head


def _apply(vault: Vault, op: str, ref: str, side: str, i: int) -> None:
    if op == "edit":
        vault.update(ref, append=f"Edited by {side} marker{side}{i}x.")
    elif op == "tag":
        vault.update(ref, add_tags=[f"tag{side}"])
    elif op == "move":
        vault.move(ref, "mid_term" if side == "a" else "long_term")
    elif op == "archive":
        vault.move(ref, "archive")
    elif op == "soft":
        vault.delete(ref)
    elif op == "hard":
        vault.delete(ref, hard=True)


@pytest.mark.slow
def test_every_combination_of_operations_on_both_sides(tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    a = _first(tmp_path, remote, clock)
    combos = list(itertools.product(OPS, OPS))
    ids = [a.add(f"Shared {i}", f"Shared memory number {i}.\n", tags=["shared"]).id for i in range(len(combos))]
    a.sync()
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    c = Vault.clone(str(remote), tmp_path / "c", author="agent-c", clock=clock)
    for i, (op_a, op_b) in enumerate(combos):
        clock.tick()
        _apply(a, op_a, ids[i], "a", i)
        _apply(b, op_b, ids[i], "b", i)
    new_a = a.add("Added on a", "Fresh from alpha newalphaword.").id
    new_b = b.add("Added on b", "Fresh from bravo newbravoword.").id
    assert a.sync().action == "pushed"
    report = b.sync()
    assert report.action == "merge" and report.pushed and report.arrived > 0
    assert a.sync().action == "fast_forward"
    assert c.sync().action == "fast_forward"
    _check_same(a, b, c)

    graph = git(a.root, "log", "--graph", "--oneline")
    assert "sync: merge origin/main" in graph and "|\\" in graph
    parents = git(a.root, "log", "-1", "--format=%P").split()
    assert len(parents) == 2
    text = _all_text(c)
    for i, (op_a, op_b) in enumerate(combos):
        rows = [m for m in c.list(status=None) if m.id == ids[i]]
        copies = [m for m in c.list(status="conflict") if m.meta.get("conflict_of") == ids[i]]
        for side, op in (("a", op_a), ("b", op_b)):
            if op == "edit":
                assert f"marker{side}{i}x" in text, (op_a, op_b)
        if "hard" in (op_a, op_b) and {op_a, op_b} <= {"hard", "none"}:
            assert not rows, (op_a, op_b)
            continue
        assert len(rows) == 1, (op_a, op_b, rows)
        memory = rows[0]
        for side, op in (("a", op_a), ("b", op_b)):
            if op == "tag":
                assert f"tag{side}" in memory.tags + [t for m in copies for t in m.tags], (op_a, op_b)
        movers = {side: op for side, op in (("a", op_a), ("b", op_b)) if op in ("move", "archive", "soft")}
        if len(movers) == 1 and not copies:
            side, op = next(iter(movers.items()))
            tier = {"move": "mid_term" if side == "a" else "long_term"}.get(op, "archive")
            assert memory.tier == tier, (op_a, op_b)
        if op_a == op_b == "edit" or (len(movers) == 2 and op_a != op_b):
            assert copies, (op_a, op_b)  # both changed the same thing differently
        if {op_a, op_b} in ({"edit", "tag"}, {"edit", "move"}, {"tag", "move"}, {"edit", "archive"}):
            assert not copies and memory.id in report.merged, (op_a, op_b)
    conflicts = c.conflicts()
    assert conflicts and all(x["original_path"] for x in conflicts)
    assert {x["id"] for x in conflicts} == {x["copy_id"] for x in report.conflicts}
    for vault, word, mid in ((a, "newbravoword", new_b), (b, "newalphaword", new_a), (c, "newalphaword", new_a)):
        assert [h.id for h in vault.search(word).hits] == [mid]
    assert a.history(new_b)[0].subject == "add: Added on b"
    for v in (a, b, c):
        v.close()


def test_conflict_copy_is_listed_linked_and_resolvable(tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    a = _first(tmp_path, remote, clock)
    m = a.add("Deploy window", "Deploys happen on Tuesday.\n", tags=["ops"])
    a.sync()
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    a.update(m.id, body="Deploys happen on Wednesday.\n")
    b.update(m.id, body="Deploys happen on Thursday.\n")
    a.sync()
    report = b.sync()
    assert len(report.conflicts) == 1
    copy_id = report.conflicts[0]["copy_id"]
    ours, theirs = b.get(m.id), b.get(copy_id)
    assert "Thursday" in ours.body and "Wednesday" in theirs.body
    assert theirs.status == "conflict" and theirs.meta["conflict_of"] == m.id
    assert {"id": m.id, "relation": "derived_from"} in theirs.meta["related"]
    assert "sync-conflict" in theirs.tags and theirs.tier == ours.tier
    code, out = _invoke(b.root, "conflicts", "--json")
    assert code == 0 and json.loads(out)[0]["conflict_of"] == m.id
    a.sync()
    assert [x["id"] for x in a.conflicts()] == [copy_id]
    a.delete(copy_id, hard=True)  # resolved: ours wins
    a.sync()
    b.sync()
    assert a.conflicts() == [] and b.conflicts() == []
    _check_same(a, b)
    a.close()
    b.close()


def test_push_race_is_retried(tmp_path: Path, remote: Path, clock: FakeClock,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _diverged(tmp_path, remote, clock)
    original = Syncer._push
    raced: list[bool] = []

    def racing_push(self: Syncer, *args: object) -> None:
        if self is a.services.syncer and not raced:
            raced.append(True)
            assert b.sync().pushed  # another clone pushes between our integrate and push
        original(self, *args)

    monkeypatch.setattr(Syncer, "_push", racing_push)
    report = a.sync()
    assert report.retries == 1 and report.pushed and report.action == "merge"
    _converged(a, b, b)


def test_fetch_racing_a_push_integrates_what_it_fetched(tmp_path: Path, remote: Path, clock: FakeClock,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # dulwich's local-path client reads the remote's refs again after copying the
    # objects: a push landing in between must not hand back a tip never fetched.
    a, b = _diverged(tmp_path, remote, clock)
    original = Syncer._client
    raced: list[bool] = []

    def racing_client(self: Syncer, url: str) -> tuple[object, str]:
        client, path = original(self, url)
        if self is a.services.syncer:
            real = client.fetch

            def fetch(where: object, target: object, determine_wants: object = None, **kw: object) -> object:
                def wants(refs: dict[bytes, bytes], *args: object, **kwargs: object) -> list[bytes]:
                    out = determine_wants(refs, *args, **kwargs)  # type: ignore[operator]
                    if not raced:
                        raced.append(True)
                        assert b.sync().pushed  # lands after a chose what to fetch
                    return out
                return real(where, target, determine_wants=wants, **kw)
            client.fetch = fetch  # type: ignore[method-assign]
        return client, path

    monkeypatch.setattr(Syncer, "_client", racing_client)
    report = a.sync()
    assert raced and report.pushed and report.retries == 1 and report.action == "merge"
    _converged(a, b, a)


def test_push_meeting_a_held_ref_lock_is_retried(tmp_path: Path, remote: Path, clock: FakeClock,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Another clone's push holds refs/heads/main.lock (and may fail: the branch
    # need not move), so the retry is not taken for a refusal.
    a = _first(tmp_path, remote, clock)
    a.add("Base", "base")
    a.sync()
    a.add("Next", "next")
    original = Syncer._push
    lock = remote / "refs" / "heads" / "main.lock"
    held: list[bool] = []

    def push_while_locked(self: Syncer, *args: object) -> None:
        if held:
            return original(self, *args)
        held.append(True)
        lock.write_text("")
        try:
            original(self, *args)
        finally:
            lock.unlink()

    monkeypatch.setattr(Syncer, "_push", push_while_locked)
    report = a.sync()
    assert report.pushed and report.retries == 1
    assert git(remote, "rev-parse", "main").strip() == a.head
    a.close()


def test_remote_config_edits_keep_the_users_git_config(tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    # A credential helper holding ';' (quoted by git) and comments survive
    # add_remote, the first sync (branch tracking) and remove_remote.
    vault = Vault.init(tmp_path / "v", author="x", clock=clock)
    helper = "!f() { echo username=u; echo password=p; }; f"
    git(vault.root, "config", "credential.helper", helper)
    config = vault.root / ".git" / "config"
    config.write_text(config.read_text() + "# my own note; keep it\n")
    vault.add_remote("origin", str(remote))
    vault.add_remote("backup", str(remote))
    vault.add("Fact", "body")
    vault.sync()
    vault.remove_remote("backup")
    assert git(vault.root, "config", "credential.helper").strip() == helper
    assert "# my own note; keep it\n" in config.read_text()
    assert git(vault.root, "remote").split() == ["origin"]
    assert git(vault.root, "config", "branch.main.remote").strip() == "origin"
    assert git(vault.root, "config", "branch.main.merge").strip() == "refs/heads/main"
    assert git(vault.root, "config", "remote.origin.url").strip() == str(remote)
    assert git(vault.root, "status", "-sb").startswith("## main...origin/main")
    vault.close()


def test_unreachable_remote_leaves_vault_untouched(tmp_path: Path, clock: FakeClock) -> None:
    vault = Vault.init(tmp_path / "v", author="x", clock=clock)
    vault.add("Keep me", "safe")
    vault.add_remote("gone", str(tmp_path / "nowhere.git"))
    vault.add_remote("closed", "https://127.0.0.1:1/vault.git")
    vault.flush()
    before = (vault.head, _tree(vault))
    with pytest.raises(SyncError) as info:
        vault.sync("gone")
    assert info.value.code == "remote_unreachable"
    with pytest.raises(SyncError) as info:
        vault.sync("closed")
    assert info.value.code == "remote_unreachable" and "127.0.0.1" in info.value.message
    assert (vault.head, _tree(vault)) == before
    vault.add("Still usable", "yes")
    vault.flush()
    assert_clean(vault.root)
    code, out = _invoke(vault.root, "sync", "gone")
    assert code == 1 and "no git repository" in out
    vault.close()


class _Deny(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server API
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def denying_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Deny)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/vault.git"
    server.shutdown()
    server.server_close()


def test_credentials_are_never_stored_or_shown(tmp_path: Path, clock: FakeClock, denying_server: str) -> None:
    vault = Vault.init(tmp_path / "v", author="x", clock=clock)
    secret_url = denying_server.replace("http://", "http://alice:s3cret-token@")
    with pytest.raises(InvalidInput) as refused:
        vault.add_remote("origin", secret_url)
    assert refused.value.code == "credentials_in_url" and "s3cret" not in refused.value.message
    assert "s3cret" not in (vault.root / ".git" / "config").read_text()
    vault.add_remote("origin", denying_server)
    with pytest.raises(SyncError) as info:
        vault.sync()
    assert info.value.code == "auth_failed"
    # A URL with a password put there by hand (git CLI) is used but never shown.
    git(vault.root, "remote", "add", "manual", secret_url)
    with pytest.raises(SyncError) as info:
        vault.sync("manual")
    assert "s3cret" not in str(info.value.to_dict())
    assert "s3cret" not in json.dumps([r.to_dict() for r in vault.remotes()])
    gc.collect()  # the 401 responses dulwich left open were closed (no ResourceWarning)
    assert redact("fetch https://u:p@h/x and ssh://me@h/y") == "fetch https://***@h/x and ssh://***@h/y"
    vault.close()


def test_uncommitted_edits_are_committed_or_refused(tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    a = _first(tmp_path, remote, clock)
    m = a.add("Notes", "line one\n")
    a.sync()
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    b.update(m.id, meta={"importance": 5})
    b.flush()  # .git/index is written lazily; the git CLI commit below needs it current
    (b.root / "notes.txt").write_text("from b\n")
    git(b.root, "add", "notes.txt")
    git(b.root, "commit", "-q", "-m", "notes from b")
    b.sync()
    path = a.root / a.get(m.id).path
    path.write_text(path.read_text().replace("line one", "line one, edited in Obsidian"))
    (a.root / "notes.txt").write_text("my own untracked notes\n")
    head = a.head
    with pytest.raises(SyncError) as info:
        a.sync()
    assert info.value.code == "dirty_worktree" and "notes.txt" in info.value.message
    assert (a.root / "notes.txt").read_text() == "my own untracked notes\n"
    assert a.services.store.git.head() is not None and a.head != head  # the Obsidian edit was committed, not lost
    (a.root / "notes.txt").unlink()
    report = a.sync()
    merged = a.get(m.id)
    assert "edited in Obsidian" in merged.body and merged.importance == 5
    assert report.action == "merge" and m.id in report.merged
    b.sync()
    _check_same(a, b)
    a.close()
    b.close()


def test_unrelated_vaults_are_never_merged(tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    """Two vaults made apart share no history: the second to sync is refused, both stay whole."""
    a = _first(tmp_path, remote, clock, "a")
    b = _first(tmp_path, remote, clock, "b")
    a.add("Only in a", "alpha")
    clock.tick()
    b.add("Only in b", "bravo")
    a.sync()
    head = b.head
    with pytest.raises(SyncError) as info:
        b.sync()
    assert info.value.code == "unrelated_history" and b.head == head
    assert git(remote, "rev-parse", "main").strip() == a.head
    assert {m.title for m in a.list()} == {"Only in a"} and {m.title for m in b.list()} == {"Only in b"}
    a.close()
    b.close()


def test_cli_remote_and_sync(tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    vault = Vault.init(tmp_path / "v", author="x", clock=clock)
    vault.close()
    assert _invoke(vault.root, "remote", "add", "origin", str(remote))[0] == 0
    code, out = _invoke(vault.root, "remote", "list", "--json")
    assert code == 0 and json.loads(out) == [{"name": "origin", "url": str(remote)}]
    assert _invoke(vault.root, "remote", "add", "origin", str(remote))[0] == 5
    assert _invoke(vault.root, "add", "Fact", "body")[0] == 0
    code, out = _invoke(vault.root, "sync")
    assert code == 0 and "pushed local commits" in out
    code, out = _invoke(vault.root, "sync", "--json")
    assert code == 0 and json.loads(out)["action"] == "up_to_date"
    code, out = _invoke(tmp_path, "clone", str(remote), str(tmp_path / "copy"))
    assert code == 0 and "cloned 1 memories" in out
    assert_clean(tmp_path / "copy")
    assert _invoke(vault.root, "remote", "remove", "origin")[0] == 0
    code, out = _invoke(vault.root, "sync", "--json")
    assert code == 3 and json.loads(out)["error"]["code"] == "remote_not_found"


def _invoke(root: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--vault", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.output


# ---------------------------------------------------------------- units
def test_merge_lines_takes_separate_changes_and_refuses_overlaps() -> None:
    base = ["a\n", "b\n", "c\n", "d\n", "e\n"]
    assert merge_lines(base, ["A\n", *base[1:]], [*base[:4], "E\n"]) == ["A\n", "b\n", "c\n", "d\n", "E\n"]
    assert merge_lines(base, [*base, "x\n"], [*base, "y\n"]) is None
    assert merge_lines(base, ["a\n", "B\n", *base[2:]], ["a\n", "b2\n", *base[2:]]) is None
    same = ["a\n", "B\n", *base[2:]]
    assert merge_lines(base, same, same) == same


def test_merge_memory_fields() -> None:
    base = b"---\nid: x\ntitle: T\ntags: [a, b]\nupdated: '2026-01-01T00:00:00Z'\n---\nbody\n"
    ours = base.replace(b"[a, b]", b"[a, b, c]").replace(b"01T00", b"02T00")
    theirs = base.replace(b"[a, b]", b"[b, d]").replace(b"body", b"body two").replace(b"01T00", b"03T00")
    merged = merge_memory(base, ours, theirs).decode()
    assert "tags: [b, c, d]" in merged and "body two" in merged and "2026-01-03" in merged
    clash = base.replace(b"title: T", b"title: U")
    assert merge_memory(base, clash, base.replace(b"title: T", b"title: V")) is None


def test_https_credentials_come_from_env_or_git_credentials(tmp_path: Path, clock: FakeClock,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from gitmem.sync.remotes import http_credentials
    vault = Vault.init(tmp_path / "v", author="x", clock=clock)
    url = "https://git.example.com/me/vault.git"
    assert http_credentials(vault.services.store.git, url) == (None, None)
    (Path.home() / ".git-credentials").write_text("https://me:tok%40en@git.example.com\n")
    assert http_credentials(vault.services.store.git, url) == ("me", "tok@en")
    monkeypatch.setenv("GITMEM_GIT_PASSWORD", "from-env")
    assert http_credentials(vault.services.store.git, url) == ("git", "from-env")
    assert http_credentials(vault.services.store.git, "/some/path") == (None, None)
    vault.close()


def test_sync_rewrites_a_remote_that_still_has_a_purged_memory(tmp_path: Path, remote: Path,
                                                                clock: FakeClock) -> None:
    a = _first(tmp_path, remote, clock)
    # the secret is a word no object id can contain (ids are hex): "4711" alone can be part of one
    leaked = a.add("Leaked note", "The vault door code is quokka-4711.")
    a.add("Kept", "Stays.")
    a.sync()
    a.purge(leaked.id)
    head = a.head
    report = a.sync()                   # the remote's history still holds the old commits: rewritten
    assert report.pushed and a.head == head and "quokka" not in _all_text(a)
    assert git(remote, "rev-parse", "main").strip() == head
    assert "quokka" not in git(remote, "log", "--all", "-p")
    a.add("After", "x")
    a.sync()                            # and later syncs are ordinary fast-forwards
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    assert "quokka" not in git(b.root, "log", "--all", "-p")
    a.close()
    b.close()


def test_a_remote_ref_to_a_commit_this_clone_no_longer_has_never_fails_a_sync(tmp_path: Path, remote: Path) -> None:
    """After a purge rewrote history, the remote-tracking ref may name a commit gone from
    this clone: the sync's status (ahead/behind) is unknown, the sync itself succeeds."""
    a = _first(tmp_path, remote, FakeClock())
    a.add("Kept", "A memory.")
    a.sync()
    gone = "c984f12dc3e59dea4646245e6dbff9ab14679b37"   # no such commit here
    (a.root / ".git" / "refs" / "remotes" / "origin" / "main").write_text(gone + "\n")
    status = a.sync_status("origin")
    assert status["ahead"] is None and status["behind"] is None
    a.add("After", "Written after the ref went stale.")
    report = a.sync()
    assert report.pushed
    status = a.sync_status("origin")
    assert (status["ahead"], status["behind"]) == (0, 0)
    a.close()


def test_a_folder_remote_with_packs_with_and_without_bitmaps_still_syncs(tmp_path: Path, clock: FakeClock) -> None:
    """`git gc` on a shared-folder remote writes a pack with a bitmap; pushes then add packs
    without one.  Every later fetch by path used to fail ("No such file or directory:
    .../pack-<id>.bitmap") until the remote was repacked."""
    server = tmp_path / "srv.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(server))
    a = Vault.init(tmp_path / "a", author="agent-a", clock=clock)
    b: Vault | None = None
    try:
        a.add_remote("origin", str(server))
        a.add("First", "Before the remote is packed.")
        a.sync()
        b = Vault.clone(str(server), tmp_path / "b", author="agent-b", clock=clock)
        git(server, "repack", "-adb", "-q")                    # what git gc does to a bare repository
        for i in range(2):
            a.add(f"Pushed {i}", "A pack without a bitmap.")
            a.sync()
        packs = sorted(p.name for p in (server / "objects" / "pack").iterdir())
        assert sum(p.endswith(".bitmap") for p in packs) == 1 and sum(p.endswith(".pack") for p in packs) == 3
        b.add("From b", "Written while a pushed.")
        assert b.sync().action == "merge"                       # fetched a's commits through the folder
        a.sync()
        b.sync()
        titles = {"First", "Pushed 0", "Pushed 1", "From b"}
        assert {m.title for m in a.list()} == {m.title for m in b.list()} == titles
        assert git(a.root, "rev-parse", "HEAD") == git(b.root, "rev-parse", "HEAD") == git(server, "rev-parse", "main")
    finally:
        a.close()
        if b is not None:
            b.close()
