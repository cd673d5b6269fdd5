"""gitmem import: every format from fixtures written from the formats' public
descriptions, into real vaults, cross-checked with the git CLI.  One commit per
import, none when nothing changed; bad input is refused before anything is written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitmem import Vault
from gitmem.cli.main import cli
from gitmem.errors import GitmemError
from gitmem.exchange.import_formats import MAX_EXTRACT_CHARS, VAULT_SKIPPED, split_sections
from gitmem.exchange.importing import ImportReport

from .conftest import FakeClock, assert_clean, git, snapshot

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "import"
PINNED = 1767225600  # 2026-01-01T00:00:00Z: file times of copied fixtures, so `created` is known
# Built here, not stored in the fixtures: the shape of an OpenAI key, not a real one.
FAKE_KEY = "sk-proj-" + "Q3m9TxL2vB7nR4kW8zY1cF6hJ0pD5sA"


def copy_fixture(name: str, tmp_path: Path) -> Path:
    target = tmp_path / "src" / name
    shutil.copytree(FIXTURES / name, target)
    for folder, _, files in os.walk(target):
        for file in files:
            os.utime(Path(folder) / file, (PINNED, PINNED))
    return target


def commits(root: Path) -> list[str]:
    return git(root, "log", "--format=%s").splitlines()


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitmem", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ})


def invoke(root: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--vault", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.output


def by_source(vault: Vault, folder: Path | None = None) -> dict[str, object]:
    """Memories by ``source`` key; with ``folder``, by the key inside that folder (its
    path taken out: ``claude-code:/tmp/x/CLAUDE.md#a`` -> ``claude-code:CLAUDE.md#a``)."""
    return {inside(folder, m.meta["source"]) if folder else m.meta["source"]: vault.get(m.path)
            for m in vault.list(status=None) if m.meta.get("source")}


def inside(folder: Path, key: str) -> str:
    """``key`` (a folder format's) without the folder it names, which must be ``folder``."""
    kind, _, rest = key.partition(":")
    place = os.path.realpath(folder if folder.is_dir() else folder.parent) + "/"
    assert rest.startswith(place), (key, place)
    return f"{kind}:{rest[len(place):]}"


def assert_one_import_commit(vault: Vault, before: list[str]) -> None:
    """Exactly one new commit, an import, and nothing left uncommitted (as git sees it)."""
    vault.flush()
    after = commits(vault.root)
    assert len(after) == len(before) + 1, after[:3]
    assert after[0].startswith("import ") and after[1:] == before
    assert git(vault.root, "status", "--porcelain") == ""


def import_once(vault: Vault, fmt: str, source: Path, **counts: int) -> ImportReport:
    """Import ``source``: the report has these ``counts`` and git shows one new import commit."""
    before = commits(vault.root)
    report = vault.import_from(fmt, source)
    assert report.counts() == {"created": 0, "updated": 0, "unchanged": 0, "skipped": 0, **counts}, \
        report.to_dict()
    assert_one_import_commit(vault, before)
    return report


def assert_rerun_is_noop(vault: Vault, fmt: str, source: Path) -> None:
    head = vault.head
    again = vault.import_from(fmt, source)
    assert again.commit is None and not again.created and not again.updated, again.to_dict()
    assert vault.head == head
    assert git(vault.root, "rev-parse", "HEAD").strip() == head


# ------------------------------------------------------------------ markdown
def test_markdown_import_links_tags_and_idempotence(vault: Vault, tmp_path: Path, clock: FakeClock) -> None:
    source = copy_fixture("markdown", tmp_path)
    import_once(vault, "markdown", source, created=4)
    found = by_source(vault, source)
    assert set(found) == {"markdown:Projects/Nordhav/Deploy checklist.md", "markdown:Staging database.md",
                          "markdown:People/Maya.md", "markdown:long_term/Running goal.md"}  # not .trash, .obsidian
    deploy = found["markdown:Projects/Nordhav/Deploy checklist.md"]
    assert deploy.tags == ["deploys", "nordhav", "projects/nordhav"]   # folders kept as a tag
    assert deploy.meta["aliases"] == ["Nordhav deploys"] and deploy.meta["importance"] == 4
    assert deploy.meta["reviewed_by"] == "maya"                          # unknown fields kept
    assert deploy.meta["created"] == "2026-01-01T00:00:00Z" and deploy.meta["agent"] == "tester"
    assert deploy.path.startswith("long_term/") and deploy.path.endswith("/deploy-checklist.md")
    # links that resolve point at the imported file names; the others stay as written
    assert "[[staging-database|Staging database]]" in deploy.body
    assert "[[maya#Role|Maya]]" in deploy.body
    assert "[[Release calendar|the calendar]]" in deploy.body
    outgoing = {o["target"]: o["exists"] for o in vault.links(deploy.id).outgoing}
    assert outgoing == {"staging-database": True, "maya": True, "Release calendar": False}
    maya = found["markdown:People/Maya.md"]
    assert maya.type == "memory" and "person" in maya.tags and maya.meta["permalink"] == "people/maya"
    assert "- reviews [[deploy-checklist|Nordhav deploys]]" in maya.body  # an alias resolves too
    goal = found["markdown:long_term/Running goal.md"]
    assert goal.type == "goal" and goal.tier == "long_term" and goal.meta["created"] == "2026-01-05T00:00:00Z"
    assert_rerun_is_noop(vault, "markdown", source)

    # a changed note is updated; a new note makes a dangling link resolve: one commit for both
    clock.tick()
    (source / "Staging database.md").write_text("# Staging database\n\nRefreshed at 03:00 CET now.\n")
    (source / "Release calendar.md").write_text("# Release calendar\n\nReleases on Tuesdays.\n")
    report = import_once(vault, "markdown", source, created=1, updated=2, unchanged=2)
    assert {inside(source, e.source) for e in report.updated} == {"markdown:Staging database.md",
                                                  "markdown:Projects/Nordhav/Deploy checklist.md"}
    assert "[[release-calendar|the calendar]]" in vault.get(deploy.id).body
    assert "03:00 CET" in vault.get("staging-database").body
    changed = git(vault.root, "show", "--name-only", "--format=", "HEAD").split()
    assert sorted(changed) == sorted(["MEMORY.md", deploy.path, vault.get("staging-database").path,
                                      vault.get("release-calendar").path])
    assert_rerun_is_noop(vault, "markdown", source)
    vault.flush()
    assert_clean(vault.root)


def test_markdown_dry_run_from_the_cli_commits_nothing(vault: Vault, tmp_path: Path) -> None:
    source = copy_fixture("markdown", tmp_path)
    head, files = snapshot(vault.root)
    code, out = invoke(vault.root, "import", "markdown", str(source), "--dry-run", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["dry_run"] is True and data["commit"] is None and data["counts"]["created"] == 4
    assert {i["action"] for i in data["items"]} == {"created"} and all(i["path"] for i in data["items"])
    assert snapshot(vault.root) == (head, files)
    code, out = invoke(vault.root, "import", "markdown", str(source), "--dry-run")
    assert out.startswith("dry run: would create 4, update 0; 0 unchanged, 0 skipped (nothing committed)")
    assert f"created   markdown:{os.path.realpath(source)}/Staging database.md" in out


def test_init_from_and_import_share_one_folder_walk(tmp_path: Path) -> None:
    """`init --from` still reads the same notes (tier folders kept, others under the import tier)."""
    source = copy_fixture("markdown", tmp_path)
    with Vault.init(tmp_path / "v", from_dir=source, author="tester") as vault:
        paths = sorted(m.path for m in vault.list(status=None))
    assert paths == ["long_term/People/Maya.md", "long_term/Projects/Nordhav/Deploy checklist.md",
                     "long_term/Running goal.md", "long_term/Staging database.md"]


# ---------------------------------------------------------------- mcp-memory
def test_mcp_memory_entities_relations_and_updates(vault: Vault, tmp_path: Path) -> None:
    source = copy_fixture("mcp-memory", tmp_path) / "memory.jsonl"
    import_once(vault, "mcp-memory", source, created=3)
    found = by_source(vault)
    maya, nordhav, platform = (found[f"mcp-memory:{n}"] for n in ("Maya_Lindqvist", "Nordhav",
                                                                    "Nordhav_Data_Platform"))
    assert maya.type == "semantic" and maya.tags == ["mcp-memory", "person"]
    assert maya.meta["entities"] == ["Maya_Lindqvist", "Nordhav", "Nordhav_Data_Platform", "Göteborgsvarvet"]
    assert {(r["id"], r["relation"]) for r in maya.meta["related"]} == {(nordhav.id, "refines"),
                                                                         (platform.id, "refines")}
    assert platform.meta["related"] == [{"id": nordhav.id, "relation": "part_of"}]
    assert "- Lead analytics engineer\n- Prefers written deploy plans\n" in maya.body
    assert "- works_with [[nordhav|Nordhav]]" in maya.body
    assert "- trains_for [[Göteborgsvarvet]]" in maya.body          # no such entity: left as text
    assert "- [[Maya_Lindqvist|Maya_Lindqvist]]" not in nordhav.body
    assert "- [[maya_lindqvist|Maya_Lindqvist]] works_with this" in nordhav.body
    backlinks = {b["id"] for b in vault.links(nordhav.id).backlinks}
    assert {maya.id, platform.id} <= backlinks
    assert_rerun_is_noop(vault, "mcp-memory", source)
    with source.open("a") as handle:
        handle.write('{"type":"entity","name":"Nordhav","entityType":"organization",'
                     '"observations":["Moved to a new Snowflake account"]}\n')
    report = import_once(vault, "mcp-memory", source, updated=1, unchanged=2)
    assert [e.source for e in report.updated] == ["mcp-memory:Nordhav"]
    assert "- Moved to a new Snowflake account" in vault.get(nordhav.id).body
    vault.flush()
    assert_clean(vault.root)


# --------------------------------------------------------------- agent-rules
def test_agent_rules_sections_types_and_protection(vault: Vault, tmp_path: Path) -> None:
    source = copy_fixture("agent-rules", tmp_path) / "project"
    import_once(vault, "agent-rules", source, created=9)
    types = {key: m.type for key, m in by_source(vault, source).items()}
    assert types == {
        "claude-code:CLAUDE.md#nordhav-data-platform": "semantic",
        "claude-code:CLAUDE.md#code-style": "rule",
        "claude-code:CLAUDE.md#commands": "procedural",
        "claude-code:CLAUDE.md#architecture": "semantic",
        "agents-md:AGENTS.md#dev-environment-tips": "procedural",
        "agents-md:AGENTS.md#testing-instructions": "procedural",
        "agents-md:AGENTS.md#pr-instructions": "rule",
        "cursor:.cursorrules#preamble": "rule",
        "cursor:.cursor/rules/sql-style.mdc": "rule",
    }
    style = vault.get("code-style")
    assert style.body == ("- Never edit generated models under `models/generated/`.\n"
                          "- Always use CTEs, one per source table.\n")
    assert style.tags == ["claude-code"] and style.meta["summary"] == "From CLAUDE.md"
    commands = by_source(vault, source)["claude-code:CLAUDE.md#commands"]
    assert "# Build and test one model" in commands.body   # a comment in a code block is no heading
    mdc = by_source(vault, source)["cursor:.cursor/rules/sql-style.mdc"]
    assert mdc.title == "SQL style for dbt models" and mdc.meta["cursor_globs"] == "models/**/*.sql"
    assert_rerun_is_noop(vault, "agent-rules", source)

    # a changed rule is protected: reported and left alone unless forced
    claude = source / "CLAUDE.md"
    claude.write_text(claude.read_text().replace("one per source table", "one per source table, named src_*"))
    head = vault.head
    report = vault.import_from("agent-rules", source)
    assert [e.reason for e in report.skipped] == [
        "the source changed, but 'Code style' is a protected rule; import with --force (force=True) to update it"]
    assert report.commit is None and vault.head == head
    report = vault.import_from("agent-rules", source, force=True)
    assert [inside(source, e.source) for e in report.updated] == ["claude-code:CLAUDE.md#code-style"]
    assert commits(vault.root)[0].endswith("(forced)")
    assert "Forced: true" in git(vault.root, "log", "-1", "--format=%B")
    assert "named src_*" in vault.get("code-style").body
    vault.flush()
    assert_clean(vault.root)


def test_agent_rules_claude_code_memory_folder_and_single_file(vault: Vault, tmp_path: Path) -> None:
    source = copy_fixture("agent-rules", tmp_path)
    report = vault.import_from("agent-rules", source / "claude-memory")
    assert report.counts()["created"] == 3
    found = by_source(vault, source / "claude-memory")
    feedback = found["claude-code:feedback_testing.md"]
    assert feedback.title == "Integration tests hit a real database" and feedback.type == "correction"
    assert feedback.meta["summary"] == "Do not mock the warehouse in integration tests"
    assert found["claude-code:user_role.md"].type == "preference"
    notes = found["claude-code:MEMORY.md#quick-notes"]
    assert notes.body == "- The CI runner is slow on Mondays.\n"  # index lines to topic files dropped
    report = vault.import_from("agent-rules", source / "project" / "AGENTS.md")
    assert sorted(inside(source / "project", e.source) for e in report.created) == [
        "agents-md:AGENTS.md#dev-environment-tips",
                                                        "agents-md:AGENTS.md#pr-instructions",
                                                        "agents-md:AGENTS.md#testing-instructions"]


def _project(root: Path, architecture: str) -> Path:
    root.mkdir(parents=True)
    (root / "CLAUDE.md").write_text(f"# {root.name}\n\n## Architecture\n\n{architecture}\n\n"
                                    "## Commands\n\nRun `make test`.\n")
    return root


def test_agent_rules_of_two_projects_are_two_sets_of_memories(vault: Vault, tmp_path: Path) -> None:
    atlas = _project(tmp_path / "atlas", "A Django monolith.")
    borealis = _project(tmp_path / "borealis", "Three Go services.")
    import_once(vault, "agent-rules", atlas, created=2)
    import_once(vault, "agent-rules", borealis, created=2)   # not "2 updated" in atlas's memories
    assert_rerun_is_noop(vault, "agent-rules", atlas)
    assert {inside(atlas, k): m.body for k, m in by_source(vault).items() if str(atlas) in k} == {
        "claude-code:CLAUDE.md#architecture": "A Django monolith.\n",
        "claude-code:CLAUDE.md#commands": "Run `make test`.\n"}
    architecture = by_source(vault)[f"claude-code:{os.path.realpath(borealis)}/CLAUDE.md#architecture"]
    assert architecture.body == "Three Go services.\n" and len(vault.list()) == 4
    # The file itself names the same project as its folder does: the same keys.
    assert vault.import_from("agent-rules", borealis / "CLAUDE.md").counts()["unchanged"] == 2


def test_memories_imported_with_keys_without_the_project_keep_being_updated(vault: Vault, tmp_path: Path,
                                                                            clock: FakeClock) -> None:
    """Vaults from before keys named the folder: a re-import finds its memories by the old key
    (and gives them the new one); another project's import does not take them."""
    atlas = _project(tmp_path / "atlas", "A Django monolith.")
    borealis = _project(tmp_path / "borealis", "Three Go services.")
    import_once(vault, "agent-rules", atlas, created=2)
    for memory in vault.list():  # the keys an earlier gitmem wrote: no folder
        vault.update(memory.id, meta={"source": inside(atlas, memory.meta["source"])})
    old = {m.meta["source"]: m for m in vault.list()}
    assert set(old) == {"claude-code:CLAUDE.md#architecture", "claude-code:CLAUDE.md#commands"}
    import_once(vault, "agent-rules", borealis, created=2)
    assert {m.meta["source"]: m.body for m in vault.list() if m.id in {o.id for o in old.values()}} == {
        k: m.body for k, m in old.items()}                    # atlas's memories untouched
    clock.tick()
    (atlas / "CLAUDE.md").write_text((atlas / "CLAUDE.md").read_text().replace("monolith", "monolith on Postgres"))
    report = import_once(vault, "agent-rules", atlas, updated=2)
    assert {e.id for e in report.updated} == {m.id for m in old.values()} and len(vault.list()) == 4
    assert vault.get(old["claude-code:CLAUDE.md#architecture"].id).body == "A Django monolith on Postgres.\n"
    assert {inside(atlas, vault.get(m.id).meta["source"]) for m in old.values()} == set(old)
    assert_rerun_is_noop(vault, "agent-rules", atlas)


def test_a_folder_above_the_vault_imports_no_vault_and_counts_every_note(tmp_path: Path) -> None:
    parent = tmp_path / "P"
    notes = {"ok.md": "# Fine\n\nA note.\n", "aux.md": "aux text\n", "nul.md": "# Nul\n\nnul text\n",
             "notes/Con.md": "# Con\n\ncon text\n", "long_term/com1.md": "in a tier folder\n"}
    for rel, text in notes.items():
        (parent / rel).parent.mkdir(parents=True, exist_ok=True)
        (parent / rel).write_text(text)
    with Vault.init(parent / "deep" / "other", author="tester") as other:
        other.add("Another vault's memory", "x")
    with Vault.init(parent / "vault", author="tester") as vault:
        vault.add("Own memory", "y")
        first = vault.import_from("markdown", parent)
        assert first.counts() == {"created": 5, "updated": 0, "unchanged": 0, "skipped": 2}, first.to_dict()
        assert sorted(inside(parent, e.source) for e in first.created) == sorted(f"markdown:{r}" for r in notes)
        assert sorted((e.title, e.reason) for e in first.skipped) == [
            ("deep/other", VAULT_SKIPPED), ("vault", VAULT_SKIPPED)]
        titles = sorted(m.title for m in vault.list())
        assert titles == ["Con", "Fine", "Nul", "Own memory", "aux", "com1"], titles
        again = vault.import_from("markdown", parent)
        assert again.commit is None and again.counts()["unchanged"] == 5 and len(vault.list()) == 6
        code, out = invoke(vault.root, "import", "markdown", str(parent))
        assert code == 0 and "0 created, 0 updated, 5 unchanged, 2 skipped" in out
        assert f"skipped   markdown:{os.path.realpath(parent)}/vault/  vault  ({VAULT_SKIPPED})" in out
    # init --from copies notes at their paths: what a vault cannot hold is reported, not dropped.
    made = Vault.init(tmp_path / "copy", from_dir=parent, author="tester")
    made.close()
    assert made.import_report["imported"] == 1
    assert sorted(s["path"] for s in made.import_report["skipped"]) == sorted(
        [*[r for r in notes if r != "ok.md"], "deep/other", "vault"])
    result = run("init", "--from", str(parent), str(tmp_path / "copy2"))
    assert result.returncode == 0 and "skipped   aux.md  (path 'aux.md' uses the reserved name" in result.stdout


def test_split_sections_finds_the_level_to_cut_at() -> None:
    text = "# Title\n\nIntro.\n\n## A\n\na\n\n### A.1\n\ndeeper\n\n## B\n\n```\n# not a heading\n```\n"
    assert split_sections(text) == [("Title", "Intro.\n"), ("A", "a\n\n### A.1\n\ndeeper\n"),
                                    ("B", "```\n# not a heading\n```\n")]
    assert split_sections("# One\n\nx\n\n# Two\n\ny\n") == [("One", "x\n"), ("Two", "y\n")]
    assert split_sections("no headings\n") == [(None, "no headings\n")]


# ------------------------------------------------------------- conversations
def test_chatgpt_export_json_zip_and_cli(vault: Vault, tmp_path: Path) -> None:
    source = copy_fixture("chatgpt", tmp_path) / "conversations.json"
    before = commits(vault.root)
    vault.flush()   # this process's own pending .git/index entries (the init commit's)
    result = run("-C", str(vault.root), "import", "chatgpt", str(source), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["counts"] == {"created": 2, "updated": 0, "unchanged": 0, "skipped": 1}
    assert [i["reason"] for i in data["items"] if i["action"] == "skipped"] == ["no messages"]
    assert commits(vault.root)[1:] == before and len(commits(vault.root)) == len(before) + 1
    assert git(vault.root, "status", "--porcelain") == ""       # the CLI process left git's index in line
    vault.scan()
    run_ = by_source(vault)["chatgpt:6a1f0c2e-0001-4b7e-9c55-2d1e0f3a4b01"]
    assert run_.title == "Planning the Gothenburg half marathon" and run_.type == "episodic"
    assert run_.tier == "mid_term" and run_.tags == ["chatgpt"]
    assert run_.meta["created"] == "2026-01-01T00:00:00Z" and run_.meta["updated"] == "2026-01-01T01:00:00Z"
    assert run_.body.startswith("ChatGPT conversation, 2026-01-01, 4 messages.\n\n**User:** I want to run")
    assert "regenerated" not in run_.body and "You are ChatGPT" not in run_.body  # shown branch, no system
    assert "**Assistant:**\n\n```\ndef pace(km, minutes):" in run_.body
    # the export's .zip holds the same conversations: same keys, nothing new
    archive = tmp_path / "chatgpt-export.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.write(source, "export/conversations.json")
        zipped.writestr("export/user.json", "{}")
    assert_rerun_is_noop(vault, "chatgpt", archive)
    assert_rerun_is_noop(vault, "chatgpt", source.parent)     # the unpacked export folder


def test_claude_export(vault: Vault, tmp_path: Path) -> None:
    source = copy_fixture("claude", tmp_path)
    before = commits(vault.root)
    report = vault.import_from("claude", source, tier="long_term")
    assert report.counts() == {"created": 2, "updated": 0, "unchanged": 0, "skipped": 0}
    assert_one_import_commit(vault, before)
    found = by_source(vault)
    review = found["claude:0f9e8d7c-0001-4a2b-8c3d-4e5f6a7b8c01"]
    assert review.title == "Snowflake cost review" and review.tier == "long_term" and review.tags == ["claude"]
    assert review.meta["summary"] == "Reviewed warehouse credit use for Nordhav."
    assert review.meta["created"] == "2026-02-03T09:15:00Z" and review.meta["updated"] == "2026-02-03T10:02:11Z"
    assert "**Assistant:** Start with QUERY_HISTORY" in review.body  # text from the content blocks
    untitled = found["claude:0f9e8d7c-0002-4a2b-8c3d-4e5f6a7b8c02"]
    assert untitled.title == "Untitled Claude conversation 2026-02-10"
    assert_rerun_is_noop(vault, "claude", source)
    # the conversation went on: updated in place
    data = json.loads((source / "conversations.json").read_text())
    data[1]["chat_messages"].append({"uuid": "c2m3", "text": "Tack!", "sender": "human",
                                     "created_at": "2026-02-11T08:00:00Z"})
    data[1]["updated_at"] = "2026-02-11T08:00:00Z"
    (source / "conversations.json").write_text(json.dumps(data))
    report = vault.import_from("claude", source)
    assert [e.title for e in report.updated] == ["Untitled Claude conversation 2026-02-10"]
    updated = vault.get(untitled.id)
    assert "**User:** Tack!" in updated.body and updated.meta["updated"] == "2026-02-11T08:00:00Z"
    assert updated.path == untitled.path


def test_conversation_extract_is_bounded(vault: Vault, tmp_path: Path) -> None:
    messages = [{"uuid": f"m{i}", "text": f"message {i} " + "x" * 5000,
                 "sender": "human" if i % 2 == 0 else "assistant"} for i in range(60)]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([{"uuid": "long-one", "name": "A very long chat", "chat_messages": messages,
                                 "created_at": "2026-03-01T10:00:00Z"}]))
    vault.import_from("claude", path)
    body = vault.get("a-very-long-chat").body
    assert len(body) < MAX_EXTRACT_CHARS + 3000
    assert "message 0 " in body and "message 59" not in body and "more messages not shown)" in body


def test_progress_is_reported(vault: Vault, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    vault.import_from("mcp-memory", FIXTURES / "mcp-memory" / "memory.jsonl",
                      progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


# ------------------------------------------------------------------- secrets
def test_a_secret_skips_its_item_only_and_never_reaches_git(vault: Vault, tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "claude" / "conversations.json").read_text())
    data[1]["chat_messages"][0]["text"] = f"my key is {FAKE_KEY}, why does it fail?"
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(data))
    code, out = invoke(vault.root, "import", "claude", str(path), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["counts"] == {"created": 1, "updated": 0, "unchanged": 0, "skipped": 1}
    skipped = [i for i in report["items"] if i["action"] == "skipped"][0]
    assert skipped["source"] == "claude:0f9e8d7c-0002-4a2b-8c3d-4e5f6a7b8c02"
    assert "secret" in skipped["reason"] and "openai_key" in skipped["reason"]
    assert FAKE_KEY not in out
    vault.flush()
    assert FAKE_KEY not in git(vault.root, "log", "-p", "--all")
    vault.flush()
    assert_clean(vault.root)


def test_secrets_redact_policy_imports_the_item_redacted(tmp_path: Path) -> None:
    config = tmp_path / "cfg"
    config.mkdir()
    (config / ".gitmem.yaml").write_text("version: 1\nsecrets: redact\n")
    data = json.loads((FIXTURES / "claude" / "conversations.json").read_text())
    data[0]["chat_messages"][0]["text"] = f"token {FAKE_KEY}"
    (tmp_path / "conversations.json").write_text(json.dumps(data))
    with Vault.init(tmp_path / "v", from_dir=config, author="tester") as vault:
        report = vault.import_from("claude", tmp_path / "conversations.json")
        assert report.counts()["created"] == 2
        body = vault.get("snowflake-cost-review").body
        assert "[REDACTED:openai_key]" in body and FAKE_KEY not in body


def test_unwritable_characters_are_replaced_not_dropped(vault: Vault, tmp_path: Path) -> None:
    """A lone surrogate or a NUL (which no file can hold) costs a character, not the item."""
    def conv(uuid: str, name: str, text: str) -> dict[str, object]:
        return {"uuid": uuid, "name": name, "created_at": "2026-03-01T10:00:00Z",
                "chat_messages": [{"uuid": f"{uuid}-1", "text": text, "sender": "human"}]}
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conv("good", "Fine chat", "hello"), conv("surrogate", "Odd bytes", "a \ud800 b"),
                                conv("nul", "With NUL", "a \x00 b"), conv("title", "\ud800", "x")]))
    import_once(vault, "claude", path, created=4, skipped=0)
    found = {m.meta["source"]: vault.get(m.id) for m in vault.list()}
    assert "a \ufffd b" in found["claude:surrogate"].body and "a \ufffd b" in found["claude:nul"].body
    assert found["claude:title"].title == "\ufffd"
    assert_clean(vault.root)


