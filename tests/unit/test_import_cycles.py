"""No import cycle between modules of ``hermes_nb``: lazy and ``TYPE_CHECKING`` imports included (how the graph
is drawn: ``import_graph.py``)."""

from __future__ import annotations

from pathlib import Path

from import_graph import PACKAGE_DIR, describe_cycles, import_graph, strongly_connected, write_package


def test_hermes_nb_has_no_import_cycle() -> None:
    cycles = describe_cycles(import_graph(PACKAGE_DIR))
    assert not cycles, "import cycles between hermes_nb modules:\n" + "\n".join(cycles)


def test_a_lazy_import_inside_a_function_closes_a_cycle(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "def later():\n    from pkg.a import thing\n",
        },
    )
    assert strongly_connected(import_graph(package)) == [["pkg.a", "pkg.b"]]


def test_a_type_checking_import_closes_a_cycle(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import thing\n",
        },
    )
    assert strongly_connected(import_graph(package)) == [["pkg.a", "pkg.b"]]


def test_a_package_importing_its_children_is_no_cycle(tmp_path: Path) -> None:
    package = write_package(
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
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from pkg.sub.child import thing\nhelper = 1\n",
            "pkg/sub/child.py": "from . import helper\nthing = helper\n",
        },
    )
    assert strongly_connected(import_graph(package)) == [["pkg.sub", "pkg.sub.child"]]


def test_importing_another_packages_module_runs_that_packages_init(tmp_path: Path) -> None:
    package = write_package(
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
