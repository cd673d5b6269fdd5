"""ruff and mypy over ``gitmem/``, with the configuration in pyproject.toml.

Both are test dependencies (the ``test`` extra pins them), so a missing one is a
failure, not a skip: a skip would let the suite pass without the checks.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
INSTALL = 'install the test extra: python -m pip install -e ".[test]"'


def run_tool(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m <module> <args>`` from the repository root (where pyproject.toml is)."""
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed; {INSTALL}", pytrace=False)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)


def test_ruff_finds_nothing() -> None:
    # --no-cache: nothing written into the checkout.
    result = run_tool("ruff", "check", "gitmem", "--no-cache", "--output-format", "concise")
    if result.returncode != 0:
        pytest.fail(f"ruff check gitmem (exit {result.returncode}):\n{result.stdout}{result.stderr}",
                    pytrace=False)


@pytest.mark.slow   # ~15 s on two idle cores from a cold cache, more under load
def test_mypy_finds_nothing(tmp_path_factory: pytest.TempPathFactory) -> None:
    # A fresh cache each run: a result never depends on what an earlier run left behind.
    cache = tmp_path_factory.mktemp("mypy-cache")
    result = run_tool("mypy", "--cache-dir", str(cache))
    if result.returncode != 0:
        pytest.fail(f"mypy (exit {result.returncode}):\n{result.stdout}{result.stderr}", pytrace=False)
