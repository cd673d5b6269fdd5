"""A fleet: five replicas of one vault, each its own process, sharing it through one
server reached three ways (a path, smart HTTP, ssh), under faults; then every
replica must agree, nothing acknowledged may be lost, and purged memories must be
gone everywhere.  The harness is :mod:`tests.fleet` (``bench/fleet.py`` runs it
at a larger size).

Each replica: an agent writing through ``gitmem mcp`` (stdio; with ``--sync``
where gitmem has background sync), writes through the Python API, and in two
replicas a person saving memory files in an editor (a temporary file renamed
over it, or rewritten in place).  Rounds of random operations (adds, appends to
the same memories from every replica, moves, soft and hard deletes, merges) run
in all replicas at once, with syncs at random places; at random moments the
server goes down and comes back (the path renamed away, the HTTP server or sshd
stopped).  Canary memories are planted and purged from other replicas.

By default the run uses a fixed seed (``DEFAULT_SEED``), so the same choices
are made in every run of the suite; ``FLEET_SEED=N`` replays another run's
choices and ``FLEET_SEED=random`` explores a new one.  The seed is printed in
every failure (the timing of processes is not replayable).
"""

from __future__ import annotations

import gc
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from .fleet import FleetConfig, FleetRun, check_fleet, features, git, run_fleet, summary
from .git_http_server import http_backend
from .servers import ServerUnavailable, SshServer

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(http_backend() is None, reason="git http-backend is not installed")]

#: The seed the suite runs unless FLEET_SEED says otherwise.
DEFAULT_SEED = 7
_GIVEN = os.environ.get("FLEET_SEED", "").strip()
SEED = random.SystemRandom().randrange(1 << 31) if _GIVEN == "random" else int(_GIVEN or DEFAULT_SEED)
Outcome = tuple[FleetRun, dict[str, list[str]]]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    """One run of the fleet (about two minutes), shared by the checks below."""
    work = tmp_path_factory.mktemp("fleet")
    try:
        SshServer(work / "ssh-probe")
    except ServerUnavailable as exc:
        pytest.skip(str(exc))
    have = features()
    print(f"fleet seed {SEED} (replay: FLEET_SEED={SEED}); features {have}")
    with pytest.MonkeyPatch.context() as env:
        for name in ("GITMEM_VAULT", "GITMEM_AUTHOR", "GITMEM_DEBUG", "GITMEM_GIT_USERNAME",
                     "GITMEM_GIT_PASSWORD", "GIT_SSH_COMMAND", "GIT_SSH"):
            env.delenv(name, raising=False)
        env.setenv("HOME", str(work / "home"))
        env.setenv("GIT_CONFIG_NOSYSTEM", "1")
        cfg = FleetConfig(work=work / "run", seed=SEED, rounds=6, background_sync=have["background_sync"],
                          purge_syncs=have["purge_syncs"], log=print)
        try:
            run = run_fleet(cfg)
        except ServerUnavailable as exc:
            pytest.skip(str(exc))
        problems = check_fleet(run)
    gc.collect()   # a pipe or socket left open (a ResourceWarning) fails the test that left it
    yield run, problems


def _failing(outcome: Outcome, *checks: str) -> str:
    run, problems = outcome
    found = {k: problems[k] for k in checks if problems[k]}
    return f"seed {SEED} (replay: FLEET_SEED={SEED}): {found}\nrun: {summary(run)}"


def test_the_fleet_did_real_work_under_faults(fleet: Outcome) -> None:
    run, _ = fleet
    assert len(run.acked) >= 40, _failing(fleet)
    assert {f.split()[1] for f in run.faults if f.startswith("stop")} == {"path", "http", "ssh"}, _failing(fleet)
    assert set(run.transports) == {"path", "http", "ssh"}
    syncs = [r for r in run.sync_reports if r.get("ok") and not r.get("final")]
    unreachable = run.codes.get("sync:remote_unreachable", 0)
    assert len(syncs) >= 5 and unreachable, _failing(fleet)   # syncs went through, and partitions were felt
    merges = git(run.bare, "rev-list", "--merges", "--count", "main").strip()
    assert int(merges) > 0, _failing(fleet)   # histories diverged and were merged


def test_no_raw_exception_and_every_mcp_server_exits_cleanly(fleet: Outcome) -> None:
    assert not fleet[1]["raw_errors"] and not fleet[1]["mcp_exit"], _failing(fleet, "raw_errors", "mcp_exit")


def test_every_replica_converges_to_the_servers_tree(fleet: Outcome) -> None:
    assert not fleet[1]["converged"] and not fleet[1]["same_tree"], _failing(fleet, "converged", "same_tree")


def test_every_acknowledged_write_is_found(fleet: Outcome) -> None:
    assert not fleet[1]["acknowledged"] and not fleet[1]["search"], _failing(fleet, "acknowledged", "search")


def test_no_conflict_markers_anywhere(fleet: Outcome) -> None:
    assert not fleet[1]["conflict_markers"], _failing(fleet, "conflict_markers")


def test_the_server_only_moved_forward_except_for_leased_purges(fleet: Outcome) -> None:
    assert not fleet[1]["server_reflog"], _failing(fleet, "server_reflog")


def test_git_fsck_is_clean_everywhere(fleet: Outcome) -> None:
    assert not fleet[1]["fsck"], _failing(fleet, "fsck")


def test_purged_canaries_are_found_nowhere(fleet: Outcome) -> None:
    run, problems = fleet
    if not run.config.purge_syncs:
        pytest.skip("this gitmem cannot take a purge to other clones yet (no `gitmem purge --status`): "
                    "a purge would stop every other clone's sync with purged_content")
    assert len(run.purged) >= 3 and len(set(run.purged.values())) >= 2, _failing(fleet)
    assert not problems["canaries"], _failing(fleet, "canaries")


def test_agents_sync_in_the_background(fleet: Outcome) -> None:
    run, _ = fleet
    if not run.config.background_sync:
        pytest.skip("this gitmem has no background sync yet (no `gitmem mcp --sync-interval`): "
                    "the replicas' agents ran without --sync and only explicit syncs were made")
    # After the faults stopped, the replicas agreed with no explicit sync at all.
    assert run.background_converge_s is not None, _failing(fleet)


def test_the_fleet_harness_reads_its_files(tmp_path: Path) -> None:
    """The canary scan reads every file but the compressed objects, which it decompresses instead."""
    from .fleet import _files_bytes
    (tmp_path / ".git" / "objects").mkdir(parents=True)
    (tmp_path / ".git" / "objects" / "x").write_bytes(b"zlib")
    (tmp_path / ".git" / "gitmem").mkdir()
    (tmp_path / ".git" / "gitmem" / "catalog.sqlite").write_bytes(b"canary")
    (tmp_path / "note.md").write_text("hello")
    assert sorted(_files_bytes(tmp_path)) == [".git/gitmem/catalog.sqlite", "note.md"]
