"""``gitmem agent`` for Codex CLI, Gemini CLI and Cursor, driven as each agent drives it.

Every hook runs in a real subprocess (``python -m gitmem agent hook AGENT VERB``) fed the
JSON that agent documents for the event, reading a real transcript file in that agent's
own format; every configuration file is a real file under tmp_path (HOME is
tmp_path/home, see conftest.py); commits are checked with the git CLI and the vault.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gitmem import Vault

from .conftest import git
from .test_agent_hooks import commits, gitmem, make_vault, session_notes

AGENTS = ["codex", "gemini", "cursor"]
START_EVENT = {"codex": "SessionStart", "gemini": "SessionStart", "cursor": "sessionStart"}


@pytest.fixture(autouse=True)
def _no_codex_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """Codex's user files are in ~/.codex (HOME is the test's) unless a test sets CODEX_HOME."""
    monkeypatch.delenv("CODEX_HOME", raising=False)


@pytest.fixture
def vault_dir(tmp_path: Path) -> Path:
    return make_vault(tmp_path / "vault")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


# ------------------------------------------------------------- transcripts, in each agent's format
ASKED, ANSWERED = "Please fix the flaky login test", "Fixed: the test used the wall clock; it now injects one."
HIDDEN = ("PRIVATE-THOUGHT", "TOOL-OUTPUT-XYZ", "ENV-CONTEXT-XYZ")


def codex_rollout(path: Path, turns: list[tuple[str, str]]) -> Path:
    """A Codex rollout: JSONL of {timestamp, type, payload}; Codex's own context as user messages."""
    def line(kind: str, payload: dict[str, Any]) -> str:
        return json.dumps({"timestamp": "2026-11-01T09:00:00.000Z", "type": kind, "payload": payload})
    lines = [line("session_meta", {"id": "sess-1", "cwd": "/work/app", "originator": "codex_cli_rs"}),
             line("response_item", {"type": "message", "role": "user", "content": [
                 {"type": "input_text", "text": "<environment_context>\n  <cwd>ENV-CONTEXT-XYZ</cwd>\n"
                                                "</environment_context>"}]}),
             line("turn_context", {"cwd": "/work/app", "model": "gpt-5"})]
    for role, text in turns:
        kind = "input_text" if role == "user" else "output_text"
        if role == "assistant":
            lines += [line("response_item", {"type": "reasoning", "summary": [
                          {"type": "summary_text", "text": "PRIVATE-THOUGHT"}]}),
                      line("response_item", {"type": "function_call", "name": "shell", "call_id": "c1",
                                             "arguments": "{\"command\": [\"ls\"]}"}),
                      line("response_item", {"type": "function_call_output", "call_id": "c1",
                                             "output": "TOOL-OUTPUT-XYZ"})]
        lines.append(line("response_item", {"type": "message", "role": role,
                                            "content": [{"type": kind, "text": text}]}))
        lines.append(line("event_msg", {"type": "user_message" if role == "user" else "agent_message",
                                        "message": text}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def gemini_message(i: int, role: str, text: str) -> dict[str, Any]:
    if role == "user":
        return {"id": f"m{i}", "timestamp": "2026-11-01T09:00:00Z", "type": "user", "content": [{"text": text}]}
    return {"id": f"m{i}", "timestamp": "2026-11-01T09:00:01Z", "type": "gemini", "content": text,
            "thoughts": [{"subject": "s", "description": "PRIVATE-THOUGHT", "timestamp": "x"}],
            "toolCalls": [{"id": "t", "name": "read_file", "args": {}, "status": "success",
                           "result": [{"functionResponse": {"response": {"output": "TOOL-OUTPUT-XYZ"}}}]}],
            "model": "gemini-2.5-pro"}


def gemini_session(path: Path, turns: list[tuple[str, str]]) -> Path:
    """A Gemini CLI session file of the older releases: one JSON document."""
    messages = [gemini_message(i, role, text) for i, (role, text) in enumerate(turns)]
    messages.insert(1, {"id": "info", "timestamp": "x", "type": "info", "content": "ENV-CONTEXT-XYZ"})
    path.write_text(json.dumps({"sessionId": "sess-1", "projectHash": "abc", "startTime": "x",
                                "lastUpdated": "y", "messages": messages}, indent=2), encoding="utf-8")
    return path


def cursor_transcript(path: Path, turns: list[tuple[str, str]]) -> Path:
    """A Cursor agent transcript: JSONL of {role, message: {content: [...]}}."""
    lines = []
    for role, text in turns:
        if role == "user":
            text = f"<timestamp>Sunday, Nov 1, 2026</timestamp>\n<user_query>\n{text}\n</user_query>"
            lines.append(json.dumps({"role": "user", "message": {"content": [{"type": "text", "text": text}]}}))
        else:
            lines.append(json.dumps({"role": "assistant", "message": {"content": [
                {"type": "tool_use", "name": "Read", "input": {"path": "TOOL-OUTPUT-XYZ"}},
                {"type": "text", "text": text}]}}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


WRITERS = {"codex": codex_rollout, "gemini": gemini_session, "cursor": cursor_transcript}
CONVERSATION = [("user", ASKED), ("assistant", ANSWERED)]


def payload(agent: str, verb: str, transcript: Path | None, session: str = "sess-1") -> dict[str, Any]:
    """The JSON ``agent`` sends on stdin for ``verb``'s event, as its documentation gives it."""
    path = str(transcript) if transcript else None
    if agent == "cursor":
        base = {"conversation_id": session, "generation_id": "gen-1", "model": "gpt-5", "cursor_version": "2.1.0",
                "workspace_roots": ["/work/app"], "user_email": None, "transcript_path": path}
        return base | {
            "session-start": {"hook_event_name": "sessionStart", "session_id": session, "is_background_agent": False,
                              "composer_mode": "agent"},
            "pre-compact": {"hook_event_name": "preCompact", "trigger": "auto", "context_usage_percent": 85,
                            "context_tokens": 120000, "context_window_size": 200000, "message_count": 40,
                            "messages_to_compact": 30, "is_first_compaction": True},
            "session-end": {"hook_event_name": "sessionEnd", "session_id": session, "reason": "completed",
                            "duration_ms": 5505, "is_background_agent": False, "final_status": "completed"},
        }[verb]
    base = {"session_id": session, "transcript_path": path, "cwd": "/work/app"}
    if agent == "gemini":
        events = {"session-start": ("SessionStart", {"source": "startup"}),
                  "pre-compact": ("PreCompress", {"trigger": "auto"}),
                  "session-end": ("SessionEnd", {"reason": "exit"})}
        event, extra = events[verb]
        return base | {"hook_event_name": event, "timestamp": "2026-11-01T09:00:00Z"} | extra
    events = {"session-start": ("SessionStart", {"model": "gpt-5", "permission_mode": "default", "source": "startup"}),
              "pre-compact": ("PreCompact", {"model": "gpt-5", "turn_id": "turn-1", "trigger": "auto"}),
              "session-end": ("SessionEnd", {"reason": "other"})}
    event, extra = events[verb]
    return base | {"hook_event_name": event} | extra


def hook(agent: str, verb: str, data: dict[str, Any], *, vault: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return gitmem("agent", "hook", agent, verb, "--vault", str(vault), cwd=cwd, stdin=json.dumps(data))


# ------------------------------------------------------------- session start
@pytest.mark.parametrize("agent", AGENTS)
def test_session_start_answers_in_the_agents_documented_shape(agent: str, vault_dir: Path, project: Path) -> None:
    before = commits(vault_dir)
    result = hook(agent, "session-start", payload(agent, "session-start", None), vault=vault_dir, cwd=project)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)   # nothing but the JSON on stdout (Gemini: "silence is mandatory")
    if agent == "cursor":
        assert list(out) == ["additional_context"]
        context = out["additional_context"]
    else:
        assert list(out) == ["hookSpecificOutput"]
        assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
        context = out["hookSpecificOutput"]["additionalContext"]
    assert "Never force-push main" in context and "Prefers pytest" in context
    assert context.index("Never force-push main") < context.index("Prefers pytest")
    assert commits(vault_dir) == before


# ------------------------------------------------------------- session notes
def note_hook(agent: str, verb: str, tmp_path: Path, *, vault: Path, cwd: Path
              ) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    """``verb``'s hook run on a transcript of CONVERSATION in ``agent``'s format: its
    result, the vault's commits before it, the transcript."""
    transcript = WRITERS[agent](tmp_path / "transcript", CONVERSATION)
    before = commits(vault)
    return hook(agent, verb, payload(agent, verb, transcript), vault=vault, cwd=cwd), before, transcript


def the_note(vault_dir: Path) -> Any:
    [path] = session_notes(vault_dir)
    with Vault.open(vault_dir) as vault:
        return vault.get(path.relative_to(vault_dir).as_posix())


@pytest.mark.parametrize("agent", AGENTS)
def test_session_end_saves_the_transcripts_last_turns_as_one_commit(agent: str, vault_dir: Path, project: Path,
                                                                   tmp_path: Path) -> None:
    result, before, transcript = note_hook(agent, "session-end", tmp_path, vault=vault_dir, cwd=project)
    assert result.returncode == 0 and result.stdout == "" and "Traceback" not in result.stderr
    if agent == "codex" and commits(vault_dir) == before:
        # Codex gives a SessionEnd hook 3 s: on a loaded machine the note may be left for
        # the next note hook, which commits it.
        assert "kept in" in result.stderr or "stopped" in result.stderr
        assert hook(agent, "pre-compact", payload(agent, "pre-compact", transcript), vault=vault_dir,
                    cwd=project).returncode == 0
    assert len(commits(vault_dir)) == len(before) + 1
    assert git(vault_dir, "log", "-1", "--format=%an").strip() == agent
    note = the_note(vault_dir)
    assert note.type == "episodic" and note.meta["tier"] == "short_term" and agent in note.meta["tags"]
    assert f"**User:** {ASKED}" in note.body and f"**Assistant:** {ANSWERED}" in note.body
    assert "/work/app" in note.body and "sess-1" in note.body
    for hidden in (*HIDDEN, "<user_query>", "<timestamp>"):
        assert hidden not in note.body
    assert git(vault_dir, "status", "--porcelain") == ""


@pytest.mark.parametrize("agent", AGENTS)
def test_pre_compact_then_session_end_save_the_same_turns_once(agent: str, vault_dir: Path, project: Path,
                                                               tmp_path: Path) -> None:
    first, before, transcript = note_hook(agent, "pre-compact", tmp_path, vault=vault_dir, cwd=project)
    assert first.returncode == 0 and first.stdout == "", first.stderr
    assert len(commits(vault_dir)) == len(before) + 1
    second = hook(agent, "session-end", payload(agent, "session-end", transcript), vault=vault_dir, cwd=project)
    assert second.returncode == 0
    assert len(commits(vault_dir)) == len(before) + 1 and len(session_notes(vault_dir)) == 1


def test_gemini_jsonl_session_file_is_replayed_as_gemini_replays_it(vault_dir: Path, project: Path,
                                                                    tmp_path: Path) -> None:
    """Newer Gemini CLI releases write JSONL records: a later line of a message replaces it,
    ``$rewindTo`` drops a message and all after it."""
    records = [{"sessionId": "sess-1", "projectHash": "abc", "startTime": "x", "lastUpdated": "y"},
               gemini_message(0, "user", "FIRST question"),
               gemini_message(1, "gemini", "draft answer"),
               gemini_message(1, "gemini", "FINAL answer"),          # the same message, updated
               gemini_message(2, "user", "REWOUND question"),
               {"$rewindTo": "m2"},
               gemini_message(3, "user", "LAST question"),
               {"$set": {"lastUpdated": "z"}}]
    transcript = tmp_path / "session.jsonl"
    transcript.write_text("\n".join(json.dumps(r) for r in records) + "\n{cut", encoding="utf-8")
    result = hook("gemini", "session-end", payload("gemini", "session-end", transcript), vault=vault_dir, cwd=project)
    assert result.returncode == 0, result.stderr
    body = the_note(vault_dir).body
    assert "FIRST question" in body and "FINAL answer" in body and "LAST question" in body
    assert "draft answer" not in body and "REWOUND" not in body
    assert body.index("FIRST") < body.index("FINAL") < body.index("LAST")


def test_cursor_cli_without_transcript_path_finds_the_transcript(vault_dir: Path, project: Path) -> None:
    """The Cursor CLI sends ``transcript_path: null``; the transcript is under ~/.cursor/projects/."""
    folder = Path.home() / ".cursor" / "projects" / "work-app" / "agent-transcripts"
    folder.mkdir(parents=True)
    cursor_transcript(folder / "conv-42.jsonl", CONVERSATION)
    before = commits(vault_dir)
    result = hook("cursor", "session-end", payload("cursor", "session-end", None, session="conv-42"),
                  vault=vault_dir, cwd=project)
    assert result.returncode == 0, result.stderr
    assert len(commits(vault_dir)) == len(before) + 1
    assert ANSWERED in the_note(vault_dir).body
    # No transcript anywhere: one line on stderr, no commit.
    missing = hook("cursor", "session-end", payload("cursor", "session-end", None, session="conv-43"),
                   vault=vault_dir, cwd=project)
    assert missing.returncode == 0 and missing.stderr.startswith("gitmem:") and "transcript_path" in missing.stderr
    assert len(commits(vault_dir)) == len(before) + 1


# ------------------------------------------------------------- install, uninstall
def files_of(agent: str, scope: str, project: Path) -> tuple[Path, Path]:
    """(hook file, MCP file) of ``agent`` in ``scope``, as each agent documents them."""
    home = Path.home()
    base = project if scope == "project" else home
    folder = {"codex": ".codex", "gemini": ".gemini", "cursor": ".cursor"}[agent]
    hooks, mcp = {"codex": ("hooks.json", "config.toml"), "gemini": ("settings.json", "settings.json"),
                  "cursor": ("hooks.json", "mcp.json")}[agent]
    return base / folder / hooks, base / folder / mcp


# The person's own files, written oddly on purpose: any reformatting shows in the bytes.
THEIRS = {
    "codex": ('{"description": "team hooks",\r\n "hooks": {"SessionStart": [{"matcher": "startup", "hooks": '
              '[{"type": "command", "command": "echo hello", "timeout": 1e400}]}],\r\n'
              '  "PostToolUse": [{"hooks": [{"type": "command", "command": "./check.sh"}]}]}}',
              '# my Codex settings\nmodel = "gpt-5"   # the default\nratio = 1e400\n\n[mcp_servers.github]\n'
              'command = "npx"\nargs = ["-y", "github-mcp"]\n\n[profiles.fast]\nmodel = "gpt-5-mini"'),
    "gemini": ('{\n\t"theme": "Default",\n\t"ratio": 1e400, "offset": -0,\n\t"hooks": {"BeforeTool": [{"matcher": '
               '"run_shell_command", "hooks": [{"type": "command", "command": "./guard.sh"}]}]},\n\t"mcpServers": '
               '{"github": {"httpUrl": "https://example.invalid/mcp"}}\n}\n', None),
    "cursor": ('{"version": 1, "hooks": {"afterFileEdit": [{"command": "./hooks/format.sh"}],'
               ' "sessionStart": [{"command": "echo hi"}]}}',
               '{"mcpServers": {"github": {"command": "npx", "args": ["-y", "github-mcp"], "ratio": 1.50}}}'),
}


def install(agent: str, vault: Path, project: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return gitmem("agent", "install", agent, "--vault", str(vault), "--json", *more, cwd=project)


@pytest.mark.parametrize("scope", ["project", "user"])
@pytest.mark.parametrize("agent", AGENTS)
def test_install_merges_into_the_persons_files_and_uninstall_puts_their_bytes_back(
        agent: str, scope: str, vault_dir: Path, project: Path) -> None:
    hooks_file, mcp_file = files_of(agent, scope, project)
    hooks_file.parent.mkdir(parents=True)
    hooks_text, mcp_text = THEIRS[agent]
    hooks_file.write_bytes(hooks_text.encode())
    if mcp_text is not None:
        mcp_file.write_bytes(mcp_text.encode())
    result = install(agent, vault_dir, project, "--scope", scope)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {f["action"] for f in report["files"]} == {"updated"} and report["changed"]

    # The hooks, in the agent's layout, next to the person's own (kept as they were).
    data = json.loads(hooks_file.read_text(encoding="utf-8").replace("1e400", "1"))
    hooks = data["hooks"]
    theirs = json.loads(hooks_text.replace("1e400", "1"))["hooks"]
    for event, entries in theirs.items():
        assert hooks[event][:len(entries)] == entries
    verbs = {"session-start": START_EVENT[agent], "pre-compact": {"codex": "PreCompact", "gemini": "PreCompress",
                                                                  "cursor": "preCompact"}[agent],
             "session-end": "sessionEnd" if agent == "cursor" else "SessionEnd"}
    for verb, event in verbs.items():
        ours = hooks[event][-1] if agent == "cursor" else hooks[event][-1]["hooks"][0]
        assert f"-m gitmem agent hook {agent} {verb} --vault {vault_dir}" in ours["command"]
    if agent == "cursor":
        assert data["version"] == 1
    for path, text in ((hooks_file, hooks_text), (mcp_file, mcp_text)):   # numbers keep their text
        written = path.read_text(encoding="utf-8")
        assert "Infinity" not in written and "1.5," not in written
        assert all(number in written for number in ("1e400", "1.50", "-0") if number in (text or ""))

    # The MCP server, next to the person's own.
    if agent == "codex":
        text = mcp_file.read_text(encoding="utf-8")
        assert text.startswith(mcp_text + "\n# >>> gitmem mcp_servers.gitmem")   # appended, nothing rewritten
        config = tomllib.loads(text)
        assert config["mcp_servers"]["github"] == {"command": "npx", "args": ["-y", "github-mcp"]}
        server = config["mcp_servers"]["gitmem"]
        assert config["profiles"] == {"fast": {"model": "gpt-5-mini"}}
    else:
        servers = json.loads(mcp_file.read_text(encoding="utf-8").replace("1e400", "1"))["mcpServers"]
        assert list(servers)[0] == "github"
        server = servers["gitmem"]
    assert server["args"][-7:] == ["mcp", "--vault", str(vault_dir), "--profile", "gitmem", "--agent", agent]

    again = install(agent, vault_dir, project, "--scope", scope)   # twice: nothing changes
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False
    result = gitmem("agent", "uninstall", agent, "--scope", scope, "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["changed"] is True
    assert hooks_file.read_bytes() == hooks_text.encode()
    if mcp_text is not None:
        assert mcp_file.read_bytes() == mcp_text.encode()
    assert not list(hooks_file.parent.glob("*.gitmem-backup"))


@pytest.mark.parametrize("agent", AGENTS)
def test_installed_commands_run_as_the_agent_runs_them_and_uninstall_deletes_created_files(
        agent: str, vault_dir: Path, project: Path, tmp_path: Path) -> None:
    assert install(agent, vault_dir, project, "--max-chars", "2000").returncode == 0
    hooks_file, mcp_file = files_of(agent, "project", project)
    hooks = json.loads(hooks_file.read_text(encoding="utf-8"))["hooks"]

    def command(event: str) -> str:
        entry = hooks[event][0]
        return entry["command"] if agent == "cursor" else entry["hooks"][0]["command"]

    start = subprocess.run(command(START_EVENT[agent]), shell=True, cwd=project, capture_output=True, text=True,
                           input=json.dumps(payload(agent, "session-start", None)), timeout=120)
    assert start.returncode == 0, start.stderr
    out = json.loads(start.stdout)
    context = out["additional_context"] if agent == "cursor" else out["hookSpecificOutput"]["additionalContext"]
    assert "Never force-push main" in context and len(context) <= 2000
    transcript = WRITERS[agent](tmp_path / "transcript", CONVERSATION)
    before = commits(vault_dir)
    event = {"codex": "PreCompact", "gemini": "PreCompress", "cursor": "preCompact"}[agent]
    end = subprocess.run(command(event), shell=True, cwd=project, capture_output=True, text=True,
                         input=json.dumps(payload(agent, "pre-compact", transcript)), timeout=120)
    assert end.returncode == 0, end.stderr
    assert len(commits(vault_dir)) == len(before) + 1

    assert gitmem("agent", "uninstall", agent, cwd=project).returncode == 0
    assert not hooks_file.exists() and not mcp_file.exists()


@pytest.mark.parametrize("agent", AGENTS)
def test_every_hook_gets_more_time_from_the_agent_than_gitmem_takes(agent: str, vault_dir: Path,
                                                                    project: Path) -> None:
    from gitmem.agents.coding_agents import AGENTS as SPECS
    spec = SPECS[agent]
    assert install(agent, vault_dir, project).returncode == 0
    hooks = json.loads(files_of(agent, "project", project)[0].read_text(encoding="utf-8"))["hooks"]
    for verb, event in spec.events.items():
        handler = hooks[event][0] if agent == "cursor" else hooks[event][0]["hooks"][0]
        if spec.timeout_unit is None:
            assert "timeout" not in handler     # the agent's own default
        else:
            assert handler["timeout"] * spec.timeout_unit >= spec.bounds[verb] + 0.25
    if agent == "codex":
        assert hooks["SessionEnd"][0]["hooks"][0]["timeout"] <= 3   # Codex caps SessionEnd at 3 s


# ------------------------------------------------------------- how people keep their files
@pytest.mark.parametrize("agent", AGENTS)
def test_linked_files_are_written_through_and_keep_their_numbers(agent: str, vault_dir: Path, project: Path,
                                                                 tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    hooks_file, mcp_file = files_of(agent, "project", project)
    hooks_file.parent.mkdir(parents=True)
    originals = {}
    for path, text in ((hooks_file, '{\n  "hooks": {},\n  "cleanupPeriodDays": 1e400,\n  "ratio": 1.50\n}\n'),
                       (mcp_file, "ratio = 1e400\n" if agent == "codex" else None)):
        if text is None:
            continue
        real = dotfiles / path.name
        real.write_text(text, encoding="utf-8")
        path.symlink_to(real)
        originals[path] = (real, text)
    result = install(agent, vault_dir, project)
    assert result.returncode == 0, result.stderr
    for path, (real, text) in originals.items():
        assert path.is_symlink() and path.resolve() == real   # the person's link is still a link
        written = real.read_text(encoding="utf-8")
        assert written != text and "1e400" in written and "Infinity" not in written
    assert gitmem("agent", "uninstall", agent, cwd=project).returncode == 0
    for path, (real, text) in originals.items():
        assert path.is_symlink() and real.read_text(encoding="utf-8") == text   # byte for byte


@pytest.mark.parametrize("which", ["hooks", "mcp"])
@pytest.mark.parametrize("agent", ["codex", "cursor"])
def test_a_fifo_in_place_of_a_file_is_refused_not_waited_on(agent: str, which: str, vault_dir: Path,
                                                            project: Path) -> None:
    hooks_file, mcp_file = files_of(agent, "project", project)
    hooks_file.parent.mkdir(parents=True)
    os.mkfifo(hooks_file if which == "hooks" else mcp_file)
    result = gitmem("agent", "install", agent, "--vault", str(vault_dir), cwd=project)
    assert result.returncode == 2, result.stderr
    assert "is not a regular file" in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in hooks_file.parent.iterdir()) == [(hooks_file if which == "hooks" else mcp_file).name]


def test_gemini_settings_fifo_is_refused(vault_dir: Path, project: Path) -> None:
    settings, _ = files_of("gemini", "user", project)
    settings.parent.mkdir(parents=True)
    os.mkfifo(settings)
    result = gitmem("agent", "install", "gemini", "--scope", "user", "--vault", str(vault_dir), cwd=project)
    assert result.returncode == 2 and "is not a regular file" in result.stderr


# ------------------------------------------------------------- formats gitmem does not rewrite
def test_codex_toml_that_cannot_take_an_appended_table_gets_the_text_to_add(vault_dir: Path, project: Path) -> None:
    hooks_file, config = files_of("codex", "project", project)
    config.parent.mkdir(parents=True)
    text = 'mcp_servers = { github = { command = "npx" } }\n'   # an inline table cannot be extended
    config.write_text(text, encoding="utf-8")
    result = install("codex", vault_dir, project)
    assert result.returncode == 0, result.stderr
    [manual] = [f for f in json.loads(result.stdout)["files"] if f["path"] == str(config)]
    assert manual["action"] == "manual" and config.read_text(encoding="utf-8") == text
    block = manual["by_hand"]
    assert tomllib.loads(block)["mcp_servers"]["gitmem"]["args"][-1] == "codex"
    assert hooks_file.is_file()   # the hooks are installed all the same
    shown = gitmem("agent", "install", "codex", "--vault", str(vault_dir), cwd=project)
    assert shown.returncode == 0 and "manual" in shown.stdout and "[mcp_servers.gitmem]" in shown.stdout


def test_codex_server_of_that_name_not_gitmems_is_not_replaced(vault_dir: Path, project: Path) -> None:
    hooks_file, config = files_of("codex", "project", project)
    config.parent.mkdir(parents=True)
    text = '[mcp_servers.gitmem]\ncommand = "npx"\nargs = ["other-server"]\n'
    config.write_text(text, encoding="utf-8")
    result = gitmem("agent", "install", "codex", "--vault", str(vault_dir), cwd=project)
    assert result.returncode == 5 and "--mcp-name" in result.stderr and "Traceback" not in result.stderr
    assert config.read_text(encoding="utf-8") == text and not hooks_file.exists()   # nothing half-installed
    assert install("codex", vault_dir, project, "--mcp-name", "memory").returncode == 0
    assert set(tomllib.loads(config.read_text(encoding="utf-8"))["mcp_servers"]) == {"gitmem", "memory"}


def test_codex_toml_that_is_not_toml_is_refused(vault_dir: Path, project: Path) -> None:
    hooks_file, config = files_of("codex", "project", project)
    config.parent.mkdir(parents=True)
    config.write_text("model = \n", encoding="utf-8")
    result = gitmem("agent", "install", "codex", "--vault", str(vault_dir), cwd=project)
    assert result.returncode == 2 and "not valid TOML" in result.stderr and "changed nothing" in result.stderr
    assert config.read_text(encoding="utf-8") == "model = \n" and not hooks_file.exists()


def test_codex_reinstall_replaces_the_block_in_place_and_an_edited_block_is_left(vault_dir: Path, project: Path,
                                                                                  tmp_path: Path) -> None:
    _, config = files_of("codex", "project", project)
    config.parent.mkdir(parents=True)
    config.write_text("[tui]\nnotifications = true\n", encoding="utf-8")
    other = make_vault(tmp_path / "other")
    assert install("codex", vault_dir, project).returncode == 0
    with config.open("a", encoding="utf-8") as handle:
        handle.write("\n[history]\npersistence = \"none\"\n")   # the person edits the file afterwards
    assert install("codex", other, project).returncode == 0
    text = config.read_text(encoding="utf-8")
    assert text.count("[mcp_servers.gitmem]") == 1 and str(other) in text and str(vault_dir) not in text
    assert text.endswith('[history]\npersistence = "none"\n')
    assert gitmem("agent", "uninstall", "codex", cwd=project).returncode == 0
    assert config.read_text(encoding="utf-8") == "[tui]\nnotifications = true\n\n[history]\npersistence = \"none\"\n"

    # A block the person edited so that it no longer runs gitmem is theirs now: left as it is.
    assert install("codex", vault_dir, project).returncode == 0
    edited = config.read_text(encoding="utf-8").replace('"-m", "gitmem", "mcp"', '"-m", "othertool", "mcp"')
    config.write_text(edited, encoding="utf-8")
    result = gitmem("agent", "uninstall", "codex", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    assert config.read_text(encoding="utf-8") == edited
    assert any("remove it yourself" in n for n in json.loads(result.stdout)["notes"])


def test_gemini_settings_with_comments_are_left_alone_with_the_entries_to_add(vault_dir: Path,
                                                                              project: Path) -> None:
    settings, _ = files_of("gemini", "project", project)
    settings.parent.mkdir(parents=True)
    text = '{\n  // my theme\n  "theme": "Default"\n}\n'
    settings.write_text(text, encoding="utf-8")
    result = gitmem("agent", "install", "gemini", "--vault", str(vault_dir), cwd=project)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert settings.read_text(encoding="utf-8") == text
    shown = result.stderr[result.stderr.index("{"):]
    entries = json.loads(shown)
    assert f"agent hook gemini session-start --vault {vault_dir}" in \
        entries["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    assert set(entries["hooks"]) == {"SessionStart", "PreCompress", "SessionEnd"}
    assert entries["mcpServers"]["gitmem"]["args"][-1] == "gemini"


# ------------------------------------------------------------- status
@pytest.mark.parametrize("agent", AGENTS)
def test_status_shows_where_gitmem_is_installed_and_what_to_know(agent: str, vault_dir: Path, project: Path) -> None:
    assert install(agent, vault_dir, project, "--scope", "user").returncode == 0
    result = gitmem("agent", "status", agent, "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    rows = {row["scope"]: row for row in json.loads(result.stdout)}
    assert rows["user"]["installed"] and not rows["project"]["installed"]
    assert len(rows["user"]["hooks"]) == 3 and rows["user"]["mcp"]["args"][-1] == agent
    assert rows["user"]["settings"] == str(files_of(agent, "user", project)[0])
    assert rows["user"]["notes"] and set(rows["user"]["events"]) == {"session-start", "pre-compact", "session-end"}
    text = gitmem("agent", "status", agent, cwd=project)
    assert text.returncode == 0 and "user: installed" in text.stdout and "note:" in text.stdout


def test_codex_user_scope_follows_codex_home_and_sees_a_server_added_by_hand(vault_dir: Path, project: Path,
                                                                            tmp_path: Path) -> None:
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(f'[mcp_servers.gitmem]\ncommand = "gitmem"\nargs = ["mcp", "--vault", '
                                      f'"{vault_dir}"]\n', encoding="utf-8")
    env_run = subprocess.run([sys.executable, "-m", "gitmem", "agent", "install", "codex", "--scope", "user",
                              "--vault", str(vault_dir), "--json"], cwd=project, capture_output=True, text=True,
                             timeout=120, env={**os.environ, "CODEX_HOME": str(home)})
    assert env_run.returncode == 0, env_run.stderr
    assert (home / "hooks.json").is_file() and not (Path.home() / ".codex").exists()
    status = subprocess.run([sys.executable, "-m", "gitmem", "agent", "status", "codex", "--json"], cwd=project,
                            capture_output=True, text=True, timeout=120, env={**os.environ, "CODEX_HOME": str(home)})
    [user] = [row for row in json.loads(status.stdout) if row["scope"] == "user"]
    assert user["mcp_added_by_hand"] is True and user["mcp"]["command"] == "gitmem"


def test_the_command_line_offers_every_agent_gitmem_knows() -> None:
    from gitmem.agents.coding_agents import AGENTS as SPECS
    from gitmem.cli.agent import agent
    for name in ("install", "uninstall", "status"):
        [argument] = [p for p in agent.commands[name].params if p.name == "agent_name"]
        assert list(argument.type.choices) == list(SPECS)