# ----------------------------------------------------------------- bad input
def _truncated(tmp_path: Path, name: str, cut: int) -> Path:
    data = next((FIXTURES).glob(f"*/{name}")).read_bytes()
    path = tmp_path / f"cut-{name}"
    path.write_bytes(data[:cut])
    return path


@pytest.mark.parametrize("fmt,make,code,exit_code", [
    ("chatgpt", lambda t: _truncated(t, "conversations.json", 400), "invalid_import", 2),
    ("claude", lambda t: _truncated(t, "conversations.json", 400), "invalid_import", 2),
    ("mcp-memory", lambda t: _truncated(t, "memory.jsonl", 150), "invalid_import", 2),
    ("chatgpt", lambda t: t / "no-such-export.json", "not_found", 3),
    ("claude", lambda t: FIXTURES / "chatgpt" / "conversations.json", "wrong_import_format", 2),
    ("chatgpt", lambda t: FIXTURES / "claude" / "conversations.json", "wrong_import_format", 2),
    ("mcp-memory", lambda t: FIXTURES / "chatgpt" / "conversations.json", "wrong_import_format", 2),
    ("markdown", lambda t: FIXTURES / "mcp-memory" / "memory.jsonl", "wrong_import_format", 2),
    ("agent-rules", lambda t: FIXTURES / "chatgpt", "wrong_import_format", 2),
])
@pytest.mark.slow
def test_bad_input_is_refused_and_nothing_changes(vault: Vault, tmp_path: Path, fmt: str, make, code: str,
                                                  exit_code: int) -> None:
    vault.add("Something already there", "x")
    vault.flush()
    source = make(tmp_path)
    before = snapshot(vault.root)
    with pytest.raises(GitmemError) as caught:
        vault.import_from(fmt, source)
    assert caught.value.code == code
    result = run("-C", str(vault.root), "import", fmt, str(source), "--json")
    assert result.returncode == exit_code, result.stderr
    assert json.loads(result.stdout)["error"]["code"] == code
    result = run("-C", str(vault.root), "import", fmt, str(source))
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert snapshot(vault.root) == before
    vault.flush()
    assert_clean(vault.root)


