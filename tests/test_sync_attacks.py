"""What a hostile or careless git remote can send, and what gitmem does with it.

Real bare remotes and clones in tmp_path; the bad commits are written straight
into the bare repository with dulwich (the git CLI refuses to make most of
them); results are cross-checked with the git CLI.  Each case asserts that
nothing was written outside the vault or inside ``.git`` (objects aside), that
HEAD did not move and that no ref reaches the refused commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo

from gitmem import SyncError, Vault
from gitmem.cli.main import cli
from gitmem.errors import Protected, SecretDetected, UnsafeRemoteTree
from gitmem.store.git import GitStore
from gitmem.sync.syncer import Syncer

from .conftest import FakeClock, assert_clean, git

SYMLINK = 0o120000
GITLINK = 0o160000
FILE = 0o100644
DIR = 0o040000
AWS_KEY = "AKIA" + "QWERTYUIOPASDFGH"   # shape of an AWS access key id (made up)

# kind -> (path components, mode, blob data); each component is one tree entry name.
BAD_ENTRIES: dict[str, tuple[list[bytes], int, bytes]] = {
    "dotdot": ([b"..", b"sentinel", b"pwned.md"], FILE, b"escaped\n"),
    "dot": ([b"short_term", b".", b"x.md"], FILE, b"dot\n"),
    "dotgit": ([b".git", b"hooks", b"post-merge"], 0o100755, b"#!/bin/sh\necho pwned\n"),
    "dotgit_upper": ([b".GIT", b"config"], FILE, b"[core]\n\tfsmonitor = echo pwned\n"),
    "slash_in_name": ([b"../sentinel/pwned.md"], FILE, b"escaped\n"),
    "long_name": ([b"short_term", b"x" * 297 + b".md"], FILE, b"long\n"),
    "bad_utf8": ([b"short_term", b"\xff\xfe.md"], FILE, b"bytes\n"),
    "symlink_etc": ([b"short_term", b"h.md"], SYMLINK, b"/etc/hostname"),
    "symlink_git": ([b"short_term", b"g"], SYMLINK, b"../.git"),
    "gitlink": ([b"short_term", b"sub"], GITLINK, b""),
}


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    return bare


@pytest.fixture
def sentinel(tmp_path: Path) -> Path:
    """An empty folder next to the vaults: a write escaping a vault lands here."""
    folder = tmp_path / "sentinel"
    folder.mkdir()
    return folder


def _insert(store: object, tree: Tree | None, parts: list[bytes], mode: int, sha: bytes) -> bytes:
    fresh = Tree()
    if tree is not None:
        for entry in tree.iteritems():
            fresh.add(entry.path, entry.mode, entry.sha)
    name = parts[0]
    if len(parts) == 1:
        fresh.add(name, mode, sha)
    else:
        child = store[fresh[name][1]] if name in fresh else None  # type: ignore[index]
        fresh.add(name, DIR, _insert(store, child, parts[1:], mode, sha))
    store.add_object(fresh)  # type: ignore[attr-defined]
    return fresh.id


def plant(bare: Path, parts: list[bytes], mode: int, data: bytes, message: str = "evil") -> bytes:
    """Commit one entry (any name, any mode) on top of the remote's main branch."""
    repo = Repo(str(bare))
    try:
        store = repo.object_store
        tip = repo.refs[b"refs/heads/main"]
        if mode == GITLINK:
            sha = tip  # a submodule entry names a commit
        else:
            blob = Blob.from_string(data)
            store.add_object(blob)
            sha = blob.id
        commit = Commit()
        commit.tree = _insert(store, store[store[tip].tree], parts, mode, sha)
        commit.parents = [tip]
        commit.author = commit.committer = b"mallory <m@example.com>"
        commit.author_time = commit.commit_time = 1_800_000_000
        commit.author_timezone = commit.commit_timezone = 0
        commit.message = message.encode()
        store.add_object(commit)
        repo.refs[b"refs/heads/main"] = commit.id
        return commit.id
    finally:
        repo.close()


