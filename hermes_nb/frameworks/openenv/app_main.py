"""Child process: serve an OpenEnv environment's ``app`` on loopback, as ``uvicorn`` would.

Run as ``python -m hermes_nb.frameworks.openenv.app_main FILE --port PORT`` in the OpenEnv Python. A file of an
``openenv init`` package (a folder with an ``openenv.yaml``, the file in it or in its ``server/``) serves the app
the manifest names (``app: server.app:app``), imported as a module of the package so that both halves of the
scaffold's ``try: from ..models import ... except ImportError: from models import ...`` work. A single file is
imported as a script from its folder (its sibling modules importable), and its module-level ``app`` (what
OpenEnv's ``create_app(...)`` returns) is served unmodified.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import yaml

APP_ATTRIBUTE = "app"
MANIFEST = "openenv.yaml"
DEFAULT_APP = "server.app:app"  # what ``openenv init`` writes, and what OpenEnv assumes without one


def package_root(file: str) -> Path | None:
    """The ``openenv init`` package ``file`` belongs to: the folder with the manifest, its own or its parent."""
    path = Path(file).resolve()
    return next((d for d in (path.parent, path.parent.parent) if (d / MANIFEST).is_file()), None)


def load_app(file: str) -> Any:
    root = package_root(file)
    return load_package_app(root) if root is not None else load_file_app(file)


def load_package_app(root: Path) -> Any:
    """The app the manifest of the package at ``root`` names, imported as ``PACKAGE.server.app`` when the
    folder's name is a module name (relative imports work), else as ``server.app`` from the folder."""
    manifest = yaml.safe_load((root / MANIFEST).read_text(encoding="utf-8")) or {}
    module_name, _, attribute = str(manifest.get("app") or DEFAULT_APP).partition(":")
    # The package's folder for its fallback imports (``from models import``), its parent for its relative ones.
    sys.path[:0] = [str(root.parent), str(root)]
    qualified = f"{root.name}.{module_name}" if root.name.isidentifier() else module_name
    app = getattr(importlib.import_module(qualified), attribute or APP_ATTRIBUTE, None)
    if app is None:
        raise SystemExit(f"{root / MANIFEST}: its app {module_name}:{attribute} is not defined")
    return app


def load_file_app(file: str) -> Any:
    path = Path(file).resolve()
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    app = getattr(module, APP_ATTRIBUTE, None)
    if app is None:
        raise SystemExit(
            f"{path} defines no `{APP_ATTRIBUTE}`: an OpenEnv environment file ends with "
            "`app = create_app(MyEnvironment, MyAction, MyObservation)`"
        )
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_nb.frameworks.openenv.app_main")
    parser.add_argument("file")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(load_app(args.file), host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
