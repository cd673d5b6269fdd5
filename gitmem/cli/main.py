"""The ``gitmem`` command line: each command opens the vault, makes one Vault
call and prints the result (human text, or JSON with ``--json``).

Errors are one line on stderr (``error: ...`` plus a ``hint:`` line when there
is one) and a documented exit code (see :mod:`gitmem.errors`); a traceback is
shown only with ``GITMEM_DEBUG=1``.  Heavy modules load inside commands so
``gitmem --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import click

from .common import GitmemGroup, emit, json_option, open_vault

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.schema import Memory

__all__ = ["main", "cli"]

EPILOG = """\b
Exit codes: 0 ok, 1 failure, 2 invalid input, 3 not found,
4 protected (use --force), 5 conflict, 6 vault busy.
Docs: README.md and docs/ (docs/cli-reference.md: every command)."""


@click.group(cls=GitmemGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--vault", "-C", "vault_path", envvar="GITMEM_VAULT", type=click.Path(file_okay=False),
              help="The vault folder (default: $GITMEM_VAULT, else the current folder).")
@click.option("--author", envvar="GITMEM_AUTHOR",
              help='Commit author for writes: a name or "Name <email>" (default: your git identity, '
                   'GIT_AUTHOR_NAME or git config user.name, else author: in .gitmem.yaml).')
@click.version_option(package_name="gitmem-vault", prog_name="gitmem")
@click.pass_context
def cli(ctx: click.Context, vault_path: str | None, author: str | None) -> None:
    """gitmem: a Git-backed Markdown memory vault for LLM agents.

    Every write is a git commit (a move that changes the text: a pure rename,
    then the change); memories are Markdown files with YAML frontmatter in
    tier folders (short_term, mid_term, long_term, archive).

    \b
    Example:
      gitmem demo my-vault   # the bundled sample: a vault, a search, git log
      cd my-vault && gitmem add "Standing desk" "Arrives Friday." --type fact
      gitmem ls --tier short_term
    """
    ctx.ensure_object(dict)
    ctx.obj["vault_path"] = vault_path
    ctx.obj["author"] = author


def _short(memory: Memory) -> str:
    return memory.id[:8]


def _commit_note(memory: Memory) -> str:
    return f"  (commit {memory.commit[:7]})" if memory.commit else ""


def _read_body(body: str | None, body_file: Any) -> str | None:
    if body is not None and body_file is not None:
        raise click.UsageError("give the body as an argument or --body-file, not both")
    if body_file is not None:
        return body_file.read()
    return body


def _meta_options(func: Callable[..., Any]) -> Callable[..., Any]:
    from ..memory.schema import MEMORY_TYPES, SCOPES
    options = [
        click.option("--importance", type=click.IntRange(1, 5), help="1 (low) to 5 (critical)."),
        click.option("--confidence", type=click.IntRange(1, 5), help="1 (speculative) to 5 (verified)."),
        click.option("--strength", type=click.FloatRange(0, 1), help="Memory strength, 0 to 1."),
        click.option("--scope", type=click.Choice(SCOPES), help="Visibility scope."),
        click.option("--summary", help="One-line summary."),
        click.option("--source", help="Where the memory came from (session, URL ...)."),
        click.option("--expires", help="ISO date after which a task/reminder expires."),
        click.option("--entity", "entities", multiple=True, help="An entity named by the memory (repeatable)."),
        click.option("--alias", "aliases", multiple=True, help="An Obsidian alias (repeatable)."),
        click.option("--type", "mtype", type=click.Choice(MEMORY_TYPES), help="Memory type."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _collect_meta(**values: Any) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items()
            if v is not None and v != ()}


# ------------------------------------------------------------------ commands
_as_of_option = click.option(
    "--as-of", "as_of", metavar="DATE|REV",
    help="The vault as it was then: an ISO 8601 date or time (a bare date means the end of "
         "that day), HEAD~N or a commit id.")


@contextlib.contextmanager
def _history_progress(show: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on a terminal while the vault's history is indexed (first as-of use)."""
    if not show or not sys.stderr.isatty():
        yield None
        return
    with click.progressbar(length=1, label="indexing history", file=sys.stderr) as bar:
        def progress(done: int, total: int) -> None:
            bar.length = total
            bar.update(done - bar.pos)
        yield progress


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--from", "from_dir", type=click.Path(exists=True, file_okay=False),
              help="Import the Markdown notes of a folder (e.g. sample-vault or an Obsidian vault).")