def _state(root: Path) -> dict[str, bytes]:
    """Every file of .git except the object store and gitmem's own state (lock, catalog)."""
    out = {}
    git_dir = root / ".git"
    for folder, dirs, names in os.walk(git_dir):
        rel = Path(folder).relative_to(git_dir).as_posix()
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in ("objects", "gitmem")]
        for name in names:
            full = Path(folder) / name
            out[full.relative_to(git_dir).as_posix()] = full.read_bytes()
    return out


def _invoke(root: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--vault", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.output


def _all_commits(root: Path) -> set[str]:
    return set(git(root, "rev-list", "--all").split())


def _setup(tmp_path: Path, remote: Path, clock: FakeClock) -> tuple[Vault, Vault]:
    a = Vault.init(tmp_path / "a", author="agent-a", clock=clock)
    a.add_remote("origin", str(remote))
    a.add("Shared fact", "The build runs on Fridays.\n")
    a.sync()
    b = Vault.clone(str(remote), tmp_path / "b", author="agent-b", clock=clock)
    return a, b


def _no_objects_kept(root: Path, bad: bytes) -> None:
    """A refused sync kept nothing of what it fetched: git fsck --full is clean."""
    assert subprocess.run(["git", "cat-file", "-e", bad.decode()], cwd=root, capture_output=True).returncode != 0
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=root, capture_output=True, text=True)
    assert fsck.returncode == 0 and " in tree " not in fsck.stderr, fsck.stdout + fsck.stderr
    quarantine = root / ".git" / "gitmem" / "quarantine"
    assert not quarantine.exists() or list(quarantine.iterdir()) == []


