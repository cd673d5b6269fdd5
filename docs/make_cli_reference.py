"""Write docs/cli-reference.md: the ``--help`` text of every gitmem command.

Run from a checkout, after changing any command, option or help text:

    python docs/make_cli_reference.py

The page is rendered with click's own help formatter at a fixed width of 78
columns: what ``gitmem COMMAND --help`` prints in any terminal at least 80
columns wide (click keeps help text within 78 columns there), so the page does
not depend on the terminal it is generated in.
``tests/test_docs.py`` regenerates it in memory and fails when the file
differs.  ``python docs/make_cli_reference.py --check`` does the same.
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path
from typing import Iterator

import click

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "cli-reference.md"
WIDTH = 78  # click's help width in a terminal of 80 columns or more
PROGRAM = "gitmem"

HEADER = """\
# Command-line reference

[gitmem](../README.md) documentation.

The `--help` text of every `gitmem` command, as `gitmem COMMAND --help` prints it
(in a terminal at least 80 columns wide). For a guide to the commands by task, with examples
and their output, see [Command line](cli.md).

This page is generated from the commands themselves: do not edit it by hand, run
`python docs/make_cli_reference.py` instead.
"""


def root_command() -> click.Command:
    """The click command behind the ``gitmem`` script named in pyproject.toml."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module_name, _, attr = scripts[PROGRAM].partition(":")
    module = importlib.import_module(module_name)
    entry = getattr(module, attr)
    if isinstance(entry, click.Command):
        return entry
    groups = [value for value in vars(module).values() if isinstance(value, click.Group)]
    # The root group is the one no other group of the module holds.
    nested = {id(sub) for group in groups for sub in group.commands.values()}
    roots = [group for group in groups if id(group) not in nested]
    if len(roots) != 1:
        raise SystemExit(f"cannot tell the root command of {module_name}: {roots}")
    return roots[0]


def walk(command: click.Command, ctx: click.Context) -> Iterator[tuple[click.Context, str | None]]:
    """Every visible command under ``command``, depth first, in alphabetical order.

    Yields (context, alias_of): alias_of names the command an alias stands for
    (``gitmem update`` is ``gitmem edit``), else None.
    """
    yield ctx, None
    if not isinstance(command, click.Group):
        return
    for name in sorted(command.commands):
        sub = command.commands[name]
        if sub.hidden:
            continue
        sub_ctx = click.Context(sub, info_name=name, parent=ctx, **sub.context_settings)
        if sub.name != name and sub.name in command.commands:
            yield sub_ctx, f"{ctx.command_path} {sub.name}"
            continue
        yield from walk(sub, sub_ctx)


def anchor(path: str) -> str:
    return path.replace(" ", "-")


def render() -> str:
    root = root_command()
    ctx = click.Context(root, info_name=PROGRAM, terminal_width=WIDTH,
                        **root.context_settings)
    entries = list(walk(root, ctx))
    lines = [HEADER, "## Commands", ""]
    for sub_ctx, alias_of in entries:
        path = sub_ctx.command_path
        if alias_of:
            lines.append(f"- `{path}`: the same as [`{alias_of}`](#{anchor(alias_of)})")
        else:
            summary = sub_ctx.command.get_short_help_str(limit=80) if sub_ctx.parent else "the program"
            lines.append(f"- [`{path}`](#{anchor(path)}): {summary}")
    lines.append("")
    for sub_ctx, alias_of in entries:
        if alias_of:
            continue
        path = sub_ctx.command_path
        text = sub_ctx.command.get_help(sub_ctx).rstrip()
        if "```" in text:
            raise SystemExit(f"{path}: help text holds a code fence")
        lines += [f"## {path}", "", "```text", text, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run python docs/make_cli_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
