"""``gitmem eval``: questions built from a vault's content and history, their expected
memories, the scores, and the command's output and errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitmem import Vault
from gitmem.cli.main import cli
from gitmem.upkeep.evaluation import Question, answer, build_questions, score

from .conftest import SAMPLE, git


def _history_vault(vault: Vault) -> dict[str, str]:
    """A vault with one of each kind of material: an edit that drops facts, a superseded
    memory, a note renamed with git mv, a memory that follows another."""
    edited = vault.add("Office parking", "The garage on Storgatan closes at midnight; permits cost forty crowns.")
    vault.update(edited.id, body="The garage moved to Kungsgatan.")
    old = vault.add("Dentist", "Doctor Lindgren sees patients on Thursdays in Majorna.")
    new = vault.add("Dentist changed", "Appointments are now with Doctor Berg.", supersedes=old.id)
    renamed = vault.add("Sourdough starter feeding", "Feed it rye flour every evening; keep it in the pantry.")
    first = vault.add("Trip planning", "We talked about hiking the Kungsleden trail in August.", agent="maya")
    second = vault.add("Trip gear", "Maya will borrow a tent and a stove from Jonas.", agent="maya", follows=first.id)
    vault.close()
    root = vault.root
    old_path = renamed.path
    new_path = old_path.rsplit("/", 1)[0] + "/bread-notes.md"
    git(root, "mv", old_path, new_path)
    git(root, "commit", "-q", "-m", "rename the bread note")
    return {"edited": edited.id, "old": old.id, "new": new.id, "renamed": renamed.id,
            "first": first.id, "second": second.id}


@pytest.fixture
def history_vault(tmp_path: Path) -> tuple[Vault, dict[str, str]]:
    v = Vault.init(tmp_path / "vault", author="tester")
    ids = _history_vault(v)
    opened = Vault.open(tmp_path / "vault", author="tester")
    yield opened, ids
    opened.close()


def test_each_kind_is_built_from_history_with_its_expected_memories(
        history_vault: tuple[Vault, dict[str, str]]) -> None:
    vault, ids = history_vault
    asked = build_questions(vault.services, questions=100, seed=3)
    kinds = {q.kind for q in asked}
    assert kinds == {"facts", "superseded", "renamed", "follows"}
    superseded = {q.source: q for q in asked if q.kind == "superseded"}
    # An edit: the old text's facts (gone from the file now) point at the memory itself.
    edit = superseded[ids["edited"]]
    assert edit.expected == (ids["edited"],)
    assert any(w in edit.text.lower() for w in ("storgatan", "midnight", "permits", "forty", "crowns"))
    # A superseded memory: its successor answers (or itself, when asked for).
    assert superseded[ids["old"]].expected == (ids["new"], ids["old"])
    renamed = [q for q in asked if q.kind == "renamed"]
    assert [q.expected for q in renamed] == [(ids["renamed"],)]
    assert "sourdough starter feeding" in renamed[0].text.lower()
    follows = [q for q in asked if q.kind == "follows"]
    assert follows and {q.expected for q in follows} == {(ids["second"],)}
    for q in follows:
        text = q.text.lower()
        assert any(w in text for w in ("hiking", "kungsleden", "trail", "august", "talked"))
        assert any(w in text for w in ("maya", "borrow", "tent", "stove", "jonas"))
    for q in asked:
        if q.kind == "facts":
            memory = vault.get(q.source)
            assert q.expected == (memory.id,)
            title_words = {w.lower() for w in memory.title.split()}
            asked_words = q.text.rstrip("?").split(" about ", 1)[1].lower().split()
            assert not title_words & set(asked_words)


def test_kinds_without_material_have_no_questions(vault: Vault) -> None:
    vault.add("Standing desk", "The desk arrives on Friday with a walnut top and a cable tray.")
    report = vault.evaluate(questions=20, modes=["lexical"])
    # one memory: asked about up to three times, with other words each time
    facts = report.questions["facts"]
    assert 1 <= facts <= 3 and report.questions == {"facts": facts, "superseded": 0, "renamed": 0, "follows": 0}
    assert len({q.text.split(" about ")[1] for q in report.asked}) == facts
    assert report.modes["lexical"]["all"].questions == facts
    assert report.to_dict()["questions"]["renamed"] == 0


def test_the_same_seed_asks_the_same_questions(sample_vault: Vault) -> None:
    one = build_questions(sample_vault.services, questions=30, seed=5)
    again = build_questions(sample_vault.services, questions=30, seed=5)
    other = build_questions(sample_vault.services, questions=30, seed=6)
    assert one == again and len(one) == 30
    assert [q.text for q in one] != [q.text for q in other]
    only_facts = build_questions(sample_vault.services, questions=30, seed=5, kinds=["facts"])
    # Choosing kinds does not change the questions of a kind.
    assert [q for q in one if q.kind == "facts"] == only_facts[:sum(q.kind == "facts" for q in one)]


def test_scores_by_hand() -> None:
    assert score([1, 3, None, 7]).to_dict() == {"questions": 4, "hit@1": 0.25, "hit@5": 0.5,
                                                "hit@10": 0.75, "mrr": round((1 + 1 / 3 + 1 / 7) / 4, 3)}
    assert score([]).questions == 0
    questions = [Question("facts", "alpha", ("a",), "a"), Question("facts", "beta", ("b", "x"), "b"),
                 Question("follows", "gamma", ("c",), "c"), Question("follows", "delta", ("d",), "d")]
    answers = {"alpha": ["a", "z"], "beta": ["z", "y", "x", "b"], "gamma": ["z"] * 5 + ["C"],
               "delta": ["z"] * 10 + ["d"]}
    got = answer(questions, lambda q, k: answers[q][:k])
    assert got["all"].to_dict() == {"questions": 4, "hit@1": 0.25, "hit@5": 0.5, "hit@10": 0.75,
                                    "mrr": round((1 + 1 / 3 + 1 / 6) / 4, 3)}
    assert (got["facts"].hit1, got["facts"].mrr) == (0.5, round((1 + 1 / 3) / 2, 3))
    assert (got["follows"].hit10, got["follows"].mrr) == (0.5, round(1 / 12, 3))


def test_evaluate_reports_progress_and_never_counts_retrievals(sample_vault: Vault) -> None:
    seen: list[tuple[int, int]] = []
    catalog = sample_vault.services.store.catalog
    before = catalog.retrievals()
    report = sample_vault.evaluate(questions=12, seed=1, modes=["lexical"],
                                   progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (12, 12) and len(seen) == 12
    assert sum(report.questions.values()) == 12 and report.memories > 20
    assert 0 < report.modes["lexical"]["all"].hit10 <= 1
    assert catalog.retrievals() == before
    sample_vault.search("dbt backfill")      # (a search does count)
    assert catalog.retrievals() != before


def _invoke(root: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--vault", str(root), "eval", *args])
    return result.exit_code, result.output


def test_cli_table_and_json(sample_vault: Vault) -> None:
    root = sample_vault.root
    sample_vault.close()
    code, out = _invoke(root, "--questions", "15", "--modes", "lexical", "--show", "2")
    assert code == 0, out
    assert "15 question(s) about" in out
    assert "hit@1  hit@5 hit@10    MRR" in out
    assert "lexical  all                15" in out
    assert out.count("  [") == 2
    code, out = _invoke(root, "--questions", "15", "--seed", "2", "--kinds", "facts", "--modes", "lexical", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["questions"] == {"facts": 15} and data["seed"] == 2 and data["asked"] == []
    assert set(data["modes"]["lexical"]["all"]) == {"questions", "hit@1", "hit@5", "hit@10", "mrr"}
    # no material for the kinds asked: said so, not an error
    code, out = _invoke(root, "--kinds", "follows,renamed", "--modes", "lexical")
    assert code == 0 and out.splitlines() == [
        f"0 question(s) about {data['memories']} memories (seed 0): 0 follows, 0 renamed",
        "nothing to ask: the vault has no material for these kinds (see gitmem eval --help)"]


def test_cli_bad_options_are_errors_not_tracebacks(sample_vault: Vault) -> None:
    root = sample_vault.root
    sample_vault.close()
    code, out = _invoke(root, "--kinds", "facts,riddles")
    assert code == 2 and "unknown question kind(s): riddles" in out and "Traceback" not in out
    code, out = _invoke(root, "--modes", "fuzzy")
    assert code == 2 and "unknown search mode(s): fuzzy" in out
    code, out = _invoke(root, "--questions", "0")
    assert code == 2 and "Traceback" not in out
    # hybrid asked for by name, in a vault without vectors
    code, out = _invoke(root, "--modes", "hybrid")
    assert code == 2 and "hybrid evaluation needs vectors" in out


def test_cli_on_an_empty_vault_is_a_clear_error(tmp_path: Path) -> None:
    Vault.init(tmp_path / "empty", author="tester").close()
    env = {**os.environ, "GITMEM_VAULT": str(tmp_path / "empty")}
    done = subprocess.run([sys.executable, "-m", "gitmem", "eval"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 3
    assert done.stderr.startswith("error: the vault has no memories to build questions from")
    assert "Traceback" not in done.stderr and done.stdout == ""
    done = subprocess.run([sys.executable, "-m", "gitmem", "eval", "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 3 and json.loads(done.stdout)["error"]["code"] == "not_found"


def test_the_sample_vault_can_be_evaluated_in_a_copy(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "copy", from_dir=SAMPLE, author="tester")
    try:
        report = vault.evaluate(questions=40, seed=0, modes=["lexical"])
    finally:
        vault.close()
    assert report.questions["facts"] > 0 and report.questions["follows"] == 0
    assert report.modes["lexical"]["facts"].hit10 >= 0.8


@pytest.mark.slow
def test_hybrid_is_measured_once_the_vault_has_vectors(sample_vault: Vault) -> None:
    from gitmem.search.embedding import available
    if not available():
        pytest.skip("needs the embed extra and its model")
    before = sample_vault.evaluate(questions=10, seed=4)
    assert set(before.modes) == {"lexical"} and before.skipped_modes == {"hybrid": "the vault has no vectors yet"}
    sample_vault.embed()
    after = sample_vault.evaluate(questions=10, seed=4)
    assert set(after.modes) == {"lexical", "hybrid"} and after.skipped_modes == {}
    assert after.asked == before.asked                      # the same questions, both modes
    assert after.modes["lexical"] == before.modes["lexical"]
    assert after.modes["hybrid"]["all"].questions == 10


def test_a_new_title_is_a_rename_and_a_tier_move_is_not(vault: Vault) -> None:
    retitled = vault.add("Bike lock code", "The code of the blue bike lock is written in the red notebook.")
    vault.update(retitled.id, title="Blue bike")
    moved = vault.add("Pantry shelves", "Flour and oats live on the second shelf from the top.")
    vault.move(moved.id, "long_term")
    asked = build_questions(vault.services, questions=50, seed=0, kinds=["renamed"])
    assert [(q.text, q.expected) for q in asked] == [("Where is the note called Bike lock code?", (retitled.id,))]
