"""Packaging promises: a light import, a complete public API, one error
hierarchy with unique codes, and a sample vault that is valid and realistic."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import gitmem
from gitmem import Vault, errors
from gitmem.memory.markdown import parse_text
from gitmem.memory.schema import MEMORY_TYPES, clean_metadata

from .conftest import SAMPLE, assert_clean, git, documentation


def test_import_gitmem_is_light() -> None:
    code = ("import sys, gitmem\n"
            "heavy = [m for m in ('dulwich', 'whoosh', 'yaml', 'watchdog', 'click', 'sqlite3') if m in sys.modules]\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_all_is_complete_and_resolvable() -> None:
    public = {n for n in dir(gitmem) if not n.startswith("_")}
    assert set(gitmem.__all__) >= {"Vault", "Memory", "GitmemError", "__version__"}
    for name in gitmem.__all__:
        assert getattr(gitmem, name) is not None
    error_classes = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, errors.GitmemError)}
    assert error_classes <= set(gitmem.__all__)
    assert set(errors.__all__) == error_classes
    assert public <= set(gitmem.__all__) | {"annotations", "import_module", "TYPE_CHECKING", "Any"}


def test_error_codes_are_unique_and_documented() -> None:
    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, errors.GitmemError)]
    codes = Counter(c.code for c in classes)
    assert all(n == 1 for n in codes.values()), codes
    readme = documentation()
    for cls in classes:
        assert f"`{cls.code}`" in readme, f"the documentation does not list error code {cls.code}"


def test_readme_is_short_and_its_links_resolve() -> None:
    root = Path(__file__).parent.parent
    readme = (root / "README.md").read_text()
    assert len(readme.encode()) <= 9_000
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (root / target).is_file(), target
    for page in (root / "docs").glob("*.md"):
        for target, anchor in re.findall(r"\]\(([a-z-]+\.md)?#([^)]+)\)", page.read_text()):
            assert (root / "docs" / (target or page.name)).is_file(), (page.name, target)


def test_sample_vault_is_realistic_and_valid(tmp_path: Path) -> None:
    files = sorted(SAMPLE.rglob("*.md"))
    assert 25 <= len(files) <= 40
    assert not (SAMPLE / ".obsidian").exists() and not (SAMPLE / ".git").exists()
    tiers = Counter(f.relative_to(SAMPLE).parts[0] for f in files)
    assert set(tiers) == {"short_term", "mid_term", "long_term", "archive"}
    ids, stems, types = set(), set(), set()
    links: list[str] = []
    for file in files:
        parsed = parse_text(file.read_text(encoding="utf-8"), strict=True)
        meta = clean_metadata(parsed.meta)  # every field is valid
        assert meta["tier"] == file.relative_to(SAMPLE).parts[0]
        ids.add(meta["id"])
        stems.add(file.stem.casefold())
        types.add(meta["type"])
        links += re.findall(r"\[\[([^\]|#]+)", parsed.body)
        if meta["type"] in ("task", "prospective"):
            assert "expires" in meta
    assert len(ids) == len(files) and len(stems) == len(files)
    assert types == set(MEMORY_TYPES)
    assert len(links) >= 20 and all(link.casefold() in stems for link in links)


def test_init_from_sample_vault_gives_a_vault_with_history(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", from_dir=SAMPLE) as vault:
        memories = vault.list(status=None)
        assert len(memories) == len(list(SAMPLE.rglob("*.md")))
        assert all(not m.problems for m in memories)
        some = memories[0]
        assert [v.op for v in vault.history(some.id)] == ["import"]
    assert git(tmp_path / "v", "log", "--format=%s").strip() == \
        f"init: gitmem vault with {len(memories)} memories from sample-vault"
    assert_clean(tmp_path / "v")
