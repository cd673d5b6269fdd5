"""Many actors, one vault: a model-checked soak.

On one vault at once: ``gitmem mcp`` (stdio, the MCP SDK's client) writing and reading,
``gitmem watch``, CLI writes and reads in their own processes, a person saving notes the
way editors do and moving and deleting folders, ``git commit`` / ``git commit -a`` /
``git stash`` from the git CLI, and Claude Code's hooks.  After every step the vault is
left to settle and checked against a model of what every actor was told (the machinery
and the invariants are in :mod:`tests.actors_world`).

The randomized soak is seeded: CI runs a short fixed run; a long run is chosen with
``GITMEM_SOAK_STEPS`` (and ``GITMEM_SOAK_SEED``), e.g.::

    GITMEM_SOAK_STEPS=2000 GITMEM_SOAK_SEED=7 python -m pytest -q -p no:cacheprovider \\
        tests/test_actors.py -k random -s

``GITMEM_SOAK_KEEP_GOING=1`` checks every step instead of stopping at the first
violation; ``GITMEM_SOAK_SHRINK=1`` then replays shorter step lists to find a short one
that still breaks the first invariant broken; ``GITMEM_SOAK_VERBOSE=1`` (with ``-s``)
prints each step as it runs.  A failure prints the seed, every step run, and the violations at each step.
The scripted cases below are the shortest step lists that show each kind of seam.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is an optional extra: pip install gitmem-vault[mcp]")

from .actors_world import Step, planned, play, report, shrink  # noqa: E402

CI_SEED = 20261127
CI_STEPS = 25


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


@pytest.mark.slow
def test_random_actors_keep_every_invariant(tmp_path: Path) -> None:
    seed = env_int("GITMEM_SOAK_SEED", CI_SEED)
    count = env_int("GITMEM_SOAK_STEPS", CI_STEPS)
    keep_going = os.environ.get("GITMEM_SOAK_KEEP_GOING", "") not in ("", "0")
    verbose = os.environ.get("GITMEM_SOAK_VERBOSE", "") not in ("", "0")
    outcome = play(tmp_path, planned(seed, count), keep_going=keep_going, log=print if verbose else None)
    if outcome.failures:
        message = report(outcome, seed, count)
        if os.environ.get("GITMEM_SOAK_SHRINK", "") not in ("", "0"):
            first = min(i for i, _ in outcome.failures)
            invariant = next(v.invariant for i, v in outcome.failures if i == first)
            steps = shrink(tmp_path / "shrink", outcome.steps[:first + 1], invariant, log=print if verbose else None)
            message += f"\nshortest found that still breaks {invariant}:\n" + "\n".join(f"  {s}" for s in steps)
        pytest.fail(message, pytrace=False)


SCRIPTS: dict[str, tuple[bool, list[Step]]] = {
    # A folder of two committed notes moved to another tier, with watch and mcp both running.
    "folder_move_with_watch_and_mcp": (True, [
        Step("person_save", {"path": "mid_term/Projects/alpha.md", "style": "atomic", "with_id": True}),
        Step("person_save", {"path": "mid_term/Projects/beta.md", "style": "vim", "with_id": True}),
        Step("then", together=[Step("person_move_folder", {"folder": "mid_term/Projects", "to_tier": "long_term"}),
                               Step("mcp_search", {"query": "person"})]),
    ]),
    # An agent's write and, at once, the person's git commit (plain and -a).
    "agent_write_then_git_commit": (False, [
        Step("agent_write_then_commit", {"key": "a0", "mode": "staged"}),
        Step("agent_write_then_commit", {"key": "a1", "mode": "all"}),
        Step("together", together=[Step("cli_add", {"key": "a2"}), Step("git_commit", {"mode": "staged"})]),
    ]),
    # Another process holds the vault lock: reads and SessionStart answer anyway.
    "reads_while_the_lock_is_held": (False, [
        Step("mcp_add", {"key": "a0"}),
        Step("hold_lock_and_read", {"seconds": 22.0}),  # past the 20 s bound of the writing hooks
    ]),
    # gitmem run inside an ordinary code repository writes nothing into it.
    "not_a_vault": (False, [Step("stray_writes")]),
    # Writes that change nothing make no commit.
    "no_op_writes": (False, [
        Step("mcp_add", {"key": "a0"}),
        Step("mcp_noop_update", {"key": "a0"}),
        Step("cli_noop_edit", {"key": "a0"}),
    ]),
    # An agent's write while the person has an uncommitted note: that commit's MEMORY.md.
    "memory_md_of_an_agent_write": (False, [
        Step("person_save", {"path": "short_term/Ideas/garden.md", "style": "inplace"}),
        Step("mcp_add", {"key": "a0"}),
    ]),
    # git stash around an agent's write, and the hooks writing session notes.
    "stash_and_hooks": (False, [
        Step("person_save", {"path": "long_term/People/maya.md", "style": "atomic", "with_id": True}),
        Step("git_commit", {"mode": "add"}),
        Step("person_save", {"path": "long_term/People/maya.md", "style": "vim"}),
        Step("git_stash_cycle", {"key": "a0"}),
        Step("hook", {"verb": "session-end", "session": "s1"}),
        Step("hook", {"verb": "pre-compact", "session": "s2"}),
        Step("hook", {"verb": "session-start"}),
        Step("hook_killed", {"session": "k1", "after": 0.6}),
    ]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_scripted_actors_keep_every_invariant(tmp_path: Path, name: str) -> None:
    watcher, steps = SCRIPTS[name]
    outcome = play(tmp_path, steps, keep_going=True, watcher=watcher)
    if outcome.failures:
        pytest.fail(f"{name} (watcher {'on' if watcher else 'off'}):\n" + report(outcome, None, len(steps)),
                    pytrace=False)
