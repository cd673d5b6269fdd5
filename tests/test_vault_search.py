"""The search index as part of the vault: every write, catch-up, reindex, doctor."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitmem import Vault
from gitmem.cli.main import cli
from gitmem.errors import GitmemError
from gitmem.search.whoosh import SearchIndex

from .conftest import assert_clean, git


def titles(page: object) -> list[str]:
    return [h.title for h in page.hits]  # type: ignore[attr-defined]


def test_every_write_is_searchable_at_once(sample_vault: Vault) -> None:
    v = sample_vault
    m = v.add("Maya loves cardamom buns", "Kardemummabullar on Saturdays.", tags=["food"])
    assert titles(v.search("cardamom")) == ["Maya loves cardamom buns"]
    v.update(m.id, replace=("Saturdays", "Sundays"))
    assert v.search("kardemummabullar AND sundays").total == 1
    assert titles(v.search("cardamom sundays"))[0] == "Maya loves cardamom buns"
    assert v.search("kardemummabullar AND saturdays").total == 0  # the old text is gone
    v.move(m.id, "long_term")
    assert v.search("cardamom tier:long_term").total == 1
    v.delete(m.id)
    assert v.search("cardamom").total == 0  # deleted: hidden by default
    assert v.search("cardamom", include_inactive=True).total == 1
    v.delete(m.id, hard=True)
    assert v.search("cardamom", include_inactive=True).total == 0


def test_search_filters_and_result_shape(sample_vault: Vault) -> None:
    page = sample_vault.search("dbt", type="skill")
    assert page.total >= 1 and all(h.type == "skill" for h in page.hits)
    hit = page.hits[0]
    assert hit.id and hit.path.endswith(".md") and hit.tier and hit.score > 0 and hit.updated
    assert "**" in hit.snippet
    goals = sample_vault.search("", tier="long_term", type="goal")
    assert {h.type for h in goals.hits} == {"goal"} and goals.total == 2
    with pytest.raises(GitmemError) as info:
        sample_vault.search("x", colour="blue")
    assert info.value.code == "invalid_input"
    assert sample_vault.search('"unbalanced dbt').total >= 1     # a stray quote is text


def test_catch_up_on_open_reindexes_only_what_changed(tmp_path: Path) -> None:
    root = tmp_path / "v"
    with Vault.init(root, from_dir=Path(__file__).parent.parent / "sample-vault") as v:
        v.search("anything")  # builds the index
        path = v.get("maya-lindqvist-core-profile").path
    # While nothing runs: a person edits one file, adds one, deletes one; a git CLI commit.
    file = root / path
    file.write_text(file.read_text() + "\nShe started learning the cello.\n")
    (root / "short_term" / "new-note.md").write_text("# Sourdough starter\n\nFed it at 08:00.\n")
    gone = next((root / "short_term").glob("book-kanels-*.md"))
    gone.unlink()
    git(root, "add", "-A")
    git(root, "commit", "-qm", "edits from the shell")
    with Vault.open(root) as v:
        index = v.services.searcher.index
        report_paths = set(index.indexed())
        assert "short_term/new-note.md" in report_paths
        assert gone.relative_to(root).as_posix() not in report_paths
        assert titles(v.search("cello")) == ["Maya Lindqvist: core profile"] or v.search("cello").total == 1
        assert v.search("sourdough").total == 1
        assert v.refresh().indexed == []  # nothing left to do


@pytest.mark.slow
def test_index_is_a_cache_delete_or_corrupt_it(sample_vault: Vault) -> None:
    sample_vault.search("dbt")
    root = sample_vault.root
    sample_vault.close()
    shutil.rmtree(root / ".git" / "gitmem" / "index")
    with Vault.open(root) as v:
        assert v.search("dbt").total > 0
    for part in (root / ".git" / "gitmem" / "index").iterdir():
        if part.suffix == ".seg" or part.name.endswith(".toc"):
            part.write_bytes(b"garbage")
    with Vault.open(root) as v:
        assert v.search("dbt").total > 0


def test_outside_edit_is_committed_as_the_person(sample_vault: Vault) -> None:
    v = sample_vault
    v.search("warm up")  # the index exists (and has caught up) before the edit
    path = v.root / "short_term" / "bike.md"
    path.write_text("# Bike repair\n\nNew rear derailleur cable.\n")
    before = path.read_bytes()
    assert v.refresh(["short_term/bike.md"]).indexed == ["short_term/bike.md"]
    assert v.search("derailleur").total == 1
    sha = v.commit_outside_edits()
    assert sha and git(v.root, "log", "-1", "--format=%an|%s").strip() == "git user|edit: Bike repair"
    assert "A short_term/bike.md" in git(v.root, "log", "-1", "--format=%b")
    assert path.read_bytes() == before  # never rewritten
    assert v.commit_outside_edits() is None
    assert [x.op for x in v.history("bike")] == ["edit"]
    v.close()
    assert_clean(v.root)


def test_doctor_reports_and_repairs(sample_vault: Vault) -> None:
    v = sample_vault
    v.search("warm up")
    broken = v.root / "short_term" / "broken.md"
    broken.write_text("---\ntitle: [oops\n---\nbody\n")
    (v.root / "mid_term" / ".x.md.gitmem-tmp-9").write_text("half")
    wrong = v.root / "mid_term" / "wrong-tier.md"
    wrong.write_text("---\ntitle: Wrong\ntier: long_term\ntype: note\n---\nx\n")
    SearchIndex(v.services.store.state_dir / "index").delete([v.get("maya-lindqvist-core-profile").path])
    findings = {f.check: f for f in v.doctor()}
    assert not findings["frontmatter"].ok and findings["frontmatter"].paths == ["short_term/broken.md"]
    assert "line 3" in findings["frontmatter"].details["short_term/broken.md"]
    assert not findings["metadata"].ok and "mid_term/wrong-tier.md" in findings["metadata"].paths
    assert not findings["worktree"].ok
    assert not findings["temp-files"].ok
    assert findings["fsck"].ok and findings["git-index"].ok
    repaired = {f.check: f for f in v.doctor(repair=True)}
    assert repaired["temp-files"].repaired and not (v.root / "mid_term" / ".x.md.gitmem-tmp-9").exists()
    assert broken.read_text() == "---\ntitle: [oops\n---\nbody\n"  # never "fixed" behind the user's back
    assert {f.check: f for f in v.doctor()}["index"].ok


@pytest.mark.slow
def test_cli_search_reindex_doctor(sample_vault: Vault) -> None:
    root = str(sample_vault.root)
    sample_vault.close()
    runner = CliRunner()
    out = runner.invoke(cli, ["--vault", root, "search", "half marathon", "--limit", "2"])
    assert out.exit_code == 0 and "Göteborgsvarvet" in out.output and "of" in out.output
    out = runner.invoke(cli, ["--vault", root, "search", "runing", "--json"])
    data = json.loads(out.output)
    assert data["total"] == 0 and data["suggestion"] == "running"
    out = runner.invoke(cli, ["--vault", root, "reindex", "--json"])
    assert out.exit_code == 0 and json.loads(out.output) == {"indexed": 33}
    out = runner.invoke(cli, ["--vault", root, "doctor"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()  # one line per check of gitmem.upkeep.doctor, each ok
    assert len(lines) >= 13 and all(line.startswith("ok ") for line in lines), out.output
    (Path(root) / "short_term" / "bad.md").write_text("---\na: [\n---\n")
    out = runner.invoke(cli, ["--vault", root, "doctor", "--json"])
    assert out.exit_code == 1 and not json.loads(out.output)["ok"]


@pytest.mark.slow
def test_processes_writing_with_an_index_lose_no_update(tmp_path: Path) -> None:
    import subprocess
    import sys
    root = tmp_path / "v"
    with Vault.init(root) as v:
        v.add("seed", "seed note")
        v.search("seed")  # the index exists: every process's writes must update it
    script = ("import sys\nfrom gitmem import Vault\n"
              "with Vault.open(sys.argv[1], author=f'p{sys.argv[2]}') as v:\n"
              "    for i in range(6):\n"
              "        m = v.add(f'proc {sys.argv[2]} note {i}', f'quokka{sys.argv[2]}x{i} text')\n"
              "        if i % 2:\n            v.update(m.id, append='wombat')\n"
              "        v.search('quokka')\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(root), str(n)]) for n in range(4)]
    assert [p.wait(timeout=180) for p in procs] == [0, 0, 0, 0]
    index = SearchIndex(root / ".git" / "gitmem" / "index")
    try:
        with Vault.open(root) as v:
            on_disk = {m.path for m in v.list()}
            assert set(index.indexed()) == on_disk and len(on_disk) == 25
            assert index.doc_count() == 25  # no path indexed twice
            for n in range(4):
                for i in range(6):
                    assert v.search(f"quokka{n}x{i}").total == 1
            assert v.search("wombat").total == 12
    finally:
        index.close()
    assert_clean(root)


def test_an_estimated_phrase_total_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone phrase whose words are in many memories is checked only until the page is
    full and its total estimated: the page, its JSON and the command line say "about"."""
    from gitmem.search import rank
    vault = Vault.init(tmp_path / "v", author="tester")
    for i in range(60):
        vault.add(f"Note {i}", f"The dark mode of editor {i} is on." if i % 3 else f"Dark rooms and a mode {i}.")
    vault.close()
    # (the thresholds of a 100k vault, scaled down to 60 memories)
    monkeypatch.setattr(rank, "LAZY_PHRASE_POSITIONS", 0)
    monkeypatch.setattr(rank, "PHRASE_SAMPLE", 4)
    monkeypatch.setattr(rank, "PHRASE_SAMPLE_MATCHES", 2)
    with Vault.open(tmp_path / "v") as v:
        page = v.search('"dark mode"', limit=2)
        assert page.total_estimated and page.to_dict()["total_estimated"] is True
        assert len(page.hits) == 2 and page.total > 2
        assert not v.search("dark", limit=2).total_estimated          # counted
    out = CliRunner().invoke(cli, ["-C", str(tmp_path / "v"), "search", '"dark mode"', "--limit", "2"])
    assert out.exit_code == 0 and "2 of about " in out.output, out.output
    out = CliRunner().invoke(cli, ["-C", str(tmp_path / "v"), "search", "dark", "--limit", "2"])
    assert "2 of 60 result(s)" in out.output, out.output
