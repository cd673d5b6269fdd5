"""Helpers shared by the command modules (:mod:`gitmem.cli.main`, :mod:`gitmem.cli.watch`):
the error-to-exit-code mapping, ``--json``, opening the vault, printing.

Only click is imported at module level, so ``gitmem --help`` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # pragma: no cover
    from ..vault import Vault

__all__ = ["GitmemGroup", "json_option", "open_vault", "emit"]


class GitmemGroup(click.Group):
    """A click group that turns gitmem errors into one line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        from ..errors import GitmemError
        try:
            return super().invoke(ctx)
        except GitmemError as exc:
            _fail(ctx, exc.to_dict(), exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            _fail(ctx, {"code": "interrupted", "message": "interrupted"}, 130)
        except BrokenPipeError:
            # Whoever read the output stopped reading (`gitmem log | head`): end quietly, as
            # git does, with stdout pointed at nothing so the exit's own flush cannot fail.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(141)
        except Exception as exc:  # noqa: BLE001 - the promise is: never a traceback
            from ..errors import from_system_error
            mapped = from_system_error(exc)   # a full disk, SQLite busy ...: not a bug
            if mapped is not None:
                _fail(ctx, mapped.to_dict(), mapped.exit_code)
            if os.environ.get("GITMEM_DEBUG"):
                raise
            _fail(ctx, {"code": "internal_error", "message": f"{type(exc).__name__}: {exc}",
                        "hint": "Set GITMEM_DEBUG=1 for a traceback and report it."}, 1)


def _fail(ctx: click.Context, error: dict[str, Any], code: int) -> None:
    if _wants_json(ctx):
        click.echo(json.dumps({"error": error}, ensure_ascii=False))
    else:
        click.echo(f"error: {error['message']}", err=True)
        if error.get("hint"):
            click.echo(f"hint: {error['hint']}", err=True)
    ctx.exit(code)


def _wants_json(ctx: click.Context) -> bool:
    return bool(ctx.meta.get("gitmem.json"))


def _remember_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    ctx.meta["gitmem.json"] = value  # ctx.meta is shared by the whole command chain
    return value


def json_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, is_eager=True, callback=_remember_json,
                        help="Print JSON instead of text.")(func)


def open_vault(ctx: click.Context) -> Vault:
    """Open the vault named by --vault / $GITMEM_VAULT / the current folder."""
    from ..vault import Vault
    # A command line is a person's: without --author, writes carry their git identity.
    vault = Vault.open(ctx.obj.get("vault_path"), author=ctx.obj.get("author"), person=True)

    def close() -> None:
        # The command's work is done by now (a write is committed): failing to tidy up
        # after it (.git/index stays marked for the next process to bring up to date)
        # is a warning, never an error that would have a caller write it again.
        try:
            vault.close()
        except Exception as exc:  # noqa: BLE001 - see above
            if os.environ.get("GITMEM_DEBUG"):
                raise
            click.echo(f"warning: closing the vault: {exc}", err=True)
    ctx.call_on_close(close)
    return vault


def emit(data: Any, as_json: bool, text: Callable[[], str] | str) -> None:
    """Print ``data`` as JSON, or the human ``text``."""
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))
    else:
        click.echo(text() if callable(text) else text)
