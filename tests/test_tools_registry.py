"""The agent-tool registry: schemas are valid JSON Schema and match their handlers,
exports in three formats, the validator derived from each handler agrees with
jsonschema on the schema clients see, the error shape and messages, the
dispatcher's contract, and the `gitmem tools` commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from gitmem import Toolbox, Vault
from gitmem.cli.main import cli
from gitmem.agents.arguments import ArgumentError
from gitmem.agents.registry import FORMATS, PROFILES, error_result, export, handler_parameters, profile_tools

from .conftest import git

ALL_TOOLS = [t for p in PROFILES for t in profile_tools(p)]
SEED_NAMES = {
    "files": {"memory_read", "memory_write"},
    "index": {"memory_read"},
    "agentos": {"memory_add", "memory_update", "memory_delete", "memory_merge", "memory_search", "memory_reflect"},
    "vault": {"write_memory", "read_memory", "search_memories"},
    "fsm": {"create_memory", "read_memory", "update_memory", "search_memory", "compress_tier",
            "archive_memories", "retrieve_protected_context"},
    "claude": {"memory"},
}


@pytest.mark.parametrize("t", ALL_TOOLS, ids=lambda t: f"{t.profile}.{t.name}")
def test_schema_is_valid_json_schema_and_matches_handler(t) -> None:
    jsonschema.Draft202012Validator.check_schema(t.schema)
    assert t.schema["type"] == "object" and t.schema["additionalProperties"] is False
    params, required = handler_parameters(t)
    assert set(t.schema["properties"]) == params, "schema properties != handler keyword parameters"
    assert set(t.schema.get("required", [])) == required, "schema required != handler params without default"
    for name, prop in t.schema["properties"].items():
        assert prop.get("description"), f"{name} has no description"
    text = t.description.lower()  # written for a model: what it returns and what it changes
    assert len(text) > 60 and ("return" in text or t.profile == "claude")
    assert ("read-only" in text) if t.read_only else ("commit" in text)
    ann = t.annotations()
    assert {"readOnlyHint", "destructiveHint", "idempotentHint"} <= set(ann)
    assert not (t.read_only and t.destructive)


def test_profiles_have_the_seeds_exact_tool_names() -> None:
    for profile, names in SEED_NAMES.items():
        assert {t.name for t in profile_tools(profile)} == names
    native = {t.name for t in profile_tools("gitmem")}
    for verb in ("add", "read", "update", "delete", "move", "search", "history", "diff", "restore", "compress",
                 "archive", "merge", "reflect", "context", "links"):
        assert f"memory_{verb}" in native


def test_exports_in_three_formats() -> None:
    openai = export("agentos", "openai")
    assert openai[0]["type"] == "function" and openai[0]["function"]["name"] == "memory_add"
    assert openai[0]["function"]["parameters"]["required"] == ["content"]
    anthropic = export("agentos", "anthropic")
    assert set(anthropic[0]) == {"name", "description", "input_schema"}
    mcp = export("fsm", "mcp")
    assert set(mcp[0]) == {"name", "description", "inputSchema", "annotations"}
    assert mcp[3]["annotations"]["readOnlyHint"] is True  # search_memory
    # Claude's memory tool is built into the Anthropic API: exported as its native type.
    assert export("claude", "anthropic") == [{"type": "memory_20250818", "name": "memory"}]
    assert export("claude", "openai")[0]["function"]["parameters"]["properties"]["command"]["enum"] == \
        ["view", "create", "str_replace", "insert", "delete", "rename"]
    for fmt in FORMATS:
        json.dumps(export("gitmem", fmt))
    with pytest.raises(ValueError):
        export("gitmem", "xml")


SAMPLES = [{}, {"content": "x"}, {"content": ""}, {"content": 3}, {"content": "x", "type": "bogus"},
           {"content": "x", "tags": "a"}, {"content": "x", "tags": ["a", 1]}, {"content": "x", "extra": 1},
           {"traceId": "mt_1"}, {"traceId": "mt_1", "tags": []}, {"query": "q", "limit": 0},
           {"query": "q", "limit": 5.0}, {"query": "q", "limit": 5.5}, {"query": "q", "limit": True},
           {"traceIds": ["a"]}, {"traceIds": ["a", "b"], "content": None},
           {"content": "x", "importance": 6}, {"content": "x", "relatedMemoryIds": [{"memoryId": "a"}]},
           {"content": "x", "relatedMemoryIds": [{"memoryId": "a", "relationType": "refines"}]},
           {"command": "view", "path": "/memories", "view_range": [1, 2, 3]},
           {"command": "view", "path": "/memories", "view_range": [1, -1]}, {"filenames": []}]


def _accepts(t, arguments: object) -> bool:
    try:
        t.arguments.validate(arguments)
    except ArgumentError as exc:
        assert exc.problems and all(isinstance(p, str) and p for p in exc.problems)
        return False
    return True


@pytest.mark.parametrize("t", ALL_TOOLS, ids=lambda t: f"{t.profile}.{t.name}")
def test_validator_agrees_with_jsonschema(t) -> None:
    """The arguments a tool accepts are exactly those its published schema allows
    (checked by an independent JSON Schema implementation)."""
    reference = jsonschema.Draft202012Validator(t.schema)
    samples = SAMPLES + [[1, 2], "x", None, {"tags": None}, {"limit": "5"}, {"dedup": 1},
                         {"content": "x", "title": None}, {"query": "q", "limit": float("nan")}]
    for sample in samples:
        assert _accepts(t, sample) == reference.is_valid(sample), (t.name, sample)


def test_validated_arguments_are_what_the_handler_takes() -> None:
    search = {t.name: t for t in profile_tools("gitmem")}["memory_search"]
    assert search.arguments.validate({"query": "q", "limit": 5.0}) == {"query": "q", "limit": 5}
    assert type(search.arguments.validate({"query": "q", "limit": 5.0})["limit"]) is int
    memory = profile_tools("claude")[0]
    assert memory.arguments.validate({"command": "view", "view_range": [1.0, -1.0]})["view_range"] == [1, -1]
    write = {t.name: t for t in profile_tools("vault")}["write_memory"]
    related = [{"memoryId": "a", "relationType": "refines"}]
    assert write.arguments.validate({"content": "x", "relatedMemoryIds": related}) == \
        {"content": "x", "relatedMemoryIds": related}                # only what was given
    # A JSON string may carry a lone surrogate: it is checked like any string (by length) and
    # reaches the handler as given, whose vault call then refuses it with its own error.
    odd = [{"memoryId": "a\udc80", "relationType": "refines"}]
    assert write.arguments.validate({"content": "x\ud800", "relatedMemoryIds": odd, "entities": ["\udfff"]}) == \
        {"content": "x\ud800", "relatedMemoryIds": odd, "entities": ["\udfff"]}
    with pytest.raises(ArgumentError, match="'summary' has 501 characters; the limit is 500"):
        write.arguments.validate({"content": "x", "summary": "\ud800" * 501})


def test_invalid_arguments_messages_name_the_parameter(vault: Vault) -> None:
    def message(profile: str, name: str, arguments: object) -> str:
        result = Toolbox(vault, profile).call(name, arguments)
        assert result["error"]["code"] == "invalid_arguments", result
        assert result["error"]["hint"].startswith(f"{name} takes: ")
        return result["error"]["message"]

    assert message("files", "memory_write", {}) == \
        "memory_write: 'path' is required; 'content' is required"
    assert message("files", "memory_write", {"path": "a.md", "content": "x", "mode": "a", "force": 1}) == \
        "memory_write: unknown argument(s) 'force', 'mode'"
    assert message("files", "memory_write", {"path": ["a.md"], "content": "x"}) == \
        "memory_write: 'path' must be string, got array"
    assert message("files", "memory_write", "[1, 2]") == "memory_write: arguments must be a JSON object, got array"
    assert message("gitmem", "memory_add", {"content": "x", "type": "diary"}) == (
        'memory_add: \'type\' must be one of "memory", "goal", "rule", "episodic", "semantic", "procedural", '
        '"prospective", "fact", "skill", "preference", "constraint", "task", "correction", got "diary"')
    assert message("gitmem", "memory_add", {"content": "x", "title": None}) == \
        "memory_add: 'title' must be string, got null"
    assert message("gitmem", "memory_add", {"content": "x" * 1_000_001}) == \
        "memory_add: 'content' has 1,000,001 characters; the limit is 1,000,000"
    assert message("gitmem", "memory_search", {"query": ""}) == "memory_search: 'query' must not be empty"
    assert message("gitmem", "memory_search", {"query": "q", "limit": 0}) == "memory_search: 'limit' must be >= 1, got 0"
    assert message("gitmem", "memory_search", {"query": "q", "limit": 5.5}) == \
        "memory_search: 'limit' must be integer, got number"
    assert message("gitmem", "memory_search", {"query": "q", "limit": True}) == \
        "memory_search: 'limit' must be integer, got boolean"
    assert message("gitmem", "memory_search", {"query": "q", "limit": "5"}) == \
        "memory_search: 'limit' must be integer, got string"
    assert message("gitmem", "memory_merge", {"refs": ["a"]}) == \
        "memory_merge: 'refs' needs at least 2 item(s), got 1"
    assert message("gitmem", "memory_add", {"content": "x", "tags": ["a", 1]}) == \
        "memory_add: 'tags'[1] must be string, got integer"
    assert message("vault", "write_memory", {"content": "x", "relatedMemoryIds": [{"memoryId": "a", "x": 1}]}) \
        == "write_memory: 'relatedMemoryIds'[0].relationType is required; 'relatedMemoryIds'[0] has unknown " \
           "key(s) 'x'"
    assert message("claude", "memory", {"command": "view", "view_range": [1, 2, 3]}) == \
        "memory: 'view_range' allows at most 2 item(s), got 3"
    assert Toolbox(vault, "files").call("memory_write", {"path": "s.md", "content": "bad \ud800"})["error"][
        "code"] == "invalid_content"                                 # the vault's refusal, not the schema's


def test_registry_and_toolbox_leave_pydantic_unimported(vault: Vault) -> None:
    """Importing the registry, opening a Toolbox and answering MCP's initialize need no
    validator: pydantic loads when a profile's tools are first used."""
    code = ("import sys\nfrom gitmem.agents.registry import Toolbox\nfrom gitmem.agents.mcp_stdio import StdioServer\n"
            f"box = Toolbox({str(vault.root)!r}, 'gitmem')\n"
            "server = StdioServer(box)\n"
            "server.handle({'jsonrpc': '2.0', 'id': 1, 'method': 'initialize', 'params': {'protocolVersion': "
            "'2025-06-18', 'capabilities': {}, 'clientInfo': {'name': 't', 'version': '0'}}})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))\n"
            "server.handle({'jsonrpc': '2.0', 'id': 2, 'method': 'tools/list', 'params': {}})\n"
            "print('pydantic' in sys.modules)\n")
    vault.close()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True"]