@click.option("--adopt", is_flag=True,
              help="Make the existing folder DIRECTORY itself a vault, every note where it is.")
@click.option("--tier", "import_tier", default="long_term", show_default=True,
              help="Tier of the notes outside the tier folders (imported with --from, or adopted).")
@json_option
@click.pass_context
def init(ctx: click.Context, directory: str, from_dir: str | None, adopt: bool, import_tier: str,
         as_json: bool) -> None:
    """Create a vault in DIRECTORY (a git repository with tier folders).

    With --from, notes in the folder's tier folders keep their tier; every
    other note goes under --tier with its folders (Projects/x.md ->
    long_term/Projects/x.md). Hidden folders (.obsidian, .trash) and symbolic
    links are skipped.

    With --adopt, the folder of notes DIRECTORY (an Obsidian vault ...) becomes
    the vault in place: no note is moved or rewritten, every note outside the
    tier folders is a memory of --tier where it is, and attachments,
    .obsidian/ and other files that are not notes are left alone (not committed).
    gitmem adds .gitmem.yaml, the tier folders for what agents write, MEMORY.md
    (unless the folder has its own) and .gitignore/.gitattributes if missing.

    \b
    Examples:
      gitmem init my-vault
      gitmem init --from ~/ObsidianVault --tier mid_term my-vault
      gitmem init --adopt ~/ObsidianVault
    """
    from ..vault import Vault
    if adopt:
        vault = Vault.init(directory, from_dir=from_dir, author=ctx.obj.get("author"), import_tier=import_tier,
                           person=True, adopt=True)
    elif from_dir is not None and not as_json and sys.stderr.isatty():
        with click.progressbar(length=1, label="importing", file=sys.stderr) as bar:
            def progress(done: int, total: int) -> None:
                bar.length = total
                bar.update(done - bar.pos)
            vault = Vault.init(directory, from_dir=from_dir, author=ctx.obj.get("author"),
                               import_tier=import_tier, progress=progress, person=True)
    else:
        vault = Vault.init(directory, from_dir=from_dir, author=ctx.obj.get("author"),
                           import_tier=import_tier, person=True)
    ctx.call_on_close(vault.close)
    count = len(vault.list(status=None))
    head = vault.head
    report = vault.import_report or {}
    data = {"path": str(vault.root), "memories": count, "commit": head}
    text = f"initialised vault {vault.root} with {count} memories"
    if from_dir is not None:
        data["imported"] = {k: report.get(k) for k in ("source", "imported", "outside_tiers", "import_tier",
                                                        "skipped")}
        text += f"\nimported {report.get('imported', 0)} notes from {report.get('source')}"
        if report.get("outside_tiers"):
            text += f" ({report['outside_tiers']} from outside the tier folders, now under {import_tier}/)"
    if adopt:
        data["adopted"] = {k: report.get(k) for k in ("imported", "outside_tiers", "outside_notes",
                                                       "not_notes_left_alone", "hidden_folders_left_alone",
                                                       "memory_md", "skipped")}
        text += (f"\nadopted {report.get('imported', 0)} notes where they are "
                 f"({report.get('outside_tiers', 0)} outside the tier folders, as {import_tier} memories)")
        others = report.get("not_notes_left_alone")
        left = [f"{others} files that are not notes"] if others else []
        left += report.get("hidden_folders_left_alone") or []
        text += f"\nleft alone (not committed): {', '.join(left)}" if left else ""
        text += "" if report.get("memory_md") else "\nMEMORY.md is the folder's own note: gitmem writes no index"
    elif report.get("outside_notes_ignored"):
        ignored = report["outside_notes_ignored"]
        data["outside_notes_ignored"] = ignored
        text += (f"\nnote: {ignored} note{'s are' if ignored != 1 else ' is'} outside the tier folders"
                 f" of {vault.root}, not memories;"
                 f" 'gitmem init --adopt DIR' makes a folder of notes a vault with every note where it is")
    text += f"{f'  (commit {head[:7]})' if head else ''}"
    text += "".join(f"\nskipped   {left['path']}  ({left['reason']})" for left in report.get("skipped", []))
    emit(data, as_json, text)


def _one_newline(body: str | None) -> str | None:
    """A body from the command line ends with exactly one newline (none if empty)."""
    if body is None:
        return None
    body = body.rstrip("\n")
    return body + "\n" if body else body


