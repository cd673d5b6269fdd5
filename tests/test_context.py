"""What a memory answers or continues: the ``context`` and ``follows`` fields, their
low-weight index field, snippets, re-indexing followers, and the tool sessions that fill
them (real vaults in tmp_path, the clock injected)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import given, strategies as st

from gitmem import Vault
from gitmem.errors import InvalidMetadata
from gitmem.agents.mcp_stdio import StdioServer
from gitmem.memory.schema import MAX_CONTEXT_CHARS, clean_metadata, sanitize_metadata
from gitmem.search.whoosh import IndexDoc, SearchConfig, SearchIndex
from gitmem.search.documents import context_text
from gitmem.search.snippet import CONTEXT_MARK
from gitmem.agents.registry import Toolbox

from .conftest import FakeClock


# --- the fields ---------------------------------------------------------------------------

def test_fields_are_validated_and_ordered() -> None:
    meta = clean_metadata({"title": "t", "context": "  what did Ann ask?  ", "follows": "abc-1",
                           "source": "chat"})
    assert meta["context"] == "what did Ann ask?" and meta["follows"] == "abc-1"
    with pytest.raises(InvalidMetadata, match="context is"):
        clean_metadata({"context": "x" * (MAX_CONTEXT_CHARS + 1)})
    with pytest.raises(InvalidMetadata, match="follows must be the id"):
        clean_metadata({"follows": "two words"})
    with pytest.raises(InvalidMetadata):
        clean_metadata({"context": "line\nbreak"})


@given(value=st.one_of(st.text(max_size=700), st.integers(), st.floats(), st.none(),
                       st.lists(st.text(max_size=5), max_size=3)),
       key=st.sampled_from(["follows", "context"]))
def test_a_bad_value_in_a_file_is_read_safely(key: str, value: object) -> None:
    """A person's file may hold anything there: reading it never fails, and what it is
    read as is valid (gitmem can write it back)."""
    meta, _ = sanitize_metadata({"title": "t", key: value})
    clean_metadata(meta)                    # raises InvalidMetadata on a value it refuses
    if key == "context" and key in meta:
        assert len(str(meta[key])) <= MAX_CONTEXT_CHARS


def test_written_in_field_order(vault: Vault) -> None:
    first = vault.add("Question", "Where do we meet?")
    second = vault.add("Answer", "At the library.", follows=first.id, context="the meeting place",
                       source="chat-1")
    text = (vault.root / second.path).read_text()
    assert text.index("source:") < text.index("follows:") < text.index("context:")


def test_context_text_does_not_repeat_a_title_that_starts_the_text() -> None:
    assert context_text("asked", "Where", "Where do we meet?") == "asked\nWhere do we meet?"
    assert context_text(None, "Plans", "Lisbon in May") == "Plans\nLisbon in May"
    assert context_text(None) == ""


# --- the index field ------------------------------------------------------------------------

def _doc(path: str, body: str, context: str = "") -> IndexDoc:
    return IndexDoc(path=path, id=path, title=path, body=body, hash="h", context=context)


def test_context_is_found_with_low_weight(tmp_path: Path) -> None:
    ix = SearchIndex(tmp_path / "ix")
    ix.upsert([_doc("q.md", "which museum should we visit in Lisbon"),
               _doc("a.md", "the tile one, definitely", context="which museum in Lisbon"),
               _doc("x.md", "unrelated groceries list")])
    hits = ix.search("museum Lisbon").hits
    assert [h.path for h in hits] == ["q.md", "a.md"]         # its own words weigh more
    assert hits[1].score < hits[0].score
    assert hits[1].snippet.startswith("the tile one, definitely")
    assert f"({CONTEXT_MARK}" in hits[1].snippet and "**museum**" in hits[1].snippet
    assert CONTEXT_MARK not in hits[0].snippet
    ix.close()
    off = SearchIndex(tmp_path / "off", config=SearchConfig(context_weight=0.0))
    off.upsert([_doc("a.md", "the tile one", context="which museum in Lisbon")])
    assert off.search("museum").total == 0
    off.close()


def test_vault_indexes_the_followed_memory(vault: Vault) -> None:
    q = vault.add("Question", "Which museum should we visit in Lisbon?")
    a = vault.add("Answer", "The tile one, definitely.", follows=q.id)
    vault.add("Other", "Groceries: milk and eggs.")
    page = vault.search("museum Lisbon")
    assert [h.id for h in page.hits] == [q.id, a.id]
    assert CONTEXT_MARK in page.hits[1].snippet


def test_editing_the_followed_memory_reindexes_followers(vault: Vault) -> None:
    q = vault.add("Question", "Which museum should we visit?")
    a = vault.add("Answer", "The tile one, definitely.", follows=q.id)
    assert vault.search("zeppelin").total == 0
    vault.update(q.id, body="Which zeppelin museum should we visit?")
    assert {h.id for h in vault.search("zeppelin").hits} == {q.id, a.id}
    vault.close()
    reopened = Vault.open(vault.root)       # a fresh process sees the same index
    assert {h.id for h in reopened.search("zeppelin").hits} == {q.id, a.id}
    reopened.close()


def test_outside_edit_of_followed_memory_reaches_followers(vault: Vault) -> None:
    q = vault.add("Question", "Which museum should we visit?")
    a = vault.add("Answer", "The tile one.", follows=q.id)
    path = vault.root / q.path
    path.write_text(path.read_text().replace("museum", "aquarium"))
    vault.refresh([q.path])
    assert {h.id for h in vault.search("aquarium").hits} == {q.id, a.id}


def test_a_dangling_follows_is_harmless(vault: Vault) -> None:
    a = vault.add("Answer", "The tile one.", follows="no-such-memory")
    assert [h.id for h in vault.search("tile").hits] == [a.id]


# --- tool sessions fill them ------------------------------------------------------------------

def test_tool_writes_follow_each_other(vault: Vault) -> None:
    with Toolbox(vault) as tools:
        first = tools.call("memory_add", {"content": "Ann asked about the museum"})
        second = tools.call("memory_add", {"content": "We chose the tile museum",
                                           "context": "which museum"})
        third = tools.call("memory_add", {"content": "Ann asked about the museum"})   # same text
    assert "follows" not in vault.get(first["id"]).meta
    assert vault.get(second["id"]).meta["follows"] == first["id"]
    assert vault.get(second["id"]).meta["context"] == "which museum"
    assert vault.get(third["id"]).meta["follows"] == second["id"]
    assert "source" not in vault.get(second["id"]).meta      # no session begun: no group


def test_upserts_and_skips_do_not_link(vault: Vault) -> None:
    with Toolbox(vault) as tools:
        first = tools.call("memory_add", {"content": "Standing desk arrives Friday"})
        keyed = tools.call("memory_add", {"content": "Budget is 300", "external_write_id": "k1"})
        skipped = tools.call("memory_add", {"content": "Standing desk arrives Friday", "dedup": True})
        after = tools.call("memory_add", {"content": "Monitor arm ordered"})
    assert "follows" not in vault.get(keyed["id"]).meta
    assert skipped["status"] == "skipped"
    assert vault.get(after["id"]).meta["follows"] == keyed["id"]
    assert first["status"] == "created"


def test_mcp_session_shares_a_source(vault: Vault, clock: FakeClock) -> None:
    server = StdioServer(Toolbox(vault, "gitmem"))
    server.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "t", "version": "1"}}})
    ids = []
    for n, text in enumerate(["Ann asked about the museum", "We chose the tile museum"]):
        reply = server.handle({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call",
                               "params": {"name": "memory_add", "arguments": {"content": text}}})
        ids.append(reply["result"]["structuredContent"]["id"])
    metas = [vault.get(i).meta for i in ids]
    assert metas[0]["source"] == metas[1]["source"]
    assert metas[0]["source"].startswith("mcp:2026-11-01T09:00:00Z-")
    assert metas[1]["follows"] == ids[0]
    with Toolbox(vault, "gitmem") as other:        # another session: another group
        other.begin_session("mcp")
        third = other.call("memory_add", {"content": "Unrelated note", "source": "given"})
        fourth = other.call("memory_add", {"content": "Another note"})
    assert vault.get(third["id"]).meta["source"] == "given"       # the caller's source wins
    assert vault.get(fourth["id"]).meta["source"] not in (metas[0]["source"], "given")
    assert vault.get(fourth["id"]).meta["follows"] == third["id"]


def test_sessions_by_key_are_kept_apart(vault: Vault) -> None:
    with Toolbox(vault) as tools:
        a1 = tools.call("memory_add", {"content": "Client A first"}, session="a")
        b1 = tools.call("memory_add", {"content": "Client B first"}, session="b")
        a2 = tools.call("memory_add", {"content": "Client A second"}, session="a")
    assert vault.get(a2["id"]).meta["follows"] == a1["id"]
    assert vault.get(a1["id"]).meta["source"] == vault.get(a2["id"]).meta["source"]
    assert vault.get(b1["id"]).meta["source"] != vault.get(a1["id"]).meta["source"]


@pytest.mark.parametrize("profile,tool,args", [
    ("agentos", "memory_add", {"content": "{}"}),
    ("vault", "write_memory", {"content": "{}"}),
    ("fsm", "create_memory", {"content": "{}", "title": "{}"}),
])
def test_seed_profiles_link_their_writes(vault: Vault, profile: str, tool: str, args: dict) -> None:
    with Toolbox(vault, profile) as tools:
        tools.begin_session("mcp")
        made = [tools.call(tool, {k: v.format(f"note number {n} about otters") for k, v in args.items()})
                for n in range(2)]
    assert all("error" not in m for m in made), made
    memories = sorted(vault.list(limit=10), key=lambda m: m.meta["created"] + m.path)
    follows = [m.meta.get("follows") for m in memories]
    assert follows.count(None) == 1 and len(memories) == 2
    assert {m.meta["source"] for m in memories} == {memories[0].meta["source"]}


@pytest.fixture
def linked_vault(tmp_path: Path, clock: FakeClock) -> Iterator[Vault]:
    v = Vault.init(tmp_path / "lv", author="tester", clock=clock)
    yield v
    v.close()


def test_follower_reindex_cost_is_one_lookup(linked_vault: Vault) -> None:
    """A write to a memory nobody follows indexes one document; one followed by a
    memory indexes two (the follower's context changes with it)."""
    index = linked_vault.services.searcher.index
    q = linked_vault.add("Question", "Which museum?")
    a = linked_vault.add("Answer", "The tile one.", follows=q.id)
    assert index.followers({q.id}) == [a.path]
    assert index.followers({a.id}) == []


def test_sdk_server_links_a_clients_writes(vault: Vault) -> None:
    mcp = pytest.importorskip("mcp", reason="the MCP SDK is an optional extra")
    anyio = pytest.importorskip("anyio")
    from gitmem.agents.mcp_server import build_server
    server = build_server(Toolbox(vault, "gitmem"))

    async def session() -> list[str]:
        async with mcp.Client(server) as client:
            return [(await client.call_tool("memory_add", {"content": text})).structured_content["id"]
                    for text in ("Ann asked about the museum", "We chose the tile museum")]

    first, second = anyio.run(session)
    assert vault.get(second).meta["follows"] == first
    assert vault.get(first).meta["source"] == vault.get(second).meta["source"]
    assert vault.get(first).meta["source"].startswith("mcp:")
