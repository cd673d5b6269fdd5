"""``gitmem layout``: where memories live on disk (see :mod:`gitmem.ops.layout`)."""

from __future__ import annotations

import click

from ..memory.paths import LAYOUTS
from .common import emit, json_option, open_vault

__all__ = ["layout"]


@click.command()
@click.argument("name", required=False, type=click.Choice(LAYOUTS))
@click.option("--every", is_flag=True,
              help="Also move the notes in your own folders (default: only those gitmem placed).")
@click.option("--dry-run", is_flag=True, help="Show what would move; change nothing.")
@json_option
@click.pass_context
def layout(ctx: click.Context, name: str | None, every: bool, dry_run: bool, as_json: bool) -> None:
    """Show the vault's layout, or convert the vault to layout NAME.

    \b
    flat    <tier>/<name>.md            (new vaults: the folders you browse)
    hashed  <tier>/<h1>/<h2>/<name>.md  (cheaper writes past ~10,000 memories)

    Converting is one commit of pure renames: every memory gitmem placed moves,
    byte for byte, and `layout:` in .gitmem.yaml changes in the same commit;
    `git log --follow` follows each memory across it.  Notes in your own
    folders stay where they are unless --every is given.

    \b
    Examples:
      gitmem layout
      gitmem layout flat --dry-run
      gitmem layout hashed
    """
    vault = open_vault(ctx)
    if name is None:
        census = vault.convert_layout(vault.config.layout, dry_run=True)
        counts = census.memories
        emit({"layout": census.layout, "memories": counts}, as_json, lambda: (
            f"layout: {census.layout}\n"
            f"memories: {counts['flat']} at <tier>/<name>.md, {counts['hashed']} in hash folders, "
            f"{counts['own']} in your own folders"))
        return
    report = vault.convert_layout(name, every=every, dry_run=dry_run)

    def text() -> str:
        lines = [f"  {old} -> {new}" for old, new in report.moved[:10]]
        if len(report.moved) > 10:
            lines.append(f"  ... and {len(report.moved) - 10} more")
        lines += [f"  stays: {path} ({taken} is taken)" for path, taken in report.clashes]
        head = "would move" if report.dry_run else "moved"
        tail = f"  (commit {report.commit[:7]})" if report.commit else ""
        count = len(report.moved)
        summary = (f"{head} {count} {'memory' if count == 1 else 'memories'} to the {name} layout; "
                   f"{report.kept} in your own folders stay{tail}")
        if not report.dry_run and not report.commit:
            summary = f"the vault already has the {name} layout; nothing to move"
        return "\n".join(lines + [summary])

    emit(report.to_dict(), as_json, text)