def _assert_untouched(vault: Vault, head: str | None, state: dict[str, bytes], bad: bytes,
                      sentinel: Path, tmp_path: Path, top: set[str]) -> None:
    assert vault.head == head
    assert git(vault.root, "rev-parse", "HEAD").strip() == head
    assert bad.decode() not in _all_commits(vault.root)
    assert _state(vault.root) == state              # .git/config, hooks, refs, index: unchanged
    assert list(sentinel.iterdir()) == []
    assert {p.name for p in tmp_path.iterdir()} == top
    assert not (vault.root / "short_term" / "h.md").exists()


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(BAD_ENTRIES))
@pytest.mark.parametrize("path_kind", ["fast_forward", "merge"])
def test_sync_refuses_a_bad_tree_entry(tmp_path: Path, remote: Path, clock: FakeClock, sentinel: Path,
                                       kind: str, path_kind: str) -> None:
    a, b = _setup(tmp_path, remote, clock)
    if path_kind == "merge":
        b.add("Local only", "Not pushed yet.\n")   # our branch has news: a merge, not a fast-forward
    b.flush()
    parts, mode, data = BAD_ENTRIES[kind]
    bad = plant(remote, parts, mode, data)
    head, state, top = b.head, _state(b.root), {p.name for p in tmp_path.iterdir()}
    with pytest.raises(UnsafeRemoteTree) as caught:
        b.sync()
    err = caught.value
    assert err.code == "unsafe_remote_tree" and err.exit_code == 2
    entry = err.details["entry"]
    assert entry.startswith(parts[0].decode("utf-8", "backslashreplace"))
    assert repr(entry)[-13:-1] in err.message or len(entry) > 120
    _assert_untouched(b, head, state, bad, sentinel, tmp_path, top)
    _no_objects_kept(b.root, bad)
    with pytest.raises(UnsafeRemoteTree):   # nothing was kept: fetched, checked and refused again
        b.sync()
    _assert_untouched(b, head, state, bad, sentinel, tmp_path, top)
    _no_objects_kept(b.root, bad)
    assert {f.check: f for f in b.doctor()}["fsck"].ok
    code, out = _invoke(b.root, "sync", "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "unsafe_remote_tree"
    assert _invoke(b.root, "add", "After the attack", "Still writable.")[0] == 0
    code, out = _invoke(b.root, "ls", "--json")
    assert code == 0 and "After the attack" in out
    b.flush()
    assert git(b.root, "status", "--porcelain") == ""
    a.close()
    b.close()


@pytest.mark.parametrize("kind", sorted(BAD_ENTRIES))
def test_clone_refuses_a_bad_tree_entry(tmp_path: Path, remote: Path, clock: FakeClock, sentinel: Path,
                                        kind: str) -> None:
    a = Vault.init(tmp_path / "a", author="agent-a", clock=clock)
    a.add_remote("origin", str(remote))
    a.add("Shared fact", "The build runs on Fridays.\n")
    a.sync()
    parts, mode, data = BAD_ENTRIES[kind]
    plant(remote, parts, mode, data)
    plant(remote, [b"long_term", b"later.md"], FILE, b"After the bad commit.\n")  # bad one below the tip
    top = {p.name for p in tmp_path.iterdir()}
    with pytest.raises(UnsafeRemoteTree) as caught:
        Vault.clone(str(remote), tmp_path / "c", author="agent-c", clock=clock)
    assert caught.value.code == "unsafe_remote_tree" and caught.value.details["entry"]
    assert not (tmp_path / "c").exists()           # the half-made folder is gone
    assert list(sentinel.iterdir()) == []
    assert {p.name for p in tmp_path.iterdir()} == top
    given = tmp_path / "given"
    given.mkdir()
    code, out = _invoke(tmp_path, "clone", str(remote), str(given), "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "unsafe_remote_tree"
    assert given.is_dir() and list(given.iterdir()) == []   # an empty folder given stays empty
    a.close()


def test_sync_refused_a_bad_commit_then_accepts_the_cleaned_remote(tmp_path: Path, remote: Path,
                                                                   clock: FakeClock) -> None:
    a, b = _setup(tmp_path, remote, clock)
    good = git(remote, "rev-parse", "main").strip()
    bad = plant(remote, *BAD_ENTRIES["symlink_etc"])
    with pytest.raises(UnsafeRemoteTree):
        b.sync()
    _no_objects_kept(b.root, bad)
    git(remote, "update-ref", "refs/heads/main", good)   # the remote's owner removes it
    a.add("Clean again", "Fine.\n")
    a.sync()
    report = b.sync()
    assert report.action == "fast_forward" and "Clean again" in {m.title for m in b.list()}
    assert git(b.root, "rev-parse", "refs/remotes/origin/main").strip() == a.head
    b.flush()
    assert git(b.root, "status", "--porcelain") == ""
    a.close()
    b.close()


def test_sync_refuses_to_write_through_a_local_symlink(tmp_path: Path, remote: Path, clock: FakeClock,
                                                       sentinel: Path) -> None:
    a, b = _setup(tmp_path, remote, clock)
    a.add("Mid fact", "Goes to mid_term.\n", tier="mid_term")
    a.sync()
    for child in list((b.root / "mid_term").iterdir()) if (b.root / "mid_term").exists() else []:
        child.unlink()
    if (b.root / "mid_term").exists():
        (b.root / "mid_term").rmdir()
    (b.root / "mid_term").symlink_to(sentinel, target_is_directory=True)
    head = b.head
    with pytest.raises(SyncError) as caught:
        b.sync()
    assert caught.value.code == "unsafe_path"
    assert list(sentinel.iterdir()) == [] and b.head == head
    a.close()
    b.close()


# ------------------------------------------------------------------ secrets
def _secret_memory(key: str = AWS_KEY) -> bytes:
    return (f"---\nid: 0123456789abcdef0123456789abcdef\ntitle: Deploy creds\ntype: fact\n---\n"
            f"The deploy key is {key} for the bucket.\n").encode()


@pytest.mark.parametrize("policy", ["refuse", "redact"])
def test_incoming_secret_is_refused(tmp_path: Path, remote: Path, clock: FakeClock, policy: str) -> None:
    a, b = _setup(tmp_path, remote, clock)
    if policy != "refuse":
        text = (b.root / ".gitmem.yaml").read_text().replace("secrets: refuse", f"secrets: {policy}")
        (b.root / ".gitmem.yaml").write_text(text)
        b.flush()
        git(b.root, "commit", "-qam", "secrets policy")
    bad = plant(remote, [b"long_term", b"0", b"1", b"deploy-creds.md"], FILE, _secret_memory())
    plant(remote, [b"long_term", b"0", b"1", b"deploy-creds.md"], FILE, b"gone again\n")  # still in history
    b.flush()
    head, state = b.head, _state(b.root)
    with pytest.raises(SyncError) as caught:
        b.sync()
    err = caught.value
    assert err.code == "secret_detected"
    assert "aws_access_key" in err.message and "long_term/0/1/deploy-creds.md" in err.message
    assert AWS_KEY not in json.dumps(err.to_dict())
    assert err.details["findings"][0]["commit"] == bad.decode()[:12]
    assert b.head == head and _state(b.root) == state
    assert bad.decode() not in _all_commits(b.root)
    assert AWS_KEY not in git(b.root, "log", "--all", "-p")
    assert not (b.root / "long_term" / "0" / "1" / "deploy-creds.md").exists()
    _no_objects_kept(b.root, bad)   # the secret is not even an unreachable object here
    a.close()
    b.close()


def test_incoming_secret_is_let_in_under_allow(tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    a, b = _setup(tmp_path, remote, clock)
    text = (b.root / ".gitmem.yaml").read_text().replace("secrets: refuse", "secrets: allow")
    (b.root / ".gitmem.yaml").write_text(text)
    b.flush()
    git(b.root, "commit", "-qam", "allow secrets")
    b.close()
    b = Vault.open(tmp_path / "b", author="agent-b", clock=clock)
    plant(remote, [b"long_term", b"0", b"1", b"deploy-creds.md"], FILE, _secret_memory())
    report = b.sync()
    assert report.action == "merge" and AWS_KEY in git(b.root, "log", "-p")
    a.close()
    b.close()


# ------------------------------------------------------------ config weakening
WEAK = {"secrets: refuse": "secrets: allow", "protected_types: [goal, rule, constraint]": "protected_types: []",
        "max_content_bytes: 4194304": "max_content_bytes: 100000000"}


def _weaken_remote(a: Vault) -> None:
    text = (a.root / ".gitmem.yaml").read_text()
    for old, new in WEAK.items():
        assert old in text
        text = text.replace(old, new)
    (a.root / ".gitmem.yaml").write_text(text)
    a.flush()
    git(a.root, "commit", "-qam", "loosen the rules")
    a.sync()


@pytest.mark.parametrize("path_kind", ["fast_forward", "merge"])
def test_weaker_config_from_a_remote_is_held_back_until_accepted(
        tmp_path: Path, remote: Path, clock: FakeClock, path_kind: str) -> None:
    a, b = _setup(tmp_path, remote, clock)
    rule = b.add("Never deploy on Friday", "A rule.\n", type="rule")
    b.sync()
    a.sync()
    if path_kind == "merge":
        b.add("Local only", "Not pushed yet.\n")
    _weaken_remote(a)
    b.close()
    code, out = _invoke(tmp_path / "b", "sync")
    assert code == 0, out
    assert "held back secrets" in out and "gitmem config accept" in out
    b = Vault.open(tmp_path / "b", author="agent-b", clock=clock)
    assert "secrets: allow" in (b.root / ".gitmem.yaml").read_text()   # the file arrived ...
    assert b.config.max_content_bytes == 4_194_304                      # ... its weakening did not
    assert set(b.config.protected_types) == {"goal", "rule", "constraint"}
    with pytest.raises(SecretDetected):
        b.add("Creds", f"key {AWS_KEY}")
    with pytest.raises(Protected):
        b.delete(rule.id)
    pending = b.pending_config()
    assert set(pending) == {"secrets", "protected_types", "max_content_bytes"}
    code, out = _invoke(b.root, "config", "show", "--json")
    assert code == 0 and json.loads(out)["pending"]["secrets"]["file"] == "allow"
    b.close()
    done = subprocess.run([sys.executable, "-m", "gitmem", "--vault", str(tmp_path / "b"), "config", "accept",
                           "--json"], capture_output=True, text=True, check=False, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)["accepted"]) == {"secrets", "protected_types", "max_content_bytes"}
    b = Vault.open(tmp_path / "b", author="agent-b", clock=clock)
    assert b.config.max_content_bytes == 100_000_000 and b.config.protected_types == ()
    assert b.pending_config() == {}
    b.add("Creds", f"key {AWS_KEY}")   # what the team decided, now accepted here
    b.flush()
    assert_clean(b.root)
    a.close()
    b.close()


def test_sync_report_names_held_settings_and_a_stronger_config_applies(tmp_path: Path, remote: Path,
                                                                       clock: FakeClock) -> None:
    a, b = _setup(tmp_path, remote, clock)
    text = (a.root / ".gitmem.yaml").read_text().replace("max_content_bytes: 4194304",
                                                         "max_content_bytes: 5000000")
    (a.root / ".gitmem.yaml").write_text(text)
    a.flush()  # .git/index is written lazily; the git CLI commit needs it current
    git(a.root, "commit", "-qam", "bigger memories")
    a.sync()
    report = b.sync()
    assert report.config_held == {"max_content_bytes": {"kept": 4_194_304, "incoming": 5_000_000}}
    assert b.config.max_content_bytes == 4_194_304
    (a.root / ".gitmem.yaml").write_text(text.replace("max_content_bytes: 5000000", "max_content_bytes: 2000"))
    git(a.root, "commit", "-qam", "smaller memories")
    a.sync()
    report = b.sync()
    assert report.config_held == {} and b.config.max_content_bytes == 2000   # stricter: applied at once
    assert b.pending_config() == {}
    a.close()
    b.close()


def test_unusable_config_from_a_remote_is_refused(tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    a, b = _setup(tmp_path, remote, clock)
    bad = plant(remote, [b".gitmem.yaml"], FILE, b"- not\n- a mapping\n")
    head = b.head
    with pytest.raises(SyncError) as caught:
        b.sync()
    assert caught.value.code == "invalid_remote_config" and b.head == head
    assert bad.decode() not in _all_commits(b.root)
    a.close()
    b.close()


HOSTILE_CONFIGS = {
    "overflowing_int": (b"memory_index_lines: 99999999999999999999999\n", "memory_index_lines"),
    "infinite_float": (b"reflect:\n  promote_min_retrievals: .inf\n", "reflect.promote_min_retrievals"),
    "nul_in_author": (b'author: {name: "a\\0b", email: a@b}\n', "author.name"),
    "wrong_shapes": (b"reflect: 5\ntiers: nope\n", "tiers"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_CONFIGS))
def test_bad_config_values_from_a_remote_are_held_back_and_reported(tmp_path: Path, remote: Path,
                                                                    clock: FakeClock, kind: str) -> None:
    data, key = HOSTILE_CONFIGS[kind]
    a, b = _setup(tmp_path, remote, clock)
    plant(remote, [b".gitmem.yaml"], FILE, data)
    report = b.sync()
    assert report.action == "fast_forward"
    assert any(key in w and "held back" in w for w in report.warnings), report.warnings
    assert b.config.memory_index_lines == 200 and b.config.author.name == "gitmem"
    assert b.config.lifecycle.promote_min_retrievals == 3 and key in " ".join(b.config.problems)
    # The vault keeps working: writes, reflect, another sync, doctor (which names the value).
    b.add("After the bad config", "Still writing.\n")
    b.reflect()
    assert b.sync().pushed
    found = {f.check: f for f in b.doctor()}
    assert not found["config"].ok and found["fsck"].ok
    fsck = subprocess.run(["git", "fsck", "--strict", "--full"], cwd=b.root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    a.close()
    b.close()


# ------------------------------------------------------------------ names
def test_same_title_on_both_sides_gets_a_unique_file_name(tmp_path: Path, remote: Path,
                                                          clock: FakeClock) -> None:
    a, b = _setup(tmp_path, remote, clock)
    mine = a.add("Standup time", "Standup is at 9:30.\n", tier="long_term")
    theirs = b.add("Standup time", "Standup is at 10:00.\n", tier="long_term")
    assert mine.path.rsplit("/", 1)[-1] == theirs.path.rsplit("/", 1)[-1] == "standup-time.md"
    # (one path in the flat layout, two ids: the merge renames one)
    a.sync()
    report = b.sync()
    assert report.action == "merge"
    assert report.renamed == [{"from": mine.path, "to": mine.path.replace("standup-time.md", "standup-time-2.md")}]
    a.sync()
    for vault in (a, b):
        names = [p.rsplit("/", 1)[-1].lower() for p in git(vault.root, "ls-files").split() if p.endswith(".md")]
        assert len(names) == len(set(names)), names
        assert vault.get(mine.id).body.strip() == "Standup is at 9:30."
        assert vault.get("standup-time").id == theirs.id
        vault.flush()
        assert_clean(vault.root)
    assert "renamed" in git(a.root, "log", "-1", "--format=%B", b.head)
    a.close()
    b.close()


def test_fast_forward_bringing_a_taken_name_becomes_a_merge(tmp_path: Path, remote: Path,
                                                            clock: FakeClock) -> None:
    a, b = _setup(tmp_path, remote, clock)
    first = a.add("Standup time", "Standup is at 9:30.\n", tier="long_term")
    a.sync()
    b.sync()
    copy = a.root / "mid_term" / "Standup-Time.md"   # a second file of that name, made by hand
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text("---\ntitle: Standup time copy\n---\nA copy.\n")
    a.flush()
    git(a.root, "add", "mid_term/Standup-Time.md")
    git(a.root, "commit", "-qm", "copy by hand")
    a.sync()
    report = b.sync()
    assert report.action == "merge" and report.pushed
    assert report.renamed == [{"from": "mid_term/Standup-Time.md", "to": "mid_term/Standup-Time-2.md"}]
    parents = git(b.root, "log", "-1", "--format=%P").split()
    assert len(parents) == 2 and a.head in parents
    assert (b.root / "mid_term" / "Standup-Time-2.md").read_text().endswith("A copy.\n")
    assert b.get("standup-time").id == first.id
    b.flush()
    assert_clean(b.root)
    a.close()
    b.close()


# ------------------------------------------------------------------ robustness
def test_a_git_error_during_sync_is_a_sync_error(tmp_path: Path, remote: Path, clock: FakeClock,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from dulwich.errors import ObjectFormatException
    a, b = _setup(tmp_path, remote, clock)
    a.add("More", "x\n")
    a.sync()

    def broken(self: GitStore, *args: object) -> list[bytes]:
        raise ObjectFormatException("corrupt pack (simulated race)")

    monkeypatch.setattr(GitStore, "walk_new", broken)
    head = b.head
    with pytest.raises(SyncError) as caught:
        b.sync()
    assert caught.value.code == "sync_error" and "ObjectFormatException" in caught.value.message
    assert b.head == head
    a.close()
    b.close()


def test_a_failing_catch_up_after_the_commit_is_reported_not_raised(
        tmp_path: Path, remote: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _setup(tmp_path, remote, clock)
    a.add("Arrives", "Hostile metadata, say.\n")
    a.sync()
    original = Syncer._after_sync

    def hostile(self: Syncer, changes: list, report: object = None) -> None:
        def parse(*_: object) -> None:
            raise ValueError("hostile frontmatter")
        monkeypatch.setattr(self.pipeline, "parse_changes", parse)
        original(self, changes, report)  # type: ignore[arg-type]

    monkeypatch.setattr(Syncer, "_after_sync", hostile)
    report = b.sync()
    assert report.action == "fast_forward" and b.head == a.head
    assert report.warnings and "hostile frontmatter" in report.warnings[0]
    monkeypatch.undo()
    assert "Arrives" in {m.title for m in b.list()}   # the catalog catches up on the next read
    a.close()
    b.close()


# ------------------------------------------------------------ identity
def test_a_remote_holding_another_vault_is_refused(tmp_path: Path, remote: Path, clock: FakeClock) -> None:
    a, b = _setup(tmp_path, remote, clock)
    other = Vault.init(tmp_path / "other", author="agent-o", clock=clock)
    other.add("Someone else's memory", "From an unrelated vault.\n")
    other.flush()
    stranger = tmp_path / "stranger.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(stranger))
    git(other.root, "push", "-q", str(stranger), "HEAD:refs/heads/main")
    stranger_tip = git(stranger, "rev-parse", "main").strip()
    b.add_remote("elsewhere", str(stranger))
    head, state = b.head, _state(b.root)
    with pytest.raises(SyncError) as caught:
        b.sync("elsewhere")
    assert caught.value.code == "unrelated_history"
    assert b.head == head and _state(b.root) == state
    assert git(stranger, "rev-parse", "main").strip() == stranger_tip   # nothing pushed there either
    assert "Someone else's memory" not in {m.title for m in b.list()}
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=b.root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    # An empty remote is a first push, not another vault.
    empty = tmp_path / "empty.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(empty))
    b.add_remote("fresh", str(empty))
    assert b.sync("fresh").pushed and git(empty, "rev-parse", "main").strip() == b.head
    for v in (a, b, other):
        v.close()


def test_two_checkouts_at_different_paths_sync_as_one_vault(tmp_path: Path, remote: Path,
                                                            clock: FakeClock) -> None:
    a, b = _setup(tmp_path, remote, clock)
    moved = tmp_path / "elsewhere" / "same-vault"
    moved.parent.mkdir()
    git(tmp_path, "clone", "-q", str(remote), str(moved))   # another folder, plain git
    with Vault.open(moved, author="agent-m", clock=clock) as m:
        m.add("From the second checkout", "Written at another path.\n")
        assert m.sync().pushed
    a.add("From a", "Written in a.\n")
    assert a.sync().action == "merge"
    assert b.sync().action == "fast_forward"
    assert {x.title for x in b.list()} == {"Shared fact", "From the second checkout", "From a"}
    a.close()
    b.close()


@pytest.mark.parametrize("kind", ["dotgit", "dotdot", "dotgit_upper", "slash_in_name"])
def test_doctor_repair_removes_objects_an_older_refused_sync_left(tmp_path: Path, remote: Path,
                                                                  clock: FakeClock, kind: str) -> None:
    """Before the quarantine, a refused sync kept what it fetched: fsck failed from then on."""
    a, b = _setup(tmp_path, remote, clock)
    bad = plant(remote, *BAD_ENTRIES[kind])
    b.add("Local only", "Kept through the repair.\n")
    b.flush()
    source, target = Repo(str(remote)), Repo(str(b.root))
    try:   # what the older fetch did: every object of the remote into the vault's store
        for sha in source.object_store:
            if sha not in target.object_store:
                target.object_store.add_object(source.object_store[sha])
    finally:
        source.close()
        target.close()
    head = b.head
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=b.root, capture_output=True, text=True)
    assert bad.decode() not in fsck.stderr and " in tree " in fsck.stderr   # the bad tree, unreachable
    found = {f.check: f for f in b.doctor()}
    assert not found["fsck"].ok
    repaired = {f.check: f for f in b.doctor(repair=True)}
    assert repaired["fsck"].ok and repaired["fsck"].repaired
    _no_objects_kept(b.root, bad)
    assert b.head == head and "Local only" in {m.title for m in b.list()}
    assert git(b.root, "status", "--porcelain") == ""
    with pytest.raises(UnsafeRemoteTree):
        b.sync()
    _no_objects_kept(b.root, bad)
    a.close()
    b.close()
