"""The native ``gitmem`` tool profile: everything the Vault does, as one coherent set.

Every tool takes memories by ``ref`` (an id, a unique id prefix, a path, a
file name or an exact title), returns plain JSON, and writes at most one
commit authored by the session's agent.  Protected memories (goals, rules,
constraints) cannot be changed through these tools: there is no ``force``
argument on purpose; a person uses ``gitmem ... --force``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .registry import ToolContext, boolean, integer, obj, string, strings, tool

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.schema import Memory

__all__: list[str] = []

_CONTENT = 1_000_000
_REF = "The memory: its id (or a unique id prefix), path, file name or exact title."
_TYPES = ["memory", "goal", "rule", "episodic", "semantic", "procedural", "prospective",
          "fact", "skill", "preference", "constraint", "task", "correction"]
_TIERS = ["short_term", "mid_term", "long_term", "archive"]
_LIVE = ["short_term", "mid_term", "long_term"]
_SCOPES = ["thread", "user", "persona", "organization"]
_STATUSES = ["active", "superseded", "archived", "deleted"]


def _ref(description: str = _REF) -> dict[str, Any]:
    return string(description, minLength=1, maxLength=1024)


def _enum(values: list[str], description: str) -> dict[str, Any]:
    return {"type": "string", "enum": values, "description": description}


def _brief(memory: "Memory") -> dict[str, Any]:
    """A memory without its body: what a write returns."""
    out = {"id": memory.id, "path": memory.path, "title": memory.title, "type": memory.type,
           "tier": memory.tier, "status": memory.status, "tags": memory.tags}
    if memory.commit:
        out["commit"] = memory.commit
    return out


def _dict(value: Any) -> Any:
    return value.to_dict() if hasattr(value, "to_dict") else value


@tool("gitmem", "memory_add",
      """Store a new memory (one Markdown file, one git commit). Use for anything worth remembering across
      sessions: a fact, a preference, a decision, a task. The title defaults to the content's first line.
      With dedup: true a near-duplicate (>=92% similar) is skipped and a close variant (>=80%) supersedes
      the old memory; identical content is never stored twice; similarity respects word order, and a text
      with other numbers or a negation is never skipped. external_write_id is an upsert key: the same key
      with different content updates that memory (status updated, one commit), with the same content
      nothing is written (skipped). Returns {"id", "path", "status": "created" | "skipped" | "superseded" |
      "updated", "duplicate_of", "superseded", "similarity", "commit"}.""",
      obj({"content": string("The memory text (Markdown).", minLength=1, maxLength=_CONTENT),
           "title": string("A short distinctive title (default: the first line of content).", maxLength=200),
           "type": _enum(_TYPES, "Kind of memory (default memory). goal, rule and constraint are protected."),
           "tier": _enum(_LIVE, "Where it starts (default short_term)."),
           "tags": strings("Tags for filtering.", maxItems=50),
           "scope": _enum(_SCOPES, "Visibility scope."),
           "importance": integer("1 (low) to 5 (critical); default 3.", minimum=1, maximum=5),
           "confidence": integer("1 (speculative) to 5 (verified); default 3.", minimum=1, maximum=5),
           "summary": string("One-line summary.", maxLength=500),
           "entities": strings("People, projects, tools and concepts it mentions.", maxItems=200),
           "related": strings("Ids of related memories.", maxItems=100),
           "supersedes": _ref("A memory this one replaces (it is marked superseded in the same commit)."),
           "source": string("Where it came from (a URL, a conversation id ...); default: the MCP conversation it was written in.",
                            maxLength=1000),
           "context": string("What it answers or continues, in a line (e.g. the question asked); "
                             "searched with low weight.", maxLength=500),
           "expires": string("ISO 8601 date or time after which it no longer holds.", maxLength=40),
           "dedup": boolean("Skip or supersede near-duplicates (default false)."),
           "external_write_id": string("Upsert key: the same key again updates that memory (or writes "
                                       "nothing when the content is the same).", minLength=1, maxLength=200)},
          ["content"]),
      title="Add memory")
def add(ctx: ToolContext, content: str, title: str | None = None, type: str | None = None,
        tier: str | None = None, tags: list[str] | None = None, scope: str | None = None,
        importance: int | None = None, confidence: int | None = None, summary: str | None = None,
        entities: list[str] | None = None, related: list[str] | None = None, supersedes: str | None = None,
        source: str | None = None, context: str | None = None, expires: str | None = None,
        dedup: bool = False, external_write_id: str | None = None) -> dict[str, Any]:
    # Each memory of a session follows the one written before it (an upsert may update an
    # older memory instead: not linked), and shares the session's source unless given one.
    session = ctx.conversation(source, link=external_write_id is None)
    result = ctx.need("write")(content, title=title, type=type, tier=tier, tags=tags, scope=scope,
                               importance=importance, confidence=confidence, summary=summary,
                               entities=entities, related=related, supersedes=supersedes,
                               context=context, expires=expires, dedup=dedup,
                               external_write_id=external_write_id, upsert=True, author=ctx.author,
                               **session)
    ctx.wrote(result.id, result.status)
    return {"id": result.id, "path": result.path, "status": result.status,
            "duplicate_of": result.duplicate_of, "superseded": list(result.superseded or []),
            "similarity": result.similarity, "commit": result.commit}


@tool("gitmem", "memory_read",
      """Read one memory in full: frontmatter fields and body. With `version` (a commit id, ~N for N
      versions back, or an ISO date) read it as it was then. Read-only. Returns {"id", "path", "title",
      "type", "tier", "status", "tags", ..., "body"}.""",
      obj({"ref": _ref(), "version": string("Optional past version: commit id, ~N or ISO date.", maxLength=80)},
          ["ref"]),
      read_only=True, title="Read memory")
def read(ctx: ToolContext, ref: str, version: str | None = None) -> dict[str, Any]:
    memory = ctx.vault.show_at(ref, version) if version else ctx.vault.get(ref)
    return memory.to_dict()


@tool("gitmem", "memory_list",
      """List memories (without bodies), most recently updated first, filtered by tier, type, tag or
      status (default active). Read-only. Returns {"memories": [{"id", "path", "title", ...}]}.""",
      obj({"tier": _enum(_TIERS, "Only this tier."), "type": _enum(_TYPES, "Only this type."),
           "tag": string("Only memories with this tag.", maxLength=200),
           "status": _enum(_STATUSES + ["all"], "Only this status (default active; all = every status)."),
           "limit": integer("At most this many (default 50).", minimum=1, maximum=1000)}),
      read_only=True, title="List memories")
def list_memories(ctx: ToolContext, tier: str | None = None, type: str | None = None, tag: str | None = None,
                  status: str = "active", limit: int = 50) -> dict[str, Any]:
    memories = ctx.vault.list(tier=tier, type=type, tags=[tag] if tag else None,
                              status=None if status == "all" else status, limit=limit)
    return {"memories": [m.to_dict(body=False) for m in memories]}


@tool("gitmem", "memory_update",
      """Change a memory in one git commit (the previous version stays in history). Give any of: content
      (replaces the body), append (adds a paragraph), old_text + new_text (exact replacement; old_text must
      occur exactly once), title, tags (replace) / add_tags / remove_tags, importance, confidence, summary.
      Protected memories (goal, rule, constraint) are refused. Returns the memory without its body.""",
      obj({"ref": _ref(),
           "content": string("New body (replaces the old one).", maxLength=_CONTENT),
           "append": string("Text to add at the end as a new paragraph.", minLength=1, maxLength=_CONTENT),
           "old_text": string("Exact text to replace (must occur exactly once).", minLength=1, maxLength=_CONTENT),
           "new_text": string("Replacement for old_text.", maxLength=_CONTENT),
           "title": string("New title.", minLength=1, maxLength=200),
           "tags": strings("New tag list (replaces the old one).", maxItems=50),
           "add_tags": strings("Tags to add.", maxItems=50),
           "remove_tags": strings("Tags to remove.", maxItems=50),
           "importance": integer("1 to 5.", minimum=1, maximum=5),
           "confidence": integer("1 to 5.", minimum=1, maximum=5),
           "summary": string("One-line summary.", maxLength=500)},
          ["ref"]),
      destructive=True, idempotent=True, title="Update memory")
def update(ctx: ToolContext, ref: str, content: str | None = None, append: str | None = None,
           old_text: str | None = None, new_text: str | None = None, title: str | None = None,
           tags: list[str] | None = None, add_tags: list[str] | None = None, remove_tags: list[str] | None = None,
           importance: int | None = None, confidence: int | None = None, summary: str | None = None
           ) -> dict[str, Any]:
    from ..errors import InvalidInput
    if (old_text is None) != (new_text is None):
        raise InvalidInput("old_text and new_text go together", hint="Pass both, or neither.")
    meta = {k: v for k, v in (("importance", importance), ("confidence", confidence), ("summary", summary))
            if v is not None}
    memory = ctx.vault.update(ref, body=content, append=append,
                              replace=(old_text, new_text) if old_text is not None else None,  # type: ignore[arg-type]
                              title=title, tags=tags, add_tags=add_tags or (), remove_tags=remove_tags or (),
                              meta=meta or None, author=ctx.author)
    return _brief(memory)


@tool("gitmem", "memory_move",
      """Move a memory to another tier (short_term -> mid_term -> long_term; archive to retire it): one git
      commit, a tracked rename. Protected memories are refused. Returns the memory without its body.""",
      obj({"ref": _ref(), "tier": _enum(_TIERS, "The destination tier.")}, ["ref", "tier"]),
      idempotent=True, title="Move memory")
def move(ctx: ToolContext, ref: str, tier: str) -> dict[str, Any]:
    return _brief(ctx.vault.move(ref, tier, author=ctx.author))


@tool("gitmem", "memory_delete",
      """Delete a memory (one git commit). Default soft: status deleted, moved to the archive tier, left out
      of search, still readable. hard: true removes the file. Both can be undone with memory_restore.
      Protected memories are refused. Returns the memory without its body.""",
      obj({"ref": _ref(), "hard": boolean("Remove the file instead of archiving it (default false).")},
          ["ref"]),
      destructive=True, idempotent=True, title="Delete memory")
def delete(ctx: ToolContext, ref: str, hard: bool = False) -> dict[str, Any]:
    return _brief(ctx.vault.delete(ref, hard=hard, author=ctx.author))


@tool("gitmem", "memory_search",
      """Full-text search (BM25, stemming). A plain question works; so do "exact phrase", AND / OR / NOT,
      prefix*, and field filters in the query (tier: type: tag: scope: created:>2026-01-01). Archived,
      deleted and superseded memories are left out unless include_inactive. With as_of (a date such as
      2026-03-01, HEAD~N or a commit id), searches the vault as it was then. Read-only. Returns {"hits":
      [{"id", "path", "title", "tier", "type", "tags", "score", "updated", "snippet"}], "total",
      "suggestion", "mode"}; with as_of, also "commit" on the result and on each hit.""",
      obj({"query": string("What to look for.", minLength=1, maxLength=2000),
           "limit": integer("How many results (default 10).", minimum=1, maximum=100),
           "offset": integer("Skip this many (paging).", minimum=0, maximum=10_000),
           "tier": _enum(_TIERS, "Only this tier."), "type": _enum(_TYPES, "Only this type."),
           "tag": string("Only memories with this tag.", maxLength=200),
           "scope": _enum(_SCOPES, "Only this scope."),
           "include_inactive": boolean("Also archived, deleted and superseded memories."),
           "as_of": string("Search the vault as it was at this date or time (ISO 8601; a bare date "
                           "means the end of that day), HEAD~N or commit id.", minLength=1,
                           maxLength=80)},
          ["query"]),
      read_only=True, title="Search memories")
def search(ctx: ToolContext, query: str, limit: int = 10, offset: int = 0, tier: str | None = None,
           type: str | None = None, tag: str | None = None, scope: str | None = None,
           include_inactive: bool = False, as_of: str | None = None) -> dict[str, Any]:
    page = ctx.vault.search(query, limit=limit, offset=offset, include_inactive=include_inactive,
                            as_of=as_of, tier=tier, type=type, tag=tag, scope=scope)
    return page.to_dict()


@tool("gitmem", "memory_history",
      """The versions of a memory, newest first, across moves and renames: commit, date, author (which
      agent or person), subject, op. Read-only. Returns {"versions": [...]}.""",
      obj({"ref": _ref()}, ["ref"]), read_only=True, title="Memory history")
def history(ctx: ToolContext, ref: str) -> dict[str, Any]:
    return {"versions": [v.to_dict() for v in ctx.vault.history(ref)[::-1]]}


@tool("gitmem", "memory_diff",
      """Unified diff of a memory between two versions (commit id, ~N or ISO date; default: the previous
      version against now). Read-only. Returns {"diff": text} ("" when equal).""",
      obj({"ref": _ref(), "old": string("Older version (default ~1).", maxLength=80),
           "new": string("Newer version (default: now).", maxLength=80)}, ["ref"]),
      read_only=True, title="Diff memory versions")
def diff(ctx: ToolContext, ref: str, old: str | None = None, new: str | None = None) -> dict[str, Any]:
    return {"diff": ctx.vault.diff(ref, old, new)}


@tool("gitmem", "memory_restore",
      """Bring a memory back to an earlier version (also after delete): one new git commit, nothing is
      rewritten. version: a commit id, ~N (N versions back) or an ISO date. Returns the memory without
      its body.""",
      obj({"ref": _ref(), "version": string("The version to restore.", minLength=1, maxLength=80)},
          ["ref", "version"]),
      destructive=True, idempotent=True, title="Restore memory version")
def restore(ctx: ToolContext, ref: str, version: str) -> dict[str, Any]:
    return _brief(ctx.vault.restore(ref, version, author=ctx.author))


@tool("gitmem", "memory_compress_batch",
      """Step 1 of compressing a tier: collect its non-protected memories (optionally only older than N
      days, with a tag, or of a type) as one text to summarise. Read-only. Returns {"tier", "target_tier",
      "content", "files", "ids", "truncated"}. Then call memory_compress with your summary and the files.""",
      obj({"tier": _enum(_LIVE, "The tier to compress."),
           "older_than_days": integer("Only memories not updated for this many days.", minimum=0, maximum=36500),
           "tag": string("Only memories with this tag.", maxLength=200),
           "type": _enum(_TYPES, "Only this type."),
           "max_chars": integer("Cap on the combined content's length.", minimum=1000, maximum=2_000_000)},
          ["tier"]),
      read_only=True, title="Collect memories to compress")
def compress_batch(ctx: ToolContext, tier: str, older_than_days: int | None = None, tag: str | None = None,
                   type: str | None = None, max_chars: int | None = None) -> dict[str, Any]:
    batch = ctx.need("compress_tier")(tier, older_than_days=older_than_days, tag=tag, type=type,
                                      max_chars=max_chars)
    return _dict(batch)


@tool("gitmem", "memory_compress",
      """Step 2 of compressing a tier: store your summary as a new memory in the next tier up and archive
      the source files, all in one git commit (tracked moves; the sources stay readable in archive/).
      Returns the summary memory without its body.""",
      obj({"tier": _enum(_LIVE, "The tier that was compressed."),
           "summary": string("Your summary of the batch content.", minLength=1, maxLength=_CONTENT),
           "title": string("Title of the summary memory.", minLength=1, maxLength=200),
           "files": strings("The files memory_compress_batch returned.", minItems=1, maxItems=10_000),
           "tags": strings("Tags of the summary memory.", maxItems=50)},
          ["tier", "summary", "title", "files"]),
      destructive=True, title="Compress memories")
def compress(ctx: ToolContext, tier: str, summary: str, title: str, files: list[str],
             tags: list[str] | None = None) -> dict[str, Any]:
    return _brief(ctx.need("compress")(tier, summary, title, files, tags=tags, author=ctx.author))


@tool("gitmem", "memory_archive",
      """Retire memories to the archive tier in one git commit (tracked moves; still readable, left out of
      search by default). Protected memories are refused. Returns {"archived": [memories]}.""",
      obj({"refs": {"type": "array", "items": _ref(), "minItems": 1, "maxItems": 1000,
                    "description": "The memories to archive."}}, ["refs"]),
      destructive=True, idempotent=True, title="Archive memories")
def archive(ctx: ToolContext, refs: list[str]) -> dict[str, Any]:
    return {"archived": [_brief(m) for m in ctx.need("archive")(refs, author=ctx.author)]}


@tool("gitmem", "memory_unarchive",
      """Bring an archived memory back to the tier it came from (one git commit). Returns the memory
      without its body.""",
      obj({"ref": _ref()}, ["ref"]), idempotent=True, title="Unarchive memory")
def unarchive(ctx: ToolContext, ref: str) -> dict[str, Any]:
    return _brief(ctx.need("unarchive")(ref, author=ctx.author))


@tool("gitmem", "memory_merge",
      """Merge memories that say the same thing into one (one git commit): the new memory gets your content
      (or the sources' bodies joined), the union of tags, links to the sources; the sources are marked
      merged and archived. Returns {"memory": {...}, "sources": [ids]}.""",
      obj({"refs": {"type": "array", "items": _ref(), "minItems": 2, "maxItems": 100,
                    "description": "The memories to merge (2 or more)."},
           "content": string("Content of the merged memory (default: the sources joined).", minLength=1,
                             maxLength=_CONTENT),
           "title": string("Title of the merged memory.", minLength=1, maxLength=200)},
          ["refs"]),
      destructive=True, title="Merge memories")
def merge(ctx: ToolContext, refs: list[str], content: str | None = None, title: str | None = None
          ) -> dict[str, Any]:
    result = ctx.need("merge")(refs, content, title=title, author=ctx.author)
    return {"memory": _brief(result.memory), "sources": list(result.sources)}


@tool("gitmem", "memory_reflect",
      """Consolidate the vault: expire what has expired, prune weak memories, merge near-identical ones,
      promote memories that are retrieved often; at most one git commit. dry_run: true only reports the
      plan. Returns {"pruned", "merged", "promoted", "expired", "duration_ms", "busy", "commit", "plan"}.""",
      obj({"dry_run": boolean("Only report what would change (default false).")}),
      destructive=True, title="Reflect (consolidate)")
def reflect(ctx: ToolContext, dry_run: bool = False) -> dict[str, Any]:
    return _dict(ctx.need("reflect")(dry_run, author=ctx.author))


@tool("gitmem", "memory_context",
      """The protected context: every active goal, rule and constraint, as Markdown ready to put in your
      prompt plus the memories themselves. Call it at the start of a session. Read-only. Returns
      {"markdown", "memories"}.""",
      obj({}), read_only=True, title="Protected context")
def context(ctx: ToolContext) -> dict[str, Any]:
    return _dict(ctx.need("protected_context")())


@tool("gitmem", "memory_links",
      """A memory's links: outgoing ([[wikilinks]], related, supersedes, merged/archived into) and
      backlinks (memories pointing at it), each {id, path, title, relation}. Read-only. Returns
      {"outgoing": [...], "backlinks": [...]}.""",
      obj({"ref": _ref()}, ["ref"]), read_only=True, title="Memory links")
def links(ctx: ToolContext, ref: str) -> dict[str, Any]:
    return _dict(ctx.need("links")(ref))
