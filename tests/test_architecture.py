"""The package's structure, read from its imports: layers that import downward only,
no import circle, no private name used across modules, Whoosh behind one module; and
the Vault's surface: narrow, documented, each delegation with its delegate's signature.

Every import counts, including those under ``if TYPE_CHECKING:`` and those inside
functions: a circle that only type checkers or a lazy import walk is still a circle
a reader has to follow.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent.parent / "gitmem"

#: Lowest first.  A module may import its own layer and the layers below it only.
LAYERS = ["version", "errors", "safefs", "localhttp", "memory", "config", "store", "search", "write", "ops", "sync",
          "services", "exchange", "upkeep", "vault", "outside", "agents", "cli", ""]
#: The package (the fence) whose modules alone may import whoosh and reach into its internals.
WHOOSH_MODULE = "gitmem.search.whoosh"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported gitmem module, the name taken from it or None, line) for every import."""
    path = MODULES[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            elif (node.module or "").split(".")[0] == "gitmem":
                base = node.module or ""
            else:
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    out.append((f"{base}.{alias.name}", None, node.lineno))
                else:
                    out.append((base, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "gitmem"]
    return out


def _graph() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in _imports(m) if t != m} for m in MODULES}


def _layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 and parts[1] != "__main__" else ""
    assert top in LAYERS, f"{module}: add its package to LAYERS in {__file__}"
    return LAYERS.index(top)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_reader_finds_every_module_and_its_imports() -> None:
    # Guards the checks below against passing because they read nothing.
    assert {"gitmem.vault", "gitmem.write.pipeline", "gitmem.search.whoosh.index", "gitmem.cli.main"} <= set(MODULES)
    assert "gitmem.write.pipeline" in _graph()["gitmem.vault"] or \
        "gitmem.services" in _graph()["gitmem.vault"]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    assert _circles(_graph()) == []


def test_layers_import_downward_only() -> None:
    upward = [f"{m} -> {t}" for m, targets in _graph().items() for t in sorted(targets)
              if _layer(t) > _layer(m)]
    assert upward == [], "imports that run up the layers: " + ", ".join(upward)


def test_no_private_name_is_imported_from_another_module() -> None:
    private = [f"{m}:{line} takes {name} from {t}" for m in MODULES for t, name, line in _imports(m)
               if name and name.startswith("_") and not name.startswith("__")]
    assert private == []


def test_no_private_attribute_is_reached_from_outside_its_class() -> None:
    """``obj._name`` only on ``self``, ``cls``, ``super()`` or a class of the same module;
    the Whoosh fence alone reaches into Whoosh's internals."""
    found = []
    for module, path in MODULES.items():
        if module == WHOOSH_MODULE or module.startswith(WHOOSH_MODULE + "."):
            continue
        source = path.read_text()
        tree = ast.parse(source)
        own_classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in {"self", "cls", *own_classes}:
                continue
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                continue
            if isinstance(owner, ast.Name) and owner.id == "os" and node.attr == "_exit":
                continue   # a public function of Python's os module, despite its name
            found.append(f"{module}:{node.lineno}: {ast.get_source_segment(source, node)}")
    assert found == []


def test_only_the_whoosh_fence_imports_whoosh() -> None:
    """Only modules of the fence package import whoosh (ranking, query parsing and
    snippets included among those that must not)."""
    users = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n.split(".")[0] == "whoosh" for n in names):
                users.add(module)
    fence = {m for m in MODULES if m.startswith(WHOOSH_MODULE + ".")}
    assert f"{WHOOSH_MODULE}.index" in users and f"{WHOOSH_MODULE}.codec" in users   # the reader reads them
    assert users <= fence, f"modules outside {WHOOSH_MODULE} import whoosh: {sorted(users - fence)}"
    assert not {"gitmem.search.rank", "gitmem.search.query", "gitmem.search.snippet"} & users


def test_the_vault_is_a_facade() -> None:
    """No mixins: the Vault's public methods hand the call to a service."""
    tree = ast.parse(MODULES["gitmem.vault"].read_text())
    vault = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Vault")
    assert vault.bases == []
    long_methods = [f.name for f in vault.body if isinstance(f, ast.FunctionDef)
                    and not f.name.startswith("_") and f.name not in {"open", "init", "close"}
                    and len([s for s in f.body if not isinstance(s, ast.Expr)]) > 4]
    assert long_methods == []


#: The page that documents the Python API: every public member of the Vault is in it.
API_PAGE = PACKAGE.parent / "docs" / "python-api.md"
#: A facade wider than this is a sign that a group of members wants an object of its own
#: (as the file view has in ``vault.files``).
MAX_VAULT_MEMBERS = 66   # 61: start_sync and purge_status serve `gitmem status` and `purge --status`; 64: accept and why serve `gitmem accept` and `gitmem why`; 65: take_notices serves agent tools' notices; 66: evaluate serves `gitmem eval`


