"""Fuzzing the two places hostile input meets gitmem: frontmatter parsing and path validation.

The promise: whatever the input, gitmem either works or raises a
:class:`GitmemError` (never a YAML, Unicode, OS or other exception), and no
path it accepts leads outside the vault.  Example counts are bounded so the
file runs in a few seconds; raise them with ``GITMEM_FUZZ_EXAMPLES``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitmem import Vault
from gitmem.errors import GitmemError, InvalidPath
from gitmem.memory.markdown import decode, parse_text, render
from gitmem import safefs
from gitmem.memory.paths import check_relpath

N = int(os.environ.get("GITMEM_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=N, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])

# Pieces that make YAML and frontmatter parsers stumble.
YAML_BITS = ["---", "---\n", "\n", ": ", "- ", "[", "]", "{", "}", "&a ", "*a", "!!python/object:os.system",
             "!!binary", "|", ">", "'", '"', "#", "? ", "%YAML 1.1\n", "\ufeff", "\r\n", "\t", "no", "12:30",
             "1.10", "~", "null", "title", "id", "tags", "tier", "<<: *a", "\x85", "\u2028", "\x00", "\udc80"]
yamlish = st.lists(st.one_of(st.sampled_from(YAML_BITS), st.text(max_size=8)), max_size=40).map("".join)

PATH_BITS = ["..", ".", "/", "\\", "%2e", "%2f", "%25", "%5c", "~", "C:", "c:", "\\\\?\\", "//", "short_term",
             "long_term", "archive", ".git", ".obsidian", "x.md", "CON", "nul", "\x00", "\n", " ", "\u2024",
             "\uff0e", "\uff0f", "\u2215", "\u2025", "e\u0301", "\u00e9", "\u202e", "\ufeff", ":", "*", "link",
             "a" * 50]
pathish = st.lists(st.one_of(st.sampled_from(PATH_BITS), st.text(max_size=4)), min_size=1, max_size=12).map("".join)
# Mostly-plausible paths: a tier folder (or a symlink inside one) then fuzz, so many get accepted.
tiered = st.tuples(st.sampled_from(["short_term", "long_term", "short_term/link", "long_term/rootlink",
                                    "mid_term/sub", "archive"]), pathish).map("/".join)


@FUZZ
@given(yamlish)
def test_frontmatter_parser_raises_only_gitmem_errors(text: str) -> None:
    for strict in (False, True):
        try:
            parsed = parse_text(text, strict=strict)
        except GitmemError:
            assert strict
            continue
        assert isinstance(parsed.meta, dict) and isinstance(parsed.body, str)
        assert parsed.problem is None or parsed.meta == {}


@FUZZ
@given(st.binary(max_size=300) | yamlish.map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_reading_any_bytes_as_a_memory_never_crashes(vault_for_fuzz: Vault, data: bytes) -> None:
    try:
        decode(data)
    except GitmemError:
        pass
    memory = vault_for_fuzz.services.reader.read_file("short_term/fuzz.md", data)  # noqa: SLF001 - the read path itself
    assert isinstance(memory.body, str) and memory.id


meta_values = st.one_of(st.text(max_size=30), st.integers(-10**6, 10**6), st.booleans(),
                        st.lists(st.text(max_size=10), max_size=4))
bodies = st.text(max_size=200).filter(lambda b: "\x00" not in b)


@FUZZ
@given(st.dictionaries(st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True), meta_values, max_size=5), bodies)
def test_render_then_parse_round_trips(meta: dict, body: str) -> None:
    text = render(meta, body)
    parsed = parse_text(text, strict=True)
    assert parsed.body == body
    assert parsed.meta == meta


def _parsed_both_ways(text: str) -> tuple[object, object]:
    """parse_text with libyaml's parser where gitmem uses it, and with the pure-Python one only."""
    from gitmem.memory import markdown
    fast = parse_text(text)
    kept = markdown._CLoader  # noqa: SLF001 - the parser choice itself is under test
    markdown._CLoader = None  # noqa: SLF001
    try:
        slow = parse_text(text)
    finally:
        markdown._CLoader = kept  # noqa: SLF001
    return fast, slow


@FUZZ
@given(yamlish
       | st.dictionaries(st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True), meta_values,
                         max_size=5).map(lambda meta: render(meta, "body"))
       | st.lists(st.tuples(st.sampled_from(["title", "tags", "a", "  b", "- c"]), yamlish),
                  min_size=1, max_size=6).map(lambda pairs: "\n".join(f"{k}: {v}" for k, v in pairs)))
def test_the_fast_frontmatter_parser_agrees_with_the_careful_one(text: str) -> None:
    if not text.startswith("---\n"):
        text = f"---\n{text}\n---\nbody\n"
    text = text.encode("utf-8", "replace").decode("utf-8")  # a file's text never holds a lone surrogate
    fast, slow = _parsed_both_ways(text)
    assert fast == slow