@cli.command()
@click.argument("title")
@click.argument("body", required=False)
@click.option("--body-file", type=click.File("r", encoding="utf-8"), help="Read the body from a file ('-' = stdin).")
@click.option("--tier", help="Tier folder (default: the first, short_term).")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--path", "path", help="Explicit vault-relative file path under a tier folder.")
@click.option("--supersedes", help="Id (or title, path) of a memory this one supersedes (a correction).")
@click.option("--dedup", is_flag=True,
              help="Skip if an identical or near-identical memory exists; supersede a close one.")
@click.option("--external-id", "external_write_id",
              help="Idempotency key: adding the same key again returns the first memory.")
@click.option("--force", is_flag=True, help="Allow superseding a protected memory.")
@_meta_options
@json_option
@click.pass_context
def add(ctx: click.Context, title: str, body: str | None, body_file: Any, tier: str | None,
        tags: tuple[str, ...], path: str | None, mtype: str | None, dedup: bool, force: bool,
        as_json: bool, **meta: Any) -> None:
    """Add a memory titled TITLE (one commit, or none when --dedup finds it exists).

    \b
    Example:
      gitmem add "Maya prefers dark mode" "Use dark themes in every editor." \\
          --type preference --tier long_term --tag ui --importance 4
      gitmem add "Dark mode" "Maya prefers dark mode." --type preference --dedup
    """
    vault = open_vault(ctx)
    result = vault.write(_one_newline(_read_body(body, body_file)) or "", title=title, type=mtype or "memory",
                         tier=tier, tags=list(tags), path=path, dedup=dedup, force=force,
                         **_collect_meta(**meta))
    memory = result.memory

    def text() -> str:
        if result.status == "skipped":
            why = {"identical": "an identical memory exists",
                   "external_write_id": "this external id was already written",
                   "similar": f"a memory {result.similarity:.0%} similar exists"}.get(result.reason or "", "")
            return f"skipped: {why}: {_short(memory)}  {memory.path}"
        extra = (f"\nsupersedes {', '.join(i[:8] for i in result.superseded)}"
                 if result.superseded else "")
        return f"added {_short(memory)}  {memory.path}{_commit_note(memory)}{extra}"

    emit({**memory.to_dict(), "result": result.status, "duplicate_of": result.duplicate_of,
          "superseded": result.superseded, "similarity": result.similarity}, as_json, text)


@cli.command()
@click.argument("ref")
@click.option("--at", "rev", help="Show the version at a commit id, ~N (N versions back) or ISO date.")
@json_option
@click.pass_context
def show(ctx: click.Context, ref: str, rev: str | None, as_json: bool) -> None:
    """Print a memory (REF: id, id prefix, path, file name or title).

    \b
    Example:
      gitmem show maya-prefers-dark-mode --at '~1'
    """
    from ..memory.markdown import render
    vault = open_vault(ctx)
    memory = vault.show_at(ref, rev) if rev else vault.get(ref)
    emit(memory.to_dict(), as_json, lambda: f"# {memory.path}\n{render(memory.meta, memory.body)}".rstrip("\n"))


@cli.command(name="ls")
@click.option("--tier", multiple=True, help="Only this tier (repeatable).")
@click.option("--type", "mtype", multiple=True, help="Only this type (repeatable).")
@click.option("--tag", "tags", multiple=True, help="Only memories with this tag (repeatable: all must match).")
@click.option("--status", default="active", show_default=True,
              help="active, superseded, archived, deleted, or 'all'.")
@click.option("--scope", help="Only this scope.")
@click.option("--agent", help="Only memories written by this agent.")
@click.option("--limit", type=click.IntRange(1), help="At most this many.")
@_as_of_option
@json_option
@click.pass_context
def ls(ctx: click.Context, tier: tuple[str, ...], mtype: tuple[str, ...], tags: tuple[str, ...],
       status: str, scope: str | None, agent: str | None, limit: int | None, as_of: str | None,
       as_json: bool) -> None:
    """List memories, most recently updated first.

    \b
    Examples:
      gitmem ls --tier long_term --type goal --type rule
      gitmem ls --as-of 2026-03-01
    """
    vault = open_vault(ctx)
    memories = vault.list(tier=tier or None, type=mtype or None, tags=tags or None,
                          status=None if status == "all" else status, scope=scope, agent=agent,
                          limit=limit, as_of=as_of)
    emit([m.to_dict(body=False) for m in memories], as_json, lambda: _table(memories))


