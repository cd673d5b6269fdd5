"""One hostile value in one file must never stop the vault.

A person (Obsidian, vim) or a git remote can put anything in a memory file's
frontmatter.  Such a file is read with safe defaults, reported by ``gitmem
doctor`` (path and field), never rewritten just because it was read, and every
other command keeps working.  Writes of bad values through the API get gitmem
errors, never raw exceptions.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitmem import Vault
from gitmem.errors import GitmemError, InvalidMetadata
from gitmem.memory.markdown import MAX_FRONTMATTER_BYTES, parse_text, render, wikilinks
from gitmem.memory.schema import FIELD_ORDER, REPLACEMENT_CHAR, clean_metadata, derive, first_heading, sanitize_metadata
from gitmem.store.catalog import Catalog

from .conftest import git, snapshot

HOSTILE = "long_term/hostile.md"
BODY = "Zebra quokka narwhal: the hostile file's own words.\n"

# (frontmatter lines, the field doctor must name)
CASES: list[tuple[str, str]] = [
    ("importance: 99999999999999999999999", "importance"),
    ("importance: -3", "importance"),
    ("importance: .inf", "importance"),
    ("confidence: 99999999999999999999999", "confidence"),
    ("confidence: .nan", "confidence"),
    ("strength: 99999999999999999999999", "strength"),
    ("strength: -0.5", "strength"),
    ("strength: .nan", "strength"),
    ("strength: -.inf", "strength"),
    ("retrievals: 99999999999999999999999", "retrievals"),
    ("retrievals: -1", "retrievals"),
    ("retrievals: .inf", "retrievals"),
    ('title: "\\ud800"', "title"),
    ('title: "Half \\udfff a title"', "title"),
    ('tags: [ok, "\\ud800"]', "tags"),
    ('summary: "\\ud800"', "summary"),
    ('agent: "\\udc80"', "agent"),
    ('scope: "\\ud800"', "scope"),
    ('flavour: "\\ud800"', "flavour"),                      # a field gitmem does not know
    ('"\\ud800": surrogate key', "\ufffd"),
    ("mood: {deep: [.nan, 99999999999999999999999, \"\\ud800\"]}", "mood"),
    ("tags: [null, 1, {a: b}, [x]]", "tags"),
    ("tags: {a: b}", "tags"),
    ("aliases: 5", "aliases"),
    ("entities: [{x: 1}, null]", "entities"),
    ("related: {id: nothing}", "related"),
    ("related: [{id: [1]}, 7]", "related"),
    ("type: {a: b}", "type"),
    ("type: .nan", "type"),
    ("status: [active]", "status"),
    ("created: 2026-13-45", "created"),
    ("updated: 0001-01-01T00:00:00+01:00", "updated"),
    ("expires: 9999-12-31T23:59:59-23:59", "expires"),
    ("reinforced: [1, 2]", "reinforced"),
    ("created: .nan", "created"),
    ("id: {a: b}", "id"),
    ("title: " + "x" * 60_000, "title"),
    ("summary: |\n  two\n  lines", "summary"),
]


def plant(root: Path, rel: str, text: str | bytes) -> bytes:
    """Save a file as a person would (not through gitmem); return its bytes."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8") if isinstance(text, str) else text
    path.write_bytes(data)
    return data


def hostile(frontmatter: str, body: str = BODY) -> str:
    return f"---\n{frontmatter}\n---\n{body}"


