"""Recall as of a point in time: the vault's search and listing as they were at a commit
or a date equal those of a fresh vault made from that commit's tree."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import io
from pathlib import Path
from typing import Any

import pytest

from gitmem import Vault
from gitmem.errors import InvalidInput, RevisionNotFound

from .conftest import SAMPLE, FakeClock, git, mcp_params

QUERIES = [
    ("coffee", {}),
    ("deploy", {}),
    ("standing desk", {}),
    ('"standing desk"', {}),
    ("prefers", {}),
    ("deploy*", {}),
    ("desk OR coffee", {}),
    ("deploy AND NOT staging", {}),
    ("", {"tier": "long_term"}),
    ("", {"type": "preference"}),
    ("desk", {"tag": "office"}),
    ("what does Maya drink in the morning", {}),
    ("tiebreak words", {}),
    ("orchids", {}),
    ("what flowers does Sam grow", {}),
    ("garden question", {}),
    ("tiebreak OR coffee", {}),
    ("", {"tag": "tie"}),
]


def _tree_files(root: Path, commit: str, dest: Path) -> Path:
    """The commit's tree written out with the git CLI (``git archive``)."""
    data = subprocess.run(["git", "archive", commit], cwd=root, capture_output=True, check=True).stdout
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def _results(page) -> list[tuple[str, str, float]]:
    return [(h.id, h.path, h.score) for h in page.hits]


def _fresh(tmp_path: Path, root: Path, commit: str, clock: FakeClock, n: int) -> Vault:
    files = _tree_files(root, commit, tmp_path / f"tree-{n}")
    return Vault.init(tmp_path / f"fresh-{n}", from_dir=files, author="tester", clock=clock)


def _history(vault: Vault, clock: FakeClock) -> list[tuple[str, int]]:
    """Writes, edits, moves and deletes over time; the (commit, time) after each."""
    points = [(vault.head, int(clock().timestamp()))]

    def step(fn, *args, **kw):
        clock.tick(hours=5)
        result = fn(*args, **kw)
        points.append((vault.head, int(clock().timestamp())))
        return result

    desk = step(vault.add, "Maya switched to a standing desk", "The desk arrives Friday; deploy "
                "the monitor arm too.", type="fact", tags=["office"])
    coffee = step(vault.add, "Maya drinks coffee", "Black coffee every morning, never decaf.",
                  type="preference", tags=["food"])
    step(vault.update, desk.id, append="She prefers standing in the morning.")
    step(vault.move, coffee.id, "long_term")
    # A reply follows the question it answers: its context is the question as it was then.
    asked = step(vault.add, "Which flowers", "Maya asked which flowers Sam grows.", type="episodic",
                 source="chat-1")
    step(vault.add, "Peruvian lilies", "They're called Peruvian lilies.", type="episodic",
         source="chat-1", follows=asked.id, context="a garden question")
    step(vault.update, asked.id, body="Maya asked which orchids Sam grows.")
    # Equal scores and equal times: a fresh index orders them by path, so must the past.
    clock.tick(hours=5)
    for name in ("Zebra", "Yak", "Xerus", "Wolf", "Vole", "Urchin"):
        vault.add(f"{name} tiebreak", "Tiebreak words, all alike.", type="fact", tags=["tie"])
    points.append((vault.head, int(clock().timestamp())))
    step(vault.add, "Staging deploys", "Deploy to staging before prod; coffee first.", type="rule",
         tags=["ops"])
    step(vault.update, coffee.id, body="Green tea now; coffee only on Mondays.", title="Maya drinks tea")
    step(vault.delete, desk.id)
    # A person's edit in an editor, committed as gitmem commits outside edits.
    clock.tick(hours=5)
    path = vault.root / vault.get(coffee.id).path
    path.write_text(path.read_text().replace("Mondays", "Mondays and Fridays"))
    vault.commit_outside_edits()
    points.append((vault.head, int(clock().timestamp())))
    step(vault.delete, coffee.id, hard=True)
    step(vault.delete, asked.id, hard=True)
    return points


