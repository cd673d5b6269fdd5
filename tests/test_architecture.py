"""The package's structure, read from its imports: layers that import downward only,
no import circle, no private name used across modules, Whoosh behind one module.

Every import counts, including those under ``if TYPE_CHECKING:`` and those inside
functions: a circle that only type checkers or a lazy import walk is still a circle
a reader has to follow.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gitmem"

#: Lowest first.  A module may import its own layer and the layers below it only.
LAYERS = ["version", "errors", "safefs", "memory", "config", "store", "search", "write", "ops", "sync",
          "services", "exchange", "upkeep", "vault", "outside", "agents", "cli", ""]
#: The one module that may import whoosh and reach into its internals.
WHOOSH_MODULE = "gitmem.search.index"


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
    assert {"gitmem.vault", "gitmem.write.pipeline", "gitmem.search.index", "gitmem.cli.main"} <= set(MODULES)
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
    the Whoosh module alone reaches into Whoosh's internals."""
    found = []
    for module, path in MODULES.items():
        if module == WHOOSH_MODULE:
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


def test_only_the_index_module_imports_whoosh() -> None:
    users = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n.split(".")[0] == "whoosh" for n in names):
                users.add(module)
    assert users == {WHOOSH_MODULE}


def test_the_vault_is_a_facade() -> None:
    """No mixins: the Vault's public methods hand the call to a service."""
    tree = ast.parse(MODULES["gitmem.vault"].read_text())
    vault = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Vault")
    assert vault.bases == []
    long_methods = [f.name for f in vault.body if isinstance(f, ast.FunctionDef)
                    and not f.name.startswith("_") and f.name not in {"open", "init", "close"}
                    and len([s for s in f.body if not isinstance(s, ast.Expr)]) > 4]
    assert long_methods == []