def encodable(value: Any) -> str:
    """JSON of ``value`` as an agent would receive it: strict, valid UTF-8."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)
    text.encode("utf-8")
    return text


def findings(vault: Vault, repair: bool = False) -> dict[str, Any]:
    return {f.check: f for f in vault.doctor(repair=repair)}


def with_neighbours(vault: Vault) -> None:
    """Two short-term memories for compress, one long-term for reflect to look at."""
    vault.add("Alpha note", "Alpha text about llamas and alpacas.\n", tags=["farm"])
    vault.add("Beta note", "Beta text about falcons and owls.\n", tags=["birds"])
    vault.add("Gamma note", "Gamma text about rivers.\n", tier="long_term")


@pytest.mark.slow
@pytest.mark.parametrize("frontmatter,field", CASES, ids=[c[1] + "-" + c[0][:30] for c in CASES])
def test_a_hostile_value_in_a_persons_file_never_stops_the_vault(
        vault: Vault, frontmatter: str, field: str) -> None:
    with_neighbours(vault)
    data = plant(vault.root, HOSTILE, hostile(frontmatter))

    listed = {m.path: m for m in vault.list(status=None)}
    assert HOSTILE in listed
    encodable([m.to_dict() for m in listed.values()])
    hits = vault.search("narwhal").hits
    assert [h.path for h in hits] == [HOSTILE]
    memory = vault.get(HOSTILE)
    assert memory.body == BODY
    encodable(memory.to_dict())
    clean_metadata(memory.meta)                          # read with values gitmem can write
    assert 1 <= memory.importance <= 5 and 1 <= memory.confidence <= 5
    render(memory.meta, memory.body).encode("utf-8")     # `gitmem show` prints this

    found = findings(vault)
    assert not found["metadata"].ok
    assert HOSTILE in found["metadata"].paths
    assert f"{field}:" in found["metadata"].details[HOSTILE]
    repaired = findings(vault, repair=True)
    assert HOSTILE in repaired["metadata"].paths         # reported, never "fixed" by a rewrite
    assert (vault.root / "MEMORY.md").read_bytes().decode("utf-8")

    vault.add("Delta note", "Delta text about volcanoes.\n")
    vault.reflect()
    vault.compress("short_term")
    assert vault.reflect().busy is False
    assert (vault.root / HOSTILE).read_bytes() == data  # never rewritten because it was read
    assert "MEMORY.md" in git(vault.root, "ls-files")
    (vault.root / "MEMORY.md").read_bytes().decode("utf-8")


def test_a_committed_hostile_file_from_a_remote_is_read_safely(vault: Vault) -> None:
    """The same through git: a file that arrives in a commit (a pull, a person's git commit)."""
    with_neighbours(vault)
    data = plant(vault.root, HOSTILE, hostile('title: "\\ud800"\nimportance: 99999999999999999999999\n'
                                              "tags: [null, 1, {a: b}, [x]]\nstrength: .nan"))
    git(vault.root, "add", HOSTILE)
    git(vault.root, "commit", "--no-verify", "-qm", "from a remote")
    vault.close()
    with Vault.open(vault.root) as again:
        assert again.get(HOSTILE).title == REPLACEMENT_CHAR
        again.add("Epsilon note", "Epsilon text.\n")
        assert findings(again)["metadata"].paths == [HOSTILE]
        assert again.history(HOSTILE)
        again.reflect()
    assert (vault.root / HOSTILE).read_bytes() == data


@pytest.mark.parametrize("data,check", ids=["surrogate-bytes", "1mb-field", "nul"], argvalues=[
    # A lone surrogate encoded into the file's bytes (CESU-8): not UTF-8 at all.
    (b"---\ntitle: Surrogate bytes\n---\nbad \xed\xa0\x80 bytes, zebra quokka narwhal\n", "frontmatter"),
    # A 1 MB string in a field: over the frontmatter limit, read as plain Markdown.  (Words:
    # one 1 MB word takes the search index's Snowball stemmer minutes, see the report.)
    (("---\ntitle: Big\nsummary: " + "lorem ipsum " * 90_000 + "\n---\nzebra quokka narwhal\n").encode(),
     "frontmatter"),
    # A NUL byte: not a text memory.
    (b"---\ntitle: Nul\n---\nzebra\x00 quokka narwhal\n", "frontmatter"),
])
@pytest.mark.slow
def test_unreadable_frontmatter_is_reported_and_everything_else_works(
        vault: Vault, data: bytes, check: str) -> None:
    with_neighbours(vault)
    plant(vault.root, HOSTILE, data)
    assert HOSTILE in {m.path for m in vault.list(status=None)}
    encodable(vault.get(HOSTILE).to_dict())
    assert HOSTILE in findings(vault)[check].paths
    findings(vault, repair=True)
    vault.add("Delta note", "Delta text.\n")
    vault.reflect()
    vault.compress("short_term")
    assert (vault.root / HOSTILE).read_bytes() == data


def test_a_large_hostile_body_is_read_in_linear_time(vault: Vault) -> None:
    """Bodies a regex once took quadratic time on: a heading line full of spaces (title
    from the first heading) and a run of ``[[`` (wikilinks).  The old patterns needed
    10 s for 16 KB of ``[[`` and hours for these 400 KB; now they take milliseconds."""
    body = "# a" + " " * 200_000 + "b\n" + "[[" * 100_000 + "\n" + "[[a#" * 25_000 + "\n"
    data = plant(vault.root, HOSTILE, body)
    started = time.perf_counter()
    memory = vault.get(HOSTILE)
    assert memory.title.startswith("a") and len(memory.title) <= 200
    assert [m.path for m in vault.list()] == [HOSTILE]
    vault.add("Another", "Another text.\n")
    findings(vault)
    assert time.perf_counter() - started < 60   # generous: the old code did not finish in hours
    assert (vault.root / HOSTILE).read_bytes() == data


def test_first_heading_and_wikilinks_keep_their_meaning() -> None:
    assert first_heading("text\n## Hello  ##  \nmore") == "Hello"
    assert first_heading("# C#\n") == "C"
    assert first_heading("# ###") == "#"
    assert first_heading("####### seven\n") is None
    assert wikilinks("See [[Note]], [[Other#Part|alias]] and [[x|y]] and [[Note]].") == ["Note", "Other", "x"]


def test_reflect_runs_when_a_near_duplicate_has_hostile_tags(vault: Vault) -> None:
    """Found on main: reflect raised TypeError when a near-duplicate pair included a file
    whose tags held a mapping or null, and every later reflect failed the same way.
    Consolidation now leaves such a file as the person wrote it (doctor reports it); an
    explicit merge reads its tags as the strings they hold."""
    text = "Maya prefers dark mode in every editor and terminal she uses at work.\n"
    first = vault.add("Dark mode", text, tags=["ui"], tier="mid_term")
    copy = "mid_term/dark-copy.md"
    data = plant(vault.root, copy, hostile("title: Dark mode again\ntags: [null, 1, {a: b}, [x], ui]",
                                           text))
    vault.search("dark mode")   # a retrieval: reflect would fold it into the file's frontmatter
    assert vault.reflect().merged == 0
    assert vault.reflect().busy is False          # and the next reflect runs too
    assert (vault.root / copy).read_bytes() == data
    merged = vault.merge([first.id, copy]).memory
    assert merged.tags == ["ui", "1"]
    assert "merged_into:" in (vault.root / "archive" / "dark-copy.md").read_text("utf-8")


def test_reflect_still_merges_and_folds_valid_files(vault: Vault) -> None:
    text = "Maya prefers dark mode in every editor and terminal she uses at work.\n"
    vault.add("Dark mode", text, tags=["ui"], tier="mid_term")
    plant(vault.root, "mid_term/dark-copy.md", hostile("title: Dark mode again\ntags: [ui, extra]", text))
    assert vault.reflect().merged == 1


def test_compress_and_merge_read_hostile_sources(vault: Vault) -> None:
    vault.add("Alpha note", "Alpha text about llamas.\n", tags=["farm"])
    plant(vault.root, "short_term/odd.md", hostile(
        'title: "\\ud800 odd"\nimportance: 99999999999999999999999\ntags: [null, {a: b}, farm, 2]\n'
        'flavour: "\\udc00"  # kept as written\nstrength: .nan'))
    vault.scan()  # compress_tier reads the catalog as last scanned
    summary = vault.compress("short_term")
    assert summary.tier == "mid_term" and summary.tags == ["farm", "2"]
    archived = (vault.root / "archive" / "odd.md").read_text("utf-8")
    # gitmem rewrote the file to archive it: its unknown field is kept byte for byte,
    # known fields with bad values are written as they were read.
    assert 'flavour: "\\udc00"  # kept as written\n' in archived
    assert "title: \ufffd odd" in archived and "importance" not in archived
    other = vault.add("Beta note", "Beta text.\n", tier="mid_term")
    plant(vault.root, "mid_term/odd2.md", hostile("tags: {a: b}\nconfidence: .inf\ncreated: 2026-13-45"))
    merged = vault.merge([other.id, "mid_term/odd2.md"]).memory
    assert merged.tags == [] and clean_metadata(merged.meta)


def test_an_update_keeps_a_persons_unknown_field_as_written(vault: Vault) -> None:
    plant(vault.root, "short_term/keep.md", hostile('title: Keep\nflavour: "\\ud800"  # odd\n'
                                                    "mood: .nan"))
    vault.update("short_term/keep.md", add_tags=["x"])
    text = (vault.root / "short_term" / "keep.md").read_text("utf-8")
    assert 'flavour: "\\ud800"  # odd\n' in text and "mood: .nan\n" in text


# ------------------------------------------------------------------ the CLI
def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitmem", *args], cwd=root, capture_output=True,
                          text=True, encoding="utf-8", timeout=300,
                          env={**os.environ, "GITMEM_DEBUG": ""})