def test_error_shape_is_stable() -> None:
    err = error_result("not_found", "no memory matches 'x'")
    assert set(err) == {"error"} and set(err["error"]) == {"code", "message", "hint"}
    assert err["error"]["hint"]


@pytest.fixture
def box(vault: Vault):
    return Toolbox(vault, "files", agent="Atlas <atlas@example.com>")


def test_dispatcher_never_raises(box: Toolbox, vault: Vault) -> None:
    head = vault.head
    cases = [
        ("nope", "{}", "unknown_tool"),
        ("memory_write", "{not json", "invalid_arguments"),
        ("memory_write", "[1, 2]", "invalid_arguments"),
        ("memory_write", {"path": "a.md"}, "invalid_arguments"),
        ("memory_write", {"path": "a.md", "content": "x", "mode": "append"}, "invalid_arguments"),
        ("memory_write", {"path": ["a.md"], "content": "x"}, "invalid_arguments"),
        ("memory_write", {"path": "../a.md", "content": "x"}, "invalid_path"),
        ("memory_read", {"path": "missing.md"}, "not_found"),
    ]
    for name, args, code in cases:
        result = box.call(name, args)
        assert result["error"]["code"] == code, (name, args, result)
        assert result["error"]["message"] and result["error"]["hint"]
    assert vault.head == head
    assert "memory_write takes: path (string, required), content (string, required)." in \
        box.call("memory_write", {})["error"]["hint"]


