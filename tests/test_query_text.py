"""Plain-language queries never fail: what is not valid syntax is read as text, while the
structured syntax keeps working (real indexes and vaults in tmp_path)."""

from __future__ import annotations

import string
from datetime import date
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from gitmem import Vault
from gitmem.cli.main import cli
from gitmem.search.whoosh import IndexDoc, SearchIndex
from gitmem.search.query import DateRange, FieldTerm, Or, Prefix, asks_when, named_days, parse_query
from gitmem.agents.registry import Toolbox

from .conftest import FakeClock


def doc(path: str, body: str, title: str = "", **kw) -> IndexDoc:
    return IndexDoc(path=path, id="id-" + path, title=title or path, body=body, hash="h", **kw)


@pytest.fixture
def ix(tmp_path: Path) -> Iterator[SearchIndex]:
    index = SearchIndex(tmp_path / "index")
    index.upsert([
        doc("game.md", "Besides chess she plays counter strike every weekend", "Games",
            tags=["hobby"], type="fact", created="2026-05-02T10:00:00Z"),
        doc("todo.md", "Fix the flaky deploy script before Friday", "Deploy chores",
            tags=["work"], type="task", tier="mid_term", created="2026-01-10T10:00:00Z"),
        doc("trip.md", "The trip to Lisbon was booked in May", "Lisbon trip",
            tags=["travel"], type="episodic", created="2026-03-15T10:00:00Z"),
    ])
    yield index
    index.close()


def paths(page) -> list[str]:
    return [h.path for h in page.hits]


# --- the one reader: parse_query ----------------------------------------------------------

@pytest.mark.parametrize("text,words", [
    ("besides CS:GO?", ["besides", "CS:GO?"]),          # an unknown field is a word
    ("TODO:fix", ["TODO:fix"]),
    ("Status: done", ["Status:", "done"]),              # a known field with nothing after it
    ("created:yesterday trip", ["created:yesterday", "trip"]),   # a known field, a bad value
    ('say "hello', ["say", "hello"]),                   # an unclosed quote is dropped
    ("(a OR b", ["(", "a", "OR", "b"]),                 # unbalanced: operators become words
    ("AND then", ["AND", "then"]),
    ("what is 2*3*4?", ["what", "is", "2*3*4?"]),       # a star inside a word: text
    ("a * b", ["a", " ", "b"]),                         # a lone star is punctuation
    ("ab*cd* x", ["ab cd ", "x"]),
])
def test_text_that_is_not_syntax_becomes_words(text: str, words: list[str]) -> None:
    pq = parse_query(text)
    assert pq.natural and pq.words == words and not pq.filters


def test_valid_syntax_keeps_its_meaning_next_to_text() -> None:
    pq = parse_query("besides CS:GO tag:hobby created:2026-05")
    assert pq.natural and pq.words == ["besides", "CS:GO"]
    assert FieldTerm("tags", "hobby") in pq.filters
    assert any(isinstance(f, DateRange) for f in pq.filters)
    syntax = parse_query("(deploy OR trip) TODO:fix")
    assert not syntax.natural and isinstance(syntax.expr.items[0], Or)
    assert isinstance(parse_query("depl*").expr, Prefix)
    assert parse_query('"counter strike"').phrases == ["counter strike"]


def test_examples_search_as_text(ix: SearchIndex) -> None:
    assert paths(ix.search("besides CS:GO?"))[:1] == ["game.md"]
    assert paths(ix.search("TODO:fix the deploy"))[:1] == ["todo.md"]
    assert paths(ix.search('what about "Lisbon'))[:1] == ["trip.md"]
    assert paths(ix.search("deploy AND")) == ["todo.md"]
    assert paths(ix.search("Lisbon)")) == ["trip.md"]