@pytest.mark.slow
def test_every_command_works_in_real_processes_beside_hostile_files(tmp_path: Path) -> None:
    root = tmp_path / "v"
    assert run(tmp_path, "init", str(root)).returncode == 0
    for args in (["add", "Alpha note", "Alpha text about llamas.", "--tag", "farm"],
                 ["add", "Beta note", "Beta text about owls."]):
        assert run(root, *args).returncode == 0
    files = {
        "long_term/huge.md": ("importance: 99999999999999999999999\nretrievals: 99999999999999999999999",
                              "importance"),
        "long_term/surrogate.md": ('title: "\\ud800"\nflavour: "\\udc00"', "title"),
        "long_term/tags.md": ("title: Tags\ntags: [null, 1, {a: b}, [x]]", "tags"),
        "long_term/nan.md": ("title: Nan\nstrength: .nan\nconfidence: .inf\ncreated: 2026-13-45",
                             "strength"),
    }
    before = {rel: plant(root, rel, hostile(fm, f"Zebra {n} quokka narwhal {rel}.\n"))
              for n, (rel, (fm, _)) in enumerate(files.items())}
    results = {}
    for args in (["ls"], ["ls", "--json"], ["search", "narwhal"], ["search", "narwhal", "--json"],
                 ["show", "long_term/surrogate.md"], ["show", "long_term/huge.md", "--json"],
                 ["doctor"], ["doctor", "--json"], ["doctor", "--repair"],
                 ["add", "Gamma note", "Gamma text."], ["reflect"], ["compress", "short_term"],
                 ["ls", "--tag", "1"]):
        result = run(root, *args)
        assert "Traceback" not in result.stderr, (args, result.stderr)
        assert result.returncode == (1 if args[0] == "doctor" else 0), (args, result.stderr)
        results[" ".join(args)] = result.stdout
    assert results["search narwhal"].count("long_term/") == len(files) or "4 of 4" in results["search narwhal"]
    for rel in files:
        assert f"{rel}: " in results["doctor"] and rel in results["doctor --repair"]
    details = {f["check"]: f for f in json.loads(results["doctor --json"])["findings"]}["metadata"]["details"]
    for rel, (_, field) in files.items():
        assert f"{field}:" in details[rel]
    shown = json.loads(results["show long_term/huge.md --json"])
    assert shown["importance"] == 3 and "retrievals" not in shown
    for rel, data in before.items():
        assert (root / rel).read_bytes() == data


