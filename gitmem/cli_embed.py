"""``gitmem embed``: compute the vectors hybrid search uses (see :mod:`gitmem.vectors`).

Registered in :mod:`gitmem.cli`.  Needs the ``embed`` extra; the vectors are a cache in
``.git/gitmem/vectors/``, so ``--rebuild`` (or deleting that folder) loses nothing.
"""

from __future__ import annotations

import sys

import click

from .cli_common import emit, json_option, open_vault

__all__ = ["embed"]


@click.command()
@click.option("--rebuild", is_flag=True, help="Drop every stored vector and compute them all again.")
@json_option
@click.pass_context
def embed(ctx: click.Context, rebuild: bool, as_json: bool) -> None:
    """Compute embedding vectors of new and changed memories, for hybrid search.

    Memories without a vector are still found by their words.  `gitmem watch`
    and `gitmem mcp` do this in the background; run it once after installing
    the embed extra, or to catch up a large vault at once.

    \b
    Examples:
      pip install "gitmem-vault[embed]"
      gitmem embed
      gitmem embed --rebuild
    """
    from .embedding import INSTALL_HINT, MODEL_NAME, available, get_embedder
    from .errors import NotInstalled
    from .vectors import VectorStore, embed_pending, vector_dir
    if not available():
        raise NotInstalled("gitmem embed needs the embed extra", hint=INSTALL_HINT)
    vault = open_vault(ctx)
    store = VectorStore(vector_dir(vault))
    if rebuild:
        store.drop()
    show = not as_json and sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if show:
            click.echo(f"\rembedded {done}/{total}", err=True, nl=done == total)

    count = embed_pending(vault, get_embedder(), progress)
    stored = len(store.stored())
    emit({"embedded": count, "vectors": stored, "model": MODEL_NAME,
          "backend": get_embedder().backend, "path": str(store.file)}, as_json,
         lambda: f"embedded {count} memor{'y' if count == 1 else 'ies'}; {stored} vector(s) "
                 f"stored ({MODEL_NAME}, {get_embedder().backend})")
