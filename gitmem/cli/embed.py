"""``gitmem embed``: compute the vectors hybrid search uses (see :mod:`gitmem.search.vectors`).

Registered in :mod:`gitmem.cli.main`.  Needs the ``embed`` extra; the vectors are a cache in
``.git/gitmem/vectors/``, so ``--rebuild`` (or deleting that folder) loses nothing.
"""

from __future__ import annotations

import sys

import click

from .common import emit, json_option, open_vault

__all__ = ["embed"]


@click.command()
@click.option("--rebuild", is_flag=True, help="Drop every stored vector and compute them all again.")
@json_option
@click.pass_context
def embed(ctx: click.Context, rebuild: bool, as_json: bool) -> None:
    """Compute embedding vectors of new and changed memories, for hybrid search.

    Memories without a vector are still found by their words.  `gitmem watch`
    and `gitmem mcp` do this in the background; run it once after installing
    the embed extra, or to catch up a large vault at once.  A damaged vectors
    file is replaced, and every memory embedded again.

    \b
    Examples:
      pip install "gitmem-vault[embed]"
      gitmem embed
      gitmem embed --rebuild
    """
    vault = open_vault(ctx)
    show = not as_json and sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if show:
            click.echo(f"\rembedded {done}/{total}", err=True, nl=done == total)

    done = vault.embed(rebuild=rebuild, progress=progress)
    count = done["embedded"]
    if done.get("replaced_damaged"):
        click.echo(f"the vectors file was damaged ({done['replaced_damaged']}): replaced and rebuilt", err=True)
    emit(done, as_json,
         lambda: f"embedded {count} memor{'y' if count == 1 else 'ies'}; {done['vectors']} vector(s) "
                 f"stored ({done['model']}, {done['backend']})")
