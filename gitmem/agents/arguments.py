"""Tool arguments: each tool's input schema and validator, both derived from its handler.

A handler declares each parameter once, in its signature::

    @tool("gitmem", "memory_move", idempotent=True, title="Move memory")
    def move(ctx: ToolContext, ref: Ref,
             tier: Annotated[Tier, Field(description="The destination tier.")]) -> dict[str, Any]:
        \"\"\"Move a memory to another tier ... Returns the memory without its body.\"\"\"

* The type says what JSON value the parameter takes: ``str``, ``int``, ``bool``,
  ``list[...]``, a ``Literal`` of strings (an enum) or a ``TypedDict`` decorated
  with ``@with_config(OBJECT)`` (an object refusing unknown keys); pydantic's
  ``Field`` adds the description and the limits (``min_length``, ``max_length``,
  ``ge``, ``le``).
* A parameter without a default is required.  One with a default may be left
  out, and then the handler's default applies; ``X | None = None`` means "may be
  left out", not "may be null": no tool takes null.
* The handler's docstring is the tool's description.

From that, pydantic builds one validator (strict: a JSON string is not a number,
``"5"`` is not 5, ``1`` is not ``true``; unknown arguments are refused) and the JSON
Schema clients see, with nothing they do not need (no titles, no defaults, nested
objects inline).  JSON has a single number type, so ``5.0`` is taken as the
integer 5 where an integer is expected, as JSON Schema does.

This module and the profile modules import pydantic; :mod:`gitmem.agents.registry`
does not (it loads a profile, and builds a tool's :class:`Arguments`, on first use).
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, NotRequired, Required, Union

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict

__all__ = ["Arguments", "ArgumentError", "OBJECT"]

#: The configuration of every tool's arguments and of every object inside them (a TypedDict
#: used as a parameter type is decorated with ``@with_config(OBJECT)``).
OBJECT = ConfigDict(extra="forbid", strict=True)

# Schema keywords clients get first, in this order; objects end with their keyword list.
_FIRST = ("type", "enum", "items", "properties", "required", "description", "minLength", "maxLength",
          "minimum", "maximum", "minItems", "maxItems")
_LAST = ("additionalProperties",)
_DROP = ("title", "default")   # pydantic's class and field names, and the handlers' defaults


class ArgumentError(Exception):
    """The arguments of a call do not match the tool's input schema: ``problems``, one
    readable sentence each, naming the parameter."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class Arguments:
    """The input schema and the validator of one tool, derived from ``handler(ctx, **arguments)``."""

    def __init__(self, handler: Callable[..., Any]) -> None:
        hints = typing.get_type_hints(handler, include_extras=True)
        fields: dict[str, Any] = {}
        for param in list(inspect.signature(handler).parameters.values())[1:]:  # after ctx
            if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                raise TypeError(f"{handler.__qualname__}: *{param.name} cannot be a tool parameter")
            if param.name not in hints:
                raise TypeError(f"{handler.__qualname__}: parameter {param.name!r} has no type")
            hint = hints[param.name]
            if param.default is param.empty:
                fields[param.name] = Required[hint]
            else:
                fields[param.name] = NotRequired[_without_none(hint) if param.default is None else hint]
        # The arguments object: strict, unknown keys refused (as every object inside it).
        # (typing's stubs do not let TypedDict be called with a name and fields built at run time)
        shape: Any = with_config(OBJECT)(TypedDict(f"{handler.__name__}_arguments", fields,  # type: ignore[operator]
                                                   total=False))
        self._adapter: TypeAdapter[dict[str, Any]] = TypeAdapter(shape)
        self.schema: dict[str, Any] = _clean(self._adapter.json_schema())

    def validate(self, arguments: Any) -> dict[str, Any]:
        """The arguments given, checked and ready for the handler (only those given: the
        handler's defaults fill in the rest); raises :class:`ArgumentError`."""
        prepared = _json_numbers(arguments, self.schema)
        # A JSON string may hold a lone surrogate ("\ud800"); pydantic cannot read one, so it
        # checks a copy with U+FFFD in its place (same length) and the handler gets the
        # original, as it always has (the vault then refuses to store it, with its own error).
        checked = _without_surrogates(prepared)
        try:
            values = self._adapter.validate_python(checked)
        except ValidationError as exc:
            raise ArgumentError(_problems(exc, self.schema)) from None
        return values if checked is prepared else _originals(values, prepared)


