"""The tool definitions clients see are a fixed contract: `gitmem tools export` of every
profile, in every format, matches the snapshot in tests/fixtures/tool_schemas/.

The snapshots were taken from `gitmem tools export --profile P --format F` when each
schema was still written out by hand; since then every schema is derived from its
handler's signature.  Compared as JSON: the same tools in the same order, the same
names, types, enums, limits, descriptions, required lists and additionalProperties,
and each schema's properties in the same order (the order a model reads them in).
Only the order of keywords inside one schema object is free, as in any JSON object.

A change to a tool's contract is deliberate: regenerate the snapshot with
``gitmem tools export --profile P --format F > tests/fixtures/tool_schemas/P.F.json``
and review the diff.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gitmem.agents.registry import FORMATS, PROFILES
from gitmem.cli.main import cli

SNAPSHOTS = Path(__file__).parent / "fixtures" / "tool_schemas"


def comparable(value: Any, names: bool = False) -> Any:
    """``value`` with the key order of JSON objects made irrelevant, except for the
    property names of a schema (``names``), whose order is kept."""
    if isinstance(value, dict):
        pairs = [(k, comparable(v, names=(k == "properties" and not names))) for k, v in value.items()]
        return pairs if names else sorted(pairs, key=lambda kv: kv[0])
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def test_a_snapshot_for_every_profile_and_format() -> None:
    expected = {f"{p}.{f}.json" for p in PROFILES for f in FORMATS}
    assert {p.name for p in SNAPSHOTS.glob("*.json")} == expected


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("profile", list(PROFILES))
def test_export_matches_the_snapshot(profile: str, fmt: str) -> None:
    result = CliRunner().invoke(cli, ["tools", "export", "--profile", profile, "--format", fmt])
    assert result.exit_code == 0, result.output
    got = json.loads(result.output)
    want = json.loads((SNAPSHOTS / f"{profile}.{fmt}.json").read_text(encoding="utf-8"))
    assert got == want
    assert comparable(got) == comparable(want)        # and each schema's properties in the same order


def test_the_comparison_sees_property_order_but_not_keyword_order() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}, "b": {"type": "integer"}}}
    reordered = {"properties": {"a": {"maxLength": 3, "type": "string"}, "b": {"type": "integer"}}, "type": "object"}
    swapped = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string", "maxLength": 3}}}
    assert comparable(schema) == comparable(reordered)
    assert comparable(schema) != comparable(swapped)
    # a parameter that happens to be called "properties" is a name, not a keyword
    named = {"type": "object", "properties": {"properties": {"type": "string"}, "x": {"type": "string"}}}
    assert comparable(named) != comparable({"type": "object", "properties": {"x": {"type": "string"},
                                                                             "properties": {"type": "string"}}})
