"""``gitmem import`` against hostile and huge sources: what the import limits cost.

Usage (prints one JSON document on stdout, progress on stderr)::

    python bench/import_bounds.py [--workdir DIR] [--nodes 1000000] [--bomb-gib 2] [--raised] [--out FILE]

Builds, in a temporary folder (or ``--workdir``):

* a zip bomb: ``conversations.json`` of ``--bomb-gib`` GiB of spaces, deflated (about
  2 MiB per GiB), and the same archive with its headers claiming 100 bytes;
* a ChatGPT export (``conversations.json``) of ``--nodes`` message nodes in 1,000
  conversations (each node four JSON objects, as ChatGPT's are);
* a normal large import: the MCP memory server's ``memory.jsonl`` with 10,000
  entities and 9,999 relations;

then runs ``python -m gitmem import ...`` on each, as a child of a fresh probe process
(so ``getrusage(RUSAGE_CHILDREN)`` is that one import's), and reports its exit code,
error and hint lines, peak RSS, wall and CPU time, the load average around it, and
whether the vault's HEAD and ``git status`` are as before (a refusal writes nothing).

The 1M-node export is run twice: with the default limits (refused by its size, before
it is read) and with ``--max-bytes 1G`` (read, then refused as it is parsed, at the
default of 1,000,000 JSON objects).  ``--raised`` adds runs with both limits raised
far above the sources (``--dry-run``: nothing is committed), to show what an unbounded
read costs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import log, machine_info  # noqa: E402
from _common import report as emit_report  # noqa: E402

MiB = 2**20
# Runs the command in argv[1:] and prints one JSON line: its exit code, stdout, stderr, and
# the rusage of its children (only that command: this probe starts nothing else).
PROBE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"exit_code": done.returncode, "stdout": done.stdout[:2000], "stderr": done.stderr[-2000:],
                  "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_kib": usage.ru_maxrss}))
"""


def env() -> dict[str, str]:
    """The environment of the children: this checkout's gitmem first."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}


def vault_state(vault: Path) -> tuple[str, str]:
    """HEAD and ``git status --porcelain`` of ``vault``, as the git CLI shows them."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(vault), *args], capture_output=True, text=True, check=True).stdout
    return git("rev-parse", "HEAD"), git("status", "--porcelain")


