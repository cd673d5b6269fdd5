"""Lifecycle commands: ``context``, ``compress``, ``archive``, ``unarchive``, ``merge``,
``reflect`` and ``links`` (each one Vault call; see :mod:`gitmem.ops.lifecycle`)."""

from __future__ import annotations

from typing import Any

import click

from .common import emit, json_option, open_vault

__all__ = ["context", "compress", "archive", "unarchive", "merge", "reflect", "links"]


@click.command()
@click.option("--markdown", "as_markdown", is_flag=True, help="Print only the ready-to-inject Markdown block.")
@json_option
@click.pass_context
def context(ctx: click.Context, as_markdown: bool, as_json: bool) -> None:
    """Show the protected context: every active rule, constraint and goal.

    Rules and constraints come first, then goals, each by importance; paste
    the Markdown block into an agent's system prompt.  Those an agent, an
    import or a sync recorded are proposals, listed apart (and quoted as data
    in the Markdown) until you accept them with 'gitmem accept ID'.

    \b
    Example:
      gitmem context --markdown
    """
    result = open_vault(ctx).protected_context()
    if as_markdown and not as_json:
        click.echo(result.markdown, nl=False)
        return
    def text() -> str:
        lines = [f"{m.type:<10} {m.meta.get('importance', 3)}  {m.id[:8]}  {m.title}" for m in result.memories]
        if result.proposals:
            lines += ["", "proposed (not in force until you run 'gitmem accept ID'):"]
            lines += [f"{m.type:<10} {m.meta.get('importance', 3)}  {m.id[:8]}  {m.title}  "
                      f"(from {m.meta.get('origin', 'person')})" for m in result.proposals]
        return "\n".join(lines).strip("\n") or "(no protected memories)"

    emit(result.to_dict(), as_json, text)


@click.command()
@click.argument("tier")
@click.option("--summary", help="The summary text (default: an extractive summary of the sources).")
@click.option("--summary-file", type=click.File("r", encoding="utf-8"),
              help="Read the summary from a file ('-' = stdin).")
@click.option("--title", help="Title of the summary memory.")
@click.option("--older-than", "older_than_days", type=click.FloatRange(0), help="Only memories older than N days.")
@click.option("--tag", help="Only memories with this tag.")
@click.option("--type", "mtype", help="Only memories of this type.")
@click.option("--max-chars", type=click.IntRange(100), help="Cap the batch so it fits a model's context.")
@click.option("--dry-run", is_flag=True, help="Print the batch (what a summarizer would read); change nothing.")
@json_option
@click.pass_context
def compress(ctx: click.Context, tier: str, summary: str | None, summary_file: Any, title: str | None,
             older_than_days: float | None, tag: str | None, mtype: str | None, max_chars: int | None,
             dry_run: bool, as_json: bool) -> None:
    """Compress TIER: write a summary memory in the next tier up and move every
    source into archive/ (status archived, archived_into): a pure-rename commit,
    then one commit with the changes.

    Protected types are never included.  Without --summary, gitmem writes a
    deterministic extractive summary (one line per source), so this works offline.

    \b
    Example:
      gitmem compress short_term --dry-run
      gitmem compress short_term --older-than 7 --summary "Maya trained for the half marathon."
    """
    if summary is not None and summary_file is not None:
        raise click.UsageError("give --summary or --summary-file, not both")
    if summary_file is not None:
        summary = summary_file.read()
    vault = open_vault(ctx)
    batch = vault.compress_tier(tier, older_than_days=older_than_days, tag=tag, type=mtype,
                                max_chars=max_chars)
    if dry_run:
        emit(batch.to_dict(), as_json, lambda: (batch.content + "\n\n" if batch.content else "")
             + f"{len(batch.files)} {'memory' if len(batch.files) == 1 else 'memories'} "
               f"would be compressed into {batch.target_tier}"
             + (" (more exist: raise --max-chars)" if batch.truncated else ""))
        return
    memory = vault.compress(tier, summary, title, batch.files)
    emit({**memory.to_dict(), "sources": batch.ids, "archived": batch.files}, as_json,
         lambda: f"compressed {len(batch.files)} memories into {memory.id[:8]}  {memory.path}"
                 f"  (commit {memory.commit[:7] if memory.commit else '?'})")