def _table(memories: Iterable[Memory]) -> str:
    rows = [f"{m.id[:8]}  {m.tier:<10}  {m.type:<11}  {str(m.meta.get('updated', ''))[:10]}  {m.title}"
            + (f"  [{', '.join(m.tags)}]" if m.tags else "") + ("" if m.status == "active" else f"  ({m.status})")
            for m in memories]
    return "\n".join(rows) if rows else "(no memories)"


@cli.command(name="edit")
@click.argument("ref")
@click.option("--body", help="Replace the whole body with this text.")
@click.option("--body-file", type=click.File("r", encoding="utf-8"), help="Replace the body with a file ('-' = stdin).")
@click.option("--append", help="Append a paragraph to the body.")
@click.option("--replace", nargs=2, metavar="OLD NEW", help="Replace OLD (must occur exactly once) with NEW.")
@click.option("--title", help="New title (the file name stays, so links keep working).")
@click.option("--tag", "add_tags", multiple=True, help="Add a tag (repeatable).")
@click.option("--untag", "remove_tags", multiple=True, help="Remove a tag (repeatable).")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Set a frontmatter field (KEY= with no value removes it).")
@click.option("--force", is_flag=True, help="Allow changing a protected memory (recorded in the commit).")
@_meta_options
@json_option
@click.pass_context
def edit(ctx: click.Context, ref: str, body: str | None, body_file: Any, append: str | None,
         replace: tuple[str, str] | None, title: str | None, add_tags: tuple[str, ...],
         remove_tags: tuple[str, ...], settings: tuple[str, ...], force: bool, mtype: str | None,
         as_json: bool, **meta: Any) -> None:
    """Change a memory (one commit; none, "unchanged", if nothing changes). Alias: update.

    \b
    Examples:
      gitmem edit maya-prefers-dark-mode --append "Also in the terminal."
      gitmem edit 3f6c2a9e --replace "VS Code" "Neovim" --tag editor
    """
    import yaml
    fields = _collect_meta(**meta)
    if mtype:
        fields["type"] = mtype
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--set")
        fields[key.strip()] = yaml.safe_load(value) if value.strip() else None
    vault = open_vault(ctx)
    memory = vault.update(ref, body=_one_newline(_read_body(body, body_file)), append=_one_newline(append),
                          replace=replace or None, title=title,
                          add_tags=add_tags, remove_tags=remove_tags, meta=fields, force=force)
    emit(memory.to_dict(), as_json, lambda: f"updated {_short(memory)}  {memory.path}{_commit_note(memory)}"
         if memory.commit else f"unchanged {_short(memory)}  {memory.path}")


cli.add_command(edit, name="update")


@cli.command(name="mv")
@click.argument("ref")
@click.argument("tier")
@click.option("--force", is_flag=True, help="Allow moving a protected memory.")
@json_option
@click.pass_context
def mv(ctx: click.Context, ref: str, tier: str, force: bool, as_json: bool) -> None:
    """Move a memory to TIER (a pure-rename commit, then the change).

    \b
    Example:
      gitmem mv maya-prefers-dark-mode long_term
    """
    vault = open_vault(ctx)
    memory = vault.move(ref, tier, force=force)
    emit(memory.to_dict(), as_json, lambda: f"moved {_short(memory)}  -> {memory.path}{_commit_note(memory)}")


@cli.command(name="rm")
@click.argument("ref")
@click.option("--hard", is_flag=True, help="Remove the file (still recoverable from history).")
@click.option("--force", is_flag=True, help="Allow deleting a protected memory.")
@json_option
@click.pass_context
def rm(ctx: click.Context, ref: str, hard: bool, force: bool, as_json: bool) -> None:
    """Delete a memory: by default soft (status deleted, moved to archive).

    \b
    Example:
      gitmem rm 3f6c2a9e            # soft: archive/..., status: deleted
      gitmem restore 3f6c2a9e '~1'  # bring it back
    """
    vault = open_vault(ctx)
    memory = vault.delete(ref, hard=hard, force=force)
    how = "removed" if hard else "deleted (soft)"
    emit(memory.to_dict(), as_json, lambda: f"{how} {_short(memory)}  {memory.path}{_commit_note(memory)}")


