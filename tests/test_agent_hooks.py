"""``gitmem agent``: coding-agent hooks driven as the agent drives them.

Every hook runs in a real subprocess with its JSON on stdin; every
configuration file is a real file under tmp_path (HOME is tmp_path/home, see
conftest.py); commits are checked with the git CLI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitmem import Vault

from .conftest import git, holding_the_lock

AGENT = "claude-code"


def gitmem(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitmem", *args], cwd=cwd, input=stdin,
                          capture_output=True, text=True, timeout=120)


def hook(event: str, payload: Any, *, vault: Path, cwd: Path, extra: tuple[str, ...] = ()
         ) -> subprocess.CompletedProcess[str]:
    stdin = payload if isinstance(payload, str) else json.dumps(payload)
    return gitmem("agent", "hook", AGENT, event, "--vault", str(vault), *extra, cwd=cwd, stdin=stdin)


def commits(root: Path) -> list[str]:
    return git(root, "log", "--format=%H").split()


def make_vault(root: Path) -> Path:
    """A vault with a rule and a goal (protected context) and a preference (MEMORY.md)."""
    with Vault.init(root, author="tester") as v:
        v.add("Never force-push main", "Open a pull request instead.", type="rule")
        v.add("Ship the parser by Friday", "The release depends on it.", type="goal")
        v.add("Prefers pytest", "Use pytest fixtures, not unittest classes.", type="preference")
    return root


@pytest.fixture
def vault_dir(tmp_path: Path) -> Path:
    return make_vault(tmp_path / "vault")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


def write_transcript(path: Path, turns: list[tuple[str, Any]], *, junk: bool = True) -> Path:
    """A Claude Code JSONL transcript: one JSON object a line."""
    lines = [json.dumps({"type": "summary", "summary": "older work", "leafUuid": "x"})]
    for i, (role, content) in enumerate(turns):
        lines.append(json.dumps({"type": role, "uuid": f"u{i}", "sessionId": "sess-1",
                                 "message": {"role": role, "content": content}}))
        if junk and i == 0:
            lines.append("{not json")
            lines.append(json.dumps({"type": "user", "isMeta": True, "message": {
                "role": "user", "content": "<command-name>/clear</command-name>"}}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


CONVERSATION: list[tuple[str, Any]] = [
    ("user", "Please fix the flaky login test"),
    ("assistant", [{"type": "thinking", "thinking": "PRIVATE-THOUGHT"},
                   {"type": "text", "text": "Looking at tests/test_login.py first."},
                   {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "x"}}]),
    ("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "TOOL-OUTPUT-XYZ"}]),
    ("assistant", [{"type": "text", "text": "Fixed: the test used the wall clock; it now injects one."}]),
]


def session_payload(transcript: Path, event: str = "SessionEnd", **more: Any) -> dict[str, Any]:
    return {"session_id": "sess-1", "transcript_path": str(transcript), "cwd": "/work/app",
            "hook_event_name": event, **more}


# ------------------------------------------------------------- session start
def test_session_start_prints_protected_context_then_memory_md(vault_dir: Path, project: Path) -> None:
    before = commits(vault_dir)
    result = hook("session-start", {"session_id": "s", "hook_event_name": "SessionStart",
                                    "source": "startup", "cwd": str(project)}, vault=vault_dir, cwd=project)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    context = out["hookSpecificOutput"]["additionalContext"]
    assert "Never force-push main" in context and "Ship the parser by Friday" in context
    memory_md = (vault_dir / "MEMORY.md").read_text(encoding="utf-8")
    assert "Prefers pytest" in memory_md and "Prefers pytest" in context
    # Protected context first: the rule comes before the MEMORY.md index.
    assert context.index("Never force-push main") < context.index("Prefers pytest")
    assert len(context) <= 9000
    assert commits(vault_dir) == before  # reading never commits


def test_session_start_is_bounded_by_max_chars(vault_dir: Path, project: Path) -> None:
    with Vault.open(vault_dir, author="tester") as v:
        for i in range(40):
            v.add(f"Long note number {i}", "word " * 200, summary="x" * 150)
    result = hook("session-start", {"source": "startup"}, vault=vault_dir, cwd=project,
                  extra=("--max-chars", "1500"))
    assert result.returncode == 0, result.stderr
    context = json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]
    assert len(context) <= 1500
    assert "Never force-push main" in context  # the protected part keeps its room
    assert "truncated" in context


def test_session_start_without_a_vault_exits_0_quietly(tmp_path: Path, project: Path) -> None:
    result = hook("session-start", {"source": "startup"}, vault=tmp_path / "missing", cwd=project)
    assert result.returncode == 0
    assert result.stdout == ""
    assert result.stderr.startswith("gitmem:") and "missing" in result.stderr


# ------------------------------------------------------------- session notes
def test_session_end_saves_one_episodic_commit_by_the_agent(vault_dir: Path, project: Path,
                                                           tmp_path: Path) -> None:
    transcript = write_transcript(tmp_path / "t.jsonl", CONVERSATION)
    before = commits(vault_dir)
    result = hook("session-end", session_payload(transcript, reason="exit"), vault=vault_dir, cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    after = commits(vault_dir)
    assert len(after) == len(before) + 1 and after[1:] == before
    assert git(vault_dir, "log", "-1", "--format=%an").strip() == AGENT
    changed = git(vault_dir, "show", "--name-only", "--format=", "HEAD").split()
    note_path = next(p for p in changed if p.startswith("short_term/"))
    with Vault.open(vault_dir) as v:
        note = v.get(note_path)
    assert note.type == "episodic" and note.meta["tier"] == "short_term"
    assert note.meta["agent"] == AGENT and "session-note" in note.meta["tags"]
    assert "Please fix the flaky login test" in note.body
    assert "it now injects one" in note.body
    for hidden in ("TOOL-OUTPUT-XYZ", "PRIVATE-THOUGHT", "/clear"):
        assert hidden not in note.body
    assert git(vault_dir, "status", "--porcelain") == ""


def test_pre_compact_then_session_end_saves_the_same_turns_once(vault_dir: Path, project: Path,
                                                                tmp_path: Path) -> None:
    transcript = write_transcript(tmp_path / "t.jsonl", CONVERSATION)
    before = commits(vault_dir)
    first = hook("pre-compact", session_payload(transcript, "PreCompact", trigger="auto"),
                 vault=vault_dir, cwd=project)
    second = hook("session-end", session_payload(transcript, reason="exit"), vault=vault_dir, cwd=project)
    assert first.returncode == 0 and second.returncode == 0
    assert len(commits(vault_dir)) == len(before) + 1
    assert "already saved" in second.stderr


def test_session_note_keeps_only_the_last_turns_bounded(vault_dir: Path, project: Path,
                                                        tmp_path: Path) -> None:
    turns: list[tuple[str, Any]] = []
    for i in range(60):
        turns.append(("user", f"QUESTION-{i} " + "q" * 3000))
        turns.append(("assistant", [{"type": "text", "text": f"ANSWER-{i} " + "a" * 3000}]))
    transcript = write_transcript(tmp_path / "long.jsonl", turns)
    result = hook("session-end", session_payload(transcript), vault=vault_dir, cwd=project)
    assert result.returncode == 0, result.stderr
    body = git(vault_dir, "show", "HEAD", "--format=", "--", "short_term").strip()
    assert "ANSWER-59" in body and "QUESTION-59" in body
    assert "QUESTION-0 " not in body and "ANSWER-50 " not in body
    added = [line for line in body.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert sum(len(line) for line in added) < 9000


def test_session_note_redacts_secrets(vault_dir: Path, project: Path, tmp_path: Path) -> None:
    key = "AKIA" + "Q3EGRZ7BN2XW5KLM"
    transcript = write_transcript(tmp_path / "t.jsonl", [
        ("user", "deploy it"), ("assistant", [{"type": "text", "text": f"Used key {key} to deploy."}])])
    result = hook("session-end", session_payload(transcript), vault=vault_dir, cwd=project)
    assert result.returncode == 0, result.stderr
    shown = git(vault_dir, "show", "HEAD")
    assert "Used key" in shown and key not in shown


@pytest.mark.slow
@pytest.mark.parametrize("case", ["missing", "garbled", "empty", "no_path", "bad_stdin", "not_object"])
def test_bad_transcript_or_input_exits_0_and_commits_nothing(case: str, vault_dir: Path, project: Path,
                                                             tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    payload: Any = session_payload(transcript)
    if case == "garbled":
        transcript.write_bytes(b"\x00\xff garbage\n{\"type\": \"user\"\n[1, 2]\n{\"type\": \"user\", \"message\": 5}\n")
    elif case == "empty":
        transcript.write_text("", encoding="utf-8")
    elif case == "no_path":
        payload = {"session_id": "s"}
    elif case == "bad_stdin":
        payload = "this is not json {"
    elif case == "not_object":
        payload = "[1, 2, 3]"
    before = commits(vault_dir)
    result = hook("session-end", payload, vault=vault_dir, cwd=project)
    assert result.returncode == 0
    assert result.stdout == ""
    assert result.stderr.startswith("gitmem:") and len(result.stderr.splitlines()) == 1
    assert commits(vault_dir) == before
    assert git(vault_dir, "status", "--porcelain") == ""


def test_unknown_event_or_agent_exits_0(vault_dir: Path, project: Path) -> None:
    for args in (("agent", "hook", AGENT, "teleport"), ("agent", "hook", "other-agent", "session-start")):
        result = gitmem(*args, "--vault", str(vault_dir), cwd=project, stdin="{}")
        assert result.returncode == 0
        assert result.stdout == "" and "gitmem:" in result.stderr


# ------------------------------------------------------------- install
def install(project: Path, vault: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return gitmem("agent", "install", AGENT, "--vault", str(vault), "--json", *more, cwd=project)


def test_install_writes_hooks_and_mcp_server(vault_dir: Path, project: Path) -> None:
    result = install(project, vault_dir)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [f["action"] for f in report["files"]] == ["created", "created"]
    settings = json.loads((project / ".claude" / "settings.json").read_text(encoding="utf-8"))
    assert set(settings) == {"hooks"}
    assert set(settings["hooks"]) == {"SessionStart", "PreCompact", "SessionEnd"}
    for event, verb in (("SessionStart", "session-start"), ("PreCompact", "pre-compact"),
                        ("SessionEnd", "session-end")):
        [group] = settings["hooks"][event]
        [handler] = group["hooks"]
        assert handler["type"] == "command" and isinstance(handler["timeout"], int)
        assert f"gitmem agent hook claude-code {verb} --vault {vault_dir}" in handler["command"]
    servers = json.loads((project / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    entry = servers["gitmem"]
    assert entry["type"] == "stdio"
    assert entry["args"][-7:] == ["mcp", "--vault", str(vault_dir), "--profile", "gitmem",
                                  "--agent", "claude-code"]
    assert not (Path.home() / ".claude").exists()  # project scope leaves the user's files alone


def test_installed_commands_run_as_the_agent_runs_them(vault_dir: Path, project: Path,
                                                       tmp_path: Path) -> None:
    assert install(project, vault_dir, "--max-chars", "2000").returncode == 0
    hooks = json.loads((project / ".claude" / "settings.json").read_text(encoding="utf-8"))["hooks"]
    start = hooks["SessionStart"][0]["hooks"][0]["command"]
    result = subprocess.run(start, shell=True, cwd=project, input=json.dumps({"source": "startup"}),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    context = json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Never force-push main" in context and len(context) <= 2000
    transcript = write_transcript(tmp_path / "t.jsonl", CONVERSATION)
    before = commits(vault_dir)
    end = hooks["SessionEnd"][0]["hooks"][0]["command"]
    result = subprocess.run(end, shell=True, cwd=project, input=json.dumps(session_payload(transcript)),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(commits(vault_dir)) == len(before) + 1


def test_install_twice_changes_nothing(vault_dir: Path, project: Path) -> None:
    assert install(project, vault_dir).returncode == 0
    files = [project / ".claude" / "settings.json", project / ".mcp.json"]
    first = [f.read_bytes() for f in files]
    again = install(project, vault_dir)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert [f["action"] for f in report["files"]] == ["unchanged", "unchanged"]
    assert report["changed"] is False
    assert [f.read_bytes() for f in files] == first
    assert not list(project.rglob("*.gitmem-backup"))


def test_reinstall_with_another_vault_updates_in_place(vault_dir: Path, project: Path,
                                                       tmp_path: Path) -> None:
    other = tmp_path / "other"
    Vault.init(other, author="tester").close()
    assert install(project, vault_dir).returncode == 0
    assert install(project, other).returncode == 0
    settings = json.loads((project / ".claude" / "settings.json").read_text(encoding="utf-8"))
    for event in ("SessionStart", "PreCompact", "SessionEnd"):
        [group] = settings["hooks"][event]
        [handler] = group["hooks"]
        assert f"--vault {other}" in handler["command"]
    servers = json.loads((project / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    assert list(servers) == ["gitmem"] and str(other) in servers["gitmem"]["args"]


USER_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test:*)"], "deny": []},
    "hooks": {
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hello"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./check.sh",
                                                      "timeout": 5}]}],
    },
    "env": {"FOO": "1"},
}
USER_MCP = {"mcpServers": {"github": {"type": "http", "url": "https://example.invalid/mcp"}}}


def test_install_merges_and_uninstall_restores_user_settings(vault_dir: Path, project: Path) -> None:
    settings_file = project / ".claude" / "settings.json"
    settings_file.parent.mkdir()
    original = json.dumps(USER_SETTINGS, indent=4) + "\n"
    settings_file.write_text(original, encoding="utf-8")
    (project / ".mcp.json").write_text(json.dumps(USER_MCP, indent=2), encoding="utf-8")

    result = install(project, vault_dir)
    assert result.returncode == 0, result.stderr
    merged = json.loads(settings_file.read_text(encoding="utf-8"))
    assert list(merged) == list(USER_SETTINGS)  # same keys, same order
    for key in ("model", "permissions", "env"):
        assert merged[key] == USER_SETTINGS[key]
    assert merged["hooks"]["PreToolUse"] == USER_SETTINGS["hooks"]["PreToolUse"]
    assert merged["hooks"]["SessionStart"][0] == USER_SETTINGS["hooks"]["SessionStart"][0]
    assert len(merged["hooks"]["SessionStart"]) == 2
    assert settings_file.read_text(encoding="utf-8").startswith('{\n    "model"')  # indentation kept
    backup = settings_file.with_name("settings.json.gitmem-backup")
    assert backup.read_text(encoding="utf-8") == original
    servers = json.loads((project / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    assert list(servers) == ["github", "gitmem"] and servers["github"] == USER_MCP["mcpServers"]["github"]

    result = gitmem("agent", "uninstall", AGENT, "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    assert json.loads(settings_file.read_text(encoding="utf-8")) == USER_SETTINGS
    assert json.loads((project / ".mcp.json").read_text(encoding="utf-8")) == USER_MCP
    again = gitmem("agent", "uninstall", AGENT, "--json", cwd=project)
    assert json.loads(again.stdout)["changed"] is False


def test_a_linked_settings_file_is_written_through_and_stays_a_link(vault_dir: Path, project: Path,
                                                                    tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "claude-settings.json"
    original = '{\n  "model": "opus",\n  "cleanupPeriodDays": 1e400,\n  "ratio": 1.50,\n  "offset": -0\n}\n'
    real.write_text(original, encoding="utf-8")
    link = project / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(real)
    result = install(project, vault_dir)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and link.resolve() == real   # the link is still the person's link
    text = real.read_text(encoding="utf-8")
    # Numbers gitmem does not change keep their text: 1e400 is not rewritten as Infinity.
    assert '"cleanupPeriodDays": 1e400,' in text and '"ratio": 1.50,' in text and '"offset": -0,' in text
    assert "Infinity" not in text and "SessionStart" in json.loads(text.replace("1e400", "1"))["hooks"]
    assert gitmem("agent", "install", AGENT, "--vault", str(vault_dir), "--json", cwd=project).returncode == 0
    result = gitmem("agent", "uninstall", AGENT, "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and real.read_text(encoding="utf-8") == original   # byte for byte


@pytest.mark.parametrize("which", ["settings", "mcp"])
def test_a_fifo_in_place_of_a_settings_file_is_refused_not_waited_on(which: str, vault_dir: Path,
                                                                      project: Path) -> None:
    path = project / ".claude" / "settings.json" if which == "settings" else project / ".mcp.json"
    path.parent.mkdir(exist_ok=True)
    os.mkfifo(path)
    result = subprocess.run([sys.executable, "-m", "gitmem", "agent", "install", AGENT, "--vault", str(vault_dir)],
                            cwd=project, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "is not a regular file" in result.stderr and "Traceback" not in result.stderr
    assert not (project / ".claude" / "settings.json").is_file()   # nothing written
    assert not (project / ".mcp.json").is_file()


def test_uninstall_deletes_files_install_created(vault_dir: Path, project: Path) -> None:
    assert install(project, vault_dir).returncode == 0
    result = gitmem("agent", "uninstall", AGENT, cwd=project)
    assert result.returncode == 0, result.stderr
    assert not (project / ".claude" / "settings.json").exists()
    assert not (project / ".mcp.json").exists()


def test_uninstall_keeps_a_user_hook_that_shares_a_group(vault_dir: Path, project: Path) -> None:
    assert install(project, vault_dir).returncode == 0
    settings_file = project / ".claude" / "settings.json"
    data = json.loads(settings_file.read_text(encoding="utf-8"))
    data["hooks"]["SessionEnd"][0]["hooks"].append({"type": "command", "command": "notify-send bye"})
    settings_file.write_text(json.dumps(data), encoding="utf-8")
    assert gitmem("agent", "uninstall", AGENT, cwd=project).returncode == 0
    left = json.loads(settings_file.read_text(encoding="utf-8"))
    assert left == {"hooks": {"SessionEnd": [{"hooks": [{"type": "command", "command": "notify-send bye"}]}]}}


@pytest.mark.parametrize("content", ['{"model": "opus",}', "[1, 2]", '{"hooks": []}'])
def test_invalid_settings_file_is_refused_and_untouched(content: str, vault_dir: Path, project: Path) -> None:
    settings_file = project / ".claude" / "settings.json"
    settings_file.parent.mkdir()
    settings_file.write_text(content, encoding="utf-8")
    result = gitmem("agent", "install", AGENT, "--vault", str(vault_dir), cwd=project)
    assert result.returncode == 2
    assert str(settings_file) in result.stderr and "changed nothing" in result.stderr
    assert "Traceback" not in result.stderr
    assert settings_file.read_text(encoding="utf-8") == content
    assert not (project / ".mcp.json").exists()  # nothing half-installed
    assert not list(project.rglob("*.gitmem-backup"))
    result = gitmem("agent", "uninstall", AGENT, cwd=project)
    assert result.returncode == 2 and settings_file.read_text(encoding="utf-8") == content


def test_foreign_mcp_server_of_the_same_name_is_not_replaced(vault_dir: Path, project: Path) -> None:
    foreign = {"mcpServers": {"gitmem": {"command": "npx", "args": ["some-other-server"]}}}
    text = json.dumps(foreign)
    (project / ".mcp.json").write_text(text, encoding="utf-8")
    result = gitmem("agent", "install", AGENT, "--vault", str(vault_dir), cwd=project)
    assert result.returncode == 5 and "--mcp-name" in result.stderr
    assert (project / ".mcp.json").read_text(encoding="utf-8") == text
    assert not (project / ".claude").exists()
    result = install(project, vault_dir, "--mcp-name", "memory")
    assert result.returncode == 0, result.stderr
    servers = json.loads((project / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    assert servers["gitmem"] == foreign["mcpServers"]["gitmem"] and "memory" in servers


def test_user_scope_writes_home_files_and_keeps_their_keys(vault_dir: Path, project: Path) -> None:
    home = Path.home()
    state = {"numStartups": 7, "projects": {"/x": {"allowedTools": []}}, "mcpServers": {}}
    (home / ".claude.json").write_text(json.dumps(state), encoding="utf-8")
    result = install(project, vault_dir, "--scope", "user", "--no-mcp")
    assert result.returncode == 0, result.stderr
    assert [f["path"] for f in json.loads(result.stdout)["files"]] == [str(home / ".claude" / "settings.json")]
    assert json.loads((home / ".claude.json").read_text(encoding="utf-8")) == state
    result = install(project, vault_dir, "--scope", "user")
    assert result.returncode == 0, result.stderr
    user_state = json.loads((home / ".claude.json").read_text(encoding="utf-8"))
    assert user_state["numStartups"] == 7 and user_state["projects"] == state["projects"]
    assert "gitmem" in user_state["mcpServers"]
    assert not (project / ".claude").exists() and not (project / ".mcp.json").exists()

    status = gitmem("agent", "status", AGENT, "--json", cwd=project)
    rows = {row["scope"]: row for row in json.loads(status.stdout)}
    assert rows["user"]["installed"] and not rows["project"]["installed"]
    assert set(rows["user"]["hooks"]) == {"SessionStart", "PreCompact", "SessionEnd"}

    assert gitmem("agent", "uninstall", AGENT, "--scope", "user", cwd=project).returncode == 0
    assert json.loads((home / ".claude.json").read_text(encoding="utf-8")) == state
    assert not (home / ".claude" / "settings.json").exists()


def test_install_refuses_a_folder_that_is_not_a_vault(tmp_path: Path, project: Path) -> None:
    result = gitmem("agent", "install", AGENT, "--vault", str(tmp_path / "nothing"), cwd=project)
    assert result.returncode == 3
    assert not (project / ".claude").exists() and not (project / ".mcp.json").exists()


# ------------------------------------------------------------- one note per session
def session_notes(root: Path) -> list[Path]:
    return sorted(p for p in (root / "short_term").rglob("*.md") if "session-note" in p.read_text(encoding="utf-8"))


def test_a_later_session_end_updates_the_sessions_one_note(vault_dir: Path, project: Path,
                                                          tmp_path: Path) -> None:
    transcript = write_transcript(tmp_path / "t.jsonl", CONVERSATION)
    before = commits(vault_dir)
    assert hook("session-end", session_payload(transcript), vault=vault_dir, cwd=project).returncode == 0
    [note] = session_notes(vault_dir)
    # The session goes on (resumed): one new turn, then it ends again.
    write_transcript(transcript, CONVERSATION + [("user", "Now also run the NEW-TURN-MARKER suite")])
    second = hook("session-end", session_payload(transcript), vault=vault_dir, cwd=project)
    assert second.returncode == 0, second.stderr
    assert session_notes(vault_dir) == [note]          # the same note, updated: no "-2" copy
    text = note.read_text(encoding="utf-8")
    assert "NEW-TURN-MARKER" in text and text.count("Please fix the flaky login test") == 1
    assert len(commits(vault_dir)) == len(before) + 2
    # Nothing new: no change, no commit.
    third = hook("session-end", session_payload(transcript), vault=vault_dir, cwd=project)
    assert third.returncode == 0 and "already saved" in third.stderr
    assert len(commits(vault_dir)) == len(before) + 2
    assert session_notes(vault_dir) == [note] and note.read_text(encoding="utf-8") == text
    assert git(vault_dir, "status", "--porcelain") == ""


# ------------------------------------------------------------- bounded hooks


@pytest.fixture
def locked(vault_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the vault lock (as gitmem takes it) past every hook's bound."""
    with holding_the_lock(vault_dir) as holder:
        yield holder


