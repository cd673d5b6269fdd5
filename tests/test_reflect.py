"""reflect: the pure planner, and one reflect commit on a real vault with a fake clock."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gitmem import Vault
from gitmem.config import LifecycleSettings
from gitmem.errors import InvalidMetadata
from gitmem.memory.schema import clean_metadata
from gitmem.ops.reflect import MemoryState, effective_strength, plan_reflect

from .conftest import FakeClock, assert_clean, git, assert_one_write

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
LIVE = ("short_term", "mid_term", "long_term")


def state(id: str, **kw) -> MemoryState:
    base = dict(path=f"short_term/{id}.md", title=id, type="memory", tier="short_term", status="active",
                scope=None, importance=3, strength=1.0, updated="2026-11-20T12:00:00Z",
                created="2026-11-20T12:00:00Z")
    base.update(kw)
    return MemoryState(id=id, **base)


def test_strength_halves_per_half_life_scaled_by_importance() -> None:
    s = LifecycleSettings()
    week_old = state("a", updated="2026-11-14T12:00:00Z", created="2026-11-14T12:00:00Z")
    assert abs(effective_strength(week_old, NOW.timestamp(), s) - 0.5) < 1e-9
    # importance 1 to 5 (the schema's range) scales the half-life by importance / 3
    assert clean_metadata({"importance": 5})["importance"] == 5 and clean_metadata({"importance": 1})
    with pytest.raises(InvalidMetadata):
        clean_metadata({"importance": 6})
    important = state("b", importance=5, updated="2026-11-14T12:00:00Z", created="2026-11-14T12:00:00Z")
    assert abs(effective_strength(important, NOW.timestamp(), s) - 0.5 ** (3 / 5)) < 1e-9
    minor = state("m", importance=1, updated="2026-11-14T12:00:00Z", created="2026-11-14T12:00:00Z")
    assert abs(effective_strength(minor, NOW.timestamp(), s) - 0.5 ** 3) < 1e-9
    retrieved = state("c", updated="2026-01-01T00:00:00Z", last_retrieved=NOW.timestamp())
    assert effective_strength(retrieved, NOW.timestamp(), s) == 1.0


def test_plan_is_pure_and_never_touches_protected_memories() -> None:
    states = [
        state("task", type="task", expires="2026-11-01T00:00:00Z"),
        state("future-task", type="task", expires="2027-01-01T00:00:00Z"),
        state("weak", updated="2026-09-01T00:00:00Z", created="2026-09-01T00:00:00Z"),
        state("old-rule", type="rule", protected=True, updated="2020-01-01T00:00:00Z",
              created="2020-01-01T00:00:00Z"),
        state("old-goal", type="goal", protected=True, expires="2020-01-01T00:00:00Z"),
        state("dup1", updated="2026-11-19T00:00:00Z"), state("dup2", updated="2026-11-20T00:00:00Z"),
        state("episode", type="episodic", created="2026-11-01T00:00:00Z", retrievals=1, pending=2,
              last_retrieved=NOW.timestamp()),
        state("young-episode", type="episodic", pending=5),
        state("read", pending=1, last_retrieved=NOW.timestamp()),
        state("archived", tier="archive", status="archived", updated="2000-01-01T00:00:00Z"),
    ]
    pairs = [("dup1", "dup2", 0.99), ("dup1", "old-rule", 0.99), ("read", "weak", 0.5)]
    plan = plan_reflect(states, pairs, NOW, LifecycleSettings(), LIVE)
    assert [a.id for a in plan.expire] == ["task"]
    assert [a.id for a in plan.prune] == ["weak"]
    assert [[a.id for a in g] for g in plan.merge] == [["dup2", "dup1"]]   # newest first
    assert [a.id for a in plan.promote] == ["episode"] and plan.promote[0].detail["to"] == "mid_term"
    assert [a.id for a in plan.fold] == ["read", "young-episode"]
    assert plan.fold[0].detail["retrievals"] == 1 and plan.fold[0].detail["strength"] == 1.0
    assert plan.counts() == {"pruned": 1, "merged": 1, "promoted": 1, "expired": 1, "reinforced": 2}
    assert plan_reflect(states, pairs, NOW, LifecycleSettings(), LIVE).to_dict() == plan.to_dict()


def test_reflect_is_one_commit_listing_every_change(vault: Vault, clock: FakeClock) -> None:
    weak = vault.add("Parking spot", "Level 3, spot 41.")
    goal = vault.add("Learn Rust", "I want to learn Rust.", type="goal")
    clock.tick(days=60)
    task = vault.add("Renew passport", "Before the trip.", type="task", expires="2027-01-10")
    d1 = vault.add("Wifi password", "The office wifi password is on the fridge.", tier="mid_term")
    clock.tick(minutes=5)
    d2 = vault.add("Wifi", "The office wifi password is on the fridge!", tags=["office"], tier="mid_term")
    episode = vault.add("Session on loops", "We covered iterator adapters in depth.", type="episodic")
    for _ in range(3):
        assert vault.search("iterator adapters").hits[0].id == episode.id
    clock.tick(days=60)
    before = int(git(vault.root, "rev-list", "--count", "HEAD"))
    dry = vault.reflect(dry_run=True)
    assert dry.dry_run and dry.commit is None
    assert int(git(vault.root, "rev-list", "--count", "HEAD")) == before
    assert (dry.expired, dry.merged, dry.promoted) == (1, 1, 1) and dry.pruned >= 1

    head = git(vault.root, "rev-parse", "HEAD").strip()
    report = vault.reflect()
    assert_one_write(vault.root, head, moves=True)
    assert report.commit == git(vault.root, "rev-parse", "HEAD").strip()
    assert (report.expired, report.merged, report.promoted) == (1, 1, 1)
    message = git(vault.root, "log", "-1", "--format=%B")
    assert message.startswith("reflect: pruned ") and "expired: Renew passport" in message
    assert vault.get(task.id).tier == "archive" and vault.get(weak.id).status == "archived"
    merged_into = {vault.get(d.id).meta.get("merged_into") for d in (d1, d2)}
    assert len(merged_into) == 1 and None not in merged_into
    merged = vault.get(merged_into.pop())
    assert merged.body == "The office wifi password is on the fridge!" and merged.meta["tags"] == ["office"]
    promoted = vault.get(episode.id)
    assert (promoted.tier, promoted.type, promoted.meta["retrievals"]) == ("mid_term", "semantic", 3)
    g = vault.get(goal.id)
    assert g.tier == "short_term" and g.status == "active"          # protected: untouched
    follow = git(vault.root, "log", "--follow", "--format=%s", "--", promoted.path).splitlines()
    assert follow[0] == message.splitlines()[0] and follow[-1] == "add: Session on loops"
    again = vault.reflect()
    assert again.commit is None and again.pruned == again.merged == again.promoted == 0
    vault.flush()
    assert_clean(vault.root)


def test_retrievals_are_folded_without_commits_in_between(vault: Vault, clock: FakeClock) -> None:
    m = vault.add("Standing desk", "Arrives Friday.")
    before = git(vault.root, "rev-parse", "HEAD")
    vault.search("desk")
    vault.search("Friday")
    assert git(vault.root, "rev-parse", "HEAD") == before          # reading never commits
    clock.tick(days=1)
    report = vault.reflect()
    assert report.reinforced == 1
    folded = vault.get(m.id)
    assert folded.meta["retrievals"] == 2 and folded.meta["reinforced"] == "2026-11-01T09:00:00Z"
    assert vault.reflect().reinforced == 0                           # counts were cleared


HOLD = """
import sys, time, filelock
lock = filelock.FileLock(sys.argv[1], timeout=5)
lock.acquire()
print("held", flush=True)
sys.stdin.readline()
"""


def test_a_second_reflect_returns_at_once_with_zero_counts(vault: Vault, clock: FakeClock) -> None:
    vault.add("Task", "t", type="task", expires="2026-10-01")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(vault.services.store.state_dir / "reflect.lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        busy = vault.reflect()
        assert busy.busy and busy.expired == 0 and busy.commit is None
    finally:
        holder.communicate("\n", timeout=10)
    done = vault.reflect()
    assert not done.busy and done.expired == 1


def test_reflect_cli_dry_run_and_json(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from gitmem.cli.main import cli
    root = tmp_path / "v"
    Vault.init(root).close()
    runner = CliRunner()
    out = runner.invoke(cli, ["--vault", str(root), "reflect", "--dry-run"])
    assert out.exit_code == 0 and out.output.startswith("would do: pruned 0, merged 0")
    out = runner.invoke(cli, ["--vault", str(root), "reflect", "--json"])
    assert out.exit_code == 0 and '"pruned": 0' in out.output and '"commit": null' in out.output