@cli.command(name="log")
@click.argument("ref")
@json_option
@click.pass_context
def log(ctx: click.Context, ref: str, as_json: bool) -> None:
    """The commits that touched a memory, newest first, across moves. Alias: history.

    \b
    Example:
      gitmem log maya-prefers-dark-mode
    """
    vault = open_vault(ctx)
    versions = vault.history(ref)[::-1]
    emit([v.to_dict() for v in versions], as_json,
         lambda: "\n".join(f"~{i:<3} {v.commit[:8]}  {v.date}  {v.author.split(' <')[0]:<12}  {v.subject}"
                           for i, v in enumerate(versions)))


cli.add_command(log, name="history")


@cli.command()
@click.argument("ref")
@click.argument("old", required=False)
@click.argument("new", required=False)
@json_option
@click.pass_context
def diff(ctx: click.Context, ref: str, old: str | None, new: str | None, as_json: bool) -> None:
    """Unified diff of a memory between versions (default: previous version -> now).

    OLD and NEW are commit ids, ~N (N versions back) or ISO dates.

    \b
    Example:
      gitmem diff maya-prefers-dark-mode '~2' '~0'
    """
    vault = open_vault(ctx)
    text = vault.diff(ref, old, new)
    emit({"diff": text}, as_json, lambda: text.rstrip("\n") or "(no differences)")


@cli.command()
@click.argument("ref")
@click.argument("rev")
@click.option("--force", is_flag=True, help="Allow overwriting a protected memory.")
@json_option
@click.pass_context
def restore(ctx: click.Context, ref: str, rev: str, force: bool, as_json: bool) -> None:
    """Bring a memory back to version REV (a new commit; works after rm, also --hard).

    \b
    Example:
      gitmem restore maya-prefers-dark-mode '~1'
    """
    vault = open_vault(ctx)
    memory = vault.restore(ref, rev, force=force)
    emit(memory.to_dict(), as_json, lambda: f"restored {_short(memory)}  {memory.path}{_commit_note(memory)}")


@cli.command()
@click.argument("query")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 1000), help="How many results.")
@click.option("--offset", default=0, type=click.IntRange(0), help="Skip this many results (paging).")
@click.option("--tier", help="Only this tier.")
@click.option("--type", "mtype", help="Only this type.")
@click.option("--tag", help="Only memories with this tag.")
@click.option("--scope", help="Only this scope.")
@click.option("--agent", help="Only memories written by this agent.")
@click.option("--status", help="Only this status (also finds archived/deleted/superseded).")
@click.option("--all", "include_inactive", is_flag=True, help="Include archived, deleted and superseded memories.")
@click.option("--hybrid/--lexical", "hybrid", default=None,
              help="Rank with embedding vectors too, or by words only (default: hybrid when the "
                   "embed extra is installed and vectors exist).")
@_as_of_option
@json_option
@click.pass_context
def search(ctx: click.Context, query: str, limit: int, offset: int, tier: str | None, mtype: str | None,
           tag: str | None, scope: str | None, agent: str | None, status: str | None,
           include_inactive: bool, hybrid: bool | None, as_of: str | None, as_json: bool) -> None:
    """Full-text search (BM25 with stemming).

    \b
    Syntax: words, "exact phrase", AND / OR / NOT, prefix*, field filters
    tier: type: tag: scope: agent: status: id:, dates created:>2026-01-01,
    updated:2026-01-01..2026-03-31. A plain question works as is.

    \b
    Examples:
      gitmem search "dbt backfill"
      gitmem search 'deploy AND NOT staging type:rule'
      gitmem search "running" --tier long_term --json
      gitmem search "standing desk" --as-of 2026-03-01
    """
    vault = open_vault(ctx)
    with _history_progress(as_of is not None and not as_json) as progress:
        page = vault.search(query, limit=limit, offset=offset, include_inactive=include_inactive,
                            as_of=as_of, progress=progress, hybrid=hybrid, tier=tier, type=mtype,
                            tag=tag, scope=scope, agent=agent, status=status)
    if page.notice:
        click.echo(f"notice: {page.notice}", err=True)
    emit(page.to_dict(), as_json, lambda: _hits(page))


