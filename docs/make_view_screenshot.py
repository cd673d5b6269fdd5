"""Make ``docs/view.png``: the ``gitmem view`` page of the bundled sample vault.

Usage::

    python docs/make_view_screenshot.py [--out docs/view.png] [--keep DIR]

Builds a vault from ``sample-vault/`` in a temporary folder, makes a few writes by
two agents and a person (edits, a tier move, a soft delete), writes the page, opens
it in headless Chromium with one memory's versions and diff open, and saves the
PNG.  Needs Chromium and its driver (Debian: ``apt-get install chromium
chromium-driver``) and selenium (``pip install -e ".[test]"``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gitmem import Vault  # noqa: E402

MIGRATION = "nordhav-snowflake-migration-status"


class Clock:
    """A fixed start and a few minutes per write, so the picture is the same every run."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 23, 8, 30, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def tick(self, minutes: int = 7) -> None:
        self.now += timedelta(minutes=minutes)


def build(folder: Path) -> tuple[Path, str, str]:
    """The sample vault with some history; returns the page, the memory to open and the
    commit whose diff to show."""
    clock = Clock()
    with Vault.init(folder / "maya-memory", from_dir=ROOT / "sample-vault", author="atlas", clock=clock) as vault:
        clock.tick()
        vault.update("send-nordhav-november-invoice", append="Hours exported from Toggl; 62.5 h at the Q4 rate.",
                     author="planner-agent")
        clock.tick()
        edited = vault.update(MIGRATION, author="atlas",
                     replace=("| 2 | dbt staging and marts: shipments, customs, invoicing | About 70 %, invoicing "
                              "marts slip to January |",
                              "| 2 | dbt staging and marts: shipments, customs, invoicing | About 85 %, invoicing "
                              "marts done 20 Nov |"),
                     meta={"summary": "Phase 2 (dbt marts) is about 85 % done; SQL Server decommission "
                                      "planned for Q1 2027."})
        clock.tick()
        vault.update(MIGRATION, append="- 2026-11-23: invoicing marts reviewed with Nordhav finance; "
                                       "sign-off expected this week.", author="atlas")
        clock.tick()
        vault.move(MIGRATION, "long_term", author="planner-agent")
        clock.tick()
        vault.add("Maya switched to a standing desk", "Desk arrives Friday; remind her to adjust the monitor "
                  "height.\n", type="fact", tags=["office"], author="planner-agent")
        clock.tick()
        vault.delete("maya-skips-lunch-on-nordhav-office-days", author="planner-agent")
        clock.tick()
        vault.update("book-kanels-annual-vaccination", add_tags=["done"], author="atlas")
        vault.flush()
        memory = vault.get(MIGRATION)
        # A person's edit, committed with git itself.
        note = vault.root / vault.get("maya-weekly-running-schedule").path
        note.write_text(note.read_text(encoding="utf-8") + "\nSunday long run moves to Saturday in December.\n",
                        encoding="utf-8")
        env = {"GIT_AUTHOR_NAME": "Maya Lindqvist", "GIT_AUTHOR_EMAIL": "maya@example.com",
               "GIT_COMMITTER_NAME": "Maya Lindqvist", "GIT_COMMITTER_EMAIL": "maya@example.com",
               "GIT_AUTHOR_DATE": "2026-11-23T09:40:00Z", "GIT_COMMITTER_DATE": "2026-11-23T09:40:00Z",
               "PATH": "/usr/bin:/bin", "HOME": str(folder)}
        subprocess.run(["git", "commit", "-qam", "Running: long runs on Saturdays in December"],
                       cwd=vault.root, env=env, check=True)
        page = folder / "view.html"
        vault.write_view(page)
    return page, memory.id, edited.commit or ""


def shoot(page: Path, memory_id: str, commit: str, out: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    if not chromium or not driver_bin:
        raise SystemExit("headless Chromium is needed: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1440,1160", "--force-device-scale-factor=1", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(driver_bin))
    try:
        driver.get(f"{page.as_uri()}#memory={memory_id}&commit={commit[:12]}")
        WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#detail .diff-line.add"))
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "view.png")
    parser.add_argument("--keep", type=Path, help="Build in this folder and keep it (default: a temp folder).")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temp:
        folder = args.keep or Path(temp)
        folder.mkdir(parents=True, exist_ok=True)
        page, memory_id, commit = build(folder)
        shoot(page, memory_id, commit, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
