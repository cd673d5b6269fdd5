"""The native `gitmem` profile through the dispatcher: every tool once, the
commits it makes (author = the session's agent), and bad input (unknown refs,
protected memories, wrong types) with the vault unchanged."""

from __future__ import annotations

import json

import pytest

from gitmem import Toolbox, Vault

from .conftest import git, snapshot


@pytest.fixture
def box(vault: Vault) -> Toolbox:
    return Toolbox(vault, "gitmem", agent="Native Bot <native@example.com>")


def author_and_subject(vault: Vault) -> str:
    return git(vault.root, "log", "-1", "--format=%an|%s").strip()


def test_native_lifecycle_of_one_memory(box: Toolbox, vault: Vault, clock) -> None:
    added = box.call("memory_add", {"content": "Maya prefers dark mode in every editor.", "type": "preference",
                                    "tags": ["ui"], "importance": 4, "external_write_id": "k1"})
    assert added["status"] == "created" and added["commit"] and added["path"].startswith("short_term/")
    assert author_and_subject(vault) == "Native Bot|add: Maya prefers dark mode in every editor."
    retry = box.call("memory_add", {"content": "Maya prefers dark mode in every editor.", "type": "preference",
                                    "tags": ["ui"], "importance": 4, "external_write_id": "k1"})
    assert (retry["status"], retry["id"], retry["commit"]) == ("skipped", added["id"], None)
    mid = added["id"]
    read = box.call("memory_read", {"ref": mid})
    assert read["body"].startswith("Maya prefers dark mode") and read["importance"] == 4
    clock.tick()
    updated = box.call("memory_update", {"ref": mid, "old_text": "every editor", "new_text": "every editor and "
                                         "terminal", "add_tags": ["editor"], "confidence": 5})
    assert updated["tags"] == ["ui", "editor"] and updated["commit"]
    assert box.call("memory_read", {"ref": mid, "version": "~1"})["body"].startswith(
        "Maya prefers dark mode in every editor.")
    diff = box.call("memory_diff", {"ref": mid})["diff"]
    assert "-Maya prefers dark mode in every editor." in diff and "+Maya prefers dark mode in every editor and " \
        "terminal." in diff
    moved = box.call("memory_move", {"ref": mid, "tier": "long_term"})
    assert moved["tier"] == "long_term" and moved["path"].startswith("long_term/")
    hits = box.call("memory_search", {"query": "terminal dark mode", "tier": "long_term"})
    assert [h["id"] for h in hits["hits"]] == [mid] and hits["total"] == 1
    listed = box.call("memory_list", {"tier": "long_term", "tag": "editor"})["memories"]
    assert [m["id"] for m in listed] == [mid]
    deleted = box.call("memory_delete", {"ref": mid})
    assert (deleted["status"], deleted["tier"]) == ("deleted", "archive")
    restored = box.call("memory_restore", {"ref": mid, "version": "~1"})
    assert (restored["status"], restored["tier"]) == ("active", "long_term")
    ops = [v["op"] for v in box.call("memory_history", {"ref": mid})["versions"]]
    assert ops == ["restore", "delete", "move", "update", "add"]
    assert {v["author"] for v in box.call("memory_history", {"ref": mid})["versions"]} == \
        {"Native Bot <native@example.com>"}