def test_a_write_of_a_bad_value_through_the_cli_is_a_gitmem_error(tmp_path: Path) -> None:
    root = tmp_path / "v"
    assert run(tmp_path, "init", str(root)).returncode == 0
    result = run(root, "add", "Big", "text", "--importance", "99999999999999999999999")
    assert result.returncode != 0 and "Traceback" not in result.stderr


# ------------------------------------------------------------------ API writes
@pytest.mark.parametrize("call,code", [
    (lambda v: v.add("\ud800"), "invalid_title"),
    (lambda v: v.add("Half \udfff title"), "invalid_title"),
    (lambda v: v.add("Ok", tags=["\ud800"]), "invalid_metadata"),
    (lambda v: v.add("Ok", tags=["fine", "x\udc00"]), "invalid_metadata"),
    (lambda v: v.add("Ok", entities=["\ud800"]), "invalid_metadata"),
    (lambda v: v.add("Ok", summary="\ud800"), "invalid_metadata"),
    (lambda v: v.add("Ok", source="\udfff"), "invalid_metadata"),
    (lambda v: v.add("Ok", flavour="\ud800"), "invalid_metadata"),
    (lambda v: v.add("Ok", flavour={"a": ["\ud800"]}), "invalid_metadata"),
    (lambda v: v.add("Ok", related=[{"id": "\ud800", "relation": "refines"}]), "invalid_metadata"),
    (lambda v: v.add("Ok", "body \ud800"), "invalid_content"),
    (lambda v: v.add("Ok", importance=10 ** 30), "invalid_metadata"),
    (lambda v: v.add("Ok", importance=10 ** 5000), "invalid_metadata"),
    (lambda v: v.add("Ok", confidence=float("nan")), "invalid_metadata"),
    (lambda v: v.add("Ok", strength=float("inf")), "invalid_metadata"),
    (lambda v: v.add("Ok", retrievals=10 ** 30), "invalid_metadata"),
    (lambda v: v.add("Ok", expires="0001-01-01T00:00:00+01:00"), "invalid_metadata"),
    (lambda v: v.add("Ok", expires="9999-12-31T23:59:59-23:59"), "invalid_metadata"),
    (lambda v: v.add("Ok", expires="2026-13-45"), "invalid_metadata"),
    (lambda v: v.add("Ok", flavour=object()), "invalid_metadata"),
    (lambda v: v.add("Ok", flavour=10 ** 5000), "invalid_metadata"),
    (lambda v: v.update("Existing", title="\ud800"), "invalid_title"),
    (lambda v: v.update("Existing", add_tags=["\ud800"]), "invalid_metadata"),
    (lambda v: v.update("Existing", tags=[{"a": "b"}]), "invalid_metadata"),
    (lambda v: v.update("Existing", meta={"flavour": "\ud800"}), "invalid_metadata"),
    (lambda v: v.update("Existing", meta={1: "x"}), "invalid_metadata"),
    (lambda v: v.update("Existing", body="\udfff"), "invalid_content"),
    (lambda v: v.update("Existing", append="\udfff"), "invalid_content"),
])
@pytest.mark.slow
def test_api_writes_of_bad_values_get_gitmem_errors(vault: Vault, call: Any, code: str) -> None:
    vault.add("Existing", "Existing text.\n")
    before = snapshot(vault.root)
    with pytest.raises(GitmemError) as info:
        call(vault)
    assert info.value.code == code, info.value
    encodable(info.value.to_dict())
    assert snapshot(vault.root) == before


