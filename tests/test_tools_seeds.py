"""Seed profiles `agentos` (002), `vault` (003) and `fsm` (004) through the dispatcher:
the seeds' exact example calls and output shapes, the files and commits they
make, and bad input (unknown ids, protected memories, wrong types) that leaves
the vault unchanged."""

from __future__ import annotations

import re
import uuid

import pytest

from gitmem import Toolbox, Vault

from .conftest import git, snapshot

TRACE = re.compile(r"^mt_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def subjects(vault: Vault, n: int) -> list[str]:
    return git(vault.root, "log", f"-{n}", "--format=%an|%s").strip().splitlines()


# ================================================================ agentos (002)
@pytest.fixture
def agentos(vault: Vault) -> Toolbox:
    return Toolbox(vault, "agentos", agent="agentos-bot")


def test_agentos_seed_examples(agentos: Toolbox, vault: Vault) -> None:
    added = agentos.call("memory_add", {"content": "User prefers dark mode and TypeScript.", "type": "semantic",
                                        "tags": ["preference", "ui", "language"]})
    assert set(added) == {"traceId"} and TRACE.match(added["traceId"])
    memory = vault.get(added["traceId"][3:])
    assert (memory.type, memory.meta.get("scope"), memory.tags, memory.meta.get("strength")) == \
        ("semantic", "user", ["preference", "ui", "language"], 1.0)
    assert memory.body.rstrip("\n") == "User prefers dark mode and TypeScript."
    assert subjects(vault, 1)[0].startswith("agentos-bot|add: ")
    # identical content, same type and scope: the existing trace, no commit
    head = vault.head
    again = agentos.call("memory_add", {"content": "User prefers dark mode and TypeScript.", "type": "semantic"})
    assert again == added and vault.head == head

    trace = added["traceId"]
    assert agentos.call("memory_update", {"traceId": trace, "content": "User prefers dark mode, TypeScript, "
                                          "and VS Code.", "tags": ["preference", "ui", "language", "editor"]}) \
        == {"updated": True}
    memory = vault.get(trace[3:])
    assert "VS Code" in memory.body and memory.tags == ["preference", "ui", "language", "editor"]
    assert agentos.call("memory_update", {"traceId": "mt_abc123-def4-5678-9abc-def012345678",
                                          "content": "x"}) == {"updated": False}

    found = agentos.call("memory_search", {"query": "VS Code", "type": "semantic", "limit": 5})
    assert found == {"results": [{"id": trace, "content": "User prefers dark mode, TypeScript, and VS Code.",
                                  "type": "semantic", "scope": "user", "strength": 1.0,
                                  "tags": ["preference", "ui", "language", "editor"]}]}
    assert agentos.call("memory_search", {"query": "VS Code", "type": "episodic"}) == {"results": []}

    assert agentos.call("memory_delete", {"traceId": trace}) == {"deleted": True}
    assert vault.get(trace[3:]).status == "deleted" and vault.get(trace[3:]).tier == "archive"
    assert agentos.call("memory_delete", {"traceId": trace}) == {"deleted": False}
    assert agentos.call("memory_update", {"traceId": trace, "content": "again"}) == {"updated": False}
    assert agentos.call("memory_search", {"query": "VS Code"}) == {"results": []}


def test_agentos_merge_and_reflect(agentos: Toolbox, vault: Vault) -> None:
    ids = [agentos.call("memory_add", {"content": text, "type": "semantic", "tags": [tag]})["traceId"]
           for text, tag in (("Deploys run with Docker Compose.", "docker"),
                             ("Releases use a blue-green strategy.", "release"),
                             ("The team deploys on Fridays.", "schedule"))]
    merged = agentos.call("memory_merge", {"traceIds": ids, "content": "User's deployment preferences: Docker "
                                           "Compose, blue-green strategy, Friday deploys."})
    assert set(merged) == {"mergedTraceId", "sourcesDeleted"} and merged["sourcesDeleted"] == 3
    assert TRACE.match(merged["mergedTraceId"])
    new = vault.get(merged["mergedTraceId"][3:])
    assert set(new.tags) == {"docker", "release", "schedule"}
    assert all(vault.get(i[3:]).status != "active" for i in ids)
    before = snapshot(vault.root)
    assert agentos.call("memory_merge", {"traceIds": [merged["mergedTraceId"], "mt_nope"]})["error"]["code"] == \
        "not_found"
    assert agentos.call("memory_merge", {"traceIds": [ids[0]]})["error"]["code"] == "invalid_arguments"
    assert snapshot(vault.root) == before
    report = agentos.call("memory_reflect", {})
    assert set(report) == {"pruned", "merged", "derived", "compacted", "durationMs"}
    assert all(isinstance(v, int) for v in report.values())


def test_agentos_bad_input(agentos: Toolbox, vault: Vault) -> None:
    before = snapshot(vault.root)
    for name, args in [("memory_add", {}), ("memory_add", {"content": ""}), ("memory_add", {"content": 1}),
                       ("memory_add", {"content": "x", "type": "semantic memory"}),
                       ("memory_add", {"content": "x", "scope": "world"}),
                       ("memory_add", {"content": "x", "tags": "a"}), ("memory_add", {"content": "x", "id": "y"}),
                       ("memory_add", {"content": "x" * 1_000_001}), ("memory_update", {}),
                       ("memory_update", {"traceId": 5}), ("memory_search", {"query": "x", "limit": 0}),
                       ("memory_search", {"query": "x", "limit": "5"}), ("memory_delete", {"traceId": ""}),
                       ("memory_merge", {"traceIds": "mt_a,mt_b"})]:
        assert agentos.call(name, args)["error"]["code"] == "invalid_arguments", (name, args)
    for bad in ("../../etc/passwd", "mt_../x", "mt_", "short_term"):
        assert agentos.call("memory_delete", {"traceId": bad}) == {"deleted": False}
    assert snapshot(vault.root) == before


# ================================================================== vault (003)
@pytest.fixture
def vault_tools(vault: Vault) -> Toolbox:
    return Toolbox(vault, "vault", agent="vault-agent")


SEED_003 = {"content": "The organization always uses PostgreSQL instead of MySQL for all database needs.",
            "memoryType": "constraint", "importance": 5, "confidence": 5,
            "entities": ["PostgreSQL", "MySQL", "database"],
            "writeReason": "Critical infrastructure decision that affects all projects", "dedup": True}


def test_vault_write_memory_seed_example(vault_tools: Toolbox, vault: Vault) -> None:
    written = vault_tools.call("write_memory", SEED_003)
    # the seed's answer, plus a notice: an agent's constraint is a proposal until a person accepts it
    assert "proposed constraint" in written.pop("notice")
    assert set(written) == {"id", "status"} and written["status"] == "created"
    uuid.UUID(written["id"])
    memory = vault.get(written["id"])
    assert (memory.type, memory.importance, memory.confidence, memory.meta["entities"],
            memory.meta["write_reason"]) == ("constraint", 5, 5, ["PostgreSQL", "MySQL", "database"],
                                             SEED_003["writeReason"])
    assert subjects(vault, 1)[0].startswith("vault-agent|add: The organization always uses PostgreSQL")
    head = vault.head
    assert vault_tools.call("write_memory", SEED_003) == {"id": written["id"], "status": "skipped"}
    assert vault.head == head
    read = vault_tools.call("read_memory", {"memoryId": written["id"]})
    assert read["content"] == SEED_003["content"] and read["memoryType"] == "constraint"
    assert read["entities"] == SEED_003["entities"] and read["status"] == "active"
    hits = vault_tools.call("search_memories", {"query": "PostgreSQL database"})["results"]
    assert [h["id"] for h in hits] == [written["id"]]
    assert set(hits[0]) == {"id", "content", "memoryType", "summary", "importance", "confidence", "score"}


def test_vault_write_memory_every_parameter(vault_tools: Toolbox, vault: Vault) -> None:
    first = vault_tools.call("write_memory", {"content": "Staging runs on Postgres 15.", "memoryType": "fact"})
    args = {"content": "Staging runs on Postgres 16 since March.", "memoryType": "fact",
            "summary": "Staging DB version", "vaultId": str(uuid.uuid4()), "importance": 4, "confidence": 4,
            "agentId": "agent-7", "agentType": "coder", "modelId": "claude-x", "agentRunId": "run-1",
            "sourceMessageId": str(uuid.uuid4()), "writeReason": "upgrade noticed",
            "externalWriteId": "ext-42",
            "relatedMemoryIds": [{"memoryId": first["id"], "relationType": "refines"}],
            "sourceNoteIds": [str(uuid.uuid4())], "entities": ["Postgres", "staging"], "dedup": False}
    written = vault_tools.call("write_memory", args)
    assert written["status"] == "created"
    meta = vault.get(written["id"]).meta
    for key, field in (("vaultId", "vault_id"), ("agentId", "agent_id"), ("agentType", "agent_type"),
                       ("modelId", "model_id"), ("agentRunId", "agent_run_id"),
                       ("sourceMessageId", "source_message_id"), ("writeReason", "write_reason"),
                       ("sourceNoteIds", "source_note_ids"), ("externalWriteId", "external_write_id"),
                       ("summary", "summary"), ("entities", "entities")):
        assert meta[field] == args[key], field
    assert meta["related"] == [{"id": first["id"], "relation": "refines"}]
    head = vault.head  # the same upsert key and content again: the first write's id, no commit
    assert vault_tools.call("write_memory", args) == {"id": written["id"], "status": "skipped"}
    assert vault.head == head
    # the same key with new content: that memory, updated in one commit
    assert vault_tools.call("write_memory", {**args, "content": "different"}) == \
        {"id": written["id"], "status": "updated"}
    assert git(vault.root, "rev-list", "--count", f"{head}..HEAD").strip() == "1"
    assert vault.get(written["id"]).body.strip() == "different"


def test_vault_dedup_supersedes_a_close_variant(vault_tools: Toolbox, vault: Vault) -> None:
    text = ("The deploy pipeline builds the image, runs the unit tests, pushes to the registry, "
            "migrates the database and then switches traffic to the new version")
    first = vault_tools.call("write_memory", {"content": text, "memoryType": "skill", "dedup": True})
    second = vault_tools.call("write_memory", {"content": text + " after a smoke test", "memoryType": "skill",
                                               "dedup": True})
    assert second["status"] in ("skipped", "superseded")
    if second["status"] == "superseded":
        assert second["id"] != first["id"] and vault.get(first["id"]).status == "superseded"
    else:
        assert second["id"] == first["id"]
    other = vault_tools.call("write_memory", {"content": "Lunch is at noon.", "memoryType": "skill", "dedup": True})
    assert other["status"] == "created"


def test_vault_bad_input(vault_tools: Toolbox, vault: Vault) -> None:
    before = snapshot(vault.root)
    for args in [{"content": "x", "importance": 0}, {"content": "x", "importance": 6},
                 {"content": "x", "confidence": "high"}, {"content": "x", "memoryType": "note"},
                 {"content": "x", "summary": "s" * 501}, {"content": ""},
                 {"content": "x", "relatedMemoryIds": [{"memoryId": "a", "relationType": "likes"}]},
                 {"content": "x", "relatedMemoryIds": ["a"]}, {"content": "x", "dedup": "yes"},
                 {"content": "x", "vault_id": "snake"}]:
        assert vault_tools.call("write_memory", args)["error"]["code"] == "invalid_arguments", args
    assert vault_tools.call("read_memory", {"memoryId": str(uuid.uuid4())})["error"]["code"] == "not_found"
    assert vault_tools.call("read_memory", {"memoryId": "../.git/config"})["error"]["code"] == "invalid_path"
    assert snapshot(vault.root) == before


# ==================================================================== fsm (004)
@pytest.fixture
def fsm(vault: Vault) -> Toolbox:
    return Toolbox(vault, "fsm", agent="fsm-agent")


def test_fsm_create_read_update_search(fsm: Toolbox, vault: Vault) -> None:
    goal = fsm.call("create_memory", {"content": "I want to learn Rust.", "title": "Rust Learning Goal",
                                      "type": "goal", "tags": ["learning", "rust"]})
    assert "proposed goal" in goal.pop("notice")
    assert goal == {"filename": "rust-learning-goal.md", "title": "Rust Learning Goal", "tier": "short_term",
                    "type": "goal", "tags": ["learning", "rust"]}
    read = fsm.call("read_memory", {"filename": "rust-learning-goal.md"})
    assert read["content"] == "I want to learn Rust." and read["type"] == "goal"
    assert fsm.call("read_memory", {"filename": "rust-learning-goal.md", "tier": "mid_term"})["error"]["code"] == \
        "not_found"
    note = fsm.call("create_memory", {"content": "Studied loops.", "title": "Loops"})
    updated = fsm.call("update_memory", {"filename": note["filename"], "content": "Studied loops and closures.",
                                         "tags": ["rust"], "tier": "mid_term"})
    assert updated["tier"] == "mid_term" and updated["tags"] == ["rust"]
    assert fsm.call("read_memory", {"filename": "loops.md"})["content"] == "Studied loops and closures."
    assert subjects(vault, 1) == ["fsm-agent|move: Loops short_term -> mid_term"]  # one commit, tracked move
    changes = git(vault.root, "log", "-2", "-M", "--name-status", "--format=").splitlines()  # + its rename half
    renamed = [c.split("\t")[1:] for c in changes if c.startswith("R")]
    assert [(a.split("/")[0], b.split("/")[0], b.rsplit("/", 1)[1]) for a, b in renamed] == \
        [("short_term", "mid_term", "loops.md")]
    assert fsm.call("search_memory", {"query": "closures"})["results"][0]["filename"] == "loops.md"
    before = snapshot(vault.root)
    assert fsm.call("update_memory", {"filename": "missing.md", "content": "x"})["error"]["code"] == "not_found"
    assert fsm.call("create_memory", {"content": "x", "title": "y", "tier": "archive"})["error"]["code"] == \
        "invalid_arguments"
    assert snapshot(vault.root) == before


def test_fsm_compress_flow_end_to_end(fsm: Toolbox, vault: Vault) -> None:
    fsm.call("create_memory", {"content": "I want to learn Rust.", "title": "Rust Learning Goal", "type": "goal"})
    for title, body in (("Loops", "Studied for loops."), ("Variables", "Studied let and mut.")):
        fsm.call("create_memory", {"content": body, "title": title, "tags": ["rust"]})
    data = fsm.call("compress_tier", {"tier": "short_term"})
    assert sorted(data["files"]) == ["loops.md", "variables.md"]  # the goal is protected
    assert "Studied for loops." in data["content"] and "I want to learn Rust" not in data["content"]
    assert data["target_tier"] == "mid_term"
    summary = fsm.call("create_memory", {"content": "User studied loops and variables.",
                                         "title": "Rust Progress Week 1", "tier": "mid_term"})
    assert summary["tier"] == "mid_term"
    archived = fsm.call("archive_memories", {"filenames": data["files"]})
    assert sorted(archived["archived"]) == ["loops.md", "variables.md"] and archived["tier"] == "archive"
    assert subjects(vault, 1) == ["fsm-agent|archive: 2 memories"]
    moved = git(vault.root, "log", "-1", "-M", "--name-status", "--format=", "HEAD~1")  # the rename half
    assert git(vault.root, "log", "-1", "--format=%s", "HEAD~1").startswith("rename: archive: 2 memories")
    assert [line[:4] for line in moved.splitlines()] == ["R100", "R100"]
    loops = vault.get("loops.md")
    assert loops.tier == "archive" and loops.status == "archived"
    assert git(vault.root, "log", "--follow", "--format=%s", "--", loops.path).splitlines()[:3] == \
        ["archive: 2 memories", "rename: archive: 2 memories (the next commit updates the text)", "add: Loops"]
    assert fsm.call("compress_tier", {"tier": "short_term"})["files"] == []
    before = snapshot(vault.root)
    assert fsm.call("archive_memories", {"filenames": ["rust-learning-goal.md"]})["error"]["code"] == "protected"
    assert fsm.call("archive_memories", {"filenames": ["nope.md"]})["error"]["code"] == "not_found"
    assert fsm.call("archive_memories", {"filenames": []}) == {"archived": [], "tier": "archive"}
    assert snapshot(vault.root) == before
    context = fsm.call("retrieve_protected_context", {})
    assert [(m["filename"], m["in_force"]) for m in context["memories"]] == [("rust-learning-goal.md", False)]
    # the agent's goal is shown as quoted data after the instructions, not as one
    assert "> I want to learn Rust." in context["context"].split("## Proposals")[1]
