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


# --- memory_search in the size an agent can afford ------------------------------------------------

DEFAULT_HIT_KEYS = {"id", "path", "title", "tier", "type", "tags", "score", "updated", "snippet"}


@pytest.fixture
def garden(vault: Vault) -> Vault:
    """Twelve memories about the garden, long enough that ten full hits take ~5,000 characters."""
    for n in range(12):
        vault.add(f"Garden note {n}: {'tomatoes' if n % 2 else 'roses'} and the greenhouse",
                  f"Day {n} in the garden.\n\nThe greenhouse needs **watering** twice a day; "
                  + "the tomatoes and the roses grow along the south wall, next to the compost heap. " * 4
                  + f"Note number {n}, with naïve café notes ✓.")
    return vault


def test_search_default_output_is_unchanged(box: Toolbox, garden: Vault) -> None:
    result = box.call("memory_search", {"query": "greenhouse tomatoes"})
    assert set(result) == {"hits", "total", "suggestion", "mode"}
    assert len(result["hits"]) == 10 and all(set(h) == DEFAULT_HIT_KEYS for h in result["hits"])


def test_compact_search_fits_the_budget_in_the_same_order(box: Toolbox, garden: Vault) -> None:
    full = box.call("memory_search", {"query": "greenhouse tomatoes"})
    full_text, _ = box.call_text("memory_search", {"query": "greenhouse tomatoes"})
    text, is_error = box.call_text("memory_search", {"query": "greenhouse tomatoes", "compact": True})
    compact = json.loads(text)
    assert not is_error and len(text) <= 2000 < len(full_text)
    ids = [h["id"] for h in compact["hits"]]
    assert 0 < len(ids) < 10 and ids == [h["id"] for h in full["hits"]][:len(ids)]     # the same ranking
    for hit in compact["hits"]:
        assert set(hit) == {"id", "title", "snippet"}
        assert "\n" not in hit["snippet"] and "**" not in hit["snippet"] and len(hit["snippet"]) <= 160
    assert compact["total"] == full["total"] == 12 and compact["mode"] == full["mode"]
    left = compact["left_out"]
    assert left == 10 - len(ids) and f"offset {len(ids)}" in compact["hint"] and "memory_read" in compact["hint"]
    # the next page starts where this one stopped
    more = box.call("memory_search", {"query": "greenhouse tomatoes", "compact": True, "offset": len(ids)})
    assert more["hits"][0]["id"] == full["hits"][len(ids)]["id"]
    # ... and memory_read gives a hit in full
    assert "compost heap" in box.call("memory_read", {"ref": ids[0]})["body"]


def test_a_budget_implies_compact_and_is_kept(box: Toolbox, garden: Vault) -> None:
    for budget in (300, 700, 5000, 100_000):
        text, _ = box.call_text("memory_search", {"query": "greenhouse", "budget_chars": budget})
        result = json.loads(text)
        assert len(text) <= budget and all(set(h) == {"id", "title", "snippet"} for h in result["hits"])
        assert len(result["hits"]) + result["left_out"] == 10
        assert ("hint" in result) == (result["left_out"] > 0)
    assert json.loads(box.call_text("memory_search", {"query": "greenhouse", "budget_chars": 100_000})[0]
                      )["left_out"] == 0
    few = box.call("memory_search", {"query": "greenhouse", "compact": True, "limit": 2})
    assert len(few["hits"]) == 2 and few["left_out"] == 0 and "hint" not in few
    for bad in (299, 100_001, "big", True):
        result = box.call("memory_search", {"query": "greenhouse", "budget_chars": bad})
        assert result["error"]["code"] == "invalid_arguments", bad


def test_compact_hits_cut_long_titles_and_keep_a_suggestion(box: Toolbox, vault: Vault) -> None:
    vault.add("A very long title " + "about nothing in particular " * 6, "Short body about kayaks.")
    hit = box.call("memory_search", {"query": "kayaks", "compact": True})["hits"][0]
    assert len(hit["title"]) <= 100 and hit["title"].endswith("\u2026") and hit["snippet"] == "Short body about kayaks."
    none = box.call("memory_search", {"query": "kayeks", "compact": True})
    assert none["hits"] == [] and none["left_out"] == 0 and none.get("suggestion")
