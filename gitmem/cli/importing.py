"""``gitmem import FORMAT SOURCE`` and ``gitmem export jsonl|folder``.

Registered in :mod:`gitmem.cli.main`; the work is done by :mod:`gitmem.exchange.importing`
and :mod:`gitmem.exchange.exporting` through the Vault's ``import_from`` and ``export_*``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from .common import emit, json_option, open_vault

if TYPE_CHECKING:  # pragma: no cover
    from ..exchange.importing import ImportReport

__all__ = ["import_command", "export"]

# The names are spelled out here so `gitmem --help` does not load the readers.
FORMAT_NAMES = ("markdown", "mcp-memory", "agent-rules", "chatgpt", "claude")


def _size_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    from ..errors import InvalidInput
    from ..exchange.import_sources import parse_size
    try:
        return parse_size(value)
    except InvalidInput as exc:
        raise click.BadParameter(f"{exc.message}; write a number of bytes, or one with K, M or G: 300M, 2G") \
            from None


@click.command(name="import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(FORMAT_NAMES))
@click.argument("source", type=click.Path())
@click.option("--dry-run", is_flag=True, help="Only list what would be created, updated or skipped.")
@click.option("--tier", help="Tier for new memories (default: long_term; mid_term for conversations).")
@click.option("--force", is_flag=True, help="Let changed sources update protected memories (rules ...).")
@click.option("--max-bytes", "max_bytes", metavar="SIZE", callback=_size_option,
              help="Read at most this much source text, uncompressed (all files, or the member of a .zip): "
                   "a number of bytes or 300M, 2G ... (default: 256M).")
@click.option("--max-objects", "max_objects", metavar="N", type=click.IntRange(min=1),
              help="Parse at most N JSON objects and records (conversations, message nodes, messages, lines, "
                   "notes; default: 1000000).")
@json_option
@click.pass_context
def import_command(ctx: click.Context, fmt: str, source: str, dry_run: bool, tier: str | None, force: bool,
                   max_bytes: int | None, max_objects: int | None, as_json: bool) -> None:
    """Import memories from another tool in ONE commit; re-running it creates nothing new.

    \b
    FORMAT and SOURCE:
      markdown     a folder of Markdown notes (Obsidian vault, Basic Memory project)
      mcp-memory   the MCP memory server's memory.jsonl
      agent-rules  CLAUDE.md, AGENTS.md, .cursorrules, .cursor/rules/*.mdc, a project
                   folder holding them, or a Claude Code memory folder
      chatgpt      ChatGPT's conversations.json, the unpacked export or its .zip
      claude       Claude's conversations.json, the unpacked export or its .zip

    Each memory keeps a `source` key: an item whose source changed is updated,
    an unchanged one skipped. An item the write checks refuse (a secret, under
    the vault's `secrets: refuse`) is skipped and listed; the rest is imported.

    A source larger than --max-bytes or --max-objects is refused before anything
    is written (code import_too_large); raise them for a source you trust.

    \b
    Example:
      gitmem import chatgpt ~/Downloads/chatgpt-export.zip --dry-run
      gitmem import agent-rules ~/code/my-project
    """
    vault = open_vault(ctx)
    if not as_json and sys.stderr.isatty():
        with click.progressbar(length=1, label="importing", file=sys.stderr) as bar:
            def progress(done: int, total: int) -> None:
                bar.length = total
                bar.update(done - bar.pos)
            report = vault.import_from(fmt, source, dry_run=dry_run, tier=tier, force=force, progress=progress,
                                       max_bytes=max_bytes, max_objects=max_objects)
    else:
        report = vault.import_from(fmt, source, dry_run=dry_run, tier=tier, force=force, max_bytes=max_bytes,
                                   max_objects=max_objects)
    emit(report.to_dict(), as_json, lambda: _import_text(report))


def _import_text(report: ImportReport) -> str:
    counts = report.counts()
    if report.dry_run:
        head = (f"dry run: would create {counts['created']}, update {counts['updated']}; "
                f"{counts['unchanged']} unchanged, {counts['skipped']} skipped (nothing committed)")
    else:
        head = (f"imported {report.format} from {report.source}: {counts['created']} created, "
                f"{counts['updated']} updated, {counts['unchanged']} unchanged, {counts['skipped']} skipped")
        head += f"  (commit {report.commit[:7]})" if report.commit else "  (no commit: nothing changed)"
    lines = [head]
    for entry in report.entries:
        if entry.action == "unchanged" and not entry.reason:
            continue
        where = f"  {entry.path}" if entry.path else ""
        why = f"  ({entry.reason})" if entry.reason else ""
        lines.append(f"{entry.action:<9} {entry.source}{where}  {entry.title}{why}")
    return "\n".join(lines)


@click.group()
def export() -> None:
    """Export the vault's memories: one JSON line each, or a plain folder of files.

    \b
    Example:
      gitmem export jsonl --out memories.jsonl
      gitmem export folder ~/memories-export
    """


@export.command(name="jsonl")
@click.option("--out", "out", type=click.Path(dir_okay=False), help="Write to FILE (default: stdout).")
@json_option
@click.pass_context
def export_jsonl(ctx: click.Context, out: str | None, as_json: bool) -> None:
    """One memory per line: path, every frontmatter field, body (stable key order).

    \b
    Example:
      gitmem export jsonl > memories.jsonl
      gitmem export jsonl --out memories.jsonl --json
    """
    vault = open_vault(ctx)
    if out is None:
        with click.open_file("-", "w") as stdout:  # click's text stdout, left open
            vault.export_jsonl(stdout)
        return
    count = vault.export_jsonl(out)
    emit({"path": out, "exported": count}, as_json, f"exported {count} memories to {out}")


@export.command(name="folder")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Write into a folder that is not empty (same names are replaced).")
@json_option
@click.pass_context
def export_folder(ctx: click.Context, directory: str, force: bool, as_json: bool) -> None:
    """Write each memory to DIRECTORY/<tier>/<file name>.md (no folders in between).

    \b
    Example:
      gitmem export folder ~/memories-export
    """
    vault = open_vault(ctx)
    result = vault.export_folder(directory, force=force)
    emit(result.to_dict(), as_json, f"exported {len(result.files)} memories to {result.path}")
