"""``gitmem view``: the history page's data against git itself, escaping of hostile
vault values, the command line (file, ``--json``, ``--serve``), and the page in a
real headless Chromium."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gitmem import Vault
from gitmem.exchange.view import edit_script, render_view, to_json
from gitmem.exchange.view_server import PageServer

from .conftest import SAMPLE, FakeClock, git

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="headless Chromium is not installed; install it with: apt-get install chromium chromium-driver")
HOSTILE_TITLE = "</script><script>alert(1)</script>"
HOSTILE_BODY = '<img src=x onerror="alert(2)"> <script>alert(3)</script> <!-- & &amp; ]]>\n'
HOSTILE_AUTHOR = "<img src=x onerror=alert(4)> <evil@example.com>"


# ----------------------------------------------------------------- helpers
def page_parts(html: str) -> tuple[dict[str, Any], list[Any]]:
    """The page's embedded index and version chains, as the page's script reads them."""
    data = re.search(r'<script type="application/json" id="gm-data">(.*?)</script>', html, re.S)
    versions = re.search(r'<script type="application/json" id="gm-versions">(.*?)</script>', html, re.S)
    assert data and versions
    return json.loads(data.group(1)), json.loads(versions.group(1))


def texts_of(chain: list[Any]) -> list[str | None]:
    """Each version's text from its chain (what the page's versionsOf does)."""
    texts: list[str | None] = []
    before: list[str] = []
    for entry in chain:
        if entry is None:
            texts.append(None)
            continue
        if isinstance(entry, str):
            lines = entry.split("\n")
        else:
            lines, at = [], 0
            for step in entry:
                if isinstance(step, list):
                    lines += step
                elif step > 0:
                    lines += before[at:at + step]
                    at += step
                else:
                    at -= step
        texts.append("\n".join(lines))
        before = lines
    return texts


def memory_named(data: dict[str, Any], title: str) -> tuple[int, list[Any]]:
    found = [(k, m) for k, m in enumerate(data["memories"]) if m[1] == title]
    assert len(found) == 1, title
    return found[0]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitmem", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def history(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Vault, dict[str, str]]]:
    """A vault with adds, edits by two agents, a move, a person's edit with the git CLI,
    an outside edit committed by gitmem, a soft and a hard delete."""
    vault = Vault.init(tmp_path / "vault", author="planner-agent", clock=clock)
    ids: dict[str, str] = {}
    clock.tick()
    ids["dark"] = vault.add("Prefers dark mode", "Use dark themes in every editor.\n", type="preference",
                            tags=["ui"]).id
    clock.tick()
    ids["deploy"] = vault.add("Deploy checklist", "1. run the tests\n2. deploy to staging\n", type="procedural",
                              tier="mid_term", tags=["ops"], author="atlas").id
    clock.tick()
    vault.update(ids["dark"], append="Also in the terminal.")
    clock.tick()
    vault.move(ids["dark"], "long_term", author="atlas")
    clock.tick()
    vault.update(ids["dark"], replace=("dark themes", "high-contrast dark themes"))
    vault.flush()
    deploy = vault.root / vault.get(ids["deploy"]).path
    deploy.write_text(deploy.read_text() + "3. deploy to production\n")
    git(vault.root, "commit", "-qam", "Add the production step")          # a person, with git
    deploy.write_text(deploy.read_text().replace("run the tests", "run the full test suite"))
    vault.commit_outside_edits(reason="outside edit")                       # a person, seen by gitmem
    clock.tick()
    ids["temp"] = vault.add("Temporary note", "Remove me soon.\n", tags=["tmp"]).id
    clock.tick()
    vault.delete(ids["temp"], hard=True)
    clock.tick()
    ids["old"] = vault.add("Old idea", "Try a standing desk.\n", type="memory", tags=["idea"]).id
    clock.tick()
    vault.delete(ids["old"])
    yield vault, ids
    vault.close()


# ----------------------------------------------------------------- data vs git
def test_timeline_is_every_commit_as_git_logs_it(history: tuple[Vault, dict[str, str]]) -> None:
    vault, _ = history
    data, _ = page_parts(render_view(vault.services))
    log = git(vault.root, "log", "--topo-order", "--reverse",
              "--format=%H%x00%an%x00%ae%x00%at%x00%s").splitlines()
    assert len(data["commits"]) == len(log)
    for commit, line in zip(data["commits"], log):
        sha, name, email, when, subject = line.split("\x00")
        assert commit[0] == sha and commit[1] == int(when) and commit[4] == subject
        assert data["authors"][commit[2]] == [name, email]
    ops = [c[3] for c in data["commits"]]
    assert ops[0] == "init" and "rename" in ops and "edit" in ops and ops[-1] == "delete"
    person = next(c for c in data["commits"] if c[4] == "Add the production step")
    assert data["authors"][person[2]][0] == "git user" and person[3] == "update"


def test_versions_match_git_log_follow_and_git_show(history: tuple[Vault, dict[str, str]]) -> None:
    vault, ids = history
    data, chains = page_parts(render_view(vault.services))
    shas = [c[0] for c in data["commits"]]
    for title in ("Prefers dark mode", "Deploy checklist"):
        at, memory = memory_named(data, title)
        assert memory[0] == ids["dark" if title.startswith("Prefers") else "deploy"]
        versions = memory[8]
        follow = git(vault.root, "log", "--follow", "--format=%H %s", "--", memory[7]).splitlines()[::-1]
        # git --follow also lists the pure-rename half of a move, which is not a version.
        expected = [line.split(" ", 1)[0] for line in follow if not line.split(" ", 1)[1].startswith("rename: ")]
        assert [shas[v[0]] for v in versions] == expected
        texts = texts_of(chains[at])
        assert len(texts) == len(versions)
        for (commit, _, path), text in zip(versions, texts):
            assert text == git(vault.root, "show", f"{shas[commit]}:{path}")
    at, dark = memory_named(data, "Prefers dark mode")
    assert isinstance(chains[at][0], str) and all(isinstance(step, list) for step in chains[at][1:])  # scripts
    assert [v[1] for v in dark[8]] == ["add", "update", "move", "update"]
    assert [v[2].split("/")[0] for v in dark[8]] == ["short_term", "short_term", "long_term", "long_term"]
    assert dark[2:8] == ["preference", "long_term", "active", "planner-agent", ["ui"], vault.get(ids["dark"]).path]
    rename = next(c for c in data["commits"] if c[3] == "rename")
    assert data["memories"][rename[5][0]][0] == ids["dark"] and rename[5][1] == "rename"
    _, deploy = memory_named(data, "Deploy checklist")
    assert [v[1] for v in deploy[8]] == ["add", "update", "edit"]


def test_deleted_memories_keep_their_history(history: tuple[Vault, dict[str, str]]) -> None:
    vault, ids = history
    data, chains = page_parts(render_view(vault.services))
    at, temp = memory_named(data, "Temporary note")
    assert temp[0] == ids["temp"] and temp[4] == "removed" and temp[7] is None
    assert [(v[1], v[2] is None) for v in temp[8]] == [("add", False), ("delete", True)]
    assert texts_of(chains[at])[0].endswith("Remove me soon.\n")
    assert texts_of(chains[at])[1] is None
    _, old = memory_named(data, "Old idea")
    assert old[3:5] == ["archive", "deleted"] and [v[1] for v in old[8]] == ["add", "delete"]


def test_merged_history_is_read_in_topological_order(vault: Vault, clock: FakeClock) -> None:
    first = vault.add("Kept on main", "Main line.\n")
    side = vault.add("Changed on a branch", "Before the branch.\n")
    vault.flush()
    git(vault.root, "checkout", "-qb", "side")
    note = vault.root / side.path
    note.write_text(note.read_text() + "Added on the branch.\n")
    git(vault.root, "commit", "-qam", "Edit on a branch")
    git(vault.root, "checkout", "-q", "main")
    clock.tick()
    vault.update(first.id, append="Later on main.")
    vault.flush()
    git(vault.root, "merge", "-q", "--no-edit", "side")
    data, chains = page_parts(render_view(vault.services))
    assert [c[0] for c in data["commits"]] == git(vault.root, "rev-list", "--topo-order", "--reverse",
                                                  "HEAD").split()
    shas = [c[0] for c in data["commits"]]
    for title in ("Kept on main", "Changed on a branch"):
        at, memory = memory_named(data, title)
        for (commit, _, path), text in zip(memory[8], texts_of(chains[at])):
            assert text == git(vault.root, "show", f"{shas[commit]}:{path}")
    _, branch = memory_named(data, "Changed on a branch")
    assert data["commits"][branch[8][-1][0]][4].startswith("Merge branch 'side'")


def test_uncommitted_memory_is_listed_without_versions(history: tuple[Vault, dict[str, str]]) -> None:
    vault, _ = history
    note = vault.root / "short_term" / "scratch.md"
    note.write_text("---\ntitle: Scratch\ntype: fact\n---\nNot committed.\n")
    data, chains = page_parts(render_view(vault.services))
    at, scratch = memory_named(data, "Scratch")
    assert at == 0 and scratch[8] == [] and chains[0] == []


def test_write_view_streams_the_same_page(history: tuple[Vault, dict[str, str]], tmp_path: Path) -> None:
    vault, _ = history
    report = vault.write_view(tmp_path / "page.html")
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert page == render_view(vault.services)
    data, _ = page_parts(page)
    assert (report.memories, report.commits) == (len(data["memories"]), len(data["commits"]))
    assert report.versions == sum(len(m[8]) for m in data["memories"])
    assert report.removed == sum(1 for m in data["memories"] if m[4] == "removed") == 1  # counted in memories
    assert report.bytes == len(page.encode("utf-8")) and report.path == str(tmp_path / "page.html")
    assert data["generated"] == vault.now() and data["head"] == vault.head
    assert not list(tmp_path.glob(".page.html.*"))  # the temp file became the page
    assert not re.search(r"\{\{(csp|style|data|versions|script)\}\}", page)  # every slot of the template filled


def test_every_count_of_memories_is_the_list_the_page_shows(history: tuple[Vault, dict[str, str]],
                                                              tmp_path: Path) -> None:
    """The CLI line, the JSON report and the page's header count the memories the Memories
    tab lists: the removed one (a hard delete) included, and named."""
    vault, _ = history
    listed = len(page_parts(render_view(vault.services))[0]["memories"])
    done = run("-C", str(vault.root), "view", "--out", str(tmp_path / "p.html"))
    assert done.returncode == 0 and f"({listed} memories (1 removed), " in done.stdout, done.stdout
    report = json.loads(run("-C", str(vault.root), "view", "--out", str(tmp_path / "p.html"), "--json").stdout)
    assert (report["memories"], report["removed"]) == (listed, 1)
    script = (tmp_path / "p.html").read_text()
    assert 'el("b", null, fmt(mems.length)), " memories"' in script  # the header: the whole list
    assert "var live" not in script


def test_big_versions_are_cut(vault: Vault) -> None:
    from gitmem.exchange.view import MAX_TEXT_CHARS
    big = "\n".join(f"line {n} " + "x" * 60 for n in range(MAX_TEXT_CHARS // 40)) + "\n"
    vault.add("Huge", big)
    data, chains = page_parts(render_view(vault.services))
    at, _ = memory_named(data, "Huge")
    text = texts_of(chains[at])[0]
    assert text is not None and MAX_TEXT_CHARS < len(text) < MAX_TEXT_CHARS + 200 and "(cut: gitmem view" in text


# ----------------------------------------------------------------- hostile values
def test_hostile_values_stay_data(tmp_path: Path, clock: FakeClock) -> None:
    with Vault.init(tmp_path / "v", author=HOSTILE_AUTHOR, clock=clock) as vault:
        memory = vault.add(HOSTILE_TITLE, HOSTILE_BODY, type="fact", tags=["<b>bold</b>", "a&b"])
        vault.update(memory.id, append="<svg onload=alert(5)>")
        html = render_view(vault.services)
    # Exactly the page's three script elements: no vault text ended one or opened another.
    assert html.count("<script") == 3 and html.count("</script>") == 3
    for raw in ("<img", "<svg", "<b>", "<!-- &", "</script><script>alert"):
        assert raw not in html
    data, chains = page_parts(html)
    at, hostile = memory_named(data, HOSTILE_TITLE)
    assert hostile[6] == ["<b>bold</b>", "a&b"]
    assert HOSTILE_BODY in texts_of(chains[at])[0] and "<svg onload=alert(5)>" in texts_of(chains[at])[1]
    assert data["authors"][0][0].startswith("img src=x onerror=alert(4)>")
    # Only the page's own script may run, by its hash; nothing may be fetched.
    script = re.search(r"<script>(.*?)</script>", html, re.S).group(1)
    style = re.search(r"<style>(.*?)</style>", html, re.S).group(1)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    for kind, text in (("script", script), ("style", style)):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"{kind}-src 'sha256-{digest}'" in csp
    assert "default-src 'none'" in csp and "unsafe" not in csp
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("):
        assert sink not in script


# Most random pairs share too little for an edit script to pay (edit_script gives None and the
# example is skipped): that filtering is expected, not a sign of a bad strategy.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.lists(st.sampled_from(["", "a", "b", "c", "---", "x y", "é"]), max_size=30),
       st.lists(st.sampled_from(["", "a", "b", "c", "---", "x y", "é", "new"]), max_size=30))
@pytest.mark.slow
def test_edit_scripts_rebuild_the_text_exactly(before: list[str], after: list[str]) -> None:
    old, new = "\n".join(before), "\n".join(after)
    script = edit_script(old.split("\n"), new.split("\n"))  # as version_chains splits texts
    assume(script is not None)
    assert texts_of([old, script]) == [old, new]


def test_to_json_escapes_markup() -> None:
    text = to_json({"t": "</script><!--&-->"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"t": "</script><!--&-->"}


# ----------------------------------------------------------------- command line
@pytest.mark.slow
def test_cli_writes_the_page_where_asked(tmp_path: Path) -> None:
    assert run("init", "--from", str(SAMPLE), str(tmp_path / "v")).returncode == 0
    done = run("view", cwd=tmp_path / "v" / "long_term")  # from inside the vault, as git is used
    assert done.returncode == 0, done.stderr
    default = tmp_path / "v" / ".git" / "gitmem" / "view.html"  # not in the tracked files
    assert done.stdout.startswith(f"wrote {default}") and "33 memories, 1 commits" in done.stdout
    assert page_parts(default.read_text())[0]["vault"] == "v"
    assert default.stat().st_mode & 0o777 == 0o600  # it holds every version: its owner's only
    assert git(tmp_path / "v", "status", "--porcelain") == ""
    done = run("-C", str(tmp_path / "v"), "view", "--out", str(tmp_path / "out" / "x.html"), "--json")
    assert done.returncode == 3 and json.loads(done.stdout)["error"]["code"] == "not_found"  # no such folder
    assert all(word in run("view", "--help").stdout for word in ("--out", "--serve", "--port", "--json"))
    (tmp_path / "out").mkdir()
    done = run("-C", str(tmp_path / "v"), "view", "--out", str(tmp_path / "out" / "x.html"), "--json")
    report = json.loads(done.stdout)
    assert report["path"] == str(tmp_path / "out" / "x.html") and report["memories"] == 33
    assert report["commits"] == 1 and report["bytes"] == (tmp_path / "out" / "x.html").stat().st_size


def test_cli_serve_answers_the_token_holder_on_loopback_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    assert run("init", "--from", str(SAMPLE), str(tmp_path / "v")).returncode == 0
    page = tmp_path / "page.html"
    # Started as a shell starts a command in a terminal, where Ctrl-C reaches it: with SIGINT at
    # its default. A test run started in the background (`pytest &`, nohup, some CI runners)
    # ignores SIGINT, and a child inherits that: the server then never sees the Ctrl-C below.
    env = {k: v for k, v in os.environ.items() if k != "GITMEM_VIEW_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "gitmem", "-C", str(tmp_path / "v"), "view", "--serve",
                             "--out", str(page), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        lines = []
        while not lines or lines[-1] != "}\n":
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            lines.append(line)
        url = json.loads("".join(lines))["url"]
        found = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]{43})", url)
        assert found, url
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.status == 200 and answer.headers["Content-Type"] == "text/html; charset=utf-8"
            assert answer.headers["Cache-Control"] == "no-store"
            assert answer.read() == page.read_bytes()
        for without in (url.split("?")[0], url.split("?")[0] + "?token=" + "x" * 43):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(without, timeout=10)
            assert refused.value.code == 401
            refused.value.close()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url.replace("/?", "/../.git/config?"), timeout=10)
        assert missing.value.code == 404
        missing.value.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert "stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_cli_serve_refuses_a_weak_token_before_writing_anything(tmp_path: Path) -> None:
    assert run("init", str(tmp_path / "v")).returncode == 0
    for token in ("short", "has spaces in it, sixteen+", "semi;colon;in;the;cookie"):
        done = run("-C", str(tmp_path / "v"), "view", "--serve", "--token", token, "--out", str(tmp_path / "p.html"))
        assert done.returncode == 2 and done.stderr.startswith("error: the view token must be"), done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "p.html").exists()


# ----------------------------------------------------------------- who the server answers
TOKEN = "view-token-0123456789abcdef"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[PageServer]:
    """A page served by a real server on a real socket, in a thread."""
    page = tmp_path / "page.html"
    page.write_text("<!doctype html><title>vault history</title>\n")
    server = PageServer(page, "127.0.0.1", 0, TOKEN)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def ask(server: PageServer, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    """One request with exactly these headers (``Host`` too: http.client is told not to add its own)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name.replace("_", "-"), value)
        conn.endheaders()
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def test_serve_refuses_requests_without_the_right_token(served: PageServer) -> None:
    host = f"127.0.0.1:{served.port}"
    for path, extra in (("/", {}), ("/?token=", {}), (f"/?token={TOKEN[:-1]}", {}), (f"/?token={TOKEN}x", {}),
                        ("/", {"Cookie": f"{served.cookie}=wrong-token-0123456789"}),
                        ("/", {"Cookie": f"gitmem_view_1={TOKEN}"}),            # another port's cookie name
                        ("/", {"Authorization": f"Bearer {TOKEN}"})):         # not how a browser sends it
        status, headers, body = ask(served, path, Host=host, **extra)
        assert status == 401, (path, extra)
        assert body.startswith(b"A valid token is needed") and b"vault history" not in body
        assert headers["content-type"] == "text/plain; charset=utf-8" and "set-cookie" not in headers


