"""The import graph of ``hermes_nb``, read from its source: for the cycle and layer tests.

It is read with ``ast``, so it sees every import a module can run: at top level,
inside functions and methods (lazy imports), and inside ``try``/``if`` blocks. Edges:

- ``import a.b.c`` and ``from a.b import c`` where ``a.b.c`` is a module: an edge to ``a.b.c``;
  ``from a.b import name`` where ``name`` is not a submodule: an edge to the package ``a.b`` (its ``__init__``).
  Relative imports are resolved first.
- Parent packages: importing ``a.b.c`` runs the ``__init__`` of ``a`` and ``a.b`` first, so those are edges too
  (``hermes_nb.config`` importing ``hermes_nb.env.server_config`` would run ``hermes_nb/env/__init__.py``, and if that
  imported ``hermes_nb.config`` back it would find it half-initialised), except for the importer's own ancestor
  packages: Python has started them before the importer runs, so a package's ``__init__`` importing its children
  (the normal parent -> child edge) and children importing their siblings do not count as a cycle. A child that
  imports a *name* from its parent's ``__init__`` does draw an edge to the parent, and is a cycle when that
  ``__init__`` imports the child (the child can then see its parent half-initialised).
- Imports under ``if TYPE_CHECKING:`` are drawn too: an annotation that needs a module above its own is a
  dependency on it all the same (a cycle hidden there is still a cycle). ``importlib.import_module("literal")``
  is drawn like an import. Not drawn: the lazy re-export tables of ``hermes_nb/__init__.py`` and
  ``trajectory_api/__init__.py`` (``__getattr__`` over module names held in data), which only name the package's
  own descendants.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import hermes_nb

PACKAGE_DIR = Path(hermes_nb.__file__).resolve().parent


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str  # "path:line", for the failure message


def module_names(package_dir: Path) -> dict[str, Path]:
    """Every module of the package under ``package_dir``: dotted name -> file."""
    root = package_dir.parent
    modules: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported_names(node: ast.AST, module: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    """The modules one node imports by name (before parent packages are added)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = _resolve_from(node, module, is_package)
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    if isinstance(node, ast.Call):
        return _import_module_target(node)
    return []


def _resolve_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    anchor = package[: len(package) - (node.level - 1)]
    return ".".join([*anchor, node.module] if node.module else anchor)


def _import_module_target(node: ast.Call) -> list[str]:
    """``[name]`` for ``importlib.import_module("name")``; other calls import nothing we can see."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if called != "import_module" or len(node.args) != 1:
        return []
    arg = node.args[0]
    return [arg.value] if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else []


def _with_parent_packages(importer: str, target: str, modules: dict[str, Path]) -> list[str]:
    """``target`` and the packages on its path that are not the importer's own ancestors."""
    parts = target.split(".")
    packages = [".".join(parts[:i]) for i in range(1, len(parts))]
    own_ancestors = {importer.rsplit(".", i)[0] for i in range(1, importer.count(".") + 1)}
    implicit = [name for name in packages if name in modules and name not in own_ancestors]
    return [name for name in [*implicit, target] if name in modules and name != importer]


def import_graph(package_dir: Path) -> list[Edge]:
    modules = module_names(package_dir)
    root = package_dir.parent
    edges: list[Edge] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            for name in _imported_names(node, module, is_package, modules):
                where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
                edges.extend(Edge(module, t, where) for t in _with_parent_packages(module, name, modules))
    return edges


def strongly_connected(edges: list[Edge]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (each is at least one cycle)."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] != index[node]:
            return
        component: list[str] = []
        while True:
            member = stack.pop()
            on_stack.discard(member)
            component.append(member)
            if member == node:
                break
        if len(component) > 1:
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def describe_cycles(edges: list[Edge]) -> list[str]:
    """One line per cycle-forming component: its modules, then each import between them with file:line."""
    lines = []
    for component in strongly_connected(edges):
        members = set(component)
        inner = sorted({f"{e.source} -> {e.target} ({e.where})" for e in edges if {e.source, e.target} <= members})
        lines.append(" <-> ".join(component) + "\n    " + "\n    ".join(inner))
    return lines


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A throw-away package ``pkg`` under ``root`` from ``{relative path: source}``, for the tests of the graph."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"