# ------------------------------------------------------------------ many tags
@pytest.mark.slow
def test_a_hundred_thousand_tags_are_handled_in_linear_time(vault: Vault) -> None:
    """100,000 tags took 335 s (a list membership test per tag).  Validating them is
    now linear; the memory is refused because its frontmatter could not be read back."""
    tags = [f"tag{i}" for i in range(100_000)]
    assert clean_metadata({"tags": tags + tags})["tags"] == tags
    assert sanitize_metadata({"tags": tags + [None]})[0]["tags"] == tags
    before = snapshot(vault.root)
    with pytest.raises(InvalidMetadata) as info:
        vault.add("Many tags", "text", tags=tags)
    assert "frontmatter would be" in info.value.message
    assert snapshot(vault.root) == before


def test_many_tags_that_fit_round_trip(vault: Vault) -> None:
    tags = [f"t{i}" for i in range(5_000)]
    memory = vault.add("Many tags", "text", tags=tags)
    assert vault.get(memory.id).tags == tags
    assert len((vault.root / memory.path).read_bytes()) < MAX_FRONTMATTER_BYTES


# ------------------------------------------------------------------ properties
_scalars = (st.none() | st.booleans() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30)
            | st.floats(allow_nan=True, allow_infinity=True)
            | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0xDFFF), max_size=8)
            | st.sampled_from(["2026-13-45", "0001-01-01T00:00:00+01:00", "long_term", "fact", "\ud800"]))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=12)
