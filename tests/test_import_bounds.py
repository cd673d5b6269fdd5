"""Imports read and hold a bounded amount: ``max_bytes`` of source text (a file, a
folder's files, a ``.zip`` member: its declared size checked first, its bytes counted
as they are inflated, so a header that lies changes nothing) and ``max_objects`` JSON
objects and records.  A source over a limit is refused (``import_too_large``, exit 2,
one error line with a hint naming the option) before anything is written.

The fast tests set small limits with the same options a user has; the zip bomb of
2 GiB is a slow test."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gitmem import Vault
from gitmem.errors import GitmemError
from gitmem.exchange.import_sources import MAX_IMPORT_BYTES, MAX_IMPORT_OBJECTS, ImportLimits, parse_size

from .conftest import git, snapshot

MiB = 2**20


def chatgpt_export(nodes: int, conversations: int = 1) -> str:
    """conversations.json of ChatGPT with ``nodes`` message nodes in all (4 objects each, and 2 per
    conversation)."""
    out = []
    per = nodes // conversations
    for c in range(conversations):
        ids = [f"{c}-{n}" for n in range(per)]
        mapping = {nid: {"id": nid, "parent": ids[n - 1] if n else None, "children": ids[n + 1:n + 2],
                         "message": {"id": nid, "author": {"role": "user" if n % 2 else "assistant"},
                                     "content": {"content_type": "text", "parts": [f"message {n}"]}}}
                   for n, nid in enumerate(ids)}
        out.append({"id": f"conv-{c}", "title": f"Conversation {c}", "create_time": 1767225600,
                    "mapping": mapping, "current_node": ids[-1]})
    return json.dumps(out)


def zipped(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def lie_about_sizes(path: Path, declared: int) -> None:
    """Rewrite every uncompressed size the .zip's headers declare (local and central) to ``declared``."""
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.find(signature)
        while at >= 0:
            struct.pack_into("<I", data, at + offset, declared)
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitmem", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "v"
    with Vault.init(path) as vault:
        vault.add("Keeper", "Something already there.\n")
    return path


def assert_refused(root: Path, fmt: str, source: Path, *options: str, says: str, hint: str) -> None:
    """Refused through the API and the command line, with nothing written: one error line, exit 2."""
    before = snapshot(root)
    log = git(root, "log", "--format=%H")
    limits = dict(zip([o[2:].replace("-", "_") for o in options[::2]],
                      [parse_size(v) if o == "--max-bytes" else int(v) for o, v in zip(options[::2], options[1::2],
                                                                                       strict=True)],
                      strict=True))
    with Vault.open(root) as vault, pytest.raises(GitmemError) as caught:
        vault.import_from(fmt, source, **limits)
    assert caught.value.code == "import_too_large" and caught.value.exit_code == 2
    assert says in caught.value.message, caught.value.message
    assert hint in (caught.value.hint or "") and "Nothing was imported" in (caught.value.hint or "")
    done = run("-C", str(root), "import", fmt, str(source), *options)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr and says in done.stderr
    assert f"hint: Nothing was imported. If you trust this source, raise the limit: gitmem import ... {hint}" \
        in done.stderr
    done = run("-C", str(root), "import", fmt, str(source), *options, "--json")
    assert json.loads(done.stdout)["error"]["code"] == "import_too_large"
    assert snapshot(root) == before
    assert git(root, "log", "--format=%H") == log
    assert git(root, "status", "--porcelain") == ""


def test_a_zip_member_over_the_limit_is_refused_by_its_declared_size(root: Path, tmp_path: Path) -> None:
    bomb = zipped(tmp_path / "export.zip", {"conversations.json": b" " * (3 * MiB), "chat.html": b"<p>hi</p>"})
    assert bomb.stat().st_size < 20_000
    assert_refused(root, "chatgpt", bomb, "--max-bytes", "1M",
                   says=f"{bomb}:conversations.json is 3 MiB uncompressed; an import reads at most 1 MiB",
                   hint="--max-bytes 3M (Python: import_from(..., max_bytes=3145728))")