def timed_hook(event: str, payload: Any, *, vault: Path, cwd: Path, within: float) -> subprocess.CompletedProcess[str]:
    """A hook run as the agent runs it, killed (failing the test) if it outlives ``within`` s."""
    return subprocess.run([sys.executable, "-m", "gitmem", "agent", "hook", AGENT, event, "--vault", str(vault)],
                          cwd=cwd, input=json.dumps(payload), capture_output=True, text=True, timeout=within)


def test_session_start_answers_while_another_process_holds_the_lock(vault_dir: Path, project: Path,
                                                                    locked: subprocess.Popen[str]) -> None:
    # The bound is 5 s; the timeout leaves room for a loaded machine starting Python.
    result = timed_hook("session-start", {"source": "startup"}, vault=vault_dir, cwd=project, within=25)
    assert result.returncode == 0, result.stderr
    context = json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Never force-push main" in context and "Prefers pytest" in context


@pytest.mark.slow
def test_session_end_while_locked_keeps_the_note_and_the_next_hook_commits_it(
        vault_dir: Path, project: Path, tmp_path: Path) -> None:
    transcript = write_transcript(tmp_path / "t.jsonl", CONVERSATION)
    before = commits(vault_dir)
    with holding_the_lock(vault_dir):
        result = timed_hook("session-end", session_payload(transcript), vault=vault_dir, cwd=project, within=28)
    assert result.returncode == 0 and result.stdout == ""
    assert "kept in" in result.stderr and "Traceback" not in result.stderr
    assert commits(vault_dir) == before
    assert list((vault_dir / ".git" / "gitmem" / "hook-spool").glob("*.json"))
    # The lock is free: the next note hook (another session here) commits both notes.
    other = write_transcript(tmp_path / "u.jsonl", [("user", "SECOND-SESSION question"),
                                                     ("assistant", "SECOND-SESSION answer")])
    result = hook("session-end", dict(session_payload(other), session_id="sess-2"), vault=vault_dir, cwd=project)
    assert result.returncode == 0, result.stderr
    assert len(commits(vault_dir)) == len(before) + 2
    bodies = "".join(p.read_text(encoding="utf-8") for p in session_notes(vault_dir))
    assert "it now injects one" in bodies and "SECOND-SESSION answer" in bodies
    assert not list((vault_dir / ".git" / "gitmem" / "hook-spool").glob("*.json"))
    assert git(vault_dir, "status", "--porcelain") == ""


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_hook_stopped_by_a_signal_exits_0_without_a_traceback(signame: str, vault_dir: Path, project: Path,
                                                                tmp_path: Path,
                                                                locked: subprocess.Popen[str]) -> None:
    transcript = write_transcript(tmp_path / "t.jsonl", CONVERSATION)
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps(session_payload(transcript)), encoding="utf-8")
    with payload.open("rb") as stdin:
        proc = subprocess.Popen([sys.executable, "-m", "gitmem", "agent", "hook", AGENT, "session-end",
                                 "--vault", str(vault_dir)], cwd=project, stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Wait until the hook is waiting for the lock (its note is on disk by then).
    spool = vault_dir / ".git" / "gitmem" / "hook-spool"
    deadline = time.monotonic() + 60
    while not list(spool.glob("*.json")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None and list(spool.glob("*.json"))
    proc.send_signal(getattr(signal, signame))
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "Traceback" not in stderr and stderr.startswith("gitmem:")
    assert list(spool.glob("*.json"))   # the note waits for the next hook


def test_install_gives_each_hook_more_time_than_its_bound(vault_dir: Path, project: Path) -> None:
    from gitmem.agents.coding_hooks import AGENTS
    spec = AGENTS[AGENT]
    assert spec.bounds == {"session-start": 5.0, "pre-compact": 20.0, "session-end": 20.0}
    assert install(project, vault_dir).returncode == 0
    hooks = json.loads((project / ".claude" / "settings.json").read_text(encoding="utf-8"))["hooks"]
    for verb, event in spec.events.items():
        [group] = hooks[event]
        assert group["hooks"][0]["timeout"] >= spec.bounds[verb] + 5


# ------------------------------------------------------------- uninstall, byte for byte
ODD_SETTINGS = ('{\r\n\t"model":"opus" ,\r\n\t"hooks" : {"PreToolUse": [ {"matcher":"Bash","hooks":[{"type":"command",'
                '"command":"./check.sh"}]} ]},\r\n\t"env": {"A": "\\u00e9"}\r\n}')
ODD_MCP = '{"mcpServers": {"github": {"type": "http", "url": "https://example.invalid/mcp"}}}'


def test_uninstall_puts_back_the_users_bytes(vault_dir: Path, project: Path, tmp_path: Path) -> None:
    settings_file = project / ".claude" / "settings.json"
    settings_file.parent.mkdir()
    settings_file.write_bytes(ODD_SETTINGS.encode())
    (project / ".mcp.json").write_bytes(ODD_MCP.encode())
    assert install(project, vault_dir).returncode == 0
    other = tmp_path / "other"
    Vault.init(other, author="tester").close()
    assert install(project, other).returncode == 0          # a reinstall keeps the first backup
    assert settings_file.with_name("settings.json.gitmem-backup").read_bytes() == ODD_SETTINGS.encode()
    result = gitmem("agent", "uninstall", AGENT, "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    assert settings_file.read_bytes() == ODD_SETTINGS.encode()
    assert (project / ".mcp.json").read_bytes() == ODD_MCP.encode()
    assert json.loads(result.stdout)["changed"] is True


@pytest.mark.slow
def test_purging_a_session_note_drops_the_note_waiting_for_the_lock(vault_dir: Path, project: Path,
                                                                    tmp_path: Path) -> None:
    transcript = write_transcript(tmp_path / "t.jsonl", [("user", "PURGE-ME question"),
                                                         ("assistant", "PURGE-ME answer")])
    assert hook("session-end", session_payload(transcript), vault=vault_dir, cwd=project).returncode == 0
    [note] = session_notes(vault_dir)
    # Later turns of the same session, kept on disk while another process held the lock.
    write_transcript(transcript, [("user", "PURGE-ME question"), ("assistant", "PURGE-ME answer"),
                                  ("user", "PURGE-ME follow-up"), ("assistant", "PURGE-ME later answer")])
    with holding_the_lock(vault_dir):
        result = timed_hook("session-end", session_payload(transcript), vault=vault_dir, cwd=project, within=28)
    assert result.returncode == 0 and "kept in" in result.stderr
    spool = vault_dir / ".git" / "gitmem" / "hook-spool"
    assert list(spool.glob("*.json"))
    with Vault.open(vault_dir) as vault:
        vault.purge(vault.get(note.relative_to(vault_dir).as_posix()).id)
    assert not list(spool.glob("*.json"))
    # The next note hook (another session) commits its own note, never the forgotten one.
    other = write_transcript(tmp_path / "u.jsonl", [("user", "OTHER question"), ("assistant", "OTHER answer")])
    assert hook("session-end", dict(session_payload(other), session_id="sess-2"), vault=vault_dir,
                cwd=project).returncode == 0
    assert "PURGE-ME" not in git(vault_dir, "log", "--all", "-p")
    assert all("PURGE-ME" not in p.read_text(encoding="utf-8") for p in session_notes(vault_dir))
