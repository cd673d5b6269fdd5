"""Sync against real git servers, as users sync through GitHub, GitLab or Gitea.

* smart HTTP: ``git http-backend`` behind a small ``http.server`` on 127.0.0.1
  with basic auth (:mod:`tests.git_http_server`); credentials come from a git
  credential helper or ``GITMEM_GIT_USERNAME``/``GITMEM_GIT_PASSWORD``;
* ssh: a throw-away ``sshd`` on 127.0.0.1 with a temporary host key and an
  authorized key, where ``sshd`` is installed (skipped otherwise).

Each case clones, syncs both ways between two clones, and checks with the
git CLI; a push the server refuses because the branch moved is retried; wrong
credentials give ``auth_failed`` with nothing changed; over ssh two clones
push at once.  Servers that misbehave (a connection cut mid-pack, slow
answers, a pre-receive hook that refuses, a pack the server cannot store)
lose nothing locally, give a clear code, and the next sync succeeds.
"""

from __future__ import annotations

import gc
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitmem import SyncError, Vault

from .conftest import FakeClock, assert_clean, git, snapshot
from .git_http_server import GitHttpServer, http_backend
from .servers import ServerUnavailable, SshServer
from .servers import ssh_children as _ssh_children
from .servers import ssh_command as _ssh_command

USER, PASSWORD = "gitmem-user", "s3cret-token-42"

pytestmark = pytest.mark.skipif(http_backend() is None, reason="git http-backend is not installed")


def _helper(user: str, password: str) -> str:
    """A git credential helper, written the way users write one in their config."""
    return f"!f() {{ echo username={user}; echo password={password}; }}; f"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[GitHttpServer, Path]]:
    root = tmp_path / "srv"
    root.mkdir()
    bare = root / "vault.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(bare))
    with GitHttpServer(root, (USER, PASSWORD)) as server:
        yield server, bare
    gc.collect()   # a socket left open (a ResourceWarning) fails the test that left it


def _titles(vault: Vault) -> set[str]:
    return {m.title for m in vault.list()}


def _same(remote: Path, *vaults: Vault) -> None:
    tips = {git(v.root, "rev-parse", "HEAD").strip() for v in vaults}
    tips.add(git(remote, "rev-parse", "main").strip())
    assert len(tips) == 1, tips
    for v in vaults:
        v.flush()
        assert_clean(v.root)
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=remote, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def _sync_both_ways(remote: Path, a: Vault, b: Vault, clock: FakeClock) -> None:
    a.add("From a over http", "alpha", tags=["a"])
    b.add("From b over http", "bravo", tags=["b"])
    clock.tick()
    assert a.sync().action == "pushed"
    report = b.sync()
    assert report.action == "merge" and report.pushed
    assert a.sync().action == "fast_forward"
    _same(remote, a, b)
    assert _titles(a) == _titles(b) >= {"Seed", "From a over http", "From b over http"}


def _seeded(tmp_path: Path, url: str, clock: FakeClock, body: str,
            *config: list[str]) -> tuple[Vault, object]:
    """Vault a, with these ``git config`` entries, its first memory synced to ``url``;
    and the report of that sync."""
    a = Vault.init(tmp_path / "a", author="agent-a", clock=clock)
    for entry in config:
        git(a.root, "config", *entry)
    a.add_remote("origin", url)
    a.add("Seed", body)
    return a, a.sync()


def test_https_with_a_credential_helper(served: tuple[GitHttpServer, Path], tmp_path: Path,
                                        clock: FakeClock) -> None:
    server, bare = served
    url = server.url("vault.git")
    a, report = _seeded(tmp_path, url, clock, "First memory, pushed over http.",
                        ["credential.helper", _helper(USER, PASSWORD)])   # this vault only
    assert report.pushed and report.action == "pushed"
    assert git(bare, "rev-parse", "main").strip() == a.head
    assert "POST /vault.git/git-receive-pack" in server.requests and server.refused == 0
    # A clone has no vault config yet: the helper comes from the user's git config, as for `git clone`.
    git(tmp_path, "config", "--global", "credential.helper", _helper(USER, PASSWORD))
    b = Vault.clone(url, tmp_path / "b", author="agent-b", clock=clock)
    assert _titles(b) == {"Seed"}
    _sync_both_ways(bare, a, b, clock)
    # gitmem stored no credential: the clone's config has none, a's only the user's own helper.
    assert PASSWORD not in (b.root / ".git" / "config").read_text()
    assert git(a.root, "config", "credential.helper").strip() == _helper(USER, PASSWORD)
    a.close()
    b.close()