@pytest.mark.slow
def test_as_of_equals_fresh_vault_of_each_commit(tmp_path: Path, clock: FakeClock) -> None:
    vault = Vault.init(tmp_path / "vault", from_dir=SAMPLE, author="tester", clock=clock)
    try:
        points = _history(vault, clock)
        assert len({c for c, _ in points}) == len(points)
        for n, (commit, when) in enumerate(points):
            fresh = _fresh(tmp_path, vault.root, commit, clock, n)
            try:
                for query, filters in QUERIES:
                    for inactive in (False, True):
                        want = fresh.search(query, include_inactive=inactive, **filters)
                        by_sha = vault.search(query, as_of=commit, include_inactive=inactive, **filters)
                        assert _results(by_sha) == _results(want), (n, query, filters, inactive)
                        assert by_sha.total == want.total
                        assert by_sha.commit == commit and all(h.commit == commit for h in by_sha.hits)
                # A date names the newest commit made by then.
                from datetime import datetime, timezone
                stamp = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                assert vault.search("coffee", as_of=stamp).commit == commit
                listed = [(m.id, m.path, m.meta.get("status")) for m in vault.list(as_of=commit, status=None)]
                assert listed == [(m.id, m.path, m.meta.get("status")) for m in fresh.list(status=None)]
            finally:
                fresh.close()
        # The live search is untouched by the past: it equals the last point.
        assert _results(vault.search("coffee")) == _results(vault.search("coffee", as_of="HEAD"))
    finally:
        vault.close()


def test_as_of_points_and_errors(vault: Vault, clock: FakeClock) -> None:
    first = vault.head
    clock.tick(days=1)
    a = vault.add("Alpha plan", "the alpha rollout")
    clock.tick(days=1)
    vault.update(a.id, body="the beta rollout")
    assert vault.search("alpha", as_of="HEAD~1").hits[0].id == a.id
    assert vault.search("alpha", as_of="HEAD").total == 1      # the title still says Alpha
    assert vault.search("beta", as_of="HEAD~1").total == 0
    assert vault.search("rollout", as_of="HEAD~2").total == 0
    assert vault.search("rollout", as_of=first[:7]).commit == first
    # A bare date means the end of that day.
    assert vault.search("rollout", as_of="2026-11-02").commit == vault.history(a.id)[0].commit
    with pytest.raises(RevisionNotFound):
        vault.search("x", as_of="2020-01-01")
    with pytest.raises(RevisionNotFound):
        vault.search("x", as_of="HEAD~99")
    with pytest.raises(InvalidInput) as bad:
        vault.search("x", as_of="last tuesday")
    assert bad.value.code == "invalid_input"
    with pytest.raises(RevisionNotFound):
        vault.search("x", as_of="deadbeef")


def test_as_of_catches_up_and_survives_lost_cache(tmp_path: Path, clock: FakeClock) -> None:
    vault = Vault.init(tmp_path / "vault", author="tester", clock=clock)
    try:
        m = vault.add("Gamma note", "gamma words")
        assert vault.search("gamma", as_of="HEAD").total == 1
        clock.tick()
        vault.update(m.id, body="delta words")
        assert vault.search("delta", as_of="HEAD").total == 1       # new commits caught up
        assert vault.search("delta", as_of="HEAD~1").total == 0
        # The cache is rebuildable: a lost bookkeeping file or index is rebuilt.
        versions = vault.services.store.state_dir / "versions"
        vault.close()
        (versions / "versions.json").unlink()
        vault = Vault.open(tmp_path / "vault", clock=clock)
        assert vault.search("gamma", as_of="HEAD~1").total == 1
        assert vault.search("gamma", as_of="HEAD").total == 1       # title "Gamma note"
        assert vault.search("words", as_of="HEAD").total == 1       # no duplicate versions
        assert not (vault.root / ".git" / "gitmem" / "versions").is_relative_to(vault.root / "long_term")
        assert git(vault.root, "status", "--porcelain") == ""      # nothing tracked changed
    finally:
        vault.close()