def _class_node(module: str, name: str) -> ast.ClassDef:
    tree = ast.parse(MODULES[module].read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _public_members(cls: type, module: str) -> set[str]:
    """The public names of ``cls``: its methods, properties and class attributes, and the
    attributes its ``__init__`` sets on ``self``."""
    names = {n for n in dir(cls) if not n.startswith("_")}
    init = next((f for f in _class_node(module, cls.__name__).body
                 if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    for node in ast.walk(init) if init is not None else ():
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                  and t.value.id == "self" and not t.attr.startswith("_")}
    return names


def _undocumented(names: set[str], page: str, prefix: str) -> list[str]:
    """Names that no code span of ``page`` starts with (``name``, ``name(...)``, ``<prefix>name``)."""
    return sorted(n for n in names if not re.search(rf"`(?:{prefix})?{re.escape(n)}\b", page))


def test_the_vault_surface_is_narrow_and_documented() -> None:
    from gitmem.ops.files import Files
    from gitmem.vault import Vault

    members = _public_members(Vault, "gitmem.vault")
    assert {"add", "search", "files", "services", "import_report"} <= members   # the reader reads
    assert len(members) <= MAX_VAULT_MEMBERS, sorted(members)
    page = API_PAGE.read_text(encoding="utf-8")
    assert _undocumented(members, page, r"Vault\.|vault\.") == []
    # The file view's methods and properties are documented there too.
    view = {n for n in dir(Files) if not n.startswith("_")}
    assert {"read_text", "write_text", "files_tier"} <= view
    assert _undocumented(view, page, r"files\.|vault\.files\.") == []
    assert _undocumented({"not_a_member"}, page, "") == ["not_a_member"]


def _annotation(value: object) -> object:
    # The Vault has a method called ``list``, so its annotations spell the builtin
    # ``builtins.list``: the same type as a service's ``list``.
    return value.replace("builtins.", "") if isinstance(value, str) else value


def _parameters(function: Any, skip: int) -> tuple[list[tuple[Any, ...]], object]:
    signature = inspect.signature(function)
    params = list(signature.parameters.values())[skip:]
    return ([(p.name, p.kind, p.default, _annotation(p.annotation)) for p in params],
            _annotation(signature.return_annotation))


def _delegations(vault: Any) -> dict[str, tuple[Any, int, ast.Call]]:
    """{Vault method: (its delegate, how many of the delegate's first parameters the Vault
    fills itself, the call)} for every public method whose body (besides its docstring and
    imports) is ``return self.services.<part>...<method>(...)`` (the delegate is found on the
    open ``vault``) or ``return <function>(self.services, ...)`` of a function it imports."""
    import importlib

    found: dict[str, tuple[Any, int, ast.Call]] = {}
    for method in _class_node("gitmem.vault", "Vault").body:
        if not isinstance(method, ast.FunctionDef) or method.name.startswith("_"):
            continue
        body = [s for s in method.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        imported = {a.asname or a.name: s.module for s in body if isinstance(s, ast.ImportFrom) for a in s.names}
        body = [s for s in body if not isinstance(s, ast.ImportFrom)]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
            continue
        call, func = body[0].value, body[0].value.func
        chain = ast.unparse(func).split(".")
        if chain[:2] == ["self", "services"] and len(chain) > 3:
            delegate = vault
            for attr in chain[1:]:
                delegate = getattr(delegate, attr)
            found[method.name] = (delegate, 0, call)
        elif isinstance(func, ast.Name) and func.id in imported and call.args \
                and ast.unparse(call.args[0]) == "self.services":
            module = importlib.import_module("gitmem." + (imported[func.id] or "").lstrip("."))
            found[method.name] = (getattr(module, func.id), 1, call)
    return found


def test_each_delegation_has_its_delegates_signature(tmp_path: Path) -> None:
    """A Vault method that hands the call on takes exactly its delegate's parameters (names,
    kinds, defaults, annotations) and returns its type, and passes every parameter on as
    itself: editing one side alone fails here."""
    from gitmem.vault import Vault

    with Vault.init(tmp_path / "v", author="test") as vault:
        delegations = _delegations(vault)
    assert {"add", "search", "sync", "history", "import_from", "doctor"} <= set(delegations)
    differ, unpassed = [], []
    for name, (delegate, filled, call) in sorted(delegations.items()):
        mine, theirs = _parameters(getattr(Vault, name), 1), _parameters(delegate, filled)
        if mine != theirs:
            differ.append(f"Vault.{name}{inspect.signature(getattr(Vault, name))} != "
                          f"{delegate.__qualname__}{inspect.signature(delegate)}")
        params = mine[0]
        passed = [a.id if isinstance(a, ast.Name) else ast.unparse(a) for a in call.args][filled:]
        positional = [p[0] for p in params if p[1] is inspect.Parameter.POSITIONAL_OR_KEYWORD][:len(passed)]
        keywords = {k.arg or (k.value.id if isinstance(k.value, ast.Name) else ""): k.value for k in call.keywords}
        by_keyword = {k for k, v in keywords.items() if isinstance(v, ast.Name) and v.id == k}
        if passed != positional or set(passed) | by_keyword != {p[0] for p in params} \
                or len(keywords) != len(by_keyword):
            unpassed.append(f"Vault.{name}: {ast.unparse(call)}")
    assert differ == []
    assert unpassed == []


#: A module longer than this holds more than one idea: split it where its ideas part.
MAX_MODULE_LINES = 900


def test_no_module_is_over_the_line_limit() -> None:
    assert len(MODULES) > 50   # (the check below reads the package, not an empty folder)
    long = {module: n for module, path in sorted(MODULES.items())
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"