def test_a_zip_whose_header_lies_about_the_size_is_refused_by_counting(root: Path, tmp_path: Path) -> None:
    liar = zipped(tmp_path / "export.zip", {"conversations.json": b" " * (4 * MiB)})
    lie_about_sizes(liar, 100)
    with zipfile.ZipFile(liar) as archive:
        assert archive.getinfo("conversations.json").file_size == 100  # what a reader trusting it would see
    assert_refused(root, "chatgpt", liar, "--max-bytes", "1M",
                   says=f"{liar}:conversations.json holds more than the limit allows (its header says 100 bytes); "
                        "an import reads at most 1 MiB",
                   hint="--max-bytes 4M")   # its real size is not known: four times the limit


def test_a_zip_listing_too_many_files_is_refused_before_they_are_read(root: Path, tmp_path: Path) -> None:
    many = zipped(tmp_path / "export.zip", {"conversations.json": chatgpt_export(2).encode(),
                                            **{f"files/{n}.png": b"" for n in range(300)}})
    assert_refused(root, "chatgpt", many, "--max-objects", "200",
                   says=f"{many} (its list of files) holds more than 200 JSON objects and records",
                   hint="--max-objects 2000")


def test_a_json_file_over_the_limit_is_refused_before_it_is_read(root: Path, tmp_path: Path) -> None:
    export = tmp_path / "conversations.json"
    export.write_text(chatgpt_export(20_000, 10))
    size = export.stat().st_size
    assert size > 2 * MiB
    assert_refused(root, "chatgpt", export, "--max-bytes", "2M",
                   says=f"{export} is {size / MiB:.1f} MiB; an import reads at most 2 MiB",
                   hint=f"--max-bytes {-(-size // MiB)}M")                # what it needs, rounded up
    assert_refused(root, "chatgpt", tmp_path, "--max-bytes", str(size - 1),   # the unpacked export folder
                   says=f"{export} is", hint=f"--max-bytes {-(-size // MiB)}M")


def test_too_many_message_nodes_are_refused_as_they_are_parsed(root: Path, tmp_path: Path) -> None:
    export = tmp_path / "conversations.json"
    export.write_text(chatgpt_export(1_000, 4))                   # 4,008 objects
    assert_refused(root, "chatgpt", export, "--max-objects", "2000",
                   says=f"{export} holds more than 2,000 JSON objects and records (conversations, message nodes",
                   hint="--max-objects 20000")
    claude = tmp_path / "claude.json"
    claude.write_text(json.dumps([{"uuid": f"c{c}", "name": f"Chat {c}", "chat_messages": [
        {"sender": "human", "text": f"hello {m}"} for m in range(100)]} for c in range(10)]))
    assert_refused(root, "claude", claude, "--max-objects", "500", says="holds more than 500 JSON objects",
                   hint="--max-objects 5000")


def test_jsonl_records_and_folders_of_notes_are_bounded_too(root: Path, tmp_path: Path) -> None:
    graph = tmp_path / "memory.jsonl"
    graph.write_text("".join(json.dumps({"type": "entity", "name": f"E{n}", "entityType": "thing",
                                         "observations": [f"o{n}"]}) + "\n" for n in range(300)))
    assert_refused(root, "mcp-memory", graph, "--max-objects", "100", says="holds more than 100 JSON objects",
                   hint="--max-objects 1000")
    notes = tmp_path / "notes"
    notes.mkdir()
    for n in range(30):
        (notes / f"note {n}.md").write_text(f"# Note {n}\n\n" + "text " * 2000 + "\n")   # ~10 KB each
    assert_refused(root, "markdown", notes, "--max-bytes", "100K",
                   says="KiB of other files; an import reads at most 100 KiB", hint="--max-bytes 1")
    assert_refused(root, "markdown", notes, "--max-objects", "20", says="holds more than 20 JSON objects",
                   hint="--max-objects 200")
    project = tmp_path / "project"
    project.mkdir()
    (project / "CLAUDE.md").write_text("# Rules\n\n" + "Always test. " * 20_000 + "\n")
    assert_refused(root, "agent-rules", project, "--max-bytes", "64K", says=f"{project / 'CLAUDE.md'} is",
                   hint=f"--max-bytes {-(-(project / 'CLAUDE.md').stat().st_size // 1024)}K")


