"""``hermes_nb/errors.py``'s docstring draws every error class of the package: the tree of ``HermesNBError``
subclasses, wherever each is defined, read here from the source (``ast``) and compared with the drawing."""

from __future__ import annotations

import ast
from pathlib import Path

import hermes_nb

PACKAGE_DIR = Path(hermes_nb.__file__).resolve().parent
ROOT = "HermesNBError"


def error_classes(package_dir: Path) -> dict[str, tuple[str, str]]:
    """``{class name: (base name, file relative to the package)}`` for every class with a base, by name."""
    classes: dict[str, tuple[str, str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.bases and isinstance(node.bases[0], ast.Name | ast.Attribute):
                base = node.bases[0]
                name = base.id if isinstance(base, ast.Name) else base.attr
                classes[node.name] = (name, str(path.relative_to(package_dir)))
    return classes


def drawn_tree(classes: dict[str, tuple[str, str]]) -> list[str]:
    """One line per error class, indented under its base; a class outside errors.py names its file."""
    children: dict[str, list[str]] = {}
    for name, (base, _) in classes.items():
        children.setdefault(base, []).append(name)

    def lines(name: str, depth: int) -> list[str]:
        where = classes.get(name, ("", "errors.py"))[1]
        label = name if where == "errors.py" else f"{name} ({where})"
        out = ["  " * depth + label]
        for child in sorted(children.get(name, [])):
            out += lines(child, depth + 1)
        return out

    return lines(ROOT, 0)


def test_the_error_tree_in_errors_docstring_is_the_tree_in_the_source() -> None:
    doc = ast.get_docstring(ast.parse((PACKAGE_DIR / "errors.py").read_text(encoding="utf-8"))) or ""
    drawn = [line.strip("\n") for line in doc.split("::", 1)[-1].strip("\n").splitlines() if line.strip()]
    expected = drawn_tree(error_classes(PACKAGE_DIR))
    assert [line[4:] for line in drawn] == expected, "errors.py's docstring should draw:\n" + "\n".join(expected)