def test_serve_refuses_a_foreign_host_or_origin_even_with_the_token(served: PageServer) -> None:
    port = served.port
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", f"localhost.:{port}",
                 f"127.0.0.2:{port}", f"[::1]:{port}" + "x", f"127.0.0.1:{port + 1}"):
        status, headers, body = ask(served, f"/?token={TOKEN}", Host=host)
        assert status == 403 and body.startswith(b"Forbidden"), host
        assert "set-cookie" not in headers and b"vault history" not in body
    status, _, _ = ask(served, f"/?token={TOKEN}")                              # no Host at all
    assert status == 403
    for origin in ("http://evil.example", f"http://evil.example:{port}", "null", f"https://127.0.0.1:{port}",
                   f"http://127.0.0.1:{port + 1}"):
        status, headers, body = ask(served, f"/?token={TOKEN}", Host=f"127.0.0.1:{port}", Origin=origin)
        assert status == 403 and body.startswith(b"Forbidden"), origin
        assert "set-cookie" not in headers


def test_serve_answers_the_token_then_the_cookie_it_set(served: PageServer) -> None:
    port = served.port
    assert served.url == f"http://127.0.0.1:{port}/?token={TOKEN}"
    page = (served.page).read_bytes()
    for host, origin in ((f"127.0.0.1:{port}", None), (f"localhost:{port}", None), (f"LOCALHOST:{port}", None),
                         (f"127.0.0.1:{port}", f"http://127.0.0.1:{port}"),
                         (f"localhost:{port}", f"http://localhost:{port}")):
        extra = {"Origin": origin} if origin else {}
        status, headers, body = ask(served, f"/?token={TOKEN}", Host=host, **extra)
        assert status == 200 and body == page, (host, origin)
    status, headers, _ = ask(served, f"/?token={TOKEN}", Host=f"127.0.0.1:{port}")
    cookie = headers["set-cookie"]
    parts = [p.strip() for p in cookie.split(";")]
    assert parts[0] == f"gitmem_view_{port}={TOKEN}"
    assert {"Path=/", "HttpOnly", "SameSite=Strict"} <= set(parts)
    # The browser's later requests carry the cookie instead of the token, among other cookies.
    status, headers, body = ask(served, "/", Host=f"127.0.0.1:{port}",
                                Cookie=f"other=1; {parts[0]}; theme=dark")
    assert status == 200 and body == page and "set-cookie" not in headers
    status, _, body = ask(served, "/index.html", Host=f"localhost:{port}", Cookie=parts[0])
    assert status == 200 and body == page
    status, _, body = ask(served, "/.git/config", Host=f"127.0.0.1:{port}", Cookie=parts[0])
    assert status == 404 and body.startswith(b"Only the page")
    # A HEAD answers the same, without a body.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("HEAD", "/", headers={"Cookie": parts[0]})
    answer = conn.getresponse()
    assert answer.status == 200 and answer.read() == b""
    conn.close()


