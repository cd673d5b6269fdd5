"""``gitmem view``: write the history viewer page, optionally serve it (see :mod:`gitmem.exchange.view`).

Registered in :mod:`gitmem.cli.main`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .common import emit, json_option, open_vault

if TYPE_CHECKING:  # pragma: no cover
    from ..exchange.view import ViewReport

__all__ = ["view"]


@click.command()
@click.option("--out", "-o", "out", type=click.Path(dir_okay=False),
              help="Where to write the page, replaced if it exists (default: .git/gitmem/view.html "
                   "in the vault, outside its tracked files).")
@click.option("--serve", is_flag=True,
              help="Also serve the page on 127.0.0.1 until Ctrl-C, to whoever opens the printed address "
                   "(it carries a token).")
@click.option("--port", default=0, show_default=True, type=click.IntRange(0, 65535),
              help="Port for --serve (0: a free one).")
@click.option("--token", envvar="GITMEM_VIEW_TOKEN", show_envvar=True, metavar="TOKEN",
              help="The token --serve asks for (16 or more of A-Z a-z 0-9 . _ ~ -; default: a new random "
                   "one each run).")
@json_option
@click.pass_context
def view(ctx: click.Context, out: str | None, serve: bool, port: int, token: str | None, as_json: bool) -> None:
    """Write the vault's history as one self-contained HTML page.

    The page shows the tiers and memories, a timeline of commits, and per memory
    its versions with line diffs and its moves between tiers, with filters by
    author, type, tag, tier and date. It loads nothing from the network: open it
    from disk in any browser, or serve it with --serve.

    --serve answers only requests that carry its token (the printed address holds
    it; the browser then keeps it in a cookie for the session) and whose Host is
    127.0.0.1:PORT or localhost:PORT; other sites' pages are refused.

    \b
    Example:
      gitmem view                      # prints where it wrote the page
      gitmem view --out ~/vault-history.html
      gitmem view --serve --port 8080  # http://127.0.0.1:8080/?token=...
    """
    if serve:
        from ..exchange.view_server import checked_token
        token = checked_token(token)  # a bad --token is refused before anything is written
    vault = open_vault(ctx)
    report = vault.write_view(out)
    if not serve:
        emit(report.to_dict(), as_json, lambda: _wrote(report))
        return
    from ..exchange.view_server import PageServer, serve_page
    vault.close()  # everything is read: the vault is not held open while serving

    def ready(server: PageServer) -> None:
        emit({**report.to_dict(), "url": server.url}, as_json,
             lambda: f"{_wrote(report)}\nserving {server.url}  (Ctrl-C to stop)")

    serve_page(report.path, port=port, token=token, on_ready=ready)
    click.echo("stopped", err=True)


def _wrote(report: ViewReport) -> str:
    removed = f" ({report.removed:,} removed)" if report.removed else ""
    return (f"wrote {report.path}  ({report.memories:,} memories{removed}, {report.commits:,} commits, "
            f"{report.versions:,} versions, {report.bytes / 2**20:.1f} MiB, {report.seconds:.1f} s)")
