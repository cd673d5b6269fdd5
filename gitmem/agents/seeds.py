"""Drop-in tool profiles for three memory-tool contracts, ``agentos``, ``vault``
and ``fsm``: their exact tool names, parameters and output shapes,
each backed by one Vault call, each write one commit authored by the session's
agent.

* ``agentos``: trace ids are ``mt_<gitmem id>`` (gitmem ids are UUID4s, so this
  is the seed's ``mt_<UUID>`` form); a bare gitmem id is accepted too.  An
  unknown or soft-deleted trace gives ``{"updated": false}`` /
  ``{"deleted": false}`` as in the seed.
* ``vault``: ``write_memory`` stores every seed parameter (agentId, modelId,
  writeReason ... as snake_case frontmatter fields); ids are gitmem ids (UUIDs).
  ``externalWriteId`` is an upsert key.  Agents may supersede and upsert
  constraints (never goals or rules).
* ``fsm``: memories are addressed by file name (unique across tiers in a
  gitmem vault); ``compress_tier`` -> ``create_memory`` (summary, next tier) ->
  ``archive_memories`` (tracked moves to ``archive/``) works as the seed shows.
  Goals and rules are protected from compression and archiving only:
  ``update_memory`` changes them.

What an agent may do to protected memories in each profile is tabled in the
README ("Protected memories and agents").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import AmbiguousReference, ContentTooLarge, InvalidInput, NotFound
from .registry import ToolContext, ToolFailure, boolean, integer, obj, string, strings, tool

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.schema import Memory

__all__: list[str] = []

_CONTENT = 1_000_000


def _count(value: Any) -> int:
    """A report field as a number (the lifecycle reports lists of ids or counts)."""
    if isinstance(value, (list, tuple, set, dict)):
        return len(value)
    return int(value or 0)


def _body(memory: "Memory") -> str:
    return memory.body.rstrip("\n")


def _written_id(result: Any) -> str:
    """The id a write produced, or for a skipped duplicate the id it matched."""
    if getattr(result, "status", None) == "skipped" and getattr(result, "duplicate_of", None):
        return str(result.duplicate_of)
    return str(result.id)


# ================================================================ agentos (002)
_TULVING = ["episodic", "semantic", "procedural", "prospective"]
_SCOPES = ["thread", "user", "persona", "organization"]
_TRACE = "ID of the trace (mt_<uuid>)."


def _trace(memory_id: str) -> str:
    return f"mt_{memory_id}"


def _trace_memory(ctx: ToolContext, trace_id: str) -> "Memory | None":
    """The live memory a trace id names, or None (unknown, ambiguous or soft-deleted)."""
    memory_id = trace_id.strip()
    memory_id = memory_id[3:] if memory_id.startswith("mt_") else memory_id
    if not memory_id:
        return None
    try:
        memory = ctx.vault.get(memory_id)
    except (NotFound, AmbiguousReference, InvalidInput):
        return None
    if memory.id != memory_id or memory.status == "deleted":
        return None
    return memory


@tool("agentos", "memory_add",
      """Store a new memory trace. Use when you learn a new fact about the user (type 'semantic'), want to
      record a conversation event ('episodic'), a how-to ('procedural') or a future task ('prospective').
      Identical content (same words, ignoring case and punctuation) with the same type and scope is not
      stored twice: the existing trace id is returned and nothing is written. Any other content is stored
      as a new trace (one git commit); near-identical traces are merged later by memory_reflect.
      Returns {"traceId": "mt_<uuid>"}.""",
      obj({"content": string("The text content to remember.", minLength=1, maxLength=_CONTENT),
           "type": {"type": "string", "enum": _TULVING, "description": "Tulving memory type (default episodic)."},
           "scope": {"type": "string", "enum": _SCOPES, "description": "Visibility scope (default user)."},
           "tags": strings("Free-form tags for filtering.", maxItems=50)},
          ["content"]),
      title="Add memory trace")
def agentos_add(ctx: ToolContext, content: str, type: str = "episodic", scope: str = "user",
                tags: list[str] | None = None) -> dict[str, Any]:
    # dedup="exact" is the contract's content-hash check (identical text, same type and scope).
    # Nothing looser: every other trace is stored, and memory_reflect merges near-identical ones.
    result = ctx.need("write")(content, type=type, scope=scope, tags=tags or [], strength=1.0,
                               dedup="exact", author=ctx.author, **ctx.conversation())
    ctx.wrote(_written_id(result), result.status)
    return {"traceId": _trace(_written_id(result))}


@tool("agentos", "memory_update",
      """Update the content or tags of an existing memory trace (only the fields you pass; each replaces
      the old value). Use when a memory is outdated. Writes one git commit (the old text stays in
      history). Returns {"updated": true}, or {"updated": false} if the trace was not found.""",
      obj({"traceId": string(_TRACE, minLength=1, maxLength=200),
           "content": string("New text content (replaces old).", minLength=1, maxLength=_CONTENT),
           "tags": strings("New tags array (replaces old).", maxItems=50)},
          ["traceId"]),
      destructive=True, idempotent=True, title="Update memory trace")
def agentos_update(ctx: ToolContext, traceId: str, content: str | None = None,  # noqa: N803 - seed name
                   tags: list[str] | None = None) -> dict[str, Any]:
    memory = _trace_memory(ctx, traceId)
    if memory is None:
        return {"updated": False}
    if content is not None or tags is not None:
        ctx.vault.update(memory.path, body=content, tags=tags, author=ctx.author)
    return {"updated": True}


@tool("agentos", "memory_delete",
      """Soft-delete a memory trace by ID: it leaves search results but stays in the vault (archive) and
      in git history for audit. Use when a memory is wrong or harmful. Writes one git commit. Returns
      {"deleted": true}, or {"deleted": false} if the trace was not found.""",
      obj({"traceId": string(_TRACE, minLength=1, maxLength=200)}, ["traceId"]),
      destructive=True, idempotent=True, title="Delete memory trace")
def agentos_delete(ctx: ToolContext, traceId: str) -> dict[str, Any]:  # noqa: N803 - seed name
    memory = _trace_memory(ctx, traceId)
    if memory is None:
        return {"deleted": False}
    ctx.vault.delete(memory.path, author=ctx.author)
    return {"deleted": True}


@tool("agentos", "memory_merge",
      """Merge several memory traces that say the same thing into one consolidated trace. Tags are unioned,
      the merged trace keeps the highest strength, the sources are soft-deleted with a pointer to it.
      One git commit. Returns {"mergedTraceId": "mt_<uuid>", "sourcesDeleted": n}.""",
      obj({"traceIds": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 200},
                        "minItems": 2, "maxItems": 100,
                        "description": "IDs of traces to merge (minimum 2)."},
           "content": string("Override content for the merged trace (if omitted, content is concatenated).",
                             minLength=1, maxLength=_CONTENT)},
          ["traceIds"]),
      destructive=True, title="Merge memory traces")
def agentos_merge(ctx: ToolContext, traceIds: list[str], content: str | None = None  # noqa: N803
                  ) -> dict[str, Any]:
    memories, unknown = [], []
    for trace_id in traceIds:
        memory = _trace_memory(ctx, trace_id)
        (unknown.append(trace_id) if memory is None else memories.append(memory))
    if unknown:
        raise ToolFailure("not_found", f"no live trace with id {', '.join(unknown)}",
                          "Search for the traces first (memory_search) and pass their ids.")
    ids = list(dict.fromkeys(m.id for m in memories))
    if len(ids) < 2:
        raise ToolFailure("invalid_arguments", "memory_merge needs at least 2 different traces")
    if content is None:
        # The contract: without content, the merged trace is the sources' contents concatenated.
        by_id = {m.id: m for m in memories}
        content = "\n\n".join(_body(by_id[i]) for i in ids if _body(by_id[i]))
    result = ctx.need("merge")(ids, content or None, author=ctx.author)
    return {"mergedTraceId": _trace(result.memory.id), "sourcesDeleted": len(result.sources)}


@tool("agentos", "memory_search",
      """Full-text search over memory traces, ranked by BM25 relevance; use it to look up what you know
      about a topic. Accepts natural language, or syntax: word (matches any form: deploy ~ deployment),
      "exact phrase", a AND b, a OR b, a NOT b, prefix*. Only active traces are returned. Read-only.
      Returns {"results": [{"id", "content", "type", "scope", "strength", "tags"}]}.""",
      obj({"query": string("Full-text search query.", minLength=1, maxLength=2000),
           "type": {"type": "string", "enum": _TULVING, "description": "Filter by memory type."},
           "scope": {"type": "string", "enum": _SCOPES, "description": "Filter by visibility scope."},
           "limit": integer("Maximum results to return (default 10).", minimum=1, maximum=100)},
          ["query"]),
      read_only=True, title="Search memory traces")
def agentos_search(ctx: ToolContext, query: str, type: str | None = None, scope: str | None = None,
                   limit: int = 10) -> dict[str, Any]:
    page = ctx.vault.search(query, limit=limit, type=type, scope=scope)
    results = []
    for hit in page.hits:
        try:
            memory = ctx.vault.get(hit.path)
        except NotFound:
            continue  # removed since it was indexed
        if memory.status != "active":
            continue
        strength = memory.meta.get("strength", 1.0)
        results.append({"id": _trace(memory.id), "content": _body(memory), "type": memory.type,
                        "scope": str(memory.meta.get("scope") or "user"),
                        "strength": float(strength) if isinstance(strength, (int, float)) else 1.0,
                        "tags": memory.tags})
    return {"results": results}


@tool("agentos", "memory_reflect",
      """Trigger on-demand memory consolidation (like sleep): prune weak traces, merge near-identical ones,
      promote old, often-retrieved traces. Use after working for a while. Writes at most one git commit.
      If a consolidation is already running it returns at once with zero counts. Returns {"pruned",
      "merged", "derived", "compacted", "durationMs"}.""",
      obj({"topic": string("Reserved for future topic-scoped consolidation (currently ignored).",
                           maxLength=500)}),
      destructive=True, title="Consolidate memory")
def agentos_reflect(ctx: ToolContext, topic: str | None = None) -> dict[str, Any]:
    report = ctx.need("reflect")(author=ctx.author)
    return {"pruned": _count(report.pruned), "merged": _count(report.merged), "derived": 0,
            "compacted": _count(report.promoted), "durationMs": int(report.duration_ms)}


# ================================================================== vault (003)
_VAULT_TYPES = ["fact", "skill", "preference", "constraint", "task", "episodic", "correction"]
_RELATIONS = ["derived_from", "contradicts", "refines", "part_of", "supersedes"]
# seed parameter -> frontmatter field, for the provenance fields stored as given.
_PROVENANCE = {"vaultId": "vault_id", "agentId": "agent_id", "agentType": "agent_type", "modelId": "model_id",
               "agentRunId": "agent_run_id", "sourceMessageId": "source_message_id",
               "writeReason": "write_reason", "sourceNoteIds": "source_note_ids"}


def _id_string(description: str) -> dict[str, Any]:
    return string(description, minLength=1, maxLength=200)


@tool("vault", "write_memory",
      """Create or upsert a durable memory entry. Memory types: fact (durable knowledge, importance 3-5),
      skill (procedures/how-tos, 3-5), preference (user style/choices, 2-4), constraint (hard rules/limits,
      4-5; protected: kept out of consolidation, changed only by superseding or upserting it here),
      task (active work items, 2-4), episodic (session summaries, 1-3), correction (superseded knowledge;
      always set supersededById, 3-5). Importance: 5=critical, 4=important, 3=standard (default),
      2=supplementary, 1=low-value. Confidence: 5=verified, 4=observed multiple times, 3=reasonable
      inference (default), 2=uncertain, 1=speculative. With dedup: true, >92% similarity to an existing
      memory of the same type = skip, >80% = supersede the old one, else create; similarity respects word
      order, and a text with other numbers or a negation is never skipped. relatedMemoryIds with
      relationType supersedes marks that memory superseded (it stays readable). externalWriteId is an
      upsert key: the same key with different content updates that memory (status updated, a new version);
      with the same content nothing is written (skipped). Writes one git commit unless skipped. Returns
      {"id": uuid, "status": "created" | "skipped" | "superseded" | "updated"}.""",
      obj({"content": string("Memory content in plain text.", minLength=1, maxLength=_CONTENT),
           "memoryType": {"type": "string", "enum": _VAULT_TYPES, "description": "Type (default fact)."},
           "summary": string("Optional short summary.", maxLength=500),
           "vaultId": _id_string("Vault/project scope (UUID); recorded with the memory."),
           "importance": integer("Importance from 1 to 5.", minimum=1, maximum=5),
           "confidence": integer("Confidence from 1 to 5.", minimum=1, maximum=5),
           "agentId": _id_string("Agent identifier."),
           "agentType": _id_string("Agent type."),
           "modelId": _id_string("Model used to create this memory."),
           "agentRunId": _id_string("Agent run identifier."),
           "sourceMessageId": _id_string("Source message UUID."),
           "writeReason": string("Why this memory should be stored.", maxLength=2000),
           "externalWriteId": _id_string("Idempotency key for upsert behavior: the same key again updates "
                                         "that memory."),
           "relatedMemoryIds": {"type": "array", "maxItems": 100, "description": (
               "Links to related memories with relation type."), "items": obj({
                   "memoryId": _id_string("Related memory id (UUID)."),
                   "relationType": {"type": "string", "enum": _RELATIONS, "description": "How it relates."}},
                   ["memoryId", "relationType"])},
           "sourceNoteIds": strings("Note UUIDs this memory was extracted from.", maxItems=100),
           "supersededById": _id_string("Memory ID that supersedes this one (for corrections)."),
           "entities": strings("Extracted entity names (people, projects, tools, concepts) for cross-linking.",
                               maxItems=200),
           "dedup": boolean("Run semantic dedup before writing. >92% match = skip, >80% = supersede old.")},
          ["content"]),
      title="Write memory")
def vault_write(ctx: ToolContext, content: str, memoryType: str | None = None,  # noqa: N803 - seed names
                summary: str | None = None,
                vaultId: str | None = None, importance: int | None = None, confidence: int | None = None,
                agentId: str | None = None, agentType: str | None = None, modelId: str | None = None,
                agentRunId: str | None = None, sourceMessageId: str | None = None,
                writeReason: str | None = None, externalWriteId: str | None = None,
                relatedMemoryIds: list[dict[str, str]] | None = None, sourceNoteIds: list[str] | None = None,
                supersededById: str | None = None, entities: list[str] | None = None,
                dedup: bool = False) -> dict[str, Any]:
    given = {"vaultId": vaultId, "agentId": agentId, "agentType": agentType, "modelId": modelId,
             "agentRunId": agentRunId, "sourceMessageId": sourceMessageId, "writeReason": writeReason,
             "sourceNoteIds": sourceNoteIds}
    extra = {_PROVENANCE[k]: v for k, v in given.items() if v not in (None, [], "")}
    related = [{"id": r["memoryId"], "relation": r["relationType"]} for r in relatedMemoryIds or []]
    supersedes = next((r["id"] for r in related if r["relation"] == "supersedes"), None)
    try:
        # allow_protected: the contract lets agents maintain constraints (supersede a constraint
        # by a correction or a dedup match, upsert one by externalWriteId): each is a commit and
        # the old text stays readable.  Goals and rules of other tools stay refused.
        # An upsert without memoryType keeps the stored type; a new memory is a fact by default.
        result = ctx.need("write")(content, type=memoryType, default_type="fact", summary=summary,
                                   importance=importance, confidence=confidence, entities=entities,
                                   related=related or None, supersedes=supersedes, superseded_by=supersededById,
                                   external_write_id=externalWriteId, upsert=True, dedup=dedup,
                                   allow_protected=_VAULT_TYPES, author=ctx.author, **extra,
                                   **ctx.conversation(link=externalWriteId is None))
    except ContentTooLarge as exc:
        limit = ctx.vault.config.max_content_bytes
        size = len(content.encode("utf-8", "surrogatepass"))
        raise ToolFailure(
            "content_too_large",
            f"write_memory accepts up to {_CONTENT:,} characters and this content has {len(content):,}, "
            f"but it is {size:,} bytes as UTF-8 and this gitmem vault stores memory files of at most "
            f"{limit:,} bytes (max_content_bytes in .gitmem.yaml): {exc.message}",
            "Split the content into several write_memory calls, or ask the person to raise max_content_bytes "
            "in .gitmem.yaml.") from None
    ctx.wrote(_written_id(result), result.status)
    return {"id": _written_id(result), "status": result.status}


def _vault_view(memory: "Memory") -> dict[str, Any]:
    meta = memory.meta
    return {"id": memory.id, "content": _body(memory), "memoryType": memory.type,
            "summary": meta.get("summary"), "importance": memory.importance, "confidence": memory.confidence,
            "entities": list(meta.get("entities") or []),
            "relatedMemoryIds": [{"memoryId": r.get("id"), "relationType": r.get("relation")}
                                 for r in meta.get("related") or [] if isinstance(r, dict)],
            "supersededById": meta.get("superseded_by"), "status": memory.status,
            "createdAt": meta.get("created"), "updatedAt": meta.get("updated")}


@tool("vault", "read_memory",
      """Read one memory by id (as returned by write_memory or search_memories). Read-only. Returns
      {"id", "content", "memoryType", "summary", "importance", "confidence", "entities",
      "relatedMemoryIds", "supersededById", "status", "createdAt", "updatedAt"}.""",
      obj({"memoryId": _id_string("The memory id (UUID).")}, ["memoryId"]),
      read_only=True, title="Read memory")
def vault_read(ctx: ToolContext, memoryId: str) -> dict[str, Any]:  # noqa: N803 - seed name
    memory = ctx.vault.get(memoryId)
    if memory.id != memoryId.strip():
        raise NotFound(f"no memory with id {memoryId!r}")
    return _vault_view(memory)


@tool("vault", "search_memories",
      """Full-text search (BM25 with stemming; phrases, AND/OR/NOT and prefix* work) over active memories.
      Use before writing to find what is already known. Read-only. Returns {"results": [{"id", "content",
      "memoryType", "summary", "importance", "confidence", "score"}]}.""",
      obj({"query": string("What to look for (words or a question).", minLength=1, maxLength=2000),
           "memoryType": {"type": "string", "enum": _VAULT_TYPES, "description": "Only this type."},
           "limit": integer("Maximum results (default 10).", minimum=1, maximum=100)},
          ["query"]),
      read_only=True, title="Search memories")
def vault_search(ctx: ToolContext, query: str, memoryType: str | None = None,  # noqa: N803 - seed name
                 limit: int = 10) -> dict[str, Any]:
    page = ctx.vault.search(query, limit=limit, type=memoryType)
    results = []
    for hit in page.hits:
        try:
            memory = ctx.vault.get(hit.path)
        except NotFound:
            continue
        view = _vault_view(memory)
        results.append({k: view[k] for k in ("id", "content", "memoryType", "summary", "importance",
                                             "confidence")} | {"score": round(hit.score, 4)})
    return {"results": results}


# ==================================================================== fsm (004)
_FSM_TIERS = ["short_term", "mid_term", "long_term"]
_FSM_TYPES = ["memory", "goal", "rule"]
_FILENAME = "The filename to read (e.g., my_memory.md)."


def _fsm_view(memory: "Memory", content: bool = True) -> dict[str, Any]:
    out = {"filename": memory.filename, "title": memory.title, "tier": memory.tier, "type": memory.type,
           "tags": memory.tags}
    if content:
        out |= {"content": _body(memory), "created": memory.meta.get("created"),
                "updated": memory.meta.get("updated")}
    return out


def _fsm_find(ctx: ToolContext, filename: str, tier: str | None = None) -> "Memory":
    memory = ctx.vault.get(filename)
    if tier is not None and memory.tier != tier:
        raise NotFound(f"{filename} is in {memory.tier}, not in {tier}",
                       hint=f"Call again with tier {memory.tier!r}, or without a tier.")
    return memory


@tool("fsm", "create_memory",
      """Create a new memory file (Markdown with YAML frontmatter) in a tier: short_term (default) for
      fresh notes, mid_term/long_term for consolidated knowledge (put compress_tier summaries in the next
      tier up). Types: memory (default), goal, rule; goals and rules are protected from compression and
      archiving (compress_tier leaves them out, archive_memories refuses them); update_memory changes them.
      Writes one git commit. Returns {"filename", "title", "tier", "type", "tags"}.""",
      obj({"content": string("The body of the memory.", maxLength=_CONTENT),
           "title": string("Distinctive title for the memory.", minLength=1, maxLength=200),
           "tags": strings("Tags for categorization.", maxItems=50),
           "tier": {"type": "string", "enum": _FSM_TIERS, "description": "Tier (default short_term)."},
           "type": {"type": "string", "enum": _FSM_TYPES, "description": "memory (default), goal or rule."}},
          ["content", "title"]),
      title="Create memory")
def fsm_create(ctx: ToolContext, content: str, title: str, tags: list[str] | None = None,
               tier: str = "short_term", type: str = "memory") -> dict[str, Any]:
    memory = ctx.vault.add(title, content, type=type, tier=tier, tags=tags, author=ctx.author,
                           **ctx.conversation())
    ctx.wrote(memory.id)
    return _fsm_view(memory, content=False)


@tool("fsm", "read_memory",
      """Read a memory by filename (as listed by search_memory or compress_tier). Read-only. Returns
      {"filename", "title", "tier", "type", "tags", "content", "created", "updated"}.""",
      obj({"filename": string(_FILENAME, minLength=1, maxLength=300),
           "tier": {"type": "string", "enum": _FSM_TIERS + ["archive"], "description": "Specific tier to look in."}},
          ["filename"]),
      read_only=True, title="Read memory")
def fsm_read(ctx: ToolContext, filename: str, tier: str | None = None) -> dict[str, Any]:
    return _fsm_view(_fsm_find(ctx, filename, tier))


@tool("fsm", "update_memory",
      """Update an existing memory, goals and rules included: new content and/or tags (each replaces the old
      value), and/or move it to another tier (e.g. promote to mid_term). Writes one git commit (a tier
      change is a tracked move; earlier versions stay in git history). Returns {"filename", "title", "tier",
      "type", "tags"}.""",
      obj({"filename": string("The filename to update.", minLength=1, maxLength=300),
           "content": string("New content.", maxLength=_CONTENT),
           "tags": strings("New tags.", maxItems=50),
           "tier": {"type": "string", "enum": _FSM_TIERS, "description": "Move to a new tier."}},
          ["filename"]),
      destructive=True, idempotent=True, title="Update memory")
def fsm_update(ctx: ToolContext, filename: str, content: str | None = None, tags: list[str] | None = None,
               tier: str | None = None) -> dict[str, Any]:
    vault = ctx.vault
    memory = _fsm_find(ctx, filename)
    # Goals and rules are protected from compression and archiving only: updating one's own
    # goal is the ordinary flow here.  Protected types this profile does not manage
    # (constraints) stay refused.
    own = memory.type in _FSM_TYPES
    if tier is not None and tier != memory.tier:
        extra: dict[str, Any] = {"updated": vault.now()}
        if tags is not None:
            extra["tags"] = tags
        memory = vault.move(memory.path, tier, extra_meta=extra, body=content, force=own, author=ctx.author)
    elif content is not None or tags is not None:
        memory = vault.update(memory.path, body=content, tags=tags, force=own, author=ctx.author)
    return _fsm_view(memory, content=False)


@tool("fsm", "search_memory",
      """Search memories by text content or title (BM25 full-text, stemming; "phrases" and AND/OR/NOT
      work). Read-only. Returns {"results": [{"filename", "title", "tier", "type", "tags", "snippet"}]},
      best first.""",
      obj({"query": string("The search query.", minLength=1, maxLength=2000)}, ["query"]),
      read_only=True, title="Search memories")
def fsm_search(ctx: ToolContext, query: str) -> dict[str, Any]:
    page = ctx.vault.search(query, limit=10)
    return {"results": [{"filename": hit.path.rsplit("/", 1)[-1], "title": hit.title, "tier": hit.tier,
                         "type": hit.type, "tags": hit.tags, "snippet": hit.snippet} for hit in page.hits]}


@tool("fsm", "compress_tier",
      """Helper to retrieve memories for compression. Returns {"content": the combined text of every
      non-protected memory in the tier, "files": their filenames, "target_tier": the next tier up}. Then:
      summarize the content, call create_memory with the summary in target_tier, and call archive_memories
      with the files. Read-only (nothing changes until you archive).""",
      obj({"tier": {"type": "string", "enum": _FSM_TIERS, "description": "The tier to compress (e.g., short_term)."}},
          ["tier"]),
      read_only=True, title="Collect a tier for compression")
def fsm_compress(ctx: ToolContext, tier: str) -> dict[str, Any]:
    batch = ctx.need("compress_tier")(tier)
    return {"content": batch.content, "files": [p.rsplit("/", 1)[-1] for p in batch.files],
            "target_tier": batch.target_tier}


@tool("fsm", "archive_memories",
      """Move memories to the archive tier (tracked moves in one git commit; still readable and searchable
      with tier archive). Goals and rules are refused. An empty list archives nothing (no commit). Returns
      {"archived": [filenames], "tier": "archive"}.""",
      obj({"filenames": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 300},
                         "maxItems": 1000, "description": "List of filenames to archive."}},
          ["filenames"]),
      destructive=True, idempotent=True, title="Archive memories")
def fsm_archive(ctx: ToolContext, filenames: list[str]) -> dict[str, Any]:
    if not filenames:
        # compress_tier on a tier of only goals and rules returns files: []; the next step of the
        # flow, archive_memories(files), must then succeed without doing anything.
        return {"archived": [], "tier": ctx.vault.config.archive_tier}
    archived = ctx.need("archive")(filenames, author=ctx.author)
    return {"archived": [m.filename for m in archived], "tier": ctx.vault.config.archive_tier}


@tool("fsm", "retrieve_protected_context",
      """Retrieve all goal and rule memories to provide persistent context; call it at the start of a
      session. Read-only. Returns {"context": Markdown of every goal and rule, "memories": [{"filename",
      "title", "tier", "type", "tags", "content", ...}]}.""",
      obj({}), read_only=True, title="Protected context")
def fsm_protected(ctx: ToolContext) -> dict[str, Any]:
    context = ctx.need("protected_context")()
    return {"context": context.markdown, "memories": [_fsm_view(m) for m in context.memories]}