_metas = st.dictionaries(st.sampled_from(FIELD_ORDER + ("flavour", "\ud800")), _values, max_size=8)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(meta=_metas)
def test_any_metadata_is_read_into_values_every_reader_can_use(meta: dict[str, Any]) -> None:
    problems: list[Any] = []
    out = derive("long_term/x.md", meta, "# Heading\nbody", problems=problems)
    clean_metadata(out)                    # gitmem can write it back
    encodable(out)                         # agents can read it as strict JSON
    render(out, "body").encode("utf-8")    # and as a file
    assert isinstance(out["title"], str) and isinstance(out["id"], str)
    for key in ("tags", "aliases", "entities"):
        assert all(isinstance(t, str) for t in out.get(key, []))
    for key in ("importance", "confidence"):
        assert out.get(key, 3) in range(1, 6)
    assert math.isfinite(out.get("strength", 1.0))
    assert all(str(p).split(":", 1)[0] for p in problems)


def test_the_catalog_stores_whatever_a_reader_hands_it(tmp_path: Path) -> None:
    """The last line of defence, should an unsanitised value reach the catalog."""
    catalog = Catalog(tmp_path / "catalog.sqlite")
    meta = {"title": "\ud800", "tier": "long_term", "importance": 10 ** 30, "tags": [{"a": "b"}, None],
            "strength": math.nan, "flavour": {"\udc00": [math.inf]}, "type": {"a": 1}}
    catalog.put("long_term/x.md", "id\ud800", None, meta, "problem \ud800", "body [[x]]", "hash")
    row = catalog.row("long_term/x.md")
    assert row is not None and row.meta["title"] == REPLACEMENT_CHAR
    encodable(row.meta)
    assert catalog.listing("long_term", 5)
    catalog.close()


def test_doctor_names_every_bad_field_of_a_file(vault: Vault) -> None:
    plant(vault.root, HOSTILE, hostile("importance: 99999999999999999999999\n"
                                       'title: "\\ud800"\ntags: [null]\nstrength: .nan'))
    details = findings(vault)["metadata"].details[HOSTILE]
    for field in ("importance:", "title:", "tags:", "strength:"):
        assert field in details
    parsed = parse_text((vault.root / HOSTILE).read_text("utf-8"))
    assert sanitize_metadata(parsed.meta)[1]   # the same problems, from the public API


# ------------------------------------------------------------ .gitmem.yaml
CONFIG_CASES = [
    ("memory_index_lines: 99999999999999999999999\n", "memory_index_lines"),
    ("reflect:\n  promote_min_retrievals: .inf\n", "reflect.promote_min_retrievals"),
    ('author: {name: "a\\0b", email: a@b}\n', "author.name"),
    ("dedup: {skip: .nan}\n", "dedup.skip"),
    ("max_content_bytes: 1e400\n", "max_content_bytes"),
]


@pytest.mark.parametrize("line,key", CONFIG_CASES, ids=[c[1] for c in CONFIG_CASES])
def test_a_bad_value_in_the_config_file_is_held_back_and_reported(tmp_path: Path, line: str, key: str) -> None:
    """A person's .gitmem.yaml with a value out of range: the default is used, doctor names it."""
    root = tmp_path / "v"
    Vault.init(root, author="agent").close()
    config = root / ".gitmem.yaml"
    config.write_text(config.read_text() + line)
    with Vault.open(root) as vault:
        assert key in " ".join(vault.config.problems)
        assert vault.config.memory_index_lines == 200 and vault.config.author.name == "gitmem"
        vault.add("Still works", "Adding after a bad config value.\n", tags=["x"])
        vault.reflect()
        found = findings(vault)
        assert not found["config"].ok and key in " ".join(found["config"].details.values())
    fsck = subprocess.run(["git", "fsck", "--strict", "--full"], cwd=root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
