"""Agent tools: the registry, argument validation, the dispatcher and the exporters.

A :class:`Tool` is a name, a description written for a model (when to use it,
what it returns, its side effects), a JSON Schema for its input, MCP
annotations, and a handler that makes one Vault call and returns a
JSON-serialisable result.  Tools are grouped in *profiles* (tool sets): the
native ``gitmem`` set and drop-in sets with other memory tools' contracts (``files``,
``index``, ``agentos``, ``vault``, ``fsm``) plus ``claude`` (Anthropic's
memory tool).  The profile modules register their tools on import.

An agent loop needs three lines::

    box = Toolbox(vault, "agentos", agent="research-bot")
    tools = box.schemas("openai")                  # or "anthropic", "mcp"
    result = box.call(name, arguments)             # never raises

**Errors never raise to the agent.**  Bad arguments and every gitmem error
come back as a result of this shape (stable, documented in the README)::

    {"error": {"code": "not_found", "message": "no memory matches 'x'",
               "hint": "List memories with ..."}}

``code`` is a :class:`~gitmem.errors.GitmemError` code, or one of
``invalid_arguments`` (the input does not match the schema), ``unknown_tool``
and ``internal_error`` (a bug; the message names the exception).  ``hint`` is
always a sentence saying what to do next.

A tool is declared once, by its handler: the docstring is its description and
each typed parameter (``Annotated[str, Field(description=..., max_length=...)]``,
``Literal[...]`` for an enum, a default when it may be left out) is one
property of its input schema.  pydantic derives the schema and the validator
from that signature (:mod:`gitmem.agents.arguments`).  It is imported when a
profile's tools are first used, never by ``import gitmem`` or this module: a
:class:`Toolbox` loads its profile on first use, so an MCP server answers
``initialize`` without it.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Identity
    from ..vault import Vault
    from .arguments import Arguments

__all__ = ["Tool", "ToolContext", "Toolbox", "ToolFailure", "PROFILES", "profile_names", "profile_tools",
           "export", "error_result", "protected_hint", "FORMATS"]

FORMATS = ("openai", "anthropic", "mcp")
#: profile name -> one-line description (the tools register themselves in ``_REGISTRY``).
PROFILES: dict[str, str] = {
    "gitmem": "native gitmem tools: add, read, update, move, delete, search, history, diff, restore, "
              "compress, archive, merge, reflect, context, links, sync",
    "files": "memory_read(path?) / memory_write(path, content) over a file tree",
    "index": "memory_read(topics?) returns MEMORY.md plus topic files",
    "agentos": "memory_add/update/delete/merge/search/reflect with mt_<uuid> trace ids",
    "vault": "write_memory with types, importance, dedup and idempotency, + read/search",
    "fsm": "tiered create/read/update/search, compress_tier, archive_memories, protected context",
    "claude": "Anthropic's memory tool (memory_20250818): view/create/str_replace/insert/delete/rename "
              "on /memories",
}
_MODULES = {"gitmem": "native", "files": "files", "index": "files",
            "agentos": "compat", "vault": "compat", "fsm": "compat", "claude": "claude"}
_REGISTRY: dict[str, dict[str, Tool]] = {name: {} for name in PROFILES}

_PERSON = ("ask the person to make the change with the gitmem command line and --force (recorded in the "
           "commit), e.g. `gitmem edit REF --body '...' --force`, `gitmem mv`, `gitmem rm`, `gitmem archive` "
           "or `gitmem merge` with --force")
_HINTS = {
    "invalid_arguments": "Fix the arguments to match the tool's input schema and call again.",
    "unknown_tool": "Call one of the tools this server lists.",
    "not_found": "Check the id or path; search or list memories to find the right one.",
    "protected": f"Protected memories (goals, rules, constraints) cannot be changed by agent tools; {_PERSON}.",
    "conflict": "Re-read the current state and retry with a different name or after the other change.",
    "vault_busy": "Another writer holds the vault; retry in a moment.",
    "internal_error": "This is a bug in gitmem, not in your call; try another approach and report it.",
}
# What an agent can do about a ``protected`` refusal, per profile.  The exception's own
# hint ("pass force=True") is for Python and CLI users; agent tools have no force argument.
_PROTECTED_HINTS = {
    "gitmem": "Goals, rules and constraints cannot be changed by agent tools. Record new information as a "
              f"new memory (memory_add), or {_PERSON}.",
    "agentos": "This trace is a protected goal, rule or constraint kept in gitmem; agent tools cannot "
               f"change, delete or merge it. Store new information with memory_add, or {_PERSON}.",
    "vault": "write_memory may supersede or update constraints, but not goals or rules (kept by another "
             "tool or a person). Write a new memory linked with relationType 'contradicts' or 'refines' "
             f"instead, or {_PERSON}.",
    "fsm": "Goals and rules are never compressed or archived: leave them out of the filenames "
           "(compress_tier never lists them); change them with update_memory. Other protected memories "
           f"(constraints) cannot be changed by these tools: {_PERSON}.",
}


def protected_hint(profile: str) -> str:
    """The hint an agent using ``profile`` gets with a ``protected`` error: what it can do."""
    return _PROTECTED_HINTS.get(profile) or _HINTS["protected"]


@dataclass(frozen=True)
class Tool:
    """One agent tool.

    ``handler(ctx, **arguments)`` receives validated arguments (only those
    given; defaults come from the handler's signature), and declares them: its
    typed parameters are the input schema, its docstring the description (see
    :mod:`gitmem.agents.arguments`).  ``read_only``, ``destructive`` and
    ``idempotent`` become the MCP annotations.
    """

    name: str
    profile: str
    description: str
    handler: Callable[..., Any]
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    title: str | None = None
    anthropic: dict[str, Any] | None = None  # a native Anthropic tool definition, if there is one

    @cached_property
    def arguments(self) -> Arguments:
        """The tool's input schema and validator, built from the handler on first use."""
        from .arguments import Arguments
        return Arguments(self.handler)

    @property
    def schema(self) -> dict[str, Any]:
        """The JSON Schema of the tool's input (an object refusing unknown keys)."""
        return self.arguments.schema

    def annotations(self) -> dict[str, Any]:
        """MCP tool annotations (hints for clients deciding about confirmation)."""
        return {"title": self.title or self.name.replace("_", " "), "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive, "idempotentHint": self.idempotent,
                "openWorldHint": False}

    def to_format(self, fmt: str) -> dict[str, Any]:
        """The tool's definition in ``openai``, ``anthropic`` or ``mcp`` format."""
        if fmt == "openai":
            return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                     "parameters": self.schema}}
        if fmt == "anthropic":
            if self.anthropic is not None:
                return dict(self.anthropic)
            return {"name": self.name, "description": self.description, "input_schema": self.schema}
        if fmt == "mcp":
            return {"name": self.name, "description": self.description, "inputSchema": self.schema,
                    "annotations": self.annotations()}
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def tool(profile: str, name: str, *, read_only: bool = False, destructive: bool = False,
         idempotent: bool = False, title: str | None = None,
         anthropic: dict[str, Any] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated handler as tool ``name`` of ``profile``; its docstring is the
    tool's description and its parameters after ``ctx`` are the tool's input."""
    def register(handler: Callable[..., Any]) -> Callable[..., Any]:
        doc = inspect.getdoc(handler)
        if not doc:
            raise TypeError(f"tool {name!r}: the handler's docstring is the tool's description; it has none")
        _REGISTRY[profile][name] = Tool(name, profile, " ".join(doc.split()), handler, read_only, destructive,
                                        read_only or idempotent, title, anthropic)
        return handler
    return register


def load_profile(profile: str) -> dict[str, Tool]:
    """The tools of ``profile`` (importing the module that defines them)."""
    if profile not in PROFILES:
        raise KeyError(profile)
    from importlib import import_module
    import_module(f".{_MODULES[profile]}", __package__)  # waits for another thread importing it
    return _REGISTRY[profile]


def profile_names() -> list[str]:
    """Every profile name, the native one first."""
    return list(PROFILES)


def profile_tools(profile: str) -> list[Tool]:
    """The tools of a profile, in definition order."""
    return list(load_profile(profile).values())


def export(profile: str, fmt: str = "openai") -> list[dict[str, Any]]:
    """Tool definitions of ``profile`` in ``openai``, ``anthropic`` or ``mcp`` format."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    return [t.to_format(fmt) for t in profile_tools(profile)]


# --------------------------------------------------------------- failures
class ToolFailure(Exception):
    """Raised inside the dispatcher for a structured error result (never leaves it)."""

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.hint = code, message, hint


def _type_name(prop: dict[str, Any]) -> str:
    """A property's JSON type as one word (``any`` when it has none; ``a/b`` for a list of types)."""
    kind = prop.get("type", "any")
    return kind if isinstance(kind, str) else "/".join(kind)


def _usage(t: Tool) -> str:
    props = t.schema.get("properties", {})
    required = set(t.schema.get("required", []))
    parts = [f"{k} ({_type_name(props[k])}{', required' if k in required else ''})" for k in props]
    return f"{t.name} takes: {', '.join(parts) or 'no arguments'}."


def error_result(code: str, message: str, hint: str | None = None) -> dict[str, Any]:
    """The structured error every tool returns instead of raising."""
    return {"error": {"code": code, "message": message,
                      "hint": hint or _HINTS.get(code) or "Read the message, fix the call and retry."}}


# ---------------------------------------------------------------- dispatch
@dataclass
class ToolContext:
    """What a handler gets besides its arguments: the vault and the session's author."""

    vault: Vault
    author: Identity | None = None
    profile: str = "gitmem"
    state: dict[str, Any] = field(default_factory=dict)
    #: the session's ``source`` group (``mcp:<start time>-<id>`` in an MCP session): memories
    #: written without a source of their own get it, so a search ranks them together
    source: str | None = None

    def conversation(self, source: str | None = None, *, link: bool = True) -> dict[str, Any]:
        """Frontmatter that ties a memory to the tool session it is written in: its
        ``source`` (the caller's, else the session's) and ``follows``, the id of the
        memory the same session wrote before it (``link=False``: none, e.g. for an
        upsert, which may update an older memory rather than continue the conversation)."""
        out: dict[str, Any] = {"source": source or self.source}
        if link and self.state.get("last_written"):
            out["follows"] = self.state["last_written"]
        return out

    def wrote(self, memory_id: str | None, status: str = "created") -> None:
        """Record the memory a write of the tool session created or changed (the next one
        follows it); a skipped write changes nothing."""
        if memory_id and status != "skipped":
            self.state["last_written"] = memory_id


class Toolbox:
    """A vault, a profile and an agent identity: lists tools and dispatches calls.

    ``vault`` is an open :class:`~gitmem.vault.Vault` or a path (opened here
    and closed by :meth:`close`).  ``agent`` (``"name"`` or ``"Name
    <email>"``) is the commit author of every write made through this toolbox
    (refused with ``SecretDetected`` if it looks like it holds a secret).
    Safe to share between threads (the Vault serialises writes).
    """

    def __init__(self, vault: Vault | str | Any, profile: str = "gitmem", *, agent: str | None = None) -> None:
        from ..config import Identity
        from ..memory.provenance import AGENT, make_origin
        from ..memory.secrets import policy_of, screen_identity
        from ..vault import Vault
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}")
        self._owned = not isinstance(vault, Vault)
        self.vault: Vault = vault if isinstance(vault, Vault) else Vault.open(vault)
        self.profile = profile
        # Whatever the vault's default, what comes through agent tools is an agent's
        # (memory/provenance.py): the tools' arguments can never say otherwise.
        named = Identity.parse(agent) if agent else None
        if named is not None:
            try:  # an agent name holding a secret is refused here, before any tool runs
                screen_identity(named.name, named.email, policy_of(self.vault.config))
            except BaseException:
                if self._owned:
                    self.vault.close()
                raise
        who = named or self.vault.author
        author = replace(who, origin=make_origin(AGENT, who.name))
        self.context = ToolContext(self.vault, author, profile)
        self._sessions: dict[Any, ToolContext] = {}

    @property
    def tools(self) -> dict[str, Tool]:
        """The profile's tools by name (the profile's module is imported on first use, so an
        MCP server answers ``initialize`` before paying for it)."""
        return load_profile(self.profile)

    def begin_session(self, kind: str = "mcp", key: Any = None) -> ToolContext:
        """Start a conversation (an MCP session): writes made through the context returned
        share the source ``<kind>:<start time>-<random id>`` and each follows the one
        before it.  ``key`` (e.g. an HTTP client's session object) keeps one context per
        client; None makes it this toolbox's own context."""
        import uuid

        ctx = ToolContext(self.vault, self.context.author, self.profile,
                          source=f"{kind}:{self.vault.now()}-{uuid.uuid4().hex[:6]}")
        if key is None:
            self.context = ctx
        else:
            if len(self._sessions) >= _MAX_SESSIONS:        # long-gone clients first
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[key] = ctx
        return ctx

    def __enter__(self) -> Toolbox:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the vault if this toolbox opened it."""
        if self._owned:
            self.vault.close()

    def names(self) -> list[str]:
        """The profile's tool names."""
        return list(self.tools)

    def schemas(self, fmt: str = "openai") -> list[dict[str, Any]]:
        """The profile's tool definitions in ``openai``, ``anthropic`` or ``mcp`` format."""
        return export(self.profile, fmt)

    def call(self, name: str, arguments: Mapping[str, Any] | str | None = None, *,
             session: Any = None) -> Any:
        """Run tool ``name``; returns its JSON-serialisable result or ``{"error": {...}}``.

        ``arguments`` may be a mapping or a JSON string (as OpenAI sends them).
        ``session`` names the client's conversation (see :meth:`begin_session`).
        Never raises (except KeyboardInterrupt/SystemExit).
        """
        from ..errors import GitmemError, Protected
        t = self.tools.get(name)
        if t is None:
            return error_result("unknown_tool", f"no tool named {name!r} in profile {self.profile!r}",
                                f"Tools: {', '.join(self.tools)}.")
        if arguments is None:
            arguments = {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return error_result("invalid_arguments", f"{name}: arguments are not valid JSON ({exc.msg})",
                                    _usage(t))
        arguments = dict(arguments) if isinstance(arguments, Mapping) else arguments
        from .arguments import ArgumentError
        try:
            values = t.arguments.validate(arguments)
        except ArgumentError as exc:
            return error_result("invalid_arguments", f"{name}: " + "; ".join(exc.problems[:5]), _usage(t))
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - a tool whose declaration cannot be built
            return error_result("internal_error", f"{name} failed: {type(exc).__name__}: {exc}")
        context = self.context if session is None else (
            self._sessions.get(session) or self.begin_session(key=session))
        self.vault.take_notices()   # only what this call's writes say
        try:
            return _with_notices(t.handler(context, **values), self.vault.take_notices())
        except ToolFailure as exc:
            return error_result(exc.code, exc.message, exc.hint)
        except GitmemError as exc:
            hint = exc.hint
            if exc.code == "protected" and hint in (None, Protected.default_hint):
                hint = protected_hint(self.profile)  # no tool has a force argument to pass
            return error_result(exc.code, exc.message, hint)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - the promise: tools never raise to the agent
            from ..errors import from_system_error
            mapped = from_system_error(exc)   # a full disk, SQLite busy ...: not a bug
            if mapped is not None:
                return error_result(mapped.code, mapped.message, mapped.hint)
            return error_result("internal_error", f"{name} failed: {type(exc).__name__}: {exc}")

    def call_text(self, name: str, arguments: Mapping[str, Any] | str | None = None) -> tuple[str, bool]:
        """Like :meth:`call`, rendered for a model: (text, is_error).

        Text results are returned as they are; others as JSON.  An error is
        its message plus the hint (the ``claude`` profile: the message alone,
        the exact text Anthropic's memory tool gives).
        """
        result = self.call(name, arguments)
        return render_result(result, self.profile)


def _with_notices(result: Any, notices: list[str]) -> Any:
    """A tool's result with what its writes said (e.g. a rule held as a proposal): a
    ``notice`` field in an object, a last paragraph in text."""
    if not notices:
        return result
    text = " ".join(notices)
    if isinstance(result, dict) and "error" not in result:
        return {**result, "notice": text}
    if isinstance(result, str):
        return f"{result}\n\nNote: {text}"
    return result


_MAX_SESSIONS = 256     # conversations an HTTP server keeps apart (the oldest is forgotten)


def render_result(result: Any, profile: str = "gitmem") -> tuple[str, bool]:
    """A tool result as (text, is_error) for a model's tool_result message."""
    if isinstance(result, dict) and set(result) == {"error"} and isinstance(result["error"], dict):
        err = result["error"]
        if profile == "claude":
            return str(err["message"]), True
        return json.dumps(result, ensure_ascii=False), True
    if isinstance(result, str):
        return result, False
    return json.dumps(result, ensure_ascii=False), False


def handler_parameters(t: Tool) -> tuple[set[str], set[str]]:
    """(every keyword parameter, the required ones) of a tool's handler, for tests."""
    sig = inspect.signature(t.handler)
    params = [p for p in list(sig.parameters.values())[1:]]
    return ({p.name for p in params}, {p.name for p in params if p.default is inspect.Parameter.empty})