def test_a_source_within_the_limits_imports_as_before(root: Path, tmp_path: Path) -> None:
    export = tmp_path / "conversations.json"
    export.write_text(chatgpt_export(40, 4))
    size = export.stat().st_size
    archive = zipped(tmp_path / "export.zip", {"conversations.json": export.read_bytes()})
    with Vault.open(root) as vault:
        # Exactly at the limits: 4 conversations and their mappings + 40 nodes x 4 objects = 168
        # objects (and the archive's one entry).
        report = vault.import_from("chatgpt", archive, max_bytes=size, max_objects=169)
        assert report.counts()["created"] == 4
        for too_few in ({"max_bytes": size - 1}, {"max_objects": 167}):
            with pytest.raises(GitmemError) as caught:
                vault.import_from("chatgpt", export, **{"max_bytes": size, "max_objects": 168, **too_few})
            assert caught.value.code == "import_too_large"
        assert vault.import_from("chatgpt", export, max_bytes=size).commit is None   # the same four, unchanged
    done = run("-C", str(root), "import", "chatgpt", str(export), "--max-bytes", str(size), "--max-objects", "168")
    assert done.returncode == 0 and "0 created, 0 updated, 4 unchanged" in done.stdout, done.stderr
    assert git(root, "status", "--porcelain") == ""


def test_limits_and_sizes_are_checked() -> None:
    assert ImportLimits() == ImportLimits(MAX_IMPORT_BYTES, MAX_IMPORT_OBJECTS) == ImportLimits(256 * MiB, 1_000_000)
    assert [parse_size(s) for s in ("1024", "512K", "300M", "1.5G", "2GiB", "7 mb", "1t")] == \
        [1024, 512 * 1024, 300 * MiB, 3 * 2**29, 2 * 2**30, 7 * MiB, 2**40]
    for bad in ("", "-1", "0", "1.5X", "M", "ten"):
        with pytest.raises(GitmemError):
            parse_size(bad)
    for bad_limits in ({"max_bytes": 0}, {"max_objects": -5}, {"max_bytes": True}, {"max_objects": 1.5}):
        with pytest.raises(GitmemError) as caught:
            ImportLimits(**bad_limits)  # type: ignore[arg-type]
        assert caught.value.code == "invalid_input"


def test_cli_refuses_a_bad_limit_as_a_usage_error(root: Path, tmp_path: Path) -> None:
    for option, value in (("--max-bytes", "lots"), ("--max-bytes", "0"), ("--max-objects", "0")):
        done = run("-C", str(root), "import", "chatgpt", str(tmp_path), option, value)
        assert done.returncode == 2 and "Traceback" not in done.stderr and option in done.stderr, done.stderr
    help_text = run("import", "--help").stdout
    assert "--max-bytes SIZE" in help_text and "--max-objects N" in help_text
    assert "default: 256M" in help_text and "default: 1000000" in help_text


@pytest.mark.slow
def test_a_zip_bomb_of_2_gib_is_refused_at_once_with_little_memory(root: Path, tmp_path: Path) -> None:
    bomb = tmp_path / "export.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive, \
            archive.open("conversations.json", "w", force_zip64=True) as member:
        block = b" " * MiB
        for _ in range(2048):
            member.write(block)
    assert bomb.stat().st_size < 4 * MiB
    before = snapshot(root)
    # A fresh parent, so the peak RSS it reports is that of this one import.
    probe = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
             "print(done.returncode); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
             "print(done.stderr)")
    out = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "gitmem", "-C", str(root), "import",
                          "chatgpt", str(bomb)], capture_output=True, text=True, timeout=300).stdout
    code, peak_kib, stderr = out.split("\n", 2)
    assert code == "2" and "is 2 GiB uncompressed; an import reads at most 256 MiB" in stderr, stderr
    assert int(peak_kib) < 200 * 1024, f"peak RSS {int(peak_kib) // 1024} MiB"
    lie_about_sizes_zip64 = tmp_path / "liar.zip"   # the same bomb, its sizes claiming 100 bytes
    data = bytearray(bomb.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.find(signature)
        struct.pack_into("<I", data, at + offset, 100)   # zipfile reads the zip64 extra only for 0xFFFFFFFF
    lie_about_sizes_zip64.write_bytes(bytes(data))
    out = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "gitmem", "-C", str(root), "import",
                          "chatgpt", str(lie_about_sizes_zip64)], capture_output=True, text=True, timeout=300).stdout
    code, peak_kib, stderr = out.split("\n", 2)
    assert code == "2" and "holds more than the limit allows (its header says 100 bytes)" in stderr, stderr
    assert int(peak_kib) < 700 * 1024, f"peak RSS {int(peak_kib) // 1024} MiB"
    assert snapshot(root) == before
    assert git(root, "status", "--porcelain") == ""