def test_the_fast_parser_is_used_and_falls_back_for_errors() -> None:
    from gitmem.memory import markdown
    if markdown._CLoader is None:  # noqa: SLF001
        pytest.skip("PyYAML without libyaml")
    for text in ("---\ntitle: a\ntags: [x, y]\nwhen: 2024-01-01\nok: no\n---\nb\n",
                 "---\ntitle: [unclosed\n---\nb\n", "---\na: &x [1]\nb: *x\n---\n",
                 "---\ntitle: caf\u00e9 \u65e5\u672c\n---\n"):
        fast, slow = _parsed_both_ways(text)
        assert fast == slow
    assert parse_text("---\nwhen: 2024-01-01\nok: no\nt: 12:30\n---\n").meta == \
        {"when": "2024-01-01", "ok": "no", "t": "12:30"}


_EMITTER_BITS = ["no", "Yes", "ON", "12:30", "1.0", "1_0", "0x1", "1e3", ".5", "~", "null", "2024-01-01",
                 "2024-01-01T10:00:00Z", "2024-01-01T10:00:00+02:00", "<<", "=", "\u00a0", "\u3000", "\u216b",
                 "\u00b2", "\u0663", "\U0001F600", "a" * 70, "'", ",", "(", ")", "+", "/", "_", "-", " ", "  "]
_scalars = st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.lists(
    st.sampled_from(YAML_BITS + _EMITTER_BITS) | st.text(max_size=6), max_size=8).map("".join).map(
    lambda t: t.encode("utf-8", "replace").decode("utf-8"))


@FUZZ
@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True) | st.sampled_from(["no", "y", "null", "1"]),
       _scalars | st.lists(_scalars, max_size=4), st.lists(_scalars, max_size=5))
def test_quick_field_writing_matches_the_yaml_emitter(key: str, value: object, listed: list) -> None:
    """The fields render() writes without PyYAML's emitter come out exactly as it writes them."""
    import yaml
    from gitmem.memory import markdown

    def emitted(value: object, flow: bool) -> str:
        return yaml.dump({key: value}, Dumper=markdown._Dumper, sort_keys=False, allow_unicode=True,  # noqa: SLF001
                         default_flow_style=None if flow else False, width=10_000 if flow else 100)
    for shown, flow in ((value, False), (listed, True)):
        quick = markdown._quick_dump(key, shown, flow=flow)  # noqa: SLF001
        assert quick is None or quick == emitted(shown, flow)


@pytest.fixture(scope="module")
def vault_for_fuzz(tmp_path_factory: pytest.TempPathFactory) -> Vault:
    base = tmp_path_factory.mktemp("fuzz")
    outside = base / "outside"
    outside.mkdir()
    v = Vault.init(base / "vault", author="fuzzer")
    os.symlink(outside, v.root / "short_term" / "link")
    os.symlink("/", v.root / "long_term" / "rootlink")
    yield v
    v.close()


def _within(root: Path, target: Path) -> bool:
    real = Path(os.path.realpath(target))
    return real == root or root in real.parents


@FUZZ
@given(pathish | tiered)
def test_check_relpath_never_lets_a_path_out(vault_for_fuzz: Vault, raw: str) -> None:
    root = vault_for_fuzz.root
    try:
        rel = check_relpath(raw)
    except InvalidPath:
        return
    parts = rel.split("/")
    assert ".." not in parts and "" not in parts and "\x00" not in rel and "\\" not in rel
    assert not rel.startswith("/") and not (len(rel) > 1 and rel[1] == ":")
    if safefs.is_symlink_on_the_way(root, rel):
        return  # the path gate refuses it wherever it is used
    assert _within(root, root / rel)


@settings(max_examples=max(30, N // 6), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(pathish | tiered)
def test_add_with_any_path_stays_in_the_vault(vault_for_fuzz: Vault, raw: str) -> None:
    v = vault_for_fuzz
    outside = v.root.parent / "outside"
    try:
        m = v.add("fuzzed path", "x", path=raw)
    except GitmemError:
        pass
    else:
        assert _within(v.root, v.root / m.path)
        assert m.path.split("/", 1)[0] in v.config.tiers
        v.delete(m.id, hard=True)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("raw", ["short_term/e\u0301te\u0301.md", "long_term/a b/c.md", "archive/x/a..b.md",
                                 "short_term/%41.md", "mid_term/\u202etxt.md", "short_term/\uff0e\uff0e/x.md"])
def test_odd_but_harmless_paths_are_accepted_inside_the_vault(vault_for_fuzz: Vault, raw: str) -> None:
    # The fuzzer's accepted cases look like these: legal names that stay inside.
    m = vault_for_fuzz.add("odd path", "x", path=raw)
    assert _within(vault_for_fuzz.root, vault_for_fuzz.root / m.path)
    vault_for_fuzz.delete(m.id, hard=True)
