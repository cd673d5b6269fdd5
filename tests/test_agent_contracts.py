"""Each tool profile keeps its own contract, written as an agent's call sequences
against ``Toolbox`` (and once over MCP stdio): what an agent may do to protected
memories and what a refusal tells it to do instead, ``externalWriteId`` /
``external_write_id`` as an upsert key, dedup that never drops a fact that
differs in word order, numbers or negation, ``memory_merge`` concatenation,
an empty ``archive_memories`` batch, and the ``write_memory`` size limit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from gitmem import Toolbox, Vault
from gitmem.memory.similarity import differences, similarity
from gitmem.agents.registry import profile_tools

from .conftest import RENAME, git, mcp_params, snapshot


def commits(vault: Vault) -> int:
    """The writes in history (a move's pure-rename commit is half of its write)."""
    return sum(not s.startswith(RENAME) for s in git(vault.root, "log", "--format=%s").splitlines())


def last_subject(vault: Vault) -> str:
    return git(vault.root, "log", "-1", "--format=%an|%s").strip()


def assert_actionable(error: dict[str, Any], profile: str) -> None:
    """A ``protected`` refusal whose hint an agent of ``profile`` can follow."""
    assert error["code"] == "protected", error
    hint = error["hint"]
    # no tool of any agent profile has a force argument: never tell the agent to pass one
    assert "force=True" not in hint and "force=true" not in hint.lower().replace(" ", ""), hint
    assert all("force" not in t.schema.get("properties", {}) for t in profile_tools(profile))
    assert "gitmem edit" in hint or "update_memory" in hint, hint


@pytest.fixture
def fsm(vault: Vault) -> Toolbox:
    return Toolbox(vault, "fsm", agent="fsm-agent")


@pytest.fixture
def vault_tools(vault: Vault) -> Toolbox:
    return Toolbox(vault, "vault", agent="vault-agent")


@pytest.fixture
def native(vault: Vault) -> Toolbox:
    return Toolbox(vault, "gitmem", agent="native-agent")


@pytest.fixture
def agentos(vault: Vault) -> Toolbox:
    return Toolbox(vault, "agentos", agent="agentos-bot")


# ============================================================ 1. protection
def test_fsm_agent_updates_its_own_goal_in_one_restorable_commit(fsm: Toolbox, vault: Vault, clock) -> None:
    fsm.call("create_memory", {"content": "I want to learn Rust.", "title": "Rust Learning Goal", "type": "goal",
                               "tags": ["learning", "rust"]})
    before = commits(vault)
    clock.tick()
    updated = fsm.call("update_memory", {"filename": "rust-learning-goal.md",
                                         "content": "I want to learn Rust and write a CLI in it."})
    # An agent's goal is a proposal until a person accepts it: the answer says so.
    assert "proposed goal" in updated.pop("notice")
    assert updated == {"filename": "rust-learning-goal.md", "title": "Rust Learning Goal", "tier": "short_term",
                       "type": "goal", "tags": ["learning", "rust"]}
    assert commits(vault) == before + 1
    # the commit says a protected memory changed, and who changed it
    assert last_subject(vault) == "fsm-agent|update: Rust Learning Goal (forced)"
    assert fsm.call("read_memory", {"filename": "rust-learning-goal.md"})["content"] == \
        "I want to learn Rust and write a CLI in it."
    path = vault.get("rust-learning-goal.md").path
    assert "I want to learn Rust." in git(vault.root, "show", f"HEAD~1:{path}")   # the old text is in history
    # promoting the goal is a tracked move, one commit
    moved = fsm.call("update_memory", {"filename": "rust-learning-goal.md", "tier": "long_term", "tags": ["rust"]})
    assert (moved["tier"], moved["tags"]) == ("long_term", ["rust"]) and commits(vault) == before + 2
    # restorable: a person brings the first version back
    restored = vault.restore("rust-learning-goal.md", "~2", force=True)
    assert restored.body.strip() == "I want to learn Rust." and restored.type == "goal"
    # still protected from compression and archiving
    assert fsm.call("compress_tier", {"tier": "long_term"})["files"] == []
    snap = snapshot(vault.root)
    assert_actionable(fsm.call("archive_memories", {"filenames": ["rust-learning-goal.md"]})["error"], "fsm")
    assert snapshot(vault.root) == snap


def test_fsm_refuses_protected_memories_it_does_not_manage(fsm: Toolbox, vault_tools: Toolbox,
                                                           vault: Vault) -> None:
    rule = vault_tools.call("write_memory", {"content": "Only PostgreSQL for databases.", "memoryType": "constraint"})
    filename = vault.get(rule["id"]).filename
    snap = snapshot(vault.root)
    error = fsm.call("update_memory", {"filename": filename, "content": "MySQL is fine."})["error"]
    assert_actionable(error, "fsm")
    assert "gitmem edit" in error["hint"]
    assert snapshot(vault.root) == snap


def test_vault_correction_supersedes_a_constraint(vault_tools: Toolbox, vault: Vault) -> None:
    old = vault_tools.call("write_memory", {"content": "All services use MySQL 5.7.", "memoryType": "constraint",
                                            "importance": 5})
    before = commits(vault)
    fix = vault_tools.call("write_memory", {
        "content": "All services use PostgreSQL 16; MySQL is retired.", "memoryType": "constraint",
        "relatedMemoryIds": [{"memoryId": old["id"], "relationType": "supersedes"}]})
    assert fix["status"] == "created" and fix["id"] != old["id"]
    assert commits(vault) == before + 1
    stale = vault_tools.call("read_memory", {"memoryId": old["id"]})
    assert (stale["status"], stale["supersededById"], stale["content"]) == \
        ("superseded", fix["id"], "All services use MySQL 5.7.")
    context = vault.protected_context()
    # only the current constraint is proposed (an agent wrote it: not in force until accepted)
    assert ([m.id for m in context.proposals], context.memories) == ([fix["id"]], [])


def test_vault_dedup_supersedes_a_near_identical_constraint(vault_tools: Toolbox, vault: Vault) -> None:
    text = "The organization always uses PostgreSQL instead of MySQL for all database needs."
    near = "The organization always uses PostgreSQL instead of MySQL for every database need."
    assert 0.80 <= similarity(text, near) < 0.92 and not differences(text, near)
    first = vault_tools.call("write_memory", {"content": text, "memoryType": "constraint", "dedup": True})
    second = vault_tools.call("write_memory", {"content": near, "memoryType": "constraint", "dedup": True})
    assert second["status"] == "superseded" and second["id"] != first["id"]
    assert vault.get(first["id"]).status == "superseded"
    assert [m.id for m in vault.protected_context().proposals] == [second["id"]]   # no pile-up


def test_vault_cannot_supersede_a_goal_and_says_what_to_do(vault_tools: Toolbox, fsm: Toolbox,
                                                           vault: Vault) -> None:
    fsm.call("create_memory", {"content": "Ship v2 by June.", "title": "Ship v2", "type": "goal"})
    goal = vault.get("ship-v2.md")
    snap = snapshot(vault.root)
    error = vault_tools.call("write_memory", {
        "content": "Ship v2 by July.", "relatedMemoryIds": [{"memoryId": goal.id, "relationType": "supersedes"}]})
    assert_actionable(error["error"], "vault")
    assert "contradicts" in error["error"]["hint"]
    assert snapshot(vault.root) == snap and vault.get(goal.id).status == "active"


def test_every_protected_refusal_names_something_the_agent_can_do(vault: Vault) -> None:
    native = Toolbox(vault, "gitmem", agent="native-agent")
    agentos = Toolbox(vault, "agentos", agent="agentos-bot")
    rule = vault.add("No Friday deploys", "Never deploy on Fridays.", type="rule")
    note = vault.add("A note", "Body.")
    snap = snapshot(vault.root)
    refusals = [
        (native, "memory_update", {"ref": rule.id, "content": "Deploy whenever."}),
        (native, "memory_move", {"ref": rule.id, "tier": "long_term"}),
        (native, "memory_delete", {"ref": rule.id}),
        (native, "memory_archive", {"refs": [rule.id]}),
        (native, "memory_merge", {"refs": [rule.id, note.id]}),
        (native, "memory_add", {"content": "Friday deploys are fine.", "supersedes": rule.id}),
        (agentos, "memory_update", {"traceId": f"mt_{rule.id}", "content": "Deploy whenever."}),
        (agentos, "memory_delete", {"traceId": f"mt_{rule.id}"}),
        (agentos, "memory_merge", {"traceIds": [f"mt_{rule.id}", f"mt_{note.id}"]}),
    ]
    for box, name, args in refusals:
        result = box.call(name, args)
        assert "error" in result, (name, args, result)
        assert_actionable(result["error"], box.profile)
    assert snapshot(vault.root) == snap


# ============================================================ 2. upsert key
def test_vault_external_write_id_is_an_upsert_key(vault_tools: Toolbox, vault: Vault) -> None:
    args = {"content": "Staging runs Postgres 15.", "memoryType": "constraint", "externalWriteId": "run-1:msg-7"}
    first = vault_tools.call("write_memory", args)
    assert first["status"] == "created"
    head = vault.head
    assert vault_tools.call("write_memory", args) == {"id": first["id"], "status": "skipped"}
    assert vault.head == head                                          # a retry: no commit
    # same key, new content, no memoryType: that memory, updated; a constraint stays a constraint
    again = vault_tools.call("write_memory", {"content": "Staging runs Postgres 16.",
                                              "externalWriteId": "run-1:msg-7"})
    assert "proposed constraint" in again.pop("notice")
    assert again == {"id": first["id"], "status": "updated"}
    assert git(vault.root, "rev-list", "--count", f"{head}..HEAD").strip() == "1"
    read = vault_tools.call("read_memory", {"memoryId": first["id"]})
    assert (read["content"], read["memoryType"], read["status"]) == \
        ("Staging runs Postgres 16.", "constraint", "active")
    memory = vault.get(first["id"])
    assert memory.title == "Staging runs Postgres 16."             # a title made from the text follows it
    versions = git(vault.root, "log", "--format=%s", "--", memory.path).splitlines()
    assert versions == ["update: Staging runs Postgres 16. (forced)", "add: Staging runs Postgres 15."]
    assert vault_tools.call("search_memories", {"query": "\"Postgres 15\""})["results"] == []   # no stale copy


def test_native_external_write_id_is_an_upsert_key(native: Toolbox, vault: Vault) -> None:
    first = native.call("memory_add", {"content": "Deploys happen on Tuesdays.", "external_write_id": "k1",
                                       "tags": ["ops"]})
    before = commits(vault)
    same = native.call("memory_add", {"content": "Deploys happen on Tuesdays.", "external_write_id": "k1"})
    assert (same["status"], same["id"], same["commit"]) == ("skipped", first["id"], None)
    assert commits(vault) == before
    changed = native.call("memory_add", {"content": "Deploys happen on Thursdays.", "external_write_id": "k1",
                                         "importance": 4})
    assert (changed["status"], changed["id"]) == ("updated", first["id"])
    assert changed["commit"] == vault.head and commits(vault) == before + 1
    memory = vault.get(first["id"])
    assert (memory.body.strip(), memory.importance, memory.tags) == ("Deploys happen on Thursdays.", 4, ["ops"])
    # a protected memory is not upserted by the native tools
    rule = native.call("memory_add", {"content": "Never deploy on Fridays.", "type": "rule",
                                      "external_write_id": "k2"})
    error = native.call("memory_add", {"content": "Deploy any day.", "external_write_id": "k2"})["error"]
    assert_actionable(error, "gitmem")
    assert vault.get(rule["id"]).body.strip() == "Never deploy on Fridays."


# ===================================================== 3. facts are not dropped
FACT_PAIRS = [
    ("Alice reports to Bob.", "Bob reports to Alice."),
    ("In the new org chart for the platform group Alice reports to Bob and Carol leads the infrastructure "
     "team from Berlin", "In the new org chart for the platform group Bob reports to Alice and Carol leads "
     "the infrastructure team from Berlin"),
    ("The meeting is at 3 pm.", "The meeting is at 4 pm."),
    ("The weekly planning meeting with the design and platform teams starts at 3 pm in the big room on the "
     "second floor", "The weekly planning meeting with the design and platform teams starts at 4 pm in the "
     "big room on the second floor"),
    ("Alice is on call this week.", "Alice is not on call this week."),
    ("The staging cluster is reachable from the office network and from the VPN for every engineer on the "
     "platform team", "The staging cluster is not reachable from the office network and from the VPN for "
     "every engineer on the platform team"),
    ("The deploy script works on macOS and on every Linux laptop of the team",
     "The deploy script doesn't work on macOS and on every Linux laptop of the team"),
]


@pytest.mark.parametrize("first,second", FACT_PAIRS)
def test_dedup_never_skips_a_different_fact(vault_tools: Toolbox, vault: Vault, first: str, second: str) -> None:
    old = vault_tools.call("write_memory", {"content": first, "dedup": True})
    new = vault_tools.call("write_memory", {"content": second, "dedup": True})
    assert new["status"] in ("created", "superseded") and new["id"] != old["id"], new
    assert vault_tools.call("read_memory", {"memoryId": new["id"]})["content"] == second
    assert vault_tools.call("read_memory", {"memoryId": old["id"]})["content"] == first


def test_similarity_is_order_aware_and_sees_numbers_and_negations() -> None:
    for a, b in FACT_PAIRS:
        assert similarity(a, b) < 0.92 and differences(a, b), (a, b)
    assert differences(*FACT_PAIRS[0]) == ["word order"]
    assert differences(*FACT_PAIRS[2]) == ["numbers"]
    assert differences(*FACT_PAIRS[4]) == ["negation"]
    assert differences("Meet at three.", "Meet at four.") == ["numbers"]
    # harmless edits stay similar: punctuation, case, an added word, an inserted clause
    base = "User prefers dark mode, TypeScript, and VS Code."
    assert similarity(base, base.upper() + "!!") == 1.0 and not differences(base, base + " code")
    assert similarity(base, base + " code") >= 0.92
    assert 0.80 <= similarity("User prefers dark mode and TypeScript.", base) < 0.92
    assert similarity(base, "The cat needs a vaccination in March.") < 0.2


def test_a_low_skip_threshold_still_never_drops_a_fact(tmp_path: Path) -> None:
    v = Vault.init(tmp_path / "v")
    cfg = v.root / ".gitmem.yaml"
    cfg.write_text(cfg.read_text().replace("skip: 0.92", "skip: 0.5").replace("supersede: 0.80", "supersede: 0.4"))
    v.close()
    with Toolbox(str(tmp_path / "v"), "gitmem", agent="native-agent") as box:
        for first, second in FACT_PAIRS:
            old = box.call("memory_add", {"content": first, "dedup": True, "type": "fact"})
            new = box.call("memory_add", {"content": second, "dedup": True, "type": "fact"})
            assert new["status"] != "skipped" and new["id"] != old["id"], (first, second, new)
        # a true near-duplicate is still skipped
        again = box.call("memory_add", {"content": FACT_PAIRS[0][1] + " Bob", "dedup": True, "type": "fact"})
        assert again["status"] == "skipped"


def test_reflect_merges_near_identical_traces_but_not_different_facts(agentos: Toolbox, vault: Vault) -> None:
    text = ("The office wifi password is written on the fridge next to the coffee machine in the small "
            "kitchen on the third floor")
    a = agentos.call("memory_add", {"content": text, "type": "semantic"})["traceId"]
    b = agentos.call("memory_add", {"content": text + " today", "type": "semantic"})["traceId"]
    assert a != b                                # memory_add stores near-identical traces (only identical reuse)
    for first, second in FACT_PAIRS[1::2]:      # long texts: word cosine alone would call them duplicates
        agentos.call("memory_add", {"content": first, "type": "semantic"})
        agentos.call("memory_add", {"content": second, "type": "semantic"})
    report = agentos.call("memory_reflect", {})
    assert report["merged"] == 1, report
    assert vault.get(a[3:]).status != "active" and vault.get(b[3:]).status != "active"
    for first, second in FACT_PAIRS[1::2]:
        for content in (first, second):
            hits = agentos.call("memory_search", {"query": f'"{content.split()[-3]} {content.split()[-2]}"'})
            assert content in [h["content"] for h in hits["results"]], content


# ================================================= 4, 5. agentos merge and add
def test_agentos_merge_without_content_concatenates_each_source_once(agentos: Toolbox, vault: Vault) -> None:
    texts = ["Deploys run with Docker Compose.", "Releases use a blue-green strategy.",
             "The team deploys on Fridays."]
    ids = [agentos.call("memory_add", {"content": t, "type": "semantic"})["traceId"] for t in texts]
    merged = agentos.call("memory_merge", {"traceIds": ids})
    assert merged["sourcesDeleted"] == 3
    body = vault.get(merged["mergedTraceId"][3:]).body.strip()
    assert body == "\n\n".join(texts)
    hits = agentos.call("memory_search", {"query": "Docker"})["results"]
    assert [h["content"] for h in hits] == ["\n\n".join(texts)]


def test_agentos_exact_operators_match_a_traces_own_text(agentos: Toolbox) -> None:
    """FTS5 semantics: a phrase, AND and NOT match the trace itself, never the text of the
    trace written before it in the session (indexed with it as context)."""
    for text in ("Editor theme: dark mode everywhere.", "The mode is dark in the evening, light otherwise.",
                 "Docker Compose runs the local stack.", "Docker images are built nightly."):
        agentos.call("memory_add", {"content": text, "type": "semantic"})

    def found(query: str) -> list[str]:
        return [h["content"] for h in agentos.call("memory_search", {"query": query})["results"]]
    assert found('"dark mode"') == ["Editor theme: dark mode everywhere."]
    assert found("docker AND compose") == ["Docker Compose runs the local stack."]
    assert found("docker NOT compose") == ["Docker images are built nightly."]


def test_native_merge_does_not_repeat_a_title_made_from_the_text(native: Toolbox, vault: Vault) -> None:
    a = native.call("memory_add", {"content": "Loops in Rust use for and while."})["id"]
    b = native.call("memory_add", {"content": "Iterators are lazy.", "title": "Iterators"})["id"]
    merged = native.call("memory_merge", {"refs": [a, b]})
    body = vault.get(merged["memory"]["id"]).body
    assert body.count("Loops in Rust use for and while.") == 1
    assert body.strip() == "Loops in Rust use for and while.\n\n## Iterators\n\nIterators are lazy."


def test_agentos_memory_add_description_matches_its_behaviour(agentos: Toolbox, vault: Vault) -> None:
    tool = next(t for t in profile_tools("agentos") if t.name == "memory_add")
    assert "92" not in tool.description and "80%" not in tool.description
    assert "Identical content" in tool.description
    first = agentos.call("memory_add", {"content": "User prefers dark mode and TypeScript.", "type": "semantic"})
    head = vault.head
    same = agentos.call("memory_add", {"content": "user prefers dark mode and typescript!", "type": "semantic"})
    assert same == first and vault.head == head
    near = agentos.call("memory_add", {"content": "User prefers dark mode, TypeScript and VS Code.",
                                       "type": "semantic"})
    assert near != first and commits(vault) == int(git(vault.root, "rev-list", "--count", head)) + 1
    assert vault.get(first["traceId"][3:]).status == "active"       # stored as described: nothing superseded


# ====================================================== 7. empty archive batch
def test_fsm_compress_flow_on_a_tier_of_only_goals_and_rules(fsm: Toolbox, vault: Vault) -> None:
    fsm.call("create_memory", {"content": "I want to learn Rust.", "title": "Rust Learning Goal", "type": "goal"})
    fsm.call("create_memory", {"content": "Explain before coding.", "title": "Teaching Rule", "type": "rule"})
    snap = snapshot(vault.root)
    data = fsm.call("compress_tier", {"tier": "short_term"})
    assert (data["files"], data["content"]) == ([], "")
    assert fsm.call("archive_memories", {"filenames": data["files"]}) == {"archived": [], "tier": "archive"}
    assert snapshot(vault.root) == snap                                   # a no-op: no commit, no file


# ============================================================ 9. size limit
def test_write_memory_counts_characters_as_its_contract_does(vault_tools: Toolbox, vault: Vault) -> None:
    over = vault_tools.call("write_memory", {"content": "x" * 1_000_001})
    assert over["error"]["code"] == "invalid_arguments" and "1,000,000" in over["error"]["message"]
    # 600,000 characters (1.2 MB as UTF-8) and 1,000,000 four-byte characters: valid for
    # write_memory, and stored whole under the vault's default file limit
    for text in ("ü" * 600_000, "😀" * 1_000_000):
        written = vault_tools.call("write_memory", {"content": text})
        assert written["status"] == "created", written
        assert vault_tools.call("read_memory", {"memoryId": written["id"]})["content"] == text
    # a vault configured lower refuses with both sizes named, and nothing changes
    snap = snapshot(vault.root)
    vault.config = vault.config.__class__(**{**vault.config.__dict__, "max_content_bytes": 1_000_000})
    error = vault_tools.call("write_memory", {"content": "ü" * 600_000 + "!"})["error"]
    assert error["code"] == "content_too_large"
    assert "600,001" in error["message"] and "1,200,001 bytes" in error["message"]
    assert "max_content_bytes" in error["message"] and "max_content_bytes" in error["hint"]
    assert snapshot(vault.root) == snap


# ======================================================== over MCP stdio
def test_fsm_and_vault_contracts_over_mcp_stdio(vault: Vault) -> None:
    mcp = pytest.importorskip("mcp", reason="the MCP SDK is an optional extra: pip install gitmem-vault[mcp]")
    anyio = pytest.importorskip("anyio")
    root = vault.root
    vault.close()

    def params(profile: str, agent: str) -> Any:
        return mcp_params(root, profile, agent)

    async def session() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with mcp.Client(params("fsm", "study-buddy")) as client:
            await client.call_tool("create_memory", {"content": "I want to learn Rust.",
                                                     "title": "Rust Learning Goal", "type": "goal"})
            out["update"] = await client.call_tool("update_memory", {"filename": "rust-learning-goal.md",
                                                                     "content": "Learn Rust by June."})
            out["batch"] = await client.call_tool("compress_tier", {"tier": "short_term"})
            out["archive"] = await client.call_tool("archive_memories",
                                                    {"filenames": out["batch"].structured_content["files"]})
            out["refused"] = await client.call_tool("archive_memories", {"filenames": ["rust-learning-goal.md"]})
        async with mcp.Client(params("vault", "vault-agent")) as client:
            args = {"content": "Staging runs Postgres 15.", "externalWriteId": "ext-1"}
            out["first"] = await client.call_tool("write_memory", args)
            out["retry"] = await client.call_tool("write_memory", args)
            out["upsert"] = await client.call_tool("write_memory", {**args, "content": "Staging runs Postgres 16."})
        return out

    out = anyio.run(session)
    assert not out["update"].is_error and out["update"].structured_content["type"] == "goal"
    assert out["batch"].structured_content["files"] == []
    assert not out["archive"].is_error and out["archive"].structured_content == {"archived": [], "tier": "archive"}
    assert out["refused"].is_error
    assert_actionable(out["refused"].structured_content["error"], "fsm")
    first = out["first"].structured_content
    assert out["retry"].structured_content == {"id": first["id"], "status": "skipped"}
    assert out["upsert"].structured_content == {"id": first["id"], "status": "updated"}
    log = git(root, "log", "--format=%an|%s").splitlines()
    assert log[:3] == ["vault-agent|update: Staging runs Postgres 16.", "vault-agent|add: Staging runs Postgres 15.",
                       "study-buddy|update: Rust Learning Goal (forced)"]
    with Vault.open(root) as reopened:
        assert reopened.get(first["id"]).body.strip() == "Staging runs Postgres 16."
        assert reopened.get("rust-learning-goal.md").body.strip() == "Learn Rust by June."