# ------------------------------------------------------------ declarations
def _without_none(hint: Any) -> Any:
    """``X | None`` -> ``X`` (an optional parameter may be left out, not sent as null)."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        rest = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
        # A union built at run time from a list has no `X | Y` spelling.
        return Union[tuple(rest)]  # noqa: UP007
    return hint


# ----------------------------------------------------------------- schema
def _clean(schema: dict[str, Any]) -> dict[str, Any]:
    """pydantic's JSON Schema as clients get it: objects inline (no ``$defs``), no titles or
    defaults, the keywords in a readable order."""
    defs = schema.get("$defs", {})

    def node(value: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in value:
            value = {**defs[value["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in value.items() if k != "$ref"}}
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in _DROP or key == "$defs":
                continue
            if key == "properties":
                out[key] = {name: node(sub) for name, sub in item.items()}
            elif key in ("items", "additionalProperties") and isinstance(item, dict):
                out[key] = node(item)
            else:
                out[key] = item
        return _ordered(out)

    return node(schema)


def _ordered(schema: dict[str, Any]) -> dict[str, Any]:
    keys = [k for k in _FIRST if k in schema]
    keys += [k for k in schema if k not in _FIRST and k not in _LAST]
    keys += [k for k in _LAST if k in schema]
    return {k: schema[k] for k in keys}


def _json_numbers(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` with each integral float (``5.0``) that the schema expects as an integer
    turned into an int: JSON has one number type, and JSON Schema counts 5.0 as an integer."""
    kind = schema.get("type")
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == "array" and isinstance(value, list) and "items" in schema:
        return [_json_numbers(item, schema["items"]) for item in value]
    if kind == "object" and isinstance(value, dict):
        props = schema.get("properties", {})
        return {k: _json_numbers(v, props[k]) if k in props else v for k, v in value.items()}
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_surrogates(value: Any) -> Any:
    """``value`` with each lone surrogate in its strings (keys too) replaced by U+FFFD; the
    very same object when it has none."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, list):
        items = [_without_surrogates(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, dict):
        pairs = [(_without_surrogates(k), _without_surrogates(v)) for k, v in value.items()]
        same = all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True))
        return value if same else dict(pairs)
    return value


def _originals(checked: Any, given: Any) -> Any:
    """The validated ``checked`` with the strings of ``given`` back in place (a strict
    validation returns the same shape it was given)."""
    if isinstance(checked, str) and isinstance(given, str):
        return given
    if isinstance(checked, list) and isinstance(given, list):
        # Validation keeps a list's length; not strict, so an odd shape is never a crash here.
        return [_originals(c, g) for c, g in zip(checked, given, strict=False)]
    if isinstance(checked, dict) and isinstance(given, dict):
        keys = {_without_surrogates(k): k for k in given}
        return {keys.get(k, k): _originals(v, given.get(keys.get(k, k))) for k, v in checked.items()}
    return checked


# ----------------------------------------------------------------- errors
def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _where(loc: Iterable[Any]) -> str:
    """A parameter or a part of one as the messages name it: ``'tags'[1]``, ``'related'[0].memoryId``."""
    parts = list(loc)
    if not parts:
        return "arguments"
    out = f"'{parts[0]}'"
    for part in parts[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _at(schema: dict[str, Any], loc: Iterable[Any]) -> dict[str, Any]:
    """The part of ``schema`` describing the value at ``loc`` ({} if it describes none)."""
    for part in loc:
        schema = (schema.get("items") if isinstance(part, int) else schema.get("properties", {}).get(part)) or {}
    return schema


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _problems(exc: ValidationError, schema: dict[str, Any]) -> list[str]:
    """One sentence per problem pydantic found: what is missing first, then unknown
    arguments, then wrong values in the order of the schema."""
    missing: list[str] = []
    unknown: dict[tuple[Any, ...], list[str]] = {}
    wrong: list[str] = []
    for error in exc.errors(include_url=False):
        loc, kind, value = tuple(error["loc"]), error["type"], error.get("input")
        ctx = error.get("ctx") or {}
        where = _where(loc)
        expected = _at(schema, loc)
        if kind == "missing":
            missing.append(f"{where} is required")
        elif kind == "extra_forbidden":
            unknown.setdefault(loc[:-1], []).append(repr(str(loc[-1])))
        elif not loc and kind.endswith("_type"):
            wrong.append(f"arguments must be a JSON object, got {_json_type(value)}")
        elif kind.endswith("_type") or kind in ("literal_error", "enum"):
            if "type" in expected and _json_type(value) != expected["type"] and not (
                    expected["type"] == "number" and _json_type(value) == "integer"):
                wrong.append(f"{where} must be {expected['type']}, got {_json_type(value)}")
            elif "enum" in expected:
                wrong.append(f"{where} must be one of {', '.join(json.dumps(v) for v in expected['enum'])}, "
                             f"got {_show(value)}")
            else:
                wrong.append(f"{where}: {error['msg']}")
        elif kind == "string_too_short":
            least = ctx.get("min_length", 1)
            wrong.append(f"{where} must not be empty" if least == 1
                         else f"{where} must have at least {least} characters")
        elif kind == "string_too_long":
            wrong.append(f"{where} has {len(value):,} characters; the limit is {ctx.get('max_length', 0):,}")
        elif kind == "too_short":
            wrong.append(f"{where} needs at least {ctx.get('min_length')} item(s), got {ctx.get('actual_length')}")
        elif kind == "too_long":
            wrong.append(f"{where} allows at most {ctx.get('max_length')} item(s), got {ctx.get('actual_length')}")
        elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            sign = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
            bound = next(iter(ctx.values()), "?")
            wrong.append(f"{where} must be {sign} {bound}, got {_show(value)}")
        else:
            wrong.append(f"{where}: {error['msg']}")
    extra = []
    for parent, names in unknown.items():
        listed = ", ".join(sorted(names))
        extra.append(f"unknown argument(s) {listed}" if not parent else f"{_where(parent)} has unknown key(s) {listed}")
    return missing + extra + wrong