def run_import(vault: Path, *args: str) -> dict[str, Any]:
    """``gitmem -C VAULT import ARGS`` in a fresh probe; the measures of that one run."""
    state = vault_state(vault)
    before = os.getloadavg()
    out = subprocess.run([sys.executable, "-c", PROBE, sys.executable, "-m", "gitmem", "-C", str(vault), "import",
                          *args], capture_output=True, text=True, env=env(), check=True).stdout
    result = json.loads(out)
    lines = result.pop("stderr").splitlines()
    stdout = result.pop("stdout").splitlines()
    return {
        "command": "gitmem import " + " ".join(a if "/" not in a else Path(a).name for a in args),
        "exit_code": result["exit_code"],
        "error": next((line for line in lines if line.startswith("error:")), None),
        "hint": next((line for line in lines if line.startswith("hint:")), None),
        "output": stdout[0] if stdout else None,
        "peak_rss_mib": round(result["peak_rss_kib"] / 1024, 1),
        "wall_s": round(result["wall_s"], 2),
        "cpu_s": round(result["cpu_s"], 2),
        "loadavg_before": [round(x, 2) for x in before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "vault_unchanged": vault_state(vault) == state,
    }


def build_bomb(path: Path, gib: int) -> dict[str, Any]:
    start = time.perf_counter()
    block = b" " * MiB
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, \
            archive.open("conversations.json", "w", force_zip64=True) as member:
        for _ in range(gib * 1024):
            member.write(block)
    return {"file": path.name, "bytes": path.stat().st_size, "uncompressed_bytes": gib * 2**30,
            "build_s": round(time.perf_counter() - start, 1)}


def build_liar(bomb: Path, path: Path, claimed: int = 100) -> dict[str, Any]:
    """``bomb`` with the uncompressed size in its local and central headers set to ``claimed``."""
    import struct
    data = bytearray(bomb.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.find(signature)
        struct.pack_into("<I", data, at + offset, claimed)
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as archive:
        declared = archive.getinfo("conversations.json").file_size
    return {"file": path.name, "bytes": path.stat().st_size, "declared_bytes": declared}


def build_chatgpt(path: Path, nodes: int, conversations: int = 1000) -> dict[str, Any]:
    start = time.perf_counter()
    per = max(1, nodes // conversations)
    objects = 0
    with path.open("w") as handle:
        handle.write("[")
        for c in range(conversations):
            ids = [f"{c:06d}-{n:08d}" for n in range(per)]
            mapping = {nid: {"id": nid, "parent": ids[n - 1] if n else None, "children": ids[n + 1:n + 2],
                             "message": {"id": nid, "author": {"role": "user" if n % 2 else "assistant"},
                                         "create_time": 1767225600 + n,
                                         "content": {"content_type": "text",
                                                     "parts": [f"Message {n} of conversation {c}."]}}}
                       for n, nid in enumerate(ids)}
            objects += 2 + 4 * per
            handle.write(("," if c else "") + json.dumps({
                "id": f"conv-{c}", "title": f"Conversation {c}", "create_time": 1767225600,
                "update_time": 1767225600, "mapping": mapping, "current_node": ids[-1]}))
        handle.write("]")
    return {"file": path.name, "bytes": path.stat().st_size, "message_nodes": per * conversations,
            "conversations": conversations, "json_objects": objects, "build_s": round(time.perf_counter() - start, 1)}


def build_jsonl(path: Path, entities: int = 10_000) -> dict[str, Any]:
    with path.open("w") as handle:
        for i in range(entities):
            handle.write(json.dumps({"type": "entity", "name": f"Entity {i}", "entityType": "thing",
                                     "observations": [f"Observation number {i}"]}) + "\n")
        for i in range(1, entities):
            handle.write(json.dumps({"type": "relation", "from": f"Entity {i}", "to": f"Entity {i - 1}",
                                     "relationType": "part_of"}) + "\n")
    return {"file": path.name, "bytes": path.stat().st_size, "entities": entities, "relations": entities - 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="Folder for the inputs and the vault (default: a temporary one, removed).")
    parser.add_argument("--nodes", type=int, default=1_000_000, help="Message nodes of the ChatGPT export.")
    parser.add_argument("--bomb-gib", type=int, default=2, help="Uncompressed GiB of the zip bomb.")
    parser.add_argument("--raised", action="store_true", help="Also run with the limits raised (dry runs).")
    parser.add_argument("--out", help="Also write the JSON result to this file.")
    args = parser.parse_args()
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gitmem-import-bounds-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        vault = work / "vault"
        if vault.exists():
            shutil.rmtree(vault)
        subprocess.run([sys.executable, "-m", "gitmem", "init", str(vault)], env=env(), check=True,
                       capture_output=True)
        log(f"building a {args.bomb_gib} GiB zip bomb")
        bomb = work / "bomb.zip"
        inputs = {"zip_bomb": build_bomb(bomb, args.bomb_gib)}
        inputs["lying_zip_bomb"] = build_liar(bomb, work / "liar.zip")
        log(f"building a ChatGPT export of {args.nodes:,} message nodes")
        export = work / "conversations.json"
        inputs["chatgpt_export"] = build_chatgpt(export, args.nodes)
        inputs["jsonl_10k"] = build_jsonl(work / "memory.jsonl")
        runs: dict[str, Any] = {}
        for name, argv in (
                ("zip_bomb", ["chatgpt", str(bomb)]),
                ("lying_zip_bomb", ["chatgpt", str(work / "liar.zip")]),
                ("chatgpt_1m_nodes", ["chatgpt", str(export)]),
                ("chatgpt_1m_nodes_max_bytes_1G", ["chatgpt", str(export), "--max-bytes", "1G"]),
        ):
            log(f"import: {name}")
            runs[name] = run_import(vault, *argv)
        if args.raised:
            for name, argv in (
                    ("chatgpt_1m_nodes_raised_dry_run", ["chatgpt", str(export), "--max-bytes", "4G",
                                                         "--max-objects", "100000000", "--dry-run"]),
                    ("zip_bomb_raised_dry_run", ["chatgpt", str(bomb), "--max-bytes", f"{args.bomb_gib + 1}G",
                                                 "--dry-run"]),
            ):
                log(f"import: {name}")
                runs[name] = run_import(vault, *argv)
        log("import: jsonl_10k (a normal large import)")
        runs["jsonl_10k"] = run_import(vault, "mcp-memory", str(work / "memory.jsonl"))
        result = {"benchmark": "import_bounds", "machine": machine_info(work), "inputs": inputs, "runs": runs}
        emit_report(result, args.out)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
