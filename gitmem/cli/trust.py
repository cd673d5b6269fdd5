"""``gitmem accept`` and ``gitmem why``: where memories came from, and putting a proposal in
force (see :mod:`gitmem.memory.provenance`)."""

from __future__ import annotations

import click

from .common import emit, json_option, open_vault

__all__ = ["accept", "why"]


@click.command()
@click.argument("refs", nargs=-1, required=True)
@json_option
@click.pass_context
def accept(ctx: click.Context, refs: tuple[str, ...], as_json: bool) -> None:
    """Vouch for memories REFS (ids, titles or paths): each becomes yours (origin: person).

    A goal, rule or constraint that an agent, an import or a sync recorded is a
    proposal: sessions see it as quoted data, not as an instruction, until you
    accept it.  Read it first (`gitmem show REF`, `gitmem why REF`).  One commit
    per memory; one already yours is left as it is.

    \b
    Examples:
      gitmem context            # proposals are listed after the rules in force
      gitmem accept 908eb301
    """
    vault = open_vault(ctx)
    done: list[dict[str, str]] = []
    for ref in refs:
        memory = vault.accept(ref)
        done.append({"id": memory.id, "title": memory.title, "path": memory.path, "commit": memory.commit or ""})
    emit({"accepted": done}, as_json, lambda: "\n".join(
        (f"accepted {d['title']!r} ({d['id'][:8]})  (commit {d['commit'][:7]})" if d["commit"]
         else f"{d['title']!r} ({d['id'][:8]}) is already yours") for d in done))


@click.command()
@click.argument("ref")
@json_option
@click.pass_context
def why(ctx: click.Context, ref: str, as_json: bool) -> None:
    """Show where memory REF came from: its origin, how far it is trusted here, the
    memories it was derived from, and who changed it in each commit.

    \b
    Example:
      gitmem why "Build rule"
    """
    lineage = open_vault(ctx).why(ref)

    def text() -> str:
        m = lineage.memory
        lines = [f"{m.title}  ({m.id})", f"  path:        {m.path}", f"  origin:      {lineage.origin}"]
        if lineage.trusted_as != lineage.origin:
            lines.append(f"  trusted as:  {lineage.trusted_as} (how it reached this vault)")
        if lineage.in_force is not None:
            lines.append(f"  {m.type}:{' ' * max(1, 11 - len(m.type))}" + (
                "in force" if lineage.in_force else f"a proposal, not in force (gitmem accept {m.id[:8]})"))
        if lineage.sources:
            lines.append("  derived from:")
            lines += [f"    {s['relation']:<14} {s['title'] or '(gone)'} ({s['id'][:8]})"
                      + (f", {s['origin']}" if s["origin"] else "") for s in lineage.sources]
        lines.append("  history:")
        lines += [f"    {v['date']}  {v['commit'][:7]}  {v['op']:<10} {v['author']}"
                  + (f"  [{v['origin']}]" if v["origin"] else "") for v in lineage.versions]
        if not lineage.versions:
            lines.append("    (not committed yet)")
        return "\n".join(lines)

    emit(lineage.to_dict(), as_json, text)