def test_wrong_format_hint_names_the_format_it_looks_like(vault: Vault) -> None:
    with pytest.raises(GitmemError) as caught:
        vault.import_from("claude", FIXTURES / "chatgpt" / "conversations.json")
    assert caught.value.hint == "It looks like a chatgpt source: gitmem import chatgpt SOURCE."


def test_unreadable_rules_file_and_unknown_format(vault: Vault, tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_bytes(b"# Rules\n\n\xff\xfe not text\n")
    with pytest.raises(GitmemError) as caught:
        vault.import_from("agent-rules", tmp_path / "CLAUDE.md")
    assert caught.value.code == "invalid_import"
    with pytest.raises(GitmemError) as caught:
        vault.import_from("evernote", tmp_path)
    assert caught.value.code == "invalid_input"
    with pytest.raises(GitmemError) as caught:
        vault.import_from("markdown", vault.root)
    assert caught.value.code == "invalid_input" and "inside the vault" in caught.value.message
    code, out = invoke(vault.root, "import", "evernote", str(tmp_path))
    assert code == 2


# --------------------------------------------------------------------- scale
@pytest.mark.slow
def test_ten_thousand_items_are_one_commit(vault: Vault, tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    with path.open("w") as handle:
        for i in range(10_000):
            handle.write(json.dumps({"type": "entity", "name": f"Entity {i}", "entityType": "thing",
                                     "observations": [f"Observation number {i}"]}) + "\n")
        for i in range(1, 10_000):
            handle.write(json.dumps({"type": "relation", "from": f"Entity {i}", "to": f"Entity {i - 1}",
                                     "relationType": "part_of"}) + "\n")
    before = commits(vault.root)
    report = vault.import_from("mcp-memory", path)
    assert report.counts()["created"] == 10_000
    assert_one_import_commit(vault, before)
    assert_rerun_is_noop(vault, "mcp-memory", path)


def test_links_in_code_blocks_are_left_alone(vault: Vault, tmp_path: Path) -> None:
    source = tmp_path / "notes"
    source.mkdir()
    (source / "Target.md").write_text("# Target\n\nhere\n")
    (source / "Uses.md").write_text("See [[Target]].\n\n```\n[[Target]] in code\n```\n\nAgain [[target|t]].\n")
    vault.import_from("markdown", source)
    assert vault.get("uses").body == ("See [[target|Target]].\n\n```\n[[Target]] in code\n```\n\n"
                                      "Again [[target|t]].\n")


def test_cli_lists_every_format() -> None:
    from gitmem.cli.importing import FORMAT_NAMES
    from gitmem.exchange.import_formats import FORMATS
    assert FORMAT_NAMES == tuple(FORMATS)


def test_lone_surrogates_and_nul_in_an_export_become_replacement_characters(vault: Vault, tmp_path: Path) -> None:
    """JSON may escape half of a UTF-16 pair (``\\ud800``): no file can hold it, so the
    import writes U+FFFD instead, and the CLI's report prints."""
    conv = [{"id": "s1", "title": "Odd \ud800 title\x00", "create_time": 1700000000,
             "mapping": {"a": {"id": "a", "parent": None, "children": [],
                               "message": {"author": {"role": "user"}, "create_time": 1700000000,
                                           "content": {"content_type": "text",
                                                       "parts": ["half a pair \udc00 here"]}}}},
             "current_node": "a"}]
    source = tmp_path / "conversations.json"
    source.write_text(json.dumps(conv))          # ensure_ascii: the surrogates travel as escapes
    vault.flush()
    result = run("-C", str(vault.root), "import", "chatgpt", str(source))
    assert result.returncode == 0, result.stderr
    assert "Odd \ufffd title" in result.stdout
    memory = vault.get(by_source(vault)["chatgpt:s1"].id)
    assert memory.title.startswith("Odd \ufffd title") and "half a pair \ufffd here" in memory.body
    assert_clean(vault.root)