@needs_chromium
def test_served_page_in_chromium_keeps_working_after_the_token_leaves_the_address(
        tmp_path: Path, clock: FakeClock, browser: Any) -> None:
    with Vault.init(tmp_path / "v", author="planner-agent", clock=clock) as vault:
        vault.add("Prefers dark mode", "Use dark themes.\n", tags=["ui"])
        page = tmp_path / "view.html"
        vault.write_view(page)
    server = PageServer(page, "127.0.0.1", 0, TOKEN)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        browser.get(server.address)                          # no token yet: refused
        assert "A valid token is needed" in browser.page_source
        browser.get(server.url)                              # the printed address
        assert wait_for(browser, "#timeline .commit")
        browser.get(server.address)                          # a reload of / without the token: the cookie
        assert wait_for(browser, "#timeline .commit")
        cookies = {c["name"]: c for c in browser.get_cookies()}
        assert cookies[server.cookie]["httpOnly"] and cookies[server.cookie]["sameSite"] == "Strict"
        assert browser.execute_script("return document.cookie") == ""   # no script can read it
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_cli_serve_on_a_taken_port_is_a_conflict(tmp_path: Path) -> None:
    assert run("init", str(tmp_path / "v")).returncode == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = run("-C", str(tmp_path / "v"), "view", "--serve", "--port", str(port), "--json",
                   "--out", str(tmp_path / "p.html"))
    assert done.returncode == 5, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["error"]["code"] == "port_in_use"


