"""Command-line front doors for sharing a vault through git remotes:
``gitmem clone``, ``gitmem remote add|list|remove``, ``gitmem sync``,
``gitmem conflicts`` and ``gitmem config show|accept`` (safety settings a sync
held back).

Registered in :mod:`gitmem.cli.main`; each command opens the vault, makes one
library call (:mod:`gitmem.sync.syncer`) and prints the result.  Only click is
imported at module level so ``gitmem --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from .common import emit, json_option, open_vault

if TYPE_CHECKING:  # pragma: no cover
    from ..sync.syncer import SyncReport

__all__ = ["clone", "remote", "sync", "conflicts", "config"]


@click.command()
@click.argument("url")
@click.argument("directory", type=click.Path(file_okay=False))
@json_option
@click.pass_context
def clone(ctx: click.Context, url: str, directory: str, as_json: bool) -> None:
    """Copy a shared vault from URL into DIRECTORY (its remote is named origin).

    URL: a path, ssh://host/path, user@host:path or https://host/path
    (credentials come from ssh keys or a git credential helper, never the URL).

    \b
    Example:
      gitmem clone /srv/vaults/team.git my-vault
      gitmem clone git@github.com:me/memories.git my-vault
    """
    from ..vault import Vault
    vault = Vault.clone(url, directory, author=ctx.obj.get("author"))
    ctx.call_on_close(vault.close)
    count = len(vault.list(status=None))
    emit({"path": str(vault.root), "memories": count, "commit": vault.head}, as_json,
         f"cloned {count} memories into {vault.root}")


# ------------------------------------------------------------------ remote
@click.group()
def remote() -> None:
    """Add, list or remove the git remotes a vault syncs with.

    \b
    Example:
      gitmem remote add origin /srv/vaults/team.git
      gitmem remote list
      gitmem remote remove origin
    """


@remote.command(name="add")
@click.argument("name")
@click.argument("url")
@json_option
@click.pass_context
def remote_add(ctx: click.Context, name: str, url: str, as_json: bool) -> None:
    """Add remote NAME at URL (a path, ssh://..., user@host:path or https://...).

    An https URL with user:password@ is refused: use a git credential helper,
    ~/.git-credentials or GITMEM_GIT_USERNAME/GITMEM_GIT_PASSWORD instead.

    \b
    Example:
      gitmem remote add origin git@github.com:me/memories.git
    """
    vault = open_vault(ctx)
    added = vault.add_remote(name, url)
    emit(added.to_dict(), as_json, f"added remote {added.name}  {added.url}")


@remote.command(name="list")
@json_option
@click.pass_context
def remote_list(ctx: click.Context, as_json: bool) -> None:
    """List the remotes (user info in URLs shown as ***).

    \b
    Example:
      gitmem remote list
    """
    vault = open_vault(ctx)
    found = vault.remotes()
    emit([r.to_dict() for r in found], as_json,
         "\n".join(f"{r.name:<12} {r.url}" for r in found) or "(no remotes)")


@remote.command(name="remove")
@click.argument("name")
@json_option
@click.pass_context
def remote_remove(ctx: click.Context, name: str, as_json: bool) -> None:
    """Forget remote NAME (the remote repository itself is not touched).

    \b
    Example:
      gitmem remote remove origin
    """
    vault = open_vault(ctx)
    gone = vault.remove_remote(name)
    emit(gone.to_dict(), as_json, f"removed remote {gone.name}")


# -------------------------------------------------------------------- sync
@click.command()
@click.argument("name", default="origin", required=False)
@json_option
@click.pass_context
def sync(ctx: click.Context, name: str, as_json: bool) -> None:
    """Fetch from remote NAME (default origin), merge, push.

    Memories changed on both sides are merged field by field where that is
    unambiguous; otherwise theirs is kept as a conflict copy next to ours
    (see `gitmem conflicts`).  Never force-pushes; nothing is dropped.

    Refused before anything is written: files gitmem will not create (names
    like .. or .git, symbolic links, submodules) and, under 'secrets: refuse'
    or 'redact', anything that looks like a secret.  A .gitmem.yaml that
    weakens secrets, protected_types or max_content_bytes, or widens trust, is
    held back until `gitmem config accept`.  What arriving files claim about
    their origin is capped at the remote's (see 'gitmem why').  An arriving
    memory whose file name is taken is renamed NAME-2.md.

    \b
    Example:
      gitmem sync
      gitmem sync backup --json
    """
    vault = open_vault(ctx)
    report = vault.sync(name)
    emit(report.to_dict(), as_json, lambda: _sync_text(report))


def _sync_text(report: SyncReport) -> str:
    what = {"up_to_date": "already up to date", "pushed": "pushed local commits",
            "fast_forward": "fast-forward", "merge": "merged"}[report.action]
    head = f"{report.remote} ({report.url}): {what}"
    if report.arrived:
        head += f", {report.arrived} commit(s) arrived, {len(report.changed)} file(s) changed"
    if report.action != "pushed" and report.pushed:
        head += ", pushed"
    if report.retries:
        head += f" (remote moved; retried {report.retries}x)"
    lines = [head]
    if report.outside_edits:
        lines.append(f"committed outside edits first ({report.outside_edits[:7]})")
    lines += [f"merged    {m[:8]}  (changed on both sides, fields merged)" for m in report.merged]
    lines += [f"kept      {k[:8]}  (deleted on one side, changed on the other)" for k in report.kept]
    lines += [f"conflict  {c['id'][:8]}  theirs kept as {c['copy_path']}" for c in report.conflicts]
    if report.conflicts:
        lines.append("review with: gitmem conflicts")
    lines += [f"renamed   {r['from']} -> {r['to']}  (file name already used in this vault)"
              for r in report.renamed]
    lines += [f"forgot    {p[:8]}  (purged on another machine; removed from this clone's history)"
              for p in report.purged]
    for key, held in sorted(report.config_held.items()):
        lines.append(f"held back {key}: the remote's .gitmem.yaml says {_show(held['incoming'])}; "
                     f"{_show(held['kept'])} stays in force")
    if report.config_held:
        lines.append("apply it with: gitmem config accept  (see: gitmem config show)")
    lines += [f"warning   {w}" for w in report.warnings]
    return "\n".join(lines)


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


@click.command()
@json_option
@click.pass_context
def conflicts(ctx: click.Context, as_json: bool) -> None:
    """List conflict copies made by sync (status: conflict), with their originals.

    Resolve one by merging what matters into the original (gitmem edit) and
    removing the copy (gitmem rm --hard COPY_ID), or keep the copy and
    remove the original instead.

    \b
    Example:
      gitmem conflicts
      gitmem show 7c1e09b2 && gitmem rm --hard 7c1e09b2
    """
    vault = open_vault(ctx)
    found = vault.conflicts()

    def text() -> str:
        if not found:
            return "no conflicts"
        rows: list[Any] = []
        for c in found:
            rows.append(f"{c['id'][:8]}  {c['path']}")
            rows.append(f"          copy of {str(c['conflict_of'])[:8]}  {c['original_path'] or '(original gone)'}")
        return "\n".join(rows)

    emit(found, as_json, text)


# ------------------------------------------------------------------ config
@click.group(name="config")
def config() -> None:
    """Show the vault's safety settings; accept changes a sync held back.

    A sync that brings a .gitmem.yaml weakening secrets, protected_types or
    max_content_bytes, or trusting more agents or remotes, writes the file but
    keeps the local value in force until a person accepts the change here.

    \b
    Example:
      gitmem config show
      gitmem config accept
      gitmem config accept secrets
    """


@config.command(name="show")
@json_option
@click.pass_context
def config_show(ctx: click.Context, as_json: bool) -> None:
    """Show the safety settings in force and any change a sync held back.

    \b
    Example:
      gitmem config show --json
    """
    from ..config import safety_values
    vault = open_vault(ctx)
    pending = vault.pending_config()
    current = safety_values(vault.config)
    data = {"settings": current, "pending": pending}

    def text() -> str:
        lines = [f"{key:<18} {_show(value)}" for key, value in current.items()]
        for key, held in sorted(pending.items()):
            lines.append(f"pending: {key} {_show(held['file'])} in .gitmem.yaml (from a sync); "
                         f"{_show(held['kept'])} stays in force")
        if pending:
            lines.append("accept with: gitmem config accept [KEY...]")
        return "\n".join(lines)

    emit(data, as_json, text)


@config.command(name="accept")
@click.argument("keys", nargs=-1)
@json_option
@click.pass_context
def config_accept(ctx: click.Context, keys: tuple[str, ...], as_json: bool) -> None:
    """Let the .gitmem.yaml values a sync held back take effect (KEYS: some of
    secrets, protected_types, max_content_bytes, trust; default all).

    \b
    Example:
      gitmem config accept
      gitmem config accept max_content_bytes
    """
    vault = open_vault(ctx)
    accepted = vault.accept_config(list(keys) or None)
    emit({"accepted": accepted}, as_json,
         "\n".join(f"accepted {key}: {_show(held['file'])}" for key, held in sorted(accepted.items()))
         or "nothing was held back")
