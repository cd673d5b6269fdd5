"""Command-line front doors for the sync state: ``gitmem status``, and the ``--sync REMOTE``
and ``--sync-interval SECONDS`` options of the long-running commands (``gitmem mcp``,
``gitmem watch``), which start a background sync (:mod:`gitmem.sync.background`).

Registered in :mod:`gitmem.cli.main`.  Only click is imported at module level so
``gitmem --help`` stays fast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from .common import emit, json_option, open_vault

if TYPE_CHECKING:  # pragma: no cover
    from ..sync.background import BackgroundSync
    from ..vault import Vault

__all__ = ["status", "sync_options", "background_sync"]


def sync_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--sync REMOTE`` and ``--sync-interval SECONDS`` (parameters ``sync_remote``, ``sync_interval``)."""
    func = click.option("--sync-interval", "sync_interval", type=click.FloatRange(0.5, 86400), metavar="SECONDS",
                        help="Background sync: seconds between fetches (default: sync.interval in .gitmem.yaml, "
                             "else 60).")(func)
    return click.option("--sync", "sync_remote", metavar="REMOTE",
                        help="Sync with REMOTE in the background: fetch on start and every --sync-interval "
                             "seconds, push ~2 s after each write, back off while it is unreachable "
                             "(default: sync.remote in .gitmem.yaml; 'off' turns it off).")(func)


@contextlib.contextmanager
def background_sync(vault: Vault, remote: str | None, interval: float | None, *,
                    log: Callable[[str], None] | None = None, quiet: bool = False) -> Iterator[BackgroundSync | None]:
    """Run the background sync the options or ``.gitmem.yaml`` ask for (none: yields None)
    around the command's work, and stop it (a last push) when the work ends."""
    running = vault.start_sync(remote, interval, log=log, quiet=quiet)
    try:
        yield running
    finally:
        if running is not None:
            running.stop()


@click.command()
@click.argument("remote", required=False)
@json_option
@click.pass_context
def status(ctx: click.Context, remote: str | None, as_json: bool) -> None:
    """Show how the vault syncs with REMOTE (default: the background sync's
    remote, else origin): the last successful sync, ahead/behind, the last error,
    the background sync and the conflict copies syncs made.

    Ahead: commits made here and not pushed yet; behind: commits fetched from
    the remote and not merged here yet (both as of the last sync).

    \b
    Example:
      gitmem status
      gitmem status backup --json
    """
    vault = open_vault(ctx)
    state = vault.sync_status(remote)
    emit(state, as_json, lambda: status_text(state))


def status_text(state: dict[str, Any]) -> str:
    """``gitmem status`` as text."""
    if state["remote"] is None:
        return "no remote configured (share the vault: gitmem remote add origin URL, then gitmem sync)"
    if not state["configured"]:
        return f"no remote named {state['remote']} (configured: {', '.join(state['remotes']) or 'none'})"
    lines = [f"remote        {state['remote']}" + (f"  {state['url']}" if state["url"] else "")]
    success = state["last_success"]
    lines.append(f"last sync     {success} ({_action(state['last_action'])})" if success else "last sync     never")
    if state["last_attempt"] and (state["last_attempt"] != success or state["last_error"]):
        lines.append(f"last attempt  {state['last_attempt']}")
    if state["ahead"] is None:
        lines.append("ahead/behind  unknown (not synced yet)")
    else:
        lines.append(f"ahead/behind  {state['ahead']} to push, {state['behind']} to merge")
    error = state["last_error"]
    if error:
        lines.append(f"last error    {error['code']}: {error['message']} ({state['failures']} failed "
                     f"attempt(s) in a row)")
    else:
        lines.append("last error    none")
    background = state["background"]
    if background and background["running"]:
        text = f"running (pid {background['pid']}, every {background['interval']:g}s"
        if background["next_attempt"]:
            text += f"; backing off, next attempt {background['next_attempt']}"
        lines.append(f"background    {text})")
    else:
        lines.append("background    not running (start one: --sync REMOTE on gitmem mcp or watch)")
    conflicts = state["conflicts"]
    lines.append(f"conflicts     {state['unresolved_conflicts']} unresolved"
                 + (" (review with: gitmem conflicts)" if state["unresolved_conflicts"] else ""))
    lines += [f"              {c['copy_path']} (copy of {str(c['id'])[:8]}, sync at {c['at']})" for c in conflicts]
    if state.get("purges"):
        lines.append(f"purges        {state['purges']}")
    return "\n".join(lines)


def _action(action: str | None) -> str:
    return {"up_to_date": "up to date", "pushed": "pushed", "fast_forward": "fast-forward",
            "merge": "merged"}.get(action or "", action or "?")
