"""The commit author is screened for secrets like every other field: wherever an identity
enters (``--author``, ``GITMEM_AUTHOR``, ``author=`` of the API, a Toolbox's or MCP
server's agent name, ``author:`` / ``user:`` in ``.gitmem.yaml``, an Identity handed
to the git store itself), a secret in its name or email is refused before anything is
written, under ``refuse`` and ``redact``; ``allow`` lets it through."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitmem import Identity, Toolbox, Vault
from gitmem.errors import SecretDetected
from gitmem.store.git import FileChange

from .conftest import git, snapshot
from .test_secrets import SECRETS

# Seven kinds the scanner knows (and an eighth), each as it could sit in a name or an email:
# no '<', '>' or line break (an identity cannot hold those).
KINDS = {
    "github_token": SECRETS["github_token"],
    "aws_access_key": SECRETS["aws_access_key"],
    "slack_token": SECRETS["slack_token"],
    "openai_key": SECRETS["openai_key"],
    "anthropic_key": SECRETS["anthropic_key"],
    "google_api_key": SECRETS["google_api_key"],
    "private_key": "-----BEGIN " + "RSA PRIVATE KEY-----",
    "jwt": SECRETS["jwt"],
}


def authors(kind: str) -> list[str]:
    """The secret in the email, in the name, and as the whole (bare) name."""
    secret = KINDS[kind]
    return [f"bot <{secret}@x.y>", f"bot {secret} <bot@x.y>", secret]


def authors_in_log(root: Path) -> str:
    return git(root, "log", "--all", "--format=%an <%ae>%n%cn <%ce>%n%B")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitmem", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "v"
    with Vault.init(path, author="setup-agent") as vault:
        vault.add("Keeper", "Something to keep.\n")
    return path


def set_policy(root: Path, policy: str) -> None:
    config = root / ".gitmem.yaml"
    config.write_text(config.read_text() + f"secrets: {policy}\n")
    git(root, "commit", "-qam", f"secrets: {policy}")


def assert_refused(err: SecretDetected, kind: str) -> None:
    assert err.code == "secret_detected" and err.exit_code == 2
    assert err.message.startswith("refusing to commit as ") and kind in err.message
    assert "cannot be redacted" in (err.hint or "")
    assert KINDS[kind] not in err.message + str(err.to_dict())   # never echoed, not even in part
    assert f"[REDACTED:{kind}]" in err.message


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_api_author_with_a_secret_is_refused_and_nothing_is_written(root: Path, kind: str) -> None:
    before = snapshot(root)
    with Vault.open(root) as vault:
        for author in authors(kind):
            with pytest.raises(SecretDetected) as info:
                vault.add("Deploy notes", "Nothing secret here.\n", author=author)
            assert_refused(info.value, kind)
            with pytest.raises(SecretDetected):
                vault.update("keeper", append="More.", author=Identity.parse(author))
    for author in authors(kind):
        with pytest.raises(SecretDetected) as info:
            Vault.open(root, author=author)
        assert_refused(info.value, kind)
    assert snapshot(root) == before
    assert KINDS[kind] not in authors_in_log(root)
    assert git(root, "status", "--porcelain") == ""


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_toolbox_agent_with_a_secret_is_refused(root: Path, kind: str) -> None:
    before = snapshot(root)
    for author in authors(kind):
        with pytest.raises(SecretDetected) as info:
            Toolbox(root, agent=author)
        assert_refused(info.value, kind)
        with Vault.open(root) as vault, pytest.raises(SecretDetected):
            Toolbox(vault, agent=author)
    assert snapshot(root) == before and KINDS[kind] not in authors_in_log(root)


@pytest.mark.slow
def test_cli_author_env_and_agent_with_a_secret_exit_2_without_a_traceback(root: Path) -> None:
    before = snapshot(root)
    for kind in sorted(KINDS):
        author = authors(kind)[len(kind) % 3]
        for args, env in ((["--author", author, "add", "Deploy notes", "Nothing secret."], None),
                          (["add", "Deploy notes", "Nothing secret."], {"GITMEM_AUTHOR": author}),
                          (["tools", "call", "--agent", author, "memory_add",
                            '{"title": "Deploy notes", "content": "Nothing secret."}'], None)):
            done = run("-C", str(root), *args, env=env)
            assert done.returncode == 2, (kind, args, done.stdout, done.stderr)
            assert done.stderr.startswith("error: refusing to commit as "), done.stderr
            assert "hint: " in done.stderr and "Traceback" not in done.stderr
            assert KINDS[kind] not in done.stdout + done.stderr
    done = run("-C", str(root), "mcp", "--agent", authors("github_token")[0])
    assert done.returncode == 2 and done.stderr.startswith("error: refusing to commit as "), done.stderr
    assert snapshot(root) == before
    log = authors_in_log(root)
    assert not any(secret in log for secret in KINDS.values())


def test_redact_policy_still_refuses_an_author_and_allow_lets_it_through(root: Path) -> None:
    secret = KINDS["github_token"]
    set_policy(root, "redact")
    with Vault.open(root) as vault:
        head = git(root, "rev-parse", "HEAD")
        with pytest.raises(SecretDetected):
            vault.add("Deploy notes", "Nothing secret.\n", author=f"bot <{secret}@x.y>")
        assert git(root, "rev-parse", "HEAD") == head
    set_policy(root, "allow")
    with Vault.open(root, author=f"bot <{secret}@x.y>") as vault:
        vault.add("Deploy notes", "Nothing secret.\n")
    assert git(root, "log", "-1", "--format=%ae") == f"{secret}@x.y\n"


def test_settings_author_and_user_with_a_secret_are_refused_at_the_write(root: Path) -> None:
    config = root / ".gitmem.yaml"
    settings = config.read_text()
    config.write_text(settings + f"author: deploy-bot <{KINDS['aws_access_key']}@x.y>\n")
    git(root, "commit", "-qam", "a settings author")
    with Vault.open(root) as vault:
        assert vault.list()  # reading is not refused
        with pytest.raises(SecretDetected) as info:
            vault.add("Deploy notes", "Nothing secret.\n")
        assert_refused(info.value, "aws_access_key")
        vault.add("Deploy notes", "Nothing secret.\n", author="clean-agent")  # another author is fine
    config.write_text(settings + f"user: Maya {KINDS['slack_token']} <maya@x.y>\n")
    git(root, "commit", "-qam", "a settings user")
    (root / "long_term" / "note.md").write_text("---\ntitle: A person's note\n---\nWritten in an editor.\n")
    head = git(root, "rev-parse", "HEAD")
    with Vault.open(root) as vault, pytest.raises(SecretDetected) as info:
        vault.commit_outside_edits()
    assert_refused(info.value, "slack_token")
    assert git(root, "rev-parse", "HEAD") == head
    assert not any(secret in authors_in_log(root) for secret in KINDS.values())


def test_the_git_store_refuses_such_an_author_whoever_calls_it(root: Path) -> None:
    """The last line: an Identity handed straight to the store, past every front door."""
    before = snapshot(root)
    objects = git(root, "count-objects", "-v")
    with Vault.open(root) as vault:
        store = vault.services.store
        for kind in ("jwt", "private_key"):
            with store.lock.hold(), pytest.raises(SecretDetected):
                store.git.commit_files([FileChange("long_term/x.md", b"---\ntitle: x\n---\nx\n")], "add: x",
                                       Identity("bot", "bot@x.y"), committer=Identity(KINDS[kind], "c@x.y"))
        vault.author = Identity("bot", f"{KINDS['google_api_key']}@x.y")   # the default author, set later
        with pytest.raises(SecretDetected):
            vault.add("Deploy notes", "Nothing secret.\n")
    assert snapshot(root) == before
    assert git(root, "count-objects", "-v") == objects


def test_import_with_such_an_author_is_refused_before_reading(root: Path, tmp_path: Path) -> None:
    source = tmp_path / "memory.jsonl"
    source.write_text('{"type": "entity", "name": "Maya", "entityType": "person", "observations": ["x"]}\n')
    before = snapshot(root)
    with Vault.open(root) as vault, pytest.raises(SecretDetected):
        vault.import_from("mcp-memory", source, author=f"importer <{KINDS['openai_key']}@x.y>")
    assert snapshot(root) == before
