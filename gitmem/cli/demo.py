"""``gitmem demo``: try gitmem on its bundled sample vault in one command.

The demo runs the commands a person would type (``init --from`` the sample,
``add``, ``search``) and prints each one before its output, then the vault's
``git log``: the first minute with gitmem, after nothing more than ``pip install``.

Registered in :mod:`gitmem.cli.main`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import cast

import click

from .common import open_vault

__all__ = ["demo", "sample_folder"]

#: The memory the demo adds and then finds: (title, body, type, tag).
DEMO_MEMORY = ("Prefers dark mode", "Use dark themes in every editor.", "preference", "ui")
DEMO_QUERY = "dark mode"


def sample_folder() -> Path:
    """The bundled sample vault's folder.

    An installed gitmem holds it as ``gitmem/sample-vault`` (the wheel ships the
    checkout's ``sample-vault/`` folder there, see pyproject.toml); a source
    checkout (also an editable install) reads ``sample-vault/`` next to the package.
    """
    from ..errors import NotFound
    package = Path(__file__).parent.parent
    for folder in (package / "sample-vault", package.parent / "sample-vault"):
        if folder.is_dir():
            return folder
    raise NotFound("the sample vault is not installed with gitmem",
                   hint="Reinstall gitmem (python -m pip install --force-reinstall gitmem-vault), "
                        "or try it on your own notes: gitmem init --from NOTES_FOLDER DIR.")


@click.command()
@click.argument("directory", type=click.Path(file_okay=False))
@click.pass_context
def demo(ctx: click.Context, directory: str) -> None:
    """Try gitmem on its bundled sample vault.

    DIRECTORY becomes a vault with history from the sample; then a memory is
    added, a search finds it, and the vault's git log is shown. Each step is
    printed after ==> as the command that does it by hand, then what that
    command prints. DIRECTORY must not be a vault yet; afterwards it is an
    ordinary vault (open it in Obsidian or an editor, try other commands).

    \b
    Example:
      gitmem demo my-vault
      cd my-vault && gitmem search "running plan" && git log --stat -1
    """
    title, body, mtype, tag = DEMO_MEMORY
    sample = sample_folder()
    where = shlex.quote(directory)
    root = ctx.find_root()
    group = cast(click.Group, root.command)

    def step(command: str, name: str, **params: object) -> None:
        # The command itself (found by name on the root group, which imports this module):
        # the demo prints exactly what typing the shown command prints.
        click.echo(f"==> {command}")
        found = group.get_command(root, name)
        if found is None:  # pragma: no cover - the demo runs only gitmem's own commands
            raise LookupError(f"gitmem has no command {name!r}")
        ctx.invoke(found, **params)

    step(f"gitmem init --from {shlex.quote(str(sample))} {where}", "init",
         directory=directory, from_dir=str(sample))
    ctx.obj["vault_path"] = directory  # the next commands run in the new vault, as with -C
    step(f'gitmem -C {where} add "{title}" "{body}" --type {mtype} --tag {tag}', "add",
         title=title, body=body, mtype=mtype, tags=(tag,))
    step(f'gitmem -C {where} search "{DEMO_QUERY}" --limit 1', "search", query=DEMO_QUERY, limit=1)

    click.echo(f"==> git -C {where} log --oneline")
    vault = open_vault(ctx)
    for commit in vault.commits():
        click.echo(f"{commit.sha[:7]} {commit.subject}")