# ----------------------------------------------------------------- in a browser
@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER or ""))
    yield driver
    driver.quit()


def visible(element: Any) -> bool:
    """Really there: displayed, with a non-zero size."""
    return bool(element.is_displayed() and element.size["width"] > 0 and element.size["height"] > 0)


def wait_for(driver: Any, css: str, timeout: float = 20) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout).until(
        lambda d: next((e for e in d.find_elements(By.CSS_SELECTOR, css) if visible(e)), False))


@pytest.mark.slow
@needs_chromium
def test_page_in_chromium_shows_timeline_and_a_diff(tmp_path: Path, clock: FakeClock, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    with Vault.init(tmp_path / "v", from_dir=SAMPLE, author="planner-agent", clock=clock) as vault:
        for n in range(55):  # more commits than one page of the timeline
            clock.tick()
            vault.add(f"Note {n}", f"Body {n}.\n", tags=["bulk"], author="scribe-agent")
        clock.tick()
        vault.update("maya-prefers-duckdb-for-local-prototyping",
                     replace=("She uses the DuckDB CLI", "She uses the DuckDB 1.1 CLI"))
        clock.tick()
        vault.move("maya-prefers-duckdb-for-local-prototyping", "long_term", author="atlas")
        page = tmp_path / "view.html"
        vault.write_view(page)
    browser.get(page.as_uri())
    first = wait_for(browser, "#timeline .commit")
    assert visible(first) and first.find_element(By.CSS_SELECTOR, ".op").text == "move"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline .commit")) == 50  # one page, not 59 rows
    assert "Page 1 of 2 (59 commits)" in browser.find_element(By.ID, "pager").text
    next_page = [b for b in browser.find_elements(By.CSS_SELECTOR, "#pager button") if "Next" in b.text][0]
    next_page.click()
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline .commit")) == 9
    # Filter by author (commits by atlas; memories atlas wrote or changed), then find one by title.
    from selenium.webdriver.support.ui import Select
    Select(browser.find_element(By.ID, "f-author")).select_by_visible_text("atlas")
    assert browser.find_element(By.ID, "count-timeline").text == "2"  # the move and its rename half
    listed = len(page_parts(page.read_text())[0]["memories"])
    assert browser.find_element(By.ID, "summary").text.startswith(f"{listed} memories, ")
    atlas = sum(1 for m in page_parts(page.read_text())[0]["memories"] if m[5] == "atlas")
    assert browser.find_element(By.ID, "count-memories").text == str(atlas)
    browser.find_element(By.ID, "tab-memories").click()
    browser.find_element(By.ID, "f-text").send_keys("duckdb for local")
    WebDriverWait(browser, 10).until(lambda d: d.find_element(By.ID, "count-memories").text == "1")
    wait_for(browser, "#memories .mem-link").click()
    added = wait_for(browser, "#detail .diff-line.add")
    removed = wait_for(browser, "#detail .diff-line.del")
    assert visible(added) and visible(removed)
    assert "tier: long_term" in added.text and "tier: mid_term" in removed.text
    heading = browser.find_element(By.CSS_SELECTOR, "#detail h2")
    assert heading.text == "Maya prefers DuckDB for local prototyping"
    moves = browser.find_element(By.CSS_SELECTOR, "#detail .moves").text
    assert "mid_term" in moves and "long_term" in moves
    assert len(browser.find_elements(By.CSS_SELECTOR, "#detail .version")) == 3
    # The update (~1) opens to the lines git itself shows as changed.
    browser.find_element(By.CSS_SELECTOR, "#detail .version:nth-child(2) .v-head").click()
    rows = browser.find_elements(By.CSS_SELECTOR, "#detail .version:nth-child(2) .diff-line")
    shown = [(r.find_element(By.CSS_SELECTOR, ".sg").get_attribute("textContent"),
              r.find_element(By.CSS_SELECTOR, ".tx").get_attribute("textContent")) for r in rows]
    data, _ = page_parts(page.read_text())
    _, duck = memory_named(data, "Maya prefers DuckDB for local prototyping")
    commit = data["commits"][duck[8][1][0]][0]
    patch = git(tmp_path / "v", "diff", f"{commit}^", commit, "--", duck[8][1][2]).splitlines()
    changed = [(line[0], line[1:]) for line in patch if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed and [row for row in shown if row[0] in ("+", "-")] == changed
    shot = tmp_path / "view.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


@pytest.mark.slow
@needs_chromium
def test_hostile_memory_cannot_run_script_in_chromium(tmp_path: Path, clock: FakeClock, browser: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    with Vault.init(tmp_path / "v", author=HOSTILE_AUTHOR, clock=clock) as vault:
        memory = vault.add(HOSTILE_TITLE, HOSTILE_BODY, type="fact", tags=["<b>bold</b>"])
        vault.update(memory.id, append="<svg onload=alert(5)>")
        page = tmp_path / "hostile.html"
        vault.write_view(page)
    browser.get(page.as_uri())
    chip = wait_for(browser, "#timeline .mem-chip")
    assert chip.text == HOSTILE_TITLE
    chip.click()
    wait_for(browser, "#detail .diff-line.add")
    assert browser.find_element(By.CSS_SELECTOR, "#detail h2").text == HOSTILE_TITLE
    browser.find_element(By.CSS_SELECTOR, "#detail .version:last-child .v-head").click()  # the first version too
    texts = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#detail .diff-line .tx")]
    assert '<img src=x onerror="alert(2)"> <script>alert(3)</script> <!-- & &amp; ]]>' in texts
    assert "<svg onload=alert(5)>" in texts
    assert browser.find_elements(By.TAG_NAME, "img") == [] and browser.find_elements(By.TAG_NAME, "svg") == []
    assert "bold" not in [b.text for b in browser.find_elements(By.TAG_NAME, "b")]  # the page's own <b> only
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 3
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