@click.command()
@click.argument("refs", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Also archive protected memories (recorded in the commit).")
@json_option
@click.pass_context
def archive(ctx: click.Context, refs: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Move memories (ids, titles or paths) into archive/ (renames, then the change).

    \b
    Example:
      gitmem archive "Book Kanel's annual vaccination"
    """
    moved = open_vault(ctx).archive(list(refs), force=force)
    emit([m.to_dict(body=False) for m in moved], as_json,
         lambda: "\n".join(f"archived {m.id[:8]}  {m.path}" for m in moved)
         + (f"  (commit {moved[-1].commit[:7]})" if moved and moved[-1].commit else ""))


@click.command()
@click.argument("ref")
@click.option("--tier", help="Tier to restore into (default: the tier it was archived from).")
@json_option
@click.pass_context
def unarchive(ctx: click.Context, ref: str, tier: str | None, as_json: bool) -> None:
    """Bring an archived memory back to its old tier, active again (a rename, then the change).

    \b
    Example:
      gitmem unarchive "Book Kanel's annual vaccination"
    """
    memory = open_vault(ctx).unarchive(ref, tier=tier)
    emit(memory.to_dict(body=False), as_json, f"unarchived {memory.id[:8]}  {memory.path}")


@click.command()
@click.argument("refs", nargs=-1, required=True)
@click.option("--content", help="Content of the merged memory (default: the sources concatenated).")
@click.option("--title", help="Title of the merged memory (default: the first source's).")
@click.option("--force", is_flag=True, help="Allow merging protected memories.")
@json_option
@click.pass_context
def merge(ctx: click.Context, refs: tuple[str, ...], content: str | None, title: str | None,
          force: bool, as_json: bool) -> None:
    """Merge two or more memories into a new one; the sources are archived with
    merged_into and links to them are re-pointed (a pure-rename commit, then
    one commit with the changes).

    \b
    Example:
      gitmem merge 3f2a91c0 77b2e410 --title "Deployment preferences"
    """
    result = open_vault(ctx).merge(list(refs), content, title=title, force=force)
    emit(result.to_dict(), as_json,
         lambda: f"merged {len(result.sources)} memories into {result.memory.id[:8]}  "
                 f"{result.memory.path}  (commit {(result.memory.commit or '?')[:7]})"
                 + (f"; re-pointed links in {len(result.repointed)}" if result.repointed else ""))


@click.command()
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@json_option
@click.pass_context
def reflect(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Consolidate: expire, prune weak memories, merge near-duplicates, promote
    often-retrieved episodes, fold retrieval counts; one commit listing it all
    (after a pure-rename commit when memories change tier).

    Protected memories are never touched.  Thresholds live in .gitmem.yaml
    (reflect:).

    \b
    Example:
      gitmem reflect --dry-run
    """
    report = open_vault(ctx).reflect(dry_run=dry_run)

    def text() -> str:
        if report.busy:
            return "another reflect is running; nothing done"
        plan = report.plan
        lines = []
        if plan is not None:
            for name, actions in (("expire", plan.expire), ("prune", plan.prune),
                                  ("promote", plan.promote), ("reinforce", plan.fold)):
                lines += [f"{name:<9} {a.title}  ({a.path})" for a in actions]
            lines += [f"{'merge':<9} " + " + ".join(a.title for a in group) for group in plan.merge]
        counts = (f"pruned {report.pruned}, merged {report.merged}, promoted {report.promoted}, "
                  f"expired {report.expired}, reinforced {report.reinforced} in {report.duration_ms} ms")
        head = "would do: " if dry_run else ""
        tail = f"  (commit {report.commit[:7]})" if report.commit else ""
        return "\n".join(lines + [head + counts + tail])

    emit(report.to_dict(), as_json, text)


@click.command()
@click.argument("ref")
@json_option
@click.pass_context
def links(ctx: click.Context, ref: str, as_json: bool) -> None:
    """Show a memory's outgoing links (related, supersedes, [[wikilinks]]) and backlinks.

    \b
    Example:
      gitmem links "Maya Lindqvist core profile" --json
    """
    result = open_vault(ctx).links(ref)

    def text() -> str:
        lines = [f"{result.memory.title}  ({result.memory.path})", "outgoing:"]
        lines += [f"  {o['relation']:<14} {o.get('title') or o['target']}"
                  + ("" if o["exists"] else "  (missing)") for o in result.outgoing] or ["  (none)"]
        lines.append("backlinks:")
        lines += [f"  {b['relation']:<14} {b['title']}  ({b['path']})" for b in result.backlinks] \
            or ["  (none)"]
        return "\n".join(lines)

    emit(result.to_dict(), as_json, text)
