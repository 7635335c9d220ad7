"""No import cycle between modules of ``hermes_nb``, lazy imports included.

The import graph is read from the source with ``ast``, so it sees every import a module can run: at top level,
inside functions and methods (lazy imports), and inside ``try``/``if`` blocks. Edges:

- ``import a.b.c`` and ``from a.b import c`` where ``a.b.c`` is a module: an edge to ``a.b.c``;
  ``from a.b import name`` where ``name`` is not a submodule: an edge to the package ``a.b`` (its ``__init__``).
  Relative imports are resolved first.
- Parent packages: importing ``a.b.c`` runs the ``__init__`` of ``a`` and ``a.b`` first, so those are edges too
  (``hermes_nb.config`` importing ``hermes_nb.env.server_config`` runs ``hermes_nb/env/__init__.py``, and if that
  imported ``hermes_nb.config`` back it would find it half-initialised), except for the importer's own ancestor
  packages: Python has started them before the importer runs, so a package's ``__init__`` importing its children
  (the normal parent -> child edge) and children importing their siblings do not count as a cycle. A child that
  imports a *name* from its parent's ``__init__`` does draw an edge to the parent, and is a cycle when that
  ``__init__`` imports the child (the child can then see its parent half-initialised).
- Not drawn: imports under ``if TYPE_CHECKING:`` (they never run, which is how annotation-only imports avoid a
  cycle), and the lazy re-export tables of ``hermes_nb/__init__.py`` and ``trajectory_api/__init__.py``
  (``__getattr__`` over module names held in data), which only name the package's own descendants.
  ``importlib.import_module("literal")`` is drawn like an import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
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


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """All nodes under ``node`` except the bodies of ``if TYPE_CHECKING:`` (their ``else`` still runs)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:
                yield stmt
                yield from _runtime_nodes(stmt)
            continue
        yield child
        yield from _runtime_nodes(child)


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
        for node in _runtime_nodes(tree):
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


def test_hermes_nb_has_no_import_cycle() -> None:
    cycles = describe_cycles(import_graph(PACKAGE_DIR))
    assert not cycles, "import cycles between hermes_nb modules:\n" + "\n".join(cycles)


def _write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_a_lazy_import_inside_a_function_closes_a_cycle(tmp_path: Path) -> None:
    package = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "def later():\n    from pkg.a import thing\n",
        },
    )
    assert strongly_connected(import_graph(package)) == [["pkg.a", "pkg.b"]]


def test_a_type_checking_import_draws_no_edge(tmp_path: Path) -> None:
    package = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import thing\n",
        },
    )
    assert strongly_connected(import_graph(package)) == []


def test_a_package_importing_its_children_is_no_cycle(tmp_path: Path) -> None:
    package = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.sub.child import thing\n",
            "pkg/sub/__init__.py": "from pkg.sub.child import thing\n",
            "pkg/sub/child.py": "from pkg.sub import sibling\n",
            "pkg/sub/sibling.py": "",
        },
    )
    assert strongly_connected(import_graph(package)) == []


def test_a_child_importing_a_name_from_its_parent_that_imports_it_is_a_cycle(tmp_path: Path) -> None:
    package = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from pkg.sub.child import thing\nhelper = 1\n",
            "pkg/sub/child.py": "from . import helper\nthing = helper\n",
        },
    )
    assert strongly_connected(import_graph(package)) == [["pkg.sub", "pkg.sub.child"]]


def test_importing_another_packages_module_runs_that_packages_init(tmp_path: Path) -> None:
    package = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/one/__init__.py": "from pkg.one.a import x\n",
            "pkg/one/a.py": "from pkg.two.b import y\nx = y\n",
            "pkg/two/__init__.py": "from pkg.one import x\n",
            "pkg/two/b.py": "y = 1\n",
        },
    )
    assert strongly_connected(import_graph(package)) == [["pkg.one", "pkg.one.a", "pkg.two"]]
