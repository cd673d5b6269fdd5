"""``gitmem purge ID``: remove one memory from all of history (see :mod:`gitmem.upkeep.purge`).

Registered in :mod:`gitmem.cli.main`.  Rewriting history cannot be undone, so it
asks for confirmation (or ``--yes``) and always prints the warning that
remotes and clones keep the old history until they are rewritten too.
"""

from __future__ import annotations

import sys

import click

from .common import emit, json_option, open_vault

__all__ = ["purge"]


@click.command()
@click.argument("ref")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_context
def purge(ctx: click.Context, ref: str, yes: bool, as_json: bool) -> None:
    """Remove memory REF (id, path or title; also a deleted one) from ALL history.

    Every version of the memory, its sync conflict copies, git notes holding
    its text, its lines in MEMORY.md and its titles in commit messages are
    removed by rewriting every branch, tag and notes ref (authors, dates and
    other messages are kept); commits that only touched it are dropped; the
    new HEAD's MEMORY.md is regenerated; reflogs are expired and unreachable
    objects pruned, so git itself can no longer find the content.  Crash-safe:
    if the purge is killed, the next gitmem command finishes it (or, if it
    was killed before changing anything, drops it).  Cannot be undone.

    \b
    Example:
      gitmem purge 3f6c2a9e --yes
    """
    from ..upkeep.purge import REMOTE_WARNING
    vault = open_vault(ctx)
    memory_id = vault.memory_id(ref)  # resolved first, so the prompt names it
    if not yes:
        if as_json or not sys.stdin.isatty():
            raise click.UsageError("purge rewrites history: pass --yes to confirm")
        click.confirm(f"Remove memory {memory_id} from all history? This cannot be undone", abort=True)
    report = vault.purge(memory_id)
    click.echo(f"warning: {REMOTE_WARNING}", err=True)

    def text() -> str:
        copies = (f"; {len(report.conflict_copies)} conflict cop(y/ies)" if report.conflict_copies else "")
        notes = f"; {report.notes_dropped} note(s) dropped" if report.notes_dropped else ""
        return (f"purged {report.id} ({len(report.paths)} path(s): {', '.join(report.paths)}{copies}{notes})\n"
                f"{report.commits_rewritten} commit(s) rewritten, {report.commits_dropped} dropped, "
                f"{report.objects_pruned} object(s) pruned; HEAD {(report.old_head or '')[:7]} -> "
                f"{(report.new_head or '')[:7]}")

    emit(report.to_dict(), as_json, text)
