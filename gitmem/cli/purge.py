"""``gitmem purge ID``: remove one memory from all of history, here and, through the
next syncs, on every remote and clone (see :mod:`gitmem.upkeep.purge`).

Registered in :mod:`gitmem.cli.main`.  Rewriting history cannot be undone, so it
asks for confirmation (or ``--yes``) and prints a receipt: the rewritten range,
the objects removed and the tombstone that carries the purge to other copies.
``--status`` says which remotes have the rewritten history.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .common import emit, json_option, open_vault

__all__ = ["purge"]


@click.command()
@click.argument("ref", required=False)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--status", "status", is_flag=True,
              help="Show the purges made or applied here and which remotes have the rewritten history.")
@json_option
@click.pass_context
def purge(ctx: click.Context, ref: str | None, yes: bool, status: bool, as_json: bool) -> None:
    """Remove memory REF (id, path or title; also a deleted one) from ALL history.

    Every version of the memory, its sync conflict copies, git notes holding
    its text, its lines in MEMORY.md and its titles in commit messages are
    removed by rewriting every branch, tag and notes ref (authors, dates and
    other messages are kept); commits that only touched it are dropped; the
    new HEAD's MEMORY.md is regenerated; reflogs are expired and unreachable
    objects pruned, so git itself can no longer find the content.  A
    tombstone (ids and object ids, never the text) goes with the next
    `gitmem sync`: the remote's branch is rewritten only if it is still where
    this clone last saw it, and every other clone forgets the memory when it
    syncs.  Crash-safe: if the purge is killed, the next gitmem command
    finishes it (or, if it was killed before changing anything, drops it).
    Cannot be undone.

    \b
    Example:
      gitmem purge 3f6c2a9e --yes
      gitmem sync
      gitmem purge --status
    """
    vault = open_vault(ctx)
    if status:
        data = vault.purge_status()
        emit(data, as_json, lambda: _status_text(data))
        return
    if not ref:
        raise click.UsageError("name the memory to purge (or pass --status)")
    memory_id = vault.memory_id(ref)  # resolved first, so the prompt names it
    if not yes:
        if as_json or not sys.stdin.isatty():
            raise click.UsageError("purge rewrites history: pass --yes to confirm")
        click.confirm(f"Remove memory {memory_id} from all history? This cannot be undone", abort=True)
    report = vault.purge(memory_id)

    def text() -> str:
        copies = (f"; {len(report.conflict_copies)} conflict cop(y/ies)" if report.conflict_copies else "")
        notes = f"; {report.notes_dropped} note(s) dropped" if report.notes_dropped else ""
        return (f"purged {report.id} ({len(report.paths)} path(s): {', '.join(report.paths)}{copies}{notes})\n"
                f"{report.commits_rewritten} commit(s) rewritten, {report.commits_dropped} dropped, "
                f"{report.objects_pruned} object(s) pruned; HEAD {(report.old_head or '')[:7]} -> "
                f"{(report.new_head or '')[:7]}\n"
                f"tombstone {report.tombstone}: {report.to_dict()['next_sync']}")

    emit(report.to_dict(), as_json, text)


def _status_text(data: dict[str, Any]) -> str:
    stones = data.get("tombstones") or []
    lines = [f"{len(stones)} purge(s) known here"]
    lines += [f"  {s['id'][:8]}  purged {s['purged_at']}  ({s['versions']} version(s), "
              f"{s['commits_rewritten']} commit(s) rewritten)" for s in stones]
    for remote in data.get("remotes") or []:
        if remote.get("state") == "unreachable":
            lines.append(f"{remote['remote']}: unreachable ({remote.get('error')})")
        elif remote.get("state") == "rewritten":
            lines.append(f"{remote['remote']}: rewritten (no purged history, has every tombstone)")
        else:
            why = "still holds the old history" if remote.get("holds_old_history") else "lacks tombstones"
            lines.append(f"{remote['remote']}: not yet rewritten ({why}); run: gitmem sync {remote['remote']}")
    return "\n".join(lines)
