"""The native ``gitmem`` tool profile: everything the Vault does, as one coherent set.

Every tool takes memories by ``ref`` (an id, a unique id prefix, a path, a
file name or an exact title), returns plain JSON, and writes at most one
commit authored by the session's agent.  Protected memories (goals, rules,
constraints) cannot be changed through these tools: there is no ``force``
argument on purpose; a person uses ``gitmem ... --force``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from ..memory.provenance import TOOL, make_origin
from .registry import ToolContext, tool

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.schema import Memory
    from ..search.results import SearchPage

__all__: list[str] = []

_CONTENT = 1_000_000
_REF = "The memory: its id (or a unique id prefix), path, file name or exact title."
MemoryType = Literal["memory", "goal", "rule", "episodic", "semantic", "procedural", "prospective",
                     "fact", "skill", "preference", "constraint", "task", "correction"]
Tier = Literal["short_term", "mid_term", "long_term", "archive"]
LiveTier = Literal["short_term", "mid_term", "long_term"]
Scope = Literal["thread", "user", "persona", "organization"]
Status = Literal["active", "superseded", "archived", "deleted", "all"]

Ref = Annotated[str, Field(description=_REF, min_length=1, max_length=1024)]
Importance = Annotated[int, Field(description="1 to 5.", ge=1, le=5)]
Summary = Annotated[str, Field(description="One-line summary.", max_length=500)]
Tag = Annotated[str, Field(description="Only memories with this tag.", max_length=200)]
OfType = Annotated[MemoryType, Field(description="Only this type.")]
Tags = Annotated[list[str], Field(max_length=50)]


def _brief(memory: Memory) -> dict[str, Any]:
    """A memory without its body: what a write returns."""
    out = {"id": memory.id, "path": memory.path, "title": memory.title, "type": memory.type,
           "tier": memory.tier, "status": memory.status, "tags": memory.tags}
    if memory.commit:
        out["commit"] = memory.commit
    return out


def _dict(value: Any) -> Any:
    return value.to_dict() if hasattr(value, "to_dict") else value




@tool("gitmem", "memory_add", title="Add memory")
def add(ctx: ToolContext,
        content: Annotated[str, Field(description="The memory text (Markdown).", min_length=1, max_length=_CONTENT)],
        title: Annotated[str, Field(description="A short distinctive title (default: the first line of content).",
                                    max_length=200)] | None = None,
        type: Annotated[MemoryType, Field(description="Kind of memory (default memory). goal, rule and constraint "
                                                      "are protected.")] | None = None,
        tier: Annotated[LiveTier, Field(description="Where it starts (default short_term).")] | None = None,
        tags: Annotated[Tags, Field(description="Tags for filtering.")] | None = None,
        scope: Annotated[Scope, Field(description="Visibility scope.")] | None = None,
        importance: Annotated[Importance, Field(description="1 (low) to 5 (critical); default 3.")] | None = None,
        confidence: Annotated[Importance, Field(description="1 (speculative) to 5 (verified); default 3.")
                              ] | None = None,
        summary: Summary | None = None,
        entities: Annotated[list[str], Field(description="People, projects, tools and concepts it mentions.",
                                             max_length=200)] | None = None,
        related: Annotated[list[str], Field(description="Ids of related memories.", max_length=100)] | None = None,
        supersedes: Annotated[Ref, Field(description="A memory this one replaces (it is marked superseded in the "
                                                     "same commit).")] | None = None,
        source: Annotated[str, Field(description="Where it came from (a URL, a conversation id ...); default: the "
                                                 "MCP conversation it was written in.", max_length=1000)] | None = None,
        context: Annotated[str, Field(description="What it answers or continues, in a line (e.g. the question "
                                                  "asked); searched with low weight.", max_length=500)] | None = None,
        expires: Annotated[str, Field(description="ISO 8601 date or time after which it no longer holds.",
                                      max_length=40)] | None = None,
        dedup: Annotated[bool, Field(description="Skip or supersede near-duplicates (default false).")] = False,
        external_write_id: Annotated[str, Field(description="Upsert key: the same key again updates that memory "
                                                            "(or writes nothing when the content is the same).",
                                                min_length=1, max_length=200)] | None = None,
        from_tool: Annotated[str, Field(description="Set when the text came from a tool's output, a web page or "
                                                    "a document rather than from you or the user: name it (a "
                                                    "URL, a tool name). The memory is then recorded as tool "
                                                    "output, the least trusted origin.",
                                        min_length=1, max_length=200)] | None = None) -> dict[str, Any]:
    """Store a new memory (one Markdown file, one git commit). Use for anything worth remembering across
    sessions: a fact, a preference, a decision, a task. The title defaults to the content's first line.
    With dedup: true a near-duplicate (>=92% similar) is skipped and a close variant (>=80%) supersedes
    the old memory; identical content is never stored twice; similarity respects word order, and a text
    with other numbers or a negation is never skipped. external_write_id is an upsert key: the same key
    with different content updates that memory (status updated, one commit), with the same content
    nothing is written (skipped). Returns {"id", "path", "status": "created" | "skipped" | "superseded" |
    "updated", "duplicate_of", "superseded", "similarity", "commit"}, plus "notice" when a goal, rule or
    constraint you write is held as a proposal until a person accepts it."""
    # Each memory of a session follows the one written before it (an upsert may update an
    # older memory instead: not linked), and shares the session's source unless given one.
    session = ctx.conversation(source, link=external_write_id is None)
    author = ctx.author
    if from_tool is not None and author is not None:   # the agent says: not my words (provenance.py)
        author = replace(author, origin=make_origin(TOOL, from_tool))
    result = ctx.vault.write(content, title=title, type=type, tier=tier, tags=tags, scope=scope,
                             importance=importance, confidence=confidence, summary=summary,
                             entities=entities, related=related, supersedes=supersedes,
                             context=context, expires=expires, dedup=dedup,
                             external_write_id=external_write_id, upsert=True, author=author,
                             **session)
    ctx.wrote(result.id, result.status)
    return {"id": result.id, "path": result.path, "status": result.status,
            "duplicate_of": result.duplicate_of, "superseded": list(result.superseded or []),
            "similarity": result.similarity, "commit": result.commit}


@tool("gitmem", "memory_read", read_only=True, title="Read memory")
def read(ctx: ToolContext, ref: Ref,
         version: Annotated[str, Field(description="Optional past version: commit id, ~N or ISO date.",
                                       max_length=80)] | None = None) -> dict[str, Any]:
    """Read one memory in full: frontmatter fields and body. With `version` (a commit id, ~N for N
    versions back, or an ISO date) read it as it was then. Read-only. Returns {"id", "path", "title",
    "type", "tier", "status", "tags", ..., "body"}."""
    memory = ctx.vault.show_at(ref, version) if version else ctx.vault.get(ref)
    return memory.to_dict()


@tool("gitmem", "memory_list", read_only=True, title="List memories")
def list_memories(ctx: ToolContext,
                  tier: Annotated[Tier, Field(description="Only this tier.")] | None = None,
                  type: OfType | None = None,
                  tag: Tag | None = None,
                  status: Annotated[Status, Field(description="Only this status (default active; all = every "
                                                              "status).")] = "active",
                  limit: Annotated[int, Field(description="At most this many (default 50).", ge=1, le=1000)] = 50
                  ) -> dict[str, Any]:
    """List memories (without bodies), most recently updated first, filtered by tier, type, tag or
    status (default active). Read-only. Returns {"memories": [{"id", "path", "title", ...}]}."""
    memories = ctx.vault.list(tier=tier, type=type, tags=[tag] if tag else None,
                              status=None if status == "all" else status, limit=limit)
    return {"memories": [m.to_dict(body=False) for m in memories]}


@tool("gitmem", "memory_update", destructive=True, idempotent=True, title="Update memory")
def update(ctx: ToolContext, ref: Ref,
           content: Annotated[str, Field(description="New body (replaces the old one).", max_length=_CONTENT)
                              ] | None = None,
           append: Annotated[str, Field(description="Text to add at the end as a new paragraph.", min_length=1,
                                        max_length=_CONTENT)] | None = None,
           old_text: Annotated[str, Field(description="Exact text to replace (must occur exactly once).",
                                          min_length=1, max_length=_CONTENT)] | None = None,
           new_text: Annotated[str, Field(description="Replacement for old_text.", max_length=_CONTENT)
                               ] | None = None,
           title: Annotated[str, Field(description="New title.", min_length=1, max_length=200)] | None = None,
           tags: Annotated[Tags, Field(description="New tag list (replaces the old one).")] | None = None,
           add_tags: Annotated[Tags, Field(description="Tags to add.")] | None = None,
           remove_tags: Annotated[Tags, Field(description="Tags to remove.")] | None = None,
           importance: Importance | None = None,
           confidence: Importance | None = None,
           summary: Summary | None = None) -> dict[str, Any]:
    """Change a memory in one git commit (the previous version stays in history). Give any of: content
    (replaces the body), append (adds a paragraph), old_text + new_text (exact replacement; old_text must
    occur exactly once), title, tags (replace) / add_tags / remove_tags, importance, confidence, summary.
    Protected memories (goal, rule, constraint) are refused. Returns the memory without its body, with
    "commit" only when something changed."""
    from ..errors import InvalidInput
    if (old_text is None) != (new_text is None):
        raise InvalidInput("old_text and new_text go together", hint="Pass both, or neither.")
    meta = {k: v for k, v in (("importance", importance), ("confidence", confidence), ("summary", summary))
            if v is not None}
    memory = ctx.vault.update(ref, body=content, append=append,
                              replace=(old_text, new_text) if old_text is not None and new_text is not None
                              else None,
                              title=title, tags=tags, add_tags=add_tags or (), remove_tags=remove_tags or (),
                              meta=meta or None, author=ctx.author)
    return _brief(memory)


@tool("gitmem", "memory_move", idempotent=True, title="Move memory")
def move(ctx: ToolContext, ref: Ref,
         tier: Annotated[Tier, Field(description="The destination tier.")]) -> dict[str, Any]:
    """Move a memory to another tier (short_term -> mid_term -> long_term; archive to retire it): a
    tracked rename in git (a rename commit, then the change). Protected memories are refused. Returns the memory
    without its body."""
    return _brief(ctx.vault.move(ref, tier, author=ctx.author))


@tool("gitmem", "memory_delete", destructive=True, idempotent=True, title="Delete memory")
def delete(ctx: ToolContext, ref: Ref,
           hard: Annotated[bool, Field(description="Remove the file instead of archiving it (default false).")
                           ] = False) -> dict[str, Any]:
    """Delete a memory (committed to git). Default soft: status deleted, moved to the archive tier, left out
    of search, still readable. hard: true removes the file. Both can be undone with memory_restore.
    Protected memories are refused. Returns the memory without its body."""
    return _brief(ctx.vault.delete(ref, hard=hard, author=ctx.author))

#: The default and the least character budget of a compact memory_search result.
_COMPACT_BUDGET = 2000
_COMPACT_MIN = 300
_SNIPPET_LINE = 160     # most characters of a compact hit's snippet
_TITLE_LINE = 100       # ... and of its title


def _one_line(text: str, most: int) -> str:
    """``text`` on one line without bold marks, cut at a word to at most ``most`` characters."""
    text = " ".join(text.replace("**", "").split())
    if len(text) <= most:
        return text
    cut = text[:most - 1]
    space = cut.rfind(" ")
    if space > most // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "\u2026"


def _compact_page(page: SearchPage, offset: int, budget: int) -> dict[str, Any]:
    """A search page as {id, title, snippet} hits with one-line snippets, as many (in rank
    order) as fit ``budget`` characters of JSON, counting the rest in ``left_out``."""
    import json

    def size(value: dict[str, Any]) -> int:
        return len(json.dumps(value, ensure_ascii=False))   # as the result is sent (render_result)

    head: dict[str, Any] = {"hits": [], "total": page.total, "mode": page.mode}
    for key in ("suggestion", "commit", "notice"):
        if getattr(page, key):
            head[key] = getattr(page, key)
    rows = [{"id": h.id, "title": _one_line(h.title, _TITLE_LINE), "snippet": _one_line(h.snippet, _SNIPPET_LINE)}
            for h in page.hits]

    def result(shown: int) -> dict[str, Any]:
        out = {**head, "hits": rows[:shown], "left_out": len(rows) - shown}
        if shown < len(rows):
            out["hint"] = (f"{len(rows) - shown} more did not fit {budget} characters: memory_search with "
                           f"offset {offset + shown} shows them; memory_read an id reads it in full")
        return out

    shown = 0
    while shown < len(rows) and size(result(shown + 1)) <= budget:
        shown += 1
    return result(shown)


@tool("gitmem", "memory_search", read_only=True, title="Search memories")
def search(ctx: ToolContext,
           query: Annotated[str, Field(description="What to look for.", min_length=1, max_length=2000)],
           limit: Annotated[int, Field(description="How many results (default 10).", ge=1, le=100)] = 10,
           offset: Annotated[int, Field(description="Skip this many (paging).", ge=0, le=10_000)] = 0,
           tier: Annotated[Tier, Field(description="Only this tier.")] | None = None,
           type: OfType | None = None,
           tag: Tag | None = None,
           scope: Annotated[Scope, Field(description="Only this scope.")] | None = None,
           include_inactive: Annotated[bool, Field(description="Also archived, deleted and superseded "
                                                               "memories.")] = False,
           as_of: Annotated[str, Field(description="Search the vault as it was at this date or time (ISO 8601; "
                                                   "a bare date means the end of that day), HEAD~N or commit id.",
                                       min_length=1, max_length=80)] | None = None,
           compact: Annotated[bool, Field(description="Return each hit as {id, title, snippet} with a one-line "
                                                      "snippet, the whole result within budget_chars (default "
                                                      "false).")] = False,
           budget_chars: Annotated[int, Field(description="The most characters the compact result may take "
                                                          "(default 2000); setting it implies compact.",
                                              ge=_COMPACT_MIN, le=100_000)] | None = None) -> dict[str, Any]:
    """Full-text search (BM25, stemming). A plain question works; so do "exact phrase", AND / OR / NOT,
    prefix*, and field filters in the query (tier: type: tag: scope: created:>2026-01-01). Archived,
    deleted and superseded memories are left out unless include_inactive. With as_of (a date such as
    2026-03-01, HEAD~N or a commit id), searches the vault as it was then. Read-only. Returns {"hits":
    [{"id", "path", "title", "tier", "type", "tags", "score", "updated", "snippet"}], "total",
    "suggestion", "mode"}; with as_of, also "commit" on the result and on each hit; "notice" when the
    search could not be done as usual (e.g. by words only). compact (or budget_chars) returns the same
    ranking in fewer characters: {"hits": [{"id", "title", "snippet"}], "total", "mode", "left_out"}, the
    hits that fit budget_chars (default 2000) in rank order; left_out counts this page's hits that did
    not fit (offset pages on to them). Then memory_read the few you need in full."""
    page = ctx.vault.search(query, limit=limit, offset=offset, include_inactive=include_inactive,
                            as_of=as_of, tier=tier, type=type, tag=tag, scope=scope)
    if compact or budget_chars is not None:
        return _compact_page(page, offset, _COMPACT_BUDGET if budget_chars is None else budget_chars)
    return page.to_dict()


@tool("gitmem", "memory_history", read_only=True, title="Memory history")
def history(ctx: ToolContext, ref: Ref) -> dict[str, Any]:
    """The versions of a memory, newest first, across moves and renames: commit, date, author (which
    agent or person), subject, op. Read-only. Returns {"versions": [...]}."""
    return {"versions": [v.to_dict() for v in ctx.vault.history(ref)[::-1]]}


@tool("gitmem", "memory_diff", read_only=True, title="Diff memory versions")
def diff(ctx: ToolContext, ref: Ref,
         old: Annotated[str, Field(description="Older version (default ~1).", max_length=80)] | None = None,
         new: Annotated[str, Field(description="Newer version (default: now).", max_length=80)] | None = None
         ) -> dict[str, Any]:
    """Unified diff of a memory between two versions (commit id, ~N or ISO date; default: the previous
    version against now). Read-only. Returns {"diff": text} ("" when equal)."""
    return {"diff": ctx.vault.diff(ref, old, new)}


@tool("gitmem", "memory_restore", destructive=True, idempotent=True, title="Restore memory version")
def restore(ctx: ToolContext, ref: Ref,
            version: Annotated[str, Field(description="The version to restore.", min_length=1, max_length=80)]
            ) -> dict[str, Any]:
    """Bring a memory back to an earlier version (also after delete): one new git commit, nothing is
    rewritten. version: a commit id, ~N (N versions back) or an ISO date. Returns the memory without
    its body."""
    return _brief(ctx.vault.restore(ref, version, author=ctx.author))


@tool("gitmem", "memory_compress_batch", read_only=True, title="Collect memories to compress")
def compress_batch(ctx: ToolContext,
                   tier: Annotated[LiveTier, Field(description="The tier to compress.")],
                   older_than_days: Annotated[int, Field(description="Only memories not updated for this many "
                                                                     "days.", ge=0, le=36500)] | None = None,
                   tag: Tag | None = None,
                   type: OfType | None = None,
                   max_chars: Annotated[int, Field(description="Cap on the combined content's length.",
                                                   ge=1000, le=2_000_000)] | None = None) -> dict[str, Any]:
    """Step 1 of compressing a tier: collect its non-protected memories (optionally only older than N
    days, with a tag, or of a type) as one text to summarise. Read-only. Returns {"tier", "target_tier",
    "content", "files", "ids", "truncated"}. Then call memory_compress with your summary and the files."""
    batch = ctx.vault.compress_tier(tier, older_than_days=older_than_days, tag=tag, type=type,
                                    max_chars=max_chars)
    return _dict(batch)


@tool("gitmem", "memory_compress", destructive=True, title="Compress memories")
def compress(ctx: ToolContext,
             tier: Annotated[LiveTier, Field(description="The tier that was compressed.")],
             summary: Annotated[str, Field(description="Your summary of the batch content.", min_length=1,
                                           max_length=_CONTENT)],
             title: Annotated[str, Field(description="Title of the summary memory.", min_length=1,
                                         max_length=200)],
             files: Annotated[list[str], Field(description="The files memory_compress_batch returned.",
                                               min_length=1, max_length=10_000)],
             tags: Annotated[Tags, Field(description="Tags of the summary memory.")] | None = None
             ) -> dict[str, Any]:
    """Step 2 of compressing a tier: store your summary as a new memory in the next tier up and archive
    the source files in one write (tracked moves: a rename commit, then the change; the sources stay
    readable in archive/).
    Returns the summary memory without its body."""
    return _brief(ctx.vault.compress(tier, summary, title, files, tags=tags, author=ctx.author))


@tool("gitmem", "memory_archive", destructive=True, idempotent=True, title="Archive memories")
def archive(ctx: ToolContext,
            refs: Annotated[list[Ref], Field(description="The memories to archive.", min_length=1,
                                             max_length=1000)]) -> dict[str, Any]:
    """Retire memories to the archive tier, committed to git (tracked moves; still readable, left out of
    search by default). Protected memories are refused. Returns {"archived": [memories]}."""
    return {"archived": [_brief(m) for m in ctx.vault.archive(refs, author=ctx.author)]}


@tool("gitmem", "memory_unarchive", idempotent=True, title="Unarchive memory")
def unarchive(ctx: ToolContext, ref: Ref) -> dict[str, Any]:
    """Bring an archived memory back to the tier it came from (a tracked move, committed to git). Returns
    the memory without its body."""
    return _brief(ctx.vault.unarchive(ref, author=ctx.author))


@tool("gitmem", "memory_merge", destructive=True, title="Merge memories")
def merge(ctx: ToolContext,
          refs: Annotated[list[Ref], Field(description="The memories to merge (2 or more).", min_length=2,
                                           max_length=100)],
          content: Annotated[str, Field(description="Content of the merged memory (default: the sources "
                                                    "joined).", min_length=1, max_length=_CONTENT)] | None = None,
          title: Annotated[str, Field(description="Title of the merged memory.", min_length=1, max_length=200)
                           ] | None = None) -> dict[str, Any]:
    """Merge memories that say the same thing into one (committed to git): the new memory gets your content
    (or the sources' bodies joined), the union of tags, links to the sources; the sources are marked
    merged and archived. Returns {"memory": {...}, "sources": [ids]}."""
    result = ctx.vault.merge(refs, content, title=title, author=ctx.author)
    return {"memory": _brief(result.memory), "sources": list(result.sources)}


@tool("gitmem", "memory_reflect", destructive=True, title="Reflect (consolidate)")
def reflect(ctx: ToolContext,
            dry_run: Annotated[bool, Field(description="Only report what would change (default false).")] = False
            ) -> dict[str, Any]:
    """Consolidate the vault: expire what has expired, prune weak memories, merge near-identical ones,
    promote memories that are retrieved often; commits to git only when something changes. dry_run: true
    only reports the plan. Returns {"pruned", "merged", "promoted", "expired", "duration_ms", "busy", "commit",
    "plan"}."""
    return _dict(ctx.vault.reflect(dry_run, author=ctx.author))


@tool("gitmem", "memory_context", read_only=True, title="Protected context")
def context(ctx: ToolContext) -> dict[str, Any]:
    """The protected context: every active goal, rule and constraint, as Markdown ready to put in your
    prompt plus the memories themselves. Call it at the start of a session. Read-only. Returns
    {"markdown", "memories"}."""
    return _dict(ctx.vault.protected_context())


@tool("gitmem", "memory_links", read_only=True, title="Memory links")
def links(ctx: ToolContext, ref: Ref) -> dict[str, Any]:
    """A memory's links: outgoing ([[wikilinks]], related, supersedes, merged/archived into) and
    backlinks (memories pointing at it), each {id, path, title, relation}. Read-only. Returns
    {"outgoing": [...], "backlinks": [...]}."""
    return _dict(ctx.vault.links(ref))


@tool("gitmem", "memory_sync", idempotent=True, title="Sync with the remote")
def sync(ctx: ToolContext,
         action: Annotated[Literal["status", "now"], Field(description="status: only report the sync state; now: "
                                                                       "sync first (fetch, merge, push), then "
                                                                       "report.")] = "status",
         remote: Annotated[str, Field(description="The remote (default: the one the background sync uses, else "
                                                  "origin).", min_length=1, max_length=100)] | None = None
         ) -> dict[str, Any]:
    """See how this vault syncs with its git remote, or sync now. The vault may be shared with other
    machines and people through a git remote; a background sync (when the server runs with --sync)
    pushes your writes within seconds and brings theirs every interval. action "status" (default) is
    read-only; action "now" fetches, merges (memory by memory; a memory changed differently on both
    sides is kept twice: a conflict copy with status conflict) and pushes, then reports. Returns
    {"status": {"remote", "last_success", "last_attempt", "last_error", "failures", "ahead",
    "behind", "conflicts", "unresolved_conflicts", "background", "purges"}}; with "now", also "sync":
    {"action", "arrived", "pushed", "conflicts", "merged", "warnings"}. ahead: commits not pushed
    yet; behind: commits fetched but not merged yet."""
    status = ctx.vault.sync_status
    if action == "status":
        return {"status": status(remote)}
    chosen = remote or status()["remote"] or "origin"
    report = ctx.vault.sync(chosen, author=ctx.author)
    return {"status": status(chosen),
            "sync": {k: getattr(report, k) for k in ("action", "arrived", "pushed", "conflicts", "merged", "warnings")}}
