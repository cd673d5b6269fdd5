"""The watcher: real files, a real watchdog observer, real git, real Whoosh.

Every wait polls with a deadline (no fixed sleeps); debounce and commit delay
are shortened so the file runs in a few seconds.  The index is checked with a
fresh :class:`SearchIndex` (what another process would see), git with the CLI.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from gitmem import Vault
from gitmem.store.git import blob_id
from gitmem.search.whoosh import SearchIndex
from gitmem.outside.watcher import Watcher

from .conftest import REPO, git

NOTE = "---\ntitle: {title}\n---\n{body}\n"


# ------------------------------------------------------------------ helpers
def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 5.0) -> Any:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def indexed(vault: Vault) -> dict[str, str]:
    """path -> content hash of every indexed memory, as a new reader sees it."""
    index = SearchIndex(vault.services.store.state_dir / "index")
    try:
        return index.indexed()
    finally:
        index.close()


def found(vault: Vault, word: str) -> int:
    index = SearchIndex(vault.services.store.state_dir / "index")
    try:
        return index.search(word).total
    finally:
        index.close()


def write(path: Path, text: str) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode()
    path.write_bytes(data)
    return data


def head_files(root: Path) -> set[str]:
    return set(git(root, "ls-tree", "-r", "--name-only", "HEAD").splitlines())


def head_count(root: Path) -> int:
    return int(git(root, "rev-list", "--count", "HEAD"))


def head_has(root: Path, rel: str, data: bytes) -> bool:
    result = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=root, capture_output=True, check=False)
    return result.returncode == 0 and result.stdout == data


@pytest.fixture
def seeded(vault: Vault) -> Vault:
    # A non-empty index from the start (an empty Whoosh index is a corner case of search.py).
    vault.add("Seed memory", "The seed keeps the index non-empty.")
    return vault


@pytest.fixture
def start(seeded: Vault) -> Iterator[Callable[..., tuple[Watcher, list[str]]]]:
    watchers: list[Watcher] = []

    def _start(vault: Vault | None = None, **options: Any) -> tuple[Watcher, list[str]]:
        lines: list[str] = []
        options = {"debounce": 0.05, "commit_delay": 0.4, "rescan_interval": 0, **options}
        watcher = Watcher(vault or seeded, log=lines.append, **options)
        watchers.append(watcher)
        watcher.start()
        return watcher, lines

    before = set(threading.enumerate())
    yield _start
    for watcher in watchers:
        watcher.stop()
    leftover = [t for t in threading.enumerate() if t not in before and not isinstance(t, threading.Timer)]
    assert not leftover, f"threads left running: {leftover}"


# -------------------------------------------------------------------- saves
def test_plain_write_is_searchable_then_committed_as_the_person(seeded: Vault, start) -> None:
    watcher, lines = start()
    root = seeded.root
    data = write(root / "short_term" / "notes" / "plain.md", NOTE.format(title="Plain", body="A quokka visited."))
    wait_for(lambda: found(seeded, "quokka") == 1, "the new text to be searchable")
    wait_for(lambda: head_has(root, "short_term/notes/plain.md", data), "the auto-commit")
    assert git(root, "log", "-1", "--format=%an <%ae>|%s").strip() == "git user <git@example.com>|edit: Plain"
    assert "indexed short_term/notes/plain.md" in lines
    sha = git(root, "rev-parse", "--short=7", "HEAD").strip()
    wait_for(lambda: f"committed {sha} edit: Plain" in lines, "the commit's log line")
    assert watcher.commits == [git(root, "rev-parse", "HEAD").strip()]


def test_atomic_save_over_a_note_counts_as_a_change_of_the_note(seeded: Vault, start) -> None:
    root = seeded.root
    note = root / "long_term" / "atomic.md"
    write(note, NOTE.format(title="Atomic", body="First draft."))
    watcher, _ = start()  # picks the new file up at start
    for tmp_name in (".atomic.md.tmp-123", "atomic.md.swp~tmp"):  # hidden and non-Markdown temp files
        tmp = note.parent / tmp_name
        data = write(tmp, NOTE.format(title="Atomic", body=f"Rewritten by {tmp_name[:4]} pelican."))
        os.replace(tmp, note)
        wait_for(lambda: indexed(seeded).get("long_term/atomic.md") == blob_id(data), "the new content")
    wait_for(lambda: head_has(root, "long_term/atomic.md", data), "the commit of the final content")
    assert found(seeded, "pelican") == 1 and found(seeded, "draft") == 0
    assert not any("tmp" in p for p in head_files(root))


def test_vim_style_save_with_backup_and_probe_file(seeded: Vault, start) -> None:
    root = seeded.root
    note = root / "mid_term" / "vim.md"
    write(note, NOTE.format(title="Vim", body="Before."))
    watcher, _ = start()
    folder = note.parent
    probe = folder / "4913"          # vim checks it may create files in the folder
    probe.write_bytes(b"")
    probe.unlink()
    (folder / ".vim.md.swp").write_bytes(b"swap")
    os.rename(note, folder / "vim.md~")  # backup by rename, then write a new file
    data = write(note, NOTE.format(title="Vim", body="After: a narwhal."))
    (folder / "vim.md~").unlink()
    (folder / ".vim.md.swp").unlink()
    wait_for(lambda: head_has(root, "mid_term/vim.md", data), "the commit of vim's save")
    wait_for(lambda: watcher.idle, "the watcher to settle")
    assert found(seeded, "narwhal") == 1 and indexed(seeded)["mid_term/vim.md"] == blob_id(data)
    files = head_files(root)
    assert "mid_term/vim.md~" not in files and "mid_term/4913" not in files
    assert not any(p.endswith(".swp") for p in files)
    assert set(indexed(seeded)) == {p for p in files if p.endswith(".md") and p != "MEMORY.md"}


def test_create_then_delete(seeded: Vault, start) -> None:
    root = seeded.root
    watcher, lines = start()
    note = root / "short_term" / "brief.md"
    data = write(note, NOTE.format(title="Brief", body="Short-lived axolotl."))
    wait_for(lambda: head_has(root, "short_term/brief.md", data), "the commit of the new file")
    note.unlink()
    wait_for(lambda: "short_term/brief.md" not in head_files(root), "the commit of the deletion")
    assert "short_term/brief.md" not in indexed(seeded)
    assert "removed short_term/brief.md" in lines
    assert git(root, "log", "-1", "--format=%s").strip() == "edit: short_term/brief.md (removed)"


@pytest.mark.slow
def test_move_between_tiers_is_one_commit_git_sees_as_a_rename(seeded: Vault, start) -> None:
    root = seeded.root
    data = write(root / "short_term" / "promote.md", NOTE.format(title="Promote", body="Keep this tapir."))
    # A move between tier folders crosses two watches: the removal arrives ~0.5 s
    # after the creation, so give the batch a commit delay longer than that.
    watcher, _ = start(commit_delay=1.0)
    (root / "long_term" / "sub").mkdir()
    os.rename(root / "short_term" / "promote.md", root / "long_term" / "sub" / "promote.md")
    wait_for(lambda: "short_term/promote.md" not in head_files(root), "the commit of the move")
    assert head_has(root, "long_term/sub/promote.md", data)
    renamed = git(root, "diff-tree", "-M", "--name-status", "-r", "HEAD~1", "HEAD", "--",
                  "short_term", "long_term").split()
    assert renamed[0].startswith("R") and renamed[1:] == ["short_term/promote.md", "long_term/sub/promote.md"]
    index = indexed(seeded)
    assert "long_term/sub/promote.md" in index and "short_term/promote.md" not in index


@pytest.mark.slow
def test_folder_moved_into_and_out_of_the_vault(seeded: Vault, start, tmp_path: Path) -> None:
    root = seeded.root
    outside = tmp_path / "outside" / "project"
    first = write(outside / "one.md", NOTE.format(title="One", body="Imported ocelot."))
    write(outside / "deeper" / "two.md", NOTE.format(title="Two", body="Imported okapi."))
    write(outside / "readme.txt", "not a memory")
    watcher, _ = start()
    os.rename(outside, root / "mid_term" / "project")
    wait_for(lambda: {"mid_term/project/one.md", "mid_term/project/deeper/two.md"} <= head_files(root),
             "the commit of the imported folder")
    assert head_has(root, "mid_term/project/one.md", first)
    assert "mid_term/project/readme.txt" not in head_files(root)
    wait_for(lambda: found(seeded, "okapi") == 1, "the imported files to be searchable")

    os.rename(root / "mid_term" / "project", tmp_path / "gone")
    wait_for(lambda: not any(p.startswith("mid_term/project/") for p in head_files(root)),
             "the commit of the folder's removal")
    wait_for(lambda: not any(p.startswith("mid_term/project/") for p in indexed(seeded)),
             "the index to drop the folder")
    assert found(seeded, "ocelot") == 0


# ------------------------------------------------------------ bad and ignored
def test_broken_frontmatter_is_indexed_reported_and_left_byte_identical(seeded: Vault, start) -> None:
    root = seeded.root
    watcher, lines = start()
    data = b"---\ntitle: [unclosed\ntags: x\n---\nThe body mentions a wombat.\r\n"
    (root / "short_term" / "broken.md").write_bytes(data)
    wait_for(lambda: found(seeded, "wombat") == 1, "the broken file to be searchable as Markdown")
    problem = wait_for(lambda: [l for l in lines if l.startswith("problem short_term/broken.md: ")],
                       "the problem to be logged")
    assert "frontmatter is not valid YAML" in problem[0]
    wait_for(lambda: head_has(root, "short_term/broken.md", data), "the commit of the file as written")
    assert (root / "short_term" / "broken.md").read_bytes() == data
    assert watcher.errors == 0


def test_ignored_paths_are_never_indexed_or_committed(seeded: Vault, start) -> None:
    root = seeded.root
    watcher, _ = start()
    ignored = [".obsidian/x.md", ".trash/y.md", "notes.txt", "loose.md", "short_term/notes.txt",
               "short_term/.hidden.md", "short_term/.obsidian/z.md", "short_term/anchor.md~",
               "short_term/4913", "short_term/.#anchor.md", "short_term/.anchor.md.gitmem-tmp-1"]
    for rel in ignored:
        write(root / rel, NOTE.format(title="Ignored", body="ignored capybara"))
    data = write(root / "short_term" / "anchor.md", NOTE.format(title="Anchor", body="Anchor text."))
    wait_for(lambda: head_has(root, "short_term/anchor.md", data), "the commit of the anchor file")
    wait_for(lambda: watcher.idle, "the watcher to settle")
    assert found(seeded, "capybara") == 0
    assert not set(ignored) & head_files(root)
    assert not set(ignored) & set(indexed(seeded))


# ------------------------------------------------------------------ commits
@pytest.mark.slow
def test_three_edits_in_one_quiet_period_make_exactly_one_commit(seeded: Vault, start) -> None:
    root = seeded.root
    # Gaps of 0.1 s in a quiet period of 2 s: a loaded machine may stretch them, not to 2 s.
    watcher, _ = start(commit_delay=2.0)
    before = head_count(root)
    names = ["short_term/batch-a.md", "mid_term/batch-b.md", "long_term/batch-c.md"]
    for i, rel in enumerate(names):
        write(root / rel, NOTE.format(title=f"Batch {i}", body="batched"))
        time.sleep(0.1)  # edits spaced out, but well inside the quiet period
    wait_for(lambda: set(names) <= head_files(root), "the batch commit")
    wait_for(lambda: watcher.idle, "the watcher to settle")
    assert head_count(root) == before + 1
    assert git(root, "log", "-1", "--format=%an|%s").strip() == "git user|edit: 3 memories changed outside gitmem"
    body = git(root, "log", "-1", "--format=%b")
    assert [line for line in body.splitlines() if line[:2] == "A "] == [f"A {n}" for n in sorted(names)]
    wait_for(lambda: git(root, "status", "--porcelain") == "", "git status to be clean")


def test_auto_commit_off_indexes_without_committing(seeded: Vault, start) -> None:
    root = seeded.root
    config = root / ".gitmem.yaml"
    config.write_text(config.read_text() + "auto_commit: false\n")
    seeded.flush()  # .git/index in line with HEAD before the git CLI commits
    git(root, "commit", "-qam", "config: index only")
    before = head_count(root)
    with Vault.open(root) as reopened:
        watcher, lines = start(reopened)
        assert watcher.auto_commit is False
        data = write(root / "short_term" / "draft.md", NOTE.format(title="Draft", body="Uncommitted ibex."))
        wait_for(lambda: indexed(reopened).get("short_term/draft.md") == blob_id(data), "indexing")
        watcher.stop()  # a stop flushes and would commit if auto-commit were on
    assert head_count(root) == before
    assert not any(line.startswith("committed") for line in lines)
    assert found(seeded, "ibex") == 1


def test_no_commit_option_overrides_the_default(seeded: Vault, start) -> None:
    before = head_count(seeded.root)
    watcher, _ = start(auto_commit=False)
    data = write(seeded.root / "long_term" / "scratch.md", NOTE.format(title="Scratch", body="Scratch."))
    wait_for(lambda: indexed(seeded).get("long_term/scratch.md") == blob_id(data), "indexing")
    watcher.stop()
    assert head_count(seeded.root) == before


def test_edit_made_while_stopped_is_picked_up_at_start(seeded: Vault, start) -> None:
    root = seeded.root
    seed = seeded.list()[0]
    changed = (root / seed.path).read_bytes() + b"\nEdited in Obsidian while nothing watched: a lemur.\n"
    (root / seed.path).write_bytes(changed)
    data = write(root / "mid_term" / "offline.md", NOTE.format(title="Offline", body="Offline gecko."))
    watcher, lines = start()  # start() returns after the catch-up
    assert head_has(root, seed.path, changed) and head_has(root, "mid_term/offline.md", data)
    assert git(root, "log", "-1", "--format=%an|%s").strip() == "git user|edit: 2 memories changed outside gitmem"
    assert found(seeded, "lemur") == 1 and found(seeded, "gecko") == 1
    assert len(watcher.commits) == 1


def test_pending_changes_are_indexed_and_committed_on_stop(seeded: Vault, start) -> None:
    root = seeded.root
    watcher, _ = start(commit_delay=60)
    data = write(root / "short_term" / "late.md", NOTE.format(title="Late", body="Late heron."))
    wait_for(lambda: indexed(seeded).get("short_term/late.md") == blob_id(data), "indexing")
    assert not head_has(root, "short_term/late.md", data)
    watcher.stop()
    assert head_has(root, "short_term/late.md", data)


def test_a_gitmem_write_from_another_process_makes_no_extra_commit(seeded: Vault, start) -> None:
    root = seeded.root
    watcher, lines = start()
    before = head_count(root)
    with Vault.open(root, author="agent") as other:   # stands in for another gitmem process
        memory = other.add("Agent note", "Written by an agent: a dugong.", tier="mid_term")
        other.update(memory.id, append="And a manatee.")
    data = write(root / "short_term" / "sentinel.md", NOTE.format(title="Sentinel", body="Sentinel."))
    wait_for(lambda: head_has(root, "short_term/sentinel.md", data), "the sentinel's commit")
    wait_for(lambda: watcher.idle, "the watcher to settle")
    assert git(root, "log", f"-{head_count(root) - before}", "--format=%an|%s").splitlines() == [
        "git user|edit: Sentinel", "agent|update: Agent note", "agent|add: Agent note"]
    assert "A short_term/sentinel.md" in git(root, "log", "-1", "--format=%b").splitlines()
    assert found(seeded, "manatee") == 1


@pytest.mark.slow
def test_no_auto_commit_while_a_git_merge_is_in_progress(seeded: Vault, start,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root = seeded.root
    merge_head = root / ".git" / "MERGE_HEAD"
    merge_head.write_text(git(root, "rev-parse", "HEAD"))   # what `git merge` leaves on a conflict
    watcher, lines = start(commit_delay=0.1)
    checks: list[str | None] = []   # what each commit attempt found git busy with
    real_git_busy = watcher._git_busy

    def git_busy() -> str | None:
        checks.append(real_git_busy())
        return checks[-1]

    monkeypatch.setattr(watcher, "_git_busy", git_busy)
    data = write(root / "short_term" / "conflict.md", NOTE.format(title="Conflict", body="<<<<<<< HEAD"))
    wait_for(lambda: indexed(seeded).get("short_term/conflict.md") == blob_id(data), "indexing")
    # The first attempt and the retry after it were both put off: the file stays out of git.
    wait_for(lambda: len(checks) >= 2, "a commit attempt and its retry", timeout=15)
    assert checks[:2] == ["a merge", "a merge"]
    assert "commit postponed: a merge is in progress" in lines
    assert not head_has(root, "short_term/conflict.md", data)
    merge_head.unlink()                                       # the user finished (or aborted) the merge
    wait_for(lambda: head_has(root, "short_term/conflict.md", data), "the postponed commit")


# -------------------------------------------------------- missed events, errors
def test_overflow_triggers_a_rescan_that_finds_missed_changes(seeded: Vault, start,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    root = seeded.root
    watcher, lines = start(rescan_interval=3600)
    real_on_event = watcher.on_event

    def lossy(event: Any) -> None:   # the kernel drops the events of one file
        if not os.fsdecode(event.src_path).endswith("/missed.md"):
            real_on_event(event)

    monkeypatch.setattr(watcher, "on_event", lossy)
    data = write(root / "short_term" / "missed.md", NOTE.format(title="Missed", body="A missed marmot."))
    marker = write(root / "short_term" / "marker.md", NOTE.format(title="Marker", body="Saved after it."))
    # The watcher handled the later save: the missed one is still unknown to it.
    wait_for(lambda: indexed(seeded).get("short_term/marker.md") == blob_id(marker), "the later save to be indexed")
    assert "short_term/missed.md" not in indexed(seeded)
    # watchdog 7.1 reports an inotify queue overflow only as this log record:
    logging.getLogger("watchdog.observers.inotify_c").warning("Inotify queue overflowed; filesystem events were lost")
    wait_for(lambda: head_has(root, "short_term/missed.md", data), "the rescan's commit")
    assert found(seeded, "marmot") == 1
    assert any("overflow" in line for line in lines)
    assert any(line.startswith("rescan found 1 change") for line in lines)


def test_overflow_commits_a_missed_change_another_process_indexed_first(seeded: Vault, start,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    root = seeded.root
    watcher, lines = start(rescan_interval=3600)
    monkeypatch.setattr(watcher, "on_event", lambda event: None)  # the kernel drops every event
    data = write(root / "short_term" / "missed.md", NOTE.format(title="Missed", body="A missed mole."))
    with Vault.open(root) as other:   # another follower (a gitmem mcp server) indexes it first
        other.refresh()
        assert other.search("mole").total == 1
    logging.getLogger("watchdog.observers.inotify_c").warning("Inotify queue overflowed; filesystem events were lost")
    wait_for(lambda: head_has(root, "short_term/missed.md", data), "the commit after the overflow")
    wait_for(lambda: watcher.idle, "the watcher to settle")
    assert git(root, "status", "--porcelain") == ""


def test_periodic_rescan_finds_missed_changes(seeded: Vault, start, monkeypatch: pytest.MonkeyPatch) -> None:
    root = seeded.root
    watcher, _ = start(rescan_interval=0.3)
    monkeypatch.setattr(watcher, "on_event", lambda event: None)
    data = write(root / "long_term" / "missed.md", NOTE.format(title="Missed", body="A missed meerkat."))
    wait_for(lambda: head_has(root, "long_term/missed.md", data), "the periodic rescan's commit")
    assert found(seeded, "meerkat") == 1


def test_periodic_rescan_commits_a_missed_change_another_process_indexed_first(seeded: Vault, start,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    root = seeded.root
    watcher, _ = start(rescan_interval=0.3)
    monkeypatch.setattr(watcher, "on_event", lambda event: None)  # the event is missed
    data = write(root / "mid_term" / "missed.md", NOTE.format(title="Missed", body="A missed marmot."))
    with Vault.open(root) as other:   # another follower (a gitmem mcp server) indexes it first
        other.refresh()
        assert other.search("marmot").total == 1
    wait_for(lambda: head_has(root, "mid_term/missed.md", data), "the periodic rescan's commit")
    wait_for(lambda: watcher.idle, "the watcher to settle")
    assert git(root, "status", "--porcelain") == ""


def test_an_error_in_one_event_is_logged_and_the_watcher_keeps_going(seeded: Vault, start,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root = seeded.root
    watcher, lines = start()
    real_refresh = seeded.refresh

    def flaky(paths: Any = None) -> Any:
        if paths and "short_term/poison.md" in paths:
            raise RuntimeError("disk on fire")
        return real_refresh(paths)

    monkeypatch.setattr(seeded, "refresh", flaky)
    write(root / "short_term" / "poison.md", NOTE.format(title="Poison", body="poison"))
    wait_for(lambda: any("disk on fire" in line for line in lines), "the error to be logged")
    monkeypatch.setattr(seeded, "refresh", real_refresh)
    data = write(root / "short_term" / "healthy.md", NOTE.format(title="Healthy", body="A healthy hedgehog."))
    wait_for(lambda: found(seeded, "hedgehog") == 1, "a later edit to be indexed")
    wait_for(lambda: head_has(root, "short_term/healthy.md", data), "a later edit to be committed")
    assert watcher.errors >= 1


@pytest.mark.slow
def test_a_tier_folder_recreated_is_watched_again(seeded: Vault, start, tmp_path: Path) -> None:
    root = seeded.root
    watcher, _ = start()
    os.rename(root / "archive", tmp_path / "archive-away")
    wait_for(lambda: watcher.idle and "archive" not in watcher._tier_watches, "the tier watch to go")
    (root / "archive").mkdir()
    data = write(root / "archive" / "old" / "back.md", NOTE.format(title="Back", body="A returning egret."))
    wait_for(lambda: head_has(root, "archive/old/back.md", data), "the new tier folder's file")
    data2 = write(root / "archive" / "old" / "again.md", NOTE.format(title="Again", body="Again."))
    wait_for(lambda: head_has(root, "archive/old/again.md", data2), "a later edit in the new folder")


def test_watcher_rejects_bad_settings(seeded: Vault) -> None:
    from gitmem.errors import InvalidInput, InvalidMetadata
    with pytest.raises(InvalidInput):
        Watcher(seeded, debounce=-1)
    (seeded.root / ".gitmem.yaml").write_text((seeded.root / ".gitmem.yaml").read_text() + "auto_commit: maybe\n")
    with Vault.open(seeded.root) as reopened, pytest.raises(InvalidMetadata):
        Watcher(reopened)


# -------------------------------------------------------------- the command
def _command_env(tmp_path: Path) -> dict[str, str]:
    """Environment for `python -m gitmem ... watch`."""
    return dict(os.environ)


def test_watch_command_runs_until_sigterm_and_shuts_down_cleanly(seeded: Vault, tmp_path: Path) -> None:
    root = seeded.root
    seeded.close()
    # Saved while nothing watched: committed when the watcher starts.
    data = write(root / "short_term" / "cli.md", NOTE.format(title="From CLI", body="A cli dingo."))
    log = tmp_path / "watch.log"
    with open(log, "wb") as err:
        # A commit delay no run reaches: the later edit can only be committed by the SIGTERM.
        proc = subprocess.Popen([sys.executable, "-m", "gitmem", "--vault", str(root), "watch",
                                 "--debounce", "0.05", "--commit-delay", "60"],
                                cwd=REPO, env=_command_env(tmp_path), stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_for(lambda: b"watching " in log.read_bytes(), "the watcher to start", timeout=15)
            wait_for(lambda: head_has(root, "short_term/cli.md", data), "the watcher process's commit")
            late = write(root / "short_term" / "late.md", NOTE.format(title="Late", body="late"))
            wait_for(lambda: b"indexed short_term/late.md" in log.read_bytes(), "the later edit to be indexed",
                     timeout=15)
            assert not head_has(root, "short_term/late.md", late)   # its commit waits for 60 s of quiet
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert "commits after 60s without changes" in text
    assert "committed " in text and "edit: From CLI" in text and "edit: Late" in text
    assert text.rstrip().endswith("(2 commit(s) made)")
    assert head_has(root, "short_term/late.md", late)   # flushed and committed on SIGTERM
    assert git(root, "status", "--porcelain") == ""     # .git/index synced by vault.close()
    with Vault.open(root) as reopened:
        assert reopened.search("dingo").total == 1