def test_https_with_credentials_from_the_environment(served: tuple[GitHttpServer, Path], tmp_path: Path,
                                                     clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    server, bare = served
    url = server.url("vault.git")
    monkeypatch.setenv("GITMEM_GIT_USERNAME", USER)
    monkeypatch.setenv("GITMEM_GIT_PASSWORD", PASSWORD)
    a, report = _seeded(tmp_path, url, clock, "First memory.")
    assert report.pushed
    b = Vault.clone(url, tmp_path / "b", author="agent-b", clock=clock)
    _sync_both_ways(bare, a, b, clock)
    for v in (a, b):
        assert PASSWORD not in (v.root / ".git" / "config").read_text()
    a.close()
    b.close()


def test_https_with_gits_own_store_helper(served: tuple[GitHttpServer, Path], tmp_path: Path,
                                         clock: FakeClock) -> None:
    # `store` is git's helper (git-credential-store lives in `git --exec-path`, not on
    # PATH); an empty helper value earlier in the stack is skipped, a later one used.
    server, bare = served
    url = server.url("vault.git")
    creds = tmp_path / "creds"
    creds.write_text(url.replace("http://", f"http://{USER}:{PASSWORD}@").rsplit("/", 1)[0] + "\n")
    creds.chmod(0o600)
    git(tmp_path, "config", "--global", "credential.helper", _helper(USER, "stale-password"))
    a, report = _seeded(tmp_path, url, clock, "First memory.",
                        ["--add", "credential.helper", ""],   # clears the global one, as in git
                        ["--add", "credential.helper", f"store --file {creds}"])
    assert report.pushed
    assert git(bare, "rev-parse", "main").strip() == a.head
    a.close()


def test_https_push_refused_because_the_branch_moved_is_retried(served: tuple[GitHttpServer, Path],
                                                                tmp_path: Path, clock: FakeClock,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    server, bare = served
    url = server.url("vault.git")
    monkeypatch.setenv("GITMEM_GIT_PASSWORD", PASSWORD)
    monkeypatch.setenv("GITMEM_GIT_USERNAME", USER)
    a, _ = _seeded(tmp_path, url, clock, "First memory.")
    b = Vault.clone(url, tmp_path / "b", author="agent-b", clock=clock)
    b.add("From b", "pushed while a was pushing")
    b.flush()
    # b's commit waits on a side branch; the server's pre-receive hook moves main
    # there once, while a's push is being received (after a fetched and merged).
    git(b.root, "push", "-q", str(bare), "HEAD:refs/heads/side")
    side = git(bare, "rev-parse", "side").strip()
    marker = tmp_path / "move-once"
    marker.write_text("")
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(
        "#!/bin/sh\ncat >/dev/null\n"
        f"if [ -e '{marker}' ]; then rm -f '{marker}'\n"
        "  env -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES "
        f"git update-ref refs/heads/main {side}\nfi\nexit 0\n")
    hook.chmod(0o755)
    a.add("From a", "pushed second")
    report = a.sync()
    assert not marker.exists()   # the hook moved main under a's push
    assert report.pushed and report.retries == 1 and report.action == "merge"
    assert report.arrived == 1
    b.sync()
    _same(bare, a, b)
    assert _titles(a) == _titles(b) == {"Seed", "From a", "From b"}
    a.close()
    b.close()


def test_https_wrong_credentials_change_nothing(served: tuple[GitHttpServer, Path], tmp_path: Path,
                                                clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    server, bare = served
    url = server.url("vault.git")
    a, _ = _seeded(tmp_path, url, clock, "First memory.", ["credential.helper", _helper(USER, PASSWORD)])
    # Someone else pushed meanwhile: a sync that got through would merge it in.
    monkeypatch.setenv("GITMEM_GIT_USERNAME", USER)
    monkeypatch.setenv("GITMEM_GIT_PASSWORD", PASSWORD)
    other = Vault.clone(url, tmp_path / "other", author="agent-o", clock=clock)
    other.add("Newer", "on the remote only")
    other.sync()
    other.close()
    remote_tip = git(bare, "rev-parse", "main").strip()
    monkeypatch.delenv("GITMEM_GIT_USERNAME")
    monkeypatch.delenv("GITMEM_GIT_PASSWORD")

    a.add("Local only", "not pushed")
    a.flush()
    git(a.root, "config", "credential.helper", _helper(USER, "wrong-password"))
    before = snapshot(a.root)
    refs_before = git(a.root, "for-each-ref")
    with pytest.raises(SyncError) as info:
        a.sync()
    assert info.value.code == "auth_failed"
    assert "wrong-password" not in str(info.value.to_dict())
    assert "credential helper" in (info.value.hint or "")
    assert snapshot(a.root) == before and git(a.root, "for-each-ref") == refs_before
    assert git(bare, "rev-parse", "main").strip() == remote_tip

    monkeypatch.setenv("GITMEM_GIT_USERNAME", USER)
    monkeypatch.setenv("GITMEM_GIT_PASSWORD", "also-wrong")   # the environment wins over the helper
    with pytest.raises(SyncError) as info:
        a.sync()
    assert info.value.code == "auth_failed" and "also-wrong" not in str(info.value.to_dict())
    assert snapshot(a.root) == before
    with pytest.raises(SyncError) as info:
        Vault.clone(url, tmp_path / "c", author="agent-c", clock=clock)
    assert info.value.code == "auth_failed" and not (tmp_path / "c").exists()

    monkeypatch.delenv("GITMEM_GIT_USERNAME")
    monkeypatch.delenv("GITMEM_GIT_PASSWORD")
    git(a.root, "config", "credential.helper", _helper(USER, PASSWORD))
    report = a.sync()   # the right credentials: everything arrives and goes out
    assert report.pushed and _titles(a) == {"Seed", "Newer", "Local only"}
    a.close()


# ------------------------------------------------------------------- ssh
@pytest.fixture
def ssh_server(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """(ssh URL prefix, bare repository, key folder): a throw-away sshd on 127.0.0.1
    (:class:`tests.servers.SshServer`).

    Its host key and the user's key are made for the test; the key folder holds
    ``client`` (authorized) and ``stranger`` (not).  At the end sshd and every
    session it started are stopped, and none may be left, nor any ssh client."""
    try:
        server = SshServer(tmp_path / "ssh")
        server.start()
    except ServerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        bare = tmp_path / "ssh-remote.git"
        git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
        yield server.prefix, bare, server.keys
    finally:
        server.stop()
    assert server.left_running == [], "sshd sessions left running"
    assert _ssh_children() == [], "ssh clients left running"


@pytest.mark.slow
def test_ssh_clone_sync_race_and_wrong_key(ssh_server: tuple[str, Path, Path], tmp_path: Path,
                                           clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix, bare, keys = ssh_server
    url = f"{prefix}{bare}"
    monkeypatch.setenv("GIT_SSH_COMMAND", _ssh_command(keys))   # the environment alone, as for git
    a, report = _seeded(tmp_path, url, clock, "First memory, over ssh.")
    assert report.pushed and git(bare, "rev-parse", "main").strip() == a.head
    b = Vault.clone(url, tmp_path / "b", author="agent-b", clock=clock)
    assert _titles(b) == {"Seed"}
    _sync_both_ways(bare, a, b, clock)

    # A race: both push at once; one wins, the other integrates and pushes on retry.
    a.add("Racing a", "written in a")
    b.add("Racing b", "written in b")
    start = threading.Barrier(2)
    results: dict[str, object] = {}

    def run(name: str, vault: Vault) -> None:
        start.wait()
        try:
            results[name] = vault.sync()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            results[name] = exc

    threads = [threading.Thread(target=run, args=(n, v)) for n, v in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(getattr(r, "pushed", False) for r in results.values()), results
    # One won the race; the other merged what the winner pushed and pushed on retry.
    assert sorted(getattr(r, "action", "") for r in results.values()) == ["merge", "pushed"], results
    a.sync()
    b.sync()
    _same(bare, a, b)
    assert _titles(a) == _titles(b) >= {"Racing a", "Racing b", "From a over http", "From b over http"}

    # The wrong key: a clear auth_failed, nothing changed here or there.
    monkeypatch.setenv("GIT_SSH_COMMAND", _ssh_command(keys, "stranger"))
    a.add("Local", "not pushed")
    a.flush()
    before, refs = snapshot(a.root), git(a.root, "for-each-ref")
    remote_tip = git(bare, "rev-parse", "main").strip()
    with pytest.raises(SyncError) as info:
        a.sync()
    assert info.value.code == "auth_failed", info.value.to_dict()
    assert snapshot(a.root) == before and git(a.root, "for-each-ref") == refs
    assert git(bare, "rev-parse", "main").strip() == remote_tip
    with pytest.raises(SyncError) as info:
        Vault.clone(url, tmp_path / "c", author="agent-c", clock=clock)
    assert info.value.code == "auth_failed" and not (tmp_path / "c").exists()
    assert _ssh_children() == []
    monkeypatch.setenv("GIT_SSH_COMMAND", _ssh_command(keys))
    assert a.sync().pushed
    a.close()
    b.close()


# ------------------------------------------------------- servers that misbehave
@pytest.fixture
def pair(served: tuple[GitHttpServer, Path], tmp_path: Path, clock: FakeClock,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[GitHttpServer, Path, Vault, Vault]]:
    """Two clones of one vault served over smart HTTP; b has a commit the server lacks."""
    server, bare = served
    monkeypatch.setenv("GITMEM_GIT_USERNAME", USER)
    monkeypatch.setenv("GITMEM_GIT_PASSWORD", PASSWORD)
    a, _ = _seeded(tmp_path, server.url("vault.git"), clock, "First memory.")
    b = Vault.clone(server.url("vault.git"), tmp_path / "b", author="agent-b", clock=clock)
    a.add("On the server", "pushed by a")
    a.sync()
    b.add("Only in b", "not pushed yet")
    b.flush()
    yield server, bare, a, b
    a.close()
    b.close()


def _unchanged(vault: Vault, before: dict[str, bytes], refs: str) -> None:
    assert snapshot(vault.root) == before and git(vault.root, "for-each-ref") == refs
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=vault.root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def test_a_connection_dropped_mid_pack_loses_nothing(pair: tuple[GitHttpServer, Path, Vault, Vault]) -> None:
    server, bare, a, b = pair
    before, refs = snapshot(b.root), git(b.root, "for-each-ref")
    server.misbehave(fault="drop")
    with pytest.raises(SyncError) as info:
        b.sync()
    assert server.dropped == 1
    assert info.value.code in ("remote_unreachable", "sync_error"), info.value.to_dict()
    _unchanged(b, before, refs)
    report = b.sync()   # the server is healthy again
    assert report.pushed and _titles(b) == {"Seed", "On the server", "Only in b"}
    a.sync()
    _same(bare, a, b)


def test_a_slow_server_is_waited_for(pair: tuple[GitHttpServer, Path, Vault, Vault]) -> None:
    server, bare, a, b = pair
    server.misbehave(delay=0.3)
    report = b.sync()
    assert report.pushed and report.duration_ms >= 300
    a.sync()
    _same(bare, a, b)


@pytest.mark.parametrize("message", ["protected branch: pushes are reviewed",
                                     "fatal: write error: No space left on device"])
def test_a_push_refused_by_a_server_hook_keeps_everything(pair: tuple[GitHttpServer, Path, Vault, Vault],
                                                          message: str) -> None:
    """A pre-receive hook that refuses (branch protection), or a server out of disk."""
    server, bare, a, b = pair
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{message}' >&2\nexit 1\n")
    hook.chmod(0o755)
    remote_tip = git(bare, "rev-parse", "main").strip()
    with pytest.raises(SyncError) as info:
        b.sync()
    assert info.value.code == "push_rejected", info.value.to_dict()
    assert message in info.value.message          # the server's reason, shown to the user
    assert "kept here" in (info.value.hint or "")
    assert git(bare, "rev-parse", "main").strip() == remote_tip
    # What arrived was merged and committed here; b's own memory is kept, nothing is lost.
    assert _titles(b) == {"Seed", "On the server", "Only in b"}
    hook.unlink()   # the server is healthy again
    assert b.sync().pushed
    a.sync()
    _same(bare, a, b)
    assert _titles(a) == {"Seed", "On the server", "Only in b"}


def test_a_push_the_server_cannot_store_keeps_everything(pair: tuple[GitHttpServer, Path, Vault, Vault]) -> None:
    """The server fails to take the pack itself (here its size limit; a full disk fails the same way)."""
    server, bare, a, b = pair
    git(bare, "config", "receive.maxInputSize", "64")
    remote_tip = git(bare, "rev-parse", "main").strip()
    with pytest.raises(SyncError) as info:
        b.sync()
    assert info.value.code == "push_rejected", info.value.to_dict()
    assert "could not store the push" in info.value.message
    assert git(bare, "rev-parse", "main").strip() == remote_tip
    assert _titles(b) == {"Seed", "On the server", "Only in b"}
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=b.root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    git(bare, "config", "--unset", "receive.maxInputSize")   # healthy again
    assert b.sync().pushed
    a.sync()
    _same(bare, a, b)