def test_native_lifecycle_tools(box: Toolbox, vault: Vault) -> None:
    rule = box.call("memory_add", {"content": "Never deploy on Fridays.", "type": "rule", "tier": "long_term"})
    ids = [box.call("memory_add", {"content": text, "tags": ["rust"]})["id"]
           for text in ("Studied for loops in Rust.", "Studied ownership in Rust.", "Read the borrow checker chapter.")]
    batch = box.call("memory_compress_batch", {"tier": "short_term"})
    assert sorted(batch["ids"]) == sorted(ids) and batch["target_tier"] == "mid_term"
    summary = box.call("memory_compress", {"tier": "short_term", "summary": "Rust basics: loops, ownership, "
                                           "borrowing.", "title": "Rust week 1", "files": batch["files"]})
    assert summary["tier"] == "mid_term"
    assert all(vault.get(i).tier == "archive" for i in ids)
    links = box.call("memory_links", {"ref": summary["id"]})
    assert {link["id"] for link in links["outgoing"]} >= set(ids)
    back = box.call("memory_unarchive", {"ref": ids[0]})
    assert back["tier"] == "short_term" and back["status"] == "active"
    other = box.call("memory_add", {"content": "Loops in Rust use for and while."})["id"]
    merged = box.call("memory_merge", {"refs": [ids[0], other], "title": "Rust loops"})
    assert set(merged["sources"]) == {ids[0], other} and merged["memory"]["title"] == "Rust loops"
    archived = box.call("memory_archive", {"refs": [merged["memory"]["id"]]})
    assert [m["tier"] for m in archived["archived"]] == ["archive"]
    context = box.call("memory_context", {})
    # an agent's rule is a proposal: listed apart, and quoted after the rules in force
    assert context["memories"] == [] and [m["id"] for m in context["proposals"]] == [rule["id"]]
    assert "> Never deploy" in context["markdown"].split("## Proposals")[1]
    plan = box.call("memory_reflect", {"dry_run": True})
    assert {"pruned", "merged", "promoted", "expired"} <= set(plan)
    json.dumps([batch, links, context, plan])


def test_native_bad_input_leaves_the_vault_unchanged(box: Toolbox, vault: Vault) -> None:
    rule = vault.add("Never deploy on Fridays", "Rule.", type="rule", tier="long_term")
    note = vault.add("A note", "Body.")
    before = snapshot(vault.root)
    expect = [
        ("memory_read", {"ref": "no-such-memory"}, "not_found"),
        ("memory_read", {}, "invalid_arguments"),
        ("memory_read", {"ref": 42}, "invalid_arguments"),
        ("memory_read", {"ref": "x", "force": True}, "invalid_arguments"),
        ("memory_read", {"ref": "../../etc/passwd"}, "invalid_path"),
        ("memory_read", {"ref": note.id, "version": "~9"}, "revision_not_found"),
        ("memory_update", {"ref": rule.id, "content": "deploy whenever"}, "protected"),
        ("memory_update", {"ref": note.id, "old_text": "missing", "new_text": "x"}, "no_match"),
        ("memory_update", {"ref": note.id, "old_text": "Body."}, "invalid_input"),
        ("memory_update", {"ref": note.id, "importance": 9}, "invalid_arguments"),
        ("memory_move", {"ref": rule.id, "tier": "short_term"}, "protected"),
        ("memory_move", {"ref": note.id, "tier": "attic"}, "invalid_arguments"),
        ("memory_delete", {"ref": rule.id}, "protected"),
        ("memory_delete", {"ref": rule.id, "force": True}, "invalid_arguments"),
        ("memory_archive", {"refs": [rule.id]}, "protected"),
        ("memory_archive", {"refs": [note.id, "no-such-memory"]}, "not_found"),
        ("memory_merge", {"refs": [note.id]}, "invalid_arguments"),
        ("memory_add", {"content": "x" * 1_000_001}, "invalid_arguments"),
        ("memory_add", {"content": "x", "type": "diary"}, "invalid_arguments"),
        ("memory_add", {"content": "x", "expires": "next tuesday"}, "invalid_metadata"),
        ("memory_search", {"query": ""}, "invalid_arguments"),
        ("memory_links", {"ref": "no-such-memory"}, "not_found"),
    ]
    for name, args, code in expect:
        result = box.call(name, args)
        assert "error" in result and result["error"]["code"] == code, (name, args, result)
    assert snapshot(vault.root) == before
    vault.config = vault.config.__class__(**{**vault.config.__dict__, "max_content_bytes": 2048})
    assert box.call("memory_add", {"content": "é" * 2000})["error"]["code"] == "content_too_large"
    assert snapshot(vault.root) == before
