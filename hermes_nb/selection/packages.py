"""Environment packages as the frameworks' scaffolds lay them out, found by their metadata files (nothing imported).

A *package folder* is a folder holding a framework's metadata: OpenEnv's ``openenv.yaml`` (``openenv init``:
``models.py``, ``client.py``, ``server/app.py``, ``server/<name>_environment.py``) or a ``pyproject.toml``
(``vf-init``: ``name/__init__.py``, ``name/taskset.py``). Its environments are named by that metadata (the
manifest's ``name``, the project's ``name``: the id ``vf-eval`` and the hub use), never by a file's name. Its
files are its top-level modules and those of its Python packages one level down (``server/``, ``name/``).

An environments-path entry is a package folder itself, a package's inner folder (its ``server/`` or ``name/``), or
a folder whose sub-folders may be package folders (beside its plain modules).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import yaml

# The metadata files that make a folder a package, the framework's own first: an ``openenv init`` package also
# has a pyproject.toml, whose name (``openenv-my_env``) is not the environment's.
OPENENV_MANIFEST = "openenv.yaml"
PYPROJECT = "pyproject.toml"
METADATA_FILES = (OPENENV_MANIFEST, PYPROJECT)


@dataclass(frozen=True)
class PackageFolder:
    root: str
    metadata: str  # the metadata file the name is read from


def package_of(directory: str) -> PackageFolder | None:
    """The package folder ``directory`` is, or is the inner Python package of; ``None`` for a plain folder."""
    candidates = [directory]
    if os.path.isfile(os.path.join(directory, "__init__.py")):  # only an inner package belongs to its parent
        candidates.append(os.path.dirname(os.path.abspath(directory)))
    for candidate in candidates:
        for name in METADATA_FILES:
            path = os.path.join(candidate, name)
            if os.path.isfile(path):
                return PackageFolder(root=candidate, metadata=path)
    return None


def sub_packages(directory: str, entries: list[os.DirEntry[str]]) -> list[PackageFolder]:
    """The package folders among ``directory``'s sub-folders."""
    found: list[PackageFolder] = []
    for entry in entries:
        if entry.name.startswith((".", "_")) or not entry.is_dir():
            continue
        for name in METADATA_FILES:
            path = os.path.join(entry.path, name)
            if os.path.isfile(path):
                found.append(PackageFolder(root=entry.path, metadata=path))
                break
    return found


def package_dirs(package: PackageFolder) -> list[str]:
    """The folders whose modules are the package's: its root and its Python packages one level down."""
    try:
        entries = sorted(os.scandir(package.root), key=lambda e: e.name)
    except OSError:
        return []
    inner = [e.path for e in entries if e.is_dir() and os.path.isfile(os.path.join(e.path, "__init__.py"))]
    return [package.root, *inner]


def package_name(metadata: str) -> str | None:
    """The environment name the metadata file gives; ``None`` when it gives none (unreadable, no name)."""
    try:
        text = Path(metadata).read_text(encoding="utf-8")
        data = yaml.safe_load(text) if metadata.endswith(".yaml") else tomllib.loads(text).get("project")
    except (OSError, ValueError, yaml.YAMLError):
        return None
    name = data.get("name") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else None
