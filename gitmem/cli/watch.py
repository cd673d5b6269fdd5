"""Command-line front doors for outside edits: ``gitmem watch``, ``gitmem hooks
install|uninstall|status`` and the hidden ``gitmem hook NAME [ARGS]`` that the
installed git hooks run.

Registered in :mod:`gitmem.cli.main`; like every command there, each opens the
vault, makes one library call (:class:`gitmem.outside.watcher.Watcher`,
:mod:`gitmem.outside.hooks`) and prints the result.  Only click is imported at module
level so ``gitmem --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .common import emit, json_option, open_vault
from .status import background_sync, sync_options

if TYPE_CHECKING:  # pragma: no cover
    from ..outside.hooks import HookState

__all__ = ["watch", "hooks", "hook"]


# ------------------------------------------------------------------- watch
@click.command()
@click.option("--commit/--no-commit", "commit", default=None,
              help="Commit outside edits, or only keep the index current "
                   "(default: auto_commit in .gitmem.yaml, on when unset).")
@click.option("--debounce", type=click.FloatRange(0, 60), default=0.3, show_default=True,
              help="Seconds a file must be left alone before it is re-indexed.")
@click.option("--commit-delay", type=click.FloatRange(0, 3600), default=2.0, show_default=True,
              help="Seconds without any change before the batch is committed (one commit).")
@click.option("--rescan-interval", type=click.FloatRange(0, 86400), default=60.0, show_default=True,
              help="Seconds between full rescans that repair missed events (0: only at start).")
@click.option("--quiet", "-q", is_flag=True, help="Print only problems and errors.")
@sync_options
@click.pass_context
def watch(ctx: click.Context, commit: bool | None, debounce: float, commit_delay: float,
          rescan_interval: float, quiet: bool, sync_remote: str | None, sync_interval: float | None) -> None:
    """Keep the index and history in step with edits made outside gitmem.

    Runs until Ctrl-C or SIGTERM.  Every saved memory file is re-indexed
    (searchable in well under a second); after COMMIT-DELAY seconds without
    changes, everything changed is committed as one commit authored by the
    vault's user.  Logs go to stderr.  With --sync REMOTE (or sync: in
    .gitmem.yaml) the commits are pushed to REMOTE a few seconds later and
    what others pushed arrives every --sync-interval seconds; each sync that
    changes something, makes a conflict copy or fails is a line in the log.

    \b
    Example:
      gitmem -C my-vault watch
      gitmem -C my-vault watch --no-commit --quiet
      gitmem -C my-vault watch --sync origin --sync-interval 60
    """
    from ..outside.watcher import Watcher
    vault = open_vault(ctx)
    watcher = Watcher(vault, auto_commit=commit, debounce=debounce, commit_delay=commit_delay,
                      rescan_interval=rescan_interval, quiet=quiet,
                      log=lambda line: click.echo(line, err=True))

    def ready() -> None:
        if quiet:
            return
        mode = (f"commits after {commit_delay:g}s without changes" if watcher.auto_commit
                else "index only, no commits")
        click.echo(f"watching {vault.root} ({mode}; Ctrl-C stops)", err=True)

    embedder = vault.start_embedding(lambda line: click.echo(f"gitmem: {line}", err=True))
    try:
        with background_sync(vault, sync_remote, sync_interval, quiet=quiet,
                             log=lambda line: click.echo(line, err=True)) as syncing:
            if syncing is not None and not quiet:
                click.echo(f"syncing with {syncing.remote} every {syncing.interval:g}s and after each commit",
                           err=True)
            watcher.run_forever(on_ready=ready)
    finally:
        if embedder is not None:
            embedder.stop()
    if not quiet:
        click.echo(f"stopped ({len(watcher.commits)} commit(s) made)", err=True)


# ------------------------------------------------------------------- hooks
@click.group()
def hooks() -> None:
    """Install, remove or list gitmem's git hooks.

    pre-commit rejects commits of memory files with broken frontmatter.
    The post-* hooks (after `git commit`, `pull`, `merge`, `checkout`,
    `rebase`) run no Python: they touch .git/gitmem/changed-by-git, and the
    search index and memory history catch up by themselves the next time
    gitmem opens the vault.  No hook blocks git when gitmem cannot run.

    \b
    Example:
      gitmem hooks install
      gitmem hooks status
      gitmem hooks uninstall
    """


def _line(state: HookState) -> str:
    text = f"{state.name:<14} {state.state:<8} {state.path}"
    if state.state == "gitmem" and state.python:
        text += f"  (runs {state.python}{'' if state.python_ok is not False else ', MISSING'})"
    if state.state == "foreign":
        text += "  (not gitmem's)"
    return text


@hooks.command(name="install")
@click.option("--force", is_flag=True,
              help="Replace hooks that are not gitmem's (each is kept as NAME.pre-gitmem).")
@click.option("--python", "python", type=click.Path(dir_okay=False),
              help="Interpreter the hooks run (default: the one running this command).")
@json_option
@click.pass_context
def hooks_install(ctx: click.Context, force: bool, python: str | None, as_json: bool) -> None:
    """Write gitmem's git hooks into the vault's hooks folder.

    \b
    Example:
      gitmem hooks install
      gitmem hooks install --force   # replace (and keep) existing hooks
    """
    from ..outside.hooks import install_hooks
    vault = open_vault(ctx)
    states = install_hooks(vault, force=force, python=python)
    lines = [f"installed {s.name:<14} {s.path}" + (f"  (your hook kept as {s.backup})" if s.backup else "")
             for s in states]
    lines.append(f"hooks run {states[0].python}")
    emit([s.to_dict() for s in states], as_json, "\n".join(lines))


@hooks.command(name="uninstall")
@json_option
@click.pass_context
def hooks_uninstall(ctx: click.Context, as_json: bool) -> None:
    """Remove gitmem's git hooks (other hooks are left alone).

    \b
    Example:
      gitmem hooks uninstall
    """
    from ..outside.hooks import hook_status, uninstall_hooks
    vault = open_vault(ctx)
    removed = uninstall_hooks(vault)
    after = {s.name: s for s in hook_status(vault)}
    lines = []
    for state in removed:
        lines.append(f"removed {state.name:<14} {state.path}")
        if state.backup and after[state.name].state == "foreign":
            lines.append(f"restored {state.name} from {state.backup}")
    emit([s.to_dict() for s in removed], as_json, "\n".join(lines) or "no gitmem hooks were installed")


@hooks.command(name="status")
@json_option
@click.pass_context
def hooks_status(ctx: click.Context, as_json: bool) -> None:
    """List gitmem's hooks: gitmem (installed), foreign (someone else's) or missing.

    \b
    Example:
      gitmem hooks status
    """
    from ..outside.hooks import hook_status
    vault = open_vault(ctx)
    states = hook_status(vault)
    emit([s.to_dict() for s in states], as_json, "\n".join(_line(s) for s in states))


# -------------------------------------------------------------------- hook
@click.command(hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def hook(ctx: click.Context, name: str, args: tuple[str, ...]) -> None:
    """Run the action of git hook NAME (pre-commit's check; post-* touch a stamp).

    Today's hooks run gitmem.outside.hooks.main directly (pre-commit) or no Python at
    all (post-*); hooks installed by older gitmem versions call this command.

    Never fails the git command: problems are one line on stderr and exit 0,
    except a pre-commit that finds invalid staged memories (exit 1).

    \b
    Example:
      gitmem hook post-commit
    """
    from ..outside.hooks import run_hook
    vault_path = (ctx.obj or {}).get("vault_path")
    code = run_hook(name, args, vault_path, lambda line: click.echo(line, err=True))
    ctx.exit(code)