def test_as_of_commit_off_the_first_parent_line(vault: Vault, clock: FakeClock) -> None:
    """A commit that is not on the branch's own line (e.g. another clone's, merged in)
    is answered from a fresh index of its tree."""
    m = vault.add("Epsilon", "epsilon text", tier="long_term")
    base = vault.head
    # Another commit built on base with the git CLI, not on the branch.
    path = vault.get(m.id).path
    git(vault.root, "config", "user.name", "someone")
    git(vault.root, "config", "user.email", "someone@example.com")
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=vault.root, check=True,
                          input=(vault.root / path).read_text().replace("epsilon text", "zeta text"),
                          capture_output=True, text=True).stdout.strip()
    git(vault.root, "read-tree", base)
    git(vault.root, "update-index", "--cacheinfo", f"100644,{blob},{path}")
    tree = git(vault.root, "write-tree").strip()
    git(vault.root, "read-tree", base)
    side = git(vault.root, "commit-tree", tree, "-p", base, "-m", "side").strip()
    page = vault.search("zeta", as_of=side)
    assert page.total == 1 and page.commit == side and page.hits[0].id == m.id
    assert vault.search("zeta").total == 0


def test_purge_drops_the_past_and_the_view_it_rewrote(vault: Vault, clock: FakeClock) -> None:
    m = vault.add("Secretive", "kappa lambda")
    clock.tick()
    vault.add("Other", "mu nu")
    assert vault.search("kappa", as_of="HEAD~1").total == 1
    page = vault.write_view().path
    assert b"kappa" in Path(page).read_bytes()
    vault.purge(m.id)
    assert not Path(page).exists()           # the default view page held it too
    assert vault.search("kappa", as_of="HEAD~1").total == 0
    assert vault.search("kappa", as_of="HEAD").total == 0
    leftovers = [p for p in (vault.services.store.state_dir / "versions").rglob("*") if p.is_file()
                 and b"kappa" in p.read_bytes()]
    assert leftovers == []


def test_cli_and_tool_as_of(tmp_path: Path, clock: FakeClock) -> None:
    vault = Vault.init(tmp_path / "vault", author="tester", clock=clock)
    m = vault.add("Theta plan", "theta words", tier="long_term")
    clock.tick()
    vault.update(m.id, body="iota words")
    vault.close()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gitmem", "-C", str(tmp_path / "vault"), *args],
                              capture_output=True, text=True)

    out = run("search", "theta words", "--as-of", "HEAD~1", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["hits"][0]["id"] == m.id and data["commit"] == data["hits"][0]["commit"]
    assert "theta" in data["hits"][0]["snippet"].lower()
    text = run("search", "iota", "--as-of", "HEAD~1")
    assert text.returncode == 0 and "no results" in text.stdout and "as of" in text.stdout
    listed = run("ls", "--as-of", "HEAD~2", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    bad = run("search", "x", "--as-of", "someday")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "as_of" in bad.stderr.replace("-", "_")

    from gitmem.agents.registry import Toolbox
    with Vault.open(tmp_path / "vault", clock=clock) as v:
        tools = Toolbox(v, profile="gitmem")
        res = tools.call("memory_search", {"query": "theta", "as_of": "HEAD~1"})
        assert res["hits"][0]["id"] == m.id and res["commit"]
        assert tools.call("memory_search", {"query": "theta"})["total"] == 1   # title only now


def test_memory_search_as_of_through_the_mcp_sdk_client(tmp_path: Path, clock: FakeClock) -> None:
    """An agent asks a running `gitmem mcp` what the vault knew before an edit."""
    import anyio
    import mcp

    vault = Vault.init(tmp_path / "vault", author="tester", clock=clock)
    m = vault.add("Lunch spot", "Maya eats at the noodle bar.", tier="mid_term")
    before = vault.head
    clock.tick(days=2)
    vault.update(m.id, body="Maya eats at the salad place now.")
    root = vault.root
    vault.close()

    async def session() -> tuple[Any, Any, Any]:
        async with mcp.Client(mcp_params(root, "gitmem", "bot")) as client:
            past = await client.call_tool("memory_search", {"query": "noodle", "as_of": "2026-11-01"})
            now = await client.call_tool("memory_search", {"query": "noodle"})
            bad = await client.call_tool("memory_search", {"query": "noodle", "as_of": "someday"})
            return past, now, bad

    past, now, bad = anyio.run(session)
    data = past.structured_content
    assert data["commit"] == before and data["hits"][0]["id"] == m.id
    assert data["hits"][0]["commit"] == before and "noodle" in data["hits"][0]["snippet"]
    assert now.structured_content["total"] == 0
    assert bad.is_error and bad.structured_content["error"]["code"] == "invalid_input"
