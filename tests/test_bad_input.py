"""Bad input gets a clear error with a stable code and changes nothing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest

from gitmem import Vault
from gitmem.errors import GitmemError

from .conftest import snapshot

TRAVERSALS = [
    "../escape.md", "short_term/../../escape.md", "..\\escape.md", "short_term\\..\\..\\escape.md",
    "%2e%2e%2fescape.md", "short_term/%2e%2e/%2e%2e/escape.md", "%252e%252e%252fescape.md",
    "/etc/passwd", "/tmp/x.md", "C:\\Windows\\x.md", "c:/x.md", "\\\\server\\share\\x.md",
    "~/x.md", "~root/x.md",
]
PRIVATE = [".git/config", ".git/gitmem/lock", "short_term/.git/x.md", ".obsidian/app.json",
           ".gitmem.yaml", "short_term/.hidden.md"]
BAD_NAMES = ["short_term/a\x00b.md", "short_term/a\nb.md", "short_term/a\tb.md", "short_term/CON.md",
             "short_term/nul.txt.md", "short_term/com1.md", "short_term/a:b.md", "short_term/what?.md",
             "short_term/trailing./x.md", "short_term/x .md ", ""]


def assert_refused(vault: Vault, call: Callable[[], Any], code: str | tuple[str, ...]) -> GitmemError:
    before = snapshot(vault.root)
    with pytest.raises(GitmemError) as info:
        call()
    codes = (code,) if isinstance(code, str) else code
    assert info.value.code in codes, info.value
    assert info.value.message and "Traceback" not in info.value.message
    assert snapshot(vault.root) == before
    return info.value


@pytest.mark.slow
@pytest.mark.parametrize("path", TRAVERSALS + PRIVATE + BAD_NAMES)
def test_bad_paths_are_refused_for_writes(vault: Vault, path: str) -> None:
    assert_refused(vault, lambda: vault.add("Escape attempt", "x", path=path),
                   ("invalid_path", "invalid_input"))


@pytest.mark.parametrize("path", TRAVERSALS + PRIVATE)
def test_bad_paths_are_refused_for_reads(vault: Vault, path: str) -> None:
    assert_refused(vault, lambda: vault.get(path), ("invalid_path", "not_found"))


def test_symlink_out_of_the_vault_is_refused(vault: Vault, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("---\ntitle: secret\n---\nsecret\n")
    os.symlink(outside, vault.root / "short_term" / "link")
    assert_refused(vault, lambda: vault.add("Through link", "x", path="short_term/link/new.md"), "unsafe_path")
    # A linked folder is never entered: the note behind it is not a memory of this vault.
    assert_refused(vault, lambda: vault.update("short_term/link/secret.md", body="pwned"), "not_found")
    assert (outside / "secret.md").read_text() == "---\ntitle: secret\n---\nsecret\n"
    assert not (outside / "new.md").exists()


def test_symlinked_memory_file_is_not_written_through(vault: Vault, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.md"
    target.write_text("---\ntitle: elsewhere\n---\nbody\n")
    os.symlink(target, vault.root / "short_term" / "linked.md")
    # A linked note is never read, so it is not a memory gitmem knows.
    assert_refused(vault, lambda: vault.update("short_term/linked.md", body="changed"), "not_found")
    assert target.read_text() == "---\ntitle: elsewhere\n---\nbody\n"


@pytest.mark.parametrize("title", ["", "   ", "x" * 201, "line\nbreak", "nul\x00byte", "tab\there"])
def test_bad_titles(vault: Vault, title: str) -> None:
    assert_refused(vault, lambda: vault.add(title, "x"), "invalid_title")


def test_title_of_only_punctuation_still_gets_a_file_name(vault: Vault) -> None:
    m = vault.add("???", "x")
    assert Path(m.path).name == f"memory-{m.id[:8]}.md"


@pytest.mark.parametrize("kwargs,code", [
    ({"type": "note"}, "invalid_metadata"),
    ({"tier": "forever"}, "invalid_metadata"),
    ({"importance": 9}, "invalid_metadata"),
    ({"confidence": "high"}, "invalid_metadata"),
    ({"strength": 1.5}, "invalid_metadata"),
    ({"scope": "galaxy"}, "invalid_metadata"),
    ({"expires": "next tuesday"}, "invalid_metadata"),
    ({"related": [{"id": "x", "relation": "loves"}]}, "invalid_metadata"),
    ({"tags": [{"nested": True}]}, "invalid_metadata"),
    ({"status": "maybe"}, "invalid_metadata"),
])
def test_bad_metadata(vault: Vault, kwargs: dict[str, Any], code: str) -> None:
    assert_refused(vault, lambda: vault.add("Fine title", "x", **kwargs), code)


@pytest.mark.slow
def test_content_limits(vault: Vault) -> None:
    assert_refused(vault, lambda: vault.add("Huge", "x" * 4_194_305), "content_too_large")
    assert_refused(vault, lambda: vault.add("Nul", "a\x00b"), "invalid_content")
    m = vault.add("Small", "ok")
    assert_refused(vault, lambda: vault.update(m.id, append="y" * 4_194_305), "content_too_large")


def test_content_limit_is_configurable(tmp_path: Path) -> None:
    root = tmp_path / "v"
    Vault.init(root).close()
    config = root / ".gitmem.yaml"
    config.write_text(config.read_text().replace("max_content_bytes: 4194304", "max_content_bytes: 2048"))
    with Vault.open(root) as v:
        assert_refused(v, lambda: v.add("Too big now", "x" * 3000), "content_too_large")


def test_str_replace_must_match_exactly_once(vault: Vault) -> None:
    m = vault.add("Repeats", "one two one\n")
    err = assert_refused(vault, lambda: vault.update(m.id, replace=("three", "3")), "no_match")
    assert "0 times" in err.message
    err = assert_refused(vault, lambda: vault.update(m.id, replace=("one", "1")), "ambiguous_match")
    assert "2 times" in err.message
    assert_refused(vault, lambda: vault.update(m.id, replace=("", "x")), "invalid_input")


def test_unknown_tier_for_move_and_unknown_reference(vault: Vault) -> None:
    m = vault.add("Movable", "x")
    assert_refused(vault, lambda: vault.move(m.id, "forever"), "invalid_metadata")
    assert_refused(vault, lambda: vault.update("does-not-exist", body="x"), "not_found")
    assert_refused(vault, lambda: vault.update("", body="x"), "invalid_input")
    assert_refused(vault, lambda: vault.update(m.id, meta={"id": "new"}), "invalid_metadata")


def _person_file(vault: Vault, name: str, data: bytes) -> str:
    target = vault.root / "short_term" / name
    target.write_bytes(data)
    return f"short_term/{name}"


@pytest.mark.parametrize("name,data,problem", [
    ("malformed.md", b"---\ntitle: [unclosed\n---\nbody\n", "not valid YAML"),
    ("tabs.md", b"---\ntitle: x\n\tbad: indent\n---\nbody\n", "not valid YAML"),
    ("unclosed.md", b"---\ntitle: x\nbody without end\n", "no closing"),
    ("bomb.md", b"---\na: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                b"e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n---\nboom\n", "alias"),
    ("binary.md", b"\xff\xfe\x00b\x00a\x00d", "NUL"),
    ("latin1.md", "---\ntitle: caf\xe9\n---\nd\xe9j\xe0 vu\n".encode("latin-1"), "not UTF-8"),
])
def test_broken_files_are_readable_reported_and_never_rewritten(vault: Vault, name: str, data: bytes,
                                                                 problem: str) -> None:
    rel = _person_file(vault, name, data)
    memory = vault.get(rel)
    assert memory.problems and problem in memory.problems[0]
    assert any(m.path == rel for m in vault.list())  # still listed
    err = assert_refused(vault, lambda: vault.update(rel, append="more"),
                         ("invalid_frontmatter", "invalid_content"))
    assert rel in err.message
    assert (vault.root / rel).read_bytes() == data


def test_bom_and_yaml11_values_are_read_safely(vault: Vault) -> None:
    rel = _person_file(vault, "bom.md", "\ufeff---\ntitle: no\ntime: 12:30\nversion: 1.10\n---\nbody\n"
                       .encode("utf-8"))
    memory = vault.get(rel)
    assert memory.problems == []
    assert memory.title == "no"  # not False
    assert memory.meta["time"] == "12:30"  # not 750
    assert memory.body == "body\n"


def test_leading_horizontal_rule_is_not_frontmatter(vault: Vault) -> None:
    text = "---\n\nFirst section that must not vanish.\n\n---\n\nSecond section.\n"
    rel = _person_file(vault, "rule.md", text.encode())
    memory = vault.get(rel)
    assert memory.body == text and memory.problems == []