def test_structured_syntax_still_filters(ix: SearchIndex) -> None:
    assert paths(ix.search("tag:travel")) == ["trip.md"]
    assert paths(ix.search("type:task")) == ["todo.md"]
    assert paths(ix.search("tier:mid_term")) == ["todo.md"]
    assert paths(ix.search("created:>2026-03-01 trip")) == ["trip.md"]
    assert set(paths(ix.search("chess OR Lisbon"))) == {"game.md", "trip.md"}
    assert paths(ix.search("deploy NOT Friday")) == []
    assert paths(ix.search('"counter strike"')) == ["game.md"]
    assert paths(ix.search("Lisb*")) == ["trip.md"]
    assert ix.search("Lisb*").mode == "syntax"


# --- the property: any plain text, every front door ------------------------------------------

_TEXT = st.text(alphabet=st.one_of(
    st.sampled_from(list(string.ascii_letters + string.digits + string.punctuation + " \t\n")),
    st.characters(blacklist_categories=("Cs",))), max_size=80)


@pytest.mark.parametrize(("text", "days"), [
    ("What did Tim say on 16 November, 2023?", [date(2023, 11, 16)]),
    ("the 3rd of June 2023 and Nov. 16th, 2023", [date(2023, 6, 3), date(2023, 11, 16)]),
    ("between 2023-02-30 and 2023-12-01", [date(2023, 12, 1)]),      # no 30 February
    ("Sept 9 2022, then September 9, 2022 again", [date(2022, 9, 9)]),
    ("31 June 2023", []), ("in May 2023", []), ("it may 2023", []), ("on 16 November", []),
    ("", []), ("12345678 99 December 0000", []),
])
def test_days_a_query_names(text: str, days: list[date]) -> None:
    assert named_days(text) == days


@pytest.mark.parametrize(("text", "asks"), [
    ("When did Ann move to Berlin?", True), ("  when was the launch", True),
    ("What year did Tim visit Ireland?", True), ("How long ago did they meet?", True),
    ("In which month was the party?", True), ("What did Ann say when she left?", False),
    ("whenever it rains", False), ("What is Ann's favourite time of day?", False), ("", False),
])
def test_questions_asking_when(text: str, asks: bool) -> None:
    assert asks_when(text) is asks


@given(text=_TEXT)
def test_named_days_never_fail(text: str) -> None:
    assert all(isinstance(d, date) for d in named_days(text))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT)
def test_any_text_searches_without_error(ix: SearchIndex, text: str) -> None:
    page = ix.search(text, limit=5)
    assert page.total >= len(page.hits)


@pytest.fixture
def small_vault(tmp_path: Path, clock: FakeClock) -> Iterator[Vault]:
    v = Vault.init(tmp_path / "v", author="tester", clock=clock)
    v.add("Games", "Besides chess she plays counter strike")
    v.add("Deploy chores", "Fix the flaky deploy script", tags=["work"])
    yield v
    v.close()


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT.filter(lambda t: t.strip()))
def test_vault_cli_and_tool_never_fail_on_text(small_vault: Vault, text: str) -> None:
    small_vault.search(text)                                  # raises nothing
    with Toolbox(small_vault) as tools:
        result = tools.call("memory_search", {"query": text[:2000]})
    assert "error" not in result, result
    outcome = CliRunner().invoke(cli, ["--vault", str(small_vault.root), "search", "--json", "--", text])
    assert outcome.exit_code == 0, outcome.output


def test_random_plain_language_strings_have_no_errors(ix: SearchIndex) -> None:
    """The bench's generator (bench/query_text.py), on a smaller count."""
    import importlib.util
    import random
    # Loaded from its file: putting bench/ on sys.path would shadow packages (bench/mcp.py).
    spec = importlib.util.spec_from_file_location(
        "bench_query_text", Path(__file__).resolve().parent.parent / "bench" / "query_text.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    random_query = bench.random_query
    rng = random.Random(11)
    for _ in range(500):
        ix.search(random_query(rng), limit=3)
