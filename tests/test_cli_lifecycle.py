"""The lifecycle commands on a vault made from sample-vault (click's runner, plus one
real subprocess for the offline compress flow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitmem.cli.main import cli

from .conftest import SAMPLE, assert_clean, git


@pytest.fixture
def root(tmp_path: Path) -> Path:
    out = CliRunner().invoke(cli, ["init", "--from", str(SAMPLE), str(tmp_path / "v")])
    assert out.exit_code == 0, out.output
    return tmp_path / "v"


def run(root: Path, *args: str) -> tuple[int, str]:
    out = CliRunner().invoke(cli, ["--vault", str(root), *args], catch_exceptions=False)
    return out.exit_code, out.output


def test_context_lists_rules_then_goals(root: Path) -> None:
    code, out = run(root, "context")
    assert code == 0
    kinds = [line.split()[0] for line in out.splitlines()]
    assert kinds == sorted(kinds, key=lambda k: k == "goal") and "goal" in kinds and "rule" in kinds
    code, md = run(root, "context", "--markdown")
    assert md.startswith("# Protected context\n") and "## Goals" in md
    code, raw = run(root, "context", "--json")
    assert json.loads(raw)["markdown"] == md


def test_add_with_dedup_reports_skip_and_supersede(root: Path) -> None:
    code, out = run(root, "add", "Desk", "Maya bought a standing desk for the office.", "--dedup", "--json")
    first = json.loads(out)
    assert code == 0 and first["result"] == "created"
    code, out = run(root, "add", "Desk again", "Maya bought a standing desk for the office!", "--dedup")
    assert code == 0 and out.startswith(f"skipped: an identical memory exists: {first['id'][:8]}")
    code, out = run(root, "add", "Desk", "Maya bought a standing desk and a monitor arm for the office.", "--dedup", "--json")
    assert json.loads(out)["result"] == "superseded" and json.loads(out)["superseded"] == [first["id"]]
    code, out = run(root, "add", "K", "x", "--external-id", "k-1", "--json")
    code2, out2 = run(root, "add", "K", "y", "--external-id", "k-1", "--json")
    assert json.loads(out2)["result"] == "skipped" and json.loads(out2)["id"] == json.loads(out)["id"]


def test_archive_unarchive_merge_links(root: Path) -> None:
    code, out = run(root, "archive", "Book Kanel's annual vaccination", "--json")
    moved = json.loads(out)
    assert code == 0 and moved[0]["tier"] == "archive"
    code, out = run(root, "unarchive", moved[0]["id"])
    assert code == 0 and out.startswith(f"unarchived {moved[0]['id'][:8]}  short_term/")
    code, out = run(root, "archive", "Pass Svenska 3 by June 2027")
    assert code == 4 and "protected goal" in out
    a = json.loads(run(root, "add", "A", "Docker Compose for deploys.", "--json")[1])
    b = json.loads(run(root, "add", "B", "Blue-green deploys.", "--json")[1])
    code, out = run(root, "merge", a["id"], b["id"], "--title", "Deploy preferences", "--json")
    merged = json.loads(out)
    assert code == 0 and merged["sources"] == [a["id"], b["id"]]
    code, out = run(root, "links", merged["id"], "--json")
    links = json.loads(out)
    assert {o["id"] for o in links["outgoing"]} == {a["id"], b["id"]}
    assert {(x["id"], x["relation"]) for x in links["backlinks"]} == {(a["id"], "merged_into"),
                                                                      (b["id"], "merged_into")}
    code, out = run(root, "links", "Maya Lindqvist core profile")
    assert code == 0 and "backlinks:\n  contradicts" in out
    code, out = run(root, "merge", merged["id"])
    assert code == 2 and "at least two" in out
    code, out = run(root, "merge", a["id"], merged["id"])
    assert code == 2 and "already archived" in out


def test_offline_compress_in_a_real_process(root: Path) -> None:
    env = {**os.environ, "GITMEM_VAULT": str(root)}

    def gitmem(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gitmem", *args], env=env, capture_output=True,
                              text=True, timeout=120)

    dry = gitmem("compress", "short_term", "--dry-run", "--json")
    batch = json.loads(dry.stdout)
    assert dry.returncode == 0 and batch["files"] and batch["target_tier"] == "mid_term"
    done = gitmem("compress", "short_term", "--title", "Week 47", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["tier"] == "mid_term" and sorted(summary["archived"]) == sorted(batch["files"])
    assert git(root, "log", "-1", "--format=%s").startswith(f"compress: {len(batch['files'])} short_term")
    for path in batch["files"]:
        archived = path.replace("short_term/", "archive/", 1)
        follow = git(root, "log", "--follow", "--format=%s", "--", archived).splitlines()
        assert follow[0].startswith("compress:") and follow[-1].startswith("init:")
    assert_clean(root)
    bad = gitmem("compress", "archive")
    assert bad.returncode == 2 and "cannot compress tier 'archive'" in bad.stderr
