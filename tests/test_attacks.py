"""The trust boundary, tried as an attacker would: planted symbolic links, secrets and
hostile names through every front door (Python API, CLI, each agent tool profile,
MCP stdio, the watcher's outside-edit commit).

Every case asserts the same four things: the attack is refused with a gitmem
error (never a traceback), nothing outside the vault changed, nothing of the
attacker's entered git history (``git rev-list --all --objects`` + ``cat-file``),
and every other command still works afterwards.

Malicious remotes (sync, clone) are in ``test_sync_attacks.py``; hostile
frontmatter values in ``test_hostile_values.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from gitmem import GitmemError, Toolbox, Vault

from .conftest import git, mcp_params

OUTSIDE_TEXT = "OUTSIDE-FILE-7f3a: a private file of the user, never to be read by gitmem\n"


# ------------------------------------------------------------------ helpers
def run_cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GITMEM_VAULT=str(root))
    return subprocess.run([sys.executable, "-m", "gitmem", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def history_blobs(root: Path) -> list[bytes]:
    """Every blob reachable from any ref (what a clone or a push would carry)."""
    ids = [line.split(" ", 1)[0] for line in git(root, "rev-list", "--all", "--objects").splitlines()]
    out = subprocess.run(["git", "cat-file", "--batch"], cwd=root, input=("\n".join(ids) + "\n").encode(),
                         capture_output=True, check=True).stdout
    blobs, pos = [], 0
    while pos < len(out):
        header_end = out.index(b"\n", pos)
        _sha, kind, size = out[pos:header_end].split(b" ")
        start = header_end + 1
        end = start + int(size)
        if kind == b"blob":
            blobs.append(out[start:end])
        pos = end + 1
    return blobs


def in_history(root: Path, needle: str) -> bool:
    data = needle.encode()
    return any(data in blob for blob in history_blobs(root)) or needle in git(root, "log", "--all", "--format=%B")


def files_under(folder: Path) -> dict[str, bytes]:
    out = {}
    for here, _dirs, names in os.walk(folder):
        for name in names:
            full = Path(here) / name
            if not full.is_symlink():
                out[full.relative_to(folder).as_posix()] = full.read_bytes()
    return out


class Scene:
    """A vault with one memory, a private folder next to it, and what must never change."""

    def __init__(self, tmp_path: Path) -> None:
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        (self.outside / "secret.md").write_text(OUTSIDE_TEXT)
        self.vault = Vault.init(tmp_path / "vault", author="tester")
        self.root = self.vault.root
        self.vault.add("Standup time", "The standup is at 9:30.", tier="long_term")
        self.vault.flush()
        self.outside_before = files_under(self.outside)
        self.git_config = (self.root / ".git" / "config").read_bytes()
        self.hooks = sorted(os.listdir(self.root / ".git" / "hooks"))

    def assert_untouched(self) -> None:
        assert files_under(self.outside) == self.outside_before, "a file outside the vault changed"
        assert (self.root / ".git" / "config").read_bytes() == self.git_config, ".git/config changed"
        assert sorted(os.listdir(self.root / ".git" / "hooks")) == self.hooks
        assert not in_history(self.root, "OUTSIDE-FILE-7f3a"), "outside content entered history"
        assert not in_history(self.root, "fsmonitor"), "a .git/config payload entered history"
        fsck = subprocess.run(["git", "fsck", "--full"], cwd=self.root, capture_output=True, text=True)
        assert fsck.returncode == 0, fsck.stderr

    def assert_still_works(self) -> None:
        """Every other command keeps working, as a person runs them."""
        for args in (["ls"], ["search", "standup"], ["show", "Standup time"], ["add", "Still works", "yes"],
                     ["doctor"]):
            result = run_cli(self.root, *args)
            assert "Traceback" not in result.stderr, (args, result.stderr)
            assert result.returncode in ((0, 1) if args[0] == "doctor" else (0,)), (args, result.stderr)
        assert "Still works" in run_cli(self.root, "ls").stdout


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    s = Scene(tmp_path)
    yield s
    s.vault.close()


def attempt(call: Callable[[], Any]) -> str:
    """Run one attack; return everything it produced as text (result or error)."""
    try:
        result = call()
    except GitmemError as exc:
        return json.dumps(exc.to_dict())
    return json.dumps(result, default=str) if not isinstance(result, str) else result


def tool(vault: Vault, profile: str, name: str, args: dict[str, Any]) -> Callable[[], Any]:
    return lambda: Toolbox(vault, profile, agent="attacker").call(name, args)


# ------------------------------------------------------------ planted links
# kind -> (link path in the vault, link target, paths an attacker then uses through it)
LINKS: dict[str, tuple[str, str, list[str]]] = {
    "to .git": ("long_term/g", "../.git", ["long_term/g/config", "long_term/g/hooks/post-commit",
                                           "long_term/g/config.md"]),
    "to an outside file": ("short_term/h.md", "{outside}/secret.md", ["short_term/h.md"]),
    "to an outside folder": ("long_term/o", "{outside}", ["long_term/o/secret.md", "long_term/o/new.md"]),
    "as a tier folder": ("mid_term", "{outside}", ["mid_term/secret.md", "mid_term/new.md"]),
}
PAYLOAD = "[core]\n\tfsmonitor = touch /tmp/gitmem-pwned\n"


def plant(scene: Scene, kind: str) -> list[str]:
    link, target, used = LINKS[kind]
    full = scene.root / link
    if full.is_dir() and not full.is_symlink():  # a tier folder replaced by a link
        for child in full.iterdir():
            child.unlink()
        full.rmdir()
    os.symlink(target.format(outside=scene.outside), full)
    return used


def doors(vault: Vault, path: str) -> dict[str, Callable[[], Any]]:
    """Every front door an agent or a script can point at ``path``."""
    tier, rest = path.split("/", 1)
    view = rest if tier == "long_term" else path  # the files/claude view is rooted at long_term/
    return {
        "api add(path=)": lambda: vault.add("Through a link", PAYLOAD, path=path),
        "api write_text": lambda: vault.files.write_text(path, PAYLOAD),
        "api read_text": lambda: vault.files.read_text(path),
        "api get": lambda: vault.get(path),
        "api update": lambda: vault.update(path, body=PAYLOAD),
        "api rename_path": lambda: vault.files.rename_path(path, "long_term/moved.md"),
        "api remove_path": lambda: vault.files.remove_path(path),
        "files memory_write": tool(vault, "files", "memory_write", {"path": view, "content": PAYLOAD}),
        "files memory_read": tool(vault, "files", "memory_read", {"path": view}),
        "claude create": tool(vault, "claude", "memory", {"command": "create", "path": f"/memories/{view}",
                                                          "file_text": PAYLOAD}),
        "claude view": tool(vault, "claude", "memory", {"command": "view", "path": f"/memories/{view}"}),
        "claude str_replace": tool(vault, "claude", "memory", {
            "command": "str_replace", "path": f"/memories/{view}", "old_str": "OUTSIDE", "new_str": "x"}),
        "claude insert": tool(vault, "claude", "memory", {
            "command": "insert", "path": f"/memories/{view}", "insert_line": 0, "insert_text": PAYLOAD}),
        "claude delete": tool(vault, "claude", "memory", {"command": "delete", "path": f"/memories/{view}"}),
        "claude rename": tool(vault, "claude", "memory", {"command": "rename", "old_path": f"/memories/{view}",
                                                          "new_path": "/memories/renamed.md"}),
        "claude rename onto": tool(vault, "claude", "memory", {
            "command": "rename", "old_path": "/memories/" + _standup_view(vault), "new_path": f"/memories/{view}"}),
        "gitmem memory_read": tool(vault, "gitmem", "memory_read", {"ref": path}),
        "gitmem memory_update": tool(vault, "gitmem", "memory_update", {"ref": path, "content": PAYLOAD}),
        "gitmem memory_search": tool(vault, "gitmem", "memory_search", {"query": "OUTSIDE private"}),
        "gitmem memory_list": tool(vault, "gitmem", "memory_list", {}),
        "fsm read_memory": tool(vault, "fsm", "read_memory", {"filename": path.rsplit("/", 1)[-1], "tier": tier}),
        "fsm update_memory": tool(vault, "fsm", "update_memory", {"filename": path.rsplit("/", 1)[-1],
                                                                  "content": PAYLOAD}),
        "index memory_read": tool(vault, "index", "memory_read", {"topics": [rest.rsplit(".", 1)[0]]}),
        "agentos memory_search": tool(vault, "agentos", "memory_search", {"query": "OUTSIDE private"}),
        "vault search_memories": tool(vault, "vault", "search_memories", {"query": "OUTSIDE private"}),
        "vault read_memory": tool(vault, "vault", "read_memory", {"memoryId": path}),
        "outside-edit commit": vault.commit_outside_edits,
        "search": lambda: [h.title + h.snippet for h in vault.search("OUTSIDE private").hits],
        "refresh": lambda: vault.refresh(),
    }


def _standup_view(vault: Vault) -> str:
    return vault.files.view_path(vault.get("Standup time").path)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(LINKS))
def test_a_planted_link_is_never_followed_by_any_front_door(scene: Scene, kind: str) -> None:
    used = plant(scene, kind)
    head = scene.vault.head
    for path in used:
        for name, call in doors(scene.vault, path).items():
            produced = attempt(call)
            assert "OUTSIDE-FILE-7f3a" not in produced, f"{name} on {path} leaked the outside file"
            assert "Traceback" not in produced
    scene.vault.flush()
    assert scene.vault.head == head, git(scene.root, "log", "--stat", "-3")
    scene.assert_untouched()
    # doctor names each link as refused; the rest of the vault keeps working
    report = run_cli(scene.root, "doctor", "--json")
    assert "Traceback" not in report.stderr
    links = next(f for f in json.loads(report.stdout)["findings"] if f["check"] == "links")
    assert links["ok"] is False and LINKS[kind][0] in links["paths"]
    scene.assert_still_works()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["to .git", "to an outside file"])
def test_the_cli_never_follows_a_planted_link(scene: Scene, kind: str) -> None:
    used = plant(scene, kind)
    scene.vault.close()
    for path in used:
        for args in (["show", path], ["edit", path, "--body", PAYLOAD], ["mv", path, "short_term"],
                     ["add", "Through a link", PAYLOAD, "--path", path], ["search", "OUTSIDE"],
                     ["log", path], ["rm", path]):
            result = run_cli(scene.root, *args)
            assert "Traceback" not in result.stderr, (args, result.stderr)
            assert "OUTSIDE-FILE-7f3a" not in result.stdout + result.stderr, args
    scene.assert_untouched()
    scene.assert_still_works()


def test_a_link_in_place_of_memory_md_is_replaced_not_followed(scene: Scene) -> None:
    memory_md = scene.root / "MEMORY.md"
    memory_md.unlink()
    os.symlink(scene.outside / "secret.md", memory_md)
    scene.vault.add("After the link", "a write regenerates MEMORY.md")
    assert not memory_md.is_symlink() and "After the link" in memory_md.read_text()
    assert "OUTSIDE-FILE-7f3a" not in memory_md.read_text()
    assert "OUTSIDE" not in attempt(tool(scene.vault, "index", "memory_read", {}))
    scene.vault.flush()
    scene.assert_untouched()


mcp = pytest.importorskip("mcp", reason="the MCP SDK is an optional extra: pip install gitmem-vault[mcp]")
anyio = pytest.importorskip("anyio")


@pytest.mark.slow
def test_mcp_stdio_cannot_rewrite_git_config_through_a_link(scene: Scene) -> None:
    plant(scene, "to .git")
    plant(scene, "to an outside file")
    scene.vault.close()

    def server(profile: str) -> Any:
        return mcp_params(scene.root, profile, "attacker")

    async def session() -> list[Any]:
        results = []
        async with mcp.Client(server("claude")) as client:
            results.append(await client.call_tool("memory", {"command": "create", "path": "/memories/g/config",
                                                             "file_text": PAYLOAD}))
            results.append(await client.call_tool("memory", {"command": "view", "path": "/memories/g/config"}))
            results.append(await client.call_tool("memory", {"command": "view",
                                                             "path": "/memories/short_term/h.md"}))
        async with mcp.Client(server("files")) as client:
            results.append(await client.call_tool("memory_write", {"path": "g/config", "content": PAYLOAD}))
            results.append(await client.call_tool("memory_read", {"path": "short_term/h.md"}))
        return results

    results = anyio.run(session)
    for result in results:
        assert result.is_error, result
        assert "OUTSIDE-FILE-7f3a" not in json.dumps(result.structured_content)
        assert result.structured_content["error"]["code"] in ("unsafe_path", "invalid_path")
    scene.assert_untouched()
    scene.assert_still_works()


# ------------------------------------------------------------------ secrets
SECRETS: dict[str, str] = {
    "aws_access_key": "AKIAQ3EGT5LZ7XW2KD4M",
    "github_token": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "gitlab_token": "glpat-" + "xR4kT9vQ2mW7zL1nB8cJ",
    "slack_token": "xoxb-" + "2048193745-9183746520-aZ3kQ8vT1mX5pL7w",
    "slack_webhook": "https://hooks.slack.com/services/T0A1B2C3D/B4E5F6G7H/" + "x9Y8z7W6v5U4t3S2r1Q0p9O8",
    "anthropic_key": "sk-ant-api03-" + "Zq4Rt8Yv2Lm6Np0Wx3Kj7Hg1Fd5Sa9QzXc",
    "openai_key": "sk-proj-" + "T3BlbkFJ4kQ9vR2mZ8wL5nX1cH7pJ6dS0aYb",
    "google_api_key": "AIza" + "SyD4kQ9vR2mZ8wL5nX1cH7pJ6dS0aYbT3eK",
    "stripe_key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq9Xk3\n-----END RSA PRIVATE KEY-----",
    "generic_secret": "db_password = Xk9mQ2vL7pR4tZwB",
    "url_credential": "postgres://admin:Xk9#mQ2vL7pR4tZw@db.example/prod",
    "url_token": "https://deploy:" + "Tq8vZ2mK9xL4wR7n" + "@git.example/team/memories.git",
}
#: the part of each secret that must never be stored (what a scanner would leak)
MARK = {kind: (text.split("= ")[-1] if kind == "generic_secret" else
               "Xk9#mQ2vL7pR4tZw" if kind == "url_credential" else
               "Tq8vZ2mK9xL4wR7n" if kind == "url_token" else
               text.splitlines()[1] if kind == "private_key" else text)
        for kind, text in SECRETS.items()}


def secret_doors(vault: Vault, secret: str, pathish: str) -> dict[str, Callable[[], Any]]:
    body = f"Notes for the deploy.\n{secret}\n"
    return {
        "api add body": lambda: vault.add("Deploy notes", body),
        "api add title": lambda: vault.add(f"Key {secret.splitlines()[0]}", "body"),
        "api add tags": lambda: vault.add("Tagged", "body", tags=[secret.splitlines()[0]]),
        "api add field": lambda: vault.add("Field", "body", summary=secret),
        "api write": lambda: vault.write(body),
        "api update": lambda: vault.update("Standup time", body=body),
        "api append": lambda: vault.update("Standup time", append=secret),
        "api write_text": lambda: vault.files.write_text("long_term/deploy.md", body),
        "api write_text path": lambda: vault.files.write_text(f"long_term/{pathish}.md", "harmless"),
        "files memory_write": tool(vault, "files", "memory_write", {"path": "deploy.md", "content": body}),
        "files memory_write path": tool(vault, "files", "memory_write", {"path": f"{pathish}.md",
                                                                         "content": "harmless"}),
        "claude create": tool(vault, "claude", "memory", {"command": "create", "path": "/memories/d.md",
                                                          "file_text": body}),
        "claude str_replace": tool(vault, "claude", "memory", {
            "command": "str_replace", "path": "/memories/" + _standup_view(vault), "old_str": "9:30",
            "new_str": secret}),
        "claude rename to path": tool(vault, "claude", "memory", {
            "command": "rename", "old_path": "/memories/" + _standup_view(vault),
            "new_path": f"/memories/{pathish}.md"}),
        "gitmem memory_add": tool(vault, "gitmem", "memory_add", {"content": body}),
        "gitmem memory_add title": tool(vault, "gitmem", "memory_add", {"content": "x",
                                                                        "title": secret.splitlines()[0]}),
        "agentos memory_add": tool(vault, "agentos", "memory_add", {"content": body}),
        "vault write_memory": tool(vault, "vault", "write_memory", {"content": body}),
        "fsm create_memory": tool(vault, "fsm", "create_memory", {"content": body, "title": "deploy"}),
        "fsm update_memory": tool(vault, "fsm", "update_memory", {"filename": vault.get("Standup time").path
                                                                  .rsplit("/", 1)[-1], "content": body}),
    }


@pytest.mark.slow
def test_every_secret_kind_is_refused_by_every_front_door(scene: Scene) -> None:
    vault = scene.vault
    head = vault.head
    token_for_paths = SECRETS["github_token"]
    for kind, secret in SECRETS.items():
        for name, call in secret_doors(vault, secret, token_for_paths).items():
            produced = attempt(call)
            # (a multi-line key in a one-line field is refused as such, before the scan)
            codes = ("secret_detected",) if "\n" not in secret else ("secret_detected", "invalid_metadata")
            assert any(f'"code": "{c}"' in produced for c in codes), f"{name} stored a {kind}: {produced[:300]}"
            assert MARK[kind] not in produced, f"{name} echoed the {kind}"
    assert vault.head == head
    vault.flush()
    for kind in SECRETS:
        assert not in_history(scene.root, MARK[kind]), f"{kind} entered history"
        assert MARK[kind] not in (scene.root / "MEMORY.md").read_text()
    scene.assert_still_works()


def test_a_person_saved_secret_is_not_committed_by_the_watcher_path(scene: Scene) -> None:
    vault = scene.vault
    note = scene.root / "short_term" / "deploy.md"
    note.write_text(f"---\ntitle: deploy\n---\n{SECRETS['url_credential']}\n")
    other = scene.root / "short_term" / "fine.md"
    other.write_text("---\ntitle: fine\n---\nnothing secret here\n")
    sha = vault.commit_outside_edits()
    assert sha is not None  # the harmless edit is committed ...
    assert "short_term/deploy.md" in vault.outside_refused  # ... the secret one reported, not committed
    assert "url_credential" in vault.outside_refused["short_term/deploy.md"]
    assert note.read_text().endswith(SECRETS["url_credential"] + "\n")  # the person's file is untouched
    vault.flush()
    assert not in_history(scene.root, MARK["url_credential"])
    assert "short_term/deploy.md" in git(scene.root, "status", "--porcelain")


def test_the_cli_refuses_secrets_in_content_and_title(scene: Scene) -> None:
    scene.vault.close()
    for args in (["add", "Deploy", SECRETS["url_credential"]], ["add", SECRETS["aws_access_key"], "body"],
                 ["add", "Tagged", "body", "--tag", SECRETS["github_token"]]):
        result = run_cli(scene.root, *args, "--json")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert json.loads(result.stdout or result.stderr)["error"]["code"] == "secret_detected"
    for kind in ("url_credential", "aws_access_key", "github_token"):
        assert not in_history(scene.root, MARK[kind])


def test_redact_policy_redacts_file_tool_writes(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", author="tester") as vault:
        config = vault.root / ".gitmem.yaml"
        config.write_text(config.read_text() + "secrets: redact\n")
        git(vault.root, "commit", "-qam", "redact secrets")
    with Vault.open(tmp_path / "v", author="tester") as vault:
        out = Toolbox(vault, "files").call("memory_write", {"path": "deploy.md",
                                                            "content": f"db: {SECRETS['url_credential']}\n"})
        assert "error" not in out, out
        text = (vault.root / "long_term" / "deploy.md").read_text()
        assert "[REDACTED:url_credential]" in text and MARK["url_credential"] not in text
        vault.flush()
        assert not in_history(vault.root, MARK["url_credential"])


# ------------------------------------------------------------------- names
def test_case_colliding_names_are_refused_through_every_front_door(scene: Scene) -> None:
    vault = scene.vault
    assert "error" not in Toolbox(vault, "files").call("memory_write", {"path": "Notes.md", "content": "a"})
    head = vault.head
    for name, call in {
        "files": tool(vault, "files", "memory_write", {"path": "notes.md", "content": "b"}),
        "files other folder": tool(vault, "files", "memory_write", {"path": "x/NOTES.md", "content": "b"}),
        "claude create": tool(vault, "claude", "memory", {"command": "create", "path": "/memories/notes.md",
                                                          "file_text": "b"}),
        "claude rename": tool(vault, "claude", "memory", {"command": "rename",
                                                          "old_path": "/memories/" + _standup_view(vault),
                                                          "new_path": "/memories/nOtEs.md"}),
        "api add(path=)": lambda: vault.add("notes", "b", path="short_term/notes.md"),
        "api write_text": lambda: vault.files.write_text("mid_term/notes.md", "b"),
    }.items():
        produced = attempt(call)
        assert '"conflict"' in produced, f"{name}: {produced}"
    assert vault.head == head
    names = git(scene.root, "ls-tree", "-r", "--name-only", "HEAD").lower().split()
    assert len([n for n in names if n.endswith("/notes.md")]) == 1


@pytest.mark.parametrize("bad", ["x" * 300 + ".md", "caf\udce9.md", "a\udc80b/c.md"])
def test_long_and_undecodable_names_get_gitmem_errors(scene: Scene, bad: str) -> None:
    vault = scene.vault
    head = vault.head
    for name, call in {
        "api add(path=)": lambda: vault.add("Long", "x", path=f"long_term/{bad}"),
        "api write_text": lambda: vault.files.write_text(f"long_term/{bad}", "x"),
        "files": tool(vault, "files", "memory_write", {"path": bad, "content": "x"}),
        "claude": tool(vault, "claude", "memory", {"command": "create", "path": f"/memories/{bad}",
                                                   "file_text": "x"}),
        "api get": lambda: vault.get(f"long_term/{bad}"),
    }.items():
        produced = attempt(call)
        assert '"code"' in produced and "Traceback" not in produced, f"{name}: {produced[:200]}"
    assert vault.head == head


def test_a_lone_surrogate_never_reaches_a_file(scene: Scene) -> None:
    vault = scene.vault
    head = vault.head
    for name, call in {
        "api add title": lambda: vault.add("bad \ud800 title", "x"),
        "api add tags": lambda: vault.add("Tagged", "x", tags=["ok", "bad\udfff"]),
        "api add body": lambda: vault.add("Body", "bad \ud800 body"),
        "api write_text": lambda: vault.files.write_text("long_term/s.md", "bad \ud800"),
        "files": tool(vault, "files", "memory_write", {"path": "s.md", "content": "bad \ud800"}),
        "claude": tool(vault, "claude", "memory", {"command": "create", "path": "/memories/s.md",
                                                   "file_text": "bad \ud800"}),
        "gitmem memory_add": tool(vault, "gitmem", "memory_add", {"content": "bad \ud800"}),
    }.items():
        produced = attempt(call)
        assert '"code"' in produced, f"{name} stored a lone surrogate: {produced[:200]}"
    assert vault.head == head
    for path in git(scene.root, "ls-tree", "-r", "--name-only", "HEAD").split():
        (scene.root / path).read_bytes().decode("utf-8")  # every file is valid UTF-8


# ------------------------------------------------------ hostile values arriving by sync
HOSTILE_FRONTMATTER = [
    "importance: 99999999999999999999999",
    'title: "\\ud800"',
    "tags: [null, 1, {a: b}, [x]]",
    "strength: .nan",
    "created: 2026-13-45",
    'summary: "\\udfff"',
]


@pytest.mark.slow
@pytest.mark.parametrize("line", HOSTILE_FRONTMATTER)
def test_a_hostile_value_arriving_by_sync_never_stops_the_vault(tmp_path: Path, line: str) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    with Vault.init(tmp_path / "a", author="alice") as a:
        a.add_remote("origin", str(remote))
        a.add("Standup time", "The standup is at 9:30.")
        a.sync()
    b = Vault.clone(str(remote), tmp_path / "b", author="bob")
    b.close()
    # a collaborator commits a file with a hostile value, with plain git, and pushes it
    hostile = tmp_path / "a" / "long_term" / "hostile.md"
    hostile.write_text(f"---\n{line}\n---\nZebra quokka narwhal.\n")
    git(tmp_path / "a", "add", "-A")
    git(tmp_path / "a", "-c", "user.name=c", "-c", "user.email=c@x", "commit", "-qm", "hostile")
    git(tmp_path / "a", "push", "-q", str(remote), "main")
    for args in (["sync"], ["ls"], ["search", "zebra"], ["show", "long_term/hostile.md"],
                 ["add", "After the sync", "still works"], ["reflect", "--dry-run"], ["doctor"]):
        result = run_cli(tmp_path / "b", *args)
        assert "Traceback" not in result.stderr, (args, result.stderr)
        assert result.returncode in ((0, 1) if args[0] == "doctor" else (0,)), (args, result.stderr)
    assert "Zebra" in run_cli(tmp_path / "b", "search", "zebra").stdout
    assert (tmp_path / "b" / "long_term" / "hostile.md").read_text() == hostile.read_text()  # never rewritten
    doctor = json.loads(run_cli(tmp_path / "b", "doctor", "--json").stdout)
    metadata = next(f for f in doctor["findings"] if f["check"] == "metadata")
    assert "long_term/hostile.md" in metadata["paths"]