def test_json_string_arguments_and_agent_author(box: Toolbox, vault: Vault) -> None:
    assert box.call("memory_write", json.dumps({"path": "a.md", "content": "# A\n"})) == "Written to a.md"
    assert git(vault.root, "log", "-1", "--format=%an <%ae>").strip() == "Atlas <atlas@example.com>"
    text, is_error = box.call_text("memory_read", {"path": "nope.md"})
    assert is_error and json.loads(text)["error"]["code"] == "not_found"


def test_toolbox_opens_a_path_and_rejects_unknown_profiles(vault: Vault) -> None:
    with Toolbox(str(vault.root), "index") as box:
        assert box.names() == ["memory_read"]
        assert box.schemas("mcp")[0]["annotations"]["readOnlyHint"] is True
    with pytest.raises(ValueError):
        Toolbox(vault, "nope")


def test_cli_tools_list_export_call(vault: Vault) -> None:
    runner = CliRunner()
    listed = runner.invoke(cli, ["tools", "list"])
    assert listed.exit_code == 0 and "agentos  memory_add, memory_update" in listed.output
    exported = runner.invoke(cli, ["tools", "export", "--profile", "fsm", "--format", "anthropic"])
    assert exported.exit_code == 0
    assert [t["name"] for t in json.loads(exported.output)][:2] == ["create_memory", "read_memory"]
    called = runner.invoke(cli, ["--vault", str(vault.root), "tools", "call", "--profile", "files",
                                 "--agent", "cli-bot", "memory_write", '{"path": "x.md", "content": "x"}'])
    assert called.exit_code == 0 and called.output == "Written to x.md\n"
    assert git(vault.root, "log", "-1", "--format=%an").strip() == "cli-bot"
    failed = runner.invoke(cli, ["--vault", str(vault.root), "tools", "call", "--profile", "files",
                                 "memory_read", '{"path": "/etc/passwd"}'])
    assert failed.exit_code == 1 and json.loads(failed.output)["error"]["code"] == "invalid_path"