def _hits(page: Any) -> str:
    lines = []
    for hit in page.hits:
        lines.append(f"{hit.score:6.2f}  {hit.id[:8]}  {hit.tier:<10}  {hit.type:<11}  {hit.title}")
        if hit.snippet:
            lines.append(f"        {hit.snippet}")
    about = "about " if page.total_estimated else ""
    shown = f"{len(page.hits)} of {about}{page.total} result(s)" if page.total else "no results"
    if page.suggestion:
        shown += f"; did you mean: {page.suggestion}"
    if page.commit:
        shown += f" (as of commit {page.commit[:7]})"
    lines.append(shown)
    return "\n".join(lines)


@cli.command()
@json_option
@click.pass_context
def reindex(ctx: click.Context, as_json: bool) -> None:
    """Rebuild the search index from the files (it is a cache; nothing is lost).

    \b
    Example:
      gitmem reindex
    """
    vault = open_vault(ctx)
    total = len(vault.list(status=None))
    if as_json or not sys.stderr.isatty():
        count = vault.reindex()
    else:
        with click.progressbar(length=total, label="indexing", file=sys.stderr) as bar:
            count = vault.reindex(progress=lambda n: bar.update(n - bar.pos))
    emit({"indexed": count}, as_json, f"indexed {count} memories")


@cli.command()
@click.option("--repair", is_flag=True,
              help="Fix what can be fixed: search index, vectors file, .git/index, temp files.")
@json_option
@click.pass_context
def doctor(ctx: click.Context, repair: bool, as_json: bool) -> None:
    """Check the vault: frontmatter, metadata, search index, vectors file,
    uncommitted edits, .git/index, temp files, repository integrity. Exit 1 if a
    check fails.

    \b
    Example:
      gitmem doctor --repair
    """
    vault = open_vault(ctx)
    findings = vault.doctor(repair=repair)
    unresolved = [f for f in findings if not f.ok and not f.repaired]

    def text() -> str:
        lines = []
        for f in findings:
            mark = "ok  " if f.ok else ("fixed" if f.repaired else "FAIL")
            lines.append(f"{mark:<5} {f.check:<12} {f.summary}")
            lines += [f"      {p}: {f.details[p]}" if p in f.details else f"      {p}" for p in f.paths[:20]]
        return "\n".join(lines)

    emit({"ok": not unresolved, "findings": [f.to_dict() for f in findings]}, as_json, text)
    if unresolved:
        ctx.exit(1)


from .watch import hook, hooks, watch  # noqa: E402 - registered after the core commands

cli.add_command(watch)
cli.add_command(hooks)
cli.add_command(hook)
from .layout import layout  # noqa: E402 - registered after the core commands

cli.add_command(layout)
from .purge import purge  # noqa: E402 - registered after the core commands

cli.add_command(purge)
from .embed import embed  # noqa: E402 - registered after the core commands

cli.add_command(embed)
from .evaluation import eval_command  # noqa: E402 - registered after the core commands

cli.add_command(eval_command)

from .lifecycle import archive, compress, context, links, merge, reflect, unarchive  # noqa: E402

for _command in (context, compress, archive, unarchive, merge, reflect, links):
    cli.add_command(_command)

from .tools import mcp, tools  # noqa: E402 - registered after the core commands

cli.add_command(tools)
cli.add_command(mcp)

from .sync import clone, config, conflicts, remote, sync  # noqa: E402 - registered after the core commands

for _command in (clone, remote, sync, conflicts, config):
    cli.add_command(_command)
from .status import status  # noqa: E402 - registered after the core commands

cli.add_command(status)
from .trust import accept, why  # noqa: E402 - registered after the core commands

cli.add_command(accept)
cli.add_command(why)

from .agent import agent  # noqa: E402 - registered after the core commands

cli.add_command(agent)
from .view import view  # noqa: E402 - registered after the core commands

cli.add_command(view)
from .demo import demo  # noqa: E402 - registered after the core commands

cli.add_command(demo)
from .importing import export, import_command  # noqa: E402 - registered after the core commands

cli.add_command(import_command)
cli.add_command(export)


def _exit_on_signal(signum: int, _frame: Any) -> None:
    import signal
    for name in ("SIGTERM", "SIGHUP"):  # once exiting, a second signal does not cut close() short
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    """Console entry point.

    SIGTERM and SIGHUP end the command like ``sys.exit``: the vault is closed
    (``.git/index`` brought up to date) before the process exits.  A command
    that handles them itself (watch, mcp) installs its own handler."""
    import signal
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _exit_on_signal)
    cli.main(args=argv, prog_name="gitmem")


if __name__ == "__main__":  # pragma: no cover
    main()