def test_readme_documents_every_profile() -> None:
    readme = (Path(__file__).parent.parent / "docs" / "agents.md").read_text()
    assert "## Agent tools and MCP" in readme
    for profile in PROFILES:
        assert f"`{profile}`" in readme


def test_readme_agent_loop_runs(vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """The README's Anthropic agent loop, run against a scripted stand-in for the API."""
    import re
    import sys
    import types
    readme = (Path(__file__).parent.parent / "docs" / "agents.md").read_text()
    code = re.search(r"An agent loop with Anthropic's SDK.*?```python\n(.*?)```", readme, re.S).group(1)
    seen: list[list] = []

    class Block:
        def __init__(self, **fields: object) -> None:
            self.__dict__.update(fields)

    class Messages:
        def create(self, *, model: str, max_tokens: int, tools: list, messages: list) -> object:
            assert [t["name"] for t in tools][:2] == ["create_memory", "read_memory"]
            seen.append(messages[-1]["content"])
            if len(seen) == 1:
                return Block(content=[Block(type="tool_use", id="toolu_1", name="create_memory", input={
                    "content": "I want to learn Rust.", "title": "Rust Learning Goal", "type": "goal"})])
            return Block(content=[Block(type="text", text="Saved your goal.")])

    fake = types.ModuleType("anthropic")
    fake.Anthropic = lambda: Block(messages=Messages())  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "anthropic", fake)
    monkeypatch.chdir(vault.root.parent)
    vault.close()
    vault.root.rename(vault.root.parent / "my-vault")
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - our own README
    assert capsys.readouterr().out == "Saved your goal.\n"
    result = seen[1][0]
    assert result["tool_use_id"] == "toolu_1" and result["is_error"] is False
    assert json.loads(result["content"])["filename"] == "rust-learning-goal.md"
    assert git(vault.root.parent / "my-vault", "log", "-1", "--format=%an|%s").strip() == \
        "study-buddy|add: Rust Learning Goal"
